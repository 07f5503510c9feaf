// The pieces of `strata serve` that need no model: the OpenAI request parser (every field's
// checks, OpenAI's error shape), the reply and chunk JSON, tokens to text with held-back
// characters and stop strings, and the Prometheus text.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/text_io.h"
#include "serve/metrics.h"
#include "serve/openai_api.h"
#include "serve/text_stream.h"

namespace strata::serve {
namespace {

using nlohmann::json;

ApiRequest parse(Endpoint e, const std::string& text) { return parse_request(e, json::parse(text)); }

// The ApiError a body gets (status 0 when it parses).
ApiError error_of(Endpoint e, const std::string& text) {
  try {
    parse(e, text);
  } catch (const ApiException& x) {
    return x.error();
  }
  return ApiError{0, "", "", "", ""};
}

TEST(OpenAiRequest, DefaultsAreOpenAIs) {
  const ApiRequest r = parse(Endpoint::completions, R"({"model": "m", "prompt": "Hello"})");
  EXPECT_EQ(r.prompt_text, "Hello");
  EXPECT_FALSE(r.prompt_is_ids);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.top_logprobs, -1);
  EXPECT_FALSE(r.stream);
  // No seed: a random one per request.
  EXPECT_NE(parse(Endpoint::completions, R"({"prompt": "x"})").sampling.seed,
            parse(Endpoint::completions, R"({"prompt": "x"})").sampling.seed);
}

TEST(OpenAiRequest, ReadsEveryFieldItHonours) {
  const ApiRequest r = parse(Endpoint::completions,
                             R"({"prompt": [[1, 2, 3]], "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
                                 "seed": 42, "stop": ["a", "bc"], "n": 1, "logprobs": 3, "stream": true,
                                 "stream_options": {"include_usage": true}, "user": "u", "frequency_penalty": 0})");
  EXPECT_EQ(r.prompt_ids, (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_TRUE(r.prompt_is_ids);
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);

  const ApiRequest c = parse(Endpoint::chat,
                             R"({"messages": [{"role": "developer", "content": "Be brief."},
                                              {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}],
                                 "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 2, "stop": "END",
                                 "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_EQ(c.messages.size(), 2u);
  EXPECT_EQ(c.messages[0].role, "system");
  EXPECT_EQ(c.messages[1].content, "Hi there");
  EXPECT_EQ(*c.max_tokens, 5);
  EXPECT_EQ(c.top_logprobs, 2);
  EXPECT_EQ(c.stop, (std::vector<std::string>{"END"}));
  EXPECT_EQ(c.enable_thinking, std::optional<bool>(false));
  EXPECT_EQ(parse(Endpoint::chat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})").top_logprobs, 0);
}

TEST(OpenAiRequest, RefusesWhatItCannotHonourNamingTheField) {
  struct Bad {
    Endpoint endpoint;
    const char* body;
    const char* param;
    const char* says;
  };
  const Endpoint C = Endpoint::completions, H = Endpoint::chat;
  const std::vector<Bad> cases = {
      {C, R"({"prompt": "x", "foo": 1})", "foo", "Unrecognized request argument supplied: foo"},
      {C, R"({"max_tokens": 3})", "prompt", "'prompt' is a required property"},
      {C, R"({"prompt": 5})", "prompt", "must be a string or a list of token ids"},
      {C, R"({"prompt": []})", "prompt", "an empty list"},
      {C, R"({"prompt": ["a", "b"]})", "prompt", "holds 2 prompts"},
      {C, R"({"prompt": [1, -2]})", "prompt", "between 0 and"},
      {C, R"({"prompt": "x", "temperature": "hot"})", "temperature", "must be a number, not a string"},
      {C, R"({"prompt": "x", "temperature": 3})", "temperature", "between 0 and 2"},
      {C, R"({"prompt": "x", "top_p": 0})", "top_p", "greater than 0"},
      {C, R"({"prompt": "x", "max_tokens": 0})", "max_tokens", "between 1 and"},
      {C, R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens", "must be an integer"},
      {C, R"({"prompt": "x", "n": 2})", "n", "must be 1"},
      {C, R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "stop", "at most 4"},
      {C, R"({"prompt": "x", "stop": [1]})", "stop", "list of strings"},
      {C, R"({"prompt": "x", "logprobs": 21})", "logprobs", "between 0 and 20"},
      {C, R"({"prompt": "x", "stream": "yes"})", "stream", "must be a boolean"},
      {C, R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options", "only allowed with 'stream': true"},
      {C, R"({"prompt": "x", "echo": true, "logprobs": 1})", "echo", "not supported"},
      {C, R"({"prompt": "x", "presence_penalty": 0.5})", "presence_penalty", "leave it at 0"},
      {C, R"({"prompt": "x", "logit_bias": {"5": 1}})", "logit_bias", "not supported"},
      {C, R"({"prompt": "x", "messages": []})", "messages", "Unrecognized request argument"},
      {H, R"({"prompt": "x"})", "prompt", "Unrecognized request argument"},
      {H, R"({"messages": []})", "messages", "non-empty list"},
      {H, R"({"messages": [{"content": "x"}]})", "messages[0].role", "missing"},
      {H, R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role", "must be one of"},
      {H, R"({"messages": [{"role": "user"}]})", "messages[0].content", "missing"},
      {H, R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
       "messages[0].content", "text only"},
      {H, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs", "needs 'logprobs': true"},
      {H, R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", "tools", "not supported"},
      {H, R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"x": 1}})",
       "chat_template_kwargs.x", "only enable_thinking"},
  };
  for (const Bad& b : cases) {
    const ApiError e = error_of(b.endpoint, b.body);
    EXPECT_EQ(e.status, 400) << b.body;
    EXPECT_EQ(e.param, b.param) << b.body;
    EXPECT_NE(e.message.find(b.says), std::string::npos) << b.body << " -> " << e.message;
    EXPECT_EQ(e.type, "invalid_request_error");
  }
  EXPECT_EQ(error_of(C, "[1, 2]").status, 400);
}

TEST(OpenAiReply, ErrorsWholeRepliesAndChunksHaveOpenAIsShape) {
  ApiError e;
  e.status = 429;
  e.message = "busy";
  e.type = "rate_limit_error";
  const json err = json::parse(error_body(e));
  EXPECT_EQ(err["error"]["message"], "busy");
  EXPECT_EQ(err["error"]["type"], "rate_limit_error");
  EXPECT_TRUE(err["error"]["param"].is_null());
  EXPECT_TRUE(err["error"]["code"].is_null());

  ReplyHeader h{"cmpl-1", 1700000000, "tiny", Endpoint::completions};
  const Usage u{5, 3};
  std::vector<TokenInfo> lp = {{"a", -0.5f, {{"a", -0.5f}, {"b", -1.5f}}}, {"bc", -0.25f, {}}};
  const json full = full_reply(h, "abc", "length", u, &lp);
  EXPECT_EQ(full["object"], "text_completion");
  EXPECT_EQ(full["choices"][0]["text"], "abc");
  EXPECT_EQ(full["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(full["usage"]["total_tokens"], 8);
  EXPECT_EQ(full["choices"][0]["logprobs"]["tokens"], json({"a", "bc"}));
  EXPECT_EQ(full["choices"][0]["logprobs"]["text_offset"], json({0, 1}));
  EXPECT_EQ(full["choices"][0]["logprobs"]["top_logprobs"][0]["b"], -1.5);

  h.endpoint = Endpoint::chat;
  const json chat = full_reply(h, "hi", "stop", u, nullptr);
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "hi");
  EXPECT_TRUE(chat["choices"][0]["logprobs"].is_null());
  const json chat_lp = full_reply(h, "abc", "stop", u, &lp);
  EXPECT_EQ(chat_lp["choices"][0]["logprobs"]["content"][0]["top_logprobs"][1]["token"], "b");
  EXPECT_EQ(chat_lp["choices"][0]["logprobs"]["content"][1]["bytes"], json({98, 99}));

  const json first = chunk(h, "", nullptr, nullptr, nullptr, true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const json last = chunk(h, "", nullptr, "stop", &u, false);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 3);
  const json usage = usage_chunk(h, u);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 5);

  // A token cut inside a character goes out as U+FFFD, not as a failure.
  EXPECT_EQ(dump(json("a\xC3")), "\"a\xEF\xBF\xBD\"");
}

// Tokens are bytes here (TextCodec::bytes), so a character can arrive in pieces.
std::vector<std::int32_t> byte_ids(const std::string& s) {
  std::vector<std::int32_t> ids;
  for (unsigned char c : s) ids.push_back(c);
  return ids;
}

std::string stream_all(const infer::TextCodec& codec, const std::string& text, std::vector<std::string> stop,
                       std::vector<std::string>* pieces = nullptr) {
  TextStream s(codec, std::move(stop));
  std::string out;
  for (std::int32_t id : byte_ids(text)) {
    const std::string piece = s.add(id);
    if (pieces != nullptr) pieces->push_back(piece);
    out += piece;
  }
  out += s.finish();
  EXPECT_EQ(out, s.text());
  return out;
}

TEST(TextStream, HoldsBackAnUnfinishedCharacterUntilItsLastByte) {
  const auto codec = infer::TextCodec::bytes();
  std::vector<std::string> pieces;
  EXPECT_EQ(stream_all(*codec, "a\xC3\xA9z", {}, &pieces), "a\xC3\xA9z");
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "", "\xC3\xA9", "z"}));
}

