"""kubectl pod JSON, sacct legs and the resolved-config facts."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rlhealth.sources import kubectl, slurm
from rlhealth.sources.resolved_config import flatten_config, load_config_files, spec_facts

SHARED = Path(os.environ.get("RLHEALTH_SHARED_DIR") or Path(__file__).resolve().parents[1].parent / "shared")
LOGS = SHARED / "reference" / "examples" / "logs"
SCEN = SHARED / "scenarios"
needs_ref = pytest.mark.skipif(not LOGS.is_dir(), reason="shared reference fixtures not available")


@needs_ref
def test_pod_oomkilled_crashloop() -> None:
    pods = kubectl.load_pods_json((LOGS / "k8s_pod_oomkilled_crashloop.json.txt").read_text())
    assert len(pods) == 1
    p = pods[0]
    assert p.name == "rl-trainer-0" and p.phase == "Running" and p.ready is False
    assert p.restart_count == 3
    assert p.reasons == ["CrashLoopBackOff", "OOMKilled"]
    assert p.exit_code == 137
    assert p.message.startswith("back-off 40s restarting failed container=trainer")
    assert kubectl.infer_state(pods) == "running"


@needs_ref
def test_pod_imagepullbackoff() -> None:
    text = (LOGS / "k8s_pod_imagepullbackoff.json.txt").read_text().split("# --- the same container")[0]
    (p,) = kubectl.load_pods_json(text)
    assert p.phase == "Pending" and p.reasons == ["ImagePullBackOff"] and p.exit_code is None
    assert kubectl.infer_state([p]) == "pending"


@needs_ref
def test_pod_terminal_states() -> None:
    rows = [ln for ln in (LOGS / "k8s_pod_terminal_states.json.txt").read_text().splitlines()
            if ln.startswith("{")]
    pods = kubectl.pod_statuses_from_json({"items": [__import__("orjson").loads(r) for r in rows]})
    assert [p.phase for p in pods] == ["Succeeded", "Failed", "Failed", "Failed", "Failed", "Pending"]
    assert [p.exit_code for p in pods] == [0, 1, 134, 137, 137, None]
    assert pods[3].reasons == ["OOMKilled"]
    assert pods[4].reasons[0] == "Evicted" and "low on resource: memory" in pods[4].message
    assert pods[5].reasons == ["Unschedulable"]
    assert kubectl.infer_state(pods) == "failed"
    assert kubectl.infer_state(pods[:1]) == "succeeded"
    assert kubectl.infer_state([]) == "unknown"


def test_snapshot_time_from_file_name() -> None:
    assert kubectl.snapshot_time(Path("pods/2026-10-14T13:45:00Z.json")) == datetime(2026, 10, 14, 13, 45, tzinfo=UTC)
    assert kubectl.snapshot_time(Path("pods/2026-10-14T13-45-00Z.json")) == datetime(2026, 10, 14, 13, 45, tzinfo=UTC)
    assert kubectl.snapshot_time(Path("pods/2026-10-14T15:45:00+02:00.json")) == datetime(2026, 10, 14, 13, 45, tzinfo=UTC)
    assert kubectl.snapshot_time(Path("pods/latest.json")) is None


@needs_ref
def test_sacct_reference_fixture() -> None:
    text = (LOGS / "slurm_sacct.txt").read_text().split("# --- default")[0]
    res = slurm.parse_sacct(text)
    assert res.bad_lines == 0
    by_id = {leg.job_id: leg for leg in res.legs}
    assert len(res.legs) == 12  # allocation rows only; .batch/.extern/.0 steps ignored
    assert by_id["48215"].state == "TIMEOUT" and by_id["48215"].job_state == "killed"
    assert by_id["48216"].state == "CANCELLED" and by_id["48216"].raw_state == "CANCELLED by 10423"
    assert by_id["48217"].exit_code == 253 and by_id["48217"].job_state == "failed"
    assert by_id["48218"].exit_code == 1
    assert by_id["48213"].end is None and by_id["48213"].start == datetime(2025, 11, 29, 8, 0, 4, tzinfo=UTC)
    assert by_id["48223_[1-4]"].job_state == "pending"


CHAIN = """JobID|JobName|State|Start|End|ExitCode|Restarts
7001|rl|TIMEOUT|2025-11-28T08:00:02|2025-11-29T08:00:19|0:0|0
7001.batch|batch|CANCELLED|2025-11-28T08:00:02|2025-11-29T08:00:21|0:15|0
7002|rl|FAILED|2025-11-29T08:01:00|2025-11-29T09:00:00|1:0|0
7003|rl|RUNNING|2025-11-29T09:05:00|Unknown|0:0|0
7004|rl|PENDING|Unknown|Unknown|0:0|0
"""


def test_sacct_chain_polls() -> None:
    legs = slurm.parse_sacct(CHAIN).legs
    assert [leg.job_id for leg in slurm.chain_legs(legs)] == ["7001", "7002", "7003"]
    polls = slurm.sacct_state_polls(legs, job_id="j", captured_at=datetime(2025, 11, 29, 12, tzinfo=UTC))
    assert [(p.state, p.attempt, len(p.attempts)) for p in polls] == [
        ("running", 0, 0), ("pending", 1, 1), ("running", 1, 1), ("pending", 2, 2), ("running", 2, 2),
        ("running", 2, 2)]
    # The running leg started at 09:05; sacct.txt is the scheduler's view at capture time, so the
    # last poll repeats it at captured_at (otherwise a healthy job's state poll reads hours stale).
    assert polls[-2].event_time == datetime(2025, 11, 29, 9, 5, tzinfo=UTC)
    last = polls[-1]
    assert last.scheduler == "slurm" and last.event_time == datetime(2025, 11, 29, 12, tzinfo=UTC)
    a0, a1 = last.attempts
    assert (a0.attempt, a0.terminal_state, a0.exit_code) == (0, "timeout", 0)
    assert (a1.attempt, a1.terminal_state, a1.exit_code) == (1, "failed", 1)
    assert last.failure_count == 1  # the TIMEOUT leg is a chain restart, not a failure


def test_sacct_bad_lines_counted() -> None:
    res = slurm.parse_sacct(CHAIN + "this is not sacct\n7005|rl|RUNNING\n")
    assert res.bad_lines == 2 and len(res.legs) == 4


def test_config_facts(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "trainer:\n  placement: {colocate_all: true}\n  policy: {model: {path: Qwen/Qwen3-32B}}\n"
        "  micro_train_batch_size_per_gpu: 2\n"
        "generator:\n  enforce_eager: true\n  num_inference_engines: 8\n"
        "  inference_engine_tensor_parallel_size: 4\n  max_num_seqs: 128\n  gpu_memory_utilization: 0.85\n"
        "terminal_bench_config:\n  harbor: {n_concurrent_trials: 96, api_key: sk-abcdefghijklmnopqrstu}\n"
        "env_vars:\n  HF_TOKEN: hf_abcdefghijklmnopqrstuvwxyz\n  NOTE: 'token=abcdefgh1234'\n"
    )
    (tmp_path / "b.yaml").write_text(": : :\n  - [")
    flat, errors = load_config_files([tmp_path / "a.yaml", tmp_path / "b.yaml"])
    assert len(errors) == 1 and errors[0][0].name == "b.yaml"
    assert flat["generator.gpu_memory_utilization"] == 0.85
    assert flat["trainer.micro_train_batch_size_per_gpu"] == 2
    assert "env_vars.HF_TOKEN" not in flat and "terminal_bench_config.harbor.api_key" not in flat
    assert flat["env_vars.NOTE"] == "token=[REDACTED]"
    facts = spec_facts(flat)
    assert facts["enforce_eager"] is True
    assert facts["geometry"] == {"num_inference_engines": 8, "engine_tp": 4, "colocated": True}
    assert facts["rollout"] == {"n_concurrent_trials": 96, "max_num_seqs": 128}
    assert facts["model"] == {"name": "Qwen3-32B"}


def test_flatten_lists() -> None:
    assert flatten_config({"a": [1, 2], "b": [{"c": 1}]}) == {"a": [1, 2], "b.0.c": 1}
