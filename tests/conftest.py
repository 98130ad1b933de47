"""Shared fixtures.

Kafka: tests that need the real broker are marked `@pytest.mark.kafka` and take the
`kafka_bootstrap` fixture (or `kafka_catalog` / `make_topic`, which depend on it).
`kafka_bootstrap` is $KAFKA_BOOTSTRAP when set (`make test` starts one broker for the run and
exports it); otherwise the fixture starts a broker with scripts/kafka.sh in .kafka/pytest (or
$RLHEALTH_KAFKA_DIR) and stops it when the session ends, so a bare `pytest` works too. The broker
is started only if a selected test asks for it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
KAFKA_SH = REPO_ROOT / "scripts" / "kafka.sh"


def _kafka_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("RLHEALTH_KAFKA_DIR", str(REPO_ROOT / ".kafka" / "pytest"))
    env.setdefault("RLHEALTH_PYTHON", sys.executable)
    return env


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """HOST:PORT of a running Kafka broker for the whole session."""
    given = os.environ.get("KAFKA_BOOTSTRAP", "").strip()
    if given:
        yield given
        return
    env = _kafka_env()
    proc = subprocess.run([str(KAFKA_SH), "start"], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"scripts/kafka.sh start failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}",
                    pytrace=False)
    lines = proc.stdout.strip().splitlines()
    if len(lines) != 1 or not re.fullmatch(r"127\.0\.0\.1:\d+", lines[0]):
        subprocess.run([str(KAFKA_SH), "stop"], env=env, capture_output=True, timeout=120)
        pytest.fail(f"scripts/kafka.sh start printed {proc.stdout!r}, expected one 127.0.0.1:PORT line",
                    pytrace=False)
    sys.stderr.write(proc.stderr)
    try:
        yield lines[0]
    finally:
        stop = subprocess.run([str(KAFKA_SH), "stop"], env=env, capture_output=True, text=True, timeout=120)
        if stop.returncode != 0:
            sys.stderr.write(f"scripts/kafka.sh stop failed: {stop.stderr}\n")


def _unique_prefix(request: pytest.FixtureRequest) -> str:
    name = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:40]
    return f"t-{name}-{uuid.uuid4().hex[:8]}."


@pytest.fixture
def topic_prefix(request: pytest.FixtureRequest) -> str:
    """A topic-name prefix unique to this test (legal Kafka topic characters only)."""
    return _unique_prefix(request)


@pytest.fixture
def kafka_catalog(kafka_bootstrap: str, topic_prefix: str):
    """A TopicCatalog with this test's unique prefix, all of its topics created on the broker.

    Partitions come from $RLHEALTH_PARTITIONS (default 12), as in production. The topics are
    deleted afterwards (best effort) so a long-lived broker does not fill up.
    """
    from rlhealth.schemas.topics import TopicCatalog
    from rlhealth.sinks.kafka import ensure_topics

    catalog = TopicCatalog.from_env(prefix=topic_prefix)
    ensure_topics(kafka_bootstrap, catalog)
    yield catalog
    _delete_topics(kafka_bootstrap, catalog.all_topics)


@pytest.fixture
def make_topic(kafka_bootstrap: str, topic_prefix: str) -> Iterator[Callable[..., str]]:
    """Factory: make_topic("name", partitions=3, config={...}) creates `<unique prefix>name` and returns it."""
    from rlhealth.sinks.kafka import admin_client

    created: list[str] = []

    def make(name: str = "topic", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        full = topic_prefix + name
        with admin_client(kafka_bootstrap) as admin:
            admin.create_topics({full: {"num_partitions": partitions, "replication_factor": 1,
                                        "configs": dict(config or {})}})
            admin.wait_for_topics([full], timeout_ms=30_000)
        created.append(full)
        return full

    yield make
    _delete_topics(kafka_bootstrap, created)


def _delete_topics(bootstrap: str, names: list[str]) -> None:
    if not names:
        return
    from rlhealth.sinks.kafka import admin_client

    try:
        with admin_client(bootstrap, timeout_s=10) as admin:
            admin.delete_topics(names, raise_errors=False)
    except Exception as exc:  # noqa: BLE001 - cleanup only: never mask the test's own result
        sys.stderr.write(f"could not delete test topics {names}: {exc}\n")


def build_sample_events() -> list:
    """One realistic event of every kind, with non-default values in most fields."""
    from datetime import datetime, timedelta

    from rlhealth import schemas as s

    t0 = datetime(2026, 3, 14, 15, 9, 26, 535000, tzinfo=UTC)
    src = s.Source(cluster="c1", host="pod-trainer-0", rank=0, stream="logs/pod_rank0.log", attempt=1,
                   shipper="shipper-a")
    job = "job-42/grpo"  # not a plain identifier on purpose: keys are arbitrary UTF-8
    return [
        s.LogBatch(job_id=job, event_time=t0, ingest_time=t0 + timedelta(seconds=1), source=src,
                   lines=["step 10 loss=0.25", "", "NCCL WARN Watchdog caught collective operation timeout", "ünïcødé ✓"],
                   offsets=[0, 18, 19, 74], first_line_no=1, ts=[t0, None, t0 + timedelta(seconds=2), None],
                   truncated_lines=1, invalid_utf8_lines=2),
        s.GpuPoll(job_id=job, event_time=t0, source=src, host="node-3",
                  gpus=[s.GpuReading(index=0, uuid="GPU-abc", util_pct=97.5, mem_used_mib=70000.0,
                                     mem_total_mib=81559.0, power_w=612.25),
                        s.GpuReading(index=1, uuid="GPU-def")],  # [N/A] fields stay None
                  apps=[s.ComputeApp(gpu_uuid="GPU-abc", pid=1234, process_name="python", used_mib=69000.0)],
                  errors=["nvidia-smi: timeout on GPU 2"]),
        s.TrialEvent(job_id=job, event_time=t0, phase="completed", trial_name="trial-7", task_name="fix-bug",
                     session="train", reward=0.75, exception_type=None, assistant_turns=12,
                     started_at=t0 - timedelta(minutes=5), finished_at=t0, timings_s={"agent": 280.5, "verify": 9.0},
                     output_samples=["ok"]),
        s.JobStatePoll(job_id=job, event_time=t0, state="running", pods=4, failure_count=1, preemption_count=0,
                       attempt=2, max_retries=3,
                       attempts=[s.AttemptRecord(attempt=1, terminal_state="failed", exit_code=137,
                                                 started_at=t0 - timedelta(hours=2), ended_at=t0 - timedelta(hours=1),
                                                 error="OOMKilled")],
                       pod_statuses=[s.PodStatus(name="trainer-0", phase="Running", ready=True, restart_count=1,
                                                 reasons=["OOMKilled"], exit_code=None)],
                       scheduler="kubernetes"),
        s.JobSpec(job_id=job, event_time=t0,
                  model=s.ModelSpec(name="Qwen3-30B-A3B", params_b=30.5, active_params_b=3.3, moe=True, dtype="bf16"),
                  hardware=s.HardwareSpec(gpu="H100-80GB", gpus_per_node=8, nodes=2),
                  geometry=s.GeometrySpec(num_inference_engines=4, engine_tp=2, colocated=False,
                                          engine_pods=["vllm-0"], policy_pods=["trainer-0"]),
                  rollout=s.RolloutSpec(n_concurrent_trials=64, expected_episode_s=300.0),
                  expected_step_s=120.0, new_or_untested=["moe"], max_retries=3, enforce_eager=False,
                  started_at=t0 - timedelta(hours=3), config={"trainer.lr": 1e-6, "generator.n": 8}),
        s.ShipperHeartbeat(job_id=job, event_time=t0, shipper="shipper-a", sources=["logs/pod_rank0.log"],
                           interval_s=15.0, stopping=False),
        s.JobEnded(job_id=job, event_time=t0 + timedelta(hours=1), reason="cancelled by user"),
    ]


@pytest.fixture
def sample_events() -> list:
    return build_sample_events()
