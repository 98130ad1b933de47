"""The worker consumer's fetch wait at the broker (rlhealth.streams.fetch_wait), without a broker.

faust builds its aiokafka consumer with fetch_max_wait_ms=1500 and no setting for it; a fetch of quiet
partitions then kept the busy ones from being fetched for 1.5 s at a time (bench/stream.py). The
installed consumer thread must build its aiokafka consumer with the wait asked for, and only for the
app it was installed on.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rlhealth.schemas.topics import TopicCatalog
from rlhealth.streams.app import make_app
from rlhealth.streams.fetch_wait import FETCH_MAX_WAIT_MS, install_fetch_wait


def aiokafka_consumer(app: Any) -> Any:
    """The aiokafka consumer the app's faust consumer thread builds when it starts (not started here)."""
    return app.consumer._thread._create_worker_consumer(app.transport)


async def _waits(install: int | None) -> tuple[int, int]:
    app = make_app("127.0.0.1:1", catalog=TopicCatalog(prefix="fw-a.", partitions=3))
    other = make_app("127.0.0.1:1", catalog=TopicCatalog(prefix="fw-b.", partitions=3))
    if install is None:
        install_fetch_wait(app)
    else:
        install_fetch_wait(app, install)
    mine, theirs = aiokafka_consumer(app), aiokafka_consumer(other)
    try:
        return mine._fetch_max_wait_ms, theirs._fetch_max_wait_ms
    finally:
        for consumer in (mine, theirs):
            await consumer.stop()  # never started: only marks it closed
        for a in (app, other):
            a.consumer._thread.thread_loop.close()  # the consumer thread's own loop, never run


def test_the_installed_consumer_waits_as_asked_and_other_apps_keep_fausts_wait() -> None:
    assert asyncio.run(_waits(40)) == (40, 1500)


def test_the_default_wait_is_short() -> None:
    mine, theirs = asyncio.run(_waits(None))
    assert mine == FETCH_MAX_WAIT_MS <= 200 < theirs
