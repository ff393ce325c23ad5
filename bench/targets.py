"""Issue 18's (batch norm) and issue 19's (group norm) targets, read off a GPU
bench run (bench/bench.py --json), as PASS / MISS lines.

    python bench/targets.py RUN.json [PART.json ...] [--earlier EARLIER.json]

A run split over several bench processes (say one per op, each within a
device call's time limit) is read as one: pass every part; each row keeps
its own part's copy bandwidth and launch floor.  Tensor sizes are x's bytes
alone (MB = 10^6 bytes); speedups are over the fastest anchor the row has
(cuDNN, PyTorch native, torch.compile); times are medians.  Targets that
need rows the run does not have print NO DATA.  With --earlier, also our
time in that run over ours now, per op.

Where the rows carry copy_us (bench.py times, on the GPU, a plain PyTorch
copy of each row's tensor bytes: y.copy_(x) forward, torch.add(x, dy,
out=dx) backward), each target line is followed by its bound: the same
figure with every row's copy time in place of ours.  No kernel moving those
bytes beats the copy (by more than the copy's own slack), so a bound that
misses the target says the target is out of reach on this part; a bound
that meets it says only that it is reachable in principle.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict

from bench_report import geomean, roofline_percent, row_key, speedup
from bench_shapes import UNET_GN_SHAPES, shape_text

BN_OPS = ("bn_infer", "bn_train", "bn_bwd")
GN_OPS = ("gn_fwd", "gn_fwd_swish", "gn_bwd")
ITEM_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp64": 8}
MB = 1e6

# Issue 18, batch norm on the H100.
BN_GEOMEAN = {"bn_infer": 1.15, "bn_train": 1.6, "bn_bwd": 1.6}
BN_ROOF_MEDIUM = {"bn_train": 65, "bn_bwd": 65}  # % of roofline, 8-32 MB
BN_ROOF_LARGE = {"bn_infer": 90, "bn_train": 60, "bn_bwd": 55}  # >= 32 MB
BN_SMALL_US = {"bn_infer": 6.0, "bn_train": 8.0, "bn_bwd": 8.0}  # median, <= 4 MB
SMALL_OVER_FLOOR = 2.5  # every <= 4 MB row within this many launch floors
LAYOUT_TOLERANCE, LAYOUT_SHARE = 1.15, 0.90
# Issue 19, group norm.
GN_GEOMEAN = 1.5
UNET_US = {"gn_fwd_swish": 8.0, "gn_bwd": 14.0}  # median, fp16/bf16; fp32 within 1.5x
FP32_FACTOR = 1.5
GN_ROOF_HUGE = 60  # % of roofline, >= 64 MB
BOUND_INDENT = " " * 10  # under the text of the target line above


def tensor_bytes(row) -> int:
    return math.prod(row["shape"]) * ITEM_BYTES[row["dtype"]]


def load(paths):
    """(header of the first part, every row of every part); each row gets
    `_copy_gbs` and `_launch_floor_us` from its own part.  A row repeated
    in a later part replaces the earlier one."""
    first, rows = None, {}
    for path in paths:
        with open(path) as f:
            document = json.load(f)
        if first is None:
            first = document
        elif document.get("device") != first.get("device"):
            sys.exit(f"targets: {path} is from {document.get('device')}, not {first.get('device')}")
        for row in document["rows"]:
            row["_copy_gbs"] = document.get("copy_gbs")
            row["_launch_floor_us"] = document.get("launch_floor_us")
            rows[row_key(row)] = row
    return first, list(rows.values())


def timed(rows, ops):
    """Verified rows of `ops` with our time."""
    return [r for r in rows if r["op"] in ops and r.get("verified") and r["us"].get("ours")]


def roof(row):
    return roofline_percent(row, row["_copy_gbs"])


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _shown(value, unit):
    if isinstance(value, int):
        return f"{value}{unit}"
    return f"{value:.2f}{unit}" if unit == "x" else f"{value:.1f}{unit}"


def as_copy(row):
    """The row with its copy time in our place (for bound_lines)."""
    return {**row, "us": {**row["us"], "ours": row["copy_us"]}}


def bound_lines(rows, figure, target, text, unit="", at_most=False, what="a batch norm"):
    """The bound a target line gets from the copy: `figure` (rows -> value,
    or (value, note)), the target's own figure, on the rows that have
    copy_us with the copy's time as ours.  Every such figure (a geomean of
    speedups, a median roofline or time, a count of rows over a limit) moves
    monotonically with each row's time, so ours can do no better than the
    copy's.  `text` holds "{}" for the value.  No line without copy_us."""
    copies = [as_copy(r) for r in rows if r.get("copy_us")]
    result = figure(copies) if copies else None
    value, note = result if isinstance(result, tuple) else (result, "")
    if value is None:
        return []
    ok = value <= target if at_most else value >= target
    return [f"{BOUND_INDENT}bound ({what} as fast as a copy of its bytes, {len(copies)} rows): "
            f"{text.format(_shown(value, unit))}{note} -> target {'<=' if at_most else '>='} "
            f"{target:g}{unit} {'reachable in principle' if ok else 'UNREACHABLE'}"]


