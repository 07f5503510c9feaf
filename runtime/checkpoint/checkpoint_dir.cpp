// CheckpointDir: partial folders, the atomic publish, `latest`, keep_last, resolving --resume.
#include "runtime/checkpoint/checkpoint_dir.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"

namespace strata::runtime::checkpoint {
namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "step-";
constexpr const char* kPartialSuffix = ".partial";
constexpr const char* kDeletingSuffix = ".deleting";

void rename_or_throw(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    const int e = errno;
    throw system_error(e, "rename", from + " -> " + to, "check the folder's permissions and free space");
  }
}

}  // namespace

std::string checkpoint_name(std::uint64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%08llu", kPrefix, static_cast<unsigned long long>(step));
  return buf;
}

std::optional<std::uint64_t> checkpoint_step(const std::string& name) {
  const std::string prefix = kPrefix;
  if (name.size() <= prefix.size() || name.size() > prefix.size() + 19 ||
      name.compare(0, prefix.size(), prefix) != 0) {
    return std::nullopt;
  }
  std::uint64_t step = 0;
  for (std::size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    step = step * 10 + static_cast<std::uint64_t>(name[i] - '0');
  }
  return step;
}

void write_file_atomic(const std::string& path, const std::string& text, CrashPoints* crash) {
  if (crash == nullptr) return strata::write_file_atomic(path, text);
  strata::write_file_atomic(path, text, [crash](const std::string& step) { crash->hit(step); });
}

CheckpointDir::CheckpointDir(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  if (!fs::is_directory(path_, ec)) {
    if (fs::exists(path_, ec)) {
      throw Error("the checkpoint folder " + path_ + " is a file", "--checkpoint-dir", "give a folder");
    }
    // Every rank makes it: another may have made it in between.
    if (!fs::create_directory(path_, ec) && !fs::is_directory(path_)) {
      throw Error("cannot create the checkpoint folder " + path_ + ": " + ec.message(), "--checkpoint-dir",
                  "create its parent folder first, or give another path");
    }
  }
  if (::access(path_.c_str(), W_OK) != 0) {
    throw Error("the checkpoint folder " + path_ + " is not writable", "--checkpoint-dir",
                "give a folder you can write to");
  }
}

std::string CheckpointDir::partial_path(std::uint64_t step) const {
  return path_ + "/." + checkpoint_name(step) + kPartialSuffix;
}

std::string CheckpointDir::final_path(std::uint64_t step) const { return path_ + "/" + checkpoint_name(step); }

std::string CheckpointDir::begin_partial(std::uint64_t step) const {
  const std::string p = partial_path(step);
  std::error_code ec;
  fs::remove_all(p, ec);
  if (!fs::create_directory(p, ec)) {
    throw Error("cannot create " + p + ": " + (ec ? ec.message() : std::string("it exists")), p,
                "check the checkpoint folder's permissions and free space");
  }
  return p;
}

