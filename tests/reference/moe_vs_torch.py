#!/usr/bin/python3
"""strata's Qwen3, Mixtral and Qwen3-MoE (model_reference_driver) against moe_torch.py.

Usage: /usr/bin/python3 moe_vs_torch.py --driver PATH/model_reference_driver [--keep DIR]

Debian's interpreter (/usr/bin/python3 with python3-torch 1.13 and python3-numpy); exits 77
(skipped) when torch or numpy cannot be imported. The driver's contract is llama_vs_torch.py's
(model_driver.cpp: --config CONFIG.json --weights W.safetensors --batch B.safetensors ... --out),
with a Qwen3ForCausalLM / MixtralForCausalLM / Qwen3MoeForCausalLM config.json and HF tensor
names (moe_torch.py lists them). The loss the driver reports (its "losses") is HF's: mean
cross-entropy, plus router_aux_loss_coef * the load-balancing loss of the sparse layers where
output_router_logits is true; its gradients are that loss's.

The MoE cases are untied: random_weights' bias channel (a column of embed_tokens near 3 for every
token) would make a tied head's gradient of model.norm.weight[c0] a cancellation (sum over the
vocabulary of (p - y) 3), which fp32 gets to only ~3e-5 (measured with torch fp32, against the
gradient bound 1e-5); the tied head is compared in qwen3_tied.

Each case (CASES) gets seeded random weights (moe_torch.random_weights: llama's scales; routers
N(0, 4 / C); a bias channel that pushes one expert per sparse layer out of every top-k) and
random tokens; the driver (fp32) and torch (float64, one thread) run S = 5 AdamW steps (lr 3e-3,
weight decay 0.1, betas (0.9, 0.999), eps 1e-8) on the same batch. The cases:
  qwen3_tied      Qwen3 (dense), q/k norm, GQA 6:2, head_dim 14 (NH hs = 84 != C 40), tied
  mixtral_aux     Mixtral E 5, k 2, output_router_logits (coef 0.02), GQA 6:2, untied
  qwen3moe_k3     Qwen3-MoE E 8, k 3, norm_topk_prob, mlp_only_layers [1] (layer 1 dense),
                  output_router_logits with the default coef (0.001), head_dim 12, untied
  qwen3moe_raw    Qwen3-MoE E 6, k 2, norm_topk_prob false, decoder_sparse_step 2 (layer 0
                  dense, 1 sparse), output_router_logits (coef 0.01), untied, B 3
  mixtral_ckpt    Mixtral E 4, k 2, MQA, 3 layers, output_router_logits absent (no aux term),
                  --checkpointing
Per tensor, float64: rel = ||ours - torch|| / ||torch||. Bounds (the issue's): logits 1e-6,
each loss 1e-4, each initial gradient 1e-5, each parameter after S steps 1e-4. The table's last
column is the yardstick: torch fp32 against torch float64 (worst rel / bound).

Routing is discontinuous: a top-k choice within rounding of a tie could go either way in fp32.
So torch's float64 run logs, at every forward of its trajectory (S + 1) and every sparse layer,
the relative margin (p_k - p_k+1) / p_k between the k-th and (k+1)-th probability; the test
asserts it exceeds MIN_MARGIN = 1e-4 at the chosen seeds (fp32 rounding moves the logits by
~1e-6), and that torch fp32 chooses the same experts for every row at every forward. Measured at
these seeds: smallest margins 1.2e-3 (qwen3moe_k3) .. 2.3e-3 (mixtral_aux); torch fp32 is
0.17..0.30 x the bounds from float64 (its logits 1.7e-7..3.0e-7: the 1e-6 bound is reachable).
An expert that no token reaches over the whole run (at least one per MoE case, by construction)
has a zero gradient: the driver's must be exactly 0, and its weights after S steps
must be exactly decayed, w0 (1 - lr wd)^S, to 1e-6 (AdamW's m and v stay 0: no step).

Self-checks, run before the driver and without it:
 - moe_torch.py behaves like a causal LM: first loss within 0.5 of log(V), the loss falls, every
   parameter (but the unrouted experts) moves > 10 x its bound; changing token t changes no
   logit before t (bit for bit) and changes those from t on;
 - the sparse / dense layers are the ones HF's rule gives (EXPECT_SPARSE), the routing is not
   degenerate (each sparse layer uses > k experts at the first forward) and some expert is
   unrouted; the margins above;
 - discrimination: torch with one detail wrong -- top-k renormalised where HF does not or vice
   versa; the aux term dropped, or summed per layer, or added although output_router_logits is
   off; q/k norm after RoPE; interleaved RoPE; kv head h % NKV; no causal mask; Adam's L2
   decay -- must be > 10 x a bound and > 100 x the yardstick from torch float64, and (with the
   driver) from the driver.
Until the driver knows these architectures (its error says "not supported"), the script runs
the self-checks and exits 77 saying so.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_util  # noqa: E402  (first: without torch / numpy it exits 77, skipped)
import numpy as np  # noqa: E402
import torch  # noqa: E402
import moe_torch  # noqa: E402
from llama_vs_torch import make_batch  # noqa: E402
from ref_util import f32, rel, worst, worst_ratio  # noqa: E402

BOUNDS = {"logits": 1e-6, "loss": 1e-4, "grad": 1e-5, "param": 1e-4}
DECAY_BOUND = 1e-6     # an unrouted expert after S steps against w0 (1 - lr wd)^S
STEPS = 5
LR, WEIGHT_DECAY, BETAS, EPS = 3e-3, 0.1, (0.9, 0.999), 1e-8
MOVE = 10
DISCRIMINATION, DISCRIMINATION_VS_FP64 = 10, 100
MIN_MARGIN = 1e-4
DRIVER_TIMEOUT_S = 300
UNSUPPORTED = "not supported"

CASES = []


def case(name, B, T, expect_sparse, checkpointing=False, seed=0, **hf):
    j = {"architectures": [hf.pop("arch")], "hidden_act": "silu", "max_position_embeddings": 64,
         **hf}
    j["model_type"] = {"Qwen3ForCausalLM": "qwen3", "MixtralForCausalLM": "mixtral",
                       "Qwen3MoeForCausalLM": "qwen3_moe"}[j["architectures"][0]]
    CASES.append(dict(name=name, hf=j, cfg=moe_torch.MoeConfig.from_hf(j), B=B, T=T,
                      checkpointing=checkpointing, expect_sparse=expect_sparse, seed=seed))


case("qwen3_tied", B=2, T=11, expect_sparse=(False, False), arch="Qwen3ForCausalLM",
     vocab_size=67, hidden_size=40, intermediate_size=56, num_hidden_layers=2,
     num_attention_heads=6, num_key_value_heads=2, head_dim=14, rope_theta=1000000.0,
     rms_norm_eps=1e-6, tie_word_embeddings=True)
case("mixtral_aux", B=2, T=7, expect_sparse=(True, True), seed=1, arch="MixtralForCausalLM",
     vocab_size=61, hidden_size=36, intermediate_size=44, num_hidden_layers=2,
     num_attention_heads=6, num_key_value_heads=2, num_local_experts=5, num_experts_per_tok=2,
     output_router_logits=True, router_aux_loss_coef=0.02, router_jitter_noise=0.0,
     sliding_window=None, rope_theta=1000000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)
case("qwen3moe_k3", B=2, T=9, expect_sparse=(True, False, True), arch="Qwen3MoeForCausalLM",
     vocab_size=73, hidden_size=40, intermediate_size=52, moe_intermediate_size=20,
     num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=12,
     num_experts=8, num_experts_per_tok=3, norm_topk_prob=True, decoder_sparse_step=1,
     mlp_only_layers=[1], output_router_logits=True, rope_theta=1000000.0, rms_norm_eps=1e-6,
     tie_word_embeddings=False)
case("qwen3moe_raw", B=3, T=5, expect_sparse=(False, True), arch="Qwen3MoeForCausalLM",
     vocab_size=59, hidden_size=44, intermediate_size=60, moe_intermediate_size=28,
     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, head_dim=10,
     num_experts=6, num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=2,
     mlp_only_layers=[], output_router_logits=True, router_aux_loss_coef=0.01,
     rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)
case("mixtral_ckpt", B=2, T=9, expect_sparse=(True, True, True), checkpointing=True,
     arch="MixtralForCausalLM", vocab_size=53, hidden_size=32, intermediate_size=40,
     num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1, num_local_experts=4,
     num_experts_per_tok=2, rope_theta=1000000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)


def _gqa(cfg):
    return 1 < cfg.num_key_value_heads < cfg.num_attention_heads


def _aux(cfg):
    return any(cfg.sparse) and cfg.output_router_logits


# (what, deviation of torch's config for a case, or None where it changes nothing)
BUGS = [("top-k renorm flipped", lambda cfg: dict(renormalize="flip") if any(cfg.sparse) else None),
        ("aux loss dropped", lambda cfg: dict(aux="off") if _aux(cfg) else None),
        ("aux summed per layer",
         lambda cfg: dict(aux="per_layer") if _aux(cfg) and sum(cfg.sparse) > 1 else None),
        ("aux without the flag", lambda cfg: dict(output_router_logits=True)
         if any(cfg.sparse) and not cfg.output_router_logits else None),
        ("q/k norm after RoPE", lambda cfg: dict(qk_norm_at="after_rope") if cfg.qk_norm else None),
        ("interleaved RoPE", lambda cfg: dict(rope="interleaved")),
        ("kv head h % NKV", lambda cfg: dict(kv_map="modulo") if _gqa(cfg) else None),
        ("no causal mask", lambda cfg: dict(causal=False)),
        ("Adam (L2), not AdamW", lambda cfg: dict(optimizer="adam"))]


def run_torch(c, weights, inputs, targets, dtype=torch.float64, optimizer="adamw", **deviation):
    cfg = moe_torch.MoeConfig.from_hf(c["hf"], **deviation)
    return moe_torch.train(cfg, weights, inputs, targets, STEPS, lr=f32(LR),
                           weight_decay=f32(WEIGHT_DECAY), betas=(f32(BETAS[0]), f32(BETAS[1])),
                           eps=f32(EPS), dtype=dtype, optimizer=optimizer)


def short(name):
    return (name.replace("model.layers.", "L").replace("self_attn.", "").replace("mlp.", "")
            .replace("block_sparse_moe.", "").replace("experts.", "x"))


# ---- the driver -------------------------------------------------------------------------------

def run_driver(driver, workdir, c, weights, inputs, targets):
    out, seconds = ref_util.run_model_driver(driver, workdir, c["name"], c["hf"], weights, inputs, targets,
                                             STEPS, LR, WEIGHT_DECAY, BETAS, EPS, c["checkpointing"],
                                             DRIVER_TIMEOUT_S)
    return read_output(out, c), seconds


def read_output(path, c):
    return ref_util.read_driver_output(path, moe_torch.param_shapes(c["cfg"]), c["B"], c["T"], c["cfg"].vocab_size,
                                       STEPS)


# ---- comparison -------------------------------------------------------------------------------

def compare(ours, ref):
    rows = [("logits", "logits", rel(ours["logits"], ref["logits"]))]
    rows += [("loss", f"losses[{i}]", rel(ours["losses"][i], ref["losses"][i]))
             for i in range(STEPS + 1)]
    rows += [("grad", "grad." + n, rel(ours["grads"][n], g)) for n, g in ref["grads"].items()]
    rows += [("param", "param." + n, rel(ours["params"][n], p))
             for n, p in ref["params"].items()]
    return rows


def decay_rows(ours, weights, unrouted):
    """[(name, rel)]: each unrouted expert tensor after S steps against w0 (1 - lr wd)^S."""
    decay = (1.0 - f32(LR) * f32(WEIGHT_DECAY)) ** STEPS
    return [(n, rel(ours["params"][n], weights[n].astype(np.float64) * decay)) for n in unrouted]


# ---- self-checks of the torch model -----------------------------------------------------------

def check_torch_model(c, weights, inputs, ref, failures):
    """The self-checks that need no driver (see the docstring); returns the unrouted tensors."""
    cfg, name = c["cfg"], c["name"]
    unrouted = []
    if cfg.sparse != tuple(c["expect_sparse"]):
        failures.append(f"{name}: sparse layers {cfg.sparse}, expected {c['expect_sparse']}")
    if any(cfg.sparse):
        margin, counts = moe_torch.routing_summary(ref["routing"], cfg)
        unrouted = moe_torch.unrouted_params(cfg, counts)
        first = ref["routing"][:sum(cfg.sparse)]
        used = [int(np.count_nonzero(r["counts"])) for r in first]
        print(f"  {name}: tokens per expert over the run, per sparse layer: "
              + "; ".join(f"L{i} {v.tolist()}" for i, v in counts.items())
              + f"; smallest top-k margin {margin:.2e}; aux at step 0 {ref['aux']:.4f}")
        if not margin > MIN_MARGIN:
            failures.append(f"{name}: a top-k choice is within {margin:.1e} (relative) of a tie "
                            f"(< {MIN_MARGIN:g}): pick another seed")
        if not all(u > cfg.num_experts_per_tok for u in used):
            failures.append(f"{name}: degenerate routing: experts used per layer {used}")
        if not unrouted:
            failures.append(f"{name}: every expert got a token; the unrouted case is not tested")
        decay = (1.0 - f32(LR) * f32(WEIGHT_DECAY)) ** STEPS
        for n in unrouted:
            if np.any(ref["grads"][n] != 0) or not rel(
                    ref["params"][n], weights[n].astype(np.float64) * decay) < 1e-12:
                failures.append(f"{name}: torch's unrouted {n} has a gradient or is not just "
                                "decayed")
    moving = {"losses": ref["losses"],
              "params": {n: p for n, p in ref["params"].items() if n not in unrouted}}
    ref_util.check_torch_training(failures, name, moving, weights, cfg.vocab_size, STEPS,
                                  near_log_v=0.5, fall=0.01, move_bound=MOVE * BOUNDS["param"])
    model = moe_torch.MoeLm(cfg, torch.float64)
    model.load_numpy(weights)
    t = c["T"] // 2
    changed = inputs.astype(np.int64)
    changed[:, t] = (changed[:, t] + 1) % cfg.vocab_size
    with torch.no_grad():
        a, _ = model(torch.from_numpy(inputs.astype(np.int64)))
        b, _ = model(torch.from_numpy(changed))
    # Not bit for bit as in llama_vs_torch.py: token t's routing changes how many rows an
    # expert's matmuls get, which may change their blocking and so the rounding of other rows.
    if not rel(b[:, :t].numpy(), a[:, :t].numpy()) < 1e-13:
        failures.append(f"{name}: torch model is not causal: changing token {t} changes earlier "
                        f"logits (rel {rel(b[:, :t].numpy(), a[:, :t].numpy()):.1e})")
    if not rel(b[:, t:].numpy(), a[:, t:].numpy()) > 1e-3:
        failures.append(f"{name}: changing token {t} does not change the logits from {t} on")
    return unrouted


def discriminate(c, weights, inputs, targets, against, yardstick, failures, what):
    """One line: worst rel / bound of torch-with-each-bug against `against` (torch float64 or
    the driver); failures where a bug is not told apart."""
    line = ""
    for label, deviation_for in BUGS:
        deviation = deviation_for(c["cfg"])
        if deviation is None:
            line += f" {'n/a':>9}"
            continue
        ratio = worst_ratio(compare(against, run_torch(c, weights, inputs, targets,
                                                       **deviation)), BOUNDS)
        line += f" {ratio:9.1e}"
        if not (ratio > DISCRIMINATION and ratio > DISCRIMINATION_VS_FP64 * yardstick):
            failures.append(f"{c['name']}: {what} cannot be told from torch with {label} (worst "
                            f"rel / bound {ratio:.1f}, fp32/64 {yardstick:.2f})")
    return line


# ---- main -------------------------------------------------------------------------------------

def main():
    args = ref_util.start(__doc__, "driver", path_help="path to model_reference_driver",
                          keep_help="keep the driver's input/output files in this directory")
    print(f"{STEPS} AdamW steps, lr {LR:g}, weight decay {WEIGHT_DECAY:g}, betas {BETAS}, "
          f"eps {EPS:g}; strata fp32 vs torch float64; rel = ||ours - torch|| / ||torch|| per "
          "tensor; bounds: " + ", ".join(f"{k} {v:g}" for k, v in BOUNDS.items()))
    failures = []
    started = time.monotonic()
    tmp, workdir = ref_util.work_dir(args.keep, prefix="moe_vs_torch_")

    print("\n== torch alone (self-checks; yardstick = torch fp32 vs float64, worst rel / bound)")
    prepared = []
    for k, c in enumerate(CASES):
        cfg = c["cfg"]
        weights = moe_torch.random_weights(cfg, seed=8100 + k + c["seed"])
        inputs, targets = make_batch(cfg, c["B"], c["T"], seed=9100 + k + c["seed"])
        ref = run_torch(c, weights, inputs, targets)
        ref32 = run_torch(c, weights, inputs, targets, dtype=torch.float32)
        yard_rows = compare(ref32, ref)
        yardstick = worst_ratio(yard_rows, BOUNDS)
        print(f"{c['name']}: {cfg.architecture} V {cfg.vocab_size} C {cfg.hidden_size} "
              f"L {cfg.num_hidden_layers} NH {cfg.num_attention_heads} NKV "
              f"{cfg.num_key_value_heads} hs {cfg.head_dim} E {cfg.num_experts} k "
              f"{cfg.num_experts_per_tok} B {c['B']} T {c['T']}; fp32/64: "
              + ", ".join(f"{kind} {worst(yard_rows, kind)[0]:.1e}" for kind in BOUNDS)
              + f" ({yardstick:.2f} x bound)")
        unrouted = check_torch_model(c, weights, inputs, ref, failures)
        flip = moe_torch.first_routing_difference(ref["routing"], ref32["routing"])
        if flip is not None:
            failures.append(f"{c['name']}: torch fp32 routes differently from float64 (sparse "
                            f"layer record {flip[0]}, row {flip[1]}): pick another seed")
        prepared.append((c, weights, inputs, targets, ref, yardstick, unrouted))
    print(f"\ndiscrimination vs torch float64: worst rel / bound of torch-with-a-bug (must exceed "
          f"{DISCRIMINATION} and {DISCRIMINATION_VS_FP64} x fp32/64)")
    print(f"  {'case':<14}" + "".join(f" {label[:9]:>9}" for label, _ in BUGS))
    for c, weights, inputs, targets, ref, yardstick, _ in prepared:
        print(f"  {c['name']:<14}" + discriminate(c, weights, inputs, targets, ref, yardstick,
                                                  failures, "torch float64"))

    print("\n== the driver")
    hdr = (f"{'case':<14} {'logits':>8} {'loss':>8} {'grad':>8} {'param':>8} {'decay':>8}  "
           f"{'worst grad / param tensor':<52} {'drv s':>5} {'fp32/64':>7}")
    print(hdr)
    print("-" * len(hdr))
    unsupported, done = [], []
    for c, weights, inputs, targets, ref, yardstick, unrouted in prepared:
        try:
            ours, seconds = run_driver(args.driver, workdir, c, weights, inputs, targets)
        except (RuntimeError, OSError, ValueError) as e:
            if UNSUPPORTED in str(e):
                unsupported.append(c["cfg"].architecture)
                print(f"{c['name']:<14} {c['cfg'].architecture} {UNSUPPORTED} by the driver")
            else:
                failures.append(f"{c['name']}: {e}")
                print(f"{c['name']:<14} driver failed (see below)")
            continue
        rows = compare(ours, ref)
        decays = decay_rows(ours, weights, unrouted)
        worst_decay = max((r for _, r in decays), default=0.0)
        w = {kind: worst(rows, kind) for kind in BOUNDS}
        tensors = f"{short(w['grad'][1][5:])} / {short(w['param'][1][6:])}"
        print(f"{c['name']:<14} {w['logits'][0]:8.1e} {w['loss'][0]:8.1e} {w['grad'][0]:8.1e} "
              f"{w['param'][0]:8.1e} {worst_decay:8.1e}  {tensors:<52} {seconds:5.1f} "
              f"{yardstick:7.1e}")
        for kind, what, r in rows:
            if not r <= BOUNDS[kind]:  # NaN fails too
                failures.append(f"{c['name']}: {what}: rel {r:.3e} > {BOUNDS[kind]:g}")
        for n, r in decays:
            if not r <= DECAY_BOUND:
                failures.append(f"{c['name']}: unrouted {n}: rel {r:.3e} from w0 (1 - lr wd)^S "
                                f"(> {DECAY_BOUND:g})")
        done.append((c, weights, inputs, targets, ours, yardstick))
    if done:
        print(f"\ndiscrimination vs the driver (must exceed {DISCRIMINATION} and "
              f"{DISCRIMINATION_VS_FP64} x fp32/64)")
        print(f"  {'case':<14}" + "".join(f" {label[:9]:>9}" for label, _ in BUGS))
        for c, weights, inputs, targets, ours, yardstick in done:
            print(f"  {c['name']:<14}" + discriminate(c, weights, inputs, targets, ours,
                                                      yardstick, failures, "the driver"))
    if unsupported and not failures:
        if tmp:
            tmp.cleanup()
        print(f"\nskipped: model_reference_driver does not support "
              f"{', '.join(sorted(set(unsupported)))} yet (the torch self-checks passed"
              f"{'' if not done else '; the other cases compared and passed'})")
        return 77
    return ref_util.finish(failures, tmp, f"{len(CASES)} cases", started)


if __name__ == "__main__":
    sys.exit(main())
