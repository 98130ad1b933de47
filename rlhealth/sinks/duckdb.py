"""DuckDB evidence store: findings, verdicts and dead letters, one writer per file.

DuckDB allows one read-write process per file (style.md H5), so exactly one `EvidenceStore`
may own a file: a single worker with `--db`, or the single-replica evidence writer. Other
processes read a copy or use `query(path, ...)` while nothing writes.

Writes are buffered and flushed as Arrow tables (one INSERT per flush, perf-study §4: row-wise
`executemany` is ~300x slower), every `flush_rows` rows, on `flush()` and on `close()`.
Inserts are idempotent so at-least-once redelivery and replays add nothing twice:

* findings: primary key (job_id, ref_key, rule_id); `ref_key` is the canonical JSON of the
  finding's `ref` (topic/partition/offset or file/offset, plus any line locator the core adds),
  or, for a finding without a ref, a digest of its event time, source and text;
* verdicts: primary key (job_id, seq);
* dead letters: primary key `dl_key`, the source topic/partition/offset/stage when known, else a
  digest of the original bytes, reason and stage.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa

from rlhealth.agents.findings import Finding
from rlhealth.schemas.codec import DeadLetter
from rlhealth.schemas.verdict import Verdict

TS = pa.timestamp("us", tz="UTC")

FINDINGS_SCHEMA = pa.schema([
    ("job_id", pa.string()), ("event_time", TS), ("kind", pa.string()), ("rule_id", pa.string()),
    ("severity", pa.string()), ("source", pa.string()), ("text", pa.string()), ("ref", pa.string()),
    ("ref_key", pa.string()), ("gates", pa.string()), ("fields", pa.string()), ("inserted_at", TS),
])
VERDICTS_SCHEMA = pa.schema([
    ("job_id", pa.string()), ("seq", pa.int64()), ("produced_at", TS), ("verdict", pa.string()),
    ("confidence", pa.string()), ("job_status", pa.string()), ("escalate", pa.bool_()),
    ("gates", pa.string()), ("reasoning", pa.string()), ("payload", pa.string()), ("inserted_at", TS),
])
DEAD_LETTERS_SCHEMA = pa.schema([
    ("dl_key", pa.string()), ("reason", pa.string()), ("detail", pa.string()), ("stage", pa.string()),
    ("job_id", pa.string()), ("source_topic", pa.string()), ("source_partition", pa.int32()),
    ("source_offset", pa.int64()), ("original", pa.binary()), ("original_key", pa.binary()),
    ("received_at", TS), ("inserted_at", TS),
])

DDL = """
CREATE TABLE IF NOT EXISTS findings (
    job_id VARCHAR NOT NULL, event_time TIMESTAMPTZ, kind VARCHAR, rule_id VARCHAR NOT NULL,
    severity VARCHAR, source VARCHAR, text VARCHAR, ref JSON, ref_key VARCHAR NOT NULL,
    gates VARCHAR, fields JSON, inserted_at TIMESTAMPTZ,
    PRIMARY KEY (job_id, ref_key, rule_id));
CREATE TABLE IF NOT EXISTS verdicts (
    job_id VARCHAR NOT NULL, seq BIGINT NOT NULL, produced_at TIMESTAMPTZ, verdict VARCHAR,
    confidence VARCHAR, job_status VARCHAR, escalate BOOLEAN, gates JSON, reasoning VARCHAR,
    payload JSON, inserted_at TIMESTAMPTZ,
    PRIMARY KEY (job_id, seq));
CREATE TABLE IF NOT EXISTS dead_letters (
    dl_key VARCHAR PRIMARY KEY, reason VARCHAR, detail VARCHAR, stage VARCHAR, job_id VARCHAR,
    source_topic VARCHAR, source_partition INTEGER, source_offset BIGINT, original BLOB,
    original_key BLOB, received_at TIMESTAMPTZ, inserted_at TIMESTAMPTZ);
