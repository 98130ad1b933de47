"""The deep probe's section 5: turn gate results into ONE recommendation.

KILL needs a hard FAIL with no benign or transient explanation, backed by at least two distinct
evidence *families* (rlhealth.agents.signals): a cause restated in many lines, or by two rules,
is one family. A single family, however loud, is NO-KILL + escalate. The same failure on every
burned attempt is a family of its own (restart history). A terminal job is never a KILL.
"""

from __future__ import annotations

from datetime import UTC, datetime

from rlhealth.agents import render
from rlhealth.agents.context import Context
from rlhealth.agents.failures import failure_class_of
from rlhealth.agents.reasons import Code, GateResult, Reason, RestartResult
from rlhealth.agents.rootcause import RootCause, causal_traceback, traceback_cause
from rlhealth.agents.state import Ev
from rlhealth.schemas import CulpritRef, Evidence, EvidenceRef, Gate, Gates, Restarts, RootCauseRef, Verdict
from rlhealth.schemas.common import trusted
from rlhealth.schemas.verdict import ROOT_CAUSE_MESSAGE_CHARS

MIN_KILL_FAMILIES = 2


def _ev_to_schema(ev: Ev) -> Evidence:
    """`Evidence(source=..., event_time=..., text=..., ref=..., rule_id=...)`, built without validation
    (`schemas.trusted`): ~6 a judgement, ~1.7 us less each than validated. Every value is
    already what validation keeps: strings cut to their limits, a UTC datetime, ints or None (the
    state's msgspec types); tests/test_trusted_models.py holds the two constructions equal."""
    ref = None
    if ev.file is not None or ev.topic is not None:
        ref = trusted(EvidenceRef, {"topic": ev.topic, "partition": ev.partition, "offset": ev.kafka_offset,
                                    "file": ev.file, "file_offset": ev.offset, "line_no": None}, _REF_GIVEN)
    when = datetime.fromtimestamp(ev.ts, UTC) if ev.ts is not None else None
    return trusted(Evidence, {"source": ev.source[:200], "event_time": when, "text": ev.text[:4000], "ref": ref,
                              "rule_id": ev.rule_id or None})


_REF_GIVEN = frozenset({"topic", "partition", "offset", "file", "file_offset"})  # no line_no: unset


def _ev_validated(ev: Ev) -> Evidence:
    """What `_ev_to_schema` must equal: the validated construction (tests)."""
    ref = None
    if ev.file is not None or ev.topic is not None:
        ref = EvidenceRef(file=ev.file, file_offset=ev.offset, topic=ev.topic, partition=ev.partition,
                          offset=ev.kafka_offset)
    when = datetime.fromtimestamp(ev.ts, UTC) if ev.ts is not None else None
    return Evidence(source=ev.source[:200], event_time=when, text=ev.text[:4000], ref=ref, rule_id=ev.rule_id or None)


class _Rendered:
    """One judgement's rendered pieces. A gate's summary appears in its Gate and in the reasoning, an
    evidence line in its Gate and in the verdict's evidence: each is rendered (and validated) once.
    Keyed by object identity, valid while `decide` holds the objects; Evidence is frozen, so sharing it
    between lists changes nothing in the verdict."""

    def __init__(self) -> None:
        self._summaries: dict[int, str] = {}
        self._evidence: dict[int, Evidence] = {}

    def summary(self, g: GateResult) -> str:
        got = self._summaries.get(id(g))
        if got is None:
            got = self._summaries[id(g)] = render.gate_summary(g)
        return got

    def evidence(self, ev: Ev) -> Evidence:
        got = self._evidence.get(id(ev))
        if got is None:
            got = self._evidence[id(ev)] = _ev_to_schema(ev)
        return got


def _gate(g: GateResult, rendered: _Rendered) -> Gate:
    codes = ([str(g.code)] if g.code else []) + [str(r.code) for r in g.reasons if r.code != g.code]
    return Gate(status=g.status, summary=rendered.summary(g)[:2000], codes=list(dict.fromkeys(codes))[:16],
                families=sorted(g.families()) if g.status == "FAIL" else [],
                evidence=[rendered.evidence(e) for e in g.evidence[:8]])


