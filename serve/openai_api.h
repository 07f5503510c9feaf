#pragma once
// The OpenAI API's JSON, as `strata serve` speaks it: requests of POST /v1/completions and
// POST /v1/chat/completions in (checked field by field: a wrong type, a value out of range or a
// field OpenAI does not know is an ApiError, 400), replies, stream chunks and errors out.
//
// Decisions (docs/serve.md says them to users):
//   - defaults are OpenAI's: temperature 1, top_p 1, max_tokens 16 for completions and "what
//     the context leaves" for chat; no seed = a random one per request;
//   - n (and best_of) must be 1; one prompt per request (a list of prompts is refused, not
//     batched: concurrent requests are batched by the server);
//   - frequency_penalty / presence_penalty must be 0 and logit_bias empty (not implemented:
//     refused rather than ignored); `user`, `store`, `metadata`, `service_tier` are accepted and
//     ignored; `top_k` is accepted as vLLM and llama.cpp do;
//   - the `model` field is not checked: one model is served, and its name is in every reply.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/sampler.h"

namespace strata::serve {

// An error answered with OpenAI's body: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" = null
  std::string code;   // "" = null
};

// Thrown by the parsers; carries the ApiError.
class ApiException : public std::exception {
 public:
  explicit ApiException(ApiError error) : error_(std::move(error)) {}
  const ApiError& error() const { return error_; }
  const char* what() const noexcept override { return error_.message.c_str(); }

 private:
  ApiError error_;
};

std::string error_body(const ApiError& error);

enum class Endpoint { completions, chat };

struct ChatTurn {
  std::string role;     // system | user | assistant | developer (as system) | tool
  std::string content;  // a string, or the text parts of a list joined
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::completions;
  // completions: a text prompt, or token ids
  std::string prompt_text;
  std::vector<std::int32_t> prompt_ids;
  bool prompt_is_ids = false;
  // chat
  std::vector<ChatTurn> messages;
  std::optional<bool> enable_thinking;  // chat_template_kwargs.enable_thinking (Qwen3)

  std::optional<int> max_tokens;
  infer::SamplingOptions sampling;      // seed filled (given or random)
  std::vector<std::string> stop;
  int top_logprobs = -1;                // -1: no logprobs
  bool echo = false;
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
};

// Parse a request body (already valid JSON). Throws ApiException.
ApiRequest parse_request(Endpoint endpoint, const nlohmann::json& body);

// What a reply is made of, in the order the tokens came.
struct TokenInfo {
  std::string text;           // the token's bytes as text (may be part of a character)
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;
};

struct Usage {
  std::size_t prompt_tokens = 0;
  std::size_t completion_tokens = 0;
};

struct ReplyHeader {
  std::string id;  // cmpl-... or chatcmpl-...
  std::int64_t created = 0;
  std::string model;
  Endpoint endpoint = Endpoint::completions;
};

// A whole reply (stream: false).
nlohmann::json full_reply(const ReplyHeader& h, const std::string& text, const char* finish_reason, const Usage& usage,
                          const std::vector<TokenInfo>* logprobs);
// One stream chunk's JSON: new text (and its tokens' logprobs), or the last one with
// finish_reason (and usage when `usage` is given). Chat's first chunk carries the role.
nlohmann::json chunk(const ReplyHeader& h, const std::string& text, const std::vector<TokenInfo>* logprobs,
                     const char* finish_reason, const Usage* usage, bool first);
// The chunk of stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk(const ReplyHeader& h, const Usage& usage);

// JSON text for the wire: invalid UTF-8 (a token cut inside a character) becomes U+FFFD.
std::string dump(const nlohmann::json& j);

}  // namespace strata::serve
