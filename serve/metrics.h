#pragma once
// What `strata serve` counts, and GET /metrics: the Prometheus text exposition format (0.0.4).
//
//   strata_requests_total{outcome}          finished requests: ok, stopped (client stop or stop
//                                           string), cancelled (client went away), failed, rejected
//                                           (429 / 503 before generation), invalid (4xx)
//   strata_prompt_tokens_total              prompt tokens prefilled
//   strata_generation_tokens_total          tokens generated
//   strata_requests_running, strata_queue_length, strata_batch_size   gauges (the last step's)
//   strata_time_to_first_token_seconds      histogram: request received -> first token generated
//   strata_time_per_output_token_seconds    histogram: between two tokens of one request
//   strata_step_batch_size                  histogram: rows per decoding step
//   strata_streamed_bytes_total{tier}       bytes the inference engine moved to the device from
//                                           pinned host memory (h2d) and read from NVMe
//   strata_experts_total{where}             a mixture's routed experts computed: "cached" (found
//                                           on the device), "fetched" (copied for it), "host"
//                                           (computed on the host, --moe-cpu-experts); none for a
//                                           dense model
//
// Threading: every member function is thread-safe (one mutex: a few updates per step).
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace strata::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // upper bounds, increasing; +Inf is implied
  void observe(double value);
  // The metric's lines (# HELP, # TYPE, _bucket, _sum, _count).
  void render(std::string& out, const char* name, const char* help) const;

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  // per bound, not cumulative; last = over every bound
  double sum_ = 0.0;
  std::uint64_t count_ = 0;
};

enum class Outcome { ok, stopped, cancelled, failed, rejected, invalid };

class Metrics {
 public:
  Metrics();

  void request_done(Outcome outcome);
  void prompt_tokens(std::uint64_t n);
  void first_token(double seconds);
  void next_token(double seconds_since_previous);
  void step(int rows, int running, int queued);
  void queue(int running, int queued);
  void streamed_bytes(std::uint64_t h2d, std::uint64_t nvme);  // totals so far
  void experts(std::uint64_t cached, std::uint64_t fetched, std::uint64_t host);  // totals so far

  std::uint64_t generated_tokens() const;
  std::string render() const;

 private:
  mutable std::mutex mutex_;
  std::uint64_t outcomes_[6] = {};
  std::uint64_t prompt_tokens_ = 0;
  std::uint64_t generated_ = 0;
  int running_ = 0, queued_ = 0, batch_ = 0;
  std::uint64_t h2d_ = 0, nvme_ = 0;
  std::uint64_t experts_[3] = {};  // cached, fetched, host
  Histogram ttft_;
  Histogram tpot_;
  Histogram batch_sizes_;
};

}  // namespace strata::serve
