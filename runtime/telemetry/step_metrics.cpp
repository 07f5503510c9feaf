#include "runtime/telemetry/step_metrics.h"

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "runtime/tiers/tier.h"

namespace strata::runtime::telemetry {
namespace {

// ordered_json keeps the keys in the order written, so a line reads like the struct.
using Json = nlohmann::ordered_json;

Json tier_json(const TierMemory& t) {
  Json j = Json::object();
  j["current_bytes"] = t.current_bytes;
  j["peak_bytes"] = t.peak_bytes;
  j["budget_bytes"] = t.budget_bytes;
  j["allocated_bytes"] = t.allocated_bytes;
  return j;
}

}  // namespace

std::string to_json_line(const StepMetrics& m) {
  Json j = Json::object();
  j["step"] = m.step;
  j["loss"] = m.loss;
  j["lr"] = m.lr;
  j["step_ms"] = m.step_ms;
  j["tokens_per_s"] = m.tokens_per_s;
  j["tflops"] = m.tflops;
  j["grad_norm"] = m.grad_norm;
  j["loss_scale"] = m.loss_scale;
  j["skipped"] = m.skipped;
  Json phases = Json::object();
  for (const auto& [name, ms] : m.phase_ms) phases[name] = ms;
  j["phase_ms"] = std::move(phases);
  Json bytes = Json::object();
  bytes["nvme_read"] = m.bytes.nvme_read;
  bytes["nvme_write"] = m.bytes.nvme_write;
  bytes["h2d"] = m.bytes.h2d;
  bytes["d2h"] = m.bytes.d2h;
  bytes["collective"] = m.bytes.collective;
  j["bytes"] = std::move(bytes);
  j["collective_theory_bytes"] = m.collective_theory_bytes;
  Json memory = Json::object();
  using tiers::Tier;
  memory[tiers::tier_key(Tier::device)] = tier_json(m.device);
  memory[tiers::tier_key(Tier::pinned)] = tier_json(m.pinned);
  memory[tiers::tier_key(Tier::nvme)] = tier_json(m.nvme);
  j["memory"] = std::move(memory);
  Json at_phase = Json::object();
  for (const auto& [name, tier] : m.memory_at_phase) at_phase[name] = tier_json(tier);
  j["memory_at_phase"] = std::move(at_phase);
  j["busiest"] = m.busiest;
  j["busiest_ms"] = m.busiest_ms;
  j["overlap"] = m.overlap;
  Json busy = Json::object();
  for (const auto& [track, ms] : m.busy_ms) busy[track] = ms;
  j["busy_ms"] = std::move(busy);
  j["speculative"] = {{"updates", m.speculative_updates}, {"redone", m.speculative_redone}};
  if (!m.checkpoints.empty()) {
    Json list = Json::array();
    for (const CheckpointMetrics& c : m.checkpoints) {
      list.push_back({{"step", c.step}, {"ok", c.ok}, {"bytes", c.bytes}, {"write_ms", c.write_ms},
                      {"wait_ms", c.wait_ms}, {"publish_ms", c.publish_ms}});
    }
    j["checkpoints"] = std::move(list);
  }
  // Invalid UTF-8 in a name (a phase or track label) is replaced rather than thrown.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void MetricsWriter::Closer::operator()(std::FILE* f) const noexcept {
  // Every line was flushed by write(); a failure here has nothing left to lose but is logged.
  if (std::fclose(f) != 0) log::warn("closing the metrics file failed: {}", std::strerror(errno));
}

MetricsWriter::MetricsWriter(std::string path) : path_(std::move(path)) {
  if (path_.empty()) return;
  std::FILE* f = std::fopen(path_.c_str(), "w");
  if (f == nullptr) {
    throw system_error(errno, "create metrics file", path_,
                       "check that the folder of the metrics path exists and is writable");
  }
  file_.reset(f);
}

MetricsWriter::~MetricsWriter() = default;
MetricsWriter::MetricsWriter(MetricsWriter&&) noexcept = default;
MetricsWriter& MetricsWriter::operator=(MetricsWriter&&) noexcept = default;

void MetricsWriter::write(const StepMetrics& m) {
  if (!file_) return;
  std::string line = to_json_line(m);
  line += '\n';
  std::FILE* f = file_.get();
  errno = 0;
  const std::size_t written = std::fwrite(line.data(), 1, line.size(), f);
  // fwrite buffers: a full disk shows up only when the buffer is pushed to the file.
  const bool ok = written == line.size() && std::fflush(f) == 0;
  if (!ok) {
    const int e = errno != 0 ? errno : EIO;
    std::clearerr(f);
    throw system_error(e, "write metrics line (step " + std::to_string(m.step) + ")", path_,
                       "check free space and the health of the disk holding the metrics file");
  }
}

}  // namespace strata::runtime::telemetry
