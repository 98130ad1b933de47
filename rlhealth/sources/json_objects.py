"""Reading parts of JSON objects that other tools wrote: partial and odd files are the norm."""

from __future__ import annotations

from typing import Any


def dict_at(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """obj[key] when it is a JSON object, else {}."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def list_at(obj: dict[str, Any], key: str) -> list[Any]:
    """obj[key] when it is a JSON array, else []."""
    value = obj.get(key)
    return value if isinstance(value, list) else []


__all__ = ["dict_at", "list_at"]
