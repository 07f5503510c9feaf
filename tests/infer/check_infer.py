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
  - loading never holds the model in host memory: serving a folder of ~190 MB of fp32 weights
    with the parameters on NVMe (so that nothing else holds them) peaks, in resident memory,
    within 48 MiB of the same run from random weights (about the largest tensors, not the file;
    it fails when the loader keeps what it read resident);
  - the folder streamed from NVMe with --quantize int8 / int4: the plan names the quantized shards,
    fewer bytes move than unquantized; --perplexity of a text: the same resident and streamed,
    close to it quantized (int4 further than int8 at most by a margin);
  - errors, each exit 1 naming the problem: a text prompt without a tokenizer, a prompt longer
    than the positions allow, --top-p 0, an id outside the vocabulary, a device too
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


def write_llama_folder(folder, config, seed):
    """config.json and model.safetensors of random fp32 weights in the LLaMA layout."""
    import numpy as np
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
    import st_io
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    C, F, V = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    hs = C // config["num_attention_heads"]
    Q, KV = config["num_attention_heads"] * hs, config["num_key_value_heads"] * hs
    rng = np.random.default_rng(seed)
    shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,), "lm_head.weight": (V, C)}
    for l in range(config["num_hidden_layers"]):
        p = f"model.layers.{l}."
        shapes.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                       p + "self_attn.q_proj.weight": (Q, C), p + "self_attn.k_proj.weight": (KV, C),
                       p + "self_attn.v_proj.weight": (KV, C), p + "self_attn.o_proj.weight": (C, Q),
                       p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                       p + "mlp.down_proj.weight": (C, F)})
    arrays = {n: (np.ones(s, np.float32) if n.endswith("norm.weight") else
                  rng.standard_normal(s, dtype=np.float32) * 0.02) for n, s in shapes.items()}
    st_io.save(os.path.join(folder, "model.safetensors"), arrays)
    return sum(a.nbytes for a in arrays.values())


