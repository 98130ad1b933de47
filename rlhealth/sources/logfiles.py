"""Text log files -> `LogBatch` events: one code path for captures (`rlhealth probe`), followed
captures (`rlhealth watch`) and the live `LogFileShipper`.

Reading rules (made for 1 GB captures):

* files are read in binary chunks and split on ``\\n`` only; a ``\\r`` stays inside its line
  (progress bars; the core splits those); a last line without ``\\n`` is held until it is
  complete, except at the end of a capture (``final=True``) where it is emitted as is;
* each line is decoded as UTF-8; a line with invalid bytes is decoded with replacement
  characters and counted in `invalid_utf8_lines`; a line longer than `MAX_LINE_CHARS` is cut and
  counted in `truncated_lines` (a line with no newline for more than 4*MAX_LINE_CHARS bytes is cut
  there and the rest of it skipped);
* every line goes through `redact` before the event is built;
* `offsets[i]` is the byte offset of line i in the file, `first_line_no` the 0-based number of the
  first line; `ts` is left None: the core parses the timestamps it needs;
* **event_time**: timestamps are not parsed per line. The batch takes the timestamp of its last
  line that has one, looking back at most `TIME_SCAN_LINES` lines; if none has one, the previous
  batch's time is carried forward. The first batches of a file before any timestamp are held
  (up to `MAX_HELD_BATCHES`) and get the first timestamp found after them. A file (or a head)
  with no timestamp at all gets `fallback_time`: for captures, the file's mtime when that is
  not after `captured_at`, otherwise the start of the capture window (the earliest time the
  capture's state/GPU/pod files show) — never `captured_at` itself, so that a timestamp-less
  log cannot pass for fresh output; for live tailing, the time the lines were read. Event times
  within one file never decrease.
"""

from __future__ import annotations

import glob as _glob
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

from rlhealth.agents.normalize import line_timestamp
from rlhealth.schemas.common import Source
from rlhealth.schemas.events import MAX_LINE_CHARS, MAX_LINES_PER_BATCH, LogBatch
from rlhealth.sources.redact import redact_lines

UTC = timezone.utc
CHUNK_BYTES = 1 << 20
MAX_LINE_BYTES = MAX_LINE_CHARS * 4
TIME_SCAN_LINES = 8
MAX_HELD_BATCHES = 20

_RANK_RE = re.compile(r"(?:^|[_-])rank[_-]?(\d+)", re.IGNORECASE)
_SLURM_RE = re.compile(r"^(?:slurm-)?(\d+)(?:_(\d+))?\.(?:out|err)$")
_DMESG_RE = re.compile(r"^dmesg[-_.]?(.*?)(?:\.log|\.txt)?$")


# -- file identity --------------------------------------------------------------------------


@dataclass(frozen=True)
class LogFileInfo:
    kind: str  # pod, ray, finelog, slurm, dmesg, other
    host: str | None = None
    rank: int | None = None
    slurm_job_id: str | None = None


def describe_log(rel: str) -> LogFileInfo:
    """What a capture log path says about its source (`rel` relative to the capture root).

    `logs/pod_rank3.log` -> rank 3; `logs/ray/<node>/raylet.out` -> host <node>;
    `logs/finelog*.log` -> scheduler log spanning attempts; `logs/<jobid>.out|.err` (also
    `slurm-<jobid>.out`) -> one SLURM leg; `logs/dmesg-<host>.log` -> kernel log of <host>.
    """
    parts = rel.replace("\\", "/").split("/")
    name = parts[-1]
    if "ray" in parts[:-1]:
        i = parts.index("ray")
        host = parts[i + 1] if i + 1 < len(parts) - 1 else None
        return LogFileInfo("ray", host=host)
    if name.startswith("finelog"):
        return LogFileInfo("finelog")
    m = _SLURM_RE.match(name)
    if m:
        return LogFileInfo("slurm", slurm_job_id=m.group(1) + (f"_{m.group(2)}" if m.group(2) else ""))
    m = _DMESG_RE.match(name)
    if m:
        return LogFileInfo("dmesg", host=m.group(1) or None)
    m = _RANK_RE.search(name)
    if m and name.startswith("pod"):
        return LogFileInfo("pod", rank=int(m.group(1)))
    if m:
        return LogFileInfo("other", rank=int(m.group(1)))
    return LogFileInfo("other")


def source_for(rel: str, *, cluster: str | None = None, shipper: str | None = None,
               leg_index: dict[str, int] | None = None) -> Source:
    info = describe_log(rel)
    attempt = None
    if info.slurm_job_id is not None and leg_index:
        attempt = leg_index.get(info.slurm_job_id, leg_index.get(info.slurm_job_id.split("_")[0]))
    return Source(cluster=cluster, host=info.host, rank=info.rank, stream=rel, attempt=attempt, shipper=shipper)


def slurm_leg_order(rels: list[str]) -> dict[str, int]:
    """job id -> leg index, from the `.out/.err` file names alone (numeric job-id order)."""
    ids = sorted({describe_log(r).slurm_job_id for r in rels} - {None},
                 key=lambda j: tuple(int(x) for x in j.split("_")))  # type: ignore[union-attr]
    return {j: i for i, j in enumerate(ids)}


