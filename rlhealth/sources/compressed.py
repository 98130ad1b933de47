"""Rotated log files: their names, and reading the compressed ones.

Log rotation leaves a file's older lines beside it under another name: logrotate's `x.log.1` and
`x.log.2.gz` (or `x.log-20261201.gz` with `dateext`), the kubelet's `0.log.20261201-101500.gz`.
A capture pulled from a node holds them all, and the older ones often hold the crash of an earlier
attempt. `unrotated_name` gives the name the file had before rotation, so what the name says (a rank,
a SLURM leg, a dmesg host) survives rotation; `decompress_to` unpacks a compressed one (stdlib codecs:
gzip, bzip2, xz) into a plain file the ordinary reader can read, bounded in size.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rlhealth.agents.lognames import CODEC_SUFFIXES, codec_suffix, rotation, unrotated_name

_CODECS: dict[str, Callable[[], Any]] = {
    ".gz": lambda: zlib.decompressobj(wbits=31),  # a gzip member
    ".bz2": bz2.BZ2Decompressor,
    ".xz": lzma.LZMADecompressor,
}
# Compressed forms rlhealth cannot read with the standard library, and archives (many files in one).
assert tuple(_CODECS) == CODEC_SUFFIXES
UNREADABLE_SUFFIXES = (".zst", ".lz4", ".zip", ".tar", ".tgz", ".7z")
_IN_CHUNK_BYTES = 64 << 10


UNREADABLE_NOTE = "archive or codec rlhealth does not read (it reads .gz, .bz2, .xz); unpack it into the capture"


def is_packed(name: str) -> bool:
    """Compressed or archived: not readable as text as it is."""
    return codec_suffix(name) is not None or name.endswith(UNREADABLE_SUFFIXES)


def _age_key(name: str) -> tuple[int, str, int]:
    """Oldest first: `x.log.3.gz`, `x.log.2`, `x.log.1`, then `x.log`; dated rotations by date."""
    mark = rotation(name)[1]
    if mark is None:
        return (1, "", 0)  # the live file
    return (0, mark, 0) if len(mark) >= 8 else (0, "", -int(mark))


def rotation_groups(files: list[tuple[Path, str]]) -> list[list[tuple[Path, str]]]:
    """(path, name relative to the capture) pairs grouped by the log they rotated from, each group
    oldest first; groups in the order of their first file."""
    groups: dict[tuple[Path, str], list[tuple[Path, str]]] = {}
    for path, rel in files:
        groups.setdefault((path.parent, unrotated_name(path.name)), []).append((path, rel))
    return [sorted(g, key=lambda pr: _age_key(pr[0].name)) for g in groups.values()]


@dataclass(frozen=True)
class Decompressed:
    path: Path
    bytes_written: int
    problem: Literal["truncated", "unreadable"] | None = None  # what went wrong, with what was read kept
    note: str = ""


def decompress_to(src: Path, dest: Path, *, max_bytes: int) -> Decompressed:
    """Unpack `src` into `dest`, at most `max_bytes` of it (a decompression bomb stops there).

    A stream cut short (a rotation pulled while it was being written) keeps everything before the
    cut and says "truncated"; a file that is not in its codec's format says "unreadable"."""
    suffix = codec_suffix(src.name)
    if suffix is None:
        raise ValueError(f"not a compressed log: {src.name}")
    new = _CODECS[suffix]
    d = new()
    written = 0
    problem: Literal["truncated", "unreadable"] | None = None
    note = ""
    # Small compressed reads bound memory: one read cannot expand past ~1,000x its size.
    with open(src, "rb") as fin, open(dest, "wb") as fout:
        try:
            while True:
                chunk = fin.read(_IN_CHUNK_BYTES)
                if not chunk:
                    if not d.eof:
                        problem, note = "truncated", "compressed stream ends early: read up to the cut"
                    break
                while chunk:
                    out = d.decompress(chunk)
                    room = max_bytes - written
                    fout.write(out[:room])
                    written += min(len(out), room)
                    if len(out) > room:
                        problem, note = "truncated", f"decompressed size over {max_bytes} bytes: the rest not read"
                        return Decompressed(dest, written, problem, note)
                    # concatenated members or streams (`cat a.gz b.gz`, pigz, pbzip2) continue in a new one
                    chunk = d.unused_data if d.eof else b""
                    if chunk.strip(b"\x00"):
                        d = new()
                    else:
                        chunk = b""  # the zero padding some writers leave after the last member
        except (OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
            problem = "truncated" if written else "unreadable"
            note = f"{suffix[1:]} data damaged after {written} bytes: {str(exc)[:120]}"
    return Decompressed(dest, written, problem, note)


def unpack_log(src: Path, dest: Path, *, max_bytes: int) -> Decompressed:
    """`decompress_to` for a log reader: an archive, a codec rlhealth does not read, or a file that cannot
    be opened comes back as an "unreadable" problem with nothing written, never as an exception."""
    if codec_suffix(src.name) is None:
        return Decompressed(dest, 0, "unreadable", UNREADABLE_NOTE)
    try:
        return decompress_to(src, dest, max_bytes=max_bytes)
    except OSError as exc:
        return Decompressed(dest, 0, "unreadable", f"cannot unpack: {str(exc)[:200]}")


def head_lines(path: Path, max_lines: int, max_bytes: int) -> list[bytes]:
    """The first `max_lines` lines of a log, plain or compressed (at most `max_bytes` of it read or
    unpacked, per call as well: a bomb stops there); [] when it cannot be read."""
    suffix = codec_suffix(path.name)
    if suffix is None and path.name.endswith(UNREADABLE_SUFFIXES):
        return []
    d = _CODECS[suffix]() if suffix is not None else None
    data = bytearray()
    newlines = 0
    try:
        with open(path, "rb") as fin:
            while len(data) < max_bytes and newlines < max_lines:
                chunk = fin.read(_IN_CHUNK_BYTES)
                if not chunk:
                    break
                out = d.decompress(chunk, max_bytes - len(data)) if d is not None else chunk
                newlines += out.count(b"\n")
                data += out
                if d is not None and d.eof:
                    break
    except (OSError, EOFError, zlib.error, lzma.LZMAError, ValueError):
        pass
    return bytes(data).split(b"\n")[:max_lines]
