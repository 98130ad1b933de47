"""`HealthCore.judge_with_metrics` (one context for the verdict and the metrics, what the worker calls
for every job at every tick) gives exactly `judge` and `metrics(last=<that verdict>)`, and
`as_of_verdict` exactly `metrics(last=<another verdict>)`, on every scenario capture at several times."""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta

import pytest

from rlhealth.agents.core import as_of_verdict
from tests.scenario_support import ROOT, scenario_dirs, shared_dir

CAPTURES = [d / "capture" for d in scenario_dirs(ROOT / "tests" / "scenarios")] + \
    [d / "capture" for d in scenario_dirs(shared_dir() / "scenarios")]


@pytest.mark.skipif(not CAPTURES, reason="no scenario captures")
def test_judge_with_metrics_equals_judge_then_metrics() -> None:
    from rlhealth.embedded import probe
    from rlhealth.runtime import build_core

    core = build_core()
    kills = 0
    for capture in CAPTURES:
        result = probe(capture, core, workers=0)
        state, at = result.state, result.verdict.produced_at
        for offset_s in (-1800.0, 0.0, 90.0, 1200.0, 4 * 3600.0):
            now = at + timedelta(seconds=offset_s)
            verdict, metrics = core.judge_with_metrics(state, now)
            expected = core.judge(state, now)
            assert verdict.model_dump_json() == expected.model_dump_json(), (capture, offset_s)
            assert repr(asdict(metrics)) == repr(asdict(core.metrics(state, now, last=expected))), (capture, offset_s)
            other = core.judge(state, now - timedelta(hours=1))
            assert repr(asdict(as_of_verdict(metrics, other))) == repr(asdict(core.metrics(state, now, last=other)))
            kills += verdict.verdict == "KILL"
    assert kills  # the captures include jobs the core calls KILL, not only healthy ones
