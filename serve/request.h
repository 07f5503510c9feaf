#pragma once
// One generation request of `strata serve` as the engine loop sees it (serve/batcher.h), and the
// channel its tokens go back through to the HTTP handler that waits for them.
//
// Threading: the handler's thread makes the request and reads its tokens (wait()); the engine
// loop pushes tokens and ends it; either side may cancel. Every member function is thread-safe.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "infer/sampler.h"

namespace strata::serve {

struct GenerationParams {
  std::vector<std::int32_t> prompt;  // token ids, at least one, each in the model's vocabulary
  int max_tokens = 16;               // >= 1; prompt + max_tokens fit the context (the caller checks)
  infer::SamplingOptions sampling;   // validated by the caller (infer::validate)
  int top_logprobs = -1;             // -1: no logprobs; N >= 0: the chosen token's and the N likeliest
};

struct TokenLogprob {
  std::int32_t id = 0;
  float logprob = 0.0f;
};

struct GeneratedToken {
  std::int32_t id = 0;
  float logprob = 0.0f;            // log p(id) under the model's distribution, when asked for
  std::vector<TokenLogprob> top;   // the likeliest tokens, highest first, when asked for
};

enum class EndReason {
  running,     // not ended yet
  stop_token,  // an end-of-sequence token was sampled (not part of the output)
  length,      // max_tokens were generated
  cancelled,   // the client went away, or asked (a stop string), or the server is shutting down
  failed,      // the engine failed; error() says why
};

class RequestState {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RequestState(GenerationParams params);

  const GenerationParams& params() const { return params_; }
  Clock::time_point created() const { return created_; }

  // The engine's side.
  void push(GeneratedToken token);
  void end(EndReason reason, std::string error = {});

  // Either side: asks the engine to stop generating. The engine ends the request (cancelled)
  // at its next step; the tokens already pushed stay readable.
  void cancel();
  bool cancel_requested() const;

  // The handler's side: waits up to `timeout` for tokens or the end, and takes the tokens
  // pushed since the last call.
  struct Update {
    std::vector<GeneratedToken> tokens;
    EndReason end = EndReason::running;
    std::string error;
  };
  Update wait(std::chrono::milliseconds timeout);

 private:
  const GenerationParams params_;
  const Clock::time_point created_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<GeneratedToken> pending_;
  EndReason end_ = EndReason::running;
  std::string error_;
  bool cancel_ = false;
};

}  // namespace strata::serve
