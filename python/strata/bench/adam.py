"""CPUAdam's step against the same-pattern memory kernel (its limit), torch.optim.AdamW
(foreach; fused where this torch has it on the CPU) and DeepSpeedCPUAdam (when importable),
on the same tensors, interleaved, in one run."""
import torch

from strata import _strata
from strata.bench._common import time_median
from strata.optim import CPUAdam


def _tensors(n, seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.randn(n, generator=g)
    grad = torch.randn(n, generator=g) * 1e-3
    return p, grad


def run(report, params_list, threads_list, reps):
    report.note(f"simd={_strata.simd_level()} cpus={_strata.cpu_count()} torch={torch.__version__}")
    for n in params_list:
        for threads in threads_list:
            torch_threads = threads or _strata.cpu_count()
            torch.set_num_threads(torch_threads)
            p, grad = _tensors(n, 1)
            m, v = torch.zeros(n), torch.zeros(n)
            cells = {}
            cells["reference"] = time_median(
                lambda: _strata.reference_kernel(p, grad, m, v, threads=threads), reps)
            p.grad = grad
            opt = CPUAdam([p], lr=1e-3, weight_decay=0.01, threads=threads)
            cells["strata"] = time_median(opt.step, reps)
            del opt
            q = p.detach().clone().requires_grad_()
            q.grad = grad
            t_opt = torch.optim.AdamW([q], lr=1e-3, weight_decay=0.01, foreach=True)
            cells["torch_foreach"] = time_median(t_opt.step, reps)
            del t_opt
            try:
                f_opt = torch.optim.AdamW([q], lr=1e-3, weight_decay=0.01, fused=True)
                cells["torch_fused"] = time_median(f_opt.step, reps)
                del f_opt
            except (TypeError, RuntimeError) as e:
                report.note(f"torch fused AdamW not run: {str(e).splitlines()[0][:100]}")
            try:
                from deepspeed.ops.adam import DeepSpeedCPUAdam
                d_opt = DeepSpeedCPUAdam([q], lr=1e-3, weight_decay=0.01)
                cells["deepspeed"] = time_median(d_opt.step, reps)
                del d_opt
            except Exception as e:  # noqa: BLE001 - not installed, or its op does not build
                report.note(f"DeepSpeedCPUAdam not run: {type(e).__name__}: {str(e)[:100]}")
            del q
            ref_s = cells["reference"][0]
            for name, (sec, spread) in cells.items():
                row = {"bench": "adam", "kernel": name, "params": n, "threads": threads or
                       _strata.cpu_count(), "median_s": sec, "params_per_s": n / sec,
                       "ratio_to_limit": ref_s / sec, "spread": spread}
                if name != "strata":
                    row["strata_speedup"] = sec / cells["strata"][0]
                report.add(row)
