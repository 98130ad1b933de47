"""CaptureFollower: only new data per poll, truncation, vanishing trials, held partial lines."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

from rlhealth.sources.follow import CaptureFollower

HDR = "timestamp, index, uuid, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W]\n"


def _row(t: str, util: int) -> str:
    return f"2026/01/01 {t}.000, 0, GPU-a, {util} %, 1 MiB, 2 MiB, 3.00 W\n"


def _kinds(evs) -> list[str]:
    return [e.kind for e in evs]


def test_follower_returns_only_new_events(tmp_path: Path) -> None:
    c = tmp_path / "cap"
    (c / "logs").mkdir(parents=True)
    (c / "gpu").mkdir()
    (c / "trace_jobs").mkdir()
    (c / "capture.json").write_text(json.dumps({"job_id": "live", "cluster": "local", "scheduler": "kubernetes",
                                                "captured_at": "2026-01-01T12:00:00Z"}))
    log = c / "logs" / "pod_rank0.log"
    log.write_text("2026-01-01T11:00:00Z first\n2026-01-01T11:00:01Z partial")
    gpu = c / "gpu" / "h.csv"
    gpu.write_text(HDR + _row("11:00:00", 10) + HDR + _row("11:01:00", 20))
    state = c / "state.jsonl"
    state.write_text('{"ts": "2026-01-01T11:00:00Z", "state": "running"}\n')
    now = [datetime(2026, 1, 1, 12, tzinfo=UTC)]
    f = CaptureFollower(c, clock=lambda: now[0])

    first = f.poll()
    assert first[0].kind == "job_spec"
    times = [e.event_time for e in first[1:]]
    assert times == sorted(times)
    logs = [e for e in first if e.kind == "log_batch"]
    assert [ln for b in logs for ln in b.lines] == ["2026-01-01T11:00:00Z first"]  # partial line held
    gpus = [e for e in first if e.kind == "gpu_poll"]
    assert [p.gpus[0].util_pct for p in gpus] == [10.0]  # the last poll may still grow
    assert len([e for e in first if e.kind == "job_state"]) == 1

    second = f.poll()  # nothing appended: the pending GPU poll is flushed, nothing else
    assert _kinds(second) == ["gpu_poll"] and second[0].gpus[0].util_pct == 20.0
    assert f.poll() == []

    with log.open("a") as fh:
        fh.write(" now complete\n2026-01-01T11:02:00Z third\n")
    with gpu.open("a") as fh:
        fh.write(HDR + _row("11:02:00", 30) + HDR + _row("11:03:00", 40))
    with state.open("a") as fh:
        fh.write('{"ts": "2026-01-01T11:02:00Z", "state": "running", "attempt": 0}\n{"ts": "2026-01-01T11:0')
    d = c / "trace_jobs" / "t__1234567"
    d.mkdir()
    (d / "config.json").write_text("{}")
    third = f.poll()
    lines = [ln for e in third if e.kind == "log_batch" for ln in e.lines]
    assert lines == ["2026-01-01T11:00:01Z partial now complete", "2026-01-01T11:02:00Z third"]
    assert [e.gpus[0].util_pct for e in third if e.kind == "gpu_poll"] == [30.0]
    assert [e.attempt for e in third if e.kind == "job_state"] == [0]
    assert [(e.phase, e.trial_name) for e in third if e.kind == "trial"] == [("started", "t__1234567")]

    (d / "result.json").write_text(json.dumps({"finished_at": "2026-01-01T11:30:00Z",
                                               "verifier_result": {"rewards": {"reward": 1.0}}}))
    fourth = f.poll()
    assert sorted(_kinds(fourth)) == ["gpu_poll", "trial"]
    assert [e.phase for e in fourth if e.kind == "trial"] == ["completed"]

    shutil.rmtree(d)
    log.write_text("2026-01-01T11:50:00Z after truncation\n")
    now[0] = datetime(2026, 1, 1, 12, 5, tzinfo=UTC)
    fifth = f.poll()
    vanished = [e for e in fifth if e.kind == "trial"]
    assert [(e.phase, e.event_time) for e in vanished] == [("vanished", now[0])]
    assert [ln for e in fifth if e.kind == "log_batch" for ln in e.lines] == ["2026-01-01T11:50:00Z after truncation"]
    assert any(p.path == "logs/pod_rank0.log" and p.problem == "truncated" for p in f.problems)

    (c / "job.json").write_text('{"enforce_eager": true}')
    sixth = f.poll()
    assert _kinds(sixth) == ["job_spec"] and sixth[0].enforce_eager is True


def test_follower_for_bare_live_folder(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.log").write_text("hello\n")
    now = datetime(2026, 1, 1, tzinfo=UTC)
    f = CaptureFollower(tmp_path, job_id="adhoc", clock=lambda: now)
    evs = f.poll()
    assert f.info.job_id == "adhoc" and _kinds(evs) == ["job_spec", "log_batch"]
    assert evs[1].event_time <= now


def test_follower_reads_rotated_history_once_and_skips_later_rotations(tmp_path: Path) -> None:
    import gzip

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "trainer.log.2.gz").write_bytes(gzip.compress(b"2026-01-01T10:00:00Z oldest\n"))
    (logs / "trainer.log.1").write_text("2026-01-01T10:30:00Z older\n")
    live = logs / "trainer.log"
    live.write_text("2026-01-01T11:00:00Z live one\n")
    now = [datetime(2026, 1, 1, 12, tzinfo=UTC)]
    f = CaptureFollower(tmp_path, job_id="rot", clock=lambda: now[0])

    first = [ln for e in f.poll() if e.kind == "log_batch" for ln in e.lines]
    assert sorted(first) == ["2026-01-01T10:00:00Z oldest", "2026-01-01T10:30:00Z older",
                             "2026-01-01T11:00:00Z live one"]

    # logrotate: .1 -> .2.gz, the live file -> .1, a new live file
    (logs / "trainer.log.2.gz").write_bytes(gzip.compress((logs / "trainer.log.1").read_bytes()))
    live.rename(logs / "trainer.log.1")
    live.write_text("2026-01-01T11:30:00Z after rotation\n")
    second = [ln for e in f.poll() if e.kind == "log_batch" for ln in e.lines]
    assert second == ["2026-01-01T11:30:00Z after rotation"]  # nothing read twice
    (logs / "trainer.log.3.gz").write_bytes(gzip.compress(b"2026-01-01T09:00:00Z appears later\n"))
    assert [e for e in f.poll() if e.kind == "log_batch"] == []
