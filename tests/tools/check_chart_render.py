#!/usr/bin/env python3
"""Every chart kind rendered to PNG by a real renderer (rsvg-convert, Debian's librsvg2-bin),
and looked at: do the charts read at a glance?

Draws, in a folder of WORK_DIR:
  estimate/  `strata estimate --preset gpt2 --device host --profile P --svg`: memory per tier
             (budgets of this host: tens of GiB over a few GiB of data) and predicted step time;
  compare/   `strata compare --preset tiny --device host --steps 3 --profile P --svg`: 14 cells
             of memory and of measured busy time per resource;
  train/     `strata train --svg` (tiny, stage 3, parameters on cpu, optimizer on nvme, 4 steps):
             loss, throughput, memory (three tiers, their budgets) and busy time;
  crafted/   `strata chart --metrics` on a made-up run: a device budget just above its peak, a
             pinned one 10,000 times it, a resource busier than the step, one of 0.05 ms, and a
             resource with a long name.
Then renders each SVG with rsvg-convert and checks:
  size     the PNG is the SVG's width x height, at most 1200 px wide;
  visible  each series (<g class="series" data-color>) that draws something shows at least a
           few pixels of its color in the plot (legend samples do not count); on memory bars,
           each kind as well;
  colors   a name (tier, kind, resource) has one color across all the charts; the series of a
           chart (and a memory chart's kinds) have colors far enough apart to tell;
  clipped  no <text>'s box (its width from the font's advances, fontconfig's DejaVu Sans, its
           rotation) leaves the image, and the PNG's 2-pixel border is background only;
  overlap  no <text> lies on a series' shapes (bars, lines, dots, tier keys);
  scale    on a memory chart the tallest bar (or line) spans at least half the plot's height,
           and every budget of the run is drawn or listed above the plot.
Exit 77 (skipped) without rsvg-convert: scripts/setup.sh installs it.

Usage: check_chart_render.py STRATA WORK_DIR
       check_chart_render.py --check DIR...   (checks the SVGs already in each DIR)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chart_pixels as cp  # noqa: E402
from bench_check_util import fail, write_profile  # noqa: E402

NS = "{http://www.w3.org/2000/svg}"
SKIP = 77
TOLERANCE = 12      # per channel, between a palette color and a pixel of it
MIN_PIXELS = 4      # of a series' color in the plot for it to count as visible
MAX_WIDTH = 1200
GPL = "/usr/share/common-licenses/GPL-3"
TIERS = ("device", "pinned", "nvme")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

problems = []


def problem(chart, what):
    problems.append(f"{chart}: {what}")


# ---- Drawing the charts --------------------------------------------------------------------------


def write_crafted_metrics(path):
    rows = []
    for step in range(1, 5):
        rows.append({"step": step, "loss": 5 - 0.1 * step, "tokens_per_s": 1000 + 10 * step, "step_ms": 110,
                     "memory": {"device": {"peak_bytes": 40 << 20, "budget_bytes": 48 << 20},
                                "pinned": {"peak_bytes": 10 << 20, "budget_bytes": 100 << 30},
                                "nvme": {"peak_bytes": 0, "budget_bytes": 0}},
                     "busy_ms": {"compute": 100, "h2d": 120, "d2h": 0.05, "a resource with a long name": 30}})
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def run(args, timeout):
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "2")
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        fail(f"{' '.join(args)} exited {r.returncode}", r)
    return r


def draw_charts(strata, folder):
    """The chart folders drawn (estimate, compare, train, crafted)."""
    profile = os.path.join(folder, "profile.json")
    write_profile(profile)
    out = {name: os.path.join(folder, name) for name in ("estimate", "compare", "train", "crafted")}
    run([strata, "estimate", "--preset", "gpt2", "--device", "host", "--profile", profile, "--svg", out["estimate"]],
        60)
    run([strata, "compare", "--preset", "tiny", "--device", "host", "--dtype", "fp32", "--steps", "3",
         "--profile", profile, "--dir", folder, "--svg", out["compare"]], 240)
    with open(os.path.join(ROOT, "configs", "default_train.json")) as f:
        config = json.load(f)
    swap = os.path.join(folder, "swap")
    os.makedirs(swap)
    config["zero_optimization"]["offload_optimizer"]["nvme_path"] = swap
    config_path = os.path.join(folder, "ds.json")
    with open(config_path, "w") as f:
        json.dump(config, f)
    run([strata, "train", "--config", config_path, "--device", "host", "--preset", "tiny", "--seq-len", "32",
         "--text", GPL, "--steps", "4", "--report", "none", "--svg", out["train"]], 180)
    os.makedirs(out["crafted"])
    crafted = os.path.join(out["crafted"], "metrics.jsonl")  # beside its charts, as --svg puts a run's
    write_crafted_metrics(crafted)
    run([strata, "chart", "--metrics", crafted, "--svg", out["crafted"]], 60)
    for name, path in out.items():
        if not any(f.endswith(".svg") for f in os.listdir(path)):
            fail(f"{name}: no SVG in {path}")
    return list(out.values())


# ---- Reading a chart -----------------------------------------------------------------------------

class Chart:
    def __init__(self, svg_path, png_path, fonts):
        self.name = svg_path
        self.root = ET.parse(svg_path).getroot()
        self.width, self.height = float(self.root.get("width")), float(self.root.get("height"))
        self.image = cp.read_png(png_path)
        self.fonts = fonts
        self.frame = self.find_frame()
        self.memory = os.path.basename(svg_path) == "memory.svg"
        self.series = []  # (name, "#rrggbb", <g>)
        for g in self.root.iter(NS + "g"):
            if g.get("class") == "series":
                self.series.append((g.get("data-series"), g.get("data-color") or first_color(g), g))
        self.bars = [r for r in self.root.iter(NS + "rect") if r.get("data-kind")]

    def find_frame(self):
        """(left, top, right, bottom) of the plot: its <rect class="frame">, or the axis lines."""
        for r in self.root.iter(NS + "rect"):
            if r.get("class") == "frame":
                x, y = float(r.get("x")), float(r.get("y"))
                return x, y, x + float(r.get("width")), y + float(r.get("height"))
        vertical = horizontal = None
        for g in self.root.iter(NS + "g"):
            for line in g.findall(NS + "line"):
                x1, y1, x2, y2 = (float(line.get(k)) for k in ("x1", "y1", "x2", "y2"))
                if g.get("class") == "axis y" and x1 == x2:
                    vertical = (x1, min(y1, y2), max(y1, y2))
                if g.get("class") == "axis x" and y1 == y2:
                    horizontal = max(x1, x2)
        return vertical[0], vertical[1], horizontal, vertical[2]

    def texts(self):
        """(text, quad) of every drawn <text> (not <title>)."""
        out = []
        for t in self.root.iter(NS + "text"):
            text = "".join(t.itertext())
            if not text.strip():
                continue  # draws nothing
            size = float(t.get("font-size", "12"))
            width = self.fonts.width(text, size, t.get("font-weight") == "bold")
            out.append((text, float(t.get("x")), float(t.get("y")), width, size, t.get("text-anchor", "start"),
                        t.get("transform")))
        return out


def first_color(g):
    """A series' color where the chart does not say it (data-color): its first filled or stroked shape."""
    for e in g.iter():
        for key in ("fill", "stroke"):
            if cp.hex_rgb(e.get(key)) and e.get(key) != "#ffffff":
                return e.get(key)
    return None