def check(ok, text):
    """One target line; ok None: no rows to decide on."""
    status = "NO DATA" if ok is None else ("PASS" if ok else "MISS")
    return f"  {status:7s} {text}"


def at_least(value, target, text, unit="", count=None):
    shown = "-" if value is None else f"{value:.2f}{unit}" if unit == "x" else f"{value:.1f}{unit}"
    rows = "" if count is None else f"; {count} rows"
    return check(None if value is None else value >= target, f"{text}: {shown} (target >= {target:g}{unit}{rows})")


def at_most(value, target, text, unit="", count=None):
    shown = "-" if value is None else f"{value:.1f}{unit}"
    rows = "" if count is None else f"; {count} rows"
    return check(None if value is None else value <= target, f"{text}: {shown} (target <= {target:g}{unit}{rows})")


def coverage_lines(all_rows, ops, anchors):
    """Every row verified, and every anchor of the targets timed on it."""
    mine = [r for r in all_rows if r["op"] in ops]
    verified = sum(1 for r in mine if r.get("verified"))
    lines = [check(verified == len(mine) if mine else None, f"every row verified: {verified} of {len(mine)}")]
    missing = [r for r in mine if any(r["us"].get(a) is None for a in anchors)]
    text = f"every anchor ({', '.join(anchors)}) timed on every row: {len(mine) - len(missing)} of {len(mine)}"
    if missing:
        first = missing[0]
        absent = [a for a in anchors if first["us"].get(a) is None]
        text += (f" (first without: {first['op']} {shape_text(first['shape'])} {first['dtype']} "
                 f"{first['layout']}: no {', '.join(absent)}{'; ' + first['compiled_error'][:80] if first.get('compiled_error') else ''})")
    lines.append(check(not missing if mine else None, text))
    return lines


def _named(row):
    return f"{row['op']} {shape_text(row['shape'])} {row['dtype']} {row['layout']}"


def _listed(pairs, count, digits=2):
    """'; worst ...' naming the first `count` (ratio, row) pairs."""
    if not pairs:
        return ""
    return "; worst " + ", ".join(f"{v:.{digits}f}x {_named(r)}" for v, r in pairs[:count])


def _counted(pairs, count, digits=2):
    """(how many, '; worst ...'): a count target's figure for bound_lines."""
    return len(pairs), _listed(pairs, count, digits)


def geomean_speedup(rows):
    return geomean([speedup(r) for r in rows])


def median_roof(rows):
    return median([roof(r) for r in rows])


def median_us(rows):
    return median([r["us"]["ours"] for r in rows])


def below_one(rows):
    """(speedup, row) of the rows slower than their best anchor, worst first."""
    return sorted(((g, r) for g, r in ((speedup(r), r) for r in rows) if g is not None and g < 1.0),
                  key=lambda p: p[0])


def slower_lines(rows, what, family):
    gains = [g for g in (speedup(r) for r in rows) if g is not None]
    slow = below_one(rows)
    text = f"no {what} row below 1.0x over the best anchor: {len(slow)} of {len(gains)} below" + _listed(slow, 3)
    return [check(not slow if gains else None, text)] + bound_lines(
        rows, lambda rs: _counted(below_one(rs), 5), 0,
        "rows whose best anchor beats the copy: {}", " rows", at_most=True, what=family)


