// CheckpointSaver: the shard write on the optimizer worker, the agreement, the publish.
#include "runtime/checkpoint/checkpoint_saver.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fcntl.h>
#include <unistd.h>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "runtime/checkpoint/shard_file.h"

namespace strata::runtime::checkpoint {
namespace {

// The error that ends the run when a save cannot read the run's own states (finish()).
Error state_read_failure(std::uint64_t step, const std::exception& e) {
  const std::string what = "reading the optimizer states for the checkpoint of step " + std::to_string(step) + ": ";
  if (const auto* error = dynamic_cast<const Error*>(&e)) {
    return Error(what + error->what_happened(), error->where(), error->hint());
  }
  return Error(what + e.what());
}

std::vector<ShardModule> shard_modules(const zero::ZeroEngine& engine) {
  std::vector<ShardModule> modules;
  for (int m = 0; m < engine.module_count(); ++m) {
    modules.push_back({engine.module_name(m), engine.module_numel(m), engine.shard_numel(m)});
  }
  return modules;
}

}  // namespace

std::uint64_t CheckpointSaver::checkpoint_bytes() const {
  const std::uint64_t shard = ShardLayout::make(0, engine_.shards(), shard_modules(engine_)).file_bytes;
  return shard * static_cast<std::uint64_t>(engine_.shards());
}

CheckpointSaver::CheckpointSaver(CheckpointDir dir, int keep_last, zero::ZeroEngine& engine, device::Device& device,
                                 comm::Communicator& comm, offload::AioEngine& io, CrashPoints& crash)
    : dir_(std::move(dir)), keep_last_(keep_last), engine_(engine), device_(device), comm_(comm), io_(io),
      crash_(crash) {
  if (keep_last < 0) {
    throw Error("checkpoint keep_last is " + std::to_string(keep_last), "--checkpoint-keep",
                "give the number of checkpoints to keep (0 keeps all)");
  }
  stream_ = device_.create_stream("checkpoint");
  if (comm_.rank() == 0) {
    const std::vector<std::string> leftovers = dir_.leftovers();
    for (const std::string& p : leftovers) {
      log::warn("{} is left from a run that stopped during a save or a removal: never loaded, removed now", p);
    }
    dir_.remove_leftovers();
  }
}

CheckpointSaver::~CheckpointSaver() {
  if (in_flight_) done_future_.wait();
  if (cleanup_.valid()) cleanup_.wait();
  close_meta();
}

void CheckpointSaver::close_meta() {
  if (meta_fd_ >= 0) ::close(meta_fd_);
  meta_fd_ = -1;
}

void CheckpointSaver::set_extra_files(std::vector<ExtraFile> files) {
  for (const ExtraFile& f : files) {
    STRATA_ASSERT(!f.name.empty() && f.name.find('/') == std::string::npos && f.name != kMetaFile &&
                      f.name != kManifestFile && f.name.rfind("shard-", 0) != 0,
                  "an extra checkpoint file needs a name of its own");
  }
  extra_files_ = std::move(files);
}

void CheckpointSaver::begin(std::uint64_t step, const std::string& meta_json) {
  STRATA_ASSERT(!in_flight_, "CheckpointSaver::begin with a save in flight: finish() it first");
  step_ = step;
  meta_error_.clear();
  shard_error_.clear();
  shard_file_ = {};
  write_ms_ = 0;
  close_meta();
  const std::string partial = dir_.partial_path(step);
  if (comm_.rank() == 0) {
    try {
      dir_.begin_partial(step);
      // Not fsynced here: finish() does, a step later. An fsync now would wait for the file
      // system's journal, which may be busy freeing the checkpoint removed a moment ago.
      // The descriptor stays open until that fsync, so that a write-back error in between is
      // reported to it (Linux reports one only to descriptors open when it happens).
      write_file(partial + "/" + kMetaFile, meta_json, /*sync=*/false);
      meta_fd_ = ::open((partial + "/" + kMetaFile).c_str(), O_RDONLY | O_CLOEXEC);
      if (meta_fd_ < 0) throw system_error(errno, "open", partial + "/" + kMetaFile);
      crash_.hit("write " + partial + "/" + kMetaFile);
      meta_file_ = {kMetaFile, meta_json.size(), xxh3_of(meta_json)};
      // Small (a tokenizer is a few MB): written now, fsynced in finish() with meta.json.
      extra_written_.clear();
      for (const ExtraFile& f : extra_files_) {
        write_file(partial + "/" + f.name, f.bytes, /*sync=*/false);
        extra_written_.push_back({f.name, f.bytes.size(), xxh3_of(f.bytes)});
      }
    } catch (const std::exception& e) {
      meta_error_ = e.what();
    }
  }
  if (comm_.world() > 1) comm_.barrier();  // the folder exists before any rank writes into it
  done_ = std::promise<void>();
  done_future_ = done_.get_future();
  in_flight_ = true;
  const bool writes_shard = engine_.shards() > 1 || comm_.rank() == 0;
  if (!writes_shard || !meta_error_.empty()) {
    done_.set_value();
    return;
  }
  // Until the task runs: the worker skips it after an earlier failure, and then no shard exists.
  shard_error_ = "the shard write did not run (an earlier optimizer update failed)";
  engine_.run_after_updates([this, step] { write_shard(step); }, [this] { done_.set_value(); });
}

void CheckpointSaver::write_shard(std::uint64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  shard_error_.clear();
  bool reading_state = false;
  try {
    const int shard = engine_.shard_index();
    const std::string path = dir_.partial_path(step) + "/" + shard_file_name(shard, engine_.shards());
    const std::size_t chunk = engine_.state_chunk_numel();
    ShardFileWriter writer(path, ShardLayout::make(shard, engine_.shards(), shard_modules(engine_)), io_, chunk * 4,
                           &crash_);
    for (int m = 0; m < engine_.module_count(); ++m) {
      const std::size_t numel = engine_.shard_numel(m);
      for (int k = 0; k < tiers::kOptimStates; ++k) {
        for (std::size_t off = 0; off < numel; off += chunk) {
          const std::size_t n = std::min(chunk, numel - off);
          float* buf = writer.buffer();
          reading_state = true;
          engine_.read_state(m, static_cast<tiers::OptimState>(k), off, n, buf);
          reading_state = false;
          writer.submit(n * 4, off + n == numel);
        }
      }
    }
    shard_file_ = writer.finish();
  } catch (const std::exception& e) {
    shard_error_ = e.what();
    if (reading_state) state_failure_ = state_read_failure(step, e);
  }
  write_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void CheckpointSaver::start_cleanup() {
  // Old checkpoints (renamed to .deleting by publish) are removed off the trainer thread; the
  // save that begins next is left alone (partial_too false). The removal before, if it still
  // runs a checkpoint interval later, is waited for here.
  try {
    if (cleanup_.valid()) cleanup_.wait();
    cleanup_ = std::async(std::launch::async, [this] { dir_.remove_leftovers(/*partial_too=*/false); });
  } catch (const std::exception& e) {
    log::warn("cannot start removing old checkpoints in the background ({}); they stay as .deleting folders",
              e.what());
  }
}

bool CheckpointSaver::agree(bool ok_here, std::uint64_t bytes, std::uint64_t xxh3, Manifest* manifest) {
  manifest->step = step_;
  manifest->shards = engine_.shards();
  manifest->files = {meta_file_};
  manifest->files.insert(manifest->files.end(), extra_written_.begin(), extra_written_.end());
  const int world = comm_.world();
  // Per rank: ok, bytes and checksum as 32-bit words, moved bit for bit by an all-gather.
  constexpr std::size_t kWords = 6;
  std::uint32_t mine[kWords] = {ok_here ? 1u : 0u, 0u, static_cast<std::uint32_t>(bytes),
                                static_cast<std::uint32_t>(bytes >> 32), static_cast<std::uint32_t>(xxh3),
                                static_cast<std::uint32_t>(xxh3 >> 32)};
  std::vector<std::uint32_t> all(kWords * static_cast<std::size_t>(world));
  if (world == 1) {
    std::memcpy(all.data(), mine, sizeof mine);
  } else {
    device::DeviceBuffer buf = device_.allocate(all.size() * 4, "checkpoint agreement");
    std::uint32_t* slot = buf.as<std::uint32_t>() + static_cast<std::size_t>(comm_.rank()) * kWords;
    stream_->copy_async(slot, mine, sizeof mine);
    comm_.all_gather(slot, buf.data(), kWords, DType::f32, *stream_);
    stream_->copy_async(all.data(), buf.data(), all.size() * 4);
    stream_->synchronize();
  }
  bool ok = true;
  for (int r = 0; r < world; ++r) {
    const std::uint32_t* w = all.data() + static_cast<std::size_t>(r) * kWords;
    ok = ok && w[0] == 1u;
    const bool owns_shard = engine_.shards() > 1 || r == 0;
    if (!owns_shard) continue;
    const int shard = engine_.shards() > 1 ? r : 0;
    manifest->files.push_back({shard_file_name(shard, engine_.shards()),
                               static_cast<std::uint64_t>(w[2]) | (static_cast<std::uint64_t>(w[3]) << 32),
                               static_cast<std::uint64_t>(w[4]) | (static_cast<std::uint64_t>(w[5]) << 32)});
  }
  return ok;
}

std::optional<SaveResult> CheckpointSaver::finish() {
  if (!in_flight_) return std::nullopt;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  done_future_.wait();
  in_flight_ = false;
  // Note [A state that cannot be read ends the run]: the save read the run's own states from
  // their tier (an NVMe extent, say) and that failed. The checkpoint's folder is not at fault,
  // and the run's only copy of its states is: this ends the run as the same failure would in a
  // step, rather than being one more failed save that training goes on after. The partial
  // folder is removed by the next run's saver (remove_leftovers). With several ranks the others
  // are ended by the error handler (comm::end_job_after_error), not by agreeing here.
  if (state_failure_) {
    const Error failure = *state_failure_;
    state_failure_.reset();
    throw failure;
  }
  const Clock::time_point t1 = Clock::now();
  SaveResult r;
  r.wait_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  r.step = step_;
  r.bytes = shard_file_.bytes;
  r.write_ms = write_ms_;
  r.error = !meta_error_.empty() ? meta_error_ : shard_error_;
  Manifest manifest;
  bool ok = agree(r.error.empty(), shard_file_.bytes, shard_file_.xxh3, &manifest);
  if (comm_.rank() == 0) {
    const std::string partial = dir_.partial_path(step_);
    if (ok) {
      try {
        if (::fsync(meta_fd_) != 0) throw system_error(errno, "fsync", partial + "/" + kMetaFile);
        close_meta();
        for (const ManifestFile& f : extra_written_) fsync_path(partial + "/" + f.name);
        crash_.hit("fsync " + partial + "/" + kMetaFile);
        write_file_atomic(partial + "/" + kManifestFile, manifest.to_json(), &crash_);
        dir_.publish(step_, keep_last_, &crash_);
        r.path = dir_.final_path(step_);
      } catch (const std::exception& e) {
        r.error = e.what();
        ok = false;
      }
      if (ok) start_cleanup();
    } else if (r.error.empty()) {
      r.error = "another rank could not write its shard file (see its log)";
    }
    if (!ok) {
      std::error_code ec;
      std::filesystem::remove_all(partial, ec);
    }
    close_meta();
  }
  // Rank 0's publish may have failed after every shard was written: every rank learns it.
  r.ok = !comm::any_rank(comm_, device_, *stream_, !ok);
  if (!r.ok && r.error.empty()) r.error = "rank 0 could not publish the checkpoint (see its log)";
  r.publish_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
  return r;
}

}  // namespace strata::runtime::checkpoint
