"""When the core may call a death or a hang: not seconds after a traceback, not on text times a replay
rebased, and earlier when a hang line follows the last step. Explicit clocks, no I/O."""

from __future__ import annotations

import pytest

from rlhealth.runtime import build_core
from rlhealth.schemas import LogBatch, Source
from tests.corekit import Job, at, c10_ts, loguru_ts

P = "(skyrl_entrypoint pid=3716, ip=10.0.3.95)"


@pytest.fixture(scope="module")
def core():
    return build_core()


def _crash(job: Job, minute: float, exc: str) -> None:
    t = at(minute)
    job.log(minute, [f"{P} {loguru_ts(t)} | ERROR    | skyrl_train.entrypoints.main_base:main:92 - Error executing job",
                     "Traceback (most recent call last):",
                     '  File "/app/skyrl_train/entrypoints/main_base.py", line 90, in main',
                     exc])


def test_seconds_after_a_fatal_traceback_it_is_not_yet_a_kill(core) -> None:
    job = Job(core).spec().states(0, 61, every=1)
    job.steps(0, 60)
    _crash(job, 60.5, "ValueError: micro batch size must divide the mini batch")
    early = job.judge(60.7)
    assert early.verdict == "NO-KILL" and early.escalate and early.gates.A.codes[0] == "A.fatal_traceback_no_progress"
    late = Job(core).spec().states(0, 75, every=1)
    late.steps(0, 60)
    _crash(late, 60.5, "ValueError: micro batch size must divide the mini batch")
    v = late.judge(75)
    assert v.verdict == "KILL" and "progress_stall" in v.gates.A.families


def test_a_transient_failure_with_retries_left_waits_for_the_retry(core) -> None:
    job = Job(core).spec(max_retries=2).states(0, 75, every=1)
    job.steps(0, 60)
    _crash(job, 60.5, "huggingface_hub.errors.HfHubHTTPError: 503 Server Error: Service Unavailable for url")
    v = job.judge(75)
    assert v.verdict == "NO-KILL" and v.escalate


def test_the_hub_refusing_a_download_is_transient_too(core) -> None:
    """'[Errno 111] Connection refused' from huggingface.co is the Hub flake the retry wrapper catches
    (hf_resolution), not a service of the job that nothing listens on (service_unreachable): before, that class
    won and the traceback with retries left was a KILL."""
    job = Job(core).spec(max_retries=2).states(0, 75, every=1)
    job.steps(0, 60)
    _crash(job, 60.5, "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): "
                      "Max retries exceeded with url: /api/models/Qwen/Qwen2.5-7B-Instruct/revision/main (Caused by "
                      "NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7f12>: Failed to establish "
                      "a new connection: [Errno 111] Connection refused'))")
    v = job.judge(75)
    assert v.verdict == "NO-KILL" and v.escalate


def test_an_unstamped_line_takes_the_shippers_time_not_an_older_text_stamp(core) -> None:
    """A replay rebases `ts` but not the text: the traceback body must not land months in the past."""
    state = core.new_state("job-1")
    old_text = "[rank0]:[E0214 02:07:08.412711032 ProcessGroupNCCL.cpp:1664] stamped line"
    lines = [old_text, "[PG 0 Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
                       "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600123 milliseconds "
                       "before timing out."]
    batch = LogBatch(job_id="job-1", event_time=at(30), lines=lines, source=Source(stream="logs/rank0.log"),
                     ts=[at(29), None])
    state, _ = core.step(state, batch, at(31))
    stat = state.signals["nccl_watchdog_timeout"]
    assert stat.last_ts == at(29).timestamp()


def test_a_hang_line_after_the_last_step_needs_only_a_late_trainer(core) -> None:
    job = Job(core).spec(expected_step_s=600).states(0, 100, every=1)
    job.steps(0, 60, step_min=10)
    t = at(75)
    job.log(75, [f"[rank0]:[E{c10_ts(t)} ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
                 f"timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
                 f"for 600021 milliseconds before timing out."])
    v = job.judge(77)  # 17 min after the last step: late (> 1.5 x 10 min), not yet stale (20 min)
    assert (v.verdict, v.job_status) == ("KILL", "WEDGED")


