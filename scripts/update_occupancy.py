#!/usr/bin/env python3
"""How busy CPU Adam keeps the updater during each step's update phase, from a `strata train
--trace` file (issue 15's target: Adam busy >= 90 % of the updater's wall time).

Per step, the update phase runs from the first Adam span to the last on the "cpu optimizer"
track; a step's spans are those between two gaps longer than --gap-ms (the forward and backward
of the next step). occupancy = the sum of the Adam spans / the phase's wall time. Prints one line
per step and the median of steps 2.. (step 1 records the prefetch trace and first-touches).

    python3 scripts/update_occupancy.py t.json [--gap-ms 50] [--json]
"""
import argparse
import json
import statistics
import sys


def phases(spans, gap_us):
    """Groups (start, end) spans, sorted by start, into phases separated by idle gaps > gap_us."""
    out = []
    for s, e in sorted(spans):
        if out and s - out[-1][-1][1] <= gap_us:
            out[-1].append((s, e))
        else:
            out.append([(s, e)])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--gap-ms", type=float, default=50.0,
                    help="an idle gap longer than this ends a step's update phase (default 50)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    try:
        with open(a.trace) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"update_occupancy: cannot read {a.trace}: {e}")
    tracks = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
              if e.get("ph") == "M" and e.get("name") == "thread_name"}
    adam = [(e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"]
            if e.get("ph") == "X" and tracks.get(e["tid"]) == "cpu optimizer"
            and str(e.get("name", "")).startswith("adam")]
    if not adam:
        sys.exit("update_occupancy: no Adam spans on the 'cpu optimizer' track (optimizer states on the device?)")
    rows = []
    for i, p in enumerate(phases(adam, a.gap_ms * 1000.0), start=1):
        wall = p[-1][1] - p[0][0]
        busy = sum(e - s for s, e in p)
        gaps = [p[k + 1][0] - p[k][1] for k in range(len(p) - 1)]
        rows.append({"phase": i, "spans": len(p), "wall_ms": wall / 1000, "adam_ms": busy / 1000,
                     "occupancy": busy / wall if wall > 0 else 1.0,
                     "median_gap_ms": statistics.median(gaps) / 1000 if gaps else 0.0})
    for r in rows:
        if a.json:
            print(json.dumps(r))
        else:
            print(f"phase {r['phase']:3d}: {r['spans']:4d} Adam spans, wall {r['wall_ms']:9.2f} ms, "
                  f"Adam {r['adam_ms']:9.2f} ms, occupancy {r['occupancy']:.3f}, "
                  f"median gap {r['median_gap_ms']:.3f} ms")
    later = [r["occupancy"] for r in rows[1:]] or [rows[0]["occupancy"]]
    summary = {"median_occupancy": statistics.median(later), "phases": len(rows)}
    print(json.dumps(summary) if a.json else f"median occupancy (phases 2..): {summary['median_occupancy']:.3f}")


if __name__ == "__main__":
    main()
