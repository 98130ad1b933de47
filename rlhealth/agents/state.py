"""Per-job health state: everything the gates need, bounded, serialisable, versioned.

Times are float epoch seconds (UTC) to keep the state small. Every list and dict has a cap,
so a job's state stays far below 64 KB however much its sources print. The state is a tree of
msgspec Structs so the faust table stores it as compact msgpack.
"""

from __future__ import annotations

import msgspec

from rlhealth.agents.training_time import TrainingClock

STATE_VERSION = 2

# Caps: each one bounds a buffer that would otherwise grow with the job's age or chattiness.
MAX_STREAMS = 64
MAX_FOLDED_FILES = 128  # (stream, file) keys whose folded line ranges are remembered (~20 KB at most)
MAX_FOLDED_RANGES = 8  # disjoint folded line ranges per file (more: the lowest gap is closed)
MAX_ENGINES = 24
MAX_ENGINE_SAMPLES = 30
MAX_HOSTS = 32
MAX_GPU_POLLS = 4
MAX_GPUS_PER_HOST = 16
MAX_TRACEBACKS = 8
MAX_EVIDENCE_PER_SIGNAL = 3
MAX_SIGNALS = 64
MAX_STEP_HISTORY = 24
MAX_TIMERS = 24
MAX_REWARDS = 128
MAX_TRIAL_NAMES = 64
MAX_EXC_TYPES = 24
MAX_SAMPLES = 6
MAX_METRIC_HISTORY = 24
MAX_SHIPPERS = 32
MAX_ATTEMPTS = 16
EVIDENCE_TEXT_CHARS = 400


class Ev(msgspec.Struct, array_like=True):
    """One piece of evidence: when, where, what, and how to find it again."""

    ts: float | None
    source: str
    text: str
    rule_id: str = ""
    file: str | None = None
    offset: int | None = None
    topic: str | None = None
    partition: int | None = None
    kafka_offset: int | None = None


class SignalStat(msgspec.Struct):
    count: int = 0
    first_ts: float | None = None
    last_ts: float | None = None
    evidence: list[Ev] = msgspec.field(default_factory=list)  # first and latest few
    attempts: list[int] = msgspec.field(default_factory=list)  # attempts it was seen in
    role: str = ""  # role of the process that logged the latest occurrence
    stream: str = ""  # stream of the latest occurrence (its silence afterwards is the failing tail)


class StreamState(msgspec.Struct):
    role: str = "other"
    host: str | None = None
    attempt: int | None = None
    last_ts: float | None = None  # newest line time seen on this stream
    # A line of this stream carried its own timestamp. Until one does, every time its lines get is
    # borrowed from a later line (the first stamp after them) or the reader: an upper bound only.
    stamped: bool = False
    lines: int = 0
    invalid_utf8_lines: int = 0
    truncated_lines: int = 0
    # Lines from the end of the last batch back to its newest matched traceback-context line
    # ("Traceback (most recent call last)", RayTaskError, ...), while within the traceback look-back:
    # a traceback cut by a batch boundary keeps its context (None: none that recent).
    fatal_context_ago: int | None = None
    # The carried traceback header is one Python's unraisable hook printed (its exception was discarded)
    fatal_context_swallowed: bool = False
    # The last line of the last batch was Python's "Exception ignored in: ..." (the header that follows it,
    # in the next batch, is the unraisable hook's)
    unraisable_at_end: bool = False


class EngineState(msgspec.Struct):
    host: str | None = None
    last_ts: float | None = None
    # ~1-minute buckets: (first ts, mean generation tok/s, mean prompt tok/s, mean running, mean waiting,
    # max kv %, lines folded in); stored rounded so msgpack keeps them small
    samples: list[tuple[float, float, float, float, float, float, int]] = msgspec.field(default_factory=list)
    last_gen: float = 0.0  # the newest line's values: a hung engine prints one 0.0 line, then nothing
    last_running: float = 0.0
    last_prompt: float = 0.0
    # Where its EngineCore logs (roles.engine_core_of_stats): the key of its own waits in JobHealth.core_waits
    core: str = ""


class GpuHost(msgspec.Struct):
    role: str = "unknown"  # policy | engine | mixed | unknown
    role_source: str = ""  # spec | apps | naming
    # polls: (ts, [(index, util %, mem used MiB, mem total MiB, power W)]) with None for N/A
    polls: list[tuple[float, list[tuple[int, float | None, float | None, float | None, float | None]]]] = msgspec.field(
        default_factory=list
    )
    errors: list[str] = msgspec.field(default_factory=list)
    app_names: list[str] = msgspec.field(default_factory=list)
    # First poll of the current run of polls with every GPU pinned at high util on near-idle power
    # (collectives spinning); None when the latest poll broke the run.
    spin_since: float | None = None