# -- byte-level tailing ---------------------------------------------------------------------


class TailReader:
    """Complete lines of one file from a byte offset on; remembers where it stopped.

    `check()` notices rotation (a new inode at the path) and truncation (size below our offset)
    and restarts from 0; it returns "rotated"/"truncated"/None.
    """

    def __init__(self, path: Path, offset: int = 0, line_no: int = 0) -> None:
        self.path = Path(path)
        self.offset = offset  # bytes consumed (complete lines only)
        self.line_no = line_no
        self.ino: int | None = None
        self._partial = b""
        self._skipping = False  # inside a giant line, after its cut head was emitted
        self.giant_lines = 0
        self.missing_final_newline = False

    def check(self) -> str | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        what = None
        if self.ino is not None and st.st_ino != self.ino:
            what = "rotated"
        elif st.st_size < self.offset + len(self._partial):
            what = "truncated"
        self.ino = st.st_ino
        if what is not None:
            self.offset = 0
            self.line_no = 0
            self._partial = b""
            self._skipping = False
        return what

    def lines(self, final: bool) -> Iterator[tuple[int, int, bytes]]:
        """Yield (line number, byte offset, line bytes without \\n) for every complete line now."""
        while True:
            # Open per chunk: a capture merge keeps hundreds of these generators suspended,
            # and none of them may hold a file descriptor while it waits.
            with open(self.path, "rb") as f:
                if self.ino is None:
                    self.ino = os.fstat(f.fileno()).st_ino
                f.seek(self.offset + len(self._partial))
                chunk = f.read(CHUNK_BYTES)
            if not chunk:
                break
            buf = self._partial + chunk if self._partial else chunk
            parts = buf.split(b"\n")
            self._partial = parts.pop()
            off = self.offset
            for p in parts:
                n = len(p) + 1
                if self._skipping:
                    self._skipping = False
                else:
                    self.line_no += 1
                    yield self.line_no - 1, off, p
                off += n
                self.offset = off
            if len(self._partial) > MAX_LINE_BYTES and not self._skipping:
                head = self._partial[:MAX_LINE_BYTES]
                self.line_no += 1
                self.giant_lines += 1
                self._skipping = True
                yield self.line_no - 1, self.offset, head
            if self._skipping and self._partial:
                self.offset += len(self._partial)
                self._partial = b""
        if final and self._partial:
            self.missing_final_newline = True
            rest, off = self._partial, self.offset
            self.offset += len(rest)
            self._partial = b""
            if not self._skipping:
                self.line_no += 1
                yield self.line_no - 1, off, rest


# -- batching -------------------------------------------------------------------------------


def _decode(raw: list[bytes]) -> tuple[list[str], int]:
    try:
        return b"\n".join(raw).decode("utf-8").split("\n"), 0
    except UnicodeDecodeError:
        pass
    out: list[str] = []
    bad = 0
    for b in raw:
        try:
            out.append(b.decode("utf-8"))
        except UnicodeDecodeError:
            out.append(b.decode("utf-8", errors="replace"))
            bad += 1
    return out, bad


