"""The GPU timer's guard against host time inside the timed range, on a
simulated device: a fake torch whose events see a call's kernel time plus
however long the GPU waited for the host, the way CUDA events do when the
call is enqueued after the cover before the start event has run out."""

from __future__ import annotations

import sys
import types

from support import REPO  # noqa: E402

BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import bench_timing  # noqa: E402

KERNEL_US = 10.0
CYCLES_PER_US = 1000


class FakeDevice:
    """One stream.  The cover (_sleep) runs from the moment it is launched;
    the GPU reaches the start event when the cover ends, and the call's
    kernels start when the host has enqueued them, so the events measure
    the kernel plus any wait for the host."""

    def __init__(self, host_us_per_call):
        self.host_us = list(host_us_per_call)  # host time of each successive call
        self.clock = 0.0  # host microseconds
        self.cover_end = 0.0
        self.pending_start = None

    def torch(self):
        device = self

        class Event:
            def __init__(self, enable_timing=True):
                self.at = None

            def record(self):
                if device.pending_start is None:  # start event: after the cover
                    self.at = max(device.cover_end, device.clock)
                    device.pending_start = self
                else:  # end event: the kernel ran once it was enqueued
                    start = device.pending_start.at
                    self.at = max(start, device.clock) + KERNEL_US
                    device.pending_start = None

            def elapsed_time(self, other):
                return (other.at - self.at) / 1e3

        cuda = types.SimpleNamespace(
            Event=Event,
            _sleep=lambda cycles: setattr(device, "cover_end", device.clock + cycles / CYCLES_PER_US),
            synchronize=lambda: None,
        )
        return types.SimpleNamespace(cuda=cuda)

    def call(self):
        self.clock += self.host_us.pop(0) if self.host_us else 1.0


def make_timer(device):
    timer = bench_timing.GpuTimer.__new__(bench_timing.GpuTimer)
    timer.torch = device.torch()
    timer.flush_buffer = types.SimpleNamespace(fill_=lambda value: None)
    timer.sleep_cycles_per_us = CYCLES_PER_US
    return timer


def test_repetitions_whose_host_part_outran_the_cover_are_timed_again(monkeypatch):
    # Host times of ~50 us, with spikes of 2 ms in half of the repetitions:
    # before the guard every spike put ~2 ms of waiting into its sample and
    # the median was a spike.
    host = [50.0, 2000.0] * 4
    device = FakeDevice(host)
    monkeypatch.setattr(bench_timing.time, "perf_counter", lambda: device.clock / 1e6)
    timer = make_timer(device)
    times = timer._timed([device.call], reps=8, cover_us=200.0)
    assert times == [KERNEL_US] * 8


def test_a_cover_that_outlasts_the_host_is_used_once(monkeypatch):
    device = FakeDevice([50.0] * 6)
    monkeypatch.setattr(bench_timing.time, "perf_counter", lambda: device.clock / 1e6)
    timer = make_timer(device)
    assert timer._timed([device.call], reps=6, cover_us=200.0) == [KERNEL_US] * 6
    assert device.host_us == []  # no repetition was run twice


def test_cpu_blocks_start_after_the_other_pool_went_idle(monkeypatch):
    """Each alternating block starts settle_s after the previous block's last
    call, with an untimed call: the other implementation's spinning workers
    must not share the cores with the first timed calls."""
    clock = [0.0]
    events = []  # (time the call started, implementation)
    monkeypatch.setattr(bench_timing.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(bench_timing.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))

    def call(name):
        def run():
            events.append((clock[0], name))
            clock[0] += 1e-3

        return [run]

    timer = bench_timing.CpuTimer(target_s=0.008, min_reps=4, max_reps=4, settle_s=0.02)
    result = timer.alternating_us({"ours": call("ours"), "torch": call("torch")}, blocks=2)
    assert set(result) == {"ours", "torch"}
    switches = [i for i in range(1, len(events)) if events[i][1] != events[i - 1][1]]
    assert len(switches) >= 3  # warm-ups, then ours, torch, ours, torch
    for i in switches:
        gap = events[i][0] - (events[i - 1][0] + 1e-3)
        assert gap >= 0.02 - 1e-9, f"block of {events[i][1]} started {gap * 1e3:.1f} ms after the other's last call"
