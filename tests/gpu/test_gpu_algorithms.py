"""Every GPU algorithm, forced by MIOPEN_BN_GPU_ALGORITHM (README, "GPU algorithms").

For each algorithm: the small cases below that it must serve, each output
checked against the float64 reference under the tolerance table (the
helpers of test_gpu_batchnorm.py and test_gpu_groupnorm.py), and the cases
it cannot serve, which must fail with NotImplementedError naming it (an
algorithm that serves every call of its ops, multi_pass, nest_walk,
gn_slices, gn_chunks, has none).  The library reads the variable at each
call, so the tests set it with monkeypatch.  test_each_algorithm_served
runs one served case of each in a subprocess with Info logging on and
reads the log: each algorithm's line must be there, forced, and the
default choice's lines name the algorithms the size rules pick.
"""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import miopen_bn as mbn  # noqa: E402

pytestmark = pytest.mark.gpu

if not (mbn.lib.miopenBNHasGpuSupport() and torch.cuda.is_available()):
    pytest.skip("needs the GPU backend and a CUDA device", allow_module_level=True)

import test_gpu_batchnorm as bn  # noqa: E402
import test_gpu_groupnorm as gn  # noqa: E402
from support import REPO  # noqa: E402
from support.torch_tensors import random_data  # noqa: E402

VARIABLE = "MIOPEN_BN_GPU_ALGORITHM"

