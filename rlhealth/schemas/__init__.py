"""The wire contract: versioned event and verdict models. No faust, no Kafka client in here."""

from rlhealth.schemas.codec import DeadLetter, EventDecodeError, decode_event, decode_verdict, encode, job_key
from rlhealth.schemas.common import SCHEMA_VERSION, EventBase, Source
from rlhealth.schemas.events import (
    EVENT_MODELS,
    AttemptRecord,
    ComputeApp,
    Event,
    GeometrySpec,
    GpuPoll,
    GpuReading,
    HardwareSpec,
    JobEnded,
    JobSpec,
    JobStatePoll,
    LogBatch,
    ModelSpec,
    PodStatus,
    RolloutSpec,
    ShipperHeartbeat,
    TrialEvent,
)
from rlhealth.schemas.verdict import Evidence, EvidenceRef, Gate, Gates, Restarts, Verdict, render_text

__all__ = [name for name in dir() if not name.startswith("_")]
