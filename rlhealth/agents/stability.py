"""Verdict stability and freshness, between the core's raw judgements and what is published.

Pure: no I/O, no clock. Time is the judging time of each verdict (`Verdict.produced_at`).
`watch` and the stream worker call `stabilize` on every raw judgement and `key_facts` to decide
whether the published verdict changed enough to be printed / republished.

Hysteresis (docs/verdicts.md):

* NO-KILL -> KILL is published at once: the core only returns KILL when its evidence is complete
  (two independent families, or the same failure on every burned attempt), so it is never delayed;
  it comes with the core's escalate.
* KILL -> NO-KILL, and escalate lowered while the verdict stays, are published only once the core
  has said so on every judgement for `HOLD_S` seconds of judging time; escalate raised while the
  verdict stays, after `ESCALATE_RISE_S`. Until then the published call stays,
  with fresh times and `held` naming the pending change; a judgement that returns to the published
  call cancels it.
* The first verdict of a job is published as it is, and so is a judgement earlier than the last.
* A judgement of a job that has ended (`job_status` TERMINAL) is published at once: there is
  nothing left to kill, and a held KILL would ask a person to act on a job that is gone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rlhealth.schemas import HeldChange, Verdict

HOLD_S = 900.0  # KILL -> NO-KILL and escalate lowered: the raw call must hold this long (judging time)
ESCALATE_RISE_S = 300.0  # escalate raised while the verdict stays NO-KILL

# Bands of a verdict's age (judging time - newest event): crossing one republishes a verdict.
AGE_BANDS_S = (60.0, 300.0, 900.0, 3600.0, 6 * 3600.0)


@dataclass
class Stability:
    """Per-job memory of the hysteresis: the published call and the raw call pending since when."""

    shown: Verdict | None = None
    pending_call: tuple[str, bool] | None = None
    pending_since: datetime | None = None

    def to_dict(self, shown_json: dict[str, Any] | None = None) -> dict[str, Any]:
        """`shown_json`: `shown.model_dump(mode="json")` when the caller already has it."""
        if self.shown is not None and shown_json is None:
            shown_json = self.shown.model_dump(mode="json")
        return {
            "shown": shown_json if self.shown is not None else None,
            "pending_call": list(self.pending_call) if self.pending_call else None,
            "pending_since": self.pending_since.isoformat() if self.pending_since else None,
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any] | None, shown: Verdict | None = None) -> Stability:
        """`shown`: the verdict `obj["shown"]` validates to, when the caller already has it."""
        if not obj:
            return cls()
        if shown is None and obj.get("shown"):
            shown = Verdict.model_validate(obj["shown"])
        pc = obj.get("pending_call")
        ps = obj.get("pending_since")
        return cls(shown=shown, pending_call=(str(pc[0]), bool(pc[1])) if pc else None,
                   pending_since=datetime.fromisoformat(ps) if ps else None)


def call_of(v: Verdict) -> tuple[str, bool]:
    return (v.verdict, v.escalate)


def hold_for(old: tuple[str, bool], new: tuple[str, bool]) -> float:
    """Seconds of judging time the raw call `new` must hold before it replaces the published `old`."""
    if old == new or new[0] == "KILL" and old[0] != "KILL":
        return 0.0  # nothing to hold, or a KILL (complete evidence): at once
    if old[0] != new[0]:
        return HOLD_S  # KILL -> NO-KILL
    return ESCALATE_RISE_S if new[1] else HOLD_S  # escalate raised / lowered while the verdict stays


def held_until(shown_at: datetime | None, shown_call: tuple[str, bool] | None,
               pending_call: tuple[str, bool] | None, pending_since: datetime | None,
               raw: Verdict) -> tuple[datetime, datetime] | None:
    """Whether `stabilize` holds `raw` back: None when it publishes `raw` as it is, else (since, until)
    of the held change. Needs only these facts of the memory, not the whole published verdict."""
    now = raw.produced_at
    if shown_at is None or shown_call is None or now < shown_at:
        return None  # first verdict, or time went backwards: start afresh
    new = call_of(raw)
    hold = 0.0 if raw.job_status == "TERMINAL" else hold_for(shown_call, new)
    if hold <= 0:
        return None
    since = pending_since if pending_call == new and pending_since is not None else now
    until = since + timedelta(seconds=hold)
    return None if now >= until else (since, until)


def stabilize(book: Stability | None, raw: Verdict) -> tuple[Verdict, Stability]:
    """The verdict to publish for `raw` and the new memory. `raw.produced_at` is the judging time."""
    book = book or Stability()
    shown = book.shown
    out, pending_call, pending_since = stabilize_facts(
        shown.produced_at if shown else None, call_of(shown) if shown else None, shown, book.pending_call,
        book.pending_since, raw)
    return out, Stability(shown=out, pending_call=pending_call, pending_since=pending_since)


def needs_shown(shown_call: tuple[str, bool] | None) -> bool:
    """Whether `stabilize_facts` may need the published verdict itself, not only its time and call:
    only a published KILL can be held back against a raw NO-KILL, and a held call re-dates the
    published verdict (`hold_for`: NO-KILL -> KILL is never held, an escalate change keeps the raw facts)."""
    return shown_call is not None and shown_call[0] == "KILL"


def stabilize_facts(shown_at: datetime | None, shown_call: tuple[str, bool] | None, shown: Verdict | None,
                    pending_call: tuple[str, bool] | None, pending_since: datetime | None,
                    raw: Verdict) -> tuple[Verdict, tuple[str, bool] | None, datetime | None]:
    """`stabilize` from the facts of the memory: the published verdict's judging time and call, the
    pending call and since when. `shown`, the published verdict itself, is read only when its call is
    held back (then `needs_shown(shown_call)`); otherwise it may be None. Returns the verdict to
    publish and the new pending call and its start (None, None when `raw` is published as it is)."""
    held_for = held_until(shown_at, shown_call, pending_call, pending_since, raw)
    if shown_call is None or held_for is None:
        return raw, None, None
    since, until = held_for
    now = raw.produced_at
    old = shown_call
    held = HeldChange(raw_verdict=raw.verdict, raw_escalate=raw.escalate, since=since, until=until)
    if old[0] == raw.verdict:
        # only escalate is held: the raw facts with the published escalate
        out = raw.model_copy(update={"escalate": old[1], "held": held})
    else:
        # the call is held: the published verdict, re-dated to this judgement
        if shown is None:
            raise ValueError("a held call needs the published verdict (needs_shown)")
        out = shown.model_copy(update={"produced_at": now, "event_time": raw.event_time, "age_s": raw.age_s,
                                       "held": held, "seq": raw.seq})
    return out, call_of(raw), since


def age_band(age_s: float | None) -> int:
    if age_s is None:
        return -1
    return sum(1 for b in AGE_BANDS_S if age_s >= b)


def next_band_at(v: Verdict) -> datetime | None:
    """The judging time at which `v`'s age (`age_s`, judging time - newest event, rounded to the ms)
    enters its next band, None past the last band or without an age: until then `age_band` is the same."""
    if v.age_s is None or v.event_time is None:
        return None
    for b in AGE_BANDS_S:
        if v.age_s < b:
            # round(age, 3) reaches b half a millisecond before the age does: a millisecond of margin
            return v.event_time + timedelta(seconds=b - 0.001)
    return None


def key_facts(v: Verdict) -> tuple:
    """What a consumer must be told about when it changes: the call, the gates (status, codes,
    families), the staleness band, the evidence behind the verdict and whether a change is held."""
    gates = tuple((g.status, tuple(g.codes), tuple(g.families), len(g.evidence))
                  for g in (v.gates.A, v.gates.B, v.gates.C))
    evidence = tuple((e.source, e.rule_id, e.event_time) for e in v.evidence)
    held = (v.held.raw_verdict, v.held.raw_escalate) if v.held else None
    return (v.verdict, v.job_status, v.confidence, v.escalate, gates, age_band(v.age_s), evidence, held,
            v.restarts.burned, v.restarts.same_failure)


def changed(previous: Verdict | None, current: Verdict) -> bool:
    return previous is None or key_facts(previous) != key_facts(current)


__all__ = ["AGE_BANDS_S", "ESCALATE_RISE_S", "HOLD_S", "Stability", "age_band", "call_of", "changed", "held_until",
           "hold_for", "key_facts", "needs_shown", "next_band_at", "stabilize", "stabilize_facts"]