# A case: (shape, dtype, layout, mode); group norm: (shape, groups, dtype, layout).
TRAINING = {  # training and backward
    "wave_tiles": {
        # NHWC: one wave a tile (1x2048x7x7), blocks of several waves (8x16x7x7: 392 rows).
        "serves": [((2, 64, 7, 7), "fp16", "nchw", "spatial"), ((2, 64, 4, 4), "fp32", "nchw", "spatial"),
                   ((3, 8, 5, 5), "bf16", "nchw", "spatial"), ((2, 64, 7, 7), "fp16", "nhwc", "spatial"),
                   ((1, 2048, 7, 7), "bf16", "nhwc", "spatial"), ((8, 16, 7, 7), "fp32", "nhwc", "spatial")],
        "refuses": [((2, 3, 5, 7), "fp64", "nchw", "spatial"), ((32, 2, 64, 64), "fp32", "nchw", "spatial"),
                    ((2, 12, 5, 5), "fp16", "nhwc", "spatial"),  # C not a multiple of the 16-byte vector
                    ((8, 16, 64, 64), "fp16", "nhwc", "spatial")],  # 32768 rows
    },
    "channel_tiles": {
        # (32, 2, 64, 64) and (4, 3, 45, 47): channels past a block's registers, the rest streamed
        # (16-byte vectors, by clusters of blocks where the device has them; single values of an odd
        # plane, where the device has no clusters).
        "serves": [((2, 64, 7, 7), "fp16", "nchw", "spatial"), ((3, 40, 13, 11), "fp32", "nhwc", "spatial"),
                   ((2, 16, 3, 5, 7), "bf16", "nhwc", "spatial"), ((4, 24, 9, 9), "fp16", "nchw", "spatial"),
                   ((32, 2, 64, 64), "fp32", "nchw", "spatial"), ((4, 3, 45, 47), "bf16", "nchw", "spatial")],
        "refuses": [((2, 3, 5, 7), "fp64", "nchw", "spatial"), ((2, 6, 5, 5), "fp16", "nhwc", "spatial"),
                    ((5, 6, 7, 9), "fp32", "strided", "spatial")],
    },
    "resident": {
        "serves": [((2, 64, 7, 7), "fp16", "nchw", "spatial"), ((3, 40, 13, 11), "fp32", "nhwc", "spatial"),
                   ((1, 4, 96, 96), "bf16", "nchw", "spatial"), ((2, 16, 3, 5, 7), "fp16", "nhwc", "spatial")],
        "refuses": [((2, 3, 5, 7), "fp64", "nchw", "spatial"), ((4, 5, 3, 3), "fp32", "nchw", "per_activation"),
                    ((5, 6, 7, 9), "fp16", "strided", "spatial")],
    },
    "nhwc_columns": {
        # (8, 16, 64, 64) and (2, 64, 112, 112) fp16 have more blocks per column than fold flat: the tree.
        "serves": [((4, 320, 20, 20), "fp16", "nhwc", "spatial"), ((3, 40, 13, 11), "fp32", "nhwc", "spatial"),
                   ((2, 16, 12, 12), "bf16", "nhwc", "spatial"), ((8, 16, 64, 64), "fp32", "nhwc", "spatial"),
                   ((2, 64, 112, 112), "fp16", "nhwc", "spatial"), ((2, 8, 4, 6, 7), "bf16", "nhwc", "spatial")],
        "refuses": [((2, 64, 7, 7), "fp16", "nchw", "spatial"), ((2, 16, 5, 5), "fp64", "nhwc", "spatial"),
                    ((2, 12, 5, 5), "fp16", "nhwc", "spatial")],  # C not a multiple of the 16-byte vector
    },
    "single_launch": {
        "serves": [((2, 3, 5, 7), "fp32", "nchw", "spatial"), ((5, 6, 7, 9), "fp64", "strided", "spatial"),
                   ((4, 5, 3, 3), "fp16", "nhwc", "per_activation")],
        "refuses": [((32, 2, 64, 64), "fp32", "nchw", "spatial")],  # the reduction is split over blocks
    },
    "multi_pass": {
        "serves": [((2, 3, 5, 7), "fp32", "nchw", "spatial"), ((5, 6, 7, 9), "fp64", "strided", "spatial"),
                   ((4, 5, 3, 3), "bf16", "nhwc", "per_activation"), ((32, 2, 64, 64), "fp16", "nchw", "spatial")],
        "refuses": [],
    },
}
INFERENCE = {
    "dense_inference": {
        "serves": [((2, 64, 7, 7), "fp16", "nchw", "spatial"), ((3, 40, 13, 11), "fp32", "nhwc", "spatial"),
                   ((2, 6, 5, 5), "bf16", "nhwc", "spatial")],
        "refuses": [((2, 3, 5, 7), "fp64", "nchw", "spatial"), ((5, 6, 7, 9), "fp32", "strided", "spatial"),
                    ((4, 5, 3, 3), "fp16", "nchw", "per_activation")],
    },
    "nest_walk": {
        "serves": [((2, 64, 7, 7), "fp16", "nchw", "spatial"), ((5, 6, 7, 9), "fp64", "strided", "spatial"),
                   ((4, 5, 3, 3), "fp32", "nhwc", "per_activation")],
        "refuses": [],
    },
}
GROUP_NORM = {  # forward and backward (gn_chunks: the forward; the backward then chooses as usual)
    "gn_on_chip": {
        "serves": [((3, 40, 4, 6), 4, "fp32", "nchw"), ((3, 40, 4, 6), 4, "fp16", "nhwc"),
                   ((3, 40, 4, 6), 4, "bf16", "nchw")],
        "refuses": [((3, 40, 4, 6), 4, "fp64", "nchw")],
    },
    "gn_slices": {
        "serves": [((3, 40, 4, 6), 4, "fp32", "nchw"), ((2, 32, 5, 5), 8, "fp16", "nhwc"),
                   ((5, 12, 7, 9), 4, "fp64", "strided")],
        "refuses": [],
    },
    "gn_chunks": {
        "serves": [((3, 40, 4, 6), 4, "fp32", "nchw"), ((2, 32, 5, 5), 8, "fp16", "nhwc"),
                   ((5, 12, 7, 9), 4, "fp64", "strided")],
        "refuses": [],
    },
    "gn_persistent": {
        # Blocks inside one group and across two (NCHW); two groups in a half vector, rows of
        # 12 float vectors (blocks of 480 threads) (NHWC).
        "serves": [((3, 40, 4, 8), 4, "fp32", "nchw"), ((1, 64, 16, 16), 16, "bf16", "nchw"),
                   ((2, 32, 8, 8), 8, "fp16", "nhwc"), ((2, 48, 6, 6), 6, "fp32", "nhwc")],
        "refuses": [((3, 40, 4, 8), 4, "fp64", "nchw"), ((5, 12, 7, 9), 4, "fp32", "strided"),
                    ((2, 16, 5, 5), 8, "fp16", "nhwc"),  # four groups in a 16-byte vector
                    ((2, 16, 5, 5), 4, "fp16", "nchw")],  # planes of 25: no whole vectors
    },
}
GROUP_NORM_FORWARD_ONLY = {"gn_chunks"}
ALL = {**TRAINING, **INFERENCE, **GROUP_NORM}


