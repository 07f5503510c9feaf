"""Smoke test of `strata bench nvme`: a one-cell-per-op/pattern sweep on 8 MiB, with and without fio.

Usage: check_bench_nvme.py path/to/strata WORK_DIR
Exit 0 on success, 1 on failure, 77 (skipped) when O_DIRECT does not work in WORK_DIR.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
CELL = ["--size", "8M", "--block-size", "1M", "--queue-depth", "8", "--parallelism", "1",
        "--reps", "1", "--json"]
FIELDS = {"op": str, "pattern": str, "block_size": int, "queue_depth": int, "parallelism": int,
          "gbps": float}
FIO_FIELDS = {"fio_gbps": float, "ratio_to_fio": float}


def fail(message, result=None):
    print(f"FAIL: {message}", file=sys.stderr)
    if result is not None:
        print(f"--- stdout\n{result.stdout}--- stderr\n{result.stderr}", file=sys.stderr)
    sys.exit(1)


def run(strata, folder, extra):
    args = [strata, "bench", "nvme", "--dir", folder] + CELL + extra
    result = subprocess.run(args, capture_output=True, text=True, timeout=90)
    if result.returncode != 0:
        if "O_DIRECT does not work" in result.stderr or "not a disk" in result.stderr:
            print(f"skipped: {result.stderr.strip()}")
            sys.exit(SKIP)
        fail(f"{' '.join(args)} exited {result.returncode}", result)
    cells = []
    for line in result.stdout.splitlines():
        try:
            cells.append(json.loads(line))
        except json.JSONDecodeError:
            fail(f"stdout line is not JSON: {line!r}", result)
    want = {(op, pattern) for op in ("read", "write") for pattern in ("seq", "rand")}
    got = {(c.get("op"), c.get("pattern")) for c in cells}
    if got != want or len(cells) != 4:
        fail(f"cells {sorted(got)} (of {len(cells)}), wanted {sorted(want)}", result)
    for cell in cells:
        for name, kind in FIELDS.items():
            if not isinstance(cell.get(name), (int, float) if kind is float else kind):
                fail(f"cell {cell} lacks {name} ({kind.__name__})", result)
        if cell["block_size"] != 1 << 20 or cell["queue_depth"] != 8 or cell["parallelism"] != 1:
            fail(f"cell {cell} is not the cell asked for", result)
        if not cell["gbps"] > 0:
            fail(f"cell {cell} has no bandwidth", result)
    return result, cells


def main():
    strata, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="bench-nvme-", dir=work)
    try:
        result, cells = run(strata, folder, ["--no-fio"])
        for cell in cells:
            if any(name in cell for name in FIO_FIELDS):
                fail(f"--no-fio cell has fio fields: {cell}", result)
        if "--no-fio" not in result.stderr:
            fail("--no-fio is not said on stderr", result)

        result, cells = run(strata, folder, [])
        if shutil.which("fio") is None:
            if "fio cells skipped" not in result.stderr:
                fail("fio is not installed, and the run does not say so", result)
            print("fio not installed: checked that the run says so")
        else:
            for cell in cells:
                for name in FIO_FIELDS:
                    if not isinstance(cell.get(name), (int, float)) or not cell[name] > 0:
                        fail(f"cell {cell} lacks {name}", result)
        if os.listdir(folder):
            fail(f"files left in {folder}: {os.listdir(folder)}")
        print(result.stderr)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
