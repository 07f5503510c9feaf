#pragma once
// The generation loop: prompts in, completions out, in batches through a model's KV cache.
//
// Per batch of up to `batch` prompts: one prefill of the prompts right-padded to the longest
// (models/model.h), then one decoding step per new token for every row at its own position,
// until each row has produced max_new_tokens or a stop token. Each prefill and each decoding
// step is one forward pass over the modules: with layers streamed (runtime/zero/
// inference_engine.h) every module is fetched once per pass for the whole batch, so the batch is
// what makes streaming pay. A finished row keeps decoding its last token until its batch is
// done (its output ignores those steps): the batch stays one tensor.
//
// Sampling per row with the prompt's index as the key (infer/sampler.h): a prompt's tokens do
// not depend on its batch.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "infer/prompts.h"
#include "infer/sampler.h"
#include "models/model.h"

namespace strata::infer {

struct GenerateOptions {
  int max_new_tokens = 128;            // --max-new-tokens
  int batch = 1;                       // prompts per batch (the KV cache's rows)
  SamplingOptions sampling;
  std::vector<std::int32_t> stop_ids;  // end-of-sequence tokens; not part of the output
  models::KvCacheOptions kv_cache;     // where the KV cache lives (Server::kv_cache_options)
};

struct GenerateStats {
  std::size_t prompts = 0;
  std::size_t prompt_tokens = 0;
  std::size_t generated_tokens = 0;   // kept in the outputs (stop tokens not counted)
  std::size_t passes = 0;             // prefills and decoding steps
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// Called around every forward pass (InferenceEngine::begin_pass / end_pass); may be empty.
struct PassHooks {
  std::function<void()> begin;
  std::function<void()> end;
};

class Generator {
 public:
  // `model` is borrowed. The KV cache holds options.batch rows of up to `max_positions`
  // (the longest prompt + max_new_tokens, at most the model's longest sequence).
  Generator(models::Model& model, int vocab_size, const GenerateOptions& options, int max_positions,
            PassHooks hooks = {});

  // Generates for every prompt (ids filled, each at most max_positions - max_new_tokens long, in
  // the model's vocabulary), in batches in prompt order; done(completion) for each, in prompt
  // order; progress(tokens so far) after every pass. Throws strata::Error for a prompt too long.
  GenerateStats run(const std::vector<Prompt>& prompts, const std::function<void(Completion)>& done,
                    const std::function<void(const GenerateStats&)>& progress = {});

 private:
  models::Model& model_;
  int vocab_;
  GenerateOptions options_;
  int max_positions_;
  PassHooks hooks_;
  Sampler sampler_;
  models::KvCache cache_;
};

}  // namespace strata::infer
