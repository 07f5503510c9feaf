#!/usr/bin/env python3
"""PyTorch's forward + backward of the same GPT-2, timed the way `strata bench gpt` times its own.

Launched by `strata bench gpt` (tools/bench/bench_gpt.cpp): on a CPU machine with Debian's
/usr/bin/python3 (python3-torch), on a GPU machine with its python3. The model, with --model auto
(the default): Hugging Face's GPT2LMHeadModel with SDPA attention (what users run) where
transformers is importable, else tests/reference/gpt2_torch.py (the PyTorch GPT-2 that the
reference tests compare strata against), found under --reference-dir. Same shapes as strata's
step, parameters and activations in --dtype, dropout off. Prints one JSON line:
  {"torch": "<version>", "model": "...", "threads": N, "step_ms": [...]}   one entry per timed
                                                          step, after one untimed warm-up step
or {"error": "..."} and exit 3 when torch (or the model asked for) cannot be imported.
"""
import argparse
import json
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for key in ("vocab-size", "n-positions", "n-embd", "n-layer", "n-head", "batch", "seq-len",
                "steps", "threads"):
        ap.add_argument("--" + key, type=int, required=True)
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--reference-dir", required=True, help="folder holding gpt2_torch.py")
    ap.add_argument("--model", default="auto", choices=["auto", "hf", "reference"],
                    help="hf: transformers' GPT2LMHeadModel; reference: tests/reference's")
    a = ap.parse_args()
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install raising something else
        print(json.dumps({"error": f"cannot import torch with {sys.executable}: {e}"}), flush=True)
        return 3
    transformers = None
    if a.model in ("auto", "hf"):
        try:
            import transformers
        except Exception as e:
            if a.model == "hf":
                print(json.dumps({"error": f"cannot import transformers with {sys.executable}: {e}"}),
                      flush=True)
                return 3
    if transformers is None:
        try:
            sys.path.insert(0, a.reference_dir)
            import gpt2_torch
        except Exception as e:
            print(json.dumps({"error": f"cannot import gpt2_torch from {a.reference_dir}: {e}"}),
                  flush=True)
            return 3
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    dtype = torch.float32 if a.dtype == "fp32" else torch.bfloat16
    if a.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"error": "torch has no CUDA device here"}), flush=True)
        return 3
    if transformers is not None:
        cfg = transformers.GPT2Config(vocab_size=a.vocab_size, n_positions=a.n_positions,
                                      n_embd=a.n_embd, n_layer=a.n_layer, n_head=a.n_head,
                                      activation_function="gelu_new", resid_pdrop=0.0,
                                      embd_pdrop=0.0, attn_pdrop=0.0,
                                      attn_implementation="sdpa")  # (the default since 4.36)
        hf = transformers.GPT2LMHeadModel(cfg).to(a.device, dtype)
        model_name = f"transformers {transformers.__version__} GPT2LMHeadModel (sdpa)"

        def model(idx, tgt):
            return None, hf(input_ids=idx, labels=tgt).loss

        model.zero_grad = hf.zero_grad
    else:
        cfg = gpt2_torch.GptConfig(vocab_size=a.vocab_size, n_positions=a.n_positions,
                                   n_embd=a.n_embd, n_layer=a.n_layer, n_head=a.n_head)
        torch.set_default_tensor_type(torch.cuda.FloatTensor if a.device == "cuda"
                                      else torch.FloatTensor)
        model = gpt2_torch.Gpt2(cfg, dtype=dtype).to(a.device)
        model_name = "tests/reference gpt2_torch"
    idx = torch.randint(0, a.vocab_size, (a.batch, a.seq_len), device=a.device)
    tgt = torch.randint(0, a.vocab_size, (a.batch, a.seq_len), device=a.device)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    times = []
    for step in range(a.steps + 1):
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=False)
        _, loss = model(idx, tgt)
        loss.backward()
        sync()
        ms = (time.perf_counter() - t0) * 1e3
        if step > 0:
            times.append(ms)
    print(json.dumps({"torch": torch.__version__, "model": model_name,
                      "threads": torch.get_num_threads(), "step_ms": times}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