class LogReader:
    """Turns one log file into `LogBatch` events, incrementally (see the module doc)."""

    def __init__(
        self,
        path: Path,
        *,
        job_id: str,
        source: Source,
        batch_lines: int = 500,
        lookahead: bool = True,
    ) -> None:
        if not 1 <= batch_lines <= MAX_LINES_PER_BATCH:
            raise ValueError(f"batch_lines must be in 1..{MAX_LINES_PER_BATCH}")
        self.tail = TailReader(path)
        self.job_id = job_id
        self.source = source
        self.batch_lines = batch_lines
        self.lookahead = lookahead
        self.last_time: datetime | None = None
        self.lines_read = 0
        self.bytes_read = 0
        self.invalid_utf8_lines = 0
        self.truncated_lines = 0
        self.timestamped = False
        self._held: list[dict] = []

    @property
    def path(self) -> Path:
        return self.tail.path

    def check(self) -> str | None:
        what = self.tail.check()
        if what is not None:
            self._held = []
        return what

    def _batch_time(self, lines: list[str], ref: datetime) -> datetime | None:
        limit = len(lines) if self.last_time is None else min(TIME_SCAN_LINES, len(lines))
        for i in range(len(lines) - 1, len(lines) - 1 - limit, -1):
            t = line_timestamp(lines[i], ref)
            if t is not None:
                return t
        return None

    def _make(self, fields: dict, t: datetime) -> LogBatch:
        return LogBatch(job_id=self.job_id, event_time=t, source=self.source, **fields)

    def _build(self, raw: list[bytes], offsets: list[int], first_no: int, ref: datetime,
               fallback: Callable[[], datetime]) -> Iterator[LogBatch]:
        lines, bad = _decode(raw)
        trunc = 0
        redact_lines(lines)
        for i, s in enumerate(lines):
            if len(s) > MAX_LINE_CHARS or len(raw[i]) >= MAX_LINE_BYTES:
                lines[i] = s[:MAX_LINE_CHARS]
                trunc += 1
        self.invalid_utf8_lines += bad
        self.truncated_lines += trunc
        self.lines_read += len(lines)
        self.bytes_read += sum(len(b) + 1 for b in raw)
        fields = dict(lines=lines, offsets=offsets, first_line_no=first_no, truncated_lines=trunc,
                      invalid_utf8_lines=bad)
        t = self._batch_time(lines, ref)
        if t is not None:
            self.timestamped = True
            if self.last_time is not None and t < self.last_time:
                t = self.last_time
            self.last_time = t
            if self._held:
                held, self._held = self._held, []
                for h in held:
                    yield self._make(h, t)
            yield self._make(fields, t)
            return
        if self.last_time is not None:
            yield self._make(fields, self.last_time)
            return
        if self.lookahead and len(self._held) < MAX_HELD_BATCHES:
            self._held.append(fields)
            return
        yield from self._release_held(fallback)
        self.last_time = fallback()
        yield self._make(fields, self.last_time)

    def _release_held(self, fallback: Callable[[], datetime]) -> Iterator[LogBatch]:
        if self._held:
            held, self._held = self._held, []
            t = self.last_time or fallback()
            self.last_time = t
            for h in held:
                yield self._make(h, t)

    def read(self, *, final: bool, ref_time: datetime,
             fallback_time: datetime | Callable[[], datetime]) -> Iterator[LogBatch]:
        """Yield batches for every complete line now available (and, if `final`, the rest).

        `ref_time` anchors year-less timestamps; `fallback_time` (or a callable giving it) is used
        for lines before which no timestamp was ever seen.
        """
        fb = fallback_time if callable(fallback_time) else (lambda: fallback_time)  # type: ignore[assignment,return-value]
        raw: list[bytes] = []
        offsets: list[int] = []
        first_no = self.tail.line_no
        for no, off, b in self.tail.lines(final):
            if not raw:
                first_no = no
            raw.append(b)
            offsets.append(off)
            if len(raw) >= self.batch_lines:
                yield from self._build(raw, offsets, first_no, ref_time, fb)
                raw, offsets = [], []
        if raw:
            yield from self._build(raw, offsets, first_no, ref_time, fb)
        if final or not self.lookahead:
            yield from self._release_held(fb)


# -- live shipper ---------------------------------------------------------------------------


class LogFileShipper:
    """Tails files matching `patterns` (paths or globs, `**` allowed) and emits `LogBatch`es.

    Call `poll()` periodically: it picks up new files, notices rotation/truncation, emits the
    complete lines appended since the last poll (batched, redacted) and returns the count of
    events emitted. A partial last line is held until its newline arrives. Lines without any
    timestamp before them are stamped with the poll time.
    """

    def __init__(
        self,
        patterns: list[str | Path],
        emit: Callable[[LogBatch], None],
        *,
        job_id: str,
        batch_lines: int = 500,
        clock: Callable[[], datetime] | None = None,
        root: Path | None = None,
        cluster: str | None = None,
        shipper: str | None = None,
        from_end: bool = False,
    ) -> None:
        self.patterns = [str(p) for p in patterns]
        self.emit = emit
        self.job_id = job_id
        self.batch_lines = batch_lines
        self.clock = clock or (lambda: datetime.now(UTC))
        self.root = Path(root) if root else None
        self.cluster = cluster
        self.shipper = shipper
        self.from_end = from_end
        self.readers: dict[str, LogReader] = {}
        self.events: list[tuple[str, str]] = []  # (path, "rotated"/"truncated") notices

    def _rel(self, p: Path) -> str:
        if self.root is not None:
            try:
                return p.resolve().relative_to(self.root.resolve()).as_posix()
            except ValueError:
                pass
        return p.as_posix()

    def files(self) -> list[Path]:
        out: set[Path] = set()
        for pat in self.patterns:
            if any(c in pat for c in "*?["):
                out.update(Path(x) for x in _glob.glob(pat, recursive=True) if os.path.isfile(x))
            elif os.path.isfile(pat):
                out.add(Path(pat))
        return sorted(out)

    def poll(self) -> int:
        now = self.clock()
        n = 0
        for p in self.files():
            key = str(p)
            r = self.readers.get(key)
            if r is None:
                rel = self._rel(p)
                r = LogReader(p, job_id=self.job_id, batch_lines=self.batch_lines, lookahead=False,
                              source=source_for(rel, cluster=self.cluster, shipper=self.shipper))
                self.readers[key] = r
                if self.from_end:
                    try:
                        r.tail.offset = p.stat().st_size
                    except OSError:
                        pass
            what = r.check()
            if what is not None:
                self.events.append((key, what))
            try:
                for batch in r.read(final=False, ref_time=now, fallback_time=now):
                    self.emit(batch)
                    n += 1
            except OSError:
                continue
        return n


__all__ = [
    "LogFileInfo",
    "LogFileShipper",
    "LogReader",
    "TailReader",
    "describe_log",
    "slurm_leg_order",
    "source_for",
]
