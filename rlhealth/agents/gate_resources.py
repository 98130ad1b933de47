"""Gate B, resources: are the GPUs working, and is the hardware sound?

Order matters: a GPU hardware fault explains everything after it, a training-stage OOM explains
a stall, and only then are engines judged by their own stats (starvation, floors, hung, dead,
resident but idle) and GPUs by utilisation read together with power draw.
"""

from __future__ import annotations

import re
import statistics

from rlhealth.agents import roles
from rlhealth.agents.context import Context, EngineBucket
from rlhealth.agents.reasons import Code, Culprit, GateResult, Why
from rlhealth.agents.rootcause import causal_traceback, culprit_for, hardware_node
from rlhealth.agents.state import Ev, JobHealth, SignalStat

_GPU_LOST_RE = re.compile(r"fallen off the bus|GPU is lost|requires reset|Unable to determine the device handle|"
                          r"No devices were found|Unknown Error", re.I)

# Per engine: (id, generation tok/s, running, waiting, span s, starving share, recent buckets), medians over the window.
_EngineRow = tuple[str, float, float, float, float, float, list[EngineBucket]]


def gate_b(ctx: Context, a: GateResult) -> GateResult:
    state, now, t = ctx.state, ctx.now, ctx.t
    g = GateResult()
    attempt = ctx.current_attempt
    eager = state.enforce_eager
    if eager is None and state.cuda_graphs_seen:
        eager = False  # engines logged CUDA-graph capture: graphs are on
    g.facts["eager"] = eager

    if _hardware(ctx, g):
        return g

    ooms = ctx.signals("oom", attempt)
    oom_pods = state.sched.pod_reasons.get("OOMKilled", 0)
    if ooms or oom_pods:
        g.status, g.code = "FAIL", Code.OOM
        labels = sorted({ctx.catalog.label(n) for n, _ in ooms})
        if ooms:
            g.add(Code.OOM_LINE, "oom_log", labels=labels)
        if oom_pods:
            g.add(Code.OOM_POD, "scheduler_state", pods=oom_pods)
            labels.append("pod OOMKilled")
        for _, stat in ooms[:2]:
            g.evidence.extend(stat.evidence[:2])
        if oom_pods:
            g.evidence.append(state.sched.pod_reason_examples["OOMKilled"])
        tried = next((e.text[e.text.index("Tried to allocate"):][:60] for _, s in ooms for e in s.evidence
                      if "Tried to allocate" in e.text), "")
        g.facts.update(labels=labels, tried=tried, count=sum(s.count for _, s in ooms), attempt=attempt)
        g.cause = "cuda_oom" if any(ctx.catalog.decl(n) and ctx.catalog.decl(n).cause == "cuda_oom"  # type: ignore[union-attr]
                                    for n, _ in ooms) else "host_oom"
        if ooms:
            g.culprit = culprit_for(ctx, ooms[0][1], ctx.catalog.decl(ooms[0][0]))
        return g

    if ctx.terminal:
        g.status, g.code = "UNKNOWN", Code.B_TERMINAL
        g.facts["engine_s"] = None if ctx.latest_engine_ts is None else now - ctx.latest_engine_ts
        return g

    # Non-finite loss is a training-dynamics alarm, not one of the seed's hard FAILs: it escalates,
    # however many lines repeat it, and a KILL needs independent evidence from the other gates.
    if state.metrics.nonfinite >= t.nonfinite_min_lines:
        g.status, g.code, g.escalate = "UNKNOWN", Code.NONFINITE, True
        g.add(Code.NONFINITE, "training_dynamics", count=state.metrics.nonfinite)
        g.facts["count"] = state.metrics.nonfinite
        if state.metrics.nonfinite_ev:
            g.evidence.append(state.metrics.nonfinite_ev)
        g.cause = "nonfinite"
        return g

    spin = collective_spin(ctx)
    if spin is not None:
        g.status, g.code = "FAIL", Code.COLLECTIVE_SPIN
        g.facts.update(spin)
        g.add(Code.SPIN_POLLS, "gpu_poll", **spin)
        if spin["no_step"]:
            g.add(Code.TRAINER_FROZEN_B, "progress_stall", span_s=spin["span_s"])
        g.evidence.extend(spin_evidence(ctx, spin))
        g.cause = "collective_spin"
        g.culprit = Culprit(roles.TRAINER, ", ".join(spin["hosts"][:2]), spin["hosts"][0],
                            [Why.GPUS_SPINNING])
        return g

    dead = _engine_dead(ctx)
    if dead is not None:
        return dead

    if ctx.engines_recent:
        return _engines(ctx, g, eager)
    return _gpu_view(ctx, g)


