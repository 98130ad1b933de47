"""Decoded job states the worker has just written, so that the next buffer that folds an event of the
same job (or the tick that judges it) does not decode the table's bytes again.

A job's events of one refresh arrive on several topics and are folded in several buffers: the job's
state was decoded from its table bytes once per buffer (msgpack, ~7 kB, 28% of the fold's CPU per
event at 10,000 jobs). `_write_back` puts here the state it has just encoded, with the very bytes it
assigned to the table; an entry is used only while the table still holds those bytes (the same object,
or equal bytes after a changelog restore), so the table stays the one source of truth and is still
reassigned, never mutated in place.

The fold mutates the state it steps, so it *takes* the entry (`take`): the cache never holds a state
that is being changed, nor one an exception left half-stepped. The judging pass only reads (`peek`).
Bounded (`max_jobs`, oldest written first out): a decoded state holds ~27 kB of Python objects against
its ~7 kB of bytes, so caching every job would cost more memory than it saves time at 10,000 jobs.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


class DecodedStates:
    __slots__ = ("_entries", "hits", "max_jobs", "misses")

    def __init__(self, max_jobs: int) -> None:
        self.max_jobs = max_jobs
        self._entries: OrderedDict[bytes, tuple[bytes, Any]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def put(self, key: bytes, data: bytes, state: Any) -> None:
        """`state` decodes to `data`, which was just assigned to the table (newest entry)."""
        if self.max_jobs <= 0:
            return
        entries = self._entries
        entries.pop(key, None)
        entries[key] = (data, state)
        while len(entries) > self.max_jobs:
            entries.popitem(last=False)

    def _get(self, key: bytes, data: bytes, take: bool) -> Any | None:
        got = self._entries.get(key)
        if got is None or not (got[0] is data or got[0] == data):
            self.misses += 1
            return None
        self.hits += 1
        if take:
            del self._entries[key]
        return got[1]

    def take(self, key: bytes, data: bytes) -> Any | None:
        """The decoded state of the table's `data` for `key`, removed (the caller will change it), or None."""
        return self._get(key, data, True)

    def peek(self, key: bytes, data: bytes) -> Any | None:
        """The decoded state of `data`, left in place: the caller must not change it."""
        return self._get(key, data, False)

    def drop(self, key: bytes) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


__all__ = ["DecodedStates"]
