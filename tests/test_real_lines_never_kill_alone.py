"""One real log line, however alarming, never turns a healthy job into a KILL: a single line is one
evidence family (issue #10). Every line of the real-line corpus (tests/corpus, verbatim from public
threads) is dropped into a healthy, progressing job; the call must stay NO-KILL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlhealth.runtime import build_core
from tests.corekit import Job, healthy

CORPUS = Path(__file__).parent / "corpus" / "lines.jsonl"
LINES = [json.loads(x) for x in CORPUS.read_text(encoding="utf-8").splitlines() if x.strip()]


@pytest.fixture(scope="module")
def core():
    return build_core()


def test_no_single_real_line_kills_a_healthy_job(core) -> None:
    kills = []
    for rec in LINES:
        job = healthy(Job(core))
        job.log(100, [rec["text"]], stream="logs/pod_rank0.log")
        v = job.judge(121)
        if v.verdict == "KILL":
            kills.append((rec.get("source"), rec["text"][:160], v.reasoning[:200]))
    assert kills == [], "\n".join(map(str, kills[:10]))


def test_the_same_line_repeated_is_still_one_family(core) -> None:
    faults = [r for r in LINES if r["label"] == "fault"][:60]
    kills = []
    for rec in faults:
        job = healthy(Job(core))
        for minute in (90, 95, 100, 105):
            job.log(minute, [rec["text"]] * 3, stream="logs/pod_rank1.log")
        v = job.judge(121)
        if v.verdict == "KILL":
            kills.append((rec.get("source"), rec["text"][:160], v.reasoning[:200]))
    assert kills == [], "\n".join(map(str, kills[:10]))
