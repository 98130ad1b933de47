"""Dead-letter batches awaited with a bound (rlhealth.streams.delivery), without a broker.

The stall of BENCHMARKS.md "dead-letter stall" (session 6): aiokafka's producer dropped the
dead-letter topic from its metadata while batches for it were queued, and the worker awaited them
for good. Here a fake producer whose batches never complete stands in for that: the worker must
repair (re-track the topic, refresh the metadata), then resend the records through the ordinary
send, count each step, lose no record, and return; the old code (`asyncio.gather` of the batches)
never returned.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from rlhealth.schemas.topics import TopicCatalog
from rlhealth.streams.delivery import Stall, await_batches, track_topics
from rlhealth.streams.workers import OutgoingDeadLetter
from tests.offline_worker import offline_worker

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


class FakeBuilder:
    """aiokafka's BatchBuilder as the worker uses it: full after `room` records, closed on request."""

    def __init__(self, room: int) -> None:
        self.records: list[tuple[bytes | None, bytes]] = []
        self.room = room
        self.closed = False

    def append(self, *, key: bytes | None, value: bytes, timestamp: Any) -> object | None:
        if self.closed or len(self.records) >= self.room:
            self.closed = True
            return None
        self.records.append((key, value))
        return object()

    def close(self) -> None:
        self.closed = True


class FakeProducer:
    """An aiokafka producer whose first `stuck` batches are never delivered (their leader is never
    known again); everything after that, and every ordinary send, is delivered at once."""

    def __init__(self, *, stuck: int = 1_000_000, room: int = 1_000_000, fail: BaseException | None = None,
                 heal_on_refresh: bool = False) -> None:
        self.client = SimpleNamespace(tracked=[], refreshes=0, add_topic=self._add_topic,
                                      force_metadata_update=self._refresh)
        self.stuck, self.room, self.fail, self.heal_on_refresh = stuck, room, fail, heal_on_refresh
        self.batches: list[tuple[str, int, FakeBuilder, asyncio.Future[None]]] = []
        self.sent: list[tuple[str, bytes | None, bytes, int]] = []
        self.events: list[str] = []

    def _add_topic(self, topic: str) -> None:
        self.client.tracked.append(topic)
        self.events.append(f"track {topic}")

    def _refresh(self) -> None:
        self.client.refreshes += 1
        self.events.append("refresh")
        if self.heal_on_refresh:  # the leader is known again: the queued batches go out
            for _t, _p, _b, fut in self.batches:
                if not fut.done():
                    fut.set_result(None)

    def create_batch(self) -> FakeBuilder:
        return FakeBuilder(self.room)

    async def send_batch(self, batch: FakeBuilder, topic: str, *, partition: int) -> asyncio.Future[None]:
        self.events.append(f"batch {partition}")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.fail is not None:
            fut.set_exception(self.fail)
        elif len(self.batches) >= self.stuck:
            fut.set_result(None)
        self.batches.append((topic, partition, batch, fut))
        return fut

    async def send(self, topic: str, value: bytes, *, key: bytes | None, partition: int) -> asyncio.Future[None]:
        self.sent.append((topic, key, value, partition))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


def letters(n: int, partitions: int = 3) -> list[OutgoingDeadLetter]:
    return [OutgoingDeadLetter(f"job-{i}".encode(), i % partitions, b'{"bad": %d}' % i, "invalid_json")
            for i in range(n)]


def worker_with(producer: FakeProducer, stall: float = 0.02) -> Any:
    w = offline_worker(core=None, clock=[T0], delivery_stall_secs=stall)
    w.catalog = TopicCatalog(prefix="t.", partitions=3)
    w.app = SimpleNamespace(producer=SimpleNamespace(_ensure_producer=lambda: producer))
    return w


def stalls(w: Any) -> dict[str, float]:
    return {a.value: w.exporter.delivery_stalls.labels(a.value)._value.get() for a in Stall}


def test_dead_letters_whose_batches_never_complete_are_repaired_then_resent_and_counted() -> None:
    producer = FakeProducer()
    w = worker_with(producer)
    records = letters(10)

    async def main() -> None:
        await asyncio.wait_for(w._send_dead_letters(records), 5)  # the old code awaited these for good

    asyncio.run(main())
    topic = w.catalog.deadletter
    assert producer.events[0] == f"track {topic}"  # tracked before any batch is handed over
    assert producer.client.refreshes == 1 and producer.client.tracked.count(topic) == 2
    assert stalls(w) == {Stall.METADATA.value: 1.0, Stall.RESEND.value: 1.0}
    # every record of every stuck batch was sent again, to the partition it was meant for
    assert sorted(producer.sent) == sorted((topic, r.key, r.value, r.partition) for r in records)
    assert all(b.closed for _t, _p, b, _f in producer.batches)  # complete batches: nothing appended later


def test_a_batch_delivered_after_the_repair_is_not_resent() -> None:
    producer = FakeProducer(heal_on_refresh=True)
    w = worker_with(producer)

    async def main() -> None:
        await asyncio.wait_for(w._send_dead_letters(letters(4)), 5)

    asyncio.run(main())
    assert producer.sent == [] and producer.client.refreshes == 1
    assert stalls(w) == {Stall.METADATA.value: 1.0, Stall.RESEND.value: 0.0}


