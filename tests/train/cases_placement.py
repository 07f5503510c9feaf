"""Cases of check_train.py: the same run with its states in any tier gives the same bits
(placement_*), ZeRO stages at one rank (stages), and two identical runs (determinism)."""
import math
import os
from typing import NamedTuple

from train_util import TINY, Run, check, compare_bitwise, ds_config, tail

STEPS = 4


class Variant(NamedTuple):
    name: str
    opt: str                   # offload_optimizer.device
    param: str = "none"        # offload_param.device
    zero: dict = None          # more zero_optimization keys
    flags: tuple = ()          # more strata train flags
    strata: dict = None        # more keys of the config's "strata" section


def placement_variants(stage):
    v = [Variant("opt=none", "none"), Variant("opt=cpu", "cpu"), Variant("opt=nvme", "nvme"),
         # several optimizer sub-groups per module, read ahead and written behind
         Variant("opt=nvme sub_group_size=40000 pipelined", "nvme",
                 zero={"sub_group_size": 40000,
                       "offload_optimizer": {"pipeline_read": True, "pipeline_write": True}})]
    if stage == 3:
        v += [Variant("opt=cpu param=cpu", "cpu", "cpu"),
              Variant("opt=cpu param=nvme", "cpu", "nvme"),
              Variant("opt=nvme param=cpu", "nvme", "cpu"),
              Variant("opt=nvme param=nvme", "nvme", "nvme"),
              # half of the optimizer states offloaded, the rest on the device
              Variant("opt=cpu ratio=0.5", "cpu", zero={"offload_optimizer": {"ratio": 0.5}}),
              # every module fetched (none persistent), small prefetch and live limits
              Variant("opt=nvme param=nvme small buckets", "nvme", "nvme",
                      zero={"stage3_param_persistence_threshold": 0,
                            "stage3_prefetch_bucket_size": 100000,
                            "stage3_max_live_parameters": 250000,
                            "stage3_max_reuse_distance": 0}),
              # backward fetches each block again to recompute it (another fetch order)
              Variant("opt=nvme param=nvme checkpointing", "nvme", "nvme",
                      zero={"stage3_param_persistence_threshold": 0},
                      flags=("--activation-checkpointing",)),
              # the pread/pwrite engine, buffered I/O, every block checksummed
              Variant("opt=nvme param=nvme threads buffered checksum", "nvme", "nvme",
                      strata={"io_backend": "threads", "direct_io": "off", "checksum": True})]
    return v


TIER = {"none": "device", "cpu": "pinned host", "nvme": "nvme"}


def check_placed(run, v):
    """The states went where the config says (else the comparison would prove nothing): the
    plan's lines name the tier of the optimizer states and parameter shards, and the metrics
    show the traffic that placement implies."""
    opt, param = v.opt, v.param
    lines = run.plan_lines()
    opt_tiers = {tier for tier, what in lines if what.startswith("optimizer states")}
    want = {TIER[opt]}
    if (v.zero or {}).get("offload_optimizer", {}).get("ratio", 1) < 1:
        want.add("device")
    check(opt_tiers == want, f"{run.name}: optimizer states planned in {sorted(opt_tiers)}, "
                             f"expected {sorted(want)}; plan lines: {lines}")
    shard_tiers = {tier for tier, what in lines if what.startswith("parameter shards")}
    check(shard_tiers == ({TIER[param]} if param != "none" else set()),
          f"{run.name}: parameter shards planned in {sorted(shard_tiers)}; plan lines: {lines}")
    metrics = run.metric_lines()
    if opt == "none" and param == "none":
        for m in metrics:
            b = m["bytes"]
            check(b["h2d"] == b["d2h"] == b["nvme_read"] == b["nvme_write"] == 0,
                  f"{run.name}: step {m['step']} moved {b} with every state on the device")
    # Totals over the run: when a transfer happens (and so which step's line counts it) is the
    # engine's choice; an update may be applied and pushed during the next step.
    total = {k: sum(m["bytes"][k] for m in metrics) for k in ("h2d", "d2h", "nvme_read", "nvme_write")}
    if opt != "none":
        check(total["d2h"] > 0 and total["h2d"] > 0,
              f"{run.name}: bytes over {len(metrics)} steps {total}: no gradient D2H / parameter H2D")
    if "nvme" in (opt, param):
        check(total["nvme_read"] > 0 and total["nvme_write"] > 0,
              f"{run.name}: bytes over {len(metrics)} steps {total}: no NVMe traffic")
        check(all(m["memory"]["nvme"]["current_bytes"] > 0 for m in metrics),
              f"{run.name}: nothing on NVMe")


# fp16 with dynamic loss scaling from 2^19 and hysteresis 1: the first steps overflow and are
# skipped (the scale halves), the later ones update; both paths must agree across tiers.
FP16 = {"fp16": {"enabled": True, "initial_scale_power": 19, "hysteresis": 1}}


