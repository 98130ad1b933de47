"""Gate B: an engine silent with requests Running (one 0.0 tok/s line with Running > 0, then no stats while another
engine keeps logging) is hung only with corroboration from its own GPUs; alone it escalates.

Why: vLLM prints the same two things for an engine stuck in a step and for one whose requests were all aborted (the
scheduler stats stay stale until a step runs, vllm-project/vllm#29928; 'Running: 106 reqs' at 0.0 tok/s after
aborts, vllm-project/vllm#22545), and RL rollouts abort requests on one engine while others go on
(verl-project/verl#6866, verl-project/verl#4453, THUDM/slime#2). A stuck step keeps its GPUs at full utilisation
(vllm-project/vllm#14449, vllm-project/vllm#8087); an idle engine leaves them at 0 %.
"""

from __future__ import annotations

import pytest

from rlhealth.runtime import build_core
from rlhealth.schemas import LogBatch
from rlhealth.schemas.common import Source
from tests.corekit import Job, at, vllm_ts
from tests.test_core_engine_stall import STATS, WAIT, ZERO_AT

A = "(AsyncVLLMInferenceEngine pid=4000, ip=10.0.0.1)"
B = "(AsyncVLLMInferenceEngine pid=4001, ip=10.0.0.2)"
SILENT = "B.engine_silent_unconfirmed"
HUNG = "B.engine_hung"
STALLED = "B.engine_stalled_on_workers"


def _line(job: Job, minute: float, prefix: str, host: str, gen: float, running: int) -> None:
    text = STATS.format(prefix=prefix, ts=vllm_ts(at(minute)), label="Engine 000", gen=gen, prompt=0.0,
                        running=running)
    job.events.append(LogBatch(job_id=job.job_id, event_time=at(minute), lines=[text],
                               source=Source(stream=f"logs/{host}.log", host=host)))


def _job(until: float, b_host: str = "pod-2", policy_pods: tuple[str, ...] = ("pod-0",)) -> Job:
    """Two engines, each on its own engine pod: A generates until minute 50, then its newest stats line is 0.0 tok/s
    with Running 3 at ZERO_AT; B keeps generating (the batch's long tail) until `until`, the minute judged. The
    trainer steps every 15 min until 45, and the policy and B's GPUs are busy."""
    job = Job(build_core()).spec(geometry={"num_inference_engines": 2, "engine_tp": 2,
                                           "engine_pods": ["pod-1", "pod-2"], "policy_pods": list(policy_pods)})
    job.states(0, until + 1).steps(0, 45).trials(30, 8).trials(44, 8)
    m = 30.0
    while m < until:
        if m < ZERO_AT:
            _line(job, m, A, "pod-1", 800.0, 3)
        _line(job, m, B, b_host, 700.0, 5)
        m += 1 / 6
    _line(job, ZERO_AT, A, "pod-1", 0.0, 3)
    for m10 in range(0, int(until) + 1, 10):
        job.gpu(m10, "pod-0", 85.0).gpu(m10, "pod-2", 70.0)
        if m10 < ZERO_AT:
            job.gpu(m10, "pod-1", 70.0)
    return job


def _polls(job: Job, host: str, minutes: tuple[float, ...], util: float, power: float = 120.0) -> None:
    for m in minutes:
        job.gpu(m, host, util)
        ev = job.events[-1]
        job.events[-1] = ev.model_copy(update={"gpus": [r.model_copy(update={"power_w": power}) for r in ev.gpus]})


def _b(job: Job, minute: float) -> tuple:
    v = job.judge(minute)
    return v.verdict, v.gates.B.status, v.gates.B.codes[0] if v.gates.B.codes else ""


@pytest.mark.parametrize(("pod1_polls", "util", "minute", "expected"), [
    # the reviewer's case: no poll of the engine's own host: silent with a stale-looking Running count, escalate
    ((), None, ZERO_AT + 6, ("NO-KILL", "UNKNOWN", SILENT)),
    ((), None, ZERO_AT + 9, ("NO-KILL", "UNKNOWN", SILENT)),
    # its GPUs idle since the 0.0 line: what an engine idle after aborts looks like (or a hang off the GPU): escalate
    ((ZERO_AT + 2, ZERO_AT + 4, ZERO_AT + 5.5), 0.0, ZERO_AT + 6, ("NO-KILL", "UNKNOWN", SILENT)),
    # pinned at full util on two polls since (a step stuck in a collective spins them): hung
    ((ZERO_AT + 2, ZERO_AT + 5.5), 100.0, ZERO_AT + 6, ("KILL", "FAIL", HUNG)),
    ((ZERO_AT + 2, ZERO_AT + 4, ZERO_AT + 5.5), 97.0, ZERO_AT + 6, ("KILL", "FAIL", HUNG)),
    # pinned, but vLLM's own step limit has not passed yet: still generating as far as anyone can tell
    ((ZERO_AT + 1, ZERO_AT + 3), 100.0, ZERO_AT + 4, ("NO-KILL", "PASS", "B.generating")),
    # one pinned poll is not enough (a burst of other work on the host)
    ((ZERO_AT + 5.5,), 100.0, ZERO_AT + 6, ("NO-KILL", "UNKNOWN", SILENT)),
    # busy but not pinned: not the spin of a stuck step
    ((ZERO_AT + 2, ZERO_AT + 5.5), 50.0, ZERO_AT + 6, ("NO-KILL", "UNKNOWN", SILENT)),
])
def test_silent_engine_is_hung_only_with_its_gpus_pinned(pod1_polls: tuple, util: float | None, minute: float,
                                                         expected: tuple) -> None:
    job = _job(minute)
    if pod1_polls:
        _polls(job, "pod-1", pod1_polls, util)  # type: ignore[arg-type]
    assert _b(job, minute) == expected


