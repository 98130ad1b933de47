"""Verdicts handed to aiokafka's producer as record batches (`streams/record_batches.py`): each record in
the partition aiokafka's default partitioner gives its key, in the order added, a batch per partition
and flush (more when one fills), its future settled by its batch's delivery; and a judging pass with
them publishes exactly what one send per verdict does. Without a broker: a producer that keeps the
batches it is given (aiokafka's own batch builder, so a batch fills as it would)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.default_records import DefaultRecordBatch

from rlhealth.schemas import job_key
from rlhealth.streams.record_batches import RecordBatches, partition_of


class Producer:
    """aiokafka's `create_batch` / `send_batch`, delivering (or failing) when told."""

    def __init__(self, batch_size: int = 16 * 1024) -> None:
        self.batch_size = batch_size
        self.sent: list[tuple[str, int, list[tuple[bytes, bytes]], asyncio.Future[Any]]] = []
        self.fail: BaseException | None = None

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(self.batch_size, 0)

    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int) -> asyncio.Future[Any]:
        if self.fail is not None:
            raise self.fail
        records = [(r.key, r.value) for r in DefaultRecordBatch(bytes(batch._build()))]
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.sent.append((topic, partition, records, fut))
        return fut

    def deliver(self, exc: BaseException | None = None) -> None:
        for *_, fut in self.sent:
            if not fut.done():
                fut.set_exception(exc) if exc is not None else fut.set_result(None)


def test_partition_of_is_aiokafkas_default_partitioner() -> None:
    for i in range(500):
        key = job_key(f"job-{i}")
        assert partition_of(key, 12) == DefaultPartitioner()(key, list(range(12)), list(range(12)))


def test_records_go_as_one_batch_per_partition_in_order_and_settle_on_delivery() -> None:
    async def main() -> None:
        producer = Producer()
        out = RecordBatches(lambda: producer, "t.verdicts", 12)
        added = []
        for n in range(3):
            for j in range(40):
                key = job_key(f"job-{j}")
                added.append((key, f"{j}:{n}".encode(), out.add(key, f"{j}:{n}".encode())))
        assert len(out) == 120 and not producer.sent  # nothing handed over before the flush
        await out.flush()
        assert len(out) == 0
        assert len(producer.sent) == len({partition_of(k, 12) for k, _, _ in added})  # one batch a partition
        for topic, part, records, _ in producer.sent:
            assert topic == "t.verdicts"
            assert records == [(k, v) for k, v, _ in added if partition_of(k, 12) == part]  # in order
        assert not any(f.done() for _, _, f in added)  # delivered only once the batch is
        producer.deliver()
        await asyncio.sleep(0)
        assert all(f.done() and f.result() is None for _, _, f in added)

    asyncio.run(main())


def test_a_full_batch_is_handed_over_and_the_rest_goes_in_the_next() -> None:
    async def main() -> None:
        producer = Producer(batch_size=4096)
        out = RecordBatches(lambda: producer, "t.verdicts", 1)
        futures = [out.add(b"k", bytes([65 + i % 26]) * 1000) for i in range(10)]
        await out.flush()
        assert len(producer.sent) >= 3
        assert [v for *_, records, _ in producer.sent for _, v in records] == [
            bytes([65 + i % 26]) * 1000 for i in range(10)]
        producer.sent[0][3].set_result(None)
        await asyncio.sleep(0)
        first = len(producer.sent[0][2])
        assert all(f.done() for f in futures[:first]) and not any(f.done() for f in futures[first:])

    asyncio.run(main())


def test_a_failed_batch_fails_its_records_and_a_failed_hand_over_fails_the_rest() -> None:
    async def main() -> None:
        producer = Producer()
        out = RecordBatches(lambda: producer, "t.verdicts", 12)
        futures = [out.add(job_key(f"job-{j}"), b"v") for j in range(30)]
        await out.flush()
        producer.deliver(RuntimeError("broker said no"))
        await asyncio.sleep(0)
        assert all(isinstance(f.exception(), RuntimeError) for f in futures)
        producer.fail = TimeoutError("no room")
        futures = [out.add(job_key(f"job-{j}"), b"v") for j in range(30)]
        await out.flush()  # never raises: the records' futures carry the failure
        assert all(isinstance(f.exception(), TimeoutError) for f in futures)

    asyncio.run(main())


