"""The bench's torch.compile anchor and launch floor (bench/bench_compiled.py,
bench/bench_precompile.py, bench/targets.py): compile failures and the
compile budget are recorded, never fatal; the pre-compile workers build
arguments of the bench's exact metadata; one CPU run end to end, through
Inductor, with every row's compiled output checked against the reference.
No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from support import REPO  # noqa: E402

BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import bench  # noqa: E402
import bench_compiled  # noqa: E402
import bench_report  # noqa: E402
import targets  # noqa: E402
from bench_data import CaseData  # noqa: E402

import miopen_bn  # noqa: E402


@pytest.fixture
def dynamo_config():
    """Dynamo's settings as the tests found them, restored afterwards.

    Saved and set back by hand: pytest 9.2's monkeypatch undoes a setting of
    Dynamo's config module by deleting it (the module serves its settings
    through __getattr__), and a deleted setting no longer exists for the
    tests after."""
    config = torch._dynamo.config
    names = ("recompile_limit", "accumulated_recompile_limit", "fail_on_recompile_limit_hit", "suppress_errors")
    saved = {name: getattr(config, name) for name in names if hasattr(config, name)}
    yield config
    for name, value in saved.items():
        setattr(config, name, value)


def test_dynamo_never_falls_back_to_eager_silently(dynamo_config):
    bench_compiled.configure_dynamo()
    assert dynamo_config.recompile_limit >= 1 << 16
    assert dynamo_config.accumulated_recompile_limit >= 1 << 20
    assert dynamo_config.fail_on_recompile_limit_hit is True
    assert dynamo_config.suppress_errors is False


def test_spent_budget_leaves_rows_out_without_compiling(dynamo_config):
    anchors = bench_compiled.CompiledAnchors(lambda: None, budget_s=0)
    key = ("bn_infer", (2, 4), "fp32", "nchw")
    with pytest.raises(bench_compiled.CompileBudgetSpent, match="compile budget of 0 s was spent") as first:
        anchors.get(key, "bn_infer", ())
    with pytest.raises(bench_compiled.CompileBudgetSpent) as again:
        anchors.get(key, "bn_infer", ())
    assert again.value is first.value and anchors.compile_s == []


def test_a_failed_compile_is_raised_once_per_row(dynamo_config, monkeypatch):
    def graph_break(x, *_):
        torch._dynamo.graph_break()
        return x

    monkeypatch.setitem(bench_compiled.FUNCTIONS, "bn_infer", graph_break)
    anchors = bench_compiled.CompiledAnchors(lambda: None)
    anchors.new_case()
    args = bench_compiled.blank_arguments("bn_infer", (2, 4, 3, 3), "fp32", "nchw", "cpu")
    with pytest.raises(Exception) as failure:
        anchors.get("row", "bn_infer", args)
    text = bench_compiled.error_text(failure.value)
    assert "\n" not in text and len(text) < 500 and "graph" in text.lower()
    with pytest.raises(Exception) as again:
        anchors.get("row", "bn_infer", args)
    assert again.value is failure.value
    assert len(anchors.compile_s) == 1 and anchors.failures == 1
    anchors.new_case()


def metadata(value):
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), value.stride(), value.dtype, value.storage_offset(), value.requires_grad)
    return value


@pytest.mark.parametrize("shape,dtype,layout", [((2, 64, 3, 5), "bf16", "nhwc"), ((3, 32, 4), "fp32", "nhwc"),
                                                ((2, 32, 2, 3, 4), "fp16", "nhwc"), ((4, 64, 3, 3), "fp32", "nchw")])
def test_precompile_workers_build_the_bench_arguments_metadata(shape, dtype, layout):
    """The workers' cache entries serve the bench only if Dynamo sees the
    same shapes, strides and dtypes, and no aliasing the bench lacks."""
    threads = torch.get_num_threads()
    env = bench.Environment(bench.parse_args(["--backend", "cpu", "--no-compiled"]), torch, miopen_bn)
    try:
        case = CaseData(torch, shape, dtype, "cpu")
        ops = bench.OPS if len(shape) != 3 else bench.BN_OPS  # torch's CPU group norm takes no 3-D NHWC
        runner = bench.CaseRunner(env, case, layout, None, ops)
        for op in ops:
            blank = bench_compiled.blank_arguments(op, shape, dtype, layout, "cpu")
            real = runner.compiled_arguments(op, runner.slots[0])
            assert [metadata(v) for v in blank] == [metadata(v) for v in real], op
            tensors = [v for v in blank if isinstance(v, torch.Tensor)]
            assert len({t.data_ptr() for t in tensors}) == len(tensors), f"{op}: aliased arguments"
    finally:
        env.handle.close()
        torch.set_num_threads(threads)


def test_targets_read_the_launch_floor_and_every_anchor():
    row = {"op": "bn_infer", "shape": [2, 8, 4, 4], "dtype": "fp32", "layout": "nchw", "bytes_min": 1024,
           "verified": True, "us": {"ours": 5.0, "cudnn": 9.0, "torch_native": 8.0, "compiled": 4.0}}
    assert bench_report.best_anchor_us(row) == 4.0 and bench_report.speedup(row) == pytest.approx(0.8)
    document = {"device": "d", "date": "t", "backend": "gpu", "copy_gbs": 1000.0, "launch_floor_us": 4.0,
                "rows": [row]}
    for r in document["rows"]:
        r["_copy_gbs"], r["_launch_floor_us"] = 1000.0, 4.0
    lines = targets.report(document, document["rows"])
    assert any(line.startswith("  MISS    no batch-norm row below 1.0x") for line in lines)
    assert any(line.startswith("  PASS    every <= 4 MB row <= 2.5x the empty-launch time") for line in lines)
    assert any(line.startswith("  PASS    bn_infer <= 4 MB median time") for line in lines)
    row["us"]["ours"] = 10.5  # over 2.5 launch floors
    lines = targets.report(document, document["rows"])
    assert any(line.startswith("  MISS    every <= 4 MB row <= 2.5x") and "1 of 1 rows over; worst 2.6x" in line
               for line in lines)
    assert any(line.startswith("  NO DATA bn_train") for line in lines)


def test_cpu_run_times_and_checks_the_compiled_anchor(tmp_path):
    """One small row through the whole bench on the CPU, compiled by Inductor
    (its C++ backend) in the bench's process, the compiled output checked
    against the float64 reference.  (The pre-compile workers are left out:
    starting one costs CI another torch import and cold compile.)"""
    out = tmp_path / "run.json"
    result = subprocess.run(
        [sys.executable, str(BENCH / "bench.py"), "--backend", "cpu", "--threads", "1", "--shapes", "2x8x3x3",
         "--ops", "bn_train", "--layouts", "nhwc", "--json", str(out)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    document = json.loads(out.read_text())
    assert document["launch_floor_us"] > 0 and "how" in document["launch_floor"]
    assert document["anchors"] == ["torch_native", "compiled"]
    assert document["precompile"]["workers"] == 0 and document["compiled"]["compiles"] == 1
    (row,) = document["rows"]
    assert row["verified"] and row["compiled_verified"], row.get("error")
    assert row["us"]["compiled"] > 0 and row["us_min"]["compiled"] > 0
    assert row["compile_cache"] in ("hit", "miss") and row["compile_s"] > 0
    assert "copy_us" not in row  # the copy bound is timed on the GPU only
    assert "compiled_us" in result.stdout and "launch floor" in result.stdout
    report = subprocess.run([sys.executable, str(BENCH / "targets.py"), str(out)], capture_output=True,
                            text=True, timeout=60, check=True).stdout
    assert "every anchor (torch_native, compiled) timed on every row: 1 of 1" in report
    assert "copy bound: no copy_us in this run" in report and "bound (" not in report
