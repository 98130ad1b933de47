"""All English the health core prints, rendered from reason codes and facts in this one place.

Gates and the verdict decide in codes (`reasons.Code`); tests assert codes and verdict fields.
Wording can change here without touching a decision.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rlhealth.agents.reasons import Code, Culprit, GateResult, Reason, RestartResult, Why
from rlhealth.agents.training_time import TrainingTime

if TYPE_CHECKING:
    from rlhealth.agents.rootcause import RootCause


def age(seconds: float | None) -> str:
    s = 0.0 if seconds is None else max(float(seconds), 0.0)  # float(): printed only, no recheck (agents/recheck.py)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def iso(ts: float | None) -> str:
    if ts is None:
        return "?"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _poll(f: dict) -> str:
    if not f.get("poll_state"):
        return "no state poll"
    out = f"state poll '{f['poll_state']}' {age(f.get('poll_age_s'))} ago"
    for k in ("pods", "failure_count"):
        if f.get(k) is not None:
            out += f", {k}={f[k]}"
    return out


def _fresh(fr: dict | None) -> str:
    if not fr:
        return ""
    parts = []
    if fr.get("trainer_s") is not None:
        step = f" (step {fr['step']})" if fr.get("step") is not None else ""
        cad = f", cadence ~{age(fr['cadence_s'])}" if fr.get("cadence_s") else ""
        parts.append(f"trainer step progress {age(fr['trainer_s'])} ago{step}{cad}")
    for role, s in (fr.get("roles") or {}).items():
        parts.append(f"{role} logs {age(s)} ago")
    return "; ".join(parts)


def _shape(s: dict) -> str:
    exp = f" of {s['expected']} expected" if s.get("expected") else ""
    floor = (f"floor {s['floor'][0]:,.0f} tok/s per busy engine ({s['floor'][1]}, {s['gpu']})" if s.get("floor")
             else "no throughput floor (model size unknown)")
    return (f"{s['engines']} engine(s){exp} reporting: aggregate generation throughput {s['gen']:,.0f} tok/s, Running "
            f"{s['running']:.0f}, Waiting {s['waiting']:.0f} (medians over the last {age(s['window_s'])}); {floor}; "
            f"{_eager(s.get('eager'))}")


def _eager(v: bool | None) -> str:
    return {True: "enforce_eager=true", False: "enforce_eager=false", None: "enforce_eager unknown"}[v]


def _desc(d: dict) -> str:
    out = f"{d['started']} trials started, {d['completed']} completed ({d['last_hour']} in the last hour), "
    out += (f"mean reward {d['mean_reward']:.2f}, {d['nonzero']} with reward > 0" if d.get("mean_reward") is not None
            else "no rewards recorded")
    if d.get("avg_turns") is not None:
        out += f", avg assistant turns {d['avg_turns']:.1f}"
    if d.get("exceptions"):
        out += f", exceptions: {top(d['exceptions'])}"
    return out


def top(counts: dict[str, int], n: int = 3) -> str:
    return ", ".join(f"{k} ×{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:n])


def _culprit(g: GateResult) -> str:
    c = g.culprit
    if c is None or not c.component:
        return ""
    node = f" on node {c.node}" if c.node and c.node != c.component else ""
    return f" Likely culprit: {c.role} {c.component}{node} ({culprit_why(c)})."


CULPRIT_WHY: dict[Why, Any] = {
    Why.FATAL_TRACEBACK: lambda f: "fatal traceback",
    Why.CAUSAL_EXCEPTION: lambda f: "causal exception",
    Why.LOGGED_SIGNATURE: lambda f: "logged the signature",
    Why.STRAGGLER_RANK: lambda f: f"lowest last-completed NCCL collective ({f['seq']}) while other ranks got further",
    Why.SILENT_RANK: lambda f: "the one rank silent while the others timed out waiting on it",
    Why.HARDWARE_XID: lambda f: f"kernel logged Xid {f['xid']} there",
    Why.GPU_HARDWARE: lambda f: "GPU hardware fault",
    Why.GPUS_SPINNING: lambda f: "GPUs spinning at idle power",
    Why.POLICY_IDLE: lambda f: "every policy GPU at 0 % with memory resident while the trainer is silent",
    Why.RESIDENT_IDLE: lambda f: "engine GPUs resident at 0 % with no stats",
    Why.TRIALS_INFRA: lambda f: "every finished trial failed before the agent ran",
    Why.INCOHERENT: lambda f: "incoherent generations",
    Why.VERIFIER: lambda f: "verifier never scores",
}


def root_text(rc: RootCause, message_chars: int | None = None) -> str:
    """The root cause in words: 'ExcType: message' for a traceback (its message cut to `message_chars`),
    else the scheduler's error or the line that states it."""
    if rc.tb is not None:
        return f"{rc.tb.exc_type}: {rc.tb.message[:message_chars]}"
    return rc.text