def test_the_silent_engine_escalates_and_says_what_settles_it() -> None:
    job = _job(ZERO_AT + 6)
    v = job.judge(ZERO_AT + 6)
    assert v.escalate and v.gates.B.status == "UNKNOWN"
    assert "Running 3 at 0.0 tok/s" in v.gates.B.summary and "aborted" in v.gates.B.summary
    assert any("nvidia-smi" in s and "EngineDeadError" in s for s in v.next_steps)


def test_a_hung_engine_names_its_pinned_gpus() -> None:
    job = _job(ZERO_AT + 6)
    _polls(job, "pod-1", (ZERO_AT + 2, ZERO_AT + 5.5), 100.0)
    v = job.judge(ZERO_AT + 6)
    assert v.verdict == "KILL" and "B.engine_gpus_pinned" in v.gates.B.codes
    assert {"engine_throughput", "progress_stall", "gpu_poll"} <= set(v.gates.B.families)
    assert "went silent" in v.gates.B.summary and "pod-1" in v.gates.B.summary
    assert any(e.source == "gpu/pod-1" and "100%" in e.text for e in v.gates.B.evidence)


def test_another_engine_generating_on_the_same_host_explains_its_utilisation() -> None:
    """Both engines on pod-1: B's decoding keeps the host's GPUs busy, so they say nothing about A."""
    job = _job(ZERO_AT + 6, b_host="pod-1")
    _polls(job, "pod-1", (ZERO_AT + 2, ZERO_AT + 5.5), 100.0)
    assert _b(job, ZERO_AT + 6) == ("NO-KILL", "UNKNOWN", SILENT)


def test_a_colocated_host_is_not_the_engines_own() -> None:
    """Engine and trainer share pod-1 (role mixed): the trainer's step pins the GPUs while the engine sleeps."""
    job = _job(ZERO_AT + 6, policy_pods=("pod-0", "pod-1"))
    _polls(job, "pod-1", (ZERO_AT + 2, ZERO_AT + 5.5), 100.0)
    assert _b(job, ZERO_AT + 6) == ("NO-KILL", "UNKNOWN", SILENT)


def test_the_idle_engine_fed_again_generates() -> None:
    """Idle after aborts, then the next batch reaches it: stats again, nothing was wrong."""
    job = _job(ZERO_AT + 10)
    m = ZERO_AT + 8
    while m < ZERO_AT + 10:
        _line(job, m, A, "pod-1", 650.0, 4)
        m += 1 / 6
    assert _b(job, ZERO_AT + 10) == ("NO-KILL", "PASS", "B.generating")


@pytest.mark.parametrize(("waits", "minute", "expected"), [
    (2, ZERO_AT + 2.2, STALLED),   # within vLLM's step limit: the stall rule escalates
    (5, ZERO_AT + 5.2, STALLED),   # past it: the other engine generating says nothing more about this one's waits
    (12, ZERO_AT + 12.2, STALLED),  # 10 min behind the newest engine, yet no ghost: its own EngineCore still prints
    (21, ZERO_AT + 21.2, HUNG),    # one wait past engine_core_wait_hung_s, as for a job of one engine
])
def test_its_own_engine_core_waits_corroborate_the_silence(waits: int, minute: float, expected: str) -> None:
    """vLLM >= 0.11: its EngineCore prints the wait only while a call to its workers has not returned, which an
    engine idle after aborts does not make. The same limits as with one engine (tests/test_core_engine_stall.py):
    such waits have ended by themselves after up to 15 min; an engine whose EngineCore keeps printing is no
    respawned engine's ghost however long its stats are silent."""
    job = _job(minute)
    for k in range(waits):
        m = ZERO_AT + 50 / 60 + k
        job.events.append(LogBatch(job_id=job.job_id, event_time=at(m),
                                   lines=[WAIT.format(prefix=f"{A} (EngineCore_DP0 pid=4100)", ts=vllm_ts(at(m)))],
                                   source=Source(stream="logs/pod-1.log", host="pod-1")))
    v = job.judge(minute)
    assert v.gates.B.codes[0] == expected
    if expected == HUNG:
        assert v.verdict == "KILL" and "B.engine_core_waiting" in v.gates.B.codes


def test_the_silent_engine_is_dropped_as_a_ghost_after_ten_minutes() -> None:
    """Documents a limit (Context.engines_recent, engine_ghost_s): 10 min behind the newest engine the silent engine
    is no longer judged, so the escalation lasts from vLLM's step limit to then; GPU polls after it decide nothing."""
    job = _job(ZERO_AT + 11)
    assert _b(job, ZERO_AT + 11)[2] not in (SILENT, HUNG)


def test_an_engine_on_a_host_whose_name_extends_this_ones_is_not_its_neighbour() -> None:
    """B decodes on pod-10, A is stuck on pod-1 with its GPUs pinned: 'pod-1' is a prefix of 'pod-10' but not the
    same host, so B's lines explain nothing of pod-1's utilisation (before: unconfirmed, the hang escalated only)."""
    job = _job(ZERO_AT + 6, b_host="pod-10")
    _polls(job, "pod-1", (ZERO_AT + 2, ZERO_AT + 5.5), 100.0)
    assert _b(job, ZERO_AT + 6) == ("KILL", "FAIL", HUNG)


def test_a_qualified_name_is_the_same_host() -> None:
    job = _job(ZERO_AT + 6, b_host="pod-1.cluster.local")
    _polls(job, "pod-1", (ZERO_AT + 2, ZERO_AT + 5.5), 100.0)
    assert _b(job, ZERO_AT + 6) == ("NO-KILL", "UNKNOWN", SILENT)
