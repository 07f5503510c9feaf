"""strata.offload.OffloadOptimizer: Adam(W) for any model on any device with the fp32 master
weights and moments off the device, in strata's pinned pool (states="cpu") or its NVMe swap
space (states="nvme"), what torchao's CPUOffloadOptimizer does, plus NVMe, exact clipping and
gradient accumulation.

    opt = OffloadOptimizer(model.parameters(), lr=1e-4, states="nvme", nvme_path="/nvme",
                           clip_grad_norm=1.0)
    for batch in data:
        model(batch).loss.backward()     # hooks take each gradient to the host as it lands
        opt.step()                       # Adam on strata's threads; new params on the device
        opt.zero_grad()

How a step runs. Each parameter gets a gradient hook (post-accumulate-grad hooks where this
torch has them, tensor hooks otherwise) that accumulates its gradient into an fp32 host
buffer as soon as backward has produced it, and frees the device gradient (post-accumulate
hooks) so that `p.grad` stays None. Without clipping, a parameter's Adam starts on a worker
thread as soon as its last micro-batch's gradient is in (gradient_accumulation_steps), while
backward goes on; with clip_grad_norm it waits for the global norm, computed at step() from
the host gradients. step() waits for the updates and copies each new master weight into its
parameter (rounded to its dtype) before it returns; with overlap_next_forward=True (and
model=) it returns once the parameters outside the model's blocks (the modules of its
nn.ModuleList / nn.Sequential: a transformer's layers) are updated, and each block's next
forward waits for its own parameters only, so the updates overlap the next forward as the
engine's speculative path does.

Clipping is torch.nn.utils.clip_grad_norm_'s math (coef = max_norm / (norm + 1e-6), clamped to
1, applied to the gradient), then Adam(W) as torch computes it; the gradients are summed over
micro-batches in fp32 in backward's order, as .grad accumulates. States on NVMe give the same
bits as states in pinned memory: the same step on the same values. Clip with
clip_grad_norm=, not torch.nn.utils.clip_grad_norm_: the gradients are on the host (and
`p.grad` is None where post-accumulate-grad hooks exist) by the time backward returns.
"""
import concurrent.futures
import math

import torch

from strata import _strata
from strata._offload_store import KINDS, make_store
from strata._util import error, param_name, resolve_threads
from strata.checkpoint import load_folder, save_folder

_HAS_POST_ACC_HOOK = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")


class _Slot:
    """One parameter: its host gradient accumulator and bookkeeping."""

    def __init__(self, index, group_index, p):
        self.index, self.group_index, self.param = index, group_index, p
        self.numel, self.shape, self.dtype = p.numel(), tuple(p.shape), p.dtype
        self.grad = None       # fp32 host accumulator, made at the first gradient
        self.stage = None      # a device gradient's host copy (device params only)
        self.micro = 0         # gradients received since the last step
        self.step = 0
        self.future = None     # the eager update in flight
        self.hook = None


