"""Log files of a live job folder -> `LogBatch`es, with per-file checkpoints and rotation handling.

This is the log part of `rlhealth ship` (the capture reader and `watch` keep their simpler
followers). How it keeps "nothing lost, nothing twice":

* **identity**: a file is (device, inode, fingerprint of its first `FP_BYTES` bytes). A file
  found under a new name with the same identity is the same file (a rename rotation): it keeps
  its stream name and its offset, so `app.log.1` is never shipped again. A new file at an old
  inode (fingerprint differs) is a new file.
* **checkpoints**: `CheckpointStore` keeps every tracked file (identity, stream, offset of the
  first byte not yet delivered, line number) in an atomic JSON file under the state directory.
  `LogFollower.poll()` returns batches with the positions they reach (`Mark`s); the caller
  commits the marks only once the batches were acknowledged by Kafka (or written to the durable
  spool). A restart resumes every file at its committed offset; when a delivery failed,
  `rewind()` resumes at the committed offsets in this process too.
* **rotation**: files are read oldest-tracked first, so a renamed file is read to its end
  before the new file at its old name. A file whose size fell below its offset, or whose first
  bytes changed, was truncated (copytruncate): a new file named like a rotation of it
  (`app.log.1`, `app.log-20260101`) that starts with the same bytes is its copy, and the copy is
  read from the old offset to its end (the lines written between the copy and the truncate are
  recovered); without a copy, the bytes not yet read are counted as lost. Such a copy is never
  shipped from its start. Compressed rotations (`.gz`, ...) are skipped. A descriptor is held on
  every file being read, so a rotated file compressed and deleted before its tail was read is
  still read to its end (through ``/proc/self/fd``).
* **safety**: only regular files are read (FIFOs, sockets and devices are skipped with a note,
  and never opened); a symlink is followed only when it resolves inside the job folder.
* **bounded**: one poll reads at most `max_bytes` in total; `more` says a backlog remains.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from rlhealth.schemas.events import LogBatch
from rlhealth.sources.logfiles import CHUNK_BYTES, LogReader, slurm_leg_order, source_for

FP_BYTES = 1024
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".zip", ".tar", ".lz4")
ROTATION_SEPARATORS = (".", "-", "_")
CHECKPOINT_FILE = "checkpoints.json"
MAX_HELD_FILES = 512  # descriptors held on tracked files (a deleted file is read to its end through one)


def fingerprint(path: Path | str, length: int = FP_BYTES) -> tuple[str, int]:
    """(sha1 hex of the first `length` bytes, how many bytes that covers)."""
    with open(path, "rb") as f:
        head = f.read(length)
    return hashlib.sha1(head).hexdigest(), len(head)


@dataclass
class FileCheckpoint:
    """One tracked file. `offset`/`line_no`: the first byte/line not yet delivered."""

    fid: str  # stable id: "<dev>:<ino>:<first fingerprint>" when first seen
    stream: str  # the name batches carry (the path relative to the job folder when first seen)
    path: str  # where the file is now (relative to the job folder)
    dev: int
    ino: int
    fp: str
    fp_len: int
    offset: int = 0
    line_no: int = 0
    skipping: bool = False  # the offset lies inside a giant line whose head was shipped
    size: int = 0  # size at the last look
    seq: int = 0  # order of first sight: older files are read first
    copy_of: str | None = None  # a copytruncate copy: read from `offset` only once its source is truncated
    gen: int = 0  # truncations seen: batches carry file_id "<fid>#<gen>" (line numbers restart at 0)
    done: bool = False  # fully read and no longer written (a finished copy)


@dataclass(frozen=True)
class Mark:
    """Where a file's delivered position will be once the batches before this mark are acknowledged."""

    fid: str
    offset: int
    line_no: int
    skipping: bool


@dataclass
class LogCounters:
    lines_read: int = 0
    bytes_read: int = 0
    files_rotated: int = 0
    files_truncated: int = 0
    copy_recovered_bytes: int = 0
    lost_bytes: int = 0  # truncated or deleted before they were read (counted, never silent)
    lines_cut: int = 0  # lines longer than MAX_LINE_CHARS, cut with their head kept
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> files skipped


