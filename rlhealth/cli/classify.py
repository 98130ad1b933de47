"""`rlhealth classify` and `rlhealth rules`: run the signature engine over log files.

classify streams each file in binary, 1 MiB at a time, through the sources' log reader
(`rlhealth.sources.logfiles.TailReader`); a record is a line split on ``\\n``,
``\\r\\n`` or a bare ``\\r`` (tqdm). ``line_no`` is the 1-based physical (``\\n``) line number,
``offset`` the byte offset of the record. Records longer than ``--max-line-bytes`` (64 KiB) are
truncated for matching (the rest of the line is skipped without being held in memory) and
counted; invalid UTF-8 is decoded with U+FFFD and counted; records with NUL bytes are counted.
Time: a stamp without a year (vLLM ``INFO 06-28 12:00:00``, c10d/glog ``I0628 12:00:00.…``, syslog
``Jun 28 12:00:00``) takes its year from a reference time, never from today's date: ``--year`` when
given, else the ``captured_at`` of the capture the file lies in (the nearest parent directory with a
``capture.json``), else the file's modification time; a December stamp read against a January
reference falls in the year before. A stamp without a zone is read as UTC unless ``--tz`` names one.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from pathlib import Path

import click
import orjson

CHUNK = 1 << 20
DEFAULT_MAX_LINE = 64 * 1024
BATCH = 500


class Stats:
    def __init__(self) -> None:
        self.files = 0
        self.lines = 0
        self.records = 0
        self.matches = 0
        self.invalid_utf8 = 0
        self.truncated = 0
        self.nul_lines = 0
        self.errors = 0
        self.tracebacks = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def iter_records(path: Path, stats: Stats, max_line: int = DEFAULT_MAX_LINE,
                 chunk: int = CHUNK) -> Iterator[tuple[int, int, bytes]]:
    """Yield (line_no, byte offset, record bytes) with bounded memory.

    The file is read by the sources' `TailReader` (the byte layer under `LogReader`): it splits on
    ``\\n``, cuts a line with no newline after `max_line` bytes and skips the rest of it without
    holding it. Redaction and the `LogBatch` line limits of `LogReader` do not apply here: classify
    reports the file's own bytes."""
    from rlhealth.sources.logfiles import TailReader

    tail = TailReader(path, max_line_bytes=max_line)
    for no, off, line in tail.lines(final=True, chunk_bytes=chunk):
        yield from _records(line, no + 1, off, stats, max_line)
    stats.truncated += tail.giant_lines


def _records(line: bytes, line_no: int, offset: int, stats: Stats,
             max_line: int) -> Iterator[tuple[int, int, bytes]]:
    stats.lines += 1
    if len(line) > max_line:  # a long line that came whole in one chunk (a giant one is cut by the reader)
        line = line[:max_line]
        stats.truncated += 1
    if b"\r" not in line:
        yield line_no, offset, line
        return
    pos = 0
    for part in line.split(b"\r"):
        if part:
            yield line_no, offset + pos, part
        pos += len(part) + 1


def _decode(raw: bytes, stats: Stats) -> str:
    if b"\x00" in raw:
        stats.nul_lines += 1
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.invalid_utf8 += 1
        return raw.decode("utf-8", errors="replace")


def _emit_tracebacks(tbs: list, name: str, fmt: str, write, stats: Stats) -> None:
    for tb in tbs:
        stats.tracebacks += 1
        if fmt == "jsonl":
            write(orjson.dumps({"file": name, "line_no": tb.first_index, "last_line_no": tb.last_index,
                                "traceback": tb.to_dict()}).decode() + "\n")
        else:
            write(f"{name}:{tb.first_index}-{tb.last_index}: traceback {tb.exc_type}: {tb.message[:160]} "
                  f"chain={'>'.join(tb.chain)} fingerprint={tb.fingerprint}\n")


_OFFSET_RE = re.compile(r"([+-])(\d\d):?(\d\d)")