def test_await_batches_reports_each_step_with_the_records_waiting() -> None:
    producer = FakeProducer()
    records = letters(4)

    async def main() -> list[tuple[Stall, int]]:
        seen: list[tuple[Stall, int]] = []
        stuck: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await asyncio.wait_for(await_batches(producer, "dl", [(stuck, records)], stall_secs=0.01,
                                             on_stall=lambda action, n: seen.append((action, n))), 5)
        return seen

    assert asyncio.run(main()) == [(Stall.METADATA, 4), (Stall.RESEND, 4)]
    assert producer.client.tracked == ["dl"] and len(producer.sent) == 4


def test_full_batches_are_split_and_only_the_stuck_ones_resent() -> None:
    producer = FakeProducer(stuck=1, room=3)  # the first batch never completes, the others do
    w = worker_with(producer)
    records = letters(7, partitions=1)  # one partition: batches of 3, 3 and 1

    async def main() -> None:
        await asyncio.wait_for(w._send_dead_letters(records), 5)

    asyncio.run(main())
    assert [len(b.records) for _t, _p, b, _f in producer.batches] == [3, 3, 1]
    assert [v for _t, _k, v, _p in producer.sent] == [r.value for r in records[:3]]  # only the stuck one's
    assert stalls(w) == {Stall.METADATA.value: 1.0, Stall.RESEND.value: 1.0}


def test_a_failed_batch_still_raises() -> None:
    producer = FakeProducer(fail=RuntimeError("broker says no"))
    w = worker_with(producer)

    async def main() -> None:
        await asyncio.wait_for(w._send_dead_letters(letters(3)), 5)

    with pytest.raises(RuntimeError, match="broker says no"):
        asyncio.run(main())
    assert stalls(w) == {Stall.METADATA.value: 0.0, Stall.RESEND.value: 0.0}


def test_the_worker_tracks_every_topic_it_writes_to_at_assignment() -> None:
    producer = FakeProducer()
    w = worker_with(producer)
    changelog = SimpleNamespace(get_topic_name=lambda: "t.rlhealth-job_health-changelog")
    book_changelog = SimpleNamespace(get_topic_name=lambda: "t.rlhealth-verdict_book-changelog")
    w.tables.job_health.changelog_topic = changelog
    w.tables.verdicts.changelog_topic = book_changelog
    w._track_output_topics()
    c = w.catalog
    assert set(producer.client.tracked) == {c.deadletter, c.verdicts, c.findings, c.metrics,
                                            "t.rlhealth-job_health-changelog", "t.rlhealth-verdict_book-changelog"}


def test_track_topics_with_aiokafkas_client_keeps_them_in_its_metadata_requests() -> None:
    from aiokafka.client import AIOKafkaClient

    async def main() -> set[str]:
        client = AIOKafkaClient(bootstrap_servers="127.0.0.1:9")  # not started: nothing is sent
        assert not client._topics  # tracking nothing: refreshes fetch every topic (the risky state)
        track_topics(SimpleNamespace(client=client), ["a", "b", "a"])
        return set(client._topics)

    assert asyncio.run(main()) == {"a", "b"}


@pytest.mark.kafka
@pytest.mark.parametrize("tracked", [False, True], ids=["untracked", "tracked"])
def test_a_queued_batch_survives_the_producers_first_narrowed_metadata_refresh(
        kafka_bootstrap: str, kafka_catalog: TopicCatalog, tracked: bool) -> None:
    """The stall's mechanism on the real broker, and the fix. A fresh aiokafka producer tracks no topic
    (its refreshes fetch all); a batch for the dead-letter topic waits in its accumulator (linger);
    then a send to a topic missing from its view (faust's changelog in the bench) makes it track that
    topic alone: the refresh drops the dead-letter topic, and untracked, the batch is never delivered
    (aiokafka 0.14; if this case starts passing, aiokafka fixed it and `track_topics` is belt and
    braces). Tracked first, it is delivered."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTP

    async def main() -> bool:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=300)
        await producer.start()
        dl = kafka_catalog.deadletter
        try:
            # the topics were just created: wait until a full refresh shows the dead-letter topic with a
            # leader (a fresh topic can be missing from it), still tracking nothing
            while producer.client.cluster.leader_for_partition(AioTP(dl, 0)) in (None, -1):
                await asyncio.sleep(0.1)
                await producer.client.force_metadata_update()
            assert not producer.client._topics
            if tracked:
                track_topics(producer, [dl])
            batch = producer.create_batch()
            batch.append(key=b"k", value=b"v", timestamp=None)  # open: it lingers 300 ms
            fut = await producer.send_batch(batch, dl, partition=0)
            producer.client.add_topic(kafka_catalog.verdicts)  # what the first changelog send did
            try:
                await asyncio.wait_for(asyncio.shield(fut), 3)
                return True
            except TimeoutError:
                return False
        finally:
            track_topics(producer, [dl])  # the repair: without it, stop() would wait for the batch forever
            producer.client.force_metadata_update()
            await asyncio.wait_for(producer.stop(), 30)

    assert asyncio.run(main()) is tracked
