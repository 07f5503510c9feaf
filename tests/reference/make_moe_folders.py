#!/usr/bin/python3
"""Write the MoE tests' inputs as folders, to feed strata by hand while its Qwen3 / Mixtral /
Qwen3-MoE support is being written, with torch float64's answers beside them.

Usage: /usr/bin/python3 make_moe_folders.py OUT_DIR

OUT_DIR/driver/<case>/       moe_vs_torch.py's cases:
    config.json, model.safetensors   an HF folder (also `strata train/infer --model DIR`)
    batch.safetensors                "inputs", "targets" I32 (B, T) for model_reference_driver
    reference.safetensors            torch float64 after the driver's protocol (5 AdamW steps,
                                     lr 3e-3, wd 0.1, betas 0.9/0.999, eps 1e-8): "logits",
                                     "losses", "grad.<name>", "param.<name>" (F64)
    command.txt                      the model_reference_driver command line
OUT_DIR/train/<model>/       moe_train_vs_torch.py's models:
    config.json, model.safetensors, tokens.bin (llm.c token file), ds_stage{1,2,3}_{none,cpu,
    nvme}.json (nvme_path OUT_DIR/train/<model>/nvme), reference.json (torch float64: losses,
    grad_norms, lrs per step), command.txt (one `strata train` line per config)
OUT_DIR/generate/<model>/    generate_moe_vs_torch.py's models:
    config.json, model.safetensors, prompts.jsonl, reference.json (torch's greedy ids per
    prompt), command.txt
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_util  # noqa: E402  (first: without torch / numpy it exits 77)
import numpy as np  # noqa: E402
import torch  # noqa: E402
import generate_moe_vs_torch as gen  # noqa: E402
import moe_torch  # noqa: E402
import moe_train_vs_torch as trn  # noqa: E402
import moe_vs_torch as drv  # noqa: E402
import st_io  # noqa: E402
from llama_train_vs_torch import write_model_dir  # noqa: E402


def write_driver_cases(out):
    for k, c in enumerate(drv.CASES):
        d = os.path.join(out, "driver", c["name"])
        weights = moe_torch.random_weights(c["cfg"], seed=8100 + k + c["seed"])
        inputs, targets = drv.make_batch(c["cfg"], c["B"], c["T"], seed=9100 + k + c["seed"])
        write_model_dir(d, c["hf"], weights)
        st_io.save(os.path.join(d, "batch.safetensors"), {"inputs": inputs, "targets": targets})
        ref = drv.run_torch(c, weights, inputs, targets)
        tensors = {"logits": ref["logits"], "losses": ref["losses"]}
        tensors.update({"grad." + n: g for n, g in ref["grads"].items()})
        tensors.update({"param." + n: p for n, p in ref["params"].items()})
        st_io.save(os.path.join(d, "reference.safetensors"), tensors)
        cmd = ["model_reference_driver", "--config", f"{d}/config.json", "--weights",
               f"{d}/model.safetensors", "--batch", f"{d}/batch.safetensors", "--steps",
               str(drv.STEPS), "--lr", drv.arg(drv.LR), "--weight-decay",
               drv.arg(drv.WEIGHT_DECAY), "--beta1", drv.arg(drv.BETAS[0]), "--beta2",
               drv.arg(drv.BETAS[1]), "--eps", drv.arg(drv.EPS), "--out", f"{d}/out.safetensors"]
        if c["checkpointing"]:
            cmd.append("--checkpointing")
        with open(os.path.join(d, "command.txt"), "w") as f:
            f.write(" ".join(cmd) + "\n")
        print(f"{d}: losses {np.round(ref['losses'], 6).tolist()}")


def write_train_models(out):
    for k, model in enumerate(trn.MODELS):
        d = os.path.join(out, "train", model["name"])
        cfg = moe_torch.MoeConfig.from_hf(model["hf"])
        weights = moe_torch.random_weights(cfg, seed=7500 + k + model["seed"])
        tokens = ref_util.make_tokens(cfg, trn.WINDOWS * trn.B * trn.T + 1 + trn.TAIL,
                                      seed=7600 + k)
        write_model_dir(d, model["hf"], weights)
        ref_util.write_token_file(os.path.join(d, "tokens.bin"), tokens)
        nvme = os.path.join(d, "nvme")
        os.makedirs(nvme, exist_ok=True)
        lines = []
        for run in trn.RUNS:
            path = os.path.join(d, f"ds_{run['name']}.json")
            with open(path, "w") as f:
                json.dump(ref_util.ds_config(run["zero"], model["clip"], micro_batch=trn.B,
                                             gas=trn.GAS, lr=trn.LR, betas=trn.BETAS,
                                             eps=trn.EPS, weight_decay=trn.WEIGHT_DECAY,
                                             nvme_dir=nvme), f, indent=1)
            lines.append(f"strata train --config {path} --model {d} --data {d}/tokens.bin "
                         f"--steps {trn.STEPS} --seq-len {trn.T} --save {d}/saved_{run['name']} "
                         f"--metrics {d}/m_{run['name']}.jsonl --report none")
        ref = trn.run_torch(model["hf"], weights, tokens, model["clip"])
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump({k2: ref[k2].tolist() for k2 in ("losses", "grad_norms", "lrs")}, f,
                      indent=1)
        with open(os.path.join(d, "command.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"{d}: losses {np.round(ref['losses'], 6).tolist()}")


def write_generate_models(out):
    for model in gen.MODELS:
        d = os.path.join(out, "generate", model["name"])
        cfg, weights, torch_model = gen.build(model)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(model["hf"], f)
        st_io.save(os.path.join(d, "model.safetensors"), weights, metadata={"format": "pt"})
        rng = np.random.default_rng(5)
        prompts = [rng.integers(0, cfg.vocab_size, n).tolist() for n in gen.PROMPT_LENGTHS]
        with open(os.path.join(d, "prompts.jsonl"), "w") as f:
            for p in prompts:
                f.write(json.dumps({"ids": p}) + "\n")
        ids = [moe_torch.greedy(torch_model, p, gen.NEW_TOKENS)[0] for p in prompts]
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump({"ids": ids}, f)
        with open(os.path.join(d, "command.txt"), "w") as f:
            f.write(f"strata infer --device host --dtype fp32 --model {d} --prompts "
                    f"{d}/prompts.jsonl --max-new-tokens {gen.NEW_TOKENS} --output "
                    f"{d}/out.jsonl\n")
        print(f"{d}: {len(prompts)} prompts, torch's ids in reference.json")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = os.path.abspath(sys.argv[1])
    torch.set_num_threads(1)
    write_driver_cases(out)
    write_train_models(out)
    write_generate_models(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
