"""Verdict freshness and stability: time fields, the hysteresis, key facts, `watch --clock capture`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rlhealth.agents.stability import (
    ESCALATE_RISE_S,
    HOLD_S,
    Stability,
    call_of,
    changed,
    key_facts,
    stabilize,
)
from rlhealth.schemas import Verdict
from tests.scenario_support import ROOT, scenario_dirs, shared_dir

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
CAPTURES = [d / "capture" for d in scenario_dirs(ROOT / "tests" / "scenarios")] + \
    [d / "capture" for d in scenario_dirs(shared_dir() / "scenarios")]


def v(at: float, verdict: str = "NO-KILL", escalate: bool = False, age: float = 5.0) -> Verdict:
    now = T0 + timedelta(seconds=at)
    return Verdict(job_id="j", verdict=verdict, confidence="high", job_status="ALIVE", escalate=escalate,  # type: ignore[arg-type]
                   reasoning=f"{verdict} at {at}", produced_at=now, event_time=now - timedelta(seconds=age),
                   age_s=age)


def run(calls: list[tuple[float, str, bool]]) -> list[Verdict]:
    book: Stability | None = None
    out = []
    for at, verdict, esc in calls:
        shown, book = stabilize(book, v(at, verdict, esc))
        out.append(shown)
    return out


def test_a_kill_is_never_delayed() -> None:
    out = run([(0, "NO-KILL", False), (60, "KILL", False), (120, "NO-KILL", True), (180, "KILL", True)])
    assert [o.verdict for o in out] == ["NO-KILL", "KILL", "KILL", "KILL"]
    assert out[1].held is None
    out = run([(0, "NO-KILL", True), (60, "KILL", False)])
    assert call_of(out[1]) == ("KILL", False) and out[1].held is None


def test_escalate_beside_a_standing_kill_is_held_too() -> None:
    out = run([(0, "KILL", True), (600, "KILL", False), (1200, "KILL", True), (1800, "KILL", False)])
    assert [o.verdict for o in out] == ["KILL"] * 4 and all(o.escalate for o in out)


def test_kill_to_no_kill_needs_the_no_kill_to_hold() -> None:
    steps = [(0, "KILL", False)] + [(60 * i, "NO-KILL", False) for i in range(1, 20)]
    out = run(steps)
    first_no_kill = next(i for i, o in enumerate(out) if o.verdict == "NO-KILL")
    held_for = (out[first_no_kill].produced_at - out[1].produced_at).total_seconds()
    assert held_for >= HOLD_S
    held = out[1]
    assert held.verdict == "KILL" and held.held is not None and held.held.raw_verdict == "NO-KILL"
    assert held.produced_at == T0 + timedelta(seconds=60)  # re-dated, not the old judgement
    assert held.reasoning == "KILL at 0"  # the published call's own reasoning


def test_a_job_that_ended_is_published_at_once_not_held_under_a_kill() -> None:
    book: Stability | None = None
    _, book = stabilize(book, v(0, "KILL"))
    held, book = stabilize(book, v(60, "NO-KILL"))
    assert held.verdict == "KILL" and held.held is not None  # still running: the change is held
    ended = v(120, "NO-KILL").model_copy(update={"job_status": "TERMINAL"})
    shown, _ = stabilize(book, ended)
    assert shown.verdict == "NO-KILL" and shown.job_status == "TERMINAL" and shown.held is None


def test_escalate_flapping_is_not_published() -> None:
    # the case: True/False/True ten minutes apart while the verdict holds
    steps = [(600 * i, "NO-KILL", i % 2 == 0) for i in range(8)]
    out = run(steps)
    assert all(o.escalate for o in out)
    assert any(o.held is not None for o in out)


def test_escalate_raised_after_it_holds_and_a_return_cancels_the_pending_change() -> None:
    out = run([(0, "NO-KILL", False), (60, "NO-KILL", True), (120, "NO-KILL", False), (180, "NO-KILL", True),
               (180 + ESCALATE_RISE_S, "NO-KILL", True)])
    assert [o.escalate for o in out] == [False, False, False, False, True]
    assert out[1].held is not None and out[2].held is None


def test_time_going_backwards_starts_afresh() -> None:
    out = run([(600, "KILL", False), (0, "NO-KILL", False)])
    assert out[1].verdict == "NO-KILL"


def test_stability_memory_round_trips() -> None:
    _, book = stabilize(None, v(0, "KILL"))
    _, book = stabilize(book, v(60, "NO-KILL"))
    again = Stability.from_dict(book.to_dict())
    assert again.pending_call == book.pending_call and again.pending_since == book.pending_since
    assert again.shown is not None and call_of(again.shown) == call_of(book.shown)  # type: ignore[arg-type]


def test_key_facts_include_the_staleness_band_and_evidence() -> None:
    a = v(0, age=5)
    assert not changed(a, v(30, age=35))  # same band (< 1 min), other judging time
    assert changed(a, v(30, age=65))  # the newest fact crossed a minute
    assert changed(None, a)
    b = a.model_copy(update={"gates": a.gates.model_copy(update={"A": a.gates.A.model_copy(update={"status": "FAIL"})})})
    assert key_facts(a) != key_facts(b)


# -- the core's verdict carries its time --------------------------------------------------------

def test_probe_verdict_carries_judging_time_event_time_age_and_seq() -> None:
    from rlhealth.embedded import probe
    from rlhealth.runtime import build_core
    from rlhealth.schemas import render_text

    cap = ROOT / "tests" / "scenarios" / "tail_only_nccl_hang" / "capture"
    core = build_core()
    a = probe(cap, core).verdict
    b = probe(cap, core).verdict
    assert a.event_time is not None and a.age_s == (a.produced_at - a.event_time).total_seconds()
    assert a.age_s >= 0
    assert b.seq > a.seq > 0  # unique per run
    text = render_text(a)
    assert f"seq: {a.seq}" in text and "JUDGED: " + a.produced_at.strftime("%Y-%m-%dT%H:%M:%SZ") in text
    assert "events to: " + a.event_time.strftime("%Y-%m-%dT%H:%M:%SZ") in text


# -- sweeps over every scenario capture ---------------------------------------------------------

def flips(xs: list) -> int:
    return sum(1 for x, y in zip(xs, xs[1:]) if x != y)


@pytest.mark.skipif(not CAPTURES, reason="no scenario captures")
@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.parent.name)
def test_sweeping_probe_now_bounds_the_flips(capture: Path) -> None:
    """`probe --now` every 2 minutes from an hour before captured_at to an hour after, through the
    hysteresis: the published call flips at most twice per hour of the sweep and never more often
    than the raw one, every KILL is published at the judgement that first says it, and a published
    change of escalate (the verdict staying) never follows the previous change of call within
    ESCALATE_RISE_S."""
    from rlhealth.embedded import probe
    from rlhealth.runtime import build_core
    from rlhealth.sources.capture import open_capture

    core = build_core()
    captured = open_capture(capture).info.captured_at
    book: Stability | None = None
    raw_calls, shown = [], []
    for k in range(-30, 31):
        raw = probe(capture, core, captured + timedelta(minutes=2 * k)).verdict
        out, book = stabilize(book, raw)
        raw_calls.append(call_of(raw))
        shown.append(out)
        if raw.verdict == "KILL":  # never delayed (only its escalate may be held)
            assert out.verdict == "KILL" and (out.held is None or out.held.raw_verdict == "KILL")
    calls = [call_of(o) for o in shown]
    assert flips(calls) <= 4, calls  # a two-hour sweep
    assert flips(calls) <= flips(raw_calls)
    changes = [(o.produced_at, prev.verdict == o.verdict) for prev, o in zip(shown, shown[1:])
               if call_of(prev) != call_of(o)]
    for (a, _), (b, escalate_only) in zip(changes, changes[1:]):
        if escalate_only:
            assert (b - a).total_seconds() >= ESCALATE_RISE_S, changes


@pytest.mark.skipif(not CAPTURES, reason="no scenario captures")
def test_watch_clock_capture_judges_every_scenario_as_probe_does() -> None:
    from rlhealth.embedded import Watcher, probe
    from rlhealth.runtime import build_core

    core = build_core()
    def call(x: Verdict) -> tuple:
        return (x.verdict, x.job_status, x.confidence, x.escalate, x.gates.A.status, x.gates.B.status,
                x.gates.C.status, x.gates.A.codes, x.gates.B.codes, x.gates.C.codes, x.produced_at, x.event_time)

    mismatches = {}
    for capture in CAPTURES:
        expected = probe(capture, core).verdict
        (got,) = Watcher(core, [capture], clock_mode="capture").tick()
        if call(got) != call(expected):
            mismatches[capture.parent.name] = (call(got), call(expected))
    assert not mismatches, mismatches


def test_watch_cli_clock_capture_prints_probes_verdict() -> None:
    import subprocess
    import sys

    cap = ROOT / "tests" / "scenarios" / "slurm_same_checkpoint_crash" / "capture"
    env_run = [sys.executable, "-m", "rlhealth"]
    w = subprocess.run([*env_run, "watch", str(cap), "--clock", "capture", "--iterations", "1", "--format", "json"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    p = subprocess.run([*env_run, "probe", str(cap), "--format", "json"], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert w.returncode == 0, w.stderr
    assert p.returncode == 10, p.stderr
    wv = Verdict.model_validate_json(w.stdout.strip().splitlines()[0])
    pv = Verdict.model_validate_json(p.stdout)
    assert (wv.verdict, wv.confidence, wv.escalate, wv.job_status, wv.gates.A.summary) == \
        (pv.verdict, pv.confidence, pv.escalate, pv.job_status, pv.gates.A.summary)


def test_the_block_for_the_person_on_call_starts_with_why_and_names_the_kill_command() -> None:
    from rlhealth.embedded import probe
    from rlhealth.runtime import build_core
    from rlhealth.schemas import render_text

    core = build_core()
    kill = probe(ROOT / "tests" / "scenarios" / "slurm_same_checkpoint_crash" / "capture", core).verdict
    assert kill.verdict == "KILL" and kill.kill_command == f"scancel {kill.job_id}"
    text = render_text(kill).splitlines()
    assert text[0].startswith("WHY: KILL") and len(text[0]) < 260
    assert any(line.endswith(f"scancel {kill.job_id}") and "never runs it" in line for line in text)
    ok = probe(ROOT / "tests" / "scenarios" / "healthy_vllm_warning_storm" / "capture", core).verdict
    assert ok.verdict == "NO-KILL" and ok.kill_command is None
    assert "KILL COMMAND" not in render_text(ok)
