#include "serve/http_server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <ctime>
#include <random>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "serve/chat_prompt.h"
#include "serve/openai_api.h"
#include "serve/request.h"
#include "serve/text_stream.h"

namespace strata::serve {
namespace {

using nlohmann::json;

constexpr auto kPoll = std::chrono::milliseconds(250);      // a waiting handler checks its client this often
constexpr auto kKeepAlive = std::chrono::seconds(2);        // an SSE comment when nothing else was sent

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_body(e), "application/json");
}

ApiError api_error(int status, std::string message, std::string type = "invalid_request_error",
                   std::string param = {}, std::string code = {}) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

// Equal strings in time that depends only on the lengths, never on where they differ.
bool constant_time_equal(const std::string& a, const std::string& b) {
  const std::size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<std::uint32_t>(rng()));
}

const char* finish_reason(EndReason end, bool stopped_by_string) {
  if (stopped_by_string || end == EndReason::stop_token) return "stop";
  return "length";
}

// A token's text for logprobs: its bytes (maybe part of a character; dump() repairs them).
std::string token_text(const infer::TextCodec& codec, std::int32_t id) {
  if (const models::Tokenizer* t = codec.tokenizer()) {
    try {
      return t->token_bytes(id);
    } catch (const Error&) {
      return {};  // an id of a padded vocabulary the tokenizer does not have
    }
  }
  return id < 256 ? std::string(1, static_cast<char>(id)) : std::string();
}

TokenInfo token_info(const infer::TextCodec& codec, const GeneratedToken& t) {
  TokenInfo info;
  info.text = token_text(codec, t.id);
  info.logprob = t.logprob;
  for (const TokenLogprob& alt : t.top) info.top.emplace_back(token_text(codec, alt.id), alt.logprob);
  return info;
}

// One generation as the handler tracks it: the request, its text so far, the reply's parts.
struct Job {
  ApiRequest request;
  std::shared_ptr<RequestState> state;
  std::unique_ptr<TextStream> text;
  ReplyHeader header;
  Usage usage;
  std::string prefix;  // echo: the prompt's text, sent first
  std::vector<TokenInfo> logprobs;
  bool first_chunk = true;
  bool finished = false;
  EndReason end = EndReason::running;
};

}  // namespace

struct HttpServer::Impl {
  HttpOptions options;
  Metrics& metrics;
  httplib::Server http;
  std::mutex mutex;
  std::condition_variable changed;
  ServedModel model;        // guarded by mutex; null batcher: loading
  bool draining = false;
  int active = 0;           // generation requests being answered
  std::int64_t started = std::time(nullptr);

  Impl(HttpOptions o, Metrics& m) : options(std::move(o)), metrics(m) {}

  // The model, or an error reply (loading, draining, failed). Counts the request as active.
  bool begin_generation(httplib::Response& res, ServedModel& out) {
    std::lock_guard lock(mutex);
    if (model.batcher == nullptr) {
      send_error(res, api_error(503, "the model is still loading: retry when GET /health answers 200", "server_error"));
      return false;
    }
    if (draining) {
      send_error(res, api_error(503, "the server is shutting down", "server_error"));
      return false;
    }
    out = model;
    ++active;
    return true;
  }

  void end_generation() {
    {
      std::lock_guard lock(mutex);
      --active;
    }
    changed.notify_all();
  }

  void install_routes();
  void generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  std::unique_ptr<Job> make_job(Endpoint endpoint, const httplib::Request& req, const ServedModel& m);
  void reply_whole(Job& job, const ServedModel& m, httplib::Response& res);
  void reply_stream(std::shared_ptr<Job> job, ServedModel m, httplib::Response& res);
  // Takes the tokens of one update into the job: text, logprobs, usage. Returns the new text.
  std::string absorb(Job& job, const ServedModel& m, const RequestState::Update& u);
  void record_outcome(const Job& job, EndReason end);
};

HttpServer::HttpServer(HttpOptions options, Metrics& metrics)
    : impl_(std::make_unique<Impl>(std::move(options), metrics)) {
  impl_->install_routes();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  const HttpOptions& o = impl_->options;
  if (o.port < 0 || o.port > 65535) throw Error(fmt::format("--port {} is not a TCP port (0..65535)", o.port), "--port");
  if (o.port == 0) {
    const int port = impl_->http.bind_to_any_port(o.host);
    if (port < 0) throw Error(fmt::format("cannot listen on {} (any port)", o.host), "--host", "give an address of this machine");
    return port;
  }
  if (!impl_->http.bind_to_port(o.host, o.port)) {
    throw Error(fmt::format("cannot listen on {}:{}: the port is taken or the address is not this machine's", o.host, o.port),
                "--port", "give a free --port (or 0 for any) and an address of this machine to --host");
  }
  return o.port;
}

