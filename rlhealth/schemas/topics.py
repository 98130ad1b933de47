"""The topic catalogue: which Kafka topic carries which event kind, and how each topic is configured.

Pure data and no Kafka client (creating the topics is `rlhealth.sinks.kafka.ensure_topics`). It sits
with the wire contract so that the Kafka adapters in `rlhealth.sources` and `rlhealth.sinks` share it
without importing the streaming layer above them.

Rules the rest of the system relies on:

* One topic per event kind (`job_ended` shares the jobstate topic: it is the job's last state).
* Every record is keyed by `rlhealth.schemas.job_key(job_id)`, and every topic has the same
  partition count, so all of a job's events land in the same partition number of every topic and
  one worker owns the job (faust co-partitioning). Changing the count of a live deployment moves
  jobs between partitions; `ensure_topics` refuses to run against topics with another count.
* `jobspec`, `jobstate` and `verdicts` are compacted: the latest value per job is what a restarted
  consumer needs; the others are time-retained streams.

Environment:
  RLHEALTH_PARTITIONS    partitions of every topic (default 12)
  RLHEALTH_TOPIC_PREFIX  prepended to every topic name, e.g. "t-1f2e." so tests can isolate
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from rlhealth import settings

DEFAULT_PARTITIONS = 12
PARTITIONS_ENV = "RLHEALTH_PARTITIONS"
PREFIX_ENV = "RLHEALTH_TOPIC_PREFIX"

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS

# Base names (without prefix).
LOGS = "rlhealth.logs"
GPU = "rlhealth.gpu"
TRIALS = "rlhealth.trials"
JOBSTATE = "rlhealth.jobstate"
JOBSPEC = "rlhealth.jobspec"
HEARTBEATS = "rlhealth.heartbeats"
VERDICTS = "rlhealth.verdicts"
DEADLETTER = "rlhealth.deadletter"
FINDINGS = "rlhealth.findings"
METRICS = "rlhealth.metrics"

# Event kind (rlhealth.schemas.EVENT_MODELS keys) -> base topic name.
KIND_TOPICS: Mapping[str, str] = MappingProxyType({
    "log_batch": LOGS,
    "gpu_poll": GPU,
    "trial": TRIALS,
    "job_state": JOBSTATE,
    "job_ended": JOBSTATE,
    "job_spec": JOBSPEC,
    "heartbeat": HEARTBEATS,
})

# Largest record a topic accepts. Log batches are chunked by shippers below this; a dead letter
# carries the original record base64-encoded (4/3 larger) plus metadata, hence twice as much.
MAX_EVENT_BYTES = 4 * 1024 * 1024
MAX_DEAD_LETTER_BYTES = 8 * 1024 * 1024


def _delete(retention_ms: int, max_bytes: int = 1024 * 1024) -> dict[str, str]:
    return {
        "cleanup.policy": "delete",
        "retention.ms": str(retention_ms),
        "max.message.bytes": str(max_bytes),
    }


def _compact(max_bytes: int = 1024 * 1024) -> dict[str, str]:
    # Keep an hour of full history readable by offset (evidence refs point at it), roll segments
    # hourly so compaction can reach them (the active segment is never compacted), and keep
    # tombstones a day so slow consumers still see deletions.
    return {
        "cleanup.policy": "compact",
        "min.compaction.lag.ms": str(HOUR_MS),
        "segment.ms": str(HOUR_MS),
        "delete.retention.ms": str(DAY_MS),
        "min.cleanable.dirty.ratio": "0.5",
        "max.message.bytes": str(max_bytes),
    }


@dataclass(frozen=True)
class TopicSpec:
    """One topic: its base name, what it carries and its topic-level configs."""

    base: str
    kinds: tuple[str, ...]
    config: Mapping[str, str]
    description: str

    @property
    def compacted(self) -> bool:
        return "compact" in self.config.get("cleanup.policy", "")


TOPIC_SPECS: tuple[TopicSpec, ...] = (
    TopicSpec(LOGS, ("log_batch",), _delete(3 * DAY_MS, MAX_EVENT_BYTES),
              "log lines in batches, the highest-volume stream"),
    TopicSpec(GPU, ("gpu_poll",), _delete(3 * DAY_MS), "nvidia-smi polls per host"),
    TopicSpec(TRIALS, ("trial",), _delete(7 * DAY_MS), "Harbor trial started/completed/vanished"),
    TopicSpec(JOBSTATE, ("job_state", "job_ended"), _compact(), "scheduler state polls; job_ended is the last"),
    TopicSpec(JOBSPEC, ("job_spec",), _compact(), "what the job is; latest per job"),
    TopicSpec(HEARTBEATS, ("heartbeat",), _delete(DAY_MS), "shipper liveness"),
    TopicSpec(VERDICTS, (), _compact(), "KILL / NO-KILL verdicts; latest per job"),
    TopicSpec(DEADLETTER, (), _delete(14 * DAY_MS, MAX_DEAD_LETTER_BYTES),
              "records that could not be used, kept whole with the reason"),
    TopicSpec(FINDINGS, (), _delete(14 * DAY_MS), "every signature match the worker found (FindingRecord)"),
    TopicSpec(METRICS, (), _delete(14 * DAY_MS), "per-job metric time series, a point a minute (MetricsPoint)"),
)


def env_partitions() -> int:
    """$RLHEALTH_PARTITIONS (validated by rlhealth.settings), else 12."""
    return settings.load().partitions


def env_prefix() -> str:
    return settings.load().topic_prefix


@dataclass(frozen=True)
class TopicCatalog:
    """The catalogue with a prefix and a partition count applied: full names for everything.

    `TopicCatalog.from_env()` reads RLHEALTH_TOPIC_PREFIX and RLHEALTH_PARTITIONS; pass values to
    override. Tests build one with a unique prefix per test.
    """

    prefix: str = ""
    partitions: int = DEFAULT_PARTITIONS
    specs: tuple[TopicSpec, ...] = field(default=TOPIC_SPECS, repr=False)

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {self.partitions}")

    @classmethod
    def from_env(cls, prefix: str | None = None, partitions: int | None = None) -> TopicCatalog:
        return cls(
            prefix=env_prefix() if prefix is None else prefix,
            partitions=env_partitions() if partitions is None else partitions,
        )

    def name(self, base: str) -> str:
        return self.prefix + base

    def topic_for_kind(self, kind: str) -> str:
        try:
            return self.name(KIND_TOPICS[kind])
        except KeyError:
            raise KeyError(f"no topic for event kind {kind!r}") from None

    def kinds_for_topic(self, topic: str) -> tuple[str, ...]:
        """The event kinds a (full) topic name may carry; () for verdicts, dead letters and unknown."""
        for spec in self.specs:
            if self.name(spec.base) == topic:
                return spec.kinds
        return ()

    @property
    def event_topics(self) -> list[str]:
        return [self.name(s.base) for s in self.specs if s.kinds]

    @property
    def verdicts(self) -> str:
        return self.name(VERDICTS)

    @property
    def deadletter(self) -> str:
        return self.name(DEADLETTER)

    @property
    def findings(self) -> str:
        return self.name(FINDINGS)

    @property
    def metrics(self) -> str:
        return self.name(METRICS)

    @property
    def all_topics(self) -> list[str]:
        return [self.name(s.base) for s in self.specs]

    def topic_configs(self) -> dict[str, dict[str, str]]:
        """Full topic name -> topic-level configs."""
        return {self.name(s.base): dict(s.config) for s in self.specs}


__all__ = [
    "DEADLETTER", "DEFAULT_PARTITIONS", "FINDINGS", "GPU", "HEARTBEATS", "JOBSPEC", "JOBSTATE", "KIND_TOPICS",
    "METRICS",
    "LOGS", "MAX_DEAD_LETTER_BYTES", "MAX_EVENT_BYTES", "TOPIC_SPECS", "TRIALS", "VERDICTS",
    "TopicCatalog", "TopicSpec", "env_partitions", "env_prefix",
]
