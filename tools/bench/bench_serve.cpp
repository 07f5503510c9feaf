// strata bench serve: `strata serve`'s throughput and latencies with N concurrent streaming
// clients over loopback, against `strata infer`'s batch throughput for the same requests at the
// same batch, measured in the same run: the server's HTTP and scheduling overhead as a ratio.
//
// Both sides load the same model the same way (infer/server.h), one after the other in this
// process. The requests: prompts of seeded random token ids, lengths uniform in
// [--prompt-min, --prompt-max], each generating exactly --output-tokens (the generation loop of
// `strata infer` gives every prompt of a batch the same budget, so the comparison does too; no
// end token is set, so none ends early).
//   infer: the generation loop, batch --batch, in prompt order: tokens/s = generated / its time.
//   serve: the batcher with --batch rows behind the HTTP server on 127.0.0.1; --clients threads,
//          each streaming one request after another ("logprobs": 0, so that every token is one
//          chunk and inter-token latency is seen per token). Output tokens/s = generated / the
//          wall time from the first request to the last reply; requests/s; time to first token
//          and inter-token latency, p50 / p99.
// vs_infer = serve output tokens/s / infer tokens/s (the target: >= 0.9 on the host).
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "infer/generator.h"
#include "infer/server.h"
#include "infer/text_io.h"
#include "models/registry.h"
#include "serve/batcher.h"
#include "serve/http_server.h"
#include "tools/bench/bench.h"

namespace strata::tools {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

infer::ServerSetup server_setup(const ServeBenchOptions& o, const models::ModelSpecPtr& spec, int prompt_T, int max_T) {
  infer::ServerSetup s;
  s.spec = spec;
  s.config = infer::inference_config(o.device.config_path, *spec);
  s.device = resolve_device_options(o.device);
  s.dtype = o.dtype;
  s.batch = o.batch;
  s.kv_cache = o.kv_cache;
  s.prompts = static_cast<std::size_t>(o.requests);
  s.prompt_T = prompt_T;
  s.max_T = max_T;
  s.seed = o.seed;
  return s;
}

struct InferSide {
  double seconds = 0;
  std::size_t tokens = 0;
};

InferSide run_infer(const ServeBenchOptions& o, const models::ModelSpecPtr& spec,
                    const std::vector<std::vector<std::int32_t>>& prompts, int prompt_T, int max_T) {
  infer::Server server(server_setup(o, spec, prompt_T, max_T), /*verbose=*/false);
  infer::GenerateOptions g;
  g.max_new_tokens = o.output_tokens;
  g.batch = o.batch;
  g.kv_cache = server.kv_cache_options();
  infer::Generator gen(server.model(), spec->vocab_size(), g, max_T, server.hooks());
  std::vector<infer::Prompt> ps(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    ps[i].index = i;
    ps[i].ids = prompts[i];
  }
  const infer::GenerateStats st = gen.run(ps, [](infer::Completion) {});
  return {st.prefill_seconds + st.decode_seconds, st.generated_tokens};
}

struct ServeSide {
  double seconds = 0;
  std::size_t tokens = 0;
  std::size_t requests = 0;
  std::vector<double> ttft, itl;
  std::string error;
};

ServeSide run_serve(const ServeBenchOptions& o, const models::ModelSpecPtr& spec,
                    const std::vector<std::vector<std::int32_t>>& prompts, int max_T) {
  infer::Server server(server_setup(o, spec, std::min(512, max_T), max_T), /*verbose=*/false);
  serve::Metrics metrics;
  serve::BatcherOptions bo;
  bo.max_batch = o.batch;
  bo.max_queue = o.requests;
  bo.context = max_T;
  bo.kv_cache = server.kv_cache_options();
  serve::Batcher batcher(server.model(), spec->vocab_size(), bo, server.hooks(), server.compute(), &metrics);
  const std::unique_ptr<infer::TextCodec> codec = infer::TextCodec::bytes();
  serve::HttpOptions ho;
  ho.port = 0;
  ho.model_name = "bench";
  ho.max_connections = o.clients + 4;
  serve::HttpServer http(ho, metrics);
  const int port = http.bind();
  std::thread listener([&] { http.run(); });
  serve::ServedModel served;
  served.batcher = &batcher;
  served.codec = codec.get();
  served.context = max_T;
  served.vocab_size = spec->vocab_size();
  http.set_model(served);

  ServeSide side;
  std::mutex mutex;
  std::atomic<std::size_t> next{0};
  auto client = [&] {
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(600);
    for (std::size_t i; (i = next.fetch_add(1)) < prompts.size();) {
      const json body = {{"prompt", prompts[i]}, {"max_tokens", o.output_tokens}, {"temperature", 0},
                         {"logprobs", 0}, {"stream", true}};
      const auto sent = Clock::now();
      std::vector<Clock::time_point> arrivals;
      std::string pending;
      std::size_t tokens = 0;
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.headers = {{"Content-Type", "application/json"}};
      req.body = body.dump();
      req.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
        pending.append(data, n);
        for (std::size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
          const std::string event = pending.substr(0, end);
          pending.erase(0, end + 2);
          if (event.rfind("data: {", 0) != 0) continue;
          const json j = json::parse(event.substr(6), nullptr, false);
          if (j.is_discarded() || !j.contains("choices") || j["choices"].empty()) continue;
          const json& lp = j["choices"][0]["logprobs"];
          const std::size_t k = lp.is_object() ? lp["tokens"].size() : 0;
          for (std::size_t t = 0; t < k; ++t) arrivals.push_back(Clock::now());
          tokens += k;
        }
        return true;
      };
      httplib::Response res;
      httplib::Error err = httplib::Error::Success;
      const bool sent_ok = cli.send(req, res, err);
      std::lock_guard lock(mutex);
      if (!sent_ok || res.status != 200) {
        side.error = sent_ok ? fmt::format("status {}", res.status) : httplib::to_string(err);
        return;
      }
      side.tokens += tokens;
      ++side.requests;
      if (!arrivals.empty()) side.ttft.push_back(seconds(arrivals.front() - sent));
      for (std::size_t t = 1; t < arrivals.size(); ++t) side.itl.push_back(seconds(arrivals[t] - arrivals[t - 1]));
    }
  };
  const auto t0 = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < o.clients; ++c) clients.emplace_back(client);
  for (std::thread& t : clients) t.join();
  side.seconds = seconds(Clock::now() - t0);
  http.stop();
  listener.join();
  return side;
}

}  // namespace