def batch_norm_lines(all_rows, backend):
    rows = timed(all_rows, BN_OPS)
    anchors = ("cudnn", "torch_native", "compiled") if backend == "gpu" else ("torch_native", "compiled")
    lines = ["issue 18, batch norm:"] + coverage_lines(all_rows, BN_OPS, anchors)
    for op in BN_OPS:
        mine = [r for r in rows if r["op"] == op]
        count = sum(1 for r in mine if speedup(r) is not None)
        lines.append(at_least(geomean_speedup(mine), BN_GEOMEAN[op], f"{op} geomean speedup over the best anchor",
                              "x", count))
        lines += bound_lines(mine, geomean_speedup, BN_GEOMEAN[op], "geomean {} over the best anchor", "x")
    lines += slower_lines(rows, "batch-norm", "a batch norm")
    for op, target in BN_ROOF_MEDIUM.items():
        mine = [r for r in rows if r["op"] == op and 8 * MB <= tensor_bytes(r) < 32 * MB]
        lines.append(at_least(median_roof(mine), target, f"{op} 8-32 MB median roofline", "%", len(mine)))
        lines += bound_lines(mine, median_roof, target, "median roofline {}", "%")
    for op, target in BN_ROOF_LARGE.items():
        mine = [r for r in rows if r["op"] == op and tensor_bytes(r) >= 32 * MB]
        lines.append(at_least(median_roof(mine), target, f"{op} >= 32 MB median roofline", "%", len(mine)))
        lines += bound_lines(mine, median_roof, target, "median roofline {}", "%")
    small = [r for r in rows if tensor_bytes(r) <= 4 * MB]
    for op, target in BN_SMALL_US.items():
        mine = [r for r in small if r["op"] == op]
        lines.append(at_most(median_us(mine), target, f"{op} <= 4 MB median time", " us", len(mine)))
        lines += bound_lines(mine, median_us, target, "median time {}", " us", at_most=True)
    lines += launch_floor_lines(small)
    lines.append(layout_line(rows))
    return lines


def over_floor(small):
    """(time / launch floor, row) of the rows with a launch floor over
    SMALL_OVER_FLOOR of them, worst first."""
    return sorted(((r["us"]["ours"] / r["_launch_floor_us"], r) for r in small if r.get("_launch_floor_us")
                   and r["us"]["ours"] > SMALL_OVER_FLOOR * r["_launch_floor_us"]), key=lambda p: -p[0])


def launch_floor_lines(small):
    """Every <= 4 MB row within SMALL_OVER_FLOOR launch floors (its part's)."""
    judged = [r for r in small if r.get("_launch_floor_us")]
    over = over_floor(judged)
    floors = sorted({round(r["_launch_floor_us"], 2) for r in judged})
    text = (f"every <= 4 MB row <= {SMALL_OVER_FLOOR:g}x the empty-launch time "
            f"({'/'.join(f'{f:.2f}' for f in floors) or '-'} us): {len(over)} of {len(judged)} rows over")
    return [check(not over if judged else None, text + _listed(over, 3, 1))] + bound_lines(
        judged, lambda rs: _counted(over_floor(rs), 5, 1), 0,
        f"rows whose copy is over {SMALL_OVER_FLOOR:g} floors: {{}}", " rows", at_most=True)


def layout_line(rows):
    by_key = {row_key(r): r for r in rows}
    pairs = [(r, by_key.get((r["op"], tuple(r["shape"]), r["dtype"], "nhwc")))
             for r in rows if r["layout"] == "nchw"]
    pairs = [(a, b) for a, b in pairs if b is not None]
    within = sum(max(a["us"]["ours"], b["us"]["ours"]) <= LAYOUT_TOLERANCE * min(a["us"]["ours"], b["us"]["ours"])
                 for a, b in pairs)
    share = within / len(pairs) if pairs else None
    return check(None if share is None else share >= LAYOUT_SHARE,
                 f"NCHW within 15% of NHWC: {within} of {len(pairs)} pairs "
                 f"({'-' if share is None else f'{100 * share:.0f}%'}; target >= {100 * LAYOUT_SHARE:.0f}%)")


