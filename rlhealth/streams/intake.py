"""Cheaper per-record intake through faust, for floods of small records (dead letters).

Profiling the worker under a flood of undecodable records (`RLHEALTH_PROFILE`, bench/stream.py
`--deadletter-flood`) showed our own code at ~6% of its CPU; the rest was faust's per-message
machinery. Two parts of it cost a lot and do nothing for raw-bytes topics in the common case:

* `RawBytes`: the schema of the event topics. Keys and values are handed on as the bytes Kafka gave
  (faust's default schema runs both through its serializer registry and the `raw` codec, ~15% of
  the worker's time per record under a flood).
* `lean_first`: faust's fetcher hands each message to the conductor with
  `wait_first(callback(message), suspend_flow.wait())`, which starts four tasks per message so that
  a rebalance can abandon a delivery blocked on a full stream buffer. Nearly every delivery never
  blocks: `lean_first` steps the callback once in place and only when it would block does it fall
  back to faust's `wait_first` with the rest of it, so the abandon-on-rebalance path is unchanged.
  While the group rebalances or the tables recover, every delivery takes faust's path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any

import faust
from faust.types import AppT, Message
from mode.services import WaitResults


class RawBytes(faust.Schema):
    """Key and value exactly as consumed: `bytes`, or None (a missing key, a tombstone)."""

    def loads_key(self, app: AppT, message: Message, *, loads: Any = None, serializer: Any = None) -> Any:
        return message.key

    def loads_value(self, app: AppT, message: Message, *, loads: Any = None, serializer: Any = None) -> Any:
        return message.value


class _Resume:
    """Awaitable that goes on driving a coroutine already stepped once (it yielded `pending`)."""

    __slots__ = ("coro", "pending")

    def __init__(self, coro: Coroutine[Any, Any, Any], pending: Any) -> None:
        self.coro = coro
        self.pending = pending

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, pending = self.coro, self.pending
        while True:
            try:
                sent = yield pending  # the task resumes us when what the coroutine waits on is done
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - cancellation and errors go to the coroutine
                try:
                    pending = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    pending = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


def install_lean_delivery(app: faust.App) -> None:
    """Make the app's consumer deliver messages without four tasks each (see the module docstring)."""
    transport = app.transport
    base = transport.Consumer
    if getattr(base, "rlhealth_lean", False):
        return

    class LeanConsumer(base):  # type: ignore[misc, valid-type]
        rlhealth_lean = True

        async def wait_first(self, *coros: Any, timeout: Any = None) -> Any:
            first = coros[0] if coros else None
            app = self.app
            # Only in steady state: while the group rebalances or tables recover, faust's own path
            # (a rebalance is rare, and that is when its timing matters)
            if (timeout is None and len(coros) == 2 and asyncio.iscoroutine(first)
                    and not self.suspend_flow.is_set() and not app.rebalancing
                    and not getattr(app, "in_recovery", False)):
                try:
                    pending = first.send(None)
                except BaseException as exc:  # done (or failed) without waiting: the common case
                    for other in coros[1:]:
                        if asyncio.iscoroutine(other):
                            other.close()  # never started: nothing to wait for
                    if isinstance(exc, StopIteration):
                        return WaitResults([first], [exc.value], False)
                    raise
                return await super().wait_first(_Resume(first, pending), *coros[1:])
            return await super().wait_first(*coros, timeout=timeout)

    transport.Consumer = LeanConsumer  # type: ignore[misc]  # this app's transport only


__all__ = ["RawBytes", "install_lean_delivery"]
