from collections.abc import Callable

# Types of the optional C helper built from rlhealth/_native/fastlines.c (for type checkers only).
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
