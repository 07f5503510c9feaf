#!/usr/bin/env python3
"""`strata bench checksum` run small: --size 8M in 1 MiB blocks and 2 MiB extents, --threads 1,2,
--reps 2; the step on the tiny preset, micro-batch 2 x 32 tokens, 3 steps per run (step 3 timed)
x 2 rounds, --device host, --json, the scratch folder under WORK_DIR.

Checks exit 0; one JSON object per cell in order: hash at 1 and 2 threads, swap, step. Every rate
and time finite and positive, one per round in the *_runs lists, the medians the medians of
those lists, and the ratios computed from them as documented: hash ratio_to_memcpy = hash_gbps /
memcpy_gbps, swap ratio = on_ms / off_ms, step ratio = on_step_ms / off_step_ms and ms_per_step =
on - off, swap_bytes_per_step positive, cpu_ratio = on_cpu_s / off_cpu_s
and cpu_ms_per_step = their difference / --steps; the swap on O_DIRECT, its extents x extent_bytes = bytes. The tables on stderr, the
scratch folder removed. Then that an unknown part, an extent size that is not a multiple of the
block size, a thread count of 0, --steps 2 (no timed step) and a missing --dir are refused
naming their flag. No timing is asserted.

Usage: check_bench_checksum.py STRATA WORK_DIR
Exit 0 on success, 1 on failure, 77 (skipped) when O_DIRECT does not work in WORK_DIR.
"""
import math
import os
import shutil
import statistics
import sys
import tempfile

from bench_check_util import close, fail, refused, run_json_bench

MIB = 1 << 20


def positive(row, keys, run):
    for key in keys:
        v = row.get(key)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or not v > 0:
            fail(f"{key} = {v!r} in {row}", run)


def runs_of(row, key, count, run):
    """row[key + '_runs']: `count` positive numbers whose median is row[key]."""
    runs = row.get(key + "_runs")
    if not isinstance(runs, list) or len(runs) != count:
        fail(f"{key}_runs = {runs!r}, wanted {count} numbers, in {row}", run)
    positive(dict(enumerate(runs)), range(count), run)
    if not close(statistics.median(runs), row[key]):
        fail(f"{key} is not the median of {key}_runs in {row}", run)


def check_hash(row, threads, run):
    if row.get("threads") != threads or row.get("block_size") != MIB or row.get("bytes") != 8 * MIB:
        fail(f"hash cell {row}: wanted threads {threads}, block_size 1 MiB, bytes 8 MiB", run)
    positive(row, ("hash_gbps", "memcpy_gbps", "ratio_to_memcpy"), run)
    runs_of(row, "hash_gbps", 2, run)
    runs_of(row, "memcpy_gbps", 2, run)
    if not close(row["ratio_to_memcpy"], row["hash_gbps"] / row["memcpy_gbps"]):
        fail(f"ratio_to_memcpy is not hash_gbps / memcpy_gbps in {row}", run)


def check_swap(row, run):
    if row.get("block_size") != MIB or row.get("extent_bytes") != 2 * MIB or row.get("bytes") != 8 * MIB:
        fail(f"swap cell {row}: wanted block_size 1 MiB, extent_bytes 2 MiB, bytes 8 MiB", run)
    if row.get("extents") != 4 or row.get("direct") is not True:
        fail(f"swap cell {row}: wanted 4 extents on O_DIRECT", run)
    positive(row, ("off_ms", "on_ms", "ratio", "off_write_gbps", "off_read_gbps", "on_write_gbps",
                   "on_read_gbps"), run)
    runs_of(row, "off_ms", 2, run)
    runs_of(row, "on_ms", 2, run)
    if not close(row["ratio"], row["on_ms"] / row["off_ms"]):
        fail(f"ratio is not on_ms / off_ms in {row}", run)


def check_step(row, run):
    if (row.get("model"), row.get("placement"), row.get("stage")) != ("tiny", "nvme", 3):
        fail(f"step cell {row}: wanted tiny, nvme, stage 3", run)
    if "error" in row:
        fail(f"the step failed: {row}", run)
    positive(row, ("off_step_ms", "on_step_ms", "ratio", "swap_bytes_per_step", "off_cpu_s", "on_cpu_s",
                   "cpu_ratio"), run)
    runs_of(row, "off_cpu_s", 2, run)
    runs_of(row, "on_cpu_s", 2, run)
    if not close(row["cpu_ratio"], row["on_cpu_s"] / row["off_cpu_s"]):
        fail(f"cpu_ratio is not on_cpu_s / off_cpu_s in {row}", run)
    if not close(row["cpu_ms_per_step"], (row["on_cpu_s"] - row["off_cpu_s"]) * 1e3 / 3):
        fail(f"cpu_ms_per_step is not (on_cpu_s - off_cpu_s) x 1000 / 3 steps in {row}", run)
    runs_of(row, "off_step_ms", 2, run)
    runs_of(row, "on_step_ms", 2, run)
    if row.get("timed_steps") != 2:
        fail(f"timed_steps = {row.get('timed_steps')!r} (2 rounds of 1) in {row}", run)
    if not close(row["ratio"], row["on_step_ms"] / row["off_step_ms"]):
        fail(f"ratio is not on_step_ms / off_step_ms in {row}", run)
    if not close(row["ms_per_step"], row["on_step_ms"] - row["off_step_ms"]):
        fail(f"ms_per_step is not on_step_ms - off_step_ms in {row}", run)


def refused_flags(strata, folder, extra, flag):
    refused([strata, "bench", "checksum", "--dir", folder, "--preset", "tiny"] + extra, flag)


def main():
    strata, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="bench-checksum-", dir=work)
    try:
        args = [strata, "bench", "checksum", "--size", "8M", "--block-size", "1M", "--extent-size", "2M",
                "--threads", "1,2", "--reps", "2", "--preset", "tiny", "--batch", "2", "--seq-len", "32",
                "--steps", "3", "--rounds", "2", "--device", "host", "--dir", folder, "--json"]
        run, rows = run_json_bench(args)
        parts = [r.get("part") for r in rows]
        if parts != ["hash", "hash", "swap", "step"]:
            fail(f"cells {parts}, wanted hash (1 and 2 threads), swap, step", run)
        check_hash(rows[0], 1, run)
        check_hash(rows[1], 2, run)
        check_swap(rows[2], run)
        check_step(rows[3], run)
        for header in ("hash GB/s", "trip ms", "step: "):
            if header not in run.stderr:
                fail(f"no '{header}' on stderr (the tables)", run)
        if os.listdir(folder):
            fail(f"left in {folder}: {os.listdir(folder)}", run)

        refused_flags(strata, folder, ["--parts", "hash,crc"], "--parts")
        refused_flags(strata, folder, ["--block-size", "1M", "--extent-size", "1536K"], "--extent-size")
        refused_flags(strata, folder, ["--threads", "0"], "--threads")
        refused_flags(strata, folder, ["--parts", "step", "--steps", "2"], "--steps")
        refused_flags(strata, os.path.join(folder, "missing"), ["--parts", "swap"], "--dir")
        print("ok:", len(rows), "cells;", run.stderr.splitlines()[-1] if run.stderr else "")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
