"""The deep probe's gates, judged from folded state at a given `now`.

Gate A: liveness (TERMINAL / WEDGED / ALIVE / UNKNOWN). Gate B: resources. Gate C: rollouts.
Restart-burn: attempts burned and whether they failed the same way. Each gate returns its
status, a one-line summary, evidence, and the independent signals behind a FAIL, so the
verdict rules can insist on two signals before recommending a KILL.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime

from rlhealth.agents import roles
from rlhealth.agents.ingest import INFRA_EXCEPTIONS, TRANSIENT_CLASSES, VERIFIER_EXCEPTIONS, failure_class_of
from rlhealth.agents.state import Ev, JobHealth, TracebackRec
from rlhealth.agents.throughput import Floor, ThroughputTable
from rlhealth.agents.tracebacks import fingerprint

HANG_SIGNALS = {
    "nccl_watchdog_stuck": "NCCL watchdog stuck",
    "nccl_watchdog_timeout": "NCCL collective timeout",
    "nccl_detected_by_watchdog": "NCCL error detected by watchdog",
    "dist_backend_error": "DistBackendError",
    "nccl_heartbeat": "NCCL heartbeat monitor",
    "rpc_timeout": "engine RPC timeout",
    "engine_dead": "EngineDeadError",
    "fatal_abort": "Fatal Python error: Aborted",
    "signal_kill": "process killed by signal",
}
RAY_DEATH_SIGNALS = {
    "ray_worker_died": "Ray worker died (SYSTEM_ERROR / connection error / End of file)",
    "ray_actor_died": "Ray actor died",
    "raylet_died": "raylet died",
}
OOM_SIGNALS = {"cuda_oom": "CUDA out of memory", "host_oom": "host OOM kill", "oom_killed": "OOMKilled"}
STALE_VIEW_S = 1800.0  # no event of any kind (state polls included) for this long: the monitor is blind


@dataclass
class GateResult:
    status: str = "UNKNOWN"  # PASS | FAIL | UNKNOWN
    summary: str = ""
    evidence: list[Ev] = field(default_factory=list)
    signals: list[str] = field(default_factory=list)  # independent signals behind a FAIL
    cause: str | None = None  # key into the next-steps catalogue
    cause_detail: str = ""
    escalate: bool = False
    watch: list[str] = field(default_factory=list)  # what to watch next (NO-KILL next steps)
    job_status: str | None = None  # gate A only
    transient: bool | None = None


@dataclass
class RestartResult:
    burned: int | None = None
    max: int | None = None
    same_failure: bool | None = None
    summary: str = ""
    failure_class: str | None = None
    evidence: list[Ev] = field(default_factory=list)
    current_attempt_dead: bool = False


def _fmt_age(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _since(now: float, ts: float | None) -> float | None:
    return None if ts is None else now - ts


# --------------------------------------------------------------------------- shared derivations


@dataclass
class Context:
    """Derived facts several gates share, computed once per judgement."""

    now: float
    state: JobHealth
    cadence_s: float | None
    cadence_source: str
    trainer_stale: bool
    trainer_since_s: float | None
    stale_threshold_s: float
    open_phase: tuple[str, float, float | None] | None  # (name, running for s, longest seen s)
    current_attempt: int | None
    fatal_tb: TracebackRec | None  # a job-fatal traceback after which the trainer did not progress
    engines_recent: dict[str, list[tuple]]  # engine id -> recent buckets
    engines_generating: bool
    latest_engine_ts: float | None
    floor: Floor | None
    spec: dict
    terminal: bool
    blind: str | None  # why the monitor itself cannot see (shipper silent), if so


def build_context(state: JobHealth, now_dt: datetime, table: ThroughputTable) -> Context:
    now = now_dt.timestamp()
    spec = state.spec or {}
    tr = state.trainer
    cadence, source = _cadence(state, spec)
    since = _since(now, tr.last_progress_ts)
    threshold = max(2.0 * cadence, cadence + 900.0, 1200.0) if cadence else 3600.0
    open_phase = None
    if tr.open_timers:
        name, started = max(tr.open_timers.items(), key=lambda kv: kv[1])
        # The innermost (latest-started) open timer is what the trainer is doing now.
        open_phase = (name, now - started, tr.phase_max_s.get(name))
    stale = False
    if since is not None:
        stale = since > threshold
        if open_phase and open_phase[2]:
            # A phase running far beyond its own longest duration is stale even inside a long step.
            stale = stale or (open_phase[1] > max(3.0 * open_phase[2], open_phase[2] + 900.0)
                              and since > max(open_phase[2] + 900.0, 1200.0))
    sc = state.sched
    # "failed/killed/absent, or 0 pods": a scheduler view with no pods left (and not waiting to start) is terminal.
    terminal = sc.state in ("failed", "killed", "succeeded") or (sc.state not in (None, "pending") and sc.pods == 0)
    current_attempt = sc.attempt
    fatal_tb = None
    for tb in reversed(state.tracebacks):
        if not tb.fatal:
            continue
        if current_attempt is not None and tb.attempt is not None and tb.attempt != current_attempt:
            continue
        if tr.last_progress_ts is None or tb.ts is None or tr.last_progress_ts < tb.ts + 30.0:
            fatal_tb = tb
        break
    latest_engine_ts = max((e.last_ts for e in state.engines.values() if e.last_ts is not None), default=None)
    engines_recent: dict[str, list[tuple]] = {}
    if latest_engine_ts is not None:
        for eid, eng in state.engines.items():
            if eng.last_ts is None or eng.last_ts < latest_engine_ts - 600.0:
                continue  # a respawned engine's ghost
            window = [s for s in eng.samples if s[0] >= latest_engine_ts - 1800.0]
            if window:
                engines_recent[eid] = window
        # A single stray line (a rotated log cut mid-line loses its prefix) is not an engine.
        if any(sum(s[6] for s in w) >= 3 for w in engines_recent.values()):
            engines_recent = {k: w for k, w in engines_recent.items() if sum(s[6] for s in w) >= 2}
    engines_generating = bool(latest_engine_ts is not None and now - latest_engine_ts < 600.0 and any(
        s[1] > 0 for w in engines_recent.values() for s in w[-3:]))
    model = spec.get("model") or {}
    hardware = spec.get("hardware") or {}
    active = model.get("active_params_b") or model.get("params_b")
    floor = table.floor(active, hardware.get("gpu"))
    blind = _blindness(state, now)
    return Context(now, state, cadence, source, stale, since, threshold, open_phase, current_attempt, fatal_tb,
                   engines_recent, engines_generating, latest_engine_ts, floor, spec, terminal, blind)


def _cadence(state: JobHealth, spec: dict) -> tuple[float | None, str]:
    tr = state.trainer
    durations = list(tr.step_durations)
    if len(durations) < 2 and len(tr.step_ts) >= 3:
        pts = sorted(tr.step_ts)
        durations = [b[0] - a[0] for a, b in zip(pts, pts[1:]) if b[1] > a[1] and b[0] > a[0]]
    prior = spec.get("expected_step_s")
    if len(durations) >= 2:
        learned = statistics.median(durations[-8:])
        return learned, f"learned from {len(durations)} steps"
    if durations and prior:
        return max(durations[-1], float(prior)), "spec + 1 observed step"
    if prior:
        return float(prior), "spec expected_step_s"
    if durations:
        return durations[-1], "1 observed step"
    return None, "unknown"


def _blindness(state: JobHealth, now: float) -> str | None:
    """A shipper that stopped heartbeating means our silence, not the job's."""
    silent = [sid for sid, (ts, interval, stopping) in state.shippers.items()
              if not stopping and now - ts > max(3.0 * interval, 90.0)]
    if silent and len(silent) == len(state.shippers):
        return f"shipper(s) {', '.join(sorted(silent)[:3])} stopped heartbeating"
    return None


