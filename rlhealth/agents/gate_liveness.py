"""Gate A, liveness: TERMINAL, WEDGED, ALIVE or UNKNOWN.

Liveness is the state poll plus log freshness, never a single log string and never the state
poll alone. A hang or death line counts when the role that logged it then went silent: either
its trainer progress is stale beyond the learned cadence, or (the failing tail) the stream it
came from printed nothing more while the scheduler still says running.
"""

from __future__ import annotations

import statistics

from rlhealth.agents import roles
from rlhealth.agents.context import Context
from rlhealth.agents.failures import TRANSIENT_CLASSES, failure_class_of
from rlhealth.agents.gate_resources import collective_spin, spin_evidence
from rlhealth.agents.reasons import Code, Culprit, GateResult, RestartResult, Why
from rlhealth.agents.render import age
from rlhealth.agents.rootcause import culprit_for, hardware_node, root_cause
from rlhealth.agents.state import Ev, SignalStat

# Death lines too broad to call a wedge on their own (a caught exception is logged in healthy runs).
_TAIL_EXCLUDED = frozenset({"python_exception"})


def gate_a(ctx: Context, restarts: RestartResult) -> GateResult:
    state, now, t = ctx.state, ctx.now, ctx.t
    sc, tr = state.sched, state.trainer
    g = GateResult()
    poll = _poll_facts(ctx)
    g.facts.update(poll)
    if ctx.blind:
        g.status, g.job_status, g.escalate, g.code = "UNKNOWN", "UNKNOWN", True, Code.BLIND_SHIPPER
        g.facts["shippers"] = ctx.blind
        g.watch.append(("restore_shipper", {}))
        return g

    if ctx.terminal:
        return _terminal(ctx, g, restarts)

    newest = max((x for x in (state.last_event_ts, sc.last_ts) if x is not None), default=None)
    if newest is not None and now - newest > t.stale_view_s:
        # Even the scheduler's polls stopped: that is our blindness (a dead poller or shipper), not
        # evidence about the job. Say so and escalate; never KILL on it.
        g.status, g.job_status, g.escalate, g.code = "UNKNOWN", "UNKNOWN", True, Code.BLIND_NO_DATA
        g.facts.update(silent_s=now - newest, newest_ts=newest)
        g.watch.append(("restore_poller", {}))
        return g

    if ctx.fatal_tb is not None and sc.state != "pending":
        tb = ctx.fatal_tb
        g.status, g.job_status, g.code = "FAIL", "WEDGED", Code.FATAL_TRACEBACK
        g.facts.update(tb_ts=tb.ts, exc=tb.exc_type, message=tb.message[:160],
                       since_s=None if tb.ts is None else now - tb.ts, freshness=freshness_facts(ctx))
        # The traceback's last line is often the OOM / NCCL line another rule also tagged: one family.
        family = {"cuda_oom": "oom_log", "host_oom": "oom_log",
                  "nccl_hang": "hang_log"}.get(tb.failure_class, "fatal_log")
        g.add(Code.FATAL_TB_LINE, family, exc=tb.exc_type)
        since = None if tb.ts is None else now - tb.ts
        retries_left = restarts.max is None or restarts.burned is None or restarts.burned < restarts.max
        waiting_on_retry = tb.failure_class in TRANSIENT_CLASSES and retries_left
        # The silence after the traceback is the second family only once it has lasted: seconds after a
        # crash the process may still be exiting and the retry wrapper restarting it.
        if since is not None and since >= t.fatal_silence_s and not waiting_on_retry:
            g.add(Code.TRAINER_FROZEN, "progress_stall", since_s=ctx.trainer_since_s)
        else:
            g.escalate = True
            g.watch.append(("retry_or_silence", {"transient": waiting_on_retry, "after_s": t.fatal_silence_s}))
        g.evidence.append(Ev(tb.ts, tb.stream, tb.text, "traceback"))
        g.cause, g.cause_detail = tb.failure_class, f"{tb.exc_type}: {tb.message}"
        g.culprit = Culprit(tb.role, tb.stream, why=[Why.FATAL_TRACEBACK])
        return g

    if sc.state == "pending":
        g.status, g.job_status, g.code = "UNKNOWN", "ALIVE", Code.PENDING
        g.watch.append(("admission", {}))
        return g

    has_other_view = bool(state.streams or state.gpus or state.trials.started or state.trials.completed
                          or state.eval_trials.started or state.eval_trials.completed)
    if not has_other_view:
        # The deep probe: liveness is never the state poll alone.
        g.status, g.job_status, g.escalate = "UNKNOWN", "UNKNOWN", True
        g.code = Code.STATE_POLL_ONLY if sc.state else Code.NO_VIEW
        g.watch.append(("logs_and_gpus", {}))
        return g

    loop = _crash_loop(ctx)
    if loop is not None:
        g.status, g.job_status, g.code = "FAIL", "WEDGED", Code.CRASH_LOOP
        g.facts.update(loop, freshness=freshness_facts(ctx))
        g.add(Code.PODS_RESTARTING, "scheduler_state", restarts=sc.max_pod_restarts)
        g.add(Code.NO_PROGRESS_ACROSS_RESTARTS, "progress_stall", step=tr.last_step)
        ev = sc.pod_reason_examples.get("CrashLoopBackOff") or next(iter(sc.pod_reason_examples.values()), None)
        if ev is not None:
            g.evidence.append(ev)
        g.cause = "crash_loop"
        return g

    hang = ctx.signals("hang", ctx.current_attempt)
    deaths = [(n, s) for n, s in ctx.signals("death", ctx.current_attempt) if n not in _TAIL_EXCLUDED]
    progress = ctx.progress_ts
    cutoff = None if progress is None else progress - t.hang_before_progress_s
    hang_recent = [(n, s) for n, s in hang if cutoff is None or (s.last_ts or 0) >= cutoff]
    death_recent = [(n, s) for n, s in deaths if cutoff is None or (s.last_ts or 0) >= cutoff]

    spin = collective_spin(ctx) if ctx.trainer_late else None
    # A hang line (or spinning GPUs) after the last step needs the trainer only late, not yet stale.
    hang_after = [(n, st) for n, st in hang_recent if progress is not None and (st.last_ts or 0.0) > progress]
    # Seed §3 B-training: "All-0% with no log advance during training = wedge". Every policy GPU resident at
    # ~0 % for several polls while the trainer is stale is the silent hang's own signature (a collective that
    # died without a watchdog line, a rollout engine put to sleep and never woken).
    # Not while engines generate steadily: a disaggregated trainer idles on its GPUs while it waits for
    # rollouts, and a slow phase of long episodes is not a hang. (One stray stats line is not steady: the
    # call must not flip on it.)
    idle_all = _all_policy_gpus_idle(ctx) if ctx.trainer_stale and not _engines_steady(ctx) else False
    after = _crash_after_step(ctx) if ctx.trainer_stale else []
    if (ctx.trainer_stale and (hang_recent or death_recent or after or spin or idle_all)) or \
            (ctx.trainer_late and (hang_after or spin)):
        return _wedged(ctx, g, hang_recent, death_recent, spin, after)

    tail = _failing_tail(ctx, hang_recent + death_recent)
    if tail is not None:
        return tail

    if ctx.trainer_late:
        # Late but within its staleness threshold, a trainer may be in a long step: ALIVE. Beyond it, with no hang
        # signature, neither ALIVE (its logs are stale) nor WEDGED (no signature): the status is unknown.
        g.status, g.escalate, g.code = "UNKNOWN", True, Code.TRAINER_STALE
        g.job_status = "UNKNOWN" if ctx.trainer_stale else "ALIVE"
        _note_lent_progress(ctx, g)
        g.facts.update(since_s=ctx.trainer_since_s, cadence_s=ctx.cadence_s, cadence_source=ctx.cadence_source)
        g.watch.append(("hang_signature", {}))
        g.evidence.append(Ev(progress, tr.last_progress_source or "trainer",
                             f"trainer last progress: {tr.last_progress_text[:300]}"))
        return g

    g.status, g.job_status = "PASS", "ALIVE"
    if progress is None:
        newest_line = max((s.last_ts for s in state.streams.values() if s.last_ts is not None), default=None)
        if newest_line is None or now - newest_line > t.logs_not_fresh_s:
            # Running pods whose logs have been silent this long, with no progress line ever, are not shown alive
            # (stale logs are not ALIVE) nor wedged (no signature): the status is unknown, as for a stale trainer.
            g.status, g.escalate, g.code = "UNKNOWN", True, Code.LOGS_STALE
            g.job_status = "UNKNOWN"
            return g
        g.code = Code.NO_PROGRESS_FORMAT
        g.status = "PASS" if ctx.engines_generating else "UNKNOWN"
        if sc.state != "running" and not ctx.engines_generating:
            g.job_status = "UNKNOWN"  # fresh bytes alone prove nothing: no scheduler view, no recognised progress
        g.facts["freshness"] = freshness_facts(ctx)
        recent = [n for n, _ in hang + deaths]
        if recent:
            g.facts["earlier"] = sorted({ctx.catalog.label(n) for n in recent})
            g.watch.append(("recurrence", {"names": g.facts["earlier"]}))
        g.watch.append(("first_step", {}))
        return g
    g.code = Code.ALIVE
    g.facts["freshness"] = freshness_facts(ctx)
    if hang or deaths:
        names = sorted({ctx.catalog.label(n) for n, _ in hang + deaths})
        g.facts["earlier"] = names
        g.watch.append(("recurrence", {"names": names}))
    g.evidence.append(Ev(progress, tr.last_progress_source or "trainer",
                         f"trainer step progress {age(ctx.trainer_since_s or 0)} ago: {tr.last_progress_text[:300]}"))
    g.watch.append(("trainer_silence", {"threshold_s": ctx.stale_threshold_s}))
    return g


