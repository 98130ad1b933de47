"""The worker's garbage-collector pause timer (rlhealth/streams/pauses.py)."""

from __future__ import annotations

import gc
import logging

import pytest

from rlhealth.streams.pauses import GcPauses


def test_pauses_are_timed_per_generation_and_a_long_one_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    pauses = GcPauses(warn_secs=1.0, clock=lambda: now[0])
    for gen, took in ((0, 0.01), (2, 1.5), (2, 0.25), (1, 0.02)):
        pauses("start", {"generation": gen})
        now[0] += took
        with caplog.at_level(logging.WARNING, logger="rlhealth.worker"):
            pauses("stop", {"generation": gen, "collected": 7})
    assert pauses.count == [1, 1, 2]
    assert pauses.max_s == pytest.approx([0.01, 0.02, 1.5])
    assert pauses.total_s == pytest.approx([0.01, 0.02, 1.75])
    warned = [r.getMessage() for r in caplog.records if "garbage collection" in r.getMessage()]
    assert warned == ["a generation-2 garbage collection stopped the worker for 1.5 s (7 objects collected)"]


def test_installed_it_sees_the_collections_of_the_process() -> None:
    pauses = GcPauses()
    pauses.install()
    try:
        gc.collect()
    finally:
        pauses.uninstall()
    seen = pauses.count[2]
    assert seen >= 1
    assert pauses not in gc.callbacks
    gc.collect()
    assert pauses.count[2] == seen  # uninstalled: no longer called
