#include "serve/openai_api.h"

#include <cmath>
#include <limits>
#include <random>
#include <set>

#include <fmt/format.h>

namespace strata::serve {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  ApiError e;
  e.message = message;
  e.param = param;
  throw ApiException(std::move(e));
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    default: return "an integer";
  }
}

double number(const json& v, const std::string& key, double lo, double hi) {
  if (!v.is_number()) bad(key, fmt::format("'{}' must be a number, not {}", key, type_name(v)));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) bad(key, fmt::format("'{}' is {}: it must be between {} and {}", key, x, lo, hi));
  return x;
}

std::int64_t integer(const json& v, const std::string& key, std::int64_t lo, std::int64_t hi) {
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::floor(d) != d) bad(key, fmt::format("'{}' must be an integer, not {}", key, d));
  } else if (!v.is_number_integer()) {
    bad(key, fmt::format("'{}' must be an integer, not {}", key, type_name(v)));
  }
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) {
    bad(key, fmt::format("'{}' is {}: it must be between {} and {}", key, v.dump(), lo, hi));
  }
  const std::int64_t x = v.is_number_float() ? static_cast<std::int64_t>(v.get<double>()) : v.get<std::int64_t>();
  if (x < lo || x > hi) bad(key, fmt::format("'{}' is {}: it must be between {} and {}", key, x, lo, hi));
  return x;
}

bool boolean(const json& v, const std::string& key) {
  if (!v.is_boolean()) bad(key, fmt::format("'{}' must be a boolean, not {}", key, type_name(v)));
  return v.get<bool>();
}

std::vector<std::int32_t> token_ids(const json& v, const std::string& key) {
  std::vector<std::int32_t> ids;
  for (const json& t : v) ids.push_back(static_cast<std::int32_t>(integer(t, key, 0, std::numeric_limits<std::int32_t>::max())));
  return ids;
}

void read_prompt(const json& v, ApiRequest& r) {
  const char* one = "give one prompt: a string or a list of token ids (send concurrent requests to batch them)";
  if (v.is_string()) {
    r.prompt_text = v.get<std::string>();
    return;
  }
  if (!v.is_array() || v.empty()) bad("prompt", fmt::format("'prompt' must be a string or a list of token ids, not {}", v.is_array() ? "an empty list" : type_name(v)));
  if (v.front().is_number()) {
    r.prompt_ids = token_ids(v, "prompt");
    r.prompt_is_ids = true;
    return;
  }
  if (v.size() != 1) bad("prompt", fmt::format("'prompt' holds {} prompts: {}", v.size(), one));
  if (v.front().is_string()) {
    r.prompt_text = v.front().get<std::string>();
  } else if (v.front().is_array() && !v.front().empty()) {
    r.prompt_ids = token_ids(v.front(), "prompt");
    r.prompt_is_ids = true;
  } else {
    bad("prompt", fmt::format("'prompt' must be a string or a list of token ids: {}", one));
  }
}

