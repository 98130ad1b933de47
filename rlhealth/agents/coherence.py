"""Is an agent's output plausibly a real attempt, or token salad? Cheap, language-light heuristics.

Each check names its reason so the verdict can say *why* outputs look broken.
"""

from __future__ import annotations

import re
import zlib

_WORD_RE = re.compile(r"[A-Za-z]{2,}")
_VOWEL_RE = re.compile(r"[aeiouyAEIOUY]")


def incoherence_reason(text: str | None) -> str | None:
    """None when the text looks like a coherent attempt; otherwise a short reason."""
    if text is None:
        return None
    s = text.strip()
    if not s:
        return "empty"
    n = len(s)
    nonprint = sum(1 for ch in s if not ch.isprintable() and ch not in "\n\t\r")
    if nonprint / n > 0.10 or s.count("\ufffd") / n > 0.05:
        return "non_printable"
    if n >= 200:
        raw = s.encode("utf-8", "replace")
        ratio = len(zlib.compress(raw, 6)) / len(raw)
        if ratio < 0.08:
            return "repetition"
    tokens = s.split()
    if len(tokens) >= 20:
        top = max((tokens.count(t) for t in set(tokens[:200])), default=0)
        if top / min(len(tokens), 200) > 0.5:
            return "repetition"
    letters = [ch for ch in s if ch.isalpha()]
    if len(letters) >= 40:
        non_latin = sum(1 for ch in letters if ord(ch) > 0x24F)
        if non_latin / len(letters) > 0.5:
            return "wrong_script"
    words = _WORD_RE.findall(s)
    if len(words) >= 20:
        vowelless = sum(1 for w in words if not _VOWEL_RE.search(w))
        if vowelless / len(words) > 0.45:
            return "token_salad"
    return None
