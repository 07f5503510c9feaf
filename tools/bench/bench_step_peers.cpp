#include "tools/bench/bench_step_peers.h"

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "tools/bench/bench_scripts.h"

namespace strata::tools::step_bench {

// The peers --peers names, in kPeers' order. Throws strata::Error naming --peers for an unknown
// name, and for a peer that needs CUDA without --device cuda.
std::vector<const PeerSpec*> select_peers(const StepBenchOptions& o) {
  std::vector<std::string> names = split_list(o.peers);
  if (names.size() == 1 && names[0] == "auto") {
    names = {o.device == "cuda" ? "all" : "none"};
  }
  std::vector<const PeerSpec*> out;
  for (const PeerSpec& p : kPeers) {
    for (const std::string& n : names) {
      if (n == "all" || n == p.name || n == p.group) {
        out.push_back(&p);
        break;
      }
    }
  }
  for (const std::string& n : names) {
    const bool known = n == "all" || n == "none" ||
                       std::any_of(std::begin(kPeers), std::end(kPeers),
                                   [&](const PeerSpec& p) { return n == p.name || n == p.group; });
    if (!known) {
      throw Error(fmt::format("unknown peer \"{}\"", n), "--peers",
                  "give auto, all, none, or a comma-separated list of torch, deepspeed, fsdp2, "
                  "torch_resident, deepspeed_zero2_cpu, deepspeed_zero3_cpu, deepspeed_zero3_nvme, fsdp2_cpu");
    }
    if (n == "none" && names.size() > 1) {
      throw Error("--peers none with other peers", "--peers", "give none alone");
    }
  }
  if (o.device == "auto" && !out.empty()) {
    throw Error("--peers with --device auto: the peers need to know where the cells ran", "--device",
                "give --device cuda or host");
  }
  if (o.device != "cuda") {
    for (const PeerSpec* p : out) {
      if (std::string(p->name) != "torch_resident") {
        throw Error(fmt::format("the peer {} needs CUDA, and the bench runs with --device {}", p->name,
                                o.device),
                    "--peers", "give --device cuda, or --peers torch (PyTorch on the CPU) or none");
      }
    }
  }
  return out;
}

namespace {

// The last line of `text` that is not blank.
std::string last_line(const std::string& text) {
  std::istringstream in(text);
  std::string last;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  return last;
}

}  // namespace

// Runs one peer (Note [The peers]).
Peer run_peer(const StepBenchOptions& o, const models::GptConfig& model, const PeerSpec& spec,
              const std::string& python, const std::string& script, const std::string& reference_dir,
              const std::string& nvme_path, const std::string& log_path) {
  Peer peer;
  peer.spec = &spec;
  const int timed = o.rounds * (o.steps - kWarmupSteps);
  std::string command = fmt::format(
      "{} {} --peer {} --vocab-size {} --n-positions {} --n-embd {} --n-layer {} --n-head {} "
      "--layer-norm-epsilon {} --batch {} --seq-len {} --steps {} --warmup {} --dtype {} --device {} "
      "--lr 1e-3 --betas 0.9 0.999 --eps 1e-8 --weight-decay 0.01 --gradient-clipping {}",
      shell_quote(python), shell_quote(script), spec.name, model.vocab_size, model.n_positions, model.n_embd,
      model.n_layer, model.n_head, model.layer_norm_epsilon, o.batch, o.seq_len, timed, kWarmupSteps,
      o.dtype, o.device == "cuda" ? "cuda" : "cpu", o.gradient_clipping);
  if (o.checkpointing) command += " --checkpointing";
  if (std::string(spec.name) == "deepspeed_zero3_nvme") command += " --nvme-path " + shell_quote(nvme_path);
  if (!reference_dir.empty()) command += " --reference-dir " + shell_quote(reference_dir);
  command += " </dev/null 2>" + shell_quote(log_path);
  if (o.verbose) std::fprintf(stderr, "%s\n", command.c_str());
  std::fflush(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    peer.error = fmt::format("cannot start {}", python);
    return peer;
  }
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) out += buf;
  const int status = pclose(pipe);
  peer.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Its result: the last line of stdout that is its JSON (DeepSpeed prints on stdout too).
  Json result;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    Json j = Json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.value("peer", std::string()) == spec.name) result = std::move(j);
  }
  const std::string how = WIFEXITED(status) ? fmt::format("exit status {}", WEXITSTATUS(status))
                                            : fmt::format("killed by signal {}", WTERMSIG(status));
  std::string log;
  if (std::FILE* f = std::fopen(log_path.c_str(), "r")) {
    while (std::fgets(buf, sizeof buf, f) != nullptr) log += buf;
    std::fclose(f);
  }
  if (o.verbose) std::fprintf(stderr, "%s%s", out.c_str(), log.c_str());
  if (!result.is_object()) {
    const std::string last = last_line(log);
    peer.error = fmt::format("{}no result from {} ({})", last.empty() ? "" : last + "; ",
                             std::filesystem::path(script).filename().string(), how);
    return peer;
  }
  peer.info = result;
  if (!result.value("ok", false)) {
    peer.error = (result.value("importable", true) ? "" : "not importable: ") +
                 result.value("error", std::string("failed"));
    return peer;
  }
  std::vector<double> ms;
  if (result.contains("step_ms") && result["step_ms"].is_array()) {
    for (const Json& v : result["step_ms"]) {
      if (v.is_number()) ms.push_back(v.get<double>());
    }
  }
  const double tokens = number(result, "tokens_per_step");
  if (ms.empty() || !(tokens > 0)) {
    peer.error = "its JSON lacks step_ms or tokens_per_step";
    return peer;
  }
  peer.timed_steps = ms.size();
  peer.step_ms = median(ms);
  peer.tokens_per_s = tokens / (peer.step_ms / 1e3);
  if (!std::isfinite(peer.tokens_per_s) || peer.tokens_per_s <= 0) {
    peer.error = "its step times are not positive";
  }
  return peer;
}

}  // namespace strata::tools::step_bench
