// The step loop: forward and backward per micro-batch, the optimizer step, checkpoints, metrics.
#include "train/step_loop.h"

#include <chrono>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "runtime/telemetry/busy_tracker.h"
#include "runtime/telemetry/progress.h"
#include "runtime/telemetry/step_metrics.h"

namespace strata::train {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The mean of `value` over the ranks (the same on every rank).
double mean_over_ranks(runtime::comm::Communicator& comm, runtime::device::Device& device,
                       runtime::device::Stream& stream, double value) {
  if (comm.world() == 1) return value;
  runtime::device::DeviceBuffer buf = device.allocate(sizeof(float), "loss all-reduce");
  float host = static_cast<float>(value);
  stream.copy_async(buf.data(), &host, sizeof host);
  comm.all_reduce(buf.data(), buf.data(), 1, DType::f32, stream);
  stream.copy_async(&host, buf.data(), sizeof host);
  stream.synchronize();
  return static_cast<double>(host) / comm.world();
}

}  // namespace

RunTotals run_steps(Session& s, const TrainOptions& o, StartPoint start, Checkpointing* checkpoints, RunState& now) {
  RunTotals totals;
  runtime::telemetry::MetricsWriter metrics(s.rank0 ? o.metrics_path : std::string());
  runtime::telemetry::Progress progress(o.steps, std::cerr, s.rank0 && runtime::telemetry::stderr_is_terminal());
  runtime::telemetry::BusyTracker busy(*s.tracer);
  const double flops_per_token =
      (o.activation_checkpointing ? 8.0 : 6.0) * static_cast<double>(s.spec->num_params());
  const std::uint64_t tokens_per_step = static_cast<std::uint64_t>(s.B) * s.T * s.gas * s.comm->world();
  const double theory = collective_theory_bytes(s);
  runtime::zero::ZeroEngine& engine = *s.engine;

  std::vector<std::int32_t> inputs(static_cast<std::size_t>(s.B) * s.T), targets(inputs.size());
  std::uint64_t applied_steps = start.applied_steps;  // the scheduler advances only on steps not skipped (fp16)
  // Memory per tier after each phase of a step (the metrics carry it; the end report shows the
  // last step's).
  PhaseMemory& phases = totals.phases;
  for (std::uint64_t step = start.step; step < o.steps; ++step) {
    const Clock::time_point t0 = Clock::now();
    busy.begin_step();
    const runtime::zero::EngineCounters counters_before = engine.counters();
    const runtime::telemetry::LinkBytes bytes_before = link_bytes(counters_before);
    const double lr = s.schedule->lr(applied_steps);
    engine.begin_step(lr);
    double loss_sum = 0, forward_ms = 0, backward_ms = 0;
    for (int k = 0; k < s.gas; ++k) {
      s.loader->next(inputs.data(), targets.data());
      const Clock::time_point tf = Clock::now();
      loss_sum += s.model->forward(inputs.data(), targets.data(), s.B, s.T, true);
      forward_ms += ms_since(tf);
      if (k == 0) {
        const TierSnapshot snap = snapshot(s);
        phases.clear();
        phases.push_back({"device after forward", snap.device});
        phases.push_back({"pinned after forward", snap.pinned});
      }
      const Clock::time_point tb = Clock::now();
      s.model->backward(engine.backward_loss_scale());
      s.compute->synchronize();
      backward_ms += ms_since(tb);
    }
    {
      const TierSnapshot snap = snapshot(s);
      phases.push_back({"device after backward", snap.device});
      phases.push_back({"pinned after backward", snap.pinned});
    }
    const Clock::time_point ts = Clock::now();
    const runtime::zero::StepOutcome outcome = engine.step();
    const double optimizer_ms = ms_since(ts);
    if (!outcome.skipped) ++applied_steps;

    // Checkpoints: the save begun after the last step is published now; a new one starts when
    // due and writes while the next step computes. Its time at the boundary counts in step_ms.
    Checkpointing::Boundary boundary;
    double checkpoint_ms = 0;
    if (checkpoints != nullptr) {
      const Clock::time_point tc = Clock::now();
      boundary = checkpoints->after_step(step + 1, applied_steps, now);
      checkpoint_ms = ms_since(tc);
    }
    const double step_ms = ms_since(t0);

    runtime::telemetry::StepMetrics m;
    m.step = step + 1;
    m.loss = mean_over_ranks(*s.comm, *s.device, *s.compute, loss_sum / s.gas);
    m.lr = lr;
    m.step_ms = step_ms;
    m.tokens_per_s = static_cast<double>(tokens_per_step) / (step_ms / 1000.0);
    m.tflops = flops_per_token * m.tokens_per_s / 1e12;
    m.grad_norm = outcome.grad_norm;
    m.loss_scale = outcome.loss_scale;
    m.skipped = outcome.skipped;
    m.phase_ms = {{"forward", forward_ms}, {"backward", backward_ms}, {"optimizer", optimizer_ms}};
    if (checkpoints != nullptr) m.phase_ms.push_back({"checkpoint", checkpoint_ms});
    for (const runtime::checkpoint::SaveResult& r : boundary.saves) {
      m.checkpoints.push_back({r.step, r.ok, r.bytes, r.write_ms, r.wait_ms, r.publish_ms});
    }
    const runtime::zero::EngineCounters counters_after = engine.counters();
    m.bytes = minus(link_bytes(counters_after), bytes_before);
    m.speculative_updates = counters_after.speculative_updates - counters_before.speculative_updates;
    m.speculative_redone = counters_after.speculative_redone - counters_before.speculative_redone;
    totals.bytes += m.bytes;
    ++totals.steps;
    m.collective_theory_bytes = theory;
    const TierSnapshot snap = snapshot(s);
    m.device = snap.device;
    m.pinned = snap.pinned;
    m.nvme = snap.nvme;
    phases.push_back({"device after step", snap.device});
    phases.push_back({"pinned after step", snap.pinned});
    if (s.swap() != nullptr) phases.push_back({"nvme after step", snap.nvme});
    m.memory_at_phase = phases;
    s.device->flush_trace();  // the spans of GPU work that has completed (cuda: read by a thread)
    const runtime::telemetry::BusyTracker::Result b = busy.end_step();
    m.busiest = b.busiest;
    m.busiest_ms = b.busiest_ms;
    m.overlap = runtime::telemetry::overlap_ratio(step_ms, b.busiest_ms);
    m.busy_ms = b.per_track_ms;
    if (!std::isfinite(m.loss)) {
      throw Error("the loss is " + std::to_string(m.loss) + " at step " + std::to_string(m.step),
                  "optimizer.params.lr", "lower the learning rate, enable gradient_clipping, or use bf16");
    }
    metrics.write(m);
    if (s.rank0) progress.update(m);

    if (boundary.stop) {
      totals.stopped_by = checkpoints->stop_signal();
      if (s.rank0) {
        log::warn("stopped after step {} by a signal; resume with --resume {}", step + 1, o.checkpoint_dir);
      }
      break;
    }
  }
  if (s.rank0) progress.finish();
  return totals;
}

}  // namespace strata::train
