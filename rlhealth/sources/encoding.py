"""Bytes of text files that other tools wrote, before they are parsed.

Windows editors and PowerShell (`Out-File`, `Set-Content -Encoding utf8` before 6.0) start a UTF-8 file
with a byte-order mark. JSON parsers reject it and CSV or sacct parsers read it as part of the first
field name, so a capture file edited or exported on Windows would lose its header or its first object.
"""

from __future__ import annotations

UTF8_BOM = b"\xef\xbb\xbf"


def without_bom(raw: bytes) -> bytes:
    """`raw` without a leading UTF-8 byte-order mark."""
    return raw[3:] if raw.startswith(UTF8_BOM) else raw


__all__ = ["UTF8_BOM", "without_bom"]