TEST(TextStream, CutsBeforeAStopStringAndNeverSendsItsStart) {
  const auto codec = infer::TextCodec::bytes();
  std::vector<std::string> pieces;
  EXPECT_EQ(stream_all(*codec, "Hello World", {"lo W"}, &pieces), "Hel");
  // "l", then "lo", "lo " were held: they might have begun the stop string.
  EXPECT_EQ(pieces, (std::vector<std::string>{"H", "e", "", "l", "", "", "", "", "", "", ""}));
  // A stop string that never completes: everything, the held part at the end.
  EXPECT_EQ(stream_all(*codec, "Hello Wo", {"lo Wx"}), "Hello Wo");
  // The earliest of several.
  EXPECT_EQ(stream_all(*codec, "abcdef", {"de", "bcd"}), "a");
}

TEST(TextStream, MatchesTheDecodedTextCutAtTheFirstStopOnRandomInput) {
  const auto codec = infer::TextCodec::bytes();
  std::mt19937 rng(5);
  const std::string alphabet = "ab \xC3\xA9\xE2\x82\xAC";  // ASCII, é, € as bytes
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    const int n = static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) text += alphabet[rng() % alphabet.size()];
    std::vector<std::string> stops;
    for (int k = static_cast<int>(rng() % 3); k > 0; --k) {
      std::string s;
      for (int i = 1 + static_cast<int>(rng() % 3); i > 0; --i) s += "ab "[rng() % 3];
      stops.push_back(s);
    }
    std::string full = codec->decode(byte_ids(text));
    // The decoded text cut at the first place any stop string occurs (in the final text).
    std::size_t cut = std::string::npos;
    for (const std::string& s : stops) cut = std::min(cut, full.find(s));
    const std::string expected = cut == std::string::npos ? full : full.substr(0, cut);
    EXPECT_EQ(stream_all(*codec, text, stops), expected) << "text of " << n << " bytes";
  }
}

