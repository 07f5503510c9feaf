"""Cases of check_checkpoint.py: a run killed at every crash point of its saves leaves a folder
that resumes to the straight run's bits (crash); SIGTERM / SIGINT stop a run at a step boundary
with a checkpoint of that step (signal); old checkpoints are removed (keep_last)."""
import os
import shutil
import signal
import subprocess
import time

from ckpt_util import (SIGNAL_EXIT, check_folder, compare_resumed, latest, listing,
                       run_until_signalled, stage3, train)
from train_util import TINY, Failure, Run, check, tail

# crash: the run resumes from a checkpoint at step 2 and saves at 4 and 6 (--checkpoint-every 2,
# --checkpoint-keep 2, so the save at 6 also removes step 2). Its crash points, in order:
# meta.json written and renamed, every other piece of the shard file, its fdatasync,
# manifest.json written and renamed, the folder renamed into place, `latest` written
# and renamed, and at 6 the rename of step 2 to .deleting.
CRASH_TOTAL = 6
CRASH_FROM = 2
CRASH_EVERY = ["--checkpoint-every", "2"]
# The shard file is written in pieces of aio.block_size elements: 1 MiB pieces (262144 x 4
# bytes) make one piece of each module's state in the tiny preset (18 pieces, every other one a
# crash point: ~17 points per save instead of ~34 with 256 KiB pieces).
CRASH_BLOCK = 262144
# Every point is killed and checked (latest, folder names), and the run restarted with --resume
# to step 6 and its bits compared (~0.5 s a point). On a machine so slow or busy that this takes
# over CRASH_BUDGET_S, the later points are sampled: the restart runs only at the points that
# are not a piece of a shard file, and at the first piece of each file.
CRASH_BUDGET_S = 20
KINDS = ["meta.json", "a piece of", "fdatasync", "manifest.json", "partial ->", "latest", ".deleting"]


def killed_after(stderr, n):
    tag = f"strata: STRATA_CRASH_AT={n}: killed after "
    for line in stderr.splitlines():
        if line.startswith(tag):
            return line[len(tag):]
    return None


def crash_config(nvme):
    c = stage3("cpu", "cpu")(nvme)
    c["aio"]["block_size"] = CRASH_BLOCK
    return c


def case_crash(strata, root):
    cfg = crash_config
    straight = train(strata, root, "straight", cfg, CRASH_TOTAL)
    base = os.path.join(root, "ckpt-base")
    train(strata, root, "base", cfg, CRASH_FROM, ["--checkpoint-dir", base])
    check(latest(base) == f"step-{CRASH_FROM:08d}", f"base: latest {latest(base)!r}")
    work = os.path.join(root, "ckpt-work")
    t0 = time.monotonic()
    seen, full, pieces, last_file = [], 0, 0, None
    n = 0
    while True:
        n += 1
        check(n <= 400, "400 crash points and the run still does not complete: STRATA_CRASH_AT ignored?")
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(base, work)
        flags = ["--resume", work, "--checkpoint-dir", work] + CRASH_EVERY
        run = train(strata, root, f"crash-at-{n}", cfg, CRASH_TOTAL, flags,
                    env={"STRATA_CRASH_AT": n}, ok=False)
        rc = run.result.returncode
        if rc == 0:
            run.expect_ok()
            check(n > 1, "STRATA_CRASH_AT=1 did not kill the run: no crash point was hit")
            compare_resumed(straight, run, CRASH_FROM)
            break
        what = killed_after(run.result.stderr, n)
        check(rc == -signal.SIGKILL and what is not None,
              f"STRATA_CRASH_AT={n}: exit {rc}, expected death by SIGKILL after a 'killed after' line\n"
              f"{tail(run.result.stderr)}")
        name = check_folder(work, f"STRATA_CRASH_AT={n} (killed after {what})")
        steps = [f"step-{s:08d}" for s in range(CRASH_FROM, CRASH_TOTAL + 1, 2)]
        check(name in steps, f"STRATA_CRASH_AT={n}: latest {name!r}, expected one of {steps}")
        seen.append(what)
        # The costly check: resume from the folder (as the job would be restarted: same flags).
        sample = True
        if what.startswith("a piece of"):
            pieces += 1
            piece_file = what[len("a piece of "):]
            sample = piece_file != last_file or time.monotonic() - t0 < CRASH_BUDGET_S
            last_file = piece_file
        if sample:
            full += 1
            check_resume_after_crash(strata, root, cfg, straight, work, name, n, what)
        shutil.rmtree(run.dir, ignore_errors=True)
    points = n - 1
    missing = [k for k in KINDS if not any(k in w for w in seen)]
    check(points >= 8 and not missing, f"{points} crash points; kinds never hit: {missing}")
    print(f"  {points} crash points (of them {pieces} shard-file pieces), each killed by SIGKILL "
          f"with `latest` complete; restarted with --resume to step {CRASH_TOTAL} == the straight "
          f"run at {full} of them{'' if full == points else ' (sampled: the machine is slow)'}; "
          f"STRATA_CRASH_AT={n} completes ({time.monotonic() - t0:.1f} s)")
    print("  points: " + "; ".join(f"{i + 1}: {w.replace(work + '/', '')}" for i, w in
                                   enumerate(seen) if i < 3 or not w.startswith("a piece of")))