class CheckpointStore:
    """Tracked files in `<state_dir>/checkpoints.json`, replaced atomically (write, fsync, rename)."""

    def __init__(self, state_dir: Path | str | None) -> None:
        self.dir = Path(state_dir) if state_dir is not None else None
        self.files: dict[str, FileCheckpoint] = {}
        self.extra: dict[str, int] = {}
        # what the other sources already delivered (FolderShipper): newest event time per GPU host /
        # state stream, and "trial:phase" keys (a restart re-reads those sources from their start)
        self.watermarks: dict[str, float] = {}
        self.trials: dict[str, None] = {}
        self.writes = 0
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            p = self.dir / CHECKPOINT_FILE
            if p.exists():
                obj = json.loads(p.read_text())
                for d in obj.get("files", []):
                    cp = FileCheckpoint(**d)
                    self.files[cp.fid] = cp
                self.extra = {str(k): int(v) for k, v in obj.get("extra", {}).items()}
                self.watermarks = {str(k): float(v) for k, v in obj.get("watermarks", {}).items()}
                self.trials = dict.fromkeys(str(t) for t in obj.get("trials", []))

    def save(self) -> None:
        self.writes += 1
        if self.dir is None:
            return
        data = json.dumps({"version": 1, "files": [asdict(c) for c in self.files.values()], "extra": self.extra,
                           "watermarks": self.watermarks, "trials": list(self.trials)}, sort_keys=True).encode()
        path = self.dir / CHECKPOINT_FILE
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _is_rotation_name(name: str, of: str) -> bool:
    base = of.rsplit("/", 1)[-1]
    if not name.startswith(base) or name == base:
        return False
    return name[len(base)] in ROTATION_SEPARATORS


@dataclass
class _Found:
    rel: str
    path: Path
    st: os.stat_result
    link: bool = False


