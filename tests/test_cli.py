"""Every command answers --help, and `python -m rlhealth` is the same program as the console script."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from rlhealth.cli import COMMANDS, main


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help(command: str) -> None:
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output and "not available in this build" not in result.output


def test_python_dash_m_lists_every_command() -> None:
    proc = subprocess.run([sys.executable, "-m", "rlhealth", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    for command in COMMANDS:
        assert command in proc.stdout


@pytest.mark.parametrize("args", [["topics", "list"], ["verdicts", "--latest"], ["worker"]])
def test_kafka_commands_against_an_unreachable_broker_fail_in_one_line(args: list[str]) -> None:
    import os
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run([sys.executable, "-m", "rlhealth", *args, "--bootstrap", f"127.0.0.1:{port}"],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, RLHEALTH_KAFKA_CONNECT_TIMEOUT="1"))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Kafka unreachable" in proc.stderr and f"127.0.0.1:{port}" in proc.stderr
    assert f"rlhealth {args[0]}" in proc.stderr


def test_probe_progress_reports_bytes_files_and_events() -> None:
    from pathlib import Path

    cap = Path(__file__).resolve().parent / "scenarios" / "healthy_nan_loss_lines" / "capture"
    proc = subprocess.run([sys.executable, "-m", "rlhealth", "probe", str(cap), "--progress"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 10), proc.stderr
    n_logs = sum(1 for f in (cap / "logs").rglob("*") if f.is_file())
    assert f"files {n_logs}/{n_logs} read" in proc.stderr
    assert " events" in proc.stderr and ("kB" in proc.stderr or "MB" in proc.stderr)
