#pragma once
// The HTTP side of `strata serve`: cpp-httplib (Debian's libcpp-httplib-dev: maintained, a
// thread pool, chunked responses for server-sent events; see docs/serve.md for why) routes
//   POST /v1/completions, POST /v1/chat/completions   generation (serve/openai_api.h), streamed
//                                                     as server-sent events with "stream": true
//   GET  /v1/models                                   the one model served
//   GET  /health                                      200 {"status": "ok"}; 503 while loading,
//                                                     draining, or after the engine failed
//   GET  /metrics                                     Prometheus text (serve/metrics.h)
// Every error is OpenAI's JSON ({"error": {...}}) with a 4xx / 5xx status; no input takes the
// server down. With an API key, every request but /health needs "Authorization: Bearer KEY"
// (compared in constant time).
//
// Lifecycle: bind() (the port is known: 0 picks a free one) -> run() on a thread, answering
// /health "loading" -> set_model() once the model is loaded -> drain() on SIGTERM: new
// generation requests get 503, running ones finish up to the deadline, then stop().
// Threading: run() blocks its thread; the others may be called from any thread.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "infer/text_io.h"
#include "serve/batcher.h"
#include "serve/metrics.h"

namespace strata::models::chat {
class ChatTemplate;
}

namespace httplib {
class Server;
}

namespace strata::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";     // --host
  int port = 8000;                    // --port (0: any free port)
  std::string api_key;                // --api-key ("" = none)
  std::size_t max_body_bytes = 4u << 20;  // --max-body: larger bodies answer 413
  int max_connections = 64;           // --max-connections: connections served at once (threads)
  int max_prompt_tokens = 0;          // --max-prompt-tokens: 0 = the context less one
  int max_tokens = 0;                 // --max-tokens: the largest max_tokens a request may ask; 0 = the context
  std::string model_name;             // the name in /v1/models and replies
};

// What the generation handlers need once the model is loaded (all borrowed).
struct ServedModel {
  Batcher* batcher = nullptr;
  const infer::TextCodec* codec = nullptr;             // text in and out (bytes without a tokenizer)
  const models::chat::ChatTemplate* chat = nullptr;    // null: /v1/chat/completions answers 400
  int context = 0;                                     // positions per request
  int vocab_size = 0;
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, Metrics& metrics);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the address; returns the port. Throws strata::Error (naming --host / --port) when it
  // cannot.
  int bind();
  // Serves until stop(). Returns false when listening failed.
  bool run();
  void set_model(ServedModel model);
  // Refuses new generation requests from now; waits until every running one has ended, or
  // `deadline` passed (then cancels them and waits a moment for their replies to end).
  void drain(std::chrono::milliseconds deadline);
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::serve
