"""The package installs into a fresh venv (python3 -m venv --system-site-packages, Debian's
torch visible) with the README's command, and works from there. The install packages the
extension the release preset built (STRATA_PYTHON_PREBUILT): no second C++ compile. Offline:
pip's build isolation takes scikit-build-core and nanobind from the wheelhouse setup.sh keeps
in the build venv."""
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")

README_COMMAND = ["pip", "install", "./python"]


def _need(var):
    value = os.environ.get(var)
    if not value:
        pytest.skip(f"{var} is not set (run through ctest from the release build)")
    return value


def test_fresh_venv_install():
    build = _need("STRATA_BUILD_DIR")
    source = _need("STRATA_SOURCE_DIR")
    venv_build = os.environ.get("STRATA_PYTHON_VENV", os.path.join(source, "build", "pyenv"))
    wheelhouse = os.path.join(venv_build, "wheelhouse")
    if not os.path.isdir(wheelhouse):
        pytest.skip(f"no wheelhouse at {wheelhouse} (scripts/setup.sh makes it)")
    with open(os.path.join(source, "README.md")) as f:
        assert " ".join(README_COMMAND) in f.read(), "README.md no longer names the command"
    venv = os.path.join(build, "python", f"install-test-{os.getpid()}")
    shutil.rmtree(venv, ignore_errors=True)
    try:
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv],
                       check=True, timeout=300)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(STRATA_PYTHON_PREBUILT=os.path.join(build, "python", "strata"),
                   PIP_NO_INDEX="1", PIP_FIND_LINKS=wheelhouse,
                   PIP_DISABLE_PIP_VERSION_CHECK="1", PATH=os.path.join(venv, "bin") + ":" +
                   env.get("PATH", ""))
        out = subprocess.run([*README_COMMAND, "-v"], cwd=source, env=env, capture_output=True,
                             text=True, timeout=600)
        log = out.stdout + out.stderr
        assert out.returncode == 0, log[-6000:]
        assert "Successfully installed strata" in log, log[-3000:]
        # Packaged, not compiled: no strata source went through the compiler.
        assert "adam_avx2.cpp" not in log and "aio_engine.cpp" not in log
        check = ("import strata, torch\n"
                 "from strata.optim import CPUAdam\n"
                 "p = torch.ones(10); p.grad = torch.ones(10)\n"
                 "CPUAdam([p], lr=0.1).step()\n"
                 "assert abs(float(p[0]) - 0.9) < 1e-6, p\n"
                 "print(strata.__file__)\n")
        run = subprocess.run([os.path.join(venv, "bin", "python"), "-c", check], cwd=venv,
                             env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        assert run.stdout.strip().startswith(venv), run.stdout
    finally:
        shutil.rmtree(venv, ignore_errors=True)
