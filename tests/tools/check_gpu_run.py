#!/usr/bin/env python3
"""scripts/gpu/run.sh, the one call of a GPU lease, on stand-in binaries (no GPU here).

A stand-in package (STRATA_GPU_DIR) holds a `strata` script that answers `info`, `train` (writes
the --metrics and --trace files a real run writes, with Adam spans on the "cpu optimizer"
track) and `bench step` (prints a progress line and one JSON line, after FAKE_BENCH_SLEEP
seconds), and two CUDA tests, one of which fails. Checks:

1. The CUDA tests, the sanitizer and the step stages: the failing CUDA test, the one that
   skipped (a CUDA test must pass) and the one that hung (stopped at TEST_TIMEOUT_S, the tests
   after it still run) are named and the run exits 1; the declined cuBLASLt epilogues are
   counted; the tests read the carried training text (STRATA_TEST_TEXT); the sanitizer runs the
   reduced attention set; the other stages are ok; $OUT holds summary.txt, results.jsonl (the
   benches' JSON lines) and logs.tar.gz (the test logs, the train output with its `ready in`
   line, the metrics, the occupancy) and nothing else (a lease brings back at most 8 files); the
   summary's first line is the ldd check (a real ELF stand-in finds its library by its rpath
   $ORIGIN/../lib), and it shows the occupancy and the steps with their losses; nothing the
   stages start has the package's lib/ on LD_LIBRARY_PATH.
2. A bench that hangs is stopped at its stage's cap and reported as timed out, with no process
   of it left, and the line it prints when stopped is in results.jsonl; a stage with less time left than its minimum is skipped and said so; the whole
   run ends inside BUDGET_S; results and logs of the stages before it still come back.
3. The package packed as scripts/gpu/package.sh packs it (pkg.tar.gz) is unpacked and run; an
   unknown stage is reported and fails the run.
4. Without a package the run stops at once, saying to run scripts/gpu/package.sh.
5. A binary whose library is missing is named on the summary's first line.
6. A loss that is not finite fails xl_trace (the losses printed) and a bench stage whose JSON
   holds one, though the bench exited 0.

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
  info) echo "strata (stand-in)"; echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" ;;
  train)
    trace= metrics=
    while (($#)); do
      case $1 in --trace) trace=$2; shift ;; --metrics) metrics=$2; shift ;; esac
      shift
    done
    echo "strata: ready in 1.25 s (stand-in)" >&2
    for s in 1 2 3; do
      loss=3.25
      [[ -n ${FAKE_LOSS:-} && $s == 3 ]] && loss=$FAKE_LOSS
      echo "{\"step\": $s, \"loss\": $loss, \"step_ms\": 100.0, \"grad_norm\": 0.5, \"speculative\": {\"updates\": 50, \"redone\": 0}, \"busy_ms\": {\"cpu optimizer\": 90.0}}"
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
    echo "{\"placement\": \"cpu\", \"stage\": 3, \"losses\": [3.5, ${FAKE_LOSS:-3.25}], \"args\": \"$*\"}"
    ;;
  *) echo "stand-in strata: $*" >&2; exit 2 ;;
esac
"""


