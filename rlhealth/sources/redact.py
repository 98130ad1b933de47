"""Mask secrets in log lines before they leave the machine (or enter an event).

Two steps:

1. **Markers** (`Redactor.hit_lines`): one scan of a whole line-aligned block (a batch of lines
   joined by ``\\n``, as UTF-8 bytes) with a Hyperscan block-mode database of secret markers
   (fallback: one RE2 alternation, else one Python ``re`` alternation over the bytes; all three
   give the same set of lines). Each marker is a *necessary condition* of one substitution
   regex below, written so that it can never cross a ``\\n`` (a match end maps to its line), so
   a line without a marker is guaranteed to be left unchanged by the substitutions.
2. **Substitutions** (`_SUBS`, Python ``re`` on the decoded text) only on the lines that had a
   marker (and, in the log reader, on lines that had invalid UTF-8), and only when one of the
   guards that every substitution's match implies is there (`_may_change`: markers also fire on
   prose, and the substitutions cost ~100 us on such a line).

Measured (bench/redact.py, 2 shared vCPUs): about 0.1-0.2 us/line on ordinary log lines (one
Hyperscan scan per 500-line batch), a few us per line that carries a marker.

What is masked (the value is replaced by ``[REDACTED]``; the key name or prefix is kept so the
line stays readable and greppable):

* assignments whose name ends in a credential word: ``HF_TOKEN=...``, ``WANDB_API_KEY=...``,
  ``DAYTONA_API_KEY=...``, ``api_key=...``, ``"token": "..."``, ``aws_secret_access_key = ...``,
  ``password: ...`` (``max_tokens=4096`` and ``tokenizer=...`` are not credentials and stay, and
  neither is a value of only digits and dots unless the name is a password: SGLang's
  ``#token: 29301`` is a count);
* ``Authorization: <scheme> <value>`` headers and ``Bearer <token>`` anywhere;
* command-line flags ``--api-key X``, ``--token=X``, ``--password X``;
* well-known token shapes anywhere in a line, also in free text: OpenAI/Anthropic ``sk-...``,
  Hugging Face ``hf_...``, GitHub ``ghp_/gho_/ghu_/ghs_/ghr_...`` and ``github_pat_...``, AWS
  access key ids ``AKIA...``/``ASIA...``, Slack ``xox[abprs]-...``, Daytona ``dtn_...``, W&B
  ``wandb_v1_...``;
* the password of ``scheme://user:password@host`` URLs;
* names whose segment is ``key`` (``WANDB_KEY=...``, ``wandb.key: ...``), flags ending in a credential
  word (``--aws-secret-access-key VALUE``, ``--wandb-key=VALUE``), and all of these with ANSI colour
  codes around the name: a line with a marker is masked with its ANSI codes stripped (and returned
  unchanged, codes included, when nothing in it is a secret).

`redact_config` masks a config mapping (the job spec's `config`, flat dotted keys or nested): every
value under a secret-looking key name (`secret_key_name`) and secrets inside any string value.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Sequence

from rlhealth import settings

MASK = "[REDACTED]"

# ---- markers: one per substitution, each a superset of what that substitution can change ----
#
# Byte patterns in the common subset of Hyperscan, RE2 (Latin-1) and Python ``re`` (bytes):
# no ``\s`` (it matches ``\n``), negated classes exclude ``\n``. The substitutions run on
# decoded text with Unicode semantics, so the markers spell out what that implies in UTF-8:
# * ``\s`` of a str pattern also matches \x1c-\x1f, U+0085, U+00A0, U+1680, U+2000-U+200A,
#   U+2028, U+2029, U+202F, U+205F, U+3000 (``_WS``);
# * under ``(?i)`` the ASCII letters i, k and s also match U+0130, U+0131, U+212A (Kelvin) and
#   U+017F (long s): a line holding one of those always takes the exact path (``_FOLD``).
_WS = (rb"(?:[\t\x0b\x0c\r \x1c-\x1f]|\xc2[\x85\xa0]|\xe1\x9a\x80|\xe2\x80[\x80-\x8a\xa8\xa9\xaf]"
       rb"|\xe2\x81\x9f|\xe3\x80\x80)")
_FOLD = rb"\xc4[\xb0\xb1]|\xc5\xbf|\xe2\x84\xaa"
def _ci(pattern: bytes) -> bytes:
    """Case-insensitive for ASCII letters, spelled out (``a`` -> ``[aA]``) so that no engine's
    own caseless mode (RE2 Latin-1 would also fold bytes >= 0xC0) changes the meaning. Letters
    inside ``[...]`` are left alone: those classes are written with both cases."""
    out = bytearray()
    i = 0
    in_class = False
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == 0x5C:  # backslash: copy the escape (\xHH or \c)
            k = 4 if pattern[i + 1:i + 2] == b"x" else 2
            out += pattern[i:i + k]
            i += k
            continue
        if in_class:
            if c == 0x5D:
                in_class = False
        elif c == 0x5B:
            in_class = True
        elif 0x61 <= c <= 0x7A or 0x41 <= c <= 0x5A:
            out += b"[" + bytes([c | 0x20, c & ~0x20]) + b"]"
            i += 1
            continue
        out.append(c)
        i += 1
    return bytes(out)


_PASSWORD_WORD = _ci(rb"(?:passw(?:or)?d|pwd)")
_CRED_WORD_NOT_PASSWORD = _ci(rb"(?:api[_-]?key|access[_-]?key(?:[_-]?id)?|secret[_-]?key|private[_-]?key|token"
                              rb"|secret|credentials?)")
_CRED_WORD = rb"(?:" + _CRED_WORD_NOT_PASSWORD + rb"|" + _PASSWORD_WORD + rb")"
# A byte that can begin a value character (`[^\s"',;&}\]]` of the substitution) other than [0-9.]:
# bytes >= 0x80 all pass (a lead byte of a Unicode space too: a superset is safe).
_VALUE_NOT_NUMBER = rb"[^\t\n\x0b\x0c\r \x1c-\x1f\"',;&}\]0-9.]"

MARKERS: tuple[bytes, ...] = (
    # Authorization header: the word followed by an optional quote and = or :
    _ci(rb"authori") + rb"[sSzZ]" + _ci(rb"ation") + rb"[\"']?" + _WS + rb"*[:=]",
    # Bearer <6+ token chars>
    _ci(rb"bearer") + _WS + rb"+[A-Za-z0-9._~+/=-]{6}",
    # --...api-key / token / secret / password flags followed by = or a space
    rb"--(?:[a-zA-Z0-9_-]*[-_])?" + _ci(rb"(?:api[-_]?key|key|token|secret|password|passwd|credentials?)")
    + rb"(?:=|" + _WS + rb")",
    # a name segment "key" (WANDB_KEY=..., wandb.key: ...)
    _ci(rb"key") + rb"[\"']?" + _WS + rb"*[=:]",
    # a credential word wrapped in ANSI colour codes (``\x1b[1mAPI_KEY\x1b[0m=...``): the
    # substitutions run on the line with its ANSI codes stripped
    (_CRED_WORD + rb"|" + _ci(rb"key")).join([rb"(?:", rb")[\"']?\x1b\[[0-9;?]*[ -/]*[@-~]"]),
    # NAME=value / NAME: value / "name": "value" where NAME ends in a credential word: any value
    # after a password word, else a value that is not only digits and dots (see `_not_a_count`)
    _PASSWORD_WORD + rb"[\"']?" + _WS + rb"*[=:]",
    _CRED_WORD_NOT_PASSWORD + rb"[\"']?" + _WS + rb"*[=:]" + _WS + rb"*[\"']?[0-9.]*" + _VALUE_NOT_NUMBER,
    # known token shapes (case-sensitive, like their substitution)
    rb"(?:sk-|hf_|gh[pousr]_|github_pat_|xox[abprs]-|dtn_|wandb_v1_)[A-Za-z0-9_-]{12}",
    rb"sk-ant-api",  # sk-ant-api<digits>: the substitution's \d also takes non-ASCII digits
    rb"(?:AKIA|ASIA)[A-Z0-9]{16}",
    # scheme://user:password@host
    rb"://[^\n:/@]+:[^\n/@]+@",
    # non-ASCII characters that case-fold to i, k or s
    _FOLD,
)

# Site-specific secret names, from $RLHEALTH_REDACT_NAMES (comma-separated, e.g. "sas,conn_str"):
# `NAME=value`, `name: value`, `"name": "value"` (also as the last segment of a longer name) and
# `--name value` are masked, and config keys of that name too.
EXTRA_NAMES: tuple[str, ...] = tuple(
    n for n in settings.load().redact_name_list() if re.fullmatch(r"[A-Za-z0-9_.-]+", n))
if EXTRA_NAMES:
    _names = _ci(b"(?:" + b"|".join(re.escape(n).encode() for n in EXTRA_NAMES) + b")")
    MARKERS = (*MARKERS,
               _names + rb"(?:[\"']|\x1b\[[0-9;?]*[ -/]*[@-~])*" + _WS + rb"*[=:]",
               rb"--" + _names + rb"(?:=|" + _WS + rb")")


def _combined(markers: tuple[bytes, ...]) -> bytes:
    return b"|".join(b"(?:" + p + b")" for p in markers)


class Redactor:
    """Finds the lines of a block that may hold a secret, and masks them.

    ``engine``: "hyperscan" (default when importable), "re2" or "re"; all give the same lines.
    """

    def __init__(self, engine: str | None = None) -> None:
        if engine is None:
            engine = _default_engine()
        self.engine = engine
        if engine == "hyperscan":
            import hyperscan

            from rlhealth.hscache import compile_database

            db = compile_database(list(MARKERS), list(range(len(MARKERS))), [0] * len(MARKERS),
                                  hyperscan.HS_MODE_BLOCK)
            self._db = db
            self._scratch = hyperscan.Scratch(db)
        elif engine == "re2":
            import re2

            opts = re2.Options()
            opts.encoding = re2.Options.Encoding.LATIN1
            self._rx = re2.compile(_combined(MARKERS), opts)
        elif engine == "re":
            self._rx = re.compile(_combined(MARKERS))
        else:
            raise ValueError(f"unknown engine {engine!r}")

    def _ends(self, block: bytes) -> list[int]:
        if self.engine == "hyperscan":
            ends: list[int] = []
            append = ends.append

            def on_match(_id: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
                append(to)

            self._db.scan(block, match_event_handler=on_match, scratch=self._scratch)
            return ends
        return [m.end() for m in self._rx.finditer(block)]

    def hit_lines(self, block: bytes, starts: Sequence[int] | None = None, base: int = 0) -> list[int]:
        """Sorted indices of the lines of `block` (split on ``\\n``) that carry a marker.

        `starts`: ``base`` + the offset of each line in `block`, when the caller has them (a marker
        ends inside its line: a search instead of counting the newlines up to each one)."""
        if not block:
            return []
        ends = self._ends(block)
        if not ends:
            return []
        ends.sort()
        out: list[int] = []
        if starts is not None:
            for to in ends:
                k = bisect_right(starts, base + to - 1) - 1
                if not out or out[-1] != k:
                    out.append(k)
            return out
        line = 0
        pos = 0
        count = block.count
        for to in ends:
            if to > pos:
                line += count(b"\n", pos, to)
                pos = to
            if not out or out[-1] != line:
                out.append(line)
        return out

    def still_marked(self, block: bytes, starts: Sequence[int], base: int, marked: list[int]) -> list[int]:
        """The lines of `marked` (from `hit_lines(block, starts, base)`) that still carry a marker once
        their ANSI codes are stripped. `_redact_one` masks the stripped text, and each marker is a
        necessary condition of its substitution on any text, so a line this drops is left as it was:
        a reader need not even decode it. Markers fire on raw bytes where a colour code follows a
        credential word (``\\x1b[1mAPI_KEY\\x1b[0m=``), and so on prose ending in "token" too."""
        keep: list[int] = []
        recheck: list[int] = []
        stripped: list[bytes] = []
        end = len(block)
        n = len(starts)
        for k in marked:
            raw = block[starts[k] - base: starts[k + 1] - base - 1 if k + 1 < n else end]
            if b"\x1b" in raw:
                recheck.append(k)
                stripped.append(_ANSI_RE_BYTES.sub(b"", raw))
            else:
                keep.append(k)
        if recheck:
            keep += [recheck[i] for i in self.hit_lines(b"\n".join(stripped))]
            keep.sort()
        return keep

    def redact_block(self, block: bytes, lines: list[str], extra: list[int] | tuple[int, ...] = ()) -> int:
        """Mask `lines` in place, where ``lines == block.decode().split("\\n")`` (line for line).

        `extra`: indices that must take the exact path regardless of markers (e.g. lines whose
        bytes were not valid UTF-8, so `block` does not spell their decoded text). Returns how
        many lines changed."""
        hits = self.hit_lines(block)
        if extra:
            hits = sorted(set(hits).union(extra))
        changed = 0
        for i in hits:
            old = lines[i]
            new = _redact_one(old)
            if new != old:
                lines[i] = new
                changed += 1
        return changed

    def redact_lines(self, lines: list[str]) -> int:
        if not lines:
            return 0
        block = "\n".join(lines).encode("utf-8", "surrogatepass")
        if block.count(b"\n") != len(lines) - 1:  # a "line" holds a newline: mark line by line
            idx = [i for i, s in enumerate(lines) if self.hit_lines(s.encode("utf-8", "surrogatepass"))]
            return self.redact_block(b"", lines, idx)
        return self.redact_block(block, lines)

    def suspicious(self, line: str) -> bool:
        return bool(self._ends(line.encode("utf-8", "surrogatepass")))


def _default_engine() -> str:
    try:
        import hyperscan  # noqa: F401

        return "hyperscan"
    except Exception:  # noqa: BLE001  # pragma: no cover - no wheel, or one that does not load
        pass
    try:
        import re2  # noqa: F401

        return "re2"
    except Exception:  # noqa: BLE001  # pragma: no cover - as above
        return "re"


_DEFAULT: Redactor | None = None


def default_redactor() -> Redactor:
    """The process-wide Redactor (compiled on first use, ~ms)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Redactor()
    return _DEFAULT


_SECRET_NAME = (
    r"(?:(?:[A-Za-z0-9_.-]*[_.-])?key|[A-Za-z0-9_.-]*?(?:api[_-]?key|apikey|access[_-]?key(?:[_-]?id)?|secret[_-]?access[_-]?key|"
    r"secret[_-]?key|client[_-]?secret|private[_-]?key|auth[_-]?token|access[_-]?token|refresh[_-]?token|"
    r"session[_-]?token|token|secret|passw(?:or)?d|passwd|pwd|credentials?))"
)

_PASSWORD_NAME_RE = re.compile(r"""(?i)(?:passw(?:or)?d|pwd)["']?\s*[=:]\s*["']?\Z""")
_NUMBER_RE = re.compile(r"[0-9.]+\Z")


def _not_a_count(m: re.Match[str]) -> str:
    """The mask of a NAME=value match, unless the value is only digits and dots and NAME is not a
    password: ``#token: 29301`` (SGLang's decode-batch stats), ``token: 512`` are counts, and no
    credential format other than a numeric PIN is a bare number."""
    if _NUMBER_RE.match(m.group(2)) and not _PASSWORD_NAME_RE.search(m.group(1)):
        return m.group(0)
    return m.group(1) + MASK


_SUBS: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    # Authorization: Bearer xyz / Authorization: Basic xyz / "authorization": "token xyz"
    (
        re.compile(
            r"""(?i)(\bauthori[sz]ation["']?\s*[:=]\s*["']?(?:(?:bearer|basic|token|digest)\s+)?)([^\s"',;]+)"""
        ),
        r"\1" + MASK,
    ),
    # Bearer tokens anywhere
    (re.compile(r"(?i)(\bbearer\s+)([A-Za-z0-9._~+/=-]{6,})"), r"\1" + MASK),
    # --api-key VALUE / --token=VALUE / --password VALUE
    (
        re.compile(
            r"(?i)(--(?:[a-z0-9_-]*[-_])?(?:api[-_]?key|key|token|secret|password|passwd|credentials?)(?:=|\s+))"
            r"(?!\[REDACTED\])([^\s\"']+)"
        ),
        r"\1" + MASK,
    ),
    # NAME=value, NAME: value, "name": "value" where NAME ends in a credential word (a number is
    # kept unless NAME is a password: `_not_a_count`).
    (
        re.compile(
            r"(?i)(\b" + _SECRET_NAME + r"""["']?\s*(?:=|:)\s*["']?)(?!\[REDACTED\]|<\|)([^\s"',;&}\]]{4,})"""
        ),
        _not_a_count,
    ),
    # Known token shapes, wherever they appear.
    (
        re.compile(
            r"\b(sk-(?:proj-|ant-(?:api\d\d-)?|live-|test-)?|hf_|gh[pousr]_|github_pat_|xox[abprs]-|dtn_|wandb_v1_)"
            r"[A-Za-z0-9_-]{12,}"
        ),
        r"\1" + MASK,
    ),
    (re.compile(r"\b((?:AKIA|ASIA)[A-Z0-9]{4})[A-Z0-9]{12}\b"), r"\1" + MASK),
    # scheme://user:password@host
    (re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:)([^\s/@]+)(@)"), r"\1" + MASK + r"\3"),
]
if EXTRA_NAMES:
    _extra = "(?:" + "|".join(re.escape(n) for n in EXTRA_NAMES) + ")"
    _SUBS += [
        (re.compile(r"(?i)(\b(?:[A-Za-z0-9_.-]*[_.-])?" + _extra + r"""["']?\s*[=:]\s*["']?)(?!\[REDACTED\])"""
                    r"""([^\s"',;&}\]]+)"""), r"\1" + MASK),
        (re.compile(r"(?i)(--" + _extra + r"(?:=|\s+))(?!\[REDACTED\])([^\s\"']+)"), r"\1" + MASK),
    ]


# Necessary conditions of the substitutions above, so that a line a marker flagged for nothing (a
# colour code after the word "token" in prose, say) costs a few searches instead of ~100 us of
# substitutions (the NAME=value one backtracks at every word): a line none of these match is left
# unchanged by every substitution (each finds nothing, so the next sees the same text). Each guard is
# what every match of its substitutions contains, under the same flags (`(?i)` folds the same
# characters). The ones led by ``=``/``:`` run on the reversed text: a cased first character would
# cost the search its fast skip to candidate positions.
def _reversed_words(words: str) -> str:
    return "|".join(w[::-1] for w in words.split("|"))


_GUARDS_REVERSED = re.compile(
    # NAME=value: every `_SECRET_NAME` ends in one of these words; Authorization: / Authorization=
    r"""(?i)[=:]\s*["']?(?:""" + _reversed_words(
        "key|key_id|key-id|keyid|token|secret|password|passwd|pwd|credential|credentials|authorization|authorisation")
    + "".join("|" + re.escape(n[::-1]) for n in EXTRA_NAMES) + ")")
_GUARDS = (
    re.compile(r"(?i)--(?:[a-z0-9_-]*(?:key|token|secret|passw(?:or)?d|credentials?)"
               + "".join("|" + re.escape(n) for n in EXTRA_NAMES) + r")(?:=|\s)"),
    re.compile(r"(?i)bearer\s"),
    re.compile(r"sk-|hf_|gh[pousr]_|github_pat_|xox[abprs]-|dtn_|wandb_v1_|AKIA|ASIA|://"),
)


def _may_change(text: str) -> bool:
    """False when no substitution can change `text` (True is only a maybe)."""
    return any(g.search(text) for g in _GUARDS) or _GUARDS_REVERSED.search(text[::-1]) is not None


def might_contain_secret(line: str) -> bool:
    """The marker scan alone: False means `redact` would return the line unchanged."""
    return default_redactor().suspicious(line)


def redact(line: str) -> str:
    """Return `line` with credentials masked. Lines without a secret marker are returned as is."""
    if not default_redactor().suspicious(line):
        return line
    return _redact_one(line)


_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# The same on UTF-8 bytes: it matches ASCII only, so it strips exactly the encoding of what `_ANSI_RE`
# strips from the decoded text.
_ANSI_RE_BYTES = re.compile(_ANSI_RE.pattern.encode("ascii"))


def _redact_one(line: str) -> str:
    """Mask one line. A line with ANSI codes is masked with them stripped (a colour code between a
    key name and its value must not hide the value); it is returned as is when nothing was masked."""
    text = _ANSI_RE.sub("", line) if "\x1b" in line else line
    if not _may_change(text):
        return line
    new = text
    for pattern, repl in _SUBS:
        new = pattern.sub(repl, new)
    return line if new == text else new


_SECRET_SEGMENT = re.compile(
    r"(?i)^(?:.*[_-])?(?:key|api[_-]?key|apikey|token|secret|passw(?:or)?d|pwd|credentials?|auth)$"
    r"|(?:api[_-]?key|access[_-]?key|secret|password|passwd|credential|private[_-]?key|auth[_-]?token"
    r"|access[_-]?token|refresh[_-]?token|session[_-]?token)")


def secret_key_name(name: str) -> bool:
    """A config key (dotted path allowed: ``wandb.key``) whose value is a credential: a segment
    that is or ends in key/token/secret/password/credential(s), or contains a credential phrase
    (``aws_secret_access_key``, ``hf_api_key``). ``max_tokens``, ``tokenizer``, ``key_fn`` stay."""
    extra = {n.lower() for n in EXTRA_NAMES}
    return any(_SECRET_SEGMENT.search(seg) or seg.lower() in extra for seg in re.split(r"[./]", name) if seg)


def redact_config(value: object, name: str = "") -> object:
    """A config mapping (or list, or scalar) with every credential masked: values under a secret
    key name (see `secret_key_name`), and secrets inside any string value (`redact`)."""
    if isinstance(value, dict):
        return {k: redact_config(v, f"{name}.{k}" if name else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_config(v, name) for v in value]
    if name and secret_key_name(name.rsplit(".", 1)[-1]) and value not in (None, "", True, False):
        return MASK
    if isinstance(value, str):
        return _redact_one(value)
    return value


def redact_lines(lines: list[str]) -> int:
    """Redact a list of lines in place; returns how many lines changed.

    One marker scan over the whole batch (joined by ``\\n``, UTF-8); only the lines holding a
    marker go through the substitutions."""
    return default_redactor().redact_lines(lines)


__all__ = ["EXTRA_NAMES", "MARKERS", "MASK", "Redactor", "default_redactor", "might_contain_secret", "redact",
           "redact_config", "redact_lines", "secret_key_name"]
