#pragma once
// The cuda backend's HostFlag (internal to runtime/device; device.h has the contract): a word of
// mapped pinned memory that the host writes and a stream waits on with cuStreamWaitValue32,
// reached through the runtime's driver entry point (no link against libcuda). Where the driver
// does not offer stream memory operations, the wait falls back to a host function that spins on
// the word: correct, but it holds CUDA's host-function thread meanwhile (logged once).
#include <cstdint>
#include <memory>

#include "runtime/device/device.h"

namespace strata::runtime::device {

std::unique_ptr<HostFlag> create_cuda_host_flag(int ordinal);
// Enqueues on `stream` (a cudaStream_t) a wait until `flag` (made by create_cuda_host_flag)
// reaches `value`.
void cuda_wait_host_flag(void* stream, const HostFlag& flag, std::uint32_t value);

}  // namespace strata::runtime::device
