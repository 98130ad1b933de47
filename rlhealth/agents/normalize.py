"""Log-line normalisation: ANSI stripping, record splitting, prefix peeling, timestamps.

Pure functions (no I/O, no clock). Everything that needs "now" takes a reference time.

Prefixes peeled by :func:`peel_prefixes`, repeatedly from the left (after ANSI stripping):

* iris/kubectl multi-pod prefix ``[pod/<name>/<container>] `` -> ``Prefix("pod/<name>/<container>")``
* a leading RFC 3339 timestamp as written by ``kubectl logs --timestamps`` and the CRI log
  format (``2026-05-12T08:01:39.331095044Z [stdout|stderr F|P ]``) -> removed from the text but
  **not** recorded as a Prefix (its value is returned by :func:`line_timestamp`)
* Ray driver prefixes ``(Name pid=N[, ip=A]) ``, ``(pid=N) ``, ``(raylet[, ip=A]) ``,
  ``(gcs_server…)``, ``(autoscaler +1m2s…)`` and vLLM process prefixes ``(EngineCore_DP0 pid=N) ``
  (same shape) -> ``Prefix(name, pid, ip)``; actor names may contain spaces and one level of
  parentheses (``(MyActor(index=2) pid=4)``)
* torch rank prefixes ``[rank3]: `` (Python excepthook) and ``[rank3]:`` (C++ c10 logger,
  directly followed by ``[E…``) -> ``Prefix("rank3")``; torchrun ``[default0]:`` -> ``Prefix("default0")``

Timestamps: see :func:`line_timestamp`. Naive (zone-less) stamps are interpreted in ``tz``
(default UTC) and returned as aware UTC datetimes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import NamedTuple

from rlhealth.agents.bytescan import ANSI_PATTERN, native_function, strip_ansi_bytes

__all__ = [
    "Prefix",
    "NormalizedLine",
    "strip_ansi",
    "strip_ansi_bytes",
    "split_records",
    "peel_prefixes",
    "line_timestamp",
    "normalize",
    "peel_stripped",
    "peel_and_stamp",
    "peel_and_stamp_batch",
    "peel_and_stamp_batch_py",
    "line_timestamp_seen",
    "timestamp_of_peeled",
    "parse_memo",
    "remember_parse",
]

_ANSI_RE = re.compile(ANSI_PATTERN)
_RECORD_SPLIT_RE = re.compile(r"\r\n|\r|\n")


def strip_ansi(s: str) -> str:
    """Remove ANSI escape sequences (fast path when the line has no ESC)."""
    if "\x1b" not in s:
        return s
    return _ANSI_RE.sub("", s)


def split_records(text: str) -> list[str]:
    """Split on ``\\n``, ``\\r\\n`` and bare ``\\r`` (tqdm updates); drop the empty tail a
    terminating newline leaves behind. Empty lines inside the text are kept."""
    if not text:
        return []
    parts = _RECORD_SPLIT_RE.split(text)
    if parts and parts[-1] == "":
        parts.pop()
    return parts


class Prefix(NamedTuple):
    """A process or pod prefix of a line. A tuple: hashed in C, it keys the per-prefix memos."""

    name: str
    pid: int | None = None
    ip: str | None = None


_POD_RE = re.compile(r"\[(pod/[^\]\s]+)\] ?")
# kubectl --timestamps / CRI: RFC3339(Nano) then optional "stdout F " / "stderr P ".
_K8S_TS_RE = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d) "
    r"(?:(?:stdout|stderr) [FP] )?"
)
_PAREN_PID_RE = re.compile(
    r"\(((?:[^()\n]|\([^()\n]*\))*?) ?pid=(\d+)(?:, ip=([0-9A-Za-z.:\-]+))?\)(?: |$)"
)
# The same match as _PAREN_PID_RE whenever it matches at all (no "(" can occur before its end, so
# the nested-group branch could not have applied); ~5x faster on Ray's "(Actor pid=1, ip=...)".
_PAREN_PID_FLAT_RE = re.compile(
    r"\(([^()\n]*?) ?pid=(\d+)(?:, ip=([0-9A-Za-z.:\-]+))?\)(?: |$)"
)
_PAREN_COMPONENT_RE = re.compile(
    r"\((raylet|gcs_server|runtime_env|autoscaler[^,)\n]*)(?:, ip=([0-9A-Za-z.:\-]+))?\)(?: |$)"
)
_RANK_RE = re.compile(r"\[(rank\d+|default\d+)\]:(?: |(?=\[)|$)")


# Pure-function memos, bounded (cleared when full). A prefiltering log reader parses the
# timestamps of matched lines to know which earlier lines the core will read; the core then
# parses the same lines, with the same reference time in a probe: the second parse is a lookup.
_MEMO_SIZE = 2048
_PEEL_MEMO: dict[str, tuple[tuple[Prefix, ...], str, datetime | None]] = {}
_PAREN_MEMO: dict[str, tuple[Prefix | None, int]] = {}
_PREFIX_MEMO_MAX = 200
_MATCHED_STAMP_MEMO: dict[tuple, datetime | None | object] = {}  # object: _MISS
_STAMP_MEMO: dict[tuple[str, datetime | None, datetime, tzinfo], datetime | None] = {}


def _peel(line: str) -> tuple[tuple[Prefix, ...], str, datetime | None]:
    hit = _PEEL_MEMO.get(line)
    if hit is None:
        if len(_PEEL_MEMO) >= _MEMO_SIZE:
            _PEEL_MEMO.clear()
        hit = _PEEL_MEMO[line] = _peel_uncached(line)
    return hit


def _paren_hit(cand: str) -> tuple[Prefix | None, int]:
    """The flat regex's answer for a "(" prefix candidate (up to its first ") "), memoised."""
    hit = _PAREN_MEMO.get(cand)
    if hit is None:
        if len(_PAREN_MEMO) >= _MEMO_SIZE:
            _PAREN_MEMO.clear()
        fm = _PAREN_PID_FLAT_RE.match(cand)
        hit = _PAREN_MEMO[cand] = (
            (Prefix(fm.group(1).strip(), int(fm.group(2)), fm.group(3)), fm.end()) if fm else (None, 0))
    return hit


