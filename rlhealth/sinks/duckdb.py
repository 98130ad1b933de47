"""DuckDB evidence store: verdicts, the evidence lines behind them, findings, metric time series,
dead letters and source problems; one writer per file. Schema: docs/forensics.md.

DuckDB allows one read-write process per file (style.md H5), so exactly one `EvidenceStore`
may own a file: `probe`/`watch` with `--db`, a single worker with `--db`, or the single-replica
evidence writer. Readers never wait for it: after a flush the writer publishes a read-only
snapshot next to the file (`<file>.snapshot`, written to a temporary file and renamed, so it is
never torn) at most every `snapshot_secs`, and `connect_readonly(path)` opens the file itself when
no process writes it, else the newest snapshot. Findings are not in the file: they are Parquet
segments in `<file>.findings/` (`findings_segments.py`), which readers read directly at any time
through the TEMP view `findings` that `connect_readonly` creates.

Writes are buffered and flushed as Arrow tables (one INSERT per table, perf-study §4: row-wise
`executemany` is ~300x slower), every `flush_rows` rows, on `flush()` and on `close()`, in one
transaction (the findings' files just before it). Inserts are idempotent so at-least-once
redelivery and replays add nothing twice:

* findings (`findings_segments.py`: Parquet, bucketed by job): key (job_id, ref_key, rule_id),
  checked as (64-bit hash of it, event_time); `ref_key` is the canonical JSON of the finding's
  `ref` (topic/partition/offset or file/offset, plus any line locator the core adds), or, for a
  finding without a ref, a digest of its event time, source and text;
* verdicts: primary key (job_id, seq, produced_at): `probe` and `watch` number their verdicts from
  a per-run base (microseconds at start), so a second probe or a restarted watch adds rows;
  `add_verdict` returns False (and `dropped` counts it) only for the very same verdict again;
* evidence_lines: primary key (job_id, seq, produced_at, idx), one row per evidence line of a verdict;
* metrics: primary key (job_id, judged_at), one row per job per judgement (or per minute, in the worker);
* source_problems: primary key (job_id, path, problem, gate), the latest count;
* dead letters: primary key `dl_key`, the source topic/partition/offset/stage when known, else a
  digest of the original bytes, reason and stage.
"""

from __future__ import annotations

import base64
import os
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from rlhealth import settings
from rlhealth.agents.findings import Finding, JobMetrics
from rlhealth.schemas.codec import DeadLetter
from rlhealth.schemas.evidence import FindingRecord, MetricsPoint
from rlhealth.schemas.verdict import Verdict
from rlhealth.sinks import findings_segments
from rlhealth.sinks.evidence_records import finding_of, metrics_point

TS = pa.timestamp("us", tz="UTC")

VERDICTS_SCHEMA = pa.schema([
    ("job_id", pa.string()), ("seq", pa.int64()), ("produced_at", TS), ("verdict", pa.string()),
    ("confidence", pa.string()), ("job_status", pa.string()), ("escalate", pa.bool_()),
    ("gates", pa.string()), ("reasoning", pa.string()), ("payload", pa.string()), ("inserted_at", TS),
    ("event_time", TS), ("age_s", pa.float64()), ("gate_a", pa.string()), ("gate_b", pa.string()),
    ("gate_c", pa.string()), ("captured", pa.string()), ("held", pa.bool_()), ("root_cause", pa.string()),
])
EVIDENCE_LINES_SCHEMA = pa.schema([
    ("job_id", pa.string()), ("seq", pa.int64()), ("produced_at", TS), ("idx", pa.int32()), ("gate", pa.string()),
    ("source", pa.string()), ("event_time", TS), ("rule_id", pa.string()), ("text", pa.string()),
    ("topic", pa.string()), ("partition", pa.int32()), ("kafka_offset", pa.int64()), ("file", pa.string()),
    ("file_offset", pa.int64()), ("line_no", pa.int64()),
])
METRICS_SCHEMA = pa.schema([
    ("job_id", pa.string()), ("judged_at", TS), ("last_event_time", TS), ("generation_tokens_per_s", pa.float64()),
    ("running_requests", pa.float64()), ("waiting_requests", pa.float64()), ("staleness_max_s", pa.float64()),
    ("staleness", pa.string()), ("trials_completed", pa.int64()), ("reward_mean", pa.float64()),
    ("nonzero_reward_ratio", pa.float64()), ("gpu_util_mean", pa.float64()), ("restarts_burned", pa.int32()),
    ("trainer_last_step", pa.int64()), ("verdict", pa.string()), ("job_status", pa.string()),
    ("engines", pa.string()), ("effective_training_ratio", pa.float64()), ("training_time", pa.string()),
])
PROBLEMS_SCHEMA = pa.schema([
    ("job_id", pa.string()), ("path", pa.string()), ("problem", pa.string()), ("gate", pa.string()),
    ("note", pa.string()), ("count", pa.int64()), ("seen_at", TS),
])
DEAD_LETTERS_SCHEMA = pa.schema([
    ("dl_key", pa.string()), ("reason", pa.string()), ("detail", pa.string()), ("stage", pa.string()),
    ("job_id", pa.string()), ("source_topic", pa.string()), ("source_partition", pa.int32()),
    ("source_offset", pa.int64()), ("original", pa.binary()), ("original_key", pa.binary()),
    ("received_at", TS), ("inserted_at", TS),
])

