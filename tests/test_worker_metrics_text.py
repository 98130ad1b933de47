"""The worker takes the snapshot `/metrics` serves on its event loop, between judging passes
(`StreamWorker._after_passes`, `Exporter.serve(rendered=True)`), and freezes its heap after regular passes."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from prometheus_client import generate_latest

from rlhealth.agents.findings import JobMetrics
from rlhealth.streams import workers
from tests.offline_worker import offline_worker
from tests.test_sink_prometheus import metrics

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _metrics(job_id: str, step: int) -> JobMetrics:
    return metrics(job_id, trainer_last_step=step)


def test_the_timer_takes_the_snapshot_but_not_while_a_pass_judges() -> None:
    w = offline_worker(core=None, clock=[T0])
    w._metrics_text_next = 0.0
    w.exporter.update(_metrics("job-a", 1))
    w.refresh_metrics()
    assert w.exporter.rendered_exposition() == generate_latest(w.exporter.registry)
    w.exporter.update(_metrics("job-a", 2))  # a pass of jobs with news changed the job

    async def during_a_pass() -> None:
        async with w._judging:
            w._metrics_text_next = 0.0
            await w._after_passes()

    asyncio.run(during_a_pass())
    assert b'rlhealth_job_trainer_last_step{job_id="job-a"} 1.0' in w.exporter.rendered_exposition()
    w._metrics_text_next = 0.0
    asyncio.run(w._after_passes())
    assert w.exporter.rendered_exposition() == generate_latest(w.exporter.registry)
    w.exporter.jobs_owned.set(5)  # only the pipeline changed: taken at every tick of the timer
    w._metrics_text_next = time.monotonic() + 100.0
    asyncio.run(w._after_passes())
    assert w.exporter.rendered_exposition() == generate_latest(w.exporter.registry)


def test_changed_jobs_are_rendered_at_most_the_duty_share_of_the_time() -> None:
    w = offline_worker(core=None, clock=[T0])
    w._metrics_text_next = 0.0
    for i in range(200):
        w.exporter.update(_metrics(f"job-{i:03d}", i))
    started = time.monotonic()
    w.refresh_metrics()
    assert w._metrics_text_next > started  # the next render waits ten times as long as this one took
    w._metrics_text_next = time.monotonic() + 100.0
    w.exporter.update(_metrics("job-000", 1000))
    w.exporter.jobs_owned.set(7)
    asyncio.run(w._after_passes())  # too soon after the last render: the whole snapshot waits
    assert w.exporter.jobs.changed
    assert b"rlhealth_jobs_owned 0.0" in w.exporter.rendered_exposition()
    w._metrics_text_next = 0.0
    asyncio.run(w._after_passes())
    assert not w.exporter.jobs.changed
    assert w.exporter.rendered_exposition() == generate_latest(w.exporter.registry)
    assert workers.METRICS_TEXT_DUTY <= 0.25


def test_after_a_regular_pass_the_timer_takes_the_snapshot_at_once_and_freezes_the_heap() -> None:
    """The regular pass only marks its end; the timer takes the snapshot (whatever the duty budget)
    and freezes the heap, once per pass."""
    w = offline_worker(core=None, clock=[T0])
    frozen: list[int] = []

    class Heap:
        def after_pass(self) -> None:
            frozen.append(1)

    w.heap = Heap()  # type: ignore[assignment]  # not the real freezer: the test process stays thawed
    w.exporter.update(_metrics("job-a", 1))
    w.refresh_metrics()
    w.exporter.update(_metrics("job-a", 2))
    w._metrics_text_next = time.monotonic() + 100.0  # the duty budget's pause after the last render
    asyncio.run(w._after_passes())  # within that pause and no pass ended: nothing
    assert w.exporter.jobs.changed and frozen == []
    w._pass_ended = True
    asyncio.run(w._after_passes())
    assert not w.exporter.jobs.changed and frozen == [1] and not w._pass_ended
    assert w.exporter.rendered_exposition() == generate_latest(w.exporter.registry)
    asyncio.run(w._after_passes())
    assert frozen == [1]  # once per pass
