"""A judging pass has priority over the event intake (rlhealth/streams/priority.py).

The worker's own intake loops (`_consume` for faust's per-message agent, `_consume_intake` for the
batch intake) and its own pass (`_judge`, `_judge_locked`) run on one event loop without a broker: a
scripted core, in-memory tables, and an intake that always has records waiting (a burst). Checked:
no buffer starts folding while a pass judges (without the gate the intake folds between every
slice of 50 jobs), the intake resumes after the pass, every record is folded exactly once and in
order (and, for the batch intake, acked in order), back-to-back passes still let a buffer in, verdict
sends are pipelined and the last deliveries awaited with the gate open, and jobs with news wait for
the regular tick while the intake is far behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from faust.types import TP

from rlhealth.agents.findings import JobMetrics
from rlhealth.schemas import Gates, Verdict, job_key
from rlhealth.streams.priority import JudgingPriority
from rlhealth.streams.workers import StreamWorker
from tests.offline_worker import offline_worker

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
JOBS = 300  # six slices of 50 judgements: the pass yields five times mid-way
RECORDS = 400
BUFFER = 20


@dataclass
class State:
    job_id: str

    def to_bytes(self) -> bytes:
        return self.job_id.encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> State:
        return cls(data.decode())


class Core:
    """Judges every job ALIVE/NO-KILL; logs each judgement in the shared trace."""

    def __init__(self, trace: list[tuple[str, Any]]) -> None:
        self.trace = trace

    def new_state(self, job_id: str) -> State:
        return State(job_id)

    def judge(self, state: State, now: datetime) -> Verdict:
        self.trace.append(("judge", state.job_id))
        return Verdict(job_id=state.job_id, verdict="NO-KILL", confidence="high", job_status="ALIVE",
                       escalate=False, reasoning="ok", produced_at=now, gates=Gates(),
                       event_time=now - timedelta(seconds=5), age_s=5.0)

    def metrics(self, state: State, now: datetime, last: Verdict | None = None) -> JobMetrics:
        return JobMetrics(job_id=state.job_id, log_staleness_s={}, generation_tokens_per_s=None,
                          running_requests=None, waiting_requests=None, trials_completed_total=0,
                          trial_reward_mean=None, trials_nonzero_reward_ratio=None, nccl_watchdog_hits_total=0,
                          oom_events_total=0, ray_worker_deaths_total=0, restarts_burned=None, restarts_max=None,
                          gate_status={}, verdict=last.verdict if last else None, job_status=None,
                          last_event_time=None, at=now)


@dataclass(frozen=True)
class Msg:
    topic: str
    partition: int
    offset: int


class Intake:
    """The batch intake's interface over a burst that is all there at once."""

    def __init__(self, messages: list[Msg]) -> None:
        self.waiting = list(messages)
        self.acked: list[Msg] = []
        self.drained = asyncio.Event()

    async def take(self, limit: int) -> list[Msg]:
        while not self.waiting:
            await self.drained.wait()
            await asyncio.sleep(3600)
        batch, self.waiting = self.waiting[:limit], self.waiting[limit:]
        return batch

    def done(self, messages: list[Msg]) -> None:
        self.acked.extend(messages)
        if not self.waiting:
            self.drained.set()


class Event:
    def __init__(self, message: Msg) -> None:
        self.message = message


class Stream:
    """What `_consume` uses of a faust stream: `take_events`, over a burst that is all there at once."""

    def __init__(self, messages: list[Msg]) -> None:
        self.waiting = list(messages)

    async def take_events(self, max_: int, within: float) -> AsyncIterator[list[Event]]:
        while self.waiting:
            batch, self.waiting = self.waiting[:max_], self.waiting[max_:]
            yield [Event(m) for m in batch]
        await asyncio.sleep(3600)


def make(trace: list[tuple[str, Any]]) -> StreamWorker:
    w = offline_worker(Core(trace), [T0], skip_unchanged=False, intake_batch_max=BUFFER, batch_max=BUFFER)
    for i in range(JOBS):
        job = f"job-{i:04d}"
        w.tables.job_health[job_key(job)] = State(job).to_bytes()
    w.settings = replace(w.settings, idle_expiry_secs=1e9, terminal_expiry_secs=1e9)

    async def fold(messages: list[Msg]) -> None:
        trace.append(("fold", [m.offset for m in messages]))
        await asyncio.sleep(0)  # a fold awaits its dead letters and findings: the pass may run then
        trace.append(("folded", [m.offset for m in messages]))

    def die(what: str, exc: BaseException) -> None:  # the real one exits the process
        raise AssertionError(f"{what}: {exc!r}")

    w._fold = fold  # type: ignore[method-assign]
    w._die = die  # type: ignore[method-assign]
    return w


