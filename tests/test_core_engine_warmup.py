"""Gate B: engine GPUs resident at 0 % with no stats line are an engine still warming up (weights loading, kernels
JIT-compiling, CUDA graphs capturing: the `engine_warmup` signal) rather than an engine that should be generating,
while its warm-up lines are recent and no engine said it was ready since.

Real shapes: sgl-project/sglang#15891 (DeepGEMM's JIT pre-compile session, 'typically 10-20 mins'; the scenario
sglang_deepgemm_precompile_long_bringup), sgl-project/sglang#11716 (SGLang's 'Capturing batches' bar),
vllm-project/vllm#25848 (96 safetensors shards at ~4.8 s each).
"""

from __future__ import annotations

import pytest

from rlhealth.runtime import build_core
from rlhealth.schemas import LogBatch
from rlhealth.schemas.common import Source
from tests.corekit import Job, at, vllm_ts

WARMING, IDLE = "B.engines_warming_up", "B.engine_gpus_idle_no_stats"
LINES = {
    "sglang_deepgemm": "DeepGEMM warmup:  42%|█████████████                  | 6936/16384 [01:55<02:37, 59.95it/s]",
    "sglang_graphs": "Capturing batches (bs=216 avail_mem=10.30 GB):  40%|████      | 21/52 [00:03<00:04,  7.40it/s]",
    "vllm_shards": "Loading safetensors checkpoint shards:  61% Completed | 59/96 [04:27<02:55,  4.76s/it]",
}


def _job(warmup_until: float, line: str = LINES["sglang_deepgemm"]) -> Job:
    """An engine pod resident at 0 % from minute 5 (polls every 2 min); its server prints warm-up lines every
    30 s from minute 6 until `warmup_until`, each after a stamped line (the bars themselves carry no stamp)."""
    job = Job(build_core()).spec(geometry={"num_inference_engines": 1, "engine_tp": 8, "engine_pods": ["pod-1"],
                                           "policy_pods": ["pod-0"]})
    job.states(0, 60)
    for m in range(6, 60, 2):
        job.gpu(m, "pod-1", 0.0)
    m = 6.0
    while m <= warmup_until:
        job.log(m, [f"[{at(m):%Y-%m-%d %H:%M:%S} DP0 TP0 EP0] Memory pool end. avail mem=17.17 GB", line],
                stream="logs/sglang-server-0.log")
        m += 0.5
    return job


def _b(job: Job, minute: float) -> tuple[str, str, bool]:
    v = job.judge(minute)
    return v.gates.B.codes[0], v.verdict, v.escalate


@pytest.mark.parametrize("kind", sorted(LINES))
def test_recent_warmup_lines_explain_resident_idle_gpus(kind: str) -> None:
    assert _b(_job(40, LINES[kind]), 41) == (WARMING, "NO-KILL", False)


def test_warmup_lines_that_stopped_no_longer_explain_them() -> None:
    """Ten minutes after the last warm-up line and still no stats: engines loaded but not generating? Escalate."""
    job = _job(25)
    assert [_b(job, m)[0] for m in (34, 36)] == [WARMING, IDLE]
    assert _b(job, 36)[2]


def test_an_engine_ready_after_its_warmup_leaves_the_idle_gpus_unexplained() -> None:
    job = _job(40)
    job.log(40.5, [f"INFO {vllm_ts(at(40.5))} [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000"],
            stream="logs/sglang-server-0.log")
    assert _b(job, 41)[0] == IDLE


def test_without_warmup_lines_resident_idle_gpus_escalate() -> None:
    job = _job(0)  # no warm-up line at all
    assert _b(job, 41)[0] == IDLE


def _two_pods(warm_host: str) -> Job:
    """pod-1 resident at 0 % from minute 6 and polled; the engine on `warm_host` prints a weight-loading bar every
    30 s from minute 20 and never says it is ready; pod-1's engine said it was ready at minute 8."""
    job = Job(build_core()).spec(geometry={"num_inference_engines": 2, "engine_tp": 8,
                                           "engine_pods": ["pod-1", "pod-2"], "policy_pods": ["pod-0"]})
    job.states(0, 60)
    job.events.append(LogBatch(job_id=job.job_id, event_time=at(8), source=Source(stream="logs/pod-1.log", host="pod-1"),
                               lines=[f"INFO {vllm_ts(at(8))} [api_server.py:1880] Starting vLLM API server 0 on "
                                      "http://0.0.0.0:8000"]))
    for m in range(6, 60, 2):
        job.gpu(m, "pod-1", 0.0)
    m = 20.0
    while m < 60:
        job.events.append(LogBatch(job_id=job.job_id, event_time=at(m),
                                   source=Source(stream=f"logs/{warm_host}.log", host=warm_host),
                                   lines=[f"INFO {vllm_ts(at(m))} [gpu_model_runner.py:1] Starting to load model",
                                          LINES["vllm_shards"]]))
        m += 0.5
    return job


def test_another_engines_warmup_does_not_explain_an_idle_engine_that_was_ready() -> None:
    """pod-2's replacement engine loads its weights for 40 min; pod-1's engine was ready at minute 8 and has sat
    idle since: that still escalates (before: 'warming up' for as long as pod-2 kept loading, no escalation)."""
    assert _b(_two_pods("pod-2"), 50) == (IDLE, "NO-KILL", True)


def test_its_own_warmup_after_its_ready_line_explains_it() -> None:
    """pod-1's own engine restarted and loads its weights again: bring-up, as with one engine."""
    assert _b(_two_pods("pod-1"), 50) == (WARMING, "NO-KILL", False)
