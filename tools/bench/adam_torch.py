#!/usr/bin/env python3
"""torch.optim.AdamW(foreach=True) timed the way `strata bench adam` times its own step.

Launched by `strata bench adam` (tools/bench/bench_adam.cpp) as a subprocess, with Debian's
/usr/bin/python3 (python3-torch). Prints JSON lines on stdout:
  {"torch": "<version>", "python": "<version>"}                     first, once
  {"kernel": "torch", "grad_dtype": "fp32", "params": N, "threads": T, "seconds": [...]}
one per (params, threads, grad mode) cell, each `seconds` holding one optimizer step per rep
(after one untimed warm-up step). The caller takes the median. When torch cannot be imported
it prints {"error": "..."} and exits 3.

Grad modes, the user's path with torch for the same bytes as strata's fused step:
  fp32: p.grad is an fp32 tensor; the step is optimizer.step().
  bf16: the grads arrive in bf16 and the updated params are wanted in bf16: the step is
        p.grad.copy_(g_bf16) (upcast), optimizer.step(), p_bf16.copy_(p) (downcast).
"""
import argparse
import json
import sys
import time


def parse_list(text, conv):
    return [conv(x) for x in text.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True, help="comma-separated parameter counts")
    ap.add_argument("--threads", required=True, help="comma-separated thread counts")
    ap.add_argument("--grad", default="fp32", help="comma-separated grad modes: fp32,bf16")
    ap.add_argument("--reps", type=int, default=5, help="timed steps per cell")
    args = ap.parse_args()

    try:
        import torch
    except Exception as e:  # ImportError, or a broken install raising something else
        print(json.dumps({"error": f"cannot import torch with {sys.executable}: {e}"}), flush=True)
        return 3

    print(json.dumps({"torch": torch.__version__, "python": sys.version.split()[0]}), flush=True)
    for numel in parse_list(args.params, int):
        # Allocated once per size, outside the timed region: params, grads and (lazily, at the
        # first step) exp_avg / exp_avg_sq, all fp32 like the master weights of ZeRO-Offload.
        gen = torch.Generator().manual_seed(1)
        p = torch.nn.Parameter(torch.rand(numel, generator=gen) * 2 - 1)
        g32 = torch.rand(numel, generator=gen) * 2 - 1
        for mode in parse_list(args.grad, str):
            if mode not in ("fp32", "bf16"):
                print(f"unknown grad mode {mode!r} (fp32 or bf16)", file=sys.stderr)
                return 2
            g16 = g32.to(torch.bfloat16) if mode == "bf16" else None
            out16 = torch.empty(numel, dtype=torch.bfloat16) if mode == "bf16" else None
            p.grad = g32.clone()
            opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                    weight_decay=0.01, foreach=True)

            def step():
                if g16 is not None:
                    p.grad.copy_(g16)
                opt.step()
                if out16 is not None:
                    out16.copy_(p.detach())

            for threads in parse_list(args.threads, int):
                torch.set_num_threads(threads)
                with torch.no_grad():
                    step()  # warm-up: creates the state on the first call, warms the pool
                    seconds = []
                    for _ in range(args.reps):
                        t0 = time.perf_counter()
                        step()
                        seconds.append(time.perf_counter() - t0)
                print(json.dumps({"kernel": "torch", "grad_dtype": mode, "params": numel,
                                  "threads": threads, "seconds": seconds}), flush=True)
            del opt, g16, out16
            p.grad = None
        del p, g32
    return 0


if __name__ == "__main__":
    sys.exit(main())
