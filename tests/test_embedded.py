"""The embedded default: `rlhealth probe` exit codes and formats, broken captures, and `watch` following growth."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rlhealth.embedded import Watcher, probe
from rlhealth.runtime import build_core
from rlhealth.schemas import Verdict
from tests.scenario_support import ROOT, shared_dir

EXAMPLE = ROOT / "rlhealth" / "examples" / "capture-healthy"
RLHEALTH = [sys.executable, "-m", "rlhealth"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(RLHEALTH + list(args), capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_probe_example_is_no_kill_exit_0_with_the_verdict_block() -> None:
    proc = run_cli("probe", str(EXAMPLE))
    assert proc.returncode == 0, proc.stderr
    assert "VERDICT: NO-KILL" in proc.stdout
    for label in ("Gate A (liveness)", "Gate B (resources)", "Gate C (rollouts)", "REASONING:", "NEXT STEPS"):
        assert label in proc.stdout


@pytest.mark.skipif(not (shared_dir() / "scenarios" / "throughput_starvation").is_dir(), reason="shared scenarios absent")
def test_probe_kill_exits_10_and_json_matches_the_schema() -> None:
    proc = run_cli("probe", str(shared_dir() / "scenarios" / "throughput_starvation" / "capture"), "--format", "json")
    assert proc.returncode == 10, proc.stderr
    v = Verdict.model_validate_json(proc.stdout)
    assert v.verdict == "KILL"
    schema = json.loads((ROOT / "rlhealth" / "schemas" / "json" / "verdict.schema.json").read_text())
    import jsonschema

    jsonschema.validate(json.loads(proc.stdout), schema)


def test_probe_usage_errors_exit_2(tmp_path: Path) -> None:
    assert run_cli("probe", str(tmp_path / "missing")).returncode == 2
    assert run_cli("probe", str(tmp_path)).returncode == 2  # no capture.json
    (tmp_path / "capture.json").write_text("{not json")
    assert run_cli("probe", str(tmp_path)).returncode == 2
    assert run_cli("probe", str(EXAMPLE), "--now", "yesterday").returncode == 2


def test_probe_db_keeps_evidence_and_verdict(tmp_path: Path) -> None:
    db = tmp_path / "ev.duckdb"
    assert run_cli("probe", str(EXAMPLE), "--db", str(db)).returncode == 0
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("select count(*) from verdicts").fetchone()[0] == 1
    con.close()


def _copy_example(tmp_path: Path) -> Path:
    dst = tmp_path / "cap"
    shutil.copytree(EXAMPLE, dst)
    return dst


def test_missing_sources_make_gates_unknown_never_healthy(tmp_path: Path) -> None:
    cap = _copy_example(tmp_path)
    shutil.rmtree(cap / "trace_jobs")
    shutil.rmtree(cap / "gpu")
    (cap / "state.jsonl").write_text("")
    v = probe(cap, build_core()).verdict
    assert v.verdict == "NO-KILL"
    assert v.gates.C.status == "UNKNOWN" and "trace_jobs" in v.gates.C.summary
    assert "sources:" in v.gates.A.summary  # the empty state.jsonl is named


def test_truncated_and_non_utf8_files_never_crash(tmp_path: Path) -> None:
    cap = _copy_example(tmp_path)
    log = next((cap / "logs").rglob("*.log"))
    data = log.read_bytes()
    log.write_bytes(data[: len(data) // 2] + b"\xff\xfe\x00 broken \xc3\x28 tail without newline")
    state = cap / "state.jsonl"
    state.write_bytes(state.read_bytes() + b'{"ts": "2026-10-14T16:1')
    for result in sorted((cap / "trace_jobs").rglob("result.json"))[:2]:
        result.write_bytes(result.read_bytes()[:40])
    (cap / "gpu" / "extra.csv").write_bytes(b"timestamp, index\n\xff\xff, [N/A]\n")
    res = probe(cap, build_core())
    assert res.verdict.verdict in ("KILL", "NO-KILL")
    kinds = {p.problem for p in res.problems}
    assert kinds & {"invalid_utf8", "truncated", "parse_error"}


def test_watch_reports_only_changes_and_follows_growth(tmp_path: Path) -> None:
    cap = _copy_example(tmp_path)
    captured = datetime.fromisoformat(json.loads((cap / "capture.json").read_text())["captured_at"].replace("Z", "+00:00"))
    clock = {"now": captured}
    w = Watcher(build_core(), [cap], clock=lambda: clock["now"])
    first = w.tick()
    assert len(first) == 1 and first[0].verdict == "NO-KILL" and first[0].job_status == "ALIVE"
    assert w.tick() == []  # nothing new, same call: nothing printed
    later = captured + timedelta(minutes=2)
    with (cap / "state.jsonl").open("a") as fh:
        fh.write(json.dumps({"ts": later.strftime("%Y-%m-%dT%H:%M:%SZ"), "state": "failed", "pods": 0,
                             "failure_count": 1, "attempt": 0, "max_retries": 0, "attempts": [
                                 {"attempt": 0, "terminal_state": "failed", "exit_code": 1,
                                  "error": "RuntimeError: NCCL communicator was aborted"}]}) + "\n")
    clock["now"] = later + timedelta(seconds=5)
    changed = w.tick()
    assert len(changed) == 1 and changed[0].job_status == "TERMINAL" and changed[0].seq > first[0].seq


def test_watch_cli_serves_metrics_and_prints_a_verdict(tmp_path: Path) -> None:
    proc = run_cli("watch", str(EXAMPLE), "--iterations", "1", "--clock", "capture", "--format", "json",
                   "--metrics-port", "0")
    assert proc.returncode == 0, proc.stderr
    v = Verdict.model_validate_json(proc.stdout.strip().splitlines()[0])
    assert v.verdict == "NO-KILL"
    assert "/metrics" in proc.stderr


def test_watch_exports_job_gauges() -> None:
    from rlhealth.sinks.prometheus import JobExporter

    exporter = JobExporter()
    captured = datetime.fromisoformat(json.loads((EXAMPLE / "capture.json").read_text())["captured_at"].replace("Z", "+00:00"))
    w = Watcher(build_core(), [EXAMPLE], clock=lambda: captured, exporter=exporter)
    (verdict,) = w.tick()
    job = next(iter(w.states))
    get = exporter.registry.get_sample_value
    assert get("rlhealth_job_verdict_kill", {"job_id": job}) == 0.0
    assert get("rlhealth_job_generation_tokens_per_second", {"job_id": job}) > 0
    # the verdict fields a supervisor acts on
    assert get("rlhealth_job_escalate", {"job_id": job}) == (1.0 if verdict.escalate else 0.0)
    assert get("rlhealth_job_status", {"job_id": job, "status": verdict.job_status}) == 1.0
    assert sum(get("rlhealth_job_status", {"job_id": job, "status": s}) or 0.0
               for s in ("ALIVE", "WEDGED", "TERMINAL", "UNKNOWN")) == 1.0
    assert get("rlhealth_job_confidence", {"job_id": job}) == {"high": 1.0, "medium": 0.5, "low": 0.0}[
        verdict.confidence]
    assert get("rlhealth_job_verdict_timestamp_seconds", {"job_id": job}) == verdict.produced_at.timestamp()


def test_watch_cli_exports_only_what_it_measures(tmp_path: Path) -> None:
    """`watch` judges folders: it has no partitions, lag or dead letters, so none of the worker's
    pipeline series (a `rlhealth_worker_caught_up 0` would fire RLHealthWorkerNotCaughtUp)."""
    import re
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(RLHEALTH + ["watch", str(EXAMPLE), "--iterations", "40", "--interval", "0.5",
                                        "--clock", "capture", "--format", "json", "--metrics-port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    body = ""
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "rlhealth_job_verdict_kill{" not in body:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                    body = resp.read().decode()
            except OSError:
                time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait(10)
    assert "rlhealth_job_verdict_kill{" in body, proc.stderr.read().decode() if proc.stderr else ""
    names = {line.split("{")[0].split(" ")[0] for line in body.splitlines() if line and not line.startswith("#")}
    assert names and all(re.match(r"rlhealth_job_", n) for n in names), sorted(names)
    assert "rlhealth_worker_caught_up" not in body and "rlhealth_consumer_lag" not in body


def test_capture_of_pure_garbage_is_unknown_never_healthy(tmp_path: Path) -> None:
    import random

    rnd = random.Random(11)
    cap = tmp_path / "garbage"
    for sub in ("logs/ray/node", "gpu", "pods", "config", "trace_jobs/t1__x/agent"):
        (cap / sub).mkdir(parents=True)
    (cap / "capture.json").write_text(json.dumps({"job_id": "g", "cluster": "x", "scheduler": "kubernetes",
                                                   "captured_at": "2026-11-29T10:00:00Z"}))
    blob = lambda n: bytes(rnd.getrandbits(8) for _ in range(n))  # noqa: E731
    for rel in ("job.json", "state.jsonl", "sacct.txt", "logs/pod_rank0.log", "logs/ray/node/raylet.out",
                "gpu/host.csv", "gpu/host.apps.csv", "pods/2026-11-29T09:59:00Z.json", "config/c.yaml",
                "trace_jobs/t1__x/result.json", "trace_jobs/t1__x/agent/trajectory.json",
                "trace_jobs/t1__x/config.json"):
        (cap / rel).write_bytes(blob(5000) + b"\n" + b"\x00" * 100 + blob(3000))
    (cap / "logs" / "huge.log").write_bytes(b"A" * (3 * 1024 * 1024) + b"\n")  # one 3 MB line
    proc = run_cli("probe", str(cap), "--format", "json")
    assert proc.returncode == 0, proc.stderr  # NO-KILL: nothing here proves a fault
    v = Verdict.model_validate_json(proc.stdout)
    assert v.job_status == "UNKNOWN" and v.gates.A.status == "UNKNOWN"
    assert v.gates.B.status != "PASS" and v.gates.C.status != "PASS"


@pytest.mark.skipif(not (shared_dir() / "scenarios" / "colocated_deception_wedge").is_dir(), reason="shared scenarios absent")
def test_probe_as_of_an_earlier_time_sees_only_the_past_and_a_stale_view_is_blind() -> None:
    cap = shared_dir() / "scenarios" / "colocated_deception_wedge" / "capture"
    before = probe(cap, build_core(), now=datetime(2026, 6, 28, 17, 0, tzinfo=UTC)).verdict
    assert before.verdict == "NO-KILL" and before.job_status == "ALIVE"  # the hang starts later
    later = probe(cap, build_core(), now=datetime(2026, 12, 1, tzinfo=UTC)).verdict
    assert later.verdict == "NO-KILL" and later.job_status == "UNKNOWN" and later.escalate
    assert "cannot see the job" in later.gates.A.summary


def test_collect_garbage_rarely_freezes_start_up_and_raises_the_young_threshold(monkeypatch):
    import gc

    from rlhealth.embedded import collect_garbage_rarely

    monkeypatch.setenv("RLHEALTH_GC_YOUNG_THRESHOLD", "12345")
    before = gc.get_threshold()
    try:
        collect_garbage_rarely()
        assert gc.get_threshold() == (12345, 10, 10)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
