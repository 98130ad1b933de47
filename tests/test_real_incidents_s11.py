"""Session 11's incidents, judged from captures built around real pastes (tests/scenarios/*, built by
make_incident_scenarios.py; each expected.json names its `sources`). The verdict each test wants is what the
thread says happened, decided before the capture was probed; where the core cannot reach it today the test is
xfail(strict=True) naming the core decision in the way. Assertions are on reason codes, evidence families,
gate statuses and verdict fields, not on wording."""

from __future__ import annotations

from rlhealth.agents.failures import failure_class_of
from rlhealth.agents.normalize import peel_prefixes
from rlhealth.agents.roles import engine_core_of_line, engine_core_of_stats
from rlhealth.runtime import build_core
from tests.corekit import Job
from tests.incident_support import excerpt, families, judged, kinds_of, signals_of

# ---------------------------------------------------------------- OpenRLHF/OpenRLHF#911


def test_ray_memory_monitor_notice_is_a_host_oom_line() -> None:
    """The rule packs' half of OpenRLHF#911: `ray job submit` kept only the tail of Ray's OOM kill message, the
    'Refer to the documentation on how to address the out of memory issue: ...ray-oom-prevention.html' paragraph.
    Ray prints it only after a memory-monitor kill, so it is the host-OOM signal; the status line is a child exit."""
    lines = excerpt("OpenRLHF-911_ray_oom_job_failed")
    assert "ray_memory_kill" in signals_of(lines[4])
    assert kinds_of(lines[4]) == {"oom"}
    assert signals_of(lines[1])["child_failed"]["exitcode"] == 1
    assert signals_of(lines[6])["trainer_step"]["step"] == 11
    assert not kinds_of(lines[2]) and not kinds_of(lines[5])  # the top-memory table row and the blank prefix line


def test_ray_out_of_memory_text_is_a_host_oom_failure_class() -> None:
    """Ray names its node-RAM kill OutOfMemoryError / 'out of memory issue': the class is host_oom, not cuda_oom."""
    assert failure_class_of("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on "
                            "memory.") == "host_oom"
    assert failure_class_of(excerpt("OpenRLHF-911_ray_oom_job_failed")[4]) == "host_oom"
    assert failure_class_of("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB") == "cuda_oom"


def test_openrlhf_job_killed_by_ray_oom_is_terminal_with_the_oom_as_root_cause() -> None:
    """The scheduler's error is only 'Job entrypoint command failed with exit code 1'; the OOM kill logged in the
    same attempt is what it stands for: TERMINAL, nothing to kill, root cause the Ray memory kill (host OOM)."""
    v = judged("openrlhf_ray_oom_terminal")
    assert (v.verdict, v.job_status, v.gates.A.status) == ("NO-KILL", "TERMINAL", "FAIL")
    assert v.gates.A.codes == ["A.terminal"]
    assert v.root_cause is not None and v.root_cause.origin == "signal_line"
    assert v.gates.B.status == "FAIL" and "oom_log" in v.gates.B.families
    assert v.restarts.same_failure is not True
    assert any("Host OOM" in s for s in v.next_steps)
    assert not any("CUDA OOM" in s for s in v.next_steps)


# ---------------------------------------------------------------- verl-project/verl#7180


def test_verl_silent_rollout_hang_with_an_idle_resident_gpu_is_a_wedge_kill() -> None:
    """verl#7180: no error, the trainer silent for half an hour against a ~95 s cadence, the colocated GPU holding
    18.5 GB at 0 % / 18 W on every poll since: two families (stall + idle resident GPU), WEDGED, KILL."""
    v = judged("verl_rollout_hang_gpu_idle_resident")
    assert (v.verdict, v.job_status, v.gates.A.status) == ("KILL", "WEDGED", "FAIL")
    assert {"progress_stall", "gpu_poll"} <= set(v.gates.A.families)
    assert v.culprit is not None and v.culprit.role == "trainer"


# ---------------------------------------------------------------- verl-project/verl#12


def test_verl_last_vllm_metrics_line_is_engine_stats() -> None:
    f = signals_of(excerpt("verl-12_last_vllm_stats_before_hang")[0])["vllm_stats"]
    assert (f["generation_tokens_per_s"], f["running"]) == (103.0, 2)