TEST(Metrics, RendersPrometheusText) {
  Metrics m;
  m.request_done(Outcome::ok);
  m.request_done(Outcome::ok);
  m.request_done(Outcome::rejected);
  m.prompt_tokens(12);
  m.first_token(0.03);
  m.next_token(0.004);
  m.next_token(0.02);
  m.step(3, 3, 1);
  m.streamed_bytes(1000, 24);
  const std::string text = m.render();
  auto has = [&](const std::string& line) { return text.find(line + "\n") != std::string::npos; };
  EXPECT_TRUE(has("strata_requests_total{outcome=\"ok\"} 2"));
  EXPECT_TRUE(has("strata_requests_total{outcome=\"rejected\"} 1"));
  EXPECT_TRUE(has("strata_prompt_tokens_total 12"));
  EXPECT_TRUE(has("strata_generation_tokens_total 3"));
  EXPECT_TRUE(has("strata_queue_length 1"));
  EXPECT_TRUE(has("strata_batch_size 3"));
  EXPECT_TRUE(has("# TYPE strata_time_to_first_token_seconds histogram"));
  EXPECT_TRUE(has("strata_time_to_first_token_seconds_bucket{le=\"0.025\"} 0"));
  EXPECT_TRUE(has("strata_time_to_first_token_seconds_bucket{le=\"0.05\"} 1"));
  EXPECT_TRUE(has("strata_time_per_output_token_seconds_bucket{le=\"0.005\"} 1"));
  EXPECT_TRUE(has("strata_time_per_output_token_seconds_bucket{le=\"+Inf\"} 2"));
  EXPECT_TRUE(has("strata_time_per_output_token_seconds_count 2"));
  EXPECT_TRUE(has("strata_streamed_bytes_total{tier=\"pinned\"} 1000"));
  EXPECT_TRUE(has("strata_streamed_bytes_total{tier=\"nvme\"} 24"));
  EXPECT_EQ(text.find("strata_experts_total"), std::string::npos) << "a dense model's metrics name experts";
  m.experts(7, 2, 5);
  const std::string moe = m.render();
  for (const char* line : {"strata_experts_total{where=\"cached\"} 7", "strata_experts_total{where=\"fetched\"} 2",
                           "strata_experts_total{where=\"host\"} 5"}) {
    EXPECT_NE(moe.find(std::string(line) + "\n"), std::string::npos) << line;
  }
}

}  // namespace
}  // namespace strata::serve
