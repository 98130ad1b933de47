"""An on-disk FIFO of produced records for when the broker cannot take them (the shipper's disk buffer).

    spool = Spool(dir, max_bytes=256 << 20)
    spool.append(records)               # returns the records that did not fit (the caller counts them)
    batch = spool.peek(max_bytes=...)   # oldest first, as (record, position after it)
    spool.advance(batch[k][1])          # records up to k were acknowledged: forget them

Records live in segment files (`<n>.seg`, rolled at `SEGMENT_BYTES`), each record framed with its
length and a CRC32, so a torn last record (a crash mid-write) is found and cut on open. The read
position is kept in `head.json` (replaced atomically). `append` fsyncs before it returns: a record
in the spool survives a crash, which is what lets the shipper advance its file checkpoints.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

SEGMENT_BYTES = 16 << 20
_HDR = struct.Struct(">IIHHI")  # crc32, value length, topic length, key length (0xFFFF: None), lines
_NO_KEY = 0xFFFF


@dataclass(frozen=True)
class Record:
    topic: str
    key: bytes | None
    value: bytes
    lines: int = 0  # log lines this record carries (what a drop loses)

    def size(self) -> int:
        return _HDR.size + len(self.topic.encode()) + len(self.key or b"") + len(self.value)


Position = tuple[int, int]  # (segment number, byte offset in it)


def _frame(r: Record) -> bytes:
    topic = r.topic.encode()
    key = r.key if r.key is not None else b""
    body = topic + key + r.value
    crc = zlib.crc32(body) & 0xFFFFFFFF
    return _HDR.pack(crc, len(r.value), len(topic), _NO_KEY if r.key is None else len(key), r.lines) + body


class Spool:
    def __init__(self, directory: Path | str, max_bytes: int) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.head: Position = (0, 0)
        hp = self.dir / "head.json"
        if hp.exists():
            obj = json.loads(hp.read_text())
            self.head = (int(obj["seg"]), int(obj["pos"]))
        segs = self._segments()
        if segs and self.head[0] < segs[0]:
            self.head = (segs[0], 0)
        self.tail_seg = segs[-1] if segs else self.head[0]
        if segs:
            self._repair(segs[-1])
        self.bytes_written = 0
        self.records_written = 0

    def _seg_path(self, n: int) -> Path:
        return self.dir / f"{n:012d}.seg"

    def _segments(self) -> list[int]:
        return sorted(int(p.name[:-4]) for p in self.dir.glob("*.seg") if p.name[:-4].isdigit())

    def _repair(self, n: int) -> None:
        """Cut a torn record at the end of the last segment."""
        p = self._seg_path(n)
        data = p.read_bytes()
        pos = 0
        while pos + _HDR.size <= len(data):
            end = self._record_end(data, pos)
            if end is None:
                break
            pos = end
        if pos != len(data):
            with open(p, "r+b") as f:
                f.truncate(pos)

    @staticmethod
    def _record_end(data: bytes, pos: int) -> int | None:
        if pos + _HDR.size > len(data):
            return None
        crc, vlen, tlen, klen, _lines = _HDR.unpack_from(data, pos)
        end = pos + _HDR.size + tlen + (0 if klen == _NO_KEY else klen) + vlen
        if end > len(data) or zlib.crc32(data[pos + _HDR.size:end]) & 0xFFFFFFFF != crc:
            return None
        return end

    def size(self) -> int:
        """Bytes of records not yet acknowledged."""
        total = 0
        for n in self._segments():
            try:
                total += self._seg_path(n).stat().st_size
            except OSError:
                pass
        if self._seg_path(self.head[0]).exists():
            total -= self.head[1]
        return max(0, total)

    def __bool__(self) -> bool:
        return self.size() > 0

    def append(self, records: list[Record]) -> list[Record]:
        """Append what fits under `max_bytes` (in order; once one does not fit, neither do the later
        ones of this call), fsync, and return the records that were not written."""
        if not records:
            return []
        room = self.max_bytes - self.size()
        frames: list[bytes] = []
        for i, r in enumerate(records):
            f = _frame(r)
            if len(f) > room:
                rejected = records[i:]
                break
            room -= len(f)
            frames.append(f)
        else:
            rejected = []
        if frames:
            p = self._seg_path(self.tail_seg)
            if p.exists() and p.stat().st_size >= SEGMENT_BYTES:
                self.tail_seg += 1
                p = self._seg_path(self.tail_seg)
            with open(p, "ab") as fh:
                for f in frames:
                    fh.write(f)
                fh.flush()
                os.fsync(fh.fileno())
            self.bytes_written += sum(map(len, frames))
            self.records_written += len(frames)
        return rejected

    def peek(self, max_bytes: int = 4 << 20, max_records: int = 1000) -> list[tuple[Record, Position]]:
        """The oldest records (at least one when the spool is not empty), with the position after each."""
        out: list[tuple[Record, Position]] = []
        seg, pos = self.head
        used = 0
        segs = [n for n in self._segments() if n >= seg]
        for n in segs:
            if n != seg:
                pos = 0
            try:
                with open(self._seg_path(n), "rb") as f:
                    f.seek(pos)
                    data = f.read()  # a segment is at most SEGMENT_BYTES + one batch
            except OSError:
                continue
            at = 0
            while at < len(data) and len(out) < max_records and (used < max_bytes or not out):
                end = self._record_end(data, at)
                if end is None:
                    break
                crc, vlen, tlen, klen, lines = _HDR.unpack_from(data, at)
                b = at + _HDR.size
                topic = data[b:b + tlen].decode()
                b += tlen
                key = None if klen == _NO_KEY else data[b:b + klen]
                b += 0 if klen == _NO_KEY else klen
                out.append((Record(topic, key, data[b:b + vlen], lines), (n, pos + end)))
                used += end - at
                at = end
            if len(out) >= max_records or used >= max_bytes:
                break
        return out

    def skip_unreadable(self) -> int:
        """The record at the head cannot be read (corrupt in the middle of a segment): skip the rest
        of that segment. Returns the bytes skipped (the caller counts them)."""
        seg, pos = self.head
        p = self._seg_path(seg)
        size = p.stat().st_size if p.exists() else 0
        self.advance((seg, max(size, pos)))
        if self.head[0] == seg and seg < self.tail_seg:
            self.advance((seg + 1, 0))
        return max(0, size - pos)

    def advance(self, to: Position) -> None:
        """Records before `to` were acknowledged: move the head there and delete finished segments."""
        self.head = to
        for n in self._segments():
            if n < to[0] or (n == to[0] and n != self.tail_seg and self._seg_path(n).stat().st_size <= to[1]):
                self._seg_path(n).unlink(missing_ok=True)
        if not self._seg_path(self.head[0]).exists() and self.head[0] < self.tail_seg:
            self.head = (self.head[0] + 1, 0)
        if self.head[0] == self.tail_seg and self._seg_path(self.tail_seg).exists() \
                and self._seg_path(self.tail_seg).stat().st_size <= self.head[1]:
            # everything read: start a fresh segment so the spool does not grow without bound
            self._seg_path(self.tail_seg).unlink()
            self.tail_seg += 1
            self.head = (self.tail_seg, 0)
        hp = self.dir / "head.json"
        tmp = hp.with_suffix(".tmp")
        tmp.write_text(json.dumps({"seg": self.head[0], "pos": self.head[1]}))
        os.replace(tmp, hp)


__all__ = ["Position", "Record", "Spool"]