def _fix_for(ctx: Context, cause: str | None, detail: str) -> list[str]:
    cat = ctx.catalog
    steps = cat.steps_for(cause)
    if steps:
        return list(steps)
    if "KeyError" in (cause or "") or "KeyError" in detail or ("weight" in detail and "sync" in detail):
        return list(cat.steps_for("KeyError") or ())
    if cause:
        return [f"Root cause {cause}: {detail[:200]}".strip()] + list(cat.generic_remediation)
    return list(cat.generic_remediation)


def _headline(ctx: Context) -> str:
    spec = ctx.spec or {}
    model = (spec.get("model") or {}).get("name") or "model ?"
    geo = spec.get("geometry") or {}
    parts = []
    if geo.get("num_inference_engines"):
        parts.append(f"{geo['num_inference_engines']} engines x TP{geo.get('engine_tp') or '?'}"
                     + (f" EP{geo['engine_ep']}" if (geo.get("engine_ep") or 1) > 1 else ""))
    hw = spec.get("hardware") or {}
    if hw.get("gpu"):
        parts.append(f"{hw.get('nodes') or '?'}x{hw.get('gpus_per_node') or '?'} {hw['gpu']}")
    stage = "training" if ctx.state.trainer.last_step is not None else (
        "inference/rollout" if ctx.state.engines else "bring-up")
    return f"{model}, {', '.join(parts) or 'geometry ?'}, {stage}"


def kill_families(gates: dict[str, GateResult], r: RestartResult) -> set[str]:
    """The distinct evidence families behind every FAIL (and a deterministic restart history)."""
    fams: set[str] = set()
    for g in gates.values():
        if g.status == "FAIL":
            fams |= g.families()
    if r.same_failure is True:
        fams.add("restart_history")
    return fams


# The supervisor's kill per scheduler, as text for the person on call: rlhealth never runs it.
KILL_COMMANDS = {"slurm": "scancel {job}", "kubernetes": "kubectl delete job {job}", "iris": "iris job kill {job}"}


def kill_command(scheduler: str | None, job_id: str) -> str | None:
    template = KILL_COMMANDS.get((scheduler or "").lower())
    return template.format(job=job_id) if template else None