def cases(table, kind):
    return [pytest.param(name, case, id=f"{name}-{'x'.join(map(str, case[0]))}-{'-'.join(map(str, case[1:]))}")
            for name, entry in table.items() for case in entry[kind]]


@pytest.fixture(scope="module")
def handle():
    with mbn.Handle(backend="gpu") as gpu_handle:
        yield gpu_handle


def force(monkeypatch, name):
    monkeypatch.setenv(VARIABLE, name)


def test_every_algorithm_has_cases():
    expected = {"dense_inference", "nest_walk", "nhwc_columns", "wave_tiles", "channel_tiles", "resident",
                "single_launch", "multi_pass", "gn_on_chip", "gn_slices", "gn_chunks", "gn_persistent"}
    assert set(ALL) == expected and all(entry["serves"] for entry in ALL.values())


@pytest.mark.parametrize("name, case", cases(TRAINING, "serves"))
def test_training_served(handle, monkeypatch, name, case):
    shape, dtype, layout, mode = case
    force(monkeypatch, name)
    bn.run_training(handle, random_data(shape, dtype, 61, layout), mode, "running+saved", 61)


@pytest.mark.parametrize("saved", (True, False), ids=("saved", "recomputed"))
@pytest.mark.parametrize("name, case", cases(TRAINING, "serves"))
def test_backward_served(handle, monkeypatch, name, case, saved):
    shape, dtype, layout, mode = case
    force(monkeypatch, name)
    x = random_data(shape, dtype, 71, layout)
    dy = random_data(shape, dtype, 72, layout)
    bn.run_backward(handle, x, dy, mode, saved, 71)


@pytest.mark.parametrize("name, case", cases(INFERENCE, "serves"))
def test_inference_served(handle, monkeypatch, name, case):
    shape, dtype, layout, mode = case
    force(monkeypatch, name)
    bn.run_inference(handle, random_data(shape, dtype, 81, layout), mode, True, 81)


@pytest.mark.parametrize("name, case", cases(GROUP_NORM, "serves"))
def test_group_norm_served(handle, monkeypatch, name, case):
    shape, groups, dtype, layout = case
    force(monkeypatch, name)
    gn.run_both(handle, shape, groups, dtype, layout, 91, activation="swish")


def refused(name):
    return pytest.raises(NotImplementedError, match=f"{VARIABLE}={name} cannot serve this ")


@pytest.mark.parametrize("name, case", cases(TRAINING, "refuses"))
def test_training_and_backward_refused(handle, monkeypatch, name, case):
    shape, dtype, layout, mode = case
    force(monkeypatch, name)
    x = random_data(shape, dtype, 101, layout)
    with refused(name):
        bn.run_training(handle, x, mode, "saved", 101)
    with refused(name):
        bn.run_backward(handle, x, random_data(shape, dtype, 102, layout), mode, False, 101)


@pytest.mark.parametrize("name, case", cases(INFERENCE, "refuses"))
def test_inference_refused(handle, monkeypatch, name, case):
    shape, dtype, layout, mode = case
    force(monkeypatch, name)
    with refused(name):
        bn.run_inference(handle, random_data(shape, dtype, 111, layout), mode, True, 111)


@pytest.mark.parametrize("forced", (None, "dense_inference"), ids=("default", "dense_forced"))
def test_inference_estimates_not_float(handle, monkeypatch, forced):
    """Half estimates beside half x (MIOpen allows them): the dense pass reads
    float estimates only, so forced it refuses them, and by default the nest
    walk serves them."""
    x = random_data((2, 64, 7, 7), "fp16", 141, "nchw")
    if not forced:
        bn.run_inference(handle, x, "spatial", True, 141, param_dtype=torch.float16)
        return
    force(monkeypatch, forced)
    with refused(forced):
        bn.run_inference(handle, x, "spatial", True, 141, param_dtype=torch.float16)


@pytest.mark.parametrize("name, case", cases(GROUP_NORM, "refuses"))
def test_group_norm_refused(handle, monkeypatch, name, case):
    shape, groups, dtype, layout = case
    force(monkeypatch, name)
    x = random_data(shape, dtype, 121, layout)
    with refused(name):
        gn.run_forward(handle, x, groups, 121)
    if name in GROUP_NORM_FORWARD_ONLY:  # the backward chooses as usual
        gn.run_backward(handle, x, random_data(shape, dtype, 122, layout), groups, 121)
        return
    with refused(name):
        gn.run_backward(handle, x, random_data(shape, dtype, 122, layout), groups, 121)


