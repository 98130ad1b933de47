"""open_capture(): scenarios, event ordering, JobSpec, problems for broken captures."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rlhealth.sources.capture import CaptureError, open_capture

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("RLHEALTH_SHARED_DIR") or ROOT.parent / "shared")
SCEN = SHARED / "scenarios"
EXAMPLE = ROOT / "rlhealth" / "examples" / "capture-healthy"
needs_shared = pytest.mark.skipif(not SCEN.is_dir(), reason="shared scenarios not available")


def _events(path: Path, **kw):
    cap = open_capture(path, **kw)
    return cap, list(cap.events())


def _assert_ordered(events) -> None:
    assert events[0].kind == "job_spec"
    times = [e.event_time for e in events[1:]]
    assert times == sorted(times)
    assert events[0].event_time == (times[0] if times else events[0].event_time)


@needs_shared
@pytest.mark.parametrize("name", sorted(p.parent.name for p in SCEN.glob("*/capture")) if SCEN.is_dir() else [])
def test_every_scenario_streams_in_order(name: str) -> None:
    cap, evs = _events(SCEN / name / "capture")
    _assert_ordered(evs)
    kinds = Counter(e.kind for e in evs)
    assert kinds["job_spec"] == 1 and kinds["log_batch"] >= 1 and kinds["gpu_poll"] >= 1
    assert all(e.job_id == cap.info.job_id for e in evs)
    assert not [p for p in cap.problems if p.problem in ("unreadable",)]


@needs_shared
def test_healthy_learning_counts() -> None:
    cap, evs = _events(SCEN / "healthy_learning/capture")
    assert cap.info.job_id == "rl-q3-8b-nl2bash-tp2" and cap.info.scheduler == "kubernetes"
    assert cap.info.captured_at == datetime(2026, 10, 14, 16, 20, tzinfo=UTC)
    kinds = Counter(e.kind for e in evs)
    assert kinds["gpu_poll"] == 382 and kinds["job_state"] == 160 + 2
    trials = [e for e in evs if e.kind == "trial"]
    assert Counter(t.phase for t in trials) == {"started": 56, "completed": 33}
    spec = evs[0]
    assert spec.model.name == "Qwen3-8B" and spec.geometry.engine_tp == 2 and spec.enforce_eager is False
    assert spec.rollout.max_num_seqs == 256  # from config/resolved_config.yaml (job.json lacks it)
    assert spec.config["generator.gpu_memory_utilization"] == 0.8
    pods = [e for e in evs if e.kind == "job_state" and e.pod_statuses]
    assert len(pods) == 2 and all(p.state == "running" and p.pods == 2 for p in pods)
    rank1 = [e for e in evs if e.kind == "log_batch" and e.source.stream == "logs/pod_rank1.log"]
    assert len(rank1) == 1 and rank1[0].source.rank == 1
    assert rank1[0].event_time <= cap.info.captured_at
    assert cap.problems == []


@needs_shared
def test_state_attempts_and_terminal_pods() -> None:
    _cap, evs = _events(SCEN / "same_crash_every_restart/capture")
    last = [e for e in evs if e.kind == "job_state" and e.source.stream == "state.jsonl"][-1]
    assert last.attempt == 1 and last.failure_count == 1
    (a0,) = last.attempts
    assert a0.terminal_state == "failed" and a0.exit_code == 1 and a0.error.startswith("torch.OutOfMemoryError")
    cap, evs = _events(SCEN / "terminal_failed/capture")
    pods = [e for e in evs if e.kind == "job_state" and (e.source.stream or "").startswith("pods/")]
    assert len(pods) == 1 and pods[0].state == "failed" and pods[0].pods == 0 and len(pods[0].attempts) == 2
    assert [p.gate for p in cap.problems] == ["C"]


@needs_shared
def test_daytona_exceptions() -> None:
    _cap, evs = _events(SCEN / "daytona_infra_failure/capture")
    done = [e for e in evs if e.kind == "trial" and e.phase == "completed"]
    assert len(done) == 39 and {e.exception_type for e in done} == {"VerificationNotCompletedError"}


@pytest.mark.skipif(not EXAMPLE.is_dir(), reason="bundled example missing")
def test_bundled_example_is_small_and_valid() -> None:
    size = sum(f.stat().st_size for f in EXAMPLE.rglob("*") if f.is_file())
    assert size < 300_000
    cap, evs = _events(EXAMPLE)
    _assert_ordered(evs)
    kinds = Counter(e.kind for e in evs)
    assert kinds["trial"] >= 10 and kinds["gpu_poll"] >= 40 and kinds["log_batch"] >= 1
    assert cap.problems == []


def _mini(tmp_path: Path) -> Path:
    c = tmp_path / "cap"
    c.mkdir()
    (c / "capture.json").write_text(json.dumps({"job_id": "mini", "cluster": "local", "scheduler": "slurm",
                                                "captured_at": "2026-01-01T12:00:00Z"}))
    return c


def test_capture_json_errors(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match="missing"):
        open_capture(tmp_path)
    (tmp_path / "capture.json").write_text("{not json")
    with pytest.raises(CaptureError, match="not valid JSON"):
        open_capture(tmp_path)
    (tmp_path / "capture.json").write_text(json.dumps({"job_id": "x", "captured_at": "yesterday"}))
    with pytest.raises(CaptureError, match="captured_at"):
        open_capture(tmp_path)
    with pytest.raises(CaptureError, match="not a directory"):
        open_capture(tmp_path / "nope")


def test_empty_capture_has_problems_not_crashes(tmp_path: Path) -> None:
    c = _mini(tmp_path)
    cap, evs = _events(c)
    assert [e.kind for e in evs] == ["job_spec"]
    assert evs[0].event_time == datetime(2026, 1, 1, 12, tzinfo=UTC)
    got = {(p.path, p.problem, p.gate) for p in cap.problems}
    assert got == {("logs", "missing", "A"), ("state.jsonl", "missing", "A"), ("gpu", "missing", "B"),
                   ("trace_jobs", "missing", "C"), ("sacct.txt", "missing", "restarts"),
                   ("job.json", "missing", None)}


def test_broken_sources(tmp_path: Path) -> None:
    c = _mini(tmp_path)
    (c / "logs" / "ray" / "node-1").mkdir(parents=True)
    (c / "logs" / "empty.log").write_bytes(b"")
    (c / "logs" / "ray" / "node-1" / "raylet.out").write_bytes(
        b"[2026-01-01 11:00:00,000 I 1 1] ok\n\xc3\x28 bad\n[2026-01-01 11:01:00,000 I 1 1] cut")
    (c / "logs" / "7001.out").write_text("2026-01-01T08:00:00Z leg0\n")
    (c / "logs" / "7002.err").write_text("2026-01-01T10:00:00Z leg1\n")
    (c / "gpu").mkdir()
    (c / "gpu" / "h0.csv").write_text(
        "timestamp, index, uuid, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W]\n"
        "2026/01/01 11:00:00.000, 0, GPU-a, 50 %, 1 MiB, 2 MiB, 3.00 W\nbroken, row\n")
    (c / "gpu" / "h1.csv").write_text("")
    (c / "state.jsonl").write_text(
        '{"ts": "2026-01-01T11:00:00Z", "state": "running", "attempt": 1}\nnot json\n{"ts": "2026-01-01T11:05')
    (c / "sacct.txt").write_text("JobID|JobName|State|Start|End|ExitCode|Restarts\n"
                                 "7001|rl|TIMEOUT|2026-01-01T08:00:00|2026-01-01T10:00:00|0:0|0\n"
                                 "7002|rl|RUNNING|2026-01-01T10:00:05|Unknown|0:0|0\n")
    (c / "trace_jobs").mkdir()
    (c / "job.json").write_text('{"model": {"name": "M", "params_b": "lots"}, "max_retries": 2}')
    cap, evs = _events(c, batch_lines=1)
    _assert_ordered(evs)
    probs = {(p.path, p.problem): p for p in cap.problems}
    assert ("logs/empty.log", "empty") in probs
    assert probs[("logs/ray/node-1/raylet.out", "invalid_utf8")].count == 1
    assert ("logs/ray/node-1/raylet.out", "truncated") in probs
    assert probs[("gpu/h0.csv", "parse_error")].count == 1
    assert ("gpu/h1.csv", "empty") in probs
    assert probs[("state.jsonl", "parse_error")].count == 2
    assert ("trace_jobs", "empty") in probs
    assert ("job.json", "parse_error") in probs
    assert evs[0].max_retries == 2 and evs[0].model.name is None
    logs = {e.source.stream: e for e in evs if e.kind == "log_batch"}
    assert logs["logs/7001.out"].source.attempt == 0 and logs["logs/7002.err"].source.attempt == 1
    assert logs["logs/ray/node-1/raylet.out"].source.host == "node-1"
    sacct = [e for e in evs if e.kind == "job_state" and e.source.stream == "sacct.txt"]
    assert [(e.state, e.attempt) for e in sacct] == [("running", 0), ("pending", 1), ("running", 1), ("running", 1)]
    assert sacct[-1].attempts[0].terminal_state == "timeout"


def test_gpu_apps_in_capture(tmp_path: Path) -> None:
    c = _mini(tmp_path)
    (c / "gpu").mkdir()
    hdr = "timestamp, index, uuid, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W]\n"
    (c / "gpu" / "pod-0.csv").write_text(hdr + "2026/01/01 11:00:00.000, 0, GPU-a, [N/A], 1 MiB, 2 MiB, [Not Supported]\n"
                                         + hdr + "2026/01/01 11:01:00.000, 0, GPU-a, 5 %, 1 MiB, 2 MiB, 3.00 W\n")
    (c / "gpu" / "pod-0.apps.csv").write_text("timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
                                              "2026/01/01 11:00:58.000, GPU-a, 11, python, 100 MiB\n")
    _cap, evs = _events(c)
    polls = [e for e in evs if e.kind == "gpu_poll"]
    assert len(polls) == 2 and polls[0].host == "pod-0"
    assert polls[0].gpus[0].util_pct is None and polls[0].gpus[0].power_w is None and polls[0].apps == []
    assert [a.pid for a in polls[1].apps] == [11]


def test_copy_of_scenario_with_missing_parts(tmp_path: Path) -> None:
    if not SCEN.is_dir():
        pytest.skip("shared scenarios not available")
    c = tmp_path / "c"
    shutil.copytree(SCEN / "daytona_infra_failure/capture", c)
    shutil.rmtree(c / "gpu")
    (c / "state.jsonl").unlink()
    cap, evs = _events(c)
    _assert_ordered(evs)
    assert {(p.path, p.gate) for p in cap.problems} >= {("gpu", "B"), ("state.jsonl", "A")}
    pods = [e for e in evs if e.kind == "job_state"]
    assert len(pods) == 1 and pods[0].state == "running"  # inferred from pod phases
