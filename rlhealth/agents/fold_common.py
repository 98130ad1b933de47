"""What every fold of an event into JobHealth shares: the signal book, role freshness, and readings
turned into finite numbers. Pure."""

from __future__ import annotations

import math
from datetime import datetime

from rlhealth.agents.state import (
    EVIDENCE_TEXT_CHARS,
    MAX_EVIDENCE_PER_SIGNAL,
    MAX_SIGNALS,
    Ev,
    JobHealth,
    SignalStat,
)


def epoch(dt: datetime | None) -> float | None:
    return dt.timestamp() if dt is not None else None


def clip(text: str, n: int = EVIDENCE_TEXT_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= n else text[: n - 1] + "…"


def note_signal(state: JobHealth, signal: str, ev: Ev, attempt: int | None, role: str = "") -> SignalStat:
    stat = state.signals.get(signal)
    if stat is None:
        if len(state.signals) >= MAX_SIGNALS:
            return SignalStat()
        stat = state.signals[signal] = SignalStat()
    stat.count += 1
    ts = ev.ts
    if ts is not None:
        # min()/max() spelled out (what they compare, and which they keep on a tie): once per matched line
        first, last = stat.first_ts, stat.last_ts
        stat.first_ts = ts if first is None or ts < first else first
        stat.last_ts = ts if last is None or ts > last else last
    # Keep the first pieces of evidence and the latest one (per-signal hot path: no sorting).
    evidence = stat.evidence
    if len(evidence) < MAX_EVIDENCE_PER_SIGNAL:
        evidence.append(ev)
        if len(evidence) > 1 and (ts or 0.0) < (evidence[-2].ts or 0.0):
            evidence.sort(key=lambda e: (e.ts or 0.0))
    elif ts is None or (kept := evidence[-1].ts) is None or ts >= kept:
        evidence[-1] = ev
    if attempt is not None and attempt not in stat.attempts and len(stat.attempts) < 16:
        stat.attempts.append(attempt)
    if ts is None or stat.last_ts is None or ts >= stat.last_ts:
        stat.stream = ev.source
        if role:
            stat.role = role
    return stat


def touch_role(state: JobHealth, role: str, ts: float | None) -> None:
    if ts is None:
        return
    prev = state.role_last_ts.get(role)
    if prev is None or ts > prev:
        state.role_last_ts[role] = ts


def to_float(v: object) -> float | None:
    """A finite float or None: NaN/Inf never enter the state (they break equality and medians)."""
    if v is None:
        return None  # a field the line did not carry: float(None) would raise, slowly
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


def round_reading(v: object) -> int | None:
    f = to_float(v)
    # Absurd readings (a broken poll) are dropped rather than stored.
    return None if f is None or abs(f) > 1e12 else int(round(f))


def as_int(v: object) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return None


def finite_or_zero(v: object) -> float:
    """`to_float(v) or 0.0`, with the common cases (a float or an int from the extraction) first."""
    t = type(v)
    if t is float:
        return (v or 0.0) if v - v == 0.0 else 0.0  # type: ignore[operator,return-value]  # finite: inf-inf, nan-nan are nan
    if t is int:
        try:
            return float(v) or 0.0  # type: ignore[arg-type]
        except OverflowError:
            return 0.0
    return to_float(v) or 0.0