def _terminal(ctx: Context, g: GateResult, restarts: RestartResult) -> GateResult:
    sc = ctx.state.sched
    g.status, g.job_status, g.code = ("PASS" if sc.state == "succeeded" else "FAIL"), "TERMINAL", Code.TERMINAL
    rc = root_cause(ctx)
    klass = failure_class_of(rc.text)
    deterministic = restarts.same_failure is True
    g.transient = klass in TRANSIENT_CLASSES and not deterministic
    g.facts.update(root=rc.text, nature="deterministic" if deterministic else (
        "transient" if g.transient else "not_transient"))
    g.evidence.extend(rc.evidence)
    g.cause, g.cause_detail = "terminal", rc.text
    g.culprit, g.root = rc.culprit, rc
    return g


def _crash_after_step(ctx: Context) -> list[tuple[str, SignalStat]]:
    """Lines after the trainer's last step that report how a process went down without being a death line:
    an OOM kill, a hardware-blamed GPU fault, or the trainer-side teardown a crash leaves behind (torchrun
    closing its workers, NCCL / TCPStore peers gone). Real crashes often leave only these (a SIGKILLed rank
    prints nothing; its peers print the fallout), and a stale trainer after one is a death, not a quiet phase.
    Cause-bearing lines (OOM, hardware) first, so they lead the culprit."""
    last = ctx.progress_ts
    if last is None:
        return []
    out: list[tuple[str, SignalStat]] = []
    for effect in ("oom", "hardware", "fallout"):
        for name, stat in ctx.signals(effect, ctx.current_attempt):
            if (stat.last_ts or 0.0) < last:
                continue  # equal: an untimestamped line inherits the stream's last stamp, often the step's own
            decl = ctx.catalog.decl(name)
            if effect == "fallout" and (decl is None or decl.role != roles.TRAINER):
                continue  # an engine's crash dump is Gate B's business; a bare traceback header says nothing
            if name == "xid" and hardware_node(ctx) is None:
                continue  # application Xids are the program's own fault lines, not a node failure
            if name == "sxid":
                continue  # NVSwitch SXids are mostly non-fatal link notes; Gate B weighs them
            out.append((name, stat))
    return out


