#pragma once
// Initial values into the tier store's states, whatever tier holds them: the parameters (the
// training and the inference engines) and the optimizer states (the training engine).
#include <cstddef>

#include "core/dtype.h"
#include "runtime/device/device.h"
#include "runtime/tiers/tier_store.h"

namespace strata::runtime::zero {

// A state's initial values (shard elements [first, first + n) of a padded module of `numel`
// values, n = state.numel(); the padding past numel is zero) into its tier: straight into a
// pinned state's memory, window by window with the CPU Adam's partition (the threads that update
// a page first touch it); through a 4 KiB-aligned host copy otherwise. Synchronous.
void load_state(tiers::TierState& state, const float* values, std::size_t numel, std::size_t first, DType dtype,
                std::size_t window, int threads, device::Stream& stream);

// Zeroes a state (pinned: window by window with the CPU Adam's partition). Waited for by the caller
// on `stream`.
void zero_state(tiers::TierState& state, std::size_t window, int threads, device::Stream& stream);

// Module m's parameters in the compute dtype from its full fp32 values (numel, host memory), the
// master cast an update writes: a resident module's full buffer holds every rank's slice; a
// sharded one gets this rank's shard. Synchronous.
void load_params(tiers::TierStore& store, int module, const float* values, device::Stream& copy_in);

}  // namespace strata::runtime::zero