def _peel_uncached(line: str) -> tuple[tuple[Prefix, ...], str, datetime | None]:
    prefixes: list[Prefix] = []
    outer_ts: datetime | None = None
    s = line
    while s:
        c = s[0]
        if c == "(":
            # Ray prints the same "(Actor pid=N, ip=...) " on every line of a process: memoise the
            # flat regex's answer per candidate (up to the first ") ", where a flat match must end)
            k = s.find(") ")
            if 0 < k < _PREFIX_MEMO_MAX:
                cand = s[:k + 2]
                hit = _PAREN_MEMO.get(cand)
                if hit is None:
                    hit = _paren_hit(cand)
                if hit[0] is not None:
                    prefixes.append(hit[0])
                    s = s[hit[1]:]
                    continue
            m = _PAREN_PID_FLAT_RE.match(s) or _PAREN_PID_RE.match(s)
            if m:
                prefixes.append(Prefix(m.group(1).strip(), int(m.group(2)), m.group(3)))
                s = s[m.end():]
                continue
            m = _PAREN_COMPONENT_RE.match(s)
            if m:
                prefixes.append(Prefix(m.group(1).strip(), None, m.group(2)))
                s = s[m.end():]
                continue
            break
        if c == "[":
            m = _POD_RE.match(s)
            if m:
                prefixes.append(Prefix(m.group(1)))
                s = s[m.end():]
                continue
            m = _RANK_RE.match(s)
            if m:
                prefixes.append(Prefix(m.group(1)))
                s = s[m.end():]
                continue
            break
        if "0" <= c <= "9" and outer_ts is None:
            m = _K8S_TS_RE.match(s)
            if m:
                if outer_ts is None:
                    outer_ts = _aware(m.group(1), m.group(2), m.group(3), m.group(4), m.group(5),
                                      m.group(6), m.group(7), m.group(8), UTC)
                s = s[m.end():]
                continue
            break
        break
    return tuple(prefixes), s, outer_ts


def peel_prefixes(line: str) -> tuple[tuple[Prefix, ...], str]:
    """Peel nested prefixes from the left of an (ANSI-stripped) line; returns (prefixes, rest)."""
    prefixes, rest, _ = _peel(strip_ansi(line))
    return prefixes, rest


# --- timestamps -------------------------------------------------------------------------

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}

