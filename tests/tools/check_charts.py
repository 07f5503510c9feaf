#!/usr/bin/env python3
"""`strata train --svg DIR` and `strata chart`: the charts of a run, parsed as XML.

Runs the tiny preset for 3 steps on the host device with --svg (no --metrics: the run writes
DIR/metrics.jsonl), then `strata chart --metrics DIR/metrics.jsonl --svg DIR2`. For both folders:
loss.svg, throughput.svg, memory.svg and busy.svg parse with xml.etree.ElementTree, each root is
an <svg>; memory.svg has one <g class="series" data-series=TIER> per tier the metrics show in use
(a budget or a peak above 0), and exactly those; the loss and throughput charts have one
polyline of 3 points; busy.svg one series per busy_ms track. Then `strata chart` on a missing
file and on a bad line fails naming the file and line.

Usage: check_charts.py STRATA WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"
CHARTS = ("loss.svg", "throughput.svg", "memory.svg", "busy.svg")
GPL = "/usr/share/common-licenses/GPL-3"
STEPS = 3


def fail(message, run=None):
    print(f"FAIL: {message}", file=sys.stderr)
    if run is not None:
        print(f"--- stdout\n{run.stdout}--- stderr\n{run.stderr}", file=sys.stderr)
    sys.exit(1)


def series(root):
    return [g.get("data-series") for g in root.iter(SVG + "g") if g.get("class") == "series"]


def polyline_points(root, name):
    for g in root.iter(SVG + "g"):
        if g.get("class") == "series" and g.get("data-series") == name:
            lines = list(g.iter(SVG + "polyline"))
            if len(lines) != 1:
                fail(f"series {name}: {len(lines)} polylines, wanted 1")
            return len(lines[0].get("points").split())
    fail(f"no series {name}")


def check_folder(folder, metrics):
    rows = [json.loads(line) for line in open(metrics) if line.strip()]
    if len(rows) != STEPS:
        fail(f"{metrics}: {len(rows)} steps, wanted {STEPS}")
    roots = {}
    for name in CHARTS:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            fail(f"{path} was not written")
        try:
            roots[name] = ET.parse(path).getroot()
        except ET.ParseError as e:
            fail(f"{path} is not well-formed XML: {e}")
        if roots[name].tag != SVG + "svg":
            fail(f"{path}: root {roots[name].tag}, wanted svg")
    used = [t for t in ("device", "pinned", "nvme")
            if any(r["memory"][t]["budget_bytes"] > 0 or r["memory"][t]["peak_bytes"] > 0 for r in rows)]
    if "device" not in used:
        fail(f"{metrics}: the device tier unused, which the host device never is")
    if series(roots["memory.svg"]) != used:
        fail(f"{folder}/memory.svg: series {series(roots['memory.svg'])}, wanted one per tier in use {used}")
    for t in used:
        if polyline_points(roots["memory.svg"], t) != STEPS:
            fail(f"{folder}/memory.svg: tier {t} has not {STEPS} points")
    if polyline_points(roots["loss.svg"], "loss") != STEPS:
        fail(f"{folder}/loss.svg: not {STEPS} points")
    if polyline_points(roots["throughput.svg"], "tokens/s") != STEPS:
        fail(f"{folder}/throughput.svg: not {STEPS} points")
    tracks = list(rows[0]["busy_ms"])
    if not tracks or series(roots["busy.svg"]) != tracks:
        fail(f"{folder}/busy.svg: series {series(roots['busy.svg'])}, wanted the tracks {tracks}")


def main():
    strata, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="charts-", dir=work)
    try:
        config = os.path.join(folder, "ds.json")
        with open(config, "w") as f:
            json.dump({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                       "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                       "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}, f)
        svg = os.path.join(folder, "run", "svg")  # its parent is missing too: --svg creates both
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "2")
        args = [strata, "train", "--config", config, "--device", "host", "--preset", "tiny", "--seq-len", "32",
                "--text", GPL, "--steps", str(STEPS), "--report", "none", "--svg", svg]
        run = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
        if run.returncode != 0:
            fail(f"{' '.join(args)} exited {run.returncode}", run)
        metrics = os.path.join(svg, "metrics.jsonl")
        if not os.path.isfile(metrics):
            fail(f"--svg without --metrics wrote no {metrics}", run)
        check_folder(svg, metrics)

        again = os.path.join(folder, "again")
        args = [strata, "chart", "--metrics", metrics, "--svg", again]
        run = subprocess.run(args, capture_output=True, text=True, timeout=60)
        if run.returncode != 0:
            fail(f"{' '.join(args)} exited {run.returncode}", run)
        if sorted(os.path.basename(p) for p in run.stdout.split()) != sorted(CHARTS):
            fail(f"strata chart printed {run.stdout!r}, wanted the paths of {CHARTS}", run)
        check_folder(again, metrics)

        missing = os.path.join(folder, "missing.jsonl")
        run = subprocess.run([strata, "chart", "--metrics", missing, "--svg", again],
                             capture_output=True, text=True, timeout=60)
        if run.returncode != 1 or missing not in run.stderr:
            fail("strata chart on a missing file: wanted exit 1 naming it", run)
        bad = os.path.join(folder, "bad.jsonl")
        with open(bad, "w") as f:
            f.write(open(metrics).readline() + "not json\n")
        run = subprocess.run([strata, "chart", "--metrics", bad, "--svg", again],
                             capture_output=True, text=True, timeout=60)
        if run.returncode != 1 or f"{bad}:2" not in run.stderr:
            fail("strata chart on a bad line: wanted exit 1 naming FILE:2", run)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print("ok: strata train --svg and strata chart: well-formed SVGs, one series per tier in use")


if __name__ == "__main__":
    main()
