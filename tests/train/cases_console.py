"""What `strata train` shows on the console: a quiet start (the resolved config goes to
resolved_config.json beside --metrics, and on the console only with --verbose) and the end
report's bytes moved counting the steps this run ran (after a resume, not the run's total)."""
import json
import os
import re
import subprocess

from train_util import TINY, Run, check, ds_config, tail


def train(strata, run, args):
    """strata train with the run's config and --metrics, the report on (Run.start turns it off)."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "2")
    r = subprocess.run([strata, "train", "--config", run.config_path, "--metrics", run.metrics] + TINY + list(args),
                       capture_output=True, text=True, timeout=120, env=env, cwd=run.dir)
    check(r.returncode == 0, f"{run.name}: exit {r.returncode}\n{tail(r.stderr)}")
    return r


def case_console(strata, root):
    # Quiet by default: no config JSON on the console, the file beside the metrics, one line.
    run = Run(root, "quiet")
    run.write_config(ds_config(3, "cpu", "cpu"))
    r = train(strata, run, ["--steps", "2"])
    written = os.path.join(run.dir, "resolved_config.json")
    check('"zero_optimization"' not in r.stderr, f"the resolved config is on the console:\n{tail(r.stderr, 40)}")
    check(f"the resolved config is in {written}" in r.stderr, f"no line naming the file:\n{tail(r.stderr)}")
    with open(written) as f:
        resolved = json.load(f)
    check(resolved["zero_optimization"]["stage"] == 3, f"resolved_config.json: {resolved['zero_optimization']}")
    check("plan:" in r.stderr and "bytes moved (2 steps" in r.stderr, f"no plan or report:\n{tail(r.stderr)}")
    lines = len(r.stderr.splitlines())
    r = train(strata, run, ["--steps", "2", "--verbose"])
    check('"zero_optimization"' in r.stderr, f"--verbose did not print the resolved config:\n{tail(r.stderr)}")
    print(f"  quiet start: {lines} lines, the config in resolved_config.json; --verbose: "
          f"{len(r.stderr.splitlines())} lines")

    # After a resume the report counts the steps that ran (4 of 6), not the run's total.
    run = Run(root, "resumed")
    run.write_config(ds_config(3, "cpu", "cpu"))
    ckpt = os.path.join(run.dir, "ckpt")
    train(strata, run, ["--steps", "2", "--checkpoint-dir", ckpt])
    r = train(strata, run, ["--steps", "6", "--resume", ckpt, "--checkpoint-dir", ckpt])
    m = re.search(r"bytes moved \((\d+) steps", r.stderr)
    check(m is not None and m.group(1) == "4", f"bytes moved after a resume: {m and m.group(0)}\n{tail(r.stderr)}")
    print("  resumed at step 2 of 6: bytes moved (4 steps ...)")
