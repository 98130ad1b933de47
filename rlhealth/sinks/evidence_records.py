"""The core's findings and metrics as wire records (`rlhealth.schemas.evidence`), and back."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rlhealth.agents.findings import Finding, JobMetrics
from rlhealth.schemas.common import trusted
from rlhealth.schemas.evidence import EngineStats, FindingRecord, MetricsPoint


def _plain(d: dict[str, Any]) -> dict[str, Any]:
    return {str(k): (v if isinstance(v, (str, int, float, bool, type(None))) else str(v)) for k, v in d.items()}


def finding_record(job_id: str, f: Finding) -> FindingRecord:
    return FindingRecord(job_id=job_id, kind=f.kind, rule_id=f.rule_id, severity=f.severity or "", source=f.source,
                         text=f.text[:4000], event_time=f.event_time, gates=list(f.gates),
                         fields=_plain(dict(f.fields or {})), ref=_plain(dict(f.ref or {})))


def finding_of(r: FindingRecord) -> Finding:
    return Finding(kind=r.kind, rule_id=r.rule_id, text=r.text, event_time=r.event_time, source=r.source,
                   severity=r.severity, gates=tuple(r.gates), fields=dict(r.fields), ref=dict(r.ref))


def metrics_point(m: JobMetrics) -> MetricsPoint:
    at = m.at or m.last_event_time
    if at is None:
        raise ValueError("metrics without a judging time")
    return MetricsPoint(
        job_id=m.job_id, judged_at=at, last_event_time=m.last_event_time,
        generation_tokens_per_s=m.generation_tokens_per_s, running_requests=m.running_requests,
        waiting_requests=m.waiting_requests, log_staleness_s=dict(m.log_staleness_s),
        trials_completed=m.trials_completed_total, reward_mean=m.trial_reward_mean,
        nonzero_reward_ratio=m.trials_nonzero_reward_ratio, gpu_util_mean=m.gpu_util_mean,
        restarts_burned=m.restarts_burned, trainer_last_step=m.trainer_last_step, verdict=m.verdict,
        job_status=m.job_status,
        engines={eid: [_engine_stats(ts, gen, run, wait) for ts, gen, run, wait in buckets]
                 for eid, buckets in m.engines.items()},
        effective_training_ratio=None if m.training_time is None else m.training_time.ratio,
        training_time_s={} if m.training_time is None
        else {k: round(v, 3) for k, v in m.training_time.as_dict().items()},
    )


def _engine_stats(ts: float, gen: float, run: float, wait: float) -> EngineStats:
    """`EngineStats(at=<ts in UTC>, generation_tokens_per_s=gen, running_requests=run, waiting_requests=wait)`
    built without validation (`schemas.trusted`): a metrics point holds ~20 of them (5 buckets of 4
    engines), and validating them was most of a point's cost. The values are made what validation
    makes them: floats (`float()` of an int or bool is what the float field keeps) and a UTC datetime;
    tests/test_trusted_models.py holds the two equal."""
    return trusted(EngineStats, {"at": datetime.fromtimestamp(ts, UTC), "generation_tokens_per_s": float(gen),
                                 "running_requests": float(run), "waiting_requests": float(wait)})


def _engine_stats_validated(ts: float, gen: float, run: float, wait: float) -> EngineStats:
    """What `_engine_stats` must equal (tests)."""
    return EngineStats(at=datetime.fromtimestamp(ts, UTC), generation_tokens_per_s=gen, running_requests=run,
                       waiting_requests=wait)


__all__ = ["finding_of", "finding_record", "metrics_point"]
