#!/usr/bin/python3
"""strata's GPT-2 (model_reference_driver) against a PyTorch GPT-2 (gpt2_torch.py).

Usage: /usr/bin/python3 gpt_vs_torch.py --driver PATH/model_reference_driver [--keep DIR]

Debian's interpreter (/usr/bin/python3 with python3-torch 1.13 and python3-numpy, from
scripts/setup.sh); exits 77 (skipped) when torch or numpy cannot be imported. Files go through
st_io.py (safetensors on numpy; Debian has no `safetensors` package).

The driver's contract:
  model_reference_driver --config CONFIG.json --weights W.safetensors --batch BATCH.safetensors
      --steps S --lr LR --weight-decay WD --beta1 B1 --beta2 B2 --eps EPS --out OUT.safetensors
      [--checkpointing]
  CONFIG.json: the HF GPT-2 keys vocab_size, n_positions, n_embd, n_layer, n_head,
  layer_norm_epsilon. W: F32 tensors with HF GPT-2 names and layouts (Conv1D weights stored
  (in, out)), optionally prefixed "transformer.". BATCH: "inputs", "targets", I32 (B, T).
  The driver: forward at W (mean cross-entropy over all B*T tokens), backward, S steps of
  torch.optim.AdamW (one group holding every parameter, the same batch each step, wte tied to
  the LM head), a last forward. OUT (F32): "logits" (B, T, V) of the first forward; "losses"
  (S+1,), losses[i] after i updates; "grad.<name>" (gradient at W) and "param.<name>" (after S
  steps) for every parameter, HF names without prefix and HF layouts.

Each case (CASES, below: C, V and T that are no multiples of 64, 8 or 2^k, head sizes 8, 9,
16 and 20, NH = 1, T = n_positions, a non-default layer_norm_epsilon, one with --checkpointing,
one with "transformer." names) gets seeded random weights and tokens; the driver and torch
(fp32, one thread) run S = 5 steps with lr 3e-3, weight decay 0.1, betas (0.9, 0.999), eps
1e-8. The hyper-parameters go to the driver as the decimal of their fp32 value, so parsing
them as float or as double gives the number torch uses. Per tensor, in float64:
rel = ||ours - torch|| / ||torch||. Bounds:
  logits, each loss        1e-5
  each initial gradient    1e-4
  each parameter after S   1e-4
Both sides compute in fp32 but in different orders (matmul blocking, reductions, fused or
split LayerNorm / softmax / GELU, FMA), so they agree to fp32 rounding amplified by the
network: logits come from a few short reductions (relative error ~1e-7..1e-6); gradients pass
back through every layer, the softmax and LayerNorm backward, and sums over B*T positions that
cancel, so 1e-4 per tensor; AdamW divides by sqrt(v), so an element whose gradient is small
next to its rounding error steps by up to lr in a direction neither side can be sure of, and
the error grows with lr -- 1e-4 over the tensor's norm leaves room for a few such elements,
not for a wrong formula. As a yardstick the table's last column shows how far torch fp32
itself is from torch float64 on the same case (worst rel / bound over all quantities): 0.02 to
0.09 here, so a correct fp32 implementation has ~10x headroom. lr 1e-2 moved the weights no
more usefully but put torch fp32 at 0.3 x the bound from float64 (lr 3e-3 still moves every
tensor > 10 x its bound, checked, and the loss falls by 0.3 to 1.1 nats).

The key bias is special: c_attn.bias[C:2C] has no gradient in exact arithmetic (q . b_k is
added to every score of a softmax row, which the softmax ignores), so both sides' values are
rounding noise (~1e-7 of the bias gradient's norm) which AdamW turns into steps of up to lr in
arbitrary directions (measured: rel 1e-2 between torch fp32 and float64). So the parameters
after S steps are compared without it ("c_attn.bias[q,v]"), and two checks replace that
comparison: "kb grad" = ||our key-bias gradient|| / ||our c_attn.bias gradient|| <= 1e-5
(exact zero up to rounding), and "kb step" = max |p_k - p0_k (1 - lr wd)^S| / (S lr) <= 1.1
(an AdamW step with these betas moves an element by at most ~1.01 lr for S <= 5, whatever the
gradients are).

Initial weights: LayerNorm weights 1 + 0.1 N(0,1) and all biases 0.02 N(0,1) (nothing
trivially one or zero); wte, wpe and the c_proj weights N(0, 0.02^2) as GPT-2 initializes;
c_attn and c_fc weights N(0, 1/C), so attention scores and GELU inputs are O(1). With 0.02
there the softmax is nearly uniform and the GELU nearly linear: torch with the exact GELU
came within 0.1 to 8.8 x the bounds of torch with the tanh one (undetectable), and 1/sqrt(C)
for 1/sqrt(hs) within 59 x.

Self-checks, so that a pass means something:
 - gpt2_torch.py behaves like GPT-2: the initial loss is within 0.1 of log(V) (the tied head
   with std-0.02 embeddings gives near-uniform logits); changing the token at position t
   changes no logit before t (bit for bit) and changes those from t on; the loss falls and
   every parameter tensor moves > 10 x its bound over the S steps.
 - discrimination: torch with one detail wrong -- the exact GELU, no causal mask, 1/sqrt(C)
   for 1/sqrt(hs) (where NH > 1), layer_norm_epsilon x 10, torch.optim.Adam's L2 decay for
   AdamW's -- must differ from the driver's result in every case by > 10 x a bound somewhere
   and by > 100 x the fp32-vs-float64 yardstick (the exact GELU is the closest: 16 to 180 x).

Runtime: ~7 s for the torch side on 2 cores, plus the driver's.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_util  # noqa: E402  (first: without torch / numpy it exits 77, skipped)
import numpy as np  # noqa: E402
import torch  # noqa: E402
import gpt2_torch  # noqa: E402
from ref_util import (f32, make_weights, nan_max, rel, without_key, worst,  # noqa: E402
                      worst_ratio)

BOUNDS = {"logits": 1e-5, "loss": 1e-5, "grad": 1e-4, "param": 1e-4}
STEPS = 5
LR, WEIGHT_DECAY, BETAS, EPS = 3e-3, 0.1, (0.9, 0.999), 1e-8
MOVE = 10  # each parameter tensor must end > MOVE x its bound away from its initial value
DISCRIMINATION, DISCRIMINATION_VS_FP64 = 10, 100  # see the docstring
# (what, deviation of torch's run for a config, or None where it changes nothing)
BUGS = [("exact GELU", lambda cfg: dict(gelu="none")),
        ("no causal mask", lambda cfg: dict(causal=False)),
        ("scale 1/sqrt(C)", lambda cfg: dict(attn_scale="embd") if cfg.n_head > 1 else None),
        ("layer_norm_eps x 10", lambda cfg: dict(layer_norm_epsilon=cfg.layer_norm_epsilon * 10)),
        ("Adam (L2), not AdamW", lambda cfg: dict(optimizer="adam"))]
KBIAS_GRAD_BOUND = 1e-5  # ||key part of grad c_attn.bias|| / ||grad c_attn.bias||
DRIVER_TIMEOUT_S = 300

CASES = []


def case(name, V, P, C, L, NH, B, T, ln_eps=1e-5, prefix=False, checkpointing=False):
    CASES.append(dict(name=name, cfg=gpt2_torch.GptConfig(V, P, C, L, NH, ln_eps), B=B, T=T,
                      prefix=prefix, checkpointing=checkpointing))


case("odd_small", V=37, P=16, C=24, L=2, NH=3, B=2, T=7)                  # hs 8
case("odd_hs9_prefix", V=50, P=32, C=36, L=3, NH=4, B=3, T=13, prefix=True)  # hs 9
case("nh1_Tmax_eps1e-6", V=29, P=12, C=20, L=1, NH=1, B=3, T=12, ln_eps=1e-6)  # hs 20
case("ckpt", V=101, P=24, C=48, L=3, NH=6, B=2, T=19, checkpointing=True)  # hs 8
case("larger", V=311, P=64, C=64, L=2, NH=4, B=4, T=32)                   # hs 16


# ---- data -------------------------------------------------------------------------------------

def make_batch(cfg, B, T, seed):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32),
            rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32))


def run_torch(c, weights, inputs, targets, dtype=torch.float32, optimizer="adamw",
              **deviation):
    cfg = c["cfg"]
    if deviation:
        cfg = gpt2_torch.GptConfig(**{**cfg.__dict__, **deviation})
    return gpt2_torch.train(cfg, weights, inputs, targets, STEPS, lr=f32(LR),
                            weight_decay=f32(WEIGHT_DECAY), betas=(f32(BETAS[0]), f32(BETAS[1])),
                            eps=f32(EPS), dtype=dtype, optimizer=optimizer)


# ---- the driver -------------------------------------------------------------------------------

def run_driver(driver, workdir, c, weights, inputs, targets):
    prefix = gpt2_torch.HF_PREFIX if c["prefix"] else ""
    out, seconds = ref_util.run_model_driver(driver, workdir, c["name"], c["cfg"].hf_json(), {prefix + k: v for k, v in weights.items()}, inputs, targets,
                                             STEPS, LR, WEIGHT_DECAY, BETAS, EPS, c["checkpointing"],
                                             DRIVER_TIMEOUT_S)
    return read_output(out, c), seconds


def read_output(path, c):
    return ref_util.read_driver_output(path, gpt2_torch.param_shapes(c["cfg"]), c["B"], c["T"], c["cfg"].vocab_size,
                                       STEPS, extra_allowed=True)


# ---- comparison -------------------------------------------------------------------------------

def compare(ours, ref):
    """[(kind, what, rel)] for every compared quantity."""
    rows = [("logits", "logits", rel(ours["logits"], ref["logits"]))]
    rows += [("loss", f"losses[{i}]", rel(ours["losses"][i], ref["losses"][i]))
             for i in range(STEPS + 1)]
    rows += [("grad", "grad." + n, rel(ours["grads"][n], g)) for n, g in ref["grads"].items()]
    rows += [("param", "param." + n + ("[q,v]" if n.endswith("c_attn.bias") else ""),
              rel(without_key(n, ours["params"][n]), without_key(n, p)))
             for n, p in ref["params"].items()]
    return rows


def key_bias(out, weights, cfg):
    """The key bias (c_attn.bias[C:2C]) has no gradient in exact arithmetic: q . b_k is added
    to every score of a softmax row. Returns, worst over the layers, (||grad key part|| /
    ||grad c_attn.bias||, max |p_k - p0_k (1 - lr wd)^S| / (S lr)): the first is rounding
    noise (bound KBIAS_GRAD_BOUND); the second is at most ~1.01 whatever that noise is, since
    an AdamW step with betas (0.9, 0.999) moves an element by at most ~1.01 lr for S <= 5
    (Cauchy-Schwarz on m / sqrt(v)), so it must stay <= 1.1."""
    C, g_ratios, p_ratios = cfg.n_embd, [0.0], [0.0]
    decay = (1.0 - f32(LR) * f32(WEIGHT_DECAY)) ** STEPS
    for i in range(cfg.n_layer):
        n = f"h.{i}.attn.c_attn.bias"
        g = out["grads"][n].astype(np.float64)
        g_norm = np.linalg.norm(g)
        g_ratios.append(float(np.linalg.norm(g[C:2 * C]) / g_norm) if g_norm else 0.0)
        moved = out["params"][n][C:2 * C].astype(np.float64) - weights[n][C:2 * C] * decay
        p_ratios.append(float(np.max(np.abs(moved))) / (STEPS * f32(LR)))
    return nan_max(g_ratios), nan_max(p_ratios)


# ---- self-checks of the torch model -----------------------------------------------------------

def check_torch_model(c, weights, inputs, ref, failures):
    cfg, name = c["cfg"], c["name"]
    ref_util.check_torch_training(failures, name, ref, weights, cfg.vocab_size, STEPS,
                                  near_log_v=0.1, fall=0.01, move_bound=MOVE * BOUNDS["param"])
    # Causality: a new token at position t changes no logit before t, and those from t on.
    model = gpt2_torch.Gpt2(cfg)
    model.load_numpy(weights)
    t = c["T"] // 2
    changed = inputs.astype(np.int64)
    changed[:, t] = (changed[:, t] + 1) % cfg.vocab_size
    with torch.no_grad():
        a, _ = model(torch.from_numpy(inputs.astype(np.int64)))
        b, _ = model(torch.from_numpy(changed))
    if not torch.equal(a[:, :t], b[:, :t]):
        failures.append(f"{name}: torch model is not causal: changing token {t} changes earlier "
                        "logits")
    if not rel(b[:, t:].numpy(), a[:, t:].numpy()) > 1e-3:
        failures.append(f"{name}: changing token {t} does not change the logits from {t} on")


# ---- main -------------------------------------------------------------------------------------

def main():
    args = ref_util.start(__doc__, "driver", path_help="path to model_reference_driver",
                          keep_help="keep the driver's input/output files in this directory")
    print(f"{STEPS} AdamW steps, lr {LR:g}, weight decay {WEIGHT_DECAY:g}, betas {BETAS}, "
          f"eps {EPS:g}; rel = ||ours - torch|| / ||torch|| per tensor; bounds: "
          + ", ".join(f"{k} {v:g}" for k, v in BOUNDS.items()))

    failures = []
    started = time.monotonic()
    tmp, workdir = ref_util.work_dir(args.keep, prefix="gpt_vs_torch_")
    hdr = (f"{'case':<16} {'V,P,C,L,NH,B,T':<22} {'logits':>8} {'loss':>8} {'grad':>8} "
           f"{'param':>8} {'kb grad':>7} {'kb step':>7}  {'worst grad / param tensor':<38} "
           f"{'drv s':>5} {'fp32/64':>7}")
    print(hdr)
    print("-" * len(hdr))
    done = []  # (case, weights, inputs, targets, ours, yardstick) for the discrimination
    for k, c in enumerate(CASES):
        cfg = c["cfg"]
        weights = make_weights(cfg, seed=5000 + k)
        inputs, targets = make_batch(cfg, c["B"], c["T"], seed=6000 + k)
        try:
            ours, seconds = run_driver(args.driver, workdir, c, weights, inputs, targets)
        except (RuntimeError, OSError, ValueError) as e:
            failures.append(f"{c['name']}: {e}")
            print(f"{c['name']:<16} driver failed (see below)")
            continue
        ref = run_torch(c, weights, inputs, targets)
        ref64 = run_torch(c, weights, inputs, targets, dtype=torch.float64)
        check_torch_model(c, weights, inputs, ref, failures)
        rows = compare(ours, ref)
        yardstick = worst_ratio(compare(ref, ref64), BOUNDS)
        w = {kind: worst(rows, kind) for kind in BOUNDS}
        shape = f"{cfg.vocab_size},{cfg.n_positions},{cfg.n_embd},{cfg.n_layer},{cfg.n_head}," \
                f"{c['B']},{c['T']}"
        kb_grad, kb_step = key_bias(ours, weights, cfg)
        tensors = f"{w['grad'][1][5:]} / {w['param'][1][6:]}"
        print(f"{c['name']:<16} {shape:<22} {w['logits'][0]:8.1e} {w['loss'][0]:8.1e} "
              f"{w['grad'][0]:8.1e} {w['param'][0]:8.1e} {kb_grad:7.1e} {kb_step:7.2f}  "
              f"{tensors:<38} {seconds:5.1f} {yardstick:7.1e}")
        for kind, what, r in rows:
            if not r <= BOUNDS[kind]:  # NaN fails too
                failures.append(f"{c['name']}: {what}: rel {r:.3e} > {BOUNDS[kind]:g}")
        if not kb_grad <= KBIAS_GRAD_BOUND:
            failures.append(f"{c['name']}: the key part of grad c_attn.bias is not ~0: "
                            f"{kb_grad:.3e} of the whole (bound {KBIAS_GRAD_BOUND:g})")
        if not kb_step <= 1.1:
            failures.append(f"{c['name']}: the key bias moved {kb_step:.2f} x S x lr from its "
                            "decayed initial value; AdamW cannot move it more than ~1.01 x")
        done.append((c, weights, inputs, targets, ours, yardstick))

    # The test must be able to fail: GPT-2 with one detail wrong must be far from the driver,
    # in every case: > 10 x a bound somewhere, and > 100 x as far as torch fp32 is from fp64.
    if done:
        print(f"\ndiscrimination: worst rel / bound of torch-with-a-bug vs the driver, per case "
              f"(must exceed {DISCRIMINATION} and {DISCRIMINATION_VS_FP64:g} x fp32/64)")
        print(f"  {'bug':<22}" + "".join(f" {c['name']:>16}" for c, *_ in done))
        for label, deviation_for in BUGS:
            line = f"  {label:<22}"
            for c, weights, inputs, targets, ours, yardstick in done:
                deviation = deviation_for(c["cfg"])
                if deviation is None:  # e.g. hs == C when n_head == 1
                    line += f" {'n/a':>16}"
                    continue
                ratio = worst_ratio(compare(ours, run_torch(c, weights, inputs, targets,
                                                            **deviation)), BOUNDS)
                line += f" {ratio:16.1e}"
                if not (ratio > DISCRIMINATION and ratio > DISCRIMINATION_VS_FP64 * yardstick):
                    failures.append(f"{c['name']}: the test cannot tell GPT-2 from GPT-2 with "
                                    f"{label} (worst rel / bound {ratio:.1f}, fp32/64 "
                                    f"{yardstick:.2f})")
            print(line)

    return ref_util.finish(failures, tmp, f"{len(CASES)} cases", started)


if __name__ == "__main__":
    sys.exit(main())
