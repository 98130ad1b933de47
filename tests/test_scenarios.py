"""Every scenario capture (shared ones when present, and ours under tests/scenarios) gives its expected verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlhealth.embedded import probe
from rlhealth.runtime import build_core
from rlhealth.schemas import Verdict
from tests.scenario_support import ROOT, check_expected, load_expected, scenario_dirs, shared_dir

SHARED = scenario_dirs(shared_dir() / "scenarios")
OURS = scenario_dirs(ROOT / "tests" / "scenarios")


@pytest.mark.parametrize("scenario", SHARED + OURS, ids=[p.name for p in SHARED + OURS])
def test_scenario_verdict(scenario: Path) -> None:
    result = probe(scenario / "capture", build_core())
    problems = check_expected(result.verdict, load_expected(scenario))
    assert problems == [], "\n".join(problems) + "\n\n" + result.verdict.model_dump_json(indent=1)[:6000]


@pytest.mark.parametrize("scenario", SHARED[:2] + OURS[:1], ids=[p.name for p in SHARED[:2] + OURS[:1]])
def test_probe_json_validates_and_replays_deterministically(scenario: Path) -> None:
    core = build_core()
    a = probe(scenario / "capture", core).verdict
    b = probe(scenario / "capture", core).verdict
    assert a.model_dump(exclude={"produced_at"}) == b.model_dump(exclude={"produced_at"})
    again = Verdict.model_validate(json.loads(a.model_dump_json()))
    assert again == a
