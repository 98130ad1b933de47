"""Records for one topic handed to aiokafka's producer as record batches, one per partition per flush.

Why: a judging pass of ~10,000 jobs sends a verdict per judged job. Through faust's topic path each
send cost ~60-75 us of the worker's one thread (faust's message wrappers and callbacks, then
aiokafka's partitioner, accumulator and a future per record: BENCHMARKS.md, session 8) and was
awaited one by one, each waiting for room in its partition's batch. Here a pass adds its verdicts
(`add`: a future per record, nothing awaited) and hands them over once per slice (`flush`): one
batch per partition, built by appending the key and value bytes, as the dead letters are
(`StreamWorker._send_dead_letters`).

Each record lands in the partition aiokafka's default partitioner gives its key (murmur2 of the key
over the topic's partitions, the catalogue's count for every topic of ours), so a job's verdicts
stay in one partition, in the order they were added (a partition's batches are delivered in order).
A record's future resolves when its batch is delivered, or fails with the batch's error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiokafka.partitioner import murmur2


def partition_of(key: bytes, partitions: int) -> int:
    """The partition aiokafka's default partitioner gives `key` on a topic of `partitions` partitions."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class RecordBatches:
    """Records waiting to be handed over (`add`), handed over as batches by `flush`."""

    def __init__(self, producer: Callable[[], Any], topic: str, partitions: int) -> None:
        """`producer`: returns the started aiokafka producer (faust's, `app.producer._ensure_producer`)."""
        self._producer = producer
        self.topic = topic
        self.partitions = partitions
        self._pending: dict[int, list[tuple[bytes, bytes, asyncio.Future[None]]]] = {}
        self._parts: dict[bytes, int] = {}  # key -> partition, as murmur2 is ~1 us a key

    def add(self, key: bytes, value: bytes) -> asyncio.Future[None]:
        """Queue a record; the future resolves once it is delivered (after a `flush`)."""
        part = self._parts.get(key)
        if part is None:
            if len(self._parts) >= 200_000:  # jobs come and go: start over rather than grow for ever
                self._parts.clear()
            part = self._parts[key] = partition_of(key, self.partitions)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(part, []).append((key, value, fut))
        return fut

    def __len__(self) -> int:
        return sum(len(items) for items in self._pending.values())

    async def flush(self) -> None:
        """Hand every queued record to the producer: a batch per partition (more when one fills).
        Waits only for room in the producer's queue of each partition, not for deliveries."""
        pending, self._pending = self._pending, {}
        if not pending:
            return
        failure: BaseException | None = None
        client = None
        try:
            client = self._producer()
        except Exception as exc:  # noqa: BLE001 - every record of the flush fails with it
            failure = exc
        for part, items in pending.items():
            if failure is not None or client is None:
                _fail(items, failure or RuntimeError("no producer"))
                continue
            batch, start = client.create_batch(), 0
            try:
                for i, (key, value, _fut) in enumerate(items):
                    if batch.append(key=key, value=value, timestamp=None) is None:  # full: hand it over
                        batch.close()
                        await self._send(client, batch, part, items[start:i])
                        batch, start = client.create_batch(), i
                        batch.append(key=key, value=value, timestamp=None)  # the first record always fits
                batch.close()  # complete: sent at once, and nothing else is appended to it
                await self._send(client, batch, part, items[start:])
            except Exception as exc:  # noqa: BLE001 - the records not handed over fail; the others stand
                failure = exc
                _fail([x for x in items if not x[2].done()], exc)

    async def _send(self, client: Any, batch: Any, part: int,
                    items: list[tuple[bytes, bytes, asyncio.Future[None]]]) -> None:
        futures = [fut for _, _, fut in items]
        try:
            delivered = await client.send_batch(batch, self.topic, partition=part)
        except Exception as exc:
            _fail(items, exc)
            raise
        delivered.add_done_callback(lambda d: _settle(d, futures))


def _fail(items: list[tuple[bytes, bytes, asyncio.Future[None]]], exc: BaseException) -> None:
    for _, _, fut in items:
        if not fut.done():
            fut.set_exception(exc)


def _settle(delivered: asyncio.Future[Any], futures: list[asyncio.Future[None]]) -> None:
    exc = asyncio.CancelledError() if delivered.cancelled() else delivered.exception()
    for fut in futures:
        if fut.done():
            continue
        if exc is None:
            fut.set_result(None)
        else:
            fut.set_exception(exc)


__all__ = ["RecordBatches", "partition_of"]
