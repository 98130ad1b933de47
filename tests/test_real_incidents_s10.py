"""Session 10's incidents, judged from captures built around real pastes (tests/scenarios/*, built by
make_incident_scenarios.py; each expected.json names its `sources`). The verdict each test wants is what the
thread says happened, decided before the capture was probed; where the core cannot reach it today the test is
xfail(strict=True) naming the core decision in the way. Assertions are on reason codes, evidence families,
gate statuses and verdict fields, not on wording."""

from __future__ import annotations

from tests.incident_support import classifier, excerpt, families, judged, signals_of

# ---------------------------------------------------------------- NovaSky-AI/SkyRL#24


def test_skyrl_watchdog_lines_are_read_as_a_hang_and_a_worker_death() -> None:
    """The rule packs' half of SkyRL#24: the Ray-prefixed watchdog line is a collective timeout (7200 s ALLREDUCE),
    the 'watchdog thread terminated' line and the raylet's SYSTEM_ERROR line are recognised too."""
    lines = excerpt("SkyRL-24_rollout_wait_then_allreduce_watchdog")
    wd = signals_of(lines[8])
    assert wd["nccl_watchdog_timeout"]["op_type"] == "ALLREDUCE"
    assert wd["nccl_watchdog_timeout"]["ran_ms"] == 7200095
    assert "nccl_watchdog_terminated" in wd
    assert any(m.rule.kind == "death" for m in classifier().scan([lines[11]]))


def test_skyrl_policy_rank_hung_two_hours_while_rollouts_trickled_is_a_wedge_kill() -> None:
    """SkyRL#24: ~1 h of steps, rollouts trickle until 22:03, then a 7200 s ALLREDUCE watchdog and a worker death
    with the Ray job still running: WEDGED on hang + stall (+ death), KILL. The step lines carry no time: they
    borrow the watchdog's, which the 2 h the collective ran rules out as proof of a step."""
    v = judged("skyrl_rollout_allreduce_watchdog")
    assert (v.verdict, v.job_status, v.gates.A.status) == ("KILL", "WEDGED", "FAIL")
    assert {"hang_log", "progress_stall"} <= set(v.gates.A.families)
    assert "A.progress_time_before_stuck_collective" in v.gates.A.codes


# ---------------------------------------------------------------- huggingface/open-r1#658


def test_openr1_watchdog_line_carries_how_long_the_collective_hung() -> None:
    """The rule pack extracts what a careful reader takes from the line: the collective ran 1800076 ms."""
    lines = excerpt("open-r1-658_verify_timeout_then_allgather_watchdog")
    f = signals_of(lines[9])["nccl_watchdog_timeout"]
    assert (f["op_type"], f["timeout_ms"], f["ran_ms"]) == ("_ALLGATHER_BASE", 1800000, 1800076)


def test_openr1_allgather_timeout_after_thirty_silent_minutes_is_a_wedge_kill() -> None:
    v = judged("openr1_allgather_watchdog_after_verify_timeout")
    assert (v.verdict, v.job_status, v.gates.A.status) == ("KILL", "WEDGED", "FAIL")
    assert {"hang_log", "progress_stall"} <= set(v.gates.A.families)
    assert "A.progress_time_before_stuck_collective" in v.gates.A.codes


def test_openr1_swallowed_math_verify_timeout_is_not_the_root_cause() -> None:
    """Python printed the math_verify TimeoutError under 'Exception ignored in: <finalize object ...>': it was
    swallowed, so it must not be the fatal traceback Gate A names."""
    v = judged("openr1_allgather_watchdog_after_verify_timeout")
    assert "A.fatal_traceback_no_progress" not in v.gates.A.codes
    assert v.root_cause is None or v.root_cause.exc_type != "TimeoutError"


# ---------------------------------------------------------------- huggingface/open-r1#690 + modelscope/ms-swift#4906


def test_swift_weight_sync_store_timeout_is_terminal_and_names_the_store_error() -> None:
    """The trainer died in update_named_param's barrier ('DistStoreError: wait timeout after 300000ms') and the pod
    is gone: nothing to kill, Gate A TERMINAL with that root cause on the trainer."""
    v = judged("swift_weight_sync_store_timeout_terminal")
    assert (v.verdict, v.job_status, v.gates.A.status) == ("NO-KILL", "TERMINAL", "FAIL")
    assert v.gates.A.codes == ["A.terminal"]
    assert "DistStoreError" in v.reasoning
    assert v.culprit is not None and v.culprit.role == "trainer"
    assert v.gates.B.status != "FAIL" and v.gates.C.status != "FAIL"


# ---------------------------------------------------------------- instructlab/instructlab#2092


def test_vllm_still_loading_while_the_client_polls_is_not_a_fault() -> None:
    """Two minutes in, TP=8 workers load weights and the controlling process prints 'Waiting for the vLLM server to
    start ... Attempt: 9/100': a bring-up, not a failure."""
    v = judged("vllm_slow_startup_client_waiting")
    assert (v.verdict, v.job_status) == ("NO-KILL", "ALIVE")
    assert all(g.status != "FAIL" for g in (v.gates.A, v.gates.B, v.gates.C))
    assert families(v) == set()
    assert v.restarts.same_failure is not True


# ---------------------------------------------------------------- THUDM/slime#1487


def test_slime_progress_lines_are_trainer_steps() -> None:
    lines = excerpt("slime-1487_actor_train_start_then_pings")
    assert signals_of(lines[1])["trainer_step"]["step"] == 9
    assert signals_of(lines[2])["timer_start"]["name"] == "actor_train"
    assert not {"trainer_step", "trainer_metrics", "timer_start"} & set(signals_of(lines[3]))


def test_slime_hours_of_metrics_pings_after_actor_train_escalate_without_kill() -> None:
    """slime#1487: after 'Timer actor_train start' only the engines' /metrics scrape for 3 h, no signature, no GPU
    view. The stall is one family: NO-KILL and escalate, never a KILL on silence alone."""
    v = judged("slime_silent_hang_after_actor_train")
    assert (v.verdict, v.escalate) == ("NO-KILL", True)
    assert v.gates.A.codes == ["A.trainer_stale_no_signature"]
    assert v.gates.A.status != "FAIL" and v.gates.A.families == []


def test_slime_trainer_silent_ten_cadences_is_not_reported_alive() -> None:
    """Stale logs are not ALIVE and no signature is not WEDGED: the status is UNKNOWN."""
    v = judged("slime_silent_hang_after_actor_train")
    assert v.job_status == "UNKNOWN"
