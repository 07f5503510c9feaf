"""python -m strata.bench adam|aio|offload [--json] [options]."""
import argparse
import os
import sys

from strata.bench import _common


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m strata.bench", description=__doc__)
    ap.add_argument("which", choices=["adam", "aio", "offload"])
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--params", default="16M,256M", help="adam: sizes, e.g. 16M,256M")
    ap.add_argument("--threads", default="0", help="adam: thread counts, 0 = all")
    ap.add_argument("--dir", default=None, help="aio/offload: a folder on the disk to measure")
    ap.add_argument("--size", default="1G", help="aio: bytes per transfer")
    ap.add_argument("--block-size", default="1M", help="aio: e.g. 128K,1M")
    ap.add_argument("--queue-depth", default="8,32", help="aio: e.g. 8,32")
    ap.add_argument("--width", type=int, default=1024, help="offload: MLP width")
    ap.add_argument("--layers", type=int, default=8, help="offload: MLP layers")
    ap.add_argument("--batch", type=int, default=64, help="offload: batch rows")
    ap.add_argument("--states", default="cpu,nvme", help="offload: cpu,nvme")
    a = ap.parse_args(argv)
    report = _common.Report(a.json, f"strata.bench {a.which}")
    split = lambda s: [x for x in s.split(",") if x]  # noqa: E731
    if a.which == "adam":
        from strata.bench import adam
        adam.run(report, [_common.parse_count(s) for s in split(a.params)],
                 [int(t) for t in split(a.threads)], a.reps)
    elif a.which == "aio":
        from strata.bench import aio
        aio.run(report, a.dir or os.getcwd(), _common.parse_count(a.size),
                [_common.parse_count(b) for b in split(a.block_size)],
                [int(d) for d in split(a.queue_depth)], a.reps)
    else:
        from strata.bench import offload
        offload.run(report, a.width, a.layers, a.batch, a.reps, split(a.states), a.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
