"""Text log files -> `LogBatch` events: one code path for captures (`rlhealth probe`), followed
captures (`rlhealth watch`) and the live `LogFileShipper`.

Reading rules (made for 1 GB captures):

* files are read in binary chunks and split on ``\\n`` only; a ``\\r`` stays inside its line
  (progress bars; the core splits those); a last line without ``\\n`` is held until it is
  complete, except at the end of a capture (``final=True``) where it is emitted as is;
* each batch is joined and decoded as UTF-8 in one call; a line with invalid bytes is decoded
  with replacement characters and counted in `invalid_utf8_lines`; a line longer than `MAX_LINE_CHARS` is cut and
  counted in `truncated_lines` (a line with no newline for more than 4*MAX_LINE_CHARS bytes is cut
  there and the rest of it skipped);
* every batch goes through the `Redactor` before the event is built: one marker scan of the
  batch's bytes, the exact substitutions on the lines with a marker (and on invalid-UTF-8 lines);
* `offsets[i]` is the byte offset of line i in the file, `first_line_no` the 0-based number of the
  first line; `ts` is left None: the core parses the timestamps it needs;
* **event_time**: timestamps are not parsed per line. The batch takes the timestamp of its last
  line that has one, looking back at most `TIME_SCAN_LINES` lines; if none has one, the previous
  batch's time is carried forward. The first batches of a file before any timestamp are held
  (up to `MAX_HELD_LINES` lines, however they are batched, so that where batches are cut does not change
  the time a line gets) and get the first timestamp found after them. A file (or a head)
  with no timestamp at all gets `fallback_time`: for captures, the file's mtime when that is
  not after `captured_at`, otherwise the start of the capture window (the earliest time the
  capture's state/GPU/pod files show) — never `captured_at` itself, so that a timestamp-less
  log cannot pass for fresh output; for live tailing, the time the lines were read. Event times
  within one file never decrease;
* a batch holds contiguous lines: it ends before the skipped tail of a giant line;
* with `prefilter=` (the in-process core's classifier: `probe`, `watch`) lines that core will not
  read are left empty; see "prefiltered reading" below.
"""

from __future__ import annotations

import glob as _glob
import os
import re
import stat as _stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rlhealth.agents import ingest
from rlhealth.agents.bytescan import count_newlines, line_starts, strip_ansi_bytes, utf8_valid
from rlhealth.agents.normalize import line_timestamp
from rlhealth.agents.signatures import Classifier
from rlhealth.schemas.common import Source
from rlhealth.schemas.events import MAX_LINE_CHARS, MAX_LINES_PER_BATCH, LogBatch
from rlhealth.sources.compressed import head_lines, unrotated_name
from rlhealth.sources.redact import Redactor, default_redactor

