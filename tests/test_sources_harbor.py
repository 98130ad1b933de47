"""Harbor trial dirs -> TrialEvents, on the shared scenarios and on broken trial dirs."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rlhealth.sources.harbor import TrialDirWatcher, find_trial_dirs, read_trial_dir, read_trials

SHARED = Path(os.environ.get("RLHEALTH_SHARED_DIR") or Path(__file__).resolve().parents[1].parent / "shared")
SCEN = SHARED / "scenarios"
HARBOR = SHARED / "reference" / "examples" / "harbor"
needs_shared = pytest.mark.skipif(not SCEN.is_dir(), reason="shared scenarios not available")
REF = datetime(2026, 12, 1, tzinfo=UTC)


@needs_shared
def test_healthy_trials() -> None:
    trs = list(read_trials(SCEN / "healthy_learning/capture/trace_jobs", job_id="j", ref_time=REF))
    assert len(trs) == 56
    done = [t.completed for t in trs if t.completed]
    assert len(done) == 33
    assert Counter(c.reward for c in done) == {0.0: 18, 1.0: 15}
    assert all(c.exception_type is None and c.session == "train" for c in done)
    assert all(c.assistant_turns and c.assistant_turns >= 1 for c in done)
    assert all(1 <= len(c.output_samples) <= 5 and all(len(s) <= 4000 for s in c.output_samples) for c in done)
    x = next(c for c in done if c.trial_name == "log-parse-0781__xnZIYL8")
    assert x.reward == 0.0 and x.assistant_turns == 4 and x.task_name == "log-parse-0781"
    assert x.event_time == datetime(2026, 10, 14, 16, 15, 36, 346155, tzinfo=UTC)
    assert x.timings_s["agent_execution"] == pytest.approx(668.646127)
    assert x.timings_s["llm"] == pytest.approx((29417.6 + 48463.5 + 4530.8 + 5376.2) / 1000)
    running = [t.started for t in trs if t.completed is None]
    assert len(running) == 23
    assert all(s.started_at is not None for s in running)  # from agent/trajectory.json


@needs_shared
def test_daytona_infra_failure_trials() -> None:
    ref = datetime(2026, 10, 2, 15, 35, tzinfo=UTC)
    trs = list(read_trials(SCEN / "daytona_infra_failure/capture/trace_jobs", job_id="j", ref_time=ref))
    done = [t.completed for t in trs if t.completed]
    assert len(trs) == 46 and len(done) == 39
    assert {c.exception_type for c in done} == {"VerificationNotCompletedError"}
    assert all(c.reward is None for c in done)
    assert all("DaytonaError" in (c.exception_message or "") or c.exception_message for c in done)
    # trials with only config.json have no content time: clamped mtime -> captured_at
    no_time = [t.started for t in trs if t.started.started_at is None]
    assert len(no_time) == 7 and all(s.event_time <= ref for s in no_time)


@needs_shared
def test_throughput_starvation_exceptions() -> None:
    trs = list(read_trials(SCEN / "throughput_starvation/capture/trace_jobs", job_id="j", ref_time=REF))
    c = Counter((t.completed.exception_type, t.completed.reward) for t in trs if t.completed)
    assert c[("AgentTimeoutError", 0.0)] == 81 and c[("AgentTimeoutError", 1.0)] == 1


@pytest.mark.skipif(not HARBOR.is_dir(), reason="harbor examples not available")
def test_reference_trace_jobs_and_eval_session(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    shutil.copytree(HARBOR / "trace_jobs", root)
    ev = root / "eval_sessions" / "run_eval_step10"
    ev.mkdir(parents=True)
    shutil.copytree(root / "nl2bash-00413__Xk9Pq2L", ev / "tb-dev-0007__a1B2c3D")
    found = {d.name: s for d, s in find_trial_dirs(root)}
    assert found == {"nl2bash-00413__Qa5uE7c": "train", "nl2bash-00413__Xk9Pq2L": "train",
                     "nl2bash-00413__Zp7cL1d": "train", "tb-dev-0007__a1B2c3D": "eval"}
    trs = {t.name: t for t in read_trials(root, job_id="j", ref_time=REF)}
    assert trs["tb-dev-0007__a1B2c3D"].completed.session == "eval"
    assert trs["nl2bash-00413__Qa5uE7c"].completed is None
    assert trs["nl2bash-00413__Qa5uE7c"].started.assistant_turns == 1  # running: turns so far
    cle = trs["nl2bash-00413__Zp7cL1d"].completed
    assert cle.exception_type == "ContextLengthExceededError" and cle.exception_message == ""
    assert cle.reward is None and cle.assistant_turns == 11
    assert trs["nl2bash-00413__Xk9Pq2L"].completed.reward == 1.0


def _trial(root: Path, name: str, result: str | None, exception: str | None = None) -> Path:
    d = root / name
    (d / "agent").mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"task": {"path": "/tasks/" + name.split("__")[0]}}))
    if result is not None:
        (d / "result.json").write_text(result)
    if exception is not None:
        (d / "exception.txt").write_text(exception)
    return d


def test_truncated_result_is_salvaged(tmp_path: Path) -> None:
    good = json.dumps({"task_name": "t1", "trial_name": "t1__aaaaaaa", "started_at": "2026-01-01T00:00:00Z",
                       "finished_at": "2026-01-01T00:10:00Z", "verifier_result": {"rewards": {"reward": 1}},
                       "exception_info": None, "agent_result": None})
    _trial(tmp_path, "t1__aaaaaaa", good)
    _trial(tmp_path, "t2__bbbbbbb", '{"task_name": "t2", "verifier_result": {"rewards": {"reward": 0.0}}, "exc')
    _trial(tmp_path, "t3__ccccccc", "")
    _trial(tmp_path, "t4__ddddddd", json.dumps({"exception_info": None, "verifier_result": None}),
           exception="Traceback (most recent call last):\n  File \"x\", line 1\n"
                     "harbor.trial.errors.VerificationNotCompletedError: sandbox never came up\n")
    trs = {t.name: t for t in read_trials(tmp_path, job_id="j", ref_time=REF)}
    assert len(trs) == 4
    t1 = trs["t1__aaaaaaa"].completed
    assert t1.reward == 1.0 and t1.assistant_turns == 0 and t1.timings_s["total"] == 600.0
    t2 = trs["t2__bbbbbbb"]
    assert t2.problems == [("result.json", "truncated", t2.problems[0][2])]
    assert t2.completed.reward == 0.0 and t2.completed.task_name == "t2"
    t3 = trs["t3__ccccccc"]
    assert t3.problems[0][1] == "empty" and t3.completed is not None and t3.completed.reward is None
    t4 = trs["t4__ddddddd"].completed
    assert t4.exception_type == "VerificationNotCompletedError" and t4.exception_message == "sandbox never came up"
    assert t4.task_name == "t4"


def test_watcher_reports_only_changes(tmp_path: Path) -> None:
    now = [datetime(2026, 1, 1, 12, tzinfo=UTC)]
    w = TrialDirWatcher(tmp_path, job_id="j", clock=lambda: now[0])
    assert w.poll() == []
    d = _trial(tmp_path, "a__1111111", None)
    evs = w.poll()
    assert [(e.phase, e.trial_name) for e in evs] == [("started", "a__1111111")]
    assert w.poll() == []
    (d / "result.json").write_text(json.dumps({"finished_at": "2026-01-01T11:59:00Z",
                                               "verifier_result": {"rewards": {"reward": 0.5}}}))
    evs = w.poll()
    assert [(e.phase, e.reward) for e in evs] == [("completed", 0.5)]
    assert w.poll() == []
    shutil.rmtree(d)
    now[0] = datetime(2026, 1, 1, 12, 5, tzinfo=UTC)
    evs = w.poll()
    assert [(e.phase, e.trial_name, e.event_time) for e in evs] == [("vanished", "a__1111111", now[0])]
    _trial(tmp_path, "a__1111111", None)  # Harbor retry: same name again
    assert [e.phase for e in w.poll()] == ["started"]


def test_watcher_waits_for_half_written_result(tmp_path: Path) -> None:
    w = TrialDirWatcher(tmp_path, job_id="j", clock=lambda: REF)
    d = _trial(tmp_path, "b__2222222", '{"verifier_result": {"rewa')
    assert [e.phase for e in w.poll()] == ["started"]
    (d / "result.json").write_text(json.dumps({"verifier_result": {"rewards": {"reward": 1.0}}}))
    assert [(e.phase, e.reward) for e in w.poll()] == [("completed", 1.0)]


def test_read_trial_dir_without_anything(tmp_path: Path) -> None:
    d = tmp_path / "x__0000000"
    d.mkdir()
    (d / "trial.log").write_text("")
    tr = read_trial_dir(d, job_id="j", ref_time=REF)
    assert tr.completed is None and tr.started.event_time <= REF and tr.started.task_name == "x"
