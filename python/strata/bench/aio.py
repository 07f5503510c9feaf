"""AsyncIO's sequential writes and reads of one file against fio (io_uring, O_DIRECT) on the
same file, cell by cell (block size x queue depth), round by round interleaved: ratio = the
median of the per-round ours / fio. (DeepSpeed's aio_handle is not run yet.)"""
import json
import os
import shutil
import statistics
import subprocess

import torch

from strata.bench._common import time_median
from strata.io import AsyncIO, pinned_empty


def _fio(path, op, size, block, depth):
    cmd = ["fio", "--name=strata", f"--filename={path}", f"--rw={op}", f"--bs={block}",
           f"--iodepth={depth}", "--ioengine=io_uring", "--direct=1", f"--size={size}",
           "--numjobs=1", "--allow_file_create=0", "--output-format=json"]
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
        aio_first = AsyncIO(block_size=blocks[0], queue_depth=depths[0])
        aio_first.pwrite(buf, path)  # the file exists before any cell: fio never lays it out
        for block in blocks:
            for depth in depths:
                aio = AsyncIO(block_size=block, queue_depth=depth)
                for op in ("write", "read"):
                    fn = (lambda: aio.pwrite(buf, path)) if op == "write" else \
                        (lambda: aio.pread(buf, path))
                    fn()  # untimed
                    ours, fios, ratios = [], [], []
                    for _ in range(reps):  # ours, fio, ours, fio...: drift hits both
                        sec, _ = time_median(fn, 1, warmup=0)
                        ours.append(size / sec)
                        if have_fio:
                            fios.append(_fio(path, op, size, block, depth))
                            ratios.append(ours[-1] / fios[-1])
                    row = {"bench": "aio", "op": op, "block": block, "queue_depth": depth,
                           "bytes": size, "gbps": statistics.median(ours) / 1e9}
                    if have_fio:
                        row["fio_gbps"] = statistics.median(fios) / 1e9
                        row["ratio_to_fio"] = statistics.median(ratios)
                    report.add(row)
                report.note(f"engine: {aio.describe()}")
    finally:
        if os.path.exists(path):
            os.unlink(path)
