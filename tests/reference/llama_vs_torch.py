#!/usr/bin/python3
"""strata's LLaMA family (model_reference_driver) against a PyTorch LLaMA (llama_torch.py).

Usage: /usr/bin/python3 llama_vs_torch.py --driver PATH/model_reference_driver [--keep DIR]

Debian's interpreter (/usr/bin/python3 with python3-torch 1.13 and python3-numpy, from
scripts/setup.sh); exits 77 (skipped) when torch or numpy cannot be imported. Files go through
st_io.py. The driver's contract is gpt_vs_torch.py's (see model_driver.cpp), with an HF
LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM config.json and its HF tensor names
(model.layers.0.self_attn.q_proj.weight, ...; no lm_head.weight when tied).

Each case (CASES, below) gets seeded random weights (llama_torch.random_weights: norm weights
1 + 0.1 N(0,1), q/k/v biases 0.1 N(0,1), q/k/v/gate/up N(0, 1/C), the rest 0.02..0.05 N(0,1))
and random tokens; the driver (fp32) and torch (float64, one thread) run S = 5 steps of AdamW
(lr 3e-3, weight decay 0.1, betas (0.9, 0.999), eps 1e-8, given to the driver as the decimal of
their fp32 values). The cases, at shapes no multiple of 8 or 2^k:
  gqa_hs24       GQA 6:2, head_dim 24 given explicitly: NH hs = 144 != hidden_size 40; untied
  llama3_tied    rope_theta 500000 with llama3 rope_scaling (factor 8, low 1, high 4, original
                 16: at hs 12 the first frequency is blended, the others divided by 8; checked
                 below), tied head, GQA 4:2
  qwen2_bias     Qwen2ForCausalLM (q/k/v biases), rope_theta 1e6, tied, GQA 6:3 (hs 10)
  mistral_mha    MistralForCausalLM, NKV = NH (MHA), untied, rms_norm_eps 1e-5, default window
  mqa_ckpt_bias  LlamaForCausalLM with attention_bias, NKV = 1 (MQA), head_dim 16 with C 56,
                 three layers, --checkpointing
  larger         GQA 8:2, V 311, B 4, T 32
Per tensor, in float64: rel = ||ours - torch|| / ||torch||. Bounds:
  logits                   1e-5
  each loss                1e-4
  each initial gradient    1e-4
  each parameter after S   1e-4
strata computes in fp32, so it can only agree with float64 to fp32 rounding amplified by the
network (see gpt_vs_torch.py for why gradients and AdamW steps get 1e-4). The table's last
column is the yardstick: torch fp32 against torch float64 on the same case (worst rel / bound
over all quantities); a correct fp32 implementation should be near it.
Measured (host backend): logits 3.6e-7..6.6e-7, losses <= 1.3e-7, gradients 8e-7..2e-6,
parameters after 5 steps 2.5e-7..1.2e-5 (gqa_hs24's o_proj, where torch fp32 is 9.5e-6 from
float64 too); the yardstick is 0.035..0.095 x the bounds.

The key bias (k_proj.bias, where there is one): RoPE rotates it by a different angle at every key
position, so unlike GPT-2's it has a gradient -- but only as large as the rotation: for a channel
pair (i, i + hs/2) whose angle over the whole sequence, (T - 1) inv_freq[i], is small, q . R_s b_k
is nearly the same for every key of a softmax row, which the softmax ignores. With rope_theta 1e6
and hs 10 (qwen2_bias) the slowest pair turns by 1.9e-4 rad over 13 tokens; its gradient is ~1e-5
of the fast pairs', within reach of fp32 rounding, and AdamW turns that into steps of up to lr in
directions neither side can be sure of (measured: torch fp32 is 2 x the bound from float64 there,
strata 1.8 x; every other channel agrees to ~1e-6). So the parameters after S steps are compared
without the pairs turning less than SLOW_ANGLE = 0.01 rad ("k_proj.bias[fast]"), and those are
checked instead like GPT-2's key bias: max |p - p0 (1 - lr wd)^S| / (S lr) <= 1.1 ("slow kb
step"; an AdamW step with these betas moves an element by at most ~1.01 lr for S <= 5). Their
initial gradients are compared whole (the gradient itself is fine: 1e-6).

Self-checks, so that a pass means something:
 - llama_torch.py behaves like a causal LM: the initial loss is within 0.5 of log(V); changing
   the token at position t changes no logit before t (bit for bit) and changes those from t on;
   the loss falls and every parameter tensor moves > 10 x its bound over the S steps;
 - the llama3 case: the scaled frequencies differ from the unscaled ones (some divided by
   factor, one blended), and the largest angle at T - 1 differs by more than 1 radian;
 - discrimination: torch with one detail wrong -- interleaved RoPE pairs (2i, 2i+1) for HF's
   rotate_half, query head h on kv head h % NKV for h // (NH / NKV) (where 1 < NKV < NH),
   llama3 scaling ignored (where there is one), no causal mask, torch.optim.Adam's L2 decay for
   AdamW's -- must differ from the driver's result in every case by > 10 x a bound somewhere
   and by > 100 x the fp32-vs-float64 yardstick.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_util  # noqa: E402  (first: without torch / numpy it exits 77, skipped)
import numpy as np  # noqa: E402
import torch  # noqa: E402
import llama_torch  # noqa: E402
from ref_util import f32, rel, worst, worst_ratio  # noqa: E402

BOUNDS = {"logits": 1e-5, "loss": 1e-4, "grad": 1e-4, "param": 1e-4}
STEPS = 5
LR, WEIGHT_DECAY, BETAS, EPS = 3e-3, 0.1, (0.9, 0.999), 1e-8
MOVE = 10
DISCRIMINATION, DISCRIMINATION_VS_FP64 = 10, 100
DRIVER_TIMEOUT_S = 300
SLOW_ANGLE = 0.01  # rad over the sequence; see the docstring on the key bias


def _gqa(cfg):
    return 1 < cfg.num_key_value_heads < cfg.num_attention_heads


# (what, deviation of torch's config for a case, or None where it changes nothing)
BUGS = [("interleaved RoPE", lambda cfg: dict(rope="interleaved")),
        ("kv head h % NKV", lambda cfg: dict(kv_map="modulo") if _gqa(cfg) else None),
        ("llama3 scaling off", lambda cfg: dict(use_scaling=False) if cfg.rope_scaling else None),
        ("no causal mask", lambda cfg: dict(causal=False)),
        ("Adam (L2), not AdamW", lambda cfg: dict(optimizer="adam"))]

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}

CASES = []


def case(name, B, T, checkpointing=False, **hf):
    j = {"architectures": [hf.pop("arch", "LlamaForCausalLM")], "hidden_act": "silu",
         "max_position_embeddings": 64, **hf}
    CASES.append(dict(name=name, hf=j, cfg=llama_torch.LlamaConfig.from_hf(j), B=B, T=T,
                      checkpointing=checkpointing))


case("gqa_hs24", B=2, T=11, vocab_size=67, hidden_size=40, intermediate_size=56,
     num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2, head_dim=24,
     rms_norm_eps=1e-6, tie_word_embeddings=False)
case("llama3_tied", B=2, T=17, vocab_size=53, hidden_size=48, intermediate_size=72,
     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, rope_theta=500000.0,
     rope_scaling=LLAMA3, rms_norm_eps=1e-5, tie_word_embeddings=True)
case("qwen2_bias", B=3, T=13, arch="Qwen2ForCausalLM", vocab_size=71, hidden_size=60,
     intermediate_size=68, num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=3,
     rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
case("mistral_mha", B=2, T=13, arch="MistralForCausalLM", vocab_size=59, hidden_size=40,
     intermediate_size=44, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
     rms_norm_eps=1e-5, tie_word_embeddings=False)
case("mqa_ckpt_bias", B=2, T=19, checkpointing=True, vocab_size=101, hidden_size=56,
     intermediate_size=88, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1,
     head_dim=16, attention_bias=True, tie_word_embeddings=False)
case("larger", B=4, T=32, vocab_size=311, hidden_size=64, intermediate_size=176,
     num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, rope_theta=500000.0,
     tie_word_embeddings=True)


def make_batch(cfg, B, T, seed):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32),
            rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32))


def run_torch(c, weights, inputs, targets, dtype=torch.float64, optimizer="adamw", **deviation):
    cfg = llama_torch.LlamaConfig.from_hf(c["hf"], **deviation)
    return llama_torch.train(cfg, weights, inputs, targets, STEPS, lr=f32(LR),
                             weight_decay=f32(WEIGHT_DECAY), betas=(f32(BETAS[0]), f32(BETAS[1])),
                             eps=f32(EPS), dtype=dtype, optimizer=optimizer)


# ---- the driver -------------------------------------------------------------------------------

def run_driver(driver, workdir, c, weights, inputs, targets):
    out, seconds = ref_util.run_model_driver(driver, workdir, c["name"], c["hf"], weights, inputs, targets,
                                             STEPS, LR, WEIGHT_DECAY, BETAS, EPS, c["checkpointing"],
                                             DRIVER_TIMEOUT_S)
    return read_output(out, c), seconds


def read_output(path, c):
    return ref_util.read_driver_output(path, llama_torch.param_shapes(c["cfg"]), c["B"], c["T"], c["cfg"].vocab_size,
                                       STEPS)


# ---- comparison -------------------------------------------------------------------------------

def compare(ours, ref, slow):
    """[(kind, what, rel)] for every compared quantity; `slow` (llama_torch.slow_key_bias) masks out of
    the parameter comparison."""
    fast = {n: ~m for n, m in slow.items()}
    rows = [("logits", "logits", rel(ours["logits"], ref["logits"]))]
    rows += [("loss", f"losses[{i}]", rel(ours["losses"][i], ref["losses"][i]))
             for i in range(STEPS + 1)]
    rows += [("grad", "grad." + n, rel(ours["grads"][n], g)) for n, g in ref["grads"].items()]
    rows += [("param", "param." + n + ("[fast]" if n in fast else ""),
              rel(ours["params"][n][fast.get(n, slice(None))], p[fast.get(n, slice(None))]))
             for n, p in ref["params"].items()]
    return rows


def slow_key_step(ours, weights, slow):
    """max over the slow key-bias entries of |p - p0 (1 - lr wd)^S| / (S lr); 0 without any."""
    decay = (1.0 - f32(LR) * f32(WEIGHT_DECAY)) ** STEPS
    worst_step = 0.0
    for n, mask in slow.items():
        if mask.any():
            moved = ours["params"][n][mask].astype(np.float64) - weights[n][mask] * decay
            worst_step = max(worst_step, float(np.max(np.abs(moved))) / (STEPS * f32(LR)))
    return worst_step


def short(name):
    return name.replace("model.layers.", "L").replace("self_attn.", "").replace("mlp.", "")


# ---- self-checks of the torch model -----------------------------------------------------------

def check_torch_model(c, weights, inputs, ref, failures):
    cfg, name = c["cfg"], c["name"]
    ref_util.check_torch_training(failures, name, ref, weights, cfg.vocab_size, STEPS,
                                  near_log_v=0.5, fall=0.01, move_bound=MOVE * BOUNDS["param"])
    model = llama_torch.Llama(cfg, torch.float64)
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
    if cfg.rope_scaling:
        scaled = llama_torch.rope_inv_freq(cfg)
        cfg.use_scaling = False
        plain = llama_torch.rope_inv_freq(cfg)
        cfg.use_scaling = True
        factor = cfg.rope_scaling["factor"]
        divided = int(np.sum(np.isclose(scaled, plain / factor, rtol=1e-12)))
        kept = int(np.sum(np.isclose(scaled, plain, rtol=1e-12)))
        blended = len(plain) - divided - kept
        shift = float(np.max(np.abs(scaled - plain))) * (c["T"] - 1)
        print(f"  {name}: llama3 scaling: {divided} frequencies / {factor:g}, {blended} blended, "
              f"{kept} kept; largest angle change at t = {c['T'] - 1}: {shift:.2f} rad")
        if not (divided > 0 and blended > 0 and shift > 1.0):
            failures.append(f"{name}: the llama3 scaling hardly changes the frequencies "
                            f"({divided} divided, {blended} blended, {shift:.2f} rad)")


# ---- main -------------------------------------------------------------------------------------

def main():
    args = ref_util.start(__doc__, "driver", path_help="path to model_reference_driver",
                          keep_help="keep the driver's input/output files in this directory")
    print(f"{STEPS} AdamW steps, lr {LR:g}, weight decay {WEIGHT_DECAY:g}, betas {BETAS}, "
          f"eps {EPS:g}; strata fp32 vs torch float64; rel = ||ours - torch|| / ||torch|| per "
          "tensor; bounds: " + ", ".join(f"{k} {v:g}" for k, v in BOUNDS.items()))

    failures = []
    started = time.monotonic()
    tmp, workdir = ref_util.work_dir(args.keep, prefix="llama_vs_torch_")
    hdr = (f"{'case':<14} {'arch':<7} {'V,C,F,L,NH,NKV,hs,B,T':<25} {'logits':>8} {'loss':>8} "
           f"{'grad':>8} {'param':>8}  {'worst grad / param tensor':<46} {'drv s':>5} "
           f"{'fp32/64':>7}")
    print(hdr)
    print("-" * len(hdr))
    done = []
    for k, c in enumerate(CASES):
        cfg = c["cfg"]
        weights = llama_torch.random_weights(cfg, seed=8000 + k)
        inputs, targets = make_batch(cfg, c["B"], c["T"], seed=9000 + k)
        try:
            ours, seconds = run_driver(args.driver, workdir, c, weights, inputs, targets)
        except (RuntimeError, OSError, ValueError) as e:
            failures.append(f"{c['name']}: {e}")
            print(f"{c['name']:<14} driver failed (see below)")
            continue
        ref = run_torch(c, weights, inputs, targets)
        ref32 = run_torch(c, weights, inputs, targets, dtype=torch.float32)
        slow = llama_torch.slow_key_bias(cfg, c["T"], SLOW_ANGLE)
        rows = compare(ours, ref, slow)
        yardstick = worst_ratio(compare(ref32, ref, slow), BOUNDS)
        kb_step = slow_key_step(ours, weights, slow)
        n_slow = sum(int(m.sum()) for m in slow.values())
        w = {kind: worst(rows, kind) for kind in BOUNDS}
        shape = (f"{cfg.vocab_size},{cfg.hidden_size},{cfg.intermediate_size},"
                 f"{cfg.num_hidden_layers},{cfg.num_attention_heads},{cfg.num_key_value_heads},"
                 f"{cfg.head_dim},{c['B']},{c['T']}")
        arch = cfg.architecture.replace("ForCausalLM", "")
        tensors = f"{short(w['grad'][1][5:])} / {short(w['param'][1][6:])}"
        print(f"{c['name']:<14} {arch:<7} {shape:<25} {w['logits'][0]:8.1e} {w['loss'][0]:8.1e} "
              f"{w['grad'][0]:8.1e} {w['param'][0]:8.1e}  {tensors:<46} {seconds:5.1f} "
              f"{yardstick:7.1e}")
        check_torch_model(c, weights, inputs, ref, failures)
        for kind, what, r in rows:
            if not r <= BOUNDS[kind]:  # NaN fails too
                failures.append(f"{c['name']}: {what}: rel {r:.3e} > {BOUNDS[kind]:g}")
        if not kb_step <= 1.1:
            failures.append(f"{c['name']}: a slow key-bias entry moved {kb_step:.2f} x S x lr "
                            "from its decayed initial value; AdamW cannot move it more than ~1.01 x")
        if slow:
            print(f"  {c['name']}: {n_slow} slow key-bias entries (pairs turning < {SLOW_ANGLE} "
                  f"rad), compared by their step: {kb_step:.2f} x S lr (<= 1.1)")
        done.append((c, weights, inputs, targets, ours, yardstick, slow))

    if done:
        print(f"\ndiscrimination: worst rel / bound of torch-with-a-bug vs the driver, per case "
              f"(must exceed {DISCRIMINATION} and {DISCRIMINATION_VS_FP64:g} x fp32/64)")
        print(f"  {'bug':<22}" + "".join(f" {c['name']:>14}" for c, *_ in done))
        for label, deviation_for in BUGS:
            line = f"  {label:<22}"
            for c, weights, inputs, targets, ours, yardstick, slow in done:
                deviation = deviation_for(c["cfg"])
                if deviation is None:
                    line += f" {'n/a':>14}"
                    continue
                ratio = worst_ratio(compare(ours, run_torch(c, weights, inputs, targets,
                                                            **deviation), slow), BOUNDS)
                line += f" {ratio:14.1e}"
                if not (ratio > DISCRIMINATION and ratio > DISCRIMINATION_VS_FP64 * yardstick):
                    failures.append(f"{c['name']}: the test cannot tell the model from one with "
                                    f"{label} (worst rel / bound {ratio:.1f}, fp32/64 "
                                    f"{yardstick:.2f})")
            print(line)

    return ref_util.finish(failures, tmp, f"{len(CASES)} cases", started)


if __name__ == "__main__":
    sys.exit(main())