def culprit_why(c: Culprit) -> str:
    return "; ".join(CULPRIT_WHY[w](c.facts) for w in c.why)


_SLOW = {
    "step_rate_down": lambda f: (f"step rate down >= 25% for 3 steps (last 3 steps took "
                                 f"{', '.join(f'{x:.0f}' for x in f['recent'])} s vs the job's median "
                                 f"{f['base']:.0f} s)"),
    "generation_down": lambda f: (f"generation throughput down >= 25% for 15 min (aggregate generation "
                                  f"{', '.join(f'{x:,.0f}' for x in f['recent'])} tok/s over the last 15 min vs the "
                                  f"job's median {f['base']:,.0f} tok/s with requests running)"),
    "grad_explosion": lambda f: (f"grad-norm explosion (grad norm {f['recent'][0]:.3g}, {f['recent'][1]:.3g} vs median "
                                 f"{f['base']:.3g})"),
    "entropy_collapse": lambda f: (f"entropy collapse (policy entropy {f['recent'][0]:.3g} vs an early median "
                                   f"{f['base']:.3g})"),
}


# The engine kind a stats line's rule names (rule ids are '<pack>.<name>'), for wording only.
_ENGINE_KINDS = {"vllm": "vLLM", "sglang": "SGLang"}
# why an idle engine of that kind prints nothing
_IDLE_QUIET = {"vLLM": "vLLM logs idle intervals at DEBUG",
               "SGLang": "SGLang prints a 'Decode batch' line only while it decodes"}
_IDLE_ANY = "an idle engine prints no stats line"


def _engine_kind(g: GateResult) -> str:
    """'vLLM', 'SGLang' or 'vLLM/SGLang' as the engine evidence's rules name them ('engine' when none does)."""
    kinds = sorted({k for ev in g.evidence if (k := _ENGINE_KINDS.get(ev.rule_id.partition(".")[0]))})
    return "/".join(kinds) or "engine"


