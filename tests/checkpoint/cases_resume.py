"""Cases of check_checkpoint.py: a run stopped at step N, saved and resumed to 2N gives the bits
of a run of 2N steps straight (resume_*), whichever tiers hold the states before and after
(resume_cross_tier), and with 2 ranks (resume_ranks_2)."""
import os
import subprocess
import sys

from cases_ranks import mpi_usable
from ckpt_util import (compare_resumed, expect_refused, latest, stage3, step_folder, train)
from train_util import SKIP, check, compare_bitwise

N = 3  # steps before the checkpoint; the runs go to 2N


def save_and_resume(strata, root, tag, save_config, resume_config, straight, n=N, ranks=None,
                    resume_flag=None):
    """Trains n steps with save_config and --checkpoint-dir, resumes to the straight run's total
    with resume_config (--resume the folder, or resume_flag(folder)), and compares with the
    straight run. Returns (the run that saved, the resumed run, the checkpoint folder)."""
    total = len(straight.metric_lines())
    ckpt = os.path.join(root, f"ckpt-{tag}")
    half = train(strata, root, f"{tag}-first{n}", save_config, n, ["--checkpoint-dir", ckpt], ranks=ranks)
    check(latest(ckpt) == f"step-{n:08d}", f"{half.name}: latest is {latest(ckpt)!r}, expected "
                                           f"step-{n:08d}")
    world = ranks or 1
    shards = sorted(f for f in os.listdir(step_folder(ckpt, n)) if f.startswith("shard-"))
    want = [f"shard-{r:05d}-of-{world:05d}.bin" for r in range(world)]
    check(shards == want, f"{half.name}: shard files {shards}, expected {want}")
    where = resume_flag(ckpt) if resume_flag else ckpt
    # The resumed run saves into the same folder again (at its last step), as a restarted job does.
    resumed = train(strata, root, f"{tag}-resumed", resume_config, total,
                    ["--resume", where, "--checkpoint-dir", ckpt], ranks=ranks)
    check(f"resumed from {step_folder(ckpt, n)} at step {n}" in resumed.result.stderr,
          f"{resumed.name}: no 'resumed from ... at step {n}' line")
    print(f"  {tag}: {n} steps + resume to {total} == {total} straight: "
          f"{compare_resumed(straight, resumed, n)} ({half.seconds + resumed.seconds:.1f} s)")
    check(latest(ckpt) == f"step-{total:08d}", f"{resumed.name}: latest is {latest(ckpt)!r} after the "
                                               f"resumed run, expected step-{total:08d}")
    return half, resumed, ckpt


def case_resume_cpu(strata, root):
    cfg = stage3("cpu", "cpu")
    straight = train(strata, root, "straight", cfg, 2 * N)
    half, _, ckpt = save_and_resume(strata, root, "cpu", cfg, cfg, straight)
    # `strata convert` of the checkpoint gives the bytes --save wrote at that step.
    out = os.path.join(root, "converted.safetensors")
    r = subprocess.run([strata, "convert", step_folder(ckpt, N), out], capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 0, f"strata convert {step_folder(ckpt, N)}: exit {r.returncode}\n{r.stderr}")
    with open(out, "rb") as a, open(half.save, "rb") as b:
        check(a.read() == b.read(), f"strata convert of step {N} differs from {half.name}'s --save")
    print(f"  strata convert of step-{N:08d} == {half.name}'s --save, byte for byte")
    # Checkpoints every step change nothing in the run; resuming from one that is not `latest`
    # (the step-N folder named directly) continues from there.
    every_dir = os.path.join(root, "ckpt-every")
    every = train(strata, root, "every-step", cfg, 2 * N,
                  ["--checkpoint-dir", every_dir, "--checkpoint-every", "1", "--checkpoint-keep", "0"])
    print(f"  checkpoints every step == none: {compare_bitwise(straight, every)}")
    for first in (1, N):
        resumed = train(strata, root, f"from-step-{first}", cfg, 2 * N,
                        ["--resume", step_folder(every_dir, first)])
        print(f"  --resume {os.path.basename(step_folder(every_dir, first))} (not latest) to {2 * N}: "
              f"{compare_resumed(straight, resumed, first)}")


def case_resume_nvme(strata, root):
    for param in ("cpu", "nvme"):
        cfg = stage3("nvme", param)
        straight = train(strata, root, f"straight-param-{param}", cfg, 2 * N)
        save_and_resume(strata, root, f"opt-nvme-param-{param}", cfg, cfg, straight)


