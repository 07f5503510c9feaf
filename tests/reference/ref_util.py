"""What the *_vs_torch.py scripts share: the torch/numpy check, the start (command line, torch on
one thread) and end (FAILED / PASSED) of main, the GPT-2 test weights, running the binary under
test, the norm-wise comparison helpers, the sanity checks of torch's run, and for the
`strata train` comparisons (train_vs_torch.py, llama_train_vs_torch.py) the DeepSpeed config,
the metrics and saved weights, and the torch side of strata's training loop.

Import it before numpy and torch: without them (not Debian's /usr/bin/python3, or
python3-torch missing; scripts/setup.sh installs both) the import prints why and exits 77,
which ctest counts as skipped (SKIP_RETURN_CODE 77). The scripts put their own folder on
sys.path first, so this module, gpt2_torch.py and st_io.py import as siblings.

Comparisons produce rows (kind, what, rel), rel = ||ours - torch|| / ||torch|| in float64, and
a script's BOUNDS maps each kind to its bound.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
except ImportError as e:  # not Debian's python3, or python3-torch missing
    print(f"skipped: cannot import torch/numpy ({e}); run scripts/setup.sh and use "
          "/usr/bin/python3")
    sys.exit(77)

import gpt2_torch  # noqa: E402

MAX_FAILURES_SHOWN = 40


def start(doc, option, path_help, keep_help):
    """A script's start: parse `--<option> PATH` (required; the binary under test) and
    `--keep DIR`; print FAILED and exit 1 unless PATH is executable; put torch on one thread
    (deterministic, and the machine is shared with the binary); print the versions and PATH.
    Returns the parsed arguments."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--" + option, required=True, help=path_help)
    ap.add_argument("--keep", help=keep_help)
    args = ap.parse_args()
    path = getattr(args, option)
    if not os.access(path, os.X_OK):
        print(f"FAILED: {option} {path!r} is not an executable file")
        sys.exit(1)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, numpy {np.__version__}; {option} {path}")
    return args


def f32(x):
    """The fp32 value of x as a Python float (what torch is given)."""
    return float(np.float32(x))


# ---- inputs -----------------------------------------------------------------------------------

def make_weights(cfg, seed):
    """Seeded random GPT-2 weights (HF names, float32) for gpt2_torch.GptConfig `cfg`: LayerNorm
    weights 1 + 0.1 N(0,1) and all biases 0.02 N(0,1) (nothing trivially one or zero); wte, wpe
    and the c_proj weights N(0, 0.02^2) as GPT-2 initializes; c_attn and c_fc weights
    N(0, 1/C), so that attention scores and GELU inputs are O(1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in gpt2_torch.param_shapes(cfg).items():
        noise = rng.standard_normal(shape)
        if ".ln_" in name or name.startswith("ln_f"):
            a = 1.0 + 0.1 * noise if name.endswith(".weight") else 0.02 * noise
        elif name.endswith(".bias"):
            a = 0.02 * noise
        elif name.endswith(("c_attn.weight", "c_fc.weight")):
            a = noise / math.sqrt(cfg.n_embd)
        else:  # wte, wpe, c_proj
            a = 0.02 * noise
        out[name] = a.astype(np.float32)
    return out


def make_tokens(cfg, n, seed):
    """n tokens < V with a skewed (Zipf-like, shuffled) distribution, so there is something to
    learn in 10 steps."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, cfg.vocab_size + 1)
    p = rng.permutation(p / p.sum())
    return rng.choice(cfg.vocab_size, size=n, p=p).astype(np.uint16)


def write_token_file(path, tokens):
    """llm.c format (models/io/token_file.h): 256 int32 header [magic 20240520, version 1,
    count, 0...], then the tokens as uint16, little-endian."""
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def work_dir(keep, prefix):
    """(tmp, path): the folder for the binary's files -- `keep` (created if need be) or a fresh
    temporary one; `tmp` is the TemporaryDirectory to clean up, None with `keep`."""
    tmp = None if keep else tempfile.TemporaryDirectory(prefix=prefix)
    path = keep or tmp.name
    os.makedirs(path, exist_ok=True)
    return tmp, path


# ---- the binary under test --------------------------------------------------------------------

def run_checked(cmd, timeout_s):
    """Run `cmd` (output captured); the seconds it took. Raises RuntimeError naming the command
    when it runs past `timeout_s` or exits non-zero (with the end of its output)."""
    started = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{' '.join(cmd)}: no result after {timeout_s} s") from None
    if r.returncode != 0:
        tail = (r.stdout + r.stderr)[-3000:]
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}; its output ends:\n{tail}")
    return time.monotonic() - started


# ---- `strata train` and its torch twin --------------------------------------------------------

