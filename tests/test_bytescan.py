"""The native byte passes (rlhealth/_native/*.c) equal their pure-Python twins, and the fast
paths in normalize (flat Ray-prefix regex, ``:MM:`` precheck, memos) give the slow paths' answers."""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rlhealth.agents import bytescan, normalize
from rlhealth.agents.bytescan import (
    count_newlines,
    count_newlines_py,
    line_starts,
    line_starts_py,
    strip_ansi_bytes,
    strip_ansi_bytes_py,
    utf8_valid,
    utf8_valid_py,
)

FAST = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

needs_native = pytest.mark.skipif(not bytescan.NATIVE, reason="rlhealth._fastlines not built")

# -- adversarial bytes -----------------------------------------------------------------------

_ASCII_PIECES = [b"\x1b", b"[", b"]", b"\x07", b"\\", b"\n", b"\r", b";", b"m", b"?", b" ", b"/", b"@", b"~",
                 b":", b"<", b"=", b">", b"!", b"-", b"_", b"^", b"Z", b"A", b"z", b"a", b"\x00", b"\x7f", b"\t"]
_ASCII_PIECES += [bytes([c]) for c in b"0123456789"]
_ESCAPES = [b"\x1b[0m", b"\x1b[31;1m", b"\x1b[36m", b"\x1b[?25h", b"\x1b[2 q", b"\x1b[1;2;3H", b"\x1b[",
            b"\x1b]8;;http://x/\x07", b"\x1b]0;title\x1b\\", b"\x1b]0;t\x1b", b"\x1b]x\n", b"\x1b]",
            b"\x1bM", b"\x1b\\", b"\x1b_", b"\x1b@", b"\x1b[0", b"\x1b[ ", b"\x1b[0;"]
_VALID_UTF8 = [c.encode("utf-8") for c in ("é", "ß", "€", "中", "😀", "\u0085", "\u00a0", "\u2028", "\ufeff",
                                          "\uffff", "\ud7ff", "\ue000", "\U00010000", "\U0010ffff", "\u0800")]
_BROKEN_UTF8 = [b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
                b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf8",
                b"\xff", b"\xfe", b"\x80", b"\xbf", b"\xc2", b"\xe2\x82", b"\xf0\x9f\x98", b"\xe2\x82\x41",
                b"\xc2\xc2\xa9", b"\xf0\x9f\x98\x41"]
_HIGH = [bytes([c]) for c in range(0x80, 0x100)]