def case_resume_bf16(strata, root):
    cfg = stage3("cpu", "cpu", bf16=True)
    straight = train(strata, root, "straight", cfg, 2 * N)
    check("bf16" in straight.result.stderr.split("strata train:")[-1].splitlines()[0],
          f"{straight.name}: the start line does not say bf16")
    save_and_resume(strata, root, "bf16", cfg, cfg, straight)
    cfg_nvme = stage3("nvme", "nvme", bf16=True)
    save_and_resume(strata, root, "bf16-nvme", cfg_nvme, cfg_nvme, straight)


# fp16 from a loss scale that overflows (2^19, hysteresis 1): steps 1 and 3 are skipped and the
# scale halves; with loss_scale_window 2 it doubles again after two good steps, so a resumed run
# must carry the scale and the count of good steps. A warmup-then-decay schedule counts only the
# steps not skipped: it must carry that count too.
FP16_N = 4
FP16 = {"fp16": {"enabled": True, "initial_scale_power": 19, "hysteresis": 1, "loss_scale_window": 2},
        "scheduler": {"type": "WarmupDecayLR",
                      "params": {"warmup_num_steps": 3, "total_num_steps": 2 * FP16_N,
                                 "warmup_type": "linear"}}}


def case_resume_fp16(strata, root):
    for opt, param in (("cpu", "cpu"), ("nvme", "nvme")):
        cfg = stage3(opt, param, extra=FP16)
        straight = train(strata, root, f"straight-{opt}-{param}", cfg, 2 * FP16_N)
        m = straight.metric_lines()
        skipped = [x["step"] for x in m if x["skipped"]]
        scales = [x["loss_scale"] for x in m]
        check(skipped and max(skipped) <= FP16_N and len(skipped) < FP16_N,
              f"{straight.name}: skipped steps {skipped}: expected some, all before step {FP16_N}")
        check(len(set(scales[FP16_N:])) > 1, f"{straight.name}: the loss scale does not change after "
                                             f"step {FP16_N} ({scales}): the scaler's state would not matter")
        print(f"  fp16 straight: skipped steps {skipped}, loss scales {scales}, "
              f"lr {[x['lr'] for x in m]}")
        save_and_resume(strata, root, f"fp16-{opt}-{param}", cfg, cfg, straight, n=FP16_N)


def case_resume_cross_tier(strata, root):
    """Saved with the states in one tier, resumed with them in another."""
    cpu, nvme, device = stage3("cpu", "cpu"), stage3("nvme", "nvme"), stage3("none", "none")
    straight = train(strata, root, "straight-cpu", cpu, 2 * N)
    for tag, a, b in (("cpu-to-nvme", cpu, nvme), ("nvme-to-cpu", nvme, cpu),
                      ("device-to-nvme", device, nvme), ("nvme-to-device", nvme, device)):
        _, resumed, _ = save_and_resume(strata, root, tag, a, b, straight)
        check("resume: config" in resumed.result.stderr,
              f"{resumed.name}: no 'resume: config ... changed' line for the other tiers")


def case_resume_ranks_2(strata, root):
    why = mpi_usable(strata)
    if why:
        print(f"skipped: {why}")
        sys.exit(SKIP)
    cfg = stage3("cpu", "cpu")
    straight = train(strata, root, "straight-np2", cfg, 2 * N, ranks=2)
    check("2 rank(s)" in straight.result.stderr, f"{straight.name}: the start line does not say 2 rank(s)")
    _, _, ckpt = save_and_resume(strata, root, "np2", cfg, cfg, straight, ranks=2)
    # The 2-rank checkpoint (at step 2N now) with 1 rank: refused, saying how to go on.
    one = train(strata, root, "np2-resumed-by-1", cfg, 2 * N + 2, ["--resume", ckpt], ok=False)
    print(f"  1 rank: {expect_refused(one, ['2 rank(s)', '1 rank(s)', 'mpirun', 'strata convert'])}")
    # A 1-rank checkpoint with 2 ranks: refused too.
    one_dir = os.path.join(root, "ckpt-np1")
    train(strata, root, "np1-first", cfg, N, ["--checkpoint-dir", one_dir])
    two = train(strata, root, "np1-resumed-by-2", cfg, 2 * N, ["--resume", one_dir], ranks=2, ok=False)
    print(f"  2 ranks: {expect_refused(two, ['1 rank(s)', '2 rank(s)'])}")