def burst() -> list[Msg]:
    return [Msg("events", i % 3, i) for i in range(RECORDS)]


def keys(w: StreamWorker) -> list[bytes]:
    return sorted(w.tables.job_health)


def folds_started_while_judging(trace: list[tuple[str, Any]]) -> int:
    """Buffers that started folding after a pass's first judgement and before its last one."""
    judged = [i for i, (what, _) in enumerate(trace) if what == "judge"]
    first, last = judged[0], judged[-1]
    return sum(1 for what, _ in trace[first:last] if what == "fold")


def folded_offsets(trace: list[tuple[str, Any]]) -> list[int]:
    return [o for what, offsets in trace if what == "folded" for o in offsets]


async def run_pass_during_burst(path: str) -> tuple[StreamWorker, list[tuple[str, Any]], Any]:
    trace: list[tuple[str, Any]] = []
    w = make(trace)
    source: Any
    if path == "batch":
        source = w._intake = Intake(burst())  # type: ignore[assignment]
        task = asyncio.ensure_future(w._consume_intake())
    else:
        source = Stream(burst())
        task = asyncio.ensure_future(w._consume(source))
    for _ in range(3):  # the intake is running: some buffers folded before the tick fires
        await asyncio.sleep(0)
    assert any(what == "folded" for what, _ in trace)
    await w._judge(keys(w))
    for _ in range(RECORDS):  # let the rest of the burst in
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return w, trace, source


@pytest.mark.parametrize("path", ["agent", "batch"])
def test_a_pass_is_not_interleaved_with_folding_and_the_intake_resumes(path: str) -> None:
    w, trace, source = asyncio.run(run_pass_during_burst(path))
    assert sum(1 for what, _ in trace if what == "judge") == JOBS  # every job judged in the pass
    assert folds_started_while_judging(trace) == 0
    assert w.priority.is_open
    assert w.priority.intake_waits >= 1  # the intake did wait for the pass
    # it resumed afterwards: the whole burst folded, once each, in order
    assert folded_offsets(trace) == list(range(RECORDS))
    if path == "batch":
        assert [m.offset for m in source.acked] == list(range(RECORDS))


def test_without_the_gate_the_intake_folds_between_slices() -> None:
    """The trace check above can fail: with a gate that never closes, the burst takes turns with the pass."""

    class NoGate(JudgingPriority):
        async def turn(self) -> None:
            return None

    async def go() -> list[tuple[str, Any]]:
        trace: list[tuple[str, Any]] = []
        w = make(trace)
        w.priority = NoGate()
        w._intake = Intake(burst())  # type: ignore[assignment]
        task = asyncio.ensure_future(w._consume_intake())
        await asyncio.sleep(0)
        await w._judge(keys(w))
        task.cancel()
        return trace

    assert folds_started_while_judging(asyncio.run(go())) > 0


def test_back_to_back_passes_let_a_buffer_in_between() -> None:
    """A pass queued behind another (the fast tick behind the regular one) does not starve the intake."""

    async def go() -> list[tuple[str, Any]]:
        trace: list[tuple[str, Any]] = []
        w = make(trace)
        w._intake = Intake(burst())  # type: ignore[assignment]
        task = asyncio.ensure_future(w._consume_intake())
        await asyncio.sleep(0)
        first = asyncio.ensure_future(w._judge(keys(w)))
        second = asyncio.ensure_future(w._judge(keys(w)))
        await asyncio.gather(first, second)
        task.cancel()
        return trace

    trace = asyncio.run(go())
    judged = [i for i, (what, _) in enumerate(trace) if what == "judge"]
    assert len(judged) == 2 * JOBS
    end_of_first = judged[JOBS - 1]
    end_of_second = judged[-1]
    assert any(what == "fold" for what, _ in trace[end_of_first:end_of_second])


def test_a_failing_pass_reopens_the_gate() -> None:
    trace: list[tuple[str, Any]] = []
    w = make(trace)

    def boom(*_: Any) -> Any:
        raise RuntimeError("pass failed")

    async def go() -> None:
        w._judge_slices = boom  # type: ignore[method-assign, assignment]
        with pytest.raises(RuntimeError):
            await w._judge(keys(w))

    asyncio.run(go())
    assert w.priority.is_open


