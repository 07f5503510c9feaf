#!/usr/bin/env python3
"""scripts/gpu/run.sh, the one call of a GPU lease, on stand-in binaries (no GPU here).

A stand-in package (STRATA_GPU_DIR) holds a `strata` script that answers `info`, `train` (writes
the --metrics and --trace files a real run writes, with Adam spans on the "cpu optimizer"
track) and `bench step` (prints a progress line and one JSON line, after FAKE_BENCH_SLEEP
seconds), and two CUDA tests, one of which fails. Checks:

1. Every issue-15 stage: the failing CUDA test and the one that skipped (a CUDA test must
   pass) are named and the run exits 1; the other stages
   are ok; $OUT holds summary.txt, results.jsonl (the benches' JSON lines) and logs.tar.gz (the
   test logs, the train output with its `ready in` line, the metrics, the occupancy) and nothing
   else (a lease brings back at most 8 files); the summary shows the occupancy and the steps.
2. A bench that hangs is stopped at its stage's cap and reported as timed out, with no process
   of it left, and the line it prints when stopped is in results.jsonl; a stage with less time left than its minimum is skipped and said so; the whole
   run ends inside BUDGET_S; results and logs of the stages before it still come back.
3. The package packed as scripts/gpu/package.sh packs it (pkg.tar.gz) is unpacked and run; an
   unknown stage is reported and fails the run.
4. Without a package the run stops at once, saying to run scripts/gpu/package.sh.

Usage: check_gpu_run.py REPO_ROOT WORK_DIR
"""
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time

from bench_check_util import fail

STRATA_STUB = r"""#!/usr/bin/env bash
# A stand-in for strata on a GPU machine (tests/tools/check_gpu_run.py).
case "$1" in
  info) echo "strata (stand-in)" ;;
  train)
    trace= metrics=
    while (($#)); do
      case $1 in --trace) trace=$2; shift ;; --metrics) metrics=$2; shift ;; esac
      shift
    done
    echo "strata: ready in 1.25 s (stand-in)" >&2
    for s in 1 2 3; do
      echo "{\"step\": $s, \"step_ms\": 100.0, \"grad_norm\": 0.5, \"speculative\": {\"updates\": 50, \"redone\": 0}, \"busy_ms\": {\"cpu optimizer\": 90.0}}"
    done >"$metrics"
    {
      echo '{"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "cpu optimizer"}}'
      for s in 0 1 2; do
        for k in 0 1 2 3; do
          echo ", {\"ph\": \"X\", \"name\": \"adam h.$k\", \"pid\": 1, \"tid\": 7, \"ts\": $((s * 1000000 + k * 1000)), \"dur\": 900}"
        done
      done
      echo ']}'
    } >"$trace"
    ;;
  bench)
    # As strata bench step: on SIGTERM, once its child has ended, what finished is printed (Note
    # [A stopped bench step]).
    trap 'sleep 1; echo "{\"placement\": \"resident\", \"stage\": 0, \"stopped\": true}"; exit 143' TERM
    sleep "${FAKE_BENCH_SLEEP:-0}" &
    wait $!
    echo "[round 1/1, 1/2] resident stage 0: 50.0 ms/step (1.0 s)" >&2
    echo "{\"placement\": \"cpu\", \"stage\": 3, \"args\": \"$*\"}"
    ;;
  *) echo "stand-in strata: $*" >&2; exit 2 ;;
esac
"""