def parse_tz(value: str) -> tzinfo:
    """An IANA zone name (``Europe/Berlin``), ``UTC``/``Z``, or a fixed offset ``+HH:MM`` / ``-HHMM``."""
    v = value.strip()
    if v.upper() in ("UTC", "Z", "GMT"):
        return UTC
    m = _OFFSET_RE.fullmatch(v)
    if m:
        hours, minutes = int(m.group(2)), int(m.group(3))
        if hours > 23 or minutes > 59:
            raise ValueError(f"offset out of range: {value!r}")
        sign = 1 if m.group(1) == "+" else -1
        return timezone(sign * timedelta(hours=hours, minutes=minutes))
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(v)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"not an IANA time zone or a +HH:MM offset: {value!r}") from exc


def capture_time(path: Path) -> datetime | None:
    """`captured_at` of the capture `path` lies in: the nearest parent with a readable capture.json."""
    from rlhealth.sources.capture import CaptureError, read_capture_info

    for parent in path.resolve().parents:
        if (parent / "capture.json").is_file():
            try:
                return read_capture_info(parent).captured_at
            except (CaptureError, OSError):
                return None
    return None


def reference_time(path: Path, year: int | None = None, tz: tzinfo = UTC) -> datetime:
    """The time a file's year-less stamps are resolved against (see the module docstring).

    `--year Y` gives the last second of Y in `tz`, so every month-day stamp falls in Y. Raises
    OSError when there is neither a year, a capture nor a readable mtime."""
    if year is not None:
        return datetime(year, 12, 31, 23, 59, 59, tzinfo=tz)
    captured = capture_time(path)
    if captured is not None:
        return captured
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


def classify_file(path: Path, classifier, out, fmt: str, stats: Stats,
                  max_line: int = DEFAULT_MAX_LINE, tracebacks: bool = False,
                  year: int | None = None, tz: tzinfo = UTC) -> None:
    from rlhealth.agents.normalize import line_timestamp
    from rlhealth.agents.tracebacks import TracebackAssembler

    asm = TracebackAssembler() if tracebacks else None

    ref = reference_time(path, year, tz)
    name = str(path)
    write = out.write
    pending: list[tuple[int, int, str]] = []

    def flush_batch() -> None:
        if not pending:
            return
        texts = [p[2] for p in pending]
        stats.records += len(texts)
        for m in classifier.scan(texts):
            line_no, offset, raw = pending[m.index]
            ts = line_timestamp(raw, ref, tz)
            stats.matches += 1
            rec = {"file": name, "line_no": line_no, "offset": offset, "rule_id": m.rule.id,
                   "kind": m.rule.kind, "signal": m.rule.signal, "fields": m.fields,
                   "ts": ts.isoformat() if ts else None}
            if fmt == "jsonl":
                write(orjson.dumps(rec).decode() + "\n")
            else:
                write(f"{name}:{line_no}: {m.rule.kind}/{m.rule.signal} [{m.rule.id}] "
                      f"{orjson.dumps(m.fields).decode()} :: {m.text[:160]}\n")
        pending.clear()

    for line_no, offset, raw in iter_records(path, stats, max_line):
        text = _decode(raw, stats)
        pending.append((line_no, offset, text))
        if asm is not None:
            # one record per traceback, written when it closes (matches of its lines come first)
            done = asm.feed(line_no, text)
            if done:
                flush_batch()
                _emit_tracebacks(done, name, fmt, write, stats)
        if len(pending) >= BATCH:
            flush_batch()
    flush_batch()
    if asm is not None:
        _emit_tracebacks(asm.flush(), name, fmt, write, stats)
    stats.files += 1


def _load(rules_dirs: tuple[str, ...]):
    from rlhealth.rules.loader import load_rules

    return load_rules([Path(d) for d in rules_dirs])


@click.command("classify")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["jsonl", "text"]), default="jsonl",
              show_default=True)
@click.option("--rules-dir", "rules_dirs", multiple=True, type=click.Path(),
              help="Extra rule-pack directory (repeatable; also $RLHEALTH_RULES_DIRS).")
@click.option("--engine", type=click.Choice(["auto", "hyperscan", "re2"]), default="auto",
              show_default=True)
@click.option("--max-line-bytes", type=int, default=DEFAULT_MAX_LINE, show_default=True)
@click.option("--tracebacks", is_flag=True,
              help="Also group Python tracebacks (chained, Ray-wrapped, exception groups, interleaved "
                   "writers) into one record each: exception type, message, chain, frames and a "
                   "fingerprint that is the same across attempts.")
