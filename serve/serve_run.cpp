// One `strata serve` run (serve_run.h), in the order its parts depend on each other: the signals,
// the listening socket, the model and its text codec and chat template, the batcher, then the
// wait for a signal and the drain.
#include "serve/serve_run.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "infer/server.h"
#include "infer/text_io.h"
#include "models/chat/chat_template.h"
#include "models/hf_weights.h"
#include "models/registry.h"
#include "runtime/device/device_config.h"
#include "serve/batcher.h"

namespace strata::serve {
namespace {

// SIGTERM and SIGINT through a self-pipe: the handler (any thread may run it: libraries such as
// OpenBLAS start threads before main, so no signal mask can cover every thread) only writes the
// signal's number into the pipe, and the threads that wait for it read it. The handler must be
// a plain function, so the pipe's write end is the one static here.
class SignalPipe {
 public:
  SignalPipe() {
    if (::pipe2(fds_, O_CLOEXEC) != 0) throw Error("cannot make the signal pipe", "strata serve");
    write_fd_ = fds_[1];
    struct sigaction sa {};
    sa.sa_handler = &SignalPipe::on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGTERM, &sa, &old_term_);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a signal
  }
  ~SignalPipe() {
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::sigaction(SIGINT, &old_int_, nullptr);
    write_fd_ = -1;
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  // Blocks until a signal (its number) or wake() (0).
  int wait() {
    unsigned char sig = 0;
    ssize_t n = 0;
    do {
      n = ::read(fds_[0], &sig, 1);
    } while (n < 0 && errno == EINTR);
    return n == 1 ? sig : 0;
  }
  void wake() { on_signal(0); }

 private:
  static void on_signal(int sig) {
    const int saved = errno;
    const auto byte = static_cast<unsigned char>(sig);
    if (write_fd_ >= 0) (void)!::write(write_fd_, &byte, 1);
    errno = saved;
  }
  static inline int write_fd_ = -1;
  int fds_[2] = {-1, -1};
  struct sigaction old_term_ {};
  struct sigaction old_int_ {};
};

std::string served_name(const ServeOptions& o) {
  if (!o.served_name.empty()) return o.served_name;
  if (o.model_path.empty()) return o.preset;
  std::filesystem::path p(o.model_path);
  if (!p.has_filename()) p = p.parent_path();  // "dir/" -> "dir"
  return p.filename().string();
}

// The folder's chat template, or --chat-template FILE (with the folder's bos / eos); none
// (completions only) when neither.
std::unique_ptr<models::chat::ChatTemplate> load_chat_template(const ServeOptions& o) {
  models::chat::ModelChatConfig c;
  if (!o.model_path.empty() && std::filesystem::is_directory(o.model_path)) c = models::chat::read_model_chat_config(o.model_path);
  if (!o.chat_template_path.empty()) {
    return std::make_unique<models::chat::ChatTemplate>(
        models::chat::ChatTemplate::from_file(o.chat_template_path, c.bos, c.eos));
  }
  if (!c.source) return nullptr;
  return std::make_unique<models::chat::ChatTemplate>(
      models::chat::ChatTemplate::from_source(std::move(*c.source), c.bos, c.eos, c.source_name));
}

}  // namespace

int run_serve(const ServeOptions& o) {
  SignalPipe signals;
  const auto start = std::chrono::steady_clock::now();
  const runtime::tiers::WeightQuant quant = infer::weight_quant(o.quantize, o.quantize_group);
  const models::ModelSpecPtr spec = models::model_from_flags(o.model_path, o.preset);
  const int context = o.context > 0 ? o.context : std::min(spec->max_positions(), 4096);
  if (context < 2 || context > spec->max_positions()) {
    throw Error(fmt::format("--ctx {}: the model holds 2..{} positions", context, spec->max_positions()), "--ctx");
  }
  if (o.max_batch < 1) throw Error("--max-batch must be at least 1", "--max-batch");
  if (o.prefill_chunk < 1) throw Error("--prefill-chunk must be at least 1", "--prefill-chunk");
  if (o.max_queue < 0) throw Error("--max-queue must not be negative", "--max-queue");
  if (o.http.max_connections < 1) throw Error("--max-connections must be at least 1", "--max-connections");
  if (o.drain_seconds < 0) throw Error("--drain-timeout must not be negative", "--drain-timeout");
  // The tokenizer and the chat template first: a template strata cannot render stops the start
  // before the weights are read.
  std::unique_ptr<infer::TextCodec> codec = o.model_path.empty() ? nullptr : infer::load_text_codec(o.model_path);
  if (codec == nullptr) {
    if (spec->vocab_size() < 256) {
      throw Error("the model has no tokenizer and a vocabulary under 256: it cannot read text", o.model_path.empty() ? "--preset" : o.model_path,
                  "give a model folder with tokenizer.json (or vocab.json and merges.txt)");
    }
    codec = infer::TextCodec::bytes();
    log::warn("the model has no tokenizer: text in and out as bytes (ids 0..255)");
  }
  const std::unique_ptr<models::chat::ChatTemplate> chat = load_chat_template(o);
  if (chat == nullptr) log::warn("the model has no chat template: /v1/chat/completions answers 400 (give --chat-template FILE)");

  Metrics metrics;
  HttpOptions http_options = o.http;
  http_options.model_name = served_name(o);
  HttpServer http(http_options, metrics);
  const int port = http.bind();
  std::thread listener([&] {
    if (!http.run()) log::error("strata serve: the HTTP server stopped listening");
  });
  std::fprintf(stderr, "strata serve: listening on http://%s:%d (loading %s)\n", http_options.host.c_str(), port,
               http_options.model_name.c_str());
  std::fflush(stderr);

  std::unique_ptr<infer::Server> server;
  std::unique_ptr<Batcher> batcher;
  try {
    infer::ServerSetup setup;
    setup.spec = spec;
    setup.config = infer::inference_config(o.config_path, *spec);
    setup.device = runtime::device::device_options(setup.config, o.device_kind, o.device_memory_bytes);
    setup.dtype = o.dtype;
    setup.batch = o.max_batch;
    setup.kv_cache = o.kv_cache;
    setup.prompts = static_cast<std::size_t>(o.max_batch);
    setup.prompt_T = std::min(o.prefill_chunk, context);
    setup.max_T = context;
    setup.weights = models::has_hf_weights(o.model_path) ? o.model_path : std::string();
    setup.seed = o.seed;
    setup.quant = quant;
    setup.expert_cache_mb = o.moe_expert_cache_mb;
    setup.moe_lookahead = o.moe_prefetch == "on";
    setup.moe_fetch_every_expert = o.moe_fetch == "all";
    setup.moe_cpu_experts = o.moe_cpu_experts;
    setup.profile_path = o.profile_path;
    if (setup.weights.empty()) log::warn("{} holds no weights: random weights from --seed {}", http_options.model_name, o.seed);
    server = std::make_unique<infer::Server>(std::move(setup), /*verbose=*/true);

    BatcherOptions bo;
    bo.max_batch = o.max_batch;
    bo.max_queue = o.max_queue;
    bo.prefill_chunk = o.prefill_chunk;
    bo.context = context;
    bo.kv_cache = server->kv_cache_options();
    bo.stop_ids = infer::generation_stop_ids(codec.get(), spec->stop_token_ids());
    // After every pass, on the engine thread: the bytes streamed so far (since the weights loaded).
    runtime::zero::InferenceEngine& engine = server->engine();
    const runtime::zero::EngineCounters loaded = engine.counters();
    infer::PassHooks hooks = server->hooks();
    hooks.end = [end = hooks.end, &engine, &metrics, loaded] {
      end();
      const runtime::zero::EngineCounters c = engine.counters();
      metrics.streamed_bytes(c.h2d_bytes - loaded.h2d_bytes, c.nvme_read_bytes - loaded.nvme_read_bytes);
      metrics.experts(c.expert_hits - loaded.expert_hits, c.expert_misses - loaded.expert_misses,
                      c.expert_host - loaded.expert_host);
    };
    batcher = std::make_unique<Batcher>(server->model(), spec->vocab_size(), bo, hooks, server->compute(), &metrics);
  } catch (...) {
    http.stop();
    listener.join();
    throw;
  }

  ServedModel served;
  served.batcher = batcher.get();
  served.codec = codec.get();
  served.chat = chat.get();
  served.context = context;
  served.vocab_size = spec->vocab_size();
  http.set_model(served);
  const double ready = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "strata serve: ready in %.2f s: http://%s:%d/v1 (%s, %d requests at once, %d positions each)\n",
               ready, http_options.host.c_str(), port, http_options.model_name.c_str(), o.max_batch, context);
  std::fflush(stderr);

  const int sig = signals.wait();
  std::fprintf(stderr, "strata serve: %s: draining (new requests get 503; running ones have %.0f s to finish; a "
               "second signal cancels them)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT", o.drain_seconds);
  std::fflush(stderr);
  std::thread second([&] {
    if (signals.wait() == 0) return;
    std::fprintf(stderr, "strata serve: a second signal: cancelling the running requests\n");
    batcher->cancel_all();
  });
  http.drain(std::chrono::milliseconds(static_cast<std::int64_t>(o.drain_seconds * 1000)));
  http.stop();
  listener.join();
  signals.wake();
  second.join();
  batcher.reset();
  std::fprintf(stderr, "strata serve: stopped after %llu generated tokens\n",
               static_cast<unsigned long long>(metrics.generated_tokens()));
  return 0;
}

}  // namespace strata::serve
