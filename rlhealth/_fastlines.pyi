from collections.abc import Callable, Sequence

# Types of the optional C helper built from rlhealth/_native/*.c (for type checkers only).
# Every function takes bytes only (no other buffer type); agents/bytescan.py holds the Python twins.

def strip_ansi(data: bytes, /) -> bytes: ...
def utf8_valid(data: bytes, /) -> bool: ...
def count_newlines(data: bytes, /) -> int: ...

# (base + the start offset of every line as native int64s, the longest line's length in bytes)
def line_starts(data: bytes, base: int, /) -> tuple[bytes, int]: ...

# The fields dict of one matched line from its regex groups (twin: signatures._fields_of_py)
def fields_of(values: tuple[str | None, ...], plan: tuple[tuple[str, int, int], ...],
              convert: Callable[[str], object], convert_size: Callable[[str, str], object],
              defaults: dict[str, object] | None, /) -> dict[str, object]: ...

# fields_of for every line one rule matched (twin: bytescan.fields_batch_py)
def fields_batch(texts: list[str], search: Callable[[str], object], before: Callable[[str, int, int], object] | None,
                 before_chars: int, plan: tuple[tuple[str, int, int], ...], convert: Callable[[str], object],
                 convert_size: Callable[[str, str], object], defaults: dict[str, object] | None,
                 empty: dict[str, object], /) -> list[dict[str, object]]: ...

# normalize.peel_and_stamp for each text (twin: normalize.peel_and_stamp_batch_py)
def peel_stamp_batch(texts: list[str], paren_memo: dict[str, tuple[object, int]],
                     paren_fn: Callable[[str], tuple[object, int]], paren_max: int, name_memo: dict[str, object],
                     prefix_cls: Callable[[str], object], stamp_memos: tuple[dict[str, object], ...],
                     stamp_fn: Callable[[str], object], slow: Callable[[str], tuple[object, object]],
                     ref: object, tz: object, /) -> list[tuple[object, object]]: ...

# (branch, end) of normalize._TS_START_RE.match(text, pos), or None
def stamp_span(text: str, pos: int, /) -> tuple[int, int] | None: ...

# sorted unique (line, rule) pairs of hyperscan's (end offset, rule) matches in a block (twin: bytescan.hit_lines_py)
def hit_lines(raw: list[tuple[int, int]], block: bytes, /) -> list[tuple[int, int]]: ...

# hyperscan's match handler in C: (end, rule) of each match, then per-batch (line, rule) pairs
# (twin: bytescan.HitSinkPy)
class HitSink:
    def __call__(self, id_: int, from_: int, to: int, flags: int, context: object, /) -> None: ...
    def clear(self) -> None: ...
    def take(self, block: bytes, size: int, /) -> list[tuple[list[tuple[int, int]], int]]: ...

# Classifier.scan's kept hits: lines, rules, texts, positions by rule (twin: signatures.keep_hits_py)
def keep_hits(hits: list[tuple[int, int]], lines: Sequence[str], benign: bytes, fault: bytes,
              strip: Callable[[str], str], /) -> tuple[list[int], list[int], list[str], dict[int, list[int]]]: ...

# normalize.strip_ansi(s) for a str whose characters are all below U+0100, else None
def strip_ansi_latin1(s: str, /) -> str | None: ...

# fold_trainer._BARE_PAIR_RE.findall(text)
def bare_pairs(text: str, /) -> list[tuple[str, str]]: ...
def quoted_pairs(text: str, /) -> list[tuple[str, str]]: ...

# engine stats rows folded into their engines up to the first row left to Python (twin: fold_engines.engine_fold_py)
def engine_fold(engs: list[object], tss: list[float], fields: list[dict[str, object]], start: int,
                gen_bucket: int | None, gen_bucket_s: int, engine_bucket_s: float, max_samples: int, /) -> int: ...

# int(s) of ASCII digits, float(s) of ASCII digits with one '.', else None (twin: bytescan.number_of_py)
def number_of(s: str, /) -> int | float | None: ...
