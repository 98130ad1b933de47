"""When the trainer last advanced, as far as the evidence shows it. Pure.

A trainer that prints only tqdm bars and metric dicts gives its lines no time of their own: the reader
lends them the first timestamp printed after them (in a capture, often the crash's own NCCL watchdog
line), so they read as fresh at the very moment of the hang. Such a time is an upper bound
(`TrainerState.last_progress_bound`), not evidence of progress.

An NCCL watchdog line says more than that a collective timed out: "ran for N milliseconds" dates when
the collective was issued, and no step of that group completed from then on (later collectives queue
behind it). So a progress time that is only an upper bound, falling inside that stuck window, cannot
show that the trainer advanced after the collective was issued: the trainer's last progress is then
taken as the issue time. A progress line with a time of its own (or after an earlier stamp of its
stream) inside the window is believed: a stuck side group (an engine's) does not stop a trainer. So is one
in another stream than the watchdog's: there its time is not the watchdog's (a file with no stamp at all
takes its mtime, the time of its last line), and the two files' order says nothing.

Known limit: a live tail of a log that never printed a stamp dates its lines when they were read, which is
close to when they were written; such a line inside the stuck window of a watchdog later printed in the same
log is still treated as unproven. In a synchronous RL loop a stuck collective stops the trainer, so this
only errs for a side group's hang logged in the trainer's own unstamped stream.
"""

from __future__ import annotations

from typing import NamedTuple

from rlhealth.agents.lognames import unrotated_name
from rlhealth.agents.state import JobHealth
from rlhealth.agents.thresholds import DEFAULT, Thresholds


class ProgressTime(NamedTuple):
    ts: float | None  # the trainer's last progress time Gate A relies on
    # (the lent time, when the collective was issued, how long it had run) when a stuck collective moved it
    bounded: tuple[float, float, float] | None


def progress_time(state: JobHealth, t: Thresholds = DEFAULT) -> ProgressTime:
    tr = state.trainer
    ts = tr.last_progress_ts
    stuck = state.collective_stuck
    if ts is None or not tr.last_progress_bound or stuck is None:
        return ProgressTime(ts, None)
    seen, issued, attempt, stream = stuck
    current = state.sched.attempt
    if attempt is not None and current is not None and attempt != current:
        return ProgressTime(ts, None)  # an earlier attempt's hang says nothing of this one's steps
    if unrotated_name(stream) != unrotated_name(tr.last_progress_source):  # a rotation is the same log
        return ProgressTime(ts, None)
    # Only a time lent near the watchdog line (read with it, or the first stamp after the progress line
    # and the watchdog both): a lent time long after it comes from later output, which the stuck window
    # does not cover.
    if issued < ts <= seen + t.lent_progress_window_s:
        return ProgressTime(issued, (ts, issued, seen - issued))
    return ProgressTime(ts, None)
