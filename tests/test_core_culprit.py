"""When ranks disagree, the verdict names the likely culprit (issue #10, item 4). Explicit clocks, no I/O."""

from __future__ import annotations

import pytest

from rlhealth.runtime import build_core
from tests.corekit import Job, at, c10_ts


@pytest.fixture(scope="module")
def core():
    return build_core()


def _watchdog(minute: float, rank: int, completed: int) -> str:
    t = at(minute)
    return (f"[rank{rank}]:[E{c10_ts(t)} ProcessGroupNCCL.cpp:1664] [PG 1 Rank {rank}] Exception (either an error or "
            f"timeout) detected by watchdog at work: 1580, last enqueued NCCL work: 1582, last completed NCCL "
            f"work: {completed}.")


def _hung_job(core) -> Job:
    job = Job(core).spec(expected_step_s=600).states(0, 120, every=5)
    job.steps(0, 60, step_min=10)  # steps every 10 min until minute 60, then nothing
    return job


def test_lowest_last_completed_collective_names_the_straggler_rank(core) -> None:
    job = _hung_job(core)
    for rank, completed in ((0, 1579), (1, 1579), (2, 1571), (3, 1579)):
        job.log(95, [_watchdog(95, rank, completed)], stream=f"logs/rank{rank}.log")
    v = job.judge(120)
    assert (v.verdict, v.job_status) == ("KILL", "WEDGED")
    assert v.culprit is not None and (v.culprit.component, v.culprit.why) == ("rank 2", ["straggler_rank"])


def test_equal_progress_on_every_rank_names_no_straggler(core) -> None:
    job = _hung_job(core)
    for rank in range(4):
        job.log(95, [_watchdog(95, rank, 1579)], stream=f"logs/rank{rank}.log")
    v = job.judge(120)
    assert v.job_status == "WEDGED" and v.culprit is not None and "straggler_rank" not in v.culprit.why


def test_the_one_rank_silent_while_the_others_time_out_is_named(core) -> None:
    job = _hung_job(core)
    job.log(61, ["step 7 forward done"], stream="logs/rank3.log")  # rank 3 goes quiet first, logs no hang
    for rank in range(3):
        job.log(70, [f"noise {rank}"], stream=f"logs/rank{rank}.log")
        job.log(95, [_watchdog(95, rank, 1579)], stream=f"logs/rank{rank}.log")
    v = job.judge(120)
    assert v.job_status == "WEDGED"
    assert v.culprit is not None and (v.culprit.component, v.culprit.why) == ("logs/rank3.log", ["silent_rank"])


def test_the_traceback_unlike_the_rest_is_the_root_cause(core) -> None:
    job = Job(core).spec().states(0, 60, every=5, state="failed", pods=0)
    for rank in range(3):
        job.log(30, [f"{c10_ts(at(30))} Traceback (most recent call last):",
                     '  File "/app/train.py", line 10, in <module>',
                     "torch.distributed.DistStoreError: wait timeout after 600000ms, keys: /barrier"],
                stream=f"logs/rank{rank}.log")
    job.log(29, [f"{c10_ts(at(29))} Traceback (most recent call last):",
                 '  File "/app/model.py", line 88, in forward',
                 "RuntimeError: CUDA error: an illegal memory access was encountered"], stream="logs/rank3.log")
    v = job.judge(60)
    assert v.job_status == "TERMINAL"
    assert v.culprit is not None and v.culprit.why == ["causal_exception"] and v.culprit.component == "logs/rank3.log"
    assert "illegal memory access" in v.reasoning.split("Root cause:")[1][:120]


def test_a_side_process_dying_at_the_end_of_its_log_is_not_a_wedge_while_training_steps(core) -> None:
    from tests.corekit import healthy

    job = healthy(Job(core))
    job.log(50, ["(raylet) A worker died or was killed while executing a task by an unexpected system error. "
                 "To troubleshoot the problem, check the logs for the dead worker. Worker exit type: SYSTEM_ERROR "
                 "Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file."],
            stream="logs/ray/raylet.out")
    v = job.judge(121)
    assert v.verdict == "NO-KILL" and v.gates.A.status == "PASS"
