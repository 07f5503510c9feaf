"""OffloadOptimizer's training step against the resident step (torch AdamW, states in the
model's memory) and against the CPU Adam time alone on the same parameters: the step should
cost little more than max(resident step, Adam time)."""
import shutil
import tempfile

import torch

from strata.bench._common import time_median
from strata.offload import OffloadOptimizer
from strata.optim import CPUAdam


def _model(width, layers, seed=0):
    torch.manual_seed(seed)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*mods)


def run(report, width, layers, batch, reps, states, nvme_path):
    x = torch.randn(batch, width)

    def fwd_bwd(model):
        model(x).square().mean().backward()

    resident = _model(width, layers)
    opt = torch.optim.AdamW(resident.parameters(), lr=1e-4)

    def resident_step():
        fwd_bwd(resident)
        opt.step()
        opt.zero_grad()

    res_s, _ = time_median(resident_step, reps)
    adam_model = _model(width, layers)
    fwd_bwd(adam_model)
    cpu_adam = CPUAdam(adam_model.parameters(), lr=1e-4)
    adam_s, _ = time_median(cpu_adam.step, reps)
    n = sum(p.numel() for p in resident.parameters())
    for kind in states:
        tmp = None
        if kind == "nvme" and nvme_path is None:
            tmp = nvme_path = tempfile.mkdtemp(prefix="strata-bench-")
        model = _model(width, layers)
        off = OffloadOptimizer(model.parameters(), lr=1e-4, states=kind, nvme_path=nvme_path)

        def offload_step():
            fwd_bwd(model)
            off.step()
            off.zero_grad()

        off_s, spread = time_median(offload_step, reps)
        bound = max(res_s, adam_s)
        report.add({"bench": "offload", "states": kind, "params": n, "step_s": off_s,
                    "resident_step_s": res_s, "cpu_adam_s": adam_s,
                    "ratio_to_bound": off_s / bound, "spread": spread})
        off.close()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
