#!/usr/bin/python3
"""`strata train` of Mixtral and Qwen3-MoE models from an HF folder against the same training in
PyTorch (moe_torch.py, float64), under ZeRO stage 1, 2 and 3 with the optimizer states on the
device ("none"), in pinned host memory ("cpu") and on NVMe.

Usage: /usr/bin/python3 moe_train_vs_torch.py --strata PATH/strata [--keep DIR]

Debian's interpreter (/usr/bin/python3 with python3-torch 1.13 and python3-numpy); exits 77
(skipped) when torch or numpy cannot be imported. The training semantics on the torch side are
llama_train_vs_torch.py's (ref_util.torch_train: the batch loader's windows, loss / gas per
micro-batch, clip_grad_norm_, one AdamW group with every parameter); the loss is HF's, cross-
entropy + router_aux_loss_coef * the load-balancing loss (output_router_logits is true in both
models), and that is the loss strata's metrics must report.

The models (MODELS), each an HF folder written here (config.json, model.safetensors with
moe_torch.random_weights; one expert per sparse layer receives no token by construction):
  mixtral     MixtralForCausalLM, E 5, k 2, GQA 6:2 (hs 6), untied, router_aux_loss_coef 0.02
  qwen3moe    Qwen3MoeForCausalLM, E 6, k 2, norm_topk_prob, mlp_only_layers [0] (layer 0 dense,
              1 and 2 sparse), q/k norm, head_dim 10 with C 36, GQA 4:2, untied, coef 0.01
The runs (RUNS): zero_optimization stage 1, 2 and 3 x offload_optimizer.device "none", "cpu",
"nvme" (a temp folder, sub_group_size 2000: several swap tiles); stage 3 with
stage3_param_persistence_threshold 0. All: fp32, AdamW lr 1e-3 (constant), betas (0.9, 0.95),
eps 1e-8, weight_decay 0.1 on every parameter, gradient_clipping the model's `clip` (between its
gradient norms: some steps clipped, some not), B 2, T 11, gas 2, STEPS 6, one rank, the host
device with a 64 MiB budget, an llm.c token file of skewed random tokens that wraps around.

Compared, strata against torch float64 (one torch run per model: every run trains the same):
  loss of each step       1e-4        grad norm of each step  1e-4
  lr of each step         1e-12       each saved tensor       1e-4 (rel, float64)
  an expert no token reached over the whole run: saved = w0 prod(1 - lr wd) to 1e-6
and the runs' saved tensors of one stage bit for bit equal whatever the placement.
Routing: torch's float64 run logs every forward's top-k margin ((p_k - p_k+1) / p_k, > 1e-4
asserted) and torch fp32 must choose the same experts throughout (see moe_vs_torch.py).
Self-checks (torch alone, before strata): first loss within 0.5 of log(V), the loss falls, every
saved tensor but the unrouted experts moves > 10 x its bound; discrimination: torch with a bug
(no clipping, loss summed over micro-batches, Adam's L2, aux term dropped, top-k renormalisation
flipped) > 5 x a bound from torch float64, and from strata when it ran. Until strata knows these
architectures (its error says "not supported"), the script exits 77 after the self-checks.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_util  # noqa: E402  (first: without torch / numpy it exits 77, skipped)
import numpy as np  # noqa: E402
import torch  # noqa: E402
import moe_torch  # noqa: E402
from llama_train_vs_torch import write_model_dir  # noqa: E402
from ref_util import f32, rel, worst, worst_ratio  # noqa: E402

BOUNDS = {"loss": 1e-4, "grad_norm": 1e-4, "lr": 1e-12, "param": 1e-4}
DECAY_BOUND = 1e-6
STEPS = 6
B, GAS, T = 2, 2, 11
LR, BETAS, EPS, WEIGHT_DECAY = 1e-3, (0.9, 0.95), 1e-8, 0.1
WINDOWS, TAIL = 9, 4   # 9 < STEPS * GAS windows: the data wraps around
MOVE = 10
DISCRIMINATION = 5
MIN_MARGIN = 1e-4
STRATA_TIMEOUT_S = 300
UNSUPPORTED = "not supported"

MODELS = [
    dict(name="mixtral", seed=3, clip=0.45, hf={
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_act": "silu",
        "vocab_size": 67, "hidden_size": 36, "intermediate_size": 44, "num_hidden_layers": 2,
        "num_attention_heads": 6, "num_key_value_heads": 2, "max_position_embeddings": 64,
        "num_local_experts": 5, "num_experts_per_tok": 2, "output_router_logits": True,
        "router_aux_loss_coef": 0.02, "router_jitter_noise": 0.0, "sliding_window": None,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}),
    dict(name="qwen3moe", seed=1, clip=0.6, hf={
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "hidden_act": "silu", "vocab_size": 71, "hidden_size": 36, "intermediate_size": 52,
        "moe_intermediate_size": 24, "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 10, "max_position_embeddings": 64,
        "num_experts": 6, "num_experts_per_tok": 2, "norm_topk_prob": True,
        "decoder_sparse_step": 1, "mlp_only_layers": [0], "output_router_logits": True,
        "router_aux_loss_coef": 0.01, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False}),
]
PLACEMENTS = ("none", "cpu", "nvme")
RUNS = []
for _stage in (1, 2, 3):
    for _where in PLACEMENTS:
        _zero = {"stage": _stage, "offload_optimizer": {"device": _where}}
        if _where == "nvme":
            _zero["offload_optimizer"]["nvme_path"] = "(a temp folder)"
            _zero["sub_group_size"] = 2000
        if _stage == 3:
            _zero["stage3_param_persistence_threshold"] = 0
        RUNS.append(dict(name=f"stage{_stage}_{_where}", stage=_stage, zero=_zero))
# Keys of the saved config.json that must equal the input's.
SAME_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
             "num_attention_heads", "num_key_value_heads", "head_dim", "rope_theta",
             "rms_norm_eps", "tie_word_embeddings", "num_local_experts", "num_experts",
             "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
             "decoder_sparse_step", "mlp_only_layers", "output_router_logits",
             "router_aux_loss_coef")


def short(name):
    return (name.replace("model.layers.", "L").replace("self_attn.", "").replace("mlp.", "")
            .replace("block_sparse_moe.", "").replace("experts.", "x"))


# ---- strata -----------------------------------------------------------------------------------

def run_strata(strata, workdir, model, run, cfg, tokens):
    tag = f"{model['name']}.{run['name']}"
    d = os.path.join(workdir, tag)
    nvme = os.path.join(d, "nvme")
    os.makedirs(nvme, exist_ok=True)
    p = {k: os.path.join(d, k) for k in ("ds.json", "tokens.bin", "saved", "m.jsonl")}
    with open(p["ds.json"], "w") as f:
        json.dump(ref_util.ds_config(run["zero"], model["clip"], micro_batch=B, gas=GAS, lr=LR,
                                     betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY,
                                     nvme_dir=nvme), f, indent=1)
    ref_util.write_token_file(p["tokens.bin"], tokens)
    cmd = [strata, "train", "--config", p["ds.json"], "--model", model["dir"],
           "--data", p["tokens.bin"], "--steps", str(STEPS), "--seq-len", str(T),
           "--save", p["saved"], "--metrics", p["m.jsonl"], "--report", "none"]
    seconds = ref_util.run_checked(cmd, STRATA_TIMEOUT_S)
    metrics = ref_util.read_metrics(p["m.jsonl"], STEPS)
    saved, form = ref_util.load_saved(p["saved"])
    problems = []
    if not os.path.isdir(p["saved"]):
        problems.append("--save wrote no folder")
    else:
        with open(os.path.join(p["saved"], "config.json")) as f:
            j = json.load(f)
        problems += [f"config.json: {k} {j.get(k)!r}, expected {model['hf'][k]!r}"
                     for k in SAME_KEYS if k in model["hf"] and j.get(k) != model["hf"][k]]
        if j.get("architectures") != model["hf"]["architectures"]:
            problems.append(f"config.json: architectures {j.get('architectures')}")
    shapes = moe_torch.param_shapes(cfg)
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

def run_torch(cfg_hf, weights, tokens, max_norm, dtype=torch.float64, log=None, deviation=None,
              **bugs):
    cfg = moe_torch.MoeConfig.from_hf(cfg_hf, **(deviation or {}))
    model = moe_torch.MoeLm(cfg, dtype)
    model.load_numpy(weights)
    model.routing_log(log)
    return ref_util.torch_train(model, tokens, steps=STEPS, B=B, T=T, gas=GAS,
                                lr_of_step=lambda k: LR, max_norm=max_norm, betas=BETAS, eps=EPS,
                                weight_decay=WEIGHT_DECAY, **bugs)


BUGS = [("no clipping", dict(clip=False)),
        ("loss summed over micro", dict(loss_div=1)),
        ("Adam (L2), not AdamW", dict(optimizer="adam")),
        ("aux loss dropped", dict(deviation=dict(aux="off"))),
        ("top-k renorm flipped", dict(deviation=dict(renormalize="flip")))]


def compare(ours, ref):
    rows = []
    for kind, key in (("loss", "losses"), ("grad_norm", "grad_norms"), ("lr", "lrs")):
        rows += [(kind, f"{kind}[step {i + 1}]", rel(ours[key][i], ref[key][i]))
                 for i in range(STEPS)]
    rows += [("param", n, rel(ours["params"][n], p)) for n, p in ref["params"].items()]
    return rows


def discriminate(model, weights, tokens, against, failures, what):
    line = []
    for label, bug in BUGS:
        ratio = worst_ratio(compare(against, run_torch(model["hf"], weights, tokens,
                                                       model["clip"], **bug)), BOUNDS)
        line.append(f"{label} {ratio:.1e}")
        if not ratio > DISCRIMINATION:
            failures.append(f"{model['name']}: {what} cannot be told from torch with {label} "
                            f"(worst rel / bound {ratio:.2f})")
    return "; ".join(line)


# ---- main -------------------------------------------------------------------------------------

def main():
    args = ref_util.start(__doc__, "strata", path_help="path to the strata binary",
                          keep_help="keep strata's input/output files in this directory")
    print(f"B {B}, T {T}, gas {GAS}, {STEPS} steps over {WINDOWS} windows; AdamW lr {LR:g}, betas "
          f"{BETAS}, eps {EPS:g}, wd {WEIGHT_DECAY:g}; strata fp32 vs torch float64; bounds: "
          + ", ".join(f"{k} {v:g}" for k, v in BOUNDS.items()))
    started = time.monotonic()
    failures = []
    tmp, workdir = ref_util.work_dir(args.keep, prefix="moe_train_vs_torch_")
    clipped = unclipped = 0
    prepared = []
    print("\n== torch alone (self-checks)")
    for k, model in enumerate(MODELS):
        cfg = moe_torch.MoeConfig.from_hf(model["hf"])
        weights = moe_torch.random_weights(cfg, seed=7500 + k + model["seed"])
        tokens = ref_util.make_tokens(cfg, WINDOWS * B * T + 1 + TAIL, seed=7600 + k)
        model["dir"] = os.path.join(workdir, model["name"] + ".hf")
        write_model_dir(model["dir"], model["hf"], weights)
        log, log32 = [], []
        ref = run_torch(model["hf"], weights, tokens, model["clip"], log=log)
        ref32 = run_torch(model["hf"], weights, tokens, model["clip"], dtype=torch.float32,
                          log=log32)
        margin, counts = moe_torch.routing_summary(log, cfg)
        unrouted = moe_torch.unrouted_params(cfg, counts)
        yardstick = worst_ratio(compare(ref32, ref), BOUNDS)
        name = model["name"]
        print(f"{name}: {cfg.architecture} V {cfg.vocab_size} C {cfg.hidden_size} L "
              f"{cfg.num_hidden_layers} (sparse {cfg.sparse}) E {cfg.num_experts} k "
              f"{cfg.num_experts_per_tok}; tokens per expert: "
              + "; ".join(f"L{i} {v.tolist()}" for i, v in counts.items())
              + f"; smallest top-k margin {margin:.2e}; torch fp32 vs float64 {yardstick:.2f} x "
              f"bound; grad norms {np.round(ref['grad_norms'], 3).tolist()}, clip {model['clip']}")
        if not margin > MIN_MARGIN:
            failures.append(f"{name}: a top-k choice is within {margin:.1e} of a tie: pick "
                            "another seed")
        flip = moe_torch.first_routing_difference(log, log32)
        if flip is not None:
            failures.append(f"{name}: torch fp32 routes differently from float64 at {flip}")
        if not unrouted:
            failures.append(f"{name}: every expert got a token; the unrouted case is not tested")
        moving = {"losses": ref["losses"],
                  "params": {n: p for n, p in ref["params"].items() if n not in unrouted}}
        ref_util.check_torch_training(failures, name, moving, weights, cfg.vocab_size, STEPS,
                                      near_log_v=0.5, fall=0.02,
                                      move_bound=MOVE * BOUNDS["param"])
        clipped += int(np.sum(ref["grad_norms"] > model["clip"]))
        unclipped += int(np.sum(ref["grad_norms"] <= model["clip"]))
        print("  discrimination vs torch float64 (worst rel / bound, must be > "
              f"{DISCRIMINATION}): " + discriminate(model, weights, tokens, ref, failures,
                                                    "torch float64"))
        prepared.append((model, cfg, weights, tokens, ref, unrouted))
    if not (clipped and unclipped):
        failures.append(f"torch clipped {clipped} steps and left {unclipped} unclipped: both "
                        "branches of the clipping must be compared")

    unsupported = []
    for model, cfg, weights, tokens, ref, unrouted in prepared:
        saved_by_stage = {}
        for run in RUNS:
            name = f"{model['name']} {run['name']}"
            try:
                ours, seconds, form = run_strata(args.strata, workdir, model, run, cfg, tokens)
            except (RuntimeError, OSError, ValueError) as e:
                if UNSUPPORTED in str(e):
                    unsupported.append(cfg.architecture)
                    print(f"\n== {name}: {cfg.architecture} {UNSUPPORTED} by strata; the other "
                          "runs of this model are not tried")
                    break
                failures.append(f"{name}: {e}")
                print(f"\n== {name}: strata failed (see below)")
                continue
            rows = compare(ours, ref)
            decay = float(np.prod([1.0 - f32(lr) * f32(WEIGHT_DECAY) for lr in ref["lrs"]]))
            decays = [(n, rel(ours["params"][n], weights[n].astype(np.float64) * decay))
                      for n in unrouted]
            summary = {kk: worst(rows, kk) for kk in BOUNDS}
            print(f"\n== {name} ({seconds:.1f} s, saved {form}): worst "
                  + ", ".join(f"{kk} {r:.2e} ({short(w)})" for kk, (r, w) in summary.items())
                  + f"; unrouted decay {max((r for _, r in decays), default=0.0):.1e}")
            for i in range(STEPS):
                bad = [f"{kind} {r:.2e}" for kind, what, r in rows
                       if what == f"{kind}[step {i + 1}]" and not r <= BOUNDS[kind]]
                if bad:
                    failures.append(f"{name}: the first step that differs is step {i + 1} "
                                    f"({', '.join(bad)})")
                    break
            failures += [f"{name}: {what}: rel {r:.3e} > {BOUNDS[kind]:g}"
                         for kind, what, r in rows if not r <= BOUNDS[kind]]
            failures += [f"{name}: unrouted {n}: rel {r:.3e} from w0 prod(1 - lr wd)"
                         for n, r in decays if not r <= DECAY_BOUND]
            first = saved_by_stage.setdefault(run["stage"], (run["name"], ours["params"]))
            differ = [n for n in first[1] if not np.array_equal(first[1][n], ours["params"][n])]
            if differ:
                failures.append(f"{name}: {len(differ)} saved tensors differ in bits from "
                                f"{first[0]}'s ({', '.join(differ[:3])})")
            if run is RUNS[0]:
                print("  discrimination vs strata: " + discriminate(model, weights, tokens, ours,
                                                                    failures, "strata"))

    if unsupported and not failures:
        if tmp:
            tmp.cleanup()
        print(f"\nskipped: strata train does not support {', '.join(sorted(set(unsupported)))} "
              "yet (the torch self-checks passed)")
        return 77
    return ref_util.finish(failures, tmp, f"{len(MODELS)} models x {len(RUNS)} runs", started)


if __name__ == "__main__":
    sys.exit(main())
