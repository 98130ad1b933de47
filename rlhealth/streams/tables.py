"""The worker's tables: per-job health state and per-job verdict bookkeeping.

Both tables are keyed by `job_key(job_id)` (bytes), store raw bytes, and have the catalogue's
partition count, so they are co-partitioned with every event topic (style.md H3).

* `job_health`: `JobHealth.to_bytes()`. The agent reassigns the value after every step
  (`table[key] = state.to_bytes()`), never mutates it in place (H4): the assignment is what writes
  the changelog.
* `verdicts`: the job's `seq`, the digest of its last published verdict's key facts and the
  hysteresis' memory (JSON, see `VerdictBook`). The timer writes it, outside any stream event.

faust normally takes a table write's changelog partition from the event being processed and
refuses writes outside an agent. `PartitionedTable` remembers each key's partition (from the event
that wrote it, or from the changelog record that restored it) and uses it when there is no current
event, so the timer can write and the record lands in the partition that owns the job even when a
producer's partitioner differs from ours (librdkafka's default is not murmur2).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import faust
import orjson
from faust.streams import current_event
from faust.types import EventT

from rlhealth.agents.stability import call_of, held_until, key_facts, needs_shown
from rlhealth.schemas import Verdict

JOB_HEALTH = "job_health"
VERDICTS = "verdict_book"


class PartitionedTable(faust.Table):
    """A faust Table that knows the partition of every key it holds."""

    key_partitions: MutableMapping[Any, int]

    def __init__(self, app: faust.App, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.key_partitions = {}

    def share_partitions_with(self, other: PartitionedTable) -> None:
        """Use one key -> partition map for co-partitioned tables keyed alike."""
        self.key_partitions = other.key_partitions

    def partition_for_key(self, key: Any) -> int | None:
        # A key's partition is where its records arrive: remembered from the record (`remember`)
        # or the changelog, since the current event of a buffered agent may be another job's.
        partition = self.key_partitions.get(key)
        if partition is not None:
            return partition
        event = current_event()
        if event is None:
            raise TypeError(f"{self.name}: no partition known for key {key!r} outside a stream event")
        self._verify_source_topic_partitions(event.message.topic)
        partition = event.message.partition
        self.key_partitions[key] = partition
        return partition

    def remember(self, key: Any, partition: int) -> None:
        self.key_partitions[key] = partition

    def apply_changelog_batch(self, batch: Iterable[EventT]) -> None:
        events = list(batch)
        for event in events:
            key = self._to_key(event.key)
            if event.message.value is None:
                continue  # a tombstone: the key goes; its partition entry is harmless
            self.key_partitions[key] = event.message.partition
        super().apply_changelog_batch(events)

    def keys_in(self, partitions: set[int]) -> list[Any]:
        return [k for k in list(self.data.keys()) if self.key_partitions.get(k) in partitions]


# The layout `VerdictBook.to_bytes` writes (the "book" field). Books without it are of the first layout
# (the whole last published verdict, and the hysteresis' memory with the shown verdict); they still read.
BOOK_LAYOUT = 2


def facts_digest(facts: tuple[Any, ...]) -> str:
    """A short digest of `stability.key_facts(verdict)` that is the same in every process (Python's
    `hash` of a string is not): what a book keeps of its last published verdict to tell whether the
    next one changed. Times are written as RFC 3339 by orjson, whatever their tzinfo object."""
    return hashlib.blake2b(orjson.dumps(facts), digest_size=12).hexdigest()


def _iso(t: datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


def _time(s: str | None) -> datetime | None:
    return datetime.fromisoformat(s) if s else None


def _call(c: Any) -> tuple[str, bool] | None:
    return (str(c[0]), bool(c[1])) if c else None


@dataclass
class VerdictBook:
    """What the worker last published for a job: its seq and time, the digest of its key facts, and
    the hysteresis' memory (agents.stability) as facts: the published verdict's judging time and call,
    the pending call and since when.

    The published verdict itself (6-7 kB) is kept only when the hysteresis may re-publish it, i.e. when
    it is a KILL (`stability.needs_shown`); a book is otherwise ~250 bytes. Before 2026-12-03 (session
    9) every book held the whole verdict: ~6.7 kB a judged job in the changelog, as much as the
    verdict itself, and half of what a judging pass gave the producer. Books of that first layout
    still read (`from_bytes`); a worker of the first layout reading this one finds its seq and
    published_at and no verdict, so it publishes its next verdict as a change, with the next seq."""

    seq: int = 0
    published_at: float = 0.0  # wall clock, Unix seconds
    facts: str | None = None  # facts_digest(key_facts(last published verdict)); None: nothing published
    shown_at: datetime | None = None  # the published verdict's judging time (produced_at)
    shown_call: tuple[str, bool] | None = None  # ... its (verdict, escalate)
    shown: Verdict | None = None  # ... itself, only when needs_shown(shown_call)
    pending_call: tuple[str, bool] | None = None
    pending_since: datetime | None = None

    @classmethod
    def published(cls, out: Verdict, wall: float, facts: str, pending_call: tuple[str, bool] | None,
                  pending_since: datetime | None) -> VerdictBook:
        """The book once `out` (with its seq) was delivered at `wall`; `facts`: its facts_digest."""
        call = call_of(out)
        return cls(seq=out.seq, published_at=wall, facts=facts, shown_at=out.produced_at, shown_call=call,
                   shown=out if needs_shown(call) else None, pending_call=pending_call, pending_since=pending_since)

    def to_bytes(self, shown_json: dict[str, Any] | None = None) -> bytes:
        """`shown_json`: `shown.model_dump(mode="json")` when the caller already made it (it published it).
        The bytes are an exact-size copy (`compact`): the table keeps them for as long as the job lives."""
        if self.shown is not None and shown_json is None:
            shown_json = self.shown.model_dump(mode="json")
        return compact(orjson.dumps({
            "book": BOOK_LAYOUT, "seq": self.seq, "published_at": self.published_at, "facts": self.facts,
            "shown_at": _iso(self.shown_at), "shown_call": list(self.shown_call) if self.shown_call else None,
            "shown": shown_json if self.shown is not None else None,
            "pending_call": list(self.pending_call) if self.pending_call else None,
            "pending_since": _iso(self.pending_since)}))

    @classmethod
    def from_bytes(cls, data: bytes | None) -> VerdictBook:
        if not data:
            return cls()
        obj = orjson.loads(data)
        if obj.get("book") == BOOK_LAYOUT:
            call = _call(obj.get("shown_call"))
            shown = Verdict.model_validate(obj["shown"]) if obj.get("shown") else None
            return cls(seq=int(obj.get("seq", 0)), published_at=float(obj.get("published_at", 0.0)),
                       facts=obj.get("facts"), shown_at=_time(obj.get("shown_at")), shown_call=call, shown=shown,
                       pending_call=_call(obj.get("pending_call")), pending_since=_time(obj.get("pending_since")))
        return cls._first_layout(obj)

    @classmethod
    def _first_layout(cls, obj: dict[str, Any]) -> VerdictBook:
        """A book of the first layout: {"seq", "published_at", "last": verdict, "stability": {"shown":
        verdict, or "last" when it is the last one, "pending_call", "pending_since"}}."""
        last = Verdict.model_validate(obj["last"]) if obj.get("last") else None
        st = obj.get("stability") or {}
        shown: Verdict | None = None
        if st.get("shown") == SHOWN_IS_LAST or (last is not None and st.get("shown") == obj["last"]):
            shown = last
        elif st.get("shown"):
            shown = Verdict.model_validate(st["shown"])
        call = call_of(shown) if shown is not None else None
        return cls(seq=int(obj.get("seq", 0)), published_at=float(obj.get("published_at", 0.0)),
                   facts=facts_digest(key_facts(last)) if last is not None else None,
                   shown_at=shown.produced_at if shown is not None else None, shown_call=call,
                   shown=shown if needs_shown(call) else None, pending_call=_call(st.get("pending_call")),
                   pending_since=_time(st.get("pending_since")))


# What a first-layout book's stability held as "shown" when the verdict shown was the book's "last"
SHOWN_IS_LAST = "last"


def compact(data: bytes) -> bytes:
    """`data` in an exact-size buffer. orjson (and msgspec) return bytes whose allocation is larger
    than their length (a verdict book of 13 kB sat in a 32 kB block): fine for a message sent at once,
    but a table value lives as long as its job, and at 10,000 jobs the slack was ~180 MB of the
    worker's memory. The copy costs about a microsecond."""
    return bytes(memoryview(data))


