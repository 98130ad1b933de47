"""The incident report's data: plain values, filled from the evidence store (`report_store.load`)
and rendered by `html_report.render` (a pure function of them). Times are timezone-aware UTC."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Line:
    """One evidence line or finding, with where to find it again (a file offset or a Kafka offset)."""

    event_time: datetime | None
    source: str
    text: str
    rule_id: str = ""
    severity: str = ""
    kind: str = ""
    gate: str = ""  # for a verdict's evidence: '' (the verdict's own) or A / B / C
    location: str = ""  # file, or topic[partition]
    offset: int | None = None
    line_no: int | None = None


@dataclass(frozen=True, slots=True)
class VerdictRow:
    seq: int
    produced_at: datetime
    event_time: datetime | None
    age_s: float | None
    verdict: str
    confidence: str
    escalate: bool
    job_status: str
    gates: dict[str, str]  # A / B / C -> PASS | FAIL | UNKNOWN
    gate_summaries: dict[str, str]
    why: str  # the one-line why
    reasoning: str = ""
    next_steps: tuple[str, ...] = ()
    kill_command: str | None = None
    held: str | None = None  # what the hysteresis holds back, in words
    headline: str = ""
    captured: str | None = None
    evidence: tuple[Line, ...] = ()
    root_cause: str | None = None  # the verdict's typed root cause in one line (schemas.root_cause_line)


@dataclass(frozen=True, slots=True)
class EnginePoint:
    at: datetime  # the engine's own stats line
    generation_tokens_per_s: float
    running: float
    waiting: float


@dataclass(frozen=True, slots=True)
class MetricRow:
    judged_at: datetime
    generation_tokens_per_s: float | None = None
    running: float | None = None
    waiting: float | None = None
    staleness_s: dict[str, float] = field(default_factory=dict)  # role -> seconds since its last line
    trials_completed: int | None = None
    reward_mean: float | None = None
    nonzero_reward_ratio: float | None = None
    restarts_burned: int | None = None
    gpu_util_mean: float | None = None
    engines: dict[str, tuple[EnginePoint, ...]] = field(default_factory=dict)  # newest buckets per engine
    effective_training_ratio: float | None = None  # productive step time / wall-clock time so far
    training_time_s: dict[str, float] = field(default_factory=dict)  # seconds by use (training_time.py)


@dataclass(frozen=True, slots=True)
class Problem:
    path: str
    problem: str
    gate: str
    note: str
    count: int


@dataclass(frozen=True, slots=True)
class DeadLetterRow:
    received_at: datetime | None
    reason: str
    stage: str
    detail: str
    origin: str  # topic/partition/offset of the record, when known


@dataclass(frozen=True, slots=True)
class ReportData:
    job_id: str
    origin: str  # the store file or the capture the data came from
    verdicts: list[VerdictRow]
    metrics: list[MetricRow]
    findings: list[Line]
    problems: list[Problem] = field(default_factory=list)
    dead_letters: list[DeadLetterRow] = field(default_factory=list)
    verdicts_total: int = 0  # in the store; more than len(verdicts) when the oldest were left out
    findings_total: int = 0
    metrics_total: int = 0


__all__ = ["DeadLetterRow", "EnginePoint", "Line", "MetricRow", "Problem", "ReportData", "VerdictRow"]
