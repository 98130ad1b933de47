"""The findings of the evidence store: Parquet segments beside the DuckDB file (docs/forensics.md).

Findings are the store's big table (millions of rows, ingested at hundreds of thousands per
second). Appending them to DuckDB tables cost ~3 us per row (write-ahead log, then recompression
at each checkpoint) and a per-row index capped ingest near 40k rows/s, so they are written by
pyarrow as Parquet files under `<file>.findings/`, one directory per job bucket
(`b=NN`, `NN = md5_number_lower(job_id) % PARTS`), listed by `manifest.json`:

* a flush writes one tier-0 file per touched bucket, then publishes a new manifest (temporary
  file, then rename): readers see a file only once the manifest lists it, never half of one;
* when a bucket has `FANIN` files of one size tier, the writer's merge thread merges them into
  one file of a higher tier, sorted by (job_hash, event_time) in small row groups, so one job's
  window reads a few row groups of a few files; merged inputs are retired and deleted after
  `GRACE_S` (a reader that read the previous manifest still finds them);
* each row carries `job_hash` (md5_number_lower(job_id), exact in Parquet statistics where a
  string's are not) and `key_hash` (DuckDB `hash(job_id, rule_id, ref_key)`); `ref_key` is stored
  only when it differs from `ref` (the view gives `coalesce(ref_key, ref)`).

Each finding is stored once: the writer keeps the (key_hash, event_time) of every stored row in
an in-memory DuckDB table (loaded from the segments when it opens) and inserts a finding only if
its pair is not there (one join on key_hash per flush, then the event times of the matches;
in-batch repeats kept once). DuckDB does not
promise `hash` is stable across versions, so the manifest records a probe of it; a writer whose
DuckDB hashes differently recomputes every key and rewrites every segment once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rlhealth.agents.findings import Finding

PARTS = 16
FANIN = 16  # files of one tier merged into one of the next
TIER0_ROWS = 64  # tier t >= 1 holds files of TIER0_ROWS * FANIN**t rows or more
ROW_GROUP = 8192  # rows per row group in merged (sorted) files
GRACE_S = 60.0  # a retired file is deleted this long after the manifest stopped listing it
MANIFEST = "manifest.json"
TS = pa.timestamp("us", tz="UTC")
# the documented columns of `findings`, in order
COLUMNS = ("job_id", "event_time", "kind", "rule_id", "severity", "source", "text", "ref", "ref_key", "gates",
           "fields", "inserted_at")
SEGMENT_SCHEMA = pa.schema([
    ("job_id", pa.string()), ("job_hash", pa.uint64()), ("event_time", TS), ("kind", pa.string()),
    ("rule_id", pa.string()), ("severity", pa.string()), ("source", pa.string()), ("text", pa.string()),
    ("ref", pa.string()), ("ref_key", pa.string()), ("gates", pa.string()), ("fields", pa.string()),
    ("inserted_at", TS), ("key_hash", pa.uint64()),
])
KEY_HASH_SQL = "hash(job_id, rule_id, coalesce(ref_key, ref))"
_PROBE_SQL = "SELECT hash('rlhealth', 'key_hash', 'probe')::VARCHAR"
_SELECT = ("job_id, event_time, kind, rule_id, severity, source, text, ref::JSON AS ref, "
           "coalesce(ref_key, ref) AS ref_key, gates, fields::JSON AS fields, inserted_at")
_EMPTY = ("SELECT NULL::VARCHAR AS job_id, NULL::TIMESTAMPTZ AS event_time, NULL::VARCHAR AS kind, "
          "NULL::VARCHAR AS rule_id, NULL::VARCHAR AS severity, NULL::VARCHAR AS source, NULL::VARCHAR AS text, "
          "NULL::JSON AS ref, NULL::VARCHAR AS ref_key, NULL::VARCHAR AS gates, NULL::JSON AS fields, "
          "NULL::TIMESTAMPTZ AS inserted_at WHERE false")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Parquet settings: tier-0 files are small and soon merged, so cheap to write; merged ones compact
_DICT_COLUMNS = ["job_id", "kind", "rule_id", "severity", "source", "gates", "fields"]


def job_hash(job_id: str) -> int:
    """md5_number_lower(job_id) as DuckDB computes it: the upper 8 bytes of the MD5, little-endian."""
    return int.from_bytes(hashlib.md5(job_id.encode("utf-8")).digest()[8:], "little")


def part_of(job_id: str) -> int:
    """The bucket of a job: md5_number_lower(job_id) % PARTS."""
    return job_hash(job_id) % PARTS


def segments_dir(db_path: str | Path) -> Path:
    return Path(str(db_path) + ".findings")


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


def noref_key(job_id: str, event_time: datetime | None, source: str, text: str) -> str:
    return "noref:" + digest(job_id, event_time.isoformat() if event_time else None, source, text)


def finding_ref_key(job_id: str, f: Finding) -> str:
    if f.ref:
        return json_text(f.ref)
    return noref_key(job_id, f.event_time, f.source, f.text)


def tier_of(rows: int) -> int:
    """Size tiers: FANIN files of tier t always merge into a file of a higher tier, so a row is
    rewritten about once per tier (log_FANIN of the bucket's size), whatever the flush size."""
    t = 0
    while rows >= TIER0_ROWS * FANIN ** (t + 1):
        t += 1
    return t


# -- the manifest: what readers may read ---------------------------------------------------------
def read_manifest(directory: Path) -> dict[str, Any] | None:
    try:
        return json.loads((directory / MANIFEST).read_bytes())
    except FileNotFoundError:
        return None


def files_of(directory: Path, manifest: dict[str, Any], part: int | None = None) -> list[str]:
    return [str(directory / s["file"]) for s in manifest["segments"] if part is None or s["part"] == part]


def relation(files: list[str]) -> str:
    """SQL for the documented `findings` columns over these segment files."""
    if not files:
        return _EMPTY
    listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
    return f"SELECT {_SELECT} FROM read_parquet([{listed}])"


def create_view(con: duckdb.DuckDBPyConnection, db_path: str | Path) -> bool:
    """Create the TEMP view `findings` over the store's segments on `con` (which shadows any
    `findings` left in the file by an older version). False when the store has no segments
    directory (a store written before them: its own `findings` table or view answers)."""
    directory = segments_dir(db_path)
    manifest = read_manifest(directory)
    if manifest is None:
        return False
    con.execute(f"CREATE OR REPLACE TEMP VIEW findings AS {relation(files_of(directory, manifest))}").fetchall()
    return True


def job_relation(db_path: str | Path, job_id: str) -> str | None:
    """SQL over only the files of `job_id`'s bucket, with its `job_hash` filter (the row groups of
    other jobs are skipped by their statistics); None without a segments directory."""
    directory = segments_dir(db_path)
    manifest = read_manifest(directory)
    if manifest is None:
        return None
    files = files_of(directory, manifest, part_of(job_id))
    if not files:
        return f"({_EMPTY})"
    listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
    return f"(SELECT {_SELECT} FROM read_parquet([{listed}]) WHERE job_hash = {job_hash(job_id)})"


# -- buffering -----------------------------------------------------------------------------------
def _bodies(objs: tuple[Any, ...]) -> list[bytes]:
    """Each dict's canonical JSON (`json_text`) without its outer braces. One orjson call for all
    (a call costs more than a small dict): the list's text is split at its `},{`, which is exact when
    there are just n-1 of them, as there are unless a value holds one; else one call each."""
    if None in objs:
        objs = tuple(o or {} for o in objs)
    text = orjson.dumps(objs, option=orjson.OPT_SORT_KEYS, default=str)
    pieces = text[2:-2].split(b"},{")
    if len(pieces) == len(objs):
        return pieces
    return [orjson.dumps(o, option=orjson.OPT_SORT_KEYS, default=str)[1:-1] for o in objs]


def _braced(bodies: list[bytes]) -> pa.Array:
    return pc.binary_join_element_wise("{", pa.array(bodies, type=pa.string()), "}", "")


class _Columns:
    """One bucket's buffered findings, column by column; job_id and inserted_at are constant per
    `add` call, so they are kept as runs."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, int, int, int]] = []  # (job_id, job_hash, inserted_at us, rows)
        # event_time, kind, rule_id, severity, source, text, gates, fields, ref (the last two: JSON bodies)
        self.cols: list[list[Any]] = [[] for _ in range(9)]
        self.noref: dict[int, str] = {}  # row -> ref_key of the rows without a ref
        self.rows = 0

    def add(self, job_id: str, jhash: int, findings: Iterable[Finding], at_us: int) -> int:
        fs = findings if isinstance(findings, list | tuple) else list(findings)
        if not fs:
            return 0
        # one comprehension per column: cheaper than a tuple per finding and a transpose
        et = [f.event_time for f in fs]
        src = [f.source for f in fs]
        text = [f.text for f in fs]
        refs = _bodies(tuple(f.ref for f in fs))
        if b"" in refs:  # an empty ref: keyed by a digest of the line instead
            for i, r in enumerate(refs):
                if not r:
                    self.noref[self.rows + i] = noref_key(job_id, et[i], src[i], text[i])
        c = self.cols
        c[0] += et  # naive event times are UTC (the core's convention); Arrow reads them so
        c[1] += [f.kind for f in fs]
        c[2] += [f.rule_id for f in fs]
        c[3] += [f.severity for f in fs]
        c[4] += src
        c[5] += text
        c[6] += [",".join(f.gates) for f in fs]
        c[7] += _bodies(tuple(f.fields for f in fs))
        c[8] += refs
        n = len(fs)
        self.runs.append((job_id, jhash, at_us, n))
        self.rows += n
        return n

    def table(self) -> pa.Table:
        jobs: list[str] = []
        hashes: list[int] = []
        ats: list[int] = []
        for j, h, a, k in self.runs:
            jobs += [j] * k
            hashes += [h] * k
            ats += [a] * k
        if self.noref:
            keys: list[str | None] = [None] * self.rows
            for i, key in self.noref.items():
                keys[i] = key
            ref_key = pa.array(keys, type=pa.string())
        else:
            ref_key = pa.nulls(self.rows, pa.string())
        s = pa.string()
        et, kind, rule, sev, src, text, gates, fields, ref = self.cols
        return pa.Table.from_arrays(
            [pa.array(jobs, type=s), pa.array(hashes, type=pa.uint64()), pa.array(et, type=TS),
             pa.array(kind, type=s), pa.array(rule, type=s), pa.array(sev, type=s), pa.array(src, type=s),
             pa.array(text, type=s), _braced(ref), ref_key, pa.array(gates, type=s),
             _braced(fields), pa.array(ats, type=pa.int64()).cast(TS)],
            names=SEGMENT_SCHEMA.names[:-1])


class FindingsBuffer:
    """Findings waiting for the next flush, columnar, per bucket. Repeats are kept here and
    dropped at the flush, within the batch and against the store."""

    def __init__(self) -> None:
        self._parts: dict[int, _Columns] = {}
        self._rows = 0

    def __len__(self) -> int:
        return self._rows

    def add(self, job_id: str, findings: Iterable[Finding], at: datetime) -> None:
        h = job_hash(job_id)
        cols = self._parts.get(h % PARTS)
        if cols is None:
            cols = self._parts[h % PARTS] = _Columns()
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        self._rows += cols.add(job_id, h, findings, (at - _EPOCH) // _US)

    def take(self) -> list[tuple[int, pa.Table]]:
        """The buffered rows as one Arrow table per bucket, in bucket order; the buffer is emptied."""
        out = [(p, c.table()) for p, c in sorted(self._parts.items()) if c.rows]
        self._parts = {}
        self._rows = 0
        return out


_US = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC) - _EPOCH


# -- the writer's side ---------------------------------------------------------------------------
class FindingsSegments:
    """The segments directory of one store, owned by its single writer (`EvidenceStore`).

    Uses the writer's DuckDB connection for hashing, the dedupe anti-join and its in-memory key
    table (`temp.rlhealth_finding_keys`). `db_path` ":memory:" keeps the segments in a temporary
    directory removed on close."""

    def __init__(self, con: duckdb.DuckDBPyConnection, db_path: str) -> None:
        self._con = con
        self._cond = threading.Condition()  # guards the manifest; merges signal on it
        self._merger: threading.Thread | None = None
        self._error: BaseException | None = None
        self._closing = False
        self._tmp: str | None = None
        if db_path == ":memory:":
            self._tmp = tempfile.mkdtemp(prefix="rlhealth-findings-")
            self.dir = Path(self._tmp)
        else:
            self.dir = segments_dir(db_path)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.probe = str(con.execute(_PROBE_SQL).fetchall()[0][0])
        m = read_manifest(self.dir)
        self.manifest: dict[str, Any] = m if m is not None else {
            "version": 1, "parts": PARTS, "hash_probe": self.probe, "next": 0, "segments": [], "retired": []}
        if self.manifest.get("parts", PARTS) != PARTS:
            raise ValueError(f"{self.dir}: {self.manifest['parts']} buckets, this version writes {PARTS}")
        self._sweep(orphans=True)
        con.execute("CREATE OR REPLACE TEMP TABLE rlhealth_finding_keys (key_hash UBIGINT, event_time TIMESTAMPTZ)"
                    ).fetchall()
        files = files_of(self.dir, self.manifest)
        if self.manifest["hash_probe"] != self.probe:
            self._rehash()
        elif files:
            con.execute("INSERT INTO rlhealth_finding_keys SELECT key_hash, event_time FROM read_parquet("
                        f"[{', '.join(repr(f) for f in files)}])").fetchall()
        if m is None:
            self._publish()
        self.view_stale = True

    # -- flush --------------------------------------------------------------------------------
    def new_rows(self, parts: list[tuple[int, pa.Table]]) -> tuple[list[tuple[int, pa.Table]], pa.Table | None]:
        """The rows of the buffered batch that are not stored yet (one of each repeat), per bucket,
        with their key_hash; plus the keys to record once they are written (`record`)."""
        batch = pa.concat_tables([t for _, t in parts])
        idx = pa.array(range(batch.num_rows), type=pa.int32())
        narrow = pa.table({"row_idx": idx, "job_id": batch["job_id"], "rule_id": batch["rule_id"],
                           "ref": batch["ref"], "ref_key": batch["ref_key"], "event_time": batch["event_time"]})
        con = self._con
        con.register("_rlhealth_findings", narrow)
        try:  # one of each repeat within the batch
            new = con.sql("SELECT DISTINCT ON (key_hash, event_time) row_idx, key_hash, event_time FROM (SELECT "
                          f"row_idx, event_time, {KEY_HASH_SQL} AS key_hash FROM _rlhealth_findings) ORDER BY row_idx"
                          ).to_arrow_table()
        finally:
            con.unregister("_rlhealth_findings")
        con.register("_rlhealth_batch_keys", new)
        try:
            # stored rows with the same key_hash: a join on that one column, built on the batch,
            # scanning every stored key (3x cheaper than joining on key_hash and event_time too);
            # event times are compared after, on the few matches
            pairs = con.sql("SELECT b.row_idx, b.event_time AS bt, k.event_time AS kt FROM _rlhealth_batch_keys b "
                            "JOIN rlhealth_finding_keys k ON k.key_hash = b.key_hash").to_arrow_table()
        finally:
            con.unregister("_rlhealth_batch_keys")
        if pairs.num_rows:
            bt, kt = pairs["bt"], pairs["kt"]
            same = pc.or_(pc.fill_null(pc.equal(bt, kt), False), pc.and_(pc.is_null(bt), pc.is_null(kt)))
            stored = pc.filter(pairs["row_idx"], same)
            if len(stored):
                new = new.filter(pc.invert(pc.is_in(new["row_idx"], value_set=stored)))
        if new.num_rows == 0:
            return [], None
        keys = new.select(["key_hash", "event_time"])
        if new.num_rows == batch.num_rows:  # all new (the usual case): no copy of the rows
            out, lo = [], 0
            for part, t in parts:
                out.append((part, t.append_column("key_hash", new["key_hash"].slice(lo, t.num_rows))))
                lo += t.num_rows
            return out, keys
        rows = new["row_idx"]
        kept = batch.take(rows).append_column("key_hash", new["key_hash"])
        out = []
        end = lo = 0
        for part, t in parts:
            end += t.num_rows
            hi = pc.sum(pc.less(rows, end)).as_py() or 0  # the kept rows are in bucket order
            if hi > lo:
                out.append((part, kept.slice(lo, hi - lo)))
            lo = hi
        return out, keys

    def write(self, parts: list[tuple[int, pa.Table]]) -> None:
        """Write one tier-0 file per bucket and publish the manifest; merges run on the merge
        thread. A flush waits while merges lag (a bucket with 2 * FANIN files of one tier)."""
        for part, t in parts:
            self._add_segment(part, t, sort=False)
        with self._cond:
            self._publish()
            self._sweep()
            if self._full():
                self._start_merger()
                self._cond.notify_all()
            while self._error is None and self._full(2 * FANIN):
                self._cond.wait()
            self._raise_merge_error()

    def wait_merges(self) -> None:
        """Block until no bucket has a full tier (every merge due is done)."""
        with self._cond:
            while self._error is None and self._full():
                self._start_merger()
                self._cond.wait()
            self._raise_merge_error()

    def _raise_merge_error(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            self._merger = None  # it stopped; the next write starts another
            raise RuntimeError("merging findings segments failed") from err

    def _full(self, n: int = 0) -> tuple[int, list[dict[str, Any]]] | None:
        """The first bucket and files of a tier with at least n (default FANIN) files; the lock is held."""
        by: dict[tuple[int, int], list[dict[str, Any]]] = {}
        for seg in self.manifest["segments"]:
            by.setdefault((int(seg["part"]), int(seg["tier"])), []).append(seg)
        for (part, _), segs in sorted(by.items()):
            if len(segs) >= (n or FANIN):
                return part, segs[:FANIN]
        return None

    def _start_merger(self) -> None:
        if self._merger is None:
            self._merger = threading.Thread(target=self._merge_loop, name="rlhealth-findings-merge", daemon=True)
            self._merger.start()

    def _merge_loop(self) -> None:
        """Merges on their own thread: reading, sorting and writing Parquet release the GIL, so they
        overlap the next batch's Python work. Only this thread removes segments; flushes only add."""
        try:
            while True:
                with self._cond:
                    job = self._full()
                    while job is None and not self._closing:
                        self._cond.wait()
                        job = self._full()
                    if job is None:
                        return
                self._merge(*job)
                with self._cond:
                    self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the writer's next flush
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def record(self, keys: pa.Table) -> None:
        """Remember stored keys (after their rows are in a published segment)."""
        self._con.register("_rlhealth_keys", keys)
        try:
            self._con.execute("INSERT INTO rlhealth_finding_keys SELECT key_hash, event_time FROM _rlhealth_keys"
                              ).fetchall()
        finally:
            self._con.unregister("_rlhealth_keys")

    # -- files --------------------------------------------------------------------------------
    def _add_segment(self, part: int, t: pa.Table, *, sort: bool, replaces: Sequence[dict[str, Any]] = ()) -> None:
        """Write a file (sorted and compact when `sort`: a merge) and list it in the manifest in
        place of `replaces`; the caller publishes the manifest."""
        with self._cond:
            n = int(self.manifest["next"])
            self.manifest["next"] = n + 1
        name = f"b={part:02d}/{n:08d}.parquet"
        target = self.dir / name
        target.parent.mkdir(exist_ok=True)
        if sort:
            t = t.take(pc.sort_indices(t, [("job_hash", "ascending"), ("event_time", "ascending")]))
            pq.write_table(t, target, compression="zstd", use_dictionary=_DICT_COLUMNS, row_group_size=ROW_GROUP,
                           write_statistics=["job_hash", "event_time"])
        else:
            pq.write_table(t, target, compression="lz4", use_dictionary=_DICT_COLUMNS,
                           write_statistics=["job_hash", "event_time"])
        with self._cond:
            gone = {s["file"] for s in replaces}
            if gone:
                self.manifest["segments"] = [s for s in self.manifest["segments"] if s["file"] not in gone]
                self.manifest["retired"] += [{"file": f, "at": time.time()} for f in sorted(gone)]
            self.manifest["segments"].append({"file": name, "part": part, "rows": t.num_rows,
                                              "tier": tier_of(t.num_rows)})
            self.view_stale = True

    def _merge(self, part: int, segs: list[dict[str, Any]]) -> None:
        t = pa.concat_tables([pq.read_table(self.dir / s["file"], schema=SEGMENT_SCHEMA) for s in segs])
        self._add_segment(part, t, sort=True, replaces=segs)
        with self._cond:
            self._publish()

    def migrate_legacy(self) -> int:
        """Move findings kept in the DuckDB file by earlier versions (a `findings` table, or the 16
        tables `findings_parts.pNN` behind a `findings` view) into segments, then drop them.
        Returns rows moved. The manifest says `migrated` before the tables are dropped, so a writer
        stopped in between drops them next time instead of moving them twice."""
        con = self._con
        kinds = dict(con.execute(
            "SELECT table_schema || '.' || table_name, table_type FROM information_schema.tables "
            "WHERE table_catalog = current_database() AND (table_schema = 'findings_parts' OR "
            "(table_schema = 'main' AND table_name = 'findings'))").fetchall())
        legacy = sorted(t for t, k in kinds.items() if k == "BASE TABLE")
        if not legacy:
            return 0
        moved = 0
        if not self.manifest.get("migrated"):
            for p in range(PARTS):
                sql = " UNION ALL ".join(
                    "SELECT job_id, md5_number_lower(job_id) AS job_hash, event_time, kind, rule_id, severity, "
                    "source, text, ref::VARCHAR AS ref, "
                    "CASE WHEN ref_key = ref::VARCHAR THEN NULL ELSE ref_key END AS ref_key, gates, "
                    f"fields::VARCHAR AS fields, inserted_at FROM {t} WHERE md5_number_lower(job_id) % {PARTS} = {p}"
                    for t in legacy)
                t = con.sql(f"SELECT *, {KEY_HASH_SQL} AS key_hash FROM ({sql})").to_arrow_table()
                if t.num_rows:
                    t = t.cast(SEGMENT_SCHEMA)
                    self._add_segment(p, t, sort=True)
                    self.record(t.select(["key_hash", "event_time"]))
                    moved += t.num_rows
            self.manifest["migrated"] = True
            self._publish()
        con.execute("BEGIN").fetchall()
        try:
            if kinds.get("main.findings") == "VIEW":
                con.execute("DROP VIEW main.findings").fetchall()
            for t in legacy:
                con.execute(f"DROP TABLE {t}").fetchall()
            con.execute("DROP SCHEMA IF EXISTS findings_parts").fetchall()
            con.execute("COMMIT").fetchall()
        except BaseException:
            con.execute("ROLLBACK").fetchall()
            raise
        return moved

    def _rehash(self) -> None:
        """This DuckDB's `hash` differs from the one that wrote the segments: recompute every
        key_hash (rewriting each bucket as one file) and the key table."""
        by_part: dict[int, list[dict[str, Any]]] = {}
        for s in self.manifest["segments"]:
            by_part.setdefault(int(s["part"]), []).append(s)
        for part, segs in by_part.items():
            t = pa.concat_tables([pq.read_table(self.dir / s["file"], schema=SEGMENT_SCHEMA) for s in segs])
            self._con.register("_rlhealth_rehash", t)
            try:
                t = self._con.sql(f"SELECT * REPLACE ({KEY_HASH_SQL} AS key_hash) FROM _rlhealth_rehash"
                                  ).to_arrow_table().cast(SEGMENT_SCHEMA)
            finally:
                self._con.unregister("_rlhealth_rehash")
            self._add_segment(part, t, sort=True, replaces=segs)
            self.record(t.select(["key_hash", "event_time"]))
        self.manifest["hash_probe"] = self.probe
        self._publish()
        self._sweep()

    def _publish(self) -> None:
        tmp = self.dir / f".{MANIFEST}.{os.getpid()}.tmp"
        tmp.write_bytes(orjson.dumps(self.manifest))
        os.replace(tmp, self.dir / MANIFEST)

    def _sweep(self, *, orphans: bool = False) -> None:
        """Delete retired files past their grace time; with `orphans`, also files no manifest lists
        (left by a writer that stopped between writing a file and publishing it)."""
        now = time.time()
        keep = []
        for r in self.manifest["retired"]:
            if now - float(r["at"]) >= GRACE_S:
                with contextlib.suppress(FileNotFoundError):
                    (self.dir / r["file"]).unlink()
            else:
                keep.append(r)
        if len(keep) != len(self.manifest["retired"]):
            self.manifest["retired"] = keep
            self._publish()
        if orphans:
            listed = {s["file"] for s in self.manifest["segments"]} | {r["file"] for r in keep}
            for f in self.dir.glob("b=*/*.parquet"):
                if f"{f.parent.name}/{f.name}" not in listed:
                    f.unlink()

    def create_file_view(self) -> None:
        """The view `findings` inside the DuckDB file, for plain DuckDB clients (rlhealth's readers
        shadow it with their TEMP view). It globs the segment files and keeps those the manifest
        lists when queried, so it follows the writer with no update; the directory is absolute, so
        it is wrong for a moved store until a writer opens it there."""
        empty = self.dir / "schema" / "empty.parquet"  # a glob that matches no file is an error
        empty.parent.mkdir(exist_ok=True)
        if not empty.exists():
            pq.write_table(SEGMENT_SCHEMA.empty_table(), empty)
        d = str(self.dir.resolve()).replace("'", "''")
        self._con.execute(
            f"CREATE OR REPLACE VIEW main.findings AS SELECT {_SELECT} FROM read_parquet('{d}/*/*.parquet', "
            f"filename = true) WHERE filename IN (SELECT '{d}/' || unnest(segments).file "
            f"FROM read_json('{d}/{MANIFEST}'))").fetchall()

    def refresh_view(self) -> None:
        """(Re)create the writer connection's TEMP view `findings` over the current segments."""
        with self._cond:
            if not self.view_stale:
                return
            files = files_of(self.dir, self.manifest)
            self.view_stale = False
        self._con.execute(f"CREATE OR REPLACE TEMP VIEW findings AS {relation(files)}").fetchall()

    def close(self) -> None:
        """Finish the merges due, stop the merge thread, delete what is past its grace time."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            merger = self._merger
        if merger is not None:
            merger.join()
        with self._cond:
            self._sweep()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


__all__ = ["COLUMNS", "FANIN", "PARTS", "SEGMENT_SCHEMA", "FindingsBuffer", "FindingsSegments", "create_view",
           "digest", "finding_ref_key", "job_hash", "job_relation", "json_text", "part_of", "read_manifest",
           "segments_dir"]
