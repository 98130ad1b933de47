"""The recheck time (`HealthCore.judge_with_recheck`, `rlhealth.agents.recheck`): with the same state, no
judgement before it differs in what a consumer is told about (`stability.key_facts`), on every scenario
capture, judged every few seconds while the capture's events arrive and for seven hours of silence after.
The sweep runs the recheck in strict mode, so time arithmetic the recheck could not follow fails it."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from rlhealth.agents.recheck import Moment, Recheck, UntrackedTimeArithmetic
from rlhealth.agents.stability import AGE_BANDS_S, age_band, key_facts, next_band_at
from tests.scenario_support import ROOT, scenario_dirs, shared_dir

CAPTURES = [d / "capture" for d in scenario_dirs(ROOT / "tests" / "scenarios")] + \
    [d / "capture" for d in scenario_dirs(shared_dir() / "scenarios")]
TAIL_S = 7 * 3600.0  # past the last staleness band (6 h) and the worker's idle expiry (6 h)


@pytest.fixture(scope="module")
def core():
    from rlhealth.runtime import build_core

    return build_core()


def judging_times(first: float, last: float) -> list[float]:
    """Every few seconds over the capture (odd steps, so they do not line up with round thresholds),
    then every 31 s for TAIL_S after its last event."""
    step = max(7.0, (last - first) / 500)
    out, t = [], first
    while t < last:
        out.append(t)
        t += step
    t = last
    while t < last + TAIL_S:
        out.append(t)
        t += 31.0
    return out


def recheck_of(v, at: datetime | None) -> datetime | None:
    """The core's recheck and the age band's next crossing, whichever comes first (what the worker uses)."""
    band = next_band_at(v)
    return min((x for x in (at, band) if x is not None), default=None)


@pytest.mark.skipif(not CAPTURES, reason="no scenario captures")
@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.parent.name)
def test_no_judgement_changes_before_its_recheck(core, capture) -> None:
    from rlhealth.sources.capture import open_capture

    cap = open_capture(capture, batch_lines=200)
    events = list(cap.events())
    state = core.new_state(cap.info.job_id)
    stamps = [e.event_time.timestamp() for e in events]
    times = judging_times(min(stamps), max(stamps))
    i = 0
    anchor = None  # (judged at, key facts, recheck) of the last judgement since the state last changed
    covered = skipped = 0
    for t in times:
        now = datetime.fromtimestamp(t, UTC)
        while i < len(events) and stamps[i] <= t:
            state, _ = core.step(state, events[i], cap.info.captured_at)
            i += 1
            anchor = None
        v, _m, at = core.judge_with_recheck(state, now, strict=True)
        assert at is None or at >= now
        facts = key_facts(v)
        if anchor is not None and anchor[2] is not None and now < anchor[2]:
            assert facts == anchor[1], (capture.parent.name, anchor[0], now, anchor[2])
            skipped += 1
            continue
        covered += 1
        anchor = (now, facts, recheck_of(v, at) if at is not None else next_band_at(v) or datetime.max.replace(
            tzinfo=UTC))
    # The recheck is not trivially "now": most judgements of a silent job are skippable.
    assert skipped > covered, (capture.parent.name, skipped, covered)


def test_next_band_at_is_where_the_band_changes() -> None:
    from rlhealth.schemas import Verdict

    base = datetime(2026, 6, 1, tzinfo=UTC)
    for age in (0.0, 59.9, 60.0, 299.0, 3600.0, 6 * 3600.0 + 1):
        v = Verdict.model_construct(age_s=age, event_time=base, produced_at=base + timedelta(seconds=age))
        nxt = next_band_at(v)
        if age >= AGE_BANDS_S[-1]:
            assert nxt is None
            continue
        assert nxt is not None
        just_before = round((nxt - base).total_seconds() - 0.0001, 3)
        at_next = round((nxt - base).total_seconds() + 0.002, 3)
        assert age_band(just_before) == age_band(age) < age_band(at_next)


def test_moment_records_each_comparison_flip() -> None:
    rec = Recheck(1000.0)
    now = rec.moment()
    since = now - 900.0  # 100 s
    assert since < 300.0  # flips at now = 1200
    assert rec.at == pytest.approx(1200.0, abs=0.01) and rec.at < 1200.0
    assert (now - 950.0) > 10.0  # already true and stays true: no recheck
    assert rec.at < 1200.0
    assert 2 * since > 100.0 and since / 2 < 80.0  # 2*since crosses 100 at 950 (past), since/2 < 80 at 1060
    assert rec.at == pytest.approx(1060.0, abs=0.01)
    window_start = now - 3600.0
    assert 500.0 >= window_start  # noqa: SIM300 - the reflected comparison; leaves the window at 4100
    assert rec.at == pytest.approx(1060.0, abs=0.01)
    assert (now - 1000.0) or True  # truthiness is a comparison with 0: zero now, nonzero just after
    assert rec.at == 1000.0
    assert isinstance(since + 1, Moment) and not isinstance(since - since, Moment)
    assert type(float(since)) is float and float(since) == 100.0


def test_untracked_arithmetic_is_never_silent() -> None:
    rec = Recheck(1000.0)
    int(rec.moment() - 900.0)
    assert rec.at == 1000.0  # not followed: due at once
    strict = Recheck(1000.0, strict=True)
    for op in (lambda m: int(m), lambda m: round(m), lambda m: m // 60, lambda m: m % 60, lambda m: m * m,
               lambda m: 1 / m, lambda m: m.as_integer_ratio(), lambda m: math.floor(m)):
        with pytest.raises(UntrackedTimeArithmetic):
            op(strict.moment() - 900.0)
    assert strict.at == math.inf

