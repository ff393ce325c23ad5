"""Concurrency and determinism on the CPU backend.

The workload (workload.py) calls every tensor entry point on tensors big
enough to use the thread pool.  Run from many threads at once, each with its
own handle or all through one shared handle, every call must return and
write exactly what a serial run did, bit for bit; so must a repeated call,
and a process with another thread count (MIOPEN_BN_NUM_THREADS).  cffi
releases the GIL around each C call, so the calls really overlap.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from support import TESTS, workload
from support.entry_points import last_error

THREADS = 6
ROUNDS = 3
BAD_PARM = 3


@pytest.fixture(scope="module")
def serial(lib, ffi):
    """Each job's (status, outputs) when run alone."""
    return [workload.run(lib, ffi, base, seed) for base, seed in workload.jobs()]


def new_handle(lib, ffi):
    created = ffi.new("miopenHandle_t*")
    assert lib.miopenBNCreateWithBackend(created, lib.miopenBNBackendCPU) == 0
    return created[0]


def run_rounds(lib, ffi, expected, thread: int, handle) -> int:
    """Every job ROUNDS times, starting at a thread-dependent job so that
    threads run different entry points at the same moment; returns the calls made."""
    jobs = workload.jobs()
    calls = 0
    for _ in range(ROUNDS):
        for step in range(len(jobs)):
            index = (step + thread * 5) % len(jobs)
            base, seed = jobs[index]
            result = workload.run(lib, ffi, base, seed, handle)
            assert result == expected[index], f"{base.function} (job {index}) differs from its serial run"
            calls += 1
    return calls


def run_threads(body) -> list:
    with ThreadPoolExecutor(THREADS) as pool:
        return [future.result() for future in [pool.submit(body, t) for t in range(THREADS)]]


def test_threads_with_their_own_handles_match_serial_runs(lib, ffi, serial):
    def body(thread):
        handle = new_handle(lib, ffi)
        try:
            return run_rounds(lib, ffi, serial, thread, handle)
        finally:
            assert lib.miopenDestroy(handle) == 0

    assert sum(run_threads(body)) == THREADS * ROUNDS * len(serial)


def test_threads_sharing_one_handle_match_serial_runs(lib, ffi, serial):
    handle = new_handle(lib, ffi)
    try:
        assert sum(run_threads(lambda thread: run_rounds(lib, ffi, serial, thread, handle))) == (
            THREADS * ROUNDS * len(serial)
        )
    finally:
        assert lib.miopenDestroy(handle) == 0


def test_failing_calls_keep_their_message_per_thread(lib, ffi, serial):
    """Threads alternate a refused call (each its own reason) with a good
    one: every thread reads back its own last error, untouched by the others."""
    handle = new_handle(lib, ffi)

    def body(thread):
        desc = ffi.new("miopenTensorDescriptor_t*")
        assert lib.miopenCreateTensorDescriptor(desc) == 0
        try:
            for _ in range(50):
                assert lib.miopenSet4dTensorDescriptor(desc[0], lib.miopenFloat, 1, 1 - thread - 7, 1, 1) == BAD_PARM
                assert f"length 1 is {-thread - 6} " in last_error(lib, ffi)
                base, seed = workload.jobs()[thread]
                assert workload.run(lib, ffi, base, seed, handle) == serial[thread]
                assert last_error(lib, ffi) == ""
        finally:
            assert lib.miopenDestroyTensorDescriptor(desc[0]) == 0

    try:
        run_threads(body)
    finally:
        assert lib.miopenDestroy(handle) == 0


def test_repeated_calls_are_bitwise_identical(lib, ffi, serial):
    handle = new_handle(lib, ffi)
    try:
        for index, (base, seed) in enumerate(workload.jobs()):
            for _ in range(3):
                assert workload.run(lib, ffi, base, seed, handle) == serial[index], base.function
    finally:
        assert lib.miopenDestroy(handle) == 0


def digest_in_a_process(variable: str, value: int) -> str:
    """The workload's digest in a process with environment `variable` set:
    the CPU backend reads its settings once per process."""
    env = {**os.environ, variable: str(value), "MIOPEN_LOG_LEVEL": "1"}
    script = str(TESTS / "support" / "workload.py")
    result = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize("threads", [1, 3, 8])
def test_results_do_not_depend_on_the_thread_count(lib, ffi, threads):
    assert digest_in_a_process("MIOPEN_BN_NUM_THREADS", threads) == workload.digest(lib, ffi)


# Run in a process of its own: pins its main thread, which must not outlive the test.
PINNED_CALLER = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
import miopen_bn
from support import workload
lib, ffi = miopen_bn.lib, miopen_bn.ffi
print(workload.digest(lib, ffi))  # starts the pool's workers with every CPU allowed
everywhere = os.sched_getaffinity(0)
os.sched_setaffinity(0, {min(everywhere)})
for base, seed in workload.jobs() * 2:
    time.sleep(0.003)  # long enough for the workers to fall asleep, to be woken onto the caller's CPU
    workload.run(lib, ffi, base, seed)
print(workload.digest(lib, ffi))
for tid in sorted(os.listdir("/proc/self/task")):
    if int(tid) != os.getpid():
        print(sorted(os.sched_getaffinity(int(tid))) == sorted(everywhere))
"""


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs Linux and 2 CPUs"
)
def test_a_caller_pinned_to_one_cpu_leaves_the_workers_affinity_alone():
    """A worker woken on its caller's CPU moves itself off it by narrowing its
    affinity for a moment (thread_pool.cpp); the caller pinned to one CPU
    makes that happen, and afterwards every other thread must still allow
    every CPU.  Results are unchanged."""
    env = {**os.environ, "MIOPEN_BN_NUM_THREADS": "2", "MIOPEN_LOG_LEVEL": "1"}
    result = subprocess.run([sys.executable, "-c", PINNED_CALLER, str(TESTS)], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    before, after, *threads = result.stdout.split()
    assert after == before
    assert threads and all(flag == "True" for flag in threads)


@pytest.mark.parametrize("cache_bytes", [1 << 16, 1 << 40])
def test_results_do_not_depend_on_the_cache_size(lib, ffi, cache_bytes):
    """The last-level cache size picks which passes stream their output past
    the cache and how fused units are cut.  At 64 KiB every pool-sized pass
    of the workload streams (whole cache lines only, runs starting anywhere
    in a line, in place and blended); at 1 TiB none does, the large backward
    included, which streams at any real cache size."""
    assert digest_in_a_process("MIOPEN_BN_CPU_CACHE_BYTES", cache_bytes) == workload.digest(lib, ffi)