bool HttpServer::run() { return impl_->http.listen_after_bind(); }

void HttpServer::set_model(ServedModel model) {
  std::lock_guard lock(impl_->mutex);
  impl_->model = model;
}

void HttpServer::drain(std::chrono::milliseconds deadline) {
  Batcher* batcher = nullptr;
  {
    std::lock_guard lock(impl_->mutex);
    impl_->draining = true;
    batcher = impl_->model.batcher;
  }
  if (batcher != nullptr) batcher->drain();
  std::unique_lock lock(impl_->mutex);
  if (!impl_->changed.wait_for(lock, deadline, [&] { return impl_->active == 0; }) && batcher != nullptr) {
    log::warn("strata serve: {} request(s) still running at the drain deadline: cancelled", impl_->active);
    batcher->cancel_all();
    impl_->changed.wait_for(lock, std::chrono::seconds(5), [&] { return impl_->active == 0; });
  }
}

void HttpServer::stop() {
  if (impl_->http.is_running()) impl_->http.stop();
}

void HttpServer::Impl::install_routes() {
  http.new_task_queue = [n = options.max_connections] { return new httplib::ThreadPool(static_cast<std::size_t>(n)); };
  http.set_payload_max_length(options.max_body_bytes);
  http.set_keep_alive_timeout(5);
  http.set_read_timeout(30);
  http.set_write_timeout(30);
  http.set_default_headers({{"Access-Control-Allow-Origin", "*"}});

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.method == "OPTIONS") {  // a browser's CORS preflight
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.status = 204;
      return httplib::Server::HandlerResponse::Handled;
    }
    if (options.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string bearer = "Bearer ";
    const std::string given = auth.compare(0, bearer.size(), bearer) == 0 ? auth.substr(bearer.size()) : std::string();
    if (!constant_time_equal(given, options.api_key)) {
      send_error(res, api_error(401,
                                auth.empty() ? "You didn't provide an API key: send it as 'Authorization: Bearer KEY'"
                                             : "Incorrect API key provided",
                                "invalid_request_error", "", "invalid_api_key"));
      metrics.request_done(Outcome::invalid);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  // Whatever left a 4xx / 5xx without a body (unknown path, wrong method, a body over the limit)
  // gets OpenAI's error JSON.
  http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message;
    switch (res.status) {
      case 404: message = fmt::format("no such endpoint: {} {}", req.method, req.path); break;
      case 405: message = fmt::format("{} does not take {}", req.path, req.method); break;
      case 413: message = fmt::format("the request body is larger than {} bytes (--max-body)", options.max_body_bytes); break;
      default: message = fmt::format("the request failed ({})", res.status);
    }
    send_error(res, api_error(res.status, message, res.status >= 500 ? "server_error" : "invalid_request_error"));
    if (res.status < 500) metrics.request_done(Outcome::invalid);
    return httplib::Server::HandlerResponse::Handled;
  }));

  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "an unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, api_error(500, "internal error: " + what, "server_error"));
  });

  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard lock(mutex);
    json j;
    if (model.batcher == nullptr) {
      j = {{"status", "loading"}};
    } else if (const std::string f = model.batcher->failure(); !f.empty()) {
      j = {{"status", "error"}, {"message", f}};
    } else if (draining) {
      j = {{"status", "draining"}};
    } else {
      j = {{"status", "ok"}};
    }
    res.status = j["status"] == "ok" ? 200 : 503;
    res.set_content(dump(j), "application/json");
  });

  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(), "text/plain; version=0.0.4");
  });

  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json j = {{"object", "list"},
              {"data", json::array({{{"id", options.model_name}, {"object", "model"}, {"created", started}, {"owned_by", "strata"}}})}};
    res.set_content(dump(j), "application/json");
  });

  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(Endpoint::completions, req, res);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(Endpoint::chat, req, res);
  });
}

void HttpServer::Impl::generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  ServedModel m;
  if (!begin_generation(res, m)) {
    metrics.request_done(Outcome::rejected);
    return;
  }
  std::unique_ptr<Job> job;
  try {
    job = make_job(endpoint, req, m);
  } catch (const ApiException& e) {
    send_error(res, e.error());
    metrics.request_done(Outcome::invalid);
    end_generation();
    return;
  }
  switch (m.batcher->submit(job->state)) {
    case Admission::accepted: break;
    case Admission::queue_full:
      res.set_header("Retry-After", "1");
      send_error(res, api_error(429, fmt::format("the server is busy: {} requests are waiting (--max-queue); retry later",
                                                 m.batcher->queued()),
                                "rate_limit_error", "", "rate_limit_exceeded"));
      metrics.request_done(Outcome::rejected);
      end_generation();
      return;
    case Admission::draining:
      send_error(res, api_error(503, "the server is shutting down", "server_error"));
      metrics.request_done(Outcome::rejected);
      end_generation();
      return;
    case Admission::failed:
      send_error(res, api_error(503, m.batcher->failure(), "server_error"));
      metrics.request_done(Outcome::rejected);
      end_generation();
      return;
  }
  if (job->request.stream) {
    reply_stream(std::shared_ptr<Job>(std::move(job)), m, res);  // end_generation when the stream ends
    return;
  }
  reply_whole(*job, m, res);
  end_generation();
}

