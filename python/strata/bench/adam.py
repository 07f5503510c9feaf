"""CPUAdam's step against the same-pattern memory kernel (its limit), torch.optim.AdamW
(foreach; fused where this torch has it on the CPU) and DeepSpeedCPUAdam (when importable),
on the same tensors, interleaved round by round, in one run. The reference kernel runs on
CPUAdam's own tensors and threads."""
import statistics
import time

import torch

from strata import _strata
from strata.optim import CPUAdam


def _tensors(n, seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.randn(n, generator=g)
    grad = torch.randn(n, generator=g) * 1e-3
    return p, grad


def _interleaved(kernels, reps):
    """Every kernel once untimed, then `reps` rounds of each in turn (drift hits all alike);
    the median per kernel, and its spread ((max - min) / median)."""
    for _, fn in kernels:
        fn()
    times = {name: [] for name, _ in kernels}
    for _ in range(reps):
        for name, fn in kernels:
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: (statistics.median(t), (max(t) - min(t)) / statistics.median(t))
            for name, t in times.items()}


def run(report, params_list, threads_list, reps):
    report.note(f"simd={_strata.simd_level()} cpus={_strata.cpu_count()} torch={torch.__version__}")
    for n in params_list:
        for threads in threads_list:
            torch.set_num_threads(threads or _strata.cpu_count())
            p, grad = _tensors(n, 1)
            m, v = torch.zeros(n), torch.zeros(n)
            p.grad = grad
            opt = CPUAdam([p], lr=1e-3, weight_decay=0.01, threads=threads)
            opt.step()  # its states exist: the reference kernel runs on them too
            st = opt.state[p]
            del m, v
            kernels = [("reference", lambda: _strata.reference_kernel(
                           p.detach(), grad, st["exp_avg"], st["exp_avg_sq"], threads=threads)),
                       ("strata", opt.step)]
            q = p.detach().clone().requires_grad_()
            q.grad = grad
            kernels.append(("torch_foreach", torch.optim.AdamW(
                [q], lr=1e-3, weight_decay=0.01, foreach=True).step))
            try:
                kernels.append(("torch_fused", torch.optim.AdamW(
                    [q], lr=1e-3, weight_decay=0.01, fused=True).step))
            except (TypeError, RuntimeError) as e:
                report.note(f"torch fused AdamW not run: {str(e).splitlines()[0][:100]}")
            try:
                from deepspeed.ops.adam import DeepSpeedCPUAdam
                kernels.append(("deepspeed", DeepSpeedCPUAdam([q], lr=1e-3,
                                                              weight_decay=0.01).step))
            except Exception as e:  # noqa: BLE001 - not installed, or its op does not build
                report.note(f"DeepSpeedCPUAdam not run: {type(e).__name__}: {str(e)[:100]}")
            cells = _interleaved(kernels, reps)
            ref_s = cells["reference"][0]
            for name, (sec, spread) in cells.items():
                row = {"bench": "adam", "kernel": name, "params": n, "threads": threads or
                       _strata.cpu_count(), "median_s": sec, "params_per_s": n / sec,
                       "ratio_to_limit": ref_s / sec, "spread": spread}
                if name != "strata":
                    row["strata_speedup"] = sec / cells["strata"][0]
                report.add(row)
            del kernels, opt, q
