"""The worker's cache of decoded job states (`rlhealth/streams/state_cache.py`): the fold and the
judging take a state from it only while the table holds the bytes it was written as; the fold takes
the entry out (it changes the state), so a core that fails half-way through an event, or a table
value written behind the worker's back, never leaves a state in use that differs from the table's
bytes. (That every capture publishes the same verdicts, books and metric points with the cache as
without: tests/test_worker_judges_what_can_change.py.)"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from rlhealth.schemas import job_key
from rlhealth.streams.state_cache import DecodedStates
from tests.offline_worker import offline_worker

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


class St(msgspec.Struct):
    job_id: str
    seen: list[int] = msgspec.field(default_factory=list)

    def to_bytes(self) -> bytes:
        return msgspec.msgpack.encode(self)

    @staticmethod
    def from_bytes(data: bytes) -> St:
        return msgspec.msgpack.decode(data, type=St)


@dataclass
class Ev:
    n: int
    fail: bool = False


@dataclass
class MutatingCore:
    """Steps in place, as the real core does, and can fail half-way (after changing the state)."""

    decoded: list[int] = field(default_factory=list)

    def new_state(self, job_id: str) -> St:
        return St(job_id)

    def step(self, state: St, ev: Ev, now: datetime) -> tuple[St, list[Any]]:
        state.seen.append(ev.n)
        if ev.fail:
            raise RuntimeError("half-way")
        return state, []


def fold(w: Any, key: bytes, events: list[Ev]) -> None:
    """The fold's use of the table: load (taking), step, write back; a failed step drops the state."""
    state = w._load(key, "j", take=True)
    for ev in events:
        try:
            state, _ = w.core.step(state, ev, T0)
        except RuntimeError:
            w._decoded.drop(key)  # (the worker dead-letters the record; the state is not kept)
            return
    w._write_back({key: state})


def test_the_fold_takes_states_only_while_the_table_holds_their_bytes() -> None:
    w = offline_worker(MutatingCore(), [T0])
    key = job_key("j")
    w.tables.job_health.key_partitions = {key: 0}
    fold(w, key, [Ev(1), Ev(2)])
    assert len(w._decoded) == 1 and w._decoded.hits == 0
    fold(w, key, [Ev(3)])
    assert w._decoded.hits == 1  # taken decoded
    assert St.from_bytes(w.tables.job_health[key]).seen == [1, 2, 3]
    fold(w, key, [Ev(4), Ev(5, fail=True)])  # changed half-way, then failed: the table is as before
    assert St.from_bytes(w.tables.job_health[key]).seen == [1, 2, 3]
    assert len(w._decoded) == 0  # taken, and not put back
    assert w._load(key, "j").seen == [1, 2, 3]  # decoded from the table again
    fold(w, key, [Ev(6)])
    assert St.from_bytes(w.tables.job_health[key]).seen == [1, 2, 3, 6]
    # a value written behind the worker's back (a changelog restore): its bytes are decoded
    w.tables.job_health[key] = St("j", [9]).to_bytes()
    hits = w._decoded.hits
    assert w._load(key, "j").seen == [9]
    assert w._decoded.hits == hits
    # equal bytes in a new object (a rocksdb read) still match the cached state
    fold(w, key, [Ev(10)])
    w.tables.job_health[key] = bytes(bytearray(w.tables.job_health[key]))
    assert w._load(key, "j").seen == [9, 10] and w._decoded.hits == hits + 1
    # a deleted job's entry goes with it
    w._write_back({key: None})
    assert len(w._decoded) == 0 and key not in w.tables.job_health


def test_peeking_leaves_the_entry_and_the_cache_is_bounded() -> None:
    cache = DecodedStates(2)
    a, b, c = St("a"), St("b"), St("c")
    cache.put(b"a", a.to_bytes(), a)
    cache.put(b"b", b.to_bytes(), b)
    assert cache.peek(b"a", a.to_bytes()) is a and cache.peek(b"a", a.to_bytes()) is a
    cache.put(b"c", c.to_bytes(), c)  # over the bound: the oldest written goes
    assert cache.peek(b"a", a.to_bytes()) is None and len(cache) == 2
    assert cache.take(b"b", b.to_bytes()) is b and cache.take(b"b", b.to_bytes()) is None
    off = DecodedStates(0)
    off.put(b"a", a.to_bytes(), a)
    assert len(off) == 0
