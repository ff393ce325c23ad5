"""miopen-bn-driver runs: every batch-norm subcommand, direction, layout and
rank verifies against the float64 reference; timing prints MIOpenDriver's
figures and a stats line; a wrong or unwritten result exits 1; a problem the
run cannot do exits 3.  Group-norm runs skip until group norm's Python API
exists."""

from __future__ import annotations

import re
import time

import pytest
from support.driver_support import drive, needs_groupnorm

import miopen_bn
from miopen_bn.driver import batchnorm_ops, cli
from miopen_bn.driver.progress import Progress
from miopen_bn.driver.sampling import sample_channels

SMALL = "-n 3 -c 4 -H 5 -W 7"
BN_SUBCOMMANDS = ("bnorm", "bnormfp16", "bnormfp16fp32", "bnormbfp16", "bnormbfp16fp32", "bnormfp64", "bnormfp64fp32")
BN_RUNS = [
    # (flags, directions verified, outputs that must be checked)
    ("-m 1 -F 1 -b 1 -s 1 -r 1 -L NHWC", ("Forward Training", "Backward"),
     ("y", "saved_mean", "saved_inv_std", "running_mean", "running_var", "dx", "dscale", "dbias")),
    ("-m 0 -F 2 -r 1 -b 1 -s 0", ("Forward Inference", "Backward"), ("y", "dx", "dscale", "dbias")),
    ("-m 1 -F 2 -r 0 -D 2 -L NDHWC", ("Forward Inference",), ("y",)),
    ("-m 0 -F 1 -s 0 -r 1 --rank 3 -H 1 -L NHWC -A 0.5 -B 0.75", ("Forward Training",),
     ("y", "running_mean", "running_var")),
    ("-m 1 -F 0 -b 1 -s 1 --rank 2 -H 1 -W 1 -n 9 -A 2 -B 0.5 --alpha-param 0.5 --beta-param 1",
     ("Backward",), ("dx", "dscale", "dbias")),
]


def _verified(out: str, titles: tuple, outputs: tuple) -> None:
    for title in titles:
        assert f"{title}: verified" in out, out
    for name in outputs:
        assert re.search(rf"^  {name} \(\w+, \w+, atol [^)]*\): ok: 0 of \d+ elements off", out, re.M), name
    assert "FAILED" not in out


@pytest.mark.parametrize("subcommand", BN_SUBCOMMANDS)
@pytest.mark.parametrize("flags, titles, outputs", BN_RUNS, ids=[f.split(" -L")[0] for f, _, _ in BN_RUNS])
def test_batch_norm_runs_verify(capsys, subcommand, flags, titles, outputs):
    status, out, err = drive(capsys, subcommand, *SMALL.split(), *flags.split())
    assert status == 0, out + err
    assert out.splitlines()[0] == f"miopen-bn-driver {subcommand} {SMALL} {flags}"
    _verified(out, titles, outputs)
    assert err == ""  # no progress lines for a short run


def test_float32_gradients_under_half_data(capsys):
    status, out, _ = drive(capsys, "bnormbfp16fp32", *SMALL.split(), "-F", "0", "-b", "1", "--grad-type", "fp32")
    assert status == 0, out
    assert "  dx (float32, elementwise" in out


def test_timing_prints_min_avg_and_stats(capsys):
    status, out, _ = drive(capsys, "bnorm", "-n", "2", "-c", "3", "-H", "4", "-W", "5", "-m", "1", "-s", "1",
                           "-r", "1", "-t", "1", "-w", "1", "-i", "3")
    assert status == 0, out
    assert re.search(r"^Forward Training: kernel time min [\d.e-]+ ms, avg [\d.e-]+ ms \(average of calls 2 to 3\)$",
                     out, re.M), out
    assert re.search(r"^Forward Training: wall time min [\d.]+ ms, avg [\d.]+ ms", out, re.M), out
    assert "stats: name, n, c, d, h, w, layout, type, bytes, ms, GB/s" in out
    stats = re.search(r"^stats: bn_train, 2, 3, 1, 4, 5, NCHW, fp32, (\d+), ([\d.e-]+), ([\d.]+)$", out, re.M)
    assert stats, out
    # x and y (2 x 120 floats), scale and bias, running mean/var read and
    # written, saved mean/inverse std written: 3 floats each.
    nbytes, ms, gbs = int(stats[1]), float(stats[2]), float(stats[3])
    assert nbytes == 4 * (2 * 120 + 2 * 3 + 4 * 3 + 2 * 3)
    assert gbs == pytest.approx(nbytes / (ms * 1e-3) / 1e9, rel=1e-3, abs=0.006)


