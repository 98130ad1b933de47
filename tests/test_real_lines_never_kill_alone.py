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


@pytest.mark.parametrize("line", [
    # a code-execution reward's result for a policy's failing program (a sandbox runner's own wording), the most
    # common line of a code-RL rollout: no process of the job exited
    "(TaskRunner pid=3716, ip=10.0.3.95) WARNING:root:code execution failed: Process exited with return code 1",
    "(RewardWorker pid=812) Program exited with code 1.",
])
def test_a_sandboxed_programs_exit_code_is_no_death_line_before_a_quiet_trainer(core, line: str) -> None:
    """The trainer quiet past its cadence with no fault line of its own is a stall to escalate, not a wedge; a
    sandboxed program's exit code printed just before must not stand in for the death line."""
    job = Job(core).spec().states(0, 200, every=5)
    job.steps(0, 90)
    job.engine_stats(60, 90)
    for m in range(0, 200, 10):
        job.gpu(m, "pod-0", 85.0).gpu(m, "pod-1", 70.0)
    job.trials(70, 8).trials(85, 8)
    job.log(91, [line], stream="logs/pod_rank0.log")
    v = job.judge(125)
    assert (v.verdict, v.escalate, v.gates.A.codes[:1]) == ("NO-KILL", True, ["A.trainer_stale_no_signature"])
