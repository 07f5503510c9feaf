#pragma once
// Fault injection for the I/O engine's tests: a CompletionHook (aio_engine.h) that fails the
// n-th read or write of a file the way a disk would, so that the tests can prove what a run
// does when the NVMe tier or a checkpoint's folder fails in the middle of a run.
//
//   FaultSpec "read:40:EIO:exp_avg"     the 40th read piece of a file whose path holds "exp_avg"
//   CompletionHook h = fault_hook(parse_fault_specs("write:3:ENOSPC;read:7:short"));
//   AioOptions o; o.completion_hook = h;   (or EngineSetup::io_completion_hook)
//
// Counting: the n-th *piece* (aio.block_size bytes at most) of that kind, counted from 1 over
// the engine's life on the first submission of each piece (a short transfer's continuation and
// a retry are not counted again), on files whose path contains the substring (every file when
// it is empty). With several engine threads, which piece is the n-th depends on their order;
// the fault happens exactly once either way. A short transfer needs a piece of 8 KiB or more
// (it is cut on a 4 KiB boundary, as an O_DIRECT one would be): it fires at the first such
// piece from the n-th on.
//
// The faults, and what the engine makes of them (Note [Fault classes] in fault_injection.cpp):
//   EIO, ENOSPC, any other Exxx  permanent: the request fails, naming the path, the offset,
//                                the length and the errno (wait() throws strata::Error)
//   EAGAIN, EINTR                transient: the engine resubmits; the data are identical
//   short                        transient: half the piece, rounded down to 4 KiB, is transferred
//                                (the rest of a read is scribbled over); the engine continues
//                                where it stopped
//   corrupt                      a read: one byte of what it delivered is flipped; a write: one
//                                byte is flipped in the file after it landed. Detected at the
//                                block's read only with strata.checksum (offload/swap_space.h);
//                                without it the run goes on with the damaged value.
//
// A `strata train` run takes its faults from STRATA_FAULT_INJECTION (fault_hook_from_environment):
// read once when the engine is made, in builds configured with -DSTRATA_FAULT_INJECTION=ON (the
// default). With the variable unset, the engine's hook stays empty and its completion path is
// the one of a build without the option: one test of an empty std::function per completion,
// which is there for the tests' hooks anyway. Configured OFF, the variable is ignored with a
// warning.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "offload/aio_engine.h"

namespace strata::offload {

enum class FaultKind {
  kErrno,    // a permanent error: FaultSpec::errnum
  kRetry,    // -EAGAIN or -EINTR (FaultSpec::errnum): the engine resubmits
  kShort,    // half the piece transferred
  kCorrupt,  // one byte flipped (read: in the buffer; write: in the file)
};

struct FaultSpec {
  IoOp op = IoOp::kRead;
  std::uint64_t nth = 1;     // counted from 1
  FaultKind kind = FaultKind::kErrno;
  int errnum = 0;            // kErrno, kRetry
  std::string path_contains; // empty: every file
};

// "OP:N:FAULT[:PATH]" separated by ';' (OP read|write; FAULT an errno name such as EIO,
// "short" or "corrupt"; PATH a substring of the file's path, which may itself hold ':').
// Throws strata::Error naming `where` (the variable) for anything else.
std::vector<FaultSpec> parse_fault_specs(std::string_view text, const std::string& where = "fault spec");
std::string describe(const FaultSpec& spec);  // e.g. "read piece 40 of a file matching \"exp_avg\": EIO"

// A hook that injects every spec once (they count independently), wrapping `next` (called
// first when given, as another test hook would be). Thread-safe, as hooks must be.
CompletionHook fault_hook(std::vector<FaultSpec> specs, CompletionHook next = {});

// STRATA_FAULT_INJECTION's hook (announced with a warning on stderr), or an empty one when the
// variable is unset or empty. Throws strata::Error for a malformed value.
CompletionHook fault_hook_from_environment();

}  // namespace strata::offload
