#pragma once
// What the fuzz targets (tests/fuzz) share: the input as a file for the readers that take a
// path, quiet logs, and the rule they check — a parser answers bad input with strata::Error,
// never with a crash, undefined behaviour, a leak, a hang or any other exception.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <typeinfo>

#include "core/error.h"
#include "core/log.h"

namespace strata::fuzz {

// The input as a file that a reader opens by path: a memfd (no disk, nothing left behind),
// reached through /proc/self/fd/N, which open(), stat() and mmap() treat as a regular file.
// One per target, rewritten for each input. A failing syscall here is the harness's fault, so
// it aborts.
class InputFile {
 public:
  InputFile() : fd_(::memfd_create("strata-fuzz-input", MFD_CLOEXEC)) {
    if (fd_ < 0) die("memfd_create");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }

  void write(const std::uint8_t* data, std::size_t size) {
    if (::ftruncate(fd_, 0) != 0) die("ftruncate");
    std::size_t done = 0;
    while (done < size) {
      ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) die("pwrite");
      done += static_cast<std::size_t>(n);
    }
  }

 private:
  [[noreturn]] static void die(const char* call) {
    std::perror(call);
    std::abort();
  }
  int fd_;
  std::string path_;
};

// Warnings about bad input are expected by the thousand; only the fuzzer's own output matters.
inline void quiet_logs() { strata::log::logger().set_level(spdlog::level::off); }

// Runs `parse`. A strata::Error is the right answer to bad input; any other exception escaping
// is a finding (the project's rule: bad input always gets a clear error), so it aborts, and
// libFuzzer saves the input that did it.
template <typename Parse>
void expect_only_strata_errors(Parse&& parse) {
  try {
    parse();
  } catch (const strata::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: an exception other than strata::Error escaped the parser: %s: %s\n",
                 typeid(e).name(), e.what());
    std::abort();
  }
}

// A property that must hold for every input the parser accepted; aborts with `what` if not.
inline void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz: property violated: %s\n", what);
  std::abort();
}

}  // namespace strata::fuzz
