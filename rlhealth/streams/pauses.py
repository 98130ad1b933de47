"""Garbage-collector pauses of the worker: how long each collection stopped the process.

The worker runs its intake, judging, producer, consumer heartbeats and commits on one event loop;
a collection stops all of them. At 10,000 jobs the process holds millions of container objects
(decoded states, books' facts, the exporter's rows), and a full collection walks every one of them,
so its pause grows with the jobs held. `GcPauses` times every collection through `gc.callbacks`
(a monotonic clock read at its start and stop) and keeps, per generation, the count, the total and
the longest pause; a long full pause is logged, so a stalled loop in the worker's log can be told
apart from a long stretch of our own code.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

log = logging.getLogger("rlhealth.worker")


class GcPauses:
    """Per-generation counts, totals and maxima of the collector's pauses (see the module docstring)."""

    def __init__(self, warn_secs: float = 1.0, clock: Any = time.perf_counter) -> None:
        self.warn_secs = warn_secs
        self._clock = clock
        self._started: float | None = None
        self.count = [0, 0, 0]
        self.total_s = [0.0, 0.0, 0.0]
        self.max_s = [0.0, 0.0, 0.0]
        self._installed = False

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = self._clock()
            return
        started, self._started = self._started, None
        if started is None:
            return
        took = self._clock() - started
        gen = min(max(int(info.get("generation", 2)), 0), 2)
        self.count[gen] += 1
        self.total_s[gen] += took
        if took > self.max_s[gen]:
            self.max_s[gen] = took
        if took >= self.warn_secs:
            log.warning("a generation-%d garbage collection stopped the worker for %.1f s (%d objects collected)",
                        gen, took, int(info.get("collected", 0)))

    def install(self) -> None:
        if not self._installed:
            gc.callbacks.append(self)
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            gc.callbacks.remove(self)
            self._installed = False


__all__ = ["GcPauses"]
