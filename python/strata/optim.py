"""strata.optim.CPUAdam: a drop-in for deepspeed.ops.adam.DeepSpeedCPUAdam.

The same constructor (lr, bias_correction, betas, eps, weight_decay, amsgrad, adamw_mode,
fp32_optimizer_states), a torch.optim.Optimizer (param groups, LR schedulers, closures), the
step on strata's vectorized CPU Adam (SIMD chosen at run time, OpenMP threads: `threads` or
STRATA_CPU_THREADS, else every CPU of the affinity mask), with the GIL released.

States are torch's Adam layout (`step` as a float tensor, `exp_avg`, `exp_avg_sq`, fp32), so a
state_dict loads into torch.optim.AdamW / Adam and back. bf16 / fp16 parameters keep an fp32
master copy in the state (`master_param`, ignored by torch) that the update is computed on; the
parameter receives it rounded to nearest even, so rounding errors do not pile up step after
step as they would updating a bf16 tensor in place.
"""
import itertools

import torch

from strata import _strata
from strata._util import error, param_name, resolve_threads

_STATE_FLOATS = ("exp_avg", "exp_avg_sq", "master_param")


class CPUAdam(torch.optim.Optimizer):
    def __init__(self, model_params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=0, amsgrad=False, adamw_mode=True, fp32_optimizer_states=True,
                 threads=None):
        if amsgrad:
            raise error("amsgrad=True is not supported", "CPUAdam",
                        "use amsgrad=False (DeepSpeedCPUAdam does not support it either)")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        bias_correction=bias_correction, amsgrad=False)
        super().__init__(model_params, defaults)
        self.adamw_mode = bool(adamw_mode)
        # States are fp32 whatever this says: a bf16 / fp16 Adam state loses the small second
        # moments. Kept as an argument so DeepSpeedCPUAdam's call sites run unchanged.
        self.fp32_optimizer_states = fp32_optimizer_states
        self.threads = resolve_threads(threads)
        for gi, group in enumerate(self.param_groups):
            self._check_group(gi, group)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:  # torch's AdamW groups lack these
            group.setdefault("bias_correction", True)
            group.setdefault("amsgrad", False)

    def _check_group(self, gi, group):
        for key in ("lr", "eps", "weight_decay"):
            value = group[key]
            if isinstance(value, torch.Tensor):
                value = float(value)
            if not isinstance(value, (int, float)) or value != value or value < 0:
                raise error(f"{key}={value!r} is invalid", f"param_groups[{gi}]['{key}']",
                            f"give {key} a finite number >= 0")
        b1, b2 = group["betas"]
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise error(f"betas={group['betas']!r} are outside [0, 1)", f"param_groups[{gi}]",
                        "use betas such as (0.9, 0.999)")
        if group.get("amsgrad", False):
            raise error("amsgrad=True is not supported", f"param_groups[{gi}]", "use amsgrad=False")

    def _check_param(self, gi, pi, p):
        where = param_name(gi, pi)
        if p.device.type != "cpu":
            raise error(f"the parameter is on {p.device}; CPUAdam updates host tensors", where,
                        "keep the parameters on the CPU, or use strata.offload.OffloadOptimizer "
                        "for a model on a device")
        if p.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise error(f"the parameter has dtype {p.dtype}", where,
                        "use float32, bfloat16 or float16 parameters")
        if not p.is_contiguous():
            raise error("the parameter is not contiguous (it is updated in place)", where,
                        "make it contiguous before building the optimizer")
        if p.grad.is_sparse:
            raise error("the gradient is sparse", where, "use dense gradients")
        if p.grad.shape != p.shape:
            raise error(f"the gradient's shape {tuple(p.grad.shape)} is not the parameter's "
                        f"{tuple(p.shape)}", where, "check the code that sets .grad")
        if p.grad.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise error(f"the gradient has dtype {p.grad.dtype}", where,
                        "use float32, bfloat16 or float16 gradients")
        state = self.state.get(p)
        if state and state["exp_avg"].numel() != p.numel():
            raise error(f"the parameter changed shape: it has {p.numel()} elements, its Adam "
                        f"state {state['exp_avg'].numel()}", where,
                        "parameters must keep their shape; build a new optimizer after resizing")

    @torch.no_grad()
    def step(self, closure=None, fp16_param_groups=None):
        """One Adam(W) step of every parameter with a gradient. fp16_param_groups
        (DeepSpeedCPUAdam's): a tensor or list of tensors per group, in the group's parameter
        order, that receive the updated parameters converted to their dtype."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # Every parameter is checked before any is updated: nothing half-updated on an error.
        copy_out = self._copy_out_targets(fp16_param_groups)
        work = []
        for gi, group in enumerate(self.param_groups):
            self._check_group(gi, group)
            for pi, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                self._check_param(gi, pi, p)
                work.append((group, p))
        for group, p in work:
            state = self.state[p]
            if not state:
                state["step"] = torch.tensor(0.0)
                state["exp_avg"] = torch.zeros(p.shape, dtype=torch.float32)
                state["exp_avg_sq"] = torch.zeros(p.shape, dtype=torch.float32)
                if p.dtype != torch.float32:
                    state["master_param"] = p.detach().to(torch.float32).contiguous()
            state["step"] += 1
            master = state.get("master_param")
            beta1, beta2 = group["betas"]
            _strata.adam_step(
                master if master is not None else p.detach(), p.grad.detach().contiguous(),
                state["exp_avg"], state["exp_avg_sq"], step=int(state["step"].item()),
                lr=float(group["lr"]), beta1=float(beta1), beta2=float(beta2),
                eps=float(group["eps"]), weight_decay=float(group["weight_decay"]),
                adamw=self.adamw_mode, bias_correction=bool(group["bias_correction"]),
                threads=self.threads,
                params_out=p.detach() if master is not None else None)
        for outs, group in zip(copy_out, self.param_groups):
            for p, out in zip(group["params"], outs):
                out.data.copy_(p.detach().view(out.shape))
        return loss

    def _copy_out_targets(self, fp16_param_groups):
        """fp16_param_groups as one list of tensors per group, checked (before any update)."""
        if fp16_param_groups is None:
            return []
        if isinstance(fp16_param_groups, torch.Tensor):
            fp16_param_groups = [fp16_param_groups]
        if len(fp16_param_groups) != len(self.param_groups):
            raise error(f"fp16_param_groups has {len(fp16_param_groups)} groups, the optimizer "
                        f"{len(self.param_groups)}", "step(fp16_param_groups=...)",
                        "pass one tensor or list of tensors per param group")
        result = []
        for gi, (group, outs) in enumerate(zip(self.param_groups, fp16_param_groups)):
            outs = [outs] if isinstance(outs, torch.Tensor) else list(outs)
            if len(outs) != len(group["params"]):
                raise error(f"group {gi} of fp16_param_groups has {len(outs)} tensors, the "
                            f"group {len(group['params'])} parameters",
                            "step(fp16_param_groups=...)", "pass one tensor per parameter")
            result.append(outs)
        return result

    def load_state_dict(self, state_dict):
        """Loads a CPUAdam's or a torch Adam / AdamW's state_dict. torch's loader would cast
        the moments to each parameter's dtype (bf16 for a bf16 parameter); here they stay
        fp32, and a bf16 / fp16 parameter without a saved master copy starts from its value."""
        saved_groups = state_dict["param_groups"]
        super().load_state_dict({"state": {}, "param_groups": saved_groups})
        ids = itertools.chain.from_iterable(g["params"] for g in saved_groups)
        params = itertools.chain.from_iterable(g["params"] for g in self.param_groups)
        by_id = dict(zip(ids, params))
        for key, saved in state_dict["state"].items():
            p = by_id.get(key)
            if p is None:
                raise error(f"the state_dict has a state for parameter {key}, which no group "
                            "holds", "load_state_dict", "load a state_dict of the same model")
            state = {}
            for name, value in saved.items():
                if name == "step":
                    state[name] = torch.tensor(float(value))
                elif name in _STATE_FLOATS:
                    if value.numel() != p.numel():
                        raise error(f"'{name}' has {value.numel()} elements, the parameter "
                                    f"{p.numel()}", f"state[{key}]",
                                    "load a state_dict of the same model")
                    state[name] = value.detach().to("cpu", torch.float32).reshape(p.shape).clone()
                else:
                    state[name] = value
            if p.dtype != torch.float32 and "master_param" not in state:
                state["master_param"] = p.detach().to(torch.float32).contiguous()
            self.state[p] = state


# DeepSpeed's name, for `from strata.optim import DeepSpeedCPUAdam` in existing code.
DeepSpeedCPUAdam = CPUAdam

__all__ = ["CPUAdam", "DeepSpeedCPUAdam"]
