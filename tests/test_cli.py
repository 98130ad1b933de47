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
