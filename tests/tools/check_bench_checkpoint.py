#!/usr/bin/env python3
"""`strata bench checkpoint` run small: the tiny preset, micro-batch 2 x 32 tokens, 4 steps per
run (step 3 timed) x 2 rounds, the cpu and nvme placements, --json, the scratch folder under
WORK_DIR.

Checks exit 0; one JSON object per placement, cpu then nvme, at stage 3, each with finite
positive step_ms, checkpoint_step_ms, step_ratio, boundary_ms, checkpoint_bytes, write_ms,
write_gbps, limit_gbps and write_ratio, the ratios and the cost per checkpoint consistent with
their parts, a shard file that holds at least the three fp32 states of every parameter (12 bytes
each) in whole 4 KiB blocks, one timed step per round; a progress line per run and the table on
stderr; the scratch folder removed. Then that --steps 3 (no timed step), an unknown placement
and a missing --dir are refused naming their flag. No timing is asserted.

Usage: check_bench_checkpoint.py STRATA WORK_DIR
Exit 0 on success, 1 on failure, 77 (skipped) when O_DIRECT does not work in WORK_DIR.
"""
import math
import os
import re
import shutil
import sys
import tempfile

from bench_check_util import close, fail, refused, run_json_bench

POSITIVE = ("step_ms", "checkpoint_step_ms", "step_ratio", "boundary_ms", "checkpoint_bytes",
            "write_ms", "write_gbps", "limit_gbps", "write_ratio")


def refused_flags(strata, extra, flag):
    refused([strata, "bench", "checkpoint", "--preset", "tiny"] + extra, flag)


def main():
    strata, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="bench-checkpoint-", dir=work)
    try:
        args = [strata, "bench", "checkpoint", "--preset", "tiny", "--batch", "2", "--seq-len", "32",
                "--steps", "4", "--rounds", "2", "--placements", "cpu,nvme", "--device", "host",
                "--dir", folder, "--json"]
        run, rows = run_json_bench(args)
        got = [(r.get("placement"), r.get("stage")) for r in rows]
        if got != [("cpu", 3), ("nvme", 3)]:
            fail(f"rows {got}, wanted cpu and nvme at stage 3", run)
        params = re.search(r"\((\d+) params\)", run.stderr)
        if params is None:
            fail("the header on stderr does not give the parameter count", run)
        params = int(params.group(1))
        for r in rows:
            if "error" in r:
                fail(f"row failed: {r}", run)
            for key in POSITIVE:
                v = r.get(key)
                if not isinstance(v, (int, float)) or not math.isfinite(v) or not v > 0:
                    fail(f"{key} = {v!r} in {r}", run)
            if not close(r["step_ratio"], r["checkpoint_step_ms"] / r["step_ms"]):
                fail(f"step_ratio is not checkpoint_step_ms / step_ms in {r}", run)
            if not close(r["ms_per_checkpoint"], r["checkpoint_step_ms"] - r["step_ms"]):
                fail(f"ms_per_checkpoint is not checkpoint_step_ms - step_ms in {r}", run)
            if not close(r["write_ratio"], r["write_gbps"] / r["limit_gbps"]):
                fail(f"write_ratio is not write_gbps / limit_gbps in {r}", run)
            if r["checkpoint_bytes"] < 12 * params or r["checkpoint_bytes"] % 4096 != 0:
                fail(f"a shard of {r['checkpoint_bytes']} bytes cannot hold the master, exp_avg and "
                     f"exp_avg_sq of {params} parameters in 4 KiB blocks: {r}", run)
            if r.get("timed_steps") != 2:
                fail(f"timed_steps = {r.get('timed_steps')!r} (2 rounds of 1), in {r}", run)
        progress = [l for l in run.stderr.splitlines() if re.match(r"\[round [12]/2, [1-8]/8\] ", l)]
        if len(progress) != 8:
            fail(f"{len(progress)} progress lines on stderr, wanted 8 (2 placements x 2 runs x 2 rounds)", run)
        table = [l for l in run.stderr.splitlines() if re.match(r"(cpu|nvme) +\d", l)]
        if len(table) != 2:
            fail("the table on stderr does not have a row per placement", run)
        if os.listdir(folder):
            fail(f"left in {folder}: {os.listdir(folder)}", run)

        refused_flags(strata, ["--dir", folder, "--steps", "3"], "--steps")
        refused_flags(strata, ["--dir", folder, "--placements", "cpu,disk"], "--placements")
        refused_flags(strata, ["--dir", os.path.join(folder, "missing")], "--dir")
        print("ok:", len(rows), "placements;", run.stderr.splitlines()[-1] if run.stderr else "")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