std::unique_ptr<Job> HttpServer::Impl::make_job(Endpoint endpoint, const httplib::Request& req, const ServedModel& m) {
  const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    throw ApiException(api_error(400, "We could not parse the JSON body of your request: it is not valid JSON"));
  }
  auto job = std::make_unique<Job>();
  job->request = parse_request(endpoint, body);
  const ApiRequest& r = job->request;
  GenerationParams params;
  params.sampling = r.sampling;
  params.top_logprobs = r.top_logprobs;
  if (endpoint == Endpoint::chat) {
    if (m.chat == nullptr) {
      throw ApiException(api_error(400, "this model has no chat template (tokenizer_config.json has no chat_template): "
                                        "use /v1/completions, or restart strata serve with --chat-template FILE",
                                   "invalid_request_error", "messages"));
    }
    params.prompt = chat_prompt_ids(*m.chat, *m.codec, r.messages, r.enable_thinking);
  } else if (r.prompt_is_ids) {
    params.prompt = r.prompt_ids;
    for (std::int32_t id : params.prompt) {
      if (id >= m.vocab_size) {
        throw ApiException(api_error(400, fmt::format("token id {} is outside the vocabulary (0..{})", id, m.vocab_size - 1),
                                     "invalid_request_error", "prompt"));
      }
    }
  } else {
    try {
      params.prompt = m.codec->encode(r.prompt_text);
    } catch (const Error& e) {
      throw ApiException(api_error(400, fmt::format("the prompt cannot be tokenized: {}", e.what()), "invalid_request_error", "prompt"));
    }
  }
  const int P = static_cast<int>(params.prompt.size());
  if (P == 0) throw ApiException(api_error(400, "the prompt has no tokens", "invalid_request_error", "prompt"));
  const int max_prompt = options.max_prompt_tokens > 0 ? std::min(options.max_prompt_tokens, m.context - 1) : m.context - 1;
  if (P > max_prompt) {
    throw ApiException(api_error(400,
                                 fmt::format("This model's maximum context length is {} tokens, and a prompt may hold {}. "
                                             "However, your prompt has {} tokens: {} too many. Shorten the prompt.",
                                             m.context, max_prompt, P, P - max_prompt),
                                 "invalid_request_error", endpoint == Endpoint::chat ? "messages" : "prompt",
                                 "context_length_exceeded"));
  }
  const int limit = options.max_tokens > 0 ? options.max_tokens : m.context;
  if (r.max_tokens) {
    if (*r.max_tokens > limit) {
      throw ApiException(api_error(400, fmt::format("'max_tokens' is {}: this server allows at most {} (--max-tokens)", *r.max_tokens, limit),
                                   "invalid_request_error", "max_tokens"));
    }
    if (P + *r.max_tokens > m.context) {
      throw ApiException(api_error(400,
                                   fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                                               "tokens ({} in the prompt, {} for the completion): {} too many. Reduce the "
                                               "prompt or max_tokens.",
                                               m.context, P + *r.max_tokens, P, *r.max_tokens, P + *r.max_tokens - m.context),
                                   "invalid_request_error", "max_tokens", "context_length_exceeded"));
    }
    params.max_tokens = *r.max_tokens;
  } else {
    params.max_tokens = std::min(limit, endpoint == Endpoint::chat ? m.context - P : std::min(16, m.context - P));
  }
  job->usage.prompt_tokens = params.prompt.size();
  if (r.echo) job->prefix = r.prompt_is_ids ? m.codec->decode(params.prompt) : r.prompt_text;
  job->text = std::make_unique<TextStream>(*m.codec, r.stop);
  job->header.id = random_id(endpoint == Endpoint::chat ? "chatcmpl-" : "cmpl-");
  job->header.created = std::time(nullptr);
  job->header.model = options.model_name;
  job->header.endpoint = endpoint;
  job->state = std::make_shared<RequestState>(std::move(params));
  return job;
}

