"""strata.optim.CPUAdam against torch.optim.AdamW / Adam: 20 steps, within fp32 rounding
(1e-6 relative, per tensor), for fp32 / bf16 / fp16 parameters, weight decay on and off, bias
correction on and off, several groups, an LR scheduler; state_dict into torch's AdamW and back.
"""
import copy

import pytest

torch = pytest.importorskip("torch")
import strata  # noqa: E402
from strata.optim import CPUAdam  # noqa: E402

STEPS = 20
TOL = 1e-6


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def make_params(dtype, seed=0):
    # Odd sizes: tails of every SIMD width and shards above the 64K threaded threshold.
    g = torch.Generator().manual_seed(seed)
    shapes = [(7,), (33, 5), (300, 257), (1,)]
    return [torch.randn(s, generator=g).to(dtype) for s in shapes]


def grads_for(step, params, seed=1):
    g = torch.Generator().manual_seed(seed * 1000 + step)
    return [torch.randn(p.shape, generator=g) for p in params]


class BiasOffAdam:
    """Adam / AdamW without bias correction in fp32, written out (torch has no switch)."""

    def __init__(self, params, lr, betas, eps, weight_decay, adamw):
        self.params, self.lr, self.betas, self.eps = params, lr, betas, eps
        self.wd, self.adamw = weight_decay, adamw
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]

    def step(self):
        b1, b2 = self.betas
        for p, m, v in zip(self.params, self.m, self.v):
            g = p.grad.clone()
            if self.adamw:
                p.mul_(1 - self.lr * self.wd)
            else:
                g.add_(p, alpha=self.wd)
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            p.addcdiv_(m, v.sqrt().add_(self.eps), value=-self.lr)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
@pytest.mark.parametrize("adamw", [True, False])
@pytest.mark.parametrize("bias_correction", [True, False])
def test_matches_torch(dtype, weight_decay, adamw, bias_correction):
    ours = [p.clone() for p in make_params(dtype)]
    # The reference runs in fp32 on the same starting values; our bf16 / fp16 parameters are
    # the fp32 master rounded, so they equal the reference rounded.
    ref = [p.to(torch.float32).clone() for p in ours]
    hp = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=weight_decay)
    opt = CPUAdam(ours, bias_correction=bias_correction, adamw_mode=adamw, **hp)
    if bias_correction:
        ref_opt = (torch.optim.AdamW if adamw else torch.optim.Adam)(ref, **hp)
    else:
        ref_opt = BiasOffAdam(ref, adamw=adamw, **hp)
    for step in range(STEPS):
        for p, r, g in zip(ours, ref, grads_for(step, ours)):
            p.grad = g.to(dtype)
            r.grad = g.to(dtype).to(torch.float32)  # the gradient the model produced
        opt.step()
        ref_opt.step()
    for p, r in zip(ours, ref):
        state = opt.state[p]
        master = state.get("master_param", p)
        assert rel(master, r) <= TOL
        assert torch.equal(p, r.to(dtype)) or rel(p.float(), r.to(dtype).float()) <= 1e-2
        if bias_correction:
            rs = ref_opt.state[r]
            assert rel(state["exp_avg"], rs["exp_avg"]) <= TOL
            assert rel(state["exp_avg_sq"], rs["exp_avg_sq"]) <= TOL
            assert float(state["step"]) == STEPS


def test_groups_and_scheduler():
    params = make_params(torch.float32, seed=3)
    ref = [p.clone() for p in params]
    groups = [{"params": params[:2], "lr": 3e-3, "weight_decay": 0.1},
              {"params": params[2:], "betas": (0.8, 0.95), "eps": 1e-6}]
    ref_groups = [{"params": ref[:2], "lr": 3e-3, "weight_decay": 0.1},
                  {"params": ref[2:], "betas": (0.8, 0.95), "eps": 1e-6}]
    opt = CPUAdam(groups, lr=1e-2, weight_decay=0.0)
    ref_opt = torch.optim.AdamW(ref_groups, lr=1e-2, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[3e-3, 1e-2], total_steps=STEPS)
    ref_sched = torch.optim.lr_scheduler.OneCycleLR(ref_opt, max_lr=[3e-3, 1e-2],
                                                    total_steps=STEPS)
    for step in range(STEPS):
        for p, r, g in zip(params, ref, grads_for(step, params, seed=4)):
            p.grad, r.grad = g.clone(), g.clone()
        opt.step()
        ref_opt.step()
        sched.step()
        ref_sched.step()
    for p, r in zip(params, ref):
        assert rel(p, r) <= TOL


