"""A progress indication for long runs: silent for the first few seconds (a
default run finishes well before), then the current phase and the elapsed
time on stderr, again whenever the phase changes and every few seconds while
one phase lasts."""

from __future__ import annotations

import sys
import threading
import time


class Progress:
    def __init__(self, stream=None, after_s: float = 3.0, every_s: float = 5.0):
        self.stream = stream if stream is not None else sys.stderr
        self.after_s = after_s
        self.every_s = every_s
        self._start = time.perf_counter()
        self._phase = "starting"
        self._next_report = after_s  # seconds since the start
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="miopen-bn-driver progress", daemon=True)

    def __enter__(self) -> "Progress":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

    def elapsed(self) -> float:
        return time.perf_counter() - self._start

    def phase(self, text: str) -> None:
        """Starts a phase; announced at once when the run is already long."""
        with self._lock:
            self._phase = text
        if self.elapsed() >= self.after_s:
            self._write()

    def _write(self) -> None:
        with self._lock:
            elapsed = self.elapsed()
            self.stream.write(f"[{elapsed:6.1f} s] {self._phase} ...\n")
            self.stream.flush()
            self._next_report = elapsed + self.every_s

    def _tick(self) -> None:
        # Wakes when the next report is due; a phase change announced in
        # between pushes that time back, and the wait starts over.
        while not self._stop.wait(max(0.0, self._next_report - self.elapsed())):
            if self.elapsed() >= self._next_report:
                self._write()
