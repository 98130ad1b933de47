"""The worker's batch intake (rlhealth.streams.batch_intake), without a broker.

It must keep faust's rules while taking records in lists: event-topic records in offset order,
everything else to faust's conductor, nothing accepted while the flow is suspended, a rebalance
drops what is buffered (unacked, read again), a record of an older generation is never folded,
a full buffer makes the fetcher wait, and a record is acked only when the worker says it is done.
"""

from __future__ import annotations

import asyncio
import warnings
from types import SimpleNamespace
from typing import Any

from mode.utils.queues import FlowControlEvent

from rlhealth.streams.batch_intake import BUFFERED, BatchIntake, install_batch_intake


class FakeConsumer:
    """faust's consumer as far as the intake uses it: tracking, acks, the slow `wait_first`."""

    def __init__(self, *args: Any, callback: Any = None, **kwargs: Any) -> None:
        self.callback = callback
        self.tracked: list[Any] = []
        self.acked: list[Any] = []
        self.slow_calls = 0

    def track_message(self, message: Any) -> None:
        self.tracked.append(message)

    def ack(self, message: Any) -> bool:
        self.acked.append(message)
        return True

    async def wait_first(self, *coros: Any, timeout: Any = None) -> Any:
        self.slow_calls += 1
        tasks = [asyncio.ensure_future(c) for c in coros]
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return [t.result() for t in done]


def make_app() -> Any:
    flow = FlowControlEvent(initially_suspended=False)
    app = SimpleNamespace(flow_control=flow, consumer_generation_id=1,
                          transport=SimpleNamespace(Consumer=FakeConsumer))
    return app


def msg(topic: str, offset: int, generation: int = 1) -> Any:
    return SimpleNamespace(topic=topic, partition=0, offset=offset, generation_id=generation, tracked=False)


def setup(max_buffered: int = 100) -> tuple[Any, BatchIntake, list[Any], Any]:
    app = make_app()
    intake = BatchIntake(app, {"logs", "gpu"}, max_buffered=max_buffered)
    to_conductor: list[Any] = []

    async def conductor(message: Any) -> str:
        to_conductor.append(message)
        return "conductor"

    install_batch_intake(app, intake)
    consumer = app.transport.Consumer(callback=conductor)
    app.consumer = consumer
    return app, intake, to_conductor, consumer


def test_event_records_are_buffered_in_order_and_the_rest_goes_to_faust() -> None:
    async def main() -> None:
        app, intake, to_conductor, consumer = setup()
        records = [msg("logs", 0), msg("gpu", 0), msg("changelog", 5), msg("logs", 1)]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the unused suspend_flow coroutine must be closed, not leaked
            results = [await consumer.wait_first(consumer.callback(m), asyncio.sleep(10)) for m in records]
        assert results[0] is None and results[2] == ["conductor"]  # the fetcher ignores the result
        assert consumer.slow_calls == 1  # only the conductor's record took faust's path
        assert to_conductor == [records[2]]
        assert consumer.tracked == [records[0], records[1], records[3]]  # unacked until done
        got = await intake.take(2)
        assert got == [records[0], records[1]]
        assert await intake.take(10) == [records[3]]
        assert consumer.acked == []
        intake.done(got)
        assert consumer.acked == got

    asyncio.run(main())


def test_the_callback_answers_buffered_without_a_coroutine() -> None:
    _app, intake, _to, consumer = setup()
    assert consumer.callback(msg("logs", 0)) is BUFFERED
    assert len(intake) == 1


def test_a_rebalance_drops_the_buffer_and_records_of_an_older_generation() -> None:
    async def main() -> None:
        app, intake, _to, consumer = setup()
        for i in range(3):
            consumer.callback(msg("logs", i))
        app.flow_control.suspend()
        app.flow_control.clear()  # what faust does when partitions are revoked
        assert len(intake) == 0
        # while suspended nothing is accepted: the callback waits for the flow to resume
        pending = consumer.callback(msg("logs", 3))
        assert asyncio.iscoroutine(pending)
        waiting = asyncio.ensure_future(pending)
        await asyncio.sleep(0.01)
        assert not waiting.done() and len(intake) == 0
        app.consumer_generation_id = 2
        app.flow_control.resume()
        await asyncio.wait_for(waiting, 1)
        consumer.callback(msg("logs", 3, generation=2))
        # the record fetched in generation 1 is dropped (not folded, not acked); the new one is taken
        got = await intake.take(10)
        assert [(m.offset, m.generation_id) for m in got] == [(3, 2)]
        assert intake.dropped_stale == 1

    asyncio.run(main())


def test_a_full_buffer_makes_the_fetcher_wait_for_room() -> None:
    async def main() -> None:
        _app, intake, _to, consumer = setup(max_buffered=2)
        assert consumer.callback(msg("logs", 0)) is BUFFERED
        assert consumer.callback(msg("logs", 1)) is BUFFERED
        third = consumer.callback(msg("logs", 2))
        assert asyncio.iscoroutine(third)
        waiting = asyncio.ensure_future(third)
        await asyncio.sleep(0.01)
        assert not waiting.done()
        assert [m.offset for m in await intake.take(1)] == [0]
        await asyncio.wait_for(waiting, 1)
        assert [m.offset for m in await intake.take(10)] == [1, 2]

    asyncio.run(main())


def test_take_waits_for_records() -> None:
    async def main() -> None:
        _app, intake, _to, consumer = setup()
        taking = asyncio.ensure_future(intake.take(10))
        await asyncio.sleep(0.01)
        assert not taking.done()
        consumer.callback(msg("logs", 7))
        assert [m.offset for m in await asyncio.wait_for(taking, 1)] == [7]

    asyncio.run(main())
