"""A tqdm bar's own clock: `[elapsed<remaining, rate]` dates its lines where the log gives them no time.

A trainer that prints only tqdm bars and metric dicts (TRL, HF Trainer, verl) leaves its lines with no
timestamp; after the stream's last stamped line (often a start-up warning) every one of them borrows that
stamp, a lower bound, and the trainer would read as silent since then. The bar says how long it has been
running: a line whose bar shows `e` seconds, from a bar whose first line we dated `t0` at `e0` seconds, was
printed at `t0 + (e - e0)` or later, because t0 is itself a lower bound. The time only ever moves up to that
lower bound, never past it, so a hung trainer cannot be made to look fresh.

Pure: the per-bar base lives in `JobHealth.bars`, keyed by the log (its unrotated name: a bar goes on in the
next rotation) and the line's prefixes (Ray's `(pid=...)`, a rank), so bars of different processes in one
stream never share a base. A bar whose elapsed goes down is a
new bar (a restart, the next epoch's)."""

from __future__ import annotations

MAX_BARS = 32  # per job: a few logs' and processes' bars at most


def clock_seconds(text: object) -> float | None:
    """tqdm's elapsed, "MM:SS" or "H:MM:SS" (hours unbounded), in seconds; None if it is not one."""
    if type(text) is not str or len(text) > 16 or not text.isascii():
        return None
    parts = text.split(":")  # ASCII digits only below: int() cannot fail
    if len(parts) == 2:
        m, sec = parts
        return float(int(m) * 60 + int(sec)) if m.isdigit() and sec.isdigit() else None
    if len(parts) == 3:
        h, m, sec = parts
        if h.isdigit() and m.isdigit() and sec.isdigit():
            return float((int(h) * 60 + int(m)) * 60 + int(sec))
    return None


def bar_time(bars: dict[str, tuple[float, float]], key: str, elapsed: object, ts: float) -> float:
    """The line's time, `ts` (a lower bound: an earlier stamp's), moved up by its bar's clock; notes the
    bar's base in `bars` (mutated)."""
    e = clock_seconds(elapsed)
    if e is None:
        return ts
    base = bars.get(key)
    if base is None or e < base[1]:
        if base is None and len(bars) >= MAX_BARS:
            bars.pop(next(iter(bars)))
        bars[key] = (ts, e)
        return ts
    return max(ts, base[0] + (e - base[1]))
