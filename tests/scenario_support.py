"""Checks a verdict against a scenario's expected.json (the shared scenarios and our own)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from rlhealth.schemas import Verdict

ROOT = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    env = os.environ.get("RLHEALTH_SHARED_DIR")
    return Path(env) if env else ROOT.parent / "shared"


def scenario_dirs(base: Path) -> list[Path]:
    if not base.is_dir():
        return []
    return sorted(p for p in base.iterdir() if (p / "expected.json").is_file() and (p / "capture").is_dir())


def gap_param(scenario: Path, check: str, *values):
    """`scenario` (and `values`) as a pytest param, xfail (strict) when the scenario's expected.json lists `check`
    under `core_gap_breaks`: its capture trips the core gap named in `core_gap` (unstamped lines timed by the
    batch's last stamp), so how the logs are cut or stamped changes the verdict until that gap is fixed."""
    expected = load_expected(scenario)
    broken = check in expected.get("core_gap_breaks", [])
    marks = [pytest.mark.xfail(strict=True, reason=expected.get("core_gap", ""))] if broken else []
    return pytest.param(scenario, *values, marks=marks)


def verdict_text(v: Verdict) -> str:
    parts = [v.reasoning]
    for g in (v.gates.A, v.gates.B, v.gates.C):
        parts.append(g.summary)
        parts.extend(e.text for e in g.evidence)
    parts.extend(e.text for e in v.evidence)
    parts.append(v.restarts.summary)
    return "\n".join(parts)


def check_expected(v: Verdict, expected: dict) -> list[str]:
    """Every way the verdict misses the expectation, empty when it meets it."""
    problems = []
    if v.verdict not in expected["verdict_in"]:
        problems.append(f"verdict {v.verdict} not in {expected['verdict_in']}")
    if v.job_status not in expected["job_status_in"]:
        problems.append(f"job_status {v.job_status} not in {expected['job_status_in']}")
    for gate in expected.get("failing_gates", []):
        if gate == "restarts":
            if v.restarts.same_failure is not True:
                problems.append("restarts.same_failure should be true")
        elif getattr(v.gates, gate).status != "FAIL":
            problems.append(f"gate {gate} should FAIL, is {getattr(v.gates, gate).status}")
    for gate in expected.get("must_not_fail_gates", []):
        if gate == "restarts":
            if v.restarts.same_failure is True:
                problems.append("restarts.same_failure must not be true")
        elif getattr(v.gates, gate).status == "FAIL":
            problems.append(f"gate {gate} must not FAIL: {getattr(v.gates, gate).summary[:200]}")
    text = verdict_text(v)
    for rx in expected.get("evidence_must_match", []):
        if not re.search(rx, text):
            problems.append(f"evidence does not match {rx!r}")
    steps = "\n".join(v.next_steps)
    for rx in expected.get("next_steps_must_match", []):
        if not re.search(rx, steps):
            problems.append(f"next steps do not match {rx!r}")
    for rx in expected.get("next_steps_must_not_match", []):
        if re.search(rx, steps):
            problems.append(f"next steps must not match {rx!r}")
    if "escalate" in expected and v.escalate is not expected["escalate"]:
        problems.append(f"escalate should be {expected['escalate']}, is {v.escalate}")
    return problems


def load_expected(path: Path) -> dict:
    return json.loads((path / "expected.json").read_text(encoding="utf-8"))
