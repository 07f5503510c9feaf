#!/usr/bin/env python3
"""Kill-and-resume soak of `strata train` checkpoints (issue 19): a stage-3 run with its
optimizer states on NVMe, checkpointing every K steps, is killed with SIGKILL at seeded random
moments and restarted from its checkpoint folder, again and again; every run that completes
must end with the bits of a run that was never killed, and leave nothing behind.

Usage: soak.py STRATA WORK [--steps N] [--every K] [--kills M] [--seed S] [--min-seconds T]
               [--preset P] [--seq-len L] [--keep]
  STRATA  the strata binary
  WORK    a folder for the runs (emptied first; removed after a pass unless --keep). It must
          take O_DIRECT: the swap files of the NVMe tier live there.

What it does:
  1. A straight run: N steps of the tiny preset (--seq-len 32, --text GPL-3, --seed 7), ZeRO
     stage 3, optimizer states on NVMe, parameters in host memory, with --save.
  2. Rounds. A round trains the same N steps into a fresh checkpoint folder
     (--checkpoint-dir D --checkpoint-every K) in segments: each segment starts with
     --resume D when D holds a checkpoint (`latest`, or a step-N folder alone: a kill between
     the first save's rename and `latest`), else from scratch, and is either SIGKILLed at a
     seeded random moment or let finish. The moment: with probability 1/5 a time within the run's
     startup (so also while a resume loads its checkpoint); else a step drawn from the steps
     left plus K more (a draw past the end lets the segment finish, so every round ends), and
     a time within that step (or just after it: the last step's save, the --save file). The
     save of a checkpoint overlaps the next step, so some kills land in a save, some in the
     removal of an old checkpoint. Each segment puts the parameters in host memory or on NVMe
     (seeded), so kills also catch parameter swap traffic, and resumes cross tiers
     (documented in docs/architecture.md: tiers may change on resume).
     Rounds go on until M kills are made and T seconds have passed; then the segment that is
     running is let finish.
  3. Checks.
     After every kill: `latest` names a complete checkpoint and never goes back; no step-*
     folder lacks its manifest; the swap path holds at most 2 run folders (the killed run's,
     and its predecessor's when the kill came between making its own folder and reclaiming
     the stale one: strata reclaims killed runs' folders at start; hidden ones, below, are
     not counted); the metrics lines the
     segment wrote equal the straight run's for those steps (loss, grad_norm, lr, loss_scale,
     skipped).
     At the end of a round: the --save file equals the straight run's byte for byte, and so do
     the metrics of every step the last segment trained; D holds `latest` and the last two
     checkpoints, nothing hidden (.step-*.partial / .deleting, .latest.tmp); the swap path is
     empty. strata removes a hidden swap folder (.strata-swap-*: a kill while a run made its
     folder, or while it removed a stale one) only once it is a minute old, so before a
     segment that is let finish the soak waits until those are (rare: counted in the JSON as
     grace_waits). A round whose last kill came after its step-N checkpoint was published ends there:
     `strata convert D` must give the straight run's --save bytes.

Output: a line per kill (when, the step the run had reached, what it had resumed from, where
the kill landed) and per round, then one JSON line: kills, rounds, steps per round, steps
trained and redone (metrics lines written beyond N per round), segments started with --resume,
wall seconds, where the kills landed.

Exit 0: passed; 1: failed (what was expected and what came); 77: cannot run here (O_DIRECT
refused in WORK, or no numpy).
"""
import argparse
import json
import mmap
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
sys.path.insert(0, os.path.join(HERE, "..", "checkpoint"))
from ckpt_util import (check_folder, compare_resumed, complete_lines, latest, stage3,  # noqa: E402
                       train)
from train_util import GPL, SKIP, Failure, Run, check, tail  # noqa: E402

# The share of kills aimed at the startup (before the first step: setup, reclaim, resume).
STARTUP_SHARE = 0.2
# A segment that runs this long past its expected time is a hang (the machine may be busy:
# the bound is generous).
HANG_FACTOR, HANG_SLACK_S = 10.0, 120.0
# The metrics fields a resumed step must repeat exactly.
METRIC_KEYS = ("loss", "grad_norm", "lr", "loss_scale", "skipped")
# Run folders in the swap path that may be there after a kill (see the docstring).
MAX_SWAP_FOLDERS_AFTER_KILL = 2
# strata removes a hidden run folder (.strata-swap-*: one being made, or a stale one a killed run
# was removing) only once it is a minute old: younger, it may still be in the making
# (offload/swap_dir.h). Before a segment that must leave the swap path empty, the soak waits
# until those a kill left are that old (+1 s: strata compares whole seconds).
HIDDEN_GRACE_S = 61


