#include "serve/batcher.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <numeric>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"

namespace strata::serve {

// Note [Continuous batching]
// The engine thread owns the model and a KV cache of max_batch rows. Rows [0, n) hold the n
// requests being decoded, in rows_ order; a request being prefilled sits in a row of its own at
// n or above (prefill_). Each turn of the loop:
//   1. ends the requests whose client cancelled (or all of them, when shutting down), freeing
//      their rows;
//   2. when nothing is being prefilled and a row is free, takes the oldest queued request into
//      row n as the one being prefilled;
//   3. prefills one chunk (prefill_chunk tokens at most) of that request: a forward pass over the
//      cache window [row, row + 1), so the running requests wait for one chunk, never a whole
//      long prompt. After its last chunk the first token is sampled from the last position's
//      logits, and the row joins the decoded ones (moved down to row n if rows freed meanwhile);
//   4. runs one decoding step of every decoded row: the window [0, n), one token each at its own
//      position (the cache's ragged rows), samples each row's next token with its own sampler
//      and key, and ends the rows that sampled an end token or reached max_tokens; the last row
//      moves into each freed one (KvCache::move_row), so that the decoded rows stay [0, n).
// A step's pass streams every module once for the whole batch (runtime/zero/inference_engine.h):
// the rows share the weights' bytes, which is what makes batching pay when layers are streamed.
// A request's tokens depend only on its prompt, its options and its seed: its prefill runs alone
// (as `strata infer` with one prompt), and each decoding step computes every row independently
// (tested: tests/serve/test_batcher.cpp).
struct Batcher::Row {
  std::shared_ptr<RequestState> state;
  infer::Sampler sampler;
  std::uint64_t step = 0;      // tokens generated so far
  std::int32_t last = 0;       // the last token generated: the next step's input
  RequestState::Clock::time_point last_time;
};

struct Batcher::Prefill {
  std::shared_ptr<RequestState> state;
  int row = 0;                 // the cache row it fills
  std::size_t done = 0;        // prompt tokens prefilled
};

namespace {

// log p(id) for every id the request asks about, from one row's logits: the log-sum-exp in double.
void fill_logprobs(std::span<const float> logits, int top, GeneratedToken& token) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const double lse = max + std::log(sum);
  token.logprob = static_cast<float>(logits[static_cast<std::size_t>(token.id)] - lse);
  if (top <= 0) return;
  const std::size_t k = std::min(static_cast<std::size_t>(top), logits.size());
  std::vector<std::int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), [&](std::int32_t a, std::int32_t b) {
    const float la = logits[static_cast<std::size_t>(a)], lb = logits[static_cast<std::size_t>(b)];
    return la != lb ? la > lb : a < b;
  });
  token.top.reserve(k);
  for (std::size_t i = 0; i < k; ++i) {
    token.top.push_back({ids[i], static_cast<float>(logits[static_cast<std::size_t>(ids[i])] - lse)});
  }
}

double seconds_between(RequestState::Clock::time_point a, RequestState::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Batcher::Batcher(models::Model& model, int vocab_size, BatcherOptions options, infer::PassHooks hooks,
                 runtime::device::Stream& compute, Metrics* metrics)
    : model_(model),
      vocab_(vocab_size),
      options_(std::move(options)),
      hooks_(std::move(hooks)),
      compute_(compute),
      metrics_(metrics),
      cache_(model.make_kv_cache(options_.max_batch, options_.context, options_.kv_cache)) {
  if (options_.max_batch < 1) throw Error("--max-batch must be at least 1", "--max-batch");
  if (options_.max_queue < 0) throw Error("--max-queue must not be negative", "--max-queue");
  if (options_.prefill_chunk < 1) throw Error("--prefill-chunk must be at least 1", "--prefill-chunk");
  logits_.resize(static_cast<std::size_t>(options_.max_batch) * static_cast<std::size_t>(vocab_));
  tokens_.resize(static_cast<std::size_t>(options_.max_batch));
  thread_ = std::thread([this] { loop(); });
}

Batcher::~Batcher() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    cancel_all_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

Admission Batcher::submit(std::shared_ptr<RequestState> request) {
  {
    std::lock_guard lock(mutex_);
    if (!failed_.empty()) return Admission::failed;
    if (draining_ || stop_) return Admission::draining;
    const std::size_t free_rows = static_cast<std::size_t>(options_.max_batch) - running_count_;
    if (queue_.size() >= static_cast<std::size_t>(options_.max_queue) + free_rows) {
      return Admission::queue_full;
    }
    queue_.push_back(std::move(request));
  }
  wake_.notify_all();
  return Admission::accepted;
}

void Batcher::drain() {
  std::lock_guard lock(mutex_);
  draining_ = true;
}

void Batcher::cancel_all() {
  {
    std::lock_guard lock(mutex_);
    cancel_all_ = true;
  }
  wake_.notify_all();
}

std::size_t Batcher::queued() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

std::size_t Batcher::running() const {
  std::lock_guard lock(mutex_);
  return running_count_;
}

std::string Batcher::failure() const {
  std::lock_guard lock(mutex_);
  return failed_;
}

void Batcher::loop() {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || cancel_all_ || !queue_.empty() || !rows_.empty() || prefill_; });
      if (stop_ && queue_.empty() && rows_.empty() && !prefill_) return;
      if (!prefill_ && !queue_.empty() && rows_.size() < static_cast<std::size_t>(options_.max_batch) &&
          failed_.empty()) {
        prefill_ = std::make_unique<Prefill>();
        prefill_->state = std::move(queue_.front());
        prefill_->row = static_cast<int>(rows_.size());
        queue_.pop_front();
        ++running_count_;
      }
    }
    drop_cancelled();
    try {
      if (prefill_) prefill_chunk();
      if (!rows_.empty()) decode_step();
    } catch (const std::exception& e) {
      fail_all(e.what());
    }
    if (metrics_ != nullptr) metrics_->queue(static_cast<int>(running()), static_cast<int>(queued()));
  }
}

