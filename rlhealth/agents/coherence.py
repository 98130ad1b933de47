"""Is an agent's output plausibly a real attempt, or token salad? Cheap, language-light heuristics.

Each check names its reason so the verdict can say *why* outputs look broken. The checks look for
what a degraded weight sync or a broken serving build produces: leaked chat-template tokens,
runs of the same token, mojibake, several scripts mixed in one message, vowel-less salad.
"""

from __future__ import annotations

import re
import zlib

_WORD_RE = re.compile(r"[A-Za-z]{2,}")
_VOWEL_RE = re.compile(r"[aeiouyAEIOUY]")
# Chat-template / special tokens that a healthy policy never prints in its answer.
_SPECIAL_TOKEN_RE = re.compile(r"<\|(?:im_start|im_end|endoftext|eot_id|start_header_id|end_header_id|begin_of_text)\|>"
                               r"|(?:<think>\s*){2,}|(?:</think>\s*){2,}")
# UTF-8 read as Latin-1/CP1252: "Ã©", "â€™", "ä¸" and friends.
_MOJIBAKE_RE = re.compile(r"(?:Ã[\u0080-\u00bf]|â€|ä¸|å[\u0080-\u00bf]|æ[\u0080-\u00bf\u0100-\u017f]|Ä[\u0080-\u017f])")


def _script(ch: str) -> str | None:
    o = ord(ch)
    if ch.isascii():
        return "latin" if ch.isalpha() else None
    if 0x00C0 <= o <= 0x024F:
        return "latin"
    if 0x0400 <= o <= 0x04FF:
        return "cyrillic"
    if 0x0370 <= o <= 0x03FF:
        return "greek"
    if 0x0590 <= o <= 0x06FF:
        return "rtl"
    if 0x3040 <= o <= 0x30FF or 0x4E00 <= o <= 0x9FFF or 0xAC00 <= o <= 0xD7AF:
        return "cjk"
    return None


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
    if _SPECIAL_TOKEN_RE.search(s):
        return "leaked_special_tokens"
    if len(_MOJIBAKE_RE.findall(s)) >= 2:
        return "mojibake"
    if n >= 200:
        raw = s.encode("utf-8", "replace")
        if len(zlib.compress(raw, 6)) / len(raw) < 0.08:
            return "repetition"
    tokens = s.split()
    if len(tokens) >= 8:
        stutter = sum(1 for a, b in zip(tokens, tokens[1:]) if a == b)
        if stutter / (len(tokens) - 1) > 0.3:
            return "repetition"
    if len(tokens) >= 20:
        sample = tokens[:200]
        top = max(sample.count(t) for t in set(sample))
        if top / len(sample) > 0.5:
            return "repetition"
    scripts = {sc for sc in map(_script, s) if sc}
    letters = [ch for ch in s if ch.isalpha()]
    if len(scripts) >= 3 and len(letters) >= 20:
        return "mixed_scripts"
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


def trial_incoherence(samples: list[str]) -> str | None:
    """A trial is incoherent when at least half of its sampled outputs are: returns the commonest reason."""
    reasons = [r for r in map(incoherence_reason, samples) if r is not None]
    if samples and len(reasons) * 2 >= len(samples) and reasons:
        # Ties broken by name, never by set order: the same trial must give the same reason in every process.
        return max(sorted(set(reasons)), key=reasons.count)
    return None
