"""Read one job's incident report (`report_model.ReportData`) out of the evidence store.

`load(query, job_id)` takes any "run one statement" function, so the same reader serves a store
file (`load_file`: read-only, or its snapshot while a writer holds it) and the in-memory store
`probe --html` fills from its own run. Schema: docs/forensics.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pydantic

from rlhealth.agents.findings import Finding, JobMetrics
from rlhealth.schemas.verdict import Verdict, root_cause_line, why_line
from rlhealth.sinks.report_model import (
    DeadLetterRow,
    EnginePoint,
    Line,
    MetricRow,
    Problem,
    ReportData,
    VerdictRow,
)

Query = Callable[[str, Sequence[Any]], list[tuple]]

# A page, not a dump: a job watched for weeks has tens of thousands of verdicts and metric points.
MAX_VERDICTS = 300  # the newest
MAX_FINDINGS = 1000  # the most severe first, then the oldest
MAX_POINTS = 2000  # metric points, evenly thinned beyond that

_SEVERITY_RANK = ("CASE severity WHEN 'fatal' THEN 0 WHEN 'error' THEN 1 WHEN 'warning' THEN 2 WHEN 'warn' THEN 2 "
                  "ELSE 3 END")


def _utc(t: datetime | None) -> datetime | None:
    if t is None:
        return None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def _json(text: Any) -> Any:
    if text in (None, ""):
        return {}
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}


def _held_text(v: Verdict) -> str | None:
    h = v.held
    if h is None:
        return None
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    return (f"the core says {h.raw_verdict}{' + escalate' if h.raw_escalate else ''} since "
            f"{h.since.strftime(stamp)}; published if it holds until {h.until.strftime(stamp)}")


def _verdict_row(row: tuple, evidence: tuple[Line, ...]) -> VerdictRow:
    (seq, produced_at, event_time, age_s, verdict, confidence, escalate, job_status, gate_a, gate_b, gate_c,
     reasoning, captured, payload) = row
    try:
        v = Verdict.model_validate_json(payload)
    except (pydantic.ValidationError, ValueError, TypeError):
        v = None
    gates = {"A": gate_a or "UNKNOWN", "B": gate_b or "UNKNOWN", "C": gate_c or "UNKNOWN"}
    if v is None:  # a payload of another schema version: the columns still tell the call
        return VerdictRow(seq=seq, produced_at=_utc(produced_at) or datetime.min.replace(tzinfo=UTC),
                          event_time=_utc(event_time), age_s=age_s, verdict=verdict or "", confidence=confidence or "",
                          escalate=bool(escalate), job_status=job_status or "", gates=gates, gate_summaries={},
                          why=(reasoning or "").split(". ")[0], reasoning=reasoning or "", captured=captured,
                          evidence=evidence)
    return VerdictRow(
        seq=v.seq, produced_at=v.produced_at, event_time=v.event_time, age_s=v.age_s, verdict=v.verdict,
        confidence=v.confidence, escalate=v.escalate, job_status=v.job_status, gates=gates,
        gate_summaries={k: getattr(v.gates, k).summary for k in "ABC"}, why=why_line(v), reasoning=v.reasoning,
        next_steps=tuple(v.next_steps), kill_command=v.kill_command, held=_held_text(v), headline=v.headline,
        captured=v.captured, evidence=evidence,
        root_cause=root_cause_line(v.root_cause) if v.root_cause is not None else None,
    )


def _verdicts(query: Query, job_id: str) -> tuple[list[VerdictRow], int]:
    total = int(query("SELECT count(*) FROM verdicts WHERE job_id = ?", [job_id])[0][0])
    rows = query(f"""SELECT * FROM (
                       SELECT seq, produced_at, event_time, age_s, verdict, confidence, escalate, job_status,
                              gate_a, gate_b, gate_c, reasoning, captured, payload
                       FROM verdicts WHERE job_id = ? ORDER BY produced_at DESC, seq DESC LIMIT {MAX_VERDICTS})
                     ORDER BY produced_at, seq""", [job_id])
    if not rows:
        return [], total
    lines: dict[tuple[int, datetime], list[Line]] = {}
    for (seq, produced_at, gate, source, event_time, rule_id, text, location, offset,
         line_no) in query("""SELECT seq, produced_at, gate, source, event_time, rule_id, text,
                                     coalesce(file, topic || '[' || partition || ']'),
                                     coalesce(file_offset, kafka_offset), line_no
                              FROM evidence_lines WHERE job_id = ? AND produced_at >= ?
                              ORDER BY produced_at, seq, idx""", [job_id, rows[0][1]]):
        lines.setdefault((seq, _utc(produced_at)), []).append(  # type: ignore[arg-type]
            Line(event_time=_utc(event_time), source=source or "", text=text or "", rule_id=rule_id or "",
                 gate=gate or "", location=location or "", offset=offset, line_no=line_no))
    out = [_verdict_row(r, tuple(lines.get((r[0], _utc(r[1])), ()))) for r in rows]  # type: ignore[arg-type]
    return out, total


def _location(ref: dict) -> tuple[str, int | None]:
    if ref.get("file"):
        off = ref.get("file_offset", ref.get("offset") if not ref.get("topic") else None)
        return str(ref["file"]), off if isinstance(off, int) else None
    if ref.get("topic"):
        off = ref.get("offset")
        return f"{ref['topic']}[{ref.get('partition', '?')}]", off if isinstance(off, int) else None
    return "", None


def _findings(query: Query, job_id: str) -> tuple[list[Line], int]:
    total = int(query("SELECT count(*) FROM findings WHERE job_id = ?", [job_id])[0][0])
    rows = query(f"""SELECT event_time, kind, rule_id, severity, source, text, ref FROM findings
                     WHERE job_id = ? ORDER BY {_SEVERITY_RANK}, event_time NULLS LAST, ref_key
                     LIMIT {MAX_FINDINGS}""", [job_id])
    out = []
    for event_time, kind, rule_id, severity, source, text, ref in rows:
        r = _json(ref)
        location, offset = _location(r if isinstance(r, dict) else {})
        line_no = r.get("line_no") if isinstance(r, dict) else None
        out.append(Line(event_time=_utc(event_time), source=source or "", text=text or "", rule_id=rule_id or "",
                        severity=severity or "", kind=kind or "", location=location, offset=offset,
                        line_no=line_no if isinstance(line_no, int) else None))
    far = datetime.max.replace(tzinfo=UTC)
    out.sort(key=lambda f: (f.event_time or far, f.location, f.offset or 0))
    return out, total


def _engines(raw: Any) -> dict[str, tuple[EnginePoint, ...]]:
    out = {}
    for eid, buckets in (raw.items() if isinstance(raw, dict) else ()):
        pts = []
        for b in buckets if isinstance(buckets, list) else ():
            try:
                at, gen, run, wait = b
                pts.append(EnginePoint(at=_utc(datetime.fromisoformat(at)),  # type: ignore[arg-type]
                                       generation_tokens_per_s=float(gen), running=float(run), waiting=float(wait)))
            except (TypeError, ValueError):
                continue
        out[str(eid)] = tuple(pts)
    return out


def _metrics(query: Query, job_id: str) -> tuple[list[MetricRow], int]:
    columns = {r[0] for r in query("SELECT column_name FROM information_schema.columns "
                                   "WHERE table_name = 'metrics'", [])}

    def col(name: str) -> str:  # columns added after a store was made read as NULL until a writer adds them
        return name if name in columns else "NULL"

    rows = query(f"""SELECT judged_at, generation_tokens_per_s, running_requests, waiting_requests, staleness,
                            trials_completed, reward_mean, nonzero_reward_ratio, restarts_burned, gpu_util_mean,
                            {col('engines')}, {col('effective_training_ratio')}, {col('training_time')}
                     FROM metrics WHERE job_id = ? ORDER BY judged_at""", [job_id])
    total = len(rows)
    if total > MAX_POINTS:  # thin evenly, keeping the newest point
        step = total / MAX_POINTS
        keep = sorted({min(total - 1, int(i * step)) for i in range(MAX_POINTS)} | {total - 1})
        rows = [rows[i] for i in keep]
    out = []
    for (at, gen, run, wait, stale, trials, reward, nonzero, restarts, gpu, engines, ratio, used) in rows:
        s = _json(stale)
        u = _json(used)
        out.append(MetricRow(
            judged_at=_utc(at), generation_tokens_per_s=gen, running=run, waiting=wait,  # type: ignore[arg-type]
            staleness_s={str(k): float(v) for k, v in s.items() if isinstance(v, (int, float))}
            if isinstance(s, dict) else {},
            trials_completed=trials, reward_mean=reward, nonzero_reward_ratio=nonzero, restarts_burned=restarts,
            gpu_util_mean=gpu, engines=_engines(_json(engines)), effective_training_ratio=ratio,
            training_time_s={str(k): float(v) for k, v in u.items() if isinstance(v, (int, float))}
            if isinstance(u, dict) else {},
        ))
    return out, total


def load(query: Query, job_id: str, origin: str) -> ReportData:
    """Everything the store holds about one job, bounded for a page (see the MAX_* limits)."""
    verdicts, verdicts_total = _verdicts(query, job_id)
    findings, findings_total = _findings(query, job_id)
    metrics, metrics_total = _metrics(query, job_id)
    problems = [Problem(path=p or "", problem=k or "", gate=g or "", note=n or "", count=int(c or 0))
                for p, k, g, n, c in query("""SELECT path, problem, gate, note, count FROM source_problems
                                              WHERE job_id = ? ORDER BY gate, path, problem""", [job_id])]
    dead = [DeadLetterRow(received_at=_utc(at), reason=r or "", stage=s or "", detail=d or "",
                          origin=f"{t}[{p}]@{o}" if t else "")
            for at, r, s, d, t, p, o in query("""SELECT received_at, reason, stage, detail, source_topic,
                                                        source_partition, source_offset
                                                 FROM dead_letters WHERE job_id = ?
                                                 ORDER BY received_at NULLS LAST LIMIT 200""", [job_id])]
    return ReportData(job_id=job_id, origin=origin, verdicts=verdicts, metrics=metrics, findings=findings,
                      problems=problems, dead_letters=dead, verdicts_total=verdicts_total,
                      findings_total=findings_total, metrics_total=metrics_total)


def load_file(path: str | Path, job_id: str) -> ReportData:
    """`load` over a store file (read-only; its snapshot while a writer holds it)."""
    from rlhealth.sinks.duckdb import connect_readonly

    con = connect_readonly(path)
    try:
        return load(lambda sql, params: con.execute(sql, list(params)).fetchall(), job_id, str(path))
    finally:
        con.close()


def from_records(job_id: str, origin: str, verdicts: Iterable[Verdict], metrics: Iterable[JobMetrics],
                 findings: Iterable[Finding], problems: Iterable[Any] = ()) -> ReportData:
    """A report of records never stored (`probe --html`): they go through an in-memory store and
    `load`, so the page is built exactly as from a store file."""
    from rlhealth.sinks.duckdb import EvidenceStore

    store = EvidenceStore(":memory:", flush_rows=1 << 30)
    try:
        store.add_findings(job_id, findings)
        for v in verdicts:
            store.add_verdict(v)
        for m in metrics:
            store.add_metrics(m)
        store.add_problems(job_id, problems)
        store.flush()
        return load(store.query, job_id, origin)
    finally:
        store.close()


def job_ids(query: Query) -> list[str]:
    """Jobs the store knows (for a helpful error when asked for another)."""
    return [r[0] for r in query("SELECT DISTINCT job_id FROM verdicts UNION SELECT DISTINCT job_id FROM metrics "
                                "ORDER BY 1", [])]


__all__ = ["MAX_FINDINGS", "MAX_POINTS", "MAX_VERDICTS", "Query", "from_records", "job_ids", "load", "load_file"]
