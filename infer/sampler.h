#pragma once
// The next-token sampler: fp32 logits (V) of one row in, one token id out. Pure host code.
//
//   temperature == 0   greedy: the argmax, the lowest id on ties (top_k and top_p are ignored,
//                      as with HF's do_sample=False)
//   temperature > 0    z = logits / temperature; keep the top_k highest (top_k > 0); keep the
//                      nucleus of softmax(z over what top_k kept) (top_p < 1); draw one token
//                      from softmax(z) over what is left
//
// Ordering. Tokens are ranked by logit, then by id (lower first), so top-k keeps exactly
// top_k tokens (HF keeps every token tied with the k-th) and top_k = 1 is greedy.
//
// Top-p, as HF's TopPLogitsWarper: the smallest set of highest-ranked tokens whose cumulative
// probability reaches top_p, i.e. a token is kept when the probability of the tokens ranked
// above it is < top_p; the top token is always kept; top_p = 1 turns it off. Probabilities are
// computed in double.
//
// Randomness. The uniform draw of a row is Philox4x32-10 keyed by the seed, with the counter
// (prompt index, step): a counter-based generator, so a prompt's tokens depend only on (seed,
// its index in --prompts, the step), never on which prompts share its batch, on the row it
// sits in, or on the thread count.
//
// Cost for V = 152k: one pass to check the logits and find the maximum; top-k by nth_element
// (O(V)) and a sort of the k kept; top-p without top-k sorts only as far as the nucleus
// reaches (nth_element on growing prefixes), not all of V.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace strata::infer {

struct SamplingOptions {
  float temperature = 0.0f;  // --temperature: 0 = greedy; otherwise > 0 and finite
  int top_k = 0;             // --top-k: 0 = off; >= V is off too
  float top_p = 1.0f;        // --top-p: in (0, 1]; 1 = off
  std::uint64_t seed = 0;    // --seed
};

// Throws strata::Error naming the flag (--temperature, --top-k, --top-p) when an option is
// out of range.
void validate(const SamplingOptions& options);

// Which draw a row gets: the prompt's index in --prompts (not its row in the batch) and the
// step (0 for the first generated token).
struct SampleKey {
  std::uint64_t prompt_index = 0;
  std::uint64_t step = 0;
};

// A token the sampler may pick and its probability (renormalized over the kept tokens).
struct Candidate {
  std::int32_t id = 0;
  double probability = 0.0;
};

// The uniform draw in [0, 1) (53 bits) for (seed, key): Philox4x32-10, key = seed, counter =
// (prompt_index, step). Exposed so that a device sampler can reproduce the host's draws.
double sample_uniform(std::uint64_t seed, SampleKey key);

// Philox4x32-10 itself (Salmon et al., SC'11; Random123's philox4x32_10), for its known-answer
// test.
std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> counter,
                                           std::array<std::uint32_t, 2> key);

class Sampler {
 public:
  // Validates the options (throws strata::Error, see validate()).
  explicit Sampler(SamplingOptions options);

  const SamplingOptions& options() const noexcept { return options_; }
  bool greedy() const noexcept { return options_.temperature == 0.0f; }

  // The next token of one row. logits: (V) fp32, V >= 1. Throws strata::Error when a logit
  // is NaN or infinite (naming the prompt, step and token). Thread-safe: its scratch is
  // per thread.
  std::int32_t sample(std::span<const float> logits, SampleKey key) const;

  // The next token of every row: logits (B, vocab) row-major, keys (B), tokens (B) out. Rows
  // run in parallel (OpenMP); the result does not depend on the thread count. On bad logits
  // throws the error of the first bad row.
  void sample_rows(std::span<const float> logits, std::size_t vocab,
                   std::span<const SampleKey> keys, std::span<std::int32_t> tokens) const;

  // The tokens sample() may pick for these logits and their probabilities, highest first
  // (ties: lower id first); one token with probability 1 when greedy. For tests and
  // diagnostics; sample() draws from exactly this distribution.
  std::vector<Candidate> distribution(std::span<const float> logits) const;

 private:
  SamplingOptions options_;
};

}  // namespace strata::infer
