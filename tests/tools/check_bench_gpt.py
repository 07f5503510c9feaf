#!/usr/bin/env python3
"""`strata bench gpt` run small: the tiny preset, 2 steps, --json, --no-torch.

Checks exit 0 and one JSON object with the documented fields, positive times and rates, and a
ratio equal to tflops / gemm_tflops; then that a sequence longer than n_positions is refused
with a message naming it.

Usage: check_bench_gpt.py STRATA
"""
import json
import subprocess
import sys


def main():
    strata = sys.argv[1]
    run = subprocess.run([strata, "bench", "gpt", "--preset", "tiny", "--batch", "2", "--seq-len",
                          "32", "--steps", "2", "--json", "--no-torch", "--device", "host"],
                         capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        print(run.stdout, run.stderr)
        return 1
    lines = [l for l in run.stdout.splitlines() if l.strip()]
    assert len(lines) == 1, f"expected one JSON line, got {lines}"
    j = json.loads(lines[0])
    for key in ("model", "params", "device", "dtype", "batch", "seq_len", "step_ms",
                "tokens_per_s", "tflops", "gemm_tflops", "ratio_to_gemm"):
        assert key in j, f"missing {key} in {j}"
    assert j["model"] == "tiny" and j["batch"] == 2 and j["seq_len"] == 32, j
    for key in ("step_ms", "tokens_per_s", "tflops", "gemm_tflops"):
        assert j[key] > 0, f"{key} = {j[key]}"
    assert abs(j["ratio_to_gemm"] - j["tflops"] / j["gemm_tflops"]) < 1e-9 * max(1, j["ratio_to_gemm"])
    assert "torch_step_ms" not in j, "--no-torch still ran torch"

    bad = subprocess.run([strata, "bench", "gpt", "--preset", "tiny", "--seq-len", "100000",
                          "--no-torch", "--device", "host"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0 and "n_positions" in bad.stderr, (bad.returncode, bad.stderr)
    print("ok:", lines[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