def _note_lent_progress(ctx: Context, g: GateResult) -> None:
    """Say why the trainer's last progress is older than its line's time (progress_time.py)."""
    if ctx.progress_bounded is not None:
        lent, issued, ran_s = ctx.progress_bounded
        g.add(Code.PROGRESS_BEFORE_STUCK, None, lent_ts=lent, issued_ts=issued, ran_s=ran_s)


def _wedged(ctx: Context, g: GateResult, hang: list[tuple[str, SignalStat]],
            deaths: list[tuple[str, SignalStat]], spin: dict | None,
            after: list[tuple[str, SignalStat]] | None = None) -> GateResult:
    tr = ctx.state.trainer
    g.status, g.job_status, g.code = "FAIL", "WEDGED", Code.WEDGED
    labels_h = sorted({ctx.catalog.label(n) for n, _ in hang})
    labels_d = sorted({ctx.catalog.label(n) for n, _ in deaths})
    g.facts.update(last_progress=short(tr.last_progress_text), since_s=ctx.trainer_since_s, cadence_s=ctx.cadence_s,
                   cadence_source=ctx.cadence_source, hang=labels_h, deaths=labels_d[:1],
                   deception=ctx.engines_generating)
    if hang:
        g.add(Code.HANG_LINE, "hang_log", labels=labels_h, count=sum(s.count for _, s in hang))
        for _, s in hang[:3]:
            g.evidence.extend(s.evidence[:2])
    if deaths:
        g.add(Code.DEATH_LINE, "fatal_log", labels=labels_d, count=sum(s.count for _, s in deaths))
        for _, s in deaths[:2]:
            g.evidence.extend(s.evidence[:2])
    if after and not (hang or deaths):
        # One crash, one family: the leading (cause-bearing) line's own family, not fatal_log on top of it.
        g.add(Code.CRASH_AFTER_STEP, ctx.catalog.family(after[0][0]),
              labels=sorted({ctx.catalog.label(n) for n, _ in after}))
        for _, s in after[:2]:
            g.evidence.extend(s.evidence[:2])
    g.add(Code.TRAINER_FROZEN, "progress_stall", since_s=ctx.trainer_since_s)
    _note_lent_progress(ctx, g)
    idle_hosts, idle_ev = policy_gpus_idle(ctx)
    if idle_hosts:
        g.add(Code.POLICY_GPUS_IDLE, "gpu_poll", hosts=idle_hosts)
        g.evidence.extend(idle_ev)
    if spin:
        g.add(Code.GPU_SPIN, "gpu_poll", **spin)
        g.facts["spin"] = spin
        g.evidence.extend(spin_evidence(ctx, spin))
    g.evidence.append(Ev(ctx.progress_ts, tr.last_progress_source or "trainer",
                         f"trainer last progress {age(ctx.trainer_since_s or 0)} before now (stale, "
                         f"cadence ~{age(ctx.cadence_s or 0)}): {tr.last_progress_text[:300]}"))
    if hang or deaths:
        lead = (hang or deaths)[0]
        g.culprit = culprit_for(ctx, lead[1], ctx.catalog.decl(lead[0]))
        g.cause = _cause_of(ctx, hang, deaths, g.culprit)
    elif after:
        decl = ctx.catalog.decl(after[0][0])
        g.culprit = culprit_for(ctx, after[0][1], decl)
        g.cause = decl.cause if decl is not None and decl.cause else None
    elif spin:
        g.cause = "collective_spin"
        g.culprit = Culprit(roles.TRAINER, ", ".join(spin["hosts"][:2]), None, [Why.GPUS_SPINNING])
    else:
        g.cause = "policy_idle"
        g.culprit = Culprit(roles.TRAINER, ", ".join(idle_hosts[:2]), None, [Why.POLICY_IDLE])
    return g


