#!/usr/bin/env python3
"""The peer of `strata bench infer`: the same model, batch and device budget decoded by Hugging
Face transformers with Accelerate's offloading (what ZeRO-Inference users compare against).

Launched by `strata bench infer --peers` (tools/bench/bench_infer.cpp), one child per cell, with the
model's config.json (written by strata from the same spec), so that a failure costs only its row.
  accelerate_offload   AutoModelForCausalLM.from_config in --dtype with random weights, dispatched
                       by accelerate's infer_auto_device_map with max_memory {0: --device-memory,
                       "cpu": the rest}: what does not fit the GPU stays in CPU memory and is moved
                       to the GPU layer by layer at each forward (accelerate's hooks).
The timing matches strata's cells: one prefill of --batch random prompts of --prompt-len tokens,
one untimed decoding step, then --steps timed steps of one token per row (greedy), each a forward
with the KV cache (past_key_values), synchronized.

Prints one JSON line and exits 0:
  {"peer": P, "ok": true, "transformers": V, "accelerate": V, "prefill_ms": x, "step_ms": [...],
   "tokens_per_s": B / median step, "gpu_modules": n, "cpu_modules": n}
or {"peer": P, "ok": false, "importable": false, "error": "..."} (exit 3) when transformers,
accelerate or a CUDA device is missing, or {"peer": P, "ok": false, "importable": true,
"error": "..."} (exit 4) when it failed.
"""
import argparse
import json
import statistics
import sys
import time
import traceback


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", default="accelerate_offload", choices=["accelerate_offload"])
    ap.add_argument("--config-dir", required=True, help="a folder holding the model's config.json")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--device-memory", default="4GiB", help="accelerate's max_memory for GPU 0")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: no offload (for testing the script without a GPU)")
    return ap.parse_args(argv)


class NotImportable(Exception):
    pass


def run(a):
    try:
        import torch
        import transformers
        import accelerate
    except ImportError as e:
        raise NotImportable(str(e))
    if a.device == "cuda" and not torch.cuda.is_available():
        raise NotImportable("torch has no CUDA device here")
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
    out = {"transformers": transformers.__version__, "accelerate": accelerate.__version__, "torch": torch.__version__}
    config = transformers.AutoConfig.from_pretrained(a.config_dir)
    config.use_cache = True
    with accelerate.init_empty_weights():
        empty = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=dtype)
    if a.device == "cuda":
        device_map = accelerate.infer_auto_device_map(
            empty, max_memory={0: a.device_memory, "cpu": "1000GiB"}, dtype=dtype,
            no_split_module_classes=getattr(empty, "_no_split_modules", None))
    else:
        device_map = {"": "cpu"}
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=dtype)  # random weights, CPU
    model.eval()
    model = accelerate.dispatch_model(model, device_map=device_map) if a.device == "cuda" else model
    out["gpu_modules"] = sum(1 for v in device_map.values() if v not in ("cpu", "disk"))
    out["cpu_modules"] = sum(1 for v in device_map.values() if v == "cpu")
    first = "cuda:0" if a.device == "cuda" else "cpu"
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, config.vocab_size, (a.batch, a.prompt_len), generator=g).to(first)

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    with torch.no_grad():
        t0 = time.perf_counter()
        o = model(input_ids=ids, use_cache=True)
        sync()
        out["prefill_ms"] = 1e3 * (time.perf_counter() - t0)
        past = o.past_key_values
        nxt = o.logits[:, -1, :].argmax(-1, keepdim=True)
        times = []
        for step in range(a.steps + 1):
            t0 = time.perf_counter()
            o = model(input_ids=nxt, past_key_values=past, use_cache=True)
            sync()
            if step > 0:
                times.append(1e3 * (time.perf_counter() - t0))
            past = o.past_key_values
            nxt = o.logits[:, -1, :].argmax(-1, keepdim=True)
    out["step_ms"] = times
    out["tokens_per_s"] = 1e3 * a.batch / statistics.median(times)
    out["prefill_tokens_per_s"] = 1e3 * a.batch * a.prompt_len / out["prefill_ms"]
    return out


def main(argv=None):
    a = parse_args(argv)
    try:
        out = run(a)
    except NotImportable as e:
        print(json.dumps({"peer": a.peer, "ok": False, "importable": False, "error": str(e)}), flush=True)
        return 3
    except Exception as e:  # noqa: BLE001 -- one row's failure, reported
        traceback.print_exc()
        print(json.dumps({"peer": a.peer, "ok": False, "importable": True, "error": f"{type(e).__name__}: {e}"}),
              flush=True)
        return 4
    print(json.dumps(dict({"peer": a.peer, "ok": True}, **out)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
