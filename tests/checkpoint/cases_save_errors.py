"""Cases of check_checkpoint.py: a checkpoint that cannot be written.

  save_error   EIO on the shard file of the save at step 4 (STRATA_FAULT_INJECTION on its
               .partial folder): training goes on to the straight run's bits, the error is
               logged once with what to do, no step-4 folder or .partial is left, and the next
               save (step 6) is published; the same fault on the last save leaves `latest` on
               step 4, and the run, its weights saved, exits 3 naming step 4 as the latest good
               checkpoint. With strata.checkpoint_on_error "stop": exit 1 naming the folder,
               `latest` on step 2, and --resume from it == the straight run.
  save_enospc  --checkpoint-dir on a tmpfs with room for one checkpoint (needs root, else 77):
               a warning at start that the kept checkpoints do not fit; the second save meets a
               real ENOSPC, the hint naming --checkpoint-dir; the run goes on, `latest` stays on
               the first, no partial folder is left, and it exits 3. On a tmpfs too small for one
               checkpoint the run is refused at start, naming the folder and the sizes.
"""
import os
import sys

from ckpt_util import check_folder, compare_resumed, error_text, latest, listing, stage3, train
from train_util import SKIP, check, compare_bitwise, tail, tmpfs

STEPS = 6
EVERY = ["--checkpoint-every", "2"]
ENV = "STRATA_FAULT_INJECTION"


def failed_lines(run):
    return [line for line in run.result.stderr.splitlines() if "checkpoint of step" in line and "failed" in line]


def expect_one_failure(run, step, words):
    lines = failed_lines(run)
    check(len(lines) == 1, f"{run.name}: {len(lines)} 'checkpoint ... failed' lines, expected 1:\n"
                           f"{tail(run.result.stderr)}")
    line = lines[0]
    missing = [w for w in [f"checkpoint of step {step} failed", "What to do", "latest"] + words
               if w not in line]
    check(not missing, f"{run.name}: the report does not name {missing}:\n{line}")
    return line


def expect_lost_last(run, failed, good):
    """The run finished (its --save written) but its last save failed: exit 3, saying so."""
    err = run.result.stderr
    want = [f"its last checkpoint (step {failed}) could not be written",
            f"the latest good checkpoint is step {good}" if good else "there is no good checkpoint"]
    missing = [w for w in want if w not in err]
    check(run.result.returncode == 3 and not missing,
          f"{run.name}: exit {run.result.returncode} (wanted 3), missing {missing}:\n{tail(err)}")
    check(os.path.exists(run.save), f"{run.name}: the weights were not saved")


def check_no_partial(ckpt, what):
    left = [n for n in listing(ckpt) if n.startswith(".")]
    check(not left, f"{what}: left in {ckpt}: {left}")
    return check_folder(ckpt, what)


def injected(run):
    hits = [line for line in run.result.stderr.splitlines() if "fault injection:" in line]
    if not hits and f"{ENV} is set but ignored" in run.result.stderr:
        print("skipped: this strata was built with -DSTRATA_FAULT_INJECTION=OFF")
        sys.exit(SKIP)
    check(len(hits) == 1, f"{run.name}: {len(hits)} faults injected, expected 1:\n{tail(run.result.stderr)}")


