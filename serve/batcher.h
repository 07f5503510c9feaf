#pragma once
// Continuous batching for `strata serve`: one engine thread runs the model over a KV cache of
// max_batch rows, letting requests join the running batch between decoding steps as rows free
// up. See Note [Continuous batching] in batcher.cpp for the loop.
//
// Per request (serve/request.h): its own position (its KV row's length), sampling options and
// seed, token budget and end tokens. Its sampled tokens do not depend on the requests that share
// its batch: the prompt is prefilled alone (a window of one row, models/kv_cache.h), and the
// sampler's draw is keyed by (the request's seed, step) with prompt index 0, exactly as
// `strata infer` run alone draws for its one prompt (infer/sampler.h).
//
// Ownership: the batcher borrows the model (used only from its thread once it started) and owns
// the KV cache and the thread. Threading: submit(), cancel_all(), drain(), counts: any thread.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "infer/generator.h"
#include "models/model.h"
#include "serve/metrics.h"
#include "serve/request.h"

namespace strata::serve {

struct BatcherOptions {
  int max_batch = 8;           // requests decoded together (the KV cache's rows)
  int max_queue = 64;          // requests waiting for a row beyond which submit() refuses
  int prefill_chunk = 512;     // prompt tokens per prefill pass (a longer prompt takes several)
  int context = 2048;          // positions per row: prompt + generated tokens
  std::vector<std::int32_t> stop_ids;  // end-of-sequence tokens
  models::KvCacheOptions kv_cache;     // where the cache lives (infer::Server::kv_cache_options)
};

enum class Admission { accepted, queue_full, draining, failed };

class Batcher {
 public:
  // Makes the KV cache (max_batch rows of `context` positions) and starts the engine thread.
  // `compute`: the model's compute stream (row moves run on it). `metrics` is borrowed and may
  // be null; `hooks` wrap every forward pass. Throws strata::Error for bad options or a cache
  // that does not fit.
  Batcher(models::Model& model, int vocab_size, BatcherOptions options, infer::PassHooks hooks,
          runtime::device::Stream& compute, Metrics* metrics);
  // Ends every request still queued or running (cancelled) and joins the thread.
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues a request (params as GenerationParams promises). queue_full: max_queue are waiting
  // beyond the free rows; draining: drain() was called; failed: the engine failed (failure()).
  // Unless accepted, the request was not taken.
  Admission submit(std::shared_ptr<RequestState> request);

  // From now on submit() refuses; what is queued or running goes on to its end.
  void drain();
  // Ends every queued and running request (cancelled) at the next step.
  void cancel_all();

  std::size_t queued() const;
  std::size_t running() const;  // holding a row (decoding or prefilling)
  bool idle() const { return queued() == 0 && running() == 0; }
  std::string failure() const;  // "" while the engine works
  const BatcherOptions& options() const { return options_; }

 private:
  struct Row;
  struct Prefill;

  void loop();
  void drop_cancelled();
  void prefill_chunk();
  void decode_step();
  // Samples the row's next token from `logits` (V) and pushes it; returns how the request ended
  // (running: it goes on). The caller frees the row, then ends the request.
  EndReason emit(Row& row, const float* logits);
  void remove_row(std::size_t i);
  void fail_all(const std::string& why);

  models::Model& model_;
  const int vocab_;
  const BatcherOptions options_;
  infer::PassHooks hooks_;
  runtime::device::Stream& compute_;
  Metrics* metrics_;
  models::KvCache cache_;

  // Shared with submitters.
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<RequestState>> queue_;
  std::size_t running_count_ = 0;
  bool draining_ = false;
  bool cancel_all_ = false;
  bool stop_ = false;
  std::string failed_;

  // The engine thread's own.
  std::vector<Row> rows_;             // rows_[i] decodes in cache row i
  std::unique_ptr<Prefill> prefill_;  // the request being prefilled, in row rows_.size() or above
  std::vector<float> logits_;
  std::vector<std::int32_t> tokens_;

  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace strata::serve