def test_verl_first_rollout_silent_46_minutes_escalates_without_kill() -> None:
    """verl#12: stuck in the first rollout, no error, no GPU view; the last output is a vLLM line with 2 requests
    running. One family at most: NO-KILL and escalate, and 46 min of silence is not reported ALIVE."""
    v = judged("verl_vllm_rollout_silent_escalate")
    assert (v.verdict, v.escalate, v.job_status) == ("NO-KILL", True, "UNKNOWN")
    assert v.gates.A.codes == ["A.no_progress_logs_stale"]
    assert all(g.status != "FAIL" for g in (v.gates.A, v.gates.B, v.gates.C))
    assert families(v) == set()



def test_running_pods_whose_only_logs_are_an_hour_old_are_not_reported_alive() -> None:
    """The general rule behind verl#12 (core kit): no progress line ever and nothing logged for an hour while the
    scheduler says running. Stale logs are not ALIVE and no signature is not WEDGED: UNKNOWN, escalate, NO-KILL."""
    job = Job(build_core()).spec().states(0, 70)
    job.log(5, ["(WorkerDict pid=29311) Before building vllm rollout, memory allocated (GB): 15.27"])
    v = job.judge(70)
    assert (v.verdict, v.job_status, v.escalate) == ("NO-KILL", "UNKNOWN", True)
    assert v.gates.A.codes == ["A.no_progress_logs_stale"]

# ---------------------------------------------------------------- kohya-ss/sd-scripts#1925


def test_barrier_best_guess_warning_is_not_a_hang_signature() -> None:
    """'... This can potentially cause a hang if this rank to GPU mapping is incorrect.' is a hint, not a hang."""
    assert not kinds_of(excerpt("sd-scripts-1925_barrier_best_guess_gpu")[0]) & {"hang", "death", "fatal", "oom"}


def test_grpo_with_the_barrier_warning_is_not_killed_or_failed() -> None:
    """The thread's verdict on the warning: harmless. The job steps every ~60 s: NO-KILL, ALIVE, no gate fails."""
    v = judged("grpo_barrier_guess_warning_healthy")
    assert (v.verdict, v.job_status) == ("NO-KILL", "ALIVE")
    assert all(g.status != "FAIL" for g in (v.gates.A, v.gates.B, v.gates.C))
    assert families(v) == set()


def test_grpo_with_the_barrier_warning_is_not_escalated() -> None:
    """Healthy means nothing to escalate and the trainer read as stepping: its unstamped tqdm bars are dated by
    their own elapsed clock past the start-up stamp they borrow (agents/bar_clock.py)."""
    v = judged("grpo_barrier_guess_warning_healthy")
    assert v.escalate is False
    assert v.gates.A.status == "PASS"
    assert v.gates.A.codes == ["A.alive"]


# ---------------------------------------------------------------- vllm-project/vllm#48752


def test_vllm_zero_throughput_then_shm_waits_classify() -> None:
    lines = excerpt("vllm-48752_zero_throughput_then_shm_wait")
    f = signals_of(lines[3])["vllm_stats"]
    assert (f["generation_tokens_per_s"], f["running"]) == (0.0, 3)
    assert "benign_shm_wait" in signals_of(lines[4])
    assert not kinds_of(lines[0]) & {"hang", "death", "fatal"}  # a Triton JIT warning is a latency spike
    # the APIServer's stats line and the EngineCore's wait name the same engine; the TP worker's line names none
    stats_prefixes, wait_prefixes = peel_prefixes(lines[3])[0], peel_prefixes(lines[4])[0]
    key = engine_core_of_stats(stats_prefixes, f["engine"], "logs/pod_rank0.log")
    assert key and engine_core_of_line(wait_prefixes, "logs/pod_rank0.log") == key
    assert engine_core_of_line(peel_prefixes(lines[0])[0], "logs/pod_rank0.log") == ""


def test_vllm_engine_stuck_at_zero_with_requests_in_flight_escalates_before_vllms_step_limit() -> None:
    """vllm#48752: 'Running: 3 reqs' at 0.0 tokens/s, then only its EngineCore's shm_broadcast waits for 4 min; the
    thread ends in a TP worker hang and 'RPC call to sample_tokens timed out'. Captured before vLLM's own 300 s step
    limit, and such stalls have also ended by themselves (MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#128): Gate B
    names the stall and escalates, it does not read the engine as generating."""
    v = judged("vllm_engine_zero_throughput_running_wedge")
    assert (v.verdict, v.escalate, v.gates.B.status) == ("NO-KILL", True, "UNKNOWN")
    assert v.gates.B.codes[0] == "B.engine_stalled_on_workers" and "4 min in one wait" in v.gates.B.summary

