"""The copy bound: bench.py's copy of each GPU row's bytes (copy_us, beside
the anchors, never among them) and the bound lines bench/targets.py draws
from it under each target, on small synthetic runs whose figures are worked
out by hand."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support import REPO  # noqa: E402

BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import bench_report  # noqa: E402
import targets  # noqa: E402

COPY_GBS, FLOOR = 1000.0, 4.0
MEDIUM = [8, 64, 64, 64]  # fp32: 8.4 MB of x, in the 8-32 MB roofline band
SMALL = [2, 8, 4, 4]


def row(op, shape, ours, anchor, copy=None, layout="nchw", bytes_min=None):
    r = {"op": op, "shape": shape, "dtype": "fp32", "layout": layout,
         "bytes_min": bytes_min or 2 * 4 * targets.math.prod(shape), "verified": True,
         "us": {"ours": ours, "cudnn": anchor, "torch_native": anchor * 1.5, "compiled": anchor * 2}}
    if copy is not None:
        r["copy_us"] = copy
    return r


def report(rows):
    document = {"device": "d", "date": "t", "backend": "gpu", "copy_gbs": COPY_GBS, "launch_floor_us": FLOOR,
                "rows": rows}
    for r in rows:
        r["_copy_gbs"], r["_launch_floor_us"] = COPY_GBS, FLOOR
    return targets.report(document, rows)


def after(lines, start):
    """The line right after the target line that starts with `start`
    ('' when the target line is the last)."""
    (index,) = [i for i, line in enumerate(lines) if line.startswith(start)]
    return lines[index + 1] if index + 1 < len(lines) else ""


def test_geomean_bound_is_best_anchor_over_copy_on_the_rows_with_a_copy():
    rows = [row("bn_train", SMALL, 10.0, 8.0, copy=8.0),     # 1.0x
            row("bn_train", SMALL, 10.0, 8.0, copy=4.0),     # 2.0x
            row("bn_train", SMALL, 10.0, 8.0, copy=2.0),     # 4.0x: geomean 2.0x
            row("bn_train", MEDIUM, 10.0, 8.0),              # no copy: not in the bound
            row("bn_bwd", SMALL, 10.0, 6.0, copy=5.0, layout="nhwc"),   # 1.2x
            row("bn_bwd", SMALL, 10.0, 6.0, copy=6.0)]       # 1.0x: geomean 1.095x
    lines = report(rows)
    assert lines[1] == "copy bound: copy_us on 5 of 6 rows (bound lines: each target's figure with the copy's " \
                       "time as ours)"
    train = after(lines, "  MISS    bn_train geomean speedup")
    assert train.startswith(" " * 10 + "bound (a batch norm as fast as a copy of its bytes, 3 rows): ")
    assert "geomean 2.00x over the best anchor -> target >= 1.6x reachable in principle" in train
    bwd = after(lines, "  MISS    bn_bwd geomean speedup")
    assert "geomean 1.10x over the best anchor -> target >= 1.6x UNREACHABLE" in bwd
    assert not after(lines, "  NO DATA bn_infer geomean").lstrip().startswith("bound")


def test_rows_whose_best_anchor_beats_the_copy_are_counted_and_named():
    rows = [row("bn_infer", SMALL, 10.0, 4.0, copy=5.0),   # 0.80x: no kernel of ours can reach 1.0x
            row("bn_infer", [4, 8, 4, 4], 10.0, 3.0, copy=5.0),  # 0.60x, the worst
            row("bn_infer", [8, 8, 4, 4], 10.0, 6.0, copy=5.0)]  # 1.20x
    bound = after(report(rows), "  MISS    no batch-norm row below 1.0x")
    assert "3 rows): rows whose best anchor beats the copy: 2 rows; worst 0.60x bn_infer 4x8x4x4 fp32 nchw, " \
           "0.80x bn_infer 2x8x4x4 fp32 nchw -> target <= 0 rows UNREACHABLE" in bound


def test_roofline_bound_is_the_median_of_the_copy_roofline():
    rows = [row("bn_train", MEDIUM, 100.0, 90.0, copy=copy, bytes_min=10**7)  # 10 MB moved
            for copy in (20.0, 10.0, 40.0)]  # 50%, 100%, 25% of 1000 GB/s: median 50%
    bound = after(report(rows), "  MISS    bn_train 8-32 MB median roofline")
    assert "median roofline 50.0% -> target >= 65% UNREACHABLE" in bound
    rows = [row("bn_train", MEDIUM, 100.0, 90.0, copy=copy, bytes_min=10**7) for copy in (12.5, 14.0, 40.0)]
    assert "median roofline 71.4% -> target >= 65% reachable in principle" in after(
        report(rows), "  MISS    bn_train 8-32 MB median roofline")


def test_small_time_and_launch_floor_bounds_read_the_copy_time():
    rows = [row("bn_bwd", SMALL, 12.0, 11.0, copy=copy) for copy in (9.0, 11.0, 7.0)]  # median 9.0 us
    lines = report(rows)
    assert "median time 9.0 us -> target <= 8 us UNREACHABLE" in after(lines, "  MISS    bn_bwd <= 4 MB median")
    floor = after(lines, "  MISS    every <= 4 MB row <= 2.5x")  # 2.5 floors = 10 us: only 11 us is over
    assert "rows whose copy is over 2.5 floors: 1 rows; worst 2.8x bn_bwd 2x8x4x4 fp32 nchw -> target <= 0 rows " \
           "UNREACHABLE" in floor


def test_group_norm_bounds_name_a_group_norm():
    unet = [2, 320, 8, 8]
    rows = [row("gn_bwd", unet, 30.0, 20.0, copy=5.0), row("gn_bwd", unet, 30.0, 20.0, copy=10.0, layout="nhwc")]
    for r in rows:
        del r["us"]["cudnn"]
    lines = report(rows)
    assert "bound (a group norm as fast as a copy of its bytes, 2 rows): median time 7.5 us -> target <= 21 us " \
           "reachable in principle" in after(lines, "  MISS    UNet gn_bwd fp32 median time")
    assert not after(lines, "  NO DATA UNet gn_bwd fp16/bf16").lstrip().startswith("bound")
    # best anchor torch native, 30 us (no cuDNN): 30/5 = 6x and 30/10 = 3x, geomean 4.24x
    assert "geomean 4.24x over the best anchor -> target >= 1.5x reachable in principle" in after(
        lines, "  MISS    gn_bwd geomean speedup")


def test_a_run_without_copy_us_has_no_bound_lines(tmp_path):
    rows = [row("bn_train", SMALL, 10.0, 8.0), row("gn_fwd", [2, 320, 8, 8], 10.0, 8.0)]
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"device": "d", "date": "t", "backend": "gpu", "copy_gbs": COPY_GBS,
                                "launch_floor_us": FLOOR, "rows": rows}))
    out = subprocess.run([sys.executable, str(BENCH / "targets.py"), str(path)], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert "copy bound: no copy_us in this run, no bound lines" in out
    assert "bound (" not in out and "MISS    bn_train geomean" in out


def test_copy_us_is_beside_the_anchors_not_among_them(tmp_path):
    fast_copy = row("bn_infer", SMALL, 10.0, 8.0, copy=1.0)
    assert bench_report.best_anchor_us(fast_copy) == 8.0
    assert bench_report.speedup(fast_copy) == pytest.approx(0.8)
    document = {"device": "d", "backend": "gpu", "command": "c", "date": "t", "copy_gbs": COPY_GBS,
                "rows": [fast_copy, row("bn_train", SMALL, 10.0, 8.0)]}
    path = tmp_path / "run.md"
    bench_report.write_markdown(str(path), document)
    table = [line for line in path.read_text().splitlines() if line.startswith("| ")]
    assert table[0].endswith("| ok | copy_us |")
    assert table[1].endswith("| yes | 1.0 |") and table[2].endswith("| yes | - |")
    document["rows"] = document["rows"][1:]
    bench_report.write_markdown(str(path), document)
    assert "copy_us" not in path.read_text()


class CountingTimer:
    """Runs every call of a timing once; the n-th timing 'takes' n us."""

    def __init__(self):
        self.timings = 0

    def device_us(self, calls):
        for call in calls:
            call()
        self.timings += 1
        return float(self.timings)

    def host_us(self, call):
        return 0.0


@pytest.mark.parametrize("shape,dtype,layout", [((2, 32, 3, 5), "bf16", "nhwc"), ((3, 32, 4), "fp32", "nhwc"),
                                                ((2, 32, 3, 3), "fp16", "nchw")])
def test_the_copy_moves_each_slots_own_tensors_and_lands_beside_us(shape, dtype, layout, monkeypatch):
    """The GPU path's timing (_time_one_by_one) driven on the CPU: after ours
    (1 us, no anchors) comes the copy (2 us), over every rotation slot, on
    buffers of the row's dtype and strides; y (or dx) then holds exactly the
    copy's result, which no batch or group norm would produce."""
    torch = pytest.importorskip("torch")
    import bench
    import miopen_bn
    from bench_data import CaseData
    threads = torch.get_num_threads()
    env = bench.Environment(bench.parse_args(["--backend", "cpu", "--no-compiled"]), torch, miopen_bn)
    try:
        env.timer = CountingTimer()
        monkeypatch.setattr(env, "rotation_slots", lambda nbytes: 3)
        case = CaseData(torch, shape, dtype, "cpu")
        runner = bench.CaseRunner(env, case, layout, None, bench.OPS)
        assert len(runner.slots) == 3
        for i, s in enumerate(runner.slots):  # each slot's x its own, so a copy of another slot's shows
            s.x.add_(i)
        for op in bench.OPS:
            env.timer.timings = 0
            row, errors = {"us": {"ours": None}}, []
            runner._time_one_by_one(op, row, errors, ())
            assert not errors and row["us"] == {"ours": 1.0} and row["copy_us"] == 2.0, (op, errors)
            for s in runner.slots:
                out, want = (s.dx, s.x + s.dy) if op.endswith("bwd") else (s.y, s.x)
                assert out.dtype == s.x.dtype and out.stride() == s.x.stride(), op
                assert torch.equal(out, want), op
                assert out.data_ptr() not in {t.y.data_ptr() for t in runner.slots if t is not s} | \
                    {t.dx.data_ptr() for t in runner.slots if t is not s}
    finally:
        env.handle.close()
        torch.set_num_threads(threads)
