#!/usr/bin/env python3
"""Quality and bytes of quantized streaming (`strata infer --quantize`), against bf16.

Usage: scripts/bench_quantize.py STRATA WORKDIR [--steps 600] [--device-memory 6.5MiB]

Trains a byte-level llama-tiny on /usr/share/common-licenses/GPL-3 (`strata train --preset
llama-tiny --text ... --save WORKDIR/model`, fp32 weights), then measures with `strata infer
--perplexity` the perplexity of a held-out text (/usr/share/common-licenses/GPL-2, windows of 256
bytes) with the weights served
  - fp32 and bf16, every module resident (the references),
  - bf16 with the blocks streamed from pinned host memory (zero_optimization.stage 3,
    offload_param cpu) through --device-memory,
  - the same streamed with --quantize int8 / int4 at --quantize-group 128 and 64,
and the bytes streamed host->device per forward pass (= per decoded token: a decoding step is one
forward pass over every streamed module), with their ratio to the streamed bf16 run. Prints a Markdown table (docs/benchmarks.md, "Quantized streaming").
Host backend (--device host): the numbers do not depend on a GPU. The model is trained once per
WORKDIR (about 80 s on 2 cores); later runs reuse WORKDIR/model.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("strata")
    ap.add_argument("work")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--device-memory", default="6.5MiB")  # the window's activations, every module streamed
    ap.add_argument("--train-text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--eval-text", default="/usr/share/common-licenses/GPL-2")
    a = ap.parse_args()
    strata = os.path.abspath(a.strata)
    os.makedirs(a.work, exist_ok=True)
    model = os.path.join(a.work, "model")
    with open(os.path.join(a.work, "train.json"), "w") as f:
        json.dump({"train_micro_batch_size_per_gpu": 8, "strata": {"device": "host"},
                   "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.0}}}, f)
    with open(os.path.join(a.work, "stream.json"), "w") as f:
        json.dump({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "buffer_count": 2}}}, f)
    if not os.path.exists(os.path.join(model, "config.json")):
        t0 = time.time()
        r = subprocess.run([strata, "train", "--config", "train.json", "--preset", "llama-tiny", "--text", a.train_text,
                            "--seq-len", "128", "--steps", str(a.steps), "--seed", "1", "--save", model,
                            "--report", "none"], cwd=a.work, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(r.stderr[-3000:])
        last = [l for l in r.stderr.splitlines() if l.startswith("step ")][-1]
        print(f"trained llama-tiny {a.steps} steps in {time.time() - t0:.0f} s: {last.split('  lr')[0]}",
              file=sys.stderr)

    def ppl(dtype, stream, quant=None, group=128):
        args = [strata, "infer", "--device", "host", "--model", model, "--perplexity", a.eval_text,
                "--perplexity-window", "256", "--dtype", dtype]
        if stream:
            args += ["--config", "stream.json", "--device-memory", a.device_memory]
        if quant:
            args += ["--quantize", quant, "--quantize-group", str(group)]
        r = subprocess.run(args, cwd=a.work, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{' '.join(args)}:\n{r.stderr[-3000:]}")
        out = json.loads(r.stdout.strip().splitlines()[-1])
        m = re.search(r"plan: (\d+) of (\d+) modules resident", r.stderr)
        out["resident"] = f"{m.group(1)}/{m.group(2)}" if m else "all"
        return out

    rows = [("fp32, resident", ppl("fp32", False)), ("bf16, resident", ppl("bf16", False)),
            ("bf16, streamed", ppl("bf16", True))]
    for q in ("int8", "int4"):
        for g in (128, 64):
            rows.append((f"{q} g{g}, streamed", ppl("bf16", True, q, g)))
    ref = rows[1][1]
    ref_bytes = rows[2][1]["streamed_bytes_per_pass"]
    print(f"held-out text: {a.eval_text} ({ref['tokens']} byte tokens, {ref['windows']} windows of 256)")
    print()
    print("| weights | modules resident | perplexity | vs bf16 | bytes streamed per forward pass (= per decoded token) | vs bf16 streamed |")
    print("|---|---|---|---|---|---|")
    for name, r in rows:
        b = r["streamed_bytes_per_pass"]
        print(f"| {name} | {r['resident']} | {r['perplexity']:.4f} | {r['perplexity'] / ref['perplexity'] - 1:+.2%} | "
              f"{b:,} | {b / ref_bytes:.3f} |" if b else
              f"| {name} | {r['resident']} | {r['perplexity']:.4f} | {r['perplexity'] / ref['perplexity'] - 1:+.2%} | "
              f"0 | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