def shapes(g):
    """The quads a series draws: rects of some area, its polylines' segments, its dots."""
    out = []
    for e in g.iter():
        tag = e.tag[len(NS):]
        if tag == "rect":
            w, h = float(e.get("width")), float(e.get("height"))
            if w > 0 and h > 0:
                out.append(cp.rect_quad(float(e.get("x")), float(e.get("y")), w, h))
        elif tag == "polyline":
            pts = [tuple(map(float, p.split(","))) for p in e.get("points").split()]
            half = float(e.get("stroke-width", "1")) / 2
            out += [cp.segment_quad(pts[i], pts[i + 1], half) for i in range(len(pts) - 1)]
            if len(pts) == 1:
                out.append(cp.rect_quad(pts[0][0] - half, pts[0][1] - half, 2 * half, 2 * half))
        elif tag == "circle":
            cx, cy, r = float(e.get("cx")), float(e.get("cy")), float(e.get("r"))
            out.append(cp.rect_quad(cx - r, cy - r, 2 * r, 2 * r))
    return out


# ---- Checks ----------------------------------------------------------------------------------------

def check_size(c):
    if (c.image.width, c.image.height) != (round(c.width), round(c.height)):
        problem(c.name, f"rendered {c.image.width}x{c.image.height}, the SVG says {c.width}x{c.height}")
    if c.width > MAX_WIDTH:
        problem(c.name, f"{c.width:.0f} px wide, more than {MAX_WIDTH}")


