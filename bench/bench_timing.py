"""Timers for the bench: CUDA events on the GPU, wall clock on the CPU.

Every timer takes a list of zero-argument callables, one per rotation slot:
slot i % len(calls) runs at repetition i, so tensors small enough to live in
the L2 cache are not re-read from it at every repetition.
"""
import statistics
import time


def _clamp(value, low, high):
    return max(low, min(high, value))


class GpuTimer:
    """Median device time of a call, measured with CUDA events on the current
    stream, with the L2 cache flushed (a 2xL2 buffer overwritten) before
    every repetition.

    The host-side cost of a call (bindings, descriptors, launch) must not
    count as device time: with an idle GPU the start event would fire at
    once and the GPU would then wait for the host.  So before each start
    event the GPU is kept busy (torch.cuda._sleep) for longer than the call
    takes the host, and the call's kernels are already queued when the start
    event is reached.  The host cost is reported on its own (host_us)."""

    def __init__(self, torch, l2_bytes, target_ms=12.0, min_reps=5, max_reps=60):
        self.torch = torch
        flush_bytes = max(2 * l2_bytes, 64 << 20)
        self.flush_buffer = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")
        self.target_ms = target_ms
        self.min_reps = min_reps
        self.max_reps = max_reps
        self.sleep_cycles_per_us = self._calibrate_sleep()

    def _calibrate_sleep(self):
        """Cycles of torch.cuda._sleep per microsecond, or None without it."""
        torch = self.torch
        if not hasattr(torch.cuda, "_sleep"):
            return None
        # _sleep counts SM clock cycles: let the clocks ramp up from idle
        # first, or the calibration would undercount by the boost ratio.
        torch.cuda._sleep(50_000_000)
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        torch.cuda._sleep(2_000_000)
        end.record()
        torch.cuda.synchronize()
        return 2_000_000 / max(start.elapsed_time(end) * 1e3, 1.0)

    @property
    def mode(self):
        return ("events; GPU held busy across the host part of each call"
                if self.sleep_cycles_per_us else
                "events; host overhead NOT hidden (no torch.cuda._sleep)")

    def _timed(self, calls, reps, cover_us):
        """Device microseconds of `reps` calls.  A repetition whose host part
        (from the cover's launch to the end event's record) took longer than
        the cover may have left the GPU idle inside the timed range, so it is
        timed again with a cover twice its host time (at most three rounds):
        a slow host then costs waiting, never a wrong time."""
        torch = self.torch
        times = [0.0] * reps
        pending = list(range(reps))
        for _ in range(3):
            cycles = int(cover_us * self.sleep_cycles_per_us) if self.sleep_cycles_per_us else 0
            events = {i: (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for i in pending}
            host = {}
            for i in pending:
                self.flush_buffer.fill_(i & 0x7F)
                begin = time.perf_counter()
                if cycles:
                    torch.cuda._sleep(cycles)
                events[i][0].record()
                calls[i % len(calls)]()
                events[i][1].record()
                host[i] = (time.perf_counter() - begin) * 1e6
            torch.cuda.synchronize()
            for i in pending:
                times[i] = events[i][0].elapsed_time(events[i][1]) * 1e3
            pending = [i for i in pending if host[i] > cover_us]
            if not pending or not cycles:
                break
            cover_us = 2.0 * max(host[i] for i in pending)
        return times

    def device_us(self, calls):
        """Median microseconds per call; the number of repetitions is picked
        so that the timed work takes about target_ms."""
        for call in calls:  # warm-up: first calls may compile, allocate, grow scratch
            call()
        # A first cover from the slowest of a few host calls; _timed lengthens
        # it for any repetition whose host part outran it (on the H100 host
        # times of ~200 us spiked to 0.5-2.4 ms and, before the check, put
        # 5-100x outliers in ~0.5-1% of the rows).
        host = self.host_us(calls[0], reps=5, statistic=max)
        cover_us = 3.0 * host + 200.0
        pilot = statistics.median(self._timed(calls, 3, cover_us))
        reps = _clamp(int(self.target_ms * 1e3 / max(pilot + cover_us, 1.0)),
                      self.min_reps, self.max_reps)
        return statistics.median(self._timed(calls, reps, cover_us))

    def host_us(self, call, reps=15, statistic=statistics.median):
        """Median (or `statistic`) wall time of the Python call itself,
        started on an idle device: what the bindings and the launch cost the
        host."""
        torch = self.torch
        times = []
        for _ in range(reps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            call()
            times.append((time.perf_counter() - start) * 1e6)
        torch.cuda.synchronize()
        return statistic(times)

    def copy_gbs(self, nbytes=1 << 30, reps=10):
        """Device-to-device copy bandwidth, counting bytes read plus written."""
        torch = self.torch
        src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1)
        dst = torch.empty_like(src)
        calls = [lambda: dst.copy_(src)]
        calls[0]()
        us = statistics.median(self._timed(calls, reps, 100.0))
        return 2 * nbytes / (us * 1e-6) / 1e9


class CpuTimer:
    """Median wall time of a call on the host."""

    mode = "median wall time; ours and PyTorch timed in alternating blocks"

    def __init__(self, target_s=0.4, min_reps=4, max_reps=30, settle_s=0.02):
        self.target_s = target_s
        self.min_reps = min_reps
        self.max_reps = max_reps
        self.settle_s = settle_s

    def device_us(self, calls):
        calls[0]()  # warm-up: thread pool start, page faults of fresh outputs
        start = time.perf_counter()
        calls[0]()
        pilot = time.perf_counter() - start
        reps = _clamp(int(self.target_s / max(pilot, 1e-6)), self.min_reps, self.max_reps)
        times = []
        for i in range(reps):
            start = time.perf_counter()
            calls[i % len(calls)]()
            times.append((time.perf_counter() - start) * 1e6)
        return statistics.median(times)

    def alternating_us(self, named_calls, blocks=2):
        """Times several implementations in alternating blocks (ours x n,
        torch x n, ours x n, torch x n): a shared machine's changing load hits
        them alike.  Before each block the host sleeps settle_s, so that the
        previous implementation's idle threads have stopped spinning and gone
        to sleep, and an untimed call wakes the block's own: PyTorch's OpenMP
        workers (libgomp) spin for about 9 ms after a parallel region, ours
        for 1 ms (CPU time the process burns while its main thread sleeps),
        and a spinning worker on a 2-core machine halves the next block's
        cores.  (Strict round-robin would charge every call for the other
        pool's spinning.)  Returns {name: (median_us, min_us)}."""
        reps = {}
        for name, calls in named_calls.items():
            time.sleep(self.settle_s)
            calls[0]()  # warm-up: thread pools, page faults of fresh outputs
            start = time.perf_counter()
            calls[0]()
            pilot = time.perf_counter() - start
            reps[name] = _clamp(int(self.target_s / blocks / max(pilot, 1e-6)),
                                self.min_reps, self.max_reps)
        times = {name: [] for name in named_calls}
        for _ in range(blocks):
            for name, calls in named_calls.items():
                time.sleep(self.settle_s)
                calls[0]()  # untimed: wakes this implementation's threads
                for i in range(reps[name]):
                    start = time.perf_counter()
                    calls[i % len(calls)]()
                    times[name].append((time.perf_counter() - start) * 1e6)
        return {name: (statistics.median(t), min(t)) for name, t in times.items()}

    def host_us(self, call, reps=0):
        return None  # on the CPU the call is the work: no separate host overhead

    def copy_gbs(self, nbytes=256 << 20, reps=5):
        """numpy.copyto bandwidth on a buffer larger than the last-level cache,
        counting bytes read plus written."""
        import numpy as np
        src = np.ones(nbytes // 4, dtype=np.float32)
        dst = np.empty_like(src)
        np.copyto(dst, src)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            np.copyto(dst, src)
            times.append(time.perf_counter() - start)
        return 2 * nbytes / statistics.median(times) / 1e9