def _failing_tail(ctx: Context, lines: list[tuple[str, SignalStat]]) -> GateResult | None:
    """A fatal/hang line from a role, then silence from that role's stream past its cadence."""
    state, now, t = ctx.state, ctx.now, ctx.t
    sc = state.sched
    silence_needed = (max(t.tail_cadence_factor * ctx.cadence_s, t.tail_default_silence_s) if ctx.cadence_s
                      else t.tail_default_silence_s)
    # Group the fault lines by the stream that printed them: the failing tail is the run of fault
    # lines at a stream's end (watchdog stuck, then "terminating" minutes later), then nothing.
    by_stream: dict[str, list[tuple[str, SignalStat]]] = {}
    for name, stat in lines:
        if stat.last_ts is not None:
            by_stream.setdefault(stat.stream, []).append((name, stat))
    # (signal, stat, quiet s, silence needed s, counted from a stated stall's start)
    silent: list[tuple[str, SignalStat, float, float, bool]] = []
    grace = 120.0
    for stream_key, items in sorted(by_stream.items()):
        tail_ts = max(s.last_ts or 0.0 for _, s in items)
        stream = state.streams.get(stream_key)
        stream_last = stream.last_ts if stream is not None and stream.last_ts is not None else tail_ts
        if stream_last > tail_ts + grace:
            continue  # the stream kept printing after its last fault line
        progress = ctx.progress_ts
        if progress is not None and progress > tail_ts + grace:
            continue  # the trainer stepped after it: a side process died, the job did not
        quiet, needed = now - max(stream_last, tail_ts), silence_needed
        stall = _engine_stall(ctx, stream_key, items, tail_ts, grace)
        if stall is not None:
            quiet, needed = stall
        if quiet < needed:
            continue
        for name, stat in items:
            role = stat.role or "other"
            # the trainer's time as the evidence places it (progress_time.py), not a lent one
            role_last = ctx.progress_ts if role == roles.TRAINER else state.role_last_ts.get(role)
            if role_last is not None and role_last > tail_ts + grace:
                continue  # that role made progress afterwards (elsewhere)
            if role == roles.ENGINE and ctx.engines_generating and stall is None:
                continue  # other engines still generate: one engine's death is Gate B's business
            if (stat.last_ts or 0.0) >= tail_ts - 3600.0:
                silent.append((name, stat, quiet, needed, stall is not None))
    silent.sort(key=lambda x: (x[1].first_ts or x[1].last_ts or 0.0, x[0]))  # the first fault line leads
    if not silent:
        return None
    g = GateResult()
    g.facts.update(_poll_facts(ctx))
    name, stat, quiet, needed, stalled = silent[0]
    hang = [(n, s) for n, s, *_ in silent if ctx.catalog.decl(n) and ctx.catalog.decl(n).effect == "hang"]  # type: ignore[union-attr]
    deaths = [(n, s) for n, s, *_ in silent if (n, s) not in hang]
    labels = sorted({ctx.catalog.label(n) for n, *_ in silent})
    g.facts.update(labels=labels, quiet_s=quiet, needed_s=needed, role=stat.role or "other",
                   stream=stat.stream, cadence_s=ctx.cadence_s, stalled=stalled)
    first = (hang or deaths)[0]
    # One cause restated in several lines (watchdog stuck, then "terminating") is one family.
    family = "hang_log" if hang else ctx.catalog.family(first[0])
    g.add(Code.HANG_LINE if hang else Code.DEATH_LINE, family, labels=labels,
          count=sum(s.count for _, s, *_ in silent))
    g.add(Code.ROLE_SILENT, "progress_stall", quiet_s=quiet, role=stat.role or "other")
    for _, s, *_ in silent[:3]:
        g.evidence.extend(s.evidence[-2:])
    idle_hosts, idle_ev = policy_gpus_idle(ctx)
    if idle_hosts:
        g.add(Code.POLICY_GPUS_IDLE, "gpu_poll", hosts=idle_hosts)
        g.evidence.extend(idle_ev)
    g.culprit = culprit_for(ctx, first[1], ctx.catalog.decl(first[0]))
    g.cause = _cause_of(ctx, hang, deaths, g.culprit)
    g.code = Code.WEDGED_TAIL
    if sc.state == "running" or (sc.state is None and sc.pods):
        g.status, g.job_status = "FAIL", "WEDGED"
    else:
        # No scheduler view: the process may simply be gone. Say what we saw and escalate.
        g.status, g.job_status, g.escalate = "UNKNOWN", "UNKNOWN", True
        g.watch.append(("state_poll", {}))
    return g


