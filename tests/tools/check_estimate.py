#!/usr/bin/env python3
"""`strata estimate` against what `strata train` allocates and moves (host backend).

Usage: check_estimate.py STRATA CASE [--keep DIR]   (exit 0 ok, 1 failed, 77 skipped)

Cases:
  memory
      For GPT-2 tiny and llama-tiny, a set of stages and placements (with and without
      activation checkpointing, gradient accumulation and bf16), a 3-step `strata train` run's
      peak bytes per tier (metrics memory.*.allocated_bytes: what each tier's budget gave out,
      the device's fetcher pools whole) are within 5 % of `strata estimate --json`'s bytes for
      the same config (they are computed by the same plan code; today they agree exactly).
  collectives_2, collectives_3 (label mpi)
      W ranks under mpirun: the collective bytes each rank sends per step equal the estimate's
      collective_bytes (the ZeRO paper's 2Ψ(W-1)/W, 3Ψ(W-1)/W at stage 3, Ψ padded) exactly: at
      stages 1 and 2 from the second step on (the first step's updated parameters are gathered
      in the next step's window), at stage 3 with nothing kept between uses
      (stage3_param_persistence_threshold 0, stage3_max_reuse_distance 0) at every step. At 2
      ranks, `strata train --config auto` picks for each rank's half of the node's pinned memory
      and its run's pinned budget is that half.
  recommend
      `strata estimate --recommend --json`: a pick that fits, its config keys and why;
      `strata train --config auto` and a config whose zero_optimization.stage is "auto" train
      with the pick and say why, and that the global batch is kept; --set ...stage=auto asks for
      the pick over a file with a stage, --micro-batch/--grad-accum fix the global batch it keeps,
      and the file's other "auto"s reach the run's table; an unknown --set key is an error; a
      budget nothing fits is refused naming what is short.
  compare
      `strata compare` on tiny (stages 0 and 3, device and cpu optimizer, 3 steps, --json,
      --svg, a machine profile): every cell's measured allocation per tier within 5 % of the
      estimate, a predicted step beside the measured one, and the SVGs well-formed with one
      series per tier; with --world 2 (under collectives_2), the collective bytes per step equal
      to the theory.
  planning
      What a plan needs, per rank of a node: GPT-2 XL at 24 GiB, stage 3 with offloaded
      parameters: the table's device column is the row's needed_bytes.device (its "grows to"
      column bytes.device, what the run allocates with the budget), and the two differ; the pinned
      and nvme columns are needed_bytes too. The node's pinned memory and NVMe space divided among
      its ranks: --pinned-memory 64GiB at --world 8 --ranks-per-node 8 gives each rank 8 GiB, at
      --world 16 --ranks-per-node 8 (two nodes) the same, at --world 2 (the default 8 a node on
      the host backend) 32 GiB; --world 1 all of it; the default (half of RAM) divided likewise;
      a config's strata.pinned_memory is per rank and not divided; ranks_per_node and
      node_budget_bytes in --json; --ranks-per-node 0 refused naming the flag.
  cli
      The table and --json's fields for every stage x placement; bad input (--world 0, a
      sequence longer than the model's, an unknown stage or preset, --device cuda without a GPU
      and without --device-memory, a profile that is not one) exits 1 naming the flag.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
from train_util import (GPL, MPI_ENV, SKIP, Failure, Run, check, ds_config, run_cases, tail)  # noqa: E402
from bench_check_util import write_profile  # noqa: E402

TOL = 0.05
TIERS = ("device", "pinned", "nvme")


def estimate(strata, args):
    r = subprocess.run([strata, "estimate", "--json"] + args, capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"strata estimate {' '.join(args)} failed:\n{tail(r.stderr)}")
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def row_of(rows, stage, param, opt):
    for r in rows:
        if (r["stage"], r["offload_param"], r["offload_optimizer"]) == (stage, param, opt):
            return r
    raise Failure(f"no estimate row for stage {stage}, params {param}, optimizer {opt}")


# (name, model args, stage, opt, param, config keyword arguments, train flags)
MEMORY_CELLS = [
    ("gpt-s0", ["--preset", "tiny"], 0, "none", "none", {}, []),
    ("gpt-s1-nvme", ["--preset", "tiny"], 1, "nvme", "none", {}, []),
    ("gpt-s2-cpu-bf16", ["--preset", "tiny"], 2, "cpu", "none", {"bf16": True}, []),
    ("gpt-s3-cpu-ckpt", ["--preset", "tiny"], 3, "cpu", "cpu", {}, ["--activation-checkpointing"]),
    ("gpt-s3-nvme", ["--preset", "tiny"], 3, "nvme", "nvme", {"gas": 1, "micro_batch": 4}, []),
    ("gpt-s3-small-device", ["--preset", "tiny"], 3, "cpu", "cpu", {"device_memory": "6MiB"}, []),
    ("llama-s3-cpu-nvme", ["--preset", "llama-tiny"], 3, "nvme", "cpu", {"bf16": True}, []),
    ("llama-s2-device", ["--preset", "llama-tiny"], 2, "none", "none", {}, ["--activation-checkpointing"]),
]


def case_memory(strata, root):
    for name, model, stage, opt, param, kw, flags in MEMORY_CELLS:
        run = Run(root, name)
        os.makedirs(run.nvme, exist_ok=True)
        config = ds_config(stage, opt, param, nvme=run.nvme, **kw)
        config["strata"]["pinned_memory"] = "1GiB"
        run.write_config(config)
        args = model + ["--seq-len", "32", "--text", GPL, "--steps", "3"] + flags
        run.start(strata, args)
        run.expect_ok()
        measured = run.metric_lines()[-1]["memory"]
        est = row_of(estimate(strata, ["--config", run.config_path, "--seq-len", "32", "--stage", str(stage)] +
                              model + flags), stage, param, opt)
        check(est["fits"], f"{name}: the estimate says the run does not fit, yet it ran: {est.get('advice')}")
        for tier in TIERS:
            e, m = est["bytes"][tier], measured[tier]["allocated_bytes"]
            if e == 0 and m == 0:
                continue
            ratio = m / e if e else float("inf")
            print(f"  {name:22} {tier:7} estimate {e:>10}  measured {m:>10}  ratio {ratio:.4f}")
            check(abs(ratio - 1) <= TOL, f"{name}: {tier} measured {m} bytes, estimated {e} "
                                         f"(ratio {ratio:.4f}, beyond {TOL:.0%})")
        check(est["bytes"]["device"] <= est["budget_bytes"]["device"],
              f"{name}: the estimate {est['bytes']['device']} exceeds the device budget {est['budget_bytes']['device']}")
        check(measured["device"]["allocated_bytes"] <= measured["device"]["budget_bytes"],
              f"{name}: the run took more than its device budget")


def mpi_usable(strata):
    from cases_ranks import mpi_usable as usable  # noqa: E402 (tests/train)
    return usable(strata)


def case_collectives(world):
    def case(strata, root):
        why = mpi_usable(strata)
        if why:
            print(f"skipped: {why}")
            sys.exit(SKIP)
        cells = [(1, {}), (2, {}), (3, {"stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0})]
        for stage, extra in cells:
            run = Run(root, f"s{stage}")
            run.write_config(ds_config(stage, gas=1, extra_zero=extra))
            run.start(strata, ["--preset", "tiny", "--seq-len", "32", "--text", GPL, "--steps", "3"], np_ranks=world)
            run.expect_ok()
            est = row_of(estimate(strata, ["--config", run.config_path, "--world", str(world), "--seq-len", "32",
                                           "--preset", "tiny", "--stage", str(stage)]), stage, "none", "none")
            theory = est["collective_bytes"]
            check(theory > 0, f"stage {stage}: the estimate has no collective bytes at {world} ranks")
            if stage == 1 and world == 2:
                # --placements device: the older spelling of none, still taken (docs/config.md).
                r = subprocess.run([strata, "compare", "--config", run.config_path, "--world", "2", "--preset", "tiny",
                                    "--seq-len", "32", "--steps", "3", "--stages", "1", "--placements", "device",
                                    "--json", "--dir", root], capture_output=True, text=True, timeout=240,
                                   env=dict(os.environ, **MPI_ENV))
                check(r.returncode == 0, f"strata compare --world 2 failed:\n{tail(r.stderr)}")
                cell = json.loads(r.stdout.splitlines()[0])
                check(cell["measured"]["vs_estimate"]["collective"] == 1.0,
                      f"compare --world 2: collective {cell['measured']['bytes_per_step']} vs {cell['collective_bytes']}")
            for m in run.metric_lines():
                got = m["bytes"]["collective"]
                print(f"  stage {stage}, {world} ranks, step {m['step']}: {got} bytes, estimate {theory:.0f}, "
                      f"metrics theory {m['collective_theory_bytes']:.0f}")
                check(m["collective_theory_bytes"] == theory,
                      f"stage {stage}: the run's theory {m['collective_theory_bytes']} != the estimate's {theory}")
                if stage < 3 and m["step"] == 1:
                    continue
                check(got == theory, f"stage {stage}, {world} ranks, step {m['step']}: {got} collective bytes, "
                                     f"the theory says {theory}")
        if world == 2:
            # strata train --config auto on 2 ranks of this machine: the pick fits each rank's half
            # of the node's pinned memory, and the run pins no more than that.
            auto = Run(root, "auto-2")
            auto.config_path = "auto"
            r = auto.start(strata, ["--preset", "tiny", "--seq-len", "32", "--text", GPL, "--steps", "2", "--device",
                                    "host", "--device-memory", "8MiB"], np_ranks=2)
            auto.expect_ok()
            node = estimate(strata, ["--preset", "tiny", "--device", "host", "--stage", "0"])[0]["budget_bytes"]["pinned"]
            check("each rank's share of 2 ranks a node" in r.stderr, f"the pick did not share the node:\n{tail(r.stderr)}")
            got = auto.metric_lines()[-1]["memory"]["pinned"]["budget_bytes"]
            print(f"  --config auto, 2 ranks: pinned budget {got} a rank, the node's {node}")
            check(got == node // 2, f"--config auto on 2 ranks: the run's pinned budget {got}, wanted {node // 2}")
    return case


def format_bytes(n):
    """core/units.cpp's format_bytes."""
    if n < 1024:
        return f"{n} B"
    v, unit = float(n), 0
    while v >= 1024.0 and unit < 5:
        v /= 1024.0
        unit += 1
    return f"{v:.2f} {['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'][unit]}"


