"""The verdict: one KILL / NO-KILL recommendation with per-gate status and evidence."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from rlhealth.schemas.common import Model, UtcDatetime

GateStatus = Literal["PASS", "FAIL", "UNKNOWN"]
VerdictValue = Literal["KILL", "NO-KILL"]
Confidence = Literal["high", "medium", "low"]
JobStatus = Literal["ALIVE", "WEDGED", "TERMINAL", "UNKNOWN"]
# Where a root cause was read: an exception's traceback, the scheduler's error for an attempt (no
# traceback captured), or a failure line a rule recognised (an OOM kill, a hardware Xid, a death line).
RootCauseOrigin = Literal["traceback", "attempt_error", "signal_line"]
ROOT_CAUSE_MESSAGE_CHARS = 300


class EvidenceRef(Model):
    """Where a piece of evidence can be found again: a Kafka record or a file offset."""

    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    file: str | None = None
    file_offset: int | None = None
    line_no: int | None = None


class Evidence(Model):
    source: str = Field(description="log stream, GPU host, trial, state poll, ...")
    event_time: UtcDatetime | None = None
    text: str = Field(max_length=4000)
    ref: EvidenceRef | None = None
    rule_id: str | None = None


class Gate(Model):
    status: GateStatus = "UNKNOWN"
    summary: str = ""
    codes: list[str] = Field(default_factory=list, max_length=16,
                             description="typed reason codes (first: the gate's outcome); the summary renders them")
    families: list[str] = Field(default_factory=list, max_length=16,
                                description="independent evidence families behind a FAIL")
    evidence: list[Evidence] = Field(default_factory=list, max_length=20)


class CulpritRef(Model):
    """The component and node the evidence points at, and why (typed codes, e.g. straggler_rank)."""

    role: str
    component: str = ""
    node: str | None = None
    why: list[str] = Field(default_factory=list, max_length=8)


class RootCauseRef(Model):
    """The failure the verdict names as the root cause, as typed fields (the English in the gate summaries
    and the reasoning is rendered from the same record). Only what the core read: no field is guessed."""

    origin: RootCauseOrigin
    exc_type: str | None = Field(default=None, max_length=200,
                                 description="exception type, e.g. torch.OutOfMemoryError (origin traceback)")
    message: str = Field(default="", max_length=ROOT_CAUSE_MESSAGE_CHARS,
                         description="the exception message's (or the line's) first line, cut to "
                                     f"{ROOT_CAUSE_MESSAGE_CHARS} characters")
    failure_class: str | None = Field(default=None, description="the core's class of the failure, e.g. cuda_oom")
    source: str = Field(default="", max_length=200, description="log stream, or 'state poll' for an attempt error")
    role: str | None = Field(default=None, description="role of the stream: trainer, engine, rollout, ray, other")
    attempt: int | None = None
    event_time: UtcDatetime | None = None
    rule_id: str | None = Field(default=None, description="the rule that recognised the line (origin signal_line)")
    component: str | None = Field(default=None, max_length=200,
                                  description="the process that raised it, e.g. 'EngineCore_DP1 pid=2318', or the "
                                              "stream")
    fatal: bool | None = Field(default=None, description="the traceback ended the process (origin traceback)")
    deterministic: bool | None = Field(default=None, description="the same failure on every burned attempt "
                                                                 "(restart history); null when not known")


class Gates(Model):
    A: Gate = Field(default_factory=Gate, description="liveness")
    B: Gate = Field(default_factory=Gate, description="resources")
    C: Gate = Field(default_factory=Gate, description="rollouts")


class Restarts(Model):
    burned: int | None = None
    max: int | None = None
    same_failure: bool | None = None
    summary: str = ""


class HeldChange(Model):
    """A change of call the hysteresis has not published yet (see docs/verdicts.md)."""

    raw_verdict: VerdictValue = Field(description="what the core says at this judging time")
    raw_escalate: bool
    since: UtcDatetime = Field(description="judging time at which the raw call started to differ")
    until: UtcDatetime = Field(description="judging time from which the raw call is published if it holds")


class Verdict(Model):
    schema_version: Literal[1] = 1
    job_id: str
    verdict: VerdictValue
    confidence: Confidence
    job_status: JobStatus
    escalate: bool = False
    restarts: Restarts = Field(default_factory=Restarts)
    gates: Gates = Field(default_factory=Gates)
    reasoning: str
    next_steps: list[str] = Field(default_factory=list)
    evidence: list[Evidence] = Field(default_factory=list, max_length=40)
    produced_at: UtcDatetime = Field(description="judging time: the 'now' every gate was evaluated at")
    rule_packs: dict[str, str] = Field(default_factory=dict, description="rule pack id -> version")
    seq: int = Field(default=0, ge=0, description="per-job sequence number; consumers drop seq <= last seen")
    headline: str = Field(default="", description="model, geometry and stage in one line")
    culprit: CulpritRef | None = Field(default=None, description="the failing component, when the evidence names one")
    captured: str | None = Field(default=None, description="capture directory or stream the verdict was judged from")
    event_time: UtcDatetime | None = Field(default=None,
                                           description="newest event time folded into the state this verdict judges")
    age_s: float | None = Field(default=None, description="produced_at - event_time in seconds: how old the newest "
                                                          "fact is at judging time")
    held: HeldChange | None = Field(default=None, description="set while the hysteresis holds back a change of call")
    kill_command: str | None = Field(default=None, description="on a KILL, the supervisor's command for this job "
                                                               "(text only: rlhealth never runs it)")
    root_cause: RootCauseRef | None = Field(default=None, description="the root cause the verdict names (terminal "
                                                                      "job, KILL on a death or hang, fatal "
                                                                      "traceback); null when it names none")

    def same_call(self, other: Verdict | None) -> bool:
        """True when a consumer would see no change: same verdict, status, confidence and gate statuses."""
        if other is None:
            return False
        return (
            self.verdict == other.verdict
            and self.job_status == other.job_status
            and self.confidence == other.confidence
            and self.escalate == other.escalate
            and [g.status for g in (self.gates.A, self.gates.B, self.gates.C)]
            == [g.status for g in (other.gates.A, other.gates.B, other.gates.C)]
        )


def render_text(v: Verdict) -> str:
    """The verdict block of the deep probe's section 5, as plain text."""
    r = v.restarts
    if r.burned is None:
        restarts = "unknown"
    else:
        remaining = "?" if r.max is None else str(max(r.max - r.burned, 0))
        restarts = f"{r.burned}/{'?' if r.max is None else r.max} burned, remaining {remaining}"
    restart_note = r.summary or ("none" if not r.burned else "")
    names = {"A": "liveness", "B": "resources", "C": "rollouts"}
    lines = [
        f"WHY: {v.verdict}{' + ESCALATE' if v.escalate else ''} — {why_line(v)}",
        f"RL-JOB-HEALTH — {v.job_id} ({v.headline or 'model/geometry/stage unknown'}) captured: {v.captured or '-'}",
        f"JUDGED: {_stamp(v.produced_at)}   events to: {_stamp(v.event_time)}   age: {_age(v.age_s)}   seq: {v.seq}",
        f"VERDICT: {v.verdict} confidence: {v.confidence}   job_status: {v.job_status}"
        + ("   ESCALATE" if v.escalate else ""),
        f"Restarts: {restarts} — {restart_note}",
    ]
    for key in ("A", "B", "C"):
        gate: Gate = getattr(v.gates, key)
        lines.append(f"Gate {key} ({names[key]}): {gate.status} — {gate.summary}")
    if v.root_cause is not None:
        lines.append(f"ROOT CAUSE: {root_cause_line(v.root_cause)}")
    if v.held is not None:
        h = v.held
        lines.append(f"HELD: the core now says {h.raw_verdict}{' + escalate' if h.raw_escalate else ''} "
                     f"(since {_stamp(h.since)}); published if it still holds at {_stamp(h.until)}")
    lines.append(f"REASONING: {v.reasoning}")
    if v.verdict == "KILL":
        lines.append("KILL COMMAND (for the supervisor; rlhealth never runs it): "
                     + (v.kill_command or "the scheduler's kill for this job (iris job kill / scancel / "
                                          "kubectl delete job)"))
    label = "NEXT STEPS (if KILL)" if v.verdict == "KILL" else "NEXT STEPS (if NO-KILL)"
    lines.append(f"{label}:")
    lines.extend(f"  - {step}" for step in v.next_steps)
    if v.evidence:
        lines.append("EVIDENCE:")
        for ev in v.evidence:
            when = ev.event_time.strftime("%Y-%m-%dT%H:%M:%SZ") if ev.event_time else "-"
            lines.append(f"  [{when}] {ev.source}: {ev.text}")
    return "\n".join(lines)


