"""The library in unusual processes: forked children, thread and address-space
limits, a log file that is not a regular file.  Each case runs in its own
Python process (a hang there is a timeout here, not a stuck suite)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

# Forward training on a tensor big enough for the thread pool, as a function
# every script below defines first.
PROBLEM = """
import numpy as np, miopen_bn as bn
def train(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((8, 16, 32, 32), dtype=np.float32)
    ones, zeros = np.ones(16, np.float32), np.zeros(16, np.float32)
    y, mean, inv_std = bn.batchnorm_forward_training(x, ones, zeros, handle=bn.Handle("cpu"))
    return np.concatenate([y.ravel(), mean, inv_std])
"""


def run_script(body: str, timeout: float = 60, **env) -> subprocess.CompletedProcess:
    environment = dict(os.environ, **env)
    script = PROBLEM + textwrap.dedent(body)
    try:
        return subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the process hung (killed after {timeout} s); stderr so far: {e.stderr}")


def test_a_forked_child_gets_its_own_thread_pool_and_the_parents_results():
    result = run_script("""
        import multiprocessing, os
        parent = train()
        pid = os.fork()
        if pid == 0:
            ok = all(np.array_equal(train(), parent) for _ in range(3))
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the forked child's results differ from the parent's"
        with multiprocessing.get_context("fork").Pool(2) as pool:
            for child in pool.map(train, [0, 0, 0, 0]):
                assert np.array_equal(child, parent), "a multiprocessing worker's results differ"
        assert np.array_equal(train(), parent), "the parent's pool broke after fork"
        print("ok")
    """, MIOPEN_BN_NUM_THREADS="2")
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_threads_that_cannot_start_leave_a_smaller_pool_and_a_log_line():
    """MIOPEN_BN_NUM_THREADS far above the CPUs is capped (logged); then an
    address-space limit with room for about two thread stacks: the pool
    starts what it can, says so, and the call still succeeds."""
    cpus = len(os.sched_getaffinity(0))
    result = run_script("""
        import resource
        from miopen_bn import reference
        x = np.random.default_rng(1).standard_normal((8, 16, 32, 32), dtype=np.float32)
        ones, zeros = np.ones(16, np.float32), np.zeros(16, np.float32)
        expected = reference.batchnorm_forward_training(x, ones, zeros, epsilon=1e-5)["y"]
        handle = bn.Handle("cpu")
        with open("/proc/self/status") as status:
            vm = next(int(line.split()[1]) for line in status if line.startswith("VmSize:")) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + (20 << 20), resource.RLIM_INFINITY))
        y = bn.batchnorm_forward_training(x, ones, zeros, handle=handle)[0]
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        assert np.max(np.abs(y - expected)) < 1e-4
        print("ok")
    """, MIOPEN_BN_NUM_THREADS="100000", MIOPEN_LOG_LEVEL="4", MIOPEN_BN_LOG_FILE="")
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
    assert f"using {4 * cpus}" in result.stderr, result.stderr
    assert "could not start worker thread" in result.stderr, result.stderr


@pytest.mark.gpu
def test_a_forked_child_gets_a_clear_error_for_gpu_handles():
    """A GPU runtime does not survive fork(): the parent's GPU handle is
    refused in the child (BadParm naming fork), a new GPU handle is refused
    there, and the child's CPU work and the parent's GPU work go on."""
    result = run_script("""
        import os, torch
        x = torch.randn(8, 16, 32, 32, device="cuda")
        ones, zeros = torch.ones(16, device="cuda"), torch.zeros(16, device="cuda")
        gpu = bn.Handle("gpu")
        parent = bn.batchnorm_forward_training(x, ones, zeros, handle=gpu)[0].cpu()
        y = torch.empty_like(x)  # the child must not allocate: torch itself refuses CUDA after fork
        cpu = train()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                bn.batchnorm_forward_training(x, ones, zeros, handle=gpu, y=y, save_stats=False)
                code = 2
            except bn.MIOpenError as e:
                code = 0 if "fork" in str(e) else 3
            try:
                bn.Handle("gpu")
                code = code or 4
            except bn.MIOpenError:
                pass
            gpu.close()  # forgets the handle without touching the parent's runtime
            code = code or (0 if np.array_equal(train(), cpu) else 5)
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, f"child failed with {os.waitstatus_to_exitcode(status)}"
        again = bn.batchnorm_forward_training(x, ones, zeros, handle=gpu)[0].cpu()
        assert torch.equal(again, parent)
        print("ok")
    """)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_a_fifo_as_log_file_neither_blocks_nor_is_written(tmp_path):
    """The log file is opened by the first line logged, never blocking: with
    logging quiet a FIFO is never opened; with logging on it is refused
    (said once on stderr) and the lines go to stderr."""
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    quiet = run_script("train(); print('ok')", timeout=30, MIOPEN_BN_LOG_FILE=str(fifo), MIOPEN_LOG_LEVEL="1")
    assert quiet.returncode == 0 and quiet.stdout.strip() == "ok", quiet.stderr
    assert quiet.stderr == ""
    logged = run_script("train(); train(); print('ok')", timeout=30, MIOPEN_BN_LOG_FILE=str(fifo),
                        MIOPEN_ENABLE_LOGGING="1")
    assert logged.returncode == 0 and logged.stdout.strip() == "ok", logged.stderr
    assert logged.stderr.count("MIOPEN_BN_LOG_FILE") == 1, logged.stderr
    assert "miopenBatchNormalizationForwardTraining" in logged.stderr