def test_unknown_name_fails_every_gpu_call(handle, monkeypatch):
    force(monkeypatch, "Resident")
    x = random_data((2, 3, 5, 7), "fp32", 131)
    with pytest.raises(mbn.MIOpenBadParmError, match=f"{VARIABLE}=Resident names no GPU algorithm"):
        bn.run_training(handle, x, "spatial", "saved", 131)
    with pytest.raises(mbn.MIOpenBadParmError, match="names no GPU algorithm"):
        gn.run_forward(handle, random_data((3, 40, 4, 6), "fp32", 132), 4, 132)


# The subprocess: each served case's first op, then the default choice on a
# few calls, with Info logging into a file; prints nothing.
SCRIPT = r"""
import json, os, sys
import torch
import miopen_bn as mbn
sys.path[:0] = [os.path.join(sys.argv[2], "tests")]
from support.torch_tensors import random_data

plan = json.loads(sys.argv[1])
with mbn.Handle(backend="gpu") as h:
    for name, op, case in plan:
        if name:
            os.environ["MIOPEN_BN_GPU_ALGORITHM"] = name
        else:
            os.environ.pop("MIOPEN_BN_GPU_ALGORITHM", None)
        if op == "gn":
            shape, groups, dtype, layout = case
            mbn.groupnorm_forward(random_data(shape, dtype, 1, layout), groups, None, None, handle=h)
            continue
        shape, dtype, layout, mode = case
        x = random_data(shape, dtype, 1, layout)
        c = shape[1] if mode == "spatial" else shape[1:]
        one = torch.ones(c, device="cuda", dtype=torch.float32)
        if op == "training":
            mbn.batchnorm_forward_training(x, one, one * 0, mode=mode, handle=h)
        else:
            mbn.batchnorm_forward_inference(x, one, one * 0, one * 0, one, mode=mode, handle=h)
    torch.cuda.synchronize()
"""


def test_each_algorithm_served(tmp_path):
    plan = []
    for name, entry in TRAINING.items():
        plan.append((name, "training", entry["serves"][0]))
    for name, entry in INFERENCE.items():
        plan.append((name, "inference", entry["serves"][0]))
    for name, entry in GROUP_NORM.items():
        plan.append((name, "gn", entry["serves"][0]))
    # The default choice, on calls whose algorithm no device changes.
    defaults = [
        (None, "training", ((5, 6, 7, 9), "fp64", "strided", "spatial"), "batch norm training: algorithm single_launch"),
        (None, "inference", ((2, 64, 7, 7), "fp16", "nchw", "spatial"), "batch norm inference: algorithm dense_inference"),
        (None, "inference", ((5, 6, 7, 9), "fp32", "strided", "spatial"), "batch norm inference: algorithm nest_walk"),
        (None, "gn", ((3, 40, 4, 6), 4, "fp64", "nchw"), "group norm forward: algorithm gn_chunks"),
        # A forced algorithm leaves the ops it does not implement to the default.
        ("resident", "inference", ((2, 64, 7, 7), "fp16", "nchw", "spatial"),
         "batch norm inference: algorithm dense_inference (packed"),
    ]
    plan += [entry[:3] for entry in defaults]
    log = tmp_path / "choices.log"
    env = {**os.environ, "MIOPEN_LOG_LEVEL": "5", "MIOPEN_BN_LOG_FILE": str(log)}
    env.pop(VARIABLE, None)
    result = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(plan), str(REPO)], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in log.read_text().splitlines() if "Info [gpu]" in line]
    op_names = {"training": "batch norm training", "inference": "batch norm inference", "gn": "group norm forward"}
    for name, op, _ in plan[:len(ALL)]:
        wanted = f"{op_names[op]}: algorithm {name} (forced by {VARIABLE}"
        assert any(wanted in line for line in lines), f"no log line '{wanted}' in:\n" + "\n".join(lines)
    for *_, wanted in defaults:
        assert any(wanted in line for line in lines), f"no log line '{wanted}' in:\n" + "\n".join(lines)
    assert any("its data are float64" in line for line in lines if "gn_chunks" in line and "forced" not in line)
    # One line per call.
    assert len(lines) == len(plan)
