"""The live shipper: follows a job's folder (logs, GPU CSVs, trials, state) and emits events plus heartbeats.

Everything is emitted through an injected `emit(event)`, so the same loop feeds Kafka in production
and a list in tests. Secrets are redacted by the readers before an event is built.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from rlhealth.schemas import EventBase, ShipperHeartbeat, Source
from rlhealth.sources.follow import CaptureFollower


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class ShipperCounters:
    """What this shipper received, sent and failed (Vector-style component counters)."""

    polls: int = 0
    events_sent: int = 0
    send_errors: int = 0
    heartbeats: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


class FolderShipper:
    """One job folder -> events. Call `tick()` on an interval; it emits what is new and a heartbeat."""

    def __init__(self, path: Path, emit: Callable[[EventBase], None], *, job_id: str | None = None,
                 shipper_id: str | None = None, interval_s: float = 15.0, clock: Callable[[], datetime] = _utc_now,
                 extra_polls: list[Callable[[], EventBase | None]] | None = None, batch_lines: int = 500) -> None:
        self.follower = CaptureFollower(path, job_id=job_id, clock=clock, batch_lines=batch_lines)
        self.job_id = self.follower.info.job_id
        self.emit = emit
        self.clock = clock
        self.interval_s = interval_s
        self.shipper_id = shipper_id or f"{socket.gethostname()}:{Path(path).name}"
        self.extra_polls = extra_polls or []
        self.counters = ShipperCounters()

    def _send(self, event: EventBase) -> None:
        try:
            self.emit(event)
        except Exception:  # a failed send is counted; the next tick re-reads nothing twice
            self.counters.send_errors += 1
            raise
        self.counters.events_sent += 1
        self.counters.by_kind[event.kind] = self.counters.by_kind.get(event.kind, 0) + 1  # type: ignore[attr-defined]

    def tick(self) -> int:
        """Emit new events, then a heartbeat saying "everything up to now has been shipped"."""
        self.counters.polls += 1
        events = self.follower.poll()
        for poll in self.extra_polls:
            extra = poll()
            if extra is not None:
                events.append(extra)
        for event in events:
            self._send(event)
        self.heartbeat()
        return len(events)

    def heartbeat(self, stopping: bool = False) -> None:
        now = self.clock()
        hb = ShipperHeartbeat(job_id=self.job_id, event_time=now, ingest_time=now, shipper=self.shipper_id,
                              interval_s=self.interval_s, stopping=stopping,
                              source=Source(shipper=self.shipper_id, cluster=self.follower.info.cluster))
        self._send(hb)
        self.counters.heartbeats += 1
