"""What the real-incident tests share (tests/test_real_incidents_s10.py, _s11.py): the captures under
tests/scenarios judged once each, the shipped rules over single real lines, the verbatim excerpts, and the
strict xfail on a core gap a scenario's expected.json names."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from rlhealth.agents.signatures import Classifier
from rlhealth.embedded import probe
from rlhealth.rules import load_rules
from rlhealth.runtime import build_core
from rlhealth.schemas import Verdict
from tests.scenario_support import load_expected

SCENARIOS = Path(__file__).parent / "scenarios"
EXCERPTS = SCENARIOS / "real_excerpts"


@cache
def judged(name: str) -> Verdict:
    return probe(SCENARIOS / name / "capture", build_core()).verdict


@cache
def classifier() -> Classifier:
    return Classifier(load_rules())


def signals_of(line: str) -> dict[str, dict]:
    return {m.rule.signal: m.fields for m in classifier().scan([line])}


def kinds_of(line: str) -> set[str]:
    return {m.rule.kind for m in classifier().scan([line])}


def excerpt(name: str) -> list[str]:
    return (EXCERPTS / f"{name}.txt").read_text(encoding="utf-8").splitlines()


def families(v: Verdict) -> set[str]:
    return {f for g in (v.gates.A, v.gates.B, v.gates.C) for f in g.families}


def gap(name: str) -> pytest.MarkDecorator:
    """xfail (strict) on the core gap the scenario's expected.json names."""
    return pytest.mark.xfail(strict=True, reason=load_expected(SCENARIOS / name).get("core_gap", ""))