void bench_serve(const ServeBenchOptions& o) {
  if (o.clients < 1 || o.requests < 1 || o.batch < 1 || o.output_tokens < 1 || o.prompt_min < 1 ||
      o.prompt_max < o.prompt_min) {
    throw Error("--clients, --requests, --batch, --output-tokens and --prompt-min must be positive, and "
                "--prompt-max at least --prompt-min");
  }
  const models::ModelSpecPtr spec = models::model_from_flags(o.model, o.model.empty() ? o.preset : std::string());
  const int max_T = o.prompt_max + o.output_tokens;
  if (max_T > spec->max_positions()) {
    throw Error(fmt::format("--prompt-max {} + --output-tokens {} exceed the model's {} positions", o.prompt_max,
                            o.output_tokens, spec->max_positions()));
  }
  std::mt19937_64 rng(o.seed);
  std::vector<std::vector<std::int32_t>> prompts(static_cast<std::size_t>(o.requests));
  for (auto& p : prompts) {
    p.resize(static_cast<std::size_t>(std::uniform_int_distribution<int>(o.prompt_min, o.prompt_max)(rng)));
    for (auto& id : p) id = std::uniform_int_distribution<std::int32_t>(0, static_cast<std::int32_t>(spec->vocab_size()) - 1)(rng);
  }
  std::fprintf(stderr, "bench serve: %s, %d requests (prompts %d..%d tokens, %d out each), batch %d, %d clients\n",
               spec->describe().c_str(), o.requests, o.prompt_min, o.prompt_max, o.output_tokens, o.batch, o.clients);
  const InferSide inf = run_infer(o, spec, prompts, o.prompt_max, max_T);
  const ServeSide srv = run_serve(o, spec, prompts, max_T);
  if (!srv.error.empty()) throw Error("a bench client failed: " + srv.error);
  const double infer_tps = static_cast<double>(inf.tokens) / inf.seconds;
  const double serve_tps = static_cast<double>(srv.tokens) / srv.seconds;
  const json j = {{"bench", "serve"},
                  {"model", spec->describe()},
                  {"batch", o.batch},
                  {"clients", o.clients},
                  {"requests", srv.requests},
                  {"output_tokens", o.output_tokens},
                  {"prompt_tokens", {o.prompt_min, o.prompt_max}},
                  {"infer_tokens_per_s", infer_tps},
                  {"serve_tokens_per_s", serve_tps},
                  {"serve_requests_per_s", static_cast<double>(srv.requests) / srv.seconds},
                  {"ttft_p50_ms", 1e3 * percentile(srv.ttft, 0.5)},
                  {"ttft_p99_ms", 1e3 * percentile(srv.ttft, 0.99)},
                  {"itl_p50_ms", 1e3 * percentile(srv.itl, 0.5)},
                  {"itl_p99_ms", 1e3 * percentile(srv.itl, 0.99)},
                  {"vs_infer", serve_tps / infer_tps}};
  std::fprintf(stderr,
               "strata infer (batch %d):  %8.1f tokens/s\n"
               "strata serve (%d clients): %8.1f tokens/s, %.2f requests/s; time to first token p50 %.1f ms, p99 "
               "%.1f ms; inter-token p50 %.2f ms, p99 %.2f ms\n"
               "vs_infer: %.3f (the server's throughput / strata infer's at the same batch)\n",
               o.batch, infer_tps, o.clients, serve_tps, static_cast<double>(srv.requests) / srv.seconds,
               j["ttft_p50_ms"].get<double>(), j["ttft_p99_ms"].get<double>(), j["itl_p50_ms"].get<double>(),
               j["itl_p99_ms"].get<double>(), serve_tps / infer_tps);
  if (o.json) std::printf("%s\n", j.dump().c_str());
}

}  // namespace strata::tools
