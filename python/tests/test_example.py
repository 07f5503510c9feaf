"""python/examples/finetune_hf.py runs, with each optimizer, and its loss goes down."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

pytest.importorskip("torch")

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "finetune_hf.py")


@pytest.mark.parametrize("args", [["--optimizer", "offload", "--states", "nvme"],
                                  ["--optimizer", "cpuadam"]])
def test_example_trains(args):
    base = os.environ.get("STRATA_BUILD_DIR")
    folder = tempfile.mkdtemp(prefix="example-", dir=os.path.join(base, "python") if base else None)
    try:
        out = subprocess.run([sys.executable, EXAMPLE, "--steps", "20", "--nvme-path", folder,
                              *args], capture_output=True, text=True, timeout=500)
        assert out.returncode == 0, out.stdout + out.stderr
        losses = [float(x) for x in re.findall(r"loss (\d+\.\d+)", out.stdout)]
        assert len(losses) == 20
        assert sum(losses[-5:]) < sum(losses[:5]), losses
        if "offload" in args:
            assert "NVMe swap" in out.stdout
            assert os.path.isfile(os.path.join(folder, "checkpoint", "optimizer.json"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
