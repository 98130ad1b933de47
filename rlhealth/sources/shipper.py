"""The live shipper: follows a job's folder (logs, GPU CSVs, trials, state) and emits events plus heartbeats.

Events go out through an injected `deliver(events) -> bool` (True: every event acknowledged by
the broker or safely spooled), so the same loop feeds Kafka in production and a list in tests
(`emit=` wraps a plain callback). Log files are read by `logship.LogFollower`: per-file
checkpoints that advance only after `deliver` returned True, rotation and copytruncate handled,
a backlog read in bounded steps (`more` says another tick should follow at once). Secrets are
redacted by the readers before an event is built.

Live sources beside the folder (`sources=`: NVML or nvidia-smi, sacct, the pod watch, a state
command; see `live.LiveSource`) are polled every tick under the same contract: their GPU and state
polls pass the same restart watermarks as the folder's, what they received, sent and failed is
counted per source, and every heartbeat lists them with their counters.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from rlhealth.schemas import EventBase, GpuPoll, JobSpec, JobStatePoll, ShipperHeartbeat, Source, TrialEvent
from rlhealth.sources.follow import CaptureFollower
from rlhealth.sources.live import LiveSource, PollSource, source_stat
from rlhealth.sources.logship import CheckpointStore, LogFollower, Mark

MAX_TRIAL_KEYS = 50_000  # trial:phase keys remembered across restarts


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class ShipperCounters:
    """What this shipper received, sent and failed (Vector-style component counters)."""

    polls: int = 0
    events_sent: int = 0
    send_errors: int = 0
    heartbeats: int = 0
    deliveries_failed: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


class FolderShipper:
    """One job folder -> events. Call `tick()` on an interval; it delivers what is new and a heartbeat."""

    def __init__(self, path: Path, emit: Callable[[EventBase], None] | None = None, *,
                 deliver: Callable[[list[EventBase]], bool] | None = None, job_id: str | None = None,
                 shipper_id: str | None = None, interval_s: float = 15.0, clock: Callable[[], datetime] = _utc_now,
                 extra_polls: list[Callable[[], EventBase | None]] | None = None, batch_lines: int = 500,
                 state_dir: Path | None = None, max_bytes_per_tick: int = 8 << 20,
                 behind_bytes: int = 64 << 20, sources: list[LiveSource] | None = None) -> None:
        self.follower = CaptureFollower(path, job_id=job_id, clock=clock, batch_lines=batch_lines, logs=False)
        self.job_id = self.follower.info.job_id
        if deliver is None:
            if emit is None:
                raise ValueError("FolderShipper needs emit= or deliver=")
            deliver = self._emit_all(emit)
        self.deliver = deliver
        self.clock = clock
        self.interval_s = interval_s
        self.shipper_id = shipper_id or f"{socket.gethostname()}:{Path(path).name}"
        self.sources: list[LiveSource] = list(sources or [])
        self.sources.extend(PollSource(f"poll-{i}", p) for i, p in enumerate(extra_polls or []))
        self.counters = ShipperCounters()
        self.store = CheckpointStore(state_dir)
        self.logs = LogFollower(path, job_id=self.job_id, store=self.store, cluster=self.follower.info.cluster,
                                shipper=self.shipper_id, batch_lines=batch_lines, max_bytes=max_bytes_per_tick,
                                clock=clock)
        self.behind_bytes = behind_bytes
        self.more = False
        self.pending: Callable[[], int] | None = None

    @staticmethod
    def _emit_all(emit: Callable[[EventBase], None]) -> Callable[[list[EventBase]], bool]:
        def deliver(events: list[EventBase]) -> bool:
            for e in events:
                emit(e)
            return True
        return deliver

    def _deliver(self, events: list[EventBase]) -> bool:
        try:
            ok = self.deliver(events)
        except Exception:  # a failed delivery is counted; the checkpoints stay where they were
            self.counters.send_errors += 1
            raise
        if not ok:
            self.counters.deliveries_failed += 1
            return False
        self.counters.events_sent += len(events)
        for event in events:
            kind: str = event.kind  # type: ignore[attr-defined]
            self.counters.by_kind[kind] = self.counters.by_kind.get(kind, 0) + 1
        return True

    def tick(self) -> int:
        """Deliver new events and a heartbeat; commit the log checkpoints once they were delivered."""
        self.counters.polls += 1
        events = [e for e in self.follower.poll() if self._fresh(e)]
        by_source: list[tuple[LiveSource, int]] = []  # (source, how many of its events are in `events`)
        for src in self.sources:
            try:
                got = src.poll()
            except Exception as exc:  # noqa: BLE001 - the contract says poll() never raises; count it if it does
                src.counters.fail(type(exc).__name__, f"{type(exc).__name__}: {exc}")
                got = []
            fresh = [e for e in got if self._fresh(e)]
            src.counters.discarded += len(got) - len(fresh)  # delivered before a restart
            events.extend(fresh)
            by_source.append((src, len(fresh)))
        logged = self.logs.poll()
        marks: list[Mark] = [m for _b, m in logged if m is not None]
        events.extend(b for b, _m in logged)
        events.sort(key=lambda e: not isinstance(e, JobSpec))  # stable: JobSpec first, every file's order kept
        self.more = self.logs.more
        hb = self._heartbeat_event()
        if self._deliver([*events, hb]):
            self.counters.heartbeats += 1
            for src, n in by_source:
                src.counters.sent += n
            recorded = self._record(events)
            if marks or recorded:
                self.logs.commit(marks)
        else:
            # a poll is a snapshot: the next tick's poll supersedes an undelivered one
            for src, n in by_source:
                src.counters.discarded += n
            self.logs.rewind()
        return len(events)

    # A restart re-reads GPU CSVs, state.jsonl and trial dirs from their start: what was delivered
    # before (kept in the checkpoint file) is not sent again.
    @staticmethod
    def _sent_key(e: EventBase) -> tuple[str, float] | None:
        if isinstance(e, GpuPoll):
            return f"gpu:{e.host}:{e.source.stream}", e.event_time.timestamp()
        if isinstance(e, JobStatePoll):
            return f"state:{e.source.stream}", e.event_time.timestamp()
        return None

    def _fresh(self, e: EventBase) -> bool:
        if isinstance(e, TrialEvent):
            return f"{e.trial_name}:{e.phase}" not in self.store.trials
        key = self._sent_key(e)
        return key is None or key[1] > self.store.watermarks.get(key[0], float("-inf"))

    def _record(self, events: list[EventBase]) -> bool:
        changed = False
        for e in events:
            if isinstance(e, TrialEvent):
                self.store.trials[f"{e.trial_name}:{e.phase}"] = None
                changed = True
                continue
            key = self._sent_key(e)
            if key is not None and key[1] > self.store.watermarks.get(key[0], float("-inf")):
                self.store.watermarks[key[0]] = key[1]
                changed = True
        while len(self.store.trials) > MAX_TRIAL_KEYS:
            del self.store.trials[next(iter(self.store.trials))]
        return changed

    def behind(self) -> bool:
        """A backlog: more to read than one tick takes, anything waiting in the spool, or much unread."""
        return self.more or self.pending_bytes() > 0 or self.logs.lag_bytes() > self.behind_bytes

    def pending_bytes(self) -> int:
        """Bytes delivered to a spool but not yet to the broker (`pending` is set by the caller)."""
        return self.pending() if self.pending is not None else 0

    def _heartbeat_event(self, stopping: bool = False) -> ShipperHeartbeat:
        now = self.clock()
        lag = self.logs.lag_bytes() + self.pending_bytes()
        return ShipperHeartbeat(job_id=self.job_id, event_time=now, ingest_time=now, shipper=self.shipper_id,
                                interval_s=self.interval_s, stopping=stopping, behind=self.behind(), lag_bytes=lag,
                                source=Source(shipper=self.shipper_id, cluster=self.follower.info.cluster),
                                sources=[s.name for s in self.sources][:1024],
                                source_stats=[source_stat(s) for s in self.sources[:64]])

    def heartbeat(self, stopping: bool = False) -> None:
        if self._deliver([self._heartbeat_event(stopping)]):
            self.counters.heartbeats += 1

    def close(self) -> None:
        """Stop the live sources (a watch thread, an NVML session) and release held log files."""
        for src in self.sources:
            try:
                src.close()
            except Exception:  # noqa: BLE001 - closing one source must not keep the others open
                pass
        self.logs.close()