def check_visible(c):
    left, top, right, bottom = c.frame
    hist = c.image.histogram(left, top, right, bottom + 8)  # the plot and the tier keys under it
    for name, color, g in c.series:
        rgb = cp.hex_rgb(color)
        if not shapes(g):
            continue  # draws nothing: a resource idle throughout
        n = cp.count_near(hist, rgb, TOLERANCE) if rgb else 0
        if n < MIN_PIXELS:
            problem(c.name, f"series {name!r} ({color}) shows {n} pixels of its color in the plot")
    for kind, fill in sorted({(r.get("data-kind"), r.get("fill")) for r in c.bars}):
        if max(float(r.get("height")) for r in c.bars if r.get("data-kind") == kind) < 3:
            continue  # too few bytes to be seen at this scale
        n = cp.count_near(hist, cp.hex_rgb(fill), TOLERANCE)
        if n < MIN_PIXELS:
            problem(c.name, f"kind {kind!r} ({fill}) shows {n} pixels of its color in the plot")


def check_distinct(c):
    named = [(name, color) for name, color, _ in c.series]
    named += sorted({(r.get("data-kind"), r.get("fill")) for r in c.bars})
    for i, (a, ca) in enumerate(named):
        for b, cb in named[:i]:
            ra, rb = cp.hex_rgb(ca), cp.hex_rgb(cb)
            if ra and rb and max(abs(x - y) for x, y in zip(ra, rb)) <= 2 * TOLERANCE:
                problem(c.name, f"{a!r} ({ca}) and {b!r} ({cb}) have colors too close to tell apart")


def check_not_clipped(c):
    for text, x, y, width, size, anchor, transform in c.texts():
        quad = cp.text_quad(x, y, width, size, anchor, transform)
        xs, ys = [p[0] for p in quad], [p[1] for p in quad]
        if min(xs) < -0.5 or min(ys) < -0.5 or max(xs) > c.width + 0.5 or max(ys) > c.height + 0.5:
            problem(c.name, f"text {text!r} leaves the image: x {min(xs):.0f}..{max(xs):.0f}, "
                            f"y {min(ys):.0f}..{max(ys):.0f} of {c.width:.0f}x{c.height:.0f}")
    im = c.image
    border = [(x, y) for y in (0, 1, im.height - 2, im.height - 1) for x in range(im.width)]
    border += [(x, y) for x in (0, 1, im.width - 2, im.width - 1) for y in range(im.height)]
    inked = [p for p in border if min(im.pixel(*p)) < 235]
    if inked:
        problem(c.name, f"{len(inked)} pixels drawn at the image's edge (first at {inked[0]}): something is cut off")


def check_no_overlap(c):
    drawn = [(name, quad) for name, _, g in c.series for quad in shapes(g)]
    for text, x, y, width, size, anchor, transform in c.texts():
        quad = cp.text_quad(x, y, width, size, anchor, transform, ascent=0.72, descent=0.18)
        for name, shape in drawn:
            if cp.overlap(quad, shape):
                problem(c.name, f"text {text!r} is drawn over series {name!r}")
                break