def decide(ctx: Context, a: GateResult, b: GateResult, c: GateResult, r: RestartResult, job_id: str,
           now: datetime, rule_packs: dict[str, str], seq: int = 0) -> Verdict:
    gates = {"A": a, "B": b, "C": c}
    rendered = _Rendered()
    evidence: list[Ev] = []
    for g in (a, b, c):
        evidence.extend(g.evidence[:6])
    evidence.extend(r.evidence[:3])
    restarts = Restarts(burned=r.burned, max=r.max, same_failure=r.same_failure, summary=render.restart_summary(r))
    escalate = any(g.escalate for g in gates.values())
    command: str | None = None  # the scheduler's kill for this job, on a KILL
    named: RootCause | None = None  # the root cause the English names: the verdict's typed root_cause
    next_steps: list[str] = []
    remaining = None if r.burned is None or r.max is None else max(r.max - r.burned, 0)
    new_bits = ", ".join((ctx.spec or {}).get("new_or_untested") or [])
    families = kill_families(gates, r)
    reasons_all: list[Reason] = [x for g in gates.values() if g.status == "FAIL" for x in g.reasons]
    if r.same_failure is True:
        reasons_all.append(Reason(Code.SAME_FAILURE, "restart_history", {"klass": r.failure_class}))

    if a.job_status == "TERMINAL":
        verdict, confidence = "NO-KILL", "high"
        det = "deterministic" if r.same_failure else ("transient" if a.transient else "not shown to be transient")
        pods = f" with {ctx.state.sched.pods} pods" if ctx.state.sched.pods is not None else ""
        seen_as = (f"reports the job {ctx.state.sched.state}{pods}" if ctx.state.sched.state != "unknown"
                   else "shows no pods left")
        said = render.root_text(a.root)[:300] if a.root is not None else ""
        reasoning = (f"The scheduler {seen_as}, so there is nothing left to kill. Root cause: "
                     f"{said or 'no traceback captured'} ({det}).")
        if a.culprit is not None and a.culprit.component:
            reasoning += f" Raised by {a.culprit.role} {a.culprit.component}."
        if r.burned:
            reasoning += f" Restarts: {r.burned}/{r.max if r.max is not None else '?'} burned; {restarts.summary}."
        cause = failure_class_of(a.cause_detail) if a.cause_detail else r.failure_class
        next_steps = _fix_for(ctx, cause, a.cause_detail)
        next_steps.append("Relaunch only after the fix lands" if r.same_failure or not a.transient
                          else "Relaunch as is: the failure looks transient")
        status = "TERMINAL"
        named = a.root
    else:
        fails = {k: g for k, g in gates.items() if g.status == "FAIL"}
        doomed = r.same_failure is True
        if ctx.blind:
            verdict, confidence, escalate = "NO-KILL", "low", True
        elif doomed or (fails and len(families) >= MIN_KILL_FAMILIES):
            verdict = "KILL"
            confidence = "high" if len(families) >= 3 or doomed else "medium"
        elif fails or doomed:
            verdict, confidence, escalate = "NO-KILL", "low", True
        else:
            verdict = "NO-KILL"
            unknown = [k for k, g in gates.items() if g.status == "UNKNOWN"]
            confidence = "high" if not unknown else ("low" if escalate else "medium")
        status = a.job_status or "UNKNOWN"
        if verdict == "KILL" and a.code == Code.TRAINER_STALE and status == "UNKNOWN":
            # stale beyond its cadence (Gate A) and the failing gate supplies the signature Gate A lacked
            status = "WEDGED"
        if verdict == "KILL":
            order = ["A", "B", "C"]
            primary = next((fails[k] for k in order if k in fails), None)
            causes = [fails[k].cause for k in order if k in fails and fails[k].cause]
            if "gpu_hardware" in causes:
                causes.insert(0, causes.pop(causes.index("gpu_hardware")))  # the node explains the rest
            if doomed and r.failure_class and r.failure_class not in causes:
                causes.insert(0, r.failure_class)
            what = ("Gate " + ", ".join(fails) + " FAIL" if fails else "Restart-burn")
            if a.status == "FAIL":
                what += f" (job {a.job_status})"
            signals = list(dict.fromkeys(render.reason_text(x) for x in reasons_all))
            fam_txt = ", ".join(render.FAMILY_NAMES.get(f, f) for f in sorted(families))
            reasoning = (f"{what} with no benign or transient explanation, so the recommendation is KILL. "
                         f"Load-bearing signals: {'; '.join(signals)} ({len(families)} independent evidence "
                         f"families: {fam_txt}).")
            culprit = next((g.culprit for g in (fails.get("A"), fails.get("B"), fails.get("C")) if g and g.culprit),
                           None)
            if culprit is not None and culprit.component:
                node = f" on node {culprit.node}" if culprit.node and culprit.node != culprit.component else ""
                why = render.culprit_why(culprit)
                reasoning += f" Failing component: {culprit.role} {culprit.component}{node} ({why})."
            named = _causal_root(ctx, primary)
            root = render.root_text(named, message_chars=200) if named is not None else ""
            if root:
                reasoning += f" Root cause: {root}."
            if doomed:
                reasoning += (f" {r.burned}/{r.max if r.max is not None else '?'} restarts burned, remaining "
                              f"{remaining if remaining is not None else '?'}, same failure each attempt: the job is "
                              f"deterministically doomed.")
            if new_bits:
                reasoning += f" New/untested in this run: {new_bits}."
            if "crash_loop" in causes and len(causes) > 1:
                causes.append(causes.pop(causes.index("crash_loop")))  # the specific cause's fix comes first
            if "nccl_hang" in causes and _expert_parallel(ctx):
                causes[causes.index("nccl_hang")] = "nccl_hang_ep"
            if root and any(x in ("engine_dead", "rollout_server_dead") for x in causes):
                next_steps.append(f"The causal exception is {root} (not the EngineDeadError that followed it): "
                                  f"fix that first.")
            seen: set[str] = set()
            for cause in causes or [None]:
                for step in _fix_for(ctx, cause, primary.cause_detail if primary else ""):
                    if step not in seen:
                        seen.add(step)
                        next_steps.append(step)
            command = kill_command(ctx.state.sched.scheduler, job_id)
            next_steps.append(render.never_kills(command))
        else:
            reasoning = _no_kill_reasoning(gates, r, escalate, families, rendered)
            for g in gates.values():
                next_steps.extend(render.watch_text(code, facts) for code, facts in g.watch)
            if fails or doomed:
                fam = ", ".join(render.FAMILY_NAMES.get(f, f) for f in sorted(families)) or "one source"
                next_steps.insert(0, "A FAIL backed by a single evidence family: escalate to the supervisor with the "
                                     "evidence rather than kill; " + "; ".join(
                                         f"Gate {k}: {rendered.summary(g)[:160]}" for k, g in fails.items()))
                next_steps.insert(1, render.watch_text("second_family", {"family": fam}))
            if not next_steps:
                next_steps.append("Re-probe next sweep.")
    if named is None and a.code == Code.FATAL_TRACEBACK and ctx.fatal_tb is not None:
        named = traceback_cause(ctx, ctx.fatal_tb)  # what gate A names: the traceback the trainer died with
    pointed = a.culprit if a.job_status == "TERMINAL" else next(
        (g.culprit for g in (a, b, c) if g.status == "FAIL" and g.culprit is not None), None)
    culprit_ref = None if pointed is None or not pointed.component else CulpritRef(
        role=pointed.role, component=pointed.component[:200], node=pointed.node,
        why=[str(w) for w in pointed.why][:8])
    return Verdict(
        culprit=culprit_ref,
        job_id=job_id,
        verdict=verdict,
        confidence=confidence,
        job_status=status,
        escalate=escalate,
        restarts=restarts,
        gates=Gates(A=_gate(a, rendered), B=_gate(b, rendered), C=_gate(c, rendered)),
        reasoning=reasoning[:3000],
        next_steps=[s[:600] for s in next_steps[:10]],
        evidence=[rendered.evidence(e) for e in _dedupe(evidence)[:40]],
        produced_at=now,
        rule_packs=rule_packs,
        seq=seq,
        headline=_headline(ctx),
        kill_command=command if verdict == "KILL" else None,
        root_cause=_root_cause_ref(named, r),
    )