class SlowTopic:
    """A verdict topic whose deliveries complete `delay` seconds after the send (a broker round trip)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.sent: list[tuple[bytes, bytes]] = []
        self.delivered = 0

    async def send(self, key: bytes, value: bytes) -> asyncio.Future[None]:
        self.sent.append((key, value))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def deliver() -> None:
            self.delivered += 1
            fut.set_result(None)

        asyncio.get_running_loop().call_later(self.delay, deliver)
        return fut


def test_a_pass_judges_on_while_its_sends_are_in_flight_and_books_each_once_delivered() -> None:
    """Sends are pipelined (at most SENDS_IN_FLIGHT slices out); each job's book is written once its
    verdict is delivered; the last deliveries are awaited with the intake gate open."""
    from rlhealth.streams.judging import JUDGE_SLICE, SENDS_IN_FLIGHT

    async def go() -> tuple[list[tuple[str, Any]], StreamWorker, SlowTopic, list[int], int]:
        trace: list[tuple[str, Any]] = []
        w = make(trace)
        topic = w.verdict_topic = SlowTopic(0.02)  # type: ignore[assignment]
        ahead: list[int] = []  # at each judgement: verdicts sent and not yet delivered
        core = w.core
        judge = core.judge

        def judging(state: State, now: datetime) -> Verdict:
            ahead.append(len(topic.sent) - topic.delivered)
            return judge(state, now)

        core.judge = judging
        w._intake = Intake(burst())  # type: ignore[assignment]
        task = asyncio.ensure_future(w._consume_intake())
        await asyncio.sleep(0)
        await w._judge(keys(w))
        books = len(w.tables.verdicts)
        task.cancel()
        return trace, w, topic, ahead, books

    trace, w, topic, ahead, books = asyncio.run(go())
    assert len(topic.sent) == JOBS and topic.delivered == JOBS
    assert books == JOBS  # every job's book written, once its verdict was delivered
    assert max(ahead) > JUDGE_SLICE  # it judged on while earlier slices were in flight
    assert max(ahead) <= (SENDS_IN_FLIGHT + 1) * JUDGE_SLICE
    assert folds_started_while_judging(trace) == 0
    last_judge = max(i for i, (what, _) in enumerate(trace) if what == "judge")
    assert any(what == "fold" for what, _ in trace[last_judge:])  # the intake ran during the last deliveries


class LagConsumer:
    def __init__(self) -> None:
        self.hw = 0

    def assignment(self) -> set[TP]:
        return {TP("events", 0)}

    def highwater(self, tp: TP) -> int:
        return self.hw


class LagApp:
    def __init__(self) -> None:
        self.consumer = LagConsumer()
        self.rebalancing = False


def worker_with_news(trace: list[tuple[str, Any]], behind: int) -> tuple[Any, set[bytes]]:
    """A worker whose intake is `behind` records behind, and 10 of its jobs with news (all in partition 0)."""
    w = make(trace)
    app = LagApp()
    w.app = app  # type: ignore[assignment]
    w.event_topics = {"events"}
    w.processed_next, w.catchup_targets, w._assignment_pending = {TP("events", 0): 1000}, {}, False
    app.consumer.hw = 1000 + behind
    w.tables.job_health.key_partitions = {k: 0 for k in keys(w)}
    return w, set(keys(w)[:10])


@pytest.mark.parametrize(("behind", "judged_now"), [(20_000, 0), (10_000, 10), (50, 10)])
def test_jobs_with_news_wait_for_the_regular_tick_while_the_intake_is_far_behind(behind: int,
                                                                                 judged_now: int) -> None:
    trace: list[tuple[str, Any]] = []
    w, news = worker_with_news(trace, behind)
    w._dirty = set(news)
    asyncio.run(w._fast_tick())
    assert sum(1 for what, _ in trace if what == "judge") == judged_now
    assert w._dirty == (news if judged_now == 0 else set())  # deferred, not lost: the regular tick takes them


def test_a_pass_of_jobs_with_news_is_bounded_and_leaves_the_rest_due(monkeypatch: pytest.MonkeyPatch) -> None:
    import rlhealth.streams.judging as judging

    monkeypatch.setattr(judging, "FAST_PASS_MAX", 4)
    trace: list[tuple[str, Any]] = []
    w, news = worker_with_news(trace, 0)
    w._dirty = set(news)
    asyncio.run(w._fast_tick())
    assert sum(1 for what, _ in trace if what == "judge") == 4
    assert len(w._dirty) == 6 and w._dirty < news  # the others stay due: the next fast tick takes them
    asyncio.run(w._fast_tick())
    asyncio.run(w._fast_tick())
    assert not w._dirty
    judged = [args for what, args in trace if what == "judge"]
    assert len(judged) == 10 and len({repr(a) for a in judged}) == 10  # each job with news judged once


def test_the_batch_intake_tells_faust_s_monitor_its_partitions_are_processed() -> None:
    import time
    from types import SimpleNamespace

    w = make([])
    monitor = SimpleNamespace(stream_inbound_time={})
    w.app = SimpleNamespace(monitor=monitor)  # type: ignore[assignment]
    before = time.monotonic()
    w._mark_inbound(burst()[:7])
    assert sorted(monitor.stream_inbound_time) == [TP("events", p) for p in range(3)]
    assert all(before <= t <= time.monotonic() for t in monitor.stream_inbound_time.values())
