"""What gpt_vs_torch.py and train_vs_torch.py share: the torch/numpy check, the start (command
line, torch on one thread) and end (FAILED / PASSED) of main, the GPT-2 test weights, running
the binary under test, the norm-wise comparison helpers and the sanity checks of torch's run.

Import it before numpy and torch: without them (not Debian's /usr/bin/python3, or
python3-torch missing; scripts/setup.sh installs both) the import prints why and exits 77,
which ctest counts as skipped (SKIP_RETURN_CODE 77). The scripts put their own folder on
sys.path first, so this module, gpt2_torch.py and st_io.py import as siblings.

Comparisons produce rows (kind, what, rel), rel = ||ours - torch|| / ||torch|| in float64, and
a script's BOUNDS maps each kind to its bound.
"""
import argparse
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
