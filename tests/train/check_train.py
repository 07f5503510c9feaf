#!/usr/bin/env python3
"""End-to-end tests of `strata train` (train/trainer.h over the ZeRO engine, runtime/zero/).

Usage: check_train.py STRATA CASE [--keep DIR]
  STRATA  the strata binary
  CASE    one of the cases below (each registered as its own ctest test)
  --keep  run in DIR and leave the files there (default: a temp dir, removed)

Exit 0: passed; 1: failed (what was expected and what came on stderr); 77: skipped (a case
that cannot run here says why).

Cases (small models: the tiny preset or a config.json, --seq-len 32, a few steps, --report none;
every run in its own folder of the case's temp dir):
  placement_stage{1,2,3}, placement_bf16, placement_fp16
      The same run (seed, data, gradient_clipping 1.0, gradient_accumulation_steps 2,
      weight_decay 0.1) with the optimizer states on the device, in pinned host memory or on
      NVMe, and at stage 3 the parameters too, gives bit-identical --save tensors (and file
      bytes) and identical losses and gradient norms: the engine's invariant (engine.h) on the
      host backend. Also variants that stress the machinery (small optimizer sub-groups with the
      NVMe read/write pipeline, a partial offload ratio, small prefetch buckets, activation
      checkpointing, which fetches every block again in backward). The swap
      folder is empty after each run. fp16 starts with a loss scale that overflows, so that
      skipped steps and updates both happen.
  placement_bf16_accum
      bf16 training with data_types.grad_accum_dtype "bf16" (2 micro-batches summed in bf16):
      the same bits on every placement, the plan's "bf16 gradient accumulators" at half the
      bytes of fp32 ones, and not the bits of fp32 accumulators.
  stages
      With one rank ZeRO partitions nothing: stages 0, 1, 2 and 3 give identical bits.
  ranks_2, ranks_3 (label mpi)
      W ranks under mpirun with micro-batch B and no accumulation against one rank with
      gradient_accumulation_steps W (the loader gives one rank the same windows, in the same
      order), stages 1, 2 and 3 (3 with parameters and optimizer in pinned host memory), within
      1e-5; W ranks x 2 micro-batches against 1 rank x 2W; and with W ranks, the states in
      device / pinned host / NVMe give the same bits.
  issue_order_2 (label mpi)
      2 ranks, ZeRO-3 within 8 MiB of device memory, a quarter of the optimizer on the device, no
      clipping, run 6 times: every run ends (each rank issued the same collectives in the same
      order: Note [Fetch decisions in program order]) with the same bits.
  moe_ranks_2 (label mpi)
      mixtral-tiny on 2 ranks (8-token sequences: some experts routed on one rank only),
      stages 0, 1 and 3 (3 on the device and on the CPU): every rank fetches the union of the
      ranks' experts; within 1e-5 of one rank accumulating 2 micro-batches, CPU == device bits;
      strata infer streaming the experts on 2 ranks gives one rank's tokens, and refuses
      --moe-prefetch on.
  memory
      Model states >= 10x the device budget (8 MiB) train at stage 3 with the parameters in
      pinned host memory and the optimizer on NVMe: finite, decreasing losses, and the device's
      peak within its budget on every step.
  memory_minimum
      A device budget below the plan's minimum fails at start with the per-tier table.
  bad_inputs
      Each bad input exits 1 with an error naming the problem (the key, path or flag), and
      leaves no --save file and no complete --metrics file: nvme offload without nvme_path, an
      nvme_path that does not exist / is under a file / is not writable, --init weights of
      another model, --data that is not a token file / is too short, --seq-len > n_positions,
      optimizer Lamb, data_types.grad_accum_dtype fp16 with bf16 training, and placements the
      engine does not have.
  enospc_plan, enospc_io
      NVMe swap on a 2 MiB tmpfs that cannot hold the optimizer states (one folder; two folders
      on the same file system, so that the run meets ENOSPC while it writes its states): exit 1,
      an error naming the path and the bytes, no --save file, nothing left on the tmpfs (needs
      root to mount one: else 77). The swap file grows with fallocate as the states are first
      written, so (where the file system has fallocate) a run that has started its steps does
      not meet ENOSPC later.
  faults_stop, faults_transient
      Faults injected into the NVMe tier's I/O in the middle of a stage-3 run (cases_faults.py,
      STRATA_FAULT_INJECTION): EIO, ENOSPC, a corrupted block (strata.checksum) stop the run
      naming the swap file, the offset and the errno, and --resume from the last checkpoint
      gives a straight run's bits; EAGAIN, EINTR and short transfers change nothing.
  faults_ranks_2, faults_ranks_3 (label mpi)
      A fault on one rank of 2 or 3 stops every rank within seconds with the rank, file, offset
      and errno named, and --resume at the same world size gives the straight run's bits.
  save_path_early
      --save into a folder that does not exist is refused at start, before any step.
  determinism
      Two identical runs (stage 3, NVMe, --shuffle) give identical bits.
  trace_config
      strata.trace in the config writes a valid Chrome trace of the run there; --trace overrides
      it.
  speculation_metrics
      Each metrics line counts the step's speculative updates and redone ones: all with the norm
      under the threshold, all redone then none with it over, none with speculation off.
  llama_placement
      llama-tiny at stage 3: the states on the device, in pinned memory, on NVMe, and with
      activation checkpointing give the same bits.
  llama_model_folder
      --save DIR writes a sharded Hugging Face folder; --model DIR continues from it bit for bit;
      a second --save into it is refused; strata convert of its checkpoint writes the same folder.
  llama_resume
      A LLaMA run resumed from its step-2 checkpoint ends with the straight run's bits.
  console
      A quiet start: the resolved config in resolved_config.json beside --metrics, on the console
      only with --verbose; after a resume the report's bytes moved count the steps that ran.
  hf_config
      A config as the Hugging Face Trainer passes it (every "auto") trains: each "auto" from its
      flag (--lr, --micro-batch, --warmup-steps), --steps, the model's hidden size or HF's
      defaults, listed in the table at start with its source (and only those); --set applies
      (stage 3 -> 2); the schedule peaks at --lr. A flag over a number of the file wins and says
      so. --set with an unknown key, or grad_accum_dtype fp16 without fp16, exits 1 saying why.
"""

