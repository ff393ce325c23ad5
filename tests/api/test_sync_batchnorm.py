"""miopen_bn.torch.SyncBatchNorm: several processes on gloo against one
batch norm over their concatenated batches (float64 reference), and the
module's single-process behaviour against torch.nn's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import TESTS

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch was built without torch.distributed", allow_module_level=True)

import miopen_bn  # noqa: E402
from miopen_bn.torch import SyncBatchNorm  # noqa: E402

WORKER = TESTS / "support" / "sync_bn_worker.py"
TIMEOUT_S = 180


def run_ranks(world: int, device: str, tmp_path) -> None:
    """Starts `world` worker processes on localhost (gloo, a file store),
    waits for them (bounded), and fails with their output if any failed."""
    env = dict(os.environ, MIOPEN_BN_NUM_THREADS="1", OMP_NUM_THREADS="1")
    # The workers import the miopen_bn this process imported (installed, or a source tree).
    package_root = str(Path(miopen_bn.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    init_file = tmp_path / "store"
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), str(rank), str(world), str(init_file), device], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for rank in range(world)
    ]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=TIMEOUT_S)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    failed = [(rank, p.returncode, out) for rank, (p, out) in enumerate(zip(procs, outputs)) if p.returncode != 0]
    assert not failed, "\n".join(f"--- rank {rank} exited {code}:\n{out}" for rank, code, out in failed)
    for out in outputs:
        assert out.count("ok ") >= 3, out


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_on_gloo_match_one_batch_norm_over_the_whole_batch(world, tmp_path):
    run_ranks(world, "cpu", tmp_path)


@pytest.mark.gpu
def test_two_ranks_sharing_one_gpu_on_gloo(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    run_ranks(2, "cuda", tmp_path)


# ---- one process ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_without_a_process_group_it_is_batch_norm(dtype):
    torch.manual_seed(0)
    ours, theirs = SyncBatchNorm(5).to(dtype), torch.nn.BatchNorm2d(5).to(dtype)
    with torch.no_grad():
        for module in (ours, theirs):
            module.weight.uniform_(0.5, 2)
        theirs.weight.copy_(ours.weight)
    x = (torch.randn(4, 5, 3, 6, dtype=dtype) * 3 + 1).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    dy = torch.randn(4, 5, 3, 6, dtype=dtype)
    ours(x).backward(dy)
    theirs(x2).backward(dy)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    torch.testing.assert_close(x.grad, x2.grad, **tol)
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad, **tol)
    torch.testing.assert_close(ours.bias.grad, theirs.bias.grad, **tol)
    torch.testing.assert_close(ours.running_var, theirs.running_var, **tol)
    torch.testing.assert_close(ours.num_batches_tracked, theirs.num_batches_tracked)
    ours.eval(), theirs.eval()
    torch.testing.assert_close(ours(x2.detach()), theirs(x2.detach()), **tol)


def test_convert_sync_batchnorm_keeps_parameters_and_buffers():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.Sequential(torch.nn.BatchNorm2d(4, momentum=None)))
    bn = net[1][0]
    with torch.no_grad():
        bn.running_mean.fill_(0.5)
    net.eval()
    converted = SyncBatchNorm.convert_sync_batchnorm(net, process_group="group")
    layer = converted[1][0]
    assert isinstance(layer, SyncBatchNorm) and isinstance(converted[0], torch.nn.Conv2d)
    assert layer.weight is bn.weight and layer.running_mean is bn.running_mean
    assert layer.momentum is None and layer.process_group == "group" and not layer.training


def test_rejects_inputs_it_cannot_normalize():
    with pytest.raises(ValueError, match="expected 2D to 5D input"):
        SyncBatchNorm(3)(torch.ones(3))
    with pytest.raises(ValueError, match="expected 3 channels"):
        SyncBatchNorm(3)(torch.ones(2, 4, 2))
