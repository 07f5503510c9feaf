// Fault injection for the I/O engine's tests (fault_injection.h).
#include "offload/fault_injection.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"

namespace strata::offload {
namespace {

constexpr const char* kEnvironment = "STRATA_FAULT_INJECTION";

// errno by its symbolic name ("EIO"), or 0.
int errno_named(std::string_view name) {
  for (int e = 1; e < 256; ++e) {
    const char* n = ::strerrorname_np(e);
    if (n != nullptr && name == n) return e;
  }
  return 0;
}

FaultSpec parse_one(std::string_view text, const std::string& where) {
  const auto bad = [&](const std::string& why) {
    return Error(fmt::format("bad fault spec \"{}\": {}", text, why), where,
                 "give OP:N:FAULT[:PATH] (OP read|write, N from 1, FAULT an errno name such as EIO, "
                 "\"short\" or \"corrupt\"), several separated by ';'");
  };
  // OP:N:FAULT, then the rest (a path may hold ':').
  std::string_view fields[3];
  std::string_view rest = text;
  for (std::string_view& f : fields) {
    const std::size_t colon = rest.find(':');
    f = rest.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
    if (f.empty()) throw bad("missing field");
  }
  FaultSpec s;
  s.path_contains = std::string(rest);
  if (fields[0] == "read") {
    s.op = IoOp::kRead;
  } else if (fields[0] == "write") {
    s.op = IoOp::kWrite;
  } else {
    throw bad("the operation is read or write");
  }
  const auto [end, ec] = std::from_chars(fields[1].data(), fields[1].data() + fields[1].size(), s.nth);
  if (ec != std::errc() || end != fields[1].data() + fields[1].size() || s.nth == 0) {
    throw bad("N counts from 1");
  }
  if (fields[2] == "short") {
    s.kind = FaultKind::kShort;
  } else if (fields[2] == "corrupt") {
    s.kind = FaultKind::kCorrupt;
  } else if (const int e = errno_named(fields[2]); e != 0) {
    s.errnum = e;
    s.kind = e == EAGAIN || e == EINTR ? FaultKind::kRetry : FaultKind::kErrno;
  } else {
    throw bad("unknown fault \"" + std::string(fields[2]) + "\"");
  }
  return s;
}

// Flips one byte of the file at `offset` (a write that landed damaged). Best effort: a test
// whose damage did not happen fails on its own checks.
void flip_byte_in_file(const std::string& path, std::uint64_t offset) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return;
  unsigned char b = 0;
  if (::pread(fd, &b, 1, static_cast<off_t>(offset)) == 1) {
    b ^= 0xFF;
    if (::pwrite(fd, &b, 1, static_cast<off_t>(offset)) != 1) log::warn("fault injection: cannot damage {}", path);
  }
  ::close(fd);
}

// Note [Fault classes]. What the hook returns is what the engine acts on (on_piece_result in
// aio_request.h): -errno fails the request with the piece's path, offset and length; -EAGAIN and
// -EINTR are resubmitted; fewer bytes than asked continue from there. A read's short or retried
// completion also gets the bytes it did not deliver scribbled over, so an engine that kept them
// would return wrong data and the run's bits would differ.
int inject(const FaultSpec& s, const Completion& c) {
  switch (s.kind) {
    case FaultKind::kErrno: return -s.errnum;
    case FaultKind::kRetry:
      if (c.op == IoOp::kRead) std::memset(c.buffer, 0xEE, c.bytes);
      return -s.errnum;
    case FaultKind::kShort: {
      // Half, on a 4 KiB boundary: a short O_DIRECT transfer stops on a block boundary (the
      // engine takes an unaligned one for the end of the file). applies() asked for 8 KiB.
      const int keep = c.result / 2 / static_cast<int>(kDirectIoAlignment) * static_cast<int>(kDirectIoAlignment);
      if (c.op == IoOp::kRead) std::memset(c.buffer + keep, 0xEE, c.bytes - static_cast<std::size_t>(keep));
      return keep;
    }
    case FaultKind::kCorrupt:
      if (c.result <= 0) return c.result;
      if (c.op == IoOp::kRead) {
        c.buffer[0] ^= std::byte{0xFF};
      } else {
        flip_byte_in_file(c.path, c.offset);
      }
      return c.result;
  }
  return c.result;
}

// Whether the fault can be injected into this completion; a spec fires at the first piece from
// its n-th on that it applies to (a short transfer needs two 4 KiB blocks to cut between).
bool applies(const FaultSpec& s, int result) {
  switch (s.kind) {
    case FaultKind::kErrno:
    case FaultKind::kRetry: return true;
    case FaultKind::kShort: return result >= 2 * static_cast<int>(kDirectIoAlignment);
    case FaultKind::kCorrupt: return result > 0;
  }
  return false;
}

}  // namespace

