"""The worker's tables: per-job health state and per-job verdict bookkeeping.

Both tables are keyed by `job_key(job_id)` (bytes), store raw bytes, and have the catalogue's
partition count, so they are co-partitioned with every event topic (style.md H3).

* `job_health`: `JobHealth.to_bytes()`. The agent reassigns the value after every step
  (`table[key] = state.to_bytes()`), never mutates it in place (H4): the assignment is what writes
  the changelog.
* `verdicts`: the last published verdict of the job, its `seq` and the hysteresis' memory (JSON, see
  `VerdictBook`). The timer writes it, outside any stream event.

faust normally takes a table write's changelog partition from the event being processed and
refuses writes outside an agent. `PartitionedTable` remembers each key's partition (from the event
that wrote it, or from the changelog record that restored it) and uses it when there is no current
event, so the timer can write and the record lands in the partition that owns the job even when a
producer's partitioner differs from ours (librdkafka's default is not murmur2).
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import faust
import orjson
from faust.streams import current_event
from faust.types import EventT

from rlhealth.agents.stability import Stability
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


@dataclass
class VerdictBook:
    """What the worker last published for a job."""

    seq: int = 0
    published_at: float = 0.0  # wall clock, Unix seconds
    last: Verdict | None = None
    stability: Stability = field(default_factory=Stability)  # the hysteresis' memory (agents.stability)

    def to_bytes(self) -> bytes:
        return orjson.dumps({"seq": self.seq, "published_at": self.published_at,
                             "last": self.last.model_dump(mode="json") if self.last else None,
                             "stability": self.stability.to_dict()})

    @classmethod
    def from_bytes(cls, data: bytes | None) -> VerdictBook:
        if not data:
            return cls()
        obj = orjson.loads(data)
        last = Verdict.model_validate(obj["last"]) if obj.get("last") else None
        return cls(seq=int(obj.get("seq", 0)), published_at=float(obj.get("published_at", 0.0)), last=last,
                   stability=Stability.from_dict(obj.get("stability")))


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
    book = table(VERDICTS, "last published verdict and seq per job (JSON)")
    book.share_partitions_with(health)
    return Tables(job_health=health, verdicts=book)


__all__ = ["JOB_HEALTH", "VERDICTS", "PartitionedTable", "Tables", "VerdictBook", "make_tables"]
