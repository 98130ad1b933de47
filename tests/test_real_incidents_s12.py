"""Session 12's incidents, judged from captures built around real pastes (tests/scenarios/*, built by
make_incident_scenarios_s12.py; each expected.json names its `sources`). The verdict each test wants is what the
thread says happened, decided before the capture was probed; where the core cannot reach it today the test is
xfail(strict=True) naming the core decision in the way. Assertions are on reason codes, evidence families,
gate statuses and verdict fields, not on wording."""

from __future__ import annotations

from rlhealth.agents.failures import failure_class_of, is_consequence
from rlhealth.runtime import build_core
from tests.corekit import Job, at
from tests.incident_support import excerpt, families, judged, kinds_of, signals_of

# ---------------------------------------------------------------- sgl-project/sglang#7553


def test_sglang_watchdog_line_is_a_hang_with_its_timeout() -> None:
    lines = excerpt("sglang-7553_decode_hang_watchdog")
    assert signals_of(lines[2])["engine_watchdog_timeout"]["timeout_s"] == 300
    assert not kinds_of(lines[1]) & {"death", "hang", "wedge"}  # py-spy missing is not itself a fault


def test_sglang_server_that_declared_its_decode_hung_is_a_wedge_kill() -> None:
    """Decode batches every ~12 s stop at 07:20:31; 300 s later DP4 TP4's watchdog fires; captured 39 s after.
    The trainer is still inside its ~12 min cycle, so the evidence is the engine's: its watchdog (hang_log)
    and no progress since the stall the watchdog dates (progress_stall). WEDGED, KILL, culprit the server."""
    v = judged("sglang_dp_attention_decode_hang_watchdog")
    assert (v.verdict, v.job_status, v.gates.A.status) == ("KILL", "WEDGED", "FAIL")
    assert v.gates.A.codes[0] == "A.wedged_failing_tail"
    assert {"hang_log", "progress_stall"} <= set(v.gates.A.families)
    assert v.culprit is not None and v.culprit.role == "engine"


# ---------------------------------------------------------------- verl-project/verl#4921


def test_verl_worker_death_in_sleep_on_a_failed_slurm_leg_is_terminal() -> None:
    """sacct says FAILED: nothing to kill; the root cause is the driver's ActorDiedError (SYSTEM_ERROR)."""
    v = judged("verl_actor_died_in_sleep_slurm_terminal")
    assert (v.verdict, v.job_status, v.gates.A.codes) == ("NO-KILL", "TERMINAL", ["A.terminal"])
    assert v.root_cause is not None and "ActorDiedError" in (v.root_cause.exc_type or "")
    assert v.restarts.same_failure is not True


# ---------------------------------------------------------------- scaleapi/vero#51 (+ #58)


def test_modal_messages_are_sandbox_errors() -> None:
    """The census's texts: the two Modal not-found messages and the image materialisation failure are
    sandbox infrastructure; AddTestsDirError's own message names nothing (its class does)."""
    lines = excerpt("vero-58_modal_trial_exceptions")
    for line in (lines[0].replace("ta-…", "ta-01K0R3Q8ZP4MN2V7XJ5B6C9DEFG"), lines[1], lines[3]):
        assert "sandbox_error" in signals_of(line), line
        assert "infra" in kinds_of(line)  # 'NotFoundError: ...' is also a Python exception line


def test_every_trial_lost_to_modal_is_an_infra_kill() -> None:
    """24/24 trials end in NotFoundError / RuntimeError / AddTestsDirError, each message naming the sandbox or
    its image; no verifier ever scored: Gate C infrastructure, KILL, next steps about the sandbox."""
    v = judged("modal_sandbox_outage_every_trial")
    assert (v.verdict, v.gates.C.status, v.gates.C.codes[0]) == ("KILL", "FAIL", "C.infra_failures")
    assert v.gates.A.status == "PASS"
    assert any("sandbox" in s.lower() for s in v.next_steps)


# ---------------------------------------------------------------- ray-project/kuberay#4287


def test_kuberay_head_oomkilled_every_restart_is_a_kill() -> None:
    """The head is OOMKilled 9 s after each start (restartCount 6, CrashLoopBackOff); nothing ever ran."""
    v = judged("kuberay_head_oomkilled_crashloop")
    assert (v.verdict, v.job_status) == ("KILL", "WEDGED")
    assert v.gates.B.status == "FAIL" and "B.oom_pod" in v.gates.B.codes
    assert {"scheduler_state", "progress_stall"} <= families(v)


