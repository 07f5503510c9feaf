"""Helpers of check_checkpoint.py: runs of `strata train` with checkpoints (over tests/train's
Run), comparing a resumed run with a straight one, reading a checkpoint folder, and the error
a refused resume prints.
"""
import contextlib
import os
import signal
import subprocess
import time

from train_util import TINY, Failure, Run, check, compare_bitwise, ds_config, tail


def stage3(opt, param, **kw):
    """A function of the run's swap folder giving a stage-3 config (gradient_clipping 1.0, the
    optimizer in `opt`, the parameters in `param`): what train() takes."""
    return lambda nvme: ds_config(3, opt, param, nvme=nvme, **kw)


def train(strata, root, name, make_config, steps, flags=(), ranks=None, env=None, ok=True,
          model=TINY, rank_env=None):
    """One run of `model` (the model and data flags) for `steps` steps (the run's total) with
    `flags` added; make_config(nvme) gives its config. ok: fail unless it exits 0 with a --save
    file. env: variables set for this run only (e.g. STRATA_CRASH_AT); rank_env: for some ranks
    only ({rank: {variable: value}}, with ranks)."""
    run = Run(root, name)
    run.write_config(make_config(run.nvme))
    os.makedirs(run.nvme, exist_ok=True)
    with environ(env or {}):
        run.start(strata, list(model) + ["--steps", str(steps)] + list(flags), np_ranks=ranks,
                  rank_env=rank_env)
    if ok:
        run.expect_ok()
        check(not run.swap_leftovers(), f"{name}: left in the swap folder: {run.swap_leftovers()}")
    return run


@contextlib.contextmanager
def environ(values):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update({k: str(v) for k, v in values.items()})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class StepsAfter:
    """A run seen from step `first` + 1 on: its --save file, and its metrics lines after `first`
    (what a run resumed at `first` writes). Stands in for a Run in compare_bitwise."""

    def __init__(self, run, first):
        self.run, self.first = run, first
        self.name = f"{run.name} (steps > {first})"
        self.save = run.save

    def weights(self):
        return self.run.weights()

    def metric_lines(self):
        return [m for m in self.run.metric_lines() if m["step"] > self.first]


def compare_resumed(straight, resumed, first):
    """The resumed run (at step `first`, to the straight run's total) must give the straight
    run's --save bytes and, on each step after `first`, its loss, grad_norm, lr, loss_scale and
    skipped flag exactly. Returns a short description."""
    total = len(straight.metric_lines())
    steps = [m["step"] for m in resumed.metric_lines()]
    check(steps == list(range(first + 1, total + 1)),
          f"{resumed.name}: metrics steps {steps}, expected {first + 1}..{total}")
    what = compare_bitwise(StepsAfter(straight, first), resumed)
    for x, y in zip(StepsAfter(straight, first).metric_lines(), resumed.metric_lines()):
        for key in ("lr", "loss_scale", "skipped"):
            check(x[key] == y[key], f"{straight.name} vs {resumed.name}: step {x['step']} {key} "
                                    f"{x[key]!r} vs {y[key]!r}")
    return what


# checkpoint folders

def latest(ckpt_dir):
    """The name `latest` holds (stripped), or None when there is no `latest`."""
    path = os.path.join(ckpt_dir, "latest")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read().strip()


def step_folder(ckpt_dir, step):
    return os.path.join(ckpt_dir, f"step-{step:08d}")


def listing(ckpt_dir):
    return sorted(os.listdir(ckpt_dir))


def check_folder(ckpt_dir, what):
    """The invariants a crash must not break: `latest` (when there) names a folder step-* with a
    manifest.json, and no folder named step-* lacks its manifest.json. Returns latest."""
    names = listing(ckpt_dir)
    for n in names:
        if n.startswith("step-"):
            check(os.path.isfile(os.path.join(ckpt_dir, n, "manifest.json")),
                  f"{what}: {n} has no manifest.json (a checkpoint name on an incomplete save); "
                  f"folder: {names}")
    name = latest(ckpt_dir)
    if name is not None:
        check(name.startswith("step-") and os.path.isfile(os.path.join(ckpt_dir, name, "manifest.json")),
              f"{what}: latest names {name!r}, not a complete checkpoint; folder: {names}")
    return name


def error_text(stderr):
    """What strata printed from its (first) "strata: error:" on."""
    at = stderr.find("strata: error:")
    return stderr[at:] if at >= 0 else ""


def expect_refused(run, words, what=None):
    """The run must have exited 1 with an error naming every word in `words`, without training a
    step (no metrics lines, no --save file). Returns the error's first line."""
    what = what or run.name
    r = run.result
    err = error_text(r.stderr)
    check(r.returncode == 1, f"{what}: exit {r.returncode}, expected 1\n  command: {' '.join(run.cmd)}\n"
                             f"{tail(r.stderr)}")
    check(err, f"{what}: no 'strata: error:' message:\n{tail(r.stderr)}")
    missing = [w for w in words if w not in err]
    check(not missing, f"{what}: the error does not name {missing}:\n{tail(err, 8)}")
    check(not run.metric_lines(), f"{what}: {len(run.metric_lines())} steps trained before the error")
    check(not os.path.exists(run.save), f"{what}: a --save file was written")
    return err.splitlines()[0]


def flip_byte(path, offset):
    """XOR 0x01 into the byte at `offset` (negative: from the end). Returns (offset, old, new)."""
    size = os.path.getsize(path)
    offset = offset % size
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([old ^ 0x01]))
    return offset, old, old ^ 0x01


def complete_lines(path):
    """Lines of a file that is being written, counting only those already ended by a newline."""
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def run_until_signalled(strata, run, flags, sig, min_lines=3, timeout=120, second_after_s=None):
    """Starts the run (Popen, the same command Run.start makes), waits until its --metrics file
    has min_lines lines, sends `sig` (and again after second_after_s, when given), and waits for
    it. Sets run.result (a CompletedProcess); returns the metrics lines when `sig` was sent."""
    cmd = [strata, "train", "--config", run.config_path, "--save", run.save, "--metrics",
           run.metrics, "--report", "none"] + list(flags)
    run.cmd = cmd
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "2")
    with open(os.path.join(run.dir, "stderr.txt"), "w+") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=run.dir)
        t0 = time.monotonic()
        try:
            while complete_lines(run.metrics) < min_lines:
                if p.poll() is not None:
                    break
                if time.monotonic() - t0 > timeout:
                    raise Failure(f"{run.name}: no {min_lines} metrics lines after {timeout} s")
                time.sleep(0.01)
            sent_after = complete_lines(run.metrics)
            if p.poll() is None:
                p.send_signal(sig)
            if second_after_s is not None:
                time.sleep(second_after_s)
                if p.poll() is None:
                    p.send_signal(sig)
            rc = p.wait(timeout=timeout)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        err.seek(0)
        run.result = subprocess.CompletedProcess(cmd, rc, "", err.read())
    return sent_after


SIGNAL_EXIT = {signal.SIGTERM: 128 + signal.SIGTERM, signal.SIGINT: 128 + signal.SIGINT}