# Anchored at the start of the peeled text. Group names carry the flavour.
_TS_START_RE = re.compile(
    r"(?:"
    # vLLM / OpenRLHF: "INFO 11-29 09:48:05 " (no year)
    r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) "
    r"(?P<v_mo>\d\d)-(?P<v_d>\d\d) (?P<v_h>\d\d):(?P<v_mi>\d\d):(?P<v_s>\d\d)"
    r"|"
    # c10 C++ logger >= 2.4: "[E321 02:07:08.412230519 " (ns digits are CLOCK_MONOTONIC: ignored)
    r"\[?[FEWIV](?P<c_md>\d{3,4}) (?P<c_h>\d\d):(?P<c_mi>\d\d):(?P<c_s>\d\d)\.\d{9}(?: |$)"
    r"|"
    # glog-style torch python: "W1223 05:17:58.996000 3304089 " (real microseconds)
    r"[FEWIV](?P<g_md>\d{3,4}) (?P<g_h>\d\d):(?P<g_mi>\d\d):(?P<g_s>\d\d)\.(?P<g_us>\d{6}) \d+ "
    r"|"
    # Ray C++ / spdlog: "[2023-07-11 15:20:05,144 I "
    r"\[(?P<r_y>\d{4})-(?P<r_mo>\d\d)-(?P<r_d>\d\d) (?P<r_h>\d\d):(?P<r_mi>\d\d):(?P<r_s>\d\d),(?P<r_ms>\d{3}) [DIWEC] "
    r"|"
    # ISO 8601 / RFC 3339 / SLURM %FT%T / loguru (".SSS") / python logging (",mmm")
    r"\[?(?P<i_y>\d{4})-(?P<i_mo>\d\d)-(?P<i_d>\d\d)[T ](?P<i_h>\d\d):(?P<i_mi>\d\d):(?P<i_s>\d\d)"
    r"(?:[.,](?P<i_f>\d{1,9}))?(?P<i_tz>Z|[+-]\d\d:?\d\d)?"
    r"|"
    # dmesg -T: "[Fri Nov 29 10:14:31 2024] "
    r"\[[A-Z][a-z]{2} (?P<dm_mon>[A-Z][a-z]{2}) +(?P<dm_d>\d{1,2}) "
    r"(?P<dm_h>\d\d):(?P<dm_mi>\d\d):(?P<dm_s>\d\d) (?P<dm_y>\d{4})\]"
    r"|"
    # syslog / journalctl: "Nov 29 10:20:02 host " (no year)
    r"(?P<sy_mon>[A-Z][a-z]{2}) +(?P<sy_d>\d{1,2}) (?P<sy_h>\d\d):(?P<sy_mi>\d\d):(?P<sy_s>\d\d) "
    r")"
)
# Fallback anywhere in the line: a full ISO date-time with 'T' (SLURM "CANCELLED AT 2025-…").
_TS_ANY_ISO_RE = re.compile(
    r"(?<![\d])(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?"
)


def _tz_from(tzs: str | None, default: tzinfo) -> tzinfo:
    if not tzs:
        return default
    if tzs == "Z":
        return UTC
    sign = 1 if tzs[0] == "+" else -1
    digits = tzs[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:4])))


def _aware(y, mo, d, h, mi, s, frac, tzs, default_tz: tzinfo) -> datetime | None:
    try:
        us = int((frac or "0")[:6].ljust(6, "0"))
        dt = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), us,
                      tzinfo=_tz_from(tzs, default_tz))
    except ValueError:
        return None
    return dt.astimezone(UTC)


_HALF_YEAR = timedelta(days=183)


def _yearless(mo: int, d: int, h: int, mi: int, s: int, us: int, ref: datetime,
              tz: tzinfo) -> datetime | None:
    ref_utc = ref if ref.tzinfo is not None else ref.replace(tzinfo=UTC)
    year = ref_utc.year if tz is UTC and ref_utc.tzinfo is UTC else ref_utc.astimezone(tz).year
    for y in (year, year - 1):
        try:
            dt = datetime(y, mo, d, h, mi, s, us, tzinfo=tz)
        except ValueError:  # e.g. Feb 29 in a non-leap year
            continue
        if tz is not UTC:
            dt = dt.astimezone(UTC)
        if dt - ref_utc > _HALF_YEAR and y == year:
            continue
        return dt
    return None


def _md(md: str) -> tuple[int, int]:
    # c10 prints (month)*100+day without zero padding: "321" = Mar 21, "1111" = Nov 11.
    v = int(md)
    return v // 100, v % 100