def group_norm_lines(all_rows):
    rows = timed(all_rows, GN_OPS)
    unet = [r for r in rows if tuple(r["shape"]) in set(UNET_GN_SHAPES)]
    lines = ["issue 19, group norm:"] + coverage_lines(all_rows, GN_OPS, ("torch_native", "compiled"))
    what = "a group norm"
    for op, target in UNET_US.items():
        for dtypes, limit in ((("fp16", "bf16"), target), (("fp32",), FP32_FACTOR * target)):
            mine = [r for r in unet if r["op"] == op and r["dtype"] in dtypes]
            lines.append(at_most(median_us(mine), limit, f"UNet {op} {'/'.join(dtypes)} median time", " us",
                                 len(mine)))
            lines += bound_lines(mine, median_us, limit, "median time {}", " us", at_most=True, what=what)
    for op in GN_OPS:
        mine = [r for r in rows if r["op"] == op]
        count = sum(1 for r in mine if speedup(r) is not None)
        text = f"{op} geomean speedup over the best of eager and compiled"
        line = at_least(geomean_speedup(mine), GN_GEOMEAN, text, "x", count)
        unet_geo = geomean_speedup([r for r in unet if r["op"] == op])
        lines.append(line + ("" if unet_geo is None else f"; UNet group {unet_geo:.2f}x"))
        lines += bound_lines(mine, geomean_speedup, GN_GEOMEAN, "geomean {} over the best anchor", "x", what=what)
    lines += slower_lines(rows, "group-norm", what)
    for op in GN_OPS:
        mine = [r for r in rows if r["op"] == op and tensor_bytes(r) >= 64 * MB]
        lines.append(at_least(median_roof(mine), GN_ROOF_HUGE, f"{op} >= 64 MB median roofline", "%", len(mine)))
        lines += bound_lines(mine, median_roof, GN_ROOF_HUGE, "median roofline {}", "%", what=what)
    unet_fwd = median([r["us"]["ours"] for r in unet if r["op"] == "gn_fwd" and r["dtype"] != "fp32"])
    if unet_fwd is not None:
        lines.append(f"  (UNet gn_fwd fp16/bf16 median time {unet_fwd:.1f} us: no target of its own)")
    return lines


def earlier_lines(rows, earlier_rows):
    before = {row_key(r): r["us"]["ours"] for r in earlier_rows if r.get("verified") and r["us"].get("ours")}
    change = defaultdict(list)
    for r in rows:
        if row_key(r) in before and r.get("verified") and r["us"].get("ours"):
            change[r["op"]].append(before[row_key(r)] / r["us"]["ours"])
            change["all"].append(before[row_key(r)] / r["us"]["ours"])
    return [f"  ours, earlier run over this one, {op}: geomean {geomean(values):.3f}x ({len(values)} rows)"
            for op, values in change.items()]


def report(document, rows, earlier_rows=None) -> list:
    floor = document.get("launch_floor_us")
    lines = [f"{document.get('device')}, {document.get('date')}: {len(rows)} rows, copy roofline "
             f"{document['copy_gbs']:.0f} GB/s, launch floor "
             f"{'not recorded' if floor is None else f'{floor:.2f} us'}"]
    copied = sum(1 for r in rows if r.get("copy_us"))
    lines.append(f"copy bound: copy_us on {copied} of {len(rows)} rows (bound lines: each target's figure with "
                 f"the copy's time as ours)" if copied else "copy bound: no copy_us in this run, no bound lines")
    if any(r["op"] in BN_OPS for r in rows):
        lines += batch_norm_lines(rows, document.get("backend"))
    if any(r["op"] in GN_OPS for r in rows):
        lines += group_norm_lines(rows)
    if earlier_rows is not None:
        lines += earlier_lines(rows, earlier_rows)
    return lines


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="bench JSON files, the parts of one run")
    parser.add_argument("--earlier", help="an earlier run's JSON, to compare our times with")
    args = parser.parse_args(argv)
    document, rows = load(args.runs)
    earlier = load([args.earlier])[1] if args.earlier else None
    print("\n".join(report(document, rows, earlier)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