void CheckpointDir::publish(std::uint64_t step, int keep_last, CrashPoints* crash) const {
  const std::string partial = partial_path(step);
  const std::string final_dir = final_path(step);
  fsync_path(partial);
  std::error_code ec;
  if (fs::exists(final_dir, ec)) {
    // A checkpoint of this step exists (a run resumed from an earlier step reaches it again):
    // swap the two folders in one atomic rename, so that step-N is always one complete
    // checkpoint or the other; the old one then goes the way of a pruned one.
    if (::renameat2(AT_FDCWD, partial.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0) {
      const int e = errno;
      throw system_error(e, "renameat2 (RENAME_EXCHANGE)", partial + " <-> " + final_dir,
                         "this file system cannot swap folders atomically: move " + final_dir +
                             " out of the checkpoint folder and resume again");
    }
    fsync_path(path_);
    if (crash) crash->hit("exchange " + partial + " <-> " + final_dir);
    const std::string old = path_ + "/." + checkpoint_name(step) + kDeletingSuffix;
    fs::remove_all(old, ec);
    rename_or_throw(partial, old);
  } else {
    rename_or_throw(partial, final_dir);
  }
  fsync_path(path_);
  if (crash) crash->hit("rename " + partial + " -> " + final_dir);
  write_file_atomic(path_ + "/latest", checkpoint_name(step) + "\n", crash);

  // The checkpoint is published; keeping the last ones is best effort from here on.
  if (keep_last > 0) {
    try {
      prune(step, keep_last, crash);
    } catch (const std::exception& e) {
      log::warn("checkpoint {} is published, but removing older checkpoints failed: {}", final_dir, e.what());
    }
  }
}

void CheckpointDir::prune(std::uint64_t step, int keep_last, CrashPoints* crash) const {
  // Only checkpoints up to `step` count: later ones come from before a resume from an earlier
  // step, and are left alone (the run reports them at start).
  std::vector<std::uint64_t> steps;
  for (std::uint64_t s : complete_steps()) {
    if (s <= step) steps.push_back(s);
  }
  if (steps.size() <= static_cast<std::size_t>(keep_last)) return;
  steps.resize(steps.size() - static_cast<std::size_t>(keep_last));
  for (std::uint64_t s : steps) {
    const std::string doomed = path_ + "/." + checkpoint_name(s) + kDeletingSuffix;
    std::error_code ec;
    fs::remove_all(doomed, ec);
    rename_or_throw(final_path(s), doomed);
    if (crash) crash->hit("rename " + final_path(s) + " -> " + doomed);
  }
  fsync_path(path_);
}

std::vector<std::uint64_t> CheckpointDir::complete_steps() const { return complete_checkpoint_steps(path_); }

std::vector<std::uint64_t> complete_checkpoint_steps(const std::string& dir) {
  std::vector<std::uint64_t> steps;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::optional<std::uint64_t> step = checkpoint_step(e.path().filename().string());
    if (step && fs::is_regular_file(e.path() / kManifestFile, ec)) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<std::string> CheckpointDir::leftovers() const { return checkpoint_leftovers(path_); }

std::vector<std::string> checkpoint_leftovers(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const auto ends_with = [&](const std::string& suffix) {
      return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (name.rfind(".step-", 0) == 0 && (ends_with(kPartialSuffix) || ends_with(kDeletingSuffix))) {
      found.push_back(e.path().string());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

void CheckpointDir::remove_leftovers(bool partial_too) const {
  for (const std::string& p : leftovers()) {
    if (!partial_too && p.size() > std::strlen(kPartialSuffix) &&
        p.compare(p.size() - std::strlen(kPartialSuffix), std::string::npos, kPartialSuffix) == 0) {
      continue;
    }
    std::error_code ec;
    fs::remove_all(p, ec);
    if (ec) log::warn("cannot remove {}: {}", p, ec.message());
  }
}

std::string resolve_checkpoint(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    throw Error("--resume " + path + ": no such folder", "--resume",
                "give a checkpoint folder (step-NNNNNNNN) or the --checkpoint-dir that holds `latest`");
  }
  if (fs::is_regular_file(fs::path(path) / kManifestFile, ec)) return path;
  const std::string latest = path + "/latest";
  if (!fs::is_regular_file(latest, ec)) {
    // A run killed between publishing its first checkpoint (the rename to step-N) and writing
    // `latest` leaves step-N and no `latest`; a run without --resume refuses the folder (it
    // holds checkpoints), so --resume must take it. step-N is complete by construction and is
    // what `latest` was about to name. (A later save cannot leave this: `latest` names the
    // previous checkpoint until it is replaced in one rename.)
    const std::vector<std::uint64_t> steps = complete_checkpoint_steps(path);
    if (!steps.empty()) {
      const std::string target = path + "/" + checkpoint_name(steps.back());
      log::warn("{} has no `latest` (a run stopped between publishing {} and writing it): resuming from {}", path,
                checkpoint_name(steps.back()), target);
      return target;
    }
    std::string hint = "give a checkpoint folder (step-NNNNNNNN) or the --checkpoint-dir that holds `latest`";
    const std::vector<std::string> partial = checkpoint_leftovers(path);
    if (!partial.empty()) hint += "; " + partial.front() + " is a save that did not finish and cannot be loaded";
    throw Error("--resume " + path + " holds no checkpoint: neither manifest.json nor latest is there", "--resume",
                hint);
  }
  std::string name = read_text_file(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (!checkpoint_step(name)) {
    throw Error(latest + " does not name a checkpoint (it holds \"" + name + "\")", latest,
                "give a checkpoint folder (step-NNNNNNNN) to --resume instead");
  }
  const std::string target = path + "/" + name;
  if (!fs::is_regular_file(fs::path(target) / kManifestFile, ec)) {
    throw Error(latest + " names " + name + ", which is not a complete checkpoint", latest,
                "give an older checkpoint folder (step-NNNNNNNN) to --resume");
  }
  return target;
}

}  // namespace strata::runtime::checkpoint
