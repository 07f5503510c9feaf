#include "infer/sampler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "core/error.h"

namespace strata::infer {

namespace {

// A token in the ranking: higher logit first, then lower id.
struct Ranked {
  float logit;
  std::int32_t id;
};

bool ranks_higher(const Ranked& a, const Ranked& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Per-thread scratch: sample() is const and may run on several threads (sample_rows), and a
// row of V = 152k would otherwise allocate 2 x 1.2 MB per token.
struct Scratch {
  std::vector<Ranked> ranked;    // (V): candidates; the kept ones are ranked[0, kept)
  std::vector<double> weights;   // (kept): exp((logit - max) / T)
};
thread_local Scratch t_scratch;

const char* nonfinite_name(float x) { return std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf"); }

[[noreturn]] void throw_bad_logit(std::size_t id, float x, const SampleKey* key) {
  std::string what = fmt::format("logit {} is {}", id, nonfinite_name(x));
  if (key != nullptr) {
    what += fmt::format(" (prompt {}, step {})", key->prompt_index, key->step);
  }
  throw Error(what, "the model's logits",
              "the model produced non-finite logits: check its weights (strata convert) and "
              "whether fp16/bf16 overflowed");
}

// One pass: throws on a NaN/inf logit; returns the index of the maximum (lowest on ties).
std::size_t checked_argmax(std::span<const float> logits, const SampleKey* key) {
  std::size_t best = 0;
  float best_logit = -FLT_MAX;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (!(std::fabs(x) <= FLT_MAX)) [[unlikely]] {
      throw_bad_logit(i, x, key);
    }
    if (x > best_logit || i == 0) {
      best_logit = x;
      best = i;
    }
  }
  return best;
}

// Applies temperature, top-k and top-p to one row. On return s.ranked[0, kept) are the tokens
// that may be drawn and s.weights[0, kept) their unnormalized weights; the order is canonical
// (ids ascending when nothing was filtered, ranked otherwise) so draws are reproducible.
// Returns kept (>= 1); *total is the sum of the weights.
std::size_t filter(const SamplingOptions& o, std::span<const float> logits, float max_logit,
                   Scratch& s, double* total) {
  const std::size_t vocab = logits.size();
  const double inv_t = 1.0 / static_cast<double>(o.temperature);
  s.ranked.resize(vocab);
  for (std::size_t i = 0; i < vocab; ++i) {
    s.ranked[i] = Ranked{logits[i], static_cast<std::int32_t>(i)};
  }
  // exp((logit - max) / T) in double: the maximum gets 1, nothing overflows, and a tiny T
  // sends the rest to 0 rather than to inf - inf.
  auto weight = [&](float logit) {
    return std::exp((static_cast<double>(logit) - static_cast<double>(max_logit)) * inv_t);
  };
  Ranked* const first = s.ranked.data();
  std::size_t kept = vocab;
  std::size_t sorted = 0;  // ranked[0, sorted) is in rank order

  if (o.top_k > 0 && static_cast<std::size_t>(o.top_k) < vocab) {
    kept = static_cast<std::size_t>(o.top_k);
    std::nth_element(first, first + kept, first + vocab, ranks_higher);
    std::sort(first, first + kept, ranks_higher);
    sorted = kept;
  }

  if (o.top_p < 1.0f) {
    // The nucleus of softmax(z) over the kept tokens: keep a token while the probability of
    // those ranked above it is < top_p. Sort only as far as needed: the nucleus is usually a
    // few dozen tokens out of 152k.
    double norm = 0.0;
    for (std::size_t i = 0; i < kept; ++i) norm += weight(first[i].logit);
    const double top_p = static_cast<double>(o.top_p);
    double above = 0.0;
    std::size_t i = 0;
    std::size_t chunk = 64;
    for (;;) {
      if (i == sorted) {
        if (sorted == kept) break;  // every kept token is in the nucleus
        const std::size_t end = std::min(kept, sorted + chunk);
        if (end < kept) std::nth_element(first + sorted, first + end, first + kept, ranks_higher);
        std::sort(first + sorted, first + end, ranks_higher);
        sorted = end;
        chunk *= 4;
      }
      if (i > 0 && above / norm >= top_p) break;
      above += weight(first[i].logit);
      ++i;
    }
    kept = i;
  }

  s.weights.resize(kept);
  double sum = 0.0;
  for (std::size_t i = 0; i < kept; ++i) {
    s.weights[i] = weight(first[i].logit);
    sum += s.weights[i];
  }
  *total = sum;
  return kept;
}

void check_options_and_logits(std::span<const float> logits) {
  STRATA_ASSERT(!logits.empty(), "the sampler needs at least one logit");
  STRATA_ASSERT(logits.size() <= static_cast<std::size_t>(INT32_MAX));
}

}  // namespace

void validate(const SamplingOptions& o) {
  if (!(std::isfinite(o.temperature) && o.temperature >= 0.0f)) {
    throw Error(fmt::format("--temperature must be a finite number >= 0 (0 = greedy), not {}",
                            o.temperature),
                "--temperature", "e.g. --temperature 0.7, or 0 for greedy decoding");
  }
  if (o.top_k < 0) {
    throw Error(fmt::format("--top-k must be >= 0 (0 = off), not {}", o.top_k), "--top-k",
                "e.g. --top-k 50, or 0 to keep every token");
  }
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f)) {
    throw Error(fmt::format("--top-p must be in (0, 1] (1 = off), not {}", o.top_p), "--top-p",
                "e.g. --top-p 0.9, or 1 to turn nucleus sampling off");
  }
}