def model_flags(a):
    return ["--preset", a.preset, "--seq-len", str(a.seq_len), "--text", GPL, "--seed", "7"]


def config(param):
    """Stage 3, optimizer states on NVMe, parameters in `param` (cpu or nvme)."""
    return stage3("nvme", param)


def odirect_works(folder):
    """Whether a 4 KiB O_DIRECT write succeeds in `folder` (the swap files are opened so)."""
    path = os.path.join(folder, ".odirect-probe")
    buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT wants
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
        try:
            os.write(fd, buf)
        finally:
            os.close(fd)
        return True
    except OSError:
        return False
    finally:
        if os.path.exists(path):
            os.remove(path)


def complete_metric_lines(path):
    """The --metrics lines a run wrote, counting only those already ended by a newline (a
    killed run may leave half a line)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in data.split(b"\n")[:-1] if line.strip()]


def check_metrics(straight, name, lines, first):
    """A segment resumed at step `first` must have written steps first+1, first+2, ... with
    the straight run's values."""
    ref = {m["step"]: m for m in straight.metric_lines()}
    steps = [m["step"] for m in lines]
    check(steps == list(range(first + 1, first + 1 + len(lines))),
          f"{name}: metrics steps {steps[:3]}..{steps[-3:]}, expected from {first + 1} on")
    for m in lines:
        check(m["step"] in ref, f"{name}: step {m['step']}, the straight run has steps 1..{len(ref)}")
        for key in METRIC_KEYS:
            check(m[key] == ref[m["step"]][key],
                  f"{name}: step {m['step']} {key} {m[key]!r}, the straight run had "
                  f"{ref[m['step']][key]!r}")


def swap_folders(swap):
    """The run folders in the swap path (strata-swap-*; not the hidden ones, see
    HIDDEN_GRACE_S)."""
    return sorted(n for n in os.listdir(swap) if n.startswith("strata-swap-"))


def hidden_swap_folders(swap):
    """The hidden run folders strata leaves for a minute (offload/swap_dir.h): one a kill caught
    being made, or a reclaim's `.removing` folder whose lock file is already gone. A killed
    reclaim's `.removing` folder that still has its lock is not one of them: strata removes it
    at once, so the soak does not wait for it (and fails if it is left)."""
    def graced(name):
        if not name.startswith(".strata-swap-"):
            return False
        return not (name.endswith(".removing") and
                    os.path.exists(os.path.join(swap, name, "lock")))
    return sorted(n for n in os.listdir(swap) if graced(n))


def listing(ckpt):
    """The names in a checkpoint folder; [] before the round's first segment has made it."""
    return sorted(os.listdir(ckpt)) if os.path.isdir(ckpt) else []


def latest_step(ckpt):
    name = latest(ckpt)
    return None if name is None else int(name[len("step-"):])


def complete_steps(ckpt):
    """The steps of the complete checkpoints (step-N with a manifest.json) in `ckpt`."""
    if not os.path.isdir(ckpt):
        return []
    return sorted(int(n[len("step-"):]) for n in os.listdir(ckpt)
                  if n.startswith("step-") and os.path.isfile(os.path.join(ckpt, n, "manifest.json")))


def resume_step(ckpt):
    """The step `--resume ckpt` continues from: the one `latest` names; without `latest` (a
    kill between publishing the first checkpoint and writing `latest`) the newest complete
    checkpoint; 0 when there is none (the segment starts from scratch: a run without --resume
    refuses a folder that holds checkpoints)."""
    at = latest_step(ckpt)
    if at is not None:
        return at
    steps = complete_steps(ckpt)
    return steps[-1] if steps else 0


def checkpoint_steps(steps, every):
    """The steps a run of `steps` steps with --checkpoint-every `every` saves."""
    return sorted(set(range(every, steps + 1, every)) | {steps})


