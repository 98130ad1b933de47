"""Record batches handed to aiokafka's producer: topics kept in its metadata, deliveries awaited with a bound.

Why (found in session 6, BENCHMARKS.md "dead-letter stall"): aiokafka's producer client tracks no
topic at first, so its metadata refreshes fetch every topic of the cluster. The first send to a
topic missing from that view (faust's changelog topics, created after the producer started, were
missing in the failing runs) makes it track that one topic, and from then on each refresh asks
for the tracked topics only and *replaces* the cluster view with the answer. A topic that was
known only from the full view (the dead-letter topic) then has no partitions and no leader; its
batches already in the accumulator cannot be drained, and the sender's metadata refreshes never
ask for it again (only a new `send`/`send_batch` to it would add it). The worker awaited those
batches before it could take more records, so it stopped folding until aiokafka expired the
batches (faust's producer request timeout, 20 min).

Two things here:

* `track_topics` makes the producer's client keep the worker's output topics in every refresh
  (called at each assignment, before anything is folded, and before each dead-letter send);
* `await_batches` waits for batches with a bound: when none of them completed for `stall_secs`,
  it re-tracks the topic and refreshes the metadata (`Stall.METADATA`, the repair for the cause
  above); if they are still stuck after that, it sends their records again through the producer's
  ordinary `send` (`Stall.RESEND`; a dead letter may then arrive twice, which the at-least-once
  contract allows, and none is lost). Every stall is reported through `on_stall`, so it is counted.
  A batch that fails raises, as before; aiokafka still fails a batch it could not deliver within
  its request timeout, which takes the worker down (exit 70) with the records unacknowledged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from enum import StrEnum
from typing import Any, Protocol


class Stall(StrEnum):
    """What `await_batches` did when no batch completed for `stall_secs`."""

    METADATA = "metadata_refresh"  # the topic tracked again and the producer's metadata refreshed
    RESEND = "resend"  # the batch's records sent again through the producer's ordinary send


class Outgoing(Protocol):
    """A record of a batch: what `await_batches` needs to send it again."""

    @property
    def key(self) -> bytes | None: ...

    @property
    def partition(self) -> int: ...

    @property
    def value(self) -> bytes: ...


def track_topics(producer: Any, topics: Iterable[str]) -> None:
    """Have the aiokafka producer's client keep `topics` in every metadata refresh (see the module
    docstring). Tracking a topic already tracked does nothing; a new one asks for a refresh."""
    client = producer.client
    for topic in topics:
        client.add_topic(topic)


def _observe(fut: asyncio.Future[Any]) -> None:
    """A batch given up on may still fail later: retrieve its exception so it is not logged as lost."""
    if not fut.cancelled():
        fut.exception()


async def _resend(producer: Any, topic: str, records: Sequence[Outgoing]) -> None:
    futures = [await producer.send(topic, r.value, key=r.key, partition=r.partition) for r in records]
    await asyncio.gather(*futures)


async def await_batches(producer: Any, topic: str, sent: Sequence[tuple[asyncio.Future[Any], Sequence[Outgoing]]],
                        *, stall_secs: float, on_stall: Callable[[Stall, int], None]) -> None:
    """Wait until every batch of `sent` (its delivery future, its records) was delivered; raise the
    first failure. When no batch completes for `stall_secs`, repair and then resend (module docstring);
    `on_stall(action, records still waiting)` is called for each such step."""
    waiting: dict[asyncio.Future[Any], tuple[Sequence[Outgoing], bool]] = {
        asyncio.ensure_future(fut): (records, False) for fut, records in sent}
    refreshed = False  # since the last progress
    try:
        while waiting:
            done, _ = await asyncio.wait(waiting, timeout=stall_secs)
            failure: BaseException | None = None
            for fut in done:
                waiting.pop(fut)
                exc = asyncio.CancelledError() if fut.cancelled() else fut.exception()
                failure = failure or exc
            if failure is not None:
                raise failure
            if done:
                refreshed = False
                continue
            stuck = sum(len(records) for records, _ in waiting.values())
            fresh = [fut for fut, (_, resent) in waiting.items() if not resent]
            if not refreshed or not fresh:
                refreshed = True
                track_topics(producer, [topic])
                producer.client.force_metadata_update()
                on_stall(Stall.METADATA, stuck)
                continue
            for fut in fresh:
                records, _ = waiting.pop(fut)
                fut.add_done_callback(_observe)
                waiting[asyncio.ensure_future(_resend(producer, topic, records))] = (records, True)
            on_stall(Stall.RESEND, stuck)
    finally:
        for fut in waiting:  # only after a failure: the others are no longer awaited
            fut.add_done_callback(_observe)


__all__ = ["Outgoing", "Stall", "await_batches", "track_topics"]