class OffloadOptimizer(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                 adamw_mode=True, bias_correction=True, states="cpu", nvme_path=None,
                 clip_grad_norm=None, gradient_accumulation_steps=1, threads=None,
                 block_size=1 << 20, queue_depth=32, checksum=True, overlap_next_forward=False,
                 model=None):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        bias_correction=bias_correction)
        super().__init__(params, defaults)
        if clip_grad_norm is not None and not (clip_grad_norm > 0 and math.isfinite(clip_grad_norm)):
            raise error(f"clip_grad_norm={clip_grad_norm!r} is not a positive number",
                        "OffloadOptimizer", "pass a max norm such as 1.0, or None")
        if not isinstance(gradient_accumulation_steps, int) or gradient_accumulation_steps < 1:
            raise error(f"gradient_accumulation_steps={gradient_accumulation_steps!r} is not a "
                        "count >= 1", "OffloadOptimizer", "pass 1 or more")
        if overlap_next_forward and not isinstance(model, torch.nn.Module):
            raise error("overlap_next_forward=True needs the model", "OffloadOptimizer",
                        "pass model=<the nn.Module>: each module's next forward waits for its "
                        "own parameters' update")
        self.overlap = bool(overlap_next_forward)
        self.adamw_mode = bool(adamw_mode)
        self.clip_grad_norm = clip_grad_norm
        self.accumulation = gradient_accumulation_steps
        self.threads = resolve_threads(threads)
        self.states_kind = states
        self.last_grad_norm = None
        self._slots = []
        self._by_param = {}
        for gi, group in enumerate(self.param_groups):
            for pi, p in enumerate(group["params"]):
                if p.dtype not in (torch.float32, torch.bfloat16, torch.float16):
                    raise error(f"the parameter has dtype {p.dtype}", param_name(gi, pi),
                                "use float32, bfloat16 or float16 parameters")
                if p in self._by_param:
                    raise error("the parameter appears twice", param_name(gi, pi),
                                "give each parameter once")
                slot = _Slot(len(self._slots), gi, p)
                self._slots.append(slot)
                self._by_param[p] = slot
        # At least one element per store slot: an empty parameter keeps a 4-byte extent.
        self._store = make_store(states, [max(s.numel, 1) for s in self._slots], nvme_path,
                                 block_size, queue_depth, checksum)
        for s in self._slots:
            self._store.init(s.index, s.param.detach().to("cpu", torch.float32).reshape(-1))
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="strata-adam")
        self._eager = clip_grad_norm is None
        for s in self._slots:
            if s.param.requires_grad:
                self._install_hook(s)
        self._forward_hooks = []
        self._jobs = []           # the worker's jobs in flight (their writes may outlast futures)
        self._at_step = []        # overlap: slots step() still waits for (outside every block)
        if self.overlap:
            self._hook_blocks(model)
        self._constructed = True

    def add_param_group(self, param_group):
        if getattr(self, "_constructed", False):
            raise error("OffloadOptimizer's parameters are fixed when it is made (their states "
                        "and hooks are set up then)", "add_param_group",
                        "give every parameter group to the constructor")
        super().add_param_group(param_group)

    def _hook_blocks(self, model):
        # The blocks: the modules held by an nn.ModuleList / nn.Sequential (a transformer's
        # layers), outermost only. A block's forward waits for every parameter in it, however
        # deep (nn.MultiheadAttention reads out_proj's weight without calling out_proj); the
        # parameters outside every block (embeddings, head, final norm) are waited for by
        # step(), and updated first.
        blocks, inside = [], set()
        for parent in model.modules():
            if id(parent) in inside or not isinstance(parent, (torch.nn.ModuleList,
                                                               torch.nn.Sequential)):
                continue
            for child in parent.children():
                if id(child) not in inside:
                    blocks.append(child)
                    inside.update(id(m) for m in child.modules())
        in_block = set()
        for block in blocks:
            own = [self._by_param[p] for p in block.parameters() if p in self._by_param]
            in_block.update(s.index for s in own)
            if own:
                self._forward_hooks.append(block.register_forward_pre_hook(
                    lambda mod, inputs, own=own: self._await(own)))
        self._at_step = [s for s in self._slots if s.index not in in_block]

    # --- gradients ---------------------------------------------------------------------------
    def _install_hook(self, slot):
        if _HAS_POST_ACC_HOOK:
            def hook(p, slot=slot):
                self._take_grad(slot, p.grad)
                p.grad = None  # the host holds it now; the device's memory goes back
            slot.hook = slot.param.register_post_accumulate_grad_hook(hook)
        else:
            def hook(grad, slot=slot):
                self._take_grad(slot, grad)
                # p.grad still accumulates on this torch; step() / zero_grad() clear it.
            slot.hook = slot.param.register_hook(hook)

    def _take_grad(self, slot, grad):
        where = param_name(slot.group_index, slot.index)
        if tuple(slot.param.shape) != slot.shape or grad.numel() != slot.numel:
            raise error(f"the parameter changed shape: {slot.shape} when the optimizer was "
                        f"made, {tuple(slot.param.shape)} now", where,
                        "parameters must keep their shape; build a new optimizer after resizing")
        if slot.micro >= self.accumulation and self._eager:
            raise error(f"the parameter received gradient {slot.micro + 1} of a step with "
                        f"gradient_accumulation_steps={self.accumulation}; its update had "
                        "already started", where,
                        "pass gradient_accumulation_steps=<backward passes per step>")
        if slot.micro == 0 and slot.future is not None:
            self._await([slot])  # the last step's update (overlap_next_forward) reads slot.grad
        grad = grad.detach()
        if grad.is_sparse:
            raise error("the gradient is sparse", where, "use dense gradients")
        if slot.grad is None:
            slot.grad = torch.empty(slot.numel, dtype=torch.float32)
        if grad.device.type != "cpu":
            # Off the device as soon as it exists: a pinned stage of the gradient's dtype, the
            # copy ordered after backward's kernel on its stream, waited for before use.
            if slot.stage is None:
                from strata.io import pinned_empty
                slot.stage = pinned_empty(slot.numel, grad.dtype)
            slot.stage.copy_(grad.reshape(-1), non_blocking=True)
            torch.cuda.current_stream(grad.device).synchronize()
            grad = slot.stage
        _strata.accumulate(slot.grad, grad.reshape(-1).contiguous(), first=slot.micro == 0,
                           threads=self.threads)
        slot.micro += 1
        if self._eager and slot.micro == self.accumulation:
            self._submit([slot], 1.0)

    # --- the update --------------------------------------------------------------------------
    def _submit(self, slots, coef):
        """Runs _update(slots, coef) on the worker; each slot's future completes when its
        parameter holds its new value (so a module's forward may wait for its own only)."""
        # The worker gets the futures themselves: the main thread clears slot.future when it
        # takes one to wait on.
        futures = {}
        for s in slots:
            s.future = futures[s.index] = concurrent.futures.Future()
        # The hyper-parameters as of now: a scheduler may change lr before the worker is done.
        self._jobs.append(self._worker.submit(self._update_and_signal, slots, coef,
                                              self._hyper(), futures))

    def _hyper(self):
        return [{k: g[k] for k in ("lr", "betas", "eps", "weight_decay", "bias_correction")}
                for g in self.param_groups]

    def _update_and_signal(self, slots, coef, hyper, futures):
        try:
            self._update(slots, coef, hyper, futures)
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits
            for f in futures.values():
                if not f.done():
                    f.set_exception(e)

    def _await(self, slots):
        for s in slots:
            if s.future is not None:
                future, s.future = s.future, None
                future.result()

    def _update(self, slots, coef, hyper, futures=None):
        """Adam on the host states of `slots` (grads scaled by coef), on the worker thread or
        the caller's; the new master weights are in the store and in the parameters."""
        def one(i, states):
            slot = self._slots[i]
            slot.step += 1
            if slot.numel == 0:
                if futures:
                    futures[i].set_result(None)
                return
            states = {k: v[:slot.numel] for k, v in states.items()}
            group = hyper[slot.group_index]
            beta1, beta2 = group["betas"]
            _strata.adam_step(states["master"], slot.grad, states["exp_avg"],
                              states["exp_avg_sq"], step=slot.step, lr=float(group["lr"]),
                              beta1=float(beta1), beta2=float(beta2), eps=float(group["eps"]),
                              weight_decay=float(group["weight_decay"]), adamw=self.adamw_mode,
                              bias_correction=bool(group["bias_correction"]), grad_scale=coef,
                              threads=self.threads)
            self._publish(slot, states["master"])
            if futures:
                futures[i].set_result(None)
        self._store.update([s.index for s in slots], one)

    def _publish(self, slot, master):
        # The new parameter, rounded to its dtype, on its device (non-blocking from pinned
        # memory is safe: the master buffer is not reused before step() synchronizes).
        with torch.no_grad():
            slot.param.data.copy_(master.view(slot.shape))

    def _global_norm(self, slots):
        sq = 0.0
        for s in slots:  # in parameter order: the same sum every run
            sq += _strata.grad_sq_norm(s.grad, threads=self.threads)
        return math.sqrt(sq)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for s in self._slots:
            # Groups may have changed lr (schedulers) but not their parameters.
            if tuple(s.param.shape) != s.shape:
                raise error(f"the parameter changed shape: {s.shape} when the optimizer was "
                            f"made, {tuple(s.param.shape)} now",
                            param_name(s.group_index, s.index),
                            "parameters must keep their shape; build a new optimizer")
        ready = [s for s in self._slots if s.micro > 0]
        if not ready:
            raise error("step() without gradients: no parameter received one since the last "
                        "step", "OffloadOptimizer.step",
                        "call loss.backward() before step() (the hooks take the gradients)")
        if self._eager:
            if any(s.micro != self.accumulation for s in ready):
                bad = next(s for s in ready if s.micro != self.accumulation)
                got = bad.micro
                self._drain()
                for s in ready:
                    s.micro = 0
                raise error(f"step() after {got} of {self.accumulation} micro-batches",
                            param_name(bad.group_index, bad.index),
                            "run gradient_accumulation_steps backward passes per step")
            if not self.overlap:
                self._drain(raise_errors=True)
            else:
                self._await(self._at_step)
        else:
            norm = self._global_norm(ready)
            self.last_grad_norm = norm
            # torch.nn.utils.clip_grad_norm_: fp32 norm, coef = max / (norm + 1e-6), clamped.
            norm32 = torch.tensor(norm, dtype=torch.float32)
            coef = float(torch.clamp(self.clip_grad_norm / (norm32 + 1e-6), max=1.0))
            if self.overlap:
                # Outside-block parameters first: step() waits for them; each block's next
                # forward waits for its own.
                first = {s.index for s in self._at_step}
                self._submit(sorted(ready, key=lambda s: s.index not in first), coef)
                self._await(self._at_step)
            else:
                self._update(ready, coef, self._hyper())
        self._jobs = [j for j in self._jobs if not j.done()]
        for s in self._slots:
            s.micro = 0
            if not _HAS_POST_ACC_HOOK:
                s.param.grad = None
        if not self.overlap and any(s.param.device.type == "cuda" for s in self._slots):
            torch.cuda.synchronize()
        return loss

    def _drain(self, raise_errors=False):
        """Waits for every update in flight (the first error is raised if asked)."""
        first = None
        for s in self._slots:
            if s.future is not None:
                future, s.future = s.future, None
                try:
                    future.result()
                except Exception as e:  # noqa: BLE001 - the first is re-raised below
                    first = first or e
        for job in self._jobs:  # a job's last writes land after its last future is set
            job.result()
        self._jobs = []
        if first is not None and raise_errors:
            raise first

    def zero_grad(self, set_to_none=True):
        # The host accumulators restart at the next gradient (micro == 0 stores, not adds).
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    # --- state -------------------------------------------------------------------------------
    def state_dict(self):
        """torch's Adam layout (`step`, `exp_avg`, `exp_avg_sq` per parameter index, fp32 host
        tensors), plus `master_param` for bf16 / fp16 parameters; loads into torch's AdamW."""
        self._drain(raise_errors=True)
        state = {}
        for s in self._slots:
            if s.step == 0:
                continue
            st = {k: v[:s.numel] for k, v in self._store.read(s.index).items()}
            entry = {"step": torch.tensor(float(s.step)),
                     "exp_avg": st["exp_avg"].view(s.shape).clone(),
                     "exp_avg_sq": st["exp_avg_sq"].view(s.shape).clone()}
            if s.dtype != torch.float32:
                entry["master_param"] = st["master"].view(s.shape).clone()
            state[s.index] = entry
        groups = []
        for group in self.param_groups:
            g = {k: v for k, v in group.items() if k != "params"}
            g["params"] = [self._by_param[p].index for p in group["params"]]
            groups.append(g)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        self._drain()
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
                len(g["params"]) != len(h["params"]) for g, h in zip(groups, self.param_groups)):
            raise error("the state_dict's param groups do not match this optimizer's",
                        "load_state_dict", "load a state_dict of the same model")
        ids = [i for g in groups for i in g["params"]]
        for saved, group in zip(groups, self.param_groups):
            for k, v in saved.items():
                if k != "params":
                    group[k] = v
        for key, saved in state_dict["state"].items():
            s = self._slots[ids.index(key)]
            st = {}
            for k in ("exp_avg", "exp_avg_sq"):
                if saved[k].numel() != s.numel:
                    raise error(f"'{k}' has {saved[k].numel()} elements, the parameter "
                                f"{s.numel}", f"state[{key}]", "load a state_dict of the same model")
                st[k] = saved[k].detach().to("cpu", torch.float32).reshape(-1)
            master = saved.get("master_param")
            st["master"] = (master if master is not None else s.param.detach()).to(
                "cpu", torch.float32).reshape(-1)
            self._store.write(s.index, st)
            self._publish(s, st["master"])
            s.step = int(float(saved["step"]))

    def save(self, folder):
        """Writes the optimizer (states, steps, hyper-parameters) to a new checkpoint folder,
        atomically (written beside it, synced, renamed), through strata's I/O engine."""
        save_folder(folder, self.state_dict(), [s.shape for s in self._slots])

    def load(self, folder):
        """Loads a folder written by save() (the same model's parameters, in order)."""
        self.load_state_dict(load_folder(folder, [s.shape for s in self._slots]))

    def describe(self):
        return (f"OffloadOptimizer: {len(self._slots)} parameters, "
                f"{sum(s.numel for s in self._slots):,} elements; states in "
                f"{self._store.describe()}; clipping "
                f"{self.clip_grad_norm if self.clip_grad_norm else 'off'}; "
                f"{'post-accumulate-grad' if _HAS_POST_ACC_HOOK else 'tensor'} hooks")

    def close(self):
        """Removes the hooks, stops the worker and frees the states (NVMe files removed)."""
        self._drain()
        for h in getattr(self, "_forward_hooks", []):
            h.remove()
        self._forward_hooks = []
        for s in self._slots:
            if s.hook is not None:
                s.hook.remove()
                s.hook = None
        self._worker.shutdown()
        self._store.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter teardown
            pass


__all__ = ["OffloadOptimizer", "KINDS"]