def _causal_root(ctx: Context, primary: GateResult | None) -> RootCause | None:
    """The earliest causal exception behind a death/hang KILL, when one was captured."""
    if primary is None or primary.cause not in ("engine_dead", "rollout_server_dead", "ray_death", "nccl_hang",
                                                 "nccl_hang_ep", "peer_lost"):
        return None
    tb = causal_traceback(ctx.state.tracebacks, ctx.current_attempt)
    return traceback_cause(ctx, tb) if tb is not None else None


def _root_cause_ref(rc: RootCause | None, r: RestartResult) -> RootCauseRef | None:
    """The typed form of the root cause the verdict's English names (None when it names none)."""
    if rc is None or not rc.origin or rc.line is None:
        return None
    tb = rc.tb
    first = (tb.message if tb is not None else rc.text).strip().split("\n", 1)[0]
    ts = rc.line.ts
    return RootCauseRef(
        origin=rc.origin,  # traceback / attempt_error / signal_line (rootcause.py); pydantic checks it
        exc_type=tb.exc_type[:200] if tb is not None else None,
        message=first[:ROOT_CAUSE_MESSAGE_CHARS],
        failure_class=tb.failure_class if tb is not None else failure_class_of(rc.text),
        source=rc.line.source[:200], role=rc.role or None, attempt=rc.attempt,
        event_time=datetime.fromtimestamp(ts, UTC) if ts is not None else None,
        rule_id=None if tb is not None else (rc.line.rule_id or None),
        component=rc.culprit.component[:200] if rc.culprit is not None and rc.culprit.component else None,
        fatal=tb.fatal if tb is not None else None,
        deterministic=r.same_failure,
    )


