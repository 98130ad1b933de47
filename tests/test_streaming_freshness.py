"""Freshness through a real broker: a capture replayed in steps through the worker (judging at event
time) leaves on the verdict topic, after each step, a verdict whose facts are those `probe --now`
gives at the same event time: the topic is never behind what the worker has processed."""

from __future__ import annotations

import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.scenario_support import ROOT

pytestmark = pytest.mark.kafka

SCENARIOS = ROOT / "tests" / "scenarios"
CAPTURES = [SCENARIOS / n / "capture" for n in (
    "tail_only_nccl_hang", "host_oom_crashloop_k8s", "healthy_vllm_warning_storm", "vllm_engine_dead_root_cause",
    "slurm_same_checkpoint_crash", "transient_hf_restart_recovered")]
GROUPS = 5


def facts(v) -> tuple:
    """The call and gate facts; for a verdict whose change of call is held, the core's raw call."""
    if v.held is not None and v.held.raw_verdict != v.verdict:
        return (v.held.raw_verdict, v.held.raw_escalate)
    escalate = v.held.raw_escalate if v.held is not None else v.escalate
    gates = tuple((g.status, tuple(g.codes), tuple(g.families)) for g in (v.gates.A, v.gates.B, v.gates.C))
    return (v.verdict, escalate, v.job_status, gates)


def split(events: list, n: int) -> list[list]:
    """`n` consecutive groups, cut only where the event time strictly increases."""
    cuts = [round(len(events) * k / n) for k in range(1, n)]
    out, start = [], 0
    for c in cuts:
        while 0 < c < len(events) and events[c].event_time == events[c - 1].event_time:
            c += 1
        if start < c < len(events):
            out.append(events[start:c])
            start = c
    out.append(events[start:])
    return [g for g in out if g]


def runs_of_one_kind(events: list) -> list[list]:
    out: list[list] = []
    for ev in events:
        if out and out[-1][-1].kind == ev.kind:
            out[-1].append(ev)
        else:
            out.append([ev])
    return out


