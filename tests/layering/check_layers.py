#!/usr/bin/env python3
"""Checks that #includes follow the layer arrows of docs/architecture.md.

Layers. Each top-level folder may include project headers from itself and from the layers it
links (the CMake targets' dependencies):

    core <- cpu_adam, offload, kernels (siblings: none includes another) <- runtime
         <- models <- infer, train (siblings: neither includes the other) <- serve <- tools

serve/ (`strata serve`) sits on infer/ and may include what infer/ may, and infer/; never train/.

python/ (the Python package's extension) may include offload, cpu_adam and core only: it links
no more. infer/ and train/ may each include models, runtime, kernels, offload, cpu_adam and core;
models/ may include neither, and infer/ and train/ do not include each other. A layer folder
that does not exist yet is simply not walked.

Runtime's subfolders. Inside runtime/ the subfolders are ordered too, lowest first:

    config, trace, launch, device, comm, topology, ops, params, tiers, zero, checkpoint, telemetry,
    estimate

A file in runtime/X/ may include runtime/X/ and the subfolders before X, never one after it
(so device/ does not include comm/). One narrower rule: from zero/, checkpoint/ may include
only the engine's facade, runtime/zero/engine.h, not the engine's internals. A subfolder of
runtime/ that is not in the list is itself reported: place it in RUNTIME_ORDER.

Models and the runtime. models/ reaches the runtime only through the ParamProvider
(runtime/params/), the device (runtime/device/) and the ops (runtime/ops/): a model never sees
where its parameters live (tiers/), the engine (zero/) or checkpoints (checkpoint/), so a new
family or a new tier is a change on one side only.

CUDA. CUDA headers (cuda*.h, cublas*.h, nccl.h, nvml.h, curand*.h, <cuda/...>, cub, thrust)
may be included only in runtime/device/, runtime/comm/ and kernels/cuda/ (and tests):
everything else builds without a GPU stack.

Usage: check_layers.py ROOT   (exit 1 and one line per violation when any is found)
       check_layers.py --expect FILE ROOT   (exit 0 only when the violations found are
           exactly the FILE:LINE entries listed in FILE: the test of the checker itself)
"""
import os
import re
import sys

import checker_main

LAYERS = ["core", "cpu_adam", "offload", "kernels", "runtime", "models", "infer", "train", "serve", "tools",
          "python"]
ALLOWED = {
    "core": {"core"},
    "cpu_adam": {"cpu_adam", "core"},
    "offload": {"offload", "core"},
    "kernels": {"kernels", "core"},
    "runtime": {"runtime", "kernels", "offload", "cpu_adam", "core"},
    "models": {"models", "runtime", "kernels", "offload", "cpu_adam", "core"},
    "infer": {"infer", "models", "runtime", "kernels", "offload", "cpu_adam", "core"},
    "train": {"train", "models", "runtime", "kernels", "offload", "cpu_adam", "core"},
    "serve": {"serve", "infer", "models", "runtime", "kernels", "offload", "cpu_adam", "core"},
    "tools": set(LAYERS) - {"python"},
    # The Python package's extension links core, cpu_adam and offload only (python/CMakeLists.txt).
    "python": {"python", "offload", "cpu_adam", "core"},
}
RUNTIME_ORDER = ["config", "trace", "launch", "device", "comm", "topology", "ops", "params",
                 "tiers", "zero", "checkpoint", "telemetry", "estimate"]
RUNTIME_RANK = {name: i for i, name in enumerate(RUNTIME_ORDER)}
# (including subfolder, included subfolder) -> the only headers of the latter it may include,
# on top of what the order allows.
RUNTIME_ONLY = {("checkpoint", "zero"): {"runtime/zero/engine.h"}}
# The runtime subfolders models/ may include.
MODELS_RUNTIME = {"params", "device", "ops"}
CUDA_DIRS = ("runtime/device/", "runtime/comm/", "kernels/cuda/")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
CUDA_HEADER = re.compile(r'^(cuda[^/]*\.h|cublas[^/]*\.h|nccl\.h|nvml\.h|curand[^/]*\.h|cuda/.*|cub/.*|thrust/.*)$')
SOURCE_EXT = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")


def cuda_allowed(rel_path):
    return rel_path.startswith(CUDA_DIRS)


def runtime_subfolder(path):
    """'zero' for runtime/zero/x.h; None for a file directly in runtime/."""
    parts = path.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "runtime" else None


def check_runtime_include(rel, lineno, header):
    """The order of runtime's subfolders, for an include in runtime/ of a runtime/ header."""
    src, dst = runtime_subfolder(rel), runtime_subfolder(header)
    if src is None or dst is None or src == dst:
        return []
    problems = []
    for sub in sorted({src, dst} - set(RUNTIME_ORDER)):
        problems.append(f"{rel}:{lineno}: runtime/{sub}/ has no place in the order of runtime's "
                        "subfolders (RUNTIME_ORDER in tests/layering/check_layers.py)")
    if problems:
        return problems
    only = RUNTIME_ONLY.get((src, dst))
    if only is not None:
        if header not in only:
            allowed = ", ".join(sorted(only))
            problems.append(f"{rel}:{lineno}: runtime/{src}/ includes \"{header}\": from "
                            f"runtime/{dst}/ it may include only {allowed}")
        return problems
    if RUNTIME_RANK[dst] > RUNTIME_RANK[src]:
        problems.append(f"{rel}:{lineno}: runtime/{src}/ includes \"{header}\" from "
                        f"runtime/{dst}/, which comes after it in the order of runtime's "
                        "subfolders")
    return problems


def check(root):
    problems = []
    for layer in LAYERS:
        for dirpath, dirnames, files in os.walk(os.path.join(root, layer)):
            dirnames.sort()
            for name in sorted(files):
                if not name.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                with open(path, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        header = m.group(2)
                        top = header.split("/", 1)[0]
                        if m.group(1) == '"' and top in ALLOWED and top not in ALLOWED[layer]:
                            problems.append(f"{rel}:{lineno}: {layer}/ includes \"{header}\" from "
                                            f"{top}/, which it does not depend on")
                        if m.group(1) == '"' and layer == "models" and top == "runtime":
                            sub = header.split("/")[1] if header.count("/") >= 2 else ""
                            if sub not in MODELS_RUNTIME:
                                allowed = ", ".join(f"runtime/{s}/" for s in sorted(MODELS_RUNTIME))
                                problems.append(f"{rel}:{lineno}: models/ includes \"{header}\": a model "
                                                f"reaches the runtime only through {allowed}")
                        if m.group(1) == '"' and layer == "runtime" and top == "runtime":
                            problems += check_runtime_include(rel, lineno, header)
                        if CUDA_HEADER.match(header) and not cuda_allowed(rel):
                            problems.append(f"{rel}:{lineno}: includes the CUDA header {header}; only "
                                            "runtime/device/, runtime/comm/ and kernels/cuda/ may")
    return problems


def main():
    return checker_main.run(sys.argv, __doc__, "layering", check, lambda root: "layering: ok")


if __name__ == "__main__":
    sys.exit(main())
