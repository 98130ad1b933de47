"""The worker's cheaper intake (rlhealth.streams.intake), without a broker.

The lean delivery must behave like faust's `wait_first(callback(message), suspend_flow.wait())`:
a delivery that does not block returns its result; one that blocks is still abandoned when the flow
is suspended (a rebalance), and one that completes later returns its result.
"""

from __future__ import annotations

import asyncio
import warnings
from types import SimpleNamespace
from typing import Any

import pytest

from rlhealth.streams.intake import RawBytes, install_lean_delivery


class FakeConsumer:
    """faust's consumer as far as the lean delivery uses it: `suspend_flow` and `wait_first`."""

    def __init__(self) -> None:
        self.suspend_flow = asyncio.Event()
        self.app = SimpleNamespace(rebalancing=False, in_recovery=False)
        self.slow_calls = 0

    async def wait_first(self, *coros: Any, timeout: Any = None) -> Any:
        self.slow_calls += 1
        tasks = [asyncio.ensure_future(c if not isinstance(c, asyncio.Event) else c.wait()) for c in coros]
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return SimpleNamespace(done=[coros[tasks.index(t)] for t in done], results=[t.result() for t in done],
                               stopped=False)


def lean_consumer() -> Any:
    app = SimpleNamespace(transport=SimpleNamespace(Consumer=FakeConsumer))
    install_lean_delivery(app)  # type: ignore[arg-type]
    return app.transport.Consumer()


def test_raw_bytes_schema_hands_on_key_and_value_unchanged() -> None:
    message = SimpleNamespace(key=b"job-1", value=b"{not json")
    schema = RawBytes()
    assert schema.loads_key(None, message) == b"job-1"  # type: ignore[arg-type]
    assert schema.loads_value(None, message) is message.value  # type: ignore[arg-type]
    assert schema.loads_value(None, SimpleNamespace(key=None, value=None)) is None  # type: ignore[arg-type]


def test_a_delivery_that_does_not_block_is_done_in_place() -> None:
    async def main() -> None:
        consumer = lean_consumer()
        delivered = []

        async def callback(x: int) -> int:
            delivered.append(x)
            return x * 2

        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the unused suspend_flow.wait() coroutine must be closed
            result = await consumer.wait_first(callback(21), consumer.suspend_flow.wait())
        assert result.results == [42] and delivered == [21]
        assert consumer.slow_calls == 0  # no tasks, faust's path not taken

    asyncio.run(main())


def test_a_blocked_delivery_completes_later_through_faust_path() -> None:
    async def main() -> None:
        consumer = lean_consumer()
        gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def callback() -> str:
            got = await gate  # e.g. the stream buffer is full
            return got + "!"

        asyncio.get_running_loop().call_later(0.05, gate.set_result, "put")
        result = await consumer.wait_first(callback(), consumer.suspend_flow.wait())
        assert result.results == ["put!"]
        assert consumer.slow_calls == 1

    asyncio.run(main())


def test_a_blocked_delivery_is_abandoned_when_the_flow_is_suspended() -> None:
    async def main() -> None:
        consumer = lean_consumer()
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        unwound = []

        async def callback() -> None:
            try:
                await gate  # never completes
            finally:
                unwound.append(True)  # the cancellation reached the callback itself

        asyncio.get_running_loop().call_later(0.05, consumer.suspend_flow.set)
        result = await consumer.wait_first(callback(), consumer.suspend_flow.wait())
        assert result.done and result.done[0] is not None and result.results == [True]
        assert unwound == [True]

    asyncio.run(main())


def test_an_error_in_the_delivery_propagates() -> None:
    async def main() -> None:
        consumer = lean_consumer()

        async def callback() -> None:
            raise ValueError("bad record handler")

        with pytest.raises(ValueError, match="bad record handler"):
            await consumer.wait_first(callback(), consumer.suspend_flow.wait())

    asyncio.run(main())


def test_while_rebalancing_every_delivery_takes_faust_path() -> None:
    async def main() -> None:
        consumer = lean_consumer()
        consumer.app.rebalancing = True

        async def callback() -> int:
            return 1

        assert (await consumer.wait_first(callback(), consumer.suspend_flow.wait())).results == [1]
        assert consumer.slow_calls == 1

    asyncio.run(main())


def test_installing_twice_wraps_once() -> None:
    app = SimpleNamespace(transport=SimpleNamespace(Consumer=FakeConsumer))
    install_lean_delivery(app)  # type: ignore[arg-type]
    first = app.transport.Consumer
    install_lean_delivery(app)  # type: ignore[arg-type]
    assert app.transport.Consumer is first and first.__mro__[1] is FakeConsumer
