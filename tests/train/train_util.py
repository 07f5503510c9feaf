"""Helpers of check_train.py: running `strata train`, DeepSpeed-style configs, reading what a run
wrote (--save safetensors, --metrics JSONL), comparing weights, and small file systems.

Every run gets its own folder under the case's temp dir: config.json, save.safetensors,
metrics.jsonl, and nvme/ (the swap folder, when the config offloads to NVMe).
"""
import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

SKIP = 77

try:
    import numpy as np
except ImportError as e:  # not Debian's python3 (scripts/setup.sh installs python3-numpy)
    print(f"skipped: cannot import numpy ({e}); run with /usr/bin/python3")
    sys.exit(SKIP)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import st_io  # noqa: E402  (tests/reference/st_io.py: safetensors on numpy)

# The training text every machine has; any file works (its bytes are the tokens).
GPL = "/usr/share/common-licenses/GPL-3"
# The model and data of most runs: the tiny preset (0.86M parameters), 32-token sequences.
TINY = ["--preset", "tiny", "--seq-len", "32", "--text", GPL, "--seed", "7"]

# Open MPI 4.1 as root in a container without a remote shell (tests/runtime/comm/CMakeLists.txt
# explains each one); OMP_NUM_THREADS=1 so that 3 ranks on 2 cores do not fight over them.
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMP_NUM_THREADS": "1",
    "OMPI_MCA_plm_rsh_agent": "false", "OMPI_MCA_btl": "self,vader",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none", "OMPI_MCA_rmaps_base_oversubscribe": "1",
}


class Failure(Exception):
    """A check that did not hold; the message says what was expected and what came."""


def check(cond, message):
    if not cond:
        raise Failure(message)


def tail(text, lines=25):
    return "\n".join(text.splitlines()[-lines:])


def ds_config(stage, opt="none", param="none", nvme=None, bf16=False, micro_batch=2, gas=2,
              clip=1.0, weight_decay=0.1, lr=1e-3, eps=None, device_memory=None, extra_zero=None,
              extra=None):
    """A DeepSpeed-style config for the host device. nvme: the swap folder (used by whichever of
    opt / param is "nvme"); aio.block_size 64 KiB keeps the swap files small. extra_zero: keys
    merged into zero_optimization; extra: top-level sections (e.g. fp16) set as given."""
    zero = {"stage": stage}
    if opt != "none":
        zero["offload_optimizer"] = {"device": opt}
        if opt == "nvme":
            zero["offload_optimizer"]["nvme_path"] = nvme
    if param != "none":
        zero["offload_param"] = {"device": param}
        if param == "nvme":
            zero["offload_param"]["nvme_path"] = nvme
    for key, value in (extra_zero or {}).items():
        if isinstance(value, dict):
            zero.setdefault(key, {}).update(value)
        else:
            zero[key] = value
    c = {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": gas,
        "gradient_clipping": clip,
        "optimizer": {"type": "AdamW", "params": {"lr": lr, "weight_decay": weight_decay}},
        "zero_optimization": zero,
        "aio": {"block_size": 65536},
        "strata": {"device": "host"},
    }
    if eps is not None:
        c["optimizer"]["params"]["eps"] = eps
    if bf16:
        c["bf16"] = {"enabled": True}
    if device_memory is not None:
        c["strata"]["device_memory"] = device_memory
    c.update(extra or {})
    return c