DDL = """
CREATE TABLE IF NOT EXISTS verdicts (
    job_id VARCHAR NOT NULL, seq BIGINT NOT NULL, produced_at TIMESTAMPTZ NOT NULL, verdict VARCHAR,
    confidence VARCHAR, job_status VARCHAR, escalate BOOLEAN, gates JSON, reasoning VARCHAR,
    payload JSON, inserted_at TIMESTAMPTZ, event_time TIMESTAMPTZ, age_s DOUBLE, gate_a VARCHAR,
    gate_b VARCHAR, gate_c VARCHAR, captured VARCHAR, held BOOLEAN,
    PRIMARY KEY (job_id, seq, produced_at));
CREATE TABLE IF NOT EXISTS evidence_lines (
    job_id VARCHAR NOT NULL, seq BIGINT NOT NULL, produced_at TIMESTAMPTZ NOT NULL, idx INTEGER NOT NULL,
    gate VARCHAR, source VARCHAR, event_time TIMESTAMPTZ, rule_id VARCHAR, text VARCHAR, topic VARCHAR,
    partition INTEGER, kafka_offset BIGINT, file VARCHAR, file_offset BIGINT, line_no BIGINT,
    PRIMARY KEY (job_id, seq, produced_at, idx));
CREATE TABLE IF NOT EXISTS metrics (
    job_id VARCHAR NOT NULL, judged_at TIMESTAMPTZ NOT NULL, last_event_time TIMESTAMPTZ,
    generation_tokens_per_s DOUBLE, running_requests DOUBLE, waiting_requests DOUBLE, staleness_max_s DOUBLE,
    staleness JSON, trials_completed BIGINT, reward_mean DOUBLE, nonzero_reward_ratio DOUBLE,
    gpu_util_mean DOUBLE, restarts_burned INTEGER, trainer_last_step BIGINT, verdict VARCHAR, job_status VARCHAR,
    PRIMARY KEY (job_id, judged_at));
ALTER TABLE verdicts ADD COLUMN IF NOT EXISTS root_cause JSON;
ALTER TABLE metrics ADD COLUMN IF NOT EXISTS engines JSON;
ALTER TABLE metrics ADD COLUMN IF NOT EXISTS effective_training_ratio DOUBLE;
ALTER TABLE metrics ADD COLUMN IF NOT EXISTS training_time JSON;
CREATE TABLE IF NOT EXISTS source_problems (
    job_id VARCHAR NOT NULL, path VARCHAR NOT NULL, problem VARCHAR NOT NULL, gate VARCHAR NOT NULL,
    note VARCHAR, count BIGINT, seen_at TIMESTAMPTZ,
    PRIMARY KEY (job_id, path, problem, gate));
CREATE TABLE IF NOT EXISTS dead_letters (
    dl_key VARCHAR PRIMARY KEY, reason VARCHAR, detail VARCHAR, stage VARCHAR, job_id VARCHAR,
    source_topic VARCHAR, source_partition INTEGER, source_offset BIGINT, original BLOB,
    original_key BLOB, received_at TIMESTAMPTZ, inserted_at TIMESTAMPTZ);
"""

_SCHEMAS = {"verdicts": VERDICTS_SCHEMA, "evidence_lines": EVIDENCE_LINES_SCHEMA,
            "metrics": METRICS_SCHEMA, "source_problems": PROBLEMS_SCHEMA, "dead_letters": DEAD_LETTERS_SCHEMA}
