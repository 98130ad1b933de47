"""A batch's `note_signal` calls, gathered and applied once per signal at the batch's end. Pure.

Dense logs match hundreds of lines of one signal per batch (engine stats, trainer metrics); noting
each on its own cost a call, an `Ev` and a clipped text per line, though a signal keeps only its
count, first and last time, a few pieces of evidence, its attempts and the latest line's stream and
role. `SignalTally.flush` leaves the state exactly as the same `note_signal` calls in order would:

* nothing in a batch's fold reads `state.signals` but `note_signal` itself, and signals are
  independent, so one signal's calls may be applied together as long as their order is kept;
* new signals are created in the order of their first call (dict order, and the MAX_SIGNALS cap,
  depend on it);
* a call may leave its `Ev` unbuilt (an int the caller's `make_ev` turns into the Ev): it is built
  only when it is kept as evidence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from rlhealth.agents.state import MAX_EVIDENCE_PER_SIGNAL, MAX_SIGNALS, Ev, JobHealth, SignalStat

_MAX_ATTEMPTS = 16  # what note_signal keeps of a signal's attempts


class SignalCalls:
    """One signal's calls, in order: times, attempts, roles, and each call's Ev or the int standing for it."""

    __slots__ = ("tss", "attempts", "roles", "evs")

    def __init__(self) -> None:
        self.tss: list[float | None] = []
        self.attempts: list[int | None] = []
        self.roles: list[str] = []
        self.evs: list[Ev | int] = []


class SignalTally:
    """`note(signal, ts, ev, attempt, role)` as `note_signal(state, signal, ev, attempt, role)` would be
    called with an Ev whose ts is `ts` and whose source is `source` (one batch's stream key); `flush(state)`
    applies them. `make_ev(k, ts)` builds the Ev an int `ev` stands for (ts: that call's time)."""

    __slots__ = ("source", "make_ev", "_calls")

    def __init__(self, source: str, make_ev: Callable[[int, float | None], Ev]) -> None:
        self.source = source
        self.make_ev = make_ev
        self._calls: dict[str, SignalCalls] = {}

    def calls_of(self, signal: str) -> SignalCalls:
        """The pending calls of `signal` (callers append to its four lists together, in call order)."""
        c = self._calls.get(signal)
        if c is None:
            c = self._calls[signal] = SignalCalls()
        return c

    def note(self, signal: str, ts: float | None, ev: Ev | int, attempt: int | None, role: str = "") -> None:
        c = self._calls.get(signal)
        if c is None:
            c = self._calls[signal] = SignalCalls()
        c.tss.append(ts)
        c.attempts.append(attempt)
        c.roles.append(role)
        c.evs.append(ev)

    def flush(self, state: JobHealth) -> None:
        signals = state.signals
        for signal, c in self._calls.items():
            stat = signals.get(signal)
            if stat is None:
                if len(signals) >= MAX_SIGNALS:
                    continue  # note_signal notes nothing once the book is full
                stat = signals[signal] = SignalStat()
            _apply(stat, c, self.source, self.make_ev)
        self._calls.clear()


def _apply(stat: SignalStat, c: SignalCalls, source: str, make_ev: Callable[[int, float | None], Ev]) -> None:
    tss = c.tss
    n = len(tss)
    if not n:
        return
    stat.count += n
    # attempts: note_signal appends each new one while fewer than 16 are kept, in call order
    kept_attempts = stat.attempts
    for a in dict.fromkeys(c.attempts):
        if a is not None and a not in kept_attempts and len(kept_attempts) < _MAX_ATTEMPTS:
            kept_attempts.append(a)
    roles = c.roles
    evidence = stat.evidence
    if (len(evidence) >= MAX_EVIDENCE_PER_SIGNAL and None not in tss
            and roles.count(roles[0]) == n and stat.last_ts is not None):
        _apply_timed(stat, c, source, make_ev)
        return
    _apply_in_order(stat, c, source, make_ev)


def _apply_timed(stat: SignalStat, c: SignalCalls, source: str, make_ev: Callable[[int, float | None], Ev]) -> None:
    """Every call timed, the evidence already full, one role: the calls' effect from min/max alone.

    * first/last time: the min/max of the old ones and the calls' (ties keep the earlier, as < and >);
    * the latest evidence slot: each call whose time is >= the slot's replaces it, so the last
      replacement is the last call at the calls' maximum M, if M >= the slot's time (or that time is None);
    * stream and role: set by each call whose time reaches the running last time, i.e. by some call
      iff M >= the old last time; all calls carry the same role."""
    tss = cast(list[float], c.tss)  # no None among them (the caller's test)
    top = max(tss)
    last0 = cast(float, stat.last_ts)  # not None (the caller's test)
    first0 = stat.first_ts
    low = min(tss)
    stat.first_ts = low if first0 is None or low < first0 else first0
    stat.last_ts = top if top > last0 else last0
    evidence = stat.evidence
    kept = evidence[-1].ts
    if kept is None or top >= kept:
        k = len(tss) - 1 - tss[::-1].index(top)
        ev = c.evs[k]
        evidence[-1] = ev if isinstance(ev, Ev) else make_ev(ev, tss[k])
    if top >= last0:
        stat.stream = source
        role = c.roles[0]
        if role:
            stat.role = role


def _apply_in_order(stat: SignalStat, c: SignalCalls, source: str, make_ev: Callable[[int, float | None], Ev]) -> None:
    """note_signal's steps call by call, the latest evidence slot's Ev built once at the end."""
    first, last = stat.first_ts, stat.last_ts
    evidence = stat.evidence
    pending = -1  # the call that holds the latest evidence slot, not yet built
    pending_ts: float | None = None
    role = stat.role
    touched = False
    evs = c.evs
    for i, (ts, r) in enumerate(zip(c.tss, c.roles)):
        if ts is not None:
            first = ts if first is None or ts < first else first
            last = ts if last is None or ts > last else last
        if pending < 0 and len(evidence) < MAX_EVIDENCE_PER_SIGNAL:
            ev = evs[i]
            evidence.append(ev if isinstance(ev, Ev) else make_ev(ev, ts))
            if len(evidence) > 1 and (ts or 0.0) < (evidence[-2].ts or 0.0):
                evidence.sort(key=lambda e: (e.ts or 0.0))
        else:
            kept = evidence[-1].ts if pending < 0 else pending_ts
            if ts is None or kept is None or ts >= kept:
                pending, pending_ts = i, ts
        if ts is None or last is None or ts >= last:
            touched = True
            if r:
                role = r
    stat.first_ts, stat.last_ts = first, last
    if pending >= 0:
        ev = evs[pending]
        evidence[-1] = ev if isinstance(ev, Ev) else make_ev(ev, pending_ts)
    if touched:
        stat.stream = source
        stat.role = role