def _latest_signal(state: JobHealth, names, attempt: int | None = None, since: float | None = None):
    """(signal, stat) pairs seen (in `attempt` when given, after `since` when given), newest first."""
    out = []
    for name in names:
        stat = state.signals.get(name)
        if stat is None or stat.count == 0:
            continue
        if attempt is not None and stat.attempts and attempt not in stat.attempts:
            continue
        if since is not None and (stat.last_ts is None or stat.last_ts < since):
            continue
        out.append((name, stat))
    out.sort(key=lambda x: x[1].last_ts or 0.0, reverse=True)
    return out


def _policy_gpu_idle(state: JobHealth) -> tuple[bool, list[Ev], str]:
    """Policy GPUs with memory resident but ~0% util in every recent poll."""
    idle_hosts, evidence = [], []
    for host, gh in state.gpus.items():
        if gh.role != "policy" or len(gh.polls) < 3:
            continue
        recent = gh.polls[-3:]
        utils = [u for _, rs in recent for (_, u, mem, tot, _) in rs if u is not None]
        mems = [(mem, tot) for _, rs in recent for (_, u, mem, tot, _) in rs if mem is not None and tot]
        if utils and max(utils) <= 5.0 and mems and statistics.median(m / t for m, t in mems) > 0.1:
            idle_hosts.append(host)
            ts = recent[-1][0]
            evidence.append(Ev(ts, f"gpu/{host}", f"policy pod {host}: {len(recent[-1][1])} GPUs at "
                                                   f"{max(utils):.0f}% util (max over last 3 polls) with "
                                                   f"{statistics.median(m for m, _ in mems) / 1024:.0f} GiB resident"))
    if idle_hosts:
        return True, evidence, f"policy rank GPUs at 0 % util with memory resident ({', '.join(idle_hosts[:2])})"
    return False, [], ""


# --------------------------------------------------------------------------- gate A


