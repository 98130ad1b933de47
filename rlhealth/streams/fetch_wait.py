"""How long a fetch of the worker's consumer may wait at the broker for records: short, so that a
fetch of quiet partitions never holds back the busy ones.

aiokafka keeps at most one fetch request in flight per broker, and leaves out of a new request the
partitions whose last fetched records have not all been taken yet. Under a steady intake the busy
partitions (logs) often still have records buffered when the fetcher asks again, so the request it
sends covers only the quiet ones (the other event topics, which may get nothing for minutes). The
broker holds such a request until `fetch_max_wait_ms` runs out, and for that time no fetch goes
out for the busy partitions either: their records pile up at the broker, then arrive in one burst.
faust sets the wait to 1.5 s. bench/stream.py saw it at 300k lines/s of background: the worker
idle with nothing to fold, `getmany` returning nothing for 1.0 s, then ~1,000 records at once, the
oldest ~2 s old; every probe in such a burst waited for the whole burst's fold, and the bursts fed
themselves (a long fold leaves records buffered, so the next request again covers only the quiet
partitions). The p99 of signal-to-verdict went from ~0.4 s to 3-7 s (BENCHMARKS.md, session 10).

With a short wait a request for quiet partitions comes back empty soon and the next one includes
the busy partitions again. What it costs is a fetch request per `fetch_max_wait_ms` to each broker
while every partition is quiet (10 a second at 100 ms), answered from the broker's memory.
"""

from __future__ import annotations

import logging
from typing import Any

import faust
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

log = logging.getLogger("rlhealth.worker")

FETCH_MAX_WAIT_MS = 100


class ShortFetchThread(AIOKafkaConsumerThread):
    """faust's consumer thread, whose aiokafka consumer waits `fetch_max_wait_ms` per fetch."""

    fetch_max_wait_ms = FETCH_MAX_WAIT_MS

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # faust passes fetch_max_wait_ms=1500 and has no setting for it; aiokafka's consumer hands this
        # attribute to the fetcher it creates when it starts, which is after this
        if hasattr(consumer, "_fetch_max_wait_ms"):
            consumer._fetch_max_wait_ms = self.fetch_max_wait_ms
        else:  # another aiokafka: the worker runs, with faust's wait
            log.warning("cannot set the consumer's fetch wait: faust's 1.5 s applies")
        return consumer


def install_fetch_wait(app: faust.App, wait_ms: int = FETCH_MAX_WAIT_MS) -> None:
    """Make the app's worker consumer wait at most `wait_ms` at the broker per fetch (call before the
    app starts; see the module docstring)."""
    transport = app.transport
    base = transport.Consumer
    thread_class = type("ShortFetchThread", (ShortFetchThread,), {"fetch_max_wait_ms": wait_ms})

    class ShortFetchConsumer(base):  # type: ignore[misc, valid-type]
        def _new_consumer_thread(self) -> Any:
            return thread_class(self, loop=self.loop, beacon=self.beacon)

    transport.Consumer = ShortFetchConsumer  # type: ignore[misc]  # this app's transport only


__all__ = ["FETCH_MAX_WAIT_MS", "ShortFetchThread", "install_fetch_wait"]
