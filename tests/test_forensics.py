"""The forensic store: nothing silently dropped, canned questions, Parquet export, readers beside a writer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tests.scenario_support import ROOT, scenario_dirs

SCENARIOS = [d / "capture" for d in scenario_dirs(ROOT / "tests" / "scenarios")]
KILL_CAPTURE = ROOT / "tests" / "scenarios" / "tail_only_nccl_hang" / "capture"
KILL_JOB = "rl-q3-8b-grpo-mathtool"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlhealth", *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)


def count(db: Path, sql: str) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return int(con.execute(sql).fetchall()[0][0])
    finally:
        con.close()


def test_two_probes_of_one_job_keep_both_verdicts(tmp_path: Path) -> None:
    db = tmp_path / "e.duckdb"
    for _ in range(2):
        proc = cli("probe", str(KILL_CAPTURE), "--db", str(db), "--format", "json")
        assert proc.returncode == 10, proc.stderr
        assert "already stored" not in proc.stderr
    assert count(db, f"SELECT count(*) FROM verdicts WHERE job_id = '{KILL_JOB}'") == 2
    assert count(db, f"SELECT count(DISTINCT seq) FROM verdicts WHERE job_id = '{KILL_JOB}'") == 2
    # the evidence lines behind each, a metrics point, the capture's source problems; findings once
    assert count(db, "SELECT count(DISTINCT seq) FROM evidence_lines") == 2
    assert count(db, "SELECT count(*) FROM metrics") >= 1
    assert count(db, "SELECT count(*) FROM source_problems WHERE problem = 'missing'") == 1
    assert count(db, "SELECT count(*) FROM findings") > 0


def test_the_same_verdict_stored_twice_is_reported_not_silent(tmp_path: Path) -> None:
    from rlhealth.embedded import probe
    from rlhealth.runtime import build_core
    from rlhealth.sinks.duckdb import EvidenceStore

    v = probe(KILL_CAPTURE, build_core()).verdict
    with EvidenceStore(tmp_path / "e.duckdb") as store:
        store.add_verdict(v)
        store.flush()
        store.add_verdict(v)
        store.flush()
        assert store.dropped["verdicts"] == 1 and store.rows_written["verdicts"] == 1


def test_a_reader_reads_the_snapshot_while_a_writer_holds_the_file(tmp_path: Path) -> None:
    from rlhealth.embedded import probe
    from rlhealth.runtime import build_core
    from rlhealth.sinks.duckdb import EvidenceStore, query

    db = tmp_path / "e.duckdb"
    v = probe(KILL_CAPTURE, build_core()).verdict
    store = EvidenceStore(db, snapshot_secs=0.0)
    try:
        store.add_verdict(v)
        store.flush()
        # another process: the file is locked by this one, the snapshot answers
        code = ("import sys; from rlhealth.sinks.duckdb import query; "
                f"print(query({str(db)!r}, 'SELECT count(*) FROM verdicts')[0][0])")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "1"
        proc = cli("evidence", "verdicts", KILL_JOB, "--db", str(db), "--format", "json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.splitlines()[0])["verdict"] == "KILL"
    finally:
        store.close()
    assert query(db, "SELECT count(*) FROM verdicts")[0][0] == 1


def test_findings_are_read_live_while_a_writer_holds_the_file(tmp_path: Path) -> None:
    """The tables come from the writer's snapshot, the findings from its Parquet files: a finding
    flushed after the last snapshot is already answered, by another process."""
    from datetime import UTC, datetime, timedelta

    from rlhealth.agents.findings import Finding
    from rlhealth.sinks.duckdb import EvidenceStore

    db = tmp_path / "e.duckdb"
    t0 = datetime(2026, 3, 1, 12, tzinfo=UTC)
    store = EvidenceStore(db, snapshot_secs=3600.0)  # one snapshot at the first flush, then none for an hour
    try:
        store.add_findings("job-a", [Finding(kind="nccl", rule_id="nccl.a", text="x", event_time=t0, source="s",
                                             ref={"file": "a", "file_offset": 1})])
        store.flush()
        store.add_findings("job-a", [Finding(kind="nccl", rule_id="nccl.b", text="y", event_time=t0 + timedelta(seconds=1),
                                             source="s", ref={"file": "a", "file_offset": 2})])
        store.flush()  # no new snapshot
        proc = cli("evidence", "timeline", "job-a", "--db", str(db), "--format", "json")
        assert proc.returncode == 0, proc.stderr
        assert [json.loads(line)["name"] for line in proc.stdout.splitlines()] == ["nccl.a", "nccl.b"]
        proc = cli("evidence", "sql", "SELECT count(*) AS n FROM findings", "--db", str(db), "--format", "json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.splitlines()[0])["n"] == 2
    finally:
        store.close()


@pytest.fixture(scope="module")
def store_of_all_scenarios(tmp_path_factory) -> Path:
    from rlhealth.embedded import probe
    from rlhealth.runtime import build_core
    from rlhealth.sinks.duckdb import EvidenceStore

    db = tmp_path_factory.mktemp("forensics") / "all.duckdb"
    core = build_core()
    with EvidenceStore(db) as store:
        for cap in SCENARIOS:
            r = probe(cap, core, on_findings=store.add_findings)
            store.add_verdict(r.verdict)
            store.add_problems(r.verdict.job_id, r.problems)
            store.add_metrics(core.metrics(r.state, r.verdict.produced_at, last=r.verdict))
    return db


def answer(*args: str) -> list[dict]:
    proc = cli("evidence", *args, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def test_canned_questions_on_a_store_of_every_scenario(store_of_all_scenarios: Path) -> None:
    db = str(store_of_all_scenarios)
    timeline = answer("timeline", KILL_JOB, "--db", db, "--since", "2026-10-14T09:00:00Z",
                      "--until", "2026-10-14T10:00:00Z")
    whats = [r["what"] for r in timeline]
    assert "finding" in whats and whats[-1] == "verdict"
    assert [r["time"] for r in timeline] == sorted(r["time"] for r in timeline)
    assert any(r["name"] == "nccl.terminating" for r in timeline)

    hits = answer("signals", "nccl.*", "--db", db)
    assert hits and all(r["rule_id"].startswith("nccl.") for r in hits)
    assert KILL_JOB in {r["job_id"] for r in hits}

    behind = answer("behind", KILL_JOB, "--db", db)
    assert any(r["rule_id"] == "nccl.terminating" and r["location"] == "logs/pod_rank0.log" and r["offset"] is not None
               for r in behind)

    kills = answer("jobs", "--db", db, "--verdict", "KILL", "--gate", "A=FAIL")
    assert KILL_JOB in {r["job_id"] for r in kills}
    assert all(r["verdict"] == "KILL" and r["gate_a"] == "FAIL" for r in kills)
    every = answer("jobs", "--db", db)
    assert len(every) == len({r["job_id"] for r in every}) >= len(SCENARIOS) - 2  # a few share a job id

    last = answer("verdicts", KILL_JOB, "--db", db)
    assert last[0]["verdict"] == "KILL" and last[0]["event_time"] and last[0]["age_s"] is not None

    rows = answer("sql", "SELECT count(*) AS n FROM metrics", "--db", db)
    assert rows[0]["n"] >= len(SCENARIOS) - 2


def test_export_to_parquet_reads_back(store_of_all_scenarios: Path, tmp_path: Path) -> None:
    out = tmp_path / "pq"
    proc = cli("evidence", "export", "--db", str(store_of_all_scenarios), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    con = duckdb.connect()
    n = con.execute(f"SELECT count(*) FROM read_parquet('{out}/findings/*/*.parquet', hive_partitioning = true) "
                    f"WHERE job_id = '{KILL_JOB}'").fetchall()[0][0]
    assert n == count(store_of_all_scenarios, f"SELECT count(*) FROM findings WHERE job_id = '{KILL_JOB}'") > 0
    assert (out / "dead_letters.parquet").exists()


def test_an_unreadable_store_is_one_line(tmp_path: Path) -> None:
    proc = cli("evidence", "jobs", "--db", str(tmp_path / "absent.duckdb"))
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_restarted_watch_stores_its_verdicts_beside_the_first_runs(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    for _ in range(2):  # two runs of `watch --db` on the same capture: seq restarts from a new base
        proc = cli("watch", str(KILL_CAPTURE), "--clock", "capture", "--iterations", "1", "--format", "json",
                   "--db", str(db))
        assert proc.returncode == 0, proc.stderr
    assert count(db, f"SELECT count(*) FROM verdicts WHERE job_id = '{KILL_JOB}'") == 2
    assert count(db, "SELECT count(*) FROM source_problems") >= 1
    assert count(db, "SELECT count(*) FROM metrics") == 1  # one point per judging time: the same point