def test_an_exception_the_unraisable_hook_printed_is_not_a_fatal_traceback(core) -> None:
    """'Exception ignored in: ...' then a traceback (a finalizer, __del__, a weakref callback raised): Python
    discarded the exception and the process carried on (huggingface/open-r1#658's math_verify timeout)."""
    def run(header: list[str]):
        job = Job(core).spec().states(0, 75, every=1)
        job.steps(0, 60)
        job.log(60.5, header + ["Traceback (most recent call last):",
                                '  File "/usr/lib/python3.12/weakref.py", line 585, in __call__',
                                '    raise TimeoutError("Operation timed out!")',
                                "TimeoutError: Operation timed out!"])
        return job.judge(75)

    swallowed = run(["Exception ignored in: <finalize object at 0x7f7d7b9bc920; dead>"])
    assert "A.fatal_traceback_no_progress" not in swallowed.gates.A.codes
    assert "A.fatal_traceback" not in swallowed.gates.A.codes
    raised = run([])  # the same traceback, raised: the job's own death
    assert raised.gates.A.codes[0] in ("A.fatal_traceback_no_progress", "A.fatal_traceback")


@pytest.mark.parametrize("cut", [1, 2, 4])
def test_an_unraisable_traceback_cut_by_a_batch_boundary_is_still_not_fatal(core, cut: int) -> None:
    """The 'Exception ignored in:' line and its traceback in different batches (cut after the first line: the
    hook's line ends a batch; after the second or fourth: the header is carried to the exception line)."""
    lines = ["Exception ignored in: <finalize object at 0x7f7d7b9bc920; dead>", "Traceback (most recent call last):",
             '  File "/usr/lib/python3.12/weakref.py", line 585, in __call__',
             '    raise TimeoutError("Operation timed out!")', "TimeoutError: Operation timed out!"]
    job = Job(core).spec().states(0, 75, every=1)
    job.steps(0, 60)
    job.log(60.5, lines[:cut])
    job.log(60.6, lines[cut:])
    v = job.judge(75)
    assert "A.fatal_traceback_no_progress" not in v.gates.A.codes
    assert "A.fatal_traceback" not in v.gates.A.codes
    assert [(tb.exc_type, tb.swallowed, tb.fatal) for tb in job.last_state.tracebacks] == [("TimeoutError", True, False)]
    raised = Job(core).spec().states(0, 75, every=1)  # without the hook's line the same cut is the job's death
    raised.steps(0, 60)
    raised.log(60.5, lines[1:max(cut, 2)])
    raised.log(60.6, lines[max(cut, 2):])
    assert raised.judge(75).gates.A.codes[0] in ("A.fatal_traceback_no_progress", "A.fatal_traceback")


def test_a_late_trainer_is_alive_a_stale_one_without_a_signature_is_unknown(core) -> None:
    """Late (past 1.5 cadences, inside the staleness threshold): a long step, ALIVE. Stale with no hang signature:
    its logs are not fresh (not ALIVE) and nothing says it hangs (not WEDGED). Both NO-KILL and escalate."""
    job = Job(core).spec(expected_step_s=600).states(0, 140, every=1)
    job.steps(0, 60, step_min=10)
    late, stale = job.judge(77), job.judge(140)
    assert [(v.gates.A.codes, v.verdict, v.escalate) for v in (late, stale)] == \
        [(["A.trainer_stale_no_signature"], "NO-KILL", True)] * 2
    assert (late.job_status, stale.job_status) == ("ALIVE", "UNKNOWN")


def test_a_crash_right_after_a_swallowed_traceback_is_still_the_jobs_death(core) -> None:
    """Only a chained continuation ('During handling of the above exception ...') of a swallowed traceback is
    swallowed with it; a separate traceback a second later is the job's own."""
    swallowed = ["Exception ignored in: <function Pool.__del__ at 0x7f1c2a3b8ca0>", "Traceback (most recent call last):",
                 '  File "/usr/lib/python3.12/multiprocessing/pool.py", line 268, in __del__',
                 "TimeoutError: Operation timed out!"]
    crash = ["Traceback (most recent call last):", '  File "/app/train.py", line 90, in main',
             "RuntimeError: CUDA error: an illegal memory access was encountered"]
    chained = ["", "During handling of the above exception, another exception occurred:", "",
               "Traceback (most recent call last):", '  File "/usr/lib/python3.12/weakref.py", line 585, in __call__',
               "KeyError: 'x'"]
    job = Job(core).spec().states(0, 75, every=1)
    job.steps(0, 60)
    job.log(60.5, swallowed + crash)
    job.judge(75)
    assert [(tb.exc_type, tb.swallowed, tb.fatal) for tb in job.last_state.tracebacks][-1] == ("RuntimeError", False, True)
    job2 = Job(core).spec().states(0, 75, every=1)
    job2.steps(0, 60)
    job2.log(60.5, swallowed + chained)
    v = job2.judge(75)
    assert all(tb.swallowed and not tb.fatal for tb in job2.last_state.tracebacks)
    assert "A.fatal_traceback_no_progress" not in v.gates.A.codes