def _hardware(ctx: Context, g: GateResult) -> bool:
    """Xids blamed on hardware (table as data), GPUs lost from the bus or from nvidia-smi."""
    state = ctx.state
    lines = [(n, s) for n, s in ctx.signals("hardware") if n != "xid"]
    node = hardware_node(ctx)
    lost_polls = [(host, err) for host, gh in sorted(state.gpus.items()) for err in gh.errors
                  if _GPU_LOST_RE.search(err)]
    app_xids = sorted({code for _, _, code, _ in state.xids
                       if (e := ctx.catalog.xid.get(code)) is not None and e.blame != "hardware"})
    g.facts["app_xids"] = app_xids
    if not lines and node is None and not lost_polls:
        return False
    g.status, g.code, g.cause = "FAIL", Code.GPU_HARDWARE, "gpu_hardware"
    labels = sorted({ctx.catalog.label(n) for n, _ in lines})
    if node is not None:
        entry = ctx.catalog.xid[node[1]]
        labels.insert(0, f"Xid {node[1]} ({entry.meaning})")
        g.evidence.extend(ev for ts, host, code, text in state.xids[-3:] if code == node[1]
                          for ev in [Ev(ts, host, text, "hw.xid")])
    if lines or node is not None:
        g.add(Code.HW_LINE, "hardware_log", labels=labels)
    for _, s in lines[:2]:
        g.evidence.extend(s.evidence[-2:])
    if lost_polls:
        g.add(Code.GPU_LOST_POLL, "gpu_poll", hosts=sorted({h for h, _ in lost_polls}))
        g.evidence.append(Ev(state.gpus[lost_polls[0][0]].polls[-1][0] if state.gpus[lost_polls[0][0]].polls else None,
                             f"gpu/{lost_polls[0][0]}", lost_polls[0][1][:300]))
    host = node[0] if node else (lost_polls[0][0] if lost_polls else None)
    if host is None and lines:
        st = state.streams.get(lines[0][1].stream)
        host = (st.host if st else None) or lines[0][1].stream
    g.facts.update(labels=labels, node=host)
    g.culprit = Culprit("node", host or "", host, [Why.GPU_HARDWARE])
    # A fault the job trained through (steps after it, no GPU missing from the polls) is a node to
    # drain when the run allows, not evidence that this run is dead.
    hw_ts = max([s.last_ts or 0.0 for _, s in lines] + [x[0] for x in state.xids if node and x[2] == node[1]],
                default=0.0)
    progress = ctx.progress_ts
    if not lost_polls and hw_ts and progress is not None and progress > hw_ts + ctx.t.hardware_trained_through_s:
        g.status, g.escalate = "UNKNOWN", True
        g.facts["trained_through_s"] = progress - hw_ts
    return True


def collective_spin(ctx: Context) -> dict | None:
    """Policy GPUs pinned near 100 % util at near-idle power across polls while no step completes."""
    state, t = ctx.state, ctx.t
    hosts: list[str] = []
    first: float | None = None
    last: float | None = None
    powers: list[float] = []
    utils: list[float] = []
    for host, gh in sorted(state.gpus.items()):
        if gh.role not in ("policy", "unknown", "mixed") or gh.spin_since is None or not gh.polls:
            continue
        if gh.role != "policy" and ctx.engines_generating:
            continue  # GPUs that may be engines' are only judged when no engine generates
        hosts.append(host)
        first = gh.spin_since if first is None else min(first, gh.spin_since)
        last = gh.polls[-1][0] if last is None else max(last, gh.polls[-1][0])
        utils.extend(r[1] for r in gh.polls[-1][1] if r[1] is not None)
        powers.extend(r[4] for r in gh.polls[-1][1] if r[4] is not None)
    if not hosts or first is None or last is None or last - first < t.spin_min_s or not utils or not powers:
        return None
    if ctx.progress_ts is not None and ctx.progress_ts >= first:
        return None  # a step completed while they read this way: real work at low clocks, not a spin
    return {"hosts": hosts, "util": statistics.median(utils), "power_w": statistics.median(powers),
            "span_s": last - first, "no_step": True}


def spin_evidence(ctx: Context, spin: dict) -> list[Ev]:
    out = []
    for host in spin["hosts"][:2]:
        ts, rs = ctx.state.gpus[host].polls[-1]
        cells = ", ".join(f"GPU{i} {u:.0f}% {w:.0f} W" for i, u, _, _, w in rs[:4] if u is not None and w is not None)
        out.append(Ev(ts, f"gpu/{host}", f"{host}: {cells} (utilisation pinned at near-idle power draw)"))
    return out


