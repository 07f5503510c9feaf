#!/usr/bin/env python3
"""`strata infer` end to end on the host backend.

Usage: check_infer.py STRATA TOKENIZER_JSON WORKDIR

  - a preset with {"ids": ...} prompts of different lengths: exit 0, one JSON line per prompt in
    index order with max_new_tokens ids in the vocabulary, "finish_reason" "length", the prompt's
    length; the same seed gives the same output, and a prompt's output does not depend on the
    batch it shares (--batch 1 vs 3);
  - a Hugging Face folder (config.json, weights written by `strata train --save`, the GPT-2
    tokenizer fixture) with text prompts, its parameters streamed from NVMe through a 2 MiB
    device (zero_optimization.stage 3, offload_param nvme): the same ids as the folder served
    resident, "text" decoded, bytes read from NVMe reported, the swap folder left empty;
  - errors, each exit 1 naming the problem: a text prompt without a tokenizer, a prompt longer
    than the positions allow, --quantize, --top-p 0, an id outside the vocabulary, a device too
    small for the plan (with the per-tier table).
"""
import json
import os
import shutil
import subprocess
import sys


def run(strata, args, cwd, expect_ok=True):
    r = subprocess.run([strata, "infer", "--device", "host"] + args, capture_output=True, text=True, timeout=120,
                       cwd=cwd)
    if expect_ok and r.returncode != 0:
        raise AssertionError(f"strata infer {' '.join(args)}: exit {r.returncode}\n{r.stderr[-3000:]}")
    return r


def lines(text):
    return [json.loads(l) for l in text.splitlines() if l.strip()]


