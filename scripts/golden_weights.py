#!/usr/bin/env python3
"""The golden check of a refactor: the weights `strata train` computes, per cell, as hashes.

Runs a strata binary over stages 1-3 x optimizer placement (device / cpu / nvme; at stage 3 also
parameters on cpu and nvme), in fp32 and bf16, with clipping (updates posted after the global
norm) and without (posted as each gradient lands), gradient_accumulation_steps 2, at one rank,
and a few cells at two ranks (mpirun), on the tiny byte-level GPT for a few steps, and prints
one line per cell: the sha256 of the saved weights and of each checkpoint shard (master,
exp_avg, exp_avg_sq). Run it with the binary before and after a change and diff the outputs:

  scripts/golden_weights.py OLD/strata > before.txt
  scripts/golden_weights.py NEW/strata > after.txt
  diff before.txt after.txt && echo same bits

A binary that computes the same bits on this machine prints the same lines. (Host kernels use
OpenBLAS, whose kernels differ between CPU models: compare outputs made on one machine.)
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 5


def config(stage, opt, param, nvme, bf16, clip):
    zero = {"stage": stage, "sub_group_size": 40000,
            "offload_optimizer": {"pipeline_read": True, "pipeline_write": True}}
    if opt != "none":
        zero["offload_optimizer"].update({"device": opt, "nvme_path": [nvme]})
    if param != "none":
        zero["offload_param"] = {"device": param, "nvme_path": [nvme]}
        zero["stage3_param_persistence_threshold"] = 0
    c = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
         "gradient_clipping": clip,
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.1}},
         "zero_optimization": zero, "aio": {"block_size": 65536},
         "strata": {"device": "host", "cpu_threads": 2}}
    if bf16:
        c["bf16"] = {"enabled": True}
    return c


# Open MPI as root in a container without a remote shell (tests/train/train_util.py).
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMP_NUM_THREADS": "1",
           "OMPI_MCA_plm_rsh_agent": "false", "OMPI_MCA_btl": "self,vader",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none", "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def cells():
    for stage in (1, 2, 3):
        placements = [("none", "none"), ("cpu", "none"), ("nvme", "none")]
        if stage == 3:
            placements += [("cpu", "cpu"), ("nvme", "nvme")]
        for opt, param in placements:
            for bf16 in (False, True):
                for clip in (1.0, 0.0):
                    yield stage, opt, param, bf16, clip, 1
    # Two ranks: reduce-scatter / all-reduce, gathers, sharded states.
    for stage in (1, 2, 3):
        for opt, param in [("cpu", "none"), ("nvme", "none")] + ([("nvme", "nvme")] if stage == 3 else []):
            yield stage, opt, param, True, 1.0, 2


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def run_cell(strata, cell, work):
    stage, opt, param, bf16, clip, ranks = cell
    name = f"stage{stage} opt={opt} param={param} {'bf16' if bf16 else 'fp32'} clip={clip} ranks={ranks}"
    d = tempfile.mkdtemp(dir=work)
    nvme = os.path.join(d, "nvme")
    os.makedirs(nvme)
    cfg = os.path.join(d, "ds.json")
    with open(cfg, "w") as f:
        json.dump(config(stage, opt, param, nvme, bf16, clip), f)
    out = os.path.join(d, "w.safetensors")
    ck = os.path.join(d, "ck")
    cmd = [strata, "train", "--config", cfg, "--preset", "tiny", "--seq-len", "32",
           "--text", os.path.join(ROOT, "README.md"), "--seed", "7", "--steps", str(STEPS),
           "--save", out, "--checkpoint-dir", ck, "--checkpoint-every", str(STEPS), "--report", "none"]
    env = dict(os.environ, OMP_NUM_THREADS="2")
    if ranks > 1:
        cmd = ["mpirun", "-np", str(ranks)] + cmd
        env.update(MPI_ENV)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return f"{name}: FAILED rc={r.returncode}: {r.stderr.strip().splitlines()[-1:]}"
    step = os.path.join(ck, f"step-{STEPS:08d}")
    shards = sorted(f for f in os.listdir(step) if f.endswith(".bin") or f.startswith("shard"))
    parts = [f"weights={sha(out)}"] + [f"{s}={sha(os.path.join(step, s))}" for s in shards]
    return f"{name}: " + " ".join(parts)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    strata = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="strata-golden-") as work:
        for cell in cells():
            print(run_cell(strata, cell, work), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
