#pragma once
// strata bench step's peers (Note [The peers]): the same model and shapes trained by PyTorch,
// DeepSpeed and FSDP2, each a Python child (tools/bench/step_peers.py), which --peers selects.
#include <cstddef>
#include <string>
#include <vector>

#include "models/gpt/gpt_config.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_children.h"

namespace strata::tools::step_bench {

// The placement name of bench step's reference cell (stage 0, nothing offloaded): its first cell,
// and the cell torch_resident is compared with.
inline constexpr const char* kReference = "resident";

// Note [The peers]
// Each peer is `PYTHON step_peers.py --peer NAME` with the model's config, --batch, --seq-len,
// --dtype, --gradient-clipping, --checkpointing, AdamW as the cells have it (lr 1e-3, weight decay
// 0.01, betas 0.9/0.999, eps 1e-8), --warmup kWarmupSteps and as many timed steps as a strata cell
// has over all rounds; random token ids. Its stdout's last JSON line is its result; its stderr
// goes to the scratch folder (to ours with --verbose), and its last line is the row's error when
// the JSON says nothing. The strata cell each is compared with:
//   torch_resident        resident (stage 0)     PyTorch, fp32 parameters + autocast, AdamW
//   deepspeed_zero2_cpu   cpu, stage 2           ZeRO-Offload
//   deepspeed_zero3_cpu   cpu, stage 3
//   deepspeed_zero3_nvme  nvme, stage 3          ZeRO-Infinity, swap folder --nvme-path
//   fsdp2_cpu             cpu, stage 3           FSDP2 + CPUOffloadPolicy
// DeepSpeed and FSDP2 need CUDA; torch_resident runs on the CPU with --device host.
struct PeerSpec {
  const char* name;
  const char* group;      // what --peers names it by, besides its name
  const char* title;
  const char* placement;  // the strata cell it is compared with
  int stage;
};

// Every peer, in the order bench step runs and prints them.
inline constexpr PeerSpec kPeers[] = {
    {"torch_resident", "torch", "PyTorch resident", kReference, 0},
    {"deepspeed_zero2_cpu", "deepspeed", "DeepSpeed ZeRO-2, optimizer on CPU", "cpu", 2},
    {"deepspeed_zero3_cpu", "deepspeed", "DeepSpeed ZeRO-3, params + optimizer on CPU", "cpu", 3},
    {"deepspeed_zero3_nvme", "deepspeed", "DeepSpeed ZeRO-3, params + optimizer on NVMe", "nvme", 3},
    {"fsdp2_cpu", "fsdp2", "PyTorch FSDP2, CPUOffloadPolicy", "cpu", 3},
};

// The peers --peers names, in kPeers' order. Throws strata::Error naming --peers for an unknown
// name, and for a peer that needs CUDA without --device cuda.
std::vector<const PeerSpec*> select_peers(const StepBenchOptions& o);

struct Peer {
  const PeerSpec* spec = nullptr;
  std::string error;      // not empty: it failed or could not be imported
  double step_ms = 0, tokens_per_s = 0;
  std::size_t timed_steps = 0;
  double seconds = 0;     // wall time of the child
  Json info;              // its JSON line (versions, model, optimizer, ...)
};

// Runs one peer (Note [The peers]): `python` on `script`, its stderr to `log_path`; the peer
// deepspeed_zero3_nvme swaps to `nvme_path`; `reference_dir` (may be empty) is tests/reference.
Peer run_peer(const StepBenchOptions& o, const models::GptConfig& model, const PeerSpec& spec,
              const std::string& python, const std::string& script, const std::string& reference_dir,
              const std::string& nvme_path, const std::string& log_path);

}  // namespace strata::tools::step_bench
