#!/usr/bin/python3
"""`strata convert` (a checkpoint -> HF GPT-2 safetensors) against what `strata train --save`
writes at the same step, and the converted weights in the reference PyTorch model.

Usage: /usr/bin/python3 convert_vs_torch.py --strata PATH/strata [--keep DIR]

Debian's interpreter (/usr/bin/python3 with python3-torch and python3-numpy, from
scripts/setup.sh); exits 77 (skipped) when torch or numpy cannot be imported.

Runs (a small GPT-2 whose sizes are no multiples of 64, so every ZeRO shard has padding; random
fp32 weights through --init; an llm.c token file; 4 AdamW steps with a checkpoint every step):
  - "one_rank": stage 3, parameters in pinned host memory, optimizer states on NVMe;
  - "two_ranks": the same under mpirun -np 2 (2 shard files); skipped without mpirun.
Checks, per run:
  - convert of the step-4 checkpoint (fp32) == the run's --save file, byte for byte (the same
    writer, the same values: every tensor bit for bit, also checked tensor by tensor);
  - convert --dtype bf16 == each --save tensor rounded to bf16 (round to nearest even), bit for
    bit, and has half the data bytes;
  - convert of the step-2 checkpoint differs from step 4's (the conversion reads the
    checkpoint, not some later state);
  - convert --state exp_avg / exp_avg_sq: torch's AdamW continued from the step-2 checkpoint's
    exported masters and moments gives the step-3 checkpoint's weights (rel 1e-4 per tensor,
    the key third of c_attn.bias aside: it has no gradient, see train_vs_torch.py);
  - the converted file loads into gpt2_torch.Gpt2 (every tensor present with its exact shape),
    and torch's loss on the run's next micro-batch equals the loss `strata train --resume`
    reports for step 5 from that checkpoint (rel 1e-5: fp32 forward in two implementations).
"""
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_util  # noqa: E402  (first: without torch / numpy it exits 77, skipped)
import numpy as np  # noqa: E402
import torch  # noqa: E402
import gpt2_torch  # noqa: E402
import st_io  # noqa: E402

CFG = gpt2_torch.GptConfig(vocab_size=203, n_positions=40, n_embd=72, n_layer=2, n_head=6)
B, T, STEPS = 2, 24, 4
LOSS_BOUND = 1e-5
MOMENT_BOUND = 1e-4  # one AdamW step in torch vs strata, fp32 in different orders (train_vs_torch.py)
TIMEOUT_S = 300
MPI_ENV = {  # as tests/train/train_util.py: Open MPI as root in a container, no remote shell
    "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMP_NUM_THREADS": "1",
    "OMPI_MCA_plm_rsh_agent": "false", "OMPI_MCA_btl": "self,vader",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none", "OMPI_MCA_rmaps_base_oversubscribe": "1",
}


def ds_config(nvme):
    return {
        "train_micro_batch_size_per_gpu": B, "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                              "offload_param": {"device": "cpu"},
                              "offload_optimizer": {"device": "nvme", "nvme_path": nvme}},
        "aio": {"block_size": 65536}, "strata": {"device": "host"},
    }


def run(cmd, ranks=None, env_extra=None):
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "2")
    if ranks:
        env.update(MPI_ENV)
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{(r.stdout + r.stderr)[-3000:]}")
    return r


def bf16_round(a):
    return st_io.bf16_bits_to_f32(st_io.f32_to_bf16_bits(a))


def micro_batch(tokens, k):
    """Window k of the sequential loader: inputs and targets (B, T)."""
    seg = tokens[k * B * T: (k + 1) * B * T + 1].astype(np.int64)
    return torch.from_numpy(seg[:-1].reshape(B, T)), torch.from_numpy(seg[1:].reshape(B, T))


def check_moments(strata, d, ck, world, tokens, name, failures):
    """convert --state exp_avg / exp_avg_sq: torch's AdamW continued from the step-2 checkpoint
    (its masters and moments, Adam step 2) for step 3 on the same micro-batches, with the same
    clipping, gives the step-3 checkpoint's weights (rel MOMENT_BOUND per tensor)."""
    states = {}
    for state in ("master", "exp_avg", "exp_avg_sq"):
        out = os.path.join(d, f"step2-{state}.safetensors")
        run([strata, "convert", os.path.join(ck, "step-00000002"), out, "--state", state])
        states[state] = st_io.load(out)
    step3 = os.path.join(d, "step3.safetensors")
    run([strata, "convert", os.path.join(ck, "step-00000003"), step3])
    want = st_io.load(step3)
    model = gpt2_torch.Gpt2(CFG)
    model.load_numpy(states["master"])
    params = dict(model.named_parameters())
    c = ds_config("")
    opt = torch.optim.AdamW(model.parameters(), lr=c["optimizer"]["params"]["lr"], betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=c["optimizer"]["params"]["weight_decay"])
    for r in range(world):  # step 3 reads micro-batch 2 * world + r on rank r; the mean over ranks
        x, y = micro_batch(tokens, 2 * world + r)
        (model(x, y)[1] / world).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), c["gradient_clipping"])
    for n, prm in params.items():
        opt.state[prm] = {"step": torch.tensor(2.0), "exp_avg": torch.from_numpy(states["exp_avg"][n].copy()),
                          "exp_avg_sq": torch.from_numpy(states["exp_avg_sq"][n].copy())}
    opt.step()
    worst = 0.0
    for n, prm in params.items():
        if n.endswith("c_attn.bias"):  # its key third has no gradient: rounding noise (train_vs_torch.py)
            continue
        worst = max(worst, ref_util.rel(prm.detach().numpy(), want[n]))
    print(f"{name}: torch AdamW from the exported step-2 masters and moments == the step-3 checkpoint "
          f"(worst rel {worst:.2e}, bound {MOMENT_BOUND:g})")
    if not worst <= MOMENT_BOUND:
        failures.append(f"{name}: torch continued from the exported moments is {worst:.2e} from step 3")


