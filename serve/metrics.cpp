#include "serve/metrics.h"

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/tiers/tier.h"

namespace strata::serve {
namespace {

const char* outcome_name(int i) {
  static const char* const names[] = {"ok", "stopped", "cancelled", "failed", "rejected", "invalid"};
  return names[i];
}

std::string number(double v) { return fmt::format("{:.9g}", v); }

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  for (std::size_t i = 1; i < bounds_.size(); ++i) STRATA_ASSERT(bounds_[i - 1] < bounds_[i], "histogram bounds out of order");
}

void Histogram::observe(double value) {
  std::size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, const char* name, const char* help) const {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, number(bounds_[i]), cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, number(sum_), name,
                     count_);
}

Metrics::Metrics()
    : ttft_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60}),
      tpot_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      batch_sizes_({1, 2, 4, 8, 16, 32, 64, 128, 256}) {}

void Metrics::request_done(Outcome outcome) {
  std::lock_guard lock(mutex_);
  ++outcomes_[static_cast<int>(outcome)];
}

void Metrics::prompt_tokens(std::uint64_t n) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += n;
}

void Metrics::first_token(double seconds) {
  std::lock_guard lock(mutex_);
  ttft_.observe(seconds);
  ++generated_;
}

void Metrics::next_token(double seconds) {
  std::lock_guard lock(mutex_);
  tpot_.observe(seconds);
  ++generated_;
}

void Metrics::step(int rows, int running, int queued) {
  std::lock_guard lock(mutex_);
  batch_sizes_.observe(rows);
  batch_ = rows;
  running_ = running;
  queued_ = queued;
}

void Metrics::queue(int running, int queued) {
  std::lock_guard lock(mutex_);
  running_ = running;
  queued_ = queued;
}

void Metrics::streamed_bytes(std::uint64_t h2d, std::uint64_t nvme) {
  std::lock_guard lock(mutex_);
  h2d_ = h2d;
  nvme_ = nvme;
}

void Metrics::experts(std::uint64_t cached, std::uint64_t fetched, std::uint64_t host) {
  std::lock_guard lock(mutex_);
  experts_[0] = cached;
  experts_[1] = fetched;
  experts_[2] = host;
}

std::uint64_t Metrics::generated_tokens() const {
  std::lock_guard lock(mutex_);
  return generated_;
}

std::string Metrics::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  out += "# HELP strata_requests_total Requests finished, by outcome.\n# TYPE strata_requests_total counter\n";
  for (int i = 0; i < 6; ++i) out += fmt::format("strata_requests_total{{outcome=\"{}\"}} {}\n", outcome_name(i), outcomes_[i]);
  auto single = [&](const char* name, const char* type, const char* help, auto value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
  };
  single("strata_prompt_tokens_total", "counter", "Prompt tokens prefilled.", prompt_tokens_);
  single("strata_generation_tokens_total", "counter", "Tokens generated.", generated_);
  single("strata_requests_running", "gauge", "Requests holding a batch slot.", running_);
  single("strata_queue_length", "gauge", "Requests waiting for a batch slot.", queued_);
  single("strata_batch_size", "gauge", "Rows of the last decoding step.", batch_);
  ttft_.render(out, "strata_time_to_first_token_seconds", "From a request's arrival to its first generated token.");
  tpot_.render(out, "strata_time_per_output_token_seconds", "Between two generated tokens of one request.");
  batch_sizes_.render(out, "strata_step_batch_size", "Rows per decoding step.");
  out += "# HELP strata_streamed_bytes_total Bytes the inference engine streamed, by source tier.\n"
         "# TYPE strata_streamed_bytes_total counter\n";
  using runtime::tiers::Tier;
  out += fmt::format("strata_streamed_bytes_total{{tier=\"{}\"}} {}\n", runtime::tiers::tier_key(Tier::pinned), h2d_);
  out += fmt::format("strata_streamed_bytes_total{{tier=\"{}\"}} {}\n", runtime::tiers::tier_key(Tier::nvme), nvme_);
  if (experts_[0] + experts_[1] + experts_[2] > 0) {
    out += "# HELP strata_experts_total A mixture's routed experts computed, by where their weights were.\n"
           "# TYPE strata_experts_total counter\n";
    constexpr const char* kWhere[3] = {"cached", "fetched", "host"};
    for (int i = 0; i < 3; ++i) out += fmt::format("strata_experts_total{{where=\"{}\"}} {}\n", kWhere[i], experts_[i]);
  }
  return out;
}

}  // namespace strata::serve
