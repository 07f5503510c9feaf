#!/usr/bin/env python3
"""`strata bench step` run small: the tiny preset, micro-batch 2 x 32 tokens, 3 steps per run
(one timed) x 2 rounds, --json, the scratch folder under WORK_DIR.

Checks exit 0; one JSON object per cell, the reference (placement "resident", stage 0) and the
nine placement x stage cells, each with finite positive step_ms, tokens_per_s, tflops,
busiest_ms, overlap and ratio_to_resident, overlap = step_ms / busiest_ms, the reference's
ratio 1 and one timed step per round; every cell with a CPU Adam carries offload_bound_ms =
max(the reference's step_ms, its cpu_adam_busy_ms) and vs_offload_bound = step_ms / that; every
cell its timed steps' grad_norms (clipping 1.0) and its speculative update counts; a progress
line per cell and round on stderr; the scratch folder removed. Then that --placements cpu
--stages 3,1 runs the reference, cpu stage 1 and cpu stage 3 alone, in that order; that --steps
2 (no timed step), --placements gpu and --stages 0 are refused naming their flag. Last, a run
whose process group gets SIGTERM once its reference has finished (a GPU lease running out) ends
by the signal and still prints the reference's line with its numbers, every line with
"stopped": true, the nine cells with an error saying they were not run (the one running was
interrupted), and no peer line (--peers torch: the peer never started).

Usage: check_bench_step.py STRATA WORK_DIR
"""
import json
import math
import re
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from bench_check_util import fail

NUMBERS = ("step_ms", "tokens_per_s", "tflops", "busiest_ms", "overlap", "ratio_to_resident")


def check_offload_bound(c, reference, run):
    norms = c.get("grad_norms")
    if not isinstance(norms, list) or len(norms) != 2 or not all(n > 0 for n in norms):
        fail(f"grad_norms {norms!r}: wanted the 2 timed steps' norms (clipping 1.0) in {c}", run)
    for key in ("speculative_updates", "speculative_redone"):
        if not isinstance(c.get(key), int) or c[key] < 0:
            fail(f"{key} = {c.get(key)!r} in {c}", run)
    if c["speculative_redone"] > c["speculative_updates"]:
        fail(f"more speculative updates redone than run in {c}", run)
    adam = c.get("cpu_adam_busy_ms")
    if adam is None:
        if "offload_bound_ms" in c:
            fail(f"an offload bound in a cell without a CPU Adam: {c}", run)
        return
    bound = max(reference["step_ms"], adam)
    if abs(c.get("offload_bound_ms", -1) - bound) > 1e-9 * bound:
        fail(f"offload_bound_ms is not max(resident step_ms, cpu_adam_busy_ms) in {c}", run)
    if abs(c.get("vs_offload_bound", -1) - c["step_ms"] / bound) > 1e-9 * c["step_ms"] / bound:
        fail(f"vs_offload_bound is not step_ms / offload_bound_ms in {c}", run)


def check_stopped(strata, folder, env):
    """SIGTERM to the bench's whole process group once its reference has finished, as `timeout`
    sends it (the running cell's strata train child gets it too)."""
    args = [strata, "bench", "step", "--preset", "tiny", "--batch", "2", "--seq-len", "32", "--steps", "3",
            "--rounds", "1", "--device", "host", "--peers", "torch", "--dir", folder, "--json"]
    child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             start_new_session=True)
    err = []
    for line in child.stderr:  # the reference's progress line: it has finished
        err.append(line)
        if line.startswith("[round 1/1, 1/10] resident"):
            os.killpg(child.pid, signal.SIGTERM)
            break
    rest_out, rest_err = child.communicate(timeout=60)
    run = subprocess.CompletedProcess(args, child.returncode, rest_out, "".join(err) + rest_err)
    if child.returncode != -signal.SIGTERM:
        fail(f"a bench step stopped by SIGTERM exited {child.returncode}, wanted the signal", run)
    lines = [json.loads(line) for line in rest_out.splitlines()]
    if not lines or lines[0].get("placement") != "resident" or not lines[0].get("step_ms", 0) > 0:
        fail("the stopped run did not print the reference it finished", run)
    if not all(line.get("stopped") is True for line in lines):
        fail("a line of the stopped run lacks \"stopped\": true", run)
    never = [line for line in lines[1:] if "not run" in line.get("error", "")]
    if len(never) != 9 or any("peer" in line for line in lines):
        fail(f"{len(never)} cells say they were not run (wanted all 9: the one running was "
             "interrupted), or a peer ran", run)
    if os.listdir(folder):
        fail(f"the stopped run left in {folder}: {os.listdir(folder)}", run)


