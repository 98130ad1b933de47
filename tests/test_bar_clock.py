"""tqdm's elapsed clock dates unstamped bar lines past the earlier stamp they borrow (agents/bar_clock.py), never
past a lower bound, and never from a time lent by a later stamp. Tables, then the core end to end."""

from __future__ import annotations

import pytest

from rlhealth.agents.bar_clock import MAX_BARS, bar_time, clock_seconds
from rlhealth.runtime import build_core
from tests.corekit import Job, at, c10_ts


@pytest.mark.parametrize(("text", "seconds"), [
    ("03:10", 190.0), ("1:02:11", 3731.0), ("31:08:58", 112138.0), ("00:00", 0.0),
    ("", None), ("3:1O", None), ("1:2:3:4", None), (None, None), (190, None), ("12", None),
])
def test_clock_seconds(text, seconds) -> None:
    assert clock_seconds(text) == seconds


def test_bar_time_moves_up_from_the_first_line_and_restarts_with_a_new_bar() -> None:
    bars: dict[str, tuple[float, float]] = {}
    assert bar_time(bars, "k", "03:10", 1000.0) == 1000.0  # the first line: its base
    assert bar_time(bars, "k", "14:20", 1000.0) == 1000.0 + 670  # 670 s of the bar's clock later
    assert bar_time(bars, "k", "14:20", 5000.0) == 5000.0  # never below the line's own lower bound
    assert bar_time(bars, "k", "00:05", 1200.0) == 1200.0  # elapsed went down: a new bar, a new base
    assert bar_time(bars, "k", "01:05", 1200.0) == 1260.0
    assert bar_time(bars, "other", "50:00", 1200.0) == 1200.0  # another process's bar: its own base
    assert bar_time(bars, "k", "junk", 1300.0) == 1300.0


def test_bar_bases_are_bounded() -> None:
    bars: dict[str, tuple[float, float]] = {}
    for i in range(MAX_BARS + 5):
        bar_time(bars, f"k{i}", "00:01", 1.0)
    assert len(bars) == MAX_BARS


@pytest.fixture(scope="module")
def core():
    return build_core()


def _bars(first: int, n: int, step_s: int = 60) -> list[str]:
    return [f"  {s // 9:d}%|          | {s}/900 [{(s * step_s) // 60:02d}:{(s * step_s) % 60:02d}<14:00:00, "
            f"{step_s:.2f}s/it]" for s in range(first, first + n)]


def test_a_trainer_printing_only_bars_after_a_start_up_stamp_is_alive(core) -> None:
    """TRL's shape: one stamped start-up warning, then 30 unstamped bars a minute apart (sd-scripts#1925)."""
    stamp = f"[rank0]:[W{c10_ts(at(0))} ProcessGroupNCCL.cpp:4115] [PG ID 0 PG GUID 0 Rank 0]  using GPU 0 to perform barrier"
    job = Job(core).spec(expected_step_s=60).states(0, 32, every=1)
    job.log(0, [stamp] + _bars(1, 30), stream="logs/train.log")
    v = job.judge(31)
    assert (v.verdict, v.job_status, v.gates.A.codes) == ("NO-KILL", "ALIVE", ["A.alive"])
    assert job.last_state.trainer.last_progress_ts == pytest.approx(at(29).timestamp())


def test_bars_in_an_unstamped_head_take_no_clock_from_a_later_stamp(core) -> None:
    """The bars come before the stream's first stamp: their time is only lent by it (an upper bound); the bar's
    clock must not be based on it (it would date them past the stamp)."""
    late = f"[rank0]:[W{c10_ts(at(10))} ProcessGroupNCCL.cpp:4115] [PG ID 0 PG GUID 0 Rank 0]  using GPU 0 to perform barrier"
    job = Job(core).spec(expected_step_s=60).states(0, 12, every=1)
    job.log(10, _bars(1, 30) + [late], stream="logs/train.log")
    job.judge(11)
    assert job.last_state.trainer.last_progress_ts <= at(10).timestamp()


def test_an_eval_bar_does_not_reset_the_training_bars_clock(core) -> None:
    """HF Trainer's eval bar ('50/50 [00:05<...') between training bars: a clock of its own (keyed by its total),
    so the training bar is not dated from the eval bar's base."""
    stamp = f"[rank0]:[W{c10_ts(at(0))} ProcessGroupNCCL.cpp:4115] [PG ID 0 PG GUID 0 Rank 0]  using GPU 0 to perform barrier"
    lines = [stamp] + _bars(60, 1) + [f"100%|██████████| 50/50 [00:05<00:00, {10.0:.2f}it/s]"] + _bars(61, 1)
    job = Job(core).spec(expected_step_s=60).states(0, 5, every=1)
    job.log(0, lines, stream="logs/train.log")
    job.judge(5)
    # the training bar's two lines are 60 s apart on its clock: 60 s after the stamp at most, never 61 min
    assert job.last_state.trainer.last_progress_ts <= at(1).timestamp()
