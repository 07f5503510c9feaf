"""Cases of check_train.py: memory budgets (memory, memory_minimum) and bad inputs (bad_inputs,
enospc_plan, enospc_io, save_path_early): exit 1, a clear error, no --save file."""
import contextlib
import json
import math
import os
import struct
import sys

from train_util import (GPL, SKIP, TINY, Failure, Run, check, ds_config, gpt_params, tail,
                        tmpfs)

# memory: states far larger than the device budget

# n_embd 192, 12 layers: 5.4M parameters, 108 MB of fp32 states (2 x 4 bytes of parameters and
# gradients + 12 bytes of Adam states per parameter), 13x an 8 MiB device. Many small blocks
# rather than a few wide ones: the device must hold one block's parameters and gradients at a
# time (12 C^2 x 8 bytes = 3.4 MiB here), plus the activations of the micro-batch.
BIG_MODEL = {"model_type": "gpt2", "vocab_size": 256, "n_positions": 64, "n_embd": 192,
             "n_layer": 12, "n_head": 4}
BUDGET = 8 << 20


def repetitive_text(path, nbytes=64000):
    """A 16-byte pattern repeated: every 32-token window is the same sequence, so the loss of
    a model that learns anything goes down fast."""
    with open(path, "w") as f:
        f.write(("hello, world! 01" * (nbytes // 16 + 1))[:nbytes])


def big_model_files(root):
    model = os.path.join(root, "big_model.json")
    with open(model, "w") as f:
        json.dump(BIG_MODEL, f)
    text = os.path.join(root, "repetitive.txt")
    repetitive_text(text)
    return model, text


def case_memory(strata, root):
    model, text = big_model_files(root)
    m = BIG_MODEL
    params = gpt_params(m["vocab_size"], m["n_positions"], m["n_embd"], m["n_layer"])
    states = params * 4 * 2 + 12 * params
    check(states >= 10 * BUDGET, f"the model's states ({states} bytes) are not 10x the budget")
    run = Run(root, "big")
    run.write_config(ds_config(3, "nvme", "cpu", nvme=run.nvme, micro_batch=1, gas=1,
                               weight_decay=0.0, device_memory=f"{BUDGET >> 20}MiB"))
    os.makedirs(run.nvme, exist_ok=True)
    steps = 8
    run.start(strata, ["--model", model, "--text", text, "--seq-len", "32", "--steps", str(steps),
                       "--activation-checkpointing"])
    run.expect_ok()
    check(f"{params} parameters" in run.result.stderr,
          f"expected '{params} parameters' in the start line:\n{tail(run.result.stderr, 40)}")
    lines = run.metric_lines()
    check(len(lines) == steps, f"{len(lines)} metrics lines, expected {steps}")
    losses = [x["loss"] for x in lines]
    check(all(math.isfinite(x) for x in losses), f"losses {losses}")
    # Adam at lr 1e-3 from the GPT-2 init oscillates on the way down (PyTorch's AdamW on the
    # same model and batch does the same): ask for a clear drop, not a monotone one.
    check(losses[-1] < losses[0] - 1.0 and min(losses[-3:]) < min(losses[:3]) - 0.5,
          f"the loss does not go down: {losses}")
    for x in lines:
        dev = x["memory"]["device"]
        check(dev["budget_bytes"] == BUDGET, f"step {x['step']}: device budget {dev['budget_bytes']}")
        check(0 < dev["peak_bytes"] <= dev["budget_bytes"],
              f"step {x['step']}: device peak {dev['peak_bytes']} > budget {dev['budget_bytes']}")
        check(x["memory"]["nvme"]["current_bytes"] >= 12 * params,
              f"step {x['step']}: nvme holds {x['memory']['nvme']['current_bytes']} bytes, "
              f"less than the optimizer states ({12 * params})")
    check(not run.swap_leftovers(), f"left in the swap folder: {run.swap_leftovers()}")
    peak = max(x["memory"]["device"]["peak_bytes"] for x in lines)
    print(f"  {params} parameters, states {states / 2**20:.1f} MiB = {states / BUDGET:.1f}x the "
          f"device budget; device peak {peak / 2**20:.2f} MiB; losses "
          f"{', '.join(f'{x:.2f}' for x in losses)} ({run.seconds:.1f} s)")


def case_memory_minimum(strata, root):
    model, text = big_model_files(root)
    run = Run(root, "too-small")
    run.write_config(ds_config(3, "nvme", "cpu", nvme=run.nvme, micro_batch=1, gas=1,
                               device_memory="1MiB"))
    os.makedirs(run.nvme, exist_ok=True)
    r = run.start(strata, ["--model", model, "--text", text, "--seq-len", "32", "--steps", "2"])
    check(r.returncode == 1, f"exit {r.returncode}, expected 1\n{tail(r.stderr)}")
    err = r.stderr
    for word in ("needed", "available", "device", "does not fit", "device_memory"):
        check(word in err, f"'{word}' not in the error:\n{tail(err)}")
    check("1.00 MiB" in err, f"the table does not show the 1 MiB budget:\n{tail(err)}")
    check(not os.path.exists(run.save), "a --save file was written")
    check(len(run.metric_lines()) == 0, "metrics lines were written")
    check(not run.swap_leftovers(), f"left in the swap folder: {run.swap_leftovers()}")
    print("  1 MiB refused at start:\n    " + "\n    ".join(
        line for line in err.splitlines() if "MiB" in line and "device" in line))


# bad inputs

def error_text(stderr):
    """The error strata printed (from "strata: error:" to the end), without the resolved config
    and the info lines before it, which echo the paths of the config whatever went wrong."""
    at = stderr.find("strata: error:")
    return stderr[at:] if at >= 0 else ""


def expect_error(strata, root, name, config, args, words, steps=3, save=None):
    """The run must exit 1 with an error naming every word of `words` (case-sensitive), no
    --save file (at `save` when given), and fewer metrics lines than steps."""
    run = Run(root, name)
    run.save = save or run.save
    run.write_config(config)
    r = run.start(strata, args + ["--steps", str(steps)])
    err = error_text(r.stderr)
    check(r.returncode == 1, f"{name}: exit {r.returncode}, expected 1\n{tail(r.stderr)}")
    check(err, f"{name}: no 'strata: error:' message:\n{tail(r.stderr)}")
    missing = [w for w in words if w not in err]
    check(not missing, f"{name}: the error does not name {missing}:\n{err}")
    check(not os.path.exists(run.save), f"{name}: a --save file was left: {run.save}")
    check(len(run.metric_lines()) < steps, f"{name}: the --metrics file holds all {steps} steps: "
                                           "the error came after the whole training")
    print(f"  {name}: exit 1: {err.splitlines()[0][:300]}")
    return run


def case_bad_inputs(strata, root):
    """Every sub-case runs; the case fails naming each one that did not hold."""
    notes, failures = [], []

    def expect(*a, **k):
        try:
            return expect_error(strata, root, *a, **k)
        except Failure as e:
            failures.append(str(e))

    # 1. NVMe without nvme_path: a config error naming the key.
    c = ds_config(3, "nvme", "none", nvme=None)
    del c["zero_optimization"]["offload_optimizer"]["nvme_path"]
    expect("nvme-without-path", c, TINY, ["nvme_path"])
    # 2. nvme_path that does not exist, nor its parent (a missing folder under an existing one is
    #    made, as DeepSpeed does).
    missing = os.path.join(root, "no-such-folder", "swap")
    expect("nvme-path-missing", ds_config(3, "nvme", nvme=missing), TINY, [missing])
    # 3. nvme_path that cannot be written. root ignores permission bits, so as root: a read-only
    #    tmpfs (EROFS), and a path under a file (ENOTDIR) in any case.
    under_file = "/dev/null/x"
    expect("nvme-path-under-file", ds_config(3, "nvme", nvme=under_file), TINY, [under_file])
    if os.geteuid() != 0:
        ro = os.path.join(root, "read-only")
        os.makedirs(ro)
        os.chmod(ro, 0o500)
        expect("nvme-path-not-writable", ds_config(3, "nvme", nvme=ro), TINY, [ro])
    else:
        ro = os.path.join(root, "ro-tmpfs")
        with tmpfs(ro, "1m", read_only=True) as mounted:
            if mounted:
                expect("nvme-path-read-only-fs", ds_config(3, "nvme", nvme=ro), TINY, [ro])
            else:
                notes.append("nvme_path not writable: skipped (root ignores permissions and "
                             "cannot mount a read-only tmpfs here)")
    # 4. --init written for another model (the tiny preset's weights into a wider model).
    donor = Run(root, "donor")
    donor.write_config(ds_config(1))
    donor.start(strata, TINY + ["--steps", "1"])
    donor.expect_ok()
    other = os.path.join(root, "other_model.json")
    with open(other, "w") as f:
        json.dump({"model_type": "gpt2", "vocab_size": 256, "n_positions": 64, "n_embd": 64,
                   "n_layer": 2, "n_head": 4}, f)
    expect("init-other-model", ds_config(1),
           ["--model", other, "--seq-len", "32", "--text", GPL, "--init", donor.save],
           [donor.save])
    # 5. --data that is not an llm.c token file (a text file), and one too short for a batch.
    expect("data-not-tokens", ds_config(1),
           ["--preset", "tiny", "--seq-len", "32", "--data", GPL], [GPL, "llm.c token file"])
    short = os.path.join(root, "short.bin")
    with open(short, "wb") as f:
        header = [20240520, 1, 10] + [0] * 253
        f.write(struct.pack("<256i", *header) + struct.pack("<10H", *range(10)))
    expect("data-too-short", ds_config(1),
           ["--preset", "tiny", "--seq-len", "32", "--data", short], ["not enough tokens"])
    # 6. --seq-len longer than n_positions (tiny: 256).
    expect("seq-len-too-long", ds_config(1),
           ["--preset", "tiny", "--seq-len", "300", "--text", GPL], ["--seq-len", "n_positions"])
    # 7. an optimizer strata does not have.
    c = ds_config(1)
    c["optimizer"]["type"] = "Lamb"
    expect("optimizer-lamb", c, TINY, ["Lamb", "optimizer.type"])
    # 8. fp16 gradient accumulators without fp16 training (no loss scaler to catch an overflow).
    c = ds_config(1, bf16=True)
    c["data_types"] = {"grad_accum_dtype": "fp16"}
    expect("grad-accum-fp16-with-bf16", c, TINY, ["data_types.grad_accum_dtype", "fp16.enabled"])
    # 9. placements the engine does not have: each refused naming its key.
    for name, stage, opt, param, zero, key in (
            ("param-offload-without-optimizer", 3, "none", "cpu", None, "offload_optimizer"),
            ("optimizer-offload-at-stage-0", 0, "cpu", "none", None, "offload_optimizer.device"),
            ("param-offload-at-stage-2", 2, "cpu", "cpu", None, "offload_param.device"),
            ("ratio-at-stage-2", 2, "cpu", "none", {"offload_optimizer": {"ratio": 0.5}},
             "offload_optimizer.ratio")):
        expect(name, ds_config(stage, opt, param, extra_zero=zero), TINY, [key])
    for note in notes:
        print("  NOTE: " + note)
    check(not failures, "\n".join(failures))


@contextlib.contextmanager
def small_fs(root):
    """Yields folders a and b of a 2 MiB tmpfs mounted for the case; exits 77 where mounting is
    not allowed (not root)."""
    mnt = os.path.join(root, "small-fs")
    with tmpfs(mnt, "2m") as mounted:
        if not mounted:
            print("skipped: cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN)")
            sys.exit(SKIP)
        a, b = os.path.join(mnt, "a"), os.path.join(mnt, "b")
        os.makedirs(a)
        os.makedirs(b)
        yield a, b


def case_enospc_plan(strata, root):
    """NVMe swap in one folder of a 2 MiB tmpfs, the tiny preset (10.7 MiB of optimizer states):
    refused at start (the plan's table) or by the swap file's growth: exit 1, an error naming
    the folder and the bytes, no --save file, nothing left on the tmpfs.
    FAILS when written (engine finding, reported): the plan's refusal names the tier, the bytes
    and the key [zero_optimization] but not the nvme_path folder."""
    with small_fs(root) as (a, _):
        run = expect_error(strata, root, "nvme-on-2MiB", ds_config(3, "nvme", nvme=a), TINY,
                           ["nvme", "MiB"])
        check(os.listdir(a) == [], f"left on the tmpfs: {os.listdir(a)}")
        err = error_text(run.result.stderr)
        check(a in err, f"the error does not name the folder {a} (the tier and the key only; the "
                        f"folder appears only in the info line before it):\n{err}")


def case_enospc_io(strata, root):
    """Two folders on the same 2 MiB tmpfs, a model whose optimizer states (2.5 MiB) fit in the
    sum of the folders' free space but not in the file system: the swap file's growth meets
    ENOSPC while the run fills its states (or the plan refuses at start, if it counts one file
    system once). Either way: exit 1, an error naming the path and the bytes, no --save file,
    nothing left on the tmpfs."""
    with small_fs(root) as (a, b):
        small = os.path.join(root, "small_model.json")
        with open(small, "w") as f:
            json.dump({"model_type": "gpt2", "vocab_size": 256, "n_positions": 64, "n_embd": 64,
                       "n_layer": 4, "n_head": 4}, f)
        run = expect_error(strata, root, "nvme-on-2MiB-two-folders", ds_config(3, "nvme", nvme=[a, b]),
                           ["--model", small, "--seq-len", "32", "--text", GPL], [])
        check(os.listdir(a) == [] and os.listdir(b) == [],
              f"left on the tmpfs: {os.listdir(a)} {os.listdir(b)}")
        err = error_text(run.result.stderr)
        check(a in err or b in err, f"the error names neither {a} nor {b}:\n{err}")
        check("bytes" in err or "MiB" in err, f"no byte counts in the error:\n{err}")
        io_time = "not enough disk space" in err
        print(f"  two folders on one 2 MiB file system: refused "
              f"{'during the run (ENOSPC growing the swap file)' if io_time else 'at start (plan)'}")
        if io_time:
            print("  NOTE: the plan counted the free space of one file system twice (once per "
                  "nvme_path folder) and accepted a run that cannot fit")


def case_save_path_early(strata, root):
    """--save into a folder that does not exist: the run should refuse at start, as it does for
    --metrics, not train every step and then lose the weights.
    FAILS when written (trainer finding, reported): the trainer (then tools/train.cpp) opened the
    --save path only after the last step, so all 20 steps run, the --metrics file is complete, and
    then it exits 1 ("cannot create the temporary file ...")."""
    save = os.path.join(root, "no-such-folder", "w.safetensors")
    run = expect_error(strata, root, "save-folder-missing", ds_config(1), TINY, [save], steps=20,
                       save=save)
    check(len(run.metric_lines()) == 0, f"{len(run.metric_lines())} steps trained before the --save "
                                        "path was found unusable")
