#include "core/error.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace strata {
namespace {

std::string compose(const std::string& what, const std::string& where, const std::string& hint) {
  std::string out = what;
  if (!where.empty()) out += fmt::format(" [{}]", where);
  if (!hint.empty()) out += fmt::format(". What to do: {}", hint);
  return out;
}

}  // namespace

Error::Error(std::string what, std::string where, std::string hint)
    : std::runtime_error(compose(what, where, hint)),
      what_(std::move(what)),
      where_(std::move(where)),
      hint_(std::move(hint)) {}

std::string errno_text(int errnum) {
  const char* name = ::strerrorname_np(errnum);
  std::string text = std::strerror(errnum);
  if (name != nullptr) text += std::string(" (") + name + ")";
  return text;
}

Error system_error(int errnum, std::string_view call, std::string where, std::string hint) {
  return Error(fmt::format("{} failed: {} (errno {})", call, std::strerror(errnum), errnum),
               std::move(where), std::move(hint));
}

namespace detail {

void assert_fail(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "strata: assertion failed: %s at %s:%d\n", cond, file, line);
  std::fflush(stderr);
  std::abort();
}

void assert_fail(const char* cond, const char* file, int line, std::string_view msg) {
  std::fprintf(stderr, "strata: assertion failed: %s (%.*s) at %s:%d\n", cond,
               static_cast<int>(msg.size()), msg.data(), file, line);
  std::fflush(stderr);
  std::abort();
}

void throw_sys_error(int errnum, const char* call, std::string where, std::string hint) {
  throw system_error(errnum, call, std::move(where), std::move(hint));
}

void throw_gpu_error(const char* library, const char* call, const char* name, const char* text,
                     const char* file, int line) {
  throw Error(fmt::format("{} call failed: {}: {} ({})", library, call, text, name),
              fmt::format("{}:{}", file, line),
              "check that the GPU is healthy and not out of memory (nvidia-smi); rerun with "
              "STRATA_LOG_LEVEL=debug for more detail");
}

}  // namespace detail
}  // namespace strata