std::vector<FaultSpec> parse_fault_specs(std::string_view text, const std::string& where) {
  std::vector<FaultSpec> specs;
  while (!text.empty()) {
    const std::size_t semi = text.find(';');
    const std::string_view one = text.substr(0, semi);
    if (!one.empty()) specs.push_back(parse_one(one, where));
    text = semi == std::string_view::npos ? std::string_view{} : text.substr(semi + 1);
  }
  return specs;
}

std::string describe(const FaultSpec& s) {
  std::string fault;
  switch (s.kind) {
    case FaultKind::kErrno:
    case FaultKind::kRetry: fault = ::strerrorname_np(s.errnum); break;
    case FaultKind::kShort: fault = "a short transfer"; break;
    case FaultKind::kCorrupt: fault = "a corrupted block"; break;
  }
  return fmt::format("{} piece {} of {}: {}", to_string(s.op), s.nth,
                     s.path_contains.empty() ? std::string("any file")
                                             : fmt::format("a file matching \"{}\"", s.path_contains),
                     fault);
}

CompletionHook fault_hook(std::vector<FaultSpec> specs, CompletionHook next) {
  struct Armed {
    FaultSpec spec;
    std::atomic<std::uint64_t> seen{0};
    std::atomic<bool> fired{false};
  };
  auto armed = std::make_shared<std::vector<std::unique_ptr<Armed>>>();
  for (FaultSpec& s : specs) {
    auto a = std::make_unique<Armed>();
    a->spec = std::move(s);
    armed->push_back(std::move(a));
  }
  return [armed, next = std::move(next)](const Completion& c) {
    const int result = next ? next(c) : c.result;
    if (c.attempt != 0) return result;  // continuations and retries are not counted again
    Completion seen = c;
    seen.result = result;
    for (const auto& a : *armed) {
      if (a->spec.op != c.op) continue;
      if (!a->spec.path_contains.empty() && c.path.find(a->spec.path_contains) == std::string::npos) continue;
      if (a->fired.load(std::memory_order_relaxed)) continue;
      if (a->seen.fetch_add(1, std::memory_order_relaxed) + 1 < a->spec.nth) continue;
      if (!applies(a->spec, result) || a->fired.exchange(true)) continue;
      log::warn("fault injection: {} at offset {} of {}", describe(a->spec), c.offset, c.path);
      return inject(a->spec, seen);
    }
    return result;
  };
}

CompletionHook fault_hook_from_environment() {
  const char* v = std::getenv(kEnvironment);
  if (v == nullptr || *v == '\0') return {};
#if STRATA_FAULT_INJECTION
  std::vector<FaultSpec> specs = parse_fault_specs(v, kEnvironment);
  for (const FaultSpec& s : specs) log::warn("{}: armed: {}", kEnvironment, describe(s));
  return fault_hook(std::move(specs));
#else
  log::warn("{} is set but ignored: this build was configured with -DSTRATA_FAULT_INJECTION=OFF", kEnvironment);
  return {};
#endif
}

}  // namespace strata::offload
