"""The deep probe's section 5: turn gate results into ONE recommendation.

KILL needs a hard FAIL with no benign or transient explanation and at least two independent
signals. Genuine ambiguity is NO-KILL + escalate. A terminal job is never a KILL: there is
nothing left to kill.
"""

from __future__ import annotations

from datetime import datetime, timezone

from rlhealth.agents.gates import Context, GateResult, RestartResult
from rlhealth.agents.state import Ev
from rlhealth.schemas import Evidence, EvidenceRef, Gate, Gates, Restarts, Verdict

# Root cause -> the concrete change to make before a relaunch.
FIXES: dict[str, list[str]] = {
    "cuda_oom": [
        "Training-stage CUDA OOM: revert the memory-raising change (e.g. micro_train_batch_size_per_gpu back to 1), "
        "or enable CPU offload / gradient checkpointing, and set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; "
        "if engines are colocated, lower gpu_memory_utilization.",
        "Relaunch only on the corrected setting: every retry so far has reproduced the OOM.",
    ],
    "crash_loop": [
        "The pods are crash-looping: read the last terminated container's reason and exit code (kubectl describe "
        "pod / lastState) and the log tail before each restart; fix that root cause before relaunching.",
    ],
    "host_oom": [
        "Host OOM (OOMKilled / oom-killer): raise the pod memory limit or cut host-side buffers "
        "(dataloader workers, Ray object store, CPU offload size) before relaunching.",
    ],
    "nccl_hang": [
        "Before killing, capture the NCCL flight-recorder dump (TORCH_NCCL_DUMP_ON_TIMEOUT) and the rank-0 logs "
        "(Ray raylet.out / worker-*.err where Ray is used): they name the hung collective (SeqNum/OpType) and rank.",
        "Root cause is a hang in a trainer collective, not an OOM: check the process-group geometry and NCCL "
        "settings (network, NCCL_* env, a straggler or failed rank); relaunch on a validated geometry or hold for "
        "the supervisor.",
    ],
    "nccl_hang_ep": [
        "Before killing, capture the NCCL flight-recorder dump (TORCH_NCCL_DUMP_ON_TIMEOUT) and the rank-0 logs "
        "(Ray raylet.out / worker-*.err where Ray is used): they name the hung collective (SeqNum/OpType) and rank.",
        "Root cause is a hang in a policy-mesh collective (FSDP x EP), not an OOM: check the expert-parallel (EP) "
        "geometry and NCCL settings on the new mesh; relaunch on a validated geometry or hold for the supervisor.",
    ],
    "ray_death": [
        "A Ray worker of the policy mesh died and the trainer is frozen: pull /tmp/ray/session_latest/logs "
        "(raylet.*, worker-*.err) from rank 0 for the real traceback before killing; then fix and relaunch.",
    ],
    "starvation": [
        "Throughput-starvation wedge (oversubscribed engines): lower n_concurrent_trials (or raise "
        "generator max_num_seqs / add engines) so Waiting drains, then relaunch.",
        "Check enforce_eager and KV-cache headroom (long context) on the relaunch.",
    ],
    "enforce_eager": [
        "Generation is floored because CUDA graphs are off: set generator.enforce_eager=false and relaunch.",
    ],
    "floored": [
        "Generation throughput is below the hardware floor with enforce_eager=false: check the serving geometry "
        "(TP/EP), the weight sync (a degraded sync can serve a broken policy) and oversubscription; relaunch on a "
        "validated setting.",
    ],
    "engine_hung": [
        "An engine stopped generating with requests in flight (one 0.0 tok/s line, then silence): pull its EngineCore "
        "stack / RPC timeout lines; restart the engine or relaunch.",
    ],
    "infra": [
        "Infrastructure, not the model: every trial fails before the agent runs. Fix the sandbox environment "
        "(Daytona sandbox never came up: forward the DAYTONA_* environment variables to the rollout workers, check "
        "the Daytona API key/quota and sandbox image) and relaunch.",
    ],
    "verifier": [
        "Verifiers never return a score (VerifierTimeoutError): raise the verifier timeout or fix the test harness, "
        "then relaunch; no learning signal is possible until verifiers work.",
    ],
    "incoherent": [
        "The served policy emits incoherent output: check the FSDP->vLLM weight sync first (FusedMoE w13 reload "
        "bracket: SKYRL_W13_RELOAD_BRACKET=1 and 'finish_weight_reload' in the engine log) and the tokenizer, then "
        "relaunch on the fixed build.",
    ],
    "broken_loop": [
        "Agents stop after about one turn: check the agent harness / tool-call parsing and the engine health, then relaunch.",
    ],
    "nonfinite": [
        "Training diverged (NaN/Inf loss or grad norm): lower the learning rate, enable gradient clipping, check the "
        "reward scale and the advantage normalisation; relaunch from the last good checkpoint.",
    ],
    "fail_slow": [
        "Sustained degradation against the job's own baseline: compare the slow window with the last healthy one "
        "(engine restarts, a straggler node, thermal throttling, KV-cache pressure, a data/curriculum change) and "
        "decide on the evidence; a single fail-slow signal is escalated, not killed.",
    ],
    "KeyError": [
        "Deterministic KeyError in the weight sync: fix the weight-name mapping for the new model layout "
        "(e.g. the fused gate_up_proj expert parameters) before any relaunch.",
    ],
}
GENERIC_FIX = ["Fix the root-cause exception named above in the code/config before relaunching; the traceback is in "
               "the evidence."]


