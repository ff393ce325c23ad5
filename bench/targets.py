"""Issue 5's targets, read off a GPU bench run (bench/bench.py --json).

    python bench/targets.py RUN.json [EARLIER.json]

Batch-norm rows only.  Prints, per op: the median share of the copy
roofline on minimum bytes for tensors of at least 32 MB (x alone), the
median time for tensors of at most 4 MB, the geometric-mean speedup over
the best anchor and the rows slower than it; then how many NCHW/NHWC pairs
of the same shape, dtype and op are within 15% of each other.  With an
earlier run, also our time in it over ours now, per op (a speedup of the
library between the two runs, each timed in its own process).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict

from bench_report import geomean, roofline_percent, row_key, speedup

BN_OPS = ("bn_infer", "bn_train", "bn_bwd")
ITEM_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp64": 8}
LARGE, SMALL = 32e6, 4e6


def tensor_bytes(row) -> int:
    return math.prod(row["shape"]) * ITEM_BYTES[row["dtype"]]


def load(path: str):
    with open(path) as f:
        document = json.load(f)
    rows = [r for r in document["rows"] if r["op"] in BN_OPS and r.get("verified") and r["us"].get("ours")]
    return document, rows


def report(document, rows, earlier_rows=None) -> list:
    copy_gbs = document["copy_gbs"]
    lines = [f"{document.get('device')}, {document.get('date')}: {len(rows)} verified batch-norm rows, "
             f"copy roofline {copy_gbs:.0f} GB/s"]
    speedups_all = []
    for op in BN_OPS:
        mine = [r for r in rows if r["op"] == op]
        if not mine:
            continue
        large = [roofline_percent(r, copy_gbs) for r in mine if tensor_bytes(r) >= LARGE]
        small = [r["us"]["ours"] for r in mine if tensor_bytes(r) <= SMALL]
        speedups = [s for s in map(speedup, mine) if s is not None]
        speedups_all += speedups
        lines.append(
            f"  {op:9s} >=32 MB: median {statistics.median(large):.0f}% of roofline ({len(large)} rows); "
            f"<=4 MB: median {statistics.median(small):.1f} us ({len(small)} rows); "
            f"geomean speedup {geomean(speedups):.2f}x, {sum(s < 1 for s in speedups)} of {len(speedups)} slower")
    lines.append(f"  all       geomean speedup {geomean(speedups_all):.2f}x, "
                 f"{sum(s < 1 for s in speedups_all)} of {len(speedups_all)} rows slower than the best anchor")
    by_key = {row_key(r): r for r in rows}
    pairs = [(r, by_key.get((r["op"], tuple(r["shape"]), r["dtype"], "nhwc")))
             for r in rows if r["layout"] == "nchw"]
    pairs = [(a, b) for a, b in pairs if b is not None]
    within = sum(max(a["us"]["ours"], b["us"]["ours"]) <= 1.15 * min(a["us"]["ours"], b["us"]["ours"])
                 for a, b in pairs)
    lines.append(f"  NCHW within 15% of NHWC: {within} of {len(pairs)} pairs")
    if earlier_rows is not None:
        before = {row_key(r): r["us"]["ours"] for r in earlier_rows}
        change = defaultdict(list)
        for r in rows:
            if row_key(r) in before:
                change[r["op"]].append(before[row_key(r)] / r["us"]["ours"])
                change["all"].append(before[row_key(r)] / r["us"]["ours"])
        for op, values in change.items():
            lines.append(f"  ours, earlier run over this one, {op}: geomean {geomean(values):.3f}x "
                         f"({len(values)} rows)")
    return lines


def main(argv) -> int:
    if not argv:
        sys.exit(__doc__)
    document, rows = load(argv[0])
    earlier = load(argv[1])[1] if len(argv) > 1 else None
    print("\n".join(report(document, rows, earlier)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
