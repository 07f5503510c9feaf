#pragma once
// Errors and checks.
//
// Two kinds of failure, kept apart on purpose:
//  - a programming mistake (a broken invariant) is STRATA_ASSERT: it prints the condition
//    with file:line and aborts, in every build type;
//  - a failure of the world (bad config, missing file, ENOSPC, EIO, out of memory, no GPU)
//    throws strata::Error, which carries what happened, where, and what to do about it.
//
// CUDA_CHECK / NCCL_CHECK are plain macros: they name CUDA symbols only where they are
// expanded, so this header includes no CUDA header and is safe everywhere.
#include <cerrno>
#include <stdexcept>
#include <string>
#include <string_view>

namespace strata {

class Error : public std::runtime_error {
 public:
  // what: what went wrong; where: the file, path, key or request it concerns;
  // hint: what the user can do about it (may be empty).
  Error(std::string what, std::string where = {}, std::string hint = {});

  const std::string& what_happened() const noexcept { return what_; }
  const std::string& where() const noexcept { return where_; }
  const std::string& hint() const noexcept { return hint_; }

 private:
  std::string what_;
  std::string where_;
  std::string hint_;
};

// "Operation not permitted (EPERM)": errno as text with its symbolic name, for messages.
std::string errno_text(int errnum);

// Builds an Error for a failed system call from errno (or an explicit error number).
Error system_error(int errnum, std::string_view call, std::string where, std::string hint = {});

namespace detail {
[[noreturn]] void assert_fail(const char* cond, const char* file, int line);
[[noreturn]] void assert_fail(const char* cond, const char* file, int line, std::string_view msg);
[[noreturn]] void throw_sys_error(int errnum, const char* call, std::string where,
                                  std::string hint = {});
[[noreturn]] void throw_gpu_error(const char* library, const char* call, const char* name,
                                  const char* text, const char* file, int line);
}  // namespace detail

}  // namespace strata

// STRATA_ASSERT(cond) or STRATA_ASSERT(cond, "message"): aborts with file:line when cond is
// false. Never compiled out.
#define STRATA_ASSERT(cond, ...)                                                         \
  do {                                                                                   \
    if (!(cond)) [[unlikely]]                                                            \
      ::strata::detail::assert_fail(#cond, __FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

// SYS_CHECK(expr, where[, hint]): expr is a syscall returning -1 and setting errno on failure.
// Evaluates to expr's value when it succeeds. errno is read before `where` and `hint` are
// built, since building them may change it.
#define SYS_CHECK(expr, ...)                                                        \
  ([&]() {                                                                          \
    auto strata_sys_rc_ = (expr);                                                   \
    if (strata_sys_rc_ == -1) [[unlikely]] {                                        \
      const int strata_errno_ = errno;                                              \
      ::strata::detail::throw_sys_error(strata_errno_, #expr, __VA_ARGS__);         \
    }                                                                               \
    return strata_sys_rc_;                                                          \
  }())

// CUDA_CHECK(cudaMalloc(...)): throws strata::Error naming the call, the CUDA error and file:line.
#define CUDA_CHECK(expr)                                                                    \
  do {                                                                                      \
    cudaError_t strata_cuda_rc_ = (expr);                                                   \
    if (strata_cuda_rc_ != cudaSuccess) [[unlikely]]                                        \
      ::strata::detail::throw_gpu_error("CUDA", #expr, cudaGetErrorName(strata_cuda_rc_),  \
                                        cudaGetErrorString(strata_cuda_rc_), __FILE__,      \
                                        __LINE__);                                          \
  } while (0)

// CUDA_CHECK_LAUNCH(): checks the last kernel launch.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define NCCL_CHECK(expr)                                                                  \
  do {                                                                                    \
    ncclResult_t strata_nccl_rc_ = (expr);                                                \
    if (strata_nccl_rc_ != ncclSuccess) [[unlikely]]                                      \
      ::strata::detail::throw_gpu_error("NCCL", #expr, "ncclResult",                      \
                                        ncclGetErrorString(strata_nccl_rc_), __FILE__,    \
                                        __LINE__);                                        \
  } while (0)
