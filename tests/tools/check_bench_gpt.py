#!/usr/bin/env python3
"""`strata bench gpt` run small: the tiny preset, 2 steps, --json, --no-torch, --profile.

Checks exit 0 and one JSON object with the documented fields, positive times and rates, and a
ratio equal to tflops / gemm_tflops; the --profile table: every op kind of the GPT step once,
with positive counts and times that add up to no more than the profiled step; then that a
sequence longer than n_positions is refused with a message naming it. Then `strata bench
attention` small (GQA 4/2): its fields, positive times, and its ratio; the same for its
decoding mode (--decode-past), with the key/value bytes it counts.

Usage: check_bench_gpt.py STRATA
"""
import json
import subprocess
import sys


def main():
    strata = sys.argv[1]
    run = subprocess.run([strata, "bench", "gpt", "--preset", "tiny", "--batch", "2", "--seq-len",
                          "32", "--steps", "2", "--json", "--no-torch", "--device", "host",
                          "--profile"],
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

    # The profile: the GPT step's op kinds, each once in the table.
    assert j["profiled_step_ms"] > 0, j
    ops = {row["op"]: row for row in j["profile"]}
    assert len(ops) == len(j["profile"]), f"an op kind listed twice: {j['profile']}"
    want = {"embedding_fwd", "layernorm_fwd", "matmul_fwd", "attention_fwd",
            "matmul_bias_gelu_fwd", "residual_layernorm_fwd", "residual_fwd", "softmax_xent_fwd",
            "softmax_xent_bwd", "matmul_bwd", "matmul_bwd_dgelu", "attention_bwd",
            "layernorm_bwd", "embedding_bwd"}
    assert want <= set(ops), f"missing ops {want - set(ops)} in {sorted(ops)}"
    L = 4  # the tiny preset's layers
    assert ops["attention_fwd"]["count"] == L and ops["attention_bwd"]["count"] == L, ops
    assert ops["matmul_bias_gelu_fwd"]["count"] == L and ops["matmul_bwd_dgelu"]["count"] == L, ops
    assert ops["embedding_fwd"]["count"] == 1 and ops["softmax_xent_fwd"]["count"] == 1, ops
    for row in j["profile"]:
        assert row["count"] > 0 and row["ms"] >= 0, row
        assert abs(row["share"] - row["ms"] / j["profiled_step_ms"]) < 1e-9, row
    total = sum(row["ms"] for row in j["profile"])
    assert 0 < total <= j["profiled_step_ms"] * 1.001, (total, j["profiled_step_ms"])

    bad = subprocess.run([strata, "bench", "gpt", "--preset", "tiny", "--seq-len", "100000",
                          "--no-torch", "--device", "host"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0 and "n_positions" in bad.stderr, (bad.returncode, bad.stderr)

    att = subprocess.run([strata, "bench", "attention", "--device", "host", "--batch", "1",
                          "--seq-len", "64", "--heads", "4", "--kv-heads", "2", "--steps", "1",
                          "--json"], capture_output=True, text=True, timeout=120)
    assert att.returncode == 0, (att.stdout, att.stderr)
    a = json.loads([l for l in att.stdout.splitlines() if l.strip()][-1])
    assert a["heads"] == 4 and a["kv_heads"] == 2 and a["head_size"] == 64, a
    for key in ("fwd_ms", "bwd_ms", "tflops", "fwd_tflops", "bwd_tflops", "gemm_tflops"):
        assert a[key] > 0, f"{key} = {a[key]}"
    assert abs(a["ratio_to_gemm"] - a["tflops"] / a["gemm_tflops"]) < 1e-9 * max(1, a["ratio_to_gemm"])

    dec = subprocess.run([strata, "bench", "attention", "--device", "host", "--batch", "2",
                          "--decode-past", "100", "--heads", "4", "--kv-heads", "2", "--steps", "1",
                          "--json"], capture_output=True, text=True, timeout=120)
    assert dec.returncode == 0, (dec.stdout, dec.stderr)
    d = json.loads([l for l in dec.stdout.splitlines() if l.strip()][-1])
    assert d["decode_past"] == 100 and d["kv_heads"] == 2 and d["batch"] == 2, d
    # Both caches (B 2), every position (100 cached + the new one), 2 heads of 64, bf16.
    assert d["kv_bytes"] == 2 * 2 * 101 * 2 * 64 * 2, d
    for key in ("decode_ms", "kv_gbps", "copy_gbps"):
        assert d[key] > 0, f"{key} = {d[key]}"
    assert abs(d["ratio_to_copy"] - d["kv_gbps"] / d["copy_gbps"]) < 1e-9 * max(1, d["ratio_to_copy"])
    print("ok:", lines[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
