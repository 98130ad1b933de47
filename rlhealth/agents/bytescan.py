"""Byte-level passes over blocks of log lines, each with a native fast path.

The C versions (rlhealth/_native/, built by `pip install` when a compiler is present)
do one memchr-driven pass and allocate nothing per line; the Python versions here give identical
results (tests hold the two equal on fuzzed input) and are used when the extension is missing.
`NATIVE` says which are in use; ``RLHEALTH_NATIVE=0`` in the environment forces the Python ones.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from itertools import accumulate
from operator import add
from types import ModuleType
from typing import Any

__all__ = ["ANSI_PATTERN", "HitSink", "HitSinkPy", "NATIVE", "VLLM_V1_BEFORE", "VLLM_V1_EXTRACT", "count_newlines",
           "fields_batch", "fields_batch_vllm_v1", "fields_of", "hit_lines", "line_starts", "native_function",
           "strip_ansi_bytes", "utf8_valid", "count_newlines_py", "fields_batch_py", "fields_of_py", "hit_lines_py",
           "line_starts_py", "number_of_py", "split_hits_py", "strip_ansi_bytes_py", "utf8_valid_py"]

# CSI sequences (colours, cursor moves), OSC sequences (hyperlinks/titles) and two-byte escapes.
# The ESC is factored out (a literal prefix the regex engine searches for) and the SGR colour shape
# comes first: the same matches as ``\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)|
# \x1b[@-Z\\-_]`` (an SGR sequence is a CSI sequence, and the CSI branch matches exactly its bytes).
ANSI_PATTERN = r"\x1b(?:\[[0-9;]*m|\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)|[@-Z\\-_])"
_ANSI_SPLIT_B = re.compile(ANSI_PATTERN.encode("ascii")).split


def strip_ansi_bytes_py(b: bytes) -> bytes:
    """Remove ANSI escape sequences from bytes (never removes a newline)."""
    if b"\x1b" not in b:
        return b
    # join(split) == sub("") for a pattern without groups that never matches empty
    return b"".join(_ANSI_SPLIT_B(b))


def line_starts_py(data: bytes, base: int) -> tuple[list[int], int]:
    parts = data.split(b"\n")
    lens = list(map(len, parts))
    return list(map(add, accumulate(lens, initial=base), range(len(parts)))), max(lens)


def utf8_valid_py(data: bytes) -> bool:
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def count_newlines_py(data: bytes) -> int:
    return data.count(b"\n")


def fields_of_py(values: tuple[str | None, ...], plan: tuple[tuple[str, int, int], ...],
                 convert: Callable[[str], object], convert_size: Callable[[str, str], object],
                 defaults: dict[str, object] | None) -> dict[str, object]:
    """The fields dict of one matched line from its regex groups (not a byte pass, but per matched
    line of dense logs: its C twin saves most of the extraction). `plan`: (name, index into `values`,
    how) per field in the rule's order; how 0 keeps the text, 1 calls convert_size(name, value),
    2 converts (ASCII digits -> int, ASCII digits with one '.' -> float, else convert(value)). A value
    that is None or missing is left out; then the missing `defaults` are added in order."""
    out: dict[str, object] = {}
    n = len(values)
    for name, i, how in plan:
        v = values[i] if 0 <= i < n else None
        if v is None:
            continue
        if how == 0:
            out[name] = v
        elif how == 1:
            out[name] = convert_size(name, v)
        elif v.isascii() and v.isdigit():
            out[name] = int(v)
        elif v.isascii() and v.count(".") == 1 and len(v) > 1 and v.replace(".", "").isdigit():
            out[name] = float(v)
        else:
            out[name] = convert(v)
    if defaults:
        for k, d in defaults.items():
            out.setdefault(k, d)
    return out


def number_of_py(s: str) -> int | float | None:
    """What fields_of makes of a field with how 2 when it is ASCII digits (int) or ASCII digits with one
    '.' (float), else None: the twin of the C helper's number_of (its conversion without a copy)."""
    if s.isascii() and s.isdigit():
        return int(s)
    if s.isascii() and s.count(".") == 1 and len(s) > 1 and s.replace(".", "").isdigit():
        return float(s)
    return None


