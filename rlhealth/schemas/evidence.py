"""Evidence records the worker publishes beside its verdicts, for the evidence writer's store.

`FindingRecord`: one signature match (`rlhealth.findings` topic); `MetricsPoint`: one point of a
job's metric time series (`rlhealth.metrics`). Both keyed by `job_key(job_id)`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from rlhealth.schemas.common import Model, UtcDatetime


class FindingRecord(Model):
    schema_version: Literal[1] = 1
    record: Literal["finding"] = "finding"
    job_id: str = Field(min_length=1, max_length=256)
    kind: str = Field(description="finding kind of the rule (fatal, hang, hardware, ...)")
    rule_id: str
    severity: str = ""
    source: str = Field(default="", description="log stream the line came from")
    text: str = Field(default="", max_length=4000)
    event_time: UtcDatetime | None = None
    gates: list[str] = Field(default_factory=list)
    fields: dict[str, Any] = Field(default_factory=dict, description="what the rule extracted")
    ref: dict[str, Any] = Field(default_factory=dict,
                                description="file/file_offset/line_no and topic/partition/offset of the line")


class EngineStats(Model):
    """One ~1-minute bucket of an engine's stats lines (means), dated by its first line."""

    at: UtcDatetime
    generation_tokens_per_s: float
    running_requests: float
    waiting_requests: float


class MetricsPoint(Model):
    schema_version: Literal[1] = 1
    record: Literal["metrics"] = "metrics"
    job_id: str = Field(min_length=1, max_length=256)
    judged_at: UtcDatetime
    last_event_time: UtcDatetime | None = None
    generation_tokens_per_s: float | None = None
    running_requests: float | None = None
    waiting_requests: float | None = None
    log_staleness_s: dict[str, float] = Field(default_factory=dict, description="role -> seconds since its last line")
    trials_completed: int = 0
    reward_mean: float | None = None
    nonzero_reward_ratio: float | None = None
    gpu_util_mean: float | None = None
    restarts_burned: int | None = None
    trainer_last_step: int | None = None
    verdict: str | None = None
    job_status: str | None = None
    engines: dict[str, list[EngineStats]] = Field(default_factory=dict,
                                                  description="engine id -> its newest stats buckets, oldest first")
    effective_training_ratio: float | None = Field(None, ge=0, le=1, description="productive trainer-step time / "
                                                   "wall-clock time; None when unknown")
    training_time_s: dict[str, float] = Field(default_factory=dict, description="wall-clock seconds by use: "
                                              "productive, bring_up, stalled, failures, unattributed")


__all__ = ["EngineStats", "FindingRecord", "MetricsPoint"]
