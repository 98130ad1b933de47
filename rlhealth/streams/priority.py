"""Judging before intake: while a judging pass runs, the worker takes no new event records.

The worker folds events and judges jobs in one process, on one event loop. A judging pass yields
between slices of jobs (so verdict sends, heartbeats and `/metrics` go on); before this gate, each
yield also let the intake fold a whole buffer of events, and a burst of events (every job reporting
in the same few seconds) took turns with the pass until the burst was folded: at 10,000 jobs a pass
that should take its ~5 s of CPU took 9-53 s of wall time, past its 10 s tick.

The judging deadline (every owned job judged once per tick) is the worker's contract; intake latency
is not bounded by a deadline and Kafka holds what was not taken yet. So a pass has priority:

* `JudgingPriority.hold()` closes the gate for the duration of a pass; the intake loops
  (`StreamWorker._consume`, `_consume_intake`) await `turn()` before they fold each buffer, so a
  buffer already being folded finishes and the next one waits for the pass to end. Records are
  neither dropped nor reordered: they stay where they were (faust's stream buffer and channel, the
  batch intake's list, the broker), whose back-pressure stops the fetcher once full, and
  are acked (their offsets committable) only once folded, as before.
* The consumer's partitions are not paused: a full buffer already stops faust's fetcher, aiokafka
  prefetches (one fetch per partition, in the consumer's thread) whatever faust asks for, and a
  paused assignment would leave the consumer without polls for the length of a pass and need its own
  rules against faust's pausing and resuming during rebalances and table recovery.

What bounds a pass is its own work: a job whose state did not change is skipped cheaply (`_Fresh`),
so a pass that held the intake back leaves little for the next one to judge. A pass whose judging
alone takes longer than the tick (every job has news, on a CPU shared with other work) still holds
the intake for all of it: the gate makes the judging as fast as the CPU allows, not faster.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class JudgingPriority:
    """The gate between the intake and the judging passes (see the module docstring)."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._holds = 0
        self.held_s = 0.0  # total seconds the intake gate was closed
        self.intake_waited_s = 0.0  # total seconds the intake loops waited at the gate
        self.intake_waits = 0  # buffers whose folding waited for a pass

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """Keep the intake out while the body runs (a judging pass)."""
        self._holds += 1
        self._open.clear()
        started = time.perf_counter()
        try:
            yield
        finally:
            self._holds -= 1
            if self._holds == 0:
                self._open.set()
            self.held_s += time.perf_counter() - started

    async def turn(self) -> None:
        """Awaited by an intake loop before it folds a buffer: returns once no pass holds the gate."""
        if self._open.is_set():
            return
        started = time.perf_counter()
        self.intake_waits += 1
        # One wait, not a loop: woken when a pass ends, the buffer is folded even if another pass
        # (the fast tick, queued on the judging lock) has closed the gate since, so back-to-back
        # passes still let one buffer in between them and the intake is never starved.
        await self._open.wait()
        self.intake_waited_s += time.perf_counter() - started


__all__ = ["JudgingPriority"]