def fields_batch_py(texts: list[str], search: Callable[[str], re.Match[str] | None],
                    before: Callable[[str, int, int], re.Match[str] | None] | None, before_chars: int,
                    plan: tuple[tuple[str, int, int], ...], convert: Callable[[str], object],
                    convert_size: Callable[[str, str], object], defaults: dict[str, object] | None,
                    empty: dict[str, object]) -> list[dict[str, object]]:
    """`fields_of` for each of `texts`, the lines one rule matched (ANSI-stripped): one `search` per line; no
    match gives a copy of `empty`; else its groups, then, when `before` finds text ending where the match
    starts (searched from `before_chars` characters back), that match's groups too. Its C twin saves the
    loop's ~1 us a line."""
    out = []
    for text in texts:
        m = search(text)
        if m is None:
            out.append(dict(empty))
            continue
        values = m.groups()
        if before is not None:
            start = m.start()
            b = before(text, max(0, start - before_chars), start)
            if b is not None:
                values += b.groups()
        out.append(fields_of(values, plan, convert, convert_size, defaults))
    return out


# RLHEALTH_NATIVE=0 forces the Python versions (tests run the whole probe that way too).
_native: ModuleType | None = None
if os.environ.get("RLHEALTH_NATIVE", "1") != "0":
    try:
        from rlhealth import _fastlines as _native
    except ImportError:  # pragma: no cover - built without a C compiler
        _native = None

NATIVE = _native is not None


def hit_lines_py(raw: list[tuple[int, int]], block: bytes) -> list[tuple[int, int]]:
    """The sorted unique (line, rule) pairs of hyperscan's (end offset, rule) matches in a block of lines
    (`raw` sorted by end offset: the newlines are counted incrementally)."""
    hits: set[tuple[int, int]] = set()
    line = pos = 0
    for to, rid in raw:
        if to < pos:
            line = pos = 0
        line += block.count(b"\n", pos, to)
        pos = to
        hits.add((line, rid))
    return sorted(hits)


def split_hits_py(hits: list[tuple[int, int]], size: int) -> list[tuple[list[tuple[int, int]], int]]:
    """Sorted (line, rule) pairs of a block split into batches of `size` lines: per batch, its pairs with
    lines counted from the batch's first, and how many distinct lines they are on. The list ends at the
    last batch with a pair."""
    if size < 1:
        raise ValueError("size must be positive")
    out: list[tuple[list[tuple[int, int]], int]] = []
    cur: list[tuple[int, int]] = []
    lines = 0
    prev = -1
    for line, rid in hits:
        batch = line // size
        while len(out) < batch:
            out.append((cur, lines))
            cur, lines = [], 0
        if line != prev:
            lines += 1
            prev = line
        cur.append((line - batch * size, rid))
    if hits:
        out.append((cur, lines))
    return out