def check_run(strata, d, ranks, weights, tokens, failures):
    name = f"{ranks or 1} rank(s)"
    os.makedirs(os.path.join(d, "nvme"), exist_ok=True)
    p = {k: os.path.join(d, k) for k in ("ds.json", "config.json", "w.safetensors", "tokens.bin",
                                         "save.safetensors", "ck", "m.jsonl")}
    with open(p["ds.json"], "w") as f:
        json.dump(ds_config(os.path.join(d, "nvme")), f)
    with open(p["config.json"], "w") as f:
        json.dump(CFG.hf_json(), f)
    st_io.save(p["w.safetensors"], weights)
    ref_util.write_token_file(p["tokens.bin"], tokens)
    common = [strata, "train", "--config", p["ds.json"], "--model", p["config.json"],
              "--data", p["tokens.bin"], "--seq-len", str(T), "--report", "none"]
    run(common + ["--init", p["w.safetensors"], "--steps", str(STEPS), "--save", p["save.safetensors"],
                  "--checkpoint-dir", p["ck"], "--checkpoint-every", "1", "--checkpoint-keep", "0"],
        ranks)

    conv = {k: os.path.join(d, k + ".safetensors") for k in ("fp32", "bf16", "step2")}
    run([strata, "convert", p["ck"], conv["fp32"]])
    run([strata, "convert", p["ck"], conv["bf16"], "--dtype", "bf16"])
    run([strata, "convert", os.path.join(p["ck"], "step-00000002"), conv["step2"]])

    with open(conv["fp32"], "rb") as a, open(p["save.safetensors"], "rb") as b:
        if a.read() != b.read():
            failures.append(f"{name}: convert (fp32) is not byte-identical to --save")
    saved, ours = st_io.load(p["save.safetensors"]), st_io.load(conv["fp32"])
    if sorted(saved) != sorted(ours):
        failures.append(f"{name}: tensor names differ: {sorted(set(saved) ^ set(ours))}")
    for t in sorted(set(saved) & set(ours)):
        if saved[t].shape != ours[t].shape or not np.array_equal(saved[t].view(np.uint32), ours[t].view(np.uint32)):
            failures.append(f"{name}: {t} differs between convert and --save")
    half = st_io.load(conv["bf16"])
    for t in sorted(saved):
        if t not in half or not np.array_equal(half[t].view(np.uint32), bf16_round(saved[t]).view(np.uint32)):
            failures.append(f"{name}: bf16 {t} is not --save's value rounded to bf16")
    if not os.path.getsize(conv["bf16"]) < 0.6 * os.path.getsize(conv["fp32"]):
        failures.append(f"{name}: the bf16 file is not about half the fp32 one")
    step2 = st_io.load(conv["step2"])
    if all(np.array_equal(step2[t], saved[t]) for t in saved):
        failures.append(f"{name}: the step-2 checkpoint converts to the step-4 weights")
    check_moments(strata, d, p["ck"], ranks or 1, tokens, name, failures)

    # The converted weights in the reference model: its loss on micro-batch STEPS (the next one
    # the run reads) against strata's step-5 loss after --resume.
    model = gpt2_torch.Gpt2(CFG)
    try:
        model.load_numpy(ours)
    except (KeyError, ValueError) as e:
        failures.append(f"{name}: the converted file does not load into the reference model: {e}")
        return
    run(common + ["--resume", p["ck"], "--steps", str(STEPS + 1), "--metrics", p["m.jsonl"]], ranks)
    with open(p["m.jsonl"]) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    if [m["step"] for m in lines] != [STEPS + 1]:
        failures.append(f"{name}: the resumed run reports steps {[m['step'] for m in lines]}")
        return
    world = ranks or 1
    losses = []
    for r in range(world):  # rank r reads window STEPS * world + r (sequential loader)
        w = STEPS * world + r
        seg = tokens[w * B * T: (w + 1) * B * T + 1].astype(np.int64)
        x = torch.from_numpy(seg[:-1].reshape(B, T))
        y = torch.from_numpy(seg[1:].reshape(B, T))
        with torch.no_grad():
            losses.append(float(model(x, y)[1]))
    ref = float(np.mean(losses))
    got = lines[0]["loss"]
    err = abs(got - ref) / abs(ref)
    print(f"{name}: convert == --save (fp32 bytes, bf16 rounding); torch loss {ref:.6f} vs strata "
          f"{got:.6f} (rel {err:.2e}, bound {LOSS_BOUND:g})")
    if not err <= LOSS_BOUND:
        failures.append(f"{name}: torch's loss on the converted weights {ref:.6f} vs strata's {got:.6f}")


def main():
    args = ref_util.start(__doc__, "strata", "the strata binary", "run in DIR and keep the files")
    started = time.monotonic()
    tmp, workdir = ref_util.work_dir(args.keep, "strata-convert-")
    weights = ref_util.make_weights(CFG, seed=7300)
    tokens = ref_util.make_tokens(CFG, (STEPS + 1) * 2 * B * T + 1, seed=7301)
    failures = []
    runs = [None] + ([2] if shutil.which("mpirun") else [])
    if len(runs) == 1:
        print("no mpirun: the two-rank run is skipped")
    for ranks in runs:
        try:
            check_run(args.strata, os.path.join(workdir, f"ranks{ranks or 1}"), ranks, weights, tokens, failures)
        except RuntimeError as e:
            failures.append(str(e))
    return ref_util.finish(failures, tmp, f"{len(runs)} run(s)", started)


if __name__ == "__main__":
    sys.exit(main())