def executable(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


# A CUDA test that needs the carried training text, as test_cuda_trace does.
TEXT_TEST = """#!/bin/sh
[ -f "$STRATA_TEST_TEXT" ] || { echo "no training text at '$STRATA_TEST_TEXT'"; exit 1; }
echo "declined epilogue: matmul_fwd bf16 N=77: cuBLASLt declined 1 epilogue(s) on a GPT shape"
"""
# The attention test as compute-sanitizer runs it: the reduced case set must be asked for.
ATTENTION_TEST = """#!/bin/sh
[ "$STRATA_ATTENTION_REDUCED" = 1 ] || { echo "the full case set under a sanitizer"; exit 1; }
echo "reduced: $*"
"""
# compute-sanitizer's stand-in: runs the program after its options, as the real one does.
SANITIZER = """#!/bin/sh
while [ $# -gt 0 ]; do case $1 in --tool|--error-exitcode) shift 2 ;; *) break ;; esac; done
echo "========= COMPUTE-SANITIZER (stand-in)"
exec "$@"
"""


def compile_elf(folder, lib_dir, carry_lib):
    """bin/test_elf_cuda: a real ELF that loads libstandin.so through its rpath $ORIGIN/../lib
    (as scripts/gpu/package.sh links strata); the library is in lib/ only when carry_lib."""
    build = tempfile.mkdtemp(prefix="elf-", dir=folder)
    with open(os.path.join(build, "standin.c"), "w") as f:
        f.write("int standin(void) { return 0; }\n")
    with open(os.path.join(build, "main.c"), "w") as f:
        f.write("#include <stdio.h>\nint standin(void);\n"
                "int main(void) { puts(\"elf stand-in\"); return standin(); }\n")
    so = os.path.join(build, "libstandin.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", so, os.path.join(build, "standin.c")], check=True)
    subprocess.run(["cc", "-o", os.path.join(folder, "bin", "test_elf_cuda"), os.path.join(build, "main.c"),
                    "-L" + build, "-lstandin", "-Wl,--disable-new-dtags", "-Wl,-rpath,$ORIGIN/../lib"],
                   check=True)
    if carry_lib:
        shutil.copy(so, os.path.join(lib_dir, "libstandin.so"))
    shutil.rmtree(build)


def make_package(folder, carry_lib=True):
    os.makedirs(os.path.join(folder, "bin"))
    os.makedirs(os.path.join(folder, "lib"))
    os.makedirs(os.path.join(folder, "text"))
    with open(os.path.join(folder, "text", "GPL-3"), "w") as f:
        f.write("the carried training text\n")
    executable(os.path.join(folder, "bin", "strata"), STRATA_STUB)
    executable(os.path.join(folder, "bin", "test_hang_cuda"), "#!/bin/sh\nexec sleep 600\n")
    executable(os.path.join(folder, "bin", "test_good_cuda"), TEXT_TEST)
    executable(os.path.join(folder, "bin", "test_bad_cuda"), "#!/bin/sh\necho one failed\nexit 1\n")
    executable(os.path.join(folder, "bin", "test_skip_cuda"), "#!/bin/sh\necho '[  SKIPPED ] A.B'\n")
    executable(os.path.join(folder, "bin", "test_attention_cuda"), ATTENTION_TEST)
    executable(os.path.join(folder, "bin", "test_attention_decode_cuda"), ATTENTION_TEST)
    compile_elf(folder, os.path.join(folder, "lib"), carry_lib)
    with open(os.path.join(folder, "cuda_tests.txt"), "w") as f:
        f.write("test_hang_cuda\ntest_good_cuda\ntest_bad_cuda\ntest_skip_cuda\ntest_elf_cuda\n")


