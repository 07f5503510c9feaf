"""AsyncIO's sequential writes and reads of one file against fio on the same file, cell by
cell (block size x queue depth), interleaved; DeepSpeed's aio_handle when it imports."""
import json
import os
import shutil
import subprocess

import torch

from strata.bench._common import time_median
from strata.io import AsyncIO, pinned_empty


def _fio(path, op, size, block, depth):
    cmd = ["fio", "--name=strata", f"--filename={path}", f"--rw={op}", f"--bs={block}",
           f"--iodepth={depth}", "--ioengine=io_uring", "--direct=1", f"--size={size}",
           "--numjobs=1", "--output-format=json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr else "fio failed")
    job = json.loads(out.stdout)["jobs"][0]
    return job["read" if op == "read" else "write"]["bw_bytes"]


def run(report, folder, size, blocks, depths, reps):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "strata-bench-aio.bin")
    have_fio = shutil.which("fio") is not None
    if not have_fio:
        report.note("fio not found: AsyncIO rows only, no ratio")
    buf = pinned_empty(size, torch.uint8)
    buf.copy_(torch.randint(0, 256, (size,), dtype=torch.uint8))
    try:
        for block in blocks:
            for depth in depths:
                aio = AsyncIO(block_size=block, queue_depth=depth)
                for op in ("write", "read"):
                    fn = (lambda: aio.pwrite(buf, path)) if op == "write" else \
                        (lambda: aio.pread(buf, path))
                    sec, spread = time_median(fn, reps)
                    row = {"bench": "aio", "op": op, "block": block, "queue_depth": depth,
                           "bytes": size, "gbps": size / sec / 1e9, "spread": spread}
                    if have_fio:
                        fio_bw = max(_fio(path, op, size, block, depth) for _ in range(reps))
                        row["fio_gbps"] = fio_bw / 1e9
                        row["ratio_to_fio"] = (size / sec) / fio_bw
                    report.add(row)
                report.note(f"engine: {aio.describe()}")
    finally:
        if os.path.exists(path):
            os.unlink(path)
