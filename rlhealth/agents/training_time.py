"""Effective training time: the share of a job's wall-clock time spent in productive trainer steps.

Large training platforms report this one number per job (the effective training time ratio) because
it prices every incident: time lost to bring-up, hangs, crashes and restarts is counted apart, so a
team sees what each cost. Pure: folded from step lines and scheduler polls, summarised at `now`.

Accounting, from the trainer's progress frontier (the highest step seen; a restarted process that
re-prints old steps does not move it, so recomputed steps after a checkpoint rollback are lost time):

* before the first step: bring-up (from the job's first event or first running poll);
* between two frontier advances of `n` steps taking `d` seconds: productive, unless a restart falls
  inside (an attempt ended, the attempt number changed, a pod restarted) or `d` exceeds
  `STALL_FACTOR` x `n` x the typical seconds per step; then `n` x typical is productive and the
  rest is charged to failures when a restart falls inside and to stalls otherwise. The recent
  advances are kept and priced when a summary is asked for, so a restart learned late (the
  scheduler's attempt history comes with a later poll) still moves its time to failures;
* after the last advance, up to `now` (or the job's end): the same rule, as a provisional tail.

Unstamped step lines inherit an older stamp; when they print their own duration (verl's
`timing_s/step`) the step is placed that long after the frontier, else it adds no time.

"Typical" is learned from the job's own normal advances, else the core's step cadence (learned from
timers, or declared in the spec). A gap with neither is unattributed. Without any recognised step
line, or with more than `MAX_UNATTRIBUTED_SHARE` of the time unattributed, the ratio is unknown
(None), never 0.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import msgspec

STALL_FACTOR = 3.0  # an advance slower than this many typical steps counts its excess as lost
MIN_TYPICAL_SAMPLES = 3  # normal advances needed before "typical" is trusted
MAX_UNATTRIBUTED_SHARE = 0.25
MAX_ADVANCES = 64  # advances kept for pricing; an older one is priced with what is known when evicted
MAX_RESTART_MARKS = 64


class TrainingClock(msgspec.Struct):
    """Folded state of the accounting (part of JobHealth)."""

    first_step_ts: float | None = None  # bring-up ends here (it starts at the job's first event)
    frontier_step: int | None = None
    frontier_ts: float | None = None
    untimed_from: int | None = None  # the frontier moved from this step without time passing
    # advances evicted from `advances`, already priced: productive, stalled, failures, unattributed
    priced: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    advances: list[tuple[float, float, int]] = msgspec.field(default_factory=list)  # (start, end, steps)
    restarts: list[float] = msgspec.field(default_factory=list)  # sorted restart times


@dataclass(frozen=True, slots=True)
class TrainingTime:
    """Where a job's wall-clock time went, as of one judging time."""

    wall_s: float
    productive_s: float
    bring_up_s: float
    stalled_s: float
    failures_s: float
    unattributed_s: float
    ratio: float | None  # productive / wall; None when unknown

    def as_dict(self) -> dict[str, float]:
        return {"productive": self.productive_s, "bring_up": self.bring_up_s, "stalled": self.stalled_s,
                "failures": self.failures_s, "unattributed": self.unattributed_s}


def typical_step_s(advances: list[tuple[float, float, int]], restarts: list[float],
                   fallback: float | None = None) -> float | None:
    """Median seconds per step over the advances no restart interrupted, else `fallback`."""
    return _typical(advances, _restarted(advances, restarts), fallback)


def _restarted(advances: list[tuple[float, float, int]], restarts: list[float]) -> list[bool]:
    """Per advance: does a restart fall inside it? One bisect when none falls in their whole span
    (the common case: the summary runs for every job at every tick)."""
    if not restarts or not advances:
        return [False] * len(advances)
    i = bisect.bisect_right(restarts, advances[0][0])
    if i == len(restarts) or restarts[i] > advances[-1][1]:
        return [False] * len(advances)
    return [_restart_within(restarts, start, end) for start, end, _ in advances]