def gate_summary(g: GateResult) -> str:
    f, c = g.facts, g.code
    if c is None:
        return ""
    if c == Code.BLIND_SHIPPER:
        return f"monitor is blind: shipper(s) {f['shippers']} stopped heartbeating; the job's silence cannot be judged"
    if c == Code.BLIND_NO_DATA:
        return (f"no data at all for {age(f['silent_s'])} (newest event {iso(f['newest_ts'])}; {_poll(f)}): the "
                f"monitor cannot see the job, which is not the same as the job being silent")
    if c == Code.TERMINAL:
        nature = {"deterministic": "deterministic (the same failure on every attempt)",
                  "transient": "transient (relaunch-worthy)", "not_transient": "not shown to be transient"}[f["nature"]]
        return f"TERMINAL: {_poll(f)}; root cause: {f['root'] or 'no traceback captured'} — {nature}.{_culprit(g)}"
    if c == Code.FATAL_TRACEBACK:
        return (f"{_poll(f)}, but the trainer died at {iso(f['tb_ts'])} with {f['exc']}: {f['message']} and has made "
                f"no progress since ({age(f['since_s']) if f['since_s'] is not None else '?'}); pods still hold their "
                f"GPUs. {_fresh(f.get('freshness'))}")
    if c == Code.PENDING:
        return f"{_poll(f)}: waiting for admission/scheduling; nothing to judge yet"
    if c == Code.NO_VIEW:
        return "no state poll and no logs: blind, which is never healthy"
    if c == Code.STATE_POLL_ONLY:
        return (f"{_poll(f)}, but no logs, GPU polls or trials to confirm it: liveness is never the state poll alone, "
                f"so the job's status is unknown")
    if c == Code.CRASH_LOOP:
        return (f"{_poll(f)}; crash loop: pods restarted {f['restarts']} times"
                + (" (CrashLoopBackOff within the hour)" if f["backoff"] else "")
                + (f", training stuck at step {f['step']}" if f["step"] is not None else ", no training progress")
                + f" since the first restart {age(f['since_s'])} ago. {_fresh(f.get('freshness'))}")
    if c == Code.WEDGED:
        parts = [f"trainer progress frozen: last '{f['last_progress']}' {age(f['since_s'])} ago vs a cadence of "
                 f"~{age(f['cadence_s'])} ({f['cadence_source']})"]
        if f["hang"]:
            parts.append(" + ".join(f["hang"]))
        if f["deaths"]:
            parts.append(f["deaths"][0])
        for r in g.reasons:
            if r.code == Code.POLICY_GPUS_IDLE:
                parts.append(f"policy rank GPUs at 0 % util with memory resident ({', '.join(r.facts['hosts'][:2])})")
            if r.code == Code.GPU_SPIN:
                parts.append(_spin(r.facts))
            if r.code == Code.PROGRESS_BEFORE_STUCK:
                parts.append(_lent_progress(r.facts))
        dec = (" Colocated-engine deception: engines keep generating and the state poll reads running, but the policy "
               "mesh is hung." if f.get("deception") and g.cause in ("nccl_hang", "nccl_hang_ep", "ray_death") else "")
        return f"WEDGED: {_poll(f)}; " + "; ".join(parts) + "." + dec + _culprit(g)
    if c == Code.WEDGED_TAIL:
        role = f["role"] if f["role"] != "other" else "the process"
        head = "WEDGED" if g.status == "FAIL" else "probably dead or wedged"
        extra = "".join(f"; policy rank GPUs at 0 % util with memory resident ({', '.join(r.facts['hosts'][:2])})"
                        for r in g.reasons if r.code == Code.POLICY_GPUS_IDLE)
        quiet = (f"no progress from that stream for {age(f['quiet_s'])}, counted from the stall the line dates"
                 if f.get("stalled") else f"then nothing from that stream for {age(f['quiet_s'])}")
        return (f"{head}: {_poll(f)}; {' + '.join(f['labels'])} from {role} ({f['stream']}), {quiet} "
                f"(beyond {age(f['needed_s'])}: the failing tail){extra}."
                + ("" if g.status == "FAIL" else " No scheduler view says the job is still running.") + _culprit(g))
    if c == Code.TRAINER_STALE:
        lent = "".join(f"; {_lent_progress(r.facts)}" for r in g.reasons if r.code == Code.PROGRESS_BEFORE_STUCK)
        return (f"{_poll(f)}; trainer silent for {age(f['since_s'])} (cadence ~{age(f['cadence_s'])}, "
                f"{f['cadence_source']}) with no hang signature yet{lent}")
    if c == Code.LOGS_STALE:
        return f"{_poll(f)}; no trainer progress lines recognised and logs are not fresh"
    if c == Code.NO_PROGRESS_FORMAT:
        earlier = f"; earlier {', '.join(f['earlier'])} seen" if f.get("earlier") else ""
        return (f"{_poll(f)}; logs fresh but no trainer progress lines recognised yet. "
                f"{_fresh(f.get('freshness'))}{earlier}")
    if c == Code.ALIVE:
        out = f"ALIVE: {_poll(f)}; {_fresh(f.get('freshness'))}"
        if f.get("earlier"):
            out += f"; earlier {', '.join(f['earlier'])} but the trainer advanced after it"
        return out
    # ---- Gate B
    if c == Code.B_TERMINAL:
        return "job is terminal: GPU polls and engine stats are historical" + (
            f"; last engine stats {age(f['engine_s'])} ago" if f.get("engine_s") is not None else "")
    if c == Code.GPU_HARDWARE:
        app = (f"; application Xids seen but not blamed on the node: {', '.join(map(str, f['app_xids']))}"
               if f.get("app_xids") else "")
        return (f"GPU hardware fault on {f['node'] or 'a node'}: {', '.join(f['labels']) or 'GPU lost from nvidia-smi'}"
                + "".join(f"; nvidia-smi lost GPUs on {', '.join(r.facts['hosts'])}" for r in g.reasons
                          if r.code == Code.GPU_LOST_POLL) + app
                + (f"; the trainer kept stepping for {age(f['trained_through_s'])} after it: drain the node when the "
                   f"run allows" if f.get("trained_through_s") else ". Cordon and drain the node."))
    if c == Code.OOM:
        tried = f" ({f['tried']})" if f.get("tried") else ""
        return (f"training-stage OOM: {', '.join(f['labels'])}{tried}, seen {f['count']} time(s) in attempt "
                f"{f['attempt'] if f['attempt'] is not None else '?'}")
    if c == Code.NONFINITE:
        return (f"training produced NaN/Inf loss or grad norm {f['count']} times (one training-dynamics signal: "
                f"escalate, not a KILL on its own)")
    if c == Code.COLLECTIVE_SPIN:
        return _spin(f) + " (collectives spinning: a hang the NCCL watchdog has not reported yet)"
    if c == Code.ENGINE_DEAD:
        cause = f"; its causal exception: {f['cause']}" if f.get("cause") else ""
        if not f["working"]:
            return (f"rollout side down: {f['label']}, then no stats from any engine "
                    f"({', '.join(f['engines']) or 'none named'}) for {age(f['quiet_s'])} and no training step"
                    f"{cause}.{_culprit(g)}")
        return (f"inference engine dead: {f['label']} and no stats since from {', '.join(f['engines'])}, while "
                f"{f['working']} other engine(s) still generate{cause}.{_culprit(g)}")
    if c == Code.ENGINE_DEATH_UNCONFIRMED:
        cause = f" ({f['cause']})" if f.get("cause") else ""
        return (f"engine death line {age(f['quiet_s'])} ago: {f['label']}{cause}, and no engine has printed stats "
                f"since; dead unless stats return within {age(f['needed_s'])}.{_culprit(g)}")
    if c == Code.STARVATION:
        floor = f" (below the {f['floor_tps']:,.0f} tok/s floor)" if f.get("floor_tps") else ""
        extras = [f"KV cache up to {f['kv']:.1f}%"] if f["kv"] >= 95 else []
        if f.get("preemptions"):
            extras.append("recurring preemptions")
        return (f"throughput-starvation wedge on {f['n']}/{f['total']} engine(s): Waiting {f['waiting']:.0f} vs "
                f"Running {f['running']:.0f} for {age(f['span_s'])}, generation {f['gen']:,.0f} tok/s{floor}"
                + (", " + ", ".join(extras) if extras else "") + f". {_shape(f['shape'])}")
    if c == Code.FLOORED:
        return (f"generation throughput floored: {f['gen']:,.0f} tok/s with Running {f['running']:.0f} on "
                f"{f['n']}/{f['total']} engines for {age(f['span_s'])}; {_shape(f['shape'])}")
    if c == Code.ENGINE_HUNG:
        stall = f.get("stall")
        waited = (f", its EngineCore waiting on its workers for {age(stall['waited_s'])} by its own lines "
                  f"(past {age(stall['limit_s'])}: longer than stalls seen to end by themselves, and vLLM's own step "
                  f"limit ended nothing)" if stall else "")
        pin = f.get("pinned")
        pinned = (f", its GPUs on {pin['host']} at {pin['util_min']:.0f}% util or more on all {pin['polls']} polls "
                  f"since (a step stuck in a collective or kernel; an engine idle after aborted requests sits at 0 %)"
                  if pin else "")
        return (f"{f['n']} engine(s) printed 0.0 tok/s with Running > 0 and then went silent{pinned}{waited}; "
                f"{_shape(f['shape'])}")
    if c == Code.ENGINE_SILENT:
        s = f["silent"]
        gpu = s["gpu"]
        if gpu is None:
            seen = "no GPU poll of its own host since (host unknown, shared or not polled)"
        elif gpu["idle"]:
            seen = (f"its GPUs on {gpu['host']} idle since ({gpu['util_max']:.0f}% util at most over {gpu['polls']} "
                    f"poll(s)): idle, or stuck off the GPU")
        else:
            seen = (f"its GPUs on {gpu['host']} at {gpu['util_min']:.0f}-{gpu['util_max']:.0f}% util over "
                    f"{gpu['polls']} poll(s) since, not yet pinned")
        return (f"{s['n']} engine(s) silent with requests Running: the newest stats line of {s['engine']}, "
                f"{age(s['stats_silent_s'])} ago, had Running {s['running']:.0f} at 0.0 tok/s, and none since while "
                f"other engines log; {seen}. Not a KILL on that alone: an engine whose requests were aborted prints "
                f"the same (a stale Running count, no step runs, the idle intervals go to DEBUG), and no run of its "
                f"EngineCore's waits on its workers was seen; {_shape(f['shape'])}")
    if c == Code.ENGINE_STALLED:
        s = f["stall"]
        return (f"engine stalled on its workers: its newest stats line, {age(s['stats_silent_s'])} ago, had Running "
                f"{s['running']:.0f} with 0.0 prompt and generation tok/s, and since then its EngineCore printed "
                f"{s['waits']} 'No available shared memory broadcast block' waits ({age(s['waited_s'])} in one wait) "
                f"and no stats line: the requests in flight get no tokens. Not a KILL yet: vLLM ends a step after "
                f"{age(s['limit_s'])} (its execute timeout), and stalls like this have ended by themselves; "
                f"{_shape(f['shape'])}")
    if c == Code.RESIDENT_IDLE:
        return (f"engine(s) resident but not generating on {', '.join(f['hosts'][:3])}: GPU memory held at 0 % util "
                f"across polls and no stats line since start-up, while {f['working']} other engine(s) generate. "
                f"{_shape(f['shape'])}")
    if c == Code.ENGINES_QUIET:
        kind = _engine_kind(g)
        return (f"no {kind} stats for {age(f['silent_s'])}: engines idle or hung ({_IDLE_QUIET.get(kind, _IDLE_ANY)}, "
                f"and a hung engine goes quiet too); when last seen: {_shape(f['shape'])}")
    if c == Code.ENGINES_IDLE:
        return (f"engines idle: no requests in flight (Running 0, Waiting 0); rollouts are not reaching the engines "
                f"(see Gate C). {_shape(f['shape'])}")
    if c == Code.FAIL_SLOW:
        shape = f". {_shape(f['shape'])}" if f.get("shape") else ""
        return "sustained degradation: " + "; ".join(_SLOW[k](x) for k, x in f["slow"]) + shape
    if c == Code.GENERATING:
        return f"engines generating: {_shape(f['shape'])}; no OOM"
    if c == Code.ENGINE_GPUS_IDLE:
        return (f"engine GPUs on {', '.join(f['hosts'][:2])} hold memory at ~0% util across 3 polls and no engine "
                f"stats lines (vLLM or SGLang) were seen: engines loaded but not generating?")
    if c == Code.ENGINES_WARMING_UP:
        since = f", warming up for {age(f['since_s'])} so far" if f.get("since_s") is not None else ""
        return (f"engine GPUs on {', '.join(f['hosts'][:2])} hold memory at ~0% util with no engine stats line yet, "
                f"but the engine is still warming up (its newest warm-up line {age(f['last_s'] or 0.0)} ago{since}: "
                f"weights loading, kernels compiling or CUDA graphs capturing): bring-up, not an idle engine")
    if c == Code.GPUS_BUSY:
        return (f"no engine stats lines (vLLM or SGLang), but GPUs busy (utilisation and power) on "
                f"{len(f['hosts'])} host(s); no OOM; {_eager(f.get('eager'))}")
    if c == Code.B_NO_VIEW:
        return "no engine stats and no recent GPU polls: resources cannot be judged"
    # ---- Gate C
    ev = f"; eval trials kept apart: {f['eval'][0]} completed, {f['eval'][1]} with reward > 0" if f.get("eval") else ""
    if c == Code.C_NO_TRIALS_BATCHES:
        return f"no trial directories captured; logs report {f['ok']}/{f['total']} successful in recent batches{ev}"
    if c == Code.C_NO_TRIALS:
        return ("no trial data (trace_jobs missing or empty)" + ev
                + ("; expected for a terminal job" if f.get("terminal") else ""))
    if c == Code.C_NONE_COMPLETED:
        return (f"rollouts executing, 0 completed yet ({f['started']} started, job running {age(f['age_s'])}, expected "
                f"episode ~{age(f['episode_s'])}){ev}")
    d = _desc(f["desc"]) if f.get("desc") else ""
    if c == Code.INFRA:
        return f"every finished trial is an infrastructure failure ({f['top']}): {d}{ev}"
    if c == Code.INCOHERENT:
        return f"all-zero rewards with incoherent generations ({top(f['reasons'])}): {d}"
    if c == Code.VERIFIER:
        return f"verifiers never return a score: {d}"
    if c == Code.BROKEN_LOOP:
        return f"broken agent loop: {d}"
    if c == Code.ZERO_REWARD_COHERENT:
        return f"all rewards zero but outputs look coherent and multi-turn (tasks hard or harness mis-set?): {d}"
    if c == Code.AGENT_TIMEOUTS:
        return (f"most trials end in AgentTimeoutError ({f['timeouts']}/{f['completed']}): a passthrough on its own, "
                f"but dominating like this means rollouts are starved or episodes too long: {d}{ev}")
    if c == Code.C_TOO_FEW:
        return f"too few completed trials to judge rewards yet: {d}{ev}"
    if c == Code.C_PASS:
        return f"trials completing with non-zero rewards: {d}{ev}"
    return str(c)