def test_no_timing_no_stats(capsys):
    status, out, _ = drive(capsys, "bnorm", *SMALL.split())
    assert status == 0 and "stats:" not in out and "time" not in out


def test_verification_off(capsys):
    status, out, _ = drive(capsys, "bnorm", *SMALL.split(), "-V", "0", "-b", "1")
    assert status == 0 and "verif" not in out


def _corrupting(monkeypatch, name, corrupt):
    real = getattr(batchnorm_ops, name)

    def wrapped(*args, **kwargs):
        result = real(*args, **kwargs)
        corrupt(result)
        return result

    monkeypatch.setattr(batchnorm_ops, name, wrapped)


def test_a_wrong_element_fails_with_exit_1(capsys, monkeypatch):
    def shift_one_element(result):
        y = result[0]
        y[1, 3, 2, 4] += 0.01

    _corrupting(monkeypatch, "batchnorm_forward_training", shift_one_element)
    status, out, _ = drive(capsys, "bnorm", *SMALL.split(), "-m", "1", "--seed", "7")
    assert status == 1
    assert "  y (float32, elementwise" in out and "FAILED: 1 of 420 elements off; worst at index (1, 3, 2, 4)" in out
    assert "Forward Training: FAILED verification" in out
    assert "Forward Training: the data came from --seed 7" in out


def test_an_unwritten_output_fails(capsys, monkeypatch):
    monkeypatch.setattr(batchnorm_ops, "batchnorm_backward", lambda *args, **kwargs: None)
    status, out, _ = drive(capsys, "bnorm", *SMALL.split(), "-F", "0", "-b", "1")
    assert status == 1
    assert "dx (float32, elementwise, atol 1e-05, rtol 1e-05): FAILED: 420 of 420 elements off" in out


def test_large_tensors_verify_a_sample_of_whole_channels(capsys, monkeypatch):
    monkeypatch.setattr(cli, "DEFAULT_BUDGET", 3 * 35 * 3)  # three channels of 3 x 35 values
    status, out, _ = drive(capsys, "bnorm", "-n", "3", "-c", "10", "-H", "5", "-W", "7", "-m", "1", "-b", "1")
    assert status == 0, out
    assert "verification against the float64 reference on 3 of 10 channels (-V 2 checks all)" in out
    status, out, _ = drive(capsys, "bnorm", "-n", "3", "-c", "10", "-H", "5", "-W", "7", "-m", "1", "-V", "2")
    assert status == 0 and "on all 10 channels" in out

    # The last channel is always in the sample.
    _corrupting(monkeypatch, "batchnorm_forward_training", lambda result: result[0][:, 9].__iadd__(1.0))
    status, out, _ = drive(capsys, "bnorm", "-n", "3", "-c", "10", "-H", "5", "-W", "7", "-m", "1")
    assert status == 1 and "y (float32, elementwise, atol 1e-05, rtol 1e-05): FAILED: 105 of 315" in out


def test_sample_channels_takes_whole_spread_groups():
    sample = sample_channels((2, 100, 5, 5), budget=5 * 50)
    assert list(sample.picked) == [0, 25, 50, 74, 99]
    grouped = sample_channels((2, 12, 5, 5), budget=2 * 150, channels_per_group=3)
    assert list(grouped.picked) == [0, 1, 2, 9, 10, 11] and list(grouped.groups) == [0, 3]
    assert sample_channels((2, 12, 5, 5), budget=10).picked.tolist() == [11]
    assert sample_channels((2, 12, 5, 5), budget=None).complete