def line_timestamp(line: str, ref: datetime, tz: tzinfo = UTC) -> datetime | None:
    """Timestamp of a log line in any known flavour, as an aware UTC datetime, or None.

    Recognised (after ANSI codes and prefixes): kubectl/CRI RFC 3339 prefix (preferred when
    present: it has a zone and a year), vLLM/OpenRLHF ``LEVEL MM-DD HH:MM:SS``, c10
    ``[E321 02:07:08.412230519`` (unpadded month; the 9 digits are monotonic and ignored),
    glog-style ``W1223 05:17:58.996000 pid``, Ray C++ ``[YYYY-MM-DD HH:MM:SS,mmm L``, ISO 8601 /
    RFC 3339 / SLURM ``%FT%T`` / loguru ``.SSS`` / python logging ``,mmm``, dmesg -T, syslog; as a
    last resort an ISO ``YYYY-MM-DDTHH:MM:SS`` anywhere in the line.

    Year-less stamps take the year of ``ref`` (in ``tz``), or the previous year when that
    would put the stamp more than ~6 months after ``ref``. Zone-less stamps are read in ``tz``.
    """
    key = (line, ref, tz)
    hit = _TS_CACHE.get(key, _MISS)
    if hit is not _MISS:
        return hit  # type: ignore[return-value]
    stripped = strip_ansi(line)
    # Every recognised stamp holds HH:MM:SS, so ":MM:" is a necessary condition: a quick no for
    # the many lines without a time (access logs, tqdm bars, traceback bodies).
    dt = timestamp_of_peeled(*_peel(stripped)[1:], ref, tz) if _HAS_CLOCK_RE.search(stripped) else None
    if len(_TS_CACHE) >= _TS_CACHE_SIZE:
        _TS_CACHE.clear()
    _TS_CACHE[key] = dt
    return dt


_HAS_CLOCK_RE = re.compile(r":\d\d:")

def line_timestamp_seen(line: str, ref: datetime, tz: tzinfo = UTC) -> datetime | None:
    """:func:`line_timestamp`, storing nothing in the memos (see :func:`peel_and_stamp`): for the lines the
    core reads once, the lines before an unstamped match."""
    hit = _TS_CACHE.get((line, ref, tz), _MISS)
    if hit is not _MISS:
        return hit  # type: ignore[return-value]
    stripped = strip_ansi(line)
    # the batch pass (C when built) on one line: the same result as peel_and_stamp, without its Python parse
    return peel_and_stamp_batch([stripped], ref, tz)[0][1] if _HAS_CLOCK_RE.search(stripped) else None

# line_timestamp is pure: a small memo lets the log reader (batch event_time) and the core (stream
# freshness) share the parse of a batch's last lines, which both look at.
_TS_CACHE: dict[tuple[str, datetime, tzinfo], datetime | None] = {}
_TS_CACHE_SIZE = 256
_MISS = object()


def parse_memo(text: str, ref: datetime, tz: tzinfo = UTC) -> tuple | None:
    """What this process memoised of an ANSI-stripped line: (peel_stripped(text), its timestamp at
    `ref`), or None. With `remember_parse`, a process that parsed a line hands the result to the
    one that folds it (the probe's log-reading workers), which then skips the parse."""
    pk = _PEEL_MEMO.get(text)
    if pk is None:
        return None
    if pk[2] is not None:
        return pk, pk[2]
    dt = _STAMP_MEMO.get((pk[1], None, ref, tz), _MISS)
    return None if dt is _MISS else (pk, dt)


def remember_parse(text: str, parsed: tuple, ref: datetime, tz: tzinfo = UTC) -> None:
    """Memoise a `parse_memo` result from another process (same pure functions, same answers)."""
    pk, dt = parsed
    if len(_PEEL_MEMO) >= _MEMO_SIZE:
        _PEEL_MEMO.clear()
    _PEEL_MEMO[text] = pk
    if pk[2] is None:
        if len(_STAMP_MEMO) >= _MEMO_SIZE:
            _STAMP_MEMO.clear()
        _STAMP_MEMO[(pk[1], None, ref, tz)] = dt


def peel_stripped(text: str) -> tuple[tuple[Prefix, ...], str, datetime | None]:
    """(prefixes, rest, outer kubectl/CRI timestamp) of a line that is already ANSI-stripped.

    For ``s = strip_ansi(line)``: ``peel_prefixes(line) == peel_stripped(s)[:2]`` and
    ``line_timestamp(line, ref, tz) == timestamp_of_peeled(*peel_stripped(s)[1:], ref, tz)``,
    so one peel serves both."""
    return _peel(text)


