"""The Prometheus exporter: per-job series appear, are replaced and vanish; counters are bounded."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from rlhealth.agents.findings import JobMetrics
from rlhealth.sinks.prometheus import Exporter

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def metrics(job_id: str = "job-a", **over: object) -> JobMetrics:
    base = JobMetrics(
        job_id=job_id,
        log_staleness_s={"trainer": 12.5, "engine": 3.0},
        generation_tokens_per_s=1500.0,
        running_requests=64.0,
        waiting_requests=2.0,
        trials_completed_total=40,
        trial_reward_mean=0.25,
        trials_nonzero_reward_ratio=0.5,
        nccl_watchdog_hits_total=0,
        oom_events_total=1,
        ray_worker_deaths_total=0,
        restarts_burned=1,
        restarts_max=3,
        gate_status={"A": "PASS", "B": "FAIL", "C": "UNKNOWN"},
        verdict="NO-KILL",
        job_status="ALIVE",
        last_event_time=T0,
        trainer_last_step=17,
    )
    return replace(base, **over)


def value(exp: Exporter, name: str, **labels: str) -> float | None:
    return exp.registry.get_sample_value(name, labels)


def test_job_series_are_exported_with_bounded_labels() -> None:
    exp = Exporter()
    exp.update(metrics())
    assert value(exp, "rlhealth_job_log_staleness_seconds", job_id="job-a", role="trainer") == 12.5
    assert value(exp, "rlhealth_job_log_staleness_seconds", job_id="job-a", role="engine") == 3.0
    assert value(exp, "rlhealth_job_generation_tokens_per_second", job_id="job-a") == 1500.0
    assert value(exp, "rlhealth_job_running_requests", job_id="job-a") == 64.0
    assert value(exp, "rlhealth_job_waiting_requests", job_id="job-a") == 2.0
    assert value(exp, "rlhealth_job_trials_completed_total", job_id="job-a") == 40.0
    assert value(exp, "rlhealth_job_trial_reward_mean", job_id="job-a") == 0.25
    assert value(exp, "rlhealth_job_nccl_watchdog_hits_total", job_id="job-a") == 0.0
    assert value(exp, "rlhealth_job_oom_events_total", job_id="job-a") == 1.0
    assert value(exp, "rlhealth_job_restarts_burned", job_id="job-a") == 1.0
    assert value(exp, "rlhealth_job_gate_status", job_id="job-a", gate="A") == 1.0
    assert value(exp, "rlhealth_job_gate_status", job_id="job-a", gate="B") == 0.0
    assert value(exp, "rlhealth_job_gate_status", job_id="job-a", gate="C") == -1.0
    assert value(exp, "rlhealth_job_verdict_kill", job_id="job-a") == 0.0
    assert value(exp, "rlhealth_job_last_event_timestamp_seconds", job_id="job-a") == T0.timestamp()

    text = generate_latest(exp.registry).decode()
    for forbidden in ("rank=", "trial=", "line=", "_created"):
        assert forbidden not in text


def test_unknown_values_are_absent_not_zero_and_roles_fold_into_other() -> None:
    exp = Exporter()
    exp.update(metrics(generation_tokens_per_s=None, verdict=None, restarts_burned=None,
                       log_staleness_s={"trainer": 1.0, "rank7-weird": 40.0, "sidecar": 90.0}, gate_status={}))
    assert value(exp, "rlhealth_job_generation_tokens_per_second", job_id="job-a") is None
    assert value(exp, "rlhealth_job_verdict_kill", job_id="job-a") is None
    assert value(exp, "rlhealth_job_restarts_burned", job_id="job-a") is None
    # arbitrary role names cannot create series: they fold into "other", keeping the worst
    assert value(exp, "rlhealth_job_log_staleness_seconds", job_id="job-a", role="other") == 90.0
    assert value(exp, "rlhealth_job_log_staleness_seconds", job_id="job-a", role="rank7-weird") is None
    # a gate the core did not mention is UNKNOWN, not missing
    assert value(exp, "rlhealth_job_gate_status", job_id="job-a", gate="B") == -1.0


def test_effective_training_time_is_exported_and_unknown_ratio_is_absent() -> None:
    from rlhealth.agents.training_time import TrainingTime

    exp = Exporter()
    tt = TrainingTime(wall_s=9000.0, productive_s=4320.0, bring_up_s=0.0, stalled_s=4680.0, failures_s=0.0,
                      unattributed_s=0.0, ratio=0.48)
    exp.update(metrics(training_time=tt))
    assert value(exp, "rlhealth_job_effective_training_ratio", job_id="job-a") == 0.48
    assert value(exp, "rlhealth_job_training_time_seconds", job_id="job-a", use="stalled") == 4680.0
    assert value(exp, "rlhealth_job_training_time_seconds", job_id="job-a", use="productive") == 4320.0
    exp.update(metrics(training_time=replace(tt, ratio=None)))
    assert value(exp, "rlhealth_job_effective_training_ratio", job_id="job-a") is None
    assert value(exp, "rlhealth_job_training_time_seconds", job_id="job-a", use="bring_up") == 0.0
    assert exp.exposition() == generate_latest(exp.registry)  # the pre-rendered lines carry them too


def test_update_replaces_and_remove_drops_a_jobs_series() -> None:
    exp = Exporter()
    exp.update(metrics("job-a"))
    exp.update(metrics("job-b", verdict="KILL"))
    exp.update(metrics("job-a", trials_completed_total=41, verdict="KILL"))
    assert value(exp, "rlhealth_job_trials_completed_total", job_id="job-a") == 41.0
    assert value(exp, "rlhealth_job_verdict_kill", job_id="job-a") == 1.0

    assert exp.remove("job-a") is True
    assert exp.remove("job-a") is False
    text = generate_latest(exp.registry).decode()
    assert 'job_id="job-a"' not in text
    assert 'job_id="job-b"' in text

    exp.update(metrics("job-c"))
    assert sorted(exp.retain({"job-c"})) == ["job-b"]
    assert exp.jobs.job_ids() == ["job-c"]


def verdict_of(job_id: str = "job-a", **over: object):
    from rlhealth.schemas import Verdict

    base = dict(job_id=job_id, verdict="NO-KILL", confidence="medium", job_status="UNKNOWN", escalate=True,
                reasoning="blind", produced_at=T0)
    return Verdict.model_validate({**base, **over})


def test_verdict_fields_are_exported_and_vanish_with_the_job() -> None:
    exp = Exporter()
    exp.update(metrics("job-a"), verdict_of("job-a"))
    assert value(exp, "rlhealth_job_escalate", job_id="job-a") == 1.0
    assert value(exp, "rlhealth_job_status", job_id="job-a", status="UNKNOWN") == 1.0
    for other in ("ALIVE", "WEDGED", "TERMINAL"):
        assert value(exp, "rlhealth_job_status", job_id="job-a", status=other) == 0.0
    assert value(exp, "rlhealth_job_confidence", job_id="job-a") == 0.5
    assert value(exp, "rlhealth_job_verdict_timestamp_seconds", job_id="job-a") == T0.timestamp()

    exp.update(metrics("job-a"), verdict_of("job-a", escalate=False, confidence="high", job_status="WEDGED",
                                            verdict="KILL"))
    assert value(exp, "rlhealth_job_escalate", job_id="job-a") == 0.0
    assert value(exp, "rlhealth_job_status", job_id="job-a", status="WEDGED") == 1.0
    assert value(exp, "rlhealth_job_status", job_id="job-a", status="UNKNOWN") == 0.0
    assert value(exp, "rlhealth_job_confidence", job_id="job-a") == 1.0
    # an update without a verdict drops the verdict-only series instead of keeping stale ones
    exp.update(metrics("job-a"))
    assert value(exp, "rlhealth_job_escalate", job_id="job-a") is None
    exp.update(metrics("job-a"), verdict_of("job-a"))
    exp.remove("job-a")
    assert "job-a" not in generate_latest(exp.registry).decode()
    exp.update(metrics("job-b"), verdict_of("job-b"))
    exp.retain([])
    assert "job-b" not in generate_latest(exp.registry).decode()


def test_job_exporter_has_no_pipeline_series() -> None:
    from rlhealth.sinks.prometheus import JobExporter

    exp = JobExporter()
    exp.update(metrics("job-a"), verdict_of("job-a"))
    text = generate_latest(exp.registry).decode()
    assert 'rlhealth_job_escalate{job_id="job-a"} 1.0' in text
    for name in ("rlhealth_worker_caught_up", "rlhealth_consumer_lag", "rlhealth_events_", "rlhealth_partitions_owned",
                 "rlhealth_event_loop_lag_seconds", "rlhealth_verdicts_published"):
        assert name not in text, name


def test_component_counters_bound_their_labels() -> None:
    exp = Exporter()
    exp.received("log_batch", 3)
    exp.processed("log_batch", 2)
    exp.failed("no-such-kind")
    exp.dead_lettered("log_batch", "invalid_json")
    exp.dead_lettered(None, "a reason nobody planned for")
    exp.verdict_published("KILL")
    exp.consumer_lag.labels("rlhealth.log_batch").set(17)
    exp.partitions_owned.set(4)
    assert value(exp, "rlhealth_events_received_total", kind="log_batch") == 3.0
    assert value(exp, "rlhealth_events_processed_total", kind="log_batch") == 2.0
    assert value(exp, "rlhealth_events_failed_total", kind="unknown") == 1.0
    assert value(exp, "rlhealth_events_dead_lettered_total", kind="log_batch", reason="invalid_json") == 1.0
    assert value(exp, "rlhealth_events_dead_lettered_total", kind="unknown", reason="other") == 1.0
    assert value(exp, "rlhealth_verdicts_published_total", verdict="KILL") == 1.0
    assert value(exp, "rlhealth_consumer_lag", topic="rlhealth.log_batch") == 17.0
    assert value(exp, "rlhealth_partitions_owned") == 4.0


def test_exporters_do_not_share_a_registry() -> None:
    a, b = Exporter(), Exporter(CollectorRegistry())
    a.update(metrics("only-in-a"))
    assert b.registry.get_sample_value("rlhealth_job_running_requests", {"job_id": "only-in-a"}) is None


def test_http_endpoint_serves_the_exposition() -> None:
    exp = Exporter()
    exp.update(metrics("job-http", verdict="KILL"))
    port = exp.serve(0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            body = resp.read().decode()
        assert 'rlhealth_job_verdict_kill{job_id="job-http"} 1.0' in body
        exp.remove("job-http")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            assert "job-http" not in resp.read().decode()
    finally:
        exp.shutdown()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)")
def test_exposition_passes_promtool_lint() -> None:
    exp = Exporter()
    exp.update(metrics("job-a"))
    exp.update(metrics("job-b", verdict="KILL", generation_tokens_per_s=None), verdict_of("job-b"))
    exp.received("log_batch")
    exp.dead_lettered("trial", "invalid_fields")
    exp.verdict_published("NO-KILL")
    exp.consumer_lag.labels("rlhealth.trial").set(0)
    proc = subprocess.run(["promtool", "check", "metrics"], input=generate_latest(exp.registry),
                          capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()



def test_prerendered_exposition_equals_generate_latest() -> None:
    exp = Exporter()
    assert exp.exposition() == generate_latest(exp.registry)  # no job yet: the family headers alone
    exp.update(metrics("job-a"), verdict_of("job-a"))
    exp.update(metrics('we"ird\\job\nid', log_staleness_s={"trainer": 1e-7, "mystery": 5.0, "other": 2.0},
                       generation_tokens_per_s=None, verdict=None, last_event_time=None, trainer_last_step=None,
                       gate_status={"B": "PASS", "C": "odd"}, trial_reward_mean=float("nan"),
                       running_requests=12345678.9, waiting_requests=float("inf"), restarts_max=-1,
                       trials_nonzero_reward_ratio=float("-inf")),
               verdict_of('we"ird\\job\nid', confidence="low", job_status="WEDGED", escalate=False,
                          produced_at=datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)))
    exp.update(metrics("job-c", verdict="KILL", log_staleness_s={}, trials_completed_total=3 * 10**12))
    exp.update(metrics("job-a", running_requests=1.0), verdict_of("job-a", verdict="KILL"))  # replaced in place
    exp.received("log_batch")
    exp.dead_lettered("trial", "invalid_fields")
    exp.jobs_expired.labels("idle").inc()
    exp.consumer_lag.labels("rlhealth.trial").set(3)
    text = exp.exposition()
    assert text == generate_latest(exp.registry)
    for series in ("rlhealth_job_escalate", "rlhealth_job_status", "rlhealth_job_confidence",
                   "rlhealth_job_verdict_timestamp_seconds", "rlhealth_job_gate_status", "rlhealth_consumer_lag"):
        assert f"\n{series}{{".encode() in text, series
    exp.update(metrics("job-a"))  # the verdict-only series go with an update without a verdict
    exp.remove("job-c")
    exp.retain(["job-a", 'we"ird\\job\nid'])
    text = exp.exposition()
    assert text == generate_latest(exp.registry)
    assert b"job-c" not in text and b'rlhealth_job_escalate{job_id="job-a"}' not in text
    exp.retain([])
    assert exp.exposition() == generate_latest(exp.registry)


def test_job_exporter_exposition_equals_generate_latest() -> None:
    from rlhealth.sinks.prometheus import JobExporter

    exp = JobExporter()
    for i in range(300):
        exp.update(metrics(f"job-{i:04d}", trainer_last_step=i),
                   verdict_of(f"job-{i:04d}") if i % 3 else None)
    assert exp.exposition() == generate_latest(exp.registry)
    assert b"rlhealth_events_" not in exp.exposition()


def test_http_endpoint_serves_generate_latest_plain_or_gzipped() -> None:
    import gzip

    exp = Exporter()
    exp.update(metrics("job-http"), verdict_of("job-http"))
    exp.received("trial")
    port = exp.serve(0)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert resp.read() == generate_latest(exp.registry)
        req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.headers["Content-Encoding"] == "gzip"
            assert gzip.decompress(resp.read()) == generate_latest(exp.registry)
    finally:
        exp.shutdown()


def test_rendered_exposition_serves_one_snapshot_until_refreshed() -> None:
    """The worker serves a snapshot it takes between passes (`serve(rendered=True)`): a scrape does no
    work per series, and its per-job and pipeline series are of one moment."""
    exp = Exporter()
    exp.update(metrics("job-a"))
    assert exp.refresh_exposition()
    assert not exp.refresh_exposition()  # no job changed since: the per-job text is not rendered again
    assert exp.rendered_exposition() == generate_latest(exp.registry)
    exp.update(metrics("job-b", trainer_last_step=99))
    exp.events_received.labels("log_batch").inc(3)
    exp.jobs_owned.set(2)
    stale = exp.rendered_exposition().decode()
    assert 'job_id="job-b"' not in stale and "rlhealth_jobs_owned 0.0" in stale  # both as of the snapshot
    assert "log_batch" not in stale
    assert exp.exposition() == generate_latest(exp.registry)  # the current text is still at hand
    assert not exp.refresh_exposition()  # (`exposition` rendered the changed jobs already)
    assert exp.rendered_exposition() == generate_latest(exp.registry)
    exp.remove("job-a")
    exp.jobs_expired.labels("idle").inc()
    assert exp.jobs.changed  # a removal is a change too
    assert 'job_id="job-a"' in exp.rendered_exposition().decode()
    assert exp.refresh_exposition()
    assert exp.rendered_exposition() == generate_latest(exp.registry)
    exp.retain(["job-b"])
    assert not exp.jobs.changed  # nothing dropped
    exp.retain([])
    assert exp.refresh_exposition() and exp.rendered_exposition() == generate_latest(exp.registry)


def test_rendered_exposition_is_taken_at_the_first_scrape_and_served_over_http() -> None:
    exp = Exporter()
    exp.update(metrics("job-a"))
    assert exp.rendered_exposition() == generate_latest(exp.registry)  # never taken: taken now
    port = exp.serve(0, rendered=True)
    try:
        exp.update(metrics("job-a", trainer_last_step=123))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            assert 'rlhealth_job_trainer_last_step{job_id="job-a"} 17.0' in resp.read().decode()
        exp.refresh_exposition()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            assert resp.read() == generate_latest(exp.registry)
    finally:
        exp.shutdown()


def test_a_job_updated_again_keeps_unchanged_families_text_and_equals_generate_latest() -> None:
    """`render_rows` reuses a family's text from the job's previous update when its samples are the same:
    every sequence of updates (values that change, stay, flip sign at zero, turn NaN, families that appear
    and vanish, roles that fold) still renders what `generate_latest` gives, and what a fresh exporter
    given only the last update renders."""
    from rlhealth.sinks.prometheus import JobExporter

    steps = [
        {},
        {"running_requests": 65.0},  # one family changes, the rest is kept
        {"running_requests": 65.0},  # nothing changes
        {"restarts_burned": 0, "oom_events_total": 0},
        {"restarts_burned": -0.0, "waiting_requests": -0.0},  # == 0.0 but written "-0.0"
        {"restarts_burned": 0.0, "waiting_requests": 0.0},
        {"trial_reward_mean": float("nan")},
        {"trial_reward_mean": float("nan")},
        {"log_staleness_s": {"trainer": 12.5, "engine": 4.0}},  # one of a family's two samples
        {"log_staleness_s": {"trainer": 12.5, "engine": 4.0, "mystery": 1.0}},  # a sample more
        {"log_staleness_s": {"trainer": 12.5, "engine": 4.0, "mystery": 1.0, "odd": 2.0}},  # folded into other
        {"gate_status": {"A": "FAIL", "B": "FAIL", "C": "UNKNOWN"}},
        {"generation_tokens_per_s": None},  # a family gone
        {"generation_tokens_per_s": 1500.0},  # and back
        {"verdict": "KILL"},
    ]
    for with_verdict in (True, False):
        exp = JobExporter()
        exp.update(metrics("other-job"))
        for i, over in enumerate(steps):
            m = metrics("job-a", **over)  # type: ignore[arg-type]
            v = verdict_of("job-a", verdict="KILL") if with_verdict and i % 4 == 3 else (
                verdict_of("job-a") if with_verdict else None)
            exp.update(m, v)
            assert exp.exposition() == generate_latest(exp.registry), (with_verdict, i)
            fresh = JobExporter()
            fresh.update(metrics("other-job"))
            fresh.update(m, v)
            assert exp.exposition() == fresh.exposition(), (with_verdict, i)


def test_job_rows_equal_the_family_by_name_writing() -> None:
    """`job_rows` (family indexes written out) gives the rows its by-name twin gives, for every shape of
    metrics and verdict: absent values, roles folded into "other", NaN, ints, all verdict fields."""
    from rlhealth.agents.training_time import TrainingTime
    from rlhealth.sinks.prometheus import _job_rows_by_name, job_rows

    cases = [
        (metrics(), None),
        (metrics(), verdict_of()),
        (metrics(log_staleness_s={}, generation_tokens_per_s=None, running_requests=None, waiting_requests=None,
                 trial_reward_mean=None, trials_nonzero_reward_ratio=None, restarts_burned=None, restarts_max=None,
                 gate_status={}, verdict=None, last_event_time=None, trainer_last_step=None), None),
        (metrics(log_staleness_s={"x": 1.0, "y": 3.0, "trainer": 2.0}, trial_reward_mean=float("nan"),
                 gate_status={"A": "odd"}, verdict="KILL", trials_completed_total=3 * 10**12),
         verdict_of(verdict="KILL", confidence="low", job_status="WEDGED", escalate=False)),
        (metrics(verdict="maybe"), verdict_of(confidence="high", job_status="TERMINAL")),
    ]
    for tt in (TrainingTime(wall_s=13.5, productive_s=10.0, bring_up_s=2.0, stalled_s=0.0, failures_s=1.0,
                            unattributed_s=0.5, ratio=0.74),
               TrainingTime(wall_s=0, productive_s=0, bring_up_s=0, stalled_s=0, failures_s=0, unattributed_s=0,
                            ratio=None)):
        cases.append((metrics(training_time=tt), verdict_of()))
    for m, v in cases:
        assert job_rows(m, v) == _job_rows_by_name(m, v)
        assert [type(x) for row in job_rows(m, v) for x in row] == [
            type(x) for row in _job_rows_by_name(m, v) for x in row]