def peak_rss(cmd, cwd):
    """Runs cmd (which must succeed) in a child of its own and returns its peak resident bytes."""
    pid = os.fork()
    if pid == 0:
        os.chdir(cwd)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.execv(cmd[0], cmd)
    _, status, usage = os.wait4(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"{' '.join(cmd)}: status {status}"
    return usage.ru_maxrss * 1024


def load_memory(strata, work):
    folder = os.path.join(work, "big")
    config = {"architectures": ["LlamaForCausalLM"], "vocab_size": 2048, "hidden_size": 512,
              "intermediate_size": 1408, "num_hidden_layers": 16, "num_attention_heads": 8,
              "num_key_value_heads": 4, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
              "tie_word_embeddings": False}
    total = write_llama_folder(folder, config, seed=3)
    swap = os.path.join(work, "big-swap")
    os.makedirs(swap, exist_ok=True)
    with open(os.path.join(work, "big-nvme.json"), "w") as f:
        json.dump({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": swap,
                                                                       "buffer_count": 2}},
                   "aio": {"block_size": 65536}}, f)
    with open(os.path.join(work, "one.jsonl"), "w") as f:
        f.write('{"ids": [1, 2, 3]}\n')
    args = ["infer", "--device", "host", "--config", "big-nvme.json", "--device-memory", "64MiB", "--prompts",
            "one.jsonl", "--max-new-tokens", "2", "--output", "out.jsonl"]
    seeded = peak_rss([strata] + args + ["--model", os.path.join(folder, "config.json")], work)
    loaded = peak_rss([strata] + args + ["--model", folder], work)
    extra = loaded - seeded
    print(f"load memory: weights {total / 2**20:.0f} MiB; peak RSS from the seed {seeded / 2**20:.0f} MiB, "
          f"from the folder {loaded / 2**20:.0f} MiB (+{extra / 2**20:.1f} MiB)")
    assert extra <= 48 * 2**20, f"loading {total / 2**20:.0f} MiB raised the peak resident memory by " \
                                f"{extra / 2**20:.0f} MiB: the loader keeps what it read"


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
        assert o["finish_reason"] == "length" and o["prompt_tokens"] == n and isinstance(o["text"], str), o
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

    load_memory(strata, work)
    # Quantized streaming: the plan names the format, fewer bytes move.
    def moved(stderr):
        done = [l for l in stderr.splitlines() if l.startswith("done:")][0]
        return done.split(" forward passes, ")[1].split(" host->device")[0]
    quant_moved = {}
    for q in ("int8", "int4"):
        r = run(strata, text + ["--config", "nvme.json", "--device-memory", "2MiB", "--quantize", q], work)
        assert f"parameter shards ({q}, group 128, bf16 scales)" in r.stderr, r.stderr[-2000:]
        assert len(lines(r.stdout)) == 2, r.stdout
        quant_moved[q] = moved(r.stderr)
    print(f"quantized streaming: {moved(streamed_run.stderr)} unquantized, {quant_moved['int8']} int8, "
          f"{quant_moved['int4']} int4 host->device")

    # Perplexity of a text: resident == streamed; quantized close.
    with open(os.path.join(work, "held_out.txt"), "w") as f:
        f.write("The GNU General Public License is a free, copyleft license for software and other kinds "
                "of works. Everyone is permitted to copy and distribute verbatim copies of this license.\n")
    ppl_args = ["--model", folder, "--perplexity", "held_out.txt", "--perplexity-window", "32"]
    ppl = {}
    for name, extra in (("resident", []), ("streamed", ["--config", "nvme.json", "--device-memory", "3MiB"]),
                        ("int8", ["--config", "nvme.json", "--device-memory", "3MiB", "--quantize", "int8"]),
                        ("int4", ["--config", "nvme.json", "--device-memory", "3MiB", "--quantize", "int4"])):
        out = lines(run(strata, ppl_args + extra, work).stdout)
        assert len(out) == 1 and out[0]["tokens"] > 32 and out[0]["windows"] >= 2, out
        ppl[name] = out[0]["perplexity"]
    assert ppl["streamed"] == ppl["resident"], ppl
    assert abs(ppl["int8"] / ppl["resident"] - 1) < 0.02, ppl
    assert abs(ppl["int4"] / ppl["resident"] - 1) < 0.10, ppl
    print(f"perplexity: {ppl}")

    # Errors.
    def refused(args, *needles):
        r = run(strata, args, work, expect_ok=False)
        assert r.returncode == 1, f"{args}: exit {r.returncode}\n{r.stderr[-1500:]}"
        for n in needles:
            assert n in r.stderr, f"{args}: the error lacks {n!r}:\n{r.stderr[-1500:]}"
        print(f"refused {' '.join(args[:2])} ...: {r.stderr.strip().splitlines()[-1][:150]}")

    # A model with no tokenizer (a preset, or what `strata train --text` saved from one) reads and
    # writes text as bytes, as it was trained, and says so.
    r = run(strata, ["--preset", "llama-tiny", "--prompt", "hello", "--max-new-tokens", "4"], work)
    out = lines(r.stdout)
    assert "text in and out as bytes" in r.stderr, r.stderr[-1500:]
    assert len(out) == 1 and out[0]["prompt_tokens"] == 5 and isinstance(out[0]["text"], str), out
    print(f"no tokenizer: bytes in and out ({out[0]['text']!r})")
    refused(["--model", folder, "--prompt", "word " * 200, "--max-new-tokens", "8"], "--max-new-tokens")
    refused(["--preset", "llama-tiny", "--perplexity", "held_out.txt", "--prompts", prompts], "--perplexity")
    # More new tokens than the model has positions: said so (it once said "at most -4744 fit").
    refused(["--preset", "llama-tiny", "--prompt", "hi", "--max-new-tokens", "5000"],
            "--max-new-tokens 5000 leaves no room for a prompt", "give at most 255")
    # A --perplexity run that does not fit names --perplexity-window, not --batch / --max-new-tokens.
    r = run(strata, ["--preset", "llama-tiny", "--perplexity", "held_out.txt", "--perplexity-window", "256",
                     "--device-memory", "1MiB"], work, expect_ok=False)
    assert r.returncode == 1 and "lower --perplexity-window" in r.stderr and "--max-new-tokens" not in r.stderr, \
        r.stderr[-1500:]
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
