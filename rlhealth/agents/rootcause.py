"""The root cause and the culprit: the earliest causal exception, and the component that raised it.

The last exception printed is usually a symptom: vLLM's EngineDeadError says "see stack trace
above for the root cause", torch's DistBackendError follows the collective that timed out, a
Ray wrapper follows the actor's own error. So the cause is the earliest exception of the failing
attempt, near the fatal one, that is not itself such a consequence. When ranks disagree, the
culprit is the rank that fell behind (lowest last-completed collective) or the node whose
kernel logged a hardware Xid.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rlhealth.agents import roles
from rlhealth.agents.context import Context
from rlhealth.agents.reasons import Culprit, Why
from rlhealth.agents.signals import SignalDecl
from rlhealth.agents.state import Ev, SignalStat, TracebackRec

# An exception this long before the fatal one still belongs to the same failure.
CAUSE_WINDOW_S = 600.0


@dataclass
class RootCause:
    """What names the failure: `text` is its English (rendered into summaries and the reasoning), the
    other fields the typed facts the verdict's `root_cause` carries."""

    text: str = ""
    evidence: list[Ev] = field(default_factory=list)
    culprit: Culprit | None = None
    tb: TracebackRec | None = None
    origin: str = ""  # traceback | attempt_error | signal_line; "" while nothing names a cause
    line: Ev | None = None  # the evidence entry that states the cause
    role: str | None = None
    attempt: int | None = None


def traceback_cause(ctx: Context, tb: TracebackRec) -> RootCause:
    """A captured traceback as the root cause: the exception it raised, where, and who raised it."""
    ev = Ev(tb.ts, tb.stream, tb.text, "traceback")
    return RootCause(text=f"{tb.exc_type}: {tb.message}", evidence=[ev],
                     culprit=Culprit(tb.role, _component(tb.stream, tb.text), _node(ctx, tb.stream),
                                     [Why.CAUSAL_EXCEPTION]),
                     tb=tb, origin="traceback", line=ev, role=tb.role, attempt=tb.attempt)


def causal_traceback(tracebacks: list[TracebackRec], attempt: int | None = None) -> TracebackRec | None:
    """The causal exception of `attempt`: near the fatal one (or the last one), skip consequences;
    when ranks raised different exceptions, the one unlike the rest (the majority is the healthy
    ranks timing out on the culprit)."""
    pool = [tb for tb in tracebacks if (attempt is None or tb.attempt is None or tb.attempt == attempt)
            and not tb.swallowed]  # an exception Python discarded caused nothing
    if not pool:
        return None
    anchor = next((tb for tb in reversed(pool) if tb.fatal), pool[-1])
    lo = (anchor.ts or 0.0) - CAUSE_WINDOW_S
    near = [tb for tb in pool if not tb.consequence
            and (tb.ts is None or anchor.ts is None or lo <= tb.ts <= anchor.ts)]
    odd = _odd_one_out(near)
    if odd is not None:
        return odd
    if not anchor.consequence:
        return anchor
    return near[0] if near else anchor


def _odd_one_out(tbs: list[TracebackRec]) -> TracebackRec | None:
    """A fingerprint seen once on one stream while another is shared by two or more other streams."""
    if len(tbs) < 3 or len({tb.stream for tb in tbs}) < 3:
        return None
    by_fp: dict[str, list[TracebackRec]] = {}
    for tb in tbs:
        by_fp.setdefault(tb.fingerprint, []).append(tb)
    singles = [v[0] for v in by_fp.values() if len(v) == 1]
    shared = [v for v in by_fp.values() if len({tb.stream for tb in v}) >= 2]
    if len(singles) == 1 and shared:
        return singles[0]
    return None


def root_cause(ctx: Context) -> RootCause:
    state = ctx.state
    rc = RootCause()
    attempt = state.sched.attempt
    tb = causal_traceback(state.tracebacks, attempt) or causal_traceback(state.tracebacks)
    if tb is not None:
        rc = traceback_cause(ctx, tb)
        named = _named_by_a_line(ctx, tb) if tb.consequence else None
        if named is not None:
            rc = _signal_cause(ctx, RootCause(evidence=list(rc.evidence)), *named)
    errors = [a for a in state.sched.attempts if a[4]]
    if errors:
        last = errors[-1]
        ev = Ev(last[3], "state poll", f"attempt {last[0]} {last[1]} (exit {last[2]}): {last[4]}")
        rc.evidence.append(ev)
        if not rc.text:
            typed = _typed_cause(ctx, last[0]) if _bare_exit(last[4] or "") else None
            if typed is not None:
                return _signal_cause(ctx, rc, *typed)
            rc.text = last[4] or ""
            rc.origin, rc.line, rc.attempt = "attempt_error", ev, last[0]
    if not rc.text:
        for effect in ("oom", "hardware", "death", "infra"):
            for name, stat in ctx.signals(effect):
                if stat.evidence:
                    return _signal_cause(ctx, rc, name, stat)
        # Only consequences were logged (torchrun closing workers, TCPStore broken pipes): show one,
        # labelled as such, rather than naming it the cause.
        for _name, stat in ctx.signals("fallout")[:1]:
            if stat.evidence:
                rc.evidence.append(Ev(stat.evidence[-1].ts, stat.evidence[-1].source,
                                      f"(a consequence, not the cause) {stat.evidence[-1].text}"))
    return rc


# A scheduler error that is only a process's exit status ('Job entrypoint command failed with exit code 1',
# 'exited with code 137') says that the job died, not why; an exception name in it would say why.
_BARE_EXIT_RE = re.compile(r"(?i)\bexit(?:ed)?(?: with)? (?:code|status)\b")
_EXC_NAME_RE = re.compile(r"\b[A-Za-z_][\w.]*(?:Error|Exception)\b")