def _engine_dead(ctx: Context) -> GateResult | None:
    """An engine logged its death and printed no stats since, while other engines still generate;
    or every engine went quiet at a death line (`_all_engines_dead`)."""
    state, t = ctx.state, ctx.t
    deaths = [(n, s) for n, s in ctx.signals("death", ctx.current_attempt)
              if (s.role == roles.ENGINE
                  or (not s.role and (d := ctx.catalog.decl(n)) is not None and d.role == roles.ENGINE))]
    if not deaths:
        return None
    whole = _all_engines_dead(ctx, deaths)
    if whole is not None or not ctx.engines_generating:
        return whole
    name, stat = deaths[0]
    if stat.last_ts is None or ctx.now - stat.last_ts < t.engine_hung_silent_s:
        return None
    stopped = [eid for eid, eng in state.engines.items()
               if eng.last_ts is not None and eng.last_ts <= stat.last_ts + 60 and eid not in ctx.engines_recent]
    if not stopped:
        return None
    g = GateResult(status="FAIL", code=Code.ENGINE_DEAD, cause="engine_dead")
    tb = causal_traceback(state.tracebacks, ctx.current_attempt)
    cause_text = f"{tb.exc_type}: {tb.message}" if tb is not None and tb.role == roles.ENGINE else ""
    g.facts.update(engines=stopped[:3], working=len(ctx.engines_recent), label=ctx.catalog.label(name),
                   cause=cause_text)
    g.add(Code.ENGINE_DEATH_LINE, "fatal_log", label=ctx.catalog.label(name))
    g.add(Code.ENGINE_NO_STATS, "progress_stall", engines=stopped[:3])
    g.evidence.extend(stat.evidence[-2:])
    if tb is not None and tb.role == roles.ENGINE:
        g.evidence.insert(0, Ev(tb.ts, tb.stream, tb.text, "traceback"))
        g.cause_detail = cause_text
    g.culprit = culprit_for(ctx, stat, ctx.catalog.decl(name))
    return g


def _all_engines_dead(ctx: Context, deaths: list[tuple[str, SignalStat]]) -> GateResult | None:
    """The rollout side is down: an engine's death line, and since then no engine printed a stats line,
    the stream that logged the death printed nothing more and the trainer did not step. Confirmed
    (FAIL) after `engine_hung_silent_s` of that silence; before, the stats still look recent, so say
    what was seen and escalate instead of reading the engines as generating."""
    state, now, t = ctx.state, ctx.now, ctx.t
    # only an engine's own death signatures (EngineDeadError, a dead worker process, SGLang's scheduler
    # exception, a CUDA error): a bare exception in an engine's log is often one request's failure
    declared = [(n, s) for n, s in deaths
                if (d := ctx.catalog.decl(n)) is not None and d.role == roles.ENGINE and s.role in (roles.ENGINE, "")]
    if not declared:
        return None
    name, stat = declared[0]
    death_ts = stat.last_ts
    if death_ts is None or ctx.latest_engine_ts is None or ctx.latest_engine_ts > death_ts + _AFTER_DEATH_GRACE_S:
        return None  # an engine printed stats after the death line: Gate B's other rules judge them
    stream = state.streams.get(stat.stream)
    if stream is not None and stream.last_ts is not None and stream.last_ts > death_ts + _AFTER_DEATH_GRACE_S:
        return None  # the dying stream kept logging (a restart, a drain): not a dead rollout side
    progress = ctx.progress_ts
    if progress is not None and progress > death_ts + _AFTER_DEATH_GRACE_S:
        return None  # training went on: the engines are not what it waits for
    engines = sorted(state.engines)
    tb = causal_traceback(state.tracebacks, ctx.current_attempt)
    cause_text = f"{tb.exc_type}: {tb.message}" if tb is not None and tb.role == roles.ENGINE else ""
    quiet = now - death_ts
    g = GateResult(code=Code.ENGINE_DEAD, cause="engine_dead")
    g.facts.update(engines=engines[:3], working=0, label=ctx.catalog.label(name), cause=cause_text, quiet_s=quiet,
                   needed_s=t.engine_hung_silent_s)
    g.evidence.extend(stat.evidence[-2:])
    if tb is not None and tb.role == roles.ENGINE:
        g.evidence.insert(0, Ev(tb.ts, tb.stream, tb.text, "traceback"))
        g.cause_detail = cause_text
    g.culprit = culprit_for(ctx, stat, ctx.catalog.decl(name))
    if quiet < t.engine_hung_silent_s:
        g.status, g.code, g.escalate = "UNKNOWN", Code.ENGINE_DEATH_UNCONFIRMED, True
        g.watch.append(("engine_after_death", {"after_s": t.engine_hung_silent_s}))
        return g
    g.status = "FAIL"
    g.add(Code.ENGINE_DEATH_LINE, "fatal_log", label=ctx.catalog.label(name))
    g.add(Code.ENGINE_NO_STATS, "progress_stall", engines=engines[:3])
    return g


