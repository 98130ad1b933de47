"""Typed outcomes of the gates: reason codes with the facts behind them.

Gates decide in codes; `render.py` turns codes and facts into English in one place, and tests
assert the codes. A `Reason` with a `family` is a piece of evidence for a FAIL: the verdict
counts distinct families, never sentences.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from rlhealth.agents.state import Ev

if TYPE_CHECKING:
    from rlhealth.agents.rootcause import RootCause


class Code(StrEnum):
    # Gate A: liveness
    BLIND_SHIPPER = "A.blind_shipper"
    BLIND_NO_DATA = "A.blind_no_data"
    TERMINAL = "A.terminal"
    FATAL_TRACEBACK = "A.fatal_traceback_no_progress"
    PENDING = "A.pending"
    NO_VIEW = "A.no_view"
    STATE_POLL_ONLY = "A.state_poll_only"
    CRASH_LOOP = "A.crash_loop"
    WEDGED = "A.wedged"
    WEDGED_TAIL = "A.wedged_failing_tail"
    TRAINER_STALE = "A.trainer_stale_no_signature"
    LOGS_STALE = "A.no_progress_logs_stale"
    NO_PROGRESS_FORMAT = "A.no_progress_format"
    ALIVE = "A.alive"
    # Gate A supporting reasons (families)
    HANG_LINE = "A.hang_line"
    DEATH_LINE = "A.death_line"
    CRASH_AFTER_STEP = "A.crash_line_after_step"
    ROLE_SILENT = "A.role_silent_after"
    TRAINER_FROZEN = "A.trainer_frozen"
    POLICY_GPUS_IDLE = "A.policy_gpus_idle"
    PODS_RESTARTING = "A.pods_restarting"
    NO_PROGRESS_ACROSS_RESTARTS = "A.no_progress_across_restarts"
    FATAL_TB_LINE = "A.fatal_traceback"
    GPU_SPIN = "A.gpus_spinning"
    # context: the last progress line's time was lent by a later line and a stuck collective predates it
    PROGRESS_BEFORE_STUCK = "A.progress_time_before_stuck_collective"
    # Gate B: resources
    B_TERMINAL = "B.terminal_historical"
    OOM = "B.training_oom"
    GPU_HARDWARE = "B.gpu_hardware_fault"
    NONFINITE = "B.nonfinite_loss"
    STARVATION = "B.throughput_starvation"
    FLOORED = "B.throughput_floored"
    ENGINE_HUNG = "B.engine_hung"
    ENGINE_STALLED = "B.engine_stalled_on_workers"
    ENGINE_SILENT = "B.engine_silent_unconfirmed"
    ENGINE_DEAD = "B.engine_dead"
    ENGINE_DEATH_UNCONFIRMED = "B.engine_death_unconfirmed"
    RESIDENT_IDLE = "B.engine_resident_idle"
    COLLECTIVE_SPIN = "B.collective_spin"
    ENGINES_QUIET = "B.engines_quiet"
    ENGINES_IDLE = "B.engines_idle"
    FAIL_SLOW = "B.fail_slow"
    GENERATING = "B.generating"
    ENGINE_GPUS_IDLE = "B.engine_gpus_idle_no_stats"
    ENGINES_WARMING_UP = "B.engines_warming_up"
    GPUS_BUSY = "B.gpus_busy_no_stats"
    B_NO_VIEW = "B.no_view"
    # Gate B supporting reasons
    OOM_LINE = "B.oom_line"
    OOM_POD = "B.oom_pod"
    HW_LINE = "B.hardware_line"
    GPU_LOST_POLL = "B.gpu_lost_in_poll"
    WAITING_FAR_ABOVE_RUNNING = "B.waiting_far_above_running"
    THROUGHPUT_LOW = "B.throughput_low"
    KV_SATURATED = "B.kv_saturated"
    EAGER_ON = "B.enforce_eager_on"
    ENGINE_ZERO_THEN_SILENT = "B.engine_zero_then_silent"
    ENGINE_CORE_WAITING = "B.engine_core_waiting"
    ENGINE_GPUS_PINNED = "B.engine_gpus_pinned"
    ENGINE_DEATH_LINE = "B.engine_death_line"
    ENGINE_NO_STATS = "B.engine_no_stats"
    SLOW_SIGNAL = "B.slow_signal"
    SPIN_POLLS = "B.spin_polls"
    TRAINER_FROZEN_B = "B.no_step_while_spinning"
    RUNNING_SUSTAINED = "B.running_sustained"
    # Gate C: rollouts
    C_NO_TRIALS_BATCHES = "C.no_trials_batch_logs"
    C_NO_TRIALS = "C.no_trials"
    C_NONE_COMPLETED = "C.none_completed"
    INFRA = "C.infra_failures"
    INCOHERENT = "C.incoherent"
    VERIFIER = "C.verifier_failures"
    BROKEN_LOOP = "C.broken_loop"
    ZERO_REWARD_COHERENT = "C.zero_reward_coherent"
    AGENT_TIMEOUTS = "C.agent_timeouts_dominate"
    C_TOO_FEW = "C.too_few_to_judge"
    C_PASS = "C.completing_with_rewards"
    # Gate C supporting reasons
    TRIALS_INFRA = "C.trials_infra"
    ALL_ZERO = "C.all_zero_rewards"
    NO_TURNS = "C.no_turns"
    LOG_BREAKDOWN = "C.log_exception_breakdown"
    INCOHERENT_OUTPUT = "C.incoherent_output"
    VERIFIER_ERRORS = "C.verifier_errors"
    ONE_TURN = "C.one_turn"
    # restart-burn
    SAME_FAILURE = "R.same_failure"


@dataclass(slots=True)
class Reason:
    code: Code
    family: str | None = None  # the evidence family this reason stands on (None: context only)
    facts: dict[str, Any] = field(default_factory=dict)


class Why(StrEnum):
    """Why the evidence points at a culprit (rendered in render.CULPRIT_WHY)."""

    FATAL_TRACEBACK = "fatal_traceback"
    CAUSAL_EXCEPTION = "causal_exception"
    LOGGED_SIGNATURE = "logged_signature"
    STRAGGLER_RANK = "straggler_rank"  # lowest last-completed NCCL collective
    SILENT_RANK = "silent_rank"  # quiet while the other ranks timed out
    HARDWARE_XID = "hardware_xid"  # its kernel logged a hardware-blamed Xid
    GPU_HARDWARE = "gpu_hardware"
    GPUS_SPINNING = "gpus_spinning"
    POLICY_IDLE = "policy_idle"  # every policy GPU resident at ~0 % while the trainer is stale
    RESIDENT_IDLE = "resident_idle"
    TRIALS_INFRA = "trials_infra"
    INCOHERENT = "incoherent"
    VERIFIER = "verifier"


@dataclass(slots=True)
class Culprit:
    """The component and place the evidence points at."""

    role: str
    component: str = ""  # e.g. "EngineCore_DP1", "rank 3", "sglang server", the stream
    node: str | None = None
    why: list[Why] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)  # e.g. the straggler's seq, the Xid code


@dataclass
class GateResult:
    status: str = "UNKNOWN"  # PASS | FAIL | UNKNOWN
    code: Code | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    reasons: list[Reason] = field(default_factory=list)  # evidence behind a FAIL, by family
    evidence: list[Ev] = field(default_factory=list)
    cause: str | None = None  # key into remediations
    cause_detail: str = ""
    escalate: bool = False
    watch: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (watch code, facts)
    job_status: str | None = None  # gate A only
    transient: bool | None = None
    culprit: Culprit | None = None
    root: RootCause | None = None  # the root cause this gate names (gate A on a terminal job)

    def families(self) -> set[str]:
        return {r.family for r in self.reasons if r.family}

    def add(self, code: Code, family: str | None = None, **facts: Any) -> None:
        self.reasons.append(Reason(code, family, facts))


@dataclass
class RestartResult:
    burned: int | None = None
    max: int | None = None
    same_failure: bool | None = None
    code: str = "none"  # none | same | recovered | different | no_detail
    facts: dict[str, Any] = field(default_factory=dict)
    failure_class: str | None = None
    failure_text: str = ""
    evidence: list[Ev] = field(default_factory=list)
    current_attempt_dead: bool = False