class Run:
    """One `strata train` run in its own folder (config, outputs, swap folder)."""

    def __init__(self, root, name):
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir, exist_ok=True)
        self.name = name
        self.config_path = os.path.join(self.dir, "config.json")
        self.save = os.path.join(self.dir, "save.safetensors")
        self.metrics = os.path.join(self.dir, "metrics.jsonl")
        self.nvme = os.path.join(self.dir, "nvme")
        self.result = None
        self.seconds = 0.0

    def write_config(self, config):
        with open(self.config_path, "w") as f:
            json.dump(config, f, indent=1)

    def start(self, strata, args, np_ranks=None, timeout=120, rank_env=None):
        """Runs strata train with --config, --save, --metrics and --report none added. Returns the
        CompletedProcess (also kept in self.result). rank_env ({rank: {variable: value}}, with
        np_ranks): variables set for those ranks only (one mpirun app context per rank)."""
        cmd = [strata, "train", "--config", self.config_path, "--save", self.save,
               "--metrics", self.metrics, "--report", "none"] + list(args)
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "2")
        if np_ranks is not None:
            env.update(MPI_ENV)
            launcher = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--timeout",
                        str(timeout - 10)]
            if rank_env is None:
                cmd = launcher + ["-np", str(np_ranks)] + cmd
            else:
                mpmd = list(launcher)
                for rank in range(np_ranks):
                    if rank > 0:
                        mpmd.append(":")
                    mpmd += ["-np", "1"]
                    for key, value in rank_env.get(rank, {}).items():
                        mpmd += ["-x", f"{key}={value}"]
                    mpmd += cmd
                cmd = mpmd
        self.cmd = cmd
        t0 = time.monotonic()
        try:
            self.result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                         env=env, cwd=self.dir)
        except subprocess.TimeoutExpired as e:
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
            raise Failure(f"{self.name}: timed out after {timeout} s: {' '.join(cmd)}\n"
                          f"{tail(err or '')}")
        self.seconds = time.monotonic() - t0
        with open(os.path.join(self.dir, "stderr.txt"), "w") as f:  # for --keep
            f.write(self.result.stderr)
        return self.result

    def expect_ok(self):
        r = self.result
        if r.returncode != 0:
            raise Failure(f"{self.name}: exited {r.returncode}, expected 0\n  command: "
                          f"{' '.join(self.cmd)}\n  config: {self.config_text()}\n"
                          f"--- stderr (tail)\n{tail(r.stderr)}")
        check(os.path.exists(self.save), f"{self.name}: exit 0 but no --save file {self.save}")
        return self

    def config_text(self):
        """The config file's text, or what --config named when that is no file (--config auto)."""
        if not os.path.isfile(self.config_path):
            return repr(self.config_path)
        with open(self.config_path) as f:
            return f.read()

    def plan_lines(self):
        """The plan's "of which" lines, as (tier, what): e.g. ("nvme", "parameter shards")."""
        out, on = [], False
        for line in self.result.stderr.splitlines():
            if line.strip() == "of which:":
                on = True
                continue
            if on:
                parts = line.split()
                if len(parts) < 4 or not line.startswith("    "):
                    break
                tier = "pinned host" if parts[0] == "pinned" else parts[0]
                rest = line.split(None, 4 if tier == "pinned host" else 3)[-1]
                out.append((tier, rest))
        return out

    def weights(self):
        return st_io.load(self.save)

    def metric_lines(self):
        if not os.path.exists(self.metrics):
            return []
        with open(self.metrics) as f:
            return [json.loads(line) for line in f if line.strip()]

    def losses(self):
        return [m["loss"] for m in self.metric_lines()]

    def swap_leftovers(self):
        """Files left in the swap folder after the run (the run folders should be gone)."""
        if not os.path.isdir(self.nvme):
            return []
        out = []
        for base, _, files in os.walk(self.nvme):
            out += [os.path.join(base, f) for f in files]
        out += [os.path.join(self.nvme, d) for d in os.listdir(self.nvme)]
        return sorted(set(out))