# ---------------------------------------------------------------- verl-project/verl#472 (+ #719)


def test_thread_creation_eagain_is_a_thread_limit_death() -> None:
    lines = excerpt("verl-472_thread_limit_actor_never_ran")
    assert "thread_exhausted" in signals_of(lines[7])
    assert kinds_of(lines[7]) == {"death"}
    assert failure_class_of(lines[7]) == "thread_limit"
    assert not kinds_of(lines[8])  # the worker's 'Stack trace:' header


def test_ray_task_error_wrapping_an_actor_death_is_a_consequence() -> None:
    assert is_consequence("ray.exceptions.RayTaskError(ActorDiedError)", "ray::main_task() (pid=26626, ip=10.0.0.1)")
    assert not is_consequence("ray.exceptions.RayTaskError(ValueError)", "ray::main_task() (pid=26626)")


def test_workers_that_could_not_create_threads_name_the_root_cause() -> None:
    """The driver's traceback only reports an actor death (Ray guesses OOM, ray stop or SIGSEGV); the worker's
    own 'thread: Resource temporarily unavailable [system:11]' line says why: the root cause and the next steps
    name the thread limit."""
    v = judged("verl_thread_limit_workers_never_ran_terminal")
    assert (v.verdict, v.job_status) == ("NO-KILL", "TERMINAL")
    assert v.root_cause is not None and v.root_cause.origin == "signal_line"
    assert v.root_cause.failure_class == "thread_limit"
    assert "Resource temporarily unavailable" in v.root_cause.message
    assert any("ulimit" in s for s in v.next_steps)
    assert not any("Host OOM" in s for s in v.next_steps)


_ACTOR_DIED_TB = [
    "Traceback (most recent call last):",
    '  File "/app/verl/trainer/main_ppo.py", line 33, in run_ppo',
    "    ray.get(main_task.remote(config))",
    "ray.exceptions.RayTaskError(ActorDiedError): ray::main_task() (pid=26626, ip=10.0.0.1)",
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
]


def _failed_job(extra: list[str]) -> Job:
    job = Job(build_core()).spec().states(0, 10).state(12, state="failed", pods=0)
    job.log(10.5, _ACTOR_DIED_TB + extra)
    return job


def test_a_consequence_traceback_is_explained_by_a_thread_limit_line_of_its_attempt() -> None:
    """Core kit: the same RayTaskError(ActorDiedError), with and without the dying worker's EAGAIN line."""
    eagain = (f"(WorkerDict pid=27497) [{at(10.5):%Y-%m-%d %H:%M:%S},014 E 27497 27497] logging.cc:113: Unhandled "
              "exception: N5boost10wrapexceptINS_6system12system_errorEEE. what(): thread: Resource temporarily "
              "unavailable [system:11]")
    with_line = _failed_job([eagain]).judge(14)
    assert with_line.root_cause is not None and with_line.root_cause.origin == "signal_line"
    assert with_line.root_cause.failure_class == "thread_limit"
    alone = _failed_job([]).judge(14)
    assert alone.root_cause is not None and alone.root_cause.origin == "traceback"
    assert "ActorDiedError" in (alone.root_cause.exc_type or "")


# ---------------------------------------------------------------- huggingface/open-r1#239


def test_grpo_loss_of_zero_is_not_a_fault_line() -> None:
    for line in excerpt("open-r1-239_grpo_loss_zero_rewards_rising"):
        assert not kinds_of(line) & {"death", "hang", "wedge", "oom"}


def test_grpo_logging_zero_loss_while_rewards_move_is_healthy() -> None:
    """'loss': 0.0 on every step is GRPO's beta x KL at the start (the thread: 'completely normal'); the trainer
    steps every ~52 s: NO-KILL, ALIVE, nothing failed, nothing to escalate."""
    v = judged("grpo_loss_zero_rewards_rising_healthy")
    assert (v.verdict, v.job_status, v.escalate) == ("NO-KILL", "ALIVE", False)
    assert v.gates.A.codes == ["A.alive"]
    assert all(g.status != "FAIL" for g in (v.gates.A, v.gates.B, v.gates.C))
