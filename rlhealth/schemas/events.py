"""Event models: what shippers and capture readers produce and the health core consumes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from rlhealth.schemas.common import EventBase, Model, UtcDatetime

# Bounds keep one event (and one job's state) small whatever a source does.
MAX_LINE_CHARS = 65_536
MAX_LINES_PER_BATCH = 10_000
MAX_OUTPUT_SAMPLES = 5
MAX_OUTPUT_SAMPLE_CHARS = 4_000
# Job-spec bounds: a count outside them is a typo or garbage, never a real job (it is rejected).
MAX_COUNT = 100_000  # nodes, engines, pods, samples per prompt, retries
MAX_GPUS_PER_NODE = 64
MAX_PARALLEL = 4_096  # tensor / expert parallel degree
MAX_TRIALS = 10_000_000  # concurrent trials, sequences per engine
MAX_PARAMS_B = 1_000_000.0  # billions of parameters
MAX_SECONDS = 30 * 86_400.0


class LogBatch(EventBase):
    """Many lines from one source, stored as columns: hundreds of lines per message is normal.

    Columns keep decode cost per line low (one list of strings, not an object per line).
    `offsets[i]` is the byte offset of `lines[i]` in its source; `ts[i]` the line's own
    timestamp when the shipper parsed one (the core parses what is left as None).
    """

    kind: Literal["log_batch"] = "log_batch"
    lines: list[Annotated[str, Field(max_length=MAX_LINE_CHARS)]] = Field(max_length=MAX_LINES_PER_BATCH)
    offsets: list[int] | None = None
    first_line_no: int | None = Field(default=None, ge=0)
    ts: list[UtcDatetime | None] | None = None
    truncated_lines: int = Field(default=0, ge=0, description="lines cut to MAX_LINE_CHARS by the shipper")
    invalid_utf8_lines: int = Field(default=0, ge=0, description="lines that had bytes replaced when decoding")
    file_id: str | None = Field(
        default=None, max_length=200,
        description="identity of the file the lines were read from (a shipper's device:inode:fingerprint, "
                    "new after a truncation); with source.stream and first_line_no it names each line, so a "
                    "consumer drops lines it already folded (a resend after a crash or an outage)")

    @model_validator(mode="after")
    def _columns_line_up(self) -> LogBatch:
        n = len(self.lines)
        if self.offsets is not None and len(self.offsets) != n:
            raise ValueError(f"offsets has {len(self.offsets)} entries for {n} lines")
        if self.ts is not None and len(self.ts) != n:
            raise ValueError(f"ts has {len(self.ts)} entries for {n} lines")
        return self


class GpuReading(Model):
    index: int | None = None
    uuid: str | None = None
    util_pct: float | None = Field(default=None, description="None when nvidia-smi printed [N/A] or [Not Supported]")
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    ecc_uncorrected: int | None = Field(default=None, ge=0,
                                        description="uncorrected ECC errors since the driver loaded (volatile)")
    xids: list[int] = Field(default_factory=list, max_length=16,
                            description="Xid codes the driver reported for this GPU since the last poll (NVML events)")


class ComputeApp(Model):
    gpu_uuid: str | None = None
    pid: int | None = None
    process_name: str | None = None
    used_mib: float | None = None


class GpuPoll(EventBase):
    """One nvidia-smi poll of one host or pod. Poll errors are data, not exceptions."""

    kind: Literal["gpu_poll"] = "gpu_poll"
    host: str
    gpus: list[GpuReading] = Field(default_factory=list, max_length=64)
    apps: list[ComputeApp] = Field(default_factory=list, max_length=512)
    errors: list[str] = Field(default_factory=list, max_length=16)


class TrialEvent(EventBase):
    """One Harbor trial started, completed, or vanished (its directory disappeared)."""

    kind: Literal["trial"] = "trial"
    phase: Literal["started", "completed", "vanished"]
    trial_name: str
    task_name: str | None = None
    session: Literal["train", "eval"] | None = None
    reward: float | None = None
    exception_type: str | None = None
    exception_message: str | None = Field(default=None, max_length=MAX_OUTPUT_SAMPLE_CHARS)
    assistant_turns: int | None = Field(default=None, ge=0)
    started_at: UtcDatetime | None = None
    finished_at: UtcDatetime | None = None
    timings_s: dict[str, float] = Field(default_factory=dict)
    output_samples: list[str] = Field(default_factory=list, max_length=MAX_OUTPUT_SAMPLES)


class AttemptRecord(Model):
    attempt: int
    terminal_state: str | None = None
    exit_code: int | None = None
    started_at: UtcDatetime | None = None
    ended_at: UtcDatetime | None = None
    error: str | None = None


class PodStatus(Model):
    """One pod (or SLURM node step) as the scheduler reports it."""

    name: str
    phase: str | None = None
    ready: bool | None = None
    restart_count: int = 0
    reasons: list[str] = Field(default_factory=list,
                               description="waiting/terminated reasons, e.g. OOMKilled, ImagePullBackOff")
    exit_code: int | None = None
    message: str | None = None


JobState = Literal["pending", "running", "succeeded", "failed", "killed", "unknown"]


class JobStatePoll(EventBase):
    """The scheduler's view of the job; the same fields as a line of a capture's state.jsonl."""

    kind: Literal["job_state"] = "job_state"
    state: JobState
    pods: int | None = None
    failure_count: int | None = None
    preemption_count: int | None = None
    attempt: int | None = None
    max_retries: int | None = None
    attempts: list[AttemptRecord] = Field(default_factory=list, max_length=64)
    pod_statuses: list[PodStatus] = Field(default_factory=list, max_length=256)
    scheduler: Literal["kubernetes", "slurm", "other"] | None = None


class ModelSpec(Model):
    name: str | None = None
    params_b: float | None = Field(default=None, gt=0, le=MAX_PARAMS_B)
    active_params_b: float | None = Field(default=None, gt=0, le=MAX_PARAMS_B)
    moe: bool | None = None
    dtype: str | None = None


class HardwareSpec(Model):
    gpu: str | None = None
    gpus_per_node: int | None = Field(default=None, ge=1, le=MAX_GPUS_PER_NODE)
    nodes: int | None = Field(default=None, ge=1, le=MAX_COUNT)


class GeometrySpec(Model):
    num_inference_engines: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    engine_tp: int | None = Field(default=None, ge=1, le=MAX_PARALLEL)
    engine_ep: int | None = Field(default=None, ge=1, le=MAX_PARALLEL)
    colocated: bool | None = None
    engine_pods: list[str] = Field(default_factory=list, max_length=MAX_COUNT)
    policy_pods: list[str] = Field(default_factory=list, max_length=MAX_COUNT)


class RolloutSpec(Model):
    n_concurrent_trials: int | None = Field(default=None, ge=1, le=MAX_TRIALS)
    expected_episode_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    n_samples_per_prompt: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    max_num_seqs: int | None = Field(default=None, ge=1, le=MAX_TRIALS)


class JobSpec(EventBase):
    """What the job is: model, hardware, geometry and expectations. Absent fields are unknown."""

    kind: Literal["job_spec"] = "job_spec"
    model: ModelSpec = Field(default_factory=ModelSpec)
    hardware: HardwareSpec = Field(default_factory=HardwareSpec)
    geometry: GeometrySpec = Field(default_factory=GeometrySpec)
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    expected_step_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    new_or_untested: list[str] = Field(default_factory=list)
    max_retries: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    enforce_eager: bool | None = None
    started_at: UtcDatetime | None = None
    config: dict[str, Any] = Field(default_factory=dict, description="other resolved-config facts, flat dotted keys")


class SourceStat(Model):
    """What one live source of a shipper (nvml, sacct, pod watch, ...) received, sent and failed so far."""

    name: str = Field(max_length=200)
    received: int = Field(default=0, ge=0, description="events the source produced")
    sent: int = Field(default=0, ge=0, description="events delivered (acknowledged or spooled)")
    failed: int = Field(default=0, ge=0, description="polls that failed (command missing, API error, ...)")
    last_error: str | None = Field(default=None, max_length=500)


class ShipperHeartbeat(EventBase):
    """A shipper says it is alive and which sources it follows, so silence can be told apart."""

    kind: Literal["heartbeat"] = "heartbeat"
    shipper: str
    sources: list[str] = Field(default_factory=list, max_length=1024)
    interval_s: float = 30.0
    stopping: bool = False
    behind: bool = Field(default=False, description="the shipper has a backlog (unread log bytes or a spool)")
    lag_bytes: int | None = Field(default=None, ge=0, description="log bytes written and not yet delivered")
    source_stats: list[SourceStat] = Field(default_factory=list, max_length=64,
                                           description="counters of the live sources beside the job folder")


class JobEnded(EventBase):
    """The monitor was told the job is gone for good: drop its state and its metric series."""

    kind: Literal["job_ended"] = "job_ended"
    reason: str | None = None


Event = LogBatch | GpuPoll | TrialEvent | JobStatePoll | JobSpec | ShipperHeartbeat | JobEnded
EVENT_MODELS: dict[str, type[EventBase]] = {
    "log_batch": LogBatch,
    "gpu_poll": GpuPoll,
    "trial": TrialEvent,
    "job_state": JobStatePoll,
    "job_spec": JobSpec,
    "heartbeat": ShipperHeartbeat,
    "job_ended": JobEnded,
}
