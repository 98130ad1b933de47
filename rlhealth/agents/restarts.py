"""Restart-burn: attempts burned, and whether each failed the same way.

Each burned attempt's failure is its causal exception (its type and a fingerprint of its
normalised message), taken from that attempt's own log (SLURM leg, pod generation) when the
scheduler only says "FAILED": two attempts with the same fingerprint are the same failure,
however the scheduler worded the state. A wall-clock TIMEOUT followed by a running successor is
a chain restart, not a burn.
"""

from __future__ import annotations

from rlhealth.agents.context import Context
from rlhealth.agents.failures import TRANSIENT_CLASSES, failure_class_of
from rlhealth.agents.reasons import RestartResult
from rlhealth.agents.rootcause import causal_traceback
from rlhealth.agents.state import Ev, TracebackRec
from rlhealth.agents.tracebacks import fingerprint

_NOT_CRASHES = ("timeout", "cancelled", "canceled", "killed", "preempted")


def restart_burn(ctx: Context) -> RestartResult:
    state = ctx.state
    sc = state.sched
    r = RestartResult()
    r.max = sc.max_retries if sc.max_retries is not None else (ctx.spec or {}).get("max_retries")
    prior = [a for a in sc.attempts if sc.attempt is None or a[0] < sc.attempt or ctx.terminal]
    burned_prior = [a for a in prior if (a[1] or "").lower() != "timeout" or (ctx.terminal and a is prior[-1])]
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
        for att in sorted({tb.attempt for tb in state.tracebacks if tb.fatal and tb.attempt is not None}):
            tb = causal_traceback(state.tracebacks, att)
            if tb is not None:
                by_attempt[att] = tb
        if by_attempt:
            last = max(by_attempt)
            r.burned = last
            for att in sorted(by_attempt):
                if att < last or ctx.terminal:
                    failures.append(_failure(by_attempt[att], att))
    for a in burned_prior:
        if (a[1] or "").lower() in _NOT_CRASHES:
            continue  # not a crash: a chain restart, a person's cancel, or the cluster's doing
        tb = _attempt_traceback(state.tracebacks, a[0])
        text = a[4] or ""
        if tb is not None and failure_class_of(text) in ("other", "unknown"):
            # The scheduler only said "FAILED (exit 1)": the attempt's own causal exception names the failure.
            failures.append(_failure(tb, a[0], f"attempt {a[0]} {a[1]} (exit {a[2]})"))
            continue
        exc, _, msg = text.partition(": ")
        failures.append((failure_class_of(text), fingerprint(exc, msg), a[0],
                         Ev(a[3], "state poll", f"attempt {a[0]} {a[1]} (exit {a[2]}): {text}")))
    dead_now = ctx.fatal_tb is not None and not ctx.terminal
    r.current_attempt_dead = dead_now
    if dead_now and ctx.fatal_tb is not None:
        tb = causal_traceback(state.tracebacks, ctx.fatal_tb.attempt) or ctx.fatal_tb
        failures.append(_failure(tb, tb.attempt))
    if not r.burned:
        r.code = "none"
        return r
    r.evidence = [f[3] for f in failures][:4]
    classes = {f[0] for f in failures}
    fps = {f[1] for f in failures}
    same = len(failures) >= 2 and "unknown" not in classes and (len(fps) == 1
                                                                 or (len(classes) == 1 and "other" not in classes))
    # Two or more burned attempts that died the same way are deterministic even while a retry runs:
    # the retry will reproduce it (the deep probe's restart-burn corroboration).
    prior_same = len([f for f in failures if f[2] is None or sc.attempt is None or f[2] != sc.attempt]) >= 2
    if same and (dead_now or ctx.terminal or prior_same):
        r.same_failure, r.code = True, "same"
        r.failure_class = failures[0][0]
        r.failure_text = failures[-1][3].text.split(": ", 1)[-1][:200]
        r.facts = {"identical": len(fps) == 1, "text": r.failure_text, "attempts": len(failures)}
        return r
    if not dead_now and not ctx.terminal:
        r.same_failure, r.code = False, "recovered"
        klass = failures[0][0] if failures else "unknown"
        r.facts = {"klass": klass, "transient": klass in TRANSIENT_CLASSES}
        return r
    if len(classes) > 1 or len(fps) > 1:
        r.same_failure, r.code = (False if len(classes) > 1 else None), "different"
        r.facts = {"classes": sorted(classes)}
        return r
    r.code = "no_detail"
    return r


def _attempt_traceback(tracebacks: list[TracebackRec], attempt: int) -> TracebackRec | None:
    if not any(tb.attempt == attempt for tb in tracebacks):
        return None
    return causal_traceback([tb for tb in tracebacks if tb.attempt == attempt], attempt)


def _failure(tb: TracebackRec, attempt: int | None, label: str | None = None) -> tuple[str, str, int | None, Ev]:
    text = f"{tb.exc_type}: {tb.message}"
    return (failure_class_of(text), tb.fingerprint, attempt,
            Ev(tb.ts, tb.stream, f"{label or f'attempt {attempt}'}: {text}", "traceback"))
