// The checks of a run's options that need nothing read or built.
#include "train/train_options.h"

#include <filesystem>
#include <system_error>

#include <unistd.h>

#include "core/error.h"

namespace strata::train {

void check_output_path(const std::string& path, const char* flag) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    throw Error(std::string(flag) + " " + path + " is a folder", flag, "give a file name");
  }
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  if (!fs::is_directory(parent, ec)) {
    throw Error(std::string(flag) + " " + path + ": the folder " + parent.string() + " does not exist", flag,
                "create it first or give another path");
  }
  if (::access(parent.c_str(), W_OK) != 0) {
    throw Error(std::string(flag) + " " + path + ": the folder " + parent.string() + " is not writable", flag,
                "give a path in a folder you can write to");
  }
}

void check_save_path(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty() || (path.size() > 12 && path.ends_with(".safetensors"))) {
    check_output_path(path, "--save");
    return;
  }
  std::error_code ec;
  if (fs::exists(path, ec)) {
    if (!fs::is_directory(path, ec)) {
      throw Error("--save " + path + " is a file", "--save",
                  "give a folder for the Hugging Face layout, or a name ending in .safetensors for one file");
    }
    for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
      const std::string name = e.path().filename().string();
      if (name.starts_with("model") && name.find(".safetensors") != std::string::npos) {
        throw Error("--save " + path + " already holds model weights (" + name + ")", "--save",
                    "give a new or empty folder: weights of two runs are never mixed");
      }
    }
    if (::access(path.c_str(), W_OK) != 0) {
      throw Error("--save " + path + " is not writable", "--save", "give a folder you can write to");
    }
    return;
  }
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  if (!fs::is_directory(parent, ec) || ::access(parent.c_str(), W_OK) != 0) {
    throw Error("--save " + path + ": the folder " + parent.string() + " does not exist or is not writable",
                "--save", "create it first or give another path");
  }
}

void check_options(const TrainOptions& o) {
  if (o.config_path.empty()) {
    throw Error("no config was given", "--config", "give --config ds.json (DeepSpeed-style JSON)");
  }
  if (o.steps == 0) throw Error("--steps must be at least 1", "--steps", "give the number of optimizer steps");
  check_save_path(o.save_path);
  check_output_path(o.trace_path, "--trace");
  check_output_path(o.metrics_path, "--metrics");
  if (!o.resume_path.empty() && !o.init_path.empty()) {
    throw Error("both --resume and --init were given", "--init",
                "--resume continues a run with its weights and optimizer states; drop --init");
  }
  if (o.save_shard_bytes == 0) throw Error("--save-shard-size must be positive", "--save-shard-size", "e.g. 5GB");
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) {
    throw Error("--checkpoint-every needs --checkpoint-dir", "--checkpoint-every", "give --checkpoint-dir D");
  }
}

}  // namespace strata::train
