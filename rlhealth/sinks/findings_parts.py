"""The findings table of the evidence store, hash-partitioned by job (docs/forensics.md).

Findings are the store's big table (millions of rows). One job's window must be answered without
scanning all of them, and ingest must not maintain a per-row index (a DuckDB ART primary key on
string columns capped ingest near 40k rows/s and doubled the file). So findings live in
`PARTS` tables `findings_parts.p00` ... one per hash bucket of `job_id`; a job's rows are all in
`part_of(job_id)`, which equals `md5_number_lower(job_id) % PARTS` in DuckDB SQL. The view
`findings` is their union, with the documented columns.

Each partition has one extra column, `key_hash`: DuckDB's 64-bit `hash(job_id, rule_id, ref_key)`.
A row is new unless a row with the same `key_hash` and `event_time` is already in its partition
(the anti-join reads two fixed-width columns, not the strings). DuckDB does not promise `hash` is
the same across versions, so the store keeps a probe value of it (`store_meta`) and recomputes every
key_hash when the probe changes (`check_key_hash`). Buffers are columnar: a finding costs a few list
appends, and a flush is one Arrow table and one INSERT per touched partition.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import duckdb
import orjson
import pyarrow as pa

from rlhealth.agents.findings import Finding

PARTS = 16
SCHEMA_NAME = "findings_parts"
TS = pa.timestamp("us", tz="UTC")
FINDINGS_SCHEMA = pa.schema([
    ("job_id", pa.string()), ("event_time", TS), ("kind", pa.string()), ("rule_id", pa.string()),
    ("severity", pa.string()), ("source", pa.string()), ("text", pa.string()), ("ref", pa.string()),
    ("ref_key", pa.string()), ("gates", pa.string()), ("fields", pa.string()), ("inserted_at", TS),
])
COLUMNS = ", ".join(FINDINGS_SCHEMA.names)
_COLUMN_DDL = """job_id VARCHAR NOT NULL, event_time TIMESTAMPTZ, kind VARCHAR, rule_id VARCHAR NOT NULL,
    severity VARCHAR, source VARCHAR, text VARCHAR, ref JSON, ref_key VARCHAR NOT NULL,
    gates VARCHAR, fields JSON, inserted_at TIMESTAMPTZ"""
KEY_HASH_SQL = "hash(job_id, rule_id, ref_key)"
_PROBE_SQL = "SELECT hash('rlhealth', 'key_hash', 'probe')::VARCHAR"


def part_of(job_id: str) -> int:
    """The partition of a job: md5_number_lower(job_id) % PARTS, as DuckDB computes it."""
    return int.from_bytes(hashlib.md5(job_id.encode("utf-8")).digest()[8:], "little") % PARTS


def table_of(part: int) -> str:
    return f"{SCHEMA_NAME}.p{part:02d}"


def ddl() -> str:
    parts = [f"CREATE SCHEMA IF NOT EXISTS {SCHEMA_NAME};",
             "CREATE TABLE IF NOT EXISTS store_meta (key VARCHAR PRIMARY KEY, value VARCHAR);"]
    for p in range(PARTS):
        parts.append(f"CREATE TABLE IF NOT EXISTS {table_of(p)} ({_COLUMN_DDL}, key_hash UBIGINT NOT NULL);")
    union = " UNION ALL ".join(f"SELECT {COLUMNS} FROM {table_of(p)}" for p in range(PARTS))
    parts.append(f"CREATE OR REPLACE VIEW findings AS {union};")
    return "\n".join(parts)


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """A store written before partitioning has a `findings` table: move its rows into the
    partitions (once, at the writer's open) and replace it with the view. Returns rows moved."""
    kind = con.execute("SELECT table_type FROM information_schema.tables "
                       "WHERE table_schema = 'main' AND table_name = 'findings'").fetchall()
    if not kind or kind[0][0] != "BASE TABLE":
        return 0
    con.execute("ALTER TABLE findings RENAME TO findings_unpartitioned").fetchall()
    con.execute(ddl()).fetchall()
    moved = 0
    for p in range(PARTS):
        moved += int(con.execute(
            f"INSERT INTO {table_of(p)} ({COLUMNS}, key_hash) SELECT {COLUMNS}, {KEY_HASH_SQL} "
            f"FROM findings_unpartitioned WHERE md5_number_lower(job_id) % {PARTS} = {p}").fetchall()[0][0])
    con.execute("DROP TABLE findings_unpartitioned").fetchall()
    return moved


def check_key_hash(con: duckdb.DuckDBPyConnection) -> bool:
    """Record the probe of `hash` in a new store; if this DuckDB's differs from the recorded one,
    recompute every key_hash (else a replay would not match the stored rows). True if recomputed."""
    probe = con.execute(_PROBE_SQL).fetchall()[0][0]
    row = con.execute("SELECT value FROM store_meta WHERE key = 'key_hash_probe'").fetchall()
    if row and row[0][0] == probe:
        return False
    if row:
        for p in range(PARTS):
            con.execute(f"UPDATE {table_of(p)} SET key_hash = {KEY_HASH_SQL}").fetchall()
    con.execute("INSERT OR REPLACE INTO store_meta VALUES ('key_hash_probe', ?)", [probe]).fetchall()
    return bool(row)


def json_text(obj: Any) -> str:
    """Canonical JSON (sorted keys): equal values give equal text, so text compares and hashes."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS, default=str).decode()


def digest(*parts: object) -> str:
    """A stable 128-bit digest of the parts' reprs."""
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(repr(p).encode("utf-8", "replace"))
        h.update(b"\x00")
    return h.hexdigest()


def finding_ref_key(job_id: str, f: Finding) -> str:
    if f.ref:
        return json_text(f.ref)
    return "noref:" + digest(job_id, f.event_time.isoformat() if f.event_time else None, f.source, f.text)


class _Columns:
    """One partition's buffered findings, column by column. job_id and inserted_at are constant per
    `add` call, so they are kept as runs, not per row."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, datetime, int]] = []  # (job_id, inserted_at, rows)
        self.event_time: list[datetime | None] = []
        self.kind: list[str] = []
        self.rule_id: list[str] = []
        self.severity: list[str] = []
        self.source: list[str] = []
        self.text: list[str] = []
        self.ref: list[bytes] = []
        self.noref: dict[int, str] = {}  # row -> ref_key of the rows without a ref
        self.gates: list[str] = []
        self.fields: list[bytes] = []

    def add(self, job_id: str, findings: Iterable[Finding], at: datetime) -> int:
        n0 = len(self.text)
        et, kind, rule, sev, src, text = (self.event_time.append, self.kind.append, self.rule_id.append,
                                          self.severity.append, self.source.append, self.text.append)
        ref_a, gates_a, fields_a = self.ref.append, self.gates.append, self.fields.append
        dumps, sort = orjson.dumps, orjson.OPT_SORT_KEYS
        for f in findings:
            if f.ref:
                ref_a(dumps(f.ref, option=sort, default=str))
            else:
                self.noref[len(self.text)] = finding_ref_key(job_id, f)
                ref_a(b"{}")
            et(f.event_time)  # naive event times are UTC (the core's convention); Arrow reads them so
            kind(f.kind)
            rule(f.rule_id)
            sev(f.severity)
            src(f.source)
            text(f.text)
            gates_a(",".join(f.gates))
            fields_a(dumps(f.fields, option=sort, default=str) if f.fields else b"{}")
        n = len(self.text) - n0
        if n:
            self.runs.append((job_id, at, n))
        return n

    def table(self) -> pa.Table:
        job = pa.concat_arrays([pa.repeat(pa.scalar(j, pa.string()), k) for j, _, k in self.runs])
        at = pa.concat_arrays([pa.repeat(pa.scalar(a, TS), k) for _, a, k in self.runs])
        ref = pa.array(self.ref, type=pa.string())
        if self.noref:  # the canonical ref, else the digest key
            keys: list[bytes | str] = list(self.ref)
            for i, k in self.noref.items():
                keys[i] = k
            ref_key = pa.array(keys, type=pa.string())
        else:
            ref_key = ref
        s = pa.string()
        return pa.Table.from_arrays(
            [job, pa.array(self.event_time, type=TS), pa.array(self.kind, type=s), pa.array(self.rule_id, type=s),
             pa.array(self.severity, type=s), pa.array(self.source, type=s), pa.array(self.text, type=s), ref,
             ref_key, pa.array(self.gates, type=s), pa.array(self.fields, type=s), at],
            schema=FINDINGS_SCHEMA)


class FindingsBuffer:
    """Findings waiting for the next flush, columnar, per partition. Repeats are kept here and
    dropped by the insert (`insert`), within the batch and against the store."""

    def __init__(self) -> None:
        self._parts: dict[int, _Columns] = {}
        self._rows = 0

    def __len__(self) -> int:
        return self._rows

    def add(self, job_id: str, findings: Iterable[Finding], at: datetime) -> None:
        part = part_of(job_id)
        cols = self._parts.get(part)
        if cols is None:
            cols = self._parts[part] = _Columns()
        self._rows += cols.add(job_id, findings, at)

    def take(self) -> dict[int, pa.Table]:
        """The buffered rows as one Arrow table per partition; the buffer is emptied."""
        out = {part: cols.table() for part, cols in self._parts.items() if cols.runs}
        self._parts = {}
        self._rows = 0
        return out


def insert(con: duckdb.DuckDBPyConnection, part: int, batch: pa.Table) -> int:
    """Insert one partition's batch, each finding once, skipping those already stored; returns the
    rows added. A finding is already stored when a row of its partition has the same key_hash and
    event_time (a redelivered or replayed finding has both); of repeats within the batch one is kept
    (DISTINCT ON: a window's row_number cost 3x more)."""
    table = table_of(part)
    con.register("_rlhealth_findings", batch)
    try:
        return int(con.execute(
            f"INSERT INTO {table} ({COLUMNS}, key_hash) SELECT {COLUMNS}, kh "
            f"FROM (SELECT DISTINCT ON (kh, event_time) *, {KEY_HASH_SQL} AS kh FROM _rlhealth_findings) b "
            f"WHERE NOT EXISTS (SELECT 1 FROM {table} f "
            f"WHERE f.key_hash = b.kh AND f.event_time IS NOT DISTINCT FROM b.event_time)").fetchall()[0][0])
    finally:
        con.unregister("_rlhealth_findings")


__all__ = ["FINDINGS_SCHEMA", "PARTS", "FindingsBuffer", "check_key_hash", "finding_ref_key", "insert", "migrate",
           "part_of", "table_of"]
