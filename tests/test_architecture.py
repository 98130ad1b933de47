"""The health core stays pure and the packages stay layered: import-linter contracts plus a
no-clock-reads check."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


CONTRACTS = (
    "The health core and the wire contract stay free of I/O frameworks",
    "The health core reads no configuration",
    "The wire contract does not depend on the health core",
    "Layers: each package imports only the layers below it",
)


def test_import_linter_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    # this checkout's package, whatever the venv's editable install points at
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([str(lint), str(ROOT / ".importlinter")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # every contract ran and was kept (a contract dropped from the file fails here too)
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken" in proc.stdout, proc.stdout
    for name in CONTRACTS:
        assert f"{name} KEPT" in proc.stdout, name


def test_core_reads_no_clock_and_does_no_io() -> None:
    forbidden_calls = {("datetime", "now"), ("datetime", "utcnow"), ("datetime", "today"), ("time", "time"),
                       ("time", "monotonic"), ("time", "perf_counter"), ("date", "today")}
    offenders = []
    for path in sorted((ROOT / "rlhealth" / "agents").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func
                if (isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name)
                        and (fn.value.id, fn.attr) in forbidden_calls):
                    offenders.append(f"{path.name}:{node.lineno} {fn.value.id}.{fn.attr}()")
                if isinstance(fn, ast.Name) and fn.id == "open":
                    offenders.append(f"{path.name}:{node.lineno} open()")
    assert offenders == []