def main():
    strata, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="bench-step-", dir=work)
    try:
        args = [strata, "bench", "step", "--preset", "tiny", "--batch", "2", "--seq-len", "32",
                "--steps", "3", "--rounds", "2", "--device", "host", "--dir", folder, "--json"]
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "2")
        run = subprocess.run(args, capture_output=True, text=True, timeout=90, env=env)
        if run.returncode != 0:
            fail(f"{' '.join(args)} exited {run.returncode}", run)
        cells = []
        for line in run.stdout.splitlines():
            try:
                cells.append(json.loads(line))
            except json.JSONDecodeError:
                fail(f"stdout line is not JSON: {line!r}", run)
        want = [("resident", 0)] + [(p, s) for p in ("device", "cpu", "nvme") for s in (1, 2, 3)]
        got = [(c.get("placement"), c.get("stage")) for c in cells]
        if got != want:
            fail(f"cells {got}, wanted {want}", run)
        for c in cells:
            if "error" in c:
                fail(f"cell failed: {c}", run)
            for key in NUMBERS:
                v = c.get(key)
                if not isinstance(v, (int, float)) or not math.isfinite(v) or not v > 0:
                    fail(f"{key} = {v!r} in {c}", run)
            if not isinstance(c.get("busiest"), str) or not c["busiest"]:
                fail(f"no busiest resource in {c}", run)
            if abs(c["overlap"] - c["step_ms"] / c["busiest_ms"]) > 1e-9 * c["overlap"]:
                fail(f"overlap is not step_ms / busiest_ms in {c}", run)
            if c.get("timed_steps") != 2:
                fail(f"timed_steps = {c.get('timed_steps')!r} (2 rounds of 1), in {c}", run)
            # The nvme cells carry the disk's time for their bytes, measured in the same run.
            if c["placement"] == "nvme":
                b = c["bytes_per_step"]
                bound, serial = c.get("disk_bound_ms"), c.get("disk_serial_ms")
                if not all(isinstance(v, (int, float)) and v > 0 for v in (bound, serial)):
                    fail(f"no disk bound in an nvme cell: {c}", run)
                if not bound <= serial + 1e-9 or b["nvme_read"] <= 0 or b["nvme_write"] <= 0:
                    fail(f"disk bound {bound} vs one after the other {serial}, bytes {b}: {c}", run)
                if abs(c["vs_disk"] - c["step_ms"] / bound) > 1e-9 * c["vs_disk"]:
                    fail(f"vs_disk is not step_ms / disk_bound_ms in {c}", run)
            elif "disk_bound_ms" in c:
                fail(f"a disk bound in a cell that is not nvme: {c}", run)
            check_offload_bound(c, cells[0], run)
        if abs(cells[0]["ratio_to_resident"] - 1) > 1e-12:
            fail(f"the reference's ratio is not 1: {cells[0]}", run)
        if not any(l.startswith("[disk] ") for l in run.stderr.splitlines()):
            fail("no [disk] line (the nvme cells' disk bound) on stderr", run)
        progress = [l for l in run.stderr.splitlines() if re.match(r"\[round [12]/2, \d+/10\] ", l)]
        if len(progress) != 20:
            fail(f"{len(progress)} progress lines on stderr, wanted 20 (10 cells x 2 rounds)", run)
        if os.listdir(folder):
            fail(f"left in {folder}: {os.listdir(folder)}", run)

        some = subprocess.run([strata, "bench", "step", "--preset", "tiny", "--batch", "2", "--seq-len", "32",
                               "--steps", "3", "--rounds", "1", "--placements", "cpu", "--stages", "3,1",
                               "--device", "host", "--dir", folder, "--json"],
                              capture_output=True, text=True, timeout=60, env=env)
        if some.returncode != 0:
            fail("--placements cpu --stages 3,1 failed", some)
        got = [(c.get("placement"), c.get("stage")) for c in map(json.loads, some.stdout.splitlines())]
        if got != [("resident", 0), ("cpu", 1), ("cpu", 3)]:
            fail(f"--placements cpu --stages 3,1 ran {got}", some)

        check_stopped(strata, folder, env)

        for flags, name in ((["--steps", "2"], "--steps"), (["--placements", "gpu"], "--placements"),
                            (["--stages", "0"], "--stages")):
            bad = subprocess.run([strata, "bench", "step", *flags, "--dir", folder],
                                 capture_output=True, text=True, timeout=30)
            if bad.returncode == 0 or name not in bad.stderr:
                fail(f"{' '.join(flags)} was not refused naming {name}", bad)
        print("ok:", len(cells), "cells;", run.stderr.splitlines()[-1] if run.stderr else "")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