import sys

from cases_config import case_hf_config
from cases_console import case_console
from cases_faults import case_faults_ranks, case_faults_stop, case_faults_transient
from cases_limits import (case_bad_inputs, case_enospc_io, case_enospc_plan, case_memory,
                          case_memory_minimum, case_save_path_early)
from cases_llama import case_llama_model_folder, case_llama_placement, case_llama_resume
from cases_outputs import case_speculation_metrics, case_trace_config
from cases_placement import (case_determinism, case_placement_bf16, case_placement_bf16_accum,
                             case_placement_fp16, case_placement_stage, case_stages)
from cases_ranks import case_issue_order, case_moe_ranks, case_ranks
from train_util import run_cases

CASES = {
    "placement_stage1": case_placement_stage(1),
    "placement_stage2": case_placement_stage(2),
    "placement_stage3": case_placement_stage(3),
    "placement_bf16": case_placement_bf16,
    "placement_fp16": case_placement_fp16,
    "placement_bf16_accum": case_placement_bf16_accum,
    "stages": case_stages,
    "ranks_2": case_ranks(2),
    "ranks_3": case_ranks(3),
    "issue_order_2": case_issue_order(2),
    "moe_ranks_2": case_moe_ranks(2),
    "memory": case_memory,
    "memory_minimum": case_memory_minimum,
    "bad_inputs": case_bad_inputs,
    "enospc_plan": case_enospc_plan,
    "enospc_io": case_enospc_io,
    "save_path_early": case_save_path_early,
    "faults_stop": case_faults_stop,
    "faults_transient": case_faults_transient,
    "faults_ranks_2": case_faults_ranks(2),
    "faults_ranks_3": case_faults_ranks(3),
    "determinism": case_determinism,
    "trace_config": case_trace_config,
    "speculation_metrics": case_speculation_metrics,
    "llama_placement": case_llama_placement,
    "llama_model_folder": case_llama_model_folder,
    "llama_resume": case_llama_resume,
    "hf_config": case_hf_config,
    "console": case_console,
}


def main():
    return run_cases(__doc__, CASES, "strata-train")


if __name__ == "__main__":
    sys.exit(main())