piece = st.one_of(
    st.sampled_from(_ASCII_PIECES),
    st.sampled_from(_ESCAPES),
    st.sampled_from(_VALID_UTF8),
    st.sampled_from(_BROKEN_UTF8),
    st.sampled_from(_HIGH),
    st.binary(max_size=3),
    st.integers(0, 20).map(lambda n: b"abcdefgh"[: n % 9] * (n // 9 + 1)),  # ASCII runs of every length
)
adversarial = st.lists(piece, max_size=48).map(b"".join)
# mostly valid UTF-8 (so the validator's interesting paths are reached), with a broken tail sometimes
utf8ish = st.tuples(
    st.lists(st.one_of(st.sampled_from(_VALID_UTF8), st.sampled_from(_ASCII_PIECES), st.sampled_from(_ESCAPES),
                       st.text(max_size=4).map(lambda s: s.encode("utf-8", "surrogatepass"))), max_size=30),
    st.one_of(st.just(b""), st.sampled_from(_BROKEN_UTF8), st.sampled_from(_VALID_UTF8).map(lambda b: b[:-1])),
).map(lambda t: b"".join(t[0]) + t[1])
any_bytes = st.one_of(adversarial, utf8ish, st.binary(max_size=64))


def _decodes(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# -- the native module is really there -------------------------------------------------------


def test_native_extension_is_built_when_a_compiler_exists() -> None:
    """A broken or skipped build of rlhealth._fastlines must not pass silently."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler: the pure-Python fallback is expected")
    assert bytescan.NATIVE, f"a C compiler ({compiler}) is present but rlhealth._fastlines is not importable"
    from rlhealth import _fastlines

    assert bytescan.strip_ansi_bytes is _fastlines.strip_ansi
    assert bytescan.utf8_valid is _fastlines.utf8_valid
    assert bytescan.count_newlines is _fastlines.count_newlines
    # a stale build (from older rlhealth/_native sources) falls back to the twin at import; here it must not
    assert bytescan.fields_of is _fastlines.fields_of, "rlhealth._fastlines is stale: rebuild it"
    assert bytescan.fields_batch is _fastlines.fields_batch, "rlhealth._fastlines is stale: rebuild it"
    assert bytescan.fields_batch_vllm_v1 is _fastlines.fields_batch_vllm_v1, "rlhealth._fastlines is stale: rebuild it"
    assert normalize._native_peel is _fastlines.peel_stamp_batch, "rlhealth._fastlines is stale: rebuild it"
    assert bytescan.hit_lines is _fastlines.hit_lines, "rlhealth._fastlines is stale: rebuild it"
    assert bytescan.HitSink is _fastlines.HitSink, "rlhealth._fastlines is stale: rebuild it"
    from rlhealth.agents import signatures
    assert signatures._keep_hits is _fastlines.keep_hits, "rlhealth._fastlines is stale: rebuild it"
    from rlhealth.agents import fold_trainer
    assert fold_trainer._bare_pairs is _fastlines.bare_pairs, "rlhealth._fastlines is stale: rebuild it"


# -- strip_ansi ------------------------------------------------------------------------------


@needs_native
@FAST
@given(any_bytes)
@example(b"\x1b\x1b[0m[31m")
@example(b"\x1b]\x1b\\")
@example(b"\x1b]abc\x1b\x1b\\")
@example(b"\x1b[0;?m\x1b")
@example(b"\x1b")
def test_strip_ansi_native_equals_python(b: bytes) -> None:
    got = strip_ansi_bytes(b)
    want = strip_ansi_bytes_py(b)
    assert got == want
    assert type(got) is bytes
    # the regex, literally (sub == join(split) for this pattern)
    assert want == re.sub(bytescan.ANSI_PATTERN.encode("ascii"), b"", b)
    assert got.count(b"\n") == b.count(b"\n")  # never removes a newline
    if b"\x1b" not in b:
        assert got is b and want is b
    else:
        assert len(got) <= len(b)


def test_strip_ansi_pathological_inputs() -> None:
    cases = {
        b"\x1b\x1b[0m[31m": b"\x1b[31m",  # removing the inner sequence leaves a new one: not re-scanned
        b"\x1b[31mred\x1b[0m": b"red",
        b"\x1b]8;;http://x\x07link\x1b]8;;\x07": b"link",
        b"\x1b]0;title\x1b\\x": b"x",
        b"\x1b]0;never closed\n": b"0;never closed\n",  # ESC ] alone is a two-byte escape
        b"\x1b[": b"\x1b[",
        b"\x1b": b"\x1b",
        b"a\x1b[1;2": b"a\x1b[1;2",
        b"\x1b[?25l\x1b[2K\r": b"\r",
        b"\x1b\n": b"\x1b\n",
    }
    for raw, want in cases.items():
        assert strip_ansi_bytes_py(raw) == want, raw
        assert strip_ansi_bytes(raw) == want, raw
    for raw in (b"", b"plain", b"\xff\xfe no esc"):
        assert strip_ansi_bytes(raw) is raw


utf8_text = st.lists(
    st.one_of(st.sampled_from([p.decode("latin-1") for p in _ASCII_PIECES]),
              st.sampled_from([p.decode("latin-1") for p in _ESCAPES]),
              st.sampled_from([p.decode("utf-8") for p in _VALID_UTF8]),
              st.text(max_size=3)),
    max_size=40,
).map("".join)


@SLOW
@given(utf8_text)
@example("\x1b]é\x07x")
@example("\x1b]\u2028\x1b\\y")
def test_str_strip_agrees_with_bytes_strip(s: str) -> None:
    enc = s.encode("utf-8", "surrogatepass")
    assert normalize.strip_ansi(s).encode("utf-8", "surrogatepass") == strip_ansi_bytes(enc)
    assert strip_ansi_bytes_py(enc).decode("utf-8", "surrogatepass") == normalize.strip_ansi(s)


# -- utf8_valid ------------------------------------------------------------------------------


@needs_native
@FAST
@given(any_bytes)
@example(b"\xed\xa0\x80")
@example(b"abcdefg\xc3")
@example(b"abcdefgh\xf4\x90\x80\x80")
@example(b"\xef\xbf\xbf")
def test_utf8_valid_native_equals_python_and_decode(b: bytes) -> None:
    ok = _decodes(b)
    assert utf8_valid_py(b) is ok
    assert utf8_valid(b) is ok


@needs_native
def test_utf8_valid_every_lead_and_second_byte() -> None:
    """Every (lead, second) byte pair, with a few third/fourth bytes, at every alignment of the 8-byte
    ASCII fast loop, and cut short at the end."""
    tails = [b"", b"\x80", b"\x41", b"\xbf\xbf", b"\x80\xc0"]
    bad = []
    for lead in range(0x80, 0x100):
        for second in range(0x100):
            for tail in tails:
                seq = bytes([lead, second]) + tail
                for pad in (b"", b"abcdefg"):
                    for data in (pad + seq, pad + seq + b"xy"):
                        if utf8_valid(data) is not _decodes(data):
                            bad.append(data)
    assert not bad, bad[:10]


# -- line_starts / count_newlines ------------------------------------------------------------


def _starts(data: bytes, base: int) -> tuple[list[int], int]:
    s, longest = line_starts(data, base)
    return list(s), longest


@needs_native
@FAST
@given(any_bytes, st.one_of(st.integers(0, 2**62), st.integers(-(2**20), 2**20)))
@example(b"", 0)
@example(b"\n", 5)
@example(b"\n\n", 0)
@example(b"abc", 100)
@example(b"\nab\n", 7)
def test_line_starts_native_equals_python(data: bytes, base: int) -> None:
    got = _starts(data, base)
    want = line_starts_py(data, base)
    assert got == want
    parts = data.split(b"\n")
    assert len(got[0]) == len(parts) == data.count(b"\n") + 1
    assert got[1] == max(map(len, parts))
    for start, part in zip(got[0], parts):
        assert data[start - base: start - base + len(part)] == part


def test_line_starts_edges() -> None:
    for fn in (_starts, line_starts_py):
        assert fn(b"", 0) == ([0], 0)
        assert fn(b"", 42) == ([42], 0)
        assert fn(b"no newline", 3) == ([3], 10)
        assert fn(b"\n", 0) == ([0, 1], 0)
        assert fn(b"\nleading", 10) == ([10, 11], 7)
        assert fn(b"trailing\n", 10) == ([10, 19], 8)
        assert fn(b"\n\nx\n", 0) == ([0, 1, 2, 4], 1)
        assert fn(b"a\nbbb\ncc", 2**40) == ([2**40, 2**40 + 2, 2**40 + 6], 3)


@needs_native
@FAST
@given(any_bytes)
def test_count_newlines_native_equals_python(data: bytes) -> None:
    n = data.count(b"\n")
    assert count_newlines_py(data) == n
    assert count_newlines(data) == n


@needs_native
def test_native_functions_reject_non_bytes() -> None:
    for fn in (strip_ansi_bytes, utf8_valid, count_newlines):
        with pytest.raises(TypeError):
            fn("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        line_starts("text", 0)  # type: ignore[arg-type]


def test_large_blocks_agree() -> None:
    """Sizes past the 8-byte ASCII loop and a few memchr pages, with the odd byte far in."""
    block = (b"2026-10-14T16:14:50Z \x1b[36m(Worker pid=1)\x1b[0m step 1 loss=0.5\n" * 5000)
    for data in (block, block[:-1], block + "é".encode(), block + b"\xc3", b"\n" + block + b"\x1b"):
        assert strip_ansi_bytes(data) == strip_ansi_bytes_py(data)
        assert utf8_valid(data) is utf8_valid_py(data) is _decodes(data)
        assert count_newlines(data) == data.count(b"\n")
        assert _starts(data, 17) == line_starts_py(data, 17)


# -- normalize: the flat Ray-prefix regex ----------------------------------------------------

_PAREN_PIECES = ["(", ")", "pid=", "12", "0", ", ip=", "10.0.0.1", "::1", " ", "Actor", "x(y)", "\n", "pid",
                 "=", ",", "ip=", "a", "é", "(pid=3)", "Name pid=4", "-", ":", ")(", "  "]
paren_text = st.tuples(
    st.sampled_from(["(", "(", "(", "", "x"]),
    st.lists(st.sampled_from(_PAREN_PIECES), max_size=16).map("".join),
).map("".join)


@FAST
@given(paren_text)
@example("(RayWorker pid=1, ip=10.0.0.1) hello")
@example("(MyActor(index=2) pid=4) x")
@example("(pid=12)")
@example("(a pid=1 pid=2) x")
@example("(Actor pid=12, ip=10.0.0.1)x(y) pid=3) ")
def test_flat_paren_regex_is_the_nested_regex_when_it_matches(s: str) -> None:
    flat = normalize._PAREN_PID_FLAT_RE.match(s)
    full = normalize._PAREN_PID_RE.match(s)
    if flat is not None:
        assert full is not None
        assert flat.span() == full.span()
        assert flat.groups() == full.groups()


@SLOW
@given(paren_text)
def test_peel_with_fast_path_equals_peel_with_nested_regex_only(s: str) -> None:
    fast = normalize._peel_uncached(s)
    saved = normalize._PAREN_PID_FLAT_RE
    normalize._PAREN_PID_FLAT_RE = normalize._PAREN_PID_RE
    try:
        slow = normalize._peel_uncached(s)
    finally:
        normalize._PAREN_PID_FLAT_RE = saved
    assert fast == slow


def test_flat_paren_regex_examples() -> None:
    m = normalize._PAREN_PID_FLAT_RE.match("(RayWorker pid=1, ip=10.0.0.1) hello")
    assert m is not None and m.groups() == ("RayWorker", "1", "10.0.0.1") and m.end() == 31
    assert normalize._PAREN_PID_FLAT_RE.match("(MyActor(index=2) pid=4) x") is None
    full = normalize._PAREN_PID_RE.match("(MyActor(index=2) pid=4) x")
    assert full is not None and full.group(1) == "MyActor(index=2)"
    assert normalize.peel_prefixes("\x1b[36m(RayWorker pid=1, ip=10.0.0.1)\x1b[0m hi") == (
        (normalize.Prefix("RayWorker", 1, "10.0.0.1"),), "hi")


# -- normalize: line_timestamp's precheck and memos ------------------------------------------

_TS_PIECES = ["INFO ", "ERROR ", "WARNING ", "10-14 ", "02-29 ", "13-45 ", "16:14:50", "23:59:60", " ", "12:00:00",
              "2026-10-14", "2024-02-29", "2026-13-01", "T", ".123", ",123", ".123456789", "Z", "+02:00", "-0530",
              "[", "]", "E1014 ", "I229 ", "W1223 05:17:58.996000 3304089 ", "[E321 02:07:08.412230519 ",
              "Nov 29 10:20:02 host ", "Feb 29 01:02:03 h ", "Foo 29 01:02:03 h ",
              "[Fri Nov 29 10:14:31 2024] ", "[2023-07-11 15:20:05,144 I ",
              "\x1b[36m(RayWorker pid=1, ip=10.0.0.1)\x1b[0m ", "(pid=7) ", "[rank3]: ", "[rank1]:", "[default0]:",
              "[pod/a-0/main] ", "2026-05-12T08:01:39.331095044Z stdout F ", "2026-05-12T08:01:39Z ",
              "\x1b[0m", "\x1b[31m", ":", "1", "12", "٠١", ":٣٤:", "\r", "\t", "x", "CANCELLED AT ", "step 5 "]
ts_line = st.lists(st.sampled_from(_TS_PIECES), max_size=10).map("".join)
refs = st.sampled_from([
    datetime(2026, 10, 14, 17, 0, tzinfo=UTC),
    datetime(2028, 3, 1, 0, 0, tzinfo=UTC),  # leap year: 02-29 stamps exist
    datetime(2027, 1, 5, 12, 0, tzinfo=UTC),  # neither this nor last year has a Feb 29
    datetime(2026, 1, 1, 3, 0, tzinfo=timezone(timedelta(hours=5))),
])
tzs = st.sampled_from([UTC, timezone(timedelta(hours=-7)), timezone(timedelta(hours=9, minutes=30))])


_MEMOS = (normalize._PEEL_MEMO, normalize._STAMP_MEMO, normalize._TS_CACHE, normalize._PAREN_MEMO,
          normalize._MATCHED_STAMP_MEMO)


def _clear_memos() -> None:
    for memo in _MEMOS:
        memo.clear()


def _uncached_timestamp(line: str, ref: datetime, tz=UTC):
    """The parse with every memo empty, through the memo-free functions; the memos' contents are
    put back afterwards, so the memoised path under test stays warm with other lines' entries."""
    saved = [dict(memo) for memo in _MEMOS]
    _clear_memos()
    _prefixes, rest, outer = normalize._peel_uncached(normalize.strip_ansi(line))
    if outer is not None:
        got = outer
    else:
        got = normalize._MISS
        m = normalize._TS_START_RE.match(rest)
        if m is None and rest[:1] == " ":
            m = normalize._TS_START_RE.match(rest.lstrip())
        if m is not None:
            got = normalize._stamp_of_match(m, ref, tz)
        if got is normalize._MISS:
            m2 = normalize._TS_ANY_ISO_RE.search(rest)
            got = normalize._aware(*m2.groups(), tz) if m2 is not None else None
    for memo, old in zip(_MEMOS, saved):
        memo.clear()
        memo.update(old)
    return got


@SLOW
@given(ts_line, refs, refs, tzs)
@example("INFO 10-14 16:14:50 [loggers.py:271] Engine 000", datetime(2026, 10, 14, 17, tzinfo=UTC),
         datetime(2026, 10, 14, 17, tzinfo=UTC), UTC)
@example("INFO 02-29 01:02:03 x", datetime(2028, 3, 1, tzinfo=UTC), datetime(2027, 1, 5, tzinfo=UTC), UTC)
@example(" 2026-10-14 12:00:00", datetime(2026, 10, 14, 17, tzinfo=UTC), datetime(2026, 10, 14, 17, tzinfo=UTC), UTC)
def test_line_timestamp_precheck_and_memos_equal_the_uncached_parse(line: str, ref: datetime, ref2: datetime,
                                                                     tz) -> None:
    want = _uncached_timestamp(line, ref, tz)
    want2 = _uncached_timestamp(line, ref2, tz)
    # memos stay warm across examples: a key that is too coarse would hand this line another's stamp
    assert normalize.line_timestamp(line, ref, tz) == want
    assert normalize.line_timestamp(line, ref, tz) == want  # from the memo
    assert normalize.line_timestamp(line, ref2, tz) == want2  # the memo is per reference time
    # the same line through the peel shared with the core (warm memos)
    stripped = normalize.strip_ansi(line)
    assert normalize.timestamp_of_peeled(*normalize.peel_stripped(stripped)[1:], ref, tz) == want
    assert normalize.line_timestamp(stripped, ref, tz) == want
    # the core's store-nothing twins, with warm memos and with cold ones
    assert normalize.peel_and_stamp(stripped, ref, tz) == (normalize.peel_stripped(stripped), want)
    assert normalize.line_timestamp_seen(line, ref2, tz) == want2
    _clear_memos()
    assert normalize.peel_and_stamp(stripped, ref, tz)[1] == want
    assert normalize.line_timestamp_seen(line, ref, tz) == want
    if want is not None:
        assert want.tzinfo is not None and want.utcoffset() == timedelta(0)
        assert normalize._HAS_CLOCK_RE.search(stripped)  # the precheck is a necessary condition


def test_line_timestamp_known_flavours() -> None:
    ref = datetime(2026, 10, 14, 17, 0, tzinfo=UTC)
    _clear_memos()
    cases = {
        "INFO 10-14 16:14:50 [loggers.py:271] Engine 000: Avg prompt throughput: 1 tokens/s":
            datetime(2026, 10, 14, 16, 14, 50, tzinfo=UTC),
        "\x1b[36m(RayWorker pid=1, ip=10.0.0.1)\x1b[0m 2026-10-14 16:00:01,250 INFO x":
            datetime(2026, 10, 14, 16, 0, 1, 250000, tzinfo=UTC),
        "2026-05-12T08:01:39.331095044Z stdout F ValueError: bad": datetime(2026, 5, 12, 8, 1, 39, 331095, tzinfo=UTC),
        "Epoch 1:  50%|#####     | 5/10 [00:01<00:01, 4.0it/s]": None,
        "  File \"x.py\", line 3, in f": None,
        "CANCELLED AT 2026-10-14T12:00:00 DUE TO TIME LIMIT": datetime(2026, 10, 14, 12, tzinfo=UTC),
    }
    for line, want in cases.items():
        assert normalize.line_timestamp(line, ref) == want, line
        assert _uncached_timestamp(line, ref) == want, line


# -- the whole probe without the C helper ------------------------------------------------------

def test_probe_gives_the_same_verdict_without_the_native_helper(tmp_path) -> None:
    """RLHEALTH_NATIVE=0 (what a machine without a C compiler runs): same JSON verdicts, same exit codes."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    captures = [root / "rlhealth" / "examples" / "capture-healthy",
                root / "tests" / "scenarios" / "nccl_watchdog_torch22_wedged" / "capture",
                root / "tests" / "scenarios" / "transient_hf_restart_recovered" / "capture"]
    for cap in captures:
        outs = {}
        for native in ("1", "0"):
            env = {**os.environ, "RLHEALTH_NATIVE": native, "RLHEALTH_PROBE_WORKERS": "0"}
            code = ("import sys; from rlhealth.agents import bytescan; print(bytescan.NATIVE, file=sys.stderr);"
                    "from rlhealth.cli import main; main()")
            p = subprocess.run([sys.executable, "-c", code, "probe", str(cap), "--format", "json", "--no-progress"],
                               capture_output=True, text=True, env=env, timeout=120)
            assert p.returncode in (0, 10), p.stderr[-2000:]
            assert p.stderr.splitlines()[0] == str(native == "1" and bytescan.NATIVE)
            doc = json.loads(p.stdout)
            for per_run in ("produced_at", "seq", "age_s"):  # unique per probe run, by design
                doc.pop(per_run, None)
            outs[native] = (p.returncode, doc)
        assert outs["1"] == outs["0"], cap


def test_stamp_memo_never_hands_one_line_anothers_stamp() -> None:
    """Many lines that share everything but a digit, through warm memos, in two orders."""
    ref = datetime(2026, 10, 14, 17, 0, tzinfo=UTC)
    fmts = ["INFO {md} {hms} [x.py:1] a", "[E{c10} {hms}.412230519 ProcessGroupNCCL.cpp:1] x",
            "W{c10} {hms}.996000 3304089 x.py:1] y", "2026-{md} {hms},123 INFO z", "2026-{md}T{hms}.5Z w",
            "[2026-{md} {hms},144 I 1 2] r", "Oct 14 {hms} host k", "[Wed Oct 14 {hms} 2026] d"]
    lines = [f.format(md=md, c10=c10, hms=hms)
             for f in fmts for md, c10 in (("10-14", "1014"), ("10-13", "1013"), ("02-29", "229"))
             for hms in ("16:14:50", "16:14:51", "06:14:50", "16:15:50")]
    want = {ln: _uncached_timestamp(ln, ref) for ln in lines}
    assert sum(1 for v in want.values() if v is not None) > len(lines) // 2
    for order in (lines, lines[::-1]):
        for ln in order:
            assert normalize.line_timestamp(ln, ref) == want[ln], ln
            normalize._TS_CACHE.clear()  # the per-line cache would hide the memos below it


# -- fields_of: the fields dict of a matched line -----------------------------------------------------------

_VALUE = st.one_of(st.none(), st.text(alphabet="0123456789.,-+eE xGiB٣", max_size=8), st.text(max_size=6))


def _convert_probe(v: str) -> object:
    return ("convert", v)


def _size_probe(name: str, v: str) -> object:
    return ("size", name, v)


@needs_native
@FAST
@given(st.lists(_VALUE, max_size=8), st.lists(st.tuples(st.integers(0, 9), st.integers(0, 2)), max_size=8),
       st.booleans())
@example(["12", "1.5", None, "x", "1.2.3", "GPU", ".", "1.", ".5", "007", "", "٣"], [(i, 2) for i in range(12)], True)
def test_fields_of_native_equals_python(values: list, plan: list, with_defaults: bool) -> None:
    from rlhealth.agents.bytescan import fields_of, fields_of_py

    plan_t = tuple((f"f{k}", i, how) for k, (i, how) in enumerate(plan))
    defaults = {"engine": "", "f0": -1} if with_defaults else None
    args = (tuple(values), plan_t, _convert_probe, _size_probe, defaults)
    got, want = fields_of(*args), fields_of_py(*args)
    assert got == want and list(got) == list(want)  # same values, same order
    for v in want.values():  # the fast paths give what int()/float() give
        assert isinstance(v, (int, float, str, tuple))


# -- fields_batch: the fields of every line one rule matched -------------------------------------------------

_BATCH_TEXT = st.lists(st.sampled_from(["Engine 003: ", "4 Engines Aggregated: ", "run: ", "12", "1.5", "x", " ", "GiB",
                                        "٣", "-", "Engine x: ", "é"]), max_size=8).map("".join)


@needs_native
@FAST
@given(st.lists(_BATCH_TEXT, max_size=12), st.booleans(), st.booleans(), st.integers(0, 12))
@example(["Engine 003: run: 12 x 1.5", "x", "Engine 003: run: ", "4 Engines Aggregated: run: 1.5 x 7"], True, True, 48)
def test_fields_batch_native_equals_python(texts: list, with_before: bool, with_defaults: bool, chars: int) -> None:
    import re

    from rlhealth.agents.bytescan import fields_batch, fields_batch_py

    main = re.compile(r"run: (?P<a>[0-9.]+)?(?: (?P<b>\w+))?(?: (?P<c>[^ ]+))?")
    before = re.compile(r"(?:(?P<engine>Engine \d+|\d+ Engines Aggregated): )\Z") if with_before else None
    plan = (("engine", 3, 0), ("a", 0, 2), ("b", 1, 1), ("c", 2, 2))
    defaults = {"engine": "", "z": 0} if with_defaults else None
    empty = dict(defaults or {})
    args = (texts, main.search, before.search if before is not None else None, chars, plan, _convert_probe,
            _size_probe, defaults, empty)
    got, want = fields_batch(*args), fields_batch_py(*args)
    assert got == want and [list(d) for d in got] == [list(d) for d in want]
    assert all(d is not empty for d in got)  # a copy per unmatched line, never the shared dict


# -- peel_stamp_batch: the prefix peel and start-of-line stamp of matched lines in C -----------------------

_native_fn = bytescan.native_function
_BRANCH = {"v": 0, "c": 1, "g": 2, "r": 3, "i": 4, "dm": 5, "sy": 6}
_STAMP_PIECES = ["INFO", "WARN", "WARNING", "DEBUG", "ERROR", "CRITICAL", "INFOX", " ", "  ", "\n", "[", "]", "-",
                 ":", ".", ",", "T", "Z", "+", "F", "E", "W", "I", "V", "D", "C", "x", "Nov", "Fri", "Abc", "AbC",
                 "\u2003", "\x1c", "\t", "٣", "1", "12", "123", "1234", "12345", "123456", "123456789",
                 "1234567890", "2026-10-14", "10-14", "16:14:50", "02:07:08", ".412230519", ".996000", "+05:30",
                 "-0530", "+05:3", " 3304089 "]
stamp_text = st.one_of(st.lists(st.sampled_from(_STAMP_PIECES), max_size=14).map("".join), ts_line)


@needs_native
@FAST
@given(stamp_text, st.integers(0, 3))
@example("WARNING 10-14 16:14:50", 0)
@example("[E321 02:07:08.412230519\n", 0)
@example("2026-10-14T16:14:50.1234567890+05:3", 0)
@example("[Fri Nov  9 10:14:31 2024]", 0)
def test_stamp_span_is_the_start_regex(text: str, pos: int) -> None:
    pos = min(pos, len(text))
    m = normalize._TS_START_RE.match(text, pos)
    want = None if m is None else (_BRANCH[(m.lastgroup or "").split("_")[0]], m.end())
    assert _native_fn("stamp_span")(text, pos) == want  # type: ignore[misc]


_DENSE_LINES = [
    "(AsyncVLLMInferenceEngine pid=21113, ip=10.0.2.100) INFO 10-13 06:20:34 [loggers.py:271] Engine 000: x",
    "(TaskRunner pid=23871) step:132 - global_seqlen/min:390050 - actor/pg_loss:0.0075",
    "{'loss': 1.6804, 'grad_norm': 0.4486, 'learning_rate': 6.807e-06, 'epoch': 0.132}",
    " [2026-10-13 06:24:56] iteration      132/  100000 | lm loss: 9.660751E-01 |",
    "(skyrl_entrypoint pid=7760, ip=10.0.2.179) Training Step Progress:  65%|██████    | 131/200",
    "[2026-10-13 06:20:23 TP6] Decode batch. #running-req: 47, #token: 16699, token usage: 0.76",
    "[rank3]:[E321 02:07:08.412230519 ProcessGroupNCCL.cpp:1] x", "[pod/a-0/main] [rank1]: W1223 05:17:58.996000 3 y",
    "(raylet, ip=1.2.3.4) [2023-07-11 15:20:05,144 I 1 2] z", "(MyActor(index=2) pid=4) INFO 10-14 16:14:50 w",
    "2026-05-12T08:01:39.331095044Z stdout F (pid=3) INFO 10-14 16:14:50 v", "1234567890T",
    # no start stamp: the any-ISO search decides (a 'T' and dashes without a stamp; stamps after a digit or cut)
    " [2026-10-14 09:27:40] iteration 1/ 10 | throughput per GPU (TFLOP/s/GPU): 1", "x 2026-10-14T16:14:50.5+05:30 y",
    "92026-10-14T16:14:50 z", "a-T 2026-10-14T16:14:5", "(A pid=1) x 2026-10-14T16:14:50Z", "2026-10-14T16:14:50",
    "ab 2026-10-1٣T16:14:50 ٣2026-10-14T16:14:50",
    # stamps converted in C when ref and tz are UTC: yearless ones near a year's end or on Feb 29, impossible
    # dates, fractions of every length, a zone (left to Python), Unicode digits
    "INFO 02-29 10:00:00 x", "WARNING 12-31 23:59:59 y", "DEBUG 04-15 00:00:00 z", "INFO 13-01 00:00:00 w",
    "[2026-02-30 10:00:00] z", "2026-10-14 09:42:01,7\tDEBUG x", "[2026-10-14 09:27:43.123456789+05:30 a",
    "2026-10-14T09:27:43.1234567Z b", "[2026-10-14 09:27:43,144 I 1 2] r", "[2026-13-14 09:27:43,144 I 1 2] m",
    "٢٠٢٦-10-14 09:27:40 c", "INFO 1٠-14 09:2٧:40 d", " [2026-10-14 09:27:40] iteration 1/ 10 |",
]
batch_line = st.one_of(ts_line, paren_text, stamp_text, st.sampled_from(_DENSE_LINES),
                       st.tuples(paren_text, stamp_text).map("".join))


@needs_native
@SLOW
@given(st.lists(st.tuples(batch_line, st.booleans()), max_size=8), refs, refs, tzs)
def test_peel_and_stamp_batch_native_equals_python(rows, ref: datetime, ref2: datetime, tz) -> None:
    texts: list[str] = []
    for line, twice in rows:
        text = normalize.strip_ansi(line)
        texts += [text, text] if twice else [text]  # a line that matched two rules: the same object again
    # memos stay warm across examples (and the stamp memos are per reference time): a key too coarse
    # would hand one line another's prefixes or stamp
    for r in (ref, ref2, ref):
        got = normalize.peel_and_stamp_batch(texts, r, tz)
        assert got == normalize.peel_and_stamp_batch_py(texts, r, tz)
        assert got == [(normalize.peel_stripped(t), _uncached_timestamp(t, r, tz)) for t in texts]
        assert all(got[i] is got[i + 1] for i in range(len(texts) - 1) if texts[i] is texts[i + 1])


# -- fields_batch_vllm_v1: the vLLM V1 stats line scanned by hand -------------------------------------------

_VLLM_PIECES = ["Avg prompt throughput: ", "Engine ", "000", "1", "12.5", ".", "..", "4",  "٣", "x", " ", ": ",
                " tokens/s, Avg generation throughput: ", " tokens/s, Running: ", " reqs, Waiting: ", " reqs",
                ", Deferred: ", ", KV fetch: ", " waiting to start, ", " in progress, ", " completed waiting",
                ", Preemptions: ", ", GPU KV cache usage: ", ", CPU", ", Gpu", " KV cache usage: ", "%",
                ", Prefix cache hit rate: ", " Engines Aggregated: ", "Engine 000: ", "INFO 10-13 06:20:34 [x.py:1] "]
_NUM = st.sampled_from(["0", "12", "3.5", "0.0", ".", "1.2.3", "٣", "", "12a", "99.9",
                        # past the fast conversions: > 18 digits, > 15 significant, > 22 after the '.', > 64 chars
                        "12345678901234567890", "1234567890.1234567890", "0.00000000000000000000001",
                        "1" * 70, "2." + "5" * 70])


@st.composite
def _vllm_line(draw) -> str:
    """A V1 stats line with any optional parts and odd numbers, then perhaps cut or spliced with pieces."""
    n = lambda: draw(_NUM)  # noqa: E731
    head = draw(st.sampled_from(["", "Engine 003: ", "4 Engines Aggregated: ", "Engine 01234567890123: ", "x: ",
                                 "(A pid=1, ip=10.0.0.1) INFO 10-13 06:20:34 [loggers.py:271] Engine 014: "]))
    line = (f"{head}Avg prompt throughput: {n()} tokens/s, Avg generation throughput: {n()} tokens/s, "
            f"Running: {n()} reqs, Waiting: {n()} reqs")
    for part in (f", Deferred: {n()} reqs", f", KV fetch: {n()} waiting to start, {n()} in progress, {n()} completed "
                 "waiting", f", Preemptions: {n()}", f", {draw(st.sampled_from(['GPU', 'CPU', 'Gpu', '']))} KV cache "
                 f"usage: {n()}%", f", Prefix cache hit rate: {n()}%"):
        if draw(st.booleans()):
            line += part
    cut = draw(st.integers(0, len(line)))
    if draw(st.integers(0, 3)) == 0:
        line = line[:cut] + draw(st.lists(st.sampled_from(_VLLM_PIECES), max_size=4).map("".join)) + line[cut:]
    return line


@needs_native
@FAST
@given(st.lists(st.one_of(_vllm_line(), st.lists(st.sampled_from(_VLLM_PIECES), max_size=24).map("".join)),
                max_size=8), st.sampled_from([48, 48, 16, 0, 200]))
def test_fields_batch_vllm_v1_equals_the_regexes(texts: list[str], chars: int) -> None:
    from rlhealth.agents.signatures import _convert, _Extractor, convert_value
    from rlhealth.rules.loader import load_rules

    rule = next(r for r in load_rules().rules if r.id == "vllm.v1_stats")
    ex = _Extractor(rule)
    assert ex._batch is bytescan.fields_batch_vllm_v1  # the shipped rule takes the scanner
    assert ex.regex is not None and ex.before is not None
    args = (texts, ex.regex.search, ex.before.search, chars, ex._plan, _convert, convert_value, ex.defaults or None,
            ex.defaults)
    got, want = bytescan.fields_batch_vllm_v1(*args), bytescan.fields_batch_py(*args)
    assert got == want and [list(d) for d in got] == [list(d) for d in want]


# -- hit_lines: (end offset, rule) matches of a block as (line, rule) pairs -------------------------------------

@needs_native
@FAST
@given(st.binary(max_size=64).map(lambda b: b.replace(b"x", b"\n")), st.lists(st.tuples(st.integers(0, 64),
       st.integers(0, 40)), max_size=30), st.booleans())
@example(b"a\nb\n\nc", [(1, 3), (1, 2), (1, 3), (2, 0), (6, 1), (6, 1)], True)
def test_hit_lines_native_equals_python(block: bytes, raw: list, ordered: bool) -> None:
    from bisect import bisect_right

    raw = [(min(to, len(block)), rid) for to, rid in raw]
    if ordered:
        raw.sort()
    got, want = bytescan.hit_lines(raw, block), bytescan.hit_lines_py(raw, block)
    assert got == want
    assert got == sorted({(block.count(b"\n", 0, to), rid) for to, rid in raw})
    starts, _ = bytescan.line_starts(block, 0)  # what the core used before on large blocks
    assert got == sorted({(bisect_right(starts, to) - 1, rid) for to, rid in raw})


# -- HitSink: hyperscan's match handler, its matches as per-batch (line, rule) pairs ------------------------------

@needs_native
@FAST
@given(st.binary(max_size=64).map(lambda b: b.replace(b"x", b"\n")), st.lists(st.tuples(st.integers(0, 64),
       st.integers(0, 40)), max_size=30), st.integers(1, 9), st.booleans())
@example(b"a\nb\n\nc", [(1, 3), (1, 2), (1, 3), (2, 0), (6, 1), (6, 1)], 2, True)
@example(b"a\n\n\n\n\nb", [(6, 1), (0, 4)], 2, False)
@example(b"\n" * 5000, [(5000, 4097), (4999, 3), (10, 3), (5000, 3)], 10000, True)  # past the pair cache's bounds
def test_hit_sink_native_equals_python(block: bytes, raw: list, size: int, ordered: bool) -> None:
    raw = [(min(to, len(block)), rid) for to, rid in raw]
    if ordered:
        raw.sort()
    native, twin = bytescan.HitSink(), bytescan.HitSinkPy()
    for sink in (native, twin):
        sink(7, 0, 0, 0, None)
        sink.clear()  # forgotten
        for to, rid in raw:
            assert sink(rid, 0, to, 0, None) is None  # None: hyperscan goes on scanning
    got, want = native.take(block, size), twin.take(block, size)
    assert got == want
    # by definition: hit_lines' pairs, per batch of `size` lines, with their distinct line counts
    hits = bytescan.hit_lines_py(sorted(raw), block)
    flat = [(b * size + line, rid) for b, (pairs, _) in enumerate(got) for line, rid in pairs]
    assert flat == hits
    assert [n for _, n in got] == [len({line for line, _ in pairs}) for pairs, _ in got]
    assert all(0 <= line < size for pairs, _ in got for line, _ in pairs)
    assert (got[-1][0] != []) if got else hits == []
    assert native.take(block, size) == [] == twin.take(block, size)  # take forgets
    for sink in (native, twin):
        sink(0, 0, len(block) + 1, 0, None)
        with pytest.raises(ValueError):
            sink.take(block, size)


# -- keep_hits: Classifier.scan's grouping of its hits ------------------------------------------------------------

@needs_native
@FAST
@given(st.lists(st.sampled_from(["a", "\x1b[31mred\x1b[0m", "", "é\x1b[0m", "x y", "€\x1b[0m\x1b"]), min_size=1,
                max_size=8),
       st.lists(st.tuples(st.integers(0, 7), st.integers(0, 5)), max_size=20),
       st.lists(st.booleans(), min_size=6, max_size=6), st.lists(st.booleans(), min_size=6, max_size=6))
def test_keep_hits_native_equals_python(lines: list[str], pairs: list, benign: list, fault: list) -> None:
    from rlhealth.agents import signatures

    hits = sorted({(line % len(lines), rid) for line, rid in pairs})
    args = (hits, lines, bytes(benign), bytes(fault), normalize.strip_ansi)
    got = bytescan.native_function("keep_hits")(*args)  # type: ignore[misc]
    want = signatures.keep_hits_py(*args)
    assert got == want and list(got[3]) == list(want[3])
    assert got[2] == [normalize._ANSI_RE.sub("", lines[i]) for i in got[0]]


@needs_native
@FAST
@given(st.one_of(utf8_text, st.lists(st.sampled_from([e.decode("latin-1") for e in _ESCAPES] + ["é", "ÿ", "\x85",
                 "a", "\n", "\x07", "\\", "[", "]", "0", ";", "m", " ", "€"]), max_size=20).map("".join)))
@example("\x1b]é\x07x")
@example("\x1b[36m(A pid=1, ip=10.0.2.100)\x1b[0m INFO x")
def test_strip_ansi_latin1_is_the_str_regex(s: str) -> None:
    got = bytescan.native_function("strip_ansi_latin1")(s)  # type: ignore[misc]
    if all(ord(c) < 0x100 for c in s):
        assert got == normalize._ANSI_RE.sub("", s)
        assert type(got) is str and (got.isascii() == all(ord(c) < 0x80 for c in got))  # a canonical str
    else:
        assert got is None


# -- bare_pairs: the unquoted "key: number" pairs of trainer metric lines ----------------------------------------

_PAIR_PIECES = ["a", "A", "lm", " loss", "x_1", "/", ".", "-", ":", " : ", " ", "  ", "\t", "\n", "|", "{", "}", ",",
                "1", "12", "1.", ".5", "e", "E", "e-5", "E+3", "nan", "NaN", "inf", "Infinity", "infinity", "- ",
                "١", "é", "ß", "\u2003", "'", "step:1", " grad norm: 0.3 |", "(ms)", "Z9", " z", "@", "`", "[", "^", "~"]


@needs_native
@FAST
@given(st.lists(st.sampled_from(_PAIR_PIECES), max_size=24).map("".join))
@example("step:132 - actor/pg_loss:0.0075 - actor/entropy:1.1009 - training/global_step:132")
@example(" [2026-10-13 06:24:56] iteration 132/ 100000 | lm loss: 9.660751E-01 | grad norm: 0.362 |")
@example("a:1 b:nan c: inf, d:-Infinity}")
def test_bare_pairs_is_the_regex_findall(text: str) -> None:
    from rlhealth.agents import fold_trainer

    assert bytescan.native_function("bare_pairs")(text) == fold_trainer._BARE_PAIR_RE.findall(text)  # type: ignore[misc]


# -- quoted_pairs: the quoted "'key': number" pairs of trainer metric dicts -------------------------------------

_QUOTED_PIECES = ["'", '"', "a", "Z", "loss", "train/loss", "x_1", "/", ".", "-", ":", " : ", " ", "\t", "\n", ",",
                  "{", "}", "1", "12", "1.", ".5", "e", "E", "e-5", "E+3", "nan", "NaN", "inf", "Infinity",
                  "infinity", "-", "--", "١", "é", "\u2003", "@", "`", "[", "'loss': 0.5", '"lr": 1e-05', "'k'"]


@needs_native
@FAST
@given(st.lists(st.sampled_from(_QUOTED_PIECES), max_size=24).map("".join))
@example("{'loss': 1.2345, 'grad_norm': 0.5, 'learning_rate': 1.000e-06, 'epoch': 0.012}")
@example('{"train/loss": -Infinity, "a": NaN, "b":-.5e3, "c": 1.e}')
@example("'a'b': 1 'c' : -nan '': 2 'd':'3'")
def test_quoted_pairs_is_the_regex_findall(text: str) -> None:
    from rlhealth.agents import fold_trainer

    assert bytescan.native_function("quoted_pairs")(text) == fold_trainer._METRIC_PAIR_RE.findall(text)  # type: ignore[misc]


# -- number_of: fields_of's int() / float() of short ASCII numbers without a copy ----------------------------------

_DIGITS = st.text(alphabet="0123456789", max_size=30)


@needs_native
@FAST
@given(st.one_of(
    st.tuples(_DIGITS, st.sampled_from([".", ""]), _DIGITS).map("".join),
    st.tuples(st.text(alphabet="0", max_size=25), st.sampled_from(["", "."]), st.text(alphabet="0", max_size=25),
              st.text(alphabet="0123456789", min_size=1, max_size=17)).map("".join),
    st.floats(min_value=0, allow_nan=False, allow_infinity=False).map(lambda f: f"{f:.{abs(hash(f)) % 25}f}"),
    st.text(alphabet="0123456789.x-e٣", max_size=12)))
@example("2914.5")
@example("0.1")
@example("9007199254740993.0")  # 2**53 + 1: more than 15 significant digits, the slow path
@example("123456789012345.6")  # 16 significant digits
@example("12345678901234.5")  # 15: the division
@example("0.0000000000000000000001")  # 22 after the dot
@example("0.00000000000000000000001")  # 23
@example("999999999999999999")  # 18 digits
@example("9999999999999999999")  # 19
@example(".5")
@example("5.")
@example(".")
@example("")
def test_number_of_native_equals_python(s: str) -> None:
    native = bytescan.native_function("number_of")
    assert native is not None
    got, want = native(s), bytescan.number_of_py(s)
    assert type(got) is type(want) and repr(got) == repr(want), (s, got, want)
