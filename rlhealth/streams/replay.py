"""Replay a capture's events to Kafka in event-time order, with their times moved to now.

A capture was judged offline at its `captured_at`. Replayed through Kafka, the worker judges with
the wall clock, so every time in every event is rebased so that `captured_at` lands at the moment
the replay finishes:

* as fast as possible (no speed): every time moves by `now - captured_at` (the replay itself takes
  seconds, so "finishes" is taken as "starts");
* `speed=X`: the timeline is compressed X times. An event at capture time t is produced at
  `start + (t - t_first) / X`, carrying that time, and the replay ends (captured_at) at
  `start + (captured_at - t_first) / X`.

Every datetime of an event moves through the same mapping: event_time, ingest_time, a log batch's
per-line `ts`, a trial's started_at/finished_at, an attempt's started_at/ended_at, a job spec's
started_at. Timestamps printed inside log lines cannot move, so before rebasing, each line's own
timestamp is parsed (the core's `line_timestamp`) into the batch's `ts` column where it is empty;
the core reads `ts` in preference to the text.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rlhealth.schemas import EventBase, LogBatch

TimeMap = Callable[[datetime], datetime]


def _map_times(obj: Any, fn: TimeMap) -> Any:
    if isinstance(obj, datetime):
        return fn(obj if obj.tzinfo else obj.replace(tzinfo=UTC))
    if isinstance(obj, dict):
        return {k: _map_times(v, fn) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_map_times(v, fn) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_map_times(v, fn) for v in obj)
    return obj


def rebase_event(event: EventBase, fn: TimeMap) -> EventBase:
    """A copy of `event` with every datetime field passed through `fn`, validated again."""
    data = event.model_dump(mode="python")
    return type(event).model_validate(_map_times(data, fn))


def fill_line_ts(batch: LogBatch) -> LogBatch:
    """Parse each line's own timestamp into `ts` where the shipper left it empty."""
    from rlhealth.agents.normalize import line_timestamp

    ref = batch.event_time
    old = batch.ts or [None] * len(batch.lines)
    new = [t if t is not None else line_timestamp(line, ref) for t, line in zip(old, batch.lines)]
    if all(t is None for t in new):
        return batch
    return batch.model_copy(update={"ts": new})


def shift_map(delta: timedelta) -> TimeMap:
    return lambda t: t + delta


def compress_map(t_first: datetime, start: datetime, speed: float) -> TimeMap:
    return lambda t: start + (t - t_first) / speed


@dataclass
class ReplayStats:
    events: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    shift_s: float = 0.0
    started_at: datetime | None = None
    finished_at: datetime | None = None


def rebased_events(
    events: Iterable[EventBase],
    captured_at: datetime,
    *,
    speed: float | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], None] = time.sleep,
    stats: ReplayStats | None = None,
) -> Iterator[EventBase]:
    """Yield the events rebased to now, pacing them when `speed` is given."""
    stats = stats if stats is not None else ReplayStats()
    start = clock()
    stats.started_at = start
    fn: TimeMap | None = None
    if speed is None:
        delta = start - captured_at
        stats.shift_s = delta.total_seconds()
        fn = shift_map(delta)
    elif speed <= 0:
        raise ValueError("speed must be > 0")
    t_first: datetime | None = None
    for ev in events:
        if isinstance(ev, LogBatch):
            ev = fill_line_ts(ev)
        if fn is None:
            t_first = min(ev.event_time, captured_at)
            fn = compress_map(t_first, start, speed)  # type: ignore[arg-type]
            stats.shift_s = (start - t_first).total_seconds()
        out = rebase_event(ev, fn)
        if speed is not None:
            wait = (out.event_time - clock()).total_seconds()
            if wait > 0:
                sleep(wait)
        stats.events += 1
        kind = getattr(out, "kind", "?")
        stats.by_kind[kind] = stats.by_kind.get(kind, 0) + 1
        yield out
    if speed is not None and fn is not None:
        wait = (fn(captured_at) - clock()).total_seconds()
        if wait > 0:
            sleep(wait)
    stats.finished_at = clock()


def replay_capture(
    path: str | Path,
    bootstrap: str,
    *,
    catalog: Any | None = None,
    speed: float | None = None,
    producer: Any | None = None,
    job_id: str | None = None,
    security: Any | None = None,
) -> ReplayStats:
    """Produce a capture's events to the event topics; returns counts. Flushes before returning."""
    from rlhealth.sources.capture import open_capture

    cap = open_capture(Path(path))
    captured_at = cap.info.captured_at
    events: Iterable[EventBase] = cap.events()
    if job_id is not None:
        events = (e.model_copy(update={"job_id": job_id}) for e in events)
    own = producer is None
    if producer is None:
        from rlhealth.sinks.kafka import EventProducer

        producer = EventProducer(bootstrap, catalog, security=security)
    stats = ReplayStats()
    try:
        for ev in rebased_events(events, captured_at, speed=speed, stats=stats):
            producer.send(ev)
        producer.flush()
    finally:
        if own:
            producer.close()
    return stats


__all__ = ["ReplayStats", "compress_map", "fill_line_ts", "rebase_event", "rebased_events", "replay_capture",
           "shift_map"]
