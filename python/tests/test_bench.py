"""python -m strata.bench adam|aio|offload --json runs small and prints its rows with the
ratios to the limits it measured in the same run."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")


def bench(*args):
    out = subprocess.run([sys.executable, "-m", "strata.bench", *args, "--json", "--reps", "2"],
                         capture_output=True, text=True, timeout=500)
    assert out.returncode == 0, out.stdout + out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def test_adam():
    rows = [r for r in bench("adam", "--params", "256K") if r.get("bench") == "adam"]
    kernels = {r["kernel"]: r for r in rows}
    assert {"reference", "strata", "torch_foreach"} <= set(kernels)
    assert kernels["strata"]["ratio_to_limit"] > 0 and kernels["torch_foreach"]["strata_speedup"] > 0


def test_aio(tmp_path):
    d = os.environ.get("STRATA_BUILD_DIR")
    folder = os.path.join(d, "python", "scratch") if d else str(tmp_path)
    rows = [r for r in bench("aio", "--dir", folder, "--size", "8M", "--queue-depth", "8")
            if r.get("bench") == "aio"]
    assert {r["op"] for r in rows} == {"read", "write"}
    assert all(r["gbps"] > 0 for r in rows)


def test_offload(tmp_path):
    rows = [r for r in bench("offload", "--width", "64", "--layers", "2", "--dir", str(tmp_path))
            if r.get("bench") == "offload"]
    assert {r["states"] for r in rows} == {"cpu", "nvme"}
    assert all(r["ratio_to_bound"] > 0 for r in rows)
