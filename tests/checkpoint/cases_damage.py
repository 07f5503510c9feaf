"""Cases of check_checkpoint.py: a damaged checkpoint (a flipped byte in any file, a file missing
or cut short) is refused naming the file, before any step (corruption); a checkpoint that cannot
continue this run, and bad --resume / --checkpoint-* flags, are refused naming the flag or file
(bad_resume)."""
import json
import os
import shutil

from ckpt_util import expect_refused, flip_byte, stage3, step_folder, train
from train_util import GPL, TINY, check

STEPS = 3
SHARD = "shard-00000-of-00001.bin"


def make_checkpoint(strata, root):
    ckpt = os.path.join(root, "ckpt")
    train(strata, root, "base", stage3("cpu", "cpu"), STEPS, ["--checkpoint-dir", ckpt])
    return ckpt


def offset_after(path, key):
    """The offset of the first digit after `key` (e.g. '"step"') in a text file."""
    with open(path, "rb") as f:
        data = f.read()
    at = data.index(key.encode())
    while not chr(data[at]).isdigit():
        at += 1
    return at


def shard_offsets(path):
    """Where to flip a byte in a shard file: (what, offset)."""
    with open(path, "rb") as f:
        first = f.readline()
        header_bytes = int(first.split(b"header_bytes=")[1])
        f.seek(0)
        header = f.read(header_bytes).decode()
    entries = json.loads(header[len(first):])["entries"]
    last = entries[-1]
    size = os.path.getsize(path)
    mid = entries[len(entries) // 2]
    return [("the first line of its header", 3),
            ("a number in its JSON header", offset_after(path, '"numel"')),
            # "index":0 -> "index":1: still a valid, consistent header; only the checksum tells
            ("an index in its JSON header", offset_after(path, '"index"')),
            ("its header's padding", header_bytes - 1),
            ("the first value", header_bytes),
            (f"the middle of {mid['module']}/{mid['state']}", mid["offset"] + mid["real_numel"] * 2),
            ("the middle of the file", size // 2),
            (f"the last value of {last['module']}/{last['state']}",
             last["offset"] + last["real_numel"] * 4 - 1),
            ("the last byte of the file", size - 1)]


def case_corruption(strata, root):
    ckpt = make_checkpoint(strata, root)
    src = step_folder(ckpt, STEPS)
    name = os.path.basename(src)
    targets = []
    for f in ("manifest.json", "meta.json"):
        p = os.path.join(src, f)
        targets += [(f, "a digit of its step", offset_after(p, '"step"')),
                    (f, "its middle", os.path.getsize(p) // 2)]
    targets += [(SHARD, what, off) for what, off in shard_offsets(os.path.join(src, SHARD))]
    failures = []

    def refused(tag, damage, words):
        """Copies the checkpoint folder, damages the copy, resumes from it: exit 1 naming the file."""
        copy = os.path.join(root, f"damaged-{tag}")
        shutil.copytree(ckpt, copy)
        what = damage(os.path.join(copy, name))
        run = train(strata, root, f"resume-{tag}", stage3("cpu", "cpu"), STEPS + 2, ["--resume", copy],
                    ok=False)
        try:
            line = expect_refused(run, [w.replace("{copy}", copy) for w in words], f"{what}")
            print(f"  {what}: exit 1: {line[:160]}")
        except Exception as e:  # every damage is tried; the case fails naming each one missed
            failures.append(str(e))
        shutil.rmtree(copy, ignore_errors=True)

    for i, (f, what, off) in enumerate(targets):
        def flip(folder, f=f, what=what, off=off):
            at, old, new = flip_byte(os.path.join(folder, f), off)
            return f"{f}: byte {at} ({what}) {old:#04x} -> {new:#04x}"
        refused(f"flip{i}", flip, [os.path.join("{copy}", name, f)])

    def delete(folder):
        os.remove(os.path.join(folder, SHARD))
        return f"{SHARD} deleted"

    def truncate(folder):
        p = os.path.join(folder, SHARD)
        os.truncate(p, os.path.getsize(p) // 2)
        return f"{SHARD} cut to half"

    def delete_meta(folder):
        os.remove(os.path.join(folder, "meta.json"))
        return "meta.json deleted"

    def grow(folder):
        with open(os.path.join(folder, SHARD), "ab") as fh:
            fh.write(b"\0" * 4096)
        return f"{SHARD} with 4096 zero bytes appended"

    refused("deleted", delete, [os.path.join("{copy}", name, SHARD)])
    refused("truncated", truncate, [os.path.join("{copy}", name, SHARD)])
    refused("grown", grow, [os.path.join("{copy}", name, SHARD)])
    refused("no-meta", delete_meta, [os.path.join("{copy}", name, "meta.json")])
    check(not failures, f"{len(failures)} damaged checkpoint(s) not refused as expected:\n  " +
          "\n  ".join(failures))


def case_bad_resume(strata, root):
    ckpt = make_checkpoint(strata, root)
    cfg = stage3("cpu", "cpu")
    at = step_folder(ckpt, STEPS)
    failures = []

    def refused(tag, flags, words, steps=STEPS + 2, model=TINY, config=cfg):
        run = train(strata, root, tag, config, steps, flags, ok=False, model=model)
        try:
            print(f"  {tag}: exit 1: {expect_refused(run, words)[:200]}")
        except Exception as e:
            failures.append(str(e))

    other = os.path.join(root, "two_layers.json")
    with open(other, "w") as f:  # the tiny preset with 2 layers instead of 4
        json.dump({"model_type": "gpt2", "vocab_size": 256, "n_positions": 256, "n_embd": 128,
                   "n_layer": 2, "n_head": 4}, f)
    refused("other-model", ["--resume", ckpt], [at, "another model", "--model"],
            model=["--model", other, "--seq-len", "32", "--text", GPL, "--seed", "7"])
    refused("other-seq-len", ["--resume", ckpt], [at, "--seq-len 32", "16"],
            model=["--preset", "tiny", "--seq-len", "16", "--text", GPL, "--seed", "7"])
    # The data must continue where it stopped: same seed, order, batch and data.
    tiny = ["--preset", "tiny", "--seq-len", "32"]
    refused("other-seed", ["--resume", ckpt], ["--seed 7", "--seed 8"],
            model=tiny + ["--text", GPL, "--seed", "8"])
    refused("other-shuffle", ["--resume", ckpt, "--shuffle"], ["shuffle"])
    short = os.path.join(root, "short.txt")
    with open(GPL, "rb") as f, open(short, "wb") as g:
        g.write(f.read(20000))
    refused("other-data", ["--resume", ckpt], [short, "ntokens"],
            model=tiny + ["--text", short, "--seed", "7"])
    refused("other-micro-batch", ["--resume", ckpt], ["batch_size = 2", "batch_size = 4"],
            config=lambda nvme: dict(cfg(nvme), train_micro_batch_size_per_gpu=4))
    donor = train(strata, root, "donor", cfg, 1)
    refused("resume-and-init", ["--resume", ckpt, "--init", donor.save], ["--resume", "--init"])
    refused("at-steps", ["--resume", ckpt], [at, f"step {STEPS}", "--steps"], steps=STEPS)
    refused("after-steps", ["--resume", ckpt], [at, f"step {STEPS}", "--steps"], steps=STEPS - 1)
    empty = os.path.join(root, "empty")
    os.makedirs(empty)
    refused("empty-folder", ["--resume", empty], ["--resume", empty])
    missing = os.path.join(root, "no-such-folder")
    refused("missing-folder", ["--resume", missing], ["--resume", missing])
    # A folder whose only save did not finish: not loaded, and the error says so.
    partial = os.path.join(root, "only-partial")
    shutil.copytree(at, os.path.join(partial, f".step-{STEPS:08d}.partial"))
    refused("only-partial", ["--resume", partial], ["--resume", ".partial"])
    for tag, text in (("latest-missing-step", "step-00000099\n"), ("latest-garbage", "hello\n")):
        copy = os.path.join(root, tag)
        shutil.copytree(ckpt, copy)
        with open(os.path.join(copy, "latest"), "w") as f:
            f.write(text)
        refused(tag, ["--resume", copy], [os.path.join(copy, "latest"), text.strip()])
    refused("every-without-dir", ["--checkpoint-every", "1"], ["--checkpoint-every", "--checkpoint-dir"])
    a_file = os.path.join(root, "two_layers.json")
    refused("dir-is-a-file", ["--checkpoint-dir", a_file], ["--checkpoint-dir", a_file])
    # A refused resume leaves the checkpoint folder as it was, even when it is --checkpoint-dir.
    before = snapshot(ckpt)
    refused("refused-leaves-dir", ["--resume", ckpt, "--checkpoint-dir", ckpt], ["--seq-len"],
            model=["--preset", "tiny", "--seq-len", "16", "--text", GPL, "--seed", "7"])
    check(snapshot(ckpt) == before, f"a refused resume changed {ckpt}")
    check(not failures, f"{len(failures)} bad resume(s) not refused as expected:\n  " + "\n  ".join(failures))


def snapshot(folder):
    out = {}
    for base, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(base, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, folder)] = fh.read()
    return out