def main():
    strata, tokenizer, work = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    prompts = os.path.join(work, "ids.jsonl")
    with open(prompts, "w") as f:
        f.write('{"ids": [1, 2, 3]}\n\n{"ids": [5, 6, 7, 8, 9, 10, 11]}\n{"ids": [4]}\n')

    # A preset, ids in and out.
    common = ["--preset", "llama-tiny", "--prompts", prompts, "--max-new-tokens", "6", "--temperature", "0.9",
              "--top-k", "20", "--seed", "4"]
    a = run(strata, common + ["--batch", "3"], work)
    out = lines(a.stdout)
    assert [o["index"] for o in out] == [0, 1, 2], out
    for o, n in zip(out, (3, 7, 1)):
        assert len(o["ids"]) == 6 and all(0 <= t < 256 for t in o["ids"]), o
        assert o["finish_reason"] == "length" and o["prompt_tokens"] == n and "text" not in o, o
    b = run(strata, common + ["--batch", "1"], work)
    assert lines(b.stdout) == out, f"--batch 1 changed the outputs:\n{b.stdout}\nvs\n{a.stdout}"
    print(f"preset: {len(out)} prompts, the same outputs at --batch 3 and 1")

    # The KV cache in pinned host memory (streamed per layer through 2 device slots) generates what
    # the device-placed one does, ragged rows included.
    on_device = run(strata, common + ["--batch", "3", "--kv-cache", "device"], work)
    on_host = run(strata, common + ["--batch", "3", "--kv-cache", "host"], work)
    assert "KV cache: device" in on_device.stderr, on_device.stderr[-2000:]
    assert "KV cache: pinned host" in on_host.stderr and "2 device slots" in on_host.stderr, on_host.stderr[-2000:]
    assert "KV cache (streamed per layer through 2 device slots)" in on_host.stderr, on_host.stderr[-2000:]
    assert lines(on_device.stdout) == out and lines(on_host.stdout) == out, (on_device.stdout, on_host.stdout)
    print("preset: --kv-cache host == --kv-cache device")
    # auto: the device while the cache fits there beside the parameters (llama-tiny: 3.1 MiB, and 1 MiB
    # of scratch), else pinned host.
    long = ["--preset", "llama-tiny", "--prompts", prompts, "--max-new-tokens", "100", "--batch", "3"]
    roomy = run(strata, long + ["--device-memory", "6MiB"], work)
    tight = run(strata, long + ["--device-memory", "4800KiB"], work)
    assert "KV cache: device" in roomy.stderr, roomy.stderr[-2000:]
    assert "KV cache: pinned host" in tight.stderr, tight.stderr[-2000:]
    assert lines(tight.stdout) == lines(roomy.stdout)
    print("preset: --kv-cache auto puts the cache in pinned host memory when the device is tight, same outputs")

    # A model folder with a tokenizer, resident and streamed from NVMe.
    folder = os.path.join(work, "model")
    with open(os.path.join(work, "gpt.json"), "w") as f:
        json.dump({"architectures": ["GPT2LMHeadModel"], "vocab_size": 1200, "n_positions": 96, "n_embd": 64,
                   "n_layer": 4, "n_head": 4}, f)
    with open(os.path.join(work, "train.json"), "w") as f:
        json.dump({"train_micro_batch_size_per_gpu": 2, "strata": {"device": "host"},
                   "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}, f)
    t = subprocess.run([strata, "train", "--config", "train.json", "--model", "gpt.json", "--text",
                        "/usr/share/common-licenses/GPL-3", "--seq-len", "32", "--steps", "2", "--save", folder,
                        "--report", "none"], capture_output=True, text=True, timeout=120, cwd=work)
    assert t.returncode == 0, t.stderr[-2000:]
    shutil.copy(tokenizer, os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(work, "text.jsonl"), "w") as f:
        f.write('{"prompt": "This License applies to"}\n{"prompt": "Everyone is permitted to copy"}\n')
    swap = os.path.join(work, "swap")
    os.makedirs(swap)
    with open(os.path.join(work, "nvme.json"), "w") as f:
        json.dump({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": swap,
                                                                       "buffer_count": 3}},
                   "aio": {"block_size": 65536}}, f)
    text = ["--model", folder, "--prompts", "text.jsonl", "--max-new-tokens", "5"]
    resident = lines(run(strata, text, work).stdout)
    streamed_run = run(strata, text + ["--config", "nvme.json", "--device-memory", "2MiB"], work)
    streamed = lines(streamed_run.stdout)
    assert [o["ids"] for o in streamed] == [o["ids"] for o in resident], (streamed, resident)
    assert all(isinstance(o.get("text"), str) for o in streamed), streamed
    assert "modules resident on the device, the others streamed" in streamed_run.stderr, streamed_run.stderr[-2000:]
    nvme_line = [l for l in streamed_run.stderr.splitlines() if l.startswith("done:")]
    assert nvme_line and " 0 B read from NVMe" not in nvme_line[0], nvme_line
    leftovers = [os.path.join(b, x) for b, _, files in os.walk(swap) for x in files]
    assert not leftovers, f"swap files left: {leftovers}"
    print(f"folder: streamed from NVMe through 2 MiB == resident; {nvme_line[0]}")
    # The layers and the KV cache both streamed.
    both = lines(run(strata, text + ["--config", "nvme.json", "--device-memory", "2MiB", "--kv-cache", "host"],
                     work).stdout)
    assert [o["ids"] for o in both] == [o["ids"] for o in resident], (both, resident)
    print("folder: layers from NVMe and the KV cache from pinned host == resident")

    # Errors.
    def refused(args, *needles):
        r = run(strata, args, work, expect_ok=False)
        assert r.returncode == 1, f"{args}: exit {r.returncode}\n{r.stderr[-1500:]}"
        for n in needles:
            assert n in r.stderr, f"{args}: the error lacks {n!r}:\n{r.stderr[-1500:]}"
        print(f"refused {' '.join(args[:2])} ...: {r.stderr.strip().splitlines()[-1][:150]}")

    refused(["--preset", "llama-tiny", "--prompt", "hello"], "no tokenizer")
    refused(["--model", folder, "--prompt", "word " * 200, "--max-new-tokens", "8"], "--max-new-tokens")
    refused(["--preset", "llama-tiny", "--prompts", prompts, "--quantize", "int8"], "--quantize")
    refused(["--preset", "llama-tiny", "--prompts", prompts, "--top-p", "0", "--temperature", "1"], "--top-p")
    with open(os.path.join(work, "big.jsonl"), "w") as f:
        f.write('{"ids": [1, 256]}\n')
    refused(["--preset", "llama-tiny", "--prompts", "big.jsonl"], "big.jsonl:1")
    refused(["--model", folder, "--prompts", "text.jsonl", "--device-memory", "1MiB"], "do not fit", "needed")
    with open(os.path.join(work, "small_pinned.json"), "w") as f:
        json.dump({"strata": {"pinned_memory": "16KiB"}}, f)
    refused(["--preset", "llama-tiny", "--prompts", prompts, "--kv-cache", "host", "--config", "small_pinned.json"],
            "do not fit", "KV cache (streamed per layer", "strata.pinned_memory", "--kv-cache device")
    r = run(strata, ["--preset", "llama-tiny", "--prompts", prompts, "--kv-cache", "disk"], work, expect_ok=False)
    assert r.returncode != 0 and "--kv-cache" in r.stderr, r.stderr[-1500:]  # CLI11 refuses it
    return 0


if __name__ == "__main__":
    sys.exit(main())