class TracebackRec(msgspec.Struct):
    ts: float | None
    exc_type: str
    message: str
    fingerprint: str
    failure_class: str
    stream: str
    attempt: int | None
    role: str
    text: str
    fatal: bool = False
    consequence: bool = False  # a type or message that points at a cause elsewhere ("see stack trace above")
    # printed by Python's unraisable hook ("Exception ignored in: ..."): discarded, the process carried on,
    # so it is never a job's death nor its root cause
    swallowed: bool = False


class TrainerState(msgspec.Struct):
    last_progress_ts: float | None = None
    last_progress_text: str = ""
    last_progress_source: str = ""
    # The newest progress line had no time of its own and none earlier in its stream: its time is an
    # upper bound (the first stamp printed after it), not evidence that the trainer advanced by then.
    last_progress_bound: bool = False
    last_step: int | None = None
    step_ts: list[tuple[float, int]] = msgspec.field(default_factory=list)  # (ts, step)
    step_durations: list[float] = msgspec.field(default_factory=list)  # seconds, from timers or step deltas
    open_timers: dict[str, float] = msgspec.field(default_factory=dict)  # name -> start ts
    phase_max_s: dict[str, float] = msgspec.field(default_factory=dict)  # longest finished duration per phase
    in_weight_sync_since: float | None = None


class TrialStats(msgspec.Struct):
    started: int = 0
    completed: int = 0
    vanished: int = 0
    nonzero_rewards: int = 0
    zero_rewards: int = 0
    null_rewards: int = 0
    first_started_ts: float | None = None
    last_started_ts: float | None = None
    last_completed_ts: float | None = None
    rewards: list[tuple[float, float]] = msgspec.field(default_factory=list)  # (ts, reward) recent train trials
    completed_ts: list[int] = msgspec.field(default_factory=list)  # recent completion times, for the rate
    turns: list[int] = msgspec.field(default_factory=list)
    exc_types: dict[str, int] = msgspec.field(default_factory=dict)
    # Of those, the ones whose message names an infrastructure failure (an infra rule matched it): a generic
    # class (NotFoundError, RuntimeError) says nothing, 'Modal Sandbox with container ID ... not found' does.
    exc_infra: dict[str, int] = msgspec.field(default_factory=dict)
    exc_examples: dict[str, Ev] = msgspec.field(default_factory=dict)
    completed_names: list[str] = msgspec.field(default_factory=list)  # recent, for de-duplication
    running_names: list[str] = msgspec.field(default_factory=list)
    vanished_names: list[str] = msgspec.field(default_factory=list)  # may reappear on a retry
    coherent_samples: int = 0  # trials whose sampled outputs look coherent
    incoherent_samples: int = 0  # trials whose sampled outputs are mostly incoherent
    incoherent_examples: list[Ev] = msgspec.field(default_factory=list)
    incoherent_reasons: dict[str, int] = msgspec.field(default_factory=dict)


class SchedulerState(msgspec.Struct):
    last_ts: float | None = None
    state: str | None = None
    pods: int | None = None
    failure_count: int | None = None
    preemption_count: int | None = None
    attempt: int | None = None
    max_retries: int | None = None
    scheduler: str | None = None
    first_running_ts: float | None = None
    attempts: list[tuple[int, str | None, int | None, float | None, str | None]] = msgspec.field(
        default_factory=list
    )  # (attempt, terminal_state, exit_code, ended_at, error)
    pod_reasons: dict[str, int] = msgspec.field(default_factory=dict)
    pod_reason_examples: dict[str, Ev] = msgspec.field(default_factory=dict)
    max_pod_restarts: int = 0
    last_pod_reasons: list[str] = msgspec.field(default_factory=list)  # reasons in the newest poll only
    restart_history: list[tuple[int, int]] = msgspec.field(default_factory=list)  # (ts, max restarts) on change
    step_at_first_restart: int | None = None  # trainer step when pods first restarted
    crashloop_ts: float | None = None  # newest poll that showed CrashLoopBackOff


class MetricHistory(msgspec.Struct):
    loss: list[tuple[float, float]] = msgspec.field(default_factory=list)
    grad_norm: list[tuple[float, float]] = msgspec.field(default_factory=list)
    entropy: list[tuple[float, float]] = msgspec.field(default_factory=list)
    nonfinite: int = 0
    nonfinite_ev: Ev | None = None