def _bare_exit(error: str) -> bool:
    return bool(_BARE_EXIT_RE.search(error)) and not _EXC_NAME_RE.search(error)


def _typed_cause(ctx: Context, attempt: int) -> tuple[str, SignalStat] | None:
    """An OOM kill or a hardware fault logged in `attempt`: what a bare exit status of that attempt stands for."""
    for effect in ("oom", "hardware"):
        for name, stat in ctx.signals(effect, attempt):
            if stat.evidence:
                return name, stat
    return None


# Causes that say that something died or hung, not why: a line declaring one of these does not explain a
# consequence traceback (an actor death explained by an actor death).
_REPORTED_DEATH_CAUSES = frozenset({"ray_death", "engine_dead", "rollout_server_dead", "nccl_hang"})


def _named_by_a_line(ctx: Context, tb: TracebackRec) -> tuple[str, SignalStat] | None:
    """When the causal traceback only reports a death elsewhere (an ActorDiedError, possibly inside a
    RayTaskError), a line of the same attempt near it that names why a process died: an OOM kill, a hardware
    fault, or a death whose declared cause is specific (a thread limit). Ray flushes a dying worker's own lines
    after the driver's traceback, so the window reaches both ways."""
    if tb.ts is None:
        return None
    for effect in ("oom", "hardware", "death"):
        for name, stat in ctx.signals(effect, tb.attempt):
            decl = ctx.catalog.decl(name)
            if not stat.evidence or stat.last_ts is None or abs(stat.last_ts - tb.ts) > CAUSE_WINDOW_S:
                continue
            if effect == "hardware" and name in ("xid", "sxid"):
                continue  # application Xids and NVSwitch notes are not a node failure by themselves
            if effect == "death" and (decl is None or not decl.cause or decl.cause in _REPORTED_DEATH_CAUSES):
                continue
            return name, stat
    return None


def _signal_cause(ctx: Context, rc: RootCause, name: str, stat: SignalStat) -> RootCause:
    rc.text = stat.evidence[-1].text
    rc.evidence.append(stat.evidence[-1])
    rc.culprit = culprit_for(ctx, stat, ctx.catalog.decl(name))
    rc.origin, rc.line, rc.role = "signal_line", stat.evidence[-1], rc.culprit.role
    rc.attempt = stat.attempts[-1] if stat.attempts else None
    return rc


def culprit_for(ctx: Context, stat: SignalStat, decl: SignalDecl | None) -> Culprit:
    """Who logged it, refined by the straggler rank and a hardware Xid node when the evidence has them."""
    role = stat.role if stat.role and stat.role != roles.OTHER else (decl.role if decl else roles.OTHER)
    text = stat.evidence[-1].text if stat.evidence else ""
    culprit = Culprit(role, _component(stat.stream, text), _node(ctx, stat.stream), [Why.LOGGED_SIGNATURE])
    ranks = ctx.state.rank_last_completed
    if len(ranks) >= 2 and len({v for v, _ in ranks.values()}) > 1:
        rank, (seq, _) = min(ranks.items(), key=lambda kv: (kv[1][0], kv[0]))
        culprit.component = f"rank {rank}"
        culprit.why, culprit.facts["seq"] = [Why.STRAGGLER_RANK], seq
    silent = silent_rank(ctx)
    if silent is not None and culprit.why == [Why.LOGGED_SIGNATURE]:
        culprit.component, culprit.node = silent, _node(ctx, silent)
        culprit.why = [Why.SILENT_RANK]
    node = hardware_node(ctx)
    if node is not None:
        culprit.node = node[0]
        culprit.why.append(Why.HARDWARE_XID)
        culprit.facts["xid"] = node[1]
    return culprit


def silent_rank(ctx: Context) -> str | None:
    """The one trainer stream that went quiet before, and without, the hang lines the others logged."""
    hangs = ctx.state.hang_streams
    if len(hangs) < 2:
        return None
    first_hang = min(hangs.values())
    driver = ctx.state.trainer.last_progress_source  # the driver's own log stops with the hang too
    quiet = [k for k, st in ctx.state.streams.items()
             if k not in hangs and k != driver and st.role in (roles.TRAINER, roles.OTHER) and st.last_ts is not None
             and st.last_ts < first_hang and _looks_like_rank(k)]
    return quiet[0] if len(quiet) == 1 else None


def _looks_like_rank(stream: str) -> bool:
    low = stream.lower()
    return "rank" in low or "worker" in low or low.rsplit("/", 1)[-1].split(".")[0][-1:].isdigit()


def hardware_node(ctx: Context) -> tuple[str, int] | None:
    """The host whose kernel logged the newest hardware-blamed Xid."""
    for _ts, host, code, _ in reversed(ctx.state.xids):
        entry = ctx.catalog.xid.get(code)
        if entry is not None and entry.blame == "hardware":
            return host, code
    return None


def _node(ctx: Context, stream: str) -> str | None:
    st = ctx.state.streams.get(stream)
    return st.host if st is not None and st.host else None


def _component(stream: str, text: str) -> str:
    """The process prefix of the line ("(EngineCore_DP1 pid=2318)", "[Rank 3]") or the stream."""
    from rlhealth.agents.normalize import peel_prefixes

    for line in reversed(text.splitlines()):
        prefixes, _ = peel_prefixes(line)
        named = [p.name for p in prefixes if not p.name.startswith("pod/")]
        if named:
            return named[-1]
    return stream