def _median(xs: list[float]) -> float:
    """`statistics.median(xs)`, the same value and type (its own steps: sort, the middle one or the mean of
    the middle two), without its generic call: 12 medians a judgement of a job with 4 engines."""
    data = sorted(xs)
    n = len(data)
    if n == 0:
        raise statistics.StatisticsError("no median for empty data")
    if n % 2 == 1:
        return data[n // 2]
    i = n // 2
    return (data[i - 1] + data[i]) / 2


_AFTER_DEATH_GRACE_S = 60.0  # lines within a minute of a death line belong to the dying (shutdown chatter)


def _engines(ctx: Context, g: GateResult, eager: bool | None) -> GateResult:
    state, now, t, floor = ctx.state, ctx.now, ctx.t, ctx.floor
    per: list[_EngineRow] = []
    for eid, window in ctx.engines_recent.items():
        gen = _median([s[1] for s in window])
        run = _median([s[3] for s in window])
        wait = _median([s[4] for s in window])
        span = window[-1][0] - window[0][0]
        starving_share = sum(1 for s in window if s[4] > max(2.0 * s[3], 4.0)) / len(window)
        per.append((eid, gen, run, wait, span, starving_share, window))
    geo = ctx.spec.get("geometry") or {}
    shape = {"engines": len(per), "expected": geo.get("num_inference_engines"), "gen": sum(p[1] for p in per),
             "running": sum(p[2] for p in per), "waiting": sum(p[3] for p in per),
             "window_s": max(p[4] for p in per) + 60, "eager": eager,
             "floor": None if floor is None else (floor.awful_tps, floor.label),
             "gpu": (ctx.spec.get("hardware") or {}).get("gpu") or "unknown GPU"}
    g.facts["shape"] = shape
    starving = [p for p in per
                if p[5] >= t.starving_share_ratio and p[4] >= t.starving_span_s and p[3] > max(2 * p[2], 4)]
    floored = [p for p in per
               if floor and p[2] >= 1 and p[4] >= t.floored_span_s and p[1] < floor.floor_for(p[2], p[3])]
    if starving and (not floor or any(p in floored for p in starving) or _flat(starving, t.flat_rise_ratio)):
        g.status, g.code, g.cause = "FAIL", Code.STARVATION, "starvation"
        worst = max(starving, key=lambda p: p[3])
        kv = max((s[5] for p in starving for s in p[6]), default=0.0)
        g.add(Code.WAITING_FAR_ABOVE_RUNNING, "engine_queue", waiting=worst[3], running=worst[2])
        g.add(Code.THROUGHPUT_LOW, "engine_throughput", gen=worst[1])
        if kv >= 95:
            g.add(Code.KV_SATURATED, "engine_queue", kv=kv)
        g.facts.update(n=len(starving), total=len(per), waiting=worst[3], running=worst[2], span_s=worst[4],
                       gen=worst[1], floor_tps=floor.floor_for(worst[2], worst[3]) if floor else None, kv=kv,
                       preemptions=bool(ctx.signals("engine_pressure")))
        engine_evidence(state, g, [p[0] for p in starving])
        return g
    if floored and len(floored) >= max(1, len(per) // 2):
        g.status, g.code = "FAIL", Code.FLOORED
        g.cause = "enforce_eager" if eager else "floored"
        worst = min(floored, key=lambda p: p[1])
        g.add(Code.THROUGHPUT_LOW, "engine_throughput", gen=worst[1], engines=len(floored))
        g.add(Code.WAITING_FAR_ABOVE_RUNNING if worst[3] > worst[2] else Code.RUNNING_SUSTAINED, "engine_queue",
              running=worst[2])
        if eager:
            g.add(Code.EAGER_ON, "config_log")
        g.facts.update(gen=worst[1], running=worst[2], n=len(floored), total=len(per), span_s=worst[4])
        engine_evidence(state, g, [p[0] for p in floored])
        return g
    # Silent: a 0 tok/s line with requests Running, then no stats for vLLM's own step limit while another engine is
    # seen to log later. vLLM prints the same two things for an engine stuck in a step and for one left idle after
    # its requests were aborted (a stale Running count: vllm-project/vllm#22545, #29928), which RL rollouts do
    # (partial rollouts, per-request time budgets, agent timeouts closing the request), so the silence alone is
    # not a hang: hung with its own EngineCore waiting on its workers since (vLLM >= 0.11 prints that only while a
    # call to them has not returned) or its own GPUs pinned; with neither it escalates (`silent_engines`).
    stuck = stalled_on_workers(ctx)
    stuck_ids = {eid for eid, _ in stuck}
    silent = silent_engines(ctx)
    pinned = [(eid, gpu) for eid, gpu in silent if gpu is not None and gpu["pinned"]]
    # (another engine logging past its silence adds nothing to its own waits: the same limit as for one engine)
    waiting = [(eid, f) for eid, f in stuck if f["waited_s"] >= t.engine_core_wait_hung_s]
    silent = [(eid, gpu) for eid, gpu in silent if eid not in stuck_ids and (gpu is None or not gpu["pinned"])]
    if (pinned or waiting) and ctx.state.sched.state != "pending":
        hung = [eid for eid, _ in pinned] + [eid for eid, _ in waiting if eid not in dict(pinned)]
        g.status, g.code, g.cause = "FAIL", Code.ENGINE_HUNG, "engine_hung"
        g.add(Code.ENGINE_ZERO_THEN_SILENT, "engine_throughput", engines=hung[:3])
        g.add(Code.ENGINE_NO_STATS, "progress_stall", engines=hung[:3])
        g.facts["n"] = len(hung)
        if pinned:
            # the engine's own GPUs: a step stuck in a collective or kernel spins them, an idle one leaves them at 0 %
            g.facts["pinned"] = pinned[0][1]
            g.add(Code.ENGINE_GPUS_PINNED, "gpu_poll", **pinned[0][1])
        if waiting:
            # the engine's own lines: its EngineCore waits on its workers past any stall seen to end by itself
            w = waiting[0][1]
            g.facts["stall"] = dict(w, limit_s=t.engine_core_wait_hung_s)
            g.add(Code.ENGINE_CORE_WAITING, "hang_log", **w)
        engine_evidence(state, g, hung)
        if pinned:
            g.evidence.append(_pinned_evidence(ctx, pinned[0][1]))
        if waiting:
            _wait_evidence(ctx, g)
        return g
    idle = resident_idle_engines(ctx)
    if idle:
        g.status, g.code, g.cause = "FAIL", Code.RESIDENT_IDLE, "engine_resident_idle"
        g.facts.update(hosts=[h for h, _ in idle], working=len(per))
        g.add(Code.RESIDENT_IDLE, "gpu_poll", hosts=[h for h, _ in idle])
        g.add(Code.ENGINE_NO_STATS, "progress_stall", engines=[h for h, _ in idle])
        g.evidence.extend(ev for _, ev in idle)
        for _, stat in ctx.signals("engine_up")[:1]:
            g.evidence.extend(stat.evidence[:1])  # the engines did announce themselves ready
        g.culprit = Culprit(roles.ENGINE, idle[0][0], idle[0][0], [Why.RESIDENT_IDLE])
        return g
    if stuck:
        # Stalled, not yet hung: such stalls have ended by themselves (a step stuck for minutes, then serving
        # again), so escalate and say when vLLM itself will settle it (its step limit) and when we call it hung.
        eid, facts = stuck[0]
        g.status, g.code, g.escalate = "UNKNOWN", Code.ENGINE_STALLED, True
        g.facts["stall"] = dict(facts, n=len(stuck), limit_s=t.engine_hung_silent_s)
        g.watch.append(("engine_stall", {"left_s": max(t.engine_hung_silent_s - facts["waited_s"], 0.0),
                                         "hung_s": t.engine_core_wait_hung_s}))
        engine_evidence(state, g, [e for e, _ in stuck])
        _wait_evidence(ctx, g)
        return g
    if silent and ctx.state.sched.state != "pending":
        # Silent with requests Running and nothing to tell a hang from an engine idle after aborts: escalate, and say
        # what settles it (its stats again, its GPUs, a timeout line, or the trainer going stale in Gate A).
        eid, gpu = silent[0]
        eng = state.engines[eid]
        g.status, g.code, g.escalate = "UNKNOWN", Code.ENGINE_SILENT, True
        g.facts["silent"] = {"n": len(silent), "engine": eid, "running": eng.last_running,
                             "stats_silent_s": now - (eng.last_ts or now), "gpu": gpu}
        g.watch.append(("engine_silent", {"polls": t.engine_hung_pinned_polls, "util": t.spin_util_pct}))
        engine_evidence(state, g, [e for e, _ in silent])
        return g
    silent_for = now - ctx.latest_engine_ts if ctx.latest_engine_ts is not None else 0.0
    if silent_for > t.engine_quiet_s or all(p[2] == 0 and p[3] == 0 and p[1] == 0 for p in per):
        # vLLM demotes idle intervals to DEBUG, so an idle engine goes quiet: no requests reach it.
        g.status = "UNKNOWN"
        g.code = Code.ENGINES_QUIET if silent_for > t.engine_quiet_s else Code.ENGINES_IDLE
        g.facts["silent_s"] = silent_for
        g.watch.append(("engine_requests", {}))
        engine_evidence(state, g, [p[0] for p in per][:2])
        return g
    slow = fail_slow(ctx)
    if slow:
        engine_evidence(state, g, [p[0] for p in per][:2])
        return fail_slow_gate(g, slow)
    g.status, g.code = "PASS", Code.GENERATING
    engine_evidence(state, g, [p[0] for p in per][:2])
    if floor:
        g.watch.append(("throughput_floor", {"floor": floor.awful_tps}))
    return g


def stalled_on_workers(ctx: Context) -> list[tuple[str, dict]]:
    """Engines stalled on their own workers: the newest stats line had requests Running and no token of any kind
    (prompt and generation 0.0 tok/s), and since then the engine's own EngineCore has printed at least
    `engine_stall_waits` shm_broadcast waits in one run (one per 60 s of a single wait; fewer when their stated
    interval already reaches `engine_hung_silent_s`) and no stats line. Hung (the caller) once one wait reaches
    `engine_core_wait_hung_s`.

    Why each part: vLLM logs an interval at INFO unless it and the one before had zero throughput, so with
    requests Running a 0.0/0.0 line is the first interval of a stall and silence follows (the lines go to
    DEBUG). From 0.11 idle workers no longer print the wait (vllm-project/vllm#25720); an EngineCore prints it
    while one call to its workers has not returned, so its lines also show the process alive and its log
    flowing. An engine idle between rollouts prints Running 0, or stale Running counts after aborts
    (vllm-project/vllm#22545), and its EngineCore then runs no step (vllm-project/vllm#29928) so does not wait
    on its workers. A weight sync is a
    call to the workers that may take minutes with requests held (allenai/open-instruct#1535): none while the
    trainer is in one. Where several engines log through one EngineCore key, a wait names none of them."""
    state, t = ctx.state, ctx.t
    if state.trainer.in_weight_sync_since is not None or state.sched.state == "pending" or not state.core_waits:
        return []
    owners: dict[str, int] = {}  # recent engines only: a restarted server's ghost in the same log names no one
    for eid in ctx.engines_recent:
        e = state.engines.get(eid)
        if e is not None and e.core:
            owners[e.core] = owners.get(e.core, 0) + 1
    out: list[tuple[str, dict]] = []
    for eid in ctx.engines_recent:
        eng = state.engines.get(eid)
        if (eng is None or eng.last_ts is None or not eng.core or owners.get(eng.core, 0) != 1
                or eng.last_running <= 0 or eng.last_gen != 0 or eng.last_prompt != 0):
            continue
        run = state.core_waits.get(eng.core)
        if run is None:
            continue
        first, last, n, interval = run
        # the wait began one interval before its first line: what the engine itself attests, not our clock
        waited = last - first + interval
        if first <= eng.last_ts or (n < t.engine_stall_waits and waited < t.engine_hung_silent_s):
            continue  # (one line of a raised VLLM_RINGBUFFER_WARNING_INTERVAL can attest the step limit alone)
        out.append((eid, {"engine": eid, "running": eng.last_running, "waits": n, "interval_s": interval,
                          "waited_s": waited, "stats_silent_s": ctx.now - eng.last_ts}))
    out.sort(key=lambda x: -x[1]["waited_s"])
    return out


def silent_engines(ctx: Context) -> list[tuple[str, dict | None]]:
    """Engines whose newest stats line had requests Running at 0.0 generation tok/s and that printed none for
    `engine_hung_silent_s` while another engine logged `engine_hung_behind_s` later (the log flows), with what the
    polls of the engine's own GPU host show since that line (`_own_gpus`).

    Why not hung on that alone: vLLM logs an interval at INFO unless it and the one before had zero throughput,
    from the newest scheduler stats it received; a step that never returns sends none, and neither does an engine
    whose requests were all aborted, since no step runs after the abort (vllm-project/vllm#29928: stats stale until
    a step runs; vllm-project/vllm#22545: 'Running: 106 reqs' at 0.0 tok/s after a load test's aborts). Both print
    one 0.0 line with the old Running count, then nothing at INFO. RL frameworks abort requests on an engine
    while others go on (verl-project/verl#4453 abort_all_requests per replica, verl-project/verl#6866 one request
    over its time budget, THUDM/slime#2 partial rollouts), and the next batch is not sent until the slowest
    engine's share ends."""
    state, now, t = ctx.state, ctx.now, ctx.t
    latest = ctx.latest_engine_ts
    out: list[tuple[str, dict | None]] = []
    for eid, eng in state.engines.items():
        if (eid in ctx.engines_recent and eng.last_running > 0 and eng.last_gen == 0
                and eng.last_ts is not None and now - eng.last_ts > t.engine_hung_silent_s and latest
                and latest - eng.last_ts > t.engine_hung_behind_s):
            out.append((eid, _own_gpus(ctx, eid)))
    return out


def _own_gpus(ctx: Context, eid: str) -> dict | None:
    """The polls of the silent engine's own GPU host since its 0.0 line: pinned when every GPU read at least
    `spin_util_pct` on each of at least `engine_hung_pinned_polls` polls, idle when none read above
    `gpu_idle_util_pct`. A step stuck in a collective or a kernel keeps its GPUs at full utilisation (NCCL spins
    waiting for a peer: vllm-project/vllm#14449 'hangs with both GPUs at max utilization', vllm-project/vllm#8087
    'GPU-Util 100%' while stuck); an engine with no step to run leaves them at 0 %. None when the host is unknown,
    not an engine-only host (a colocated trainer computes on the same GPUs), another engine on it logged since
    (its work would explain the utilisation), or no poll came since; engines whose host is unknown are not
    counted as its neighbours. Not while the trainer is in a weight sync (a broadcast busies the engines' GPUs)."""
    state, t = ctx.state, ctx.t
    eng = state.engines[eid]
    if not eng.host or eng.last_ts is None or state.trainer.in_weight_sync_since is not None:
        return None
    hosts = [h for h, gh in state.gpus.items() if gh.role == "engine" and _same_host(h, eng.host)]
    if len(hosts) != 1:
        return None
    host = hosts[0]
    if any(e is not eng and e.host and _same_host(host, e.host) and e.last_ts is not None and e.last_ts > eng.last_ts
           for e in state.engines.values()):
        return None
    polls = [(ts, rs) for ts, rs in state.gpus[host].polls if ts > eng.last_ts]
    utils = [r[1] for _, rs in polls for r in rs if r[1] is not None]
    if not polls or not utils:
        return None
    powers = [r[4] for _, rs in polls for r in rs if r[4] is not None]
    return {"host": host, "polls": len(polls), "util_min": min(utils), "util_max": max(utils),
            "power_w": _median(powers) if powers else None,
            "pinned": len(polls) >= t.engine_hung_pinned_polls and min(utils) >= t.spin_util_pct
            and all(r[1] is not None for _, rs in polls for r in rs),
            "idle": max(utils) <= t.gpu_idle_util_pct}


def _same_host(a: str, b: str) -> bool:
    """One name contains the other as a whole name part ('node-1' in 'node-1.cluster.local' or 'slug-1-abc-0'), not
    as a prefix of a longer number: 'pod-1' is not 'pod-10', whose engine's lines would otherwise explain away (or
    be read as) pod-1's GPUs."""
    if a == b:
        return True
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    return bool(short) and re.search(rf"(?<![A-Za-z0-9]){re.escape(short)}(?![A-Za-z0-9])", long_) is not None


def _pinned_evidence(ctx: Context, gpu: dict) -> Ev:
    ts, rs = ctx.state.gpus[gpu["host"]].polls[-1]
    cells = ", ".join(f"GPU{i} {u:.0f}%" + (f" {w:.0f} W" if w is not None else "")
                      for i, u, _, _, w in rs[:4] if u is not None)
    return Ev(ts, f"gpu/{gpu['host']}", f"{gpu['host']}: {cells} ({gpu['polls']} polls since the engine's last stats "
                                        f"line, utilisation never below {gpu['util_min']:.0f}%)")


def _wait_evidence(ctx: Context, g: GateResult) -> None:
    """The newest wait line (the catalogue's engine_wait signals) as the stall's evidence."""
    for _, stat in ctx.signals("engine_wait")[:1]:
        g.evidence.extend(stat.evidence[-1:])


def resident_idle_engines(ctx: Context) -> list[tuple[str, Ev]]:
    """Engine GPU hosts holding memory at ~0 % util across polls with no stats line ever, while others generate."""
    state, t = ctx.state, ctx.t
    if not ctx.engines_generating or state.trainer.in_weight_sync_since is not None:
        return []
    hosts_with_stats = {eng.host for eng in state.engines.values() if eng.host}
    if any(not state.engines[eid].host for eid in ctx.engines_recent if eid in state.engines):
        # Some engines' hosts are unknown, so no GPU host can be shown statless; only a count short of
        # the declared engines can say one is missing.
        expected = (ctx.spec.get("geometry") or {}).get("num_inference_engines")
        if not expected or len(ctx.engines_recent) >= expected:
            return []
    out = []
    for host, gh in sorted(state.gpus.items()):
        if gh.role not in ("engine", "mixed") or len(gh.polls) < t.gpu_idle_polls + 1:
            continue
        if any(host == h or host in h or h in host for h in hosts_with_stats):
            continue
        polls = gh.polls[-(t.gpu_idle_polls + 1):]
        utils = [r[1] for _, rs in polls for r in rs if r[1] is not None]
        mems = [(r[2], r[3]) for _, rs in polls for r in rs if r[2] is not None and r[3]]
        if not utils or max(utils) > t.gpu_engine_idle_util_pct or not mems:
            continue
        if statistics.median(m / tot for m, tot in mems) <= t.gpu_resident_mem_ratio:
            continue
        ts = polls[-1][0]
        out.append((host, Ev(ts, f"gpu/{host}", f"engine pod {host}: GPUs at {max(utils):.0f}% util across "
                                                f"{len(polls)} polls with "
                                                f"{statistics.median(m for m, _ in mems) / 1024:.0f} "
                                                f"GiB resident, and no engine stats line from it since start-up")))
    return out


def _gpu_view(ctx: Context, g: GateResult) -> GateResult:
    """No engine stats: judge from GPU polls, utilisation read together with power."""
    state, now, t = ctx.state, ctx.now, ctx.t
    idle_engine_hosts, busy = [], []
    for host, gh in sorted(state.gpus.items()):
        if not gh.polls or now - gh.polls[-1][0] > t.gpu_poll_fresh_s:
            continue
        utils = [u for _, rs in gh.polls[-3:] for (_, u, _, _, _) in rs if u is not None]
        if not utils:
            continue
        if (gh.role in ("engine", "mixed") and len(gh.polls) >= t.gpu_idle_polls
                and max(utils) <= t.gpu_engine_idle_util_pct):
            idle_engine_hosts.append(host)
        elif max(utils) > t.gpu_idle_util_pct:
            busy.append(host)
    if idle_engine_hosts and state.trainer.in_weight_sync_since is None:
        warm = _warming_up(ctx, idle_engine_hosts)
        if warm is not None:
            # bring-up, not an engine that should be generating: the seed's early-bring-up NO-KILL
            g.status, g.code = "UNKNOWN", Code.ENGINES_WARMING_UP
            g.facts.update(hosts=idle_engine_hosts, since_s=now - warm.first_ts if warm.first_ts else None,
                           last_s=now - warm.last_ts if warm.last_ts else None)
            g.evidence.extend(warm.evidence[-1:])
            g.watch.append(("engine_warmup", {"fresh_s": t.engine_warmup_fresh_s}))
            return g
        g.status, g.escalate, g.code = "UNKNOWN", True, Code.ENGINE_GPUS_IDLE
        g.facts["hosts"] = idle_engine_hosts
        g.watch.append(("engine_stats", {}))
        return g
    slow = fail_slow(ctx)
    if slow:
        return fail_slow_gate(g, slow)
    if busy:
        g.status, g.code = "PASS", Code.GPUS_BUSY
        g.facts["hosts"] = busy
        return g
    g.status, g.code = "UNKNOWN", Code.B_NO_VIEW
    return g


def _warming_up(ctx: Context, hosts: list[str]) -> SignalStat | None:
    """The newest engine warm-up signal seen within `engine_warmup_fresh_s`, if it explains every idle host in
    `hosts`; None when an engine said it was ready after it (the warm-up is over) or some idle host is unexplained.

    A host is explained by a warm-up line of its own that recent with no ready line of its own since, or by any
    recent warm-up line from no known host (as with one engine, it may be that host's). Another engine's warm-up
    (a replacement loading its weights) says nothing of an engine that was ready and sits idle."""
    since = ctx.now - ctx.t.engine_warmup_fresh_s
    warm = [stat for _, stat in ctx.signals("engine_warmup", since=since) if stat.last_ts is not None]
    if not warm:
        return None
    newest = max(warm, key=lambda s: s.last_ts or 0.0)
    ready = [stat.last_ts for _, stat in ctx.signals("engine_up") if stat.last_ts is not None]
    if ready and max(ready) > (newest.last_ts or 0.0):
        return None
    phases = ctx.state.engine_phase
    anon = phases.get("", (None, None))[0]
    if anon is not None and anon >= since:
        return newest
    for host in hosts:
        if not any(w is not None and w >= since and (up is None or up < w) and _same_host(key, host)
                   for key, (w, up) in phases.items() if key):
            return None
    return newest


def fail_slow(ctx: Context) -> list[tuple[str, dict]]:
    """Sustained degradation against the job's own recent median, plus training-dynamics alarms.

    Only sustained patterns count: three steps or three 5-minute buckets in a row, or the last two readings.
    """
    state, t = ctx.state, ctx.t
    out: list[tuple[str, dict]] = []
    d = state.trainer.step_durations
    if len(d) >= 6:
        base = statistics.median(d[-11:-3])
        if base > 0 and all(x >= base / t.slow_ratio for x in d[-3:]):
            out.append(("step_rate_down", {"recent": list(d[-3:]), "base": base}))
    hist = [h for h in state.gen_history if h[2] > 0]
    if len(hist) >= 8:
        base = statistics.median(h[1] for h in hist[-11:-3])
        if base > 0 and all(h[1] < t.slow_ratio * base for h in hist[-3:]):
            out.append(("generation_down", {"recent": [h[1] for h in hist[-3:]], "base": base}))
    gn = state.metrics.grad_norm
    if len(gn) >= 6:
        base = statistics.median(v for _, v in gn[:-2])
        if base > 0 and all(v > t.grad_explosion_ratio * base and v > 1.0 for _, v in gn[-2:]):
            out.append(("grad_explosion", {"recent": [gn[-2][1], gn[-1][1]], "base": base}))
    e = state.metrics.entropy
    if len(e) >= 6:
        base = statistics.median(v for _, v in e[: len(e) // 2])
        if base > 0 and all(v < t.entropy_collapse_ratio * base for _, v in e[-3:]):
            out.append(("entropy_collapse", {"recent": [e[-1][1]], "base": base}))
    return out


_SLOW_FAMILY = {"step_rate_down": "progress_log", "generation_down": "engine_throughput",
                "grad_explosion": "training_dynamics", "entropy_collapse": "training_dynamics"}


def fail_slow_gate(g: GateResult, slow: list[tuple[str, dict]]) -> GateResult:
    g.status, g.code, g.cause = "FAIL", Code.FAIL_SLOW, "fail_slow"
    for kind, facts in slow:
        g.add(Code.SLOW_SIGNAL, _SLOW_FAMILY[kind], kind=kind, **facts)
    g.facts["slow"] = slow
    return g


def _flat(per: list[_EngineRow], rise_ratio: float) -> bool:
    """Throughput not rising over the window on every starving engine."""
    for p in per:
        window = p[6]
        half = len(window) // 2
        if half < 2:
            return False
        early = statistics.median(s[1] for s in window[:half])
        late = statistics.median(s[1] for s in window[half:])
        if late > early * rise_ratio:
            return False
    return True


def engine_evidence(state: JobHealth, g: GateResult, engine_ids: list[str]) -> None:
    stat = state.signals.get("vllm_stats")
    if not stat:
        return
    g.evidence.extend(stat.evidence[-2:])
    for eid in engine_ids[:3]:
        eng = state.engines.get(eid)
        if eng and eng.samples:
            s = eng.samples[-1]
            g.evidence.append(Ev(s[0], eid, f"generation {s[1]:,.1f} tokens/s, prompt {s[2]:,.1f} tokens/s, "
                                            f"Running {s[3]:.0f} reqs, Waiting {s[4]:.0f} reqs, KV cache {s[5]:.1f}% "
                                            f"(1-min mean of {s[6]} stats lines)"))


