"""Names of rotated log files: the name a file had before rotation and compression. Pure string work,
shared by the readers (which group a log's rotations) and the core (which treats a rotation's stream as
the same log)."""

from __future__ import annotations

import re

# The codecs rlhealth reads (rlhealth.sources.compressed holds their decompressors).
CODEC_SUFFIXES = (".gz", ".bz2", ".xz")
# What rotation appends: a generation number, or a date (logrotate dateext, kubelet), then a codec.
_ROTATION_RE = re.compile(r"[.-](?:\d{1,4}|\d{8}(?:-\d{6})?)$")


def codec_suffix(name: str) -> str | None:
    """".gz", ".bz2" or ".xz" when the file is compressed with a codec rlhealth reads, else None."""
    for suffix in CODEC_SUFFIXES:
        if name.endswith(suffix):
            return suffix
    return None


def rotation(name: str) -> tuple[str, str | None]:
    """(the name before rotation and compression, the rotation's mark: a generation or a date, None
    for the live file). A trailing number is a rotation only when what is left still has an extension."""
    suffix = codec_suffix(name)
    if suffix is not None:
        name = name[: -len(suffix)]
    m = _ROTATION_RE.search(name)
    if m is None or "." not in name[: m.start()]:
        return name, None
    return name[: m.start()], m.group(0)[1:]


def unrotated_name(name: str) -> str:
    """The file's name before rotation and compression: `123.out.1` -> `123.out`,
    `pod_rank0.log.2.gz` -> `pod_rank0.log`, `0.log.20261201-101500.gz` -> `0.log`; `123.out` and
    `worker-7.log` keep theirs. A path keeps its folders."""
    head, sep, base = name.rpartition("/")
    return head + sep + rotation(base)[0]
