"""The bench's outputs: the printed table, the JSON file, a Markdown section
for bench/RESULTS.md and the roofline plot."""
import json
import math
import os

from bench_shapes import shape_text

COLUMNS = ("op", "shape", "dtype", "layout", "ours_us", "cudnn_us", "native_us", "compiled_us",
           "host_us", "roof%", "speedup", "ok")
WIDTHS = (8, 18, 5, 6, 10, 10, 10, 11, 8, 6, 8, 4)
# Every anchor a row may hold (the JSON's "us" keys beside "ours"); speedups
# are over the fastest one present.
ANCHORS = ("cudnn", "torch_native", "compiled")


def _fmt_us(value):
    return "-" if value is None else f"{value:.1f}"


def row_key(row):
    """What names a row across runs: op, shape, dtype and layout."""
    return (row["op"], tuple(row["shape"]), row["dtype"], row["layout"])


def best_anchor_us(row, key="us", anchors=ANCHORS):
    """The fastest anchor's time (cuDNN, PyTorch native, torch.compile; or
    those of `anchors`), or None."""
    times = row.get(key) or {}
    present = [times[k] for k in anchors if times.get(k) is not None]
    return min(present) if present else None


def speedup(row, key="us", anchors=ANCHORS):
    """Best anchor time over ours, from the medians ("us") or, on the CPU,
    the minimum times ("us_min")."""
    ours, best = (row.get(key) or {}).get("ours"), best_anchor_us(row, key, anchors)
    if ours is None or best is None or ours <= 0:
        return None
    return best / ours


def roofline_percent(row, copy_gbs):
    ours = row["us"].get("ours")
    if ours is None or not copy_gbs:
        return None
    return 100.0 * row["bytes_min"] / (ours * 1e-6) / (copy_gbs * 1e9)


def _cells(row, copy_gbs):
    roof = roofline_percent(row, copy_gbs)
    gain = speedup(row)
    return (row["op"], shape_text(row["shape"]), row["dtype"], row["layout"], _fmt_us(row["us"].get("ours")),
            _fmt_us(row["us"].get("cudnn")), _fmt_us(row["us"].get("torch_native")),
            _fmt_us(row["us"].get("compiled")), _fmt_us(row.get("host_us")), "-" if roof is None else f"{roof:.0f}",
            "-" if gain is None else f"{gain:.2f}x", "yes" if row["verified"] else "NO")


def table_header():
    line = " ".join(name.rjust(width) for name, width in zip(COLUMNS, WIDTHS))
    return line + "\n" + "-" * len(line)


def table_line(row, copy_gbs):
    line = " ".join(cell.rjust(width) for cell, width in zip(_cells(row, copy_gbs), WIDTHS))
    if row.get("error"):
        line += "  ! " + row["error"]
    return line