"""

_SCHEMAS = {"findings": FINDINGS_SCHEMA, "verdicts": VERDICTS_SCHEMA, "dead_letters": DEAD_LETTERS_SCHEMA}
_KEYS = {"findings": ("job_id", "ref_key", "rule_id"), "verdicts": ("job_id", "seq"), "dead_letters": ("dl_key",)}


def _json(obj: Any) -> str:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS, default=str).decode()


def _digest(*parts: object) -> str:
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(repr(p).encode("utf-8", "replace"))
        h.update(b"\x00")
    return h.hexdigest()


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def finding_ref_key(job_id: str, f: Finding) -> str:
    if f.ref:
        return _json(f.ref)
    return "noref:" + _digest(job_id, f.event_time.isoformat() if f.event_time else None, f.source, f.text)


class EvidenceStore:
    """The single writer of one evidence file. Not safe to share across processes; thread-safe within one."""

    def __init__(self, path: str | Path, *, flush_rows: int = 5000) -> None:
        self.path = str(path)
        self.flush_rows = flush_rows
        self._con = duckdb.connect(self.path)
        self._con.execute(DDL).fetchall()
        self._lock = threading.Lock()
        # table -> primary key -> row; a dict also de-duplicates within one buffer
        self._buf: dict[str, dict[tuple, dict[str, Any]]] = {t: {} for t in _SCHEMAS}
        self.rows_written = {t: 0 for t in _SCHEMAS}

    # -- buffering --------------------------------------------------------------------------
    def _add(self, table: str, row: dict[str, Any]) -> None:
        key = tuple(row[k] for k in _KEYS[table])
        with self._lock:
            self._buf[table].setdefault(key, row)
            pending = sum(len(b) for b in self._buf.values())
        if pending >= self.flush_rows:
            self.flush()

    def add_findings(self, job_id: str, findings: Iterable[Finding], *, now: datetime | None = None) -> None:
        at = now or datetime.now(UTC)
        for f in findings:
            self._add("findings", {
                "job_id": job_id, "event_time": _utc(f.event_time), "kind": f.kind, "rule_id": f.rule_id,
                "severity": f.severity, "source": f.source, "text": f.text, "ref": _json(f.ref or {}),
                "ref_key": finding_ref_key(job_id, f), "gates": ",".join(f.gates),
                "fields": _json(f.fields or {}), "inserted_at": at,
            })

    def add_verdict(self, v: Verdict, *, now: datetime | None = None) -> None:
        self._add("verdicts", {
            "job_id": v.job_id, "seq": v.seq, "produced_at": v.produced_at, "verdict": v.verdict,
            "confidence": v.confidence, "job_status": v.job_status, "escalate": v.escalate,
            "gates": _json(v.gates.model_dump(mode="json")), "reasoning": v.reasoning,
            "payload": v.model_dump_json(), "inserted_at": now or datetime.now(UTC),
        })

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
            return sum(len(b) for b in self._buf.values())

    # -- writing ----------------------------------------------------------------------------
    def flush(self) -> int:
        """Write every buffered row, one Arrow INSERT per table. Returns the rows offered."""
        with self._lock:
            bufs = {t: list(b.values()) for t, b in self._buf.items() if b}
            for t in bufs:
                self._buf[t] = {}
            offered = 0
            for table, rows in bufs.items():
                schema = _SCHEMAS[table]
                batch = pa.Table.from_pydict({n: [r[n] for r in rows] for n in schema.names}, schema=schema)
                before = self._count(table)
                self._con.register("_rlhealth_batch", batch)
                try:
                    cols = ", ".join(schema.names)
                    self._con.execute(
                        f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _rlhealth_batch ON CONFLICT DO NOTHING"
                    ).fetchall()
                finally:
                    self._con.unregister("_rlhealth_batch")
                self.rows_written[table] += self._count(table) - before
                offered += len(rows)
            return offered

    def _count(self, table: str) -> int:
        return int(self._con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0])

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
        """Flush, then run one statement on the writer's connection (this process only)."""
        self.flush()
        with self._lock:
            return self._con.execute(sql, params or []).fetchall()

    def close(self) -> None:
        if self._con is None:
            return
        self.flush()
        with self._lock:
            self._con.execute("CHECKPOINT").fetchall()
            self._con.close()
            self._con = None  # type: ignore[assignment]

    def __enter__(self) -> EvidenceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def query(path: str | Path, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
    """Run one statement on a read-only connection; fails while another process writes the file."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()
