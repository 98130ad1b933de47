"""The embedded default: the whole health core in one process, fed from capture directories.

`probe` replays one capture in event-time order and judges it at `now` (default: the
capture's `captured_at`). `watch` follows growing captures and re-judges continuously.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

from rlhealth.agents.core import HealthCore
from rlhealth.agents.findings import Finding
from rlhealth.agents.state import JobHealth
from rlhealth.agents.verdict import apply_source_notes
from rlhealth.schemas import EventBase, Verdict


@dataclass
class ProbeResult:
    verdict: Verdict
    state: JobHealth
    events: int
    findings: int
    problems: list = field(default_factory=list)
    seconds: float = 0.0


def _notes(problems) -> list[tuple[str, str, str]]:
    return [(p.gate, p.problem, p.note) for p in problems if getattr(p, "gate", None) in ("A", "B", "C")]


def run_events(core: HealthCore, job_id: str, events: Iterable[EventBase], now: datetime,
               on_findings: Callable[[str, list[Finding]], None] | None = None,
               on_event: Callable[[EventBase], None] | None = None) -> tuple[JobHealth, int, int]:
    state = core.new_state(job_id)
    n_events = n_findings = 0
    for event in events:
        state, findings = core.step(state, event, now)
        n_events += 1
        if findings:
            n_findings += len(findings)
            if on_findings is not None:
                on_findings(job_id, findings)
        if on_event is not None:
            on_event(event)
    return state, n_events, n_findings


def probe(capture_dir: Path, core: HealthCore, now: datetime | None = None,
          on_findings: Callable[[str, list[Finding]], None] | None = None,
          progress: Callable[[EventBase], None] | None = None, batch_lines: int = 500) -> ProbeResult:
    """Judge one capture. Raises rlhealth.sources.capture.CaptureError when it cannot be read at all."""
    from rlhealth.sources.capture import open_capture

    t0 = time.perf_counter()
    cap = open_capture(Path(capture_dir), batch_lines=batch_lines)
    when = now or cap.info.captured_at
    state, n_events, n_findings = run_events(core, cap.info.job_id, cap.events(), when, on_findings, progress)
    verdict = core.judge(state, when)
    verdict = apply_source_notes(verdict, _notes(cap.problems))
    verdict = verdict.model_copy(update={"captured": str(capture_dir)})
    return ProbeResult(verdict, state, n_events, n_findings, list(cap.problems), time.perf_counter() - t0)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()


class Watcher:
    """Follows several captures or live folders in one process and re-judges them on each tick.

    `clock` gives "now": the wall clock for live folders; `capture` mode judges a static capture at
    its own captured_at (or the newest event, whichever is later) so a finished capture is not read
    as stale just because it is old.
    """

    def __init__(self, core: HealthCore, dirs: list[Path], *, clock: Callable[[], datetime] = utc_now,
                 clock_mode: str = "wall", job_ids: list[str | None] | None = None, exporter=None, store=None,
                 batch_lines: int = 500) -> None:
        from rlhealth.sources.follow import CaptureFollower

        self.core = core
        self.clock = clock
        self.clock_mode = clock_mode
        self.exporter = exporter
        self.store = store
        ids = job_ids or [None] * len(dirs)
        self.followers = [CaptureFollower(d, job_id=j, batch_lines=batch_lines, clock=clock) for d, j in zip(dirs, ids)]
        self.states: dict[str, JobHealth] = {}
        self.verdicts: dict[str, Verdict] = {}
        self.seq: dict[str, int] = {}

    def _now_for(self, follower) -> datetime:
        now = self.clock()
        if self.clock_mode == "capture":
            state = self.states.get(follower.info.job_id)
            newest = state.last_event_ts if state and state.last_event_ts else None
            cap = follower.info.captured_at
            candidates = [cap] + ([datetime.fromtimestamp(newest, timezone.utc)] if newest else [])
            return max(candidates)
        return now

    def tick(self) -> list[Verdict]:
        """Read what is new, fold it in, judge every job; returns the verdicts that changed."""
        changed: list[Verdict] = []
        for f in self.followers:
            job_id = f.info.job_id
            state = self.states.get(job_id) or self.core.new_state(job_id)
            now = self.clock()
            for event in f.poll():
                state, findings = self.core.step(state, event, now)
                if findings and self.store is not None:
                    self.store.add_findings(job_id, findings)
            self.states[job_id] = state
            when = self._now_for(f)
            seq = self.seq.get(job_id, 0) + 1
            verdict = self.core.judge(state, when, seq=seq)
            verdict = apply_source_notes(verdict, _notes(f.problems)).model_copy(update={"captured": str(f.path)})
            previous = self.verdicts.get(job_id)
            if self.exporter is not None:
                self.exporter.update(self.core.metrics(state, when, verdict))
            if not verdict.same_call(previous):
                self.seq[job_id] = seq
                self.verdicts[job_id] = verdict
                changed.append(verdict)
                if self.store is not None:
                    self.store.add_verdict(verdict)
        if self.store is not None:
            self.store.flush()
        return changed