@click.option("--year", type=click.IntRange(1970, 9999), default=None,
              help="Year of stamps that print none (vLLM 'INFO 06-28 ...', c10d 'I0628 ...', syslog "
                   "'Jun 28 ...'). Default: the captured_at of the capture the file lies in (nearest "
                   "parent with capture.json), else the file's modification time; never today's date.")
@click.option("--tz", "tz_name", default="UTC", show_default=True,
              help="Zone of stamps that carry none: an IANA name (Europe/Berlin) or an offset (+05:30). "
                   "Zone-less stamps are UTC unless this is given; \"ts\" is always printed in UTC.")
def classify(files: tuple[Path, ...], fmt: str, rules_dirs: tuple[str, ...], engine: str,
             max_line_bytes: int, tracebacks: bool, year: int | None, tz_name: str) -> None:
    """Classify log lines against the rule packs; one JSON object per match (and per traceback
    with --tracebacks: {"file", "line_no", "last_line_no", "traceback": {...}}).

    "ts" is the line's own stamp in UTC. Stamps without a zone are read as UTC (--tz overrides);
    stamps without a year take it from --year, else the enclosing capture's captured_at, else the
    file's modification time (a December stamp read in January falls in the year before)."""
    from rlhealth.agents.signatures import Classifier

    try:
        tz = parse_tz(tz_name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tz") from None

    clf = Classifier(_load(rules_dirs), engine=None if engine == "auto" else engine)
    stats = Stats()
    out = click.get_text_stream("stdout")
    for f in files:
        try:
            classify_file(f, clf, out, fmt, stats, max(1024, max_line_bytes), tracebacks, year, tz)
        except OSError as exc:
            stats.errors += 1
            click.echo(f"rlhealth classify: {f}: {exc.strerror or exc}", err=True)
    summary: dict[str, object] = dict(stats.as_dict())
    summary["engine"] = clf.engine
    click.echo("summary " + orjson.dumps(summary).decode(), err=True)
    if stats.errors:
        sys.exit(2)


@click.group("rules")
def rules() -> None:
    """List and check the log-signature rule packs."""


@rules.command("list")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--rules-dir", "rules_dirs", multiple=True, type=click.Path())
def list_rules(fmt: str, rules_dirs: tuple[str, ...]) -> None:
    """List every rule (pack, id, kind, severity, signal)."""
    rs = _load(rules_dirs)
    if fmt == "json":
        doc = {"versions": rs.versions, "rules": [
            {"id": r.id, "pack": r.pack, "kind": r.kind, "severity": r.severity,
             "gates": list(r.gates), "signal": r.signal, "pattern": r.pattern,
             "fields": list(r.fields), "meaning": r.meaning} for r in rs.rules]}
        click.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
        return
    for pack, version in rs.versions.items():
        click.echo(f"# pack {pack} {version}")
        for r in rs.rules:
            if r.pack == pack:
                click.echo(f"{r.id:38s} {r.kind:11s} {r.severity:8s} {r.signal}")
    click.echo(f"{len(rs.rules)} rules in {len(rs.versions)} packs", err=True)


@rules.command("check")
@click.argument("dirs", nargs=-1, type=click.Path(path_type=Path))
@click.option("--only", is_flag=True, help="Check only DIRs (not the shipped packs).")
def check(dirs: tuple[Path, ...], only: bool) -> None:
    """Check the shipped packs plus DIRs: compile in every engine, run the examples, and check that
    every signal a rule emits is declared (role, family, effect) with an effect the core consumes."""
    from rlhealth.agents.signals import check_catalog
    from rlhealth.rules.catalog import load_catalog
    from rlhealth.rules.loader import check_rules, load_rules

    try:
        rs = load_rules(list(dirs), include_shipped=not only)
        catalog = load_catalog(list(dirs))
    except (ValueError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    problems = check_rules(rs) + check_catalog(catalog, [(r.id, r.signal, r.gates) for r in rs.rules])
    for p in problems:
        click.echo(p)
    n_ex = sum(len(r.match) + len(r.no_match) for r in rs.rules)
    click.echo(f"{len(rs.rules)} rules, {len(rs.versions)} packs, {n_ex} examples, {len(catalog.signals)} "
               f"declared signals, {len(problems)} problems", err=True)
    if problems:
        sys.exit(1)

