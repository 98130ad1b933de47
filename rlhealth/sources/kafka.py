"""Kafka consumer helper (kafka-python): read the event topics and yield decoded events.

A record that does not decode (bad JSON, unknown kind or schema version, invalid fields, a kind
on the wrong topic) is not dropped: it goes whole to the dead-letter topic as a
`rlhealth.schemas.DeadLetter` with its source topic, partition, offset and the reason, and is
counted. Delivery of a dead letter is awaited before the consumer moves on, so a record is
never lost between "could not use it" and "kept it".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from kafka import KafkaConsumer

from rlhealth.schemas import DeadLetter, EventBase, EventDecodeError, decode_event
from rlhealth.schemas.kafka_security import KafkaSecurity, resolve
from rlhealth.schemas.topics import TopicCatalog

DEAD_LETTER_TIMEOUT_S = 30.0


class DeadLetterSink(Protocol):
    def send_dead_letter(self, record: DeadLetter) -> Any: ...


@dataclass
class ConsumerCounters:
    received: int = 0
    decoded: int = 0
    dead_lettered: int = 0
    tombstones: int = 0
    dead_letter_reasons: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "received": self.received,
            "decoded": self.decoded,
            "dead_lettered": self.dead_lettered,
            "tombstones": self.tombstones,
            "dead_letter_reasons": dict(self.dead_letter_reasons),
        }


@dataclass(frozen=True)
class ConsumedEvent:
    """A decoded event and where it was read (the evidence reference of anything it triggers)."""

    event: EventBase
    topic: str
    partition: int
    offset: int
    key: bytes | None
    timestamp_ms: int | None = None


def _job_id_from_key(key: bytes | None) -> str | None:
    if not key:
        return None
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return None


class RecordHandler:
    """Decode one record or dead-letter it. Independent of the Kafka client, so it is testable alone."""

    def __init__(self, catalog: TopicCatalog, dead_letters: DeadLetterSink | None) -> None:
        self.catalog = catalog
        self.dead_letters = dead_letters
        self.counters = ConsumerCounters()

    def handle(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
               timestamp_ms: int | None = None) -> ConsumedEvent | None:
        self.counters.received += 1
        if value is None:
            # A tombstone on a compacted topic: a deletion marker, not an event and not an error.
            self.counters.tombstones += 1
            return None
        try:
            event = decode_event(value)
            allowed = self.catalog.kinds_for_topic(topic)
            kind = event.kind  # type: ignore[attr-defined]
            if allowed and kind not in allowed:
                raise EventDecodeError("wrong_kind_for_topic", f"{kind} on {topic}")
        except EventDecodeError as exc:
            self._dead_letter(exc, topic, partition, offset, key, value)
            return None
        self.counters.decoded += 1
        return ConsumedEvent(event, topic, partition, offset, key, timestamp_ms)

    def _dead_letter(self, exc: EventDecodeError, topic: str, partition: int, offset: int,
                     key: bytes | None, value: bytes) -> None:
        record = DeadLetter.build(value, exc.reason, exc.detail, key=key, topic=topic, partition=partition,
                                  offset=offset, job_id=_job_id_from_key(key))
        if self.dead_letters is not None:
            result = self.dead_letters.send_dead_letter(record)
            get = getattr(result, "get", None)
            if callable(get):
                get(timeout=DEAD_LETTER_TIMEOUT_S)  # raises if the dead letter could not be delivered
        self.counters.dead_lettered += 1
        self.counters.dead_letter_reasons[exc.reason] += 1


class EventConsumer:
    """Consume event topics and yield `ConsumedEvent`s; undecodable records go to the dead-letter topic.

    `topics` defaults to every event topic of the catalogue. With no `group_id` the consumer reads
    all partitions from the beginning (auto_offset_reset="earliest") without committing; with one,
    offsets are committed only when `commit()` is called, after the caller has used the events.
    `dead_letters` is any object with `send_dead_letter`, usually a `rlhealth.sinks.kafka.EventProducer`
    on the same bootstrap. The caller passes it and closes it: sources do not import sinks (the
    layers contract in `.importlinter`), so the consumer never builds its own producer.
    """

    def __init__(
        self,
        bootstrap: str,
        topics: Iterable[str] | None = None,
        *,
        catalog: TopicCatalog | None = None,
        group_id: str | None = None,
        dead_letters: DeadLetterSink,
        security: KafkaSecurity | None = None,
        **consumer_config: Any,
    ) -> None:
        self.catalog = catalog or TopicCatalog.from_env()
        self.topics = list(topics) if topics is not None else self.catalog.event_topics
        config: dict[str, Any] = {
            **resolve(security).kafka_python(),
            "bootstrap_servers": bootstrap,
            "client_id": "rlhealth-consumer",
            "group_id": group_id,
            "auto_offset_reset": "earliest",
            "enable_auto_commit": False,
        }
        config.update(consumer_config)
        self._consumer = KafkaConsumer(*self.topics, **config)
        self.handler = RecordHandler(self.catalog, dead_letters)

    @property
    def counters(self) -> ConsumerCounters:
        return self.handler.counters

    def poll(self, timeout_s: float = 1.0, max_records: int | None = None) -> list[ConsumedEvent]:
        """One poll: the decoded events of the records that arrived (possibly none)."""
        batches = self._consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        out = []
        for records in batches.values():
            for r in records:
                ev = self.handler.handle(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp)
                if ev is not None:
                    out.append(ev)
        return out

    def __iter__(self) -> Iterator[ConsumedEvent]:
        while True:
            yield from self.poll()

    def commit(self) -> None:
        self._consumer.commit()

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> EventConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["ConsumedEvent", "ConsumerCounters", "DeadLetterSink", "EventConsumer", "RecordHandler"]
