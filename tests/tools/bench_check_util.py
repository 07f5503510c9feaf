"""What the check_bench_*.py scripts share: failing with the run's output, comparing derived
numbers, and running a bench with --json into rows (exit 77 where the scratch folder's disk
cannot do O_DIRECT), and a machine profile for the estimate and chart checks."""
import json
import os
import subprocess
import sys

SKIP = 77


def fail(message, run=None):
    print(f"FAIL: {message}", file=sys.stderr)
    if run is not None:
        print(f"--- stdout\n{run.stdout}--- stderr\n{run.stderr}", file=sys.stderr)
    sys.exit(1)


def close(a, b):
    """a and b equal but for rounding (derived numbers against what they derive from)."""
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1.0)


def run_json_bench(args, timeout=90):
    """(the CompletedProcess, one dict per stdout line) of a bench run with --json among args.
    Fails on a non-zero exit or a line that is not JSON; exits 77 when the disk cannot do
    O_DIRECT."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "2")
    run = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    if run.returncode != 0:
        if "O_DIRECT does not work" in run.stderr or "not a disk" in run.stderr:
            print(f"skipped: {run.stderr.strip()}")
            sys.exit(SKIP)
        fail(f"{' '.join(args)} exited {run.returncode}", run)
    rows = []
    for line in run.stdout.splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            fail(f"stdout line is not JSON: {line!r}", run)
    return run, rows


def refused(args, flag):
    """Fails unless `args` (a bench with a bad flag) exits non-zero naming `flag`."""
    bad = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if bad.returncode == 0 or flag not in bad.stderr:
        fail(f"{' '.join(args)} was not refused naming {flag}", bad)


def write_profile(path):
    """A machine profile as `strata bench machine` writes it (rates of a modest host)."""
    with open(path, "w") as f:
        json.dump({"strata_machine_profile": 1, "device": {"backend": "host", "name": "host"}, "dtype": "fp32",
                   "threads": 2, "cpu_adam_elements_per_s": 1e9, "memory_bytes_per_s": 2e10,
                   "h2d_bytes_per_s": 1e10, "d2h_bytes_per_s": 1e10, "disk_read_bytes_per_s": 2e9,
                   "disk_write_bytes_per_s": 2e9, "disk_block_bytes": 1048576, "disk_queue_depth": 8,
                   "disk_dir": "/var/tmp", "gemm_flops_per_s": 2e11, "step_flops_per_s": 1e11,
                   "step_points": [{"hidden": 128, "layers": 2, "batch": 4, "seq_len": 128, "flops_per_s": 5e10},
                                   {"hidden": 512, "layers": 2, "batch": 4, "seq_len": 128, "flops_per_s": 1e11}]},
                  f)
