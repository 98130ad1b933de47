"""Reliable delivery of a shipper's events to Kafka: checked sends, split batches, a disk spool.

    sender = ReliableSender(bootstrap, spool=Spool(dir, max_bytes))
    ok = sender.deliver(events)   # True: every event is acknowledged by the broker or in the spool
    sender.drain(timeout_s)       # send what the spool holds (oldest first)

* Every event becomes one record per topic-sized piece: a `LogBatch` whose encoding exceeds
  `max_record_bytes` is split in halves until each piece fits (lines are already cut to
  `MAX_LINE_CHARS` by the reader, so a piece of one line always fits).
* Every send's future is checked after a bounded flush. A record the broker rejects as too large
  is split again (a record of one line that still does not fit is dropped and counted);
  any other failure (broker unreachable, flush timeout, fatal producer state) aborts the
  producer, which is rebuilt on the next attempt, and starts an exponential backoff.
* With a spool, records that could not be sent go to disk in order, and while the spool holds
  anything new records queue behind it. When the spool is full the records that do not fit are
  dropped and their log lines counted (`dropped_lines["spool_full"]`). Without a spool,
  `deliver` returns False and the caller re-reads from its checkpoints.
* The producer is idempotent with `acks=all` (no duplicates from its own retries).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaError, MessageSizeTooLargeError, RecordListTooLargeError

from rlhealth.schemas import EventBase, decode_event, encode, job_key
from rlhealth.schemas.events import LogBatch
from rlhealth.schemas.kafka_security import KafkaSecurity, resolve
from rlhealth.schemas.topics import MAX_EVENT_BYTES, TopicCatalog
from rlhealth.sinks.kafka import CLIENT_ID
from rlhealth.sinks.spool import Position, Record, Spool

log = logging.getLogger(__name__)

# Room for the record's key, headers and batch framing under the topic's max.message.bytes.
RECORD_OVERHEAD = 64 * 1024
_TOO_LARGE = (MessageSizeTooLargeError, RecordListTooLargeError)


@dataclass
class DeliveryCounters:
    records_sent: int = 0
    bytes_sent: int = 0
    log_batches_sent: int = 0
    lines_sent: int = 0
    send_errors: int = 0
    retries: int = 0
    producer_rebuilds: int = 0
    batches_split: int = 0
    records_spooled: int = 0
    bytes_spooled: int = 0
    dropped_records: int = 0
    dropped_lines: dict[str, int] = field(default_factory=dict)


def split_batch(batch: LogBatch) -> tuple[LogBatch, LogBatch]:
    """Two halves of a batch with two or more lines (offsets and line numbers kept)."""
    n = len(batch.lines)
    h = n // 2
    offs = batch.offsets
    ts = batch.ts
    first = batch.first_line_no

    def part(a: int, b: int, counts: bool) -> LogBatch:
        return batch.model_copy(update={
            "lines": batch.lines[a:b], "offsets": offs[a:b] if offs is not None else None,
            "ts": ts[a:b] if ts is not None else None,
            "first_line_no": first + a if first is not None else None,
            "truncated_lines": batch.truncated_lines if counts else 0,
            "invalid_utf8_lines": batch.invalid_utf8_lines if counts else 0})

    return part(0, h, True), part(h, n, False)


class ReliableSender:
    def __init__(self, bootstrap: str, *, catalog: TopicCatalog | None = None, spool: Spool | None = None,
                 max_record_bytes: int = MAX_EVENT_BYTES - RECORD_OVERHEAD, flush_timeout_s: float = 10.0,
                 max_block_s: float = 5.0, backoff_max_s: float = 30.0,
                 producer_factory: Callable[[], Any] | None = None, clock: Callable[[], float] = time.monotonic,
                 security: KafkaSecurity | None = None, **producer_config: Any) -> None:
        self.catalog = catalog or TopicCatalog.from_env()
        self.spool = spool
        self.max_record_bytes = max_record_bytes
        self.flush_timeout_s = flush_timeout_s
        self.backoff_max_s = backoff_max_s
        self.clock = clock
        self.counters = DeliveryCounters()
        config: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            "client_id": f"{CLIENT_ID}-shipper",
            "acks": "all",
            "enable_idempotence": True,
            "linger_ms": 50,
            # several log batches per produce request (a record batch stays under the topic's
            # max.message.bytes: at most max(batch_size, one record))
            "batch_size": 2 << 20,
            "max_request_size": MAX_EVENT_BYTES * 2,
            "max_block_ms": int(max_block_s * 1000),
            "delivery_timeout_ms": 300_000,
            "request_timeout_ms": 30_000,
        }
        config.update(resolve(security).kafka_python())  # SASL / TLS settings, or the environment's
        config.update(producer_config)
        self._factory = producer_factory or (lambda: KafkaProducer(**config))
        self._producer: Any = None
        self._backoff = 0.0
        self._retry_at = 0.0
        self.healthy = True

    # -- records ----------------------------------------------------------------------------
    def records(self, event: EventBase) -> list[Record]:
        """The records for one event: a log batch too big for one record is split in halves."""
        kind: str = event.kind  # type: ignore[attr-defined]
        topic = self.catalog.topic_for_kind(kind)
        key = job_key(event.job_id)
        value = encode(event)
        lines = len(event.lines) if isinstance(event, LogBatch) else 0
        if len(value) <= self.max_record_bytes or not isinstance(event, LogBatch) or lines < 2:
            if len(value) > self.max_record_bytes:
                self._drop(lines or 1, "too_large", records=1)
                log.warning("a %s event of %d bytes does not fit in one record: dropped", kind, len(value))
                return []
            return [Record(topic, key, value, lines)]
        self.counters.batches_split += 1
        a, b = split_batch(event)
        return self.records(a) + self.records(b)

    def _drop(self, lines: int, reason: str, records: int = 0) -> None:
        self.counters.dropped_records += records
        self.counters.dropped_lines[reason] = self.counters.dropped_lines.get(reason, 0) + lines

    # -- the producer -----------------------------------------------------------------------
    def _get_producer(self) -> Any:
        if self._producer is None:
            self._producer = self._factory()
        return self._producer

    def _abort(self) -> None:
        """Drop the producer (pending records fail at once); the next send builds a new one."""
        p, self._producer = self._producer, None
        if p is not None:
            self.counters.producer_rebuilds += 1
            try:
                p.close(timeout=0)
            except Exception:
                log.debug("closing a failed producer", exc_info=True)

    def _failed(self) -> None:
        self.healthy = False
        self._backoff = min(self.backoff_max_s, max(1.0, self._backoff * 2))
        self._retry_at = self.clock() + self._backoff

    def _ok(self) -> None:
        self.healthy = True
        self._backoff = 0.0

    def backing_off(self) -> bool:
        return not self.healthy and self.clock() < self._retry_at

    def _send(self, recs: list[Record]) -> list[bool]:
        """Send, flush and check every record; True per acknowledged record."""
        if not recs:
            return []
        done = [False] * len(recs)
        try:
            producer = self._get_producer()
        except Exception as exc:  # noqa: BLE001 - no broker error may stop the shipper
            log.warning("kafka producer could not be built: %s", exc)
            self.counters.send_errors += 1
            self._failed()
            return done
        futures: list[Any] = []
        broken = False
        for r in recs:
            try:
                futures.append(producer.send(r.topic, value=r.value, key=r.key))
            except Exception as exc:  # noqa: BLE001 - metadata not available in max_block_ms, producer closed, ...
                log.warning("kafka send failed: %s", exc)
                broken = True
                break
        try:
            producer.flush(timeout=self.flush_timeout_s)
        except Exception as exc:  # noqa: BLE001 - a timeout or a broken client: abort and spool
            log.warning("kafka flush did not complete: %s", exc)
            broken = True
        if broken:
            self._abort()  # pending futures fail now instead of being delivered behind our back
        too_large: list[int] = []
        for i, fut in enumerate(futures):
            if not fut.is_done:
                continue
            if fut.succeeded():
                done[i] = True
                r = recs[i]
                self.counters.records_sent += 1
                self.counters.bytes_sent += len(r.value)
                if r.lines:
                    self.counters.log_batches_sent += 1
                    self.counters.lines_sent += r.lines
            elif isinstance(fut.exception, _TOO_LARGE):
                too_large.append(i)
            else:
                broken = True
        if not all(done):
            self.counters.send_errors += done.count(False) - len(too_large)
        if too_large:
            # the broker's limit is below ours: split those records further, or drop a single line
            for i in too_large:
                done[i] = self._resend_smaller(recs[i])
        if broken or not futures:
            if self._producer is not None:
                self._abort()
            self._failed()
        else:
            self._ok()
        return done

    def _resend_smaller(self, r: Record) -> bool:
        self.counters.retries += 1
        try:
            ev = decode_event(r.value)
        except Exception:  # noqa: BLE001 - our own encoding; cannot happen
            ev = None
        if not isinstance(ev, LogBatch) or len(ev.lines) < 2:
            self._drop(max(r.lines, 1), "too_large", records=1)
            return True  # nothing more can be done with it: counted, not retried
        self.max_record_bytes = max(1024, min(self.max_record_bytes, len(r.value) // 2))
        self.counters.batches_split += 1
        a, b = split_batch(ev)
        parts = self.records(a) + self.records(b)
        return all(self._send(parts))

    # -- public -----------------------------------------------------------------------------
    def _to_spool(self, recs: list[Record]) -> None:
        assert self.spool is not None
        rejected = self.spool.append(recs)
        stored = recs[:len(recs) - len(rejected)]
        self.counters.records_spooled += len(stored)
        self.counters.bytes_spooled += sum(r.size() for r in stored)
        if rejected:
            self._drop(sum(r.lines for r in rejected), "spool_full", records=len(rejected))
            log.warning("spool full: %d record(s) dropped", len(rejected))

    def deliver(self, events: list[EventBase]) -> bool:
        """Deliver events in order. True when each is acknowledged, in the spool, or dropped and counted."""
        recs = [r for e in events for r in self.records(e)]
        if self.spool is not None:
            if self.spool or self.backing_off():
                self._to_spool(recs)
                self.drain(self.flush_timeout_s)
                return True
            done = self._send(recs)
            failed = [r for r, ok in zip(recs, done) if not ok]
            if failed:
                self.counters.retries += 1
                self._to_spool(failed)
            return True
        if self.backing_off():
            return False
        return all(self._send(recs))

    def drain(self, timeout_s: float, ignore_backoff: bool = False) -> bool:
        """Send the spool's records, oldest first, until it is empty, a send fails or time is up.
        True when the spool is empty."""
        if self.spool is None:
            return True
        deadline = self.clock() + timeout_s
        while self.spool and (ignore_backoff or not self.backing_off()) and self.clock() < deadline:
            batch = self.spool.peek()
            if not batch:
                skipped = self.spool.skip_unreadable()
                self.counters.dropped_records += 1
                log.error("spool: %d unreadable bytes skipped", skipped)
                continue
            self.counters.retries += 1
            done = self._send([r for r, _pos in batch])
            upto: Position | None = None
            for (_r, pos), ok in zip(batch, done):
                if not ok:
                    break
                upto = pos
            if upto is not None:
                self.spool.advance(upto)
            if not all(done):
                return False
        return not self.spool

    def flush(self, timeout_s: float) -> None:
        if self._producer is not None:
            try:
                self._producer.flush(timeout=timeout_s)
            except KafkaError:
                log.warning("final flush did not complete")

    def close(self) -> None:
        if self._producer is not None:
            try:
                self._producer.close(timeout=self.flush_timeout_s)
            except KafkaError:
                log.warning("producer did not close cleanly")
            self._producer = None


__all__ = ["DeliveryCounters", "ReliableSender", "split_batch"]
