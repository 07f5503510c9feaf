#!/usr/bin/python3
"""`strata infer` (greedy, host backend) against greedy generation in the PyTorch references.

Usage: /usr/bin/python3 generate_vs_torch.py --strata PATH/strata [--keep DIR]

Debian's interpreter (/usr/bin/python3 with python3-torch and python3-numpy); exits 77 when
torch or numpy cannot be imported.

Models (random weights, a Hugging Face folder each: config.json with no end token, so every
prompt runs its 32 tokens, and model.safetensors): a GPT-2 (gpt2_torch.py) and a LLaMA with GQA
4:2 and llama3 rope scaling, tied (llama_torch.py); the LM head is scaled up so that the next
token's logits are well separated (greedy is then decided by the model, not by rounding).
Prompts: 3 of lengths 5, 11 and 2 (token ids), decoded together in one batch.

strata runs `strata infer --prompts ids.jsonl --max-new-tokens 32` (fp32) with the weights
  resident; streamed from pinned host memory through a small device (stage 3, offload_param cpu);
  streamed from NVMe (offload_param nvme, a temp folder); and resident with --kv-cache host;
and torch (float64) appends argmax(logits of the last position) 32 times to each prompt alone.
Checks: every run's ids equal torch's for every prompt, token for token (the batch of ragged
prompts equals each prompt alone); the smallest gap between the two best logits torch met is
printed (a gap near fp32 rounding would make greedy ids an unfair test).
"""
import json
import os
import subprocess
import sys
import time

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"skipped: cannot import torch / numpy ({e}); run with /usr/bin/python3")
    sys.exit(77)

import gpt2_torch
import llama_torch
import ref_util
import st_io

NEW_TOKENS = 32
PROMPT_LENGTHS = (5, 11, 2)


def gpt2_case():
    cfg = gpt2_torch.GptConfig(vocab_size=97, n_positions=64, n_embd=96, n_layer=4, n_head=4)
    weights = ref_util.make_weights(cfg, seed=11)
    weights["wte.weight"] = weights["wte.weight"] * 12.0  # the tied head: separated logits
    config = dict(cfg.hf_json(), architectures=["GPT2LMHeadModel"])
    model = gpt2_torch.Gpt2(cfg, dtype=torch.float64)
    model.load_numpy({k: v.astype(np.float64) for k, v in weights.items()})
    return "gpt2", config, weights, model, cfg.vocab_size


def llama_case():
    j = {"architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "vocab_size": 83, "hidden_size": 96,
         "intermediate_size": 160, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 64, "rope_theta": 500000.0,
         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 16},
         "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "eos_token_id": None, "bos_token_id": None}
    cfg = llama_torch.LlamaConfig.from_hf(j)
    weights = llama_torch.random_weights(cfg, seed=12)
    weights["model.embed_tokens.weight"] = weights["model.embed_tokens.weight"] * 8.0
    model = llama_torch.Llama(cfg, dtype=torch.float64)
    model.load_numpy({k: v.astype(np.float64) for k, v in weights.items()})
    return "llama", j, weights, model, cfg.vocab_size


def torch_greedy(model, prompt):
    """argmax of the last position's logits, NEW_TOKENS times; and the smallest top-2 gap."""
    ids = list(prompt)
    gap = float("inf")
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logits, _ = model(torch.tensor([ids], dtype=torch.long))
            last = logits[0, -1]
            top = torch.topk(last, 2).values
            gap = min(gap, float(top[0] - top[1]))
            ids.append(int(torch.argmax(last)))
    return ids[len(prompt):], gap


def run_strata(strata, folder, work, name, extra, streamed):
    """The ids per prompt index; raises RuntimeError when strata fails, or when a run meant to
    stream kept every module resident (its plan line says which)."""
    out = os.path.join(work, f"{name}.jsonl")
    cmd = [strata, "infer", "--device", "host", "--dtype", "fp32", "--model", folder, "--prompts",
           os.path.join(work, "prompts.jsonl"), "--max-new-tokens", str(NEW_TOKENS), "--output", out] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    plan = next((line for line in r.stderr.splitlines() if line.startswith("plan:")), "")
    if streamed and "streamed through" not in plan:
        raise RuntimeError(f"meant to stream, but the plan says: {plan!r}")
    with open(out) as f:
        return {o["index"]: o["ids"] for o in (json.loads(line) for line in f if line.strip())}


def main():
    args = ref_util.start(__doc__, "strata", "path to the strata binary", "keep the files in this folder")
    started = time.monotonic()
    tmp, work = ref_util.work_dir(args.keep, "strata-generate-")
    failures = []
    for name, config, weights, model, vocab in (gpt2_case(), llama_case()):
        folder = os.path.join(work, name)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f)
        st_io.save(os.path.join(folder, "model.safetensors"), weights, metadata={"format": "pt"})
        rng = np.random.default_rng(5)
        prompts = [rng.integers(0, vocab, n).tolist() for n in PROMPT_LENGTHS]
        with open(os.path.join(work, "prompts.jsonl"), "w") as f:
            for p in prompts:
                f.write(json.dumps({"ids": p}) + "\n")
        want, gaps = zip(*(torch_greedy(model, p) for p in prompts))
        swap = os.path.join(work, f"{name}-swap")
        os.makedirs(swap, exist_ok=True)
        configs = {}
        for where in ("cpu", "nvme"):
            zero = {"stage": 3, "offload_param": {"device": where, "buffer_count": 2}}
            if where == "nvme":
                zero["offload_param"]["nvme_path"] = swap
            path = os.path.join(work, f"{name}-{where}.json")
            with open(path, "w") as f:
                json.dump({"zero_optimization": zero, "aio": {"block_size": 65536}}, f)
            configs[where] = path
        runs = {
            "resident": [],
            "streamed from pinned host": ["--config", configs["cpu"], "--device-memory", "2MiB"],
            "streamed from NVMe": ["--config", configs["nvme"], "--device-memory", "2MiB"],
            "KV cache in pinned host": ["--kv-cache", "host"],
        }
        for run_name, extra in runs.items():
            try:
                got = run_strata(args.strata, folder, work, f"{name}-{run_name.split()[0]}", extra,
                                 streamed=run_name.startswith("streamed"))
            except RuntimeError as e:
                failures.append(f"{name} {run_name}: {e}")
                continue
            for i, ids in enumerate(want):
                if got.get(i) != ids:
                    first = next((k for k, (a, b) in enumerate(zip(got.get(i, []), ids)) if a != b), None)
                    failures.append(f"{name} {run_name}: prompt {i} ({PROMPT_LENGTHS[i]} tokens) differs from torch "
                                    f"at generated token {first}: {got.get(i)} vs {ids}")
        print(f"{name}: torch's smallest top-2 logit gap {min(gaps):.3g}; "
              f"{len(runs)} strata runs x {len(prompts)} prompts x {NEW_TOKENS} tokens compared")
    return ref_util.finish(failures, tmp, "greedy generation vs torch", started)


if __name__ == "__main__":
    sys.exit(main())
