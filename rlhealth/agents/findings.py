"""Small value types the core returns: findings (what one event revealed) and metric snapshots."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from rlhealth.agents.training_time import TrainingTime


@dataclass(frozen=True, slots=True)
class Finding:
    """One notable thing an event revealed: a matched signature, a gate change, a fail-slow alarm.

    `ref` says where to find the raw evidence again, e.g. {"file": ..., "offset": ...} or
    {"topic": ..., "partition": ..., "offset": ...}.
    """

    kind: str  # rule kind (death, wedge, oom, nccl, ...) or a derived kind (stale, fail_slow, ...)
    rule_id: str
    text: str
    event_time: datetime | None
    source: str
    severity: str = "info"
    gates: tuple[str, ...] = ()
    fields: dict[str, object] = field(default_factory=dict)
    ref: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JobMetrics:
    """What the Prometheus sink exports for one job; every label value is bounded (job_id, role, gate)."""

    job_id: str
    log_staleness_s: dict[str, float]  # role (trainer, engine, ray, scheduler, other) -> seconds since last line
    generation_tokens_per_s: float | None  # summed over engines, recent window
    running_requests: float | None
    waiting_requests: float | None
    trials_completed_total: int
    trial_reward_mean: float | None  # mean reward of recent completed training trials
    trials_nonzero_reward_ratio: float | None
    nccl_watchdog_hits_total: int
    oom_events_total: int
    ray_worker_deaths_total: int
    restarts_burned: int | None
    restarts_max: int | None
    gate_status: dict[str, str]  # "A" | "B" | "C" -> PASS | FAIL | UNKNOWN
    verdict: str | None  # KILL | NO-KILL
    job_status: str | None
    last_event_time: datetime | None
    trainer_last_step: int | None = None
    at: datetime | None = None  # the judging time these values are as of
    gpu_util_mean: float | None = None  # mean utilisation (%) over every GPU's latest poll
    training_time: TrainingTime | None = None  # effective training time: productive vs lost seconds
    # engine id -> its newest ~1-minute stats buckets (start time, generation tok/s, running, waiting), dated
    # by the lines, so a silent engine's series stops instead of repeating its last value; a few buckets
    # per point so points a few minutes apart still give every bucket
    engines: dict[str, tuple[tuple[float, float, float, float], ...]] = field(default_factory=dict)
