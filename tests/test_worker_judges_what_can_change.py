"""The worker judges again only jobs whose judgement can change (`WorkerSettings.skip_unchanged`,
docs/verdicts.md "Judging only what can change"): on every scenario capture, fed to the worker's own
tick body as its events come due and then through seven hours of silence, it publishes exactly the
verdicts (bytes, seq, times), metric points and verdict books that judging every job at every tick
publishes, and exports the same calls, statuses and counters; only the series that grow with time
(staleness, verdict time, training time) may lag by up to a metric-point interval. The skipping worker
also folds and judges from its cache of decoded states (`streams/state_cache.py`), the reference
decodes every state from the table."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from rlhealth.schemas import job_key
from rlhealth.sinks.prometheus import _JOB_FAMILIES
from rlhealth.streams.state_cache import DecodedStates
from rlhealth.streams.workers import StreamWorker
from tests.offline_worker import offline_worker as make_worker
from tests.scenario_support import ROOT, scenario_dirs, shared_dir

CAPTURES = [d / "capture" for d in scenario_dirs(ROOT / "tests" / "scenarios")] + \
    [d / "capture" for d in scenario_dirs(shared_dir() / "scenarios")]
TAIL_S = 7 * 3600.0
# Series whose value moves with the clock alone; the others must match at every tick.
GROWING = {"rlhealth_job_log_staleness_seconds", "rlhealth_job_verdict_timestamp_seconds",
           "rlhealth_job_effective_training_ratio", "rlhealth_job_training_time_seconds"}
STEADY = {i for i, f in enumerate(_JOB_FAMILIES) if f[0] not in GROWING}


def offline_worker(core, clock: list[datetime], skip: bool, cache: int = 3000) -> StreamWorker:
    w = make_worker(core, clock, skip_unchanged=skip)
    w._decoded = DecodedStates(cache)
    return w


def ticks(first: float, last: float) -> list[float]:
    step = max(13.0, (last - first) / 600)
    out, t = [], first
    while t < last + TAIL_S:
        out.append(t)
        t += step if t < last else 47.0
    return out


def run(core, capture, skip: bool, cache: int):
    from rlhealth.sources.capture import open_capture

    cap = open_capture(capture, batch_lines=200)
    events = list(cap.events())
    stamps = [e.event_time.timestamp() for e in events]
    clock = [datetime.fromtimestamp(min(stamps), UTC)]
    w = offline_worker(core, clock, skip, cache)
    key, job = job_key(cap.info.job_id), cap.info.job_id
    w.tables.job_health.key_partitions = {key: 0}
    exported, judged, i = [], 0, 0
    for t in ticks(min(stamps), max(stamps)):
        clock[0] = datetime.fromtimestamp(t, UTC)
        if i < len(events) and stamps[i] <= t:
            state = w._load(key, job, take=True)  # as the fold loads it
            while i < len(events) and stamps[i] <= t:
                state, _ = core.step(state, events[i], clock[0])
                i += 1
            w._write_back({key: state})
            w._seen[key] = t
        asyncio.run(w._judge_locked(list(w.tables.job_health)))
        judged += w._rejudged
        rows = w.exporter.jobs._jobs.get(job)
        exported.append(None if rows is None else [r for r in rows.rows if r[0] in STEADY])
    assert (w._decoded.hits > 0) == bool(cache), w._decoded.hits  # the cache was used (judging: every time)
    return w.verdict_topic.sent, w.metrics_topic.sent, dict(w.tables.verdicts), exported, judged


@pytest.fixture(scope="module")
def core():
    from rlhealth.runtime import build_core

    return build_core()


@pytest.mark.slow
@pytest.mark.skipif(not CAPTURES, reason="no scenario captures")
@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.parent.name)
def test_skipping_publishes_what_judging_every_tick_publishes(core, capture) -> None:
    every = run(core, capture, skip=False, cache=0)
    lean = run(core, capture, skip=True, cache=3000)
    assert lean[0] == every[0]  # verdicts: same bytes, same order
    assert lean[1] == every[1]  # metric points
    assert lean[2] == every[2]  # verdict books
    for k, (a, b) in enumerate(zip(lean[3], every[3], strict=True)):
        assert a == b, (capture.parent.name, k)
    assert len(every[0]) >= 2  # the job published more than its first verdict (then expired: final verdict)
    print(capture.parent.name, "judged", lean[4], "of", every[4])
    assert lean[4] < every[4], (lean[4], every[4])  # and the saving is real


def test_a_changed_state_or_book_is_judged_again(core) -> None:
    """What invalidates a kept judgement: a new state, a book written behind the worker's back, the
    next heartbeat, and the switch being off."""
    capture = CAPTURES[0] if CAPTURES else pytest.skip("no scenario captures")
    from rlhealth.sources.capture import open_capture

    cap = open_capture(capture, batch_lines=200)
    events = list(cap.events())
    t0 = max(e.event_time for e in events)
    clock = [t0]
    w = offline_worker(core, clock, skip=True)
    key, job = job_key(cap.info.job_id), cap.info.job_id
    w.tables.job_health.key_partitions = {key: 0}
    state = w._load(key, job, take=True)
    for ev in events:
        state, _ = core.step(state, ev, t0)
    w._write_back({key: state})
    w._seen[key] = t0.timestamp()

    def tick(after_s: float) -> int:
        clock[0] = t0 + timedelta(seconds=after_s)
        asyncio.run(w._judge_locked([key]))
        return w._rejudged

    assert tick(0) == 1
    assert tick(1) == 0  # nothing changed, nothing can have changed in a second
    w._write_back({key: state})
    assert tick(2) == 1  # a new state (even equal bytes: it went through the fold)
    assert tick(3) == 0
    w.tables.verdicts[key] = w.tables.verdicts[key] + b" "  # rewritten behind our back (a restore)
    assert tick(4) == 1
    until = w._fresh[key].wall_until
    assert until <= t0.timestamp() + 4 + w.settings.heartbeat_secs
    assert tick(until - t0.timestamp()) == 1  # the heartbeat is due
    w.settings = replace(w.settings, skip_unchanged=False)
    assert tick(until - t0.timestamp() + 1) == 1
    assert tick(until - t0.timestamp() + 2) == 1  # off: every tick
    w.settings = replace(w.settings, skip_unchanged=True)
    assert tick(until - t0.timestamp() + 3) == 1
    assert tick(until - t0.timestamp() + 4) == 0

    # The agent folds an event while a judgement awaits a send (a verdict, or a metric point): the
    # judgement is of the old state, so the new one is judged at the next tick.
    for topic in (w.verdict_topic, w.metrics_topic):
        folded = []
        send = topic.send

        async def send_and_fold(key: bytes, value: bytes, send=send, folded=folded) -> asyncio.Future[None]:
            if not folded:
                folded.append(1)
                w._write_back({key: state})
            return await send(key=key, value=value)

        topic.send = send_and_fold  # type: ignore[method-assign]
        w._write_back({key: state})
        later = until - t0.timestamp() + 5 + (400 if topic is w.verdict_topic else 0)  # a heartbeat is due
        assert tick(later) == 1
        assert folded  # the send happened, and the state was rewritten during it
        assert tick(later + 1) == 1  # so the job is judged again
        assert tick(later + 2) == 0
        topic.send = send  # type: ignore[method-assign]