def _engine_stall(ctx: Context, stream_key: str, items: list[tuple[str, SignalStat]], tail_ts: float,
                  grace: float) -> tuple[float, float] | None:
    """(quiet s, needed s) for an engine whose tail is a hang line that stated its stall (SGLang's scheduler
    watchdog: one forward batch has run `watchdog_timeout` s), when no engine has generated since the stall
    began. Its silence then counts from the stall's start (or its last stats line, if later), not from the
    watchdog line: the engine says it made no progress in between, so the failing tail need not wait a
    trainer's cadence more. An engine stuck with work in flight is hung after `engine_stall_silent_s` (the
    stats cadence is seconds; the trainer's cadence says nothing of it). None when another engine generated
    after the stall began (one engine's stall is then Gate B's business) or no such line leads the tail."""
    rec = ctx.state.stated_stalls.get(stream_key)
    if rec is None or abs(rec[0] - tail_ts) > grace or not any(s.role == roles.ENGINE for _, s in items):
        return None
    since = rec[1]
    engine_last = max((e.last_ts for e in ctx.state.engines.values() if e.last_ts is not None), default=None)
    if engine_last is not None and engine_last > since + grace:
        return None
    quiet_from = since if engine_last is None else max(since, engine_last)
    return ctx.now - quiet_from, ctx.t.engine_stall_silent_s


