"""The incidents of issue #10, judged from captures built around real log text (tests/scenarios/*,
see each expected.json's `sources`). Assertions are on reason codes, evidence families and verdict
fields, not on summary wording."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from rlhealth.embedded import probe
from rlhealth.runtime import build_core
from rlhealth.schemas import Verdict

SCENARIOS = Path(__file__).parent / "scenarios"


@cache
def judged(name: str) -> Verdict:
    return probe(SCENARIOS / name / "capture", build_core()).verdict


def evidence_text(v: Verdict) -> str:
    return "\n".join([v.reasoning] + [e.text for e in v.evidence]
                     + [e.text for g in (v.gates.A, v.gates.B, v.gates.C) for e in g.evidence])


def test_healthy_job_with_three_nan_loss_lines_escalates_without_kill() -> None:
    v = judged("healthy_nan_loss_lines")
    assert (v.verdict, v.escalate, v.job_status) == ("NO-KILL", True, "ALIVE")
    assert v.gates.B.codes[0] == "B.nonfinite_loss" and v.gates.B.status != "FAIL"
    # three lines, three occurrences (not one per NaN field)
    assert v.gates.B.families == []  # an alarm, not a FAIL
    assert "3 times" in v.gates.B.summary  # three lines are three occurrences, not one per NaN field


def test_tail_only_nccl_hang_then_silence_is_a_wedge_kill() -> None:
    v = judged("tail_only_nccl_hang")
    assert (v.verdict, v.job_status, v.gates.A.status) == ("KILL", "WEDGED", "FAIL")
    assert v.gates.A.codes[0] == "A.wedged_failing_tail"
    assert {"hang_log", "progress_stall"} <= set(v.gates.A.families)
    assert re.search(r"watchdog got stuck for 480 seconds", evidence_text(v))


def test_engine_death_names_the_causal_exception_not_engine_dead_error() -> None:
    v = judged("vllm_engine_dead_root_cause")
    assert v.verdict == "KILL"
    assert "ValueError" in v.reasoning
    steps = "\n".join(v.next_steps)
    assert "ValueError" in steps and steps.index("ValueError") < steps.find("EngineDeadError") + 10 ** 6


def test_xid_79_under_a_dead_engine_fails_gate_b_and_names_the_node() -> None:
    v = judged("gpu_fallen_off_bus")
    assert v.gates.B.status == "FAIL" and v.gates.B.codes[0] == "B.gpu_hardware_fault"
    assert {"hardware_log", "gpu_poll"} <= set(v.gates.B.families)
    assert v.verdict == "KILL"
    assert re.search(r"(?i)cordon|drain", "\n".join(v.next_steps))


def test_application_xids_are_not_blamed_on_the_node() -> None:
    v = judged("healthy_xid_and_worker_restart")
    assert v.verdict == "NO-KILL" and v.gates.B.status == "PASS"


def test_engine_resident_but_not_generating_fails_gate_b() -> None:
    v = judged("resident_idle_engine")
    assert v.gates.B.status == "FAIL" and v.gates.B.codes[0] == "B.engine_resident_idle"


def test_full_util_at_idle_power_with_no_step_is_a_hang_signal() -> None:
    v = judged("allreduce_hang_util_power")
    assert v.gates.A.status == "FAIL" and "A.gpus_spinning" in v.gates.A.codes
    assert "gpu_poll" in v.gates.A.families and v.verdict == "KILL"


def test_same_traceback_on_two_slurm_legs_is_the_same_failure_and_kill() -> None:
    v = judged("slurm_same_checkpoint_crash")
    assert v.restarts.same_failure is True and v.verdict == "KILL"
    assert "PytorchStreamWriter" in v.restarts.summary


def test_state_poll_alone_is_unknown_not_alive() -> None:
    v = judged("state_poll_only")
    assert (v.verdict, v.job_status, v.escalate) == ("NO-KILL", "UNKNOWN", True)
    assert v.gates.A.codes == ["A.state_poll_only"]


def test_dead_rollout_server_is_not_blamed_on_the_policy_mesh() -> None:
    v = judged("sglang_rollout_server_dead")
    assert not re.search(r"(?i)policy mesh", "\n".join(v.next_steps) + v.reasoning)


def test_daytona_subclass_error_on_every_trial_is_the_sandbox_not_the_agent_loop() -> None:
    """daytonaio/daytona#5156's DaytonaBadRequestError ('Disk request 90GB exceeds maximum allowed per sandbox')
    on every trial: Gate C names infrastructure with the provider's message, not a broken agent loop; the idle
    engines (no agent ever called them) do not fail Gate B."""
    v = judged("daytona_disk_cap_every_trial")
    assert (v.verdict, v.gates.C.status) == ("KILL", "FAIL")
    assert v.gates.C.codes[:2] == ["C.infra_failures", "C.trials_infra"]
    assert v.culprit is not None and (v.culprit.role, v.culprit.component) == ("sandbox", "DaytonaBadRequestError")
    assert "Disk request 90GB exceeds maximum allowed per sandbox" in evidence_text(v)
    assert v.gates.B.status != "FAIL"


def test_silent_hang_after_the_engines_fell_asleep_is_a_wedge() -> None:
    """modelscope/ms-swift#6962: the colocated engines fall asleep, the trainer prints one cleanup line and nothing
    more; no watchdog, no traceback. Every GPU resident at 0 % while the trainer is stale is the signature."""
    v = judged("swift_sleep_then_silence")
    assert (v.verdict, v.job_status, v.gates.A.status) == ("KILL", "WEDGED", "FAIL")
    assert "A.policy_gpus_idle" in v.gates.A.codes
    assert set(v.gates.A.families) == {"gpu_poll", "progress_stall"}
    assert v.culprit is not None and v.culprit.role == "trainer"


def test_a_kill_always_rests_on_two_families_or_a_deterministic_restart_history() -> None:
    for d in sorted(SCENARIOS.iterdir()):
        if not (d / "capture").is_dir():
            continue
        v = judged(d.name)
        if v.verdict != "KILL":
            continue
        families = {f for g in (v.gates.A, v.gates.B, v.gates.C) for f in g.families}
        assert len(families) >= 2 or v.restarts.same_failure is True, (d.name, families)
