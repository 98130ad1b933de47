"""Session 12's second round of incidents (tests/scenarios/*, built by make_incident_scenarios_s12b.py; each
expected.json names its `sources`). The verdict each test wants is what the thread says happened, decided before
the capture was probed; where the core cannot reach it today the test is xfail(strict=True) naming the core
decision in the way. Assertions are on reason codes, gate statuses and verdict fields, not on wording."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from rlhealth.agents.failures import failure_class_of
from rlhealth.embedded import probe
from rlhealth.runtime import build_core
from tests.incident_support import SCENARIOS, excerpt, judged, signals_of

# ---------------------------------------------------------------- sgl-project/sglang#15891 (+ #10424)


def test_deepgemm_precompile_bringup_is_not_killed() -> None:
    """34 min without a rollout or a train step, the server's GPUs ~120 GB resident at 0-4 % util, while the
    server's own log says it is in the DeepGEMM JIT pre-compile session ('typically 10-20 mins') and its warmup
    bar moves every ~10 s: a bring-up, NO-KILL, no gate failed, nothing burned."""
    v = judged("sglang_deepgemm_precompile_long_bringup")
    assert (v.verdict, v.job_status) == ("NO-KILL", "ALIVE")
    assert all(g.status != "FAIL" for g in (v.gates.A, v.gates.B, v.gates.C))
    assert v.restarts.burned == 0


def _zero_util_copy(tmp: Path) -> Path:
    """The same capture with every resident GPU at 0 % (an all-CPU compile phase reads like that too)."""
    dst = tmp / "capture"
    shutil.copytree(SCENARIOS / "sglang_deepgemm_precompile_long_bringup" / "capture", dst)
    for csv in (dst / "gpu").glob("*.csv"):
        csv.write_text(re.sub(r", \d %, (\d{6}) MiB", r", 0 %, \1 MiB", csv.read_text(encoding="utf-8")),
                       encoding="utf-8")
    return dst


def test_deepgemm_precompile_at_zero_util_is_not_escalated(tmp_path: Path) -> None:
    """The engine's own warm-up lines (engine_warmup) explain its resident 0 % GPUs (was a strict xfail)."""
    v = probe(_zero_util_copy(tmp_path), build_core()).verdict
    assert v.gates.B.codes[0] == "B.engines_warming_up"
    assert v.verdict == "NO-KILL"
    assert not v.escalate


# ---------------------------------------------------------------- TideDra/lmm-r1#30


def test_refused_reward_requests_are_a_service_unreachable_class() -> None:
    lines = excerpt("lmm-r1-30_remote_rm_refused_job_failed")
    assert "service_unreachable" in signals_of(lines[2])
    assert failure_class_of(lines[7]) == "service_unreachable"  # 'Exception: Request error for 5 times, ...'
    assert failure_class_of(lines[2]) == "service_unreachable"
    # torch's rendezvous socket refusing is not a service the trainer calls over HTTP
    assert failure_class_of("The client socket has failed to connect to [trainer-0]:29500 (errno: 111 - "
                            "Connection refused).") != "service_unreachable"


def test_reward_server_never_up_is_terminal_with_a_service_fix() -> None:
    """Every /get_reward POST refused, remote_rm_fn gives up, ray job submit reports failed: TERMINAL, and the
    next steps say to bring the service up (not 'fix the code')."""
    v = judged("openrlhf_remote_rm_refused_terminal")
    assert (v.verdict, v.job_status, v.gates.A.codes) == ("NO-KILL", "TERMINAL", ["A.terminal"])
    assert v.root_cause is not None and v.root_cause.failure_class == "service_unreachable"
    assert any("listening" in s for s in v.next_steps)


# ---------------------------------------------------------------- ai2cm/ace#851


def test_watchdog_after_checkpoint_save_then_healthy_retry_is_not_a_kill() -> None:
    """Attempt 0 died of an ALLREDUCE watchdog 20 min into rank 0's checkpoint save; the retry resumed and runs:
    1/2 burned, recovered, NO-KILL."""
    v = judged("ckpt_save_watchdog_restart_recovered")
    assert (v.verdict, v.job_status) == ("NO-KILL", "ALIVE")
    assert v.restarts.burned == 1 and v.restarts.same_failure is not True
    assert v.gates.A.status != "FAIL"


# ---------------------------------------------------------------- verl-project/verl#3478


def test_sandbox_tool_timing_out_sometimes_is_healthy() -> None:
    """Five 'Sandbox API call failed ... Read timed out' pairs in 75 min while steps and engines advance."""
    v = judged("verl_retool_sandbox_timeouts_sometimes_healthy")
    assert (v.verdict, v.job_status, v.gates.A.codes) == ("NO-KILL", "ALIVE", ["A.alive"])
    assert v.gates.B.codes == ["B.generating"]
    assert not v.escalate


@pytest.mark.parametrize("name", ["verl_retool_sandbox_timeouts_sometimes_healthy",
                                  "sglang_deepgemm_precompile_long_bringup", "ckpt_save_watchdog_restart_recovered"])
def test_reasoning_states_the_gate_statuses_the_verdict_shows(name: str) -> None:
    """Gate B generating but no gpu/ directory: the source notes take its PASS back to UNKNOWN after the reasoning
    was written; the reasoning (and so the WHY line) must say UNKNOWN too, not the PASS it started from."""
    v = judged(name)
    said = ", ".join(f"{k} {getattr(v.gates, k).status}" for k in "ABC")
    assert v.reasoning.startswith(f"Gates: {said}.")