def executable(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def make_package(folder):
    os.makedirs(os.path.join(folder, "bin"))
    os.makedirs(os.path.join(folder, "lib"))
    executable(os.path.join(folder, "bin", "strata"), STRATA_STUB)
    executable(os.path.join(folder, "bin", "test_good_cuda"), "#!/bin/sh\necho all passed\n")
    executable(os.path.join(folder, "bin", "test_bad_cuda"), "#!/bin/sh\necho one failed\nexit 1\n")
    executable(os.path.join(folder, "bin", "test_skip_cuda"), "#!/bin/sh\necho '[  SKIPPED ] A.B'\n")
    with open(os.path.join(folder, "cuda_tests.txt"), "w") as f:
        f.write("test_good_cuda\ntest_bad_cuda\ntest_skip_cuda\n")


def run_plan(repo, package, out, env_extra, timeout):
    env = dict(os.environ, STRATA_GPU_DIR=package, OUT=out, **env_extra)
    os.makedirs(out, exist_ok=True)
    t0 = time.monotonic()
    run = subprocess.run(["bash", os.path.join(repo, "scripts", "gpu", "run.sh")], capture_output=True,
                         text=True, timeout=timeout, env=env, cwd=repo)
    return run, time.monotonic() - t0


def processes_running(argv):
    """The pids whose command line is argv (from /proc)."""
    want = "\0".join(argv) + "\0"
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline") as f:
                if f.read() == want:
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


def read(path):
    with open(path) as f:
        return f.read()


def main():
    repo, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.makedirs(work, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="gpu-run-", dir=work)
    try:
        package = os.path.join(folder, "pkg")
        make_package(package)

        # 1. The issue-15 stages, all quick.
        out = os.path.join(folder, "out1")
        run, _ = run_plan(repo, package, out, {"BUDGET_S": "400"}, 100)
        if run.returncode != 1:
            fail(f"exit {run.returncode} with a failing CUDA test, wanted 1", run)
        files = sorted(os.listdir(out))
        if files != ["logs.tar.gz", "results.jsonl", "summary.txt"]:
            fail(f"$OUT holds {files}, wanted logs.tar.gz, results.jsonl and summary.txt", run)
        summary = read(os.path.join(out, "summary.txt"))
        for want in ("cuda_tests: failed", "failed: test_bad_cuda test_skip_cuda", "xl_trace: ok", "xl_step: ok",
                     "small_step: ok", "ready in 1.25 s", "median occupancy (phases 2..): 0.9",
                     "speculative {'updates': 50, 'redone': 0}", "done in"):
            if want not in summary:
                fail(f"{want!r} is not in summary.txt:\n{summary}", run)
        results = [json.loads(line) for line in read(os.path.join(out, "results.jsonl")).splitlines()]
        args = [r["args"] for r in results]
        if len(results) != 2 or "gpt2-xl" not in args[0] or "--placements cpu --stages 3" not in args[0] \
                or "deepspeed_zero2_cpu" not in args[0] or "--preset gpt2 " not in args[1] \
                or "cpu,nvme" not in args[1]:
            fail(f"results.jsonl: {results}, wanted xl_step's then small_step's JSON line", run)
        with tarfile.open(os.path.join(out, "logs.tar.gz")) as tar:
            names = {os.path.basename(n) for n in tar.getnames()}
        for want in ("test_good_cuda.log", "test_bad_cuda.log", "xl_train.txt", "xl_metrics.jsonl",
                     "xl.trace.json.gz", "xl_occupancy.txt", "xl_step.txt", "small_step.jsonl", "info.txt"):
            if want not in names:
                fail(f"{want} is not in logs.tar.gz: {sorted(names)}", run)

        # 2. A bench that hangs: stopped at its cap; the next stage skipped for want of time.
        out = os.path.join(folder, "out2")
        budget = 24  # 15 s of it kept for packing: 9 s for the stages
        run, took = run_plan(repo, package, out, {
            "BUDGET_S": str(budget), "FAKE_BENCH_SLEEP": "600",
            "STAGES": "xl_trace xl_step small_step",
            "LIMITS": "xl_trace=1:20 xl_step=2:4 small_step=8:20"}, 90)
        summary = read(os.path.join(out, "summary.txt"))
        if run.returncode != 1 or "xl_step: timed out" not in summary or "xl_trace: ok" not in summary:
            fail(f"exit {run.returncode}; wanted 1, xl_trace ok and xl_step timed out:\n{summary}", run)
        if "small_step: skipped" not in summary or "it needs 8" not in summary:
            fail(f"small_step was not skipped for want of time:\n{summary}", run)
        stopped = [json.loads(line) for line in read(os.path.join(out, "results.jsonl")).splitlines()]
        if [r.get("stopped") for r in stopped] != [True]:
            fail(f"results.jsonl holds {stopped}: wanted the stopped bench's one line", run)
        if took > budget:
            fail(f"the run took {took:.1f} s, over BUDGET_S {budget}", run)
        left = processes_running(["sleep", "600"])
        if left:
            fail(f"the hung bench is still running (pids {left})", run)
        if sorted(os.listdir(out)) != ["logs.tar.gz", "results.jsonl", "summary.txt"]:
            fail(f"$OUT holds {sorted(os.listdir(out))}", run)
        with tarfile.open(os.path.join(out, "logs.tar.gz")) as tar:
            if not any(n.endswith("xl_train.txt") for n in tar.getnames()):
                fail("the stage before the hung one left no logs", run)

        # 3. The package as scripts/gpu/package.sh packs it (pkg.tar.gz), and an unknown stage.
        packed = os.path.join(folder, "packed")
        os.makedirs(packed)
        with tarfile.open(os.path.join(packed, "pkg.tar.gz"), "w:gz") as tar:
            tar.add(package, arcname=".")
        run, _ = run_plan(repo, packed, os.path.join(folder, "out3"), {"STAGES": "cuda_tests warp_speed"}, 60)
        summary = read(os.path.join(folder, "out3", "summary.txt"))
        if run.returncode != 1 or "warp_speed: unknown stage" not in summary:
            fail(f"an unknown stage: exit {run.returncode}\n{summary}", run)
        if "test_good_cuda: rc=0" not in summary:
            fail(f"the CUDA tests of the packed package did not run:\n{summary}", run)
        # 4. No package: said at once, with what to do.
        run, _ = run_plan(repo, os.path.join(folder, "none"), os.path.join(folder, "out4"), {}, 30)
        summary = read(os.path.join(folder, "out4", "summary.txt"))
        if run.returncode != 1 or "no strata package" not in summary or "package.sh" not in summary:
            fail(f"a missing package: exit {run.returncode}\n{summary}", run)
        print(f"ok: the plan, a hung bench stopped at its cap ({took:.1f} s of a {budget} s budget), "
              "a packed package, an unknown stage, no package")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