def write_json(path, document):
    """Written whole to a temporary file then renamed, so an interrupted run
    leaves the last complete version."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(document, handle, indent=1)
        handle.write("\n")
    os.replace(tmp, path)


def geomean(values):
    values = [v for v in values if v is not None and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summary_lines(document):
    """A short reading: geomean speedup per op, worst shapes, roofline share."""
    rows = document["rows"]
    copy_gbs = document.get("copy_gbs")
    lines = []
    verified = sum(1 for r in rows if r["verified"])
    lines.append(f"rows: {len(rows)}, verified: {verified}, NOT verified: {len(rows) - verified}")
    for op in sorted({r["op"] for r in rows}):
        op_rows = [r for r in rows if r["op"] == op]
        gains = [(speedup(r), r) for r in op_rows if speedup(r) is not None]
        roofs = sorted(p for p in (roofline_percent(r, copy_gbs) for r in op_rows) if p is not None)
        geo = geomean([g for g, _ in gains])
        text = f"{op}: geomean speedup over best anchor "
        text += "-" if geo is None else f"{geo:.2f}x"
        if gains:
            worst_gain, worst = min(gains, key=lambda pair: pair[0])
            text += (f"; worst {worst_gain:.2f}x at {shape_text(worst['shape'])} {worst['dtype']} "
                     f"{worst['layout']}")
        if roofs:
            text += f"; roofline median {roofs[len(roofs) // 2]:.0f}% (min {roofs[0]:.0f}%, " \
                    f"max {roofs[-1]:.0f}%)"
        lines.append(text)
    if any(r.get("us_min") for r in rows):
        geo = geomean([speedup(r, "us_min") for r in rows])
        if geo is not None:
            lines.append(f"on minimum instead of median times: geomean speedup {geo:.2f}x")
    for dtype in sorted({r["dtype"] for r in rows}):
        geo = geomean([speedup(r) for r in rows if r["dtype"] == dtype])
        if geo is not None:
            lines.append(f"{dtype}: geomean speedup {geo:.2f}x")
    for layout in sorted({r["layout"] for r in rows}):
        geo = geomean([speedup(r) for r in rows if r["layout"] == layout])
        if geo is not None:
            lines.append(f"{layout}: geomean speedup {geo:.2f}x")
    lines += anchor_lines(document)
    return lines


def anchor_lines(document):
    """The launch floor, and how the torch.compile anchor fared: rows timed,
    compile failures and left-out rows, outputs off the reference, compile
    seconds, and our speedup over it alone."""
    rows, lines = document["rows"], []
    if document.get("launch_floor_us") is not None:
        floor = document.get("launch_floor") or {}
        lines.append(f"launch floor {document['launch_floor_us']:.2f} us ({floor.get('how', '?')})")
    if "compiled" not in document.get("anchors", ()):
        return lines
    timed = sum(1 for r in rows if r["us"].get("compiled") is not None)
    failed = [r for r in rows if r.get("compiled_error")]
    wrong = sum(1 for r in rows if r.get("compiled_verified") is False)
    text = f"torch.compile anchor: timed on {timed} of {len(rows)} rows"
    if failed:
        text += f"; {len(failed)} without it (first: {failed[0]['compiled_error'][:120]})"
    if wrong:
        text += f"; {wrong} with outputs off the reference (their times still count)"
    lines.append(text)
    ahead = document.get("precompile") or {}
    if ahead.get("workers") and ahead.get("jobs"):
        lines.append(f"pre-compiled by {ahead['workers']} workers before timing: {ahead['compiled']} of "
                     f"{ahead['jobs']} rows in {ahead['seconds']:.0f} s ({ahead['failed']} failed)")
    cost = document.get("compiled") or {}
    if cost.get("compiles"):
        lines.append(f"compiles in the bench: {cost['compiles']} ({cost.get('cache_hits', 0)} from Inductor's "
                     f"cache), {cost['total_s']:.0f} s in all, median {cost['median_s']:.2f} s, "
                     f"max {cost['max_s']:.2f} s")
    geo = geomean([speedup(r, anchors=("compiled",)) for r in rows])
    if geo is not None:
        lines.append(f"over torch.compile alone: geomean speedup {geo:.2f}x")
    return lines


def write_markdown(path, document):
    """A section for bench/RESULTS.md: command, machine, date, table, reading."""
    copy_gbs = document.get("copy_gbs")
    out = [f"## {document['device']} ({document['backend']})", "",
           "```", document["command"], "```", "",
           f"- machine: {document['device']}; {document.get('machine_note', '')}",
           f"- date: {document['date']}",
           f"- timing: {document.get('timing', '?')}",
           f"- torch {document.get('torch')}; miopen_bn {document.get('miopen_bn')}; "
           + (f"copy bandwidth {copy_gbs:.1f} GB/s (bytes read + written)" if copy_gbs
              else "copy bandwidth not measured"),
           "", "Reading:", ""]
    out += [f"- {line}" for line in summary_lines(document)]
    with_min = any(r.get("us_min") for r in document["rows"])
    with_copy = any(r.get("copy_us") is not None for r in document["rows"])  # GPU runs since copy_us
    columns = (COLUMNS + (("ours_min", "native_min", "compiled_min") if with_min else ())
               + (("copy_us",) if with_copy else ()))
    out += ["", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in document["rows"]:
        cells = _cells(row, copy_gbs)
        if with_min:
            least = row.get("us_min") or {}
            cells += (_fmt_us(least.get("ours")), _fmt_us(least.get("torch_native")),
                      _fmt_us(least.get("compiled")))
        if with_copy:
            cells += (_fmt_us(row.get("copy_us")),)
        out.append("| " + " | ".join(cells) + " |")
    if document.get("skipped"):
        out += ["", f"Left out by the time budget: {', '.join(document['skipped'])}"]
    with open(path, "w") as handle:
        handle.write("\n".join(out) + "\n")


def write_plot(path, document):
    """Achieved bandwidth on minimum bytes against tensor size, one panel per
    op, with the copy bandwidth as the roof.  Returns False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = document["rows"]
    ops = sorted({r["op"] for r in rows})
    if not ops:
        return False
    figure, axes = plt.subplots(1, len(ops), figsize=(6 * len(ops), 4.5), squeeze=False)
    series = (("ours", "o", "ours"), ("cudnn", "s", "cuDNN"), ("torch_native", "^", "torch native"),
              ("compiled", "v", "torch.compile"))
    for axis, op in zip(axes[0], ops):
        op_rows = [r for r in rows if r["op"] == op]
        for key, marker, label in series:
            points = [(r["bytes_min"], r["bytes_min"] / (r["us"][key] * 1e-6) / 1e9)
                      for r in op_rows if r["us"].get(key)]
            if points:
                axis.scatter([p[0] for p in points], [p[1] for p in points], marker=marker,
                             s=14, alpha=0.7, label=label)
        if document.get("copy_gbs"):
            axis.axhline(document["copy_gbs"], linestyle="--", color="gray", label="copy")
        axis.set_xscale("log")
        axis.set_xlabel("minimum bytes moved")
        axis.set_ylabel("GB/s on minimum bytes")
        axis.set_title(op)
        axis.legend(fontsize=8)
    figure.suptitle(f"{document['device']} ({document['backend']}), {document['date']}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True
