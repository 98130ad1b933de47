"""The live shipper: folder -> events + heartbeats, and `rlhealth ship` into the real broker."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rlhealth.schemas import ShipperHeartbeat, decode_event
from rlhealth.sources.shipper import FolderShipper
from tests.scenario_support import ROOT

EXAMPLE = ROOT / "rlhealth" / "examples" / "capture-healthy"
FAKE_TOKEN = "hf_" + "Q" * 34


def test_folder_shipper_sends_only_new_events_and_a_heartbeat_each_tick(tmp_path: Path) -> None:
    cap = tmp_path / "cap"
    shutil.copytree(EXAMPLE, cap)
    sent: list = []
    clock = lambda: datetime(2026, 10, 14, 16, 20, tzinfo=UTC)  # noqa: E731
    shipper = FolderShipper(cap, sent.append, shipper_id="test-shipper", clock=clock)
    first = shipper.tick()
    kinds = {e.kind for e in sent}
    assert first > 100 and {"log_batch", "gpu_poll", "trial", "job_state", "job_spec", "heartbeat"} <= kinds
    assert isinstance(sent[-1], ShipperHeartbeat) and sent[-1].shipper == "test-shipper"
    sent.clear()
    shipper.tick()  # the last GPU poll of each host is flushed once a read finds no newer rows
    assert {e.kind for e in sent} <= {"gpu_poll", "heartbeat"}
    sent.clear()
    assert shipper.tick() == 0 and [e.kind for e in sent] == ["heartbeat"]
    log = next((cap / "logs").rglob("pod_rank0.log"))
    with log.open("a") as fh:
        fh.write(f"export HF_TOKEN={FAKE_TOKEN} && python train.py\n")
    sent.clear()
    assert shipper.tick() == 1
    batch = sent[0]
    assert batch.kind == "log_batch" and FAKE_TOKEN not in "".join(batch.lines)
    assert shipper.counters.heartbeats == 4 and shipper.counters.send_errors == 0


@pytest.mark.kafka
def test_ship_cli_produces_to_the_real_broker(kafka_bootstrap: str, kafka_catalog, tmp_path: Path) -> None:
    from kafka import KafkaConsumer

    env = dict(os.environ, RLHEALTH_TOPIC_PREFIX=kafka_catalog.prefix)
    cmd = [sys.executable, "-m", "rlhealth", "ship", str(EXAMPLE), "--bootstrap", kafka_bootstrap,
           "--iterations", "1", "--interval", "0.1", "--state-dir", str(tmp_path / "state")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    # a second run resumes from the checkpoints: no log batch is sent again
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    consumer = KafkaConsumer(kafka_catalog.topic_for_kind("log_batch"), kafka_catalog.topic_for_kind("heartbeat"),
                             bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000, enable_auto_commit=False)
    kinds: dict[str, int] = {}
    for record in consumer:
        ev = decode_event(record.value)
        assert record.key == ev.job_id.encode()
        kinds[ev.kind] = kinds.get(ev.kind, 0) + 1
    consumer.close()
    # per run: one per tick, one with the final read on the way out, the stopping one
    assert kinds.get("log_batch", 0) == 2 and kinds.get("heartbeat", 0) == 6