def _ev_to_schema(ev: Ev) -> Evidence:
    ref = None
    if ev.file is not None or ev.topic is not None:
        ref = EvidenceRef(file=ev.file, file_offset=ev.offset, topic=ev.topic, partition=ev.partition,
                          offset=ev.kafka_offset)
    when = datetime.fromtimestamp(ev.ts, timezone.utc) if ev.ts is not None else None
    return Evidence(source=ev.source[:200], event_time=when, text=ev.text[:4000], ref=ref, rule_id=ev.rule_id or None)


def _gate(g: GateResult) -> Gate:
    return Gate(status=g.status, summary=g.summary[:2000], evidence=[_ev_to_schema(e) for e in g.evidence[:8]])


def _fix_for(cause: str | None, detail: str) -> list[str]:
    if not cause:
        return list(GENERIC_FIX)
    if cause in FIXES:
        return list(FIXES[cause])
    if "KeyError" in cause or "KeyError" in detail:
        return list(FIXES["KeyError"])
    if "weight" in detail and "sync" in detail:
        return list(FIXES["KeyError"])
    return [f"Root cause {cause}: {detail[:200]}".strip()] + GENERIC_FIX


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


def decide(ctx: Context, a: GateResult, b: GateResult, c: GateResult, r: RestartResult, job_id: str,
           now: datetime, rule_packs: dict[str, str], seq: int = 0) -> Verdict:
    gates = {"A": a, "B": b, "C": c}
    evidence: list[Ev] = []
    for g in (a, b, c):
        evidence.extend(g.evidence[:6])
    evidence.extend(r.evidence[:3])
    restarts = Restarts(burned=r.burned, max=r.max, same_failure=r.same_failure, summary=r.summary)
    escalate = any(g.escalate for g in gates.values())
    next_steps: list[str] = []
    remaining = None if r.burned is None or r.max is None else max(r.max - r.burned, 0)
    new_bits = ", ".join((ctx.spec or {}).get("new_or_untested") or [])

    if a.job_status == "TERMINAL":
        verdict, confidence = "NO-KILL", "high"
        det = "deterministic" if r.same_failure else ("transient" if a.transient else "not shown to be transient")
        pods = f" with {ctx.state.sched.pods} pods" if ctx.state.sched.pods is not None else ""
        seen_as = (f"reports the job {ctx.state.sched.state}{pods}" if ctx.state.sched.state != "unknown"
                   else "shows no pods left")
        reasoning = (f"The scheduler {seen_as}, so there is nothing left to kill. Root cause: {a.cause_detail[:300] or 'no traceback captured'} "
                     f"({det}).")
        if r.burned:
            reasoning += f" Restarts: {r.burned}/{r.max if r.max is not None else '?'} burned; {r.summary}."
        next_steps = _fix_for(_terminal_cause(a.cause_detail, r), a.cause_detail)
        next_steps.append("Relaunch only after the fix lands" if r.same_failure or not a.transient
                          else "Relaunch as is: the failure looks transient")
        status = "TERMINAL"
    else:
        fails = {k: g for k, g in gates.items() if g.status == "FAIL"}
        signals: list[str] = []
        for g in fails.values():
            signals.extend(g.signals)
        doomed = r.same_failure is True
        if doomed:
            signals.append(f"same failure on every attempt ({r.failure_class})")
        independent = len(set(signals))
        if ctx.blind:
            verdict, confidence, escalate = "NO-KILL", "low", True
        elif (fails or doomed) and independent >= 2:
            verdict = "KILL"
            confidence = "high" if independent >= 3 or doomed else "medium"
        elif fails or doomed:
            verdict, confidence, escalate = "NO-KILL", "low", True
        else:
            verdict = "NO-KILL"
            unknown = [k for k, g in gates.items() if g.status == "UNKNOWN"]
            confidence = "high" if not unknown else ("low" if escalate else "medium")
        status = a.job_status or "UNKNOWN"
        if verdict == "KILL":
            order = ["A", "B", "C"]
            primary = next((fails[k] for k in order if k in fails), None)
            causes = [fails[k].cause for k in order if k in fails and fails[k].cause]
            if doomed and r.failure_class and r.failure_class not in causes:
                causes.insert(0, r.failure_class)
            what = ("Gate " + ", ".join(fails) + " FAIL" if fails else "Restart-burn")
            if a.status == "FAIL":
                what += f" (job {a.job_status})"
            reasoning = (f"{what} with no benign or transient explanation, so the recommendation is KILL. "
                         f"Load-bearing signals: {'; '.join(dict.fromkeys(signals))}.")
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
            seen = set()
            for cause in causes or [None]:
                for step in _fix_for(cause, primary.cause_detail if primary else ""):
                    if step not in seen:
                        seen.add(step)
                        next_steps.append(step)
            next_steps.append("rlhealth never kills: the supervisor decides and runs the kill (iris job kill / scancel).")
        else:
            reasoning = _no_kill_reasoning(gates, r, ctx, escalate)
            for g in gates.values():
                next_steps.extend(g.watch)
            if fails:
                next_steps.insert(0, "A FAIL with a single signal: escalate to the supervisor with the evidence "
                                     "rather than kill; " + "; ".join(f"Gate {k}: {g.summary[:160]}" for k, g in fails.items()))
            if not next_steps:
                next_steps.append("Re-probe next sweep.")
    return Verdict(
        job_id=job_id,
        verdict=verdict,
        confidence=confidence,
        job_status=status,
        escalate=escalate,
        restarts=restarts,
        gates=Gates(A=_gate(a), B=_gate(b), C=_gate(c)),
        reasoning=reasoning[:3000],
        next_steps=[s[:600] for s in next_steps[:10]],
        evidence=[_ev_to_schema(e) for e in _dedupe(evidence)[:40]],
        produced_at=now,
        rule_packs=rule_packs,
        seq=seq,
        headline=_headline(ctx),
    )