def bits(a):
    """The bit patterns of a float32 array (so that -0.0 != 0.0 and NaNs compare)."""
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def compare_bitwise(a_run, b_run):
    """Raises Failure unless the two --save files hold the same tensors bit for bit, and the two
    --metrics files the same loss and grad_norm on every step. Returns a short description."""
    wa, wb = a_run.weights(), b_run.weights()
    check(sorted(wa) == sorted(wb), f"{a_run.name} vs {b_run.name}: tensor names differ")
    diffs = []
    for name in sorted(wa):
        check(wa[name].shape == wb[name].shape, f"{name}: shape {wa[name].shape} vs {wb[name].shape}")
        ne = int(np.count_nonzero(bits(wa[name]) != bits(wb[name])))
        if ne:
            d = float(np.max(np.abs(wa[name].astype(np.float64) - wb[name])))
            diffs.append(f"{name}: {ne} of {wa[name].size} elements differ, max |diff| {d:.3g}")
    check(not diffs, f"{a_run.name} vs {b_run.name}: weights differ:\n    " + "\n    ".join(diffs[:8]))
    with open(a_run.save, "rb") as fa, open(b_run.save, "rb") as fb:
        check(fa.read() == fb.read(), f"{a_run.name} vs {b_run.name}: same tensors but the files' "
                                      "bytes differ (header or order)")
    ma, mb = a_run.metric_lines(), b_run.metric_lines()
    check(len(ma) == len(mb) and len(ma) > 0, f"metrics lines: {len(ma)} vs {len(mb)}")
    for x, y in zip(ma, mb):
        for key in ("loss", "grad_norm"):
            check(x[key] == y[key], f"{a_run.name} vs {b_run.name}: step {x['step']} {key} "
                                    f"{x[key]!r} vs {y[key]!r}")
    return f"{len(wa)} tensors and {len(ma)} losses identical"


def rel_norm(ours, ref):
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(ours - ref) / denom) if denom > 0 else float(np.linalg.norm(ours))


@contextlib.contextmanager
def tmpfs(folder, size, read_only=False):
    """Mounts a tmpfs of `size` at folder (made here) and unmounts it afterwards. Yields False,
    without mounting, where mounting is not allowed (not root, no CAP_SYS_ADMIN)."""
    os.makedirs(folder, exist_ok=True)
    opts = f"size={size}" + (",ro" if read_only else "")
    if shutil.which("mount") is None:
        yield False
        return
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", folder],
                       capture_output=True, text=True)
    if r.returncode != 0:
        yield False
        return
    try:
        yield True
    finally:
        subprocess.run(["umount", folder], capture_output=True)


def gpt_params(V, P, C, L):
    """Parameters of a GPT-2 (tied LM head): embeddings, L blocks of 12C^2 + 13C, final LN."""
    return V * C + P * C + L * (12 * C * C + 13 * C) + 2 * C


def run_cases(doc, cases, prefix):
    """The main of a case script: `SCRIPT STRATA CASE|all [--keep DIR]`. Each case runs in its
    own fresh folder (DIR/CASE, emptied first, or a temp dir removed afterwards); prints
    ok / FAIL / skipped per case. Returns the exit status (0, 1, or 77 for one skipped case)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("strata")
    ap.add_argument("case", choices=sorted(cases) + ["all"])
    ap.add_argument("--keep", help="run in this folder and keep the files")
    a = ap.parse_args()
    strata = os.path.abspath(a.strata)
    names = sorted(cases) if a.case == "all" else [a.case]
    status = 0
    for name in names:
        root = a.keep and os.path.abspath(os.path.join(a.keep, name))
        if root:  # emptied first: the cases expect fresh folders
            shutil.rmtree(root, ignore_errors=True)
            os.makedirs(root)
        tmp = None if root else tempfile.mkdtemp(prefix=f"{prefix}-{name}-")
        t0 = time.monotonic()
        print(f"{name}:", flush=True)
        try:
            cases[name](strata, root or tmp)
            print(f"{name}: ok ({time.monotonic() - t0:.1f} s)")
        except Failure as e:
            print(f"FAIL {name}: {e}", file=sys.stderr)
            status = 1
        except SystemExit as e:  # a case that cannot run here exits 77
            if e.code != SKIP or len(names) == 1:
                raise
            print(f"{name}: skipped")
        except Exception:  # a bug of this script, or output it could not parse
            traceback.print_exc()
            print(f"FAIL {name}: unexpected exception", file=sys.stderr)
            status = 1
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
    return status
