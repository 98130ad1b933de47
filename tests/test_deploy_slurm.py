"""The SLURM deploy examples run: the sbatch script under fake `srun`/`rlhealth`/`python`, the prolog and
epilog under fake `scontrol`/`systemd-run`/`systemctl`. What is checked is what a real batch host
would start: which shippers, with which options, and that every one of them gets SIGTERM (its
drain) when the job ends."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest

SLURM = Path(__file__).resolve().parents[1] / "deploy" / "slurm"

FAKE_RLHEALTH = """#!/bin/bash
echo "$*" >> "$FAKE_LOG/rlhealth.args"
trap 'echo "TERM $2" >> "$FAKE_LOG/rlhealth.term"; exit 0' TERM
while :; do sleep 0.05; done
"""
FAKE_SRUN = """#!/bin/bash
# drop srun's own options, run the task here
while [[ "$1" == --* ]]; do shift; done
exec "$@"
"""
FAKE_PYTHON = """#!/bin/bash
echo "$*" >> "$FAKE_LOG/train.args"
sleep 0.5
"""
RECORD = """#!/bin/bash
echo "$*" >> "$FAKE_LOG/{name}.args"
{body}
"""


def fake_bin(tmp_path: Path, scripts: dict[str, str]) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    for name, text in scripts.items():
        (d / name).write_text(text)
        (d / name).chmod((d / name).stat().st_mode | stat.S_IXUSR)
    return d


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_sbatch_script_ships_the_job_and_stops_its_shippers(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.mkdir()
    d = fake_bin(tmp_path, {"rlhealth": FAKE_RLHEALTH, "srun": FAKE_SRUN, "python": FAKE_PYTHON})
    env = dict(os.environ, PATH=f"{d}{os.pathsep}/usr/bin:/bin", FAKE_LOG=str(log), SLURM_JOB_ID="4242",
               SLURM_JOB_NAME="grpo-7b", SLURM_JOB_NUM_NODES="1", RLHEALTH_KAFKA_BOOTSTRAP="kafka:9092",
               RLJOBS_DIR=str(tmp_path / "jobs"), XDG_STATE_HOME=str(tmp_path / "state"), TMPDIR=str(tmp_path))
    proc = subprocess.run(["bash", str(SLURM / "sbatch-rlhealth.sh")], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    job_dir = tmp_path / "jobs" / "4242"
    assert (job_dir / "logs").is_dir() and (job_dir / "trace_jobs").is_dir()
    started = sorted(lines(log / "rlhealth.args"))
    host = socket.gethostname()
    batch = next(a for a in started if "--slurm-job-id" in a)
    assert batch.startswith(f"ship {job_dir} --job-id grpo-7b-4242 --slurm-job-id 4242 ")
    gpu = next(a for a in started if "--gpu" in a)
    assert f"--gpu auto --gpu-host {host}" in gpu and "--job-id grpo-7b-4242" in gpu
    assert len(started) == 2 and lines(log / "train.args")  # both shippers, then the training step
    # both got SIGTERM once the training ended (the trap), so each drained before the job ended
    assert sorted(lines(log / "rlhealth.term")) == sorted(f"TERM {a.split()[1]}" for a in started)


@pytest.mark.parametrize("first", [True, False])
def test_prolog_starts_the_batch_shipper_on_the_first_node_only_and_epilog_stops_them(tmp_path: Path,
                                                                                      first: bool) -> None:
    log = tmp_path / "log"
    log.mkdir()
    me = socket.gethostname().split(".")[0]
    nodes = f"{me}\nother-node" if first else f"other-node\n{me}"
    d = fake_bin(tmp_path, {
        "scontrol": RECORD.format(name="scontrol", body=f"printf '{nodes}\\n'"),
        "systemd-run": RECORD.format(name="systemd-run", body="exit 0"),
        "systemctl": RECORD.format(name="systemctl", body="exit 0"),
        "logger": RECORD.format(name="logger", body="exit 0"),
    })
    env = dict(os.environ, PATH=f"{d}{os.pathsep}/usr/bin:/bin", FAKE_LOG=str(log), SLURM_JOB_ID="777",
               SLURM_JOB_NODELIST="node[1-2]", RLJOBS_DIR=str(tmp_path / "jobs"))
    script = (SLURM / "prolog.sh").read_text().replace("/var/lib/rlhealth-ship", str(tmp_path / "state"))
    (tmp_path / "prolog.sh").write_text(script)
    proc = subprocess.run(["bash", str(tmp_path / "prolog.sh")], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    runs = lines(log / "systemd-run.args")
    batch = [r for r in runs if "--slurm-job-id 777" in r]
    gpu = [r for r in runs if "--gpu auto" in r]
    assert len(gpu) == 1 and f"--gpu-host {me}" in gpu[0] and "--unit=rlhealth-ship-777-gpu" in gpu[0]
    assert len(batch) == (1 if first else 0)
    if first:
        assert "--unit=rlhealth-ship-777 " in batch[0] and "--property=KillSignal=SIGTERM" in batch[0]
        assert f"ship {tmp_path / 'jobs' / '777'} --job-id 777" in batch[0]
    proc = subprocess.run(["bash", str(SLURM / "epilog.sh")], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    assert lines(log / "systemctl.args") == ["stop rlhealth-ship-777-gpu", "stop rlhealth-ship-777"]