def ds_config(zero, max_norm, *, micro_batch, gas, lr, betas, eps, weight_decay, schedule=None,
              nvme_dir=None):
    """The DeepSpeed-style config of a `strata train` run: fp32, AdamW, `zero` (a
    zero_optimization object; an offload_optimizer on "nvme" gets nvme_path = `nvme_dir`), the
    host device with a 64 MiB budget, aio block_size 64 KiB, and DeepSpeed's WarmupLR (linear)
    when `schedule` (its params) is given."""
    zero = json.loads(json.dumps(zero))
    if zero.get("offload_optimizer", {}).get("device") == "nvme":
        zero["offload_optimizer"]["nvme_path"] = nvme_dir
    c = {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": gas,
        "gradient_clipping": max_norm,
        "bf16": {"enabled": False},
        "fp16": {"enabled": False},
        "optimizer": {"type": "AdamW",
                      "params": {"lr": lr, "betas": list(betas), "eps": eps,
                                 "weight_decay": weight_decay}},
        "zero_optimization": zero,
        "aio": {"block_size": 65536},
        "strata": {"device": "host", "device_memory": "64MiB"},
    }
    if schedule:
        c["scheduler"] = {"type": "WarmupLR", "params": {**schedule, "warmup_type": "linear"}}
    return c


def read_metrics(path, steps):
    """strata's --metrics JSONL as {"losses", "lrs", "grad_norms"} arrays (one per step);
    raises unless it holds steps 1..`steps`, none skipped."""
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    if [m.get("step") for m in lines] != list(range(1, steps + 1)):
        raise RuntimeError(f"{path}: steps {[m.get('step') for m in lines]}, expected "
                           f"1..{steps}")
    if any(m.get("skipped") for m in lines):
        raise RuntimeError(f"{path}: a step was skipped (fp32 never skips)")
    return {"losses": np.array([m["loss"] for m in lines]),
            "lrs": np.array([m["lr"] for m in lines]),
            "grad_norms": np.array([m["grad_norm"] for m in lines])}


def load_saved(path):
    """The tensors `strata train --save` wrote: one safetensors file, or an HF model folder
    (model.safetensors, or the shards model.safetensors.index.json's weight_map names, each
    tensor in the shard the map says). Returns ({name: ndarray}, what) with `what` saying which
    form it was."""
    import st_io  # noqa: E402  (a sibling; imported here so that ref_util stays first)
    if not os.path.isdir(path):
        return st_io.load(path), "file"
    index = os.path.join(path, "model.safetensors.index.json")
    if not os.path.exists(index):
        return st_io.load(os.path.join(path, "model.safetensors")), "folder"
    with open(index) as f:
        weight_map = json.load(f)["weight_map"]
    out = {}
    for shard in sorted(set(weight_map.values())):
        for name, a in st_io.load(os.path.join(path, shard)).items():
            if weight_map.get(name) != shard:
                raise RuntimeError(f"{path}/{shard} holds {name}, which the index puts in "
                                   f"{weight_map.get(name)}")
            out[name] = a
    missing = sorted(set(weight_map) - set(out))
    if missing:
        raise RuntimeError(f"{index}: {', '.join(missing[:5])} in no shard")
    return out, f"{len(set(weight_map.values()))} shards"


def micro_batch(tokens, k, B, T, stride=None):
    """Micro-batch k of a run (models/io/batch_loader.h, sequential order, one rank): window k
    mod W, W = (ntokens - 1) // (B*T); inputs its first B*T tokens, targets the next B*T
    (shifted by one), both (B, T). stride (default B*T) is the windows' starts: B*T + 1 is a bug
    of the self-checks."""
    n = B * T
    stride = stride or n
    windows = (len(tokens) - 1 - n) // stride + 1
    w = k % windows
    seg = tokens[w * stride: w * stride + n + 1].astype(np.int64)
    return (torch.from_numpy(seg[:n].reshape(B, T).copy()),
            torch.from_numpy(seg[1:].reshape(B, T).copy()))


def lr_at(base_lr, schedule, k, late=False):
    """The lr of optimizer step k (0-based): `base_lr` without a schedule, else DeepSpeed's
    WarmupLR (linear) with last_batch_iteration -1 (step 0 uses warmup_min_lr, step k >= 1
    f(k - 1), f(i) = min + (max - min) min(1, i / max(2, warmup_num_steps))); late=True is the
    off-by-one bug (step k uses f(k))."""
    if schedule is None:
        return base_lr
    lo, hi = schedule["warmup_min_lr"], schedule["warmup_max_lr"]
    w = max(2, schedule["warmup_num_steps"])
    i = k if late else k - 1
    if i < 0:
        return lo
    return lo + (hi - lo) * (i / w if i < w else 1.0)


