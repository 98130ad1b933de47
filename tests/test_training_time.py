"""Effective training time: the accounting as tables of step/restart events, and on captures."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlhealth.agents.training_time import (
    MAX_ADVANCES,
    TrainingClock,
    note_duration,
    note_restart,
    note_step,
    summarize,
)
from tests.scenario_support import ROOT, shared_dir

T = 1_000_000.0


def clock_of(events: list[tuple]) -> TrainingClock:
    """("step", ts, step[, duration]) | ("restart", ts) | ("duration", step, seconds)"""
    c = TrainingClock()
    for ev in events:
        if ev[0] == "step":
            note_step(c, T + ev[1], ev[2], ev[3] if len(ev) > 3 else None)
        elif ev[0] == "restart":
            note_restart(c, T + ev[1])
        else:
            note_duration(c, ev[1], ev[2])
    return c


def steady(n: int, every: float = 60.0, start: float = 0.0, first_step: int = 1) -> list[tuple]:
    return [("step", start + i * every, first_step + i) for i in range(n)]


# (name, events, origin offset, until offset, cadence, expected {part: seconds}, expected ratio or None)
CASES = [
    ("no step yet: all bring-up, ratio unknown", [], 0, 600, None,
     {"bring_up": 600, "productive": 0}, None),
    ("steady steps after a 300 s bring-up", steady(11, start=300), 0, 900, None,
     {"bring_up": 300, "productive": 600, "stalled": 0, "failures": 0}, 600 / 900),
    ("a hang after step 10: one typical step productive, the rest stalled", steady(10), 0, 540 + 3600, None,
     {"productive": 540 + 60, "stalled": 3600 - 60, "failures": 0}, 600 / 4140),
    ("a crash and restart inside a gap: the excess is failures",
     steady(10) + [("restart", 900), ("step", 540 + 1800, 11)] + steady(5, start=540 + 1860, first_step=12),
     0, 540 + 1860 + 240, None,
     {"productive": 540 + 60 + 60 + 240, "failures": 1740, "stalled": 0}, 900 / 2640),
    ("a restart learned after the steps that spanned it still moves the gap to failures",
     steady(10) + [("step", 540 + 1800, 11)] + steady(5, start=540 + 1860, first_step=12) + [("restart", 900)],
     0, 540 + 1860 + 240, None,
     {"failures": 1740, "stalled": 0}, 900 / 2640),
    ("re-printed old steps after a rollback do not count as progress",
     steady(10) + [("step", 700, 5), ("step", 760, 6)] + [("step", 1200, 11)], 0, 1200, None,
     {"productive": 540 + 60, "stalled": 600}, 600 / 1200),
    ("unstamped steps placed by their printed durations",
     [("step", 0, 1), ("step", 0, 2, 100.0), ("step", 0, 3, 100.0), ("step", 0, 4, 100.0)], 0, 2000, None,
     {"productive": 300 + 100, "stalled": 1600}, 400 / 2000),
    ("a duration printed after the step line (verl: step rule, then metrics rule)",
     [("step", 0, 1), ("step", 0, 2), ("duration", 2, 100.0), ("step", 0, 3), ("duration", 3, 100.0),
      ("step", 0, 4), ("duration", 4, 100.0)], 0, 2000, None,
     {"productive": 400, "stalled": 1600}, 0.2),
    ("too few advances: the spec's cadence prices the tail", [("step", 0, 1), ("step", 100, 2)], 0, 100 + 3000, 100.0,
     {"productive": 200, "stalled": 2900}, 200 / 3100),
    ("a restart with no typical step known is unattributed, and the ratio unknown",
     [("step", 0, 1), ("restart", 500), ("step", 4000, 2)], 0, 4000, None,
     {"unattributed": 4000}, None),
]


@pytest.mark.parametrize("name,events,origin,until,cadence,parts,ratio", CASES, ids=[c[0] for c in CASES])
def test_accounting_table(name, events, origin, until, cadence, parts, ratio) -> None:
    tt = summarize(clock_of(events), T + origin, T + until, cadence)
    got = tt.as_dict()
    for part, seconds in parts.items():
        assert got[part] == pytest.approx(seconds), (name, got)
    assert tt.wall_s == pytest.approx(until - origin)
    assert (tt.ratio is None) == (ratio is None)
    if ratio is not None:
        assert tt.ratio == pytest.approx(ratio)


def test_state_stays_bounded_and_evicted_advances_keep_their_price() -> None:
    events = steady(MAX_ADVANCES * 3) + [("restart", 60 * MAX_ADVANCES * 3 + 30)]
    events += [("step", 60 * MAX_ADVANCES * 3 + 1800, MAX_ADVANCES * 3 + 1)]
    c = clock_of(events)
    assert len(c.advances) == MAX_ADVANCES
    tt = summarize(c, T, T + 60 * MAX_ADVANCES * 3 + 1800)
    # 3N steps a minute apart (3N-1 advances), then one step 1860 s later across a restart:
    # a typical minute of it productive, the rest failures, although most advances were evicted
    assert tt.productive_s == pytest.approx(60 * (MAX_ADVANCES * 3 - 1) + 60)
    assert tt.failures_s == pytest.approx(1860 - 60) and tt.stalled_s == 0


def _capture(name: str) -> Path:
    for base in (ROOT / "tests" / "scenarios", shared_dir() / "scenarios"):
        if (base / name / "capture").is_dir():
            return base / name / "capture"
    pytest.skip(f"scenario {name} not found")


@pytest.mark.parametrize("name,check", [
    ("healthy_learning", lambda t: t.ratio is not None and t.ratio > 0.8 and t.stalled_s == t.failures_s == 0),
    # verl step lines without stamps, timed by their `timing_s/step`; then a 78-minute allreduce hang
    ("allreduce_hang_util_power", lambda t: t.ratio is not None and 0.3 < t.ratio < 0.7 and t.stalled_s > 3600),
    ("host_oom_crashloop_k8s", lambda t: t.failures_s > 600 and t.ratio is not None and t.ratio < 0.3),
    ("tail_only_nccl_hang", lambda t: t.ratio is None),  # no step line at all: unknown, not 0
])
def test_training_time_on_captures(name: str, check) -> None:
    from rlhealth.embedded import probe
    from rlhealth.runtime import build_core

    core = build_core()
    result = probe(_capture(name), core)
    tt = core.metrics(result.state, result.verdict.produced_at).training_time
    assert tt is not None and check(tt), tt
    assert tt.wall_s == pytest.approx(tt.bring_up_s + tt.productive_s + tt.stalled_s + tt.failures_s
                                      + tt.unattributed_s)


def test_probe_prints_the_effective_training_time_line() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "rlhealth", "probe", str(_capture("allreduce_hang_util_power")),
                          "--no-progress"], capture_output=True, text=True, timeout=300)
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("effective training time: "))
    ratio = int(line.split(": ", 1)[1].split("%", 1)[0])
    assert 30 < ratio < 70 and "stalled" in line


def test_probe_db_keeps_the_training_time_in_the_metric_series(tmp_path: Path) -> None:
    import subprocess
    import sys

    import duckdb

    db = tmp_path / "ev.duckdb"
    subprocess.run([sys.executable, "-m", "rlhealth", "probe", str(_capture("allreduce_hang_util_power")),
                    "--no-progress", "--db", str(db)], capture_output=True, text=True, timeout=300)
    con = duckdb.connect(str(db), read_only=True)
    ratio, seconds = con.execute("SELECT effective_training_ratio, training_time FROM metrics").fetchone()
    import json

    parts = json.loads(seconds)
    assert 0.3 < ratio < 0.7 and parts["stalled"] > 3600
    assert abs(sum(parts.values()) * ratio - parts["productive"]) < 1.0


def test_eviction_window_prices_as_a_full_median_would(monkeypatch) -> None:
    """The sorted window kept between evictions (`_typical_at_eviction`) gives the clock the same
    state as recomputing the median at each eviction: random steps, stalls, restarts inside and
    outside the history, unstamped steps with durations, and two clocks folded in turn."""
    import random

    import msgspec

    from rlhealth.agents import training_time as tt_mod

    def run(seed: int) -> list[bytes]:
        rnd = random.Random(seed)
        clocks = [TrainingClock(), TrainingClock()]
        fronts = [0, 0]
        now = [T, T]
        for _ in range(1500):
            c = rnd.randrange(2)
            r = rnd.random()
            if r < 0.004:
                note_restart(clocks[c], now[c] + rnd.uniform(-2000, 10))
                continue
            fronts[c] += rnd.choice((1, 1, 1, 2, 5))
            if r < 0.08:  # unstamped: its duration places it
                note_step(clocks[c], now[c] - 5, fronts[c], rnd.uniform(10, 90))
            else:
                now[c] += rnd.choice((rnd.uniform(50, 70), 60.0, 60.0, rnd.uniform(0, 3000)))
                note_step(clocks[c], now[c], fronts[c])
        return [msgspec.msgpack.encode(c) for c in clocks]

    used = 0
    for seed in range(6):
        tt_mod._WINDOWS.clear()
        windowed = run(seed)
        used += len(tt_mod._WINDOWS)
        with monkeypatch.context() as m:
            m.setattr(tt_mod, "_typical_at_eviction", lambda c: tt_mod.typical_step_s(c.advances, c.restarts))
            full = run(seed)
        assert windowed == full
    assert used  # the windows were kept (between restarts), not rebuilt at every eviction