class LogFollower:
    """The log files under `<root>/logs` as checkpointed `LogBatch`es (see the module doc)."""

    def __init__(self, root: Path | str, *, job_id: str, store: CheckpointStore, cluster: str | None = None,
                 shipper: str | None = None, batch_lines: int = 500, max_bytes: int = 8 << 20,
                 clock: Callable[[], datetime] | None = None, skip_compressed: bool = True) -> None:
        self.root = Path(root)
        self.real_root = Path(os.path.realpath(self.root))
        self.job_id = job_id
        self.store = store
        self.cluster = cluster
        self.shipper = shipper
        self.batch_lines = batch_lines
        self.max_bytes = max_bytes
        self.clock = clock or (lambda: datetime.now(UTC))
        self.skip_compressed = skip_compressed
        self.counters = LogCounters()
        self.notes: list[tuple[str, str]] = []  # (path, what happened), for the caller to log
        self._noted: set[tuple[str, str]] = set()
        self._readers: dict[str, LogReader] = {}
        self._fds: dict[str, int] = {}  # fid -> a descriptor held on the file
        self._orphans: set[str] = set()  # deleted files read to their end through their descriptor
        self._seq = max((c.seq for c in store.files.values()), default=0)
        self.more = False

    # -- discovery --------------------------------------------------------------------------
    def _note_once(self, rel: str, what: str, reason: str, skipped: bool = True) -> None:
        if (rel, reason) not in self._noted:
            self._noted.add((rel, reason))
            self.notes.append((rel, what))
            if skipped:
                self.counters.skipped[reason] = self.counters.skipped.get(reason, 0) + 1

    def scan(self) -> list[_Found]:
        """Regular files under logs/ (symlinks only when they stay inside the job folder)."""
        logs = self.root / "logs"
        out: list[_Found] = []
        if not logs.is_dir() or logs.is_symlink() and not self._inside(logs):
            return out
        for dirpath, dirnames, filenames in os.walk(logs):  # never descends through a symlinked dir
            dirnames.sort()
            for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
                p = Path(dirpath) / name
                rel = p.relative_to(self.root).as_posix()
                try:
                    lst = os.lstat(p)
                except OSError:
                    continue
                if stat.S_ISLNK(lst.st_mode):
                    if not self._inside(p):
                        self._note_once(rel, "symlink pointing out of the job folder: not followed", "symlink_outside")
                        continue
                    try:
                        st = os.stat(p)
                    except OSError:
                        continue
                else:
                    st = lst
                if stat.S_ISDIR(st.st_mode):
                    continue
                if not stat.S_ISREG(st.st_mode):
                    self._note_once(rel, "not a regular file (FIFO, socket or device): skipped", "not_regular")
                    continue
                if self.skip_compressed and name.endswith(COMPRESSED_SUFFIXES):
                    self._note_once(rel, "compressed rotated log: skipped", "compressed")
                    continue
                out.append(_Found(rel, p, st, stat.S_ISLNK(lst.st_mode)))
        # a file reached by a link inside the folder and by its own name is one file: keep its name
        by_inode: dict[tuple[int, int], _Found] = {}
        for f in out:
            key = (f.st.st_dev, f.st.st_ino)
            if key not in by_inode or by_inode[key].link and not f.link:
                by_inode[key] = f
        return [f for f in out if by_inode[(f.st.st_dev, f.st.st_ino)] is f]

    def _inside(self, p: Path) -> bool:
        real = Path(os.path.realpath(p))
        return real == self.real_root or self.real_root in real.parents

    # -- identity ---------------------------------------------------------------------------
    @staticmethod
    def _same_content(found: _Found, cp: FileCheckpoint) -> bool:
        if found.st.st_size < cp.fp_len:
            return False
        try:
            fp, _n = fingerprint(found.path, cp.fp_len)
        except OSError:
            return False
        return fp == cp.fp

    def _track(self, found: _Found, stream: str, *, offset: int = 0, copy_of: str | None = None) -> FileCheckpoint:
        fp, n = fingerprint(found.path)
        self._seq += 1
        fid = f"{found.st.st_dev}:{found.st.st_ino}:{fp[:12]}"
        while fid in self.store.files:
            fid += "+"
        cp = FileCheckpoint(fid=fid, stream=stream, path=found.rel, dev=found.st.st_dev, ino=found.st.st_ino, fp=fp,
                            fp_len=n, offset=offset, size=found.st.st_size, seq=self._seq, copy_of=copy_of)
        self.store.files[fid] = cp
        return cp

    def _reconcile(self, found: list[_Found]) -> None:
        files = self.store.files
        by_inode: dict[tuple[int, int], list[FileCheckpoint]] = {}
        for cp in files.values():
            by_inode.setdefault((cp.dev, cp.ino), []).append(cp)
        present: set[str] = set()
        new: list[_Found] = []
        truncated: list[FileCheckpoint] = []
        for f in found:
            cands = by_inode.get((f.st.st_dev, f.st.st_ino), [])
            live = [c for c in cands if c.fid not in present]
            match = next((c for c in live if self._same_content(f, c)), None)
            same_path = [c for c in live if c.path == f.rel]
            if match is None and same_path:
                # same inode and name, other first bytes or shorter than our offset: truncated in place
                # (same inode under another name: the inode was reused by a new file)
                match = max(same_path, key=lambda c: c.seq)
                truncated.append(match)
            if match is None:
                new.append(f)
                continue
            present.add(match.fid)
            if match.path != f.rel:
                self.counters.files_rotated += 1
                match.path = f.rel
                r = self._readers.get(match.fid)
                if r is not None:
                    r.tail.path = f.path
            if match not in truncated and f.st.st_size < match.offset:
                truncated.append(match)
            if match not in truncated:
                match.size = f.st.st_size
            if match.fp_len < FP_BYTES and f.st.st_size > match.fp_len and match not in truncated:
                match.fp, match.fp_len = fingerprint(f.path)
        # files that are gone: one we hold open is read to its end through its descriptor (a rotated
        # file compressed and deleted before we read its tail); what was not read is lost
        for cp in list(files.values()):
            if cp.fid in present:
                continue
            fd = self._fds.get(cp.fid)
            if fd is not None and cp.copy_of is None and not cp.done:
                try:
                    cp.size = os.fstat(fd).st_size
                except OSError:
                    cp.size = cp.offset
                if cp.offset < cp.size:
                    if cp.fid not in self._orphans:
                        self._orphans.add(cp.fid)
                        self._readers.pop(cp.fid, None)
                    continue
            if cp.copy_of is None and not cp.done and cp.size > cp.offset:
                self.counters.lost_bytes += cp.size - cp.offset
                self._note_once(cp.path, f"removed with {cp.size - cp.offset} bytes unread", f"gone:{cp.fid}",
                                skipped=False)
            del files[cp.fid]
            self._readers.pop(cp.fid, None)
            self._close_fd(cp.fid)
        # new files: a copy of a tracked file (named like its rotation, same first bytes) is not new
        copies: dict[str, _Found] = {}
        for f in new:
            src = next((c for c in sorted(files.values(), key=lambda c: c.seq)
                        if c.copy_of is None and c.fid not in copies and c.fp_len > 0
                        and _is_rotation_name(f.rel.rsplit("/", 1)[-1], c.path) and self._same_content(f, c)), None)
            if src is not None:
                copies[src.fid] = f
                cp = self._track(f, src.stream, offset=src.offset, copy_of=src.fid)
                cp.line_no = src.line_no
                cp.skipping = src.skipping
            else:
                stream = f.rel
                self._track(f, stream)
        for cp in truncated:
            self.counters.files_truncated += 1
            copy = next((c for c in files.values() if c.copy_of == cp.fid and not c.done), None)
            if copy is not None:
                copy.offset, copy.line_no, copy.skipping = cp.offset, cp.line_no, cp.skipping
                copy.copy_of = None  # now read from the old offset to its end, before the truncated file
                copy.seq, cp.seq = cp.seq, self._next_seq()
                self.counters.copy_recovered_bytes += max(0, copy.size - cp.offset)
            else:
                lost = max(0, cp.size - cp.offset) if cp.size >= cp.offset else 0
                if lost:
                    self.counters.lost_bytes += lost
                self._note_once(cp.path, "truncated in place (copytruncate) with no copy found", f"trunc:{cp.fid}",
                                skipped=False)
            path = self.root / cp.path
            try:
                cp.fp, cp.fp_len = fingerprint(path)
                cp.size = os.stat(path).st_size
            except OSError:
                pass
            cp.offset, cp.line_no, cp.skipping = 0, 0, False
            cp.gen += 1
            self._readers.pop(cp.fid, None)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # -- reading ----------------------------------------------------------------------------
    def _close_fd(self, fid: str) -> None:
        self._orphans.discard(fid)
        fd = self._fds.pop(fid, None)
        if fd is not None:
            os.close(fd)

    def _hold(self, cp: FileCheckpoint) -> None:
        """Keep a descriptor on the file, so that it can be read to its end after a delete."""
        if cp.fid in self._fds or len(self._fds) >= MAX_HELD_FILES:
            return
        try:
            fd = os.open(self.root / cp.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (cp.dev, cp.ino) or not stat.S_ISREG(st.st_mode):
            os.close(fd)
            return
        self._fds[cp.fid] = fd

    def close(self) -> None:
        for fid in list(self._fds):
            self._close_fd(fid)

    def _reader(self, cp: FileCheckpoint, legs: dict[str, int]) -> LogReader:
        r = self._readers.get(cp.fid)
        if r is None:
            src = source_for(cp.stream, cluster=self.cluster, shipper=self.shipper, leg_index=legs)
            if cp.fid in self._orphans:
                path = Path(f"/proc/self/fd/{self._fds[cp.fid]}")
            else:
                self._hold(cp)
                path = self.root / cp.path
            r = LogReader(path, job_id=self.job_id, source=src, batch_lines=self.batch_lines,
                          lookahead=False, chunk_bytes=max(4096, min(CHUNK_BYTES, self.max_bytes)))
            r.tail.offset, r.tail.line_no, r.tail._skipping = cp.offset, cp.line_no, cp.skipping
            r.tail.ino = cp.ino
            self._readers[cp.fid] = r
        return r

    def poll(self) -> list[tuple[LogBatch, Mark | None]]:
        """New batches, each with the mark its file reaches once it (and those before it) are
        delivered (None for all but the last batch of a file in this poll)."""
        now = self.clock()
        self.notes = []
        self._reconcile(self.scan())
        out: list[tuple[LogBatch, Mark | None]] = []
        budget = self.max_bytes
        self.more = False
        legs = slurm_leg_order([c.stream for c in self.store.files.values()])
        for cp in sorted(self.store.files.values(), key=lambda c: c.seq):
            if cp.copy_of is not None or cp.done:
                continue
            if budget <= 0:
                self.more = True
                break
            if cp.size <= cp.offset and cp.fid in self._readers:
                continue
            r = self._reader(cp, legs)
            before_lines, before_bytes, before_cut = r.lines_read, r.tail.offset, r.truncated_lines
            try:
                mtime = datetime.fromtimestamp(os.stat(r.path).st_mtime, UTC)
                # a deleted file will not grow: its last line is complete as it is
                batches = list(r.read(final=cp.fid in self._orphans, ref_time=now, fallback_time=min(mtime, now),
                                      max_bytes=budget))
            except OSError as exc:
                self._note_once(cp.path, f"unreadable: {str(exc)[:200]}", f"unreadable:{cp.fid}", skipped=False)
                self._readers.pop(cp.fid, None)
                continue
            read = r.tail.offset - before_bytes
            budget -= max(read, 1)
            self.more = self.more or r.tail.more
            self.counters.lines_read += r.lines_read - before_lines
            self.counters.bytes_read += read
            self.counters.lines_cut += r.truncated_lines - before_cut
            if not batches:
                continue
            file_id = f"{cp.fid}#{cp.gen}"
            batches = [b.model_copy(update={"file_id": file_id}) for b in batches]
            for b in batches[:-1]:
                out.append((b, None))
            out.append((batches[-1], Mark(cp.fid, r.tail.offset, r.tail.line_no, r.tail._skipping)))
        return out

    def commit(self, marks: list[Mark]) -> None:
        """The batches up to these marks were delivered: advance and persist the checkpoints."""
        for m in marks:
            cp = self.store.files.get(m.fid)
            if cp is None:
                continue
            cp.offset, cp.line_no, cp.skipping = m.offset, m.line_no, m.skipping
        self.store.save()

    def rewind(self) -> None:
        """Forget what was read but not committed: the next poll re-reads from the checkpoints."""
        self._readers.clear()

    def lag_bytes(self) -> int:
        """Bytes written to tracked files and not yet delivered."""
        return sum(max(0, c.size - c.offset) for c in self.store.files.values() if c.copy_of is None and not c.done)


__all__ = ["COMPRESSED_SUFFIXES", "CheckpointStore", "FileCheckpoint", "LogCounters", "LogFollower", "Mark",
           "fingerprint"]
