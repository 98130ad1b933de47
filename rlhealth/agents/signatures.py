"""Signature engine: classify batches of log lines against the rule packs.

One Hyperscan block-mode database per process (all patterns, one scan per batch of lines
joined by ``\\n``), with an RE2 fallback (``re2.Set`` per line, Latin-1 over the same UTF-8
bytes) that gives identical (line, rule) pairs. Patterns are written in the common subset of
Hyperscan, RE2, Python ``re`` and (after :func:`to_ere`) POSIX ERE:

* no look-around, back-references, lazy quantifiers; ``(?:…)`` for grouping, no captures;
* no ``\\s``/``\\W``/``\\D`` (they match ``\\n`` and would let a block-mode match span lines);
  negated classes ``[^…]`` are rewritten to ``[^\\n…]`` for the block scan;
* matching runs on the ANSI-stripped line; prefer substring matching (lines interleave).

Fields come from a second regex (``extract``, Python ``re`` with named groups) run only on
matched lines. Values are converted: ints, floats, ``True``/``False`` -> bool, ``1,848,592`` ->
int, and fields named ``*_gib`` holding a size (``7.52 GiB``, ``448.00 MiB``) -> GiB float;
names in ``text_fields`` stay strings. ``defaults`` fill fields the line did not carry.

Benign wins: when a line matches a ``benign`` rule, matches of fault kinds on that line are
dropped (metric/progress/config/weight_sync matches are kept).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from rlhealth.agents.bytescan import (
    VLLM_V1_BEFORE,
    VLLM_V1_EXTRACT,
    HitSink,
    fields_batch,
    fields_batch_vllm_v1,
    native_function,
    split_hits_py,
    strip_ansi_bytes,
)
from rlhealth.agents.normalize import strip_ansi

__all__ = [
    "KINDS",
    "FAULT_KINDS",
    "SEVERITIES",
    "GATES",
    "Rule",
    "RuleSet",
    "LineMatch",
    "Classifier",
    "block_pattern",
    "one_match_tail",
    "to_ere",
    "convert_value",
    "hyperscan_available",
]

KINDS = ("death", "wedge", "oom", "nccl", "engine", "ray", "hardware", "infra", "benign",
         "metric", "progress", "weight_sync", "config")
FAULT_KINDS = frozenset({"death", "wedge", "oom", "nccl", "engine", "ray", "hardware", "infra"})
SEVERITIES = ("fatal", "error", "warning", "info")
GATES = ("A", "B", "C", "restarts")


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    pack: str
    kind: str
    severity: str
    gates: tuple[str, ...]
    signal: str
    pattern: str
    fields: tuple[str, ...]
    meaning: str
    match: tuple[str, ...]
    no_match: tuple[str, ...]
    extract: str = ""
    text_fields: tuple[str, ...] = ()
    extract_before: str = ""
    defaults: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    versions: dict[str, str] = field(default_factory=dict)


# A msgspec Struct is built in C (~0.05 us; a dataclass's __init__ ~0.5 us, a frozen one ~2 us), once per
# matched line of dense logs; gc=False: it holds no reference back to anything that could make a cycle.
# Read-only by convention.
class LineMatch(msgspec.Struct, gc=False):
    index: int
    rule: Rule
    fields: dict[str, object]
    text: str


# Batches whose hits a reader handed over and the core has not scanned yet: a capture merge holds one
# batch per log file (up to 64 files for the probe's workers), a reader up to 20 before a first timestamp.
_MAX_HANDED = 128
# `take`'s batch size for a whole block in one batch
_ONE_BATCH = 1 << 62


def block_pattern(pattern: str) -> str:
    """Pattern for block-mode scanning: negated classes must not cross a newline."""
    return pattern.replace("[^", "[^\\n")


_BOUNDS_RE = re.compile(r"\{([0-9]+),([0-9]*)\}\Z")


def _class_end(pattern: str, i: int) -> int:
    """The index after the character class that opens at `pattern[i]` ("[")."""
    n = len(pattern)
    i += 2 if pattern.startswith("[^", i) else 1
    if i < n and pattern[i] == "]":  # a "]" first in a class is a member
        i += 1
    while i < n and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i + 1


def one_match_tail(pattern: str) -> str:
    """`pattern` with a repeat at its very end cut to its least count: ``Q[0-9]+`` -> ``Q[0-9]``,
    ``Q={5,}`` -> ``Q={5}``. A line holds a match of one iff it holds a match of the other (a match of the
    cut pattern extends to one of the whole; a match of the whole begins with one of the cut), so the
    (line, rule) hits are the same; but Hyperscan reports a match at every end offset, one per digit of a
    trailing number: the cut pattern ends once where the whole ended at each digit (the dense capture's
    SGLang decode lines: ~7 matches a line). Only a top-level last atom (a character, an escape, a class, a
    group) repeated with ``+`` or ``{n,}``/``{n,m}`` (n >= 1) is cut; anything else is returned as is."""
    i, n = 0, len(pattern)
    last: tuple[int, int] | None = None  # (end of the last top-level atom, end of its quantifier)
    while i < n:
        c = pattern[i]
        start = i
        if c == "\\":
            i += 2
        elif c == "[":
            i = _class_end(pattern, i)
        elif c == "(":
            depth = 0
            while i < n:
                if pattern[i] == "\\":
                    i += 2
                    continue
                if pattern[i] == "[":  # a class inside the group: skip it whole
                    i = _class_end(pattern, i)
                    continue
                depth += pattern[i] == "("
                depth -= pattern[i] == ")"
                i += 1
                if depth == 0:
                    break
        elif c in "|^$":
            i += 1
            last = None
            continue
        else:
            i += 1
        atom_end = i
        if i < n and pattern[i] in "+*?":
            i += 1
        elif i < n and pattern[i] == "{":
            close = pattern.find("}", i)
            i = n if close < 0 else close + 1
        last = (atom_end, i) if start < atom_end <= n else None
    if last is None or last[1] != n or last[0] >= n:
        return pattern
    quant = pattern[last[0]:]
    if quant == "+":
        return pattern[:last[0]]
    m = _BOUNDS_RE.match(quant)
    if m is not None and int(m.group(1)) >= 1:
        return pattern[:last[0]] + "{" + m.group(1) + "}"
    return pattern


_ERE_SIMPLE = {"d": "[0-9]", "]": "]", "}": "}", "/": "/", "-": "-", ":": ":", "=": "=",
               "'": "'", '"': '"', " ": " ", "<": "<", ">": ">", "#": "#", "%": "%",
               ",": ",", "@": "@", "!": "!", "&": "&", "~": "~", "`": "`", "_": "_",
               "|": "[|]"}


def to_ere(pattern: str) -> str:
    """Translate a rule pattern to POSIX ERE for ``grep -E`` (the benchmark oracle).

    Raises ValueError for constructs ERE cannot express."""
    out: list[str] = []
    i = 0
    in_class = False
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if in_class:
            if c == "\\":
                raise ValueError("backslash inside a bracket expression")
            if c == "]" and out and out[-1] not in ("[", "[^"):
                in_class = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            if pattern.startswith("[^", i):
                out.append("[^")
                i += 2
            else:
                out.append("[")
                i += 1
            if i < n and pattern[i] == "]":
                out.append("]")
                i += 1
            continue
        if pattern.startswith("(?:", i):
            out.append("(")
            i += 3
            continue
        if pattern.startswith("(?", i):
            raise ValueError("unsupported group syntax")
        if c == "\\":
            if i + 1 >= n:
                raise ValueError("trailing backslash")
            e = pattern[i + 1]
            if e in ".()[*+?{^$\\":
                out.append("\\" + e)
            elif e in _ERE_SIMPLE:
                out.append(_ERE_SIMPLE[e])
            else:
                raise ValueError(f"escape \\{e} has no ERE equivalent")
            i += 2
            continue
        if c in "*+?}" and i + 1 < n and pattern[i + 1] == "?":
            raise ValueError("lazy quantifier")
        out.append(c)
        i += 1
    return "".join(out)


_INT_RE = re.compile(r"[+-]?\d+\Z")
_THOUSANDS_RE = re.compile(r"\d{1,3}(?:,\d{3})+\Z")
_FLOAT_RE = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?\Z")
_SIZE_RE = re.compile(r"([0-9.]+) ?(bytes|B|KiB|MiB|GiB|TiB|PiB|EiB|KB|MB|GB|TB)\Z")
_SIZE_GIB = {"bytes": 1 / 2**30, "B": 1 / 2**30, "KiB": 1 / 2**20, "MiB": 1 / 2**10,
             "GiB": 1.0, "TiB": 2.0**10, "PiB": 2.0**20, "EiB": 2.0**30,
             "KB": 1e3 / 2**30, "MB": 1e6 / 2**30, "GB": 1e9 / 2**30, "TB": 1e12 / 2**30}


def convert_value(name: str, value: str, text_fields: tuple[str, ...] = ()) -> object:
    if name in text_fields:
        return value
    if name.endswith("_gib"):
        m = _SIZE_RE.match(value)
        if m:
            try:
                return float(m.group(1)) * _SIZE_GIB[m.group(2)]
            except ValueError:
                return value
    return _convert(value)


def _convert(value: str) -> object:
    if value.isascii():
        # fast paths, same results as the regexes below: ASCII digits -> int; digits with one
        # '.' (and at least one digit) -> float
        if value.isdigit():
            return int(value)
        if "." in value and value.replace(".", "", 1).isdigit():
            return float(value)
    if _INT_RE.match(value):
        return int(value)
    if _THOUSANDS_RE.match(value):
        return int(value.replace(",", ""))
    if _FLOAT_RE.match(value):
        try:
            return float(value)
        except ValueError:
            return value
    if value in ("True", "true"):
        return True
    if value in ("False", "false"):
        return False
    return value


def hs_compile(expressions: list[bytes], ids: list[int], flags: list[int], mode: int) -> Any:
    """A compiled `hyperscan.Database` of `expressions`."""
    import hyperscan

    db = hyperscan.Database(mode=mode)
    db.compile(expressions=expressions, ids=ids, elements=len(expressions), flags=flags)
    return db


# How a Classifier compiles its Hyperscan database. The core does no I/O; a process may install a
# compile that keeps databases between runs (`rlhealth.runtime` installs `rlhealth.hscache`'s).
HS_COMPILE: Callable[[list[bytes], list[int], list[int], int], Any] = hs_compile


def hyperscan_available() -> bool:
    try:
        import hyperscan  # noqa: F401
    except Exception:  # noqa: BLE001  # pragma: no cover - no wheel for the platform, or a wheel that does not load
        return False
    return True


EXTRACT_BEFORE_CHARS = 48


class _Extractor:
    __slots__ = ("regex", "before", "defaults", "_plan", "_batch")

    def __init__(self, rule: Rule) -> None:
        src = rule.extract or ""
        self.regex = re.compile(src) if src and rule.fields else None
        # `extract_before` must end where `extract` matched: searched with that end as the string's end
        self.before = (re.compile(f"(?:{rule.extract_before})\\Z")
                       if self.regex is not None and rule.extract_before else None)
        self.defaults = dict(rule.defaults)
        # per field, in the rule's order: its group's index and what convert_value would do with
        # its name: keep text (0), size in GiB (1), convert (2)
        # (index into m.groups() + before.groups(): extract's groups first)
        plan = []
        n_main = self.regex.groups if self.regex is not None else 0
        for name in rule.fields:
            how = 0 if name in rule.text_fields else 1 if name.endswith("_gib") else 2
            if self.regex is not None and name in self.regex.groupindex:
                plan.append((name, self.regex.groupindex[name] - 1, how))
            elif self.before is not None and name in self.before.groupindex:
                plan.append((name, n_main + self.before.groupindex[name] - 1, how))
        self._plan = tuple(plan)
        # the vLLM V1 stats line (most matched lines of a busy inference log) has a hand scanner in C
        self._batch = fields_batch_vllm_v1 if (src, rule.extract_before) == (VLLM_V1_EXTRACT, VLLM_V1_BEFORE) \
            else fields_batch

    def __call__(self, text: str) -> dict[str, object]:
        return self.batch([text])[0]

    def batch(self, texts: Sequence[str]) -> list[dict[str, object]]:
        """The fields of each of `texts` (lines this rule matched, ANSI-stripped): one regex pass
        per line; the loop, the conversions and the dicts in C (`bytescan.fields_batch`)."""
        if self.regex is None:
            return [dict(self.defaults) for _ in texts]
        return self._batch(texts if type(texts) is list else list(texts), self.regex.search,
                            self.before.search if self.before is not None else None, EXTRACT_BEFORE_CHARS,
                            self._plan, _convert, convert_value, self.defaults or None, self.defaults)


def keep_hits_py(hits: list[tuple[int, int]], lines: Sequence[str], benign: bytes, fault: bytes,
                 strip: Callable[[str], str]) -> tuple[list[int], list[int], list[str], dict[int, list[int]]]:
    """What `Classifier.scan` keeps of its sorted (line, rule) hits: a line's fault rules are dropped when one of
    its rules is benign. The kept hits' lines, rules and texts (`strip` of the line), and their positions by rule
    (first seen first). The C helper's `keep_hits` gives the same."""
    kept_lines: list[int] = []
    kept_rids: list[int] = []
    texts: list[str] = []
    by_rule: dict[int, list[int]] = {}
    n = len(hits)
    i = 0
    while i < n:
        line = hits[i][0]
        j = i
        has_benign = False
        while j < n and hits[j][0] == line:
            if benign[hits[j][1]]:
                has_benign = True
            j += 1
        text = strip(lines[line])
        for k in range(i, j):
            rid = hits[k][1]
            if has_benign and fault[rid]:
                continue
            ks = by_rule.get(rid)
            if ks is None:
                by_rule[rid] = [len(kept_lines)]
            else:
                ks.append(len(kept_lines))
            kept_lines.append(line)
            kept_rids.append(rid)
            texts.append(text)
        i = j
    return kept_lines, kept_rids, texts, by_rule