def case_save_error(strata, root):
    cfg = stage3("nvme", "cpu")
    straight = train(strata, root, "straight", cfg, STEPS)

    # A failed save in the middle: the run goes on, the next save is published.
    ckpt = os.path.join(root, "ckpt-mid")
    run = train(strata, root, "eio-at-4", cfg, STEPS, ["--checkpoint-dir", ckpt] + EVERY,
                env={ENV: "write:1:EIO:.step-00000004.partial"})
    injected(run)
    line = expect_one_failure(run, 4, ["EIO", "training goes on", "tries again"])
    compare_bitwise(straight, run)
    check(check_no_partial(ckpt, run.name) == "step-00000006", f"{run.name}: latest {latest(ckpt)!r}")
    check(listing(ckpt) == ["latest", "step-00000002", "step-00000006"],
          f"{run.name}: the folder holds {listing(ckpt)}")
    print(f"  EIO on the step-4 save: the run went on to the straight bits; step 6 published; "
          f"reported once: {line[:200]}...")

    # The last save fails: `latest` stays on the previous checkpoint.
    ckpt = os.path.join(root, "ckpt-last")
    run = train(strata, root, "eio-at-6", cfg, STEPS, ["--checkpoint-dir", ckpt] + EVERY,
                env={ENV: "write:1:EIO:.step-00000006.partial"}, ok=False)
    injected(run)
    expect_one_failure(run, 6, ["EIO"])
    expect_lost_last(run, 6, 4)
    compare_bitwise(straight, run)
    check(check_no_partial(ckpt, run.name) == "step-00000004", f"{run.name}: latest {latest(ckpt)!r}")
    print("  EIO on the last save: exit 3 naming step 4 as the latest good checkpoint, which `latest` "
          "stays on; the weights saved; no partial folder")

    # strata.checkpoint_on_error "stop": the run ends; resume from `latest`.
    def stop_cfg(nvme):
        c = cfg(nvme)
        c["strata"]["checkpoint_on_error"] = "stop"
        return c
    ckpt = os.path.join(root, "ckpt-stop")
    run = train(strata, root, "eio-stop", stop_cfg, STEPS, ["--checkpoint-dir", ckpt] + EVERY,
                env={ENV: "write:1:EIO:.step-00000004.partial"}, ok=False)
    injected(run)
    err = error_text(run.result.stderr)
    check(run.result.returncode == 1 and ckpt in err and "checkpoint_on_error" in err,
          f"{run.name}: exit {run.result.returncode}, expected 1 naming {ckpt} and "
          f"strata.checkpoint_on_error\n{tail(run.result.stderr)}")
    expect_one_failure(run, 4, ["EIO", "the run stops"])
    check(check_no_partial(ckpt, run.name) == "step-00000002", f"{run.name}: latest {latest(ckpt)!r}")
    resumed = train(strata, root, "stop-resumed", stop_cfg, STEPS, ["--resume", ckpt, "--checkpoint-dir", ckpt] + EVERY)
    print(f"  checkpoint_on_error stop: exit 1 at step 4's save, latest step 2; resumed: "
          f"{compare_resumed(straight, resumed, 2)}")


def case_save_enospc(strata, root):
    cfg = stage3("cpu", "cpu")
    straight = train(strata, root, "straight", cfg, 4)
    mnt = os.path.join(root, "small-fs")
    # One checkpoint of the tiny preset is ~10.5 MiB (fp32 master, exp_avg, exp_avg_sq).
    with tmpfs(mnt, "16m") as mounted:
        if not mounted:
            print("skipped: cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN)")
            sys.exit(SKIP)
        ckpt = os.path.join(mnt, "ckpt")
        run = train(strata, root, "full", cfg, 4, ["--checkpoint-dir", ckpt] + EVERY, ok=False)
        line = expect_one_failure(run, 4, ["ENOSPC", "--checkpoint-dir"])
        check("later checkpoints may fail for want of space" in run.result.stderr,
              f"{run.name}: no warning at start that the kept checkpoints do not fit:\n{tail(run.result.stderr)}")
        expect_lost_last(run, 4, 2)
        compare_bitwise(straight, run)
        check(check_no_partial(ckpt, run.name) == "step-00000002", f"{run.name}: latest {latest(ckpt)!r}")
        check(listing(ckpt) == ["latest", "step-00000002"], f"{run.name}: the folder holds {listing(ckpt)}")
        print(f"  a 16 MiB tmpfs: warned at start; step 2 published, step 4 met ENOSPC, the run went on "
              f"and exited 3: {line[:200]}...")
    mnt = os.path.join(root, "tiny-fs")
    with tmpfs(mnt, "4m") as mounted:
        check(mounted, "a second tmpfs could not be mounted")
        ckpt = os.path.join(mnt, "ckpt")
        run = train(strata, root, "no-room", cfg, 4, ["--checkpoint-dir", ckpt] + EVERY, ok=False)
        err = error_text(run.result.stderr)
        check(run.result.returncode == 1 and ckpt in err and "one checkpoint of this run needs" in err
              and "step 1" not in run.result.stderr.lower(),
              f"{run.name}: exit {run.result.returncode}, wanted a refusal at start naming {ckpt}:\n"
              f"{tail(run.result.stderr)}")
        print("  a 4 MiB tmpfs: refused at start, naming the folder and what one checkpoint needs")
