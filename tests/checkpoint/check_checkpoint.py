#!/usr/bin/env python3
"""End-to-end tests of `strata train` checkpoints (runtime/checkpoint/; the trainer's side:
train/checkpointing.h, train/resume.h).

Usage: check_checkpoint.py STRATA CASE [--keep DIR]
  STRATA  the strata binary
  CASE    one of the cases below (each registered as its own ctest test), or all
  --keep  run in DIR/CASE (emptied first) and leave the files there (default: a temp dir,
          removed)

Exit 0: passed; 1: failed (what was expected and what came on stderr); 77: skipped (a case
that cannot run here says why).

Every run: the tiny preset, --seq-len 32, ZeRO stage 3, gradient_clipping 1.0, a few steps,
--report none, in its own folder of the case's temp dir (tests/train/train_util.py's Run).
"Equal" below means bit for bit: the --save file's bytes, and on every step the resumed run
trains, the loss, grad_norm, lr, loss_scale and skipped flag of its --metrics line.

Cases:
  resume_cpu
      N steps with --checkpoint-dir, then --resume to 2N == 2N steps straight (parameters and
      optimizer in pinned host memory). `strata convert` of the checkpoint == the --save of the
      run that wrote it. A run checkpointing every step == one that does not, and resuming from
      its step-1 and step-N folders (not `latest`) == straight.
  resume_nvme
      The same with the optimizer states on NVMe (the parameters in host memory, then on NVMe).
  resume_bf16, resume_fp16
      The same in bf16, and in fp16 with a loss scale that overflows and grows again and a
      warmup/decay schedule, so that the loss scaler's state and the count of applied steps
      must carry over.
  resume_cross_tier
      Saved with the states in one tier (pinned host, NVMe, device), resumed with them in
      another: equal to the straight run.
  resume_ranks_2 (label mpi)
      The same with 2 ranks under mpirun (a shard file per rank); that checkpoint resumed by 1
      rank, and a 1-rank checkpoint by 2 ranks: exit 1 naming both rank counts.
  crash
      From a checkpoint at step 2, a run to step 6 saving at 4 and 6 is killed (STRATA_CRASH_AT,
      SIGKILL) at each of its crash points in turn, until one run completes: every time `latest`
      names a complete checkpoint and no step-* folder lacks its manifest; restarted with the same
      flags plus --resume, the run gives the straight run's bits and leaves exactly the
      checkpoints of steps 4 and 6 (at every point; on a slow machine, past 20 s, at a sample of
      the shard file's pieces). aio.block_size 256 KiB: 1 MiB pieces, one per module state, 35
      points.
  crash_first_save
      A fresh run killed after its first save is renamed into step-2 and before `latest` is
      written: a run without --resume is refused (the folder holds checkpoints), and --resume
      of the folder continues from step-2 to the straight run's bits.
  corruption
      A flipped byte in manifest.json, meta.json or the shard file (its header line, JSON and
      padding; values at its start, middle and end), the shard file deleted, cut short or grown,
      meta.json deleted: the resume exits 1 naming the file, before any step.
  signal
      SIGTERM during a long run: exit 143 after the step under way, a checkpoint of that step
      (the last --metrics line), and a resume from it == a straight run. SIGINT: exit 130, the
      same checkpoint. Two SIGINTs: the run dies at once, the folder still consistent.
  bad_resume
      Exit 1 naming the flag or file, before any step: another model, another --seq-len,
      --seed, --shuffle, micro-batch size or data; --resume with --init; a checkpoint at or
      after --steps; --resume of an empty or missing folder, of one holding only a .partial
      save, of a `latest` naming nothing; --checkpoint-every without --checkpoint-dir,
      --checkpoint-dir naming a file. A refused resume leaves its --checkpoint-dir unchanged.
  keep_last
      --checkpoint-every 1 over 5 steps keeps the newest --checkpoint-keep (2: steps 4 and 5;
      0: all; 1 with --checkpoint-every 2: step 5), the default (2) and strata.checkpoint_keep;
      `latest` names the last; no dot-files are left. The same run again into the same folder
      without --resume is refused, changing nothing; resumed there from step 4, its step 5
      replaces the old one and has the first run's bits.
  save_error, save_enospc
      A checkpoint that cannot be written (cases_save_errors.py): EIO injected on its shard file
      (STRATA_FAULT_INJECTION), a real ENOSPC on a small tmpfs (root, else 77). Training goes on
      to the straight run's bits, one error line with what to do, `latest` stays, no partial
      folder, the next save is published; strata.checkpoint_on_error "stop" ends the run and
      --resume from `latest` gives the straight bits.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from train_util import run_cases  # noqa: E402  (tests/train/train_util.py)

from cases_crash import case_crash, case_crash_first_save, case_keep_last, case_signal  # noqa: E402
from cases_save_errors import case_save_enospc, case_save_error  # noqa: E402
from cases_damage import case_bad_resume, case_corruption  # noqa: E402
from cases_resume import (case_resume_bf16, case_resume_cpu, case_resume_cross_tier,  # noqa: E402
                          case_resume_fp16, case_resume_nvme, case_resume_ranks_2)

CASES = {
    "resume_cpu": case_resume_cpu,
    "resume_nvme": case_resume_nvme,
    "resume_bf16": case_resume_bf16,
    "resume_fp16": case_resume_fp16,
    "resume_cross_tier": case_resume_cross_tier,
    "resume_ranks_2": case_resume_ranks_2,
    "crash": case_crash,
    "crash_first_save": case_crash_first_save,
    "corruption": case_corruption,
    "signal": case_signal,
    "bad_resume": case_bad_resume,
    "keep_last": case_keep_last,
    "save_error": case_save_error,
    "save_enospc": case_save_enospc,
}


def main():
    return run_cases(__doc__, CASES, "strata-checkpoint")


if __name__ == "__main__":
    sys.exit(main())