def _cause_of(ctx: Context, hang: list[tuple[str, SignalStat]], deaths: list[tuple[str, SignalStat]],
              culprit: Culprit | None) -> str:
    if culprit is not None and culprit.role == roles.ENGINE:
        # An SGLang server is known by its own lines (rules of the sglang pack), not only by a log file
        # or process named after it: a capture's pod_rank<N>.log names neither.
        sglang = "sglang" in (culprit.component or "").lower() or any(
            ev.rule_id.startswith("sglang.") for _, s in hang + deaths for ev in s.evidence)
        return "rollout_server_dead" if sglang else "engine_dead"
    if culprit is not None and culprit.role == roles.ROLLOUT:
        return "rollout_server_dead"
    for name, _ in hang + deaths:
        decl = ctx.catalog.decl(name)
        if decl and decl.cause:
            return decl.cause
    return "nccl_hang" if hang else "ray_death"


def _engines_steady(ctx: Context) -> bool:
    """Engines generated through at least half of the generating window (not a burst of lines after a gap)."""
    if not ctx.engines_generating:
        return False
    since = ctx.now - ctx.t.engine_generating_s
    starts = [b[0] for window in ctx.engines_recent.values() for b in window if b[0] >= since and b[1] > 0]
    return bool(starts) and max(starts) - min(starts) >= ctx.t.engine_generating_s / 2


def _policy_roles(ctx: Context) -> tuple[str, ...]:
    """GPU host roles that run the policy: colocated hosts ('mixed'), and in a job declared colocated every
    host whose role nothing else names (a SLURM node list carries no pod names)."""
    colocated = bool(((ctx.state.spec or {}).get("geometry") or {}).get("colocated"))
    return ("policy", "mixed", "unknown") if colocated else ("policy", "mixed")