_KEYS = {"verdicts": ("job_id", "seq", "produced_at"),
         "evidence_lines": ("job_id", "seq", "produced_at", "idx"), "metrics": ("job_id", "judged_at"),
         "source_problems": ("job_id", "path", "problem", "gate"), "dead_letters": ("dl_key",)}
# tables whose rows are replaced on a key conflict (the newest count wins); the others keep the first row
_UPSERT = {"source_problems": ("note", "count", "seen_at")}
CHECKPOINT_THRESHOLD = "256MB"  # WAL size that triggers an automatic checkpoint (DuckDB default 16MB)
SNAPSHOT_COST_SHARE = 10  # snapshot at most every 10x the last snapshot's duration
TABLES = ("findings", *_SCHEMAS)


_json = findings_segments.json_text
_digest = findings_segments.digest


class EvidenceStore:
    """The single writer of one evidence file. Not safe to share across processes; thread-safe within one."""

    def __init__(self, path: str | Path, *, flush_rows: int = 5000, snapshot_secs: float | None = None,
                 memory_limit_bytes: int | None = None) -> None:
        self.path = str(path)
        self.flush_rows = flush_rows
        self._con = duckdb.connect(self.path)
        # DuckDB takes up to 80 % of the machine's memory by default; the store shares a worker or a
        # probe process, so it is capped (it spills to disk beyond the cap, slower, never failing).
        limit = memory_limit_bytes if memory_limit_bytes is not None else settings.load().duckdb_memory_limit_bytes
        if limit:
            self._con.execute(f"SET memory_limit = '{int(limit)}B'").fetchall()
        # fewer automatic checkpoints while ingesting: each one recompresses the open row groups
        self._con.execute(f"SET checkpoint_threshold = '{CHECKPOINT_THRESHOLD}'").fetchall()
        self._con.execute(DDL).fetchall()
        self._segments = findings_segments.FindingsSegments(self._con, self.path)
        self._segments.migrate_legacy()
        self._segments.create_file_view()
        self._lock = threading.Lock()
        # table -> primary key -> row; a dict also de-duplicates within one buffer
        self._buf: dict[str, dict[tuple, dict[str, Any]]] = {t: {} for t in _SCHEMAS}
        self._findings = findings_segments.FindingsBuffer()
        self._pending = 0
        self.rows_written = {t: 0 for t in TABLES}
        self.dropped = {"verdicts": 0, "findings": 0, "dead_letters": 0}  # offered rows already stored
        self.snapshot_secs = snapshot_secs
        self._snap_at: float | None = None
        self._snap_cost = 0.0  # seconds the last snapshot took
        self._dbname = str(self._con.execute("SELECT current_database()").fetchall()[0][0])

    # -- buffering --------------------------------------------------------------------------
    def _add(self, table: str, row: dict[str, Any], *, replace_row: bool = False) -> None:
        key = tuple(row[k] for k in _KEYS[table])
        with self._lock:
            buf = self._buf[table]
            n = len(buf)
            if replace_row:
                buf[key] = row
            else:
                buf.setdefault(key, row)
            self._pending += len(buf) - n
            full = self._pending >= self.flush_rows
        if full:
            self.flush()

    def add_findings(self, job_id: str, findings: Iterable[Finding], *, now: datetime | None = None) -> None:
        at = now or datetime.now(UTC)
        with self._lock:
            n = len(self._findings)
            self._findings.add(job_id, findings, at)
            self._pending += len(self._findings) - n
            full = self._pending >= self.flush_rows
        if full:
            self.flush()

    def add_verdict(self, v: Verdict, *, now: datetime | None = None) -> None:
        """Buffer a verdict and its evidence lines (stored on the next flush)."""
        self._add("verdicts", {
            "job_id": v.job_id, "seq": v.seq, "produced_at": v.produced_at, "verdict": v.verdict,
            "confidence": v.confidence, "job_status": v.job_status, "escalate": v.escalate,
            "gates": _json(v.gates.model_dump(mode="json")), "reasoning": v.reasoning,
            "payload": v.model_dump_json(), "inserted_at": now or datetime.now(UTC),
            "event_time": v.event_time, "age_s": v.age_s, "gate_a": v.gates.A.status, "gate_b": v.gates.B.status,
            "gate_c": v.gates.C.status, "captured": v.captured, "held": v.held is not None,
            "root_cause": _json(v.root_cause.model_dump(mode="json")) if v.root_cause is not None else None,
        })
        lines = [("", e) for e in v.evidence] + [(k, e) for k in "ABC" for e in getattr(v.gates, k).evidence]
        for idx, (gate, e) in enumerate(lines):
            ref = e.ref
            self._add("evidence_lines", {
                "job_id": v.job_id, "seq": v.seq, "produced_at": v.produced_at, "idx": idx, "gate": gate,
                "source": e.source, "event_time": e.event_time, "rule_id": e.rule_id, "text": e.text,
                "topic": ref.topic if ref else None, "partition": ref.partition if ref else None,
                "kafka_offset": ref.offset if ref else None, "file": ref.file if ref else None,
                "file_offset": ref.file_offset if ref else None, "line_no": ref.line_no if ref else None,
            })

    def add_metrics(self, m: JobMetrics) -> None:
        """One point of the job's metric time series, at the judging time of `m`."""
        if (m.at or m.last_event_time) is None:
            return
        self.add_metrics_point(metrics_point(m))

    def add_metrics_point(self, p: MetricsPoint) -> None:
        staleness = {k: round(v, 3) for k, v in p.log_staleness_s.items()}
        self._add("metrics", {
            "job_id": p.job_id, "judged_at": p.judged_at, "last_event_time": p.last_event_time,
            "generation_tokens_per_s": p.generation_tokens_per_s, "running_requests": p.running_requests,
            "waiting_requests": p.waiting_requests, "staleness_max_s": max(staleness.values()) if staleness else None,
            "staleness": _json(staleness), "trials_completed": p.trials_completed,
            "reward_mean": p.reward_mean, "nonzero_reward_ratio": p.nonzero_reward_ratio,
            "gpu_util_mean": p.gpu_util_mean, "restarts_burned": p.restarts_burned,
            "trainer_last_step": p.trainer_last_step, "verdict": p.verdict, "job_status": p.job_status,
            "engines": _json({eid: [[e.at.isoformat(), e.generation_tokens_per_s, e.running_requests,
                                     e.waiting_requests] for e in buckets] for eid, buckets in p.engines.items()}),
            "effective_training_ratio": p.effective_training_ratio, "training_time": _json(p.training_time_s),
        })

    def add_finding_record(self, r: FindingRecord) -> None:
        """A finding read from the findings topic (the evidence writer)."""
        self.add_findings(r.job_id, [finding_of(r)])

    def add_problems(self, job_id: str, problems: Iterable[Any], *, now: datetime | None = None) -> None:
        """Source problems of a capture or live folder (`SourceProblem`: path, problem, gate, note, count)."""
        at = now or datetime.now(UTC)
        for p in problems:
            self._add("source_problems", {
                "job_id": job_id, "path": str(p.path), "problem": p.problem, "gate": p.gate or "",
                "note": p.note, "count": int(getattr(p, "count", 1) or 1), "seen_at": at,
            }, replace_row=True)

    def add_dead_letter(self, dl: DeadLetter, *, now: datetime | None = None) -> None:
        original = dl.original()
        if dl.source_topic is not None and dl.source_offset is not None:
            key = f"{dl.source_topic}/{dl.source_partition}/{dl.source_offset}/{dl.stage}"
        else:
            key = "digest:" + _digest(original, dl.reason, dl.stage, dl.job_id)
        self._add("dead_letters", {
            "dl_key": key, "reason": dl.reason, "detail": dl.detail, "stage": dl.stage, "job_id": dl.job_id,
            "source_topic": dl.source_topic, "source_partition": dl.source_partition,
            "source_offset": dl.source_offset, "original": original,
            "original_key": base64.b64decode(dl.original_key_b64) if dl.original_key_b64 else None,
            "received_at": dl.received_at, "inserted_at": now or datetime.now(UTC),
        })

    def pending(self) -> int:
        with self._lock:
            return self._pending

    # -- writing ----------------------------------------------------------------------------
    def flush(self) -> int:
        """Write every buffered row in one transaction: one Arrow INSERT per table (per touched
        findings partition). Returns the rows offered."""
        with self._lock:
            bufs = {t: list(b.values()) for t, b in self._buf.items() if b}
            for t in bufs:
                self._buf[t] = {}
            parts = self._findings.take()
            self._pending = 0
            if not bufs and not parts:
                return 0
            offered = 0
            added: dict[str, int] = {}
            if parts:
                # findings first, in their own files: if the tables' transaction then fails, the
                # findings are stored and a redelivery finds them (never the reverse: a key
                # recorded for rows not written would drop them)
                new, keys = self._segments.new_rows(parts)
                self._segments.write(new)
                if keys is not None:
                    self._segments.record(keys)
                added["findings"] = sum(t.num_rows for _, t in new)
            self._con.execute("BEGIN").fetchall()
            try:
                for table, rows in bufs.items():
                    added[table] = self._insert(table, rows)
                self._con.execute("COMMIT").fetchall()
            except BaseException:
                self._con.execute("ROLLBACK").fetchall()
                raise
            counts = {t: len(r) for t, r in bufs.items()}
            if parts:
                counts["findings"] = sum(b.num_rows for _, b in parts)
            for table, n in counts.items():
                self.rows_written[table] += added[table]
                if table in self.dropped:
                    self.dropped[table] += n - added[table]
                offered += n
        if self.snapshot_secs is not None:
            self._maybe_snapshot()
        return offered

    def _insert(self, table: str, rows: list[dict[str, Any]]) -> int:
        schema = _SCHEMAS[table]
        batch = pa.Table.from_pydict({n: [r[n] for r in rows] for n in schema.names}, schema=schema)
        self._con.register("_rlhealth_batch", batch)
        try:
            cols = ", ".join(schema.names)
            if table in _UPSERT:
                sets = ", ".join(f"{c} = excluded.{c}" for c in _UPSERT[table])
                conflict = f"ON CONFLICT DO UPDATE SET {sets}"
            else:
                conflict = "ON CONFLICT DO NOTHING"
            # the statement's count: rows inserted (or updated, for an upsert)
            return int(self._con.execute(
                f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _rlhealth_batch {conflict}").fetchall()[0][0])
        finally:
            self._con.unregister("_rlhealth_batch")

    # -- readers ----------------------------------------------------------------------------
    def _maybe_snapshot(self, force: bool = False) -> None:
        # a snapshot copies the whole file, so a big store is copied less often: the writer spends
        # at most 1/SNAPSHOT_COST_SHARE of its time copying (docs/forensics.md)
        now = time.monotonic()
        every = max(self.snapshot_secs or 0.0, SNAPSHOT_COST_SHARE * self._snap_cost)
        if not force and self._snap_at is not None and now - self._snap_at < every:
            return
        try:
            self.snapshot()
        except Exception:  # noqa: BLE001 - a reader's copy is best effort; the store itself is written
            pass
        self._snap_cost = time.monotonic() - now
        self._snap_at = time.monotonic()

    def snapshot(self) -> Path:
        """Write a consistent read-only copy to `<file>.snapshot` (temporary file, then rename)."""
        target = Path(self.path + ".snapshot")
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        with self._lock:
            self._con.execute(f"ATTACH '{tmp}' AS rlhealth_snap").fetchall()
            try:
                self._con.execute(f"COPY FROM DATABASE \"{self._dbname}\" TO rlhealth_snap").fetchall()
            finally:
                self._con.execute("DETACH rlhealth_snap").fetchall()
        os.replace(tmp, target)
        return target

    def _count(self, table: str) -> int:
        with self._lock:
            self._segments.refresh_view()
            return int(self._con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0])

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
        """Flush, then run one statement on the writer's connection (this process only)."""
        self.flush()
        with self._lock:
            self._segments.refresh_view()
            return self._con.execute(sql, params or []).fetchall()

    def close(self) -> None:
        if self._con is None:
            return
        self.flush()
        with self._lock:
            self._con.execute("CHECKPOINT").fetchall()
        if self.snapshot_secs is not None and Path(self.path + ".snapshot").exists():
            self._maybe_snapshot(force=True)  # a reader's copy is not left behind the file
        with self._lock:
            self._con.close()
            self._con = None  # type: ignore[assignment]
            self._segments.close()

    def __enter__(self) -> EvidenceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect_readonly(path: str | Path, *, findings_view: bool = True) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the store: the file itself, or, while a writer holds it, its newest
    snapshot (`<file>.snapshot`), with the TEMP view `findings` over the current findings segments
    (binding it reads the manifest and costs a few ms: `findings_view=False` for a question that
    names its segment files itself). Raises FileNotFoundError when there is neither."""
    path = Path(path)
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.IOException:
        snap = Path(str(path) + ".snapshot")
        if not snap.exists():
            raise
        con = duckdb.connect(str(snap), read_only=True)
    try:
        if findings_view:
            findings_segments.create_view(con, path)  # the findings are beside the file, never in a snapshot
    except BaseException:
        con.close()
        raise
    return con


def query(path: str | Path, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
    """Run one statement on a read-only connection (`connect_readonly`)."""
    con = connect_readonly(path)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()
