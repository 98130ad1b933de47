"""A small stand-in health core for the streaming plumbing tests (no tests in this module).

The worker takes its core from $RLHEALTH_CORE_FACTORY (see rlhealth.streams.workers.default_core),
so these tests can exercise what the worker itself is responsible for (decode and dead-lettering,
changelog recovery, seq bookkeeping, rebalancing, catch-up before judging, exiting when the agent
dies) with a core whose behaviour is simple and known. The same tests also run against the real
core where its verdicts are predictable; see test_streaming_worker.py.

Rules of the stub:
* state: events seen, newest event time, FATAL lines seen;
* a line containing "EXPLODE" makes `step` raise RuntimeError (a core error: dead-lettered);
* a line containing "AGENT-DIES" raises a BaseException the worker does not catch per record
  (models a bug in the worker's own loop: the process must exit non-zero);
* $STUB_STEP_DELAY_S makes every step that slow (blocking, like a CPU-bound core);
* judge: KILL if a FATAL line was seen, or if the newest event is older than STALE_S at `now`.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

import msgspec

from rlhealth.agents.findings import Finding, JobMetrics
from rlhealth.schemas import Gate, Gates, Verdict

STALE_S = float(os.environ.get("STUB_STALE_S", "20"))
STEP_DELAY_S = float(os.environ.get("STUB_STEP_DELAY_S", "0"))  # a slow core: backlogs take time to fold in


class AgentDies(BaseException):
    pass


class StubState(msgspec.Struct):
    job_id: str
    events: int = 0
    last: float = 0.0
    fatal: int = 0
    ended: bool = False

    def to_bytes(self) -> bytes:
        return msgspec.msgpack.encode(self)

    @staticmethod
    def from_bytes(data: bytes) -> StubState:
        return msgspec.msgpack.decode(data, type=StubState)


class StubCore:
    def new_state(self, job_id: str) -> StubState:
        return StubState(job_id=job_id)

    def step(self, state: StubState, event, now: datetime):
        if STEP_DELAY_S:
            time.sleep(STEP_DELAY_S)
        findings = []
        for line in getattr(event, "lines", ()) or ():
            if "AGENT-DIES" in line:
                raise AgentDies(line)
            if "EXPLODE" in line:
                raise RuntimeError("stub core exploded")
            if "FATAL" in line:
                state.fatal += 1
                findings.append(Finding(kind="death", rule_id="stub.fatal", text=line, event_time=event.event_time,
                                        source="stub"))
        state.events += 1
        state.last = max(state.last, event.event_time.timestamp())
        if event.kind == "job_ended":
            state.ended = True
        return state, findings

    def _kill(self, state: StubState, now: datetime) -> tuple[bool, str]:
        if state.fatal:
            return True, "fatal"
        if now.timestamp() - state.last > STALE_S:
            return True, "stale"
        return False, "ok"

    def judge(self, state: StubState, now: datetime) -> Verdict:
        kill, why = self._kill(state, now)
        return Verdict(job_id=state.job_id, verdict="KILL" if kill else "NO-KILL", confidence="high",
                       job_status="WEDGED" if why == "stale" else ("TERMINAL" if kill else "ALIVE"),
                       reasoning=f"{why}; events={state.events}", produced_at=now,
                       gates=Gates(A=Gate(status="FAIL" if kill else "PASS", summary=why)))

    def metrics(self, state: StubState, now: datetime, last: Verdict | None = None) -> JobMetrics:
        kill, _ = self._kill(state, now)
        return JobMetrics(
            job_id=state.job_id, log_staleness_s={"trainer": max(now.timestamp() - state.last, 0.0)},
            generation_tokens_per_s=None, running_requests=None, waiting_requests=None,
            trials_completed_total=state.events, trial_reward_mean=None, trials_nonzero_reward_ratio=None,
            nccl_watchdog_hits_total=0, oom_events_total=0, ray_worker_deaths_total=0, restarts_burned=None,
            restarts_max=None, gate_status={"A": "FAIL" if kill else "PASS"},
            verdict="KILL" if kill else "NO-KILL", job_status=None,
            last_event_time=datetime.fromtimestamp(state.last, tz=UTC) if state.last else None,
        )


def build() -> StubCore:
    return StubCore()
