"""DuckDB evidence store: buffered Arrow writes, idempotent keys, read-only queries."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import duckdb
import pytest

from rlhealth.agents.findings import Finding
from rlhealth.schemas import DeadLetter, Gate, Gates, Verdict
from rlhealth.sinks.duckdb import EvidenceStore, query

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def finding(i: int, *, rule: str = "nccl.watchdog_timeout", ref: dict | None = None) -> Finding:
    return Finding(kind="nccl", rule_id=rule, text=f"[Rank 3] Watchdog caught collective operation timeout #{i}",
                   event_time=T0 + timedelta(seconds=i), source="logs/pod_rank3.log", severity="fatal",
                   gates=("A",), ref={"topic": "rlhealth.log_batch", "partition": 2, "offset": i} if ref is None else ref)


def verdict(job: str, seq: int, value: str = "NO-KILL") -> Verdict:
    return Verdict(job_id=job, verdict=value, confidence="high", job_status="ALIVE", reasoning=f"seq {seq}",
                   gates=Gates(A=Gate(status="PASS", summary="ok")), produced_at=T0 + timedelta(minutes=seq), seq=seq)


def test_rows_stay_buffered_until_flush_rows_then_land_in_one_go(tmp_path) -> None:
    store = EvidenceStore(tmp_path / "ev.duckdb", flush_rows=10)
    store.add_findings("job-a", [finding(i) for i in range(9)])
    assert store.pending() == 9
    assert store._count("findings") == 0  # nothing written yet
    store.add_findings("job-a", [finding(9)])
    assert store.pending() == 0
    assert store._count("findings") == 10
    store.close()


def test_findings_are_idempotent_on_ref_and_rule(tmp_path) -> None:
    path = tmp_path / "ev.duckdb"
    with EvidenceStore(path, flush_rows=1000) as store:
        store.add_findings("job-a", [finding(i) for i in range(5)])
        store.flush()
        # at-least-once redelivery of the same offsets, plus one new offset and one new rule on an old offset
        store.add_findings("job-a", [finding(i) for i in range(6)] + [finding(2, rule="oom.cuda")])
        store.flush()
        # the same redelivery within one buffer is stored once too
        store.add_findings("job-a", [finding(7), finding(7)])
        assert store.pending() == 2
        store.flush()
        assert store.rows_written["findings"] == 8
        assert store.dropped["findings"] == 5 + 1  # five redelivered, one repeated in the buffer
        rows = store.query("SELECT rule_id, count(*) FROM findings GROUP BY rule_id ORDER BY rule_id")
        assert rows == [("nccl.watchdog_timeout", 7), ("oom.cuda", 1)]
        # findings without a ref de-duplicate on their content
        store.add_findings("job-a", [finding(100, ref={}), finding(100, ref={}), finding(101, ref={})])
        assert store.query("SELECT count(*) FROM findings WHERE ref_key LIKE 'noref:%'") == [(2,)]

    rows = query(path, "SELECT job_id, event_time, severity, source, ref FROM findings WHERE rule_id = ? ORDER BY event_time LIMIT 1",
                 ["nccl.watchdog_timeout"])
    job, when, severity, source, ref = rows[0]
    assert (job, severity, source) == ("job-a", "fatal", "logs/pod_rank3.log")
    assert when == T0
    assert json.loads(ref) == {"offset": 0, "partition": 2, "topic": "rlhealth.log_batch"}


def test_verdicts_are_idempotent_on_job_and_seq(tmp_path) -> None:
    path = tmp_path / "ev.duckdb"
    with EvidenceStore(path) as store:
        for seq in (1, 2, 3):
            store.add_verdict(verdict("job-a", seq))
        store.flush()
        store.add_verdict(verdict("job-a", 3))  # replayed
        store.add_verdict(verdict("job-a", 4, "KILL"))
        store.add_verdict(verdict("job-b", 1))
    rows = query(path, "SELECT job_id, max(seq), count(*) FROM verdicts GROUP BY job_id ORDER BY job_id")
    assert rows == [("job-a", 4, 4), ("job-b", 1, 1)]
    (payload, gates), = query(path, "SELECT payload, gates FROM verdicts WHERE job_id='job-a' AND seq=4")
    assert Verdict.model_validate_json(payload) == verdict("job-a", 4, "KILL")
    assert json.loads(gates)["A"]["status"] == "PASS"


def test_dead_letters_keep_the_original_bytes(tmp_path) -> None:
    path = tmp_path / "ev.duckdb"
    raw = b"\xff{not json"
    dl = DeadLetter.build(raw, "invalid_json", "unexpected byte", key=b"job-x", topic="rlhealth.log_batch",
                          partition=1, offset=42, received_at=T0)
    with EvidenceStore(path) as store:
        store.add_dead_letter(dl)
        store.add_dead_letter(dl)  # redelivered
        store.add_dead_letter(DeadLetter.build(b"{}", "unknown_kind", received_at=T0))
        store.add_dead_letter(DeadLetter.build(b"{}", "unknown_kind", received_at=T0))
    rows = query(path, "SELECT reason, source_topic, source_partition, source_offset, original, original_key "
                       "FROM dead_letters ORDER BY reason")
    assert rows == [("invalid_json", "rlhealth.log_batch", 1, 42, raw, b"job-x"),
                    ("unknown_kind", None, None, None, b"{}", None)]


def test_reopening_appends_and_read_only_query_cannot_write(tmp_path) -> None:
    path = tmp_path / "ev.duckdb"
    with EvidenceStore(path) as store:
        store.add_verdict(verdict("job-a", 1))
    with EvidenceStore(path) as store:
        store.add_verdict(verdict("job-a", 1))
        store.add_verdict(verdict("job-a", 2))
    assert query(path, "SELECT count(*) FROM verdicts") == [(2,)]
    with pytest.raises(duckdb.Error):
        query(path, "DELETE FROM verdicts")


def test_a_jobs_findings_live_in_its_buckets_segments(tmp_path) -> None:
    from rlhealth.sinks.findings_segments import PARTS, job_hash, part_of, read_manifest, segments_dir

    path = tmp_path / "ev.duckdb"
    jobs = [f"job-{i}" for i in range(40)] + ["rl-q3-8b-grpo-mathtool", "é-job"]
    with EvidenceStore(path) as store:
        for j in jobs:
            store.add_findings(j, [finding(i) for i in range(3)])
    assert len({part_of(j) for j in jobs}) > 1
    directory = segments_dir(path)
    manifest = read_manifest(directory)
    assert manifest is not None
    for j in jobs:
        (sql_hash, sql_part), = query(path, f"SELECT md5_number_lower(?), md5_number_lower(?) % {PARTS}", [j, j])
        assert (sql_hash, sql_part) == (job_hash(j), part_of(j))
        files = [str(directory / s["file"]) for s in manifest["segments"] if s["part"] == part_of(j)]
        assert query(path, "SELECT count(*) FROM read_parquet(?) WHERE job_id = ? AND job_hash = ?",
                     [files, j, job_hash(j)]) == [(3,)]
    assert query(path, "SELECT count(*) FROM findings") == [(3 * len(jobs),)]
    # the DuckDB file holds no findings, only a view over the segments for plain DuckDB clients
    con = duckdb.connect(str(path), read_only=True)
    assert con.execute("SELECT table_type FROM information_schema.tables WHERE table_name = 'findings'"
                       ).fetchall() == [("VIEW",)]
    assert con.execute("SELECT count(*) FROM findings").fetchall() == [(3 * len(jobs),)]
    con.close()


def test_a_store_written_before_partitioning_is_migrated_on_open(tmp_path) -> None:
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute("""CREATE TABLE findings (
        job_id VARCHAR NOT NULL, event_time TIMESTAMPTZ, kind VARCHAR, rule_id VARCHAR NOT NULL,
        severity VARCHAR, source VARCHAR, text VARCHAR, ref JSON, ref_key VARCHAR NOT NULL,
        gates VARCHAR, fields JSON, inserted_at TIMESTAMPTZ, PRIMARY KEY (job_id, ref_key, rule_id))""")
    con.execute("""INSERT INTO findings VALUES ('job-a', TIMESTAMPTZ '2026-03-01 12:00:00+00', 'nccl', 'r', 'fatal',
        'logs/a.log', 'old line', '{"file":"a","file_offset":1}', '{"file":"a","file_offset":1}', 'A', '{}', NULL)""")
    con.close()
    assert reoffer_old_and_new(path) == 1
    assert query(path, "SELECT count(*) FROM findings WHERE job_id = 'job-a'") == [(2,)]
    assert query(path, "SELECT text, ref_key FROM findings WHERE rule_id = 'r'") == [
        ("old line", '{"file":"a","file_offset":1}')]
    con = duckdb.connect(str(path), read_only=True)
    assert con.execute("SELECT table_type FROM information_schema.tables WHERE table_name = 'findings'"
                       ).fetchall() == [("VIEW",)]
    assert con.execute("SELECT count(*) FROM findings").fetchall() == [(2,)]
    con.close()


def reoffer_old_and_new(path) -> int:
    """Open an old store with this version's writer and offer its one migrated row again beside a new
    finding; returns the rows written (the migrated row is known: only the new one is added)."""
    with EvidenceStore(path) as store:
        old = Finding(kind="nccl", rule_id="r", text="old line", event_time=T0, source="logs/a.log",
                      ref={"file": "a", "file_offset": 1})
        store.add_findings("job-a", [old, finding(1)])
        store.flush()
        return store.rows_written["findings"]


def _partitioned_store(path) -> None:
    """A store as the previous version wrote it: 16 tables findings_parts.pNN behind a view."""
    from rlhealth.sinks.duckdb import DDL

    con = duckdb.connect(str(path))
    con.execute(DDL)  # the other tables, unchanged
    con.execute("CREATE SCHEMA findings_parts")
    cols = """job_id VARCHAR NOT NULL, event_time TIMESTAMPTZ, kind VARCHAR, rule_id VARCHAR NOT NULL,
        severity VARCHAR, source VARCHAR, text VARCHAR, ref JSON, ref_key VARCHAR NOT NULL,
        gates VARCHAR, fields JSON, inserted_at TIMESTAMPTZ"""
    for p in range(16):
        con.execute(f"CREATE TABLE findings_parts.p{p:02d} ({cols}, key_hash UBIGINT NOT NULL)")
    con.execute("CREATE TABLE store_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    (part,), = con.execute("SELECT md5_number_lower('job-a') % 16").fetchall()
    con.execute(f"""INSERT INTO findings_parts.p{part:02d} SELECT *, hash(job_id, rule_id, ref_key) FROM (VALUES
        ('job-a', TIMESTAMPTZ '2026-03-01 12:00:00+00', 'nccl', 'r', 'fatal', 'logs/a.log', 'old line',
         '{{"file":"a","file_offset":1}}', '{{"file":"a","file_offset":1}}', 'A', '{{}}', NULL::TIMESTAMPTZ),
        ('job-a', TIMESTAMPTZ '2026-03-01 12:00:05+00', 'nccl', 'r', 'fatal', 'x', 'no ref', '{{}}',
         'noref:abc', 'A', '{{}}', NULL::TIMESTAMPTZ)) AS v(job_id, event_time, kind, rule_id, severity, source,
        text, ref, ref_key, gates, fields, inserted_at)""")
    union = " UNION ALL ".join(f"SELECT * EXCLUDE (key_hash) FROM findings_parts.p{p:02d}" for p in range(16))
    con.execute(f"CREATE VIEW findings AS {union}")
    con.close()


def test_a_partitioned_store_is_read_before_and_migrated_on_open(tmp_path) -> None:
    from rlhealth.sinks import forensics

    path = tmp_path / "parts.duckdb"
    _partitioned_store(path)
    # read as it is, before any writer of this version opened it
    assert [r[2] for r in forensics.timeline(path, "job-a").rows] == ["r", "r"]
    assert query(path, "SELECT count(*) FROM findings") == [(2,)]
    assert reoffer_old_and_new(path) == 1
    assert query(path, "SELECT count(*), count(*) FILTER (ref_key = 'noref:abc') FROM findings") == [(3, 1)]
    assert [r[2] for r in forensics.timeline(path, "job-a").rows] == ["r", "nccl.watchdog_timeout", "r"]
    con = duckdb.connect(str(path), read_only=True)
    assert con.execute("SELECT table_schema, table_type FROM information_schema.tables WHERE table_name = 'findings' "
                       "OR table_schema = 'findings_parts'").fetchall() == [("main", "VIEW")]
    assert con.execute("SELECT count(*) FROM findings").fetchall() == [(3,)]
    con.close()


def test_key_hashes_are_recomputed_when_duckdbs_hash_changes(tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlhealth.sinks.findings_segments import read_manifest, segments_dir

    path = tmp_path / "ev.duckdb"
    with EvidenceStore(path) as store:
        store.add_findings("job-a", [finding(i) for i in range(3)])
    # as if the segments had been written by a DuckDB whose hash() gave other values
    directory = segments_dir(path)
    manifest = read_manifest(directory)
    assert manifest is not None
    manifest["hash_probe"] = "another duckdb"
    (directory / "manifest.json").write_text(json.dumps(manifest))
    for s in manifest["segments"]:
        t = pq.read_table(directory / s["file"])
        t = t.set_column(t.schema.get_field_index("key_hash"), "key_hash", pa.array([0] * t.num_rows, pa.uint64()))
        pq.write_table(t, directory / s["file"])
    with EvidenceStore(path) as store:
        store.add_findings("job-a", [finding(i) for i in range(4)])  # a replay plus one new finding
        store.flush()
        assert store.rows_written["findings"] == 1
    assert query(path, "SELECT count(*) FROM findings") == [(4,)]
    assert query(path, "SELECT count(*) FROM read_parquet(?) WHERE key_hash = 0",
                 [[str(directory / s["file"]) for s in read_manifest(directory)["segments"]]]) == [(0,)]


def test_merged_segments_keep_every_finding_once(tmp_path, monkeypatch) -> None:
    from rlhealth.sinks import findings_segments, forensics

    monkeypatch.setattr(findings_segments, "FANIN", 3)
    monkeypatch.setattr(findings_segments, "TIER0_ROWS", 2)
    path = tmp_path / "ev.duckdb"
    directory = findings_segments.segments_dir(path)
    with EvidenceStore(path) as store:
        for k in range(10):  # ten flushes of 4 findings of one job: merged as they come
            store.add_findings("job-a", [finding(4 * k + i) for i in range(4)])
            store.flush()
        store._segments.wait_merges()  # merges run on their own thread
        manifest = findings_segments.read_manifest(directory)
        assert manifest is not None
        assert len(manifest["segments"]) < 10
        assert max(s["tier"] for s in manifest["segments"]) >= 1
        assert sum(s["rows"] for s in manifest["segments"]) == 40
        # a retired file stays for readers of an older manifest until its grace time has passed
        retired = [r["file"] for r in manifest["retired"]]
        assert retired and all((directory / f).exists() for f in retired)
        # a full replay after the merges adds nothing
        store.add_findings("job-a", [finding(i) for i in range(40)])
        store.flush()
        assert store.rows_written["findings"] == 40
        assert store.dropped["findings"] == 40
        monkeypatch.setattr(findings_segments, "GRACE_S", 0.0)
        store.add_findings("job-b", [finding(1)])
        store.flush()
        assert not any((directory / f).exists() for f in retired)
    assert query(path, "SELECT count(*), count(DISTINCT event_time) FROM findings WHERE job_id = 'job-a'") == [(40, 40)]
    times = [r[0] for r in forensics.timeline(path, "job-a", T0 + timedelta(seconds=5), T0 + timedelta(seconds=9)).rows]
    assert times == [T0 + timedelta(seconds=s) for s in range(5, 10)]
    listed = {s["file"] for s in findings_segments.read_manifest(directory)["segments"]}
    assert {f"{p.parent.name}/{p.name}" for p in directory.glob("b=*/*.parquet")} == listed


def test_the_timeline_on_an_open_connection_follows_the_writer(tmp_path) -> None:
    from rlhealth.sinks import forensics
    from rlhealth.sinks.duckdb import connect_readonly

    path = tmp_path / "ev.duckdb"
    with EvidenceStore(path) as store:
        store.add_findings("job-a", [finding(i) for i in range(3)])
    con = connect_readonly(path)
    try:
        assert forensics.timeline(path, "job-a", con=con).rows == forensics.timeline(path, "job-a").rows
        assert len(forensics.timeline(path, "job-a", con=con).rows) == 3
    finally:
        con.close()


def test_the_timeline_reads_a_store_no_writer_has_migrated_yet(tmp_path) -> None:
    from rlhealth.sinks import forensics

    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE findings (job_id VARCHAR, event_time TIMESTAMPTZ, rule_id VARCHAR, severity VARCHAR, "
                "source VARCHAR, text VARCHAR)")
    con.execute("CREATE TABLE verdicts (job_id VARCHAR, seq BIGINT, produced_at TIMESTAMPTZ, verdict VARCHAR, "
                "escalate BOOLEAN, job_status VARCHAR, gate_a VARCHAR, gate_b VARCHAR, gate_c VARCHAR, reasoning VARCHAR)")
    con.execute("INSERT INTO findings VALUES ('job-a', TIMESTAMPTZ '2026-03-01 12:00:00+00', 'r', 'fatal', 'a', 'x')")
    con.close()
    answer = forensics.timeline(path, "job-a")
    assert [(r[1], r[2]) for r in answer.rows] == [("finding", "r")]


def test_one_orjson_call_per_column_gives_each_findings_canonical_json() -> None:
    from rlhealth.sinks.findings_segments import _bodies, json_text

    cases = [
        ({"file": "logs/a.log", "file_offset": 1}, {"offset": 2, "topic": "t", "partition": 0}),
        ({}, {"b": 1, "a": {"z": [1, 2], "y": None}}, {}),
        ({"text": 'a "},{" inside'}, {"file": "b"}),  # the separator inside a value: one call each
        ({"when": T0, "n": 1.5, "u": "é\n"},),
        (None, {"a": 1}),
    ]
    for refs in cases:
        assert [b"{" + body + b"}" for body in _bodies(refs)] == [json_text(r or {}).encode() for r in refs]
