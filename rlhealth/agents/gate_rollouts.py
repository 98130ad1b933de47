"""Gate C, rollouts: are trials starting, completing, earning rewards, from a sane agent?

Trial results (rewards, exceptions) are one family; what the agent wrote (turns, coherence) is
another; the rollout workers' own log lines (exception breakdowns, sandbox and verifier errors)
a third. A FAIL stands on the trial results; a KILL needs one of the others beside them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from rlhealth.agents.context import Context
from rlhealth.agents.failures import GENERIC_EXCEPTIONS, VERIFIER_EXCEPTIONS, is_infra_exception
from rlhealth.agents.reasons import Code, Culprit, GateResult, Why
from rlhealth.agents.state import Ev


def gate_c(ctx: Context) -> GateResult:
    state, now, t = ctx.state, ctx.now, ctx.t
    trials = state.trials
    g = GateResult()
    rollout = ctx.spec.get("rollout") or {}
    episode = float(rollout.get("expected_episode_s") or t.default_episode_s)
    start = state.sched.first_running_ts or state.first_event_ts or now
    age = now - start
    e = state.eval_trials
    if e.completed or e.started:
        g.facts["eval"] = (e.completed, e.nonzero_rewards)
    breakdown = state.signals.get("exception_breakdown")

    if trials.started == 0 and trials.completed == 0:
        batches = state.batch_progress
        g.status = "UNKNOWN"
        if batches:
            ok, total = sum(b[1] for b in batches), sum(b[2] for b in batches)
            g.code = Code.C_NO_TRIALS_BATCHES
            g.facts.update(ok=ok, total=total)
            g.escalate = total >= t.batch_zero_min_trials and ok == 0
            return g
        g.code = Code.C_NO_TRIALS
        g.facts["terminal"] = ctx.terminal
        return g

    rewards = [r for _, r in trials.rewards]
    turns = trials.turns
    avg_turns = exact_mean(turns) if turns else None
    # An exception is infra by its class, or by its message when the class is generic (GENERIC_EXCEPTIONS;
    # fold_events.step_trial): never a passthrough (AgentTimeoutError, ContextLengthExceededError), which healthy
    # runs show whatever text the sandbox put in them, nor a specific class quoting the task's own output.
    infra = {k: v if is_infra_exception(k) else trials.exc_infra.get(k, 0) if k in GENERIC_EXCEPTIONS else 0
             for k, v in trials.exc_types.items()}
    infra = {k: v for k, v in infra.items() if v}
    verifier = {k: v for k, v in trials.exc_types.items() if k in VERIFIER_EXCEPTIONS}
    infra_n, verifier_n = sum(infra.values()), sum(verifier.values())
    hour_ago = float(now) - t.completion_rate_window_s
    g.facts["desc"] = {
        "started": trials.started, "completed": trials.completed,
        # printed only (render), so no recheck for it: plain time (agents/recheck.py)
        "last_hour": sum(1 for ts in trials.completed_ts if ts >= hour_ago),
        "mean_reward": exact_mean(rewards) if rewards else None, "nonzero": trials.nonzero_rewards,
        "avg_turns": avg_turns, "exceptions": dict(trials.exc_types),
    }

    if trials.completed == 0:
        g.status, g.code = "UNKNOWN", Code.C_NONE_COMPLETED
        g.escalate = age > t.overdue_episode_factor * episode + t.overdue_margin_s
        g.facts.update(started=trials.started, age_s=age, episode_s=episode)
        g.watch.append(("first_results", {}))
        return g

    if trials.completed >= t.infra_min_trials and infra_n / trials.completed >= t.infra_share_ratio \
            and trials.nonzero_rewards == 0:
        top = max(infra, key=lambda k: infra[k])
        g.status, g.code, g.cause, g.cause_detail = "FAIL", Code.INFRA, "infra", top
        g.facts["top"] = top
        g.add(Code.TRIALS_INFRA, "trial_outcomes", n=infra_n, completed=trials.completed, top=top)
        if avg_turns is not None and avg_turns < 0.5:
            g.add(Code.NO_TURNS, "agent_output")
        logged = [(n, s) for n, s in ctx.signals("infra") if s.role in ("sandbox", "rollout", "verifier")]
        if breakdown or logged:
            g.add(Code.LOG_BREAKDOWN, "trial_log" if breakdown else "infra_log")
            if breakdown:
                g.evidence.extend(breakdown.evidence[-1:])
            for _, s in logged[:1]:
                g.evidence.extend(s.evidence[-1:])
        g.evidence.append(trials.exc_examples[top])
        batch = state.signals.get("batch_complete")
        if batch:
            g.evidence.extend(batch.evidence[-1:])
        g.culprit = Culprit("sandbox", top, None, [Why.TRIALS_INFRA])
        return g

    if trials.nonzero_rewards == 0 and trials.completed >= t.zero_reward_min_trials:
        samples = trials.coherent_samples + trials.incoherent_samples
        if samples and trials.incoherent_samples / samples >= t.incoherent_share_ratio:
            g.status, g.code, g.cause = "FAIL", Code.INCOHERENT, "incoherent"
            g.facts["reasons"] = dict(trials.incoherent_reasons)
            g.add(Code.ALL_ZERO, "trial_outcomes", completed=trials.completed)
            g.add(Code.INCOHERENT_OUTPUT, "agent_output", reasons=dict(trials.incoherent_reasons))
            g.evidence.extend(trials.incoherent_examples[:3])
            g.culprit = Culprit("engine", "served policy", None, [Why.INCOHERENT])
            return g
        if verifier_n / trials.completed >= t.verifier_share_ratio:
            g.status, g.code, g.cause = "FAIL", Code.VERIFIER, "verifier"
            g.add(Code.ALL_ZERO, "trial_outcomes", completed=trials.completed)
            # The verifier's own failure, as logged by the rollout workers, is the second family.
            logged = ctx.signals("verifier") + ([("exception_breakdown", breakdown)] if breakdown else [])
            if logged:
                g.add(Code.VERIFIER_ERRORS, "trial_log", n=verifier_n)
                g.evidence.extend(logged[0][1].evidence[-1:])
            elif (avg_turns is not None and avg_turns >= 2) or (samples and trials.coherent_samples / samples >= 0.5):
                # Agents did real multi-turn work and still no score came back: the verifier, not the agent.
                g.add(Code.VERIFIER_ERRORS, "agent_output", n=verifier_n)
            g.facts["n"] = verifier_n
            g.evidence.append(trials.exc_examples[max(verifier, key=lambda k: verifier[k])])
            g.culprit = Culprit("verifier", max(verifier, key=lambda k: verifier[k]), None, [Why.VERIFIER])
            return g
        if avg_turns is not None and avg_turns <= t.broken_loop_turns and len(turns) >= t.zero_reward_min_trials:
            g.status, g.code, g.cause = "FAIL", Code.BROKEN_LOOP, "broken_loop"
            g.add(Code.ALL_ZERO, "trial_outcomes", completed=trials.completed)
            g.add(Code.ONE_TURN, "agent_output", avg_turns=avg_turns)
            return g
        g.status, g.escalate, g.code = "UNKNOWN", True, Code.ZERO_REWARD_COHERENT
        g.watch.append(("read_conversations", {}))
        return g

    timeouts = trials.exc_types.get("AgentTimeoutError", 0)
    if trials.completed >= t.zero_reward_min_trials and timeouts / trials.completed >= t.agent_timeout_share_ratio:
        g.status, g.code = "UNKNOWN", Code.AGENT_TIMEOUTS
        g.facts.update(timeouts=timeouts, completed=trials.completed)
        g.evidence.append(trials.exc_examples["AgentTimeoutError"])
        g.watch.append(("timeouts_falling", {}))
        return g
    g.status, g.code = "PASS", Code.C_PASS
    if trials.nonzero_rewards == 0:
        g.status, g.code = "UNKNOWN", Code.C_TOO_FEW
    mean = g.facts["desc"]["mean_reward"]
    g.evidence.append(Ev(trials.last_completed_ts, "trace_jobs", f"{trials.completed} completed trials, reward mean "
                                                                 f"{mean if mean is not None else float('nan'):.3f}, "
                                                                 f"{trials.nonzero_rewards} non-zero"))
    g.watch.append(("completion_rate", {}))
    return g


def exact_mean(xs: Sequence[float]) -> float:
    """`statistics.mean(xs)` (the same value and type) for ints or finite floats, without its Fraction
    sums, which cost more than the rest of gate C at every judgement. Floats are dyadic rationals: summed
    exactly as integers over their largest denominator, then divided once, correctly rounded, as
    `statistics.mean` does. Anything else goes to `statistics.mean`."""
    n = len(xs)
    if all(type(x) is int for x in xs):
        total = sum(xs)
        return total // n if total % n == 0 else total / n
    if all(type(x) is float and math.isfinite(x) for x in xs):
        ratios = [x.as_integer_ratio() for x in xs]
        den = max(d for _, d in ratios)  # powers of two: each divides the largest
        return sum(num * (den // d) for num, d in ratios) / (den * n)
    return statistics.mean(xs)