std::string HttpServer::Impl::absorb(Job& job, const ServedModel& m, const RequestState::Update& u) {
  std::string out;
  for (const GeneratedToken& t : u.tokens) {
    if (job.text->stopped()) break;
    out += job.text->add(t.id);
    if (job.request.top_logprobs >= 0) job.logprobs.push_back(token_info(*m.codec, t));
  }
  job.usage.completion_tokens = job.text->tokens();
  if (job.text->stopped()) {
    job.state->cancel();  // a stop string: the engine frees the row at its next step
  } else if (u.end != EndReason::running) {
    out += job.text->finish();
  }
  return out;
}

void HttpServer::Impl::record_outcome(const Job& job, EndReason end) {
  if (job.text->stopped()) {
    metrics.request_done(Outcome::stopped);
  } else if (end == EndReason::failed) {
    metrics.request_done(Outcome::failed);
  } else if (end == EndReason::cancelled) {
    metrics.request_done(Outcome::cancelled);
  } else {
    metrics.request_done(Outcome::ok);
  }
}

void HttpServer::Impl::reply_whole(Job& job, const ServedModel& m, httplib::Response& res) {
  std::string text = job.prefix;
  RequestState::Update u;
  do {
    u = job.state->wait(kPoll);
    text += absorb(job, m, u);
  } while (u.end == EndReason::running && !job.text->stopped());
  record_outcome(job, u.end);
  if (!job.text->stopped() && u.end == EndReason::failed) {
    send_error(res, api_error(500, u.error, "server_error"));
    return;
  }
  if (!job.text->stopped() && u.end == EndReason::cancelled) {
    send_error(res, api_error(503, "the request was cancelled: the server is shutting down", "server_error"));
    return;
  }
  const json reply = full_reply(job.header, text, finish_reason(u.end, job.text->stopped()), job.usage,
                                job.request.top_logprobs >= 0 ? &job.logprobs : nullptr);
  res.set_content(dump(reply), "application/json");
}

void HttpServer::Impl::reply_stream(std::shared_ptr<Job> job, ServedModel m, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  auto last_write = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, job, m, last_write](std::size_t, httplib::DataSink& sink) {
        auto send = [&](const json& j) {
          const std::string event = "data: " + dump(j) + "\n\n";
          *last_write = std::chrono::steady_clock::now();
          return sink.write(event.data(), event.size());
        };
        if (job->finished) return false;
        if (job->first_chunk && (job->request.endpoint == Endpoint::chat || !job->prefix.empty())) {
          // The role (chat) or the echoed prompt first, so the client sees the stream has begun.
          job->first_chunk = false;
          if (!send(chunk(job->header, job->prefix, nullptr, nullptr, nullptr, true))) return false;
        }
        const RequestState::Update u = job->state->wait(kPoll);
        const std::size_t before = job->logprobs.size();
        const std::string text = absorb(*job, m, u);
        const bool ended = job->text->stopped() || u.end != EndReason::running;
        if (!text.empty() || job->logprobs.size() > before) {
          const std::vector<TokenInfo> fresh(job->logprobs.begin() + static_cast<std::ptrdiff_t>(before), job->logprobs.end());
          const bool first = job->first_chunk;
          job->first_chunk = false;
          if (!send(chunk(job->header, text, job->request.top_logprobs >= 0 ? &fresh : nullptr, nullptr, nullptr, first))) {
            return false;
          }
        }
        if (!ended) {
          if (std::chrono::steady_clock::now() - *last_write > kKeepAlive) {
            // A comment line: clients ignore it; a client that went away fails the write.
            *last_write = std::chrono::steady_clock::now();
            if (!sink.write(": keep-alive\n\n", 14)) return false;
          }
          return true;
        }
        job->finished = true;
        job->end = u.end;
        if (!job->text->stopped() && (u.end == EndReason::failed || u.end == EndReason::cancelled)) {
          const ApiError e = u.end == EndReason::failed ? api_error(500, u.error, "server_error")
                                                        : api_error(503, "the request was cancelled: the server is shutting down", "server_error");
          const std::string event = "data: " + error_body(e) + "\n\n";
          sink.write(event.data(), event.size());
        } else {
          const char* reason = finish_reason(u.end, job->text->stopped());
          const bool separate_usage = job->request.include_usage;
          if (!send(chunk(job->header, "", nullptr, reason, separate_usage ? nullptr : &job->usage, job->first_chunk))) {
            return false;
          }
          if (separate_usage && !send(usage_chunk(job->header, job->usage))) return false;
        }
        const std::string done = "data: [DONE]\n\n";
        sink.write(done.data(), done.size());
        sink.done();
        return true;
      },
      [this, job](bool) {
        // The stream ended: normally, or the client went away (then the engine frees the row).
        if (!job->finished) {
          job->state->cancel();
          record_outcome(*job, EndReason::cancelled);
        } else {
          record_outcome(*job, job->end);
        }
        end_generation();
      });
}

}  // namespace strata::serve
