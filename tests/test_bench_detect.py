"""bench/detect.py: the pieces that make its numbers (no broker here; the bench itself runs one)."""

from __future__ import annotations

import importlib.util
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rlhealth.schemas import JobSpec, LogBatch, Source

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def detect():
    spec = importlib.util.spec_from_file_location("bench_detect", ROOT / "bench" / "detect.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_detect"] = mod
    spec.loader.exec_module(mod)
    return mod


T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S,000")


def test_time_sliced_cuts_batches_at_window_boundaries_and_dates_continuation_lines(detect) -> None:
    lines = [
        f"{_stamp(T0)} INFO step 1",
        f"{_stamp(T0 + timedelta(seconds=3))} INFO step 2",
        f"{_stamp(T0 + timedelta(seconds=25))} ERROR boom",
        "Traceback (most recent call last):",  # no stamp: dated by the line before, stays with it
        '  File "x.py", line 1, in <module>',
        "RuntimeError: boom",
        f"{_stamp(T0 + timedelta(seconds=61))} INFO restarted",
    ]
    batch = LogBatch(job_id="j", event_time=T0 + timedelta(seconds=61), lines=lines,
                     offsets=list(range(0, 70, 10)), first_line_no=100, source=Source(stream="logs/a.log"))
    spec = JobSpec(job_id="j", event_time=T0)
    out = detect.time_sliced([batch, spec], 10.0, T0)
    assert out[0].kind == "job_spec"
    pieces = out[1:]
    assert [p.lines for p in pieces] == [lines[:2], lines[2:6], lines[6:]]
    assert [p.event_time for p in pieces] == [T0 + timedelta(seconds=3), T0 + timedelta(seconds=25),
                                              T0 + timedelta(seconds=61)]
    assert pieces[1].ts == [T0 + timedelta(seconds=25)] * 4  # the traceback takes its header's time
    assert [p.first_line_no for p in pieces] == [100, 102, 106]
    assert pieces[1].offsets == [20, 30, 40, 50]


def test_time_sliced_keeps_a_stream_in_order_when_its_stamps_go_back(detect) -> None:
    a = LogBatch(job_id="j", event_time=T0 + timedelta(seconds=30), lines=[f"{_stamp(T0 + timedelta(seconds=30))} x"],
                 source=Source(stream="s"))
    b = LogBatch(job_id="j", event_time=T0 + timedelta(seconds=40),
                 lines=[f"{_stamp(T0 + timedelta(seconds=5))} late", f"{_stamp(T0 + timedelta(seconds=40))} y"],
                 source=Source(stream="s"))
    out = detect.time_sliced([a, b], 10.0, T0)
    times = [e.event_time for e in out]
    assert times == sorted(times) and [e.lines[0][-1] for e in out] == ["x", "e", "y"]


def test_scores_and_percentiles(detect) -> None:
    assert detect.pct([5.0], 0.95) == 5.0
    assert detect.pct([float(x) for x in range(1, 21)], 0.95) == 19.0
    assert detect.pct([float(x) for x in range(1, 21)], 0.5) == 10.0

    def case(name: str, allowed: list[str]):
        return detect.Case(name, "tests", Path("."), {"verdict_in": allowed})

    cases = [case("a", ["KILL"]), case("b", ["KILL"]), case("c", ["NO-KILL"]), case("d", ["KILL", "NO-KILL"])]
    got = {"a": "KILL", "b": "NO-KILL", "c": "KILL", "d": "KILL"}
    assert detect.kill_scores(cases, got) == (1, 1, 1, 0.5, 0.5, 0.5)


@pytest.mark.parametrize("name", ["sglang_rollout_server_dead", "healthy_vllm_warning_storm"])
def test_fold_matches_the_probe_and_times_the_alarm(detect, name: str) -> None:
    from rlhealth.runtime import build_core

    core = build_core()
    (case,) = detect.find_cases([name])
    _events, emb = detect.run_embedded(core, case, 10.0, 10.0)
    assert not emb.problems
    assert emb.fold_final is not None and emb.fold_final.same_call(emb.verdict)
    if case.expect_kill:
        assert emb.causal is not None and emb.alarm is not None and emb.kill is not None
        assert emb.alarm.time >= emb.causal and 0 <= emb.ttd_s <= 60  # a dead server's traceback: seconds
    else:
        assert emb.kills_seen == 0 and emb.alarm is None and emb.ttd_s is None