def gate_a(ctx: Context, restarts: RestartResult) -> GateResult:
    state, now = ctx.state, ctx.now
    sc = state.sched
    tr = state.trainer
    g = GateResult()
    if ctx.blind:
        g.status, g.job_status, g.escalate = "UNKNOWN", "UNKNOWN", True
        g.summary = f"monitor is blind: {ctx.blind}; the job's silence cannot be judged"
        g.watch.append("restore the shipper; silence caused by the monitor is never a KILL")
        return g
    poll_age = _since(now, sc.last_ts)
    poll_txt = "no state poll"
    if sc.state:
        poll_txt = f"state poll '{sc.state}' {_fmt_age(poll_age or 0)} ago" + "".join(
            f", {name}={value}" for name, value in (("pods", sc.pods), ("failure_count", sc.failure_count))
            if value is not None)

    if ctx.terminal:
        g.status, g.job_status = ("PASS" if sc.state == "succeeded" else "FAIL"), "TERMINAL"
        root, root_ev = _root_cause(state)
        klass = failure_class_of(root)
        transient = klass in TRANSIENT_CLASSES
        deterministic = restarts.same_failure is True
        g.transient = transient and not deterministic
        nature = ("deterministic (the same failure on every attempt)" if deterministic
                  else "transient (relaunch-worthy)" if transient else "not shown to be transient")
        g.summary = f"TERMINAL: {poll_txt}; root cause: {root or 'no traceback captured'} — {nature}"
        g.evidence.extend(root_ev)
        g.cause = "terminal"
        g.cause_detail = root or ""
        return g

    newest = max((t for t in (state.last_event_ts, sc.last_ts) if t is not None), default=None)
    if newest is not None and now - newest > STALE_VIEW_S:
        # Even the scheduler's polls stopped: that is our blindness (a dead poller or shipper), not
        # evidence about the job. Say so and escalate; never KILL on it.
        g.status, g.job_status, g.escalate = "UNKNOWN", "UNKNOWN", True
        g.summary = (f"no data at all for {_fmt_age(now - newest)} (newest event {_iso(newest)}; {poll_txt}): the "
                     f"monitor cannot see the job, which is not the same as the job being silent")
        g.watch.append("restore the state poller / shipper for this job, then re-probe")
        return g

    hang = _latest_signal(state, HANG_SIGNALS, ctx.current_attempt)
    ray_deaths = _latest_signal(state, RAY_DEATH_SIGNALS, ctx.current_attempt)
    freshness = _freshness_text(ctx)

    if ctx.fatal_tb is not None and sc.state != "pending":
        tb = ctx.fatal_tb
        g.status, g.job_status = "FAIL", "WEDGED"
        g.summary = (f"{poll_txt}, but the trainer died at {_iso(tb.ts)} with {tb.exc_type}: {tb.message[:160]} "
                     f"and has made no progress since ({_fmt_age(now - tb.ts) if tb.ts else '?'}); pods still hold "
                     f"their GPUs. {freshness}")
        g.signals = ["fatal traceback in the trainer", "no trainer progress after it"]
        g.evidence.append(Ev(tb.ts, tb.stream, tb.text, "traceback"))
        g.cause, g.cause_detail = tb.failure_class, f"{tb.exc_type}: {tb.message}"
        return g

    if sc.state == "pending":
        g.status, g.job_status = "UNKNOWN", "ALIVE"
        g.summary = f"{poll_txt}: waiting for admission/scheduling; nothing to judge yet"
        g.watch.append("the gang getting admitted (state → running) and the first log lines")
        return g

    if tr.last_progress_ts is None and not state.streams and sc.state is None:
        g.status, g.job_status, g.escalate = "UNKNOWN", "UNKNOWN", True
        g.summary = "no state poll and no logs: blind, which is never healthy"
        return g

    loop = _crash_loop(ctx)
    if loop is not None:
        g.status, g.job_status = "FAIL", "WEDGED"
        g.summary = f"{poll_txt}; {loop}. {freshness}"
        g.signals = ["pods crash-looping", "no training progress across restarts"]
        ev = state.sched.pod_reason_examples.get("CrashLoopBackOff") or next(iter(state.sched.pod_reason_examples.values()), None)
        if ev is not None:
            g.evidence.append(ev)
        g.cause = "crash_loop"
        return g

    hang_recent = [(n, s) for n, s in hang if tr.last_progress_ts is None or (s.last_ts or 0) >= tr.last_progress_ts - 60]
    death_recent = [(n, s) for n, s in ray_deaths if tr.last_progress_ts is None or (s.last_ts or 0) >= tr.last_progress_ts - 60]
    if ctx.trainer_stale and (hang_recent or death_recent):
        g.status, g.job_status = "FAIL", "WEDGED"
        stale_txt = (f"trainer progress frozen: last '{_short(tr.last_progress_text)}' "
                     f"{_fmt_age(ctx.trainer_since_s or 0)} ago vs a cadence of ~{_fmt_age(ctx.cadence_s or 0)} "
                     f"({ctx.cadence_source})")
        parts = [stale_txt]
        if hang_recent:
            g.signals.extend(dict.fromkeys(HANG_SIGNALS[n] for n, _ in hang_recent[:3]))
            parts.append(" + ".join(sorted({HANG_SIGNALS[n] for n, _ in hang_recent})))
            for n, s in hang_recent[:3]:
                g.evidence.extend(s.evidence[:2])
        if death_recent:
            g.signals.append("Ray worker death")
            parts.append(RAY_DEATH_SIGNALS[death_recent[0][0]])
            for n, s in death_recent[:2]:
                g.evidence.extend(s.evidence[:2])
        g.signals.append("trainer progress frozen beyond its cadence")
        idle, idle_ev, idle_txt = _policy_gpu_idle(state)
        if idle:
            g.signals.append("policy GPUs idle")
            parts.append(idle_txt)
            g.evidence.extend(idle_ev)
        deception = ""
        if ctx.engines_generating:
            deception = (" Colocated-engine deception: engines keep generating and the state poll reads running, "
                         "but the policy mesh is hung.")
        g.summary = f"WEDGED: {poll_txt}; " + "; ".join(parts) + "." + deception
        g.evidence.append(Ev(tr.last_progress_ts, tr.last_progress_source or "trainer",
                             f"trainer last progress {_fmt_age(ctx.trainer_since_s or 0)} before now (stale, "
                             f"cadence ~{_fmt_age(ctx.cadence_s or 0)}): {tr.last_progress_text[:300]}"))
        g.cause = "nccl_hang" if hang_recent else "ray_death"
        return g

    if ctx.trainer_stale:
        g.status, g.job_status, g.escalate = "UNKNOWN", "ALIVE", True
        g.summary = (f"{poll_txt}; trainer silent for {_fmt_age(ctx.trainer_since_s or 0)} (cadence "
                     f"~{_fmt_age(ctx.cadence_s or 0)}, {ctx.cadence_source}) with no hang signature yet")
        g.watch.append("an NCCL watchdog line (fires ~30 min into a hung collective), a Ray worker death, or the "
                       "step counter moving again")
        g.evidence.append(Ev(tr.last_progress_ts, tr.last_progress_source or "trainer",
                             f"trainer last progress: {tr.last_progress_text[:300]}"))
        return g

    # Alive. Note recovered hang signatures so the supervisor sees them.
    g.status, g.job_status = "PASS", "ALIVE"
    if tr.last_progress_ts is None:
        newest = max((s.last_ts for s in state.streams.values() if s.last_ts is not None), default=None)
        if newest is None or now - newest > 1800:
            g.status, g.escalate = "UNKNOWN", True
            g.summary = f"{poll_txt}; no trainer progress lines recognised and logs are not fresh"
            return g
        g.status = "UNKNOWN" if not ctx.engines_generating else "PASS"
        if sc.state != "running" and not ctx.engines_generating:
            g.job_status = "UNKNOWN"  # fresh bytes alone prove nothing: no scheduler view, no recognised progress
        g.summary = f"{poll_txt}; logs fresh but no trainer progress lines recognised yet. {freshness}"
        g.watch.append("the first training step")
        return g
    g.summary = f"ALIVE: {poll_txt}; {freshness}"
    if hang or ray_deaths:
        names = ", ".join(sorted({HANG_SIGNALS.get(n) or RAY_DEATH_SIGNALS.get(n, n) for n, _ in hang + ray_deaths}))
        g.summary += f"; earlier {names} but the trainer advanced after it"
        g.watch.append(f"recurrence of {names}")
    g.evidence.append(Ev(tr.last_progress_ts, tr.last_progress_source or "trainer",
                         f"trainer step progress {_fmt_age(ctx.trainer_since_s or 0)} ago: {tr.last_progress_text[:300]}"))
    g.watch.append(f"trainer progress going silent beyond ~{_fmt_age(ctx.stale_threshold_s)} together with an NCCL "
                   "watchdog or Ray worker death (→ WEDGED, KILL)")
    return g


