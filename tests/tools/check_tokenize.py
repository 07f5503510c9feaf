#!/usr/bin/env python3
"""The tokenizer goes with the model: `strata train --text`, `--save`, checkpoints, `strata
convert` and `strata tokenize` on a small LLaMA folder holding the Llama 3 tokenizer fixture
(tests/models/tokenizer_fixtures/llama3, byte-level BPE of 1,001 ids), on the host device.

  1. train --model DIR --text: the run says it used the folder's tokenizer, and its token count
     is the one `strata tokenize` writes for the same file (fewer tokens than bytes); the same
     folder without a tokenizer says it trains on the bytes (count = the file's size). A folder
     whose tokenizer does not load, and one whose config's vocab_size is smaller than the
     tokenizer's, are refused naming the problem.
  2. --save DIR writes tokenizer.json, tokenizer_config.json, special_tokens_map.json and
     generation_config.json beside the weights, byte for byte, and `strata infer --model DIR
     --prompt` answers with text; the checkpoint holds the same files (listed in its manifest) and
     `strata convert` writes them beside the weights it exports.
  3. strata tokenize: each golden text of the fixture (golden.json, made by Hugging Face
     `tokenizers`) a file: the token file (magic 20240520, version 1, uint16) holds their golden
     ids in order; with --eos-between, the eos id (1) between files. A 3 MiB text tokenized on 1
     and 2 threads gives the same bytes. A tokenizer without an eos token is refused with
     --eos-between.
  4. A vocabulary above 65,536 (the fixture plus an added token of id 70000): strata tokenize
     writes uint32 tokens (magic 20240801, version 7) holding 70000, and strata train --data
     trains on that file with a model of vocab_size 70001; a model of vocab_size 1001 refuses it.

Usage: check_tokenize.py STRATA FIXTURES_DIR SOURCE_DIR WORKDIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys

# vocab_size = the tokenizer's 1,001 ids: strata infer decodes every id it samples.
LLAMA = {"architectures": ["LlamaForCausalLM"], "vocab_size": 1001, "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"]


def fail(message, run=None):
    print(f"FAIL: {message}", file=sys.stderr)
    if run is not None:
        print(f"--- stdout\n{run.stdout[-3000:]}--- stderr\n{run.stderr[-3000:]}", file=sys.stderr)
    sys.exit(1)


def strata_run(strata, args, cwd, expect_ok=True, timeout=120):
    r = subprocess.run([strata] + args, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if expect_ok and r.returncode != 0:
        fail(f"strata {' '.join(args)}: exit {r.returncode}", r)
    if not expect_ok and r.returncode == 0:
        fail(f"strata {' '.join(args)}: exit 0, expected a refusal", r)
    return r


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def make_folder(path, fixtures, config, tokenizer_json=None, with_files=True):
    """A LLaMA model folder: config.json (no weights: the run starts from --seed) and, with
    with_files, the fixture's tokenizer and its companion files."""
    os.makedirs(path)
    write(os.path.join(path, "config.json"), json.dumps(config))
    if not with_files:
        return path
    if tokenizer_json is None:
        shutil.copy(os.path.join(fixtures, "llama3", "tokenizer.json"), os.path.join(path, "tokenizer.json"))
    else:
        write(os.path.join(path, "tokenizer.json"), tokenizer_json)
    write(os.path.join(path, "tokenizer_config.json"),
          json.dumps({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}, indent=2) + "\n")
    write(os.path.join(path, "special_tokens_map.json"),
          json.dumps({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}) + "\n")
    write(os.path.join(path, "generation_config.json"), '{"bos_token_id": 0, "eos_token_id": 1}\n')
    return path


def token_file(path):
    """(magic, version, tokens) of an llm.c token file."""
    data = read_bytes(path)
    magic, version, count = struct.unpack("<3i", data[:12])
    width = {1: 2, 7: 4}[version]
    if len(data) != 1024 + width * count:
        fail(f"{path}: {len(data)} bytes for {count} tokens of {width} bytes")
    tokens = list(struct.unpack(f"<{count}{'H' if width == 2 else 'I'}", data[1024:]))
    return magic, version, tokens


def train_args(config, model, data_flag, data, extra=()):
    return ["train", "--config", config, "--model", model, data_flag, data, "--seq-len", "16", "--steps", "2",
            "--report", "none"] + list(extra)