def peel_and_stamp(text: str, ref: datetime, tz: tzinfo = UTC) -> tuple[tuple[tuple[Prefix, ...], str, datetime | None],
                                                                        datetime | None]:
    """``(peel_stripped(text), timestamp_of_peeled(*peel_stripped(text)[1:], ref, tz))`` for the core's matched
    lines: a parse this process memoised (a prefiltering reader's, a worker's `remember_parse`) is used, and
    nothing new is stored: a dense log's matched lines are all different, and storing them only churns the
    memos (the prefix and matched-stamp memos still serve the parse)."""
    pk = _PEEL_MEMO.get(text)
    if pk is None:
        pk = _peel_uncached(text)
    outer = pk[2]
    if outer is not None:
        return pk, outer
    dt = _STAMP_MEMO.get((pk[1], None, ref, tz), _MISS)
    if dt is _MISS:
        dt = _stamp_of_rest(pk[1], ref, tz)
    return pk, dt  # type: ignore[return-value]


ParsedLine = tuple[tuple[tuple[Prefix, ...], str, datetime | None], datetime | None]


def peel_and_stamp_batch_py(texts: list[str], ref: datetime, tz: tzinfo = UTC) -> list[ParsedLine]:
    """`peel_and_stamp` of each of `texts`; a text that is the very object before it (a line that matched
    two rules) gets the same result."""
    out: list[ParsedLine] = []
    prev: str | None = None
    r: ParsedLine = ((), "", None), None
    for t in texts:
        if t is not prev:
            r = peel_and_stamp(t, ref, tz)
            prev = t
        out.append(r)
    return out


# The C pass's memos (what it only reads and fills: no line is a key): "[pod/..]" and "[rankN]:" prefixes by
# name, and start-of-line stamps per branch of _TS_START_RE by the text matched, for one (ref, tz) at a time.
_NAME_MEMO: dict[str, Prefix] = {}
_BATCH_STAMPS: tuple[dict[str, datetime | None], ...] = tuple({} for _ in range(7))
_batch_stamps_for: list[tuple[datetime, tzinfo] | None] = [None]
_native_peel = native_function("peel_stamp_batch")


def peel_and_stamp_batch(texts: list[str], ref: datetime, tz: tzinfo = UTC) -> list[ParsedLine]:
    """`peel_and_stamp_batch_py` (the same results), in one C pass when the helper is built: the prefix peel
    and the start-of-line stamp of the common shapes, the rest through the Python functions."""
    if _native_peel is None:
        return peel_and_stamp_batch_py(texts, ref, tz)
    if _batch_stamps_for[0] != (ref, tz) or any(len(m) >= _MEMO_SIZE for m in _BATCH_STAMPS):
        for m in _BATCH_STAMPS:
            m.clear()
        _batch_stamps_for[0] = (ref, tz)
    if len(_NAME_MEMO) >= _MEMO_SIZE:
        _NAME_MEMO.clear()
    return _native_peel(texts, _PAREN_MEMO, _paren_hit, _PREFIX_MEMO_MAX, _NAME_MEMO, Prefix, _BATCH_STAMPS,
                        lambda rest: _stamp_of_rest(rest, ref, tz), lambda text: peel_and_stamp(text, ref, tz), ref, tz)


def timestamp_of_peeled(rest: str, outer: datetime | None, ref: datetime, tz: tzinfo = UTC) -> datetime | None:
    """:func:`line_timestamp` from the result of :func:`peel_stripped` (its last two items)."""
    if outer is not None:
        return outer
    key = (rest, outer, ref, tz)
    hit = _STAMP_MEMO.get(key, _MISS)
    if hit is not _MISS:
        return hit  # type: ignore[return-value]
    if len(_STAMP_MEMO) >= _MEMO_SIZE:
        _STAMP_MEMO.clear()
    dt = _STAMP_MEMO[key] = _stamp_of_rest(rest, ref, tz)
    return dt


def _stamp_of_rest(rest: str, ref: datetime, tz: tzinfo) -> datetime | None:
    m = _TS_START_RE.match(rest)
    if m is None and rest[:1] == " ":
        m = _TS_START_RE.match(rest.lstrip())
    if m is not None:
        # The stamp is a function of the matched text and the branch that matched it (lastindex):
        # lines printed in the same second (every engine's stats line) share one conversion.
        key = (m.group(), m.lastindex, ref, tz)
        dt = _MATCHED_STAMP_MEMO.get(key, _MISS)
        if dt is _MISS:
            if len(_MATCHED_STAMP_MEMO) >= _MEMO_SIZE:
                _MATCHED_STAMP_MEMO.clear()
            dt = _MATCHED_STAMP_MEMO[key] = _stamp_of_match(m, ref, tz)
        if dt is not _MISS:
            return dt  # type: ignore[return-value]
    # the pattern holds a literal "T" and "-": substring tests (memchr) are the quick no for most lines
    m2 = _TS_ANY_ISO_RE.search(rest) if "T" in rest and "-" in rest else None
    if m2 is not None:
        y, mo, d, h, mi, s, frac, tzs = m2.groups()
        return _aware(y, mo, d, h, mi, s, frac, tzs, tz)
    return None


