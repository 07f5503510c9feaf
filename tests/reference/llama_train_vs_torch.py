#!/usr/bin/python3
"""`strata train` of LLaMA-family models from an HF model folder against the same training in
PyTorch (llama_torch.py, float64): 10 optimizer steps, the saved weights compared.

Usage: /usr/bin/python3 llama_train_vs_torch.py --strata PATH/strata [--keep DIR]

Debian's interpreter (/usr/bin/python3 with python3-torch 1.13 and python3-numpy); exits 77
(skipped) when torch or numpy cannot be imported. train_vs_torch.py does the same for GPT-2 and
documents strata's training semantics that the torch side follows (ref_util.torch_train: the
batch loader's windows, loss / gas per micro-batch, clip_grad_norm_, one AdamW group, DeepSpeed's
WarmupLR).

The models (MODELS), each an HF folder written here: config.json and model.safetensors with
random fp32 weights (llama_torch.random_weights), given to strata as `--model DIR` alone (strata
reads the folder's weights):
  llama_tied   LlamaForCausalLM, GQA 6:2 (hs 8), tied head, rope_theta 500000 with llama3
               scaling (factor 8, low 1, high 4, original 16)
  qwen2_bias   Qwen2ForCausalLM (q/k/v biases), GQA 4:2 (hs 10), untied head, rope_theta 1e6
The runs (RUNS), each model through each:
  stage3_cpu   ZeRO stage 3, parameters and optimizer states offloaded to "cpu",
               stage3_param_persistence_threshold 0 (every module sharded, gathered and
               released); constant lr 1e-3; gradient_clipping 1.0
  stage3_nvme  ZeRO stage 3, parameters on "cpu", optimizer states on NVMe (a temp folder, aio
               block_size 64 KiB, sub_group_size small so every module is stepped in several
               swap tiles); WarmupLR linear 1e-4 -> 1e-3 over 3 steps; gradient_clipping
               the model's clip_nvme, between its gradient norms (some steps clipped, some
               not: checked over all runs)
Both: fp32, AdamW betas (0.9, 0.95), eps 1e-8, weight_decay 0.1 on every parameter, B 2, T 19,
gas 2, one rank, the host device with a 64 MiB budget, an llm.c token file of skewed random
tokens that the 40 micro-batches wrap around. `--save OUT` writes an HF folder (config.json,
model.safetensors); one run (SHARDED) adds --save-shard-size small enough for several shards
with model.safetensors.index.json, read back through the index.

Compared, strata against torch float64 (per quantity, float64):
  loss of each step         |ours - torch| / |torch|          <= 1e-4
  grad norm of each step    |ours - torch| / torch            <= 1e-4
  lr of each step           |ours - torch| / torch            <= 1e-12
  each saved tensor         ||ours - torch|| / ||torch||      <= 1e-4
and the saved config.json must describe the same model (architecture, shapes, rope, tying).
Measured (host device): losses <= 1.6e-7, gradient norms <= 1.1e-6, saved tensors <= 5.5e-6
(llama_tied stage3_cpu, where 98% of the error is one element of L1.down_proj.weight and one of
L0.o_proj.weight: elements whose gradients are small next to their rounding, which AdamW's
division by sqrt(v) amplifies -- torch fp32's worst element is the same one, 3e-6 from float64);
the other runs <= 5e-7. Torch fp32 is 3e-3..1e-2 x the bounds from float64.
The key bias (Qwen2's k_proj.bias): the entries whose RoPE pair turns less than SLOW_ANGLE over
T tokens have a gradient only as large as that angle (see llama_vs_torch.py), so AdamW's steps on
them are rounding-decided; they are compared without those entries ("[fast]"), which are checked
instead to have moved no more than AdamW can move an element (ref_util.adam_max_move, x 1.01).

Self-checks: the torch run's first loss within 0.5 of log(V), the loss falls, every saved tensor
ends > 10 x its bound from its initial value; the yardstick (torch fp32 against float64, worst
rel / bound) printed; discrimination: torch with one detail of the training wrong (no clipping,
no decay on 1-d tensors, non-overlapping windows, the loss summed over micro-batches, Adam's L2
decay, the lr one step late where there is a schedule) must be > 5 x a bound from strata
somewhere (5, as in train_vs_torch.py: decaying the norm weights ~1 or not is the smallest).
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_util  # noqa: E402  (first: without torch / numpy it exits 77, skipped)
import numpy as np  # noqa: E402
import torch  # noqa: E402
import llama_torch  # noqa: E402
import st_io  # noqa: E402
from ref_util import f32, rel, worst, worst_ratio  # noqa: E402

BOUNDS = {"loss": 1e-4, "grad_norm": 1e-4, "lr": 1e-12, "param": 1e-4}
STEPS = 10
B, GAS, T = 2, 2, 19
LR, BETAS, EPS, WEIGHT_DECAY = 1e-3, (0.9, 0.95), 1e-8, 0.1
WARMUP = dict(warmup_min_lr=1e-4, warmup_max_lr=1e-3, warmup_num_steps=3)
WINDOWS, TAIL = 13, 5  # 13 < STEPS * GAS windows: the data wraps around; TAIL tokens never read
MOVE = 10
DISCRIMINATION = 5
SLOW_ANGLE = 0.01
SHARD_BYTES = 40000  # --save-shard-size of the SHARDED run: several shards
SHARDED = ("qwen2_bias", "stage3_cpu")
STRATA_TIMEOUT_S = 300

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}
MODELS = [
    dict(name="llama_tied", hf={
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "vocab_size": 83, "hidden_size": 48, "intermediate_size": 88, "num_hidden_layers": 2,
        "num_attention_heads": 6, "num_key_value_heads": 2, "max_position_embeddings": 64,
        "rope_theta": 500000.0, "rope_scaling": LLAMA3, "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True}, clip_nvme=3.0),
    dict(name="qwen2_bias", hf={
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
        "vocab_size": 97, "hidden_size": 40, "intermediate_size": 72, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False},
         clip_nvme=1.4),
]
RUNS = [
    dict(name="stage3_cpu", schedule=None, max_norm=1.0,
         zero={"stage": 3, "offload_param": {"device": "cpu"},
               "offload_optimizer": {"device": "cpu"},
               "stage3_param_persistence_threshold": 0}),
    dict(name="stage3_nvme", schedule=WARMUP, max_norm="clip_nvme",
         zero={"stage": 3, "offload_param": {"device": "cpu"},
               "offload_optimizer": {"device": "nvme", "nvme_path": "(a temp folder)"},
               "stage3_param_persistence_threshold": 0, "sub_group_size": 2000}),
]
# Keys of the saved config.json that must equal the input's.
SAME_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
             "num_attention_heads", "num_key_value_heads", "rope_theta", "rms_norm_eps",
             "tie_word_embeddings")


# ---- strata -----------------------------------------------------------------------------------

def write_model_dir(d, hf, weights):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf, f, indent=1)
    st_io.save(os.path.join(d, "model.safetensors"), weights)


def run_strata(strata, workdir, model, run, cfg, tokens):
    tag = f"{model['name']}.{run['name']}"
    d = os.path.join(workdir, tag)
    nvme = os.path.join(d, "nvme")
    os.makedirs(nvme, exist_ok=True)
    p = {k: os.path.join(d, k) for k in ("ds.json", "tokens.bin", "saved", "m.jsonl")}
    with open(p["ds.json"], "w") as f:
        json.dump(ref_util.ds_config(run["zero"], run["max_norm"], micro_batch=B, gas=GAS, lr=LR,
                                     betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY,
                                     schedule=run["schedule"], nvme_dir=nvme), f, indent=1)
    ref_util.write_token_file(p["tokens.bin"], tokens)
    cmd = [strata, "train", "--config", p["ds.json"], "--model", model["dir"],
           "--data", p["tokens.bin"], "--steps", str(STEPS), "--seq-len", str(T),
           "--save", p["saved"], "--metrics", p["m.jsonl"], "--report", "none"]
    sharded = (model["name"], run["name"]) == SHARDED
    if sharded:
        cmd += ["--save-shard-size", str(SHARD_BYTES)]
    seconds = ref_util.run_checked(cmd, STRATA_TIMEOUT_S)
    metrics = ref_util.read_metrics(p["m.jsonl"], STEPS)
    saved, form = ref_util.load_saved(p["saved"])
    problems = []
    if not os.path.isdir(p["saved"]):
        problems.append("--save wrote no folder")
    elif sharded and form in ("file", "folder"):
        problems.append(f"--save-shard-size {SHARD_BYTES} wrote one file, not shards")
    else:
        with open(os.path.join(p["saved"], "config.json")) as f:
            j = json.load(f)
        problems += [f"config.json: {k} {j.get(k)!r}, expected {model['hf'][k]!r}"
                     for k in SAME_KEYS if j.get(k) != model["hf"][k]]
        if j.get("architectures") != model["hf"]["architectures"]:
            problems.append(f"config.json: architectures {j.get('architectures')}")
        if (j.get("rope_scaling") or None) != (model["hf"].get("rope_scaling") or None):
            problems.append(f"config.json: rope_scaling {j.get('rope_scaling')}")
    shapes = llama_torch.param_shapes(cfg)
    if cfg.tie_word_embeddings and "lm_head.weight" in saved:  # written out although tied
        if not np.array_equal(saved["lm_head.weight"], saved.get("model.embed_tokens.weight")):
            problems.append("lm_head.weight differs from the tied model.embed_tokens.weight")
        del saved["lm_head.weight"]
    problems += [f"{n}: missing" for n in shapes if n not in saved]
    problems += [f"{n}: not a tensor of this model" for n in saved if n not in shapes]
    problems += [f"{n}: shape {tuple(saved[n].shape)}, expected {s}" for n, s in shapes.items()
                 if n in saved and tuple(saved[n].shape) != tuple(s)]
    problems += [f"{n}: dtype {saved[n].dtype}, expected float32" for n in shapes
                 if n in saved and saved[n].dtype != np.float32]
    if problems:
        raise RuntimeError(f"{p['saved']}: " + "; ".join(problems[:8]))
    return {**metrics, "params": saved}, seconds, form


# ---- torch ------------------------------------------------------------------------------------

def run_torch(cfg, weights, tokens, run, dtype=torch.float64, late_lr=False, **bugs):
    model = llama_torch.Llama(cfg, dtype)
    model.load_numpy(weights)
    return ref_util.torch_train(
        model, tokens, steps=STEPS, B=B, T=T, gas=GAS,
        lr_of_step=lambda k: ref_util.lr_at(LR, run["schedule"], k, late=late_lr),
        max_norm=run["max_norm"], betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, **bugs)


# ---- comparison -------------------------------------------------------------------------------

def compare(ours, ref, slow):
    """[(kind, what, rel)]; the slow key-bias entries (`slow`) left out of the parameters."""
    rows = []
    for kind, key in (("loss", "losses"), ("grad_norm", "grad_norms"), ("lr", "lrs")):
        rows += [(kind, f"{kind}[step {i + 1}]", rel(ours[key][i], ref[key][i]))
                 for i in range(STEPS)]
    for n, p in ref["params"].items():
        keep = ~slow[n] if n in slow else slice(None)
        rows.append(("param", n + ("[fast]" if n in slow else ""),
                     rel(ours["params"][n][keep], p[keep])))
    return rows


def slow_key_move(ours, weights, lrs, slow):
    """Worst over the slow key-bias entries of |p - p0 prod(1 - lr_t wd)| / adam_max_move."""
    decay = float(np.prod([1.0 - f32(lr) * f32(WEIGHT_DECAY) for lr in lrs]))
    bound = ref_util.adam_max_move(lrs, BETAS)
    moved = [float(np.max(np.abs(ours["params"][n][m].astype(np.float64) - weights[n][m] * decay)))
             for n, m in slow.items() if m.any()]
    return max(moved, default=0.0) / bound


def short(name):
    return name.replace("model.layers.", "L").replace("self_attn.", "").replace("mlp.", "")


# ---- main -------------------------------------------------------------------------------------

def main():
    args = ref_util.start(__doc__, "strata", path_help="path to the strata binary",
                          keep_help="keep strata's input/output files in this directory")
    print(f"B {B}, T {T}, gas {GAS}, {STEPS} steps over {WINDOWS} windows; AdamW betas {BETAS}, "
          f"eps {EPS:g}, wd {WEIGHT_DECAY:g}; strata fp32 vs torch float64")
    print("bounds: " + ", ".join(f"{k} {v:g}" for k, v in BOUNDS.items()))
    help_text = subprocess.run([args.strata, "train", "--help"], capture_output=True,
                               text=True).stdout
    if "--save-shard-size" not in help_text:
        print("FAILED: `strata train --help` lists no --save-shard-size")
        return 1

    started = time.monotonic()
    failures = []
    tmp, workdir = ref_util.work_dir(args.keep, prefix="llama_train_vs_torch_")
    clipped = unclipped = 0
    for k, model in enumerate(MODELS):
        cfg = llama_torch.LlamaConfig.from_hf(model["hf"])
        weights = llama_torch.random_weights(cfg, seed=7300 + k)
        tokens = ref_util.make_tokens(cfg, WINDOWS * B * T + 1 + TAIL, seed=7400 + k)
        model["dir"] = os.path.join(workdir, model["name"] + ".hf")
        write_model_dir(model["dir"], model["hf"], weights)
        slow = llama_torch.slow_key_bias(cfg, T, SLOW_ANGLE)
        for run in RUNS:
            if isinstance(run["max_norm"], str):  # the model's
                run = {**run, "max_norm": model[run["max_norm"]]}
            name = f"{model['name']} {run['name']}"
            print(f"\n== {name}: {cfg.architecture} V {cfg.vocab_size} C {cfg.hidden_size} "
                  f"F {cfg.intermediate_size} L {cfg.num_hidden_layers} NH "
                  f"{cfg.num_attention_heads} NKV {cfg.num_key_value_heads} hs {cfg.head_dim}; "
                  f"zero_optimization {json.dumps(run['zero'])}, "
                  f"lr {'WarmupLR ' + json.dumps(run['schedule']) if run['schedule'] else LR}, "
                  f"gradient_clipping {run['max_norm']:g}")
            try:
                ours, seconds, form = run_strata(args.strata, workdir, model, run, cfg, tokens)
            except (RuntimeError, OSError, ValueError) as e:
                failures.append(f"{name}: {e}")
                print("strata failed (see below)")
                continue
            ref = run_torch(cfg, weights, tokens, run)
            ref32 = run_torch(cfg, weights, tokens, run, dtype=torch.float32)
            ref_util.check_torch_training(failures, name, ref, weights, cfg.vocab_size, STEPS,
                                          near_log_v=0.5, fall=0.05,
                                          move_bound=MOVE * BOUNDS["param"])
            clipped += int(np.sum(ref["grad_norms"] > run["max_norm"]))
            unclipped += int(np.sum(ref["grad_norms"] <= run["max_norm"]))
            rows = compare(ours, ref, slow)
            print(f"{'step':>4} {'lr ours':>10} {'lr torch':>10} {'loss ours':>11} "
                  f"{'loss torch':>11} {'rel':>8} {'norm ours':>10} {'norm torch':>10} "
                  f"{'rel':>8}")
            for i in range(STEPS):
                print(f"{i + 1:4d} {ours['lrs'][i]:10.3e} {ref['lrs'][i]:10.3e} "
                      f"{ours['losses'][i]:11.7f} {ref['losses'][i]:11.7f} "
                      f"{rel(ours['losses'][i], ref['losses'][i]):8.1e} "
                      f"{ours['grad_norms'][i]:10.6f} {ref['grad_norms'][i]:10.6f} "
                      f"{rel(ours['grad_norms'][i], ref['grad_norms'][i]):8.1e}")
            params = sorted(((r, w) for kk, w, r in rows if kk == "param"), reverse=True)
            print(f"saved ({form}), worst first: " +
                  ", ".join(f"{short(w)} {r:.1e}" for r, w in params[:4]))
            kb = slow_key_move(ours, weights, ref["lrs"], slow)
            yardstick = worst_ratio(compare(ref32, ref, slow), BOUNDS)
            summary = {kk: worst(rows, kk) for kk in BOUNDS}
            print("worst: " + ", ".join(f"{kk} {r:.2e} ({short(w)})"
                                        for kk, (r, w) in summary.items()) +
                  (f"; slow key bias move {kb:.2f} x max" if slow else "") +
                  f"; torch fp32 vs fp64 {yardstick:.2e} x bound; strata {seconds:.1f} s")
            for i in range(STEPS):
                bad = [f"{kind} {r:.2e}" for kind, what, r in rows
                       if what == f"{kind}[step {i + 1}]" and not r <= BOUNDS[kind]]
                if bad:
                    print(f"FIRST DIFFERING STEP: {i + 1} ({', '.join(bad)})")
                    failures.append(f"{name}: the first step that differs is step {i + 1} "
                                    f"({', '.join(bad)})")
                    break
            for kind, what, r in rows:
                if not r <= BOUNDS[kind]:
                    failures.append(f"{name}: {what}: rel {r:.3e} > {BOUNDS[kind]:g}")
            if not kb <= 1.01:
                failures.append(f"{name}: a slow key-bias entry moved {kb:.2f} x the most "
                                "AdamW can move it")

            bugs = [("no clipping", dict(clip=False)),
                    ("no decay on 1-d", dict(decay_all=False)),
                    ("windows not overlapping", dict(stride=B * T + 1)),
                    ("loss summed over micro", dict(loss_div=1)),
                    ("Adam (L2), not AdamW", dict(optimizer="adam"))]
            if run["schedule"]:
                bugs.insert(0, ("lr one step late", dict(late_lr=True)))
            line = []
            for label, bug in bugs:
                ratio = worst_ratio(compare(ours, run_torch(cfg, weights, tokens, run, **bug),
                                            slow), BOUNDS)
                line.append(f"{label} {ratio:.1e}")
                if not ratio > DISCRIMINATION:
                    failures.append(f"{name}: cannot tell torch with {label} from strata "
                                    f"(worst rel / bound {ratio:.2f})")
            print(f"discrimination (worst rel / bound vs strata, must be > {DISCRIMINATION}): "
                  + "; ".join(line))

    if not (clipped and unclipped):
        failures.append(f"torch clipped {clipped} steps and left {unclipped} unclipped: both "
                        "branches of the clipping must be compared")
    return ref_util.finish(failures, tmp, f"{len(MODELS)} models x {len(RUNS)} runs", started)


if __name__ == "__main__":
    sys.exit(main())
