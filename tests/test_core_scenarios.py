"""The health core's verdict rules, one scenario per check of the deep probe, each with an explicit clock."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from rlhealth.runtime import build_core
from rlhealth.schemas import PodStatus
from tests.corekit import Job, at, c10_ts, healthy, loguru_ts

P = "(skyrl_entrypoint pid=3716, ip=10.0.3.95)"
POLICY = "(FSDPPolicyWorkerBase pid=5834, ip=10.0.3.95)"


@pytest.fixture(scope="module")
def core():
    return build_core()


def text_of(v) -> str:
    return "\n".join([v.reasoning, v.gates.A.summary, v.gates.B.summary, v.gates.C.summary]
                     + [e.text for e in v.evidence])


def oom_traceback(t, pod: str) -> list[str]:
    pre = f"[pod/{pod}/task] {t.strftime('%Y-%m-%dT%H:%M:%S')}.000000000Z "
    return [pre + "Error executing job with overrides: ['trainer.policy.model.path=Qwen/Qwen3-32B']",
            pre + "Traceback (most recent call last):",
            pre + '  File "/app/skyrl_train/entrypoints/main_base.py", line 300, in main',
            pre + "    ray.get(skyrl_entrypoint.remote(cfg))",
            pre + "ray.exceptions.RayTaskError(OutOfMemoryError): ray::FSDPPolicyWorkerBase.ppo_train() (pid=6293, ip=10.0.9.118)",
            pre + '  File "/app/skyrl_train/workers/worker.py", line 700, in ppo_train',
            pre + "    loss.backward()",
            pre + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.52 GiB. GPU 3 has a total capacity of "
                  "79.19 GiB of which 3180.06 MiB is free."]


# ---------------------------------------------------------------------------------------------- Gate A


def test_healthy_job_passes_every_gate(core) -> None:
    v = healthy(Job(core)).judge(121)
    assert (v.verdict, v.job_status, v.confidence) == ("NO-KILL", "ALIVE", "high")
    assert [v.gates.A.status, v.gates.B.status, v.gates.C.status] == ["PASS", "PASS", "PASS"]
    assert re.search(r"tok/s", v.gates.B.summary) and "reward" in v.gates.C.summary


def test_no_data_is_never_healthy(core) -> None:
    v = Job(core).spec().judge(60)
    assert v.verdict == "NO-KILL" and v.job_status == "UNKNOWN" and v.escalate
    assert v.gates.A.status == "UNKNOWN"


def test_pending_job_is_not_judged(core) -> None:
    v = Job(core).spec().states(0, 30, state="pending", pods=0).judge(31)
    assert v.verdict == "NO-KILL" and v.gates.A.status == "UNKNOWN" and v.job_status == "ALIVE"


def test_terminal_failed_reports_root_cause_and_never_kills(core) -> None:
    err = "KeyError: 'model.layers.0.mlp.experts.gate_up_proj'"
    attempts = [dict(attempt=0, terminal_state="failed", exit_code=1, error=err),
                dict(attempt=1, terminal_state="failed", exit_code=1, error=err)]
    v = Job(core).spec().states(0, 40, attempt=1).state(41, state="failed", pods=0, attempt=1, attempts=attempts).judge(45)
    assert (v.verdict, v.job_status) == ("NO-KILL", "TERMINAL")
    assert v.gates.A.status == "FAIL"
    assert "gate_up_proj" in text_of(v)
    assert v.restarts.same_failure is True
    assert any("mapping" in s for s in v.next_steps)


def test_terminal_succeeded_is_a_pass(core) -> None:
    v = Job(core).spec().states(0, 10).state(11, state="succeeded", pods=0).judge(12)
    assert (v.verdict, v.job_status, v.gates.A.status) == ("NO-KILL", "TERMINAL", "PASS")


def colocated_wedge(core) -> Job:
    job = Job(core).spec(expected_step_s=1000).states(0, 200, every=5)
    job.steps(0, 60, step_min=15)  # 4 steps then the policy mesh hangs inside policy_train
    job.log(69, [f"{P} {loguru_ts(at(69))} | INFO     | skyrl_train.trainer:train_critic_and_policy:1639 - Started: 'policy_train'"])
    job.log(100, [f"{POLICY} [rank0]:[E{c10_ts(at(100))} ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
                  "ProcessGroupNCCL's watchdog got stuck for 1800 seconds without making progress in monitoring enqueued "
                  "collectives.", f"{POLICY} Fatal Python error: Aborted"])
    job.log(101, ["(raylet, ip=10.0.3.95) A worker died or was killed while executing a task by an unexpected system "
                  "error. To troubleshoot the problem, check the logs for the dead worker. RayTask ID: ffff Worker ID: "
                  "bb16 Node ID: 1234 Worker IP address: 10.0.3.95 Worker port: 10011 Worker PID: 5834 Worker exit "
                  "type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. "
                  "End of file."])
    job.engine_stats(150, 199, gen=900, running=20)
    for m in range(100, 200, 5):
        job.gpu(m, "pod-0", 0.0, mem=52000).gpu(m, "pod-1", 88.0)
    job.trials(190, 8)
    return job


def test_colocated_engine_deception_is_wedged(core) -> None:
    v = colocated_wedge(core).judge(200)
    assert (v.verdict, v.job_status, v.gates.A.status) == ("KILL", "WEDGED", "FAIL")
    t = text_of(v)
    assert "watchdog got stuck for 1800 seconds" in t and "SYSTEM_ERROR" in t
    assert re.search(r"trainer progress frozen", t) and "policy" in t.lower()
    assert "deception" in v.gates.A.summary
    assert any("flight" in s for s in v.next_steps)
    assert v.gates.B.status != "FAIL" or "OOM" not in v.gates.B.summary


def test_watchdog_followed_by_progress_is_recovered(core) -> None:
    job = healthy(Job(core))
    job.log(30, [f"{POLICY} [rank0]:[E{c10_ts(at(30))} ProcessGroupNCCL.cpp:1595] ProcessGroupNCCL's watchdog got stuck "
                 "for 1800 seconds without making progress in monitoring enqueued collectives."])
    v = job.judge(121)
    assert v.verdict == "NO-KILL" and v.gates.A.status == "PASS"
    assert "advanced after it" in v.gates.A.summary


def test_stale_trainer_without_hang_signature_escalates(core) -> None:
    job = Job(core).spec(expected_step_s=600).states(0, 150, every=5)
    job.steps(0, 60, step_min=10)
    job.engine_stats(140, 149)
    v = job.judge(150)
    assert v.verdict == "NO-KILL" and v.escalate and v.gates.A.status == "UNKNOWN"
    assert "no hang signature" in v.gates.A.summary


def test_slow_steps_are_judged_against_their_own_cadence(core) -> None:
    job = Job(core).spec(expected_step_s=None).states(0, 400, every=10)
    job.steps(0, 320, step_min=80)  # 80-minute steps: 4 done by minute 320
    v = job.judge(350)  # 30 min into step 5
    assert v.gates.A.status == "PASS", v.gates.A.summary
    assert "cadence ~80 min" in v.gates.A.summary


def test_trainer_death_while_state_running_is_wedged(core) -> None:
    job = Job(core).spec().states(0, 60, every=2)
    job.steps(0, 45, step_min=15)
    job.log(50, oom_traceback(at(50), "rl-pod-0-abc-0"))
    v = job.judge(60)
    assert v.job_status == "WEDGED" and v.gates.A.status == "FAIL"
    assert v.gates.B.status == "FAIL" and "OOM" in v.gates.B.summary
    assert v.verdict == "KILL"


# ---------------------------------------------------------------------------------------------- restarts


def test_same_crash_every_restart_is_doomed(core) -> None:
    err = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.52 GiB. GPU 3 has a total capacity of 79.19 GiB"
    attempts = [dict(attempt=0, terminal_state="failed", exit_code=1, error=err)]
    job = Job(core).spec().states(0, 29, every=2)
    job.log(28, oom_traceback(at(28), "rl-pod-0-abc-0"))
    job.states(31, 70, every=2, attempt=1, attempts=attempts)
    job.steps(35, 50, step_min=15)
    job.log(65, oom_traceback(at(65), "rl-pod-0-abc-1"))
    v = job.judge(70)
    assert v.verdict == "KILL" and v.restarts.same_failure is True
    assert (v.restarts.burned, v.restarts.max) == (1, 1)
    assert v.confidence == "high"
    assert any(re.search(r"micro_train_batch_size|expandable_segments", s) for s in v.next_steps)


def test_transient_restart_then_healthy_is_benign(core) -> None:
    err = "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file on the Hub"
    attempts = [dict(attempt=0, terminal_state="failed", exit_code=1, error=err)]
    job = healthy(Job(core))
    job.events = [e for e in job.events if e.kind != "job_state"]
    job.states(0, 120, every=5, attempt=1, attempts=attempts)
    v = job.judge(121)
    assert v.verdict == "NO-KILL" and v.restarts.burned == 1 and v.restarts.same_failure is False
    assert "recovered" in v.restarts.summary


def test_slurm_timeout_chain_restart_is_not_a_burn(core) -> None:
    attempts = [dict(attempt=0, terminal_state="timeout", exit_code=0, error="DUE TO TIME LIMIT")]
    job = healthy(Job(core))
    job.events = [e for e in job.events if e.kind != "job_state"]
    job.states(0, 120, every=5, attempt=1, attempts=attempts, scheduler="slurm")
    v = job.judge(121)
    assert v.verdict == "NO-KILL" and v.restarts.burned == 0


# ---------------------------------------------------------------------------------------------- Gate B


def test_throughput_starvation_is_a_kill(core) -> None:
    job = Job(core).spec(rollout={"n_concurrent_trials": 96}).states(0, 180, every=5)
    job.steps(0, 180, step_min=60)
    job.engine_stats(100, 179, gen=150, running=8, waiting=40, kv=99.0)
    v = job.judge(180)
    assert v.verdict == "KILL" and v.gates.B.status == "FAIL"
    assert "Waiting" in v.gates.B.summary and "tok/s" in v.gates.B.summary
    assert any("n_concurrent_trials" in s for s in v.next_steps)


def test_enforce_eager_is_named_when_throughput_is_floored(core) -> None:
    job = Job(core).spec(enforce_eager=True).states(0, 120, every=5)
    job.steps(0, 120)
    job.engine_stats(80, 119, gen=60, running=40, waiting=0)
    v = job.judge(120)
    assert v.verdict == "KILL" and v.gates.B.status == "FAIL"
    assert any("enforce_eager=false" in s for s in v.next_steps)


def test_healthy_small_batch_is_not_floored(core) -> None:
    job = healthy(Job(core))
    job.engine_stats(100, 120, gen=300, running=3, waiting=0)
    v = job.judge(121)
    assert v.gates.B.status == "PASS", v.gates.B.summary


def test_oomkilled_pod_fails_gate_b(core) -> None:
    job = healthy(Job(core))
    job.state(119, pod_statuses=[PodStatus(name="pod-0", phase="Running", restart_count=2, reasons=["OOMKilled"],
                                           exit_code=137)])
    v = job.judge(121)
    assert v.gates.B.status == "FAIL" and "OOMKilled" in v.gates.B.summary


def test_nonfinite_loss_sustained_fails_gate_b(core) -> None:
    job = healthy(Job(core))
    for i, m in enumerate((100, 105, 110)):
        job.log(m, [f"{P} {loguru_ts(at(m))} | INFO     | skyrl_train.trainer:_log_metrics_stdout:1965 - WANDB_MIRROR "
                    f"kind=train step={20 + i} metrics={{\"policy/policy_loss\": NaN, \"policy/grad_norm\": NaN}}"])
    v = job.judge(121)
    # A training-dynamics alarm on its own: escalate, never a KILL (one evidence family).
    assert v.gates.B.codes[0] == "B.nonfinite_loss" and v.gates.B.status == "UNKNOWN" and "NaN" in v.gates.B.summary
    assert (v.verdict, v.escalate) == ("NO-KILL", True)


def test_one_zero_line_then_silence_alone_escalates(core) -> None:
    """One 0.0 tok/s line with Running 12, then silence while the other engine generates: what a hung engine prints,
    and what an engine idle after its requests were aborted prints too (vllm-project/vllm#22545). With nothing of
    its own to corroborate a hang (its GPUs pinned, its EngineCore waiting) it escalates; the hung cases are in
    tests/test_core_engine_silent.py."""
    job = healthy(Job(core))
    job.events = [e for e in job.events if not (e.kind == "log_batch" and "pod_rank1" in (e.source.stream or ""))]
    job.engine_stats(90, 115, engines=2)
    job.log(115.5, ["(AsyncVLLMInferenceEngine pid=4001, ip=10.0.0.2) INFO 06-28 13:55:30 [loggers.py:248] Engine 000: "
                    "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 12 reqs, "
                    "Waiting: 0 reqs, GPU KV cache usage: 20.0%, Prefix cache hit rate: 0.0%"], stream="logs/pod_rank1.log")
    job.engine_stats(116, 125, engines=1)
    v = job.judge(126)
    assert (v.verdict, v.escalate, v.gates.B.status) == ("NO-KILL", True, "UNKNOWN")
    assert v.gates.B.codes[0] == "B.engine_silent_unconfirmed" and "Running 12 at 0.0 tok/s" in v.gates.B.summary


# ---------------------------------------------------------------------------------------------- Gate C


def test_benign_noise_is_never_a_fault(core) -> None:
    job = healthy(Job(core))
    noise = [
        "(EngineCore_DP0 pid=2211) INFO 06-28 13:50:00 [shm_broadcast.py:466] No available shared memory broadcast "
        "block found in 60 seconds. This typically happens when some processes are hanging or doing some "
        "time-consuming work (e.g. compilation, weight/kv cache quantization).",
        "WARNING 06-28 13:50:01 [envs.py:1830] Unknown vLLM environment variable detected: VLLM_ALLOW_ROUTED_EXPERTS_DCP",
        "ContextLengthExceededError: 32769 input tokens > 32768 max",
        "harbor.trial.errors.AgentTimeoutError: Agent execution timed out after 1800 seconds",
        "NCCL INFO opCount 0xdead sendbuff 0x7f00 recvbuff 0x7f00 count 1 datatype 7 op 0 root 0",
    ]
    job.log(110, noise)
    v = job.judge(121)
    assert v.verdict == "NO-KILL" and [v.gates.A.status, v.gates.B.status, v.gates.C.status] == ["PASS"] * 3
    faults = {n for n, s in job.last_state.signals.items()
              if n in ("engine_dead", "nccl_watchdog_stuck", "python_exception", "cuda_oom") and s.count}
    assert faults == set()


def test_infra_failure_every_trial_is_a_kill(core) -> None:
    job = Job(core).spec().states(0, 90, every=5)
    job.steps(0, 90)
    job.trials(60, 8, reward=0.0, exception="VerificationNotCompletedError")
    job.trials(85, 8, reward=0.0, exception="VerificationNotCompletedError")
    v = job.judge(90)
    assert v.verdict == "KILL" and v.gates.C.status == "FAIL"
    assert "VerificationNotCompletedError" in text_of(v)
    assert any("Daytona" in s or "sandbox" in s for s in v.next_steps)


@pytest.mark.parametrize("exc", ["DaytonaBadRequestError", "DaytonaRateLimitError", "SnapshotQuotaExceeded"])
def test_sandbox_sdk_subclass_on_every_trial_is_infra_not_a_broken_loop(core, exc) -> None:
    """The Daytona SDK raises one DaytonaError subclass per HTTP status; a trial records only the bare class
    name. Every trial failing that way is the sandbox provider, not agents that 'stop after one turn'."""
    job = Job(core).spec().states(0, 90, every=5)
    job.steps(0, 90)
    job.trials(60, 8, reward=None, exception=exc).trials(85, 8, reward=None, exception=exc)
    v = job.judge(90)
    assert v.verdict == "KILL" and v.gates.C.status == "FAIL"
    assert v.gates.C.codes[0] == "C.infra_failures" and "C.broken_loop" not in v.gates.C.codes
    assert v.culprit is not None and (v.culprit.role, v.culprit.component) == ("sandbox", exc)


def test_a_model_side_exception_on_every_trial_is_not_called_infra(core) -> None:
    job = Job(core).spec().states(0, 90, every=5)
    job.steps(0, 90)
    job.trials(60, 8, reward=None, exception="ValueError").trials(85, 8, reward=None, exception="ValueError")
    v = job.judge(90)
    assert "C.infra_failures" not in v.gates.C.codes and "C.trials_infra" not in v.gates.C.codes
    assert v.culprit is None or v.culprit.role != "sandbox"


def _colocated_silence(core, idle_from: float, end: float, idle_hosts=("pod-0",), hosts=("pod-0",)) -> Job:
    job = Job(core).spec(geometry={"num_inference_engines": 8, "engine_tp": 1, "colocated": True}).states(0, end, every=5)
    job.steps(0, 60, step_min=9)
    for m in range(0, int(end) + 1, 5):
        for h in hosts:
            job.gpu(m, h, 0.0 if (m >= idle_from and h in idle_hosts) else 85.0, mem=45000.0)
    return job


def test_every_policy_gpu_idle_while_the_trainer_is_stale_is_a_wedge(core) -> None:
    v = _colocated_silence(core, 60, 120).judge(120)
    assert (v.verdict, v.job_status) == ("KILL", "WEDGED")
    assert "A.policy_gpus_idle" in v.gates.A.codes and "A.trainer_frozen" in v.gates.A.codes


def test_idle_gpus_before_the_trainer_is_stale_are_not_a_wedge(core) -> None:
    v = _colocated_silence(core, 55, 75).judge(75)  # ~21 min silent against a 9 min cadence: late, not stale
    assert v.verdict == "NO-KILL"


def test_idle_policy_gpus_while_engines_generate_are_a_trainer_waiting_for_rollouts(core) -> None:
    job = _colocated_silence(core, 60, 120)
    job.engine_stats(60, 120)  # the engines keep generating: the trainer waits for a slow rollout phase
    v = job.judge(120)
    assert v.verdict == "NO-KILL" and v.gates.A.codes[0] != "A.wedged"


def test_one_busy_policy_host_keeps_a_silent_trainer_ambiguous(core) -> None:
    v = _colocated_silence(core, 60, 120, idle_hosts=("pod-0",), hosts=("pod-0", "pod-1")).judge(120)
    assert v.verdict == "NO-KILL" and v.gates.A.status == "UNKNOWN"


def test_zero_completed_early_on_long_episodes_is_executing(core) -> None:
    job = Job(core).spec(rollout={"expected_episode_s": 3600}).states(0, 15, every=1)
    for i in range(8):
        from rlhealth.schemas import TrialEvent

        job.events.append(TrialEvent(job_id=job.job_id, event_time=at(2), phase="started", trial_name=f"t{i}"))
    job.engine_stats(5, 14.9)
    v = job.judge(15)
    assert v.verdict == "NO-KILL" and v.gates.C.status == "UNKNOWN"
    assert "0 completed yet" in v.gates.C.summary


def test_all_zero_rewards_with_token_salad_is_a_kill(core) -> None:
    salad = "zxq vvb ptk qqrst xx zzv bbk ppq rrt ttk vvx qqz " * 6
    job = Job(core).spec(new_or_untested=["TP=2+EP=2 first run"]).states(0, 90, every=5)
    job.steps(0, 90)
    job.trials(60, 8, reward=0.0, samples=(salad,)).trials(85, 8, reward=0.0, samples=(salad,))
    v = job.judge(90)
    assert v.verdict == "KILL" and v.gates.C.status == "FAIL" and "incoherent" in v.gates.C.summary
    assert any("weight sync" in s for s in v.next_steps)


def test_all_zero_rewards_but_coherent_escalates(core) -> None:
    job = Job(core).spec().states(0, 90, every=5)
    job.steps(0, 90)
    job.trials(60, 8, reward=0.0).trials(85, 8, reward=0.0)
    v = job.judge(90)
    assert v.verdict == "NO-KILL" and v.escalate and v.gates.C.status == "UNKNOWN"


def test_verifier_timeouts_fail_gate_c(core) -> None:
    job = Job(core).spec().states(0, 90, every=5)
    job.steps(0, 90)
    job.trials(60, 8, reward=0.0, exception="VerifierTimeoutError").trials(85, 8, reward=0.0, exception="VerifierTimeoutError")
    v = job.judge(90)
    assert v.gates.C.status == "FAIL" and v.verdict == "KILL"


def test_eval_trials_are_kept_apart(core) -> None:
    job = healthy(Job(core))
    job.trials(100, 10, reward=0.0, session="eval", prefix="eval")
    v = job.judge(121)
    assert v.gates.C.status == "PASS" and "eval trials kept apart" in v.gates.C.summary


def test_vanished_and_redelivered_trials_are_not_double_counted(core) -> None:
    from rlhealth.schemas import TrialEvent

    job = healthy(Job(core))
    job.events.append(TrialEvent(job_id=job.job_id, event_time=at(50), phase="started", trial_name="r1"))
    job.events.append(TrialEvent(job_id=job.job_id, event_time=at(52), phase="vanished", trial_name="r1"))
    job.events.append(TrialEvent(job_id=job.job_id, event_time=at(60), phase="started", trial_name="r1"))
    dup = [e for e in job.events if e.kind == "trial" and e.phase == "completed"][:3]
    job.events.extend(dup)
    job.judge(121)
    t = job.last_state.trials
    assert t.completed == 16 and t.vanished == 1 and t.started == 17


# ---------------------------------------------------------------------------------------------- monitor itself


def test_silent_shipper_makes_the_monitor_blind_not_the_job_dead(core) -> None:
    job = colocated_wedge(core)
    job.heartbeat(10).heartbeat(20)  # the shipper stopped heartbeating long before "now"
    v = job.judge(200)
    assert v.verdict == "NO-KILL" and v.job_status == "UNKNOWN" and v.escalate
    assert "blind" in v.gates.A.summary


def test_kill_always_cites_two_signals_and_a_fix(core) -> None:
    for job in (colocated_wedge(core),):
        v = job.judge(200)
        assert v.verdict == "KILL"
        assert len(v.evidence) >= 2 and len({e.source for e in v.evidence}) >= 2
        assert v.next_steps and "Load-bearing signals" in v.reasoning


def test_state_stays_small_and_round_trips(core) -> None:
    from rlhealth.agents.state import JobHealth

    job = colocated_wedge(core)
    job.judge(200)
    blob = job.last_state.to_bytes()
    assert len(blob) < 64 * 1024
    assert JobHealth.from_bytes(blob) == job.last_state


# ---------------------------------------------------------------------------------------------- beyond the seed


def test_fail_slow_step_rate_is_a_single_signal_escalation(core) -> None:
    job = Job(core).spec(expected_step_s=None).states(0, 220, every=10)
    job.steps(0, 120, step_min=15)        # 8 steps of 15 min
    job.steps(120, 210, step_min=30, first_step=9)  # then the last 3 take twice as long
    job.engine_stats(190, 219)
    v = job.judge(220)
    assert v.gates.B.status == "FAIL" and "step rate down" in v.gates.B.summary
    assert v.verdict == "NO-KILL" and v.escalate  # one sustained signal: escalate, never kill on it alone


def test_fail_slow_throughput_drop_against_own_median(core) -> None:
    job = Job(core).spec().states(0, 130, every=5)
    job.steps(0, 130)
    job.engine_stats(0, 90, gen=3000, running=30)
    job.engine_stats(90.1, 129.9, gen=1200, running=30)
    v = job.judge(130)
    assert v.gates.B.status == "FAIL" and "generation throughput down" in v.gates.B.summary


def test_grad_norm_explosion_and_entropy_collapse_are_flagged(core) -> None:
    job = healthy(Job(core))
    for i, (gn, ent) in enumerate([(0.3, 0.5), (0.35, 0.48), (0.32, 0.47), (0.3, 0.5), (0.31, 0.49), (0.33, 0.46),
                                   (40.0, 0.01), (55.0, 0.008), (60.0, 0.005)]):
        m = 30 + i * 10
        job.log(m, [f"{P} {loguru_ts(at(m))} | INFO     | skyrl_train.fully_async_trainer:_train_loop:743 - "
                    f"{{'final_loss': -0.01, 'policy_entropy': {ent}, 'raw_grad_norm': {gn}, 'policy_lr': 1e-06}}"])
    v = job.judge(121)
    assert v.gates.B.status == "FAIL"
    assert "grad-norm explosion" in v.gates.B.summary and "entropy collapse" in v.gates.B.summary
    # Both come from the same metric lines: one evidence family (training dynamics), so escalate, not KILL.
    assert v.gates.B.codes[0] == "B.fail_slow" and v.gates.B.families == ["training_dynamics"]
    assert (v.verdict, v.escalate) == ("NO-KILL", True)


def test_crash_loop_without_progress_is_wedged(core) -> None:
    job = Job(core).spec().states(0, 120, every=5)
    job.steps(0, 45, step_min=15)  # reaches step 3, then every restart dies before finishing a step
    for minute, restarts, reasons in ((60, 1, ["OOMKilled"]), (80, 2, ["OOMKilled"]), (100, 3, ["CrashLoopBackOff"]),
                                      (118, 4, ["OOMKilled"])):
        job.state(minute, pod_statuses=[PodStatus(name="pod-0", phase="Running", restart_count=restarts,
                                                  reasons=reasons, exit_code=137)])
    v = job.judge(120)
    assert v.job_status == "WEDGED" and v.gates.A.status == "FAIL" and "crash loop" in v.gates.A.summary
    assert v.verdict == "KILL" and v.gates.B.status == "FAIL"
    assert "memory" in v.next_steps[0].lower() or "oom" in v.next_steps[0].lower()


def test_restarts_with_progress_are_not_a_crash_loop(core) -> None:
    job = healthy(Job(core))
    for minute, restarts in ((30, 1), (60, 2), (90, 3)):
        job.state(minute, pod_statuses=[PodStatus(name="pod-0", phase="Running", restart_count=restarts,
                                                  reasons=["Error"], exit_code=1)])
    v = job.judge(121)
    assert "crash loop" not in v.gates.A.summary and v.gates.A.status == "PASS"


def test_attempts_told_apart_from_logs_alone(core) -> None:
    """No state poll at all: pod generations in a finelog still show the same crash on every attempt."""
    job = Job(core).spec(max_retries=None)
    job.steps(0, 30, step_min=15)
    job.log(28, oom_traceback(at(28), "rl-pod-0-abc-0"), stream="logs/finelog.log")
    job.steps(35, 50, step_min=15, first_step=1)
    job.log(65, oom_traceback(at(65), "rl-pod-0-abc-1"), stream="logs/finelog.log")
    v = job.judge(70)
    assert v.restarts.burned == 1 and v.restarts.same_failure is True
    assert v.verdict == "KILL"


@pytest.mark.parametrize("fmt", ["megatron", "nemo_rl", "verl"])
def test_other_trainers_progress_formats_drive_liveness(core, fmt: str) -> None:
    def line(step: int, t) -> str:
        stamp = t.strftime("%Y-%m-%d %H:%M:%S")
        if fmt == "megatron":
            return (f" [{stamp}] iteration {step:8d}/    1000 | consumed samples: {step * 128:12d} | elapsed time per "
                    f"iteration (ms): 600000.0 | lm loss: 2.1E+00 | grad norm: 0.53 |")
        if fmt == "nemo_rl":
            return f"{stamp},000 INFO ========================= Step {step}/100 ========================="
        return f"(TaskRunner pid=23871) {stamp},000 step:{step} - actor/pg_loss:-0.004 - actor/entropy:0.5"

    job = Job(core).spec(expected_step_s=None).states(0, 130, every=5)
    for step in range(1, 12):
        job.log(step * 10, [line(step, at(step * 10))], stream="logs/trainer.log")
    alive = job.judge(115)
    assert alive.gates.A.status == "PASS" and "step 11" in alive.gates.A.summary
    assert "cadence ~10 min" in alive.gates.A.summary
    stale = job.judge(175)  # 65 min of silence against a learned 10-minute cadence, no hang signature
    assert stale.gates.A.status == "UNKNOWN" and stale.escalate and stale.verdict == "NO-KILL"


def test_sglang_engines_are_judged_like_vllm(core) -> None:
    job = Job(core).spec(rollout={"n_concurrent_trials": 96}).states(0, 180, every=5)
    job.steps(0, 180, step_min=60)
    t = at(100)
    lines = []
    while t <= at(179):
        lines.append(f"[{t.strftime('%Y-%m-%d %H:%M:%S')} TP0] Decode batch. #running-req: 8, #token: 90000, "
                     f"token usage: 0.99, gen throughput (token/s): 140.00, #queue-req: 40")
        t += timedelta(seconds=10)
    job.log(179, lines, stream="logs/sglang_engine0.log")
    v = job.judge(180)
    assert v.gates.B.status == "FAIL" and "Waiting 40" in v.gates.B.summary and "KV cache up to 99.0%" in v.gates.B.summary