def wait_processed(w, n: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        m = w.metrics()
        if sum(v for k, v in m.items() if k.startswith("rlhealth_events_processed_total")) >= n:
            return
        assert w.proc.poll() is None, w.tail()
        time.sleep(0.05)
    raise AssertionError(f"worker did not process {n} events:\n{w.tail()}")


def test_each_step_of_a_replay_is_on_the_topic_as_probe_now_sees_it(kafka_bootstrap, topic_prefix, tmp_path) -> None:
    from rlhealth.embedded import probe
    from rlhealth.runtime import build_core
    from rlhealth.schemas.topics import TopicCatalog
    from rlhealth.sinks.kafka import EventProducer, ensure_topics
    from rlhealth.sources.capture import open_capture
    from rlhealth.streams.replay import rebased_events
    from rlhealth.streams.verdict_reader import latest_verdicts
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_streaming_worker import PARTITIONS, Worker

    core = build_core()
    catalog = TopicCatalog(prefix=topic_prefix, partitions=PARTITIONS)
    ensure_topics(kafka_bootstrap, catalog)
    w = Worker(kafka_bootstrap, topic_prefix, tmp_path / "worker.log", core=None, tick=0.5,
               extra_args=("--clock", "event"))
    producer = EventProducer(kafka_bootstrap, catalog)
    mismatches: list = []
    checked = 0
    sent = 0
    try:
        for capture in CAPTURES:
            cap = open_capture(capture)
            job = cap.info.job_id
            now = datetime.now(UTC)
            shift = now - cap.info.captured_at
            events = list(rebased_events(cap.events(), cap.info.captured_at, clock=lambda now=now: now))
            for group in split(events, GROUPS):
                # Each kind has its own topic and the worker reads topics in no set order; the core,
                # like probe, folds events in event-time order, so a run of one kind is sent only
                # once the worker has processed the run before it.
                for run in runs_of_one_kind(group):
                    for ev in run:
                        producer.send(ev)
                    producer.flush()
                    sent += len(run)
                    wait_processed(w, sent)
                time.sleep(2.5)  # a few ticks after the last event of the step: every job judged again
                step_end = max(e.event_time for e in events[: events.index(group[-1]) + 1])
                got = latest_verdicts(kafka_bootstrap, catalog.verdicts, job=job)[job]
                expected = probe(capture, core, step_end - shift).verdict
                checked += 1
                assert got.event_time is not None and got.event_time <= step_end
                assert got.produced_at == got.event_time  # judged at its event time (--clock event)
                want = facts(expected)[: len(facts(got))]  # a held change of call: the raw call only
                if facts(got) != want:
                    mismatches.append((capture.parent.name, str(step_end - shift), facts(got), want))
    finally:
        producer.close()
        w.stop()
    assert checked >= len(CAPTURES) * 2
    assert not mismatches, "\n".join(map(repr, mismatches))


def test_the_evidence_writer_stores_findings_and_metrics_too(kafka_bootstrap, topic_prefix, tmp_path) -> None:
    """The deployed evidence writer (`verdicts --follow --group G --db F`) stores the worker's
    findings and metric points beside the verdicts."""
    import os
    import signal
    import subprocess

    import duckdb

    from rlhealth.schemas.topics import TopicCatalog
    from rlhealth.sinks.kafka import ensure_topics
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_streaming_worker import PARTITIONS, Worker

    catalog = TopicCatalog(prefix=topic_prefix, partitions=PARTITIONS)
    ensure_topics(kafka_bootstrap, catalog)
    db = tmp_path / "evidence.duckdb"
    env = dict(os.environ, RLHEALTH_PARTITIONS=str(PARTITIONS))
    writer = subprocess.Popen([sys.executable, "-m", "rlhealth", "verdicts", "--bootstrap", kafka_bootstrap,
                               "--topic-prefix", topic_prefix, "--follow", "--group", f"{topic_prefix}ev",
                               "--format", "json", "--db", str(db)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    w = Worker(kafka_bootstrap, topic_prefix, tmp_path / "worker.log", core=None, tick=0.5)
    try:
        capture = SCENARIOS / "tail_only_nccl_hang" / "capture"
        out = subprocess.run([sys.executable, "-m", "rlhealth", "replay", str(capture), "--to-kafka", "--bootstrap",
                              kafka_bootstrap, "--topic-prefix", topic_prefix, "--no-create-topics"],
                             capture_output=True, text=True, timeout=300, env=env)
        assert out.returncode == 0, out.stderr
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
                k.startswith("rlhealth_verdicts_published_total") and v > 0 for k, v in w.metrics().items()):
            assert w.proc.poll() is None, w.tail()
            time.sleep(0.3)
        time.sleep(5)  # the writer reads and stores what was published
    finally:
        w.stop()
        writer.send_signal(signal.SIGTERM)
        _, err = writer.communicate(timeout=60)
    con = duckdb.connect(str(db), read_only=True)
    try:
        counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
                  for t in ("verdicts", "findings", "metrics", "evidence_lines")}
        refs = con.execute("SELECT ref FROM findings WHERE rule_id = 'nccl.terminating'").fetchall()
        (job,) = con.execute("SELECT DISTINCT job_id FROM verdicts").fetchone()
    finally:
        con.close()
    assert all(n > 0 for n in counts.values()), (counts, err)
    assert refs and '"topic"' in refs[0][0] and '"file"' in refs[0][0]  # where in Kafka and where in the file

    # the incident report reads the deployed store as it is
    from rlhealth.sinks.html_report import render
    from rlhealth.sinks.report_store import load_file
    from tests.html_dom import Dom

    data = load_file(db, job)
    assert (len(data.verdicts), len(data.metrics), len(data.findings)) == \
        (counts["verdicts"], counts["metrics"], counts["findings"])
    dom = Dom(render(data))
    assert len(dom.find("tr", "verdict")) == counts["verdicts"]
    assert any(re.search(r"logs/pod_rank0\.log.*@\d+", row.text) for row in dom.find("tr", "finding"))
