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
  batch intake's list, the consumer's fetch), whose back-pressure stops the fetcher once full, and
  are acked (their offsets committable) only once folded, as before.
* For a full pass (the regular tick), the event partitions are also paused in the consumer, so the
  fetcher stops asking the broker for records the process would only have to hold. Pausing is left
  to faust while it rebalances or recovers tables, and a pause taken in another consumer generation
  is not undone by us: faust's assignment and recovery decide those partitions' flow.

Passes are bounded: a job whose state did not change is skipped cheaply (`_Fresh`), so a pass that
held the intake back leaves little for the next one to judge, and a pass cannot keep the intake
closed for long even when the machine is slow.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from typing import Any

from faust.types import TP


class FetchPause:
    """Event partitions this worker paused in its consumer for a pass, and in which generation."""

    __slots__ = ("generation", "tps")

    def __init__(self, generation: int, tps: frozenset[TP]) -> None:
        self.generation = generation
        self.tps = tps


def pause_event_fetch(app: Any, topics: Collection[str]) -> FetchPause | None:
    """Pause fetching from the app's assigned event partitions, or None when faust owns the flow now
    (rebalancing, recovering tables) or the consumer is not running."""
    if getattr(app, "rebalancing", False) or getattr(app, "in_recovery", False):
        return None
    try:
        consumer = app.consumer
        tps = frozenset(tp for tp in consumer.assignment() if tp.topic in topics)
        if not tps:
            return None
        consumer.pause_partitions(tps)
    except Exception:  # noqa: BLE001 - no consumer yet: nothing is fetched, nothing to pause
        return None
    return FetchPause(app.consumer_generation_id, tps)


def resume_event_fetch(app: Any, pause: FetchPause | None) -> None:
    """Undo `pause_event_fetch`, unless the group moved on since: then faust's assignment and table
    recovery own these partitions' flow (recovery resumes every assigned event partition when done),
    and resuming them here could let records in before the tables are restored."""
    if pause is None:
        return
    if (app.consumer_generation_id != pause.generation or getattr(app, "rebalancing", False)
            or getattr(app, "in_recovery", False)):
        return
    consumer = app.consumer
    assigned = set(consumer.assignment())
    consumer.resume_partitions({tp for tp in pause.tps if tp in assigned})


class JudgingPriority:
    """The gate between the intake and the judging passes (see the module docstring)."""

    def __init__(self, app: Any | None = None, topics: Collection[str] = ()) -> None:
        self.app = app
        self.topics = frozenset(topics)
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
    async def hold(self, *, pause_fetch: bool = False) -> AsyncIterator[None]:
        """Keep the intake out while the body runs (a judging pass)."""
        pause = pause_event_fetch(self.app, self.topics) if pause_fetch and self.app is not None else None
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
            if self.app is not None:
                resume_event_fetch(self.app, pause)

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


__all__ = ["FetchPause", "JudgingPriority", "pause_event_fetch", "resume_event_fetch"]