class JobHealth(msgspec.Struct):
    """All a job's evidence, folded. Create with HealthCore.new_state; advance with HealthCore.step."""

    job_id: str
    v: int = STATE_VERSION
    spec: dict | None = None  # JobSpec as JSON-able dict (small)
    first_event_ts: float | None = None
    last_event_ts: float | None = None
    events: int = 0
    lines: int = 0
    enforce_eager: bool | None = None
    enforce_eager_source: str = ""
    cuda_graphs_seen: bool = False
    streams: dict[str, StreamState] = msgspec.field(default_factory=dict)
    role_last_ts: dict[str, float] = msgspec.field(default_factory=dict)
    engines: dict[str, EngineState] = msgspec.field(default_factory=dict)
    gpus: dict[str, GpuHost] = msgspec.field(default_factory=dict)
    signals: dict[str, SignalStat] = msgspec.field(default_factory=dict)
    tracebacks: list[TracebackRec] = msgspec.field(default_factory=list)
    trainer: TrainerState = msgspec.field(default_factory=TrainerState)
    trials: TrialStats = msgspec.field(default_factory=TrialStats)
    eval_trials: TrialStats = msgspec.field(default_factory=TrialStats)
    sched: SchedulerState = msgspec.field(default_factory=SchedulerState)
    metrics: MetricHistory = msgspec.field(default_factory=MetricHistory)
    # id -> (last ts, interval, stopping)
    shippers: dict[str, tuple[float, float, bool]] = msgspec.field(default_factory=dict)
    batch_progress: list[tuple[float, int, int]] = msgspec.field(default_factory=list)  # (ts, successful, total)
    # Job-level generation throughput per 5-minute bucket: (bucket start, summed tok/s, summed Running),
    # two hours of it, so fail-slow is judged against the job's own recent median.
    gen_history: list[tuple[int, float, float]] = msgspec.field(default_factory=list)
    gen_bucket: int | None = None
    ended: bool = False
    # NCCL watchdog lines per rank: rank -> (last completed collective seq, ts); the lowest is the straggler.
    rank_last_completed: dict[str, tuple[int, float]] = msgspec.field(default_factory=dict)
    # Streams that logged a hang line: stream -> newest hang ts (a rank silent among them is the suspect).
    hang_streams: dict[str, float] = msgspec.field(default_factory=dict)
    # The newest hang line that said how long its collective had been stuck ("ran for N milliseconds"):
    # (its time, the time the collective was issued, attempt, stream). No step of that group completed between.
    collective_stuck: tuple[float, float, int | None, str] | None = None
    # Hang lines that said how long their process had been stuck (SGLang's scheduler watchdog fires once one
    # forward batch has run `timeout_s`): stream -> (the line's time, when the stall began), newest per stream.
    stated_stalls: dict[str, tuple[float, float]] = msgspec.field(default_factory=dict)
    # Engine bring-up per host (the line's pod, else its source host; "" when neither is known): host -> (its newest
    # warm-up line, its newest ready line). A warm-up explains idle GPUs of its own host only (gate_resources).
    engine_phase: dict[str, tuple[float | None, float | None]] = msgspec.field(default_factory=dict)
    # tqdm bars' clocks: (log, prefixes) key -> (the time we gave the bar's first line, its elapsed s); keyed by
    # the log's unrotated name, so a bar continues across its log's rotations (bar_clock.py)
    bars: dict[str, tuple[float, float]] = msgspec.field(default_factory=dict)
    # An EngineCore's newest run of shm_broadcast waits ("No available shared memory broadcast block found in
    # 60 seconds"), keyed by roles.engine_core_of_line: (first line ts, newest line ts, lines, the wait interval
    # in s the line states). A run ends at a gap longer than two intervals.
    core_waits: dict[str, tuple[float, float, int, float]] = msgspec.field(default_factory=dict)
    # Xid lines: (ts, stream or host, code, text), newest last.
    xids: list[tuple[float, str, int, str]] = msgspec.field(default_factory=list)
    # Lines already folded per shipped file ("stream\0file_id" -> sorted disjoint [first, end) line
    # ranges): a resent batch changes nothing (see ingest.drop_folded_lines).
    folded: dict[str, list[tuple[int, int]]] = msgspec.field(default_factory=dict)
    # Effective training time: productive step time vs bring-up, stalls and failures (training_time.py).
    clock: TrainingClock = msgspec.field(default_factory=TrainingClock)

    def to_bytes(self) -> bytes:
        return _ENCODER.encode(self)

    @staticmethod
    def from_bytes(data: bytes) -> JobHealth:
        state = _DECODER.decode(data)
        if state.v != STATE_VERSION:
            raise ValueError(f"state version {state.v} is not {STATE_VERSION}")
        return state

    def size_bytes(self) -> int:
        return len(self.to_bytes())


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(JobHealth)


def push_capped(items: list, item: object, cap: int) -> None:
    """Append and drop the oldest entries beyond `cap`."""
    items.append(item)
    if len(items) > cap:
        del items[: len(items) - cap]