class Segment:
    """One `strata train` process of a round: its folder (config, metrics, stderr, save), the
    step it started from, and how it ended."""

    def __init__(self, root, index, first, param):
        self.run = Run(root, f"segment-{index}")
        self.index, self.first, self.param = index, first, param
        self.killed = False
        self.seconds = 0.0

    def lines(self):
        return complete_metric_lines(self.run.metrics)


class Soak:
    def __init__(self, a):
        self.a = a
        self.strata = os.path.abspath(a.strata)
        self.work = os.path.abspath(a.work)
        self.swap = os.path.join(self.work, "swap")  # one swap path for every segment
        self.rng = random.Random(a.seed)
        self.t0 = time.monotonic()
        self.kills = 0
        self.rounds = 0
        self.segments = 0
        self.resumes = 0
        self.steps_trained = 0
        self.landed = {}
        self.step_ms = []
        self.grace_waits = 0

    def elapsed(self):
        return time.monotonic() - self.t0

    def done_killing(self):
        return self.kills >= self.a.kills and self.elapsed() >= self.a.min_seconds

    # the straight run

    def straight_run(self):
        run = train(self.strata, self.work, "straight", config("cpu"), self.a.steps,
                    model=model_flags(self.a))
        lines = run.metric_lines()
        self.step_ms = [m["step_ms"] for m in lines]
        # What is not in a step is startup (and the --save file, and exit): kills aimed at
        # startup fall within it.
        self.startup_s = max(0.05, run.seconds - sum(self.step_ms) / 1000)
        print(f"straight: {self.a.steps} steps in {run.seconds:.1f} s (startup ~{self.startup_s:.2f} s, "
              f"median step {statistics.median(self.step_ms):.0f} ms)", flush=True)
        self.straight = run

    def step_s(self):
        """The step time to aim kills with: the median of the last steps seen (the machine's
        load changes)."""
        return statistics.median(self.step_ms[-50:]) / 1000

    # a segment

    def plan_kill(self, first):
        """None (let the segment finish) or (metrics lines to wait for, then seconds to wait)."""
        if self.done_killing():
            return None
        if self.rng.random() < STARTUP_SHARE:
            return 0, self.rng.uniform(0, self.startup_s)
        target = self.rng.randint(first + 1, self.a.steps + self.a.every)
        if target > self.a.steps:
            return None
        # Within step `target`, or past it by up to half a step: after the last step that is
        # the final save and the --save file.
        return target - first - 1, self.rng.uniform(0, 1.5 * self.step_s())

    def start(self, seg, ckpt):
        run = seg.run
        cfg = config(seg.param)(self.swap)
        run.write_config(cfg)
        flags = model_flags(self.a) + ["--steps", str(self.a.steps), "--checkpoint-dir", ckpt,
                                       "--checkpoint-every", str(self.a.every)]
        if seg.first > 0:  # D holds a checkpoint (else the run would be refused)
            flags += ["--resume", ckpt]
        run.cmd = [self.strata, "train", "--config", run.config_path, "--save", run.save,
                   "--metrics", run.metrics, "--report", "none"] + flags
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "2")
        seg.stderr = open(os.path.join(run.dir, "stderr.txt"), "w+")
        return subprocess.Popen(run.cmd, stdout=subprocess.DEVNULL, stderr=seg.stderr, env=env,
                                cwd=run.dir)

    def run_segment(self, seg, ckpt, plan):
        """Runs the segment to its end, or SIGKILLs it as `plan` says. Fails on a hang or an
        exit other than 0 (or the kill)."""
        expected = self.startup_s + (self.a.steps - seg.first) * self.step_s()
        hang_s = HANG_SLACK_S + HANG_FACTOR * expected
        p = self.start(seg, ckpt)
        t0 = time.monotonic()
        reached_at = None
        try:
            while p.poll() is None:
                now = time.monotonic() - t0
                check(now < hang_s, f"{seg.run.name}: still running after {now:.0f} s (expected "
                                    f"~{expected:.0f} s): a hang?\n  command: {' '.join(seg.run.cmd)}")
                if plan is not None:
                    lines, delay = plan
                    if reached_at is None and complete_lines(seg.run.metrics) >= lines:
                        reached_at = now
                    if reached_at is not None and now >= reached_at + delay:
                        p.send_signal(signal.SIGKILL)
                        # It may have exited on its own just before: then it finished (exit 0).
                        seg.killed = p.wait() == -signal.SIGKILL
                        break
                time.sleep(0.005)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        seg.seconds = time.monotonic() - t0
        seg.stderr.seek(0)
        err = seg.stderr.read()
        seg.stderr.close()
        seg.run.result = subprocess.CompletedProcess(seg.run.cmd, p.returncode, "", err)
        if not seg.killed:
            seg.run.expect_ok()
        lines = seg.lines()
        self.step_ms += [m["step_ms"] for m in lines]
        self.steps_trained += len(lines)
        check_metrics(self.straight, seg.run.name, lines, seg.first)

    def wait_for_hidden_grace(self):
        """Waits until every hidden run folder strata keeps for a minute (hidden_swap_folders) is
        old enough for it to be removed (HIDDEN_GRACE_S)."""
        hidden = hidden_swap_folders(self.swap)
        if not hidden:
            return
        newest = max(os.stat(os.path.join(self.swap, n)).st_mtime for n in hidden)
        wait = newest + HIDDEN_GRACE_S - time.time()
        if wait > 0:
            print(f"  waiting {wait:.0f} s before a segment that must finish: {hidden} in the swap "
                  f"path is younger than strata's minute of grace", flush=True)
            self.grace_waits += 1
            time.sleep(wait)

    # after a kill

    def where_landed(self, ckpt, lines):
        """Where the kill came, from what it left: (a kind to count, a description). The last
        checkpoint published, no step trained yet, a save in progress (a .partial folder), the
        removal of an old checkpoint (.deleting), else within a step."""
        names = listing(ckpt)
        partial = [n for n in names if n.endswith(".partial")]
        if resume_step(ckpt) == self.a.steps:
            return "end", "after the last checkpoint was published"
        if not lines:
            return "startup", "at startup (before the first step)"
        if partial:
            return "save", f"during a save ({partial[0]})"
        if any(n.endswith(".deleting") for n in names):
            return "removal", "during the removal of an old checkpoint"
        return "step", f"in step {lines[-1]['step'] + 1}"

    def after_kill(self, seg, ckpt):
        lines = seg.lines()
        kind, where = self.where_landed(ckpt, lines)
        self.landed[kind] = self.landed.get(kind, 0) + 1
        now = check_folder(ckpt, f"{seg.run.name} (killed {where})") if os.path.isdir(ckpt) else None
        # Checkpoints are never lost: the point to resume from only moves forward.
        check(resume_step(ckpt) >= seg.first,
              f"{seg.run.name}: the resume point went from step {seg.first} to {resume_step(ckpt)} "
              f"(latest {now!r}, folder {listing(ckpt)})")
        folders = swap_folders(self.swap)
        check(len(folders) <= MAX_SWAP_FOLDERS_AFTER_KILL,
              f"{seg.run.name}: {len(folders)} run folders in the swap path after the kill (stale "
              f"ones are not reclaimed?): {folders}")
        reached = lines[-1]["step"] if lines else seg.first
        resumed = f"step-{seg.first:08d}" if seg.first else "scratch"
        print(f"kill {self.kills} at {seg.seconds:.2f} s ({self.elapsed():.0f} s in): round "
              f"{self.rounds + 1} {seg.run.name} (from {resumed}, params {seg.param}) had reached "
              f"step {reached}; killed {where}; latest now {now or 'none'}, complete "
              f"{complete_steps(ckpt)}", flush=True)

    # the end of a round

    def check_finished(self, seg, ckpt):
        """The segment that ran to the end: its bits, the folder, the swap path."""
        what = compare_resumed(self.straight, seg.run, seg.first)
        names = listing(ckpt)
        hidden = [n for n in names if n.startswith(".")]
        check(not hidden, f"{seg.run.name}: left in {ckpt}: {hidden}")
        want = ["latest"] + [f"step-{s:08d}" for s in checkpoint_steps(self.a.steps, self.a.every)[-2:]]
        check(names == want, f"{seg.run.name}: {ckpt} holds {names}, expected {want}")
        check(check_folder(ckpt, seg.run.name) == f"step-{self.a.steps:08d}",
              f"{seg.run.name}: latest {latest(ckpt)!r} after the last step")
        left = sorted(os.listdir(self.swap))
        check(not left, f"{seg.run.name}: left in the swap path {self.swap}: {left}")
        return f"finished from {'step-%08d' % seg.first if seg.first else 'scratch'}: {what}"

    def check_converted(self, ckpt, root):
        """A round that ended with a kill after step N's checkpoint: the checkpoint holds the
        straight run's final weights (strata convert writes them as --save does)."""
        out = os.path.join(root, "converted.safetensors")
        r = subprocess.run([self.strata, "convert", ckpt, out], capture_output=True, text=True,
                           timeout=300)
        check(r.returncode == 0, f"strata convert {ckpt}: exit {r.returncode}\n{tail(r.stderr)}")
        with open(out, "rb") as a, open(self.straight.save, "rb") as b:
            check(a.read() == b.read(), f"{ckpt}: step-{self.a.steps:08d} differs from the straight "
                                        "run's --save")
        return f"killed after its last checkpoint: strata convert == the straight run's --save"

    # a round

    def round(self):
        """Trains N steps in segments into a fresh checkpoint folder. Returns when a segment
        finishes (or a kill leaves step N's checkpoint published)."""
        root = os.path.join(self.work, f"round-{self.rounds + 1}")
        ckpt = os.path.join(root, "ckpt")
        os.makedirs(root)
        index = 0
        while True:
            index += 1
            first = resume_step(ckpt)
            seg = Segment(root, index, first, self.rng.choice(["cpu", "nvme"]))
            plan = self.plan_kill(first)
            if plan is None:
                self.wait_for_hidden_grace()
            self.segments += 1
            self.resumes += first > 0
            self.run_segment(seg, ckpt, plan)
            if not seg.killed:
                what = self.check_finished(seg, ckpt)
                break
            self.kills += 1
            self.after_kill(seg, ckpt)
            if resume_step(ckpt) == self.a.steps:
                what = self.check_converted(ckpt, root)
                break
        self.rounds += 1
        print(f"round {self.rounds}: {index} segments; {what}", flush=True)
        if not self.a.keep:
            shutil.rmtree(root)
        return not seg.killed

    def summary(self):
        return {
            "kills": self.kills, "rounds": self.rounds, "steps": self.a.steps,
            "every": self.a.every, "seed": self.a.seed, "segments": self.segments,
            "resumes": self.resumes, "steps_trained": self.steps_trained,
            "steps_redone": self.steps_trained - self.rounds * self.a.steps,
            "wall_s": round(self.elapsed(), 1), "landed": self.landed,
            "grace_waits": self.grace_waits, "result": "ok",
        }


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("strata")
    ap.add_argument("work")
    ap.add_argument("--steps", type=int, default=40, help="steps of a run (N)")
    ap.add_argument("--every", type=int, default=4, help="--checkpoint-every (K)")
    ap.add_argument("--kills", type=int, default=3, help="SIGKILLs to make at least (M)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-seconds", type=float, default=0,
                    help="keep killing until this long has passed too")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--keep", action="store_true", help="keep WORK (default: removed after a pass)")
    a = ap.parse_args()
    if a.steps < 1 or a.every < 1 or a.kills < 0:
        ap.error("--steps and --every must be positive, --kills not negative")
    return a


def main():
    a = parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(os.path.join(a.work, "swap"))
    if not odirect_works(a.work):
        print(f"skipped: O_DIRECT does not work in {a.work} (the NVMe tier's swap files need it)")
        return SKIP
    soak = Soak(a)
    print(f"soak: {a.steps} steps, a checkpoint every {a.every}, at least {a.kills} kills and "
          f"{a.min_seconds:.0f} s, seed {a.seed}, in {soak.work}", flush=True)
    try:
        soak.straight_run()
        while True:
            finished = soak.round()
            # The soak ends with a segment that runs to the end (so that the last run must
            # leave the swap path empty); a round that ended with a kill is not one.
            if finished and soak.done_killing():
                break
    except Failure as e:
        print(f"FAIL soak (seed {a.seed}, after {soak.kills} kills, {soak.elapsed():.0f} s; files "
              f"kept in {soak.work}): {e}", file=sys.stderr)
        return 1
    except Exception:  # a bug of this script, or output it could not parse
        traceback.print_exc()
        print(f"FAIL soak (seed {a.seed}): unexpected exception; files kept in {soak.work}",
              file=sys.stderr)
        return 1
    print(json.dumps(soak.summary()), flush=True)
    if not a.keep:
        shutil.rmtree(a.work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