def check_memory_scale(c, budgets):
    """budgets: the tiers with a budget (None: not known)."""
    left, top, right, bottom = c.frame
    tallest = 0.0
    for g in c.root.iter(NS + "g"):
        if g.get("class") == "bar":
            tallest = max(tallest, sum(float(r.get("height")) for r in g.findall(NS + "rect") if r.get("data-kind")))
    for _, _, g in c.series:
        for line in g.iter(NS + "polyline"):
            ys = [float(p.split(",")[1]) for p in line.get("points").split()]
            tallest = max(tallest, bottom - min(ys))
    if tallest < 0.5 * (bottom - top):
        problem(c.name, f"the tallest bar or line spans {tallest:.0f} px of the plot's {bottom - top:.0f}: "
                        "squashed by the axis")
    texts = [t[0] for t in c.texts()]
    refs = [g.get("data-ref", "") for g in c.root.iter(NS + "g") if (g.get("class") or "").startswith("ref-line")]
    for name, _, g in c.series:
        marks = [e for e in g.iter() if "budget" in (e.get("class") or "")]
        above = [e for e in marks if "off-scale" in e.get("class")]
        if above and not any(t.startswith(f"{name} budget") and "above the scale" in t for t in texts):
            problem(c.name, f"tier {name!r} has a budget above the scale that no label names")
        if budgets is not None and name in budgets and not marks and not any(r.startswith(name) for r in refs):
            problem(c.name, f"tier {name!r} has a budget the chart does not show")


def run_budgets(folder):
    """The tiers with a budget in the folder's metrics.jsonl (a run's charts); None without one."""
    path = os.path.join(folder, "metrics.jsonl")
    if not os.path.isfile(path):
        return None
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return {t for t in TIERS for r in rows if r.get("memory", {}).get(t, {}).get("budget_bytes", 0) > 0}


def check_folders(folders, scratch):
    fonts = cp.Fonts()
    colors = {}  # name -> {color: chart}
    count = 0
    for folder in folders:
        budgets = run_budgets(folder)
        for svg in sorted(f for f in os.listdir(folder) if f.endswith(".svg")):
            path = os.path.join(folder, svg)
            png = os.path.join(scratch, f"{os.path.basename(folder)}-{svg[:-4]}.png")
            r = subprocess.run(["rsvg-convert", path, "-o", png], capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                fail(f"rsvg-convert {path} exited {r.returncode}: {r.stderr}")
            c = Chart(path, png, fonts)
            count += 1
            check_size(c)
            check_visible(c)
            check_distinct(c)
            check_not_clipped(c)
            check_no_overlap(c)
            if c.memory:
                check_memory_scale(c, budgets)
            for name, color, _ in c.series:
                colors.setdefault(name, {}).setdefault(color, path)
            for r in c.bars:
                colors.setdefault(r.get("data-kind"), {}).setdefault(r.get("fill"), path)
    for name, seen in colors.items():
        if len(seen) > 1:
            problems.append(f"{name!r} has {len(seen)} colors across the charts: " +
                            ", ".join(f"{color} in {path}" for color, path in seen.items()))
    return count


def main():
    if not shutil.which("rsvg-convert"):
        print("skipped: no rsvg-convert (Debian's librsvg2-bin; scripts/setup.sh installs it)")
        sys.exit(SKIP)
    if len(sys.argv) >= 2 and sys.argv[1] == "--check":
        folders, work = sys.argv[2:], tempfile.gettempdir()
    elif len(sys.argv) == 3:
        strata, work = sys.argv[1], sys.argv[2]
        folders = None
    else:
        fail(__doc__.split("Usage: ")[1])
    os.makedirs(work, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="chart-render-", dir=work)
    try:
        if folders is None:
            folders = draw_charts(strata, scratch)
        count = check_folders(folders, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if problems:
        for p in problems:
            print(f"FAIL: {p}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {count} charts rendered with rsvg-convert: sized, every series visible in its one color, "
          "no label clipped or on a series, memory scaled to the data")


if __name__ == "__main__":
    main()