CHUNK_BYTES = 1 << 20
MAX_LINE_BYTES = MAX_LINE_CHARS * 4
TIME_SCAN_LINES = 8
MAX_HELD_LINES = 40_000  # ~20 of the probe's batches; a few MB held at most
# A prefiltering reader decodes a whole batch in one call when at least this share of its lines are
# matched or secret-marked (dense metric logs): see `LogReader._sparse_batch`. Decoding a line costs
# ~0.1 us, finding the stamped line before a match ~3 us.
DENSE_BATCH_MIN_SHARE = 0.25
# Lines of each batch a prefiltering reader always decodes: its own event_time scan and the core's freshness.
TAIL_LINES = max(TIME_SCAN_LINES, ingest.FRESHNESS_LINES)

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
    A rotated file (`123.out.1`, `pod_rank3.log.2.gz`) says what its unrotated name says.
    """
    parts = rel.replace("\\", "/").split("/")
    name = unrotated_name(parts[-1])  # `123.out.1` is still leg 123
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
    found = {describe_log(r).slurm_job_id for r in rels}
    ids = sorted((j for j in found if j is not None), key=lambda j: tuple(int(x) for x in j.split("_")))
    return {j: i for i, j in enumerate(ids)}


# -- byte-level tailing ---------------------------------------------------------------------


class TailReader:
    """Complete lines of one file from a byte offset on; remembers where it stopped.

    `check()` notices rotation (a new inode at the path) and truncation (size below our offset)
    and restarts from 0; it returns "rotated"/"truncated"/None.
    """

    def __init__(self, path: Path, offset: int = 0, line_no: int = 0, *,
                 max_line_bytes: int = MAX_LINE_BYTES) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self.path = Path(path)
        self.offset = offset  # bytes consumed (complete lines only)
        self.line_no = line_no
        # a line with no newline after this many bytes is cut here (its head emitted) and the rest skipped
        self.max_line_bytes = max_line_bytes
        self.ino: int | None = None
        self._partial = b""
        self._skipping = False  # inside a giant line, after its cut head was emitted
        self.more = False  # the last `spans(max_bytes=...)` stopped before the end of the file
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

    def spans(self, final: bool, chunk_bytes: int = CHUNK_BYTES,
              max_bytes: int | None = None) -> Iterator[tuple[int, int, bytes]]:
        """Yield (number of the first line, its byte offset, the lines joined by \\n without the
        last newline) per chunk read: ``data.split(b"\\n")`` are the chunk's complete lines.

        A giant line's cut head comes as a span of its own. The reader's position is advanced
        before each yield. `max_bytes`: stop after reading about that many bytes (a backlog is
        read in bounded steps; `more` then says whether the file had more)."""
        read = 0
        self.more = False
        while True:
            if max_bytes is not None and read >= max_bytes:
                self.more = True
                break
            # Open per chunk: a capture merge keeps hundreds of these generators suspended,
            # and none of them may hold a file descriptor while it waits. Only regular files:
            # opening a FIFO would block until a writer appears.
            if not _stat.S_ISREG(os.stat(self.path).st_mode):
                break
            with open(self.path, "rb") as f:
                if self.ino is None:
                    self.ino = os.fstat(f.fileno()).st_ino
                f.seek(self.offset + len(self._partial))
                chunk = f.read(chunk_bytes)
            if not chunk:
                break
            read += len(chunk)
            buf = self._partial + chunk if self._partial else chunk
            cut = buf.rfind(b"\n")
            if cut < 0:
                self._partial = buf
            else:
                self._partial = buf[cut + 1:]
                start = 0
                if self._skipping:  # the first line here is the rest of a giant line
                    self._skipping = False
                    start = buf.find(b"\n") + 1
                    self.offset += start
                if start <= cut:
                    data = buf[start:cut]
                    first_no, first_off = self.line_no, self.offset
                    self.line_no += count_newlines(data) + 1
                    self.offset += cut + 1 - start
                    del buf, chunk
                    yield first_no, first_off, data
            if len(self._partial) > self.max_line_bytes and not self._skipping:
                head = self._partial[:self.max_line_bytes]
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

    def blocks(self, final: bool, chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[int, int, list[bytes]]]:
        """`spans`, each split into its lines (bytes without \\n): lines of one block are contiguous
        in the file (line i+1 starts len(line i)+1 bytes after line i)."""
        for no, off, data in self.spans(final, chunk_bytes):
            yield no, off, data.split(b"\n")

    def lines(self, final: bool, chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[int, int, bytes]]:
        """Yield (line number, byte offset, line bytes without \\n) for every complete line now."""
        for no, off, parts in self.blocks(final, chunk_bytes):
            for p in parts:
                yield no, off, p
                no += 1
                off += len(p) + 1


# -- batching -------------------------------------------------------------------------------


def _decode(block: bytes) -> tuple[list[str], list[int]]:
    """`block` (lines joined by \\n) -> (lines, indices of lines that had invalid UTF-8).

    Valid text is decoded in one call; each invalid line is decoded on its own with U+FFFD
    replacements, and the valid stretch after it again in one call."""
    try:
        return block.decode("utf-8").split("\n"), []
    except UnicodeDecodeError as exc:
        err = exc
    out: list[str] = []
    bad: list[int] = []
    pos = 0
    n = len(block)
    while True:
        k = block.rfind(b"\n", pos, pos + err.start)
        ls = k + 1 if k >= 0 else pos
        le = block.find(b"\n", pos + err.start)
        le = n if le < 0 else le
        if ls > pos:
            out.extend(block[pos:ls - 1].decode("utf-8").split("\n"))
        bad.append(len(out))
        out.append(block[ls:le].decode("utf-8", errors="replace"))
        if le >= n:
            return out, bad
        pos = le + 1
        try:
            out.extend(block[pos:].decode("utf-8").split("\n"))
            return out, bad
        except UnicodeDecodeError as exc:
            err = exc


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
        chunk_bytes: int = CHUNK_BYTES,
        redactor: Redactor | None = None,
        prefilter: Classifier | None = None,
        prefilter_now: datetime | None = None,
    ) -> None:
        if not 1 <= batch_lines <= MAX_LINES_PER_BATCH:
            raise ValueError(f"batch_lines must be in 1..{MAX_LINES_PER_BATCH}")
        self.tail = TailReader(path)
        self.job_id = job_id
        self.source = source
        self.batch_lines = batch_lines
        self.lookahead = lookahead
        self.chunk_bytes = chunk_bytes
        self.redactor = redactor or default_redactor()
        self.last_time: datetime | None = None
        self.lines_read = 0
        self.bytes_read = 0
        self.invalid_utf8_lines = 0
        self.truncated_lines = 0
        self.timestamped = False
        self._held: list[dict] = []
        self._held_lines = 0
        self._last_utf8: tuple[list[str] | None, bytes | None] = (None, None)
        self._keep_utf8 = False
        self.prefilter = prefilter
        # the `now` the core will step these batches with (it anchors year-less stamps the same way
        # when deciding which earlier lines time a match); None: the reader's ref_time
        self.prefilter_now = prefilter_now
        self.lines_decoded = 0  # lines a prefiltering reader turned into text (all lines otherwise)

    @property
    def path(self) -> Path:
        return self.tail.path

    def check(self) -> str | None:
        what = self.tail.check()
        if what is not None:
            self._held, self._held_lines = [], 0
        return what

    def _batch_time(self, lines: list[str], ref: datetime) -> datetime | None:
        limit = len(lines) if self.last_time is None else min(TIME_SCAN_LINES, len(lines))
        for i in range(len(lines) - 1, len(lines) - 1 - limit, -1):
            t = line_timestamp(lines[i], ref)
            if t is not None:
                return t
        return None

    def _make(self, fields: dict, t: datetime) -> LogBatch:
        block = fields.pop("_utf8", None)
        batch = self._construct(fields, t, fields.pop("_fits", False))
        if self._keep_utf8:  # only read_utf8 hands the bytes on; holding them costs a batch per file
            self._last_utf8 = (batch.lines, block)
        return batch

    def _construct(self, fields: dict, t: datetime, fits: bool) -> LogBatch:
        lines = fields["lines"]
        if lines and (fits or max(map(len, lines)) <= MAX_LINE_CHARS):
            # Validating 500 strings one by one is a third of the cost of reading a batch. They are
            # str, at most MAX_LINE_CHARS long (known from _build, or checked), at most batch_lines of
            # them, with one int offset each (built above): validate everything else and put the
            # columns in as is.
            # The result equals LogBatch(**same fields) (same values, same fields_set).
            head = LogBatch(job_id=self.job_id, event_time=t, source=self.source,
                            **{**fields, "lines": [], "offsets": []})
            return head.model_copy(update={"lines": lines, "offsets": fields["offsets"]})
        return LogBatch(job_id=self.job_id, event_time=t, source=self.source, **fields)

    def _build(self, raw: list[bytes], offsets: list[int], first_no: int, ref: datetime,
               fallback: Callable[[], datetime]) -> Iterator[LogBatch]:
        block = b"\n".join(raw)
        try:
            # == block.decode().split("\n") when valid (a newline never splits a UTF-8 sequence)
            lines, bad = list(map(bytes.decode, raw)), []  # type: list[str], list[int]
        except UnicodeDecodeError:
            lines, bad = _decode(block)
        # Markers are searched in the raw bytes; lines with invalid UTF-8 always take the exact path.
        changed = self.redactor.redact_block(block, lines, bad)
        trunc = 0
        long = len(block) > MAX_LINE_CHARS and max(map(len, raw)) > MAX_LINE_CHARS  # else none is over a limit
        if changed and not long:
            long = max(map(len, lines)) > MAX_LINE_CHARS  # a mask can be longer than the secret
        if long:
            for i, s in enumerate(lines):
                if len(s) > MAX_LINE_CHARS or len(raw[i]) >= MAX_LINE_BYTES:
                    lines[i] = s[:MAX_LINE_CHARS]
                    trunc += 1
        self.invalid_utf8_lines += len(bad)
        self.truncated_lines += trunc
        self.lines_read += len(lines)
        self.bytes_read += len(block) + 1
        fields = dict(lines=lines, offsets=offsets, first_line_no=first_no, truncated_lines=trunc,
                      invalid_utf8_lines=len(bad))
        if not (bad or trunc or changed):
            fields["_utf8"] = block  # == "\n".join(lines).encode(): every line decoded as is, none changed
        # every line is at most MAX_LINE_CHARS long: cut above, or no more bytes than that and not redacted
        fields["_fits"] = long or not changed
        yield from self._emit(fields, ref, fallback)

    def _emit(self, fields: dict, ref: datetime, fallback: Callable[[], datetime]) -> Iterator[LogBatch]:
        """Give a batch its event_time (see the module doc) and yield it, or hold it."""
        t = self._batch_time(fields["lines"], ref)
        if t is not None:
            self.timestamped = True
            if self.last_time is not None and t < self.last_time:
                t = self.last_time
            self.last_time = t
            if self._held:
                held, self._held, self._held_lines = self._held, [], 0
                for h in held:
                    yield self._make(h, t)
            yield self._make(fields, t)
            return
        if self.last_time is not None:
            yield self._make(fields, self.last_time)
            return
        if self.lookahead and self._held_lines + len(fields["lines"]) <= MAX_HELD_LINES:
            self._held.append(fields)
            self._held_lines += len(fields["lines"])
            return
        yield from self._release_held(fallback)
        self.last_time = fallback()
        yield self._make(fields, self.last_time)

    def _release_held(self, fallback: Callable[[], datetime]) -> Iterator[LogBatch]:
        if self._held:
            held, self._held, self._held_lines = self._held, [], 0
            t = self.last_time or fallback()
            self.last_time = t
            for h in held:
                yield self._make(h, t)

    def read(self, *, final: bool, ref_time: datetime,
             fallback_time: datetime | Callable[[], datetime], max_bytes: int | None = None) -> Iterator[LogBatch]:
        """Yield batches for every complete line now available (and, if `final`, the rest).

        `ref_time` anchors year-less timestamps; `fallback_time` (or a callable giving it) is used
        for lines before which no timestamp was ever seen. `max_bytes` bounds what one call reads
        (dense path only; `self.tail.more` says whether the file had more).
        """
        fb = fallback_time if callable(fallback_time) else (lambda: fallback_time)
        if self.prefilter is not None:
            yield from self._read_prefiltered(final, ref_time, fb)
            return
        size = self.batch_lines
        raw: list[bytes] = []
        offsets: list[int] = []
        first_no = self.tail.line_no
        for no, off, data in self.tail.spans(final, self.chunk_bytes, max_bytes):
            parts = data.split(b"\n")
            offs = list(line_starts(data, off)[0])  # byte offset of each line in the file
            if raw and offsets[-1] + len(raw[-1]) + 1 != off:
                # the skipped tail of a giant line lies between: a batch holds contiguous lines
                yield from self._build(raw, offsets, first_no, ref_time, fb)
                raw, offsets = [], []
            if raw:
                raw += parts
                offsets += offs
            else:
                raw, offsets, first_no = parts, offs, no
            n = len(raw)
            if n < size:
                continue
            i = 0
            while n - i >= size:
                yield from self._build(raw[i:i + size], offsets[i:i + size], first_no + i, ref_time, fb)
                i += size
            raw, offsets = raw[i:], offsets[i:]
            first_no += i
        if raw:
            yield from self._build(raw, offsets, first_no, ref_time, fb)
        if final or not self.lookahead:
            yield from self._release_held(fb)


    # -- prefiltered reading ---------------------------------------------------------------
    #
    # With a `prefilter` (the core's own classifier) the reader yields the same batches, except that
    # a line the core will not read is left as "" (same count, same offsets): see
    # `rlhealth.agents.ingest.FRESHNESS_LINES` for what the core reads. Whole chunks are stripped of
    # ANSI codes and scanned once (rule hits and secret markers), and only the lines that matter are
    # decoded and redacted: ~3% of ordinary log lines. A chunk with invalid UTF-8 or an overlong
    # line takes the exact path (`_build`). A batch's event_time comes from its last stamped line,
    # as in `_build`; before the file's first timestamp that line may be anywhere in the batch, so
    # the reader decodes back to it. Batches never span the skipped tail of a giant line.

    def _read_prefiltered(self, final: bool, ref: datetime, fb: Callable[[], datetime]) -> Iterator[LogBatch]:
        size = self.batch_lines
        carry: tuple[int, int, bytes] | None = None  # lines after the last whole batch
        for no, off, data in self.tail.spans(final, self.chunk_bytes):
            if carry is not None and carry[1] + len(carry[2]) + 1 != off:
                # the skipped tail of a giant line lies between: a batch holds contiguous lines
                yield from self._whole_region(*carry, ref, fb)
                carry = None
            if carry is not None:
                no, off, data = carry[0], carry[1], carry[2] + b"\n" + data
                carry = None
            starts, longest = line_starts(data, off)
            n = len(starts)
            whole = n - n % size
            if whole < n:
                cut = starts[whole] - off
                carry = (no + whole, starts[whole], data[cut:])
                if whole == 0:
                    continue
                data = data[:cut - 1]
            yield from self._region(data, starts, whole, no, off, longest, ref, fb)
        if carry is not None:
            yield from self._whole_region(*carry, ref, fb)
        if final or not self.lookahead:
            yield from self._release_held(fb)

    def _whole_region(self, no: int, off: int, data: bytes, ref: datetime,
                      fb: Callable[[], datetime]) -> Iterator[LogBatch]:
        """Batches of all lines of `data` (the last one may be short)."""
        starts, longest = line_starts(data, off)
        yield from self._region(data, starts, len(starts), no, off, longest, ref, fb)

    def _region(self, data: bytes, starts: Sequence[int], count: int, first_no: int, off: int, longest: int,
                ref: datetime, fb: Callable[[], datetime]) -> Iterator[LogBatch]:
        """Batches of the first `count` lines of `data` (which holds exactly those lines)."""
        size = self.batch_lines
        exact = longest > MAX_LINE_CHARS or not utf8_valid(data)
        if exact:
            parts = data.split(b"\n")
            for i in range(0, count, size):
                self.lines_decoded += min(size, count - i)
                yield from self._build(parts[i:i + size], list(starts[i:i + size]), first_no + i, ref, fb)
            return
        assert self.prefilter is not None
        rules = self.prefilter.rules
        # the hits already split by batch (lines counted from the batch's first), with their distinct lines
        hits = self.prefilter.block_hit_batches(strip_ansi_bytes(data), size)
        secrets = self.redactor.hit_lines(data, starts, off)
        if secrets:  # a marker that only a colour code made (prose ending in "token"): nothing to mask
            secrets = self.redactor.still_marked(data, starts, off, secrets)
        s = 0
        for b, i in enumerate(range(0, count, size)):
            n = min(size, count - i)
            end = i + n
            batch_hits, n_hit_lines = hits[b] if b < len(hits) else ([], 0)
            batch_secrets: list[int] = []
            while s < len(secrets) and secrets[s] < end:
                batch_secrets.append(secrets[s] - i)
                s += 1
            yield from self._sparse_batch(data, starts, i, n, first_no, off, batch_hits, n_hit_lines, batch_secrets,
                                          rules, ref, fb)

    def _sparse_batch(self, data: bytes, starts: Sequence[int], i: int, n: int, first_no: int, off: int,
                      hits: list[tuple[int, int]], n_hit_lines: int, secrets: list[int], rules: tuple, ref: datetime,
                      fb: Callable[[], datetime]) -> Iterator[LogBatch]:
        lines = [""] * n
        total = len(starts)
        last = len(data)
        core_now = self.prefilter_now or ref

        def text(j: int) -> str:
            t = lines[j]
            if not t:
                k = i + j
                t = data[starts[k] - off: (starts[k + 1] - off - 1) if k + 1 < total else last].decode("utf-8")
                lines[j] = t
            return t

        # The core reads matched lines and the context before them (`anchors`: line -> lines before it
        # read whatever their times). Secret-marked lines are decoded to be masked.
        # (`n_hit_lines`: how many distinct lines `hits` are on)
        anchors: dict[int, int] = {}
        bstart = starts[i] - off
        bend = starts[i + n] - off - 1 if i + n < total else last
        # A batch where most lines are anchors or secret-marked (metric and progress lines) is decoded
        # whole, in one call: cheaper than a line at a time and than finding, per match, the stamped
        # line its time comes from. Every line decoded is a superset of what the core reads (it reads
        # the same text). A whole batch needs no anchors (nothing is decoded around them): when it has no
        # secret-marked line its hits' line count decides, without a pass over its hits.
        whole = not secrets and n_hit_lines >= DENSE_BATCH_MIN_SHARE * n
        if not whole:
            for j, rid in hits:
                anchors[j] = max(anchors.get(j, 0), ingest.lines_before_match(rules[rid]))
            whole = len(anchors.keys() | secrets) >= DENSE_BATCH_MIN_SHARE * n
        if whole:
            lines = data[bstart:bend].decode("utf-8").split("\n")
        else:
            for j in range(max(0, n - TAIL_LINES), n):
                text(j)
            for j in anchors:
                text(j)
            for j in secrets:
                text(j)
        marked = [lines[j] for j in secrets]
        changed = self.redactor.redact_block(b"", lines, secrets) if secrets else 0
        trunc = 0
        if changed:
            for j, old in zip(secrets, marked, strict=True):
                if lines[j] == old:
                    continue
                # A mask can make a line match a rule (a traceback's, say) that its bytes did not: a
                # line the mask changed gets the context of any match. A marked line the mask left
                # alone is what its bytes were, matched or not as scanned: nothing more to read
                # (markers also fire on ordinary text, e.g. a colour code after the word "token").
                anchors[j] = ingest.TRACEBACK_LOOKBACK_LINES
                if len(lines[j]) > MAX_LINE_CHARS:  # a mask can be longer than the secret it hides
                    lines[j] = lines[j][:MAX_LINE_CHARS]
                    trunc += 1
        else:
            # every line is its bytes as decoded (or "", and those have no hit): the core's scan of
            # this batch would find exactly these hits, so it takes them instead of scanning again
            assert self.prefilter is not None
            self.prefilter.hand_hits(lines, hits)
        if whole:
            pass
        elif self.last_time is None:
            # before the file's first timestamp the batch takes its last stamped line, wherever it
            # is (`_batch_time` looks at every line then): decode back to it (secret lines among
            # them are decoded and masked already)
            for j in range(n - 1, -1, -1):
                if line_timestamp(text(j), ref) is not None:
                    break
        for j, before in ({} if whole else anchors).items():
            for k in range(max(0, j - before), j):
                text(k)
            # back to the nearest line with its own timestamp, as the core's time lookback goes
            for k in range(j, max(j - ingest.TIME_LOOKBACK_LINES, -1), -1):
                if line_timestamp(text(k), core_now) is not None:
                    break
        self.lines_decoded += n if whole else n - lines.count("")
        self.lines_read += n
        self.bytes_read += bend - bstart + 1
        self.truncated_lines += trunc
        fields = dict(lines=lines, offsets=list(starts[i:i + n]), first_line_no=first_no + i, truncated_lines=trunc,
                      invalid_utf8_lines=0, _fits=True)  # no line was longer in bytes; masked ones were cut above
        yield from self._emit(fields, ref, fb)

    def read_utf8(self, *, final: bool, ref_time: datetime,
                  fallback_time: datetime | Callable[[], datetime]) -> Iterator[tuple[LogBatch, bytes | None]]:
        """`read`, each batch with ``"\\n".join(batch.lines).encode()`` when the reader still has
        those bytes (no line was redacted, cut or had invalid UTF-8), else None; no line of a
        batch holds a newline. Saves a classifier the join and encode (`Classifier.scan(lines, data)`)."""
        self._keep_utf8 = True
        for batch in self.read(final=final, ref_time=ref_time, fallback_time=fallback_time):
            lines, block = self._last_utf8
            self._last_utf8 = (None, None)
            yield batch, (block if lines is batch.lines else None)


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

class FirstStampAfter:
    """The fallback time of a rotated file with no timestamp of its own before its end: the first
    timestamp in the newer rotations of the same log (read from their heads, as many lines as a
    reader holds back), else `default`. A reader calls it only for a file with no stamp before its end; the
    worker-pool opener evaluates it in the parent before handing the reader out."""

    def __init__(self, later: list[Path], ref_time: datetime, default: datetime) -> None:
        self.later, self.ref_time, self.default = later, ref_time, default

    def __call__(self) -> datetime:
        left = MAX_HELD_LINES
        for path in self.later:
            lines = head_lines(path, left, MAX_HELD_LINES * 1024)
            for raw in lines:
                t = line_timestamp(raw[:MAX_LINE_BYTES].decode("utf-8", "replace"), self.ref_time)
                if t is not None:
                    return t
            left -= len(lines)
            if left <= 0:
                break
        return self.default
