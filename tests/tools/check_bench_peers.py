#!/usr/bin/env python3
"""The peers of `strata bench step` (tools/bench/step_peers.py) without DeepSpeed or a GPU.

With PYTHON (default /usr/bin/python3, Debian's python3-torch): exit 77 (skipped) when it cannot
import torch. Else checks that step_peers.py
  - builds the DeepSpeed configs of the three DeepSpeed peers (stage, offload devices, nvme_path,
    micro-batch, clipping, bf16, AdamW's hyper-parameters);
  - refuses bad flags with argparse's exit 2 (no --peer, an unknown peer, --seq-len over
    --n-positions, deepspeed_zero3_nvme without --nvme-path, a CUDA-only peer on --device cpu);
  - --peer list: one JSON line listing every peer as importable or not, with a reason;
  - torch_resident on the CPU (tiny model, fp32 and bf16): exit 0, one JSON line with ok, the
    timed steps' step_ms (as many as --steps, positive) and finite losses, tokens_per_step;
  - each DeepSpeed / FSDP2 peer that `list` calls not importable: exit 3 and a JSON line with
    ok false, importable false and the reason (those that import here are not run: they would
    need a GPU);
then that `strata bench step --device host --peers torch --json` (tiny, 1 round) prints the ten
cells with device, model, stage, placement, tokens_per_s, resident_tokens_per_s, step_ms,
cpu_adam_busy_ms (a number or null with a note) and every <peer>_tokens_per_s (a number for
torch_resident, null for the others), then one peer line with tokens_per_s and vs_strata =
its tokens/s / strata's resident; and that --peers deepspeed on the host and an unknown peer are
refused naming --peers.

Usage: check_bench_peers.py STRATA SCRIPT WORK_DIR [PYTHON]
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

PEERS = ("torch_resident", "deepspeed_zero2_cpu", "deepspeed_zero3_cpu", "deepspeed_zero3_nvme",
         "fsdp2_cpu")
TINY = ["--vocab-size", "256", "--n-positions", "256", "--n-embd", "64", "--n-layer", "2",
        "--n-head", "2", "--batch", "2", "--seq-len", "16"]


def fail(message, run=None):
    print(f"FAIL: {message}", file=sys.stderr)
    if run is not None:
        print(f"--- stdout\n{run.stdout}--- stderr\n{run.stderr}", file=sys.stderr)
    sys.exit(1)


def one_json(run):
    lines = [l for l in run.stdout.splitlines() if l.strip()]
    if len(lines) != 1:
        fail(f"{len(lines)} lines on stdout, wanted one JSON line", run)
    try:
        j = json.loads(lines[0])
    except json.JSONDecodeError:
        fail("stdout is not JSON", run)
    if not isinstance(j, dict):
        fail("stdout is not a JSON object", run)
    return j


def main():
    strata, script, work = sys.argv[1], sys.argv[2], sys.argv[3]
    python = sys.argv[4] if len(sys.argv) > 4 else "/usr/bin/python3"
    if not os.access(python, os.X_OK) or subprocess.run([python, "-c", "import torch"],
                                                        capture_output=True).returncode != 0:
        print(f"skipped: {python} cannot import torch")
        return 77
    env = dict(os.environ, OMP_NUM_THREADS="1")

    # The DeepSpeed configs (no DeepSpeed needed to build them).
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    import step_peers
    a = step_peers.parse_args(["--peer", "deepspeed_zero3_nvme", "--nvme-path", "/x", "--batch", "3",
                               "--n-positions", "64", "--seq-len", "64", "--gradient-clipping", "0.5"])
    for stage, where in ((2, "cpu"), (3, "cpu"), (3, "nvme")):
        c = step_peers.deepspeed_config(a, stage, where)
        z = c["zero_optimization"]
        if z["stage"] != stage or z["offload_optimizer"]["device"] != where \
                or ("offload_param" in z) != (stage == 3) \
                or (stage == 3 and z["offload_param"]["device"] != where) \
                or (where == "nvme" and z["offload_optimizer"]["nvme_path"] != "/x") \
                or c["train_micro_batch_size_per_gpu"] != 3 or c["gradient_clipping"] != 0.5 \
                or c["bf16"] != {"enabled": True} or c["optimizer"]["type"] != "AdamW" \
                or c["optimizer"]["params"] != {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8,
                                                "weight_decay": 0.01}:
            fail(f"deepspeed_config stage {stage} {where}: {c}")

    def peers(*args, timeout=120):
        return subprocess.run([python, script, *args], capture_output=True, text=True,
                              timeout=timeout, env=env)

    for bad in ([], ["--peer", "nope"], ["--peer", "torch_resident", "--n-positions", "8"],
                ["--peer", "deepspeed_zero3_nvme"], ["--peer", "fsdp2_cpu", "--device", "cpu"]):
        run = peers(*bad)
        if run.returncode != 2 or "error:" not in run.stderr:
            fail(f"step_peers.py {' '.join(bad)} exited {run.returncode}, wanted 2", run)

    run = peers("--peer", "list", "--device", "cpu")
    listing = one_json(run)
    if run.returncode != 0 or not listing.get("ok"):
        fail("--peer list failed", run)
    named = set(listing["importable"]) | set(listing["not_importable"])
    if named != set(PEERS):
        fail(f"--peer list names {sorted(named)}", run)
    if "torch_resident" not in listing["importable"]:
        fail("torch_resident is not importable on the CPU with torch there", run)

    for dtype in ("fp32", "bf16"):
        run = peers("--peer", "torch_resident", "--device", "cpu", "--dtype", dtype, "--steps", "3",
                    "--warmup", "1", "--reference-dir",
                    os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
                        os.path.abspath(script)))), "tests", "reference"), *TINY)
        j = one_json(run)
        if run.returncode != 0 or not j.get("ok"):
            fail(f"torch_resident {dtype} failed", run)
        if j["peer"] != "torch_resident" or j["tokens_per_step"] != 32 or j["dtype"] != dtype:
            fail(f"torch_resident {dtype}: {j}", run)
        if len(j["step_ms"]) != 3 or not all(t > 0 for t in j["step_ms"]):
            fail(f"torch_resident {dtype} step_ms {j['step_ms']}", run)
        if not all(isinstance(l, float) and math.isfinite(l) for l in j["loss"]):
            fail(f"torch_resident {dtype} losses {j['loss']}", run)

    for peer, why in listing["not_importable"].items():
        args = ["--peer", peer, "--device", "cuda", *TINY]
        if peer == "deepspeed_zero3_nvme":
            args += ["--nvme-path", os.path.join(work, "ds-nvme")]
        run = peers(*args)
        j = one_json(run)
        if run.returncode != 3 or j.get("ok") is not False or j.get("importable") is not False \
                or not j.get("error") or j.get("peer") != peer:
            fail(f"{peer} (not importable: {why}) did not say so with exit 3", run)

    os.makedirs(work, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="bench-peers-", dir=work)
    try:
        args = [strata, "bench", "step", "--preset", "tiny", "--batch", "2", "--seq-len", "16",
                "--steps", "3", "--rounds", "1", "--device", "host", "--dir", folder, "--json",
                "--peers", "torch", "--python", python, "--peer-script", script]
        run = subprocess.run(args, capture_output=True, text=True, timeout=180, env=env)
        if run.returncode != 0:
            fail(f"{' '.join(args)} exited {run.returncode}", run)
        lines = [json.loads(l) for l in run.stdout.splitlines() if l.strip()]
        cells = [l for l in lines if "placement" in l]
        peer_lines = [l for l in lines if "peer" in l]
        if len(cells) != 10 or len(peer_lines) != 1 or len(lines) != 11:
            fail(f"{len(cells)} cells and {len(peer_lines)} peer lines, wanted 10 and 1", run)
        resident = cells[0]
        if (resident["placement"], resident["stage"]) != ("resident", 0):
            fail(f"first cell {resident}", run)
        for c in cells:
            for key in ("device", "model", "stage", "placement", "tokens_per_s",
                        "resident_tokens_per_s", "step_ms", "cpu_adam_busy_ms"):
                if key not in c:
                    fail(f"no {key} in {c}", run)
            if c["device"] != "host" or c["model"] != "tiny":
                fail(f"device/model in {c}", run)
            if c["resident_tokens_per_s"] != resident["tokens_per_s"]:
                fail(f"resident_tokens_per_s is not the reference's in {c}", run)
            if c["cpu_adam_busy_ms"] is None and not c.get("cpu_adam_busy_ms_note"):
                fail(f"cpu_adam_busy_ms null without a note in {c}", run)
            if not c["torch_resident_tokens_per_s"] > 0:
                fail(f"torch_resident_tokens_per_s in {c}", run)
            for peer in PEERS[1:]:
                if c.get(f"{peer}_tokens_per_s", 0) is not None:
                    fail(f"{peer}_tokens_per_s is not null in {c}", run)
        p = peer_lines[0]
        if p["peer"] != "torch_resident" or "error" in p or not p["tokens_per_s"] > 0:
            fail(f"peer line {p}", run)
        if abs(p["vs_strata"] - p["tokens_per_s"] / resident["tokens_per_s"]) > 1e-9 * p["vs_strata"]:
            fail(f"vs_strata is not tokens/s over strata's resident: {p}", run)
        if p["tokens_per_s"] != resident["torch_resident_tokens_per_s"]:
            fail("the peer line and the cells disagree on torch_resident_tokens_per_s", run)
        if "[peer 1/1] torch_resident: " not in run.stderr or "peers: " not in run.stderr:
            fail("no progress line or table for the peer on stderr", run)
        if os.listdir(folder):
            fail(f"left in {folder}: {os.listdir(folder)}", run)

        for bad in (["--peers", "deepspeed"], ["--peers", "torch,nope"]):
            run = subprocess.run([strata, "bench", "step", "--device", "host", "--dir", folder, *bad],
                                 capture_output=True, text=True, timeout=30)
            if run.returncode == 0 or "--peers" not in run.stderr:
                fail(f"{' '.join(bad)} on the host was not refused naming --peers", run)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print("ok: peers", listing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