_keep_hits: Callable[..., tuple[list[int], list[int], list[str], dict[int, list[int]]]] = (
    native_function("keep_hits") or keep_hits_py)


class Classifier:
    """Compile once; ``scan`` a batch of lines; identical results on both engines."""

    def __init__(self, rules: RuleSet, engine: str | None = None) -> None:
        self._rules = rules.rules
        # each rule's field regexes compiled when it first matches: ~110 of the ~180 rules extract fields, and a
        # log matches a handful of them (re.compile of all was ~30 ms of every probe's start)
        self._extract: list[_Extractor | None] = [None] * len(self._rules)
        self._benign = [r.kind == "benign" for r in self._rules]
        self._fault = [r.kind in FAULT_KINDS for r in self._rules]
        self._benign_b, self._fault_b = bytes(self._benign), bytes(self._fault)
        if engine is None:
            engine = "hyperscan" if hyperscan_available() else "re2"
        if engine == "hyperscan":
            self._compile_hyperscan()
        elif engine == "re2":
            self._compile_re2()
        else:
            raise ValueError(f"unknown engine {engine!r}")
        self._engine = engine
        # hits a prefiltering log reader found for a batch it built (`hand_hits`), by id of its lines
        self._handed: dict[int, tuple[Sequence[str], list[tuple[int, int]]]] = {}

    @property
    def engine(self) -> str:
        return self._engine

    @property
    def rules(self) -> tuple[Rule, ...]:
        return self._rules

    # -- engines -----------------------------------------------------------------------
    def _compile_hyperscan(self) -> None:
        import hyperscan

        # one match per line where a pattern ends in a repeat (`one_match_tail`): fewer matches to hand over
        exprs = [block_pattern(one_match_tail(r.pattern)).encode("utf-8") for r in self._rules]
        flags = [hyperscan.HS_FLAG_MULTILINE] * len(exprs)
        self._hs_db: hyperscan.Database | None = None
        if exprs:
            db = HS_COMPILE(exprs, list(range(len(exprs))), flags, hyperscan.HS_MODE_BLOCK)
            self._hs_db = db
            self._hs_scratch = hyperscan.Scratch(db)
            self._hs_sink = HitSink()

    def _compile_re2(self) -> None:
        import re2

        opts = re2.Options()
        opts.encoding = re2.Options.Encoding.LATIN1
        s = re2.Set.SearchSet(opts)
        for r in self._rules:
            idx = s.Add(r.pattern.encode("utf-8"))
            if idx < 0:  # pragma: no cover - checked by check_rules
                raise ValueError(f"RE2 cannot compile rule {r.id}")
        if self._rules:
            s.Compile()
        self._re2_set = s

    def _hit_batches_hyperscan(self, buf: bytes, size: int) -> list[tuple[list[tuple[int, int]], int]]:
        if self._hs_db is None or not buf:
            return []
        # the match handler is C (`HitSink`): no Python call per match, and the (end, rule) pairs become the
        # batches' (line, rule) pairs without a tuple per match
        sink = self._hs_sink
        sink.clear()
        self._hs_db.scan(buf, match_event_handler=sink, scratch=self._hs_scratch)
        return sink.take(buf, size)

    def _hits_hyperscan(self, buf: bytes) -> list[tuple[int, int]]:
        batches = self._hit_batches_hyperscan(buf, _ONE_BATCH)
        return batches[0][0] if batches else []

    def _hits_re2(self, data: list[bytes]) -> list[tuple[int, int]]:
        if not self._rules:
            return []
        out: list[tuple[int, int]] = []
        match = self._re2_set.Match
        for i, b in enumerate(data):
            ids = match(b)
            if ids:
                for rid in sorted(ids):
                    out.append((i, rid))
        return out

    # -- public -------------------------------------------------------------------------
    def block_hits(self, stripped: bytes) -> list[tuple[int, int]]:
        """(line index, rule index) pairs, sorted, before benign suppression, of a block of lines
        joined by ``\\n`` that is already ANSI-stripped (`strip_ansi_bytes`) and valid UTF-8: the
        pairs `scan` starts from for the same lines."""
        if not stripped or not self._rules:
            return []
        if self._engine == "hyperscan":
            return self._hits_hyperscan(stripped)
        return self._hits_re2(stripped.split(b"\n"))

    def block_hit_batches(self, stripped: bytes, size: int) -> list[tuple[list[tuple[int, int]], int]]:
        """`block_hits` split into batches of `size` lines: per batch, its pairs with lines counted from
        the batch's first and how many distinct lines they are on (`bytescan.split_hits_py`); the list
        ends at the last batch with a hit."""
        if not stripped or not self._rules:
            return []
        if self._engine == "hyperscan":
            return self._hit_batches_hyperscan(stripped, size)
        return split_hits_py(self._hits_re2(stripped.split(b"\n")), size)

    def hand_hits(self, lines: Sequence[str], hits: list[tuple[int, int]]) -> None:
        """A log reader that already scanned the bytes of `lines` (`block_hits`) hands over its
        (line, rule) pairs: the next `scan` of this very list object uses them instead of scanning
        again. They must be what `raw_hits(lines)` gives (the reader hands them only for a batch whose
        lines are its bytes as decoded, or "" where no rule matched). Bounded: batches never scanned
        (dropped, or held past the bound) are forgotten and simply scanned."""
        if len(self._handed) >= _MAX_HANDED:
            self._handed.clear()
        self._handed[id(lines)] = (lines, hits)

    def raw_hits(self, lines: Sequence[str]) -> list[tuple[int, int]]:
        """(line index, rule index) pairs before benign suppression, sorted."""
        return self._raw(lines)

    def _raw(self, lines: Sequence[str], data: bytes | None = None) -> list[tuple[int, int]]:
        if not lines:
            return []
        if self._handed:
            handed = self._handed.pop(id(lines), None)
            if handed is not None and handed[0] is lines:
                return handed[1]
        if data is not None:  # the caller's "\n".join(lines).encode(), no line holding a newline
            buf = strip_ansi_bytes(data)
        else:
            buf = strip_ansi_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))
        if data is None and buf.count(b"\n") != len(lines) - 1:
            # a "line" carries its own newline: fall back to per-line sanitising
            buf = "\n".join(strip_ansi(x).replace("\n", " ") for x in lines).encode(
                "utf-8", "surrogatepass")
        if self._engine == "hyperscan":
            return self._hits_hyperscan(buf)
        return self._hits_re2(buf.split(b"\n"))

    def scan(self, lines: Sequence[str], data: bytes | None = None) -> list[LineMatch]:
        """Matches of a batch, in line order. `data`, when given, must be
        ``"\\n".join(lines).encode("utf-8", "surrogatepass")`` with no line holding a newline (a log
        reader that still has the bytes it decoded: `LogReader.read_utf8`); it only saves the
        join and the encode."""
        hits = self._raw(lines, data)
        if not hits:
            return []
        rules = self._rules
        kept_lines, kept_rids, texts, by_rule = _keep_hits(hits, lines, self._benign_b, self._fault_b, strip_ansi)
        # fields: one extraction pass per rule over all the lines it matched
        fields: list[dict[str, object]] = [{}] * len(kept_lines)
        extract = self._extract
        for rid, ks in by_rule.items():
            ex = extract[rid]
            if ex is None:
                ex = extract[rid] = _Extractor(rules[rid])
            for k, f in zip(ks, ex.batch([texts[k] for k in ks])):
                fields[k] = f
        return [LineMatch(line, rules[rid], f, text)
                for line, rid, f, text in zip(kept_lines, kept_rids, fields, texts)]
