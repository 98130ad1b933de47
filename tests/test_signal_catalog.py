"""Signals are declared as data and every declaration is consumed."""

from __future__ import annotations

import re
from pathlib import Path

from rlhealth.agents.signals import CONSUMERS, Catalog, SignalDecl, check_catalog
from rlhealth.rules.catalog import load_catalog
from rlhealth.rules.loader import load_rules

AGENTS = Path(__file__).resolve().parents[1] / "rlhealth" / "agents"


def test_every_shipped_rule_signal_is_declared_and_consumed() -> None:
    rules = load_rules(use_env=False)
    assert check_catalog(load_catalog(use_env=False), [(r.id, r.signal, r.gates) for r in rules.rules]) == []


def test_check_reports_undeclared_signals_and_effects_nobody_consumes() -> None:
    cat = Catalog(signals={"x": SignalDecl("x", "engine", "fatal_log", "teleport", "x")})
    problems = check_catalog(cat, [("pack.rule", "x", None), ("pack.other", "missing", None)])
    assert any("missing" in p and "not declared" in p for p in problems)
    assert any("teleport" in p and "no consumer" in p for p in problems)


def test_check_reports_a_rule_whose_gates_miss_the_consuming_gate() -> None:
    cat = Catalog(signals={"h": SignalDecl("h", "trainer", "hang_log", "hang", "h")})
    assert check_catalog(cat, [("pack.ok", "h", ("A",))]) == []
    problems = check_catalog(cat, [("pack.bad", "h", ("C",))])
    assert len(problems) == 1 and "pack.bad" in problems[0] and "'hang'" in problems[0]


def test_each_consumed_effect_is_read_by_the_core() -> None:
    """CONSUMERS is not a list of promises: each effect name is used by the ingest or a gate."""
    code = "\n".join(p.read_text() for p in AGENTS.glob("*.py") if p.name != "signals.py")
    code += (AGENTS.parent / "agents" / "signatures.py").read_text()
    for effect in CONSUMERS:
        if effect == "benign":  # the classifier drops fault matches by rule kind "benign"
            assert 'kind == "benign"' in code or "'benign'" in code or '"benign"' in code
            continue
        assert re.search(rf"""["']{effect}["']""", code), effect


def test_remediations_and_xid_table_load() -> None:
    cat = load_catalog(use_env=False)
    assert cat.xid[79].blame == "hardware" and cat.xid[13].blame == "application"
    assert cat.steps_for("gpu_hardware") and cat.generic_remediation
    for decl in cat.signals.values():
        assert decl.cause is None or cat.steps_for(decl.cause), decl.name