def check_resume_after_crash(strata, root, cfg, straight, work, name, n, what):
    at = int(name[len("step-"):])
    where = f"STRATA_CRASH_AT={n} (killed after {what})"
    if at == CRASH_TOTAL:
        # Killed after `latest` moved to the last step: nothing left to train; the checkpoint
        # must hold the straight run's final weights (strata convert writes them as --save does).
        out = os.path.join(root, f"converted-{n}.safetensors")
        r = subprocess.run([strata, "convert", work, out], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, f"{where}: strata convert {work}: exit {r.returncode}\n{tail(r.stderr)}")
        with open(out, "rb") as a, open(straight.save, "rb") as b:
            check(a.read() == b.read(), f"{where}: the step-{CRASH_TOTAL} checkpoint differs from the "
                                        "straight run's weights")
        os.remove(out)
        return
    resumed = train(strata, root, f"resume-after-{n}", cfg, CRASH_TOTAL,
                    ["--resume", work, "--checkpoint-dir", work] + CRASH_EVERY, ok=False)
    check(resumed.result.returncode == 0,
          f"{where}: the resume from {work} (latest {name}) exited {resumed.result.returncode}\n"
          f"  command: {' '.join(resumed.cmd)}\n{tail(resumed.result.stderr)}")
    try:
        compare_resumed(straight, resumed, at)
    except Failure as e:
        raise Failure(f"{where}: resumed from {name}: {e}")
    # The restarted run cleaned up what the crash left, and published its own checkpoints.
    names = listing(work)
    want = ["latest", f"step-{CRASH_TOTAL - 2:08d}", f"step-{CRASH_TOTAL:08d}"]
    check(names == want, f"{where}: after the resumed run the folder holds {names}, expected {want}")
    shutil.rmtree(resumed.dir, ignore_errors=True)


