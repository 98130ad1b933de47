"""Read verdicts from the verdict topic: the supervisor's subscription.

The verdict topic is compacted and keyed by `job_key(job_id)`; every value is one JSON
`rlhealth.schemas.Verdict` (JSON Schema: `rlhealth/schemas/json/verdict.schema.json`, for
consumers in other languages). Delivery is at-least-once and a job can move between workers, so a
consumer keeps the highest `seq` it has seen per job and drops anything at or below it.

A complete consumer in ten lines of Python (kafka-python)::

    from kafka import KafkaConsumer
    from rlhealth.schemas import decode_verdict, render_text

    last_seq: dict[str, int] = {}
    consumer = KafkaConsumer("rlhealth.verdicts", bootstrap_servers="127.0.0.1:9092",
                             group_id="my-supervisor", auto_offset_reset="earliest")
    for record in consumer:
        v = decode_verdict(record.value)
        if v.seq > last_seq.get(v.job_id, -1):
            last_seq[v.job_id] = v.seq
            print(render_text(v))  # or: if v.verdict == "KILL": page someone

`rlhealth verdicts` does the same from the command line (see `read_verdicts`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kafka import KafkaConsumer, TopicPartition

from rlhealth.schemas import EventDecodeError, Verdict, decode_verdict
from rlhealth.schemas.kafka_security import KafkaSecurity, resolve

log = logging.getLogger(__name__)


@dataclass
class ReadStats:
    records: int = 0
    undecodable: int = 0
    stale: int = 0  # seq at or below one already seen for the job


def _consumer(bootstrap: str, group_id: str | None, security: KafkaSecurity | None = None,
              auto_commit: bool = True) -> KafkaConsumer:
    return KafkaConsumer(
        **resolve(security).kafka_python(),
        bootstrap_servers=bootstrap,
        group_id=group_id,
        client_id=f"rlhealth-verdicts-{uuid.uuid4().hex[:6]}",
        enable_auto_commit=group_id is not None and auto_commit,
        auto_offset_reset="earliest",
        consumer_timeout_ms=500,
    )


def read_verdicts(
    bootstrap: str,
    topic: str,
    *,
    follow: bool = False,
    job: str | None = None,
    only_kill: bool = False,
    group_id: str | None = None,
    dedupe: bool = True,
    stats: ReadStats | None = None,
    idle_timeout_s: float | None = None,
    security: KafkaSecurity | None = None,
) -> Iterator[Verdict]:
    """Yield verdicts in topic order (per job: seq order).

    Without `follow`, reads what the topic holds when called and stops at its end. With `follow`,
    keeps waiting for new ones (until `idle_timeout_s` without records, if given). Without a
    `group_id` every partition is read from the beginning and no offsets are committed.
    `dedupe` drops a verdict whose seq is not above the job's last one.
    """
    stats = stats if stats is not None else ReadStats()
    consumer = _consumer(bootstrap, group_id, security)
    try:
        parts = consumer.partitions_for_topic(topic)
        deadline = time.monotonic() + 30
        while not parts and time.monotonic() < deadline:
            time.sleep(0.2)
            parts = consumer.partitions_for_topic(topic)
        if not parts:
            raise RuntimeError(f"topic {topic!r} does not exist on {bootstrap}")
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        if group_id is None:
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
        else:
            consumer.subscribe([topic])
        ends = consumer.end_offsets(tps) if not follow else {}
        last_seq: dict[str, int] = {}
        idle_since = time.monotonic()
        while True:
            batch = consumer.poll(timeout_ms=500)
            got = False
            for records in batch.values():
                for record in records:
                    got = True
                    stats.records += 1
                    if record.value is None:
                        continue
                    try:
                        v = decode_verdict(record.value)
                    except EventDecodeError as exc:
                        stats.undecodable += 1
                        log.warning("undecodable verdict at %s/%d@%d: %s", record.topic, record.partition,
                                    record.offset, exc)
                        continue
                    if dedupe:
                        if v.seq <= last_seq.get(v.job_id, -1):
                            stats.stale += 1
                            continue
                        last_seq[v.job_id] = v.seq
                    if job is not None and v.job_id != job:
                        continue
                    if only_kill and v.verdict != "KILL":
                        continue
                    yield v
            now = time.monotonic()
            if got:
                idle_since = now
            if not follow:
                if all(consumer.position(tp) >= ends.get(tp, 0) for tp in tps):
                    return
            elif idle_timeout_s is not None and now - idle_since > idle_timeout_s:
                return
    finally:
        consumer.close()


def latest_verdicts(bootstrap: str, topic: str, *, job: str | None = None, only_kill: bool = False,
                    security: KafkaSecurity | None = None) -> dict[str, Verdict]:
    """The newest verdict (highest seq) of every job, or of `job`, as the topic holds them now."""
    newest: dict[str, Verdict] = {}
    for v in read_verdicts(bootstrap, topic, job=job, dedupe=False, security=security):
        cur = newest.get(v.job_id)
        if cur is None or v.seq > cur.seq or (v.seq == cur.seq and v.produced_at >= cur.produced_at):
            newest[v.job_id] = v
    if only_kill:
        newest = {j: v for j, v in newest.items() if v.verdict == "KILL"}
    return dict(sorted(newest.items()))


def follow_evidence(bootstrap: str, findings_topic: str, metrics_topic: str, *, on_finding, on_metrics,
                    stop, group_id: str | None = None, security: KafkaSecurity | None = None,
                    on_batch: Callable[[], None] | None = None) -> None:
    """Read the findings and metrics topics until `stop` (a threading.Event) is set, handing each
    decoded record to `on_finding` / `on_metrics`. For the evidence writer (`verdicts --follow --db`).

    After each polled batch `on_batch` runs (the store's flush: one transaction per batch, not per
    record), and only then are the batch's offsets committed: at-least-once into the store."""
    from rlhealth.schemas.evidence import FindingRecord, MetricsPoint

    consumer = _consumer(bootstrap, group_id, security, auto_commit=False)
    try:
        topics = [findings_topic, metrics_topic]
        if group_id is None:
            tps = [TopicPartition(t, p) for t in topics for p in sorted(consumer.partitions_for_topic(t) or [])]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
        else:
            consumer.subscribe(topics)
        while not stop.is_set():
            for records in consumer.poll(timeout_ms=500).values():
                for record in records:
                    if record.value is None:
                        continue
                    try:
                        if record.topic == findings_topic:
                            on_finding(FindingRecord.model_validate_json(record.value))
                        else:
                            on_metrics(MetricsPoint.model_validate_json(record.value))
                    except ValueError as exc:
                        log.warning("undecodable evidence record at %s/%d@%d: %s", record.topic, record.partition,
                                    record.offset, str(exc)[:200])
            if on_batch is not None:
                on_batch()
            if group_id is not None:
                consumer.commit()
    finally:
        consumer.close()


__all__ = ["ReadStats", "follow_evidence", "latest_verdicts", "read_verdicts"]