std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> c,
                                           std::array<std::uint32_t, 2> k) {
  constexpr std::uint64_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    const std::uint64_t p0 = kM0 * c[0];
    const std::uint64_t p1 = kM1 * c[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

double sample_uniform(std::uint64_t seed, SampleKey key) {
  const auto r = philox4x32_10(
      {static_cast<std::uint32_t>(key.prompt_index), static_cast<std::uint32_t>(key.prompt_index >> 32),
       static_cast<std::uint32_t>(key.step), static_cast<std::uint32_t>(key.step >> 32)},
      {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
  const std::uint64_t bits = (static_cast<std::uint64_t>(r[0]) << 32) | r[1];
  return static_cast<double>(bits >> 11) * 0x1.0p-53;  // [0, 1), 53 bits
}

Sampler::Sampler(SamplingOptions options) : options_(options) { validate(options_); }

std::int32_t Sampler::sample(std::span<const float> logits, SampleKey key) const {
  check_options_and_logits(logits);
  const std::size_t best = checked_argmax(logits, &key);
  if (greedy()) return static_cast<std::int32_t>(best);

  Scratch& s = t_scratch;
  double total = 0.0;
  const std::size_t kept = filter(options_, logits, logits[best], s, &total);
  const double target = sample_uniform(options_.seed, key) * total;
  double cum = 0.0;
  std::size_t last_positive = 0;
  for (std::size_t i = 0; i < kept; ++i) {
    if (s.weights[i] <= 0.0) continue;
    cum += s.weights[i];
    last_positive = i;
    if (target < cum) return s.ranked[i].id;
  }
  // target rounded up to the total: the last token that has any weight.
  return s.ranked[last_positive].id;
}

void Sampler::sample_rows(std::span<const float> logits, std::size_t vocab,
                          std::span<const SampleKey> keys, std::span<std::int32_t> tokens) const {
  const std::size_t rows = keys.size();
  STRATA_ASSERT(vocab > 0 && logits.size() == rows * vocab && tokens.size() == rows,
                "sample_rows: logits must be (B, vocab), keys and tokens (B)");
  std::vector<std::exception_ptr> errors(rows);
  const auto n = static_cast<std::int64_t>(rows);
#pragma omp parallel for schedule(static) if (n > 1)
  for (std::int64_t b = 0; b < n; ++b) {
    const auto row = static_cast<std::size_t>(b);
    try {
      tokens[row] = sample(logits.subspan(row * vocab, vocab), keys[row]);
    } catch (...) {
      errors[row] = std::current_exception();
    }
  }
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

std::vector<Candidate> Sampler::distribution(std::span<const float> logits) const {
  check_options_and_logits(logits);
  const std::size_t best = checked_argmax(logits, nullptr);
  if (greedy()) return {Candidate{static_cast<std::int32_t>(best), 1.0}};

  Scratch& s = t_scratch;
  double total = 0.0;
  const std::size_t kept = filter(options_, logits, logits[best], s, &total);
  std::vector<Candidate> out(kept);
  for (std::size_t i = 0; i < kept; ++i) out[i] = Candidate{s.ranked[i].id, s.weights[i] / total};
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    return a.probability > b.probability;  // stable: equal probabilities keep their id/rank order
  });
  return out;
}

}  // namespace strata::infer