def _expert_parallel(ctx: Context) -> bool:
    spec = ctx.spec or {}
    geo = spec.get("geometry") or {}
    notes = " ".join(spec.get("new_or_untested") or []).lower()
    return bool((geo.get("engine_ep") or 1) > 1 or (spec.get("model") or {}).get("moe")
                or " ep" in f" {notes}" or "expert" in notes)


def _first_sentence(text: str) -> str:
    return text.split(". ")[0][:400]


def _no_kill_reasoning(gates: dict[str, GateResult], r: RestartResult, escalate: bool, families: set[str],
                       rendered: _Rendered) -> str:
    statuses = ", ".join(f"{k} {g.status}" for k, g in gates.items())
    parts = [f"Gates: {statuses}."]
    a, b, c = gates["A"], gates["B"], gates["C"]
    if a.status == "PASS":
        parts.append(_first_sentence(rendered.summary(a).replace("ALIVE: ", "")) + ".")
    if b.status == "PASS":
        parts.append(_first_sentence(rendered.summary(b)) + ".")
    if c.status in ("PASS", "UNKNOWN"):
        parts.append(_first_sentence(rendered.summary(c)) + ".")
    if families and any(g.status == "FAIL" for g in gates.values()):
        parts.append(f"Only {len(families)} evidence family "
                     f"({', '.join(render.FAMILY_NAMES.get(f, f) for f in sorted(families))}) "
                     f"backs the FAIL; a KILL needs {MIN_KILL_FAMILIES} independent ones.")
    if r.burned:
        parts.append(f"Restarts {r.burned}/{r.max if r.max is not None else '?'}: {render.restart_summary(r)}.")
    if escalate:
        parts.append("Ambiguous evidence: NO-KILL and escalate, since killing a healthy bring-up costs more than one "
                     "more sweep.")
    return " ".join(parts[:6])


def _dedupe(evs: list[Ev]) -> list[Ev]:
    seen, out = set(), []
    for e in evs:
        key = (e.source, e.text[:200])
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


# Problems that mean a gate's source could not be read at all: a PASS there is not earned.
BLINDING_PROBLEMS = frozenset({"missing", "empty", "unreadable"})


def apply_source_notes(v: Verdict, notes: list[tuple[str, str, str]]) -> Verdict:
    """Fold (gate, problem, note) about unreadable sources into the verdict.

    A gate whose source is missing, empty or unreadable cannot PASS: it becomes UNKNOWN with the
    reason. Truncated or partly non-UTF-8 sources only add a note: what could be read still counts.
    """
    if not notes:
        return v
    updates = {}
    for key in ("A", "B", "C"):
        mine = [(p, n) for gate, p, n in notes if gate == key]
        if not mine:
            continue
        gate: Gate = getattr(v.gates, key)
        status = gate.status
        if status == "PASS" and any(p in BLINDING_PROBLEMS for p, _ in mine):
            status = "UNKNOWN"
        text = "; ".join(dict.fromkeys(n for _, n in mine))[:600]
        updates[key] = gate.model_copy(update={"status": status, "summary": f"{gate.summary} [sources: {text}]"})
    if not updates:
        return v
    gates = v.gates.model_copy(update=updates)
    # The reasoning opens with the gate statuses it was written from; a PASS taken back here must not stay
    # 'PASS' in the sentence the text block heads with (WHY) while the gate below it reads UNKNOWN.
    said, now = _statuses_sentence(v.gates), _statuses_sentence(gates)
    reasoning = now + v.reasoning[len(said):] if v.reasoning.startswith(said) else v.reasoning
    confidence = v.confidence
    if v.verdict == "NO-KILL" and v.job_status != "TERMINAL" and confidence == "high" and any(
            getattr(gates, k).status == "UNKNOWN" for k in "ABC"):
        confidence = "medium"
    return v.model_copy(update={"gates": gates, "confidence": confidence, "reasoning": reasoning})


def _statuses_sentence(gates: Gates) -> str:
    """The 'Gates: A PASS, B UNKNOWN, C UNKNOWN.' sentence a NO-KILL reasoning starts with."""
    return "Gates: " + ", ".join(f"{k} {getattr(gates, k).status}" for k in "ABC") + "."