void Batcher::drop_cancelled() {
  std::vector<std::shared_ptr<RequestState>> dropped;
  {
    std::lock_guard lock(mutex_);
    const bool all = cancel_all_;
    cancel_all_ = false;
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (all || (*it)->cancel_requested()) {
        dropped.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    if (all) {
      for (Row& r : rows_) r.state->cancel();
      if (prefill_) prefill_->state->cancel();
    }
  }
  for (auto& r : dropped) r->end(EndReason::cancelled);
  for (std::size_t i = rows_.size(); i-- > 0;) {
    if (!rows_[i].state->cancel_requested()) continue;
    const std::shared_ptr<RequestState> state = rows_[i].state;
    remove_row(i);
    state->end(EndReason::cancelled);
  }
  if (prefill_ && prefill_->state->cancel_requested()) {
    const std::shared_ptr<RequestState> state = prefill_->state;
    prefill_.reset();
    {
      std::lock_guard lock(mutex_);
      --running_count_;
    }
    state->end(EndReason::cancelled);
  }
}

void Batcher::prefill_chunk() {
  Prefill& p = *prefill_;
  const GenerationParams& params = p.state->params();
  const std::size_t left = params.prompt.size() - p.done;
  const int n = static_cast<int>(std::min(left, static_cast<std::size_t>(options_.prefill_chunk)));
  cache_.set_window(p.row, 1);
  if (p.done == 0) cache_.reset();
  if (hooks_.begin) hooks_.begin();
  model_.prefill(cache_, params.prompt.data() + p.done, &n, 1, n, logits_.data());
  if (hooks_.end) hooks_.end();
  p.done += static_cast<std::size_t>(n);
  if (p.done < params.prompt.size()) return;

  if (metrics_ != nullptr) metrics_->prompt_tokens(params.prompt.size());
  Row row{p.state, infer::Sampler(params.sampling), 0, 0, {}};
  const int target = static_cast<int>(rows_.size());
  const int from = p.row;
  prefill_.reset();
  if (const EndReason end = emit(row, logits_.data()); end != EndReason::running) {
    {
      std::lock_guard lock(mutex_);
      --running_count_;
    }
    row.state->end(end);
    return;
  }
  if (from != target) cache_.move_row(from, target, compute_);
  rows_.push_back(std::move(row));
}

void Batcher::decode_step() {
  const int n = static_cast<int>(rows_.size());
  cache_.set_window(0, n);
  for (int i = 0; i < n; ++i) tokens_[static_cast<std::size_t>(i)] = rows_[static_cast<std::size_t>(i)].last;
  if (hooks_.begin) hooks_.begin();
  model_.forward_decode(cache_, tokens_.data(), n, 1, logits_.data());
  if (hooks_.end) hooks_.end();
  if (metrics_ != nullptr) metrics_->step(n, static_cast<int>(running()), static_cast<int>(queued()));
  for (std::size_t i = rows_.size(); i-- > 0;) {
    const EndReason end = emit(rows_[i], logits_.data() + i * static_cast<std::size_t>(vocab_));
    if (end == EndReason::running) continue;
    const std::shared_ptr<RequestState> state = rows_[i].state;
    remove_row(i);  // the row is free before the client learns that its request ended
    state->end(end);
  }
}

EndReason Batcher::emit(Row& row, const float* logits) {
  const GenerationParams& params = row.state->params();
  const std::span<const float> l(logits, static_cast<std::size_t>(vocab_));
  GeneratedToken token;
  token.id = row.sampler.sample(l, infer::SampleKey{0, row.step});
  const auto now = RequestState::Clock::now();
  if (std::find(options_.stop_ids.begin(), options_.stop_ids.end(), token.id) != options_.stop_ids.end()) {
    return EndReason::stop_token;
  }
  if (params.top_logprobs >= 0) fill_logprobs(l, params.top_logprobs, token);
  if (metrics_ != nullptr) {
    if (row.step == 0) {
      metrics_->first_token(seconds_between(row.state->created(), now));
    } else {
      metrics_->next_token(seconds_between(row.last_time, now));
    }
  }
  row.last = token.id;
  row.last_time = now;
  ++row.step;
  row.state->push(std::move(token));
  return row.step >= static_cast<std::uint64_t>(params.max_tokens) ? EndReason::length : EndReason::running;
}

void Batcher::remove_row(std::size_t i) {
  const std::size_t last = rows_.size() - 1;
  if (i != last) {
    cache_.move_row(static_cast<int>(last), static_cast<int>(i), compute_);
    rows_[i] = std::move(rows_[last]);
  }
  rows_.pop_back();
  std::lock_guard lock(mutex_);
  --running_count_;
}

// A pass that threw leaves the cache and the engine in no known state: every request still
// held ends failed, and the batcher refuses new ones (the server reports it on /health).
void Batcher::fail_all(const std::string& why) {
  log::error("strata serve: the engine failed: {}", why);
  const std::string message = "the inference engine failed: " + why;
  std::vector<std::shared_ptr<RequestState>> held;
  for (Row& r : rows_) held.push_back(r.state);
  rows_.clear();
  if (prefill_) held.push_back(prefill_->state);
  prefill_.reset();
  {
    std::lock_guard lock(mutex_);
    failed_ = message;
    for (auto& q : queue_) held.push_back(q);
    queue_.clear();
    running_count_ = 0;
  }
  for (auto& r : held) r->end(EndReason::failed, message);
}

}  // namespace strata::serve
