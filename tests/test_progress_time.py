"""A trainer's unstamped progress lines borrow the time of the first stamp printed after them; when that
stamp is an NCCL watchdog saying its collective had run for N ms, the borrowed time proves no step after the
collective was issued (rlhealth.agents.progress_time). Pure functions as tables, then the core end to end."""

from __future__ import annotations

import pytest

from rlhealth.agents.progress_time import progress_time
from rlhealth.agents.state import JobHealth
from rlhealth.runtime import build_core
from tests.corekit import Job, at, c10_ts

T = 1_000_000.0  # the watchdog line's time


S = "logs/train.log"


@pytest.mark.parametrize(("progress", "bound", "stuck", "attempt", "expect"), [
    (T, True, (T, T - 1800, None, S), None, T - 1800),  # lent by the watchdog's own batch: moved to the issue time
    (T + 299, True, (T, T - 1800, None, S), None, T - 1800),  # lent a little after it (the stamp that followed)
    (T + 301, True, (T, T - 1800, None, S), None, T + 301),  # lent long after: later output, outside the window
    (T - 1801, True, (T, T - 1800, None, S), None, T - 1801),  # already older than the issue time
    (T - 1800, True, (T, T - 1800, None, S), None, T - 1800),  # equal: nothing to move
    (T, False, (T, T - 1800, None, S), None, T),  # a time of its own (or after an earlier stamp): believed
    (T, True, (T, T - 1800, None, "logs/engine.log"), None, T),  # the watchdog in another stream: its time not lent
    (T, True, None, None, T),  # no watchdog duration
    (T, True, (T, T - 1800, 1, S), 2, T),  # the hang was an earlier attempt's
    (T, True, (T, T - 1800, 2, S), 2, T - 1800),  # this attempt's
    (None, True, (T, T - 1800, None, S), None, None),  # no progress at all
])
def test_progress_time_table(progress, bound, stuck, attempt, expect) -> None:
    state = JobHealth(job_id="j")
    state.trainer.last_progress_source = S
    state.trainer.last_progress_ts = progress
    state.trainer.last_progress_bound = bound
    state.collective_stuck = stuck
    state.sched.attempt = attempt
    got = progress_time(state)
    assert got.ts == expect
    assert (got.bounded is not None) == (expect != progress)


@pytest.fixture(scope="module")
def core():
    return build_core()


def _watchdog(minute: float, ran_ms: int) -> str:
    return (f"[rank1]:[E{c10_ts(at(minute))} ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective operation "
            f"timeout: WorkNCCL(SeqNum=49296, OpType=_ALLGATHER_BASE, NumelIn=192, NumelOut=576, Timeout(ms)=1800000) "
            f"ran for {ran_ms} milliseconds before timing out.")


def _bars(n: int) -> list[str]:
    return [f" {s * 100 // 1200:2d}%|▏         | {s}/1200 [0:{s:02d}:00<17:00:00, 60.00s/it]" for s in range(1, n + 1)]


def _job(core, lines: list[str], minute: float) -> Job:
    job = Job(core).spec(expected_step_s=60).states(0, minute + 2, every=1)
    job.log(minute, lines, stream="logs/train.log")
    return job


def test_unstamped_steps_before_a_thirty_minute_watchdog_are_a_wedge(core) -> None:
    """open-r1#658's shape: tqdm bars (no stamps), then the watchdog at minute 100 saying its collective ran 30 min."""
    v = _job(core, _bars(40) + [_watchdog(100, 1_800_076)], 100).judge(102)
    assert (v.verdict, v.job_status) == ("KILL", "WEDGED")
    assert "A.progress_time_before_stuck_collective" in v.gates.A.codes
    assert {"hang_log", "progress_stall"} <= set(v.gates.A.families)


def test_stamped_steps_inside_the_window_are_believed(core) -> None:
    """The same bars with times of their own, minutes before the watchdog: the stuck group was not the trainer's
    (or the watchdog is late): no step is moved back and no wedge is called on the watchdog's duration alone."""
    stamped = [f"[rank0]:[I{c10_ts(at(95 + i / 10))} trainer.py:1] {b}" for i, b in enumerate(_bars(40))]
    v = _job(core, stamped + [_watchdog(100, 1_800_076)], 100).judge(102)
    assert "A.progress_time_before_stuck_collective" not in v.gates.A.codes
    assert v.verdict == "NO-KILL"


def test_a_short_collective_does_not_reach_back_past_the_cadence(core) -> None:
    """A watchdog whose collective ran 20 s: the bars may be lent its time, but the issue time is too recent to
    make the trainer stale."""
    v = _job(core, _bars(40) + [_watchdog(100, 20_000)], 100).judge(101)
    assert v.verdict == "NO-KILL"
    assert v.job_status != "WEDGED"


def test_the_verdict_does_not_depend_on_where_the_batches_were_cut(core) -> None:
    lines = _bars(40) + [_watchdog(100, 1_800_076)]
    whole = _job(core, lines, 100).judge(102)
    job = Job(core).spec(expected_step_s=60).states(0, 102, every=1)
    for i in range(0, len(lines), 7):
        job.log(100, lines[i:i + 7], stream="logs/train.log")
    cut = job.judge(102)
    assert (cut.verdict, cut.job_status, cut.gates.A.codes) == (whole.verdict, whole.job_status, whole.gates.A.codes)


@pytest.mark.parametrize(("progress_stream", "moved"), [
    ("logs/train.log.2.gz", True),  # an older rotation of the watchdog's log lent its time by the newer one
    ("logs/train.log.1", True),
    ("logs/other/train.log", False),  # the same name in another folder is another log
    ("logs/train.out", False),
])
def test_a_rotation_of_the_watchdogs_log_is_the_same_log(progress_stream: str, moved: bool) -> None:
    state = JobHealth(job_id="j")
    state.trainer.last_progress_source = progress_stream
    state.trainer.last_progress_ts = T
    state.trainer.last_progress_bound = True
    state.collective_stuck = (T, T - 1800, None, S)
    assert (progress_time(state).ts == T - 1800) == moved
