"""Replay: rebasing keeps the verdict; through Kafka and the worker it equals the embedded probe."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rlhealth.schemas import GpuPoll, JobStatePoll, LogBatch, Source, TrialEvent
from rlhealth.schemas.events import AttemptRecord
from rlhealth.streams.replay import rebase_event, rebased_events

SCENARIOS = Path(__file__).resolve().parents[1].parent / "shared" / "scenarios"
if not SCENARIOS.is_dir():
    SCENARIOS = Path("/work/shared/scenarios")
CAPTURES = sorted(SCENARIOS.glob("*/capture"))

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def call(v) -> tuple:
    if v.held is not None:  # the hysteresis holds a change back: compare the core's own call
        if v.held.raw_verdict != v.verdict:
            # a held change: the core's own call and escalation, compared with the probe's (see `agrees`)
            return (v.held.raw_verdict, v.held.raw_escalate)
        v = v.model_copy(update={"escalate": v.held.raw_escalate})
    return (v.verdict, v.job_status, v.confidence, v.escalate, v.gates.A.status, v.gates.B.status, v.gates.C.status)


def agrees(worker_verdict, probe_verdict) -> bool:
    """The worker's call equals the probe's; a held change is compared by (verdict, escalate): the
    held tuple has only those two (comparing it with a prefix of the full call put job_status
    against escalate, a spurious mismatch whenever the last verdict was held)."""
    got, want = call(worker_verdict), call(probe_verdict)
    if len(got) == 2 or len(want) == 2:
        def pair(c: tuple) -> tuple:
            return c if len(c) == 2 else (c[0], c[3])
        return pair(got) == pair(want)
    return got == want


def test_rebase_moves_every_datetime_of_an_event() -> None:
    d = timedelta(days=300, seconds=7)
    trial = TrialEvent(job_id="j", event_time=T0, ingest_time=T0, phase="completed", trial_name="t1",
                       started_at=T0 - timedelta(minutes=5), finished_at=T0)
    out = rebase_event(trial, lambda t: t + d)
    assert (out.event_time, out.ingest_time, out.started_at, out.finished_at) == (
        T0 + d, T0 + d, T0 - timedelta(minutes=5) + d, T0 + d)
    state = JobStatePoll(job_id="j", event_time=T0, state="running",
                         attempts=[AttemptRecord(attempt=0, started_at=T0 - timedelta(hours=2), ended_at=T0)])
    out = rebase_event(state, lambda t: t + d)
    assert out.attempts[0].started_at == T0 - timedelta(hours=2) + d and out.attempts[0].ended_at == T0 + d
    batch = LogBatch(job_id="j", event_time=T0, lines=["a", "b"], ts=[T0, None])
    assert rebase_event(batch, lambda t: t + d).ts == [T0 + d, None]
    poll = GpuPoll(job_id="j", event_time=T0, host="h")
    assert rebase_event(poll, lambda t: t + d).event_time == T0 + d


def test_line_timestamps_are_parsed_into_ts_before_shifting() -> None:
    captured = T0 + timedelta(minutes=1)
    batch = LogBatch(job_id="j", event_time=T0, source=Source(stream="logs/pod_rank0.log"),
                     lines=["2026-03-01T11:59:30Z step 5 done", "no stamp here"])
    now = datetime(2031, 6, 1, tzinfo=UTC)
    (out,) = list(rebased_events([batch], captured, clock=lambda: now))
    shift = now - captured
    assert out.event_time == T0 + shift
    assert out.ts == [datetime(2026, 3, 1, 11, 59, 30, tzinfo=UTC) + shift, None]
    assert out.lines == batch.lines


def test_speed_compresses_the_timeline_and_paces_production() -> None:
    captured = T0 + timedelta(minutes=10)
    events = [LogBatch(job_id="j", event_time=T0 + timedelta(minutes=m), lines=["x"]) for m in (0, 2, 8)]
    clock = [datetime(2030, 1, 1, tzinfo=UTC)]
    start = clock[0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        clock[0] += timedelta(seconds=s)

    out = list(rebased_events(events, captured, speed=60.0, clock=lambda: clock[0], sleep=sleep))
    # 2 minutes of capture time become 2 seconds; the replay ends when captured_at (10 min) maps to now
    assert [o.event_time for o in out] == [start, start + timedelta(seconds=2), start + timedelta(seconds=8)]
    assert clock[0] == start + timedelta(seconds=10)
    assert slept == pytest.approx([2.0, 6.0, 2.0])


@pytest.mark.skipif(not CAPTURES, reason="shared scenarios not found")
@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.parent.name)
def test_rebased_capture_judged_now_gives_the_probes_verdict(capture: Path) -> None:
    from rlhealth.embedded import probe, run_events
    from rlhealth.runtime import build_core
    from rlhealth.sources.capture import open_capture

    core = build_core()
    expected = probe(capture, core).verdict
    cap = open_capture(capture)
    now = datetime.now(UTC)
    events = list(rebased_events(cap.events(), cap.info.captured_at, clock=lambda: now))
    state, _, _ = run_events(core, cap.info.job_id, events, now)
    assert call(core.judge(state, now)) == call(expected)


@pytest.mark.kafka
@pytest.mark.skipif(not CAPTURES, reason="shared scenarios not found")
def test_replay_through_kafka_gives_the_same_verdict_as_the_probe(kafka_bootstrap, topic_prefix, tmp_path) -> None:
    """Every scenario replayed to Kafka (`rlhealth replay`) and judged by a real worker with the
    real core gets the call the embedded probe gives the same capture."""
    import json
    import os
    import subprocess
    import sys

    from rlhealth.embedded import probe
    from rlhealth.runtime import build_core
    from rlhealth.schemas.topics import TopicCatalog
    from rlhealth.sinks.kafka import ensure_topics
    from rlhealth.sources.capture import open_capture
    from rlhealth.streams.verdict_reader import latest_verdicts
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # the worker harness of test_streaming_worker
    from test_streaming_worker import PARTITIONS, Worker

    core = build_core()
    expected = {open_capture(c).info.job_id: probe(c, core).verdict for c in CAPTURES}
    catalog = TopicCatalog(prefix=topic_prefix, partitions=PARTITIONS)
    ensure_topics(kafka_bootstrap, catalog)
    w = Worker(kafka_bootstrap, topic_prefix, tmp_path / "worker.log", core=None, tick=1.0)
    try:
        total = 0
        for c in CAPTURES:
            out = subprocess.run([sys.executable, "-m", "rlhealth", "replay", str(c), "--to-kafka", "--bootstrap",
                                  kafka_bootstrap, "--topic-prefix", topic_prefix, "--no-create-topics"],
                                 capture_output=True, text=True, timeout=300,
                                 env={**os.environ, "RLHEALTH_PARTITIONS": str(PARTITIONS)})
            assert out.returncode == 0, out.stderr
            total += json.loads(out.stdout.strip().splitlines()[-1])["events"]
        w.wait_metric("rlhealth_jobs_owned", lambda v: v == len(expected), timeout=180)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            m = w.metrics()
            done = sum(v for k, v in m.items() if k.startswith("rlhealth_events_processed_total"))
            failed = sum(v for k, v in m.items() if k.startswith("rlhealth_events_failed_total"))
            if done + failed >= total:
                break
            time.sleep(0.5)
        assert failed == 0, w.tail()
        time.sleep(3)  # a tick after the last event
    finally:
        w.stop()
    got = latest_verdicts(kafka_bootstrap, catalog.verdicts)
    assert set(got) == set(expected)
    mismatches = {j: (call(got[j]), call(expected[j])) for j in expected if not agrees(got[j], expected[j])}
    assert not mismatches, mismatches
