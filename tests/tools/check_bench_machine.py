"""Smoke test of `strata bench machine`: every rate of the profile measured briefly on the host
device, with the disk in a folder of the build tree.

Usage: check_bench_machine.py path/to/strata WORK_DIR
Exit 0 on success, 1 on failure, 77 (skipped) when O_DIRECT does not work in WORK_DIR.

Checks: exit 0; the profile on stdout (--json) has every documented key, every rate positive and
finite; the --out file holds the same values; the disk's scratch folder is removed; a bad --dir
fails before measuring, naming the folder and saying to use --dir.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
RATES = ["cpu_adam_elements_per_s", "memory_bytes_per_s", "h2d_bytes_per_s", "d2h_bytes_per_s",
         "disk_read_bytes_per_s", "disk_write_bytes_per_s", "gemm_flops_per_s", "step_flops_per_s"]


def fail(message, result=None):
    print(f"FAIL: {message}", file=sys.stderr)
    if result is not None:
        print(f"--- stdout\n{result.stdout}--- stderr\n{result.stderr}", file=sys.stderr)
    sys.exit(1)


def main():
    strata, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="bench-machine-", dir=work)
    try:
        out = os.path.join(folder, "profile", "machine.json")
        os.makedirs(os.path.dirname(out))
        disk = os.path.join(folder, "disk")
        os.makedirs(disk)
        # The tiny preset keeps the step short; --seconds 0.01: each rate from one timed run.
        args = [strata, "bench", "machine", "--device", "host", "--seconds", "0.01", "--dir", disk,
                "--out", out, "--json", "--step-preset", "tiny"]
        result = subprocess.run(args, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            if "O_DIRECT does not work" in result.stderr or "memory, not a disk" in result.stderr:
                print(f"skipped: {result.stderr.strip()}")
                sys.exit(SKIP)
            fail(f"{' '.join(args)} exited {result.returncode}", result)
        try:
            printed = json.loads(result.stdout)
        except json.JSONDecodeError:
            fail("stdout is not one JSON object", result)
        if printed.get("strata_machine_profile") != 1:
            fail("strata_machine_profile is not 1", result)
        if printed.get("device", {}).get("backend") != "host" or printed.get("dtype") != "fp32":
            fail("not the host device in fp32 (the defaults of --device host)", result)
        for key in RATES:
            value = printed.get(key)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                fail(f"{key} is {value!r}, not a positive finite rate", result)
        if not printed.get("threads", 0) > 0 or printed.get("disk_dir") != disk:
            fail("threads or disk_dir wrong", result)
        if printed.get("disk_block_bytes") != 1 << 20 or printed.get("disk_queue_depth") != 8:
            fail("the disk was not measured at DeepSpeed's default aio (1 MiB x 8)", result)
        with open(out) as f:
            written = json.load(f)
        if written != printed:
            fail(f"{out} differs from what was printed:\n{written}", result)
        for row in ("cpu adam", "memory", "h2d", "d2h", "disk write", "disk read", "gemm", "step"):
            if f"  {row} " not in result.stderr:
                fail(f"the table on stderr lacks the {row} row", result)
        if os.listdir(disk):
            fail(f"files left in {disk}: {os.listdir(disk)}", result)
        if os.listdir(os.path.dirname(out)) != ["machine.json"]:
            fail(f"files besides the profile: {os.listdir(os.path.dirname(out))}", result)

        # A folder that is not there: refused before measuring, saying what to do.
        missing = os.path.join(folder, "no-such-folder")
        bad = subprocess.run([strata, "bench", "machine", "--device", "host", "--seconds", "0.01",
                              "--dir", missing, "--out", os.path.join(folder, "bad.json")],
                             capture_output=True, text=True, timeout=60)
        if bad.returncode == 0:
            fail("a missing --dir was accepted", bad)
        if missing not in bad.stderr or "--dir" not in bad.stderr:
            fail("the error does not name the folder and --dir", bad)
        if os.path.exists(os.path.join(folder, "bad.json")):
            fail("a profile was written after the error", bad)
        print(result.stderr)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
