"""Cases of check_train.py: faults of the NVMe tier in the middle of a stage-3 run
(STRATA_FAULT_INJECTION, offload/fault_injection.h), every class ending one of two ways:

  faults_stop       EIO on a read of the swap (the parameters in host memory, and on NVMe too;
                    in a step and in a checkpoint's save), ENOSPC on a write, a block corrupted
                    on its way back or on disk
                    (strata.checksum on): exit 1, an error naming the swap file, the offset and
                    the errno (or the checksum mismatch), no swap file left, and --resume from
                    the last published checkpoint ends with the bits of a run that never failed
  faults_transient  EAGAIN, EINTR and short transfers on reads and writes of the swap: exit 0
                    and the straight run's bits
  faults_ranks_2/3  (label mpi) the same at 2 and 3 ranks under mpirun, the fault on one rank
                    only (an EIO read on the last rank, an ENOSPC write on rank 0): every rank
                    stops within seconds (no rank left waiting in a collective), the error names
                    the rank, the file, the offset and the errno, and --resume from the last
                    published checkpoint at the same world size ends with the straight run's
                    bits and an empty swap folder (the killed ranks' folders are reclaimed)
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "checkpoint"))
from ckpt_util import check_folder, compare_resumed, error_text, train  # noqa: E402
from cases_ranks import require_mpi  # noqa: E402
from train_util import check, compare_bitwise, ds_config, tail  # noqa: E402

STEPS = 6
EVERY = ["--checkpoint-every", "2"]
ENV = "STRATA_FAULT_INJECTION"


def nvme_config(checksum=False, param="none"):
    """Stage 3, the optimizer states on NVMe (64 KiB pieces: ~170 reads of the swap a step), and
    the parameters in `param`."""
    def make(nvme):
        c = ds_config(3, "nvme", param, nvme=nvme)
        c["strata"]["checksum"] = checksum
        return c
    return make


def armed(stderr):
    return [line for line in stderr.splitlines() if "fault injection:" in line]


def check_injected(run, count):
    hits = armed(run.result.stderr)
    if not hits and f"{ENV} is set but ignored" in run.result.stderr:
        print(f"skipped: this strata was built with -DSTRATA_FAULT_INJECTION=OFF")
        sys.exit(77)
    check(len(hits) == count, f"{run.name}: {len(hits)} faults injected, expected {count}:\n"
                              f"{tail(run.result.stderr)}")


# (name, spec relative to the swap folder, checksum, where the parameters are, words the error
# must hold). The n-th read
# of the swap lands in step 3 (~170 reads of 64 KiB a step, and the checkpoint of step 2 reads the
# states too): after that checkpoint, before the next.
STOP_CLASSES = [
    ("eio-read", "read:600:EIO", False, "none", ["EIO", "read of", "at offset"]),
    ("enospc-write", "write:600:ENOSPC", False, "none", ["ENOSPC", "write of", "at offset", "free"]),
    ("corrupt-read", "read:600:corrupt", True, "none", ["checksum mismatch", "at offset"]),
    ("corrupt-write", "write:600:corrupt", True, "none", ["checksum mismatch", "at offset"]),
    # The parameters on NVMe too: their reads (the trainer's fetches) and the states' share the
    # count (~300 reads a step).
    ("eio-read-params-nvme", "read:1000:EIO", False, "nvme", ["EIO", "read of", "at offset"]),
    # The 1000th read lands in the save of step 4, which reads every state once (~170 reads)
    # between step 4's updates and step 5's: a state that cannot be read ends the run (it is
    # the run's only copy), not only that save (Note [A state that cannot be read ends the run]).
    ("eio-read-in-save", "read:1000:EIO", False, "none",
     ["reading the optimizer states for the checkpoint of step 4", "EIO", "read of", "at offset"]),
]


def stopped_mid_run(run, ckpt, name, spec):
    """(steps done, `latest`, its step) of a run the fault stopped: after the checkpoint of step
    2 was published and before the last step; fails otherwise."""
    done = len(run.metric_lines())
    check(2 <= done < STEPS, f"{name}: the fault came after {done} steps, expected mid-run "
                             f"(after the checkpoint of step 2): move N in {spec}")
    latest = check_folder(ckpt, name)
    check(latest is not None, f"{name}: no checkpoint was published before the fault")
    return done, latest, int(latest[len("step-"):])


def case_faults_stop(strata, root):
    straights = {}
    for name, spec, checksum, param, words in STOP_CLASSES:
        cfg = nvme_config(checksum, param)
        # The tiers give the same bits (train_placement_*): one straight run per checksum flag.
        if checksum not in straights:
            straights[checksum] = train(strata, root, f"straight-{checksum}", nvme_config(checksum), STEPS)
        straight = straights[checksum]
        ckpt = os.path.join(root, f"ckpt-{name}")
        run = train(strata, root, name, cfg, STEPS, ["--checkpoint-dir", ckpt] + EVERY,
                    env={ENV: f"{spec}:{os.path.join(root, name, 'nvme')}"}, ok=False)
        check_injected(run, 1)
        err = error_text(run.result.stderr)
        check(run.result.returncode == 1 and err,
              f"{name}: exit {run.result.returncode}, expected 1 with an error\n{tail(run.result.stderr)}")
        first = err.splitlines()[0]
        swap = os.path.join(root, name, "nvme")
        missing = [w for w in [swap] + words if w not in err]
        check(not missing, f"{name}: the error does not name {missing}:\n{tail(err, 8)}")
        check(not os.path.exists(run.save), f"{name}: a --save file after the fault")
        check(not run.swap_leftovers(), f"{name}: left in the swap folder: {run.swap_leftovers()}")
        done, latest, at = stopped_mid_run(run, ckpt, name, spec)
        resumed = train(strata, root, f"{name}-resumed", cfg, STEPS,
                        ["--resume", ckpt, "--checkpoint-dir", ckpt] + EVERY)
        what = compare_resumed(straight, resumed, at)
        print(f"  {name}: stopped after step {done}: {first[:160]}...")
        print(f"    resumed from {latest}: {what}")


def case_faults_transient(strata, root):
    cfg = nvme_config()
    straight = train(strata, root, "straight", cfg, STEPS)
    specs = ["read:300:EAGAIN", "read:310:EINTR", "read:320:short", "write:300:short",
             "write:310:EAGAIN", "write:320:EINTR"]
    nvme = os.path.join(root, "transient", "nvme")
    run = train(strata, root, "transient", cfg, STEPS,
                env={ENV: ";".join(f"{s}:{nvme}" for s in specs)})
    check_injected(run, len(specs))
    print(f"  {len(specs)} transient faults mid-run ({', '.join(specs)}): "
          f"{compare_bitwise(straight, run)}")


# faults_ranks_W: (name, the rank that faults, its spec, words its error must hold). Each rank
# reads and writes only its own shard of the states, so a rank's n-th piece comes later in the
# run than at one rank; N puts the fault after the checkpoint of step 2 at both world sizes.
RANK_FAULTS = [
    ("eio-read-last-rank", -1, "read:{n}:EIO", ["EIO", "read of", "at offset"]),
    ("enospc-write-rank-0", 0, "write:{n}:ENOSPC", ["ENOSPC", "write of", "at offset"]),
]
RANK_FAULT_NTH = {2: 300, 3: 300}
# A rank that fails ends the job (runtime/comm: end_job_after_error) within seconds; a rank
# left waiting for it in a collective would wait until mpirun's --timeout (110 s).
RANK_FAULT_TIMEOUT_S = 60


def case_faults_ranks(world):
    def case(strata, root):
        require_mpi(strata)
        cfg = nvme_config()
        straight = train(strata, root, "straight", cfg, STEPS, ranks=world)
        for name, rank, spec, words in RANK_FAULTS:
            rank = rank % world
            spec = spec.format(n=RANK_FAULT_NTH[world])
            ckpt = os.path.join(root, f"ckpt-{name}")
            swap = os.path.join(root, name, "nvme")
            run = train(strata, root, name, cfg, STEPS, ["--checkpoint-dir", ckpt] + EVERY,
                        ranks=world, rank_env={rank: {ENV: f"{spec}:{swap}"}}, ok=False)
            check_injected(run, 1)
            err = error_text(run.result.stderr)
            check(run.result.returncode != 0 and err,
                  f"{name}: exit {run.result.returncode}, expected a failure with an error\n"
                  f"{tail(run.result.stderr)}")
            first = err.splitlines()[0]
            missing = [w for w in [f"rank {rank} of {world}:", swap] + words if w not in first]
            check(not missing, f"{name}: the error does not name {missing}:\n{first}")
            ending = f"rank {rank} of {world} stopped with an error; ending the other ranks"
            check(ending in run.result.stderr,
                  f"{name}: no '{ending}' line:\n{tail(run.result.stderr)}")
            check(not os.path.exists(run.save), f"{name}: a --save file after the fault")
            done, latest, at = stopped_mid_run(run, ckpt, name, spec)
            check(run.seconds < RANK_FAULT_TIMEOUT_S,
                  f"{name}: the ranks took {run.seconds:.0f} s to stop: one waited for the other")
            # In the failed run's swap folder: the resumed run reclaims what the killed ranks
            # left there, and leaves it empty.
            resumed = train(strata, root, f"{name}-resumed", lambda _: cfg(swap), STEPS,
                            ["--resume", ckpt, "--checkpoint-dir", ckpt] + EVERY, ranks=world)
            check(not run.swap_leftovers(),
                  f"{name}: left in the swap folder after the resume: {run.swap_leftovers()}")
            what = compare_resumed(straight, resumed, at)
            print(f"  {name} (rank {rank} of {world}): all ranks stopped in "
                  f"{run.seconds:.1f} s after step {done}: {first[:140]}...")
            print(f"    resumed from {latest}: {what}")
    return case