def _crash_loop(ctx: Context) -> str | None:
    """Pods restarting again and again while training never gets past where it was: a crash loop."""
    sc = ctx.state.sched
    hist = [h for h in sc.restart_history if h[0] >= ctx.now - 3600]
    recent_backoff = sc.crashloop_ts is not None and sc.crashloop_ts >= ctx.now - 3600 and sc.max_pod_restarts >= 3
    looping = recent_backoff or (len(hist) >= 2 and hist[-1][1] - hist[0][1] >= 2)
    if not looping or not sc.restart_history:
        return None
    before, now_step = sc.step_at_first_restart, ctx.state.trainer.last_step
    if before is not None and now_step is not None and now_step > before:
        return None  # restarts, but training moves on: not a loop
    first_ts = sc.restart_history[0][0]
    return (f"crash loop: pods restarted {sc.max_pod_restarts} times"
            + (" (CrashLoopBackOff within the hour)" if recent_backoff else "")
            + (f", training stuck at step {now_step}" if now_step is not None else ", no training progress")
            + f" since the first restart {_fmt_age(ctx.now - first_ts)} ago")


def _freshness_text(ctx: Context) -> str:
    state, now = ctx.state, ctx.now
    parts = []
    tr = state.trainer
    if tr.last_progress_ts is not None:
        step = f" (step {tr.last_step})" if tr.last_step is not None else ""
        cad = f", cadence ~{_fmt_age(ctx.cadence_s)}" if ctx.cadence_s else ""
        parts.append(f"trainer step progress {_fmt_age(now - tr.last_progress_ts)} ago{step}{cad}")
    for role in (roles.ENGINE, roles.ROLLOUT, roles.RAY):
        ts = state.role_last_ts.get(role)
        if ts is not None:
            parts.append(f"{role} logs {_fmt_age(now - ts)} ago")
    return "; ".join(parts)


def _root_cause(state: JobHealth) -> tuple[str, list[Ev]]:
    evidence: list[Ev] = []
    tb = next((t for t in reversed(state.tracebacks) if t.fatal), None) or (
        state.tracebacks[-1] if state.tracebacks else None)
    text = ""
    if tb is not None:
        text = f"{tb.exc_type}: {tb.message}"
        evidence.append(Ev(tb.ts, tb.stream, tb.text, "traceback"))
    errors = [a for a in state.sched.attempts if a[4]]
    if errors:
        last = errors[-1]
        if not text:
            text = last[4]
        evidence.append(Ev(last[3], "state poll", f"attempt {last[0]} {last[1]} (exit {last[2]}): {last[4]}"))
    if not text:
        for name in ("cuda_oom", "oom_killed", "host_oom", "image_pull_error", "crash_loop", "engine_dead"):
            stat = state.signals.get(name)
            if stat and stat.evidence:
                text = stat.evidence[-1].text
                evidence.append(stat.evidence[-1])
                break
    return text, evidence


def _short(text: str, n: int = 140) -> str:
    # Drop the timestamp/prefix noise for the summary; the full line is in the evidence.
    for marker in (" - ", "] "):
        if marker in text:
            text = text.rsplit(marker, 1)[-1]
            break
    return text[:n]


def _iso(ts: float | None) -> str:
    if ts is None:
        return "?"
    return datetime.utcfromtimestamp(ts).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- gate B


