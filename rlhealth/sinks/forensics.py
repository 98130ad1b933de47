"""Canned questions over the evidence store (docs/forensics.md), for `rlhealth evidence`.

Every question is one read-only SQL statement over `connect_readonly(path)` (the file, or its
snapshot while a writer holds it, and the findings' Parquet segments) and returns
`Answer(columns, rows)`. Times are UTC. Each opens its own connection unless given `con` (one
from `connect_readonly(path)`, kept open by a caller asking many questions: DuckDB takes ~15 ms
of CPU to open one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from rlhealth.sinks.duckdb import TABLES, connect_readonly
from rlhealth.sinks.findings_segments import create_view, job_relation, part_of


@dataclass
class Answer:
    columns: list[str]
    rows: list[tuple]


RETRIES = 3  # a merge may delete a file a reader's (older) manifest still lists, after a grace time


def _run(path: str | Path, sql: str | Callable[[], str], params: Sequence[Any] = (),
         con: duckdb.DuckDBPyConnection | None = None, *, view: bool = True) -> Answer:
    for attempt in range(RETRIES):
        own = con is None
        c = connect_readonly(path, findings_view=view) if con is None else con
        try:
            if view and not own and attempt:
                create_view(c, path)
            cur = c.execute(sql() if callable(sql) else sql, list(params))
            cols = [d[0] for d in cur.description or []]
            return Answer(cols, cur.fetchall())
        except duckdb.IOException:
            if attempt == RETRIES - 1:
                raise
        finally:
            if own:
                c.close()
    raise AssertionError("unreachable")


def _window(column: str, since: datetime | None, until: datetime | None, params: list) -> str:
    out = ""
    if since is not None:
        out += f" AND {column} >= ?"
        params.append(since)
    if until is not None:
        out += f" AND {column} <= ?"
        params.append(until)
    return out


def timeline(path: str | Path, job: str, since: datetime | None = None, until: datetime | None = None,
             limit: int = 500, con: duckdb.DuckDBPyConnection | None = None) -> Answer:
    """A job's findings and verdicts between two times, in time order. Reads only the files of the
    job's bucket (a sixteenth of the findings) and of those the row groups whose statistics admit
    its job_hash and the window. A store no writer of this version has opened keeps its findings
    in the file: the 16 `findings_parts` tables, or before them one `findings` table."""
    def findings() -> str:
        return job_relation(path, job) or f"findings_parts.p{part_of(job):02d}"

    try:
        return _timeline(path, job, findings, since, until, limit, con)
    except duckdb.CatalogException:  # no findings_parts either: the file's own `findings`
        return _timeline(path, job, lambda: "findings", since, until, limit, con)


def _timeline(path: str | Path, job: str, findings: Callable[[], str], since: datetime | None,
              until: datetime | None, limit: int, con: duckdb.DuckDBPyConnection | None) -> Answer:
    pf: list = [job]
    wf = _window("event_time", since, until, pf)
    pv: list = [job]
    wv = _window("produced_at", since, until, pv)
    sql = f"""
        SELECT * FROM (
            SELECT event_time AS time, 'finding' AS what, rule_id AS name, severity AS detail, source,
                   left(text, 200) AS text
            FROM {{findings}} WHERE job_id = ?{wf}
            UNION ALL
            SELECT produced_at, 'verdict', verdict || CASE WHEN escalate THEN ' +escalate' ELSE '' END,
                   job_status || ' A=' || gate_a || ' B=' || gate_b || ' C=' || gate_c, 'seq ' || seq,
                   left(reasoning, 200)
            FROM verdicts WHERE job_id = ?{wv}
        ) ORDER BY time NULLS FIRST, what LIMIT {int(limit)}"""
    return _run(path, lambda: sql.format(findings=findings()), pf + pv, con, view=False)


def last_verdicts(path: str | Path, job: str, n: int = 10) -> Answer:
    sql = f"""SELECT seq, produced_at, event_time, age_s, verdict, escalate, confidence, job_status,
                     gate_a, gate_b, gate_c, held, captured
              FROM verdicts WHERE job_id = ? ORDER BY produced_at DESC, seq DESC LIMIT {int(n)}"""
    return _run(path, sql, [job])


def signal_hits(path: str | Path, rule_glob: str = "*", since: datetime | None = None,
                until: datetime | None = None, limit: int = 50) -> Answer:
    """Every job that hit a rule matching the glob in the window, with counts (top signals first)."""
    params: list = [rule_glob]
    w = _window("event_time", since, until, params)
    sql = f"""SELECT rule_id, job_id, count(*) AS hits, min(event_time) AS first, max(event_time) AS last
              FROM findings WHERE rule_id GLOB ?{w}
              GROUP BY rule_id, job_id ORDER BY hits DESC, rule_id, job_id LIMIT {int(limit)}"""
    return _run(path, sql, params)


def behind(path: str | Path, job: str, seq: int | None = None) -> Answer:
    """The evidence lines behind one verdict (default: the job's newest)."""
    params: list[object]
    if seq is None:
        where, params = "job_id = ? AND seq = (SELECT seq FROM verdicts WHERE job_id = ? " \
                        "ORDER BY produced_at DESC, seq DESC LIMIT 1)", [job, job]
    else:
        where, params = "job_id = ? AND seq = ?", [job, seq]
    sql = f"""SELECT seq, CASE WHEN gate = '' THEN 'verdict' ELSE 'gate ' || gate END AS part, event_time, source,
                     rule_id, text, coalesce(file, topic) AS location, coalesce(file_offset, kafka_offset) AS "offset",
                     line_no
              FROM evidence_lines WHERE {where} ORDER BY produced_at, seq, idx"""
    return _run(path, sql, params)


def jobs(path: str | Path, since: datetime | None = None, until: datetime | None = None,
         verdict: str | None = None, gate: str | None = None) -> Answer:
    """Jobs by their newest verdict in the window; `gate` like "A=FAIL" filters on a gate's status."""
    params: list = []
    w = _window("produced_at", since, until, params)
    outer = []
    if verdict:
        outer.append("verdict = ?")
        params.append(verdict)
    if gate:
        key, _, status = gate.partition("=")
        col = {"A": "gate_a", "B": "gate_b", "C": "gate_c"}.get(key.strip().upper())
        if col is None or not status:
            raise ValueError(f"--gate wants A|B|C=STATUS, got {gate!r}")
        outer.append(f"{col} = ?")
        params.append(status.strip().upper())
    filt = (" WHERE " + " AND ".join(outer)) if outer else ""
    sql = f"""SELECT job_id, verdict, escalate, job_status, gate_a, gate_b, gate_c, produced_at, seq, verdicts
              FROM (SELECT *, count(*) OVER (PARTITION BY job_id) AS verdicts,
                           row_number() OVER (PARTITION BY job_id ORDER BY produced_at DESC, seq DESC) AS rn
                    FROM verdicts WHERE true{w}){filt}{' AND' if filt else ' WHERE'} rn = 1
              ORDER BY verdict = 'KILL' DESC, job_id"""
    return _run(path, sql, params)


def sql(path: str | Path, statement: str) -> Answer:
    return _run(path, statement)


def export_parquet(path: str | Path, out_dir: str | Path, tables: Sequence[str] = TABLES) -> dict[str, str]:
    """Every table to Parquet under `out_dir`: `<table>/job_id=<id>/*.parquet` (Hive partitions) for
    the per-job tables, one `<table>.parquet` for dead letters. Returns table -> written path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    con = connect_readonly(path)
    written = {}
    try:
        for t in tables:
            if t not in TABLES:
                raise ValueError(f"unknown table {t!r}; one of {', '.join(TABLES)}")
            if t == "dead_letters":
                target = out / f"{t}.parquet"
                con.execute(f"COPY {t} TO '{target}' (FORMAT parquet)").fetchall()
            else:
                target = out / t
                con.execute(f"COPY (SELECT * FROM {t}) TO '{target}' (FORMAT parquet, PARTITION_BY (job_id), "
                            "OVERWRITE_OR_IGNORE true)").fetchall()
            written[t] = str(target)
    finally:
        con.close()
    return written


__all__ = ["Answer", "behind", "export_parquet", "jobs", "last_verdicts", "signal_hits", "sql", "timeline"]
