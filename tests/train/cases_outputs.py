"""Cases of check_train.py: what a run writes besides its weights (the trace)."""
import json
import os

from train_util import TINY, Failure, Run, check, ds_config, tail


def read_trace(path, who):
    """The Chrome trace at path (JSON object format: {"traceEvents": [...]}): checks that it
    parses, names its process and streams, and holds complete spans ("ph": "X") with a name,
    track, start and duration. Returns the span events."""
    check(os.path.isfile(path), f"{who}: no trace file {path}")
    with open(path) as f:
        text = f.read()
    try:
        trace = json.loads(text)
    except json.JSONDecodeError as e:
        raise Failure(f"{who}: {path} is not JSON ({e}); it begins {text[:200]!r}")
    check(isinstance(trace, dict) and isinstance(trace.get("traceEvents"), list),
          f"{who}: {path} has no traceEvents list")
    events = trace["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    check(any(e.get("name") == "process_name" for e in meta), f"{who}: no process_name in {path}")
    check(any(e.get("name") == "thread_name" for e in meta), f"{who}: no stream (thread_name) in {path}")
    spans = [e for e in events if e.get("ph") == "X"]
    check(len(spans) > 0, f"{who}: {path} holds no spans")
    for e in spans:
        for key in ("name", "pid", "tid", "ts", "dur"):
            check(key in e, f"{who}: a span in {path} has no {key!r}: {e}")
        check(e["dur"] >= 0, f"{who}: a span in {path} has a negative duration: {e}")
    return spans


def case_trace_config(strata, root):
    """strata.trace names the trace file (docs/config.md: "Write a trace of every stream's work
    to this path; empty = off"): a run whose config sets it writes a valid Chrome trace there,
    with spans of the step's copies. --trace overrides the key: the flag's file is written and
    the key's is not. Fails if the key is ignored (no file)."""
    run = Run(root, "key")
    key_path = os.path.join(run.dir, "from-config.trace.json")
    run.write_config(ds_config(3, opt="cpu", param="cpu", extra={"strata": {"device": "host",
                                                                             "trace": key_path}}))
    run.start(strata, TINY + ["--steps", "2"])
    run.expect_ok()
    spans = read_trace(key_path, "strata.trace")
    print(f"  strata.trace: {len(spans)} spans in {os.path.basename(key_path)}")

    flag = Run(root, "flag")
    key_path = os.path.join(flag.dir, "from-config.trace.json")
    flag_path = os.path.join(flag.dir, "from-flag.trace.json")
    flag.write_config(ds_config(3, opt="cpu", param="cpu", extra={"strata": {"device": "host",
                                                                              "trace": key_path}}))
    flag.start(strata, TINY + ["--steps", "2", "--trace", flag_path])
    flag.expect_ok()
    spans = read_trace(flag_path, "--trace over strata.trace")
    check(not os.path.exists(key_path), f"--trace {flag_path} was given, yet strata.trace's {key_path} "
                                        f"was written too\n{tail(flag.result.stderr)}")
    print(f"  --trace over strata.trace: {len(spans)} spans in {os.path.basename(flag_path)}, "
          "none at the key's path")


def case_speculation_metrics(strata, root):
    """Each metrics line's `speculative` {updates, redone} counts that step's module updates run
    before the global norm was known, and of those the ones redone (docs/architecture.md,
    "Speculative updates"). Stage 3, states in pinned memory, 3 steps:
    - clipping far above the norm: every step speculates every module and redoes none;
    - clipping far below it: step 1 speculates every module and redoes each, and steps 2 and 3
      do not speculate (a step after a clipped one does not);
    - strata.speculative_updates false: none.
    Fails if the counts are missing, are totals rather than per step, or the engine speculates
    where it should not."""
    def counts(name, clip, extra_strata=None):
        run = Run(root, name)
        strata_section = {"device": "host", **(extra_strata or {})}
        run.write_config(ds_config(3, opt="cpu", param="cpu", clip=clip, extra={"strata": strata_section}))
        run.start(strata, TINY + ["--steps", "3"])
        run.expect_ok()
        lines = run.metric_lines()
        check(len(lines) == 3, f"{name}: {len(lines)} metrics lines, wanted 3")
        for m in lines:
            s = m.get("speculative")
            check(isinstance(s, dict) and isinstance(s.get("updates"), int) and isinstance(s.get("redone"), int),
                  f"{name}: step {m.get('step')} has no speculative {{updates, redone}}: {s!r}")
        return [(m["speculative"]["updates"], m["speculative"]["redone"]) for m in lines]

    under = counts("norm-under", 1e6)
    modules = under[0][0]
    check(modules >= 3, f"clipping 1e6: step 1 speculated {modules} module updates, wanted every module")
    check(under == [(modules, 0)] * 3, f"clipping 1e6: {under}, wanted ({modules}, 0) at every step")
    over = counts("norm-over", 1e-6)
    check(over == [(modules, modules), (0, 0), (0, 0)],
          f"clipping 1e-6: {over}, wanted ({modules}, {modules}) then no speculation after the clipped step")
    off = counts("off", 1e6, {"speculative_updates": False})
    check(off == [(0, 0)] * 3, f"strata.speculative_updates false: {off}, wanted no speculation")
    print(f"  {modules} modules: {under} (norm under), {over} (norm over), {off} (off)")
