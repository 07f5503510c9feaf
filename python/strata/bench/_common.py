"""What the benchmarks share: timing, sizes, and the report (a table, or JSON lines)."""
import json
import statistics
import time


def parse_count(text):
    """'256M' -> 268435456, '16K' -> 16384, '1000' -> 1000 (binary multiples)."""
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text[:-1] if mult > 1 else text) * mult)


def time_median(fn, reps, warmup=1):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), (max(times) - min(times)) / statistics.median(times)


class Report:
    def __init__(self, as_json, title):
        self.as_json, self.rows = as_json, []
        if not as_json:
            print(title)

    def add(self, row):
        self.rows.append(row)
        if self.as_json:
            print(json.dumps(row), flush=True)
        else:
            print("  " + "  ".join(f"{k}={_fmt(v)}" for k, v in row.items()), flush=True)

    def note(self, text):
        if self.as_json:
            print(json.dumps({"note": text}), flush=True)
        else:
            print("  note: " + text, flush=True)


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)
