#!/usr/bin/env python3
"""`strata bench infer` run small: llama-tiny, batches 1 and 4, 3 timed steps, every placement,
a 5 MiB device so that the streamed cells stream, --json, scratch under WORKDIR.

Checks exit 0 and one JSON object per placement x batch with the documented fields: positive
step times and tokens/s (= batch / step), nothing streamed on the device cell, bytes streamed per
step on the cpu and nvme cells (and read from NVMe on the nvme cell) with a bound and vs_bound =
tokens/s / bound; and the scratch folder removed.

Usage: check_bench_infer.py STRATA WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys


def main():
    strata, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    r = subprocess.run([strata, "bench", "infer", "--preset", "llama-tiny", "--device", "host", "--device-memory",
                        "5MiB", "--batches", "1,4", "--steps", "3", "--prompt-len", "16", "--dir", work, "--json"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode == 77 or "O_DIRECT" in r.stderr and r.returncode != 0:
        print(r.stderr[-1000:])
        return 77
    assert r.returncode == 0, r.stderr[-3000:]
    cells = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
    assert [(c["placement"], c["batch"]) for c in cells] == [(p, b) for p in ("device", "cpu", "nvme") for b in (1, 4)], cells
    for c in cells:
        assert "error" not in c, c
        for key in ("step_ms", "tokens_per_s", "h2d_gbps", "h2d_bytes_per_step", "nvme_bytes_per_step",
                    "resident_modules", "modules"):
            assert key in c, f"missing {key}: {c}"
        assert c["step_ms"] > 0 and abs(c["tokens_per_s"] - 1e3 * c["batch"] / c["step_ms"]) < 1e-6 * c["tokens_per_s"], c
        if c["placement"] == "device":
            assert c["h2d_bytes_per_step"] == 0 and c["resident_modules"] == c["modules"] and "vs_bound" not in c, c
        else:
            assert c["h2d_bytes_per_step"] > 0 and c["resident_modules"] < c["modules"], c
            assert c["bound_tokens_per_s"] > 0 and abs(c["vs_bound"] - c["tokens_per_s"] / c["bound_tokens_per_s"]) < 1e-9, c
        if c["placement"] == "nvme":
            assert c["nvme_bytes_per_step"] > 0 and c["disk_read_gbps"] > 0, c
            # The disk limit is measured right before and after the cell; the bound takes the faster.
            assert c["disk_read_gbps"] == max(c["disk_read_gbps_before"], c["disk_read_gbps_after"]) > 0, c
        else:
            assert c["disk_read_gbps"] == 0 and "disk_read_gbps_before" not in c, c
    left = [f for f in os.listdir(work)]
    assert not left, f"scratch left in {work}: {left}"
    print(f"{len(cells)} cells; e.g. {cells[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
