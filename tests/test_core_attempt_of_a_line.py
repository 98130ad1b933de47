"""Which attempt a log line belongs to follows from its time, not from when it was folded.

A scheduler log that spans every attempt (iris finelog, a SLURM chain's shared file) is often read
after the scheduler has moved on: the previous attempt's crash then arrives while the state poll
already names the next attempt. Before, that crash was filed under the new attempt, which then
looked dead with "the same failure on every attempt": a KILL for a job that was recovering.
"""

from __future__ import annotations

import json

import pytest

from rlhealth.agents import ingest
from rlhealth.embedded import judge_along
from rlhealth.runtime import build_core
from tests.corekit import Job, at, loguru_ts
from tests.scenario_support import ROOT, scenario_dirs, shared_dir

_ERROR = "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file on the Hub"


def _crash_then_restart(fold_crash_at: float) -> Job:
    """Attempt 0 crashes at minute 10 (the scheduler records its end at 10.5); attempt 1 starts at 14
    and trains. The crash's traceback is folded at `fold_crash_at`, stamped only on its first line."""
    job = Job(build_core()).spec(max_retries=1)
    job.states(0, 10, attempt=0)
    failed = [{"attempt": 0, "terminal_state": "failed", "exit_code": 1, "ended_at": at(10.5), "error": _ERROR}]
    job.states(11, 13, state="pending", pods=0, attempt=1, attempts=failed)
    job.states(14, 60, attempt=1, attempts=failed)
    stamp = loguru_ts(at(9.8))
    job.log(fold_crash_at, [f"{stamp} | INFO | loading the tokenizer", "Traceback (most recent call last):"]
            + [f'  File "/app/hub.py", line {i}, in step_{i}' for i in range(20)] + [_ERROR],
            stream="logs/finelog.log")
    job.steps(15, 60)
    return job


@pytest.mark.parametrize("fold_crash_at", [10.0, 14.5])
def test_a_crash_read_after_the_restart_belongs_to_the_attempt_that_crashed(fold_crash_at: float) -> None:
    job = _crash_then_restart(fold_crash_at)
    v = job.judge(40)
    (tb,) = job.last_state.tracebacks
    assert tb.attempt == 0
    assert tb.ts == at(9.8).timestamp()  # the stamp before a 20-frame traceback, not the batch's time
    assert v.verdict == "NO-KILL"
    assert "A.fatal_traceback_no_progress" not in v.gates.A.codes


def test_attempt_at_uses_the_ended_attempts_and_a_slack() -> None:
    job = _crash_then_restart(10.0)
    job.judge(40)
    state = job.last_state
    end = at(10.5).timestamp()
    assert ingest.attempt_at(state, end - 600) == 0
    assert ingest.attempt_at(state, end + ingest.ATTEMPT_END_SLACK_S) == 0
    assert ingest.attempt_at(state, end + ingest.ATTEMPT_END_SLACK_S + 1) == 1
    assert ingest.attempt_at(state, None) == 1


# -- along a capture's history, a job that ends healthy is never called KILL ----------------------

SCENARIOS = scenario_dirs(shared_dir() / "scenarios") + scenario_dirs(ROOT / "tests" / "scenarios")
_ALIVE_AND_WELL = [p for p in SCENARIOS
                   if json.loads((p / "expected.json").read_text()).get("verdict_in") == ["NO-KILL"]
                   and "TERMINAL" not in json.loads((p / "expected.json").read_text()).get("job_status_in", [])]


@pytest.mark.parametrize("scenario", _ALIVE_AND_WELL, ids=[p.name for p in _ALIVE_AND_WELL])
def test_a_job_that_ends_healthy_is_never_called_kill_on_the_way(scenario) -> None:
    """The streaming worker judges every tick: one KILL on the way is one wrongly killed bring-up."""
    history = judge_along(scenario / "capture", build_core(), points=120)
    assert history.verdicts
    assert [str(v.produced_at) for v in history.verdicts if v.verdict == "KILL"] == []