def _expert_parallel(ctx: Context) -> bool:
    spec = ctx.spec or {}
    geo = spec.get("geometry") or {}
    notes = " ".join(spec.get("new_or_untested") or []).lower()
    return bool((geo.get("engine_ep") or 1) > 1 or (spec.get("model") or {}).get("moe")
                or " ep" in f" {notes}" or "expert" in notes)


def _terminal_cause(detail: str, r: RestartResult) -> str | None:
    from rlhealth.agents.ingest import failure_class_of

    return failure_class_of(detail) if detail else r.failure_class


def _first_sentence(text: str) -> str:
    return text.split(". ")[0][:400]


def _no_kill_reasoning(gates: dict[str, GateResult], r: RestartResult, ctx: Context, escalate: bool) -> str:
    statuses = ", ".join(f"{k} {g.status}" for k, g in gates.items())
    parts = [f"Gates: {statuses}."]
    a, b, c = gates["A"], gates["B"], gates["C"]
    if a.status == "PASS":
        parts.append(_first_sentence(a.summary.replace("ALIVE: ", "")) + ".")
    if b.status == "PASS":
        parts.append(_first_sentence(b.summary) + ".")
    if c.status in ("PASS", "UNKNOWN"):
        parts.append(_first_sentence(c.summary) + ".")
    if r.burned:
        parts.append(f"Restarts {r.burned}/{r.max if r.max is not None else '?'}: {r.summary}.")
    if escalate:
        parts.append("Ambiguous evidence: NO-KILL and escalate, since killing a healthy bring-up costs more than one "
                     "more sweep.")
    return " ".join(parts[:5])


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
    confidence = v.confidence
    if v.verdict == "NO-KILL" and v.job_status != "TERMINAL" and confidence == "high" and any(
            getattr(gates, k).status == "UNKNOWN" for k in "ABC"):
        confidence = "medium"
    return v.model_copy(update={"gates": gates, "confidence": confidence})