def torch_train(model, tokens, *, steps, B, T, gas, lr_of_step, max_norm, betas, eps,
                weight_decay, clip=True, decay_all=True, stride=None, loss_div=None,
                optimizer="adamw"):
    """`steps` optimizer steps of `model` (its forward(x, y) returns (logits, mean loss)) as
    strata's trainer runs them: per step `gas` micro-batches (micro_batch), each one's loss / gas
    backpropagated; the gradients clipped to `max_norm` (torch.nn.utils.clip_grad_norm_); one
    AdamW group holding every parameter at lr_of_step(k). The reported loss is the mean of the
    micro-batch losses. clip, decay_all (False: no decay on 1-d tensors), stride, loss_div and
    optimizer ("adam": L2 decay) are the self-checks' bugs.
    Returns {"losses", "lrs", "grad_norms", "params": {name: fp32 ndarray}}."""
    named = list(model.named_parameters())
    if decay_all:
        groups = [{"params": [p for _, p in named], "weight_decay": f32(weight_decay)}]
    else:
        groups = [{"params": [p for _, p in named if p.dim() >= 2],
                   "weight_decay": f32(weight_decay)},
                  {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0}]
    cls = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}[optimizer]
    opt = cls(groups, lr=lr_of_step(0), betas=(f32(betas[0]), f32(betas[1])), eps=f32(eps))
    losses, lrs, norms = [], [], []
    for step in range(steps):
        lr = lr_of_step(step)
        for g in opt.param_groups:
            g["lr"] = f32(lr)
        opt.zero_grad(set_to_none=True)
        micro = []
        for k in range(gas):
            x, y = micro_batch(tokens, step * gas + k, B, T, stride)
            _, loss = model(x, y)
            (loss / (loss_div or gas)).backward()
            micro.append(loss.item())
        params = [p for _, p in named]
        if clip:
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        else:
            norm = torch.norm(torch.stack([p.grad.detach().norm() for p in params]))
        opt.step()
        losses.append(sum(micro) / gas)
        lrs.append(lr)
        norms.append(float(norm))
    return {"losses": np.array(losses), "lrs": np.array(lrs), "grad_norms": np.array(norms),
            "params": {n: p.detach().to(torch.float32).numpy().copy() for n, p in named}}


def adam_max_move(lrs, betas):
    """The most len(lrs) AdamW steps can move an element apart from weight decay:
    sum_t lr_t max |m_hat_t / sqrt(v_hat_t)|, by Cauchy-Schwarz (w, u the bias-corrected EMA
    weights of the betas: sqrt(sum_i w_i^2 / u_i))."""
    b1, b2 = betas
    total = 0.0
    for t, lr in enumerate(lrs, start=1):
        i = np.arange(1, t + 1)
        w = (1 - b1) * b1 ** (t - i) / (1 - b1 ** t)
        u = (1 - b2) * b2 ** (t - i) / (1 - b2 ** t)
        total += lr * math.sqrt(float(np.sum(w * w / u)))
    return total


# ---- comparison -------------------------------------------------------------------------------

def rel(ours, ref):
    """||ours - ref|| / ||ref|| in float64 (0 when both are zero, inf when only ref is)."""
    a = np.asarray(ours, dtype=np.float64)
    b = np.asarray(ref, dtype=np.float64)
    num, den = np.linalg.norm(a - b), np.linalg.norm(b)
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return float(num / den)


def without_key(n, a):
    """The parameter to compare after the steps: c_attn.bias without its key third (it has no
    gradient in exact arithmetic, see gpt_vs_torch.py), every other tensor whole."""
    if not n.endswith("attn.c_attn.bias"):
        return a
    C = a.shape[0] // 3
    return np.concatenate([a[:C], a[2 * C:]])


def nan_max(values):
    """max(values), NaN counting as inf."""
    return max(float("inf") if math.isnan(v) else v for v in values)


def worst(rows, kind):
    """(rel, what) of the worst row of `kind`; NaN counts as worst."""
    picked = [(r, w) for k, w, r in rows if k == kind]
    return max(picked, key=lambda x: float("inf") if math.isnan(x[0]) else x[0])


def worst_ratio(rows, bounds):
    """Largest rel / bounds[kind] over all rows (NaN -> inf)."""
    return nan_max([r / bounds[k] for k, _, r in rows])


# ---- self-checks of torch's run ---------------------------------------------------------------