def _lent_progress(f: dict) -> str:
    return (f"the last progress line has no time of its own (it only borrows the {_hm(f['lent_ts'])} of a "
            f"later line) and the stuck collective had been running {age(f['ran_s'])} by its watchdog line, "
            f"so no step is shown after {_hm(f['issued_ts'])}")


def _hm(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S")


def _spin(f: dict) -> str:
    return (f"GPUs on {', '.join(f['hosts'][:2])} pinned at {f['util']:.0f}% utilisation but drawing only "
            f"~{f['power_w']:.0f} W (near-idle power) for {age(f['span_s'])} with no training step")


_REASON = {
    Code.HANG_LINE: lambda f: " + ".join(f["labels"]) + (f" ({f['count']} lines, one cause)"
                                                         if f.get("count", 1) > 1 else ""),
    Code.DEATH_LINE: lambda f: " + ".join(f["labels"]) + (f" ({f['count']} lines, one cause)"
                                                          if f.get("count", 1) > 1 else ""),
    Code.CRASH_AFTER_STEP: lambda f: " + ".join(f["labels"]) + " after the last step",
    Code.ROLE_SILENT: lambda f: f"{f['role']} silent for {age(f['quiet_s'])} after it",
    Code.TRAINER_FROZEN: lambda f: "trainer progress frozen beyond its cadence",
    Code.PROGRESS_BEFORE_STUCK: lambda f: "last progress time only lent by a later line, inside a stuck collective",
    Code.POLICY_GPUS_IDLE: lambda f: "policy GPUs idle with memory resident",
    Code.GPU_SPIN: lambda f: "GPUs at full utilisation on idle power",
    Code.PODS_RESTARTING: lambda f: f"pods crash-looping ({f['restarts']} restarts)",
    Code.NO_PROGRESS_ACROSS_RESTARTS: lambda f: "no training progress across restarts",
    Code.FATAL_TB_LINE: lambda f: f"fatal {f['exc']} traceback in the trainer",
    Code.OOM_LINE: lambda f: ", ".join(f["labels"]),
    Code.OOM_POD: lambda f: "pods OOMKilled",
    Code.HW_LINE: lambda f: ", ".join(f["labels"]),
    Code.GPU_LOST_POLL: lambda f: f"nvidia-smi lost GPUs on {', '.join(f['hosts'])}",
    Code.WAITING_FAR_ABOVE_RUNNING: lambda f: "Waiting >> Running persistently",
    Code.RUNNING_SUSTAINED: lambda f: "sustained with Running > 0",
    Code.THROUGHPUT_LOW: lambda f: "generation throughput flat/below floor",
    Code.KV_SATURATED: lambda f: "KV cache saturated",
    Code.EAGER_ON: lambda f: "enforce_eager=true (CUDA graphs off)",
    Code.ENGINE_ZERO_THEN_SILENT: lambda f: "engine reported 0 tok/s with requests Running",
    Code.ENGINE_CORE_WAITING: lambda f: f"its EngineCore waiting on its workers for {age(f['waited_s'])}",
    Code.ENGINE_GPUS_PINNED: lambda f: (f"its GPUs on {f['host']} pinned at {f['util_min']:.0f}%+ util on "
                                        f"{f['polls']} polls since"),
    Code.ENGINE_DEATH_LINE: lambda f: f["label"],
    Code.ENGINE_NO_STATS: lambda f: "engine stats stopped (or never started)",
    Code.SLOW_SIGNAL: lambda f: _SLOW[f["kind"]](f).split(" (")[0],
    Code.SPIN_POLLS: lambda f: "GPUs at full utilisation on idle power",
    Code.TRAINER_FROZEN_B: lambda f: "no training step while they spin",
    Code.NONFINITE: lambda f: f"non-finite loss/grad-norm ({f['count']} lines)",
    Code.RESIDENT_IDLE: lambda f: "engine GPUs resident at 0 % util",
    Code.TRIALS_INFRA: lambda f: (f"{f['n']}/{f['completed']} completed trials ended in {f['top']}; no trial earned "
                                  f"a reward > 0"),
    Code.NO_TURNS: lambda f: "no agent turns (the environment never started)",
    Code.LOG_BREAKDOWN: lambda f: "rollout logs show the same failures",
    Code.ALL_ZERO: lambda f: "all rewards zero",
    Code.INCOHERENT_OUTPUT: lambda f: f"incoherent agent output ({top(f['reasons'])})",
    Code.VERIFIER_ERRORS: lambda f: f"{f['n']} trials ended in a verifier error",
    Code.ONE_TURN: lambda f: f"average assistant turns {f['avg_turns']:.1f} (agent stops after one move)",
    Code.SAME_FAILURE: lambda f: f"same failure on every attempt ({f['klass']})",
}


def reason_text(r: Reason) -> str:
    fn = _REASON.get(r.code)
    return fn(r.facts) if fn else str(r.code)


_WATCH: dict[str, Any] = {
    "restore_shipper": lambda f: "restore the shipper; silence caused by the monitor is never a KILL",
    "restore_poller": lambda f: "restore the state poller / shipper for this job, then re-probe",
    "admission": lambda f: "the gang getting admitted (state → running) and the first log lines",
    "logs_and_gpus": lambda f: ("ship the job's logs and GPU polls (rlhealth ship / a capture): the state poll alone "
                                "cannot show a wedge"),
    "hang_signature": lambda f: ("an NCCL watchdog line (fires ~30 min into a hung collective), a Ray worker death, "
                                 "GPUs at full util on idle power, or the step counter moving again"),
    "first_step": lambda f: "the first training step",
    "retry_or_silence": lambda f: (("the retry wrapper restarting the attempt (the failure looks transient); "
                                    "the same failure again or no restart → KILL") if f["transient"] else
                                   f"the trainer restarting or staying dead: {age(f['after_s'])} of silence after "
                                   f"the traceback → WEDGED, KILL"),
    "recurrence": lambda f: f"recurrence of {', '.join(f['names'])}",
    "trainer_silence": lambda f: (f"trainer progress going silent beyond ~{age(f['threshold_s'])} together with an "
                                  "NCCL watchdog or Ray worker death (→ WEDGED, KILL)"),
    "state_poll": lambda f: "a state poll: if the job still reads running with this silence, it is wedged (→ KILL)",
    "engine_after_death": lambda f: (f"engine stats lines again within {age(f['after_s'])} of the death line; none "
                                     "→ the rollout side is down (→ KILL)"),
    "engine_stall": lambda f: ((f"the stalled engine settling within ~{age(f['left_s'])} (vLLM's step limit): "
                                if f["left_s"] > 0 else "the stalled engine, past vLLM's default step limit "
                                "(VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS raised?): ")
                               + f"a stats line again (recovered), or 'RPC call to ... timed out' / EngineDeadError "
                               f"or its EngineCore still waiting past {age(f['hung_s'])} (hung → KILL); meanwhile "
                               f"dump the EngineCore and worker stacks (py-spy dump --pid) while it is stuck"),
    "engine_silent": lambda f: ("the silent engine: a stats line again (it was idle after aborted requests and is fed "
                                "again); its host's GPUs at >= " f"{f['util']:.0f}% util on {f['polls']} polls "
                                "(a stuck step → hung, KILL) or at 0 %; an EngineCore wait on its workers, 'RPC call "
                                "to ... timed out' or EngineDeadError; or the trainer going stale waiting on its "
                                "requests (Gate A). Meanwhile nvidia-smi on its host and py-spy dump of the engine "
                                "process say which"),
    "engine_requests": lambda f: ("engine stats lines (vLLM's throughput line, SGLang's 'Decode batch') with "
                                  "requests running again once rollouts dispatch"),
    "engine_warmup": lambda f: (f"the engine's warm-up ending in an engine stats line; warm-up lines stopping for "
                                f"{age(f['fresh_s'])} with no stats line → engines loaded but not generating "
                                "(escalate)"),
    "engine_stats": lambda f: ("engine stats lines on every engine (vLLM's 'Avg generation throughput', SGLang's "
                               "'Decode batch ... gen throughput')"),
    "throughput_floor": lambda f: (f"aggregate generation throughput falling below ~{f['floor']:,.0f} tok/s per busy "
                                   "engine, or Waiting growing far above Running (→ starvation, KILL)"),
    "first_results": lambda f: "the first result.json files and their rewards",
    "read_conversations": lambda f: "read several conversations; a first non-zero reward would settle it",
    "timeouts_falling": lambda f: "the AgentTimeoutError share falling as generation throughput recovers",
    "completion_rate": lambda f: ("the completion rate and the share of non-zero rewards (all-zero rewards or every "
                                  "trial ending in an infrastructure exception → KILL)"),
    "second_family": lambda f: (f"a second, independent signal beside {f['family']} (a stalled trainer, engine stats, "
                                "GPU polls, trial results) before any KILL"),
}


def watch_text(code: str, facts: dict) -> str:
    return _WATCH[code](facts)


def restart_summary(r: RestartResult) -> str:
    f = r.facts
    if r.code == "none":
        return "none"
    if r.code == "same":
        return f"same failure each attempt ({'identical' if f['identical'] else 'same class'}): {f['text']}"
    if r.code == "recovered":
        return (f"prior attempt failed ({f['klass']}); the current attempt is alive — recovered"
                + (", a transient failure" if f["transient"] else ""))
    if r.code == "different":
        return "attempts failed differently: " + ", ".join(f["classes"])
    return "not enough failure detail to compare attempts"


FAMILY_NAMES = {
    "fatal_log": "fatal log lines", "hang_log": "hang log lines", "hardware_log": "hardware log lines",
    "oom_log": "OOM log lines", "infra_log": "infrastructure log lines", "progress_stall": "silence beyond cadence",
    "gpu_poll": "GPU polls", "scheduler_state": "scheduler state", "trial_outcomes": "trial results",
    "agent_output": "agent output", "training_dynamics": "training dynamics", "engine_queue": "engine queue",
    "engine_throughput": "engine throughput", "restart_history": "restart history", "config_log": "engine config",
    "trial_log": "rollout worker logs", "progress_log": "progress lines",
}


def training_time_text(tt: TrainingTime) -> str:
    """One line: the effective training time and where the rest of the wall-clock time went."""
    ratio = "unknown (no timed trainer steps)" if tt.ratio is None else f"{tt.ratio:.0%}"
    parts = [f"{name.replace('_', '-')} {age(seconds)}" for name, seconds in tt.as_dict().items() if seconds >= 1]
    return f"effective training time: {ratio} of {age(tt.wall_s)}" + (f" ({'; '.join(parts)})" if parts else "")


def never_kills(command: str | None) -> str:
    """The last next step of a KILL: who acts, and with which command for this job."""
    how = command or "the scheduler's kill: iris job kill / scancel / kubectl delete job"
    return f"rlhealth never kills: the supervisor decides and runs the kill ({how})."