def placement(strata, root, stage, precision="fp32", only=None, steps=STEPS, grad_accum=None):
    """grad_accum: data_types.grad_accum_dtype (None: the default, fp32)."""
    variants = placement_variants(stage)
    if only:
        variants = [v for v in variants if v.name in only]
    runs = []
    for v in variants:
        tag = ("" if precision == "fp32" else "-" + precision) + (f"-acc-{grad_accum}" if grad_accum else "")
        run = Run(root, f"s{stage}{tag} {v.name}".replace(" ", "_").replace("=", "-"))
        extra = dict(FP16) if precision == "fp16" else {}
        if grad_accum:
            extra["data_types"] = {"grad_accum_dtype": grad_accum}
        config = ds_config(stage, v.opt, v.param, nvme=run.nvme, bf16=precision == "bf16",
                           extra_zero=v.zero, extra=extra)
        config["strata"].update(v.strata or {})
        run.write_config(config)
        if "nvme" in (v.opt, v.param):
            os.makedirs(run.nvme, exist_ok=True)
        run.start(strata, TINY + ["--steps", str(steps)] + list(v.flags))
        run.expect_ok()
        check(f"parameters, {precision}, ZeRO stage {stage}" in run.result.stderr,
              f"{run.name}: the start line does not say {precision}, stage {stage}:\n"
              f"{tail(run.result.stderr, 30)}")
        check(len(run.metric_lines()) == steps, f"{run.name}: {len(run.metric_lines())} metrics lines")
        check(not run.swap_leftovers(), f"{run.name}: left in the swap folder: {run.swap_leftovers()}")
        check_placed(run, v)
        runs.append((v.name, run))
    base_name, base = runs[0]
    losses = base.losses()
    check(all(math.isfinite(x) for x in losses), f"{base.name}: losses {losses}")
    for name, run in runs[1:]:
        print(f"  stage {stage} {precision}: {name} == {base_name}: "
              f"{compare_bitwise(base, run)} ({run.seconds:.1f} s)")
    return runs


def case_placement_stage(stage):
    def case(strata, root):
        placement(strata, root, stage)
    return case


HALF_VARIANTS = {"opt=none", "opt=cpu param=cpu", "opt=nvme param=nvme", "opt=nvme param=cpu"}


def case_placement_bf16(strata, root):
    placement(strata, root, 3, "bf16", only=HALF_VARIANTS)


def accumulator_lines(run):
    """The plan's gradient accumulator lines, {tier: the rest of the line}."""
    out = {}
    for tier, what in run.plan_lines():
        if "gradient accumulators" in what:
            out[tier] = what
    return out


def case_placement_bf16_accum(strata, root):
    runs = placement(strata, root, 3, "bf16", only=HALF_VARIANTS, grad_accum="bf16")
    fp32 = placement(strata, root, 3, "bf16", only={"opt=none"})
    named = accumulator_lines(runs[0][1])
    check(named and all(w.startswith("bf16 gradient accumulators") for w in named.values()),
          f"the plan does not name bf16 accumulators: {runs[0][1].plan_lines()}")
    check(all(w.startswith("fp32 gradient accumulators") for w in accumulator_lines(fp32[0][1]).values()),
          f"the fp32 run's plan: {fp32[0][1].plan_lines()}")
    a, b = runs[0][1].losses(), fp32[0][1].losses()
    check(a != b, f"bf16 and fp32 accumulators gave the same losses {a}: the setting did nothing")
    print(f"  bf16 accumulators: losses {a}; fp32 accumulators: {b}")


def case_placement_fp16(strata, root):
    runs = placement(strata, root, 3, "fp16", only=HALF_VARIANTS, steps=6)
    skipped = [m["skipped"] for m in runs[0][1].metric_lines()]
    check(any(skipped) and not all(skipped), f"fp16: skipped steps {skipped}: expected some "
                                             "overflows and some updates")
    print(f"  fp16: skipped steps {skipped}")


def case_stages(strata, root):
    runs = []
    for stage in (0, 1, 2, 3):
        run = Run(root, f"stage{stage}")
        run.write_config(ds_config(stage))
        run.start(strata, TINY + ["--steps", str(STEPS)])
        runs.append(run.expect_ok())
    for run in runs[1:]:
        print(f"  {run.name} == {runs[0].name}: {compare_bitwise(runs[0], run)}")


def case_determinism(strata, root):
    runs = []
    for i in range(2):
        run = Run(root, f"run{i}")
        run.write_config(ds_config(3, "nvme", "nvme", nvme=run.nvme))
        os.makedirs(run.nvme, exist_ok=True)
        run.start(strata, TINY + ["--steps", str(STEPS), "--shuffle"])
        runs.append(run.expect_ok())
    print(f"  two runs: {compare_bitwise(runs[0], runs[1])}")
