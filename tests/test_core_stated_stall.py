"""Gate A: an engine hang line that dates its own stall, on a job whose engines stopped generating then.

Real shape: sgl-project/sglang#7553 (scenario sglang_dp_attention_decode_hang_watchdog): decode batches every
few seconds, then nothing, then 300 s later '[... TP4] Watchdog timeout (self.watchdog_timeout=300)' (one
forward batch has run 300 s; SGLang then takes the server down). Before, the failing tail counted the silence
from the watchdog line and waited two trainer cadences (25 min for a 12 min slime cycle) while the 600 s
'generating' window still called the engine generating: ALIVE, 40 s after the server declared itself hung.
"""

from __future__ import annotations

from datetime import timedelta

from rlhealth.runtime import build_core
from tests.corekit import Job, at


def _decode(job: Job, start: float, end: float, stream: str, rank: str = "TP0") -> None:
    t, lines = at(start), []
    while t <= at(end):
        lines.append(f"[{t:%Y-%m-%d %H:%M:%S} {rank}] Decode batch. #running-req: 120, #token: 400000, token usage: "
                     "0.40, cuda graph: True, gen throughput (token/s): 1100.00, #queue-req: 4, ")
        t += timedelta(seconds=12)
    job.log(end, lines, stream=stream)


def _job(other_engine_until: float | None = None) -> Job:
    # 15-min steps from minute 0 to 60; the SGLang server decodes until 66.5 and its watchdog fires at 71.5
    job = Job(build_core()).spec().states(0, 73).steps(0, 60)
    _decode(job, 61, 66.5, "logs/sglang-0.log")
    job.log(71.5, [f"[{at(71.5):%Y-%m-%d %H:%M:%S} TP0] Watchdog timeout (self.watchdog_timeout=300)"],
            stream="logs/sglang-0.log")
    if other_engine_until is not None:
        _decode(job, 61, other_engine_until, "logs/sglang-1.log")
    return job


def test_watchdog_with_no_engine_generating_since_its_stall_is_a_wedge() -> None:
    """40 s after the watchdog the engine has made no progress for 5.7 min, counted from the stall it states;
    the trainer (12 min since its last step, cadence 15 min) is not yet late: WEDGED on the failing tail."""
    v = _job().judge(72.2)
    assert (v.verdict, v.job_status, v.gates.A.status) == ("KILL", "WEDGED", "FAIL")
    assert v.gates.A.codes[0] == "A.wedged_failing_tail"
    assert {"hang_log", "progress_stall"} <= set(v.gates.A.families)


def test_stall_still_inside_the_silence_limit_is_not_yet_a_wedge() -> None:
    """A watchdog that fires after only 60 s of stall (--watchdog-timeout 60), judged at once: 1.5 min of
    no progress is short of the limit, so the tail does not fire yet."""
    job = Job(build_core()).spec().states(0, 73).steps(0, 60)
    _decode(job, 61, 70.5, "logs/sglang-0.log")
    job.log(71.5, [f"[{at(71.5):%Y-%m-%d %H:%M:%S} TP0] Watchdog timeout (self.watchdog_timeout=60)"],
            stream="logs/sglang-0.log")
    v = job.judge(72.0)
    assert v.gates.A.status != "FAIL"


def test_another_engine_generating_after_the_stall_keeps_the_tail_quiet() -> None:
    """One server stalled while another kept decoding past the stall's start: not the whole rollout side, so
    the failing tail does not fire on it (one engine's stall is Gate B's business)."""
    v = _job(other_engine_until=72.0).judge(72.2)
    assert v.gates.A.codes[0] != "A.wedged_failing_tail"
    assert v.gates.A.status != "FAIL"


def test_a_soft_watchdog_states_no_stall() -> None:
    """SGLang's soft watchdog (--soft-watchdog-timeout; 'self.soft=True') only dumps stacks: the server is not
    taken down and the batch may still finish. Its line stays a hang line judged on the trainer's cadence, not a
    wedge 40 s later (before: KILL on the same timeline as the hard watchdog above)."""
    job = Job(build_core()).spec().states(0, 80).steps(0, 60)
    _decode(job, 61, 66.5, "logs/sglang-0.log")
    job.log(71.5, [f"[{at(71.5):%Y-%m-%d %H:%M:%S} TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, "
                   "self.soft=True)"], stream="logs/sglang-0.log")
    v = job.judge(72.2)
    assert (v.verdict, v.gates.A.status) == ("NO-KILL", "PASS")


def test_the_hard_watchdog_line_with_its_soft_flag_still_states_its_stall() -> None:
    job = Job(build_core()).spec().states(0, 80).steps(0, 60)
    _decode(job, 61, 66.5, "logs/sglang-0.log")
    job.log(71.5, [f"[{at(71.5):%Y-%m-%d %H:%M:%S} TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, "
                   "self.soft=False)"], stream="logs/sglang-0.log")
    v = job.judge(72.2)
    assert (v.verdict, v.gates.A.codes[0]) == ("KILL", "A.wedged_failing_tail")