def main():
    strata, fixtures, source, work = (os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]),
                                      os.path.abspath(sys.argv[3]), os.path.abspath(sys.argv[4]))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    config = os.path.join(work, "ds.json")
    write(config, json.dumps({"train_micro_batch_size_per_gpu": 2, "strata": {"device": "host"},
                              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}))
    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "wb") as f:
        f.write(read_bytes(os.path.join(source, "README.md")) + read_bytes(os.path.join(source, "docs",
                                                                                         "architecture.md")))
    corpus_bytes = os.path.getsize(corpus)
    src = make_folder(os.path.join(work, "src"), fixtures, LLAMA)
    plain = make_folder(os.path.join(work, "plain"), fixtures, LLAMA, with_files=False)

    # 1. --text with the folder's tokenizer, against strata tokenize and the bytes.
    ckpt = os.path.join(work, "ckpt")
    saved = os.path.join(work, "saved")
    r = strata_run(strata, train_args(config, src, "--text", corpus,
                                      ["--save", saved, "--checkpoint-dir", ckpt]), work)
    line = [l for l in r.stderr.splitlines() if l.startswith("strata train: --text")]
    if len(line) != 1 or "tokens from the model's tokenizer" not in line[0] or "tokenizer.json" not in line[0]:
        fail(f"no line saying the folder's tokenizer was used: {line}", r)
    count = int(line[0].split(": ")[2].split()[0])
    r = strata_run(strata, ["tokenize", "--model", src, "--text", corpus, "--out", "corpus.bin"], work)
    magic, version, ids = token_file(os.path.join(work, "corpus.bin"))
    if (magic, version) != (20240520, 1) or len(ids) != count or not count < corpus_bytes // 2:
        fail(f"train counted {count} tokens, strata tokenize wrote {len(ids)} (magic {magic}, version {version}) "
             f"of {corpus_bytes} bytes")
    print(f"train --text: {count} tokens from the folder's tokenizer (strata tokenize: the same), "
          f"{corpus_bytes} bytes")
    r = strata_run(strata, train_args(config, plain, "--text", corpus), work)
    if f"its {corpus_bytes} bytes as tokens (vocabulary 256: {plain} has no tokenizer)" not in r.stderr:
        fail("a folder without a tokenizer should say it trains on the bytes", r)
    print("train --text: a folder without a tokenizer trains on the bytes, and says so")

    broken = make_folder(os.path.join(work, "broken"), fixtures, LLAMA, tokenizer_json='{"model": {"type": '
                                                                                       '"WordPiece"}}')
    r = strata_run(strata, train_args(config, broken, "--text", corpus), work, expect_ok=False)
    if "the model folder's tokenizer could not be loaded" not in r.stderr:
        fail("a tokenizer that does not load should be refused, saying so", r)
    small = make_folder(os.path.join(work, "small"), fixtures, dict(LLAMA, vocab_size=1000))
    r = strata_run(strata, train_args(config, small, "--text", corpus), work, expect_ok=False)
    if "has 1001 ids, more than the model's vocab_size 1000" not in r.stderr:
        fail("a tokenizer larger than the model's vocabulary should be refused", r)
    print("train --text: an unloadable tokenizer and one larger than vocab_size refused")

    # 2. The tokenizer files beside --save's weights, in the checkpoint, beside convert's.
    for name in TOKENIZER_FILES:
        if read_bytes(os.path.join(saved, name)) != read_bytes(os.path.join(src, name)):
            fail(f"--save: {name} differs from the model folder's (or is missing)")
    r = strata_run(strata, ["infer", "--device", "host", "--model", saved, "--prompt", "The offload engine",
                            "--max-new-tokens", "4"], work)
    out = json.loads(r.stdout.splitlines()[0])
    if len(out["ids"]) != 4 or "text" not in out:
        fail(f"strata infer on --save's folder: {out}", r)
    print(f"--save: {', '.join(TOKENIZER_FILES)} byte for byte; strata infer --prompt answers {out['text']!r}")
    # A vocabulary padded past the tokenizer's (as Qwen2's is): most ids a barely trained model
    # samples are ones the tokenizer does not have; they are skipped in the text, not an error.
    padded = make_folder(os.path.join(work, "padded"), fixtures, dict(LLAMA, vocab_size=4001))
    padded_saved = os.path.join(work, "padded-saved")
    strata_run(strata, train_args(config, padded, "--text", corpus, ["--save", padded_saved]), work)
    r = strata_run(strata, ["infer", "--device", "host", "--model", padded_saved, "--prompt", "The offload engine",
                            "--max-new-tokens", "24", "--temperature", "1.0", "--seed", "3"], work)
    out = json.loads(r.stdout.splitlines()[0])
    if len(out["ids"]) != 24 or not any(i >= 1001 for i in out["ids"]) or not isinstance(out.get("text"), str):
        fail(f"strata infer on a padded vocabulary: {out}", r)
    print(f"a padded vocabulary: {sum(i >= 1001 for i in out['ids'])} of 24 sampled ids past the tokenizer's, skipped")
    step = os.path.join(ckpt, "step-00000002")
    with open(os.path.join(step, "manifest.json")) as f:
        listed = [e["name"] for e in json.load(f)["files"]]
    for name in TOKENIZER_FILES:
        if name not in listed or read_bytes(os.path.join(step, name)) != read_bytes(os.path.join(src, name)):
            fail(f"the checkpoint lacks {name} (manifest: {listed})")
    converted = os.path.join(work, "converted")
    r = strata_run(strata, ["convert", ckpt, converted], work)
    for name in TOKENIZER_FILES:
        if read_bytes(os.path.join(converted, name)) != read_bytes(os.path.join(src, name)):
            fail(f"convert: {name} differs from the model folder's (or is missing)", r)
    if "with tokenizer.json" not in r.stderr:
        fail("convert should say it wrote the tokenizer files", r)
    strata_run(strata, ["infer", "--device", "host", "--model", converted, "--prompt", "strata", "--max-new-tokens",
                        "2"], work)
    print("checkpoint: the tokenizer files in its manifest; strata convert writes them beside the weights")

    # 3. strata tokenize against the golden ids of Hugging Face tokenizers.
    with open(os.path.join(fixtures, "golden.json")) as f:
        cases = json.load(f)["llama3"]["cases"]
    files, want, want_eos = [], [], []
    for i, case in enumerate(cases):
        path = os.path.join(work, f"golden-{i:02d}.txt")
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(case["text"])
        files.append(path)
        want += case["ids"]
        want_eos += ([1] if i else []) + case["ids"]
    strata_run(strata, ["tokenize", "--model", src, "--text"] + files + ["--out", "golden.bin"], work)
    magic, version, got = token_file(os.path.join(work, "golden.bin"))
    if got != want:
        fail(f"strata tokenize's ids differ from the golden ids of {len(cases)} texts")
    r = strata_run(strata, ["tokenize", "--model", src, "--text"] + files + ["--out", "golden-eos.bin",
                                                                             "--eos-between"], work)
    if token_file(os.path.join(work, "golden-eos.bin"))[2] != want_eos:
        fail("--eos-between: the ids should be the golden ids with eos (1) between files", r)
    print(f"strata tokenize: {len(cases)} golden texts as files give their golden ids ({len(want)}); "
          f"--eos-between puts eos between them")
    big_text = os.path.join(work, "big.txt")
    with open(big_text, "wb") as f:
        f.write(read_bytes(corpus) * 30)
    a = strata_run(strata, ["tokenize", "--model", src, "--text", big_text, "--out", "big1.bin", "--threads", "1"],
                   work)
    b = strata_run(strata, ["tokenize", "--model", src, "--text", big_text, "--out", "big2.bin", "--threads", "2"],
                   work)
    if read_bytes(os.path.join(work, "big1.bin")) != read_bytes(os.path.join(work, "big2.bin")):
        fail("1 and 2 threads wrote different token files", b)
    print(f"strata tokenize: {os.path.getsize(big_text)} bytes on 1 and 2 threads: the same file")
    with open(os.path.join(fixtures, "llama3", "tokenizer.json")) as f:
        no_eos = json.load(f)
    for t in no_eos["added_tokens"]:
        if t["content"] == "<|end_of_text|>":
            t["content"] = "<|stop|>"
    noeos = os.path.join(work, "noeos")
    os.makedirs(noeos)
    write(os.path.join(noeos, "tokenizer.json"), json.dumps(no_eos))
    r = strata_run(strata, ["tokenize", "--model", noeos, "--text", corpus, "--out", "x.bin", "--eos-between"], work,
                   expect_ok=False)
    if "the tokenizer has no eos token" not in r.stderr:
        fail("--eos-between without an eos token should be refused", r)
    print("strata tokenize --eos-between: a tokenizer without an eos token refused")

    # 4. A vocabulary above 65,536: uint32 tokens, and training on them.
    with open(os.path.join(fixtures, "llama3", "tokenizer.json")) as f:
        wide = json.load(f)
    wide["added_tokens"].append({"id": 70000, "content": "<|big|>", "single_word": False, "lstrip": False,
                                 "rstrip": False, "normalized": False, "special": True})
    big = make_folder(os.path.join(work, "big"), fixtures, dict(LLAMA, vocab_size=70001, tie_word_embeddings=True),
                      tokenizer_json=json.dumps(wide))
    text = os.path.join(work, "wide.txt")
    write(text, "<|big|>".join(["The offload engine keeps states in tiers.\n"] * 40))
    strata_run(strata, ["tokenize", "--model", big, "--text", text, "--out", "wide.bin"], work)
    magic, version, tokens = token_file(os.path.join(work, "wide.bin"))
    if (magic, version) != (20240801, 7) or tokens.count(70000) != 39:
        fail(f"wide.bin: magic {magic}, version {version}, {tokens.count(70000)} tokens of id 70000 (want 39)")
    r = strata_run(strata, train_args(config, big, "--data", "wide.bin"), work)
    if "step 2/2" not in r.stderr:
        fail("training on a uint32 token file should run its 2 steps", r)
    r = strata_run(strata, train_args(config, src, "--data", "wide.bin"), work, expect_ok=False)
    if "outside the model's vocabulary (vocab_size 1001)" not in r.stderr:
        fail("a uint32 token file with ids beyond the model's vocabulary should be refused", r)
    print(f"vocabulary 70001: {len(tokens)} uint32 tokens (magic 20240801, version 7); train --data runs on them; "
          f"a model of vocab_size 1001 refuses them")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