@pytest.mark.parametrize("flags, message", [
    ("-n 1 -H 1 -W 1 -m 1", "training needs more than one value per channel"),
    ("-n 1 -m 0", "training needs more than one value"),
])
def test_problems_the_library_refuses_exit_3(capsys, flags, message):
    status, _, err = drive(capsys, "bnorm", "-c", "2", *flags.split())
    assert status == 3
    assert "miopen-bn-driver: error: miopenStatusBadParm" in err and message in err


@pytest.mark.skipif(miopen_bn.gpu_available(), reason="a GPU is usable here")
def test_gpu_backend_without_a_gpu_exits_3(capsys):
    status, _, err = drive(capsys, "bnorm", "--backend", "gpu")
    assert status == 3
    assert "--backend gpu:" in err


@pytest.mark.gpu
@pytest.mark.parametrize("subcommand, layout", [("bnorm", "NCHW"), ("bnormfp16fp32", "NHWC"), ("bnormbfp16", "NHWC")])
def test_gpu_runs_verify(capsys, subcommand, layout):
    pytest.importorskip("torch")
    status, out, err = drive(capsys, subcommand, *SMALL.split(), "-m", "1", "-s", "1", "-r", "1", "-b", "1",
                             "-L", layout, "-t", "1", "--backend", "gpu")
    assert status == 0, out + err
    _verified(out, ("Forward Training", "Backward"), ("y", "dx"))
    assert "stats: bn_train" in out


def test_default_run_is_well_under_a_second(capsys):
    start = time.perf_counter()
    status, out, err = drive(capsys, "bnorm")
    assert status == 0 and err == ""
    assert time.perf_counter() - start < 1.0


def test_progress_appears_only_for_long_runs():
    class Lines(list):
        def write(self, text):
            self.append(text)

        def flush(self):
            pass

    quiet = Lines()
    with Progress(quiet, after_s=5.0) as progress:
        progress.phase("fast")
    assert quiet == []
    shown = Lines()
    with Progress(shown, after_s=0.05, every_s=0.05) as progress:
        progress.phase("first phase")
        time.sleep(0.2)
        progress.phase("second phase")
    assert any("first phase" in line for line in shown) and shown[-1].endswith("second phase ...\n")
    assert all(re.match(r"^\[\s*[\d.]+ s\] ", line) for line in shown)
    once = Lines()
    with Progress(once, after_s=0.0, every_s=10.0) as progress:
        progress.phase("announced")
        time.sleep(0.1)
    assert sum("announced" in line for line in once) == 1  # not repeated before every_s


GN_RUNS = [
    ("groupnorm", "-c 8 -g 4 -m 1 -b 1"),
    ("groupnormfp16", "-c 6 -g 3 -m 1 -b 1 -L NHWC --activation swish --activation-beta 0.75"),
    ("groupnormfp16fp32", "-c 4 -g 1 -m 1 -b 1 --activation swish"),
    ("groupnormbfp16", "-c 6 -g 6 -m 0 -b 1 -D 2 -L NDHWC"),
    ("groupnormbfp16fp32", "-c 8 -g 2 -m 1 -F 0 -b 1 --rank 3 -H 1"),
    ("groupnormfp64", "-c 4 -g 2 -m 1 -b 1 --activation swish"),
]


@needs_groupnorm
@pytest.mark.parametrize("subcommand, flags", GN_RUNS)
def test_group_norm_runs_verify(capsys, subcommand, flags):
    status, out, err = drive(capsys, subcommand, "-n", "3", "-H", "5", "-W", "7", *flags.split(), "-t", "1")
    assert status == 0, out + err
    if "-F 0" not in flags:
        _verified(out, ("Group Norm Forward",), ("y", "mean", "rstd"))
        assert "stats: gn_fwd" in out
    affine = "-m 0" not in flags
    _verified(out, ("Group Norm Backward",), ("dx", "dweight", "dbias") if affine else ("dx",))


def test_group_norm_without_its_python_api_exits_3(capsys):
    if hasattr(miopen_bn, "groupnorm_forward"):
        pytest.skip("group norm's Python API is present")
    status, _, err = drive(capsys, "groupnorm", "-c", "4", "-g", "2")
    assert status == 3 and "no groupnorm_forward" in err