def test_state_dict_round_trip_with_torch_adamw():
    params = make_params(torch.float32, seed=5)
    ref = [p.clone() for p in params]
    opt = CPUAdam(params, lr=1e-2, weight_decay=0.01)
    ref_opt = torch.optim.AdamW(ref, lr=1e-2, weight_decay=0.01)
    for step in range(10):  # 10 steps in strata, then torch's AdamW continues from its state
        for p, r, g in zip(params, ref, grads_for(step, params)):
            p.grad, r.grad = g.clone(), g.clone()
        opt.step()
        ref_opt.step()
    moved = [p.clone() for p in params]
    torch_opt = torch.optim.AdamW(moved, lr=1e-2, weight_decay=0.01)
    torch_opt.load_state_dict(copy.deepcopy(opt.state_dict()))
    # ... and back: torch's state_dict into a fresh CPUAdam.
    back = [p.clone() for p in params]
    back_opt = CPUAdam(back, lr=1e-2, weight_decay=0.01)
    back_opt.load_state_dict(copy.deepcopy(ref_opt.state_dict()))
    for step in range(10, STEPS):
        for p, m, b, r, g in zip(params, moved, back, ref, grads_for(step, params)):
            p.grad, m.grad, b.grad, r.grad = g.clone(), g.clone(), g.clone(), g.clone()
        opt.step()
        torch_opt.step()
        back_opt.step()
        ref_opt.step()
    for p, m, b, r in zip(params, moved, back, ref):
        assert rel(p, r) <= TOL and rel(m, r) <= TOL and rel(b, r) <= TOL
    for b, r in zip(back, ref):
        assert rel(back_opt.state[b]["exp_avg_sq"], ref_opt.state[r]["exp_avg_sq"]) <= TOL


def test_bf16_state_dict_keeps_fp32_states():
    params = make_params(torch.bfloat16, seed=6)
    opt = CPUAdam(params, lr=1e-2)
    for step in range(3):
        for p, g in zip(params, grads_for(step, params)):
            p.grad = g.to(torch.bfloat16)
        opt.step()
    sd = copy.deepcopy(opt.state_dict())
    fresh = [p.clone() for p in params]
    opt2 = CPUAdam(fresh, lr=1e-2)
    opt2.load_state_dict(sd)
    for p in fresh:
        assert opt2.state[p]["exp_avg"].dtype == torch.float32
    for p, q in zip(params, fresh):
        assert torch.equal(opt.state[p]["exp_avg_sq"], opt2.state[q]["exp_avg_sq"])
        assert torch.equal(opt.state[p]["master_param"], opt2.state[q]["master_param"])


def test_threads_do_not_change_bits():
    a = make_params(torch.float32, seed=7)
    b = [p.clone() for p in a]
    oa, ob = CPUAdam(a, threads=1), CPUAdam(b, threads=0)
    for step in range(3):
        for p, q, g in zip(a, b, grads_for(step, a)):
            p.grad, q.grad = g.clone(), g.clone()
        oa.step()
        ob.step()
    assert all(torch.equal(p, q) for p, q in zip(a, b))


def test_errors():
    p = torch.zeros(10)
    with pytest.raises(strata.StrataError, match="amsgrad"):
        CPUAdam([p], amsgrad=True)
    with pytest.raises(strata.StrataError, match="lr"):
        CPUAdam([p], lr=-1.0)
    with pytest.raises(strata.StrataError, match="STRATA_CPU_THREADS"):
        import os
        os.environ["STRATA_CPU_THREADS"] = "many"
        try:
            CPUAdam([p])
        finally:
            del os.environ["STRATA_CPU_THREADS"]
    # A parameter that changed shape, next to one that is fine: neither is updated.
    good, bad = torch.ones(4), torch.ones(6)
    opt = CPUAdam([good, bad], lr=0.1)
    good.grad, bad.grad = torch.ones(4), torch.ones(6)
    opt.step()
    snapshot = (good.clone(), bad.clone())
    bad.data = torch.ones(8)
    good.grad, bad.grad = torch.ones(4), torch.ones(8)
    with pytest.raises(strata.StrataError, match="changed shape"):
        opt.step()
    assert torch.equal(good, snapshot[0])
    # Integer parameters are refused by name.
    ip = torch.zeros(3, dtype=torch.int32)
    opt = CPUAdam([ip])
    ip.grad = torch.zeros(3, dtype=torch.int32)
    with pytest.raises(strata.StrataError, match=r"param_groups\[0\]\['params'\]\[0\]"):
        opt.step()


def test_fp16_param_groups_receive_the_update():
    # DeepSpeedCPUAdam's step(fp16_param_groups=...): the updated fp32 params, converted.
    params = make_params(torch.float32, seed=8)
    halves = [p.to(torch.float16) for p in params]
    opt = CPUAdam(params, lr=1e-2)
    for p, g in zip(params, grads_for(0, params)):
        p.grad = g
    opt.step(fp16_param_groups=[halves])
    assert all(torch.equal(h, p.to(torch.float16)) for h, p in zip(halves, params))
    before = [p.clone() for p in params]
    with pytest.raises(strata.StrataError, match="fp16_param_groups"):
        opt.step(fp16_param_groups=[halves[:1]])
    assert all(torch.equal(a, b) for a, b in zip(before, params))  # refused before updating