def case_crash_first_save(strata, root):
    """A run killed between publishing its first checkpoint (the rename into step-N) and
    writing `latest` (a window found while writing tests/soak): the folder holds step-N and no
    `latest`, so a run without --resume refuses it (it holds checkpoints) and --resume must take
    it. Restarted with the same flags plus --resume, the run continues from step-N to the
    straight run's bits."""
    cfg = crash_config
    straight = train(strata, root, "straight", cfg, CRASH_TOTAL)
    work = os.path.join(root, "ckpt")
    first = f"step-{CRASH_FROM:08d}"
    flags = ["--checkpoint-dir", work] + CRASH_EVERY
    for n in range(1, 200):
        shutil.rmtree(work, ignore_errors=True)
        run = train(strata, root, f"crash-at-{n}", cfg, CRASH_TOTAL, flags,
                    env={"STRATA_CRASH_AT": n}, ok=False)
        what = killed_after(run.result.stderr, n)
        check(run.result.returncode == -signal.SIGKILL and what is not None,
              f"STRATA_CRASH_AT={n}: exit {run.result.returncode}, expected death by SIGKILL before "
              f"the first save was published\n{tail(run.result.stderr)}")
        shutil.rmtree(run.dir, ignore_errors=True)
        if what.endswith(f"-> {os.path.join(work, first)}"):
            break
    else:
        raise Failure(f"no crash point renames the partial folder to {first}")
    check(listing(work) == [first], f"killed after {what}: the folder holds {listing(work)}, "
                                    f"expected {[first]} (no `latest` yet)")
    fresh = train(strata, root, "fresh", cfg, CRASH_TOTAL, flags, ok=False)
    check(fresh.result.returncode == 1 and "already holds checkpoints" in fresh.result.stderr,
          f"a run without --resume: exit {fresh.result.returncode}, expected 1 (the folder holds "
          f"checkpoints)\n{tail(fresh.result.stderr)}")
    resumed = train(strata, root, "resumed", cfg, CRASH_TOTAL, ["--resume", work] + flags)
    check(f"resumed from {os.path.join(work, first)} at step {CRASH_FROM}" in resumed.result.stderr,
          f"{resumed.name}: no 'resumed from .../{first}' line\n{tail(resumed.result.stderr)}")
    print(f"  STRATA_CRASH_AT={n} (killed after {what.replace(work + '/', '')}): {listing(work)} "
          f"after the resume; {compare_resumed(straight, resumed, CRASH_FROM)}")


def case_signal(strata, root):
    cfg = stage3("cpu", "cpu")
    for sig in (signal.SIGTERM, signal.SIGINT):
        tag = signal.Signals(sig).name
        ckpt = os.path.join(root, f"ckpt-{tag}")
        run = Run(root, tag)
        run.write_config(cfg(run.nvme))
        flags = TINY + ["--steps", "200", "--checkpoint-dir", ckpt]
        sent_after = run_until_signalled(strata, run, flags, sig)
        r = run.result
        check(r.returncode == SIGNAL_EXIT[sig], f"{tag}: exit {r.returncode}, expected {SIGNAL_EXIT[sig]}\n"
                                                f"{tail(r.stderr)}")
        steps = [m["step"] for m in run.metric_lines()]
        k = steps[-1] if steps else 0
        check(steps == list(range(1, k + 1)) and sent_after <= k < 200,
              f"{tag}: metrics steps {steps[:3]}..{steps[-3:]}, signal sent after {sent_after} lines")
        check(check_folder(ckpt, tag) == f"step-{k:08d}",
              f"{tag}: latest {latest(ckpt)!r}, expected step-{k:08d} (the last metrics step)")
        check(f"stopped after step {k} by a signal" in r.stderr, f"{tag}: no 'stopped after step {k}' line\n"
                                                               f"{tail(r.stderr)}")
        check(not [x for x in listing(ckpt) if x.startswith(".")], f"{tag}: leftovers {listing(ckpt)}")
        print(f"  {tag} after {sent_after} metrics lines: exit {r.returncode} after step {k}, "
              f"latest = step-{k:08d}")
        if sig != signal.SIGTERM:
            continue
        total = k + 3
        straight = train(strata, root, f"straight-{total}", cfg, total)
        resumed = train(strata, root, f"{tag}-resumed", cfg, total, ["--resume", ckpt])
        print(f"  resumed at {k} to {total} == {total} straight: {compare_resumed(straight, resumed, k)}")
    # Two signals: the second stops the run at once (during the step or the save); whatever it
    # interrupts, the folder keeps its invariants.
    ckpt = os.path.join(root, "ckpt-twice")
    run = Run(root, "SIGINT-twice")
    run.write_config(cfg(run.nvme))
    run_until_signalled(strata, run, TINY + ["--steps", "200", "--checkpoint-dir", ckpt,
                                             "--checkpoint-every", "1"],
                        signal.SIGINT, second_after_s=0.02)
    rc = run.result.returncode
    check(rc in (-signal.SIGINT, SIGNAL_EXIT[signal.SIGINT]),
          f"SIGINT twice: exit {rc}, expected death by SIGINT (or 130 when the run had stopped)\n"
          f"{tail(run.result.stderr)}")
    name = check_folder(ckpt, "SIGINT twice")
    print(f"  SIGINT twice: {'killed by SIGINT' if rc < 0 else 'exit 130'}, latest {name}, "
          f"folder {listing(ckpt)}")


