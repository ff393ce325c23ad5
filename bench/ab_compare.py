"""Compares bench runs of library variants on the same rows.

    python bench/ab_compare.py base.json variant.json [variant2.json ...]

Each JSON is a bench/bench.py result (--json).  Prints, per row present in
every run, our time in each run and its speed relative to the first, then
the geometric mean of those ratios per op and layout.  The best anchor's
time (the fastest of cuDNN, PyTorch native and torch.compile, measured in
each run's own process; GPU_CHECK_AB_ARGS may add --no-compiled) is shown
beside ours: when it moved between runs as much as ours did, the machine
changed, not the library.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

from bench_report import best_anchor_us, geomean, row_key
from bench_shapes import shape_text


def load(path: str) -> dict:
    with open(path) as f:
        return {row_key(r): r for r in json.load(f)["rows"] if r["us"].get("ours") and r.get("verified")}


def main(paths: list) -> int:
    runs = [load(p) for p in paths]
    keys = [k for k in runs[0] if all(k in run for run in runs[1:])]
    names = [f"run{i}" for i in range(len(paths))]
    print("runs: " + ", ".join(f"{n} = {p}" for n, p in zip(names, paths)))
    header = ["op", "shape", "dtype", "layout"]
    for n in names:
        header += [f"{n}_us", f"{n}_anchor"] + (["speed"] if n != names[0] else [])
    print(" | ".join(header))
    ratios = defaultdict(list)
    for key in keys:
        base = runs[0][key]["us"]["ours"]
        op, shape, dtype, layout = key
        cells = [op, shape_text(shape), dtype, layout]
        for i, run in enumerate(runs):
            ours = run[key]["us"]["ours"]
            anchor = best_anchor_us(run[key])
            cells += [f"{ours:.1f}", "-" if anchor is None else f"{anchor:.1f}"]
            if i:
                cells.append(f"{base / ours:.2f}x")
                ratios[(i, op, layout)].append(base / ours)
                ratios[(i, "all", "all")].append(base / ours)
        print(" | ".join(cells))
    print("\ngeomean speed over run0 (rows):")
    for (i, op, layout), values in sorted(ratios.items()):
        print(f"  {names[i]} {op:9s} {layout:5s} {geomean(values):.3f}x ({len(values)} rows, "
              f"min {min(values):.2f}x, max {max(values):.2f}x)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