def check_torch_training(failures, name, ref, weights, vocab_size, steps, *, near_log_v, fall,
                         move_bound, part=lambda n, a: a):
    """Append to `failures` what would make torch's run `ref` ({"losses", "params"}, `steps`
    optimizer steps from `weights`) no reference: its first loss not within `near_log_v` of
    log(V) (near-uniform logits at the start); its last loss not below the first by more than
    `fall`; a parameter whose `part(name, array)` ends no more than `move_bound` (rel) from its
    initial value, so that comparing it would be vacuous."""
    losses = ref["losses"]
    log_v = math.log(vocab_size)
    if not abs(losses[0] - log_v) < near_log_v:
        failures.append(f"{name}: torch's first loss {losses[0]:.4f} is not within "
                        f"{near_log_v:g} of log(V) = {log_v:.4f}")
    if not losses[-1] < losses[0] - fall:
        failures.append(f"{name}: torch's loss does not fall over {steps} steps: "
                        f"{np.round(losses, 4)}")
    stuck = [n for n, p in ref["params"].items()
             if not rel(part(n, p), part(n, weights[n])) > move_bound]
    if stuck:
        failures.append(f"{name}: {len(stuck)} tensors barely move in {steps} steps "
                        f"({', '.join(stuck[:3])}); the comparison would be vacuous")


# ---- model_reference_driver ---------------------------------------------------------------------

def run_model_driver(driver, workdir, tag, hf_config, weights, inputs, targets, steps, lr, weight_decay,
                     betas, eps, checkpointing, timeout_s):
    """Runs model_reference_driver (model_driver.cpp) on an HF config.json dict, weights
    ({name: array}, HF names) and a batch, with AdamW's hyperparameters given as the decimals of
    their fp32 values; returns (the OUT file's path, seconds). Files go to workdir/TAG.*."""
    import st_io  # noqa: E402  (a sibling; imported here so that ref_util stays first)
    paths = {k: os.path.join(workdir, f"{tag}.{k}") for k in
             ("config.json", "weights.safetensors", "batch.safetensors", "out.safetensors")}
    with open(paths["config.json"], "w") as f:
        json.dump(hf_config, f, indent=1)
    st_io.save(paths["weights.safetensors"], weights)
    st_io.save(paths["batch.safetensors"], {"inputs": inputs, "targets": targets})

    def arg(x):  # the fp32 value in decimal: parsed as float or double, the number torch uses
        return repr(f32(x))

    cmd = [driver, "--config", paths["config.json"], "--weights", paths["weights.safetensors"],
           "--batch", paths["batch.safetensors"], "--steps", str(steps), "--lr", arg(lr),
           "--weight-decay", arg(weight_decay), "--beta1", arg(betas[0]),
           "--beta2", arg(betas[1]), "--eps", arg(eps), "--out", paths["out.safetensors"]]
    if checkpointing:
        cmd.append("--checkpointing")
    return paths["out.safetensors"], run_checked(cmd, timeout_s)


def read_driver_output(path, shapes, B, T, V, steps, extra_allowed=False):
    """The driver's OUT file as {"logits", "losses", "grads", "params"}, the model's parameters
    `shapes` ({HF name: shape}); raises naming what is missing, misshapen, not fp32 or (unless
    `extra_allowed`, then only noted) not a tensor of this model."""
    import numpy as np  # noqa: E402  (numpy is checked by the scripts' import of this module)
    import st_io  # noqa: E402
    out = st_io.load(path)
    want = {"logits": (B, T, V), "losses": (steps + 1,)}
    for n, s in shapes.items():
        want["grad." + n] = s
        want["param." + n] = s
    problems = [f"{n}: missing" for n in want if n not in out]
    problems += [f"{n}: shape {tuple(out[n].shape)}, expected {s}" for n, s in want.items()
                 if n in out and tuple(out[n].shape) != tuple(s)]
    problems += [f"{n}: dtype {out[n].dtype}, expected float32" for n in want
                 if n in out and out[n].dtype != np.float32]
    extra = sorted(set(out) - set(want))
    if not extra_allowed:
        problems += [f"{n}: not a tensor of this model" for n in extra]
    if problems:
        raise RuntimeError(f"{path}: " + "; ".join(problems[:8]) +
                           (f" (and {len(problems) - 8} more)" if len(problems) > 8 else ""))
    if extra:
        print(f"  note: {path} also holds {', '.join(extra[:5])}"
              f"{' ...' if len(extra) > 5 else ''} (ignored)")
    return {"logits": out["logits"], "losses": out["losses"],
            "grads": {n: out["grad." + n] for n in shapes},
            "params": {n: out["param." + n] for n in shapes}}


# ---- the end ----------------------------------------------------------------------------------

def finish(failures, tmp, what, started):
    """A script's end: clean up `tmp` (from work_dir), print `what` and the seconds since
    `started` (time.monotonic()), then FAILED with the first MAX_FAILURES_SHOWN failures, or
    PASSED. Returns the exit status."""
    if tmp:
        tmp.cleanup()
    print(f"\n{what}; {time.monotonic() - started:.1f} s")
    if failures:
        print(f"FAILED ({len(failures)}):")
        for f in failures[:MAX_FAILURES_SHOWN]:
            print("  " + f)
        if len(failures) > MAX_FAILURES_SHOWN:
            print(f"  ... and {len(failures) - MAX_FAILURES_SHOWN} more")
        return 1
    print("PASSED")
    return 0
