"""A StreamWorker without Kafka or faust: in-memory tables and topics, a scripted clock.

The worker's judging path (`_judge_locked`, `_write_back`, `_load`) runs as in production; only the
faust objects it touches are replaced. One builder, so a field the worker gains is set in one place.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from rlhealth.sinks.prometheus import Exporter
from rlhealth.streams.priority import JudgingPriority
from rlhealth.streams.state_cache import DecodedStates
from rlhealth.streams.workers import StreamWorker, WorkerSettings, _Tally


class MemTable(dict):  # type: ignore[type-arg]
    key_partitions: dict[bytes, int]


class Tables:
    def __init__(self) -> None:
        self.job_health, self.verdicts = MemTable(), MemTable()


class Topic:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes]] = []

    async def send(self, key: bytes, value: bytes) -> asyncio.Future[None]:
        self.sent.append((key, value))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


def offline_worker(core: Any, clock: list[datetime], **settings: Any) -> StreamWorker:
    """A worker judging with `core` at `clock[0]`; `settings` are WorkerSettings fields."""
    w = StreamWorker.__new__(StreamWorker)
    w.settings = WorkerSettings(bootstrap="offline", catalog=None, **settings)  # type: ignore[arg-type]
    w.core, w.exporter, w.clock = core, Exporter(), lambda: clock[0]
    w.tables = Tables()  # type: ignore[assignment]
    w.verdict_topic, w.metrics_topic = Topic(), Topic()  # type: ignore[assignment]
    w.store, w.captured = None, "stream: test"
    w.app = None  # type: ignore[assignment]  # no faust app (and so no monitor to tell)
    w._judging = asyncio.Lock()
    w.priority = JudgingPriority()
    w._metrics_at, w._seen, w._terminal_since, w._dirty, w._books = {}, {}, {}, set(), {}
    w._tally, w._dead_partitions, w._news = _Tally(), {}, set()
    w._fresh, w._rejudged, w._writes, w._waited, w._wait_parts = {}, 0, {}, 0.0, {}
    w._busy, w._judge_all_max = 0.0, 0.0
    w._decoded = DecodedStates(3000)
    return w