def run_plan(repo, package, out, env_extra, timeout):
    env = dict(os.environ, STRATA_GPU_DIR=package, OUT=out, **env_extra)
    tools = os.path.join(os.path.dirname(os.path.abspath(package)), "tools")  # compute-sanitizer
    if os.path.isdir(tools):
        env["PATH"] = tools + os.pathsep + env["PATH"]
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
        os.makedirs(os.path.join(folder, "tools"))
        executable(os.path.join(folder, "tools", "compute-sanitizer"), SANITIZER)

        # 1. The CUDA tests, the sanitizer and the step stages, all quick.
        out = os.path.join(folder, "out1")
        run, _ = run_plan(repo, package, out, {
            "BUDGET_S": "400", "TEST_TIMEOUT_S": "2",
            "STAGES": "cuda_tests sanitizer xl_trace xl_step small_step"}, 100)
        if run.returncode != 1:
            fail(f"exit {run.returncode} with a failing CUDA test, wanted 1", run)
        files = sorted(os.listdir(out))
        if files != ["logs.tar.gz", "results.jsonl", "summary.txt"]:
            fail(f"$OUT holds {files}, wanted logs.tar.gz, results.jsonl and summary.txt", run)
        summary = read(os.path.join(out, "summary.txt"))
        first = summary.splitlines()[0] if summary else ""
        if first != "ldd: 8 binaries, every library found":
            fail(f"the summary's first line is {first!r}, wanted the ldd check finding every library", run)
        for want in ("cuda_tests: failed", "test_hang_cuda: timed out after 2 s", "test_good_cuda: rc=0",
                     "test_elf_cuda: rc=0", "failed: test_hang_cuda test_bad_cuda test_skip_cuda",
                     "cuBLASLt declined epilogues: 1", "sanitizer: ok", "compute-sanitizer memcheck: rc=0",
                     "compute-sanitizer racecheck: rc=0", "compute-sanitizer racecheck (decode): rc=0",
                     "xl_trace: ok", "xl_step: ok",
                     "small_step: ok", "ready in 1.25 s", "median occupancy (phases 2..): 0.9",
                     "loss 3.25, grad_norm 0.5, speculative {'updates': 50, 'redone': 0}", "done in"):
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
            info = tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith("info.txt"))).read().decode()
        for want in ("test_good_cuda.log", "test_bad_cuda.log", "xl_train.txt", "xl_metrics.jsonl",
                     "xl.trace.json.gz", "xl_occupancy.txt", "xl_step.txt", "small_step.jsonl", "info.txt",
                     "sanitizer_memcheck.log"):
            if want not in names:
                fail(f"{want} is not in logs.tar.gz: {sorted(names)}", run)
        if "LD_LIBRARY_PATH=" not in info or os.path.join(package, "lib") in info:
            fail(f"strata ran with the package's lib/ on LD_LIBRARY_PATH: {info!r}", run)

        # 2. A bench that hangs: stopped at its cap; the next stage skipped for want of time.
        out = os.path.join(folder, "out2")
        budget = 40  # 15 s of it kept for packing: 25 s for the stages (a loaded CI machine is slow)
        run, took = run_plan(repo, package, out, {
            "BUDGET_S": str(budget), "FAKE_BENCH_SLEEP": "600",
            "STAGES": "xl_trace xl_step small_step",
            "LIMITS": "xl_trace=1:20 xl_step=2:4 small_step=30:20"}, 90)
        summary = read(os.path.join(out, "summary.txt"))
        if run.returncode != 1 or "xl_step: timed out" not in summary or "xl_trace: ok" not in summary:
            fail(f"exit {run.returncode}; wanted 1, xl_trace ok and xl_step timed out:\n{summary}", run)
        if "small_step: skipped" not in summary or "it needs 30" not in summary:
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
        run, _ = run_plan(repo, packed, os.path.join(folder, "out3"), {"STAGES": "cuda_tests warp_speed", "TEST_TIMEOUT_S": "2"}, 60)
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
        # 5. A carried binary whose library did not travel: named on the summary's first line.
        lacking = os.path.join(folder, "lacking")
        make_package(lacking, carry_lib=False)
        run, _ = run_plan(repo, lacking, os.path.join(folder, "out5"), {"STAGES": "xl_trace"}, 60)
        first = read(os.path.join(folder, "out5", "summary.txt")).splitlines()[0]
        if first != "ldd: libraries not found: test_elf_cuda: libstandin.so":
            fail(f"a missing library: the summary's first line is {first!r}", run)
        # 6. A loss that is not finite: xl_trace fails printing the losses; a bench stage whose
        # JSON holds one fails though the bench exited 0.
        out = os.path.join(folder, "out6")
        run, _ = run_plan(repo, package, out, {"STAGES": "xl_trace xl_step", "FAKE_LOSS": "NaN"}, 60)
        summary = read(os.path.join(out, "summary.txt"))
        for want in ("xl_trace: failed (rc 1)", "loss nan", "a loss or gradient norm is not finite",
                     "xl_step: failed: a loss or gradient norm is not finite", "not finite: line 1: losses [3.5, NaN]"):
            if want not in summary:
                fail(f"{want!r} is not in summary.txt:\n{summary}", run)
        if run.returncode != 1:
            fail(f"exit {run.returncode} with non-finite losses, wanted 1", run)
        print(f"ok: the plan, a hung bench stopped at its cap ({took:.1f} s of a {budget} s budget), "
              "a packed package, an unknown stage, no package, a missing library, non-finite losses")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