async def judge_pass(w: Any, keys: list[bytes], producer: Producer) -> None:
    """One judging pass of `keys`, the fake producer delivering as it goes, then the metric points (which
    the pass does not wait for)."""
    task = asyncio.ensure_future(w._judge_locked(keys))
    while not task.done():
        producer.deliver()
        await asyncio.sleep(0)
    await task
    producer.deliver()
    await asyncio.sleep(0)


def test_a_pass_with_record_batches_publishes_what_a_send_per_verdict_does(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlhealth.streams import judging
    from tests.test_streaming_judging import SCRIPTS, T0, TICK_S, State, offline_worker

    monkeypatch.setattr(judging, "BATCHED_PASS_MIN", 0)  # this pass is small: batch it all the same

    def run(batched: bool) -> tuple[list[list[tuple[bytes, bytes]]], list[list[tuple[bytes, bytes]]],
                                    list[dict[bytes, bytes]]]:
        clock = [T0]
        w = offline_worker(clock)
        producer = Producer(batch_size=1024 * 1024)
        if batched:
            w.verdict_batches = RecordBatches(lambda: producer, "t.verdicts", 12)
            w.metrics_batches = RecordBatches(lambda: producer, "t.metrics", 12)
        keys = [job_key(j) for j in SCRIPTS]
        sends, points, books = [], [], []


        for n in range(40):
            clock[0] = T0 + timedelta(seconds=TICK_S * n)
            for job, key in zip(SCRIPTS, keys, strict=True):
                w.tables.job_health[key] = State(job, n).to_bytes()
                w._seen[key] = clock[0].timestamp()
            before = len(w.verdict_topic.sent), len(w.metrics_topic.sent)  # type: ignore[attr-defined]
            batches = len(producer.sent)
            asyncio.run(judge_pass(w, keys, producer))
            for topic, plain, out in (("t.verdicts", w.verdict_topic, sends), ("t.metrics", w.metrics_topic, points)):
                got = [kv for t, _, records, _ in producer.sent[batches:] if t == topic for kv in records]
                out.append(sorted(got) if batched else sorted(plain.sent[before[out is points]:]))  # type: ignore[attr-defined]
            books.append(dict(w.tables.verdicts))
        return sends, points, books

    batched, plain = run(True), run(False)
    assert batched == plain
    sends, points, _ = batched
    assert len(sends[0]) == len(SCRIPTS) and sum(map(len, sends)) > len(sends)  # it did publish
    assert len(points[0]) == len(SCRIPTS) and sum(map(len, points)) > len(points)


def test_a_small_pass_sends_each_verdict_through_the_topic() -> None:
    """Only passes of more than BATCHED_PASS_MIN jobs use the record batches: a fast pass of a few jobs
    must not wait for a partition's previous batch to leave (bench/stream.py's p99)."""
    from tests.test_streaming_judging import SCRIPTS, T0, State, offline_worker

    clock = [T0]
    w = offline_worker(clock)
    producer = Producer(batch_size=1024 * 1024)
    w.verdict_batches = RecordBatches(lambda: producer, "t.verdicts", 12)
    w.metrics_batches = RecordBatches(lambda: producer, "t.metrics", 12)
    keys = [job_key(j) for j in SCRIPTS]
    for job, key in zip(SCRIPTS, keys, strict=True):
        w.tables.job_health[key] = State(job, 0).to_bytes()
        w._seen[key] = clock[0].timestamp()

    asyncio.run(judge_pass(w, keys, producer))
    assert len(w.verdict_topic.sent) == len(SCRIPTS)  # type: ignore[attr-defined]
    assert producer.sent == []
