"""Gate B: every engine quiet since an engine's own death line is the rollout side down.

Real shape: sgl-project/sglang#3713 (a scheduler exception, then nothing) and the vLLM V1 EngineCore
fatal error; the trainer then waits for a generation buffer that never fills. Before this rule the
gate read the last stats (minutes old, within the generating window) as "generating" for ten minutes.
"""

from __future__ import annotations

import pytest

from rlhealth.runtime import build_core
from tests.corekit import Job, at, vllm_ts

DEATH = "(AsyncVLLMInferenceEngine pid=4000, ip=10.0.0.1) ERROR {ts} [core.py:587] EngineCore encountered a fatal error."
REQUEST_ERROR = ("(AsyncVLLMInferenceEngine pid=4000, ip=10.0.0.1) ERROR {ts} [serving_chat.py:210] "
                 "ValueError: This model's maximum context length is 32768 tokens.")


def _job(death_line: str = DEATH, stats_again: bool = False, step_after: bool = False) -> Job:
    # 15-min steps from minute 0 to 45; engines generate until minute 50, then the death at 50.2
    job = Job(build_core()).spec().states(0, 80).steps(0, 45).trials(20, 4).trials(40, 4)
    job.engine_stats(0, 50)
    job.log(50.2, [death_line.format(ts=vllm_ts(at(50.2)))], stream="logs/pod_rank1.log")
    if stats_again:
        job.engine_stats(53, 58)
    if step_after:
        job.steps(54, 80, step_min=10, first_step=5)
    return job


def _codes(job: Job, minute: float) -> tuple:
    v = job.judge(minute)
    return v.verdict, v.escalate, v.gates.B.status, tuple(v.gates.B.codes)


def test_escalates_at_once_then_fails_after_the_silence() -> None:
    job = _job()
    verdict, escalate, status, codes = _codes(job, 51)
    assert (verdict, escalate, status, codes[0]) == ("NO-KILL", True, "UNKNOWN", "B.engine_death_unconfirmed")
    verdict, _, status, codes = _codes(job, 56)
    assert status == "FAIL" and codes == ("B.engine_dead", "B.engine_death_line", "B.engine_no_stats")
    assert verdict == "KILL"


@pytest.mark.parametrize("kw", [{"stats_again": True}, {"step_after": True}, {"death_line": REQUEST_ERROR}],
                         ids=["engines-back", "trainer-steps", "request-error-only"])
def test_not_the_rollout_side_down(kw: dict) -> None:
    _verdict, _escalate, _status, codes = _codes(_job(**kw), 60)
    assert "B.engine_dead" not in codes and "B.engine_death_unconfirmed" not in codes