def table_cells(stdout, label):
    """The device, grows-to, pinned and nvme cells of a table row (cmd_estimate.cpp's widths)."""
    w = 45  # the label column
    for line in stdout.splitlines():
        if line[:w].rstrip() == label:
            return [line[w + 1 + 11 * i:w + 11 + 11 * i].strip() for i in range(4)]
    raise Failure(f"no table row {label!r} in:\n{stdout}")


def case_planning(strata, root):
    args = ["--preset", "gpt2-xl", "--device", "host", "--device-memory", "24GiB", "--stage", "3"]
    rows = estimate(strata, args)
    text = subprocess.run([strata, "estimate"] + args, capture_output=True, text=True, timeout=60)
    check(text.returncode == 0, f"the table failed:\n{tail(text.stderr)}")
    check("grows to" in text.stdout, f"no \"grows to\" column:\n{text.stdout}")
    differ = 0
    for r in rows:
        if r["offload_param"] == "none":
            continue
        # The table's label names the placement as the JSON does (runtime/tiers/tier.h).
        label = f"stage 3, offload params {r['offload_param']}, optimizer {r['offload_optimizer']}"
        device, grows, pinned, nvme = table_cells(text.stdout, label)
        need, used = r["needed_bytes"], r["bytes"]["device"]
        print(f"  {label:45} device {device:>10} (needed {need['device']}, allocates {used}) grows to {grows!r}")
        check(device == format_bytes(need["device"]),
              f"{label}: the device column says {device}, the plan needs {format_bytes(need['device'])}")
        check(device != format_bytes(r["budget_bytes"]["device"]), f"{label}: the device column is the budget")
        if used > need["device"]:
            differ += 1
            check(grows == format_bytes(used), f"{label}: grows to {grows!r}, the run allocates {format_bytes(used)}")
        else:
            check(grows == "", f"{label}: grows to {grows!r} though the run allocates no more than it needs")
        for cell, tier in ((pinned, "pinned"), (nvme, "nvme")):
            want = format_bytes(need[tier]) if need[tier] else "-"
            check(cell == want, f"{label}: the {tier} column says {cell}, the plan needs {want}")
    check(differ > 0, "no offloaded stage-3 row allocates more than it needs: the test shows nothing")

    def budgets(*extra):
        r = estimate(strata, ["--preset", "gpt2", "--device", "host", "--stage", "0"] + list(extra))[0]
        return r["ranks_per_node"], r["budget_bytes"], r["node_budget_bytes"]

    gib = 1 << 30
    for extra, want_rpn, want_pinned in [(["--world", "8", "--ranks-per-node", "8"], 8, 8 * gib),
                                         (["--world", "16", "--ranks-per-node", "8"], 8, 8 * gib),
                                         (["--world", "2"], 2, 32 * gib),
                                         (["--world", "16"], 8, 8 * gib),
                                         (["--world", "16", "--ranks-per-node", "4"], 4, 16 * gib),
                                         (["--world", "1"], 1, 64 * gib)]:
        rpn, per_rank, node = budgets("--pinned-memory", "64GiB", *extra)
        print(f"  {' '.join(extra):30} ranks a node {rpn}, pinned {per_rank['pinned']} of {node['pinned']}, "
              f"nvme {per_rank['nvme']} of {node['nvme']}")
        check(rpn == want_rpn, f"{extra}: ranks_per_node {rpn}, wanted {want_rpn}")
        check(per_rank["pinned"] == want_pinned and node["pinned"] == 64 * gib,
              f"{extra}: pinned {per_rank['pinned']} a rank of {node['pinned']}, wanted {want_pinned} of 64 GiB")
        check(per_rank["nvme"] == node["nvme"] // rpn, f"{extra}: nvme {per_rank['nvme']} a rank of {node['nvme']}")
    _, alone, node = budgets("--world", "1")
    rpn, shared, _ = budgets("--world", "4")
    check(rpn == 4 and shared["pinned"] == alone["pinned"] // 4 and node["pinned"] == alone["pinned"],
          f"half of RAM at 4 ranks a node: {shared['pinned']} a rank, alone {alone['pinned']}")
    config = os.path.join(root, "pinned.json")
    with open(config, "w") as f:
        json.dump({"bf16": {"enabled": True}, "strata": {"pinned_memory": "4GiB"}}, f)
    rpn, per_rank, node = budgets("--config", config, "--world", "8")
    check(rpn == 8 and per_rank["pinned"] == 4 * gib and node["pinned"] == 32 * gib,
          f"strata.pinned_memory is per rank: {per_rank['pinned']} a rank, {node['pinned']} a node")
    table = subprocess.run([strata, "estimate", "--preset", "gpt2", "--device", "host", "--pinned-memory", "64GiB",
                            "--world", "16"], capture_output=True, text=True, timeout=60)
    check("budgets per rank, 8 ranks a node" in table.stdout and "pinned host 8.00 GiB" in table.stdout,
          f"the table's budgets line:\n{table.stdout[:600]}")
    for bad in ("0", "-2"):
        r = subprocess.run([strata, "estimate", "--preset", "gpt2", "--ranks-per-node", bad], capture_output=True,
                           text=True, timeout=60)
        check(r.returncode == 1 and "--ranks-per-node" in r.stderr, f"--ranks-per-node {bad}: exit {r.returncode}\n"
                                                                    f"{r.stderr}")


def case_cli(strata, root):
    rows = estimate(strata, ["--preset", "gpt2", "--batch", "2", "--seq-len", "128"])
    check(len(rows) == 14, f"{len(rows)} rows, wanted 14 (stage 0; 1-2 x 3; stage 3 x 7)")
    for r in rows:
        for key in ("stage", "world", "offload_param", "offload_optimizer", "model_states_bytes", "bytes",
                    "formula_bytes", "fits", "bytes_by_kind", "collective_bytes", "needed_bytes"):
            check(key in r, f"row {r.get('stage')} lacks {key}: {r}")
        check(set(r["bytes"]) == set(TIERS), f"bytes keys {sorted(r['bytes'])}")
        check(r["offload_param"] in ("none", "cpu", "nvme") and r["offload_optimizer"] in ("none", "cpu", "nvme"),
              f"offload words: {r}")
        by_kind = r["bytes_by_kind"]
        for tier in TIERS:
            check(sum(by_kind[tier].values()) == r["bytes"][tier], f"{tier}: the kinds do not add up: {r}")
        states = sum(by_kind[t][k] for t in TIERS for k in ("parameters", "gradients", "optimizer_states"))
        check(states == r["model_states_bytes"], f"model states {r['model_states_bytes']} != {states}")
        if not r["fits"]:
            check("short by" in r.get("advice", ""), f"a row that does not fit says nothing: {r}")
    text = subprocess.run([strata, "estimate", "--preset", "gpt2", "--device-memory", "80GB"],
                          capture_output=True, text=True, timeout=60)
    check(text.returncode == 0 and "ZeRO paper" in text.stdout and "stage 3, offload params nvme, optimizer nvme"
          in text.stdout, f"the table:\n{text.stdout}\n{text.stderr}")
    bad_profile = os.path.join(root, "profile.json")
    with open(bad_profile, "w") as f:
        f.write("{not json")
    for args, word in [(["--preset", "gpt2", "--world", "0"], "--world"),
                       (["--preset", "gpt2", "--seq-len", "5000"], "--seq-len"),
                       (["--preset", "gpt2", "--stage", "5"], "--stage"),
                       (["--preset", "nope"], "nope"),
                       (["--preset", "gpt2", "--device", "cuda"], "--device"),
                       (["--preset", "gpt2", "--profile", bad_profile], "profile.json")]:
        r = subprocess.run([strata, "estimate"] + args, capture_output=True, text=True, timeout=60)
        has_gpu = "cuda" in args and r.returncode == 0
        if has_gpu:
            continue  # a machine with a GPU estimates for it
        check(r.returncode == 1 and word in r.stderr, f"estimate {' '.join(args)}: exit {r.returncode}, "
                                                      f"wanted 1 naming {word}:\n{r.stderr}")


def case_recommend(strata, root):
    profile = os.path.join(root, "profile.json")
    write_profile(profile)
    rows = estimate(strata, ["--preset", "tiny", "--device", "host", "--device-memory", "8MiB", "--seq-len", "64",
                             "--recommend", "--profile", profile])
    check(len(rows) == 1 and "recommended" in rows[0], f"--recommend --json printed {rows}")
    r = rows[0]["recommended"]
    check(r["fits"] and r["bytes"]["device"] <= 8 << 20, f"the pick does not fit 8 MiB: {r}")
    check(r["predicted"]["tokens_per_s"] > 0 and "Picked" in r["why"], f"no prediction or why: {r}")
    check(r["config"]["train_micro_batch_size_per_gpu"] >= 1 and "zero_optimization" in r["config"], f"{r['config']}")

    text = ["--preset", "tiny", "--seq-len", "32", "--text", GPL, "--steps", "2"]
    run = Run(root, "auto")
    run.config_path = "auto"
    r = run.start(strata, text + ["--device", "host", "--device-memory", "8MiB"])
    run.expect_ok()
    check("strata train --config auto:" in r.stderr and "Picked" in r.stderr, f"no pick said:\n{tail(r.stderr)}")
    check(len(run.metric_lines()) == 2, "the auto run did not train 2 steps")
    check(run.metric_lines()[-1]["memory"]["device"]["allocated_bytes"] <= 8 << 20, "the auto run exceeded 8 MiB")

    partial = Run(root, "auto-stage")
    config = ds_config(0, micro_batch=2, gas=1)
    config["zero_optimization"] = {"stage": "auto"}
    config["strata"]["device_memory"] = "8MiB"
    partial.write_config(config)
    r = partial.start(strata, text)
    partial.expect_ok()
    check("Picked" in r.stderr and "micro-batch 2" in r.stderr, f"the config's micro-batch was not kept:\n{tail(r.stderr)}")
    check("global batch 2 kept (given as micro-batch 2 x 1 accumulation x 1 rank(s))" in r.stderr,
          f"no line on the global batch:\n{tail(r.stderr)}")

    # --set asks for the automatic placement over a file that gives a stage; --micro-batch and
    # --grad-accum fix the global batch (16), which the pick keeps, trading micro-batch for
    # accumulation in 2 MiB less of device; the other "auto"s of the file go to the run's table.
    flagged = Run(root, "auto-set")
    config = ds_config(1, micro_batch=2, gas=1)
    config["optimizer"]["params"]["lr"] = "auto"
    flagged.write_config(config)
    r = flagged.start(strata, text + ["--device-memory", "8MiB", "--set", "zero_optimization.stage=auto",
                                      "--micro-batch", "8", "--grad-accum", "2"])
    flagged.expect_ok()
    check("strata train --config auto:" in r.stderr and "global batch 16 kept" in r.stderr,
          f"--set ...=auto did not pick, or the global batch was not kept:\n{tail(r.stderr)}")
    check("optimizer.params.lr" in r.stderr and "default (HF Trainer)" in r.stderr,
          f"the file's lr \"auto\" is not in the run's table:\n{tail(r.stderr)}")
    m = flagged.metric_lines()
    check(len(m) == 2, "the --set auto run did not train 2 steps")
    bad = Run(root, "auto-set-typo")
    bad.write_config(config)
    r = bad.start(strata, text + ["--set", "zero_optimization.stage=auto", "--set", "zero_optimization.stge=1"])
    check(r.returncode == 1 and "sets unknown config key" in r.stderr,
          f"an unknown --set key under the automatic placement: exit {r.returncode}\n{tail(r.stderr)}")

    none = Run(root, "auto-none")
    none.config_path = "auto"
    r = none.start(strata, text + ["--device", "host", "--device-memory", "1MiB"])
    check(r.returncode == 1 and "no stage, placement or micro-batch fits" in r.stderr and "short by" in r.stderr,
          f"a budget nothing fits: exit {r.returncode}\n{tail(r.stderr)}")


def check_svg(path, series):
    import xml.etree.ElementTree as ET
    root = ET.parse(path).getroot()
    check(root.tag.endswith("svg"), f"{path}: root is {root.tag}")
    found = [g.get("data-series") for g in root.iter() if g.tag.endswith("g") and g.get("class") == "series"]
    for s in series:
        check(s in found, f"{path}: no series {s} (found {found})")


def case_compare(strata, root):
    profile = os.path.join(root, "profile.json")
    write_profile(profile)
    svg = os.path.join(root, "svg")
    r = subprocess.run([strata, "compare", "--preset", "tiny", "--device", "host", "--dtype", "fp32", "--batch", "2",
                        "--seq-len", "32", "--steps", "3", "--stages", "0,3", "--placements", "none,cpu", "--json",
                        "--svg", svg, "--profile", profile, "--dir", root], capture_output=True, text=True, timeout=240)
    check(r.returncode == 0, f"strata compare failed:\n{tail(r.stderr)}")
    cells = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    labels = [(c["stage"], c["offload_param"], c["offload_optimizer"]) for c in cells]
    check(labels == [(0, "none", "none"), (3, "none", "none"), (3, "none", "cpu"), (3, "cpu", "cpu")],
          f"cells {labels}")
    for c in cells:
        m = c["measured"]
        check("error" not in m, f"{labels}: {m.get('error')}")
        for tier in TIERS:
            e, got = c["bytes"][tier], m["allocated_bytes"][tier]
            check((e == 0 and got == 0) or (e > 0 and abs(got / e - 1) <= TOL),
                  f"stage {c['stage']} {c['offload_optimizer']}: {tier} measured {got}, estimated {e}")
        check(m["step_ms"] > 0 and c["predicted"]["step_ms"] > 0 and m["vs_estimate"]["step"] > 0,
              f"no step time or prediction: {c}")
        check("device after forward" in m["peak_bytes_at_phase"], f"no phase peaks: {m['peak_bytes_at_phase']}")
    check_svg(os.path.join(svg, "memory.svg"), ["device", "pinned"])
    check_svg(os.path.join(svg, "step_time.svg"), ["compute"])
    check(not [f for f in os.listdir(root) if f.startswith("strata-bench-compare")], "the scratch folder was left")


CASES = {"memory": case_memory, "recommend": case_recommend, "compare": case_compare, "collectives_2": case_collectives(2), "collectives_3": case_collectives(3),
         "cli": case_cli, "planning": case_planning}

if __name__ == "__main__":
    sys.exit(run_cases(__doc__, CASES, "strata-estimate"))