def case_keep_last(strata, root):
    cfg = stage3("cpu", "cpu")

    def checkpoints(tag, flags, steps=5, config=cfg):
        ckpt = os.path.join(root, f"ckpt-{tag}")
        train(strata, root, tag, config, steps, ["--checkpoint-dir", ckpt] + flags)
        names = listing(ckpt)
        check(latest(ckpt) == f"step-{steps:08d}", f"{tag}: latest {latest(ckpt)!r}")
        check_folder(ckpt, tag)
        return names

    def expect(tag, flags, kept, **kw):
        names = checkpoints(tag, flags, **kw)
        want = ["latest"] + [f"step-{s:08d}" for s in kept]
        check(names == want, f"{tag} ({' '.join(flags)}): the folder holds {names}, expected {want}")
        print(f"  {' '.join(flags) or '(defaults)'}{' ' + tag if kw else ''}: {names}")

    expect("keep2", ["--checkpoint-every", "1", "--checkpoint-keep", "2"], [4, 5])
    expect("keep0", ["--checkpoint-every", "1", "--checkpoint-keep", "0"], [1, 2, 3, 4, 5])
    expect("keep1", ["--checkpoint-every", "2", "--checkpoint-keep", "1"], [5])
    expect("default", ["--checkpoint-every", "1"], [4, 5])
    keep3 = lambda nvme: dict(cfg(nvme), strata={"device": "host", "checkpoint_keep": 3})  # noqa: E731
    expect("strata.checkpoint_keep=3", ["--checkpoint-every", "1"], [3, 4, 5], config=keep3)
    # A second run into the same folder without --resume (a job started again from scratch) is
    # refused before it trains: `latest` and keep_last would mix the two runs. Nothing changes.
    ckpt = os.path.join(root, "ckpt-keep2")
    before = listing(ckpt)
    again = train(strata, root, "keep2-again", cfg, 5, ["--checkpoint-dir", ckpt, "--checkpoint-every", "1"],
                  ok=False)
    err = again.result.stderr
    check(again.result.returncode == 1 and "already holds checkpoints" in err and "--resume" in err,
          f"{again.name}: exit {again.result.returncode}, expected 1 with 'already holds checkpoints' and "
          f"'--resume'\n{tail(err)}")
    check(listing(ckpt) == before, f"{again.name}: the folder changed: {before} -> {listing(ckpt)}")
    # Resumed from an earlier checkpoint (step 4, `latest` at 5): the run's own step 5 replaces
    # the old one (swapped in one rename) and equals the first run's bits.
    resumed = train(strata, root, "keep2-from-4", cfg, 5,
                    ["--checkpoint-dir", ckpt, "--resume", os.path.join(ckpt, "step-00000004")])
    check(listing(ckpt) == ["latest", "step-00000004", "step-00000005"],
          f"{resumed.name}: the folder holds {listing(ckpt)}")
    first = Run(root, "keep2")
    print(f"  the same run again into the same folder: refused; resumed from step 4 into it: "
          f"{listing(ckpt)}, {compare_resumed(first, resumed, 4)}")