def _typical(advances: list[tuple[float, float, int]], restarted: list[bool],
             fallback: float | None) -> float | None:
    if len(restarted) != len(advances):
        raise ValueError("one restarted flag per advance")
    if any(restarted):
        per_step = sorted([(end - start) / steps for (start, end, steps), r in zip(advances, restarted) if not r])
    else:  # the common case (an advance evicted on every step once the history is full): no flags to test
        per_step = sorted([(end - start) / steps for start, end, steps in advances])
    n = len(per_step)
    if n < MIN_TYPICAL_SAMPLES:
        return fallback
    return per_step[n // 2] if n % 2 else (per_step[n // 2 - 1] + per_step[n // 2]) / 2


def note_restart(clock: TrainingClock, ts: float) -> None:
    """A restart happened at (or before) `ts`: an attempt ended or changed, a pod restarted."""
    i = bisect.bisect_left(clock.restarts, ts)
    if i < len(clock.restarts) and clock.restarts[i] == ts:
        return
    clock.restarts.insert(i, ts)
    if len(clock.restarts) > MAX_RESTART_MARKS:
        del clock.restarts[0]


def note_step(clock: TrainingClock, ts: float, step: int, duration_s: float | None = None) -> None:
    """The trainer reported `step` at `ts` (and, when it prints one, the step's own duration); only
    an advance of the frontier counts."""
    if clock.frontier_ts is None or clock.frontier_step is None:
        clock.first_step_ts = clock.frontier_ts = ts
        clock.frontier_step = step
        return
    if step <= clock.frontier_step:
        return
    end = ts
    if end <= clock.frontier_ts and duration_s is not None and duration_s > 0:
        # An unstamped line inherits an older stamp: place the step its reported duration after the
        # frontier (steps back to back) rather than losing its time.
        end = clock.frontier_ts + duration_s * (step - clock.frontier_step)
    if end > clock.frontier_ts:
        _advance(clock, end, step - clock.frontier_step)
        clock.untimed_from = None
    elif clock.untimed_from is None:  # unstamped or out of order: a duration may follow (note_duration)
        clock.untimed_from = clock.frontier_step
    clock.frontier_step = step


def note_duration(clock: TrainingClock, step: int, duration_s: float) -> None:
    """The duration of `step`, printed apart from (or after) the line that moved the frontier to it."""
    if clock.untimed_from is None or step != clock.frontier_step or clock.frontier_ts is None or duration_s <= 0:
        return
    steps = step - clock.untimed_from
    _advance(clock, clock.frontier_ts + duration_s * steps, steps)
    clock.untimed_from = None


def _advance(clock: TrainingClock, end: float, steps: int) -> None:
    assert clock.frontier_ts is not None
    clock.advances.append((clock.frontier_ts, end, steps))
    clock.frontier_ts = end
    if len(clock.advances) > MAX_ADVANCES:
        typical = _typical_at_eviction(clock)
        first = clock.advances.pop(0)
        old = _price([first], [_restart_within(clock.restarts, first[0], first[1])], typical)
        clock.priced = (clock.priced[0] + old[0], clock.priced[1] + old[1], clock.priced[2] + old[2],
                        clock.priced[3] + old[3])


# Per clock (by id), the advances as of its last eviction and their seconds per step, sorted: once the
# history is full every advance evicts one, and re-sorting all of them each time was most of a dense
# trainer log's per-step cost. The advances are compared before the window is used, so a stale or
# reused id only costs a rebuild.
_WINDOWS: dict[int, tuple[list[tuple[float, float, int]], list[float]]] = {}
_MAX_WINDOWS = 1024


def _typical_at_eviction(clock: TrainingClock) -> float | None:
    """`typical_step_s(clock.advances, clock.restarts)` of a full history (MAX_ADVANCES + 1 advances),
    from the window kept since the previous eviction when no restart falls inside the advances."""
    advances, restarts = clock.advances, clock.restarts
    if restarts:
        i = bisect.bisect_right(restarts, advances[0][0])
        if i < len(restarts) and restarts[i] <= advances[-1][1]:
            _WINDOWS.pop(id(clock), None)
            return typical_step_s(advances, restarts)
    start, end, steps = advances[-1]
    newest = (end - start) / steps
    oldest = advances[0]
    kept = _WINDOWS.get(id(clock))
    older = advances[:-1]
    if kept is not None and kept[0] == older:
        window = kept[1]
    else:
        window = sorted([(e - s) / n for s, e, n in older])
        if any(x != x for x in window):  # a NaN (not seen in practice): sorted()'s order is not bisect's
            return typical_step_s(advances, restarts)
    if newest != newest:
        _WINDOWS.pop(id(clock), None)
        return typical_step_s(advances, restarts)
    bisect.insort(window, newest)
    n = len(window)
    typical = window[n // 2] if n % 2 else (window[n // 2 - 1] + window[n // 2]) / 2
    del window[bisect.bisect_left(window, (oldest[1] - oldest[0]) / oldest[2])]
    if len(_WINDOWS) >= _MAX_WINDOWS and id(clock) not in _WINDOWS:
        _WINDOWS.clear()
    _WINDOWS[id(clock)] = (advances[1:], window)
    return typical


def _restart_within(restarts: list[float], start: float, end: float) -> bool:
    i = bisect.bisect_right(restarts, start)
    return i < len(restarts) and restarts[i] <= end


def _price(advances: list[tuple[float, float, int]], restarted: list[bool],
           typical: float | None) -> tuple[float, float, float, float]:
    """(productive, stalled, failures, unattributed) seconds of advances of `steps` steps each."""
    productive = stalled = failures = unknown = 0.0
    for (start, end, steps), r in zip(advances, restarted, strict=True):
        d = end - start
        if typical is None:
            if r:
                unknown += d
            else:
                productive += d
        elif not r and d <= STALL_FACTOR * steps * typical:
            productive += d
        else:
            ok = min(d, steps * typical)
            productive += ok
            if r:
                failures += d - ok
            else:
                stalled += d - ok
    return productive, stalled, failures, unknown


def summarize(clock: TrainingClock, origin_ts: float | None, until: float, cadence_s: float | None = None,
              extra_restarts: tuple[float, ...] = ()) -> TrainingTime:
    """The accounting as of `until` (judging time, or the job's end). `cadence_s` is the core's step
    cadence, used when the job's own advances do not give a typical step yet; `extra_restarts` adds
    restart times known elsewhere in the state (attempt end times from the scheduler)."""
    marks = sorted({*clock.restarts, *extra_restarts}) if extra_restarts else clock.restarts
    if clock.frontier_ts is None or clock.first_step_ts is None:
        wall = max(until - origin_ts, 0.0) if origin_ts is not None else 0.0
        return TrainingTime(wall_s=wall, productive_s=0.0, bring_up_s=wall, stalled_s=0.0, failures_s=0.0,
                            unattributed_s=0.0, ratio=None)
    bring_up = max(clock.first_step_ts - origin_ts, 0.0) if origin_ts is not None else 0.0
    advances = clock.advances
    if until > clock.frontier_ts:  # the step in progress, priced like an advance of one step
        advances = [*advances, (clock.frontier_ts, until, 1)]
    restarted = _restarted(advances, marks)
    stored = len(clock.advances)
    typical = _typical(clock.advances, restarted[:stored], cadence_s)
    now = _price(advances, restarted, typical)
    productive, stalled, failures, unknown = (old + new for old, new in zip(clock.priced, now, strict=True))
    wall = bring_up + productive + stalled + failures + unknown
    ratio = productive / wall if wall > 0 and unknown <= MAX_UNATTRIBUTED_SHARE * wall else None
    return TrainingTime(wall_s=wall, productive_s=productive, bring_up_s=bring_up, stalled_s=stalled,
                        failures_s=failures, unattributed_s=unknown, ratio=ratio)


__all__ = ["MAX_UNATTRIBUTED_SHARE", "STALL_FACTOR", "TrainingClock", "TrainingTime", "note_duration",
           "note_restart", "note_step", "summarize", "typical_step_s"]