def gate_b(ctx: Context, a: GateResult) -> GateResult:
    state, now = ctx.state, ctx.now
    g = GateResult()
    attempt = ctx.current_attempt
    eager = state.enforce_eager
    if eager is None and state.cuda_graphs_seen:
        eager = False  # engines logged CUDA-graph capture: graphs are on

    # Training-stage OOM in the current attempt (or the last one, for a terminal job).
    ooms = _latest_signal(state, OOM_SIGNALS, attempt)
    oom_reasons = {r: n for r, n in state.sched.pod_reasons.items() if r == "OOMKilled"}
    if ooms or oom_reasons:
        g.status = "FAIL"
        names = [OOM_SIGNALS[n] for n, _ in ooms] + (["pod OOMKilled"] if oom_reasons else [])
        g.signals = sorted(set(names))
        for _, stat in ooms[:2]:
            g.evidence.extend(stat.evidence[:2])
        if oom_reasons:
            g.evidence.append(state.sched.pod_reason_examples["OOMKilled"])
        tried = ""
        for _, stat in ooms:
            for e in stat.evidence:
                if "Tried to allocate" in e.text:
                    tried = e.text[e.text.index("Tried to allocate"):][:60]
                    break
        g.summary = (f"training-stage OOM: {', '.join(g.signals)}" + (f" ({tried})" if tried else "")
                     + f", seen {sum(s.count for _, s in ooms)} time(s) in attempt {attempt if attempt is not None else '?'}")
        g.cause = "cuda_oom" if any(n == "cuda_oom" for n, _ in ooms) else "host_oom"
        if ctx.fatal_tb is not None and failure_class_of(ctx.fatal_tb.exc_type + ctx.fatal_tb.message) == "cuda_oom":
            g.signals.append("fatal OOM traceback")
        return g

    if ctx.terminal:
        g.status = "UNKNOWN"
        g.summary = "job is terminal: GPU polls and engine stats are historical" + (
            f"; last engine stats {_fmt_age(now - ctx.latest_engine_ts)} ago" if ctx.latest_engine_ts else "")
        return g

    # Non-finite loss is a training-stage failure when it keeps happening.
    if state.metrics.nonfinite >= 3:
        g.status = "FAIL"
        g.signals = ["non-finite loss/grad-norm", f"{state.metrics.nonfinite} occurrences"]
        g.summary = f"training produced NaN/Inf loss or grad norm {state.metrics.nonfinite} times"
        if state.metrics.nonfinite_ev:
            g.evidence.append(state.metrics.nonfinite_ev)
        g.cause = "nonfinite"
        return g

    floor = ctx.floor
    gpu = (ctx.spec.get("hardware") or {}).get("gpu") or "unknown GPU"
    eager_txt = {True: "enforce_eager=true", False: "enforce_eager=false", None: "enforce_eager unknown"}[eager]
    engines = ctx.engines_recent
    if engines:
        per = []
        for eid, window in engines.items():
            gen = statistics.median(s[1] for s in window)
            run = statistics.median(s[3] for s in window)
            wait = statistics.median(s[4] for s in window)
            span = window[-1][0] - window[0][0]
            starving = sum(1 for s in window if s[4] > max(2.0 * s[3], 4.0)) / len(window)
            per.append((eid, gen, run, wait, span, starving, window))
        agg_gen = sum(p[1] for p in per)
        agg_run = sum(p[2] for p in per)
        agg_wait = sum(p[3] for p in per)
        expected = None
        spec_geo = ctx.spec.get("geometry") or {}
        if spec_geo.get("num_inference_engines"):
            expected = spec_geo["num_inference_engines"]
        floor_txt = f"floor {floor.awful_tps:,.0f} tok/s per busy engine ({floor.label}, {gpu})" if floor else \
            "no throughput floor (model size unknown)"
        shape = (f"{len(per)} engine(s){f' of {expected} expected' if expected else ''} reporting: aggregate "
                 f"generation throughput {agg_gen:,.0f} tok/s, Running {agg_run:.0f}, Waiting {agg_wait:.0f} "
                 f"(medians over the last {_fmt_age(max(p[4] for p in per) + 60)}); {floor_txt}; {eager_txt}")
        # Throughput-starvation wedge: Waiting >> Running persistently with flat / low throughput.
        starving = [p for p in per if p[5] >= 0.7 and p[4] >= 900 and p[3] > max(2 * p[2], 4)]
        floored = [p for p in per if floor and p[2] >= 1 and p[4] >= 600 and p[1] < floor.floor_for(p[2], p[3])]
        if starving and (not floor or any(p in floored for p in starving) or _flat(starving)):
            g.status = "FAIL"
            g.cause = "starvation"
            g.signals = ["Waiting >> Running persistently", "generation throughput flat/below floor"]
            pre = state.signals.get("vllm_preemption")
            kv = max((s[5] for p in starving for s in p[6]), default=0.0)
            extra = []
            if kv >= 95:
                g.signals.append("KV cache saturated")
                extra.append(f"KV cache up to {kv:.1f}%")
            if pre:
                extra.append("recurring preemptions")
            worst = max(starving, key=lambda p: p[3])
            g.summary = (f"throughput-starvation wedge on {len(starving)}/{len(per)} engine(s): Waiting "
                         f"{worst[3]:.0f} vs Running {worst[2]:.0f} for {_fmt_age(worst[4])}, generation "
                         f"{worst[1]:,.0f} tok/s" + (f" (below the {floor.floor_for(worst[2], worst[3]):,.0f} tok/s floor)"
                                                     if floor else "") + (", " + ", ".join(extra) if extra else "")
                         + f". {shape}")
            _engine_evidence(state, g, [p[0] for p in starving])
            return g
        if floored and len(floored) >= max(1, len(per) // 2):
            g.status = "FAIL"
            g.cause = "enforce_eager" if eager else "floored"
            g.signals = [f"throughput below floor on {len(floored)} engine(s)", "sustained with Running > 0"]
            if eager:
                g.signals.append("enforce_eager=true (CUDA graphs off)")
            worst = min(floored, key=lambda p: p[1])
            g.summary = (f"generation throughput floored: {worst[1]:,.0f} tok/s with Running {worst[2]:.0f} on "
                         f"{len(floored)}/{len(per)} engines for {_fmt_age(worst[4])}; {shape}")
            _engine_evidence(state, g, [p[0] for p in floored])
            return g
        hung = [eid for eid, eng in state.engines.items()
                if eid in engines and eng.last_running > 0 and eng.last_gen == 0 and eng.last_ts is not None
                and now - eng.last_ts > 300 and ctx.latest_engine_ts and ctx.latest_engine_ts - eng.last_ts > 120]
        if hung and len(hung) >= 1 and not a.job_status == "WEDGED":
            g.status = "FAIL"
            g.cause = "engine_hung"
            g.signals = ["engine reported 0 tok/s with requests Running", "engine stats stopped since"]
            g.summary = f"{len(hung)} engine(s) printed 0.0 tok/s with Running > 0 and then went silent; {shape}"
            _engine_evidence(state, g, hung)
            return g
        silent_for = now - ctx.latest_engine_ts if ctx.latest_engine_ts is not None else 0.0
        if silent_for > 900 or all(p[2] == 0 and p[3] == 0 and p[1] == 0 for p in per):
            # vLLM demotes idle intervals to DEBUG, so an idle engine goes quiet: no requests reach it.
            g.status = "UNKNOWN"
            if silent_for > 900:
                g.summary = (f"no vLLM stats for {_fmt_age(silent_for)}: engines idle or hung (vLLM logs idle "
                             f"intervals at DEBUG, and a hung engine goes quiet too); when last seen: {shape}")
            else:
                g.summary = (f"engines idle: no requests in flight (Running 0, Waiting 0); rollouts are not reaching "
                             f"the engines (see Gate C). {shape}")
            g.watch.append("vLLM stats lines with Running > 0 again once rollouts dispatch")
            _engine_evidence(state, g, [p[0] for p in per][:2])
            return g
        slow = fail_slow(state)
        if slow:
            _engine_evidence(state, g, [p[0] for p in per][:2])
            return _fail_slow_gate(g, slow, shape)
        g.status = "PASS"
        g.summary = f"engines generating: {shape}; no OOM"
        _engine_evidence(state, g, [p[0] for p in per][:2])
        if floor:
            g.watch.append(f"aggregate generation throughput falling below ~{floor.awful_tps:,.0f} tok/s per busy "
                           f"engine, or Waiting growing far above Running (→ starvation, KILL)")
        return g

    # No engine stats: fall back to the GPU view.
    idle_engine_hosts = []
    busy = []
    for host, gh in state.gpus.items():
        if not gh.polls or now - gh.polls[-1][0] > 1800:
            continue
        utils = [u for _, rs in gh.polls[-3:] for (_, u, _, _, _) in rs if u is not None]
        if not utils:
            continue
        if gh.role in ("engine", "mixed") and len(gh.polls) >= 3 and max(utils) <= 1.0:
            idle_engine_hosts.append(host)
        elif max(utils) > 5:
            busy.append(host)
    if idle_engine_hosts and state.trainer.in_weight_sync_since is None:
        g.status = "UNKNOWN"
        g.escalate = True
        g.summary = (f"engine GPUs on {', '.join(idle_engine_hosts[:2])} hold memory at ~0% util across 3 polls and no "
                     f"vLLM stats lines were seen: engines loaded but not generating?")
        g.watch.append("vLLM 'Avg generation throughput' lines on every engine")
        return g
    slow = fail_slow(state)
    if slow:
        return _fail_slow_gate(g, slow, "")
    if busy:
        g.status = "PASS"
        g.summary = f"no vLLM stats lines, but GPUs busy on {len(busy)} host(s); no OOM; {eager_txt}"
        return g
    g.status = "UNKNOWN"
    g.summary = "no engine stats and no recent GPU polls: resources cannot be judged"
    return g


def fail_slow(state: JobHealth) -> list[tuple[str, str, Ev | None]]:
    """Sustained degradation against the job's own recent median, plus training-dynamics alarms.

    Each item is (signal, description, evidence). Only sustained patterns count: three steps or
    three 5-minute buckets in a row, or the last two metric readings.
    """
    out: list[tuple[str, str, Ev | None]] = []
    d = state.trainer.step_durations
    if len(d) >= 6:
        base = statistics.median(d[-11:-3])
        recent = d[-3:]
        if base > 0 and all(x >= base / 0.75 for x in recent):
            out.append(("step rate down >= 25% for 3 steps",
                        f"last 3 steps took {', '.join(f'{x:.0f}' for x in recent)} s vs the job's median {base:.0f} s",
                        None))
    hist = [h for h in state.gen_history if h[2] > 0]
    if len(hist) >= 8:
        base = statistics.median(h[1] for h in hist[-11:-3])
        recent = hist[-3:]
        if base > 0 and all(h[1] < 0.75 * base for h in recent):
            out.append(("generation throughput down >= 25% for 15 min",
                        f"aggregate generation {', '.join(f'{h[1]:,.0f}' for h in recent)} tok/s over the last 15 min vs "
                        f"the job's median {base:,.0f} tok/s with requests running", None))
    g = state.metrics.grad_norm
    if len(g) >= 6:
        base = statistics.median(v for _, v in g[:-2])
        if base > 0 and all(v > 10 * base and v > 1.0 for _, v in g[-2:]):
            out.append(("grad-norm explosion", f"grad norm {g[-2][1]:.3g}, {g[-1][1]:.3g} vs median {base:.3g}", None))
    e = state.metrics.entropy
    if len(e) >= 6:
        base = statistics.median(v for _, v in e[: len(e) // 2])
        if base > 0 and all(v < 0.1 * base for _, v in e[-3:]):
            out.append(("entropy collapse", f"policy entropy {e[-1][1]:.3g} vs an early median {base:.3g}", None))
    return out


def _fail_slow_gate(g: GateResult, slow: list[tuple[str, str, Ev | None]], shape: str) -> GateResult:
    g.status = "FAIL"
    g.cause = "fail_slow"
    g.signals = [s for s, _, _ in slow]
    g.summary = "sustained degradation: " + "; ".join(f"{s} ({t})" for s, t, _ in slow) + (f". {shape}" if shape else "")
    g.evidence.extend(e for _, _, e in slow if e is not None)
    return g


def _flat(per) -> bool:
    """Throughput not rising over the window on every starving engine."""
    for p in per:
        window = p[6]
        half = len(window) // 2
        if half < 2:
            return False
        early = statistics.median(s[1] for s in window[:half])
        late = statistics.median(s[1] for s in window[half:])
        if late > early * 1.25:
            return False
    return True


def _engine_evidence(state: JobHealth, g: GateResult, engine_ids: list[str]) -> None:
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


# --------------------------------------------------------------------------- gate C


def gate_c(ctx: Context) -> GateResult:
    state, now = ctx.state, ctx.now
    t = state.trials
    g = GateResult()
    rollout = ctx.spec.get("rollout") or {}
    episode = float(rollout.get("expected_episode_s") or 1800.0)
    start = state.sched.first_running_ts or state.first_event_ts or now
    age = now - start
    eval_note = ""
    if state.eval_trials.completed or state.eval_trials.started:
        e = state.eval_trials
        eval_note = f"; eval trials kept apart: {e.completed} completed, {e.nonzero_rewards} with reward > 0"
    breakdown = state.signals.get("exception_breakdown")

    if t.started == 0 and t.completed == 0:
        batches = state.batch_progress
        if batches:
            ok = sum(b[1] for b in batches)
            total = sum(b[2] for b in batches)
            g.status = "UNKNOWN"
            g.summary = f"no trial directories captured; logs report {ok}/{total} successful in recent batches{eval_note}"
            if total >= 16 and ok == 0:
                g.escalate = True
            return g
        g.status = "UNKNOWN"
        g.summary = "no trial data (trace_jobs missing or empty)" + eval_note
        if ctx.terminal:
            g.summary += "; expected for a terminal job"
        return g

    rewards = [r for _, r in t.rewards]
    turns = t.turns
    avg_turns = statistics.mean(turns) if turns else None
    recent = sum(1 for ts in t.completed_ts if ts >= now - 3600)
    exc_total = sum(t.exc_types.values())
    infra = {k: v for k, v in t.exc_types.items() if k in INFRA_EXCEPTIONS or "Auth" in k or "Sandbox" in k}
    verifier = {k: v for k, v in t.exc_types.items() if k in VERIFIER_EXCEPTIONS}
    infra_n, verifier_n = sum(infra.values()), sum(verifier.values())
    mean_reward = statistics.mean(rewards) if rewards else None
    desc = (f"{t.started} trials started, {t.completed} completed ({recent} in the last hour), "
            + (f"mean reward {mean_reward:.2f}, {t.nonzero_rewards} with reward > 0" if rewards else "no rewards recorded")
            + (f", avg assistant turns {avg_turns:.1f}" if avg_turns is not None else "")
            + (f", exceptions: {_top(t.exc_types)}" if exc_total else ""))

    if t.completed == 0:
        overdue = age > 1.5 * episode + 900
        g.status = "UNKNOWN"
        g.escalate = overdue
        g.summary = (f"rollouts executing, 0 completed yet ({t.started} started, job running {_fmt_age(age)}, "
                     f"expected episode ~{_fmt_age(episode)}){eval_note}")
        g.watch.append("the first result.json files and their rewards")
        return g

    if t.completed >= 4 and infra_n / t.completed >= 0.8 and t.nonzero_rewards == 0:
        top = max(infra, key=infra.get)
        g.status = "FAIL"
        g.cause = "infra"
        g.cause_detail = top
        g.signals = [f"{infra_n}/{t.completed} completed trials ended in {top}", "no trial earned a reward > 0"]
        if avg_turns is not None and avg_turns < 0.5:
            g.signals.append("no agent turns (the environment never started)")
        if breakdown:
            g.signals.append("generator logs the same exception breakdown")
            g.evidence.extend(breakdown.evidence[-1:])
        g.evidence.append(t.exc_examples[top])
        batch = state.signals.get("batch_complete")
        if batch:
            g.evidence.extend(batch.evidence[-1:])
        g.summary = f"every finished trial is an infrastructure failure ({top}): {desc}{eval_note}"
        return g

    if t.nonzero_rewards == 0 and t.completed >= 8:
        samples = t.coherent_samples + t.incoherent_samples
        if samples and t.incoherent_samples / samples >= 0.5:
            g.status = "FAIL"
            g.cause = "incoherent"
            reasons = _top(t.incoherent_reasons)
            g.signals = ["all rewards zero", f"incoherent agent output ({reasons})"]
            g.evidence.extend(t.incoherent_examples[:3])
            g.summary = f"all-zero rewards with incoherent generations ({reasons}): {desc}"
            return g
        if verifier_n / t.completed >= 0.5:
            g.status = "FAIL"
            g.cause = "verifier"
            g.signals = ["all rewards zero", f"{verifier_n}/{t.completed} trials ended in a verifier error"]
            g.evidence.append(t.exc_examples[max(verifier, key=verifier.get)])
            g.summary = f"verifiers never return a score: {desc}"
            return g
        if avg_turns is not None and avg_turns <= 1.2 and len(turns) >= 8:
            g.status = "FAIL"
            g.cause = "broken_loop"
            g.signals = ["all rewards zero", f"average assistant turns {avg_turns:.1f} (agent stops after one move)"]
            g.summary = f"broken agent loop: {desc}"
            return g
        g.status = "UNKNOWN"
        g.escalate = True
        g.summary = f"all rewards zero but outputs look coherent and multi-turn (tasks hard or harness mis-set?): {desc}"
        g.watch.append("read several conversations; a first non-zero reward would settle it")
        return g

    timeouts = t.exc_types.get("AgentTimeoutError", 0)
    if t.completed >= 8 and timeouts / t.completed >= 0.5:
        g.status = "UNKNOWN"
        g.summary = (f"most trials end in AgentTimeoutError ({timeouts}/{t.completed}): a passthrough on its own, but "
                     f"dominating like this means rollouts are starved or episodes too long: {desc}{eval_note}")
        g.evidence.append(t.exc_examples["AgentTimeoutError"])
        g.watch.append("the AgentTimeoutError share falling as generation throughput recovers")
        return g
    g.status = "PASS"
    g.summary = f"trials completing with non-zero rewards: {desc}{eval_note}"
    if t.nonzero_rewards == 0:
        g.status = "UNKNOWN"
        g.summary = f"too few completed trials to judge rewards yet: {desc}{eval_note}"
    g.evidence.append(Ev(t.last_completed_ts, "trace_jobs", f"{t.completed} completed trials, reward mean "
                                                            f"{mean_reward if mean_reward is not None else float('nan'):.3f}, "
                                                            f"{t.nonzero_rewards} non-zero"))
    g.watch.append("the completion rate and the share of non-zero rewards (all-zero rewards or every trial "
                   "ending in an infrastructure exception → KILL)")
    return g


def _top(counts: dict[str, int], n: int = 3) -> str:
    return ", ".join(f"{k} ×{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:n])


# --------------------------------------------------------------------------- restarts


def restart_burn(ctx: Context) -> RestartResult:
    state = ctx.state
    sc = state.sched
    r = RestartResult()
    spec_max = (ctx.spec or {}).get("max_retries")
    r.max = sc.max_retries if sc.max_retries is not None else spec_max
    prior = [a for a in sc.attempts if sc.attempt is None or a[0] < sc.attempt or ctx.terminal]
    # A SLURM TIMEOUT leg followed by a running successor is a chain restart, not a burn.
    burned_prior = [a for a in prior if (a[1] or "").lower() not in ("timeout",) or ctx.terminal and a is prior[-1]]
    if sc.attempt is not None:
        timeouts = sum(1 for a in prior if (a[1] or "").lower() == "timeout" and a[0] < (sc.attempt or 0))
        r.burned = max(sc.attempt - timeouts, 0)
    elif prior:
        r.burned = len(burned_prior)
    elif sc.state is not None:
        r.burned = 0
    failures: list[tuple[str, str, int | None, Ev]] = []  # (class, fingerprint, attempt, evidence)
    if sc.attempt is None and not sc.attempts:
        # No scheduler view of attempts: the logs still tell them apart (pod generations, SLURM legs).
        by_attempt: dict[int, TracebackRec] = {}
        for t in state.tracebacks:
            if t.fatal and t.attempt is not None:
                by_attempt[t.attempt] = t
        if by_attempt:
            last = max(by_attempt)
            r.burned = last
            for att in sorted(by_attempt):
                if att < last or ctx.terminal:
                    t = by_attempt[att]
                    text = f"{t.exc_type}: {t.message}"
                    failures.append((failure_class_of(text), t.fingerprint, att,
                                     Ev(t.ts, t.stream, f"attempt {att}: {text}", "traceback")))
    for a in burned_prior:
        if (a[1] or "").lower() in ("timeout", "cancelled", "canceled", "killed", "preempted"):
            continue  # not a crash: a chain restart, a person's cancel, or the cluster's doing
        text = a[4] or ""
        klass = failure_class_of(text)
        if klass in ("other", "unknown"):
            # The scheduler only said "FAILED (exit 1)": the attempt's own traceback names the failure.
            tb = next((t for t in reversed(state.tracebacks) if t.attempt == a[0] and (t.fatal or t.role != "rollout")), None)
            if tb is not None:
                text = f"{tb.exc_type}: {tb.message}"
                klass = failure_class_of(text)
        exc, _, msg = text.partition(": ")
        failures.append((klass, fingerprint(exc, msg), a[0],
                         Ev(a[3], "state poll", f"attempt {a[0]} {a[1]} (exit {a[2]}): {text}")))
    dead_now = ctx.fatal_tb is not None and not ctx.terminal
    r.current_attempt_dead = dead_now
    if dead_now:
        tb = ctx.fatal_tb
        failures.append((failure_class_of(f"{tb.exc_type}: {tb.message}"), tb.fingerprint, tb.attempt,
                         Ev(tb.ts, tb.stream, f"attempt {tb.attempt}: {tb.exc_type}: {tb.message}", "traceback")))
    if not r.burned:
        r.same_failure = None
        r.summary = "none"
        return r
    r.evidence = [f[3] for f in failures][:4]
    classes = {f[0] for f in failures}
    if (dead_now or ctx.terminal) and len(failures) >= 2 and len(classes) == 1 and "unknown" not in classes:
        klass = failures[0][0]
        same_fp = len({f[1] for f in failures}) == 1
        r.same_failure = True
        r.failure_class = klass
        r.summary = (f"same failure each attempt ({'identical' if same_fp else 'same class'}): "
                     f"{failures[-1][3].text.split(': ', 1)[-1][:200]}")
        return r
    if not dead_now and not ctx.terminal:
        r.same_failure = False
        klass = failures[0][0] if failures else "unknown"
        r.summary = (f"prior attempt failed ({klass}); the current attempt is alive — recovered"
                     + (", a transient failure" if klass in TRANSIENT_CLASSES else ""))
        return r
    r.same_failure = False if len(classes) > 1 else None
    r.summary = "attempts failed differently: " + ", ".join(sorted(classes)) if len(classes) > 1 else \
        "not enough failure detail to compare attempts"
    return r