std::string message_content(const json& v, std::size_t i) {
  const std::string key = fmt::format("messages[{}].content", i);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return {};
  if (!v.is_array()) bad(key, fmt::format("'{}' must be a string or a list of text parts, not {}", key, type_name(v)));
  std::string text;
  for (const json& part : v) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      bad(key, fmt::format("'{}' holds a part that is not {{\"type\": \"text\", \"text\": ...}}: this model reads text only", key));
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

void read_messages(const json& v, ApiRequest& r) {
  if (!v.is_array() || v.empty()) bad("messages", "'messages' must be a non-empty list of {\"role\", \"content\"} objects");
  static const std::set<std::string> roles = {"system", "developer", "user", "assistant", "tool"};
  for (std::size_t i = 0; i < v.size(); ++i) {
    const json& m = v[i];
    const std::string key = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad(key, fmt::format("'{}' must be an object, not {}", key, type_name(m)));
    if (!m.contains("role") || !m["role"].is_string()) bad(key + ".role", fmt::format("'{}.role' is missing or not a string", key));
    ChatTurn t;
    t.role = m["role"].get<std::string>();
    if (roles.count(t.role) == 0) {
      bad(key + ".role", fmt::format("'{}.role' is '{}': it must be one of system, developer, user, assistant, tool", key, t.role));
    }
    if (t.role == "developer") t.role = "system";  // OpenAI's newer name for the system prompt
    for (const auto& [k, val] : m.items()) {
      if (k == "role" || k == "content" || k == "name") continue;
      if ((k == "tool_calls" && val.is_array() && val.empty()) || (k == "tool_calls" && val.is_null())) continue;
      bad(key + "." + k, fmt::format("'{}.{}' is not supported: messages carry a role and text content", key, k));
    }
    if (!m.contains("content")) bad(key + ".content", fmt::format("'{}.content' is missing", key));
    t.content = message_content(m["content"], i);
    r.messages.push_back(std::move(t));
  }
}

void read_stop(const json& v, ApiRequest& r) {
  if (v.is_null()) return;
  if (v.is_string()) {
    r.stop.push_back(v.get<std::string>());
    return;
  }
  if (!v.is_array()) bad("stop", fmt::format("'stop' must be a string or a list of strings, not {}", type_name(v)));
  if (v.size() > 4) bad("stop", fmt::format("'stop' holds {} strings: at most 4", v.size()));
  for (const json& s : v) {
    if (!s.is_string()) bad("stop", "'stop' must be a string or a list of strings");
    r.stop.push_back(s.get<std::string>());
  }
}

void must_be_zero(const json& v, const std::string& key) {
  if (v.is_null()) return;
  if (number(v, key, -2.0, 2.0) != 0.0) bad(key, fmt::format("'{}' is not supported by this server: leave it at 0", key));
}

std::uint64_t random_seed() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

std::string error_body(const ApiError& e) {
  json j = {{"error",
             {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
  return dump(j);
}

ApiRequest parse_request(Endpoint endpoint, const json& body) {
  if (!body.is_object()) bad("", fmt::format("the request body must be a JSON object, not {}", type_name(body)));
  ApiRequest r;
  r.endpoint = endpoint;
  r.sampling.temperature = 1.0f;
  const bool chat = endpoint == Endpoint::chat;
  bool have_seed = false;
  bool have_input = false;
  bool logprobs_flag = false;  // chat: logprobs: true
  for (const auto& [key, v] : body.items()) {
    if (key == "model" || key == "user" || key == "store" || key == "metadata" || key == "service_tier") {
      continue;
    } else if (key == "prompt" && !chat) {
      read_prompt(v, r);
      have_input = true;
    } else if (key == "messages" && chat) {
      read_messages(v, r);
      have_input = true;
    } else if (key == "max_tokens" || (chat && key == "max_completion_tokens")) {
      if (!v.is_null()) r.max_tokens = static_cast<int>(integer(v, key, 1, std::numeric_limits<int>::max()));
    } else if (key == "temperature") {
      if (!v.is_null()) r.sampling.temperature = static_cast<float>(number(v, key, 0.0, 2.0));
    } else if (key == "top_p") {
      if (!v.is_null()) r.sampling.top_p = static_cast<float>(number(v, key, 0.0, 1.0));
      if (!v.is_null() && r.sampling.top_p <= 0.0f) bad(key, "'top_p' must be greater than 0");
    } else if (key == "top_k") {
      if (!v.is_null()) {
        const std::int64_t k = integer(v, key, -1, std::numeric_limits<int>::max());
        r.sampling.top_k = k < 0 ? 0 : static_cast<int>(k);
      }
    } else if (key == "seed") {
      if (!v.is_null()) {
        r.sampling.seed = static_cast<std::uint64_t>(integer(v, key, std::numeric_limits<std::int64_t>::min(),
                                                             std::numeric_limits<std::int64_t>::max()));
        have_seed = true;
      }
    } else if (key == "stop") {
      read_stop(v, r);
    } else if (key == "n" || key == "best_of") {
      if (!v.is_null() && integer(v, key, 1, 128) != 1) bad(key, fmt::format("'{}' must be 1: this server makes one choice per request", key));
    } else if (key == "logprobs") {
      if (v.is_null()) continue;
      if (chat) {
        logprobs_flag = boolean(v, key);
      } else {
        r.top_logprobs = static_cast<int>(integer(v, key, 0, 20));
      }
    } else if (key == "top_logprobs" && chat) {
      if (!v.is_null()) r.top_logprobs = static_cast<int>(integer(v, key, 0, 20));
    } else if (key == "echo" && !chat) {
      if (!v.is_null()) r.echo = boolean(v, key);
    } else if (key == "stream") {
      if (!v.is_null()) r.stream = boolean(v, key);
    } else if (key == "stream_options") {
      if (v.is_null()) continue;
      if (!v.is_object()) bad(key, "'stream_options' must be an object");
      for (const auto& [k2, v2] : v.items()) {
        if (k2 != "include_usage") bad("stream_options." + k2, fmt::format("'stream_options.{}' is not supported", k2));
        r.include_usage = boolean(v2, "stream_options.include_usage");
      }
    } else if (key == "frequency_penalty" || key == "presence_penalty") {
      must_be_zero(v, key);
    } else if (key == "logit_bias") {
      if (!v.is_null() && !(v.is_object() && v.empty())) bad(key, "'logit_bias' is not supported by this server");
    } else if (key == "suffix" && !chat) {
      if (!v.is_null() && !(v.is_string() && v.get<std::string>().empty())) bad(key, "'suffix' is not supported by this server");
    } else if (chat && key == "response_format") {
      if (!v.is_null() && !(v.is_object() && v.value("type", "") == "text" && v.size() == 1)) {
        bad(key, "'response_format' is not supported by this server beyond {\"type\": \"text\"}");
      }
    } else if (chat && (key == "tools" || key == "functions")) {
      if (!v.is_null() && !(v.is_array() && v.empty())) bad(key, fmt::format("'{}' (tool calling) is not supported by this server", key));
    } else if (chat && (key == "tool_choice" || key == "parallel_tool_calls" || key == "function_call")) {
      if (!v.is_null() && !(v.is_string() && v.get<std::string>() == "none") && !v.is_boolean()) {
        bad(key, fmt::format("'{}' (tool calling) is not supported by this server", key));
      }
    } else if (chat && key == "chat_template_kwargs") {
      if (v.is_null()) continue;
      if (!v.is_object()) bad(key, "'chat_template_kwargs' must be an object");
      for (const auto& [k2, v2] : v.items()) {
        if (k2 != "enable_thinking") bad(key + "." + k2, fmt::format("'{}.{}' is not supported: only enable_thinking", key, k2));
        r.enable_thinking = boolean(v2, key + ".enable_thinking");
      }
    } else {
      bad(key, fmt::format("Unrecognized request argument supplied: {}", key));
    }
  }
  if (!have_input) {
    const char* what = chat ? "messages" : "prompt";
    bad(what, fmt::format("'{}' is a required property", what));
  }
  if (chat && !logprobs_flag) {
    if (r.top_logprobs >= 0) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  } else if (chat && r.top_logprobs < 0) {
    r.top_logprobs = 0;
  }
  if (!r.stream && r.include_usage) bad("stream_options", "'stream_options' is only allowed with 'stream': true");
  if (r.echo && r.top_logprobs >= 0) {
    bad("echo", "'echo' with 'logprobs' is not supported by this server (the prompt's logprobs are not computed)");
  }
  if (!have_seed) r.sampling.seed = random_seed();
  return r;
}

namespace {

json logprobs_json(Endpoint endpoint, const std::vector<TokenInfo>& tokens, std::size_t text_offset) {
  if (endpoint == Endpoint::chat) {
    json content = json::array();
    auto bytes = [](const std::string& s) {
      json b = json::array();
      for (unsigned char c : s) b.push_back(static_cast<int>(c));
      return b;
    };
    for (const TokenInfo& t : tokens) {
      json top = json::array();
      for (const auto& [text, lp] : t.top) top.push_back({{"token", text}, {"logprob", lp}, {"bytes", bytes(text)}});
      content.push_back({{"token", t.text}, {"logprob", t.logprob}, {"bytes", bytes(t.text)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json texts = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const TokenInfo& t : tokens) {
    texts.push_back(t.text);
    lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& [text, lp] : t.top) {
      if (!top.contains(text)) top[text] = lp;
    }
    tops.push_back(top);
    offsets.push_back(text_offset);
    text_offset += t.text.size();
  }
  return {{"tokens", texts}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

json header_json(const ReplyHeader& h, bool chunk) {
  const char* object = h.endpoint == Endpoint::chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                    : "text_completion";
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

}  // namespace

json full_reply(const ReplyHeader& h, const std::string& text, const char* finish_reason, const Usage& usage,
                const std::vector<TokenInfo>* logprobs) {
  json j = header_json(h, false);
  json choice = {{"index", 0}, {"finish_reason", finish_reason}};
  const json lp = logprobs != nullptr ? logprobs_json(h.endpoint, *logprobs, 0) : json(nullptr);
  if (h.endpoint == Endpoint::chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = lp;
  j["choices"] = json::array({choice});
  j["usage"] = usage_json(usage);
  return j;
}

json chunk(const ReplyHeader& h, const std::string& text, const std::vector<TokenInfo>* logprobs,
           const char* finish_reason, const Usage* usage, bool first) {
  json j = header_json(h, true);
  json choice = {{"index", 0}};
  if (h.endpoint == Endpoint::chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason == nullptr)) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs != nullptr && !logprobs->empty() ? logprobs_json(h.endpoint, *logprobs, 0) : json(nullptr);
  choice["finish_reason"] = finish_reason != nullptr ? json(finish_reason) : json(nullptr);
  j["choices"] = json::array({choice});
  if (usage != nullptr) j["usage"] = usage_json(*usage);
  return j;
}

json usage_chunk(const ReplyHeader& h, const Usage& usage) {
  json j = header_json(h, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(usage);
  return j;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace strata::serve
