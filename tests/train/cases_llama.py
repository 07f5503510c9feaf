"""Cases of check_train.py: the LLaMA family through `strata train`, and the Hugging Face model
folder in and out (--save DIR, --model DIR)."""
import json
import os
import subprocess

from train_util import Run, bits, check, compare_bitwise, ds_config, st_io, tail


def load_folder(folder):
    """Every tensor of a Hugging Face model folder (model.safetensors, or the index's shards)."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if not os.path.exists(index):
        return st_io.load(os.path.join(folder, "model.safetensors"))
    with open(index) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for shard in shards:
        out.update(st_io.load(os.path.join(folder, shard)))
    return out

# llama-tiny (GQA 4:2, untied head, ~0.8M parameters) on a text file of exactly one window
# (micro-batch 2 x 32 tokens + 1): every micro-batch of every step is the same batch, so the
# loss at a step depends on the weights only.
LLAMA = ["--preset", "llama-tiny", "--seq-len", "32", "--seed", "5"]


def one_window_text(root):
    path = os.path.join(root, "one-window.txt")
    with open(path, "wb") as f:
        f.write(bytes((i * 37 + 11) % 251 for i in range(2 * 32 + 1)))
    return path


def case_llama_placement(strata, root):
    """llama-tiny at ZeRO stage 3 with parameters and optimizer states on the device, in pinned
    host memory and on NVMe (and activation checkpointing with the states in pinned memory)
    gives bit-identical saved weights, losses and gradient norms: the engine's invariant holds for
    the LLaMA family's modules (packed q/k/v, an untied head module) as for GPT-2's."""
    text = one_window_text(root)
    runs = []
    for name, opt, param, extra in (("device", "none", "none", []), ("cpu", "cpu", "cpu", []),
                                    ("nvme", "nvme", "nvme", []),
                                    ("cpu_ckpt", "cpu", "cpu", ["--activation-checkpointing"])):
        run = Run(root, name)
        os.makedirs(run.nvme, exist_ok=True)
        run.write_config(ds_config(3, opt=opt, param=param, nvme=run.nvme))
        run.start(strata, LLAMA + ["--text", text, "--steps", "4"] + extra)
        run.expect_ok()
        runs.append(run)
    losses = runs[0].losses()
    check(len(losses) == 4 and losses[-1] < losses[0], f"losses should fall: {losses}")
    for other in runs[1:]:
        print(f"  device vs {other.name}: {compare_bitwise(runs[0], other)}")
        check(not other.swap_leftovers(), f"{other.name}: swap files left: {other.swap_leftovers()}")


def case_llama_model_folder(strata, root):
    """--save DIR writes a Hugging Face model folder (config.json naming LlamaForCausalLM, and
    safetensors shards of at most --save-shard-size with model.safetensors.index.json); --model
    DIR reads the architecture from its config.json and starts from its weights: the first loss
    of a run from the folder saved after 3 steps is, bit for bit, the 4th loss of a straight run
    (the same weights on the same batch). A second --save into the folder is refused at start."""
    text = one_window_text(root)
    config = ds_config(3, opt="cpu", param="cpu")
    straight = Run(root, "straight")
    straight.write_config(config)
    straight.start(strata, LLAMA + ["--text", text, "--steps", "4"])
    straight.expect_ok()

    first = Run(root, "first")
    folder = os.path.join(first.dir, "model")
    first.save = folder
    first.write_config(config)
    checkpoints = os.path.join(first.dir, "checkpoints")
    first.start(strata, LLAMA + ["--text", text, "--steps", "3", "--save-shard-size", "200KB",
                                 "--checkpoint-dir", checkpoints])
    first.expect_ok()
    files = sorted(os.listdir(folder))
    shards = [f for f in files if f.startswith("model-") and f.endswith(".safetensors")]
    check("config.json" in files and "model.safetensors.index.json" in files and len(shards) >= 2,
          f"--save {folder}: expected config.json, an index and shards; got {files}")
    with open(os.path.join(folder, "config.json")) as f:
        saved = json.load(f)
    check(saved.get("architectures") == ["LlamaForCausalLM"] and saved.get("num_key_value_heads") == 2,
          f"config.json: {saved}")
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        index = json.load(f)
    names = index["weight_map"]
    check("lm_head.weight" in names and "model.layers.3.self_attn.k_proj.weight" in names,
          f"index weight_map lacks LLaMA names: {sorted(names)[:6]}")
    print(f"  --save: {len(shards)} shards, {len(names)} tensors, {index['metadata']['total_size']} bytes")

    # strata convert of the run's last checkpoint: the same folder, tensor for tensor, bit for bit.
    converted = os.path.join(first.dir, "converted")
    r = subprocess.run([strata, "convert", checkpoints, converted, "--shard-size", "300KB"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"strata convert {checkpoints} {converted}: exit {r.returncode}\n{tail(r.stderr)}")
    a, b = load_folder(folder), load_folder(converted)
    check(sorted(a) == sorted(b), f"convert: tensor names differ from --save's")
    for name in a:
        check(a[name].shape == b[name].shape and (bits(a[name]) == bits(b[name])).all(),
              f"convert: {name} differs from --save's")
    with open(os.path.join(converted, "config.json")) as f:
        check(json.load(f) == saved, "convert: config.json differs from --save's")
    print(f"  strata convert CKPT DIR: {len(a)} tensors identical to --save DIR's")

    resumed = Run(root, "from_folder")
    resumed.write_config(config)
    resumed.start(strata, ["--model", folder, "--seq-len", "32", "--text", text, "--steps", "1"])
    resumed.expect_ok()
    check("initial weights from" in resumed.result.stderr, f"no 'initial weights from' line:\n"
                                                           f"{tail(resumed.result.stderr)}")
    want, got = straight.losses()[3], resumed.losses()[0]
    check(want == got, f"the first loss from the folder {got!r} != the straight run's 4th {want!r}")
    print(f"  --model DIR: first loss {got!r} == the straight run's 4th")

    again = Run(root, "again")
    again.save = folder
    again.write_config(config)
    again.start(strata, LLAMA + ["--text", text, "--steps", "1"])
    check(again.result.returncode != 0 and "already holds model weights" in again.result.stderr,
          f"a second --save into {folder} should be refused:\n{tail(again.result.stderr)}")



def case_llama_resume(strata, root):
    """A LLaMA run stopped after 2 of 4 steps and resumed from its checkpoint (stage 3, optimizer
    states on NVMe, parameters in pinned memory) ends with the same bits as the straight run: the
    same saved weights, and the same losses and gradient norms on steps 3 and 4."""
    text = one_window_text(root)
    runs = {}
    for name in ("straight", "first", "resumed"):
        run = Run(root, name)
        os.makedirs(run.nvme, exist_ok=True)
        run.write_config(ds_config(3, opt="nvme", param="cpu", nvme=run.nvme))
        runs[name] = run
    runs["straight"].start(strata, LLAMA + ["--text", text, "--steps", "4"])
    runs["straight"].expect_ok()
    checkpoints = os.path.join(root, "checkpoints")
    runs["first"].start(strata, LLAMA + ["--text", text, "--steps", "2", "--checkpoint-dir", checkpoints])
    runs["first"].expect_ok()
    runs["resumed"].start(strata, LLAMA + ["--text", text, "--steps", "4", "--resume", checkpoints])
    runs["resumed"].expect_ok()
    a, b = runs["straight"].weights(), runs["resumed"].weights()
    check(sorted(a) == sorted(b), "tensor names differ")
    for name in a:
        check((bits(a[name]) == bits(b[name])).all(), f"{name} differs after resume")
    straight = runs["straight"].metric_lines()[2:]
    resumed = runs["resumed"].metric_lines()
    check(len(resumed) == 2, f"the resumed run logged {len(resumed)} steps, expected 2")
    for x, y in zip(straight, resumed):
        for key in ("loss", "grad_norm"):
            check(x[key] == y[key], f"step {x['step']} {key}: {x[key]!r} straight vs {y[key]!r} resumed")
    print(f"  resumed at step 2: {len(a)} tensors and steps 3-4 identical to the straight run")
