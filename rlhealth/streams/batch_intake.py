"""Event-topic records handed to the worker in lists, past faust's per-message channel and stream.

Under a flood of small records (dead letters) the worker's CPU went mostly to faust's per-message
path: the conductor's callback, the channel queue, the stream's iteration, `take_events`, the ack,
the sensors, and (without the lean delivery) four tasks per message in the fetcher. Our own code
was a small share, so a record could not be made much cheaper by working on our side alone.

`BatchIntake` wraps the consumer's callback. A record of an event topic is put, as faust's
`Message`, in a plain list (tracked as unacked by the consumer, like faust's streams do), and the
worker takes the list whole (`take`), folds the records and acks them (`done`). Everything
else (the tables' changelogs during recovery) goes to faust's conductor as before.

Faust's rules are kept:

* ordering: every record of an event topic takes this path, always, so a partition's records are
  folded in offset order;
* flow control: while the app's flow control is suspended (a rebalance, table recovery) nothing
  is accepted, and the buffer is registered with it, so faust clears it at a rebalance, as it
  clears its own stream buffers: those records were never acked, and the consumer reads them
  again from the committed offset;
* a record fetched before a rebalance (an older consumer generation) is dropped at `take`, not
  folded and not acked, like faust's streams skip it;
* back-pressure: when `max_buffered` records wait, the callback returns a coroutine that waits for
  room, which faust's fetcher runs with its `wait_first(..., suspend_flow.wait())`, so a rebalance
  abandons it as before.

Accepting a record with room in the buffer does not wait for anything; the callback then returns
the `BUFFERED` marker instead of a coroutine, and the consumer's `wait_first` (installed by
`install_batch_intake`) returns at once for it, without the tasks faust starts per message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from typing import Any

import faust
from faust.types import Message


class _Buffered:
    """The callback's answer for a record accepted without waiting."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "BUFFERED"


BUFFERED = _Buffered()


class BatchIntake:
    """Event-topic records between faust's fetcher and the worker (see the module docstring)."""

    def __init__(self, app: faust.App, topics: Collection[str], *, max_buffered: int = 4000) -> None:
        self.app = app
        self.topics = frozenset(topics)
        self.max_buffered = max_buffered
        self._buf: list[Message] = []
        self._ready = asyncio.Event()  # something is buffered
        self._room = asyncio.Event()  # fewer than max_buffered are buffered
        self._room.set()
        self.dropped_stale = 0  # records of an older consumer generation, dropped at `take`
        # faust's flow control calls `clear()` on the queues it manages (a rebalance, a resume)
        app.flow_control.manage_queue(self)  # type: ignore[arg-type]

    def wrap(self, conductor_callback: Callable[[Message], Any]) -> Callable[[Message], Any]:
        """The consumer callback: event-topic records to the buffer, the rest to faust's conductor."""
        topics = self.topics
        flow = self.app.flow_control
        buf = self._buf

        def on_message(message: Message) -> Any:
            if message.topic not in topics:
                return conductor_callback(message)
            if flow.is_active() and len(buf) < self.max_buffered:
                self._accept(message)
                return BUFFERED
            return self._accept_later(message)

        return on_message

    def _accept(self, message: Message) -> None:
        if not message.tracked:
            message.tracked = True
            self.app.consumer.track_message(message)  # unacked until `done`, as faust's streams do
        self._buf.append(message)
        self._ready.set()

    async def _accept_later(self, message: Message) -> None:
        flow = self.app.flow_control
        while True:
            await flow.acquire()  # suspended: wait for the rebalance or recovery to end
            if len(self._buf) < self.max_buffered:
                break
            self._room.clear()
            await self._room.wait()
        self._accept(message)

    def clear(self) -> None:
        """Drop what is buffered (faust's flow control, at a rebalance): never acked, read again."""
        self._buf.clear()
        self._ready.clear()
        self._room.set()

    def __len__(self) -> int:
        return len(self._buf)

    async def take(self, limit: int) -> list[Message]:
        """Wait for records; return up to `limit` of them, oldest first, all of the current generation."""
        while True:
            while not self._buf:
                self._ready.clear()
                await self._ready.wait()
            batch = self._buf[:limit]
            del self._buf[:limit]
            if not self._buf:
                self._ready.clear()
            if len(self._buf) < self.max_buffered:
                self._room.set()
            generation = self.app.consumer_generation_id
            if not self.app.flow_control.is_active():
                self.dropped_stale += len(batch)
                continue
            fresh = [m for m in batch if m.generation_id == generation]
            self.dropped_stale += len(batch) - len(fresh)
            if fresh:
                return fresh

    def done(self, messages: list[Message]) -> None:
        """The records were folded in: ack them (their offsets can be committed)."""
        ack = self.app.consumer.ack
        for message in messages:
            ack(message)


def install_batch_intake(app: faust.App, intake: BatchIntake) -> None:
    """Route the app's event-topic records through `intake` (call before the app starts)."""
    transport = app.transport
    base = transport.Consumer

    class IntakeConsumer(base):  # type: ignore[misc, valid-type]
        rlhealth_intake = intake

        def __init__(self, *args: Any, callback: Callable[[Message], Any], **kwargs: Any) -> None:
            super().__init__(*args, callback=intake.wrap(callback), **kwargs)

        async def wait_first(self, *coros: Any, timeout: Any = None) -> Any:
            if coros and coros[0] is BUFFERED:  # accepted without waiting: nothing to run
                for other in coros[1:]:
                    if asyncio.iscoroutine(other):
                        other.close()  # never started
                return None  # the fetcher does not use the result
            return await super().wait_first(*coros, timeout=timeout)

    transport.Consumer = IntakeConsumer  # type: ignore[misc]  # this app's transport only


__all__ = ["BUFFERED", "BatchIntake", "install_batch_intake"]
