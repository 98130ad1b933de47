"""`codec.encode_direct` (pydantic's serializer in one step) writes the bytes `codec.encode` (a JSON dict
through orjson) writes: the worker sends verdicts and metric points with it, and the verdict topic's
bytes must not change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from rlhealth.embedded import run_events
from rlhealth.runtime import build_core
from rlhealth.schemas import Evidence, Verdict
from rlhealth.schemas.codec import encode, encode_direct
from rlhealth.schemas.evidence import EngineStats, MetricsPoint
from rlhealth.sinks.evidence_records import metrics_point
from rlhealth.sources.capture import open_capture

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)

AWKWARD_FLOATS = [0.0, -0.0, 1e-7, 1e-300, 5e-324, 1e16, 1e22, 1.7976931348623157e308, 0.1, 1 / 3, 12.345, -2.5e-5,
                  float("nan"), float("inf"), float("-inf"), 1_780_000_000.123456, 123456789012345678.0]
AWKWARD_TEXT = ["", "plain", 'quote " and \\ backslash', "tab\tnew\nline\r", "\x00\x01\x1f\x7f", "naïve ✓ \U0001f600",
                "</script>", "\u2028\u2029", "x" * 4000]


def _same(model: Verdict | MetricsPoint) -> None:
    assert encode_direct(model) == encode(model)


@pytest.mark.parametrize("age", AWKWARD_FLOATS)
def test_floats_write_the_same(age: float) -> None:
    v = Verdict(job_id="j", verdict="NO-KILL", confidence="low", job_status="UNKNOWN", reasoning="r", produced_at=T0,
                age_s=age, seq=2**40)
    _same(v)
    _same(MetricsPoint(job_id="j", judged_at=T0, generation_tokens_per_s=age, log_staleness_s={"trainer": age},
                       engines={"e": [EngineStats(at=T0, generation_tokens_per_s=age, running_requests=1,
                                                  waiting_requests=age)]},
                       training_time_s={"productive": age}))


@pytest.mark.parametrize("text", AWKWARD_TEXT)
def test_strings_write_the_same(text: str) -> None:
    v = Verdict(job_id=text or "j", verdict="KILL", confidence="high", job_status="WEDGED", reasoning=text,
                produced_at=T0, next_steps=[text], headline=text, kill_command=text,
                evidence=[Evidence(source=text, text=text, event_time=T0, rule_id=text)], rule_packs={text: text})
    _same(v)


def test_datetimes_write_the_same() -> None:
    for when in (T0, T0 + timedelta(microseconds=1), T0 + timedelta(microseconds=123456),
                 datetime(2026, 6, 1, 14, 0, tzinfo=timezone(timedelta(hours=2))), datetime(1970, 1, 1, tzinfo=UTC),
                 datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)):
        _same(Verdict(job_id="j", verdict="NO-KILL", confidence="low", job_status="UNKNOWN", reasoning="r",
                      produced_at=when, event_time=when))


def _captures() -> list[Path]:
    from tests.scenario_support import shared_dir

    caps = sorted((ROOT / "tests" / "scenarios").glob("*/capture"))
    caps += sorted((shared_dir() / "scenarios").glob("*/capture"))
    caps.append(ROOT / "rlhealth" / "examples" / "capture-healthy")
    return [c for c in caps if c.exists()]


def test_every_captures_verdict_and_metrics_point_write_the_same() -> None:
    core = build_core(())
    n = 0
    for cap_dir in _captures():
        cap = open_capture(cap_dir, batch_lines=500)
        now = cap.info.captured_at
        state, _, _ = run_events(core, cap.info.job_id, cap.events(), now, lambda _j, _f: None)
        for later in (0.0, 61.5, 3600.25):
            v, m, _ = core.judge_with_recheck(state, now + timedelta(seconds=later))
            _same(v.model_copy(update={"seq": 7, "captured": "stream: test"}))
            _same(metrics_point(m))
            n += 1
    assert n > 90