def _policy_hosts(ctx: Context) -> list[str]:
    roles_ = _policy_roles(ctx)
    return [h for h, gh in ctx.state.gpus.items() if gh.role in roles_]


def _all_policy_gpus_idle(ctx: Context) -> bool:
    polled = _policy_hosts(ctx)
    return bool(polled) and set(policy_gpus_idle(ctx)[0]) == set(polled)


def policy_gpus_idle(ctx: Context) -> tuple[list[str], list[Ev]]:
    """Policy GPUs (policy or colocated hosts) with memory resident but ~0% util in every recent poll."""
    t = ctx.t
    hosts, evidence = [], []
    roles_ = _policy_roles(ctx)
    for host, gh in sorted(ctx.state.gpus.items()):
        if gh.role not in roles_ or len(gh.polls) < t.gpu_idle_polls:
            continue
        recent = gh.polls[-t.gpu_idle_polls:]
        utils = [u for _, rs in recent for (_, u, mem, tot, _) in rs if u is not None]
        mems = [(mem, tot) for _, rs in recent for (_, u, mem, tot, _) in rs if mem is not None and tot]
        if utils and max(utils) <= t.gpu_idle_util_pct and mems and \
                statistics.median(m / tt for m, tt in mems) > t.gpu_resident_mem_ratio:
            hosts.append(host)
            evidence.append(Ev(recent[-1][0], f"gpu/{host}",
                               f"policy pod {host}: {len(recent[-1][1])} GPUs at "
                               f"{max(utils):.0f}% util (max over last {len(recent)} polls) "
                               f"with {statistics.median(m for m, _ in mems) / 1024:.0f} "
                               f"GiB resident"))
    return hosts, evidence


def _crash_loop(ctx: Context) -> dict | None:
    """Pods restarting again and again while training never gets past where it was."""
    sc, t = ctx.state.sched, ctx.t
    hist = [h for h in sc.restart_history if h[0] >= ctx.now - t.crash_loop_window_s]
    recent_backoff = (sc.crashloop_ts is not None and sc.crashloop_ts >= ctx.now - t.crash_loop_window_s
                      and sc.max_pod_restarts >= t.crash_loop_min_restarts)
    looping = recent_backoff or (len(hist) >= 2 and hist[-1][1] - hist[0][1] >= 2)
    if not looping or not sc.restart_history:
        return None
    before, now_step = sc.step_at_first_restart, ctx.state.trainer.last_step
    if before is not None and now_step is not None and now_step > before:
        return None  # restarts, but training moves on: not a loop
    return {"restarts": sc.max_pod_restarts, "backoff": recent_backoff, "step": now_step,
            "since_s": ctx.now - sc.restart_history[0][0]}


def _poll_facts(ctx: Context) -> dict:
    sc = ctx.state.sched
    return {"poll_state": sc.state, "poll_age_s": None if sc.last_ts is None else ctx.now - sc.last_ts,
            "pods": sc.pods, "failure_count": sc.failure_count}


def freshness_facts(ctx: Context) -> dict:
    state, now = ctx.state, ctx.now
    tr = state.trainer
    out: dict = {"roles": {}}
    if ctx.progress_ts is not None:
        out.update(trainer_s=now - ctx.progress_ts, step=tr.last_step, cadence_s=ctx.cadence_s)
    for role in (roles.ENGINE, roles.ROLLOUT, roles.RAY):
        ts = state.role_last_ts.get(role)
        if ts is not None:
            out["roles"][role] = now - ts
    return out


def short(text: str, n: int = 140) -> str:
    # Drop the timestamp/prefix noise for the summary; the full line is in the evidence.
    for marker in (" - ", "] "):
        if marker in text:
            text = text.rsplit(marker, 1)[-1]
            break
    return text[:n]