def fingerprint(data: bytes | None) -> tuple[int, int]:
    """(length, Python's 64-bit hash) of a book's bytes: which bytes a `BookFacts` describes, without
    keeping a copy of them (under a rocksdb store every read returns new bytes)."""
    return (len(data), hash(data)) if data else (0, 0)


@dataclass(slots=True)
class BookFacts:
    """What judging a job needs of its `VerdictBook` at every tick, kept in memory per job.

    The worker keeps these facts per job, made from the book it writes, and decodes the book only when
    the bytes in the table are not the ones the facts describe (restored from the changelog) or when
    `stabilize_facts` needs the published verdict itself (a KILL held back)."""

    fingerprint: tuple[int, int]  # of the book bytes these facts describe
    seq: int
    published_at: float
    last_facts: str | None  # facts_digest(key_facts(last)), None without a last verdict
    shown_at: datetime | None  # the hysteresis' published verdict: its judging time and call
    shown_call: tuple[str, bool] | None
    pending_call: tuple[str, bool] | None
    pending_since: datetime | None

    @classmethod
    def of(cls, book: VerdictBook, data: bytes | None) -> BookFacts:
        return cls(fingerprint(data), book.seq, book.published_at, book.facts, book.shown_at, book.shown_call,
                   book.pending_call, book.pending_since)

    def describes(self, data: bytes | None) -> bool:
        return self.fingerprint == fingerprint(data)

    def held_until(self, raw: Verdict) -> tuple[datetime, datetime] | None:
        """`stability.held_until` for this book's memory: None when `stabilize` publishes `raw` as is."""
        return held_until(self.shown_at, self.shown_call, self.pending_call, self.pending_since, raw)


@dataclass
class Tables:
    job_health: PartitionedTable
    verdicts: PartitionedTable


def make_tables(app: faust.App, partitions: int) -> Tables:
    def table(name: str, help: str) -> PartitionedTable:
        t = PartitionedTable(app, name=name, default=None, partitions=partitions, key_type=bytes,
                             value_type=bytes, help=help, beacon=app.tables.beacon)
        app.tables.add(t)
        return t

    health = table(JOB_HEALTH, "JobHealth state per job (msgpack)")
    book = table(VERDICTS, "seq, last verdict's facts and hysteresis memory per job (JSON)")
    book.share_partitions_with(health)
    return Tables(job_health=health, verdicts=book)


__all__ = ["BOOK_LAYOUT", "JOB_HEALTH", "SHOWN_IS_LAST", "VERDICTS", "BookFacts", "PartitionedTable", "Tables",
           "VerdictBook", "compact", "facts_digest", "fingerprint", "make_tables"]
