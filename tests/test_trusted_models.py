"""`schemas.trusted` builds the verdict's evidence without validation (agents/verdict.py `_ev_to_schema`):
it must give exactly the model the validated construction gives, for every evidence shape the core
produces. Checked on a table of shapes and on every piece of evidence in the states folded from the
scenario captures and the bundled example."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from rlhealth.agents.state import Ev, JobHealth
from rlhealth.agents.verdict import _ev_to_schema, _ev_validated
from rlhealth.embedded import run_events
from rlhealth.runtime import build_core
from rlhealth.schemas import Evidence, EvidenceRef, Verdict
from rlhealth.schemas.common import trusted
from rlhealth.sources.capture import open_capture

ROOT = Path(__file__).resolve().parents[1]


def _same(a: Evidence, b: Evidence) -> None:
    assert a == b
    assert type(a) is type(b)
    assert a.model_dump_json() == b.model_dump_json()
    assert a.model_dump(mode="json") == b.model_dump(mode="json")
    assert a.model_dump() == b.model_dump()
    assert list(a.__dict__) == list(b.__dict__)
    assert a.model_fields_set == b.model_fields_set
    assert hash(a) == hash(b)
    assert repr(a) == repr(b)
    assert pickle.loads(pickle.dumps(a)) == b
    assert a.model_copy(update={"text": "x"}) == b.model_copy(update={"text": "x"})
    if a.ref is not None:
        assert b.ref is not None
        assert a.ref.model_fields_set == b.ref.model_fields_set
        assert list(a.ref.__dict__) == list(b.ref.__dict__)


SHAPES = [
    Ev(ts=1_780_000_000.25, source="logs/trainer.log", text="step 3", rule_id="trainer.step", file="logs/trainer.log",
       offset=120),
    Ev(ts=None, source="gpu host-1", text="util 0%"),
    Ev(ts=1_780_000_000, source="kafka", text="x", topic="t", partition=3, kafka_offset=99),
    Ev(ts=0.0, source="s" * 500, text="t" * 9000, rule_id=""),
    Ev(ts=1.5, source="", text="", file="f", offset=None, topic="t", partition=None, kafka_offset=None),
    Ev(ts=1_780_000_000.123456, source="naïve ✓", text="\u00e9\U0001f600 \\ \" line", rule_id="r" * 300),
]


@pytest.mark.parametrize("ev", SHAPES, ids=range(len(SHAPES)))
def test_trusted_evidence_equals_validated(ev: Ev) -> None:
    _same(_ev_to_schema(ev), _ev_validated(ev))


def test_a_verdict_holding_trusted_evidence_dumps_the_same() -> None:
    core = build_core(())
    state = JobHealth(job_id="j")
    from datetime import UTC, datetime
    v = core.judge(state, datetime(2026, 6, 1, tzinfo=UTC))
    a = v.model_copy(update={"evidence": [_ev_to_schema(e) for e in SHAPES]})
    b = v.model_copy(update={"evidence": [_ev_validated(e) for e in SHAPES]})
    assert a.model_dump_json() == b.model_dump_json()
    assert Verdict.model_validate_json(a.model_dump_json()) == b


def test_trusted_names_what_was_given() -> None:
    ref = trusted(EvidenceRef, {"topic": None, "partition": None, "offset": None, "file": "f", "file_offset": 1,
                                "line_no": None}, frozenset({"file", "file_offset"}))
    assert ref == EvidenceRef(file="f", file_offset=1)
    assert ref.model_fields_set == {"file", "file_offset"}


def _captures() -> list[Path]:
    from tests.scenario_support import shared_dir

    caps = sorted((ROOT / "tests" / "scenarios").glob("*/capture"))
    caps += sorted((shared_dir() / "scenarios").glob("*/capture"))
    caps.append(ROOT / "rlhealth" / "examples" / "capture-healthy")
    return [c for c in caps if c.exists()]


def _evidence(state: JobHealth) -> list[Ev]:
    evs: list[Ev] = []
    for stat in state.signals.values():
        evs.extend(stat.evidence)
    for value in state.__struct_fields__:
        got = getattr(state, value)
        if isinstance(got, list):
            evs.extend(x for x in got if isinstance(x, Ev))
    return evs


def test_trusted_evidence_equals_validated_on_every_capture() -> None:
    core = build_core(())
    seen = 0
    for cap_dir in _captures():
        cap = open_capture(cap_dir, batch_lines=500)
        state, _, _ = run_events(core, cap.info.job_id, cap.events(), cap.info.captured_at, lambda _j, _f: None)
        for ev in _evidence(state):
            _same(_ev_to_schema(ev), _ev_validated(ev))
            seen += 1
        # and what the core put in its verdict is what validation gives for the same evidence
        v = core.judge(state, cap.info.captured_at)
        assert Verdict.model_validate_json(v.model_dump_json()) == v
    assert seen > 100


ENGINE_BUCKETS = [
    (1_780_000_000.0, 1500.25, 64.0, 2.0),
    (1_780_000_060, 0, 0, 0),  # ints, as an in-memory state may hold them before its first encode
    (1.5, True, False, 3),
    (1_780_000_000.123, float("nan"), float("inf"), -0.0),
    (0.0, 1e-300, 1e300, -5.5),
]


@pytest.mark.parametrize("bucket", ENGINE_BUCKETS, ids=range(len(ENGINE_BUCKETS)))
def test_trusted_engine_stats_equal_validated(bucket: tuple) -> None:
    from rlhealth.sinks.evidence_records import _engine_stats, _engine_stats_validated

    a, b = _engine_stats(*bucket), _engine_stats_validated(*bucket)
    assert a.model_dump_json() == b.model_dump_json()
    assert repr(a) == repr(b)
    assert list(a.__dict__) == list(b.__dict__)
    assert [type(x) for x in a.__dict__.values()] == [type(x) for x in b.__dict__.values()]
    assert a.model_fields_set == b.model_fields_set
    if bucket[1] == bucket[1]:  # (NaN is not equal to itself, in either)
        assert a == b and hash(a) == hash(b)


def test_metrics_points_encode_as_validated_on_every_capture() -> None:
    from rlhealth.schemas import encode
    from rlhealth.schemas.evidence import MetricsPoint
    from rlhealth.sinks.evidence_records import metrics_point

    core = build_core(())
    with_engines = 0
    for cap_dir in _captures():
        cap = open_capture(cap_dir, batch_lines=500)
        state, _, _ = run_events(core, cap.info.job_id, cap.events(), cap.info.captured_at, lambda _j, _f: None)
        v, m, _ = core.judge_with_recheck(state, cap.info.captured_at)
        point = metrics_point(m)
        assert encode(point) == encode(MetricsPoint.model_validate(point.model_dump()))
        assert point == MetricsPoint.model_validate_json(encode(point))
        with_engines += bool(point.engines)
    assert with_engines >= 5