def root_cause_line(rc: RootCauseRef) -> str:
    """The typed root cause in one line: what was raised, by whom, where and when (text block, HTML report)."""
    what = f"{rc.exc_type}: {rc.message}" if rc.exc_type else rc.message
    who = " ".join(x for x in (rc.role, rc.component if rc.component != rc.source else None) if x)
    where = rc.source + (f" at {_stamp(rc.event_time)}" if rc.event_time is not None else "")
    if rc.attempt is not None:
        where += f", attempt {rc.attempt}"
    nature = {True: "; the same failure on every attempt (deterministic)", False: "; attempts failed differently",
              None: ""}[rc.deterministic]
    return f"{what} — {who + ' in ' if who else ''}{where} ({ORIGIN_NAMES[rc.origin]}){nature}"


ORIGIN_NAMES = {"traceback": "traceback", "attempt_error": "the scheduler's error for the attempt",
                "signal_line": "a recognised failure line"}


def _stamp(t: datetime | None) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ") if t is not None else "-"


def _age(age_s: float | None) -> str:
    if age_s is None:
        return "-"
    a = abs(age_s)
    text = f"{a:.0f} s" if a < 120 else f"{a / 60:.0f} min" if a < 7200 else f"{a / 3600:.1f} h"
    return text if age_s >= 0 else f"-{text} (events after judging time)"


def why_line(v: Verdict, limit: int = 200) -> str:
    """The reasoning's first sentence, for the top of the block."""
    text = " ".join(v.reasoning.split())
    for stop in (". ", "; "):
        cut = text.find(stop)
        if 0 < cut < limit:
            return text[: cut + 1].rstrip(";")
    return text if len(text) <= limit else text[: limit - 1] + "…"
