"""The health core stays pure: import-linter contracts plus a no-clock-reads check."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--config", str(ROOT / ".importlinter")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 2 kept, 0 broken" in proc.stdout


def test_core_reads_no_clock_and_does_no_io() -> None:
    forbidden_calls = {("datetime", "now"), ("datetime", "utcnow"), ("datetime", "today"), ("time", "time"),
                       ("time", "monotonic"), ("time", "perf_counter"), ("date", "today")}
    offenders = []
    for path in sorted((ROOT / "rlhealth" / "agents").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func
                if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name):
                    if (fn.value.id, fn.attr) in forbidden_calls:
                        offenders.append(f"{path.name}:{node.lineno} {fn.value.id}.{fn.attr}()")
                if isinstance(fn, ast.Name) and fn.id == "open":
                    offenders.append(f"{path.name}:{node.lineno} open()")
    assert offenders == []
