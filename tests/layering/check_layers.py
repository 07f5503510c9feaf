#!/usr/bin/env python3
"""Checks that #includes follow the layer arrows of docs/architecture.md.

Each layer may include project headers from itself and from the layers it links (the
CMake targets' dependencies): core <- cpu_adam, offload, kernels (siblings: none includes
another) <- runtime <- models <- tools. CUDA headers (cuda*.h, cublas*.h, nccl.h, nvml.h,
curand*.h, <cuda/...>, cub, thrust) may be included only in runtime/device/, runtime/comm/
and kernels/cuda/ (and tests): everything else builds without a GPU stack.

Usage: check_layers.py ROOT   (exit 1 and one line per violation when any is found)
"""
import os
import re
import sys

LAYERS = ["core", "cpu_adam", "offload", "kernels", "runtime", "models", "tools"]
ALLOWED = {
    "core": {"core"},
    "cpu_adam": {"cpu_adam", "core"},
    "offload": {"offload", "core"},
    "kernels": {"kernels", "core"},
    "runtime": {"runtime", "kernels", "offload", "cpu_adam", "core"},
    "models": {"models", "runtime", "kernels", "offload", "cpu_adam", "core"},
    "tools": set(LAYERS),
}
CUDA_DIRS = ("runtime/device/", "runtime/comm/", "kernels/cuda/")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
CUDA_HEADER = re.compile(r'^(cuda[^/]*\.h|cublas[^/]*\.h|nccl\.h|nvml\.h|curand[^/]*\.h|cuda/.*|cub/.*|thrust/.*)$')
SOURCE_EXT = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")


def cuda_allowed(rel_path):
    return rel_path.startswith(CUDA_DIRS)


def check(root):
    problems = []
    for layer in LAYERS:
        for dirpath, _, files in os.walk(os.path.join(root, layer)):
            for name in files:
                if not name.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
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
                        if CUDA_HEADER.match(header) and not cuda_allowed(rel):
                            problems.append(f"{rel}:{lineno}: includes the CUDA header {header}; only "
                                            "runtime/device/, runtime/comm/ and kernels/cuda/ may")
    return problems


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} layering violation(s)")
        return 1
    print("layering: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
