#pragma once
// What the training engine (engine.h) and the inference engine (inference_engine.h) are made
// from, and the counters both report: shared here so that inference does not include the
// training facade (and, through it, the CPU Adam).
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "offload/aio_engine.h"
#include "runtime/tiers/plan.h"

namespace strata::runtime::zero {

struct EngineSetup {
  std::vector<std::size_t> module_numels;
  std::vector<std::string> module_names;
  // Modules the model acquires only when its router picks them (a mixture's experts): kept off
  // the prefetch trace (tiers::PlanInputs::routed_modules). Empty: none.
  std::vector<char> routed_modules;
  // Inference: the expert cache's bytes at most (ParamFetcher::set_expert_cache); the default
  // leaves it to the device memory the transient buffers have (evicted when they need it).
  std::uint64_t expert_cache_bytes = std::numeric_limits<std::uint64_t>::max();
  DType dtype = DType::f32;              // compute dtype of parameters and gradients
  std::uint64_t activation_bytes = 0;    // the model's reserve() for the micro-batch (for the plan)
  std::uint64_t kv_cache_pinned_bytes = 0;  // inference: a KV cache in pinned host memory (for the plan)
  std::string activation_flags;  // inference: the flags that shrink activation_bytes (for a fit error)
  offload::CompletionHook io_completion_hook;  // tests only: the tier I/O engine's (aio_engine.h)
  // Inference only (InferenceEngine): the streamed modules' weights quantized (tiers/plan.h);
  // the training engine refuses it.
  tiers::WeightQuant quant;
};

// Bytes moved and fetch statistics since the engine was made (this rank).
struct EngineCounters {
  std::uint64_t h2d_bytes = 0;
  std::uint64_t d2h_bytes = 0;
  std::uint64_t collective_bytes = 0;  // per-rank bus volume: (W-1)/W of an all-gather or
                                       // reduce-scatter's full size, 2(W-1)/W of an all-reduce's
  std::uint64_t nvme_read_bytes = 0;
  std::uint64_t nvme_write_bytes = 0;
  std::uint64_t fetches = 0;           // gathers of a non-resident module
  std::uint64_t prefetched = 0;        // of which issued ahead of their acquire
  std::uint64_t reused = 0;            // acquires served by a module kept gathered
  std::uint64_t trace_divergences = 0;
  std::uint64_t expert_hits = 0;       // inference: routed modules (experts) acquired on the device
  std::uint64_t expert_misses = 0;     // and those fetched for the acquire (the expert cache's rate)
  std::uint64_t expert_host = 0;       // and those computed on the host where they live (acquire_host)
  std::uint64_t unused_fetches = 0;    // fetched ahead, given up before any acquire (wrong guesses)
  std::uint64_t unused_read_bytes = 0;  // their NVMe bytes read (in nvme_read_bytes)
  std::uint64_t unused_h2d_bytes = 0;   // their bytes copied to the device (in h2d_bytes)
  std::uint64_t skipped_steps = 0;     // fp16 overflow
  std::uint64_t speculative_updates = 0;  // module updates run before the norm was known
  std::uint64_t speculative_redone = 0;   // of which redone (the norm was over the threshold)
};

}  // namespace strata::runtime::zero