def _stamp_of_match(m: re.Match[str], ref: datetime, tz: tzinfo) -> datetime | None | object:
    """The stamp a `_TS_START_RE` match spells, or _MISS when no branch applies (never, as written)."""
    g = m.group  # a few group() calls are cheaper than a 40-entry groupdict
    if g("v_mo") is not None:
        return _yearless(int(g("v_mo")), int(g("v_d")), int(g("v_h")), int(g("v_mi")),
                         int(g("v_s")), 0, ref, tz)
    if g("c_md") is not None:
        mo, d = _md(g("c_md"))
        return _yearless(mo, d, int(g("c_h")), int(g("c_mi")), int(g("c_s")), 0, ref, tz)
    if g("g_md") is not None:
        mo, d = _md(g("g_md"))
        return _yearless(mo, d, int(g("g_h")), int(g("g_mi")), int(g("g_s")),
                         int(g("g_us")), ref, tz)
    if g("r_y") is not None:
        return _aware(g("r_y"), g("r_mo"), g("r_d"), g("r_h"), g("r_mi"), g("r_s"),
                      g("r_ms"), None, tz)
    if g("i_y") is not None:
        return _aware(g("i_y"), g("i_mo"), g("i_d"), g("i_h"), g("i_mi"), g("i_s"),
                      g("i_f"), g("i_tz"), tz)
    if g("dm_mon") is not None:
        mon = _MONTHS.get(g("dm_mon"))
        if mon is None:
            return None
        return _aware(g("dm_y"), mon, g("dm_d"), g("dm_h"), g("dm_mi"), g("dm_s"), None,
                      None, tz)
    if g("sy_mon") is not None:
        mon = _MONTHS.get(g("sy_mon"))
        if mon is None:
            return None
        return _yearless(mon, int(g("sy_d")), int(g("sy_h")), int(g("sy_mi")),
                         int(g("sy_s")), 0, ref, tz)
    return _MISS


# A clock with no date: OpenHands' logger ("%H:%M:%S - openhands:INFO: ..."). It is not a stamp on its own
# (line_timestamp gives None): a date would have to be invented. `date_time_only` dates it from a full stamp
# the caller found earlier in the same source.
_TIME_ONLY_RE = re.compile(r"(\d\d):(\d\d):(\d\d) - ")
_ROLLOVER = timedelta(hours=12)


def date_time_only(rest: str, earlier: datetime, tz: tzinfo = UTC) -> datetime | None:
    """The time a peeled line's leading time-only stamp (``HH:MM:SS - ``) names, on the date of `earlier`
    (the nearest earlier full stamp of the same source, an aware datetime) read in `tz`, like every zone-less
    stamp; the next day when that would put it more than 12 h before `earlier` (midnight passed between
    them). None when the line does not start with such a stamp."""
    if rest[2:3] != ":" or (m := _TIME_ONLY_RE.match(rest)) is None:
        return None
    h, mi, s = int(m.group(1)), int(m.group(2)), int(m.group(3))
    local = earlier.astimezone(tz)
    try:
        dt = local.replace(hour=h, minute=mi, second=s, microsecond=0)
    except ValueError:  # 24:00:00, 12:61:00
        return None
    if dt < local - _ROLLOVER:
        dt += timedelta(days=1)
    return dt.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class NormalizedLine:
    raw: str
    text: str
    prefixes: tuple[Prefix, ...]
    ts: datetime | None


def normalize(line: str, ref: datetime, tz: tzinfo = UTC) -> NormalizedLine:
    """ANSI-strip, peel prefixes and timestamp one line (a single record, no newlines)."""
    stripped = strip_ansi(line)
    prefixes, rest, _ = _peel(stripped)
    return NormalizedLine(raw=line, text=rest, prefixes=prefixes,
                          ts=line_timestamp(stripped, ref, tz))
