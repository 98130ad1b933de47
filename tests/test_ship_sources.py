"""`rlhealth ship` with its live sources: per-source counters on /metrics, and the real CLI into a real broker
with fake `nvidia-smi` and `sacct` executables (recorded output) on PATH."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rlhealth.schemas import decode_event
from rlhealth.sources.sacct import SacctPoller
from rlhealth.sources.shipper import FolderShipper
from tests.test_sources_nvml import SMI_CSV, recorded_session
from tests.test_sources_sacct import RUNNING

T0 = datetime(2025, 11, 29, 9, 0, tzinfo=UTC)


def executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_metrics_carry_per_source_counters(tmp_path: Path) -> None:
    from rlhealth.cli.ship import SHIPPER_METRIC_LABELS, shipper_metrics
    from rlhealth.sinks.delivery import ReliableSender
    from rlhealth.sinks.prometheus import serve_snapshot
    from rlhealth.sources.nvml import NvmlPoller

    root = tmp_path / "job"
    (root / "logs").mkdir(parents=True)
    missing = SacctPoller(["48213"], job_id="j1", clock=lambda: T0,
                          runner=lambda argv: (_ for _ in ()).throw(FileNotFoundError(argv[0])))
    gpu = NvmlPoller(job_id="j1", host="h", nvml=recorded_session(), clock=lambda: T0)
    sent: list = []
    s = FolderShipper(root, deliver=lambda ev: sent.extend(ev) or True, job_id="j1", clock=lambda: T0,
                      state_dir=tmp_path / "state", sources=[gpu, missing])
    s.tick()
    sender = ReliableSender("127.0.0.1:9", producer_factory=lambda: None)
    port = serve_snapshot(lambda: shipper_metrics(s, sender), 0, labels=SHIPPER_METRIC_LABELS)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line and not line.startswith("#")}
    assert values['rlhealth_shipper_source_received_events_total{source="nvml"}'] == 1
    assert values['rlhealth_shipper_source_sent_events_total{source="nvml"}'] == 1
    assert values['rlhealth_shipper_source_received_events_total{source="sacct:48213"}'] == 0
    assert values['rlhealth_shipper_source_errors_total{reason="command_not_found",source="sacct:48213"}'] == 2
    assert "rlhealth_shipper_lines_read_total" in values  # the log counters are still there


FAKE_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=*) cat "$(dirname "$0")/gpu.csv" ;;
  *) echo "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]" ;;
esac
"""


@pytest.mark.kafka
def test_ship_cli_sends_gpu_slurm_and_source_stats_to_the_broker(kafka_bootstrap: str, kafka_catalog,
                                                                  tmp_path: Path) -> None:
    from kafka import KafkaConsumer

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gpu.csv").write_text(SMI_CSV)
    executable(bin_dir / "nvidia-smi", FAKE_SMI)
    (bin_dir / "sacct.out").write_text(RUNNING)
    executable(bin_dir / "sacct", '#!/bin/sh\ncat "$(dirname "$0")/sacct.out"\n')
    root = tmp_path / "job"
    (root / "logs").mkdir(parents=True)
    env = dict(os.environ, RLHEALTH_TOPIC_PREFIX=kafka_catalog.prefix,
               PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    # no NVML library on this machine: `auto` falls back to the (fake) nvidia-smi, and says so
    cmd = [sys.executable, "-m", "rlhealth", "ship", str(root), "--bootstrap", kafka_bootstrap, "--job-id", "grpo-7b",
           "--iterations", "2", "--interval", "0.2", "--state-dir", str(tmp_path / "state"), "--gpu", "auto",
           "--slurm-job-id", "48213", "--slurm-job-id", "48214"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "polling with nvidia-smi instead" in proc.stderr
    topics = [kafka_catalog.topic_for_kind(k) for k in ("gpu_poll", "job_state", "heartbeat")]
    consumer = KafkaConsumer(*topics, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000, enable_auto_commit=False)
    events = [decode_event(r.value) for r in consumer]
    consumer.close()
    gpu = [e for e in events if e.kind == "gpu_poll"]
    states = [e for e in events if e.kind == "job_state"]
    beats = [e for e in events if e.kind == "heartbeat"]
    assert gpu and all(e.source.stream == "nvidia-smi" and [g.index for g in e.gpus] == [0, 1, 2, 4] for e in gpu)
    assert gpu[0].gpus[0].temperature_c == 61.0
    assert states and states[-1].state == "running" and states[-1].source.stream == "sacct:48213,48214"
    last = beats[-1]
    assert last.stopping and last.sources == ["nvidia-smi", "sacct:48213,48214"]
    by_name = {s.name: s for s in last.source_stats}
    assert by_name["nvidia-smi"].sent == len(gpu) and by_name["sacct:48213,48214"].sent == len(states)
    assert all(s.failed == 0 for s in last.source_stats)


def test_live_sources_follow_the_options(tmp_path: Path) -> None:
    from rlhealth.cli.ship import live_sources

    with pytest.raises(ValueError, match="go together"):
        live_sources("j", k8s_namespace="ml")
    executable(tmp_path / "state.sh", "#!/bin/sh\necho 'squeue: error: Invalid job id' >&2\nexit 1\n")
    sources = live_sources("j", gpu="nvidia-smi", slurm_job_ids=("1,2", "3"), state_command=str(tmp_path / "state.sh"),
                           k8s_namespace="ml", k8s_selector="job-name=j", k8s_list=True, timeout_s=5, host="node-1")
    try:
        assert [s.name for s in sources] == ["nvidia-smi", "sacct:1,2,3", "k8s-list:ml/job-name=j", "state-command"]
        state = sources[-1]
        assert state.poll() == [] and state.counters.failed == 1 and "Invalid job id" in state.counters.last_error
        assert sources[0].host == "node-1"  # type: ignore[attr-defined]
    finally:
        for s in sources:
            s.close()
