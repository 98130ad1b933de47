"""A time-only stamp (OpenHands' logger: ``HH:MM:SS - openhands:INFO: ...``) has no date of its own. It is
dated by the nearest earlier full stamp of the same source, or not at all: no date is invented from the
reader's clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rlhealth.agents.normalize import date_time_only, line_timestamp
from rlhealth.runtime import build_core
from rlhealth.schemas import LogBatch, Source
from tests.corekit import at

OH_ERROR = ("(WorkerDict pid=54152) 22:03:47 - openhands:ERROR: docker_runtime.py:389 - [runtime 96d6] Error: "
            "Instance openhands-runtime-96d6 FAILED to start container!")


def test_a_time_only_stamp_is_not_a_stamp_on_its_own() -> None:
    assert line_timestamp(OH_ERROR, at(0)) is None


def test_it_takes_the_date_of_the_earlier_full_stamp() -> None:
    earlier = datetime(2026, 11, 20, 21, 58, 2, tzinfo=UTC)
    got = date_time_only("22:03:47 - openhands:INFO: codeact.py:1050 - done", earlier)
    assert got == datetime(2026, 11, 20, 22, 3, 47, tzinfo=UTC)


def test_midnight_between_the_two_moves_it_to_the_next_day() -> None:
    earlier = datetime(2026, 11, 20, 23, 59, 50, tzinfo=UTC)
    assert date_time_only("00:00:05 - openhands:INFO: x", earlier) == datetime(2026, 11, 21, 0, 0, 5, tzinfo=UTC)
    # a line a few seconds out of order stays on the same day
    assert date_time_only("23:59:41 - openhands:INFO: x", earlier) == datetime(2026, 11, 20, 23, 59, 41, tzinfo=UTC)


@pytest.mark.parametrize("rest", ["22:03:47 openhands:INFO: no dash", "2026-11-20 22:03:47 - full stamp",
                                  "25:61:00 - not a time", "step 3 - 22:03:47 - later in the line"])
def test_only_a_leading_time_only_stamp_counts(rest: str) -> None:
    assert date_time_only(rest, datetime(2026, 11, 20, 21, 0, tzinfo=UTC)) is None


@pytest.fixture(scope="module")
def core():
    return build_core()


def _sandbox_last_ts(core, lines: list[str]) -> float:
    state = core.new_state("job-1")
    batch = LogBatch(job_id="job-1", event_time=at(30), lines=lines, source=Source(stream="logs/rank0.log"))
    state, _ = core.step(state, batch, at(31))
    return state.signals["sandbox_error"].last_ts


def test_the_core_dates_it_from_the_nearest_earlier_full_stamp_in_the_batch(core) -> None:
    full = "(WorkerDict pid=54152) [2026-06-28 12:10:00,120 I 54152 54152] core_worker.cc:100: a Ray line"
    last_ts = _sandbox_last_ts(core, [full, "(WorkerDict pid=54152) Successfully completed evaluating", OH_ERROR])
    assert last_ts == datetime(2026, 6, 28, 22, 3, 47, tzinfo=UTC).timestamp()


def test_without_an_earlier_full_stamp_it_gets_no_date_of_its_own(core) -> None:
    # no date is invented: the line takes what any unstamped line takes (here the batch's event time)
    assert _sandbox_last_ts(core, ["(WorkerDict pid=54152) Successfully completed evaluating", OH_ERROR]) \
        == at(30).timestamp()