class HitSinkPy:
    """A Hyperscan match handler recording (end, rule) of each match, and what a reader wants of them: the
    C helper's `HitSink` gives the same (rlhealth/_native/hitsink.c)."""

    __slots__ = ("raw",)

    def __init__(self) -> None:
        self.raw: list[tuple[int, int]] = []

    def __call__(self, id_: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
        self.raw.append((to, id_))

    def clear(self) -> None:
        self.raw = []

    def take(self, block: bytes, size: int) -> list[tuple[list[tuple[int, int]], int]]:
        """The recorded matches of `block` (every end within it) as `hit_lines_py` pairs split into batches of
        `size` lines (`split_hits_py`); forgets them."""
        raw, self.raw = self.raw, []
        if size < 1:
            raise ValueError("take() size must be positive")
        if any(to > len(block) for to, _ in raw):
            raise ValueError("take() match end outside the block")
        raw.sort()
        return split_hits_py(hit_lines_py(raw, block), size)


# The vLLM V1 stats rule's extract and extract_before (rules/packs/vllm.toml, vllm.v1_stats): the C helper
# scans those lines by hand (fields_batch_vllm_v1, held equal to fields_batch_py in tests/test_bytescan.py);
# a rule with any other pair goes through fields_batch.
VLLM_V1_EXTRACT = (
    r"Avg prompt throughput: (?P<prompt_tokens_per_s>[0-9.]+) tokens/s, Avg generation throughput: "
    r"(?P<generation_tokens_per_s>[0-9.]+) tokens/s, Running: (?P<running>\d+) reqs, Waiting: (?P<waiting>\d+) reqs"
    r"(?:, Deferred: (?P<deferred>\d+) reqs)?(?:, KV fetch: (?P<kv_fetch_waiting>\d+) waiting to start, "
    r"(?P<kv_fetch_in_progress>\d+) in progress, (?P<kv_fetch_completed>\d+) completed waiting)?"
    r"(?:, Preemptions: (?P<preemptions>\d+))?(?:, (?P<kv_device>[A-Z]+) KV cache usage: (?P<kv_cache_pct>[0-9.]+)%)?"
    r"(?:, Prefix cache hit rate: (?P<prefix_cache_hit_pct>[0-9.]+)%)?")
VLLM_V1_BEFORE = r"(?P<engine>Engine \d+|\d+ Engines Aggregated): "


def native_function(name: str) -> Callable[..., Any] | None:
    """The C helper's function `name`, or None (RLHEALTH_NATIVE=0, no helper, or a stale build without it):
    for passes whose Python twin lives next to its caller."""
    return getattr(_native, name, None) if _native is not None else None

if _native is not None:
    # the C functions (typed in rlhealth/_fastlines.pyi), under the types of their Python twins
    strip_ansi_bytes: Callable[[bytes], bytes] = _native.strip_ansi
    utf8_valid: Callable[[bytes], bool] = _native.utf8_valid
    count_newlines: Callable[[bytes], int] = _native.count_newlines
    _native_line_starts: Callable[[bytes, int], tuple[bytes, int]] = _native.line_starts
    # a helper built from older rlhealth/_native sources (a stale in-place build) lacks fields_of: use the twin
    fields_of: Callable[[tuple[str | None, ...], tuple[tuple[str, int, int], ...], Callable[[str], object],
                         Callable[[str, str], object], dict[str, object] | None], dict[str, object]] = getattr(
        _native, "fields_of", fields_of_py)
    fields_batch: Callable[..., list[dict[str, object]]] = getattr(_native, "fields_batch", fields_batch_py)
    hit_lines: Callable[[list[tuple[int, int]], bytes], list[tuple[int, int]]] = getattr(_native, "hit_lines",
                                                                                       hit_lines_py)
    fields_batch_vllm_v1: Callable[..., list[dict[str, object]]] = getattr(_native, "fields_batch_vllm_v1",
                                                                           fields_batch)
    HitSink: type[HitSinkPy] = getattr(_native, "HitSink", HitSinkPy)

    def line_starts(data: bytes, base: int) -> tuple[Sequence[int], int]:
        """(base + the start offset of every line of ``data.split(b"\\n")``, the longest line's
        length in bytes)."""
        raw, longest = _native_line_starts(data, base)
        return memoryview(raw).cast("q"), longest
else:  # pragma: no cover
    strip_ansi_bytes = strip_ansi_bytes_py
    utf8_valid = utf8_valid_py
    count_newlines = count_newlines_py
    line_starts = line_starts_py
    fields_of = fields_of_py
    fields_batch = fields_batch_py
    fields_batch_vllm_v1 = fields_batch_py
    hit_lines = hit_lines_py
    HitSink = HitSinkPy
