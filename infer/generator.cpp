// The generation loop (generator.h).
#include "infer/generator.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "core/error.h"

namespace strata::infer {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

Generator::Generator(models::Model& model, int vocab_size, const GenerateOptions& options, int max_positions,
                     PassHooks hooks)
    : model_(model),
      vocab_(vocab_size),
      options_(options),
      max_positions_(max_positions),
      hooks_(std::move(hooks)),
      sampler_(options.sampling),
      cache_(model.make_kv_cache(options.batch, max_positions, options.kv_cache)) {
  if (options.max_new_tokens < 1) {
    throw Error(fmt::format("--max-new-tokens is {}: it must be at least 1", options.max_new_tokens),
                "--max-new-tokens");
  }
  if (options.batch < 1) throw Error("the batch must hold at least one prompt", "--batch");
}

GenerateStats Generator::run(const std::vector<Prompt>& prompts, const std::function<void(Completion)>& done,
                             const std::function<void(const GenerateStats&)>& progress) {
  const int limit = max_positions_ - options_.max_new_tokens;
  if (limit < 1) {
    throw Error(fmt::format("--max-new-tokens {} leaves no room for a prompt: the model has {} positions in all "
                            "(prompt + new tokens)",
                            options_.max_new_tokens, max_positions_),
                "--max-new-tokens", fmt::format("give at most {} (one prompt token)", max_positions_ - 1));
  }
  for (const Prompt& p : prompts) {
    if (p.ids.empty() || static_cast<int>(p.ids.size()) > limit) {
      throw Error(fmt::format("prompt {} has {} tokens; with --max-new-tokens {} at most {} fit the {} positions",
                              p.index, p.ids.size(), options_.max_new_tokens, limit, max_positions_),
                  "--max-new-tokens", "shorten the prompt or lower --max-new-tokens");
    }
  }
  GenerateStats stats;
  const int B = options_.batch;
  auto pass = [&](auto&& fn) {
    if (hooks_.begin) hooks_.begin();
    fn();
    if (hooks_.end) hooks_.end();
    ++stats.passes;
  };
  std::vector<float> logits(static_cast<std::size_t>(B) * static_cast<std::size_t>(vocab_));
  std::vector<std::int32_t> next(static_cast<std::size_t>(B));
  std::vector<SampleKey> keys(static_cast<std::size_t>(B));
  for (std::size_t first = 0; first < prompts.size(); first += static_cast<std::size_t>(B)) {
    const std::size_t n = std::min(prompts.size() - first, static_cast<std::size_t>(B));
    // Rows past the last prompt repeat the first one (the cache has B rows); nothing of them is
    // kept.
    auto prompt_of = [&](int row) -> const Prompt& {
      return prompts[first + (static_cast<std::size_t>(row) < n ? static_cast<std::size_t>(row) : 0)];
    };
    int T = 0;
    for (int b = 0; b < B; ++b) T = std::max(T, static_cast<int>(prompt_of(b).ids.size()));
    std::vector<std::int32_t> padded(static_cast<std::size_t>(B) * static_cast<std::size_t>(T), 0);
    std::vector<int> lengths(static_cast<std::size_t>(B));
    for (int b = 0; b < B; ++b) {
      const Prompt& p = prompt_of(b);
      std::copy(p.ids.begin(), p.ids.end(), padded.begin() + static_cast<std::ptrdiff_t>(b) * T);
      std::fill(padded.begin() + static_cast<std::ptrdiff_t>(b) * T + static_cast<std::ptrdiff_t>(p.ids.size()),
                padded.begin() + static_cast<std::ptrdiff_t>(b + 1) * T, p.ids.back());
      lengths[static_cast<std::size_t>(b)] = static_cast<int>(p.ids.size());
      if (static_cast<std::size_t>(b) < n) stats.prompt_tokens += p.ids.size();
    }
    std::vector<Completion> out(n);
    std::vector<char> finished(static_cast<std::size_t>(B), 0);
    for (std::size_t b = 0; b < n; ++b) {
      out[b].index = prompts[first + b].index;
      out[b].prompt_tokens = prompts[first + b].ids.size();
    }
    for (std::size_t b = n; b < static_cast<std::size_t>(B); ++b) finished[b] = 1;
    cache_.reset();
    auto t0 = std::chrono::steady_clock::now();
    pass([&] { model_.prefill(cache_, padded.data(), lengths.data(), B, T, logits.data()); });
    stats.prefill_seconds += seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    for (int step = 0;; ++step) {
      for (int b = 0; b < B; ++b) keys[static_cast<std::size_t>(b)] = {prompt_of(b).index, static_cast<std::uint64_t>(step)};
      sampler_.sample_rows(logits, static_cast<std::size_t>(vocab_), keys, next);
      for (std::size_t b = 0; b < n; ++b) {
        if (finished[b]) continue;
        const std::int32_t t = next[b];
        if (std::find(options_.stop_ids.begin(), options_.stop_ids.end(), t) != options_.stop_ids.end()) {
          finished[b] = 1;
          out[b].finish_reason = FinishReason::kStop;
          continue;
        }
        out[b].ids.push_back(t);
        ++stats.generated_tokens;
        if (static_cast<int>(out[b].ids.size()) == options_.max_new_tokens) {
          finished[b] = 1;
          out[b].finish_reason = FinishReason::kLength;
        }
      }
      if (progress) progress(stats);
      if (std::all_of(finished.begin(), finished.end(), [](char f) { return f != 0; })) break;
      pass([&] { model_.forward_decode(cache_, next.data(), B, 1, logits.data()); });
    }
    stats.decode_seconds += seconds_since(t0);
    stats.prompts += n;
    for (Completion& c : out) done(std::move(c));
  }
  return stats;
}

}  // namespace strata::infer
