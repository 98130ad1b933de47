"""Deployment files: they parse, reference only metrics the exporter has, and pass promtool."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest

from rlhealth.agents.findings import JobMetrics
from rlhealth.schemas import Verdict
from rlhealth.sinks.prometheus import Exporter

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
PROM = DEPLOY / "prometheus"


def exported_names() -> set[str]:
    exp = Exporter()
    exp.update(JobMetrics(job_id="j", log_staleness_s={"trainer": 1.0}, generation_tokens_per_s=1.0,
                          running_requests=1.0, waiting_requests=1.0, trials_completed_total=1, trial_reward_mean=1.0,
                          trials_nonzero_reward_ratio=1.0, nccl_watchdog_hits_total=1, oom_events_total=1,
                          ray_worker_deaths_total=1, restarts_burned=1, restarts_max=1, gate_status={"A": "PASS"},
                          verdict="KILL", job_status="ALIVE", last_event_time=None, trainer_last_step=1),
               Verdict(job_id="j", verdict="KILL", confidence="high", job_status="WEDGED", escalate=False,
                       reasoning="r", produced_at=datetime(2026, 1, 1, tzinfo=UTC)))
    text = generate_latest(exp.registry).decode()
    return {m.group(1) for m in re.finditer(r"^# TYPE (\S+) ", text, re.M)} | {
        line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def referenced(expr: str) -> set[str]:
    return set(re.findall(r"\b(rlhealth_[a-z_]+)", expr))


def yaml_files() -> list[Path]:
    return sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml"), ROOT / "docker-compose.yml"])


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_yaml_parses(path: Path) -> None:
    docs = list(yaml.safe_load_all(path.read_text()))
    assert docs and all(d is not None for d in docs)


def test_kustomization_lists_existing_resources() -> None:
    base = DEPLOY / "k8s" / "base"
    kust = yaml.safe_load((base / "kustomization.yaml").read_text())
    kinds = {}
    for res in kust["resources"]:
        for doc in yaml.safe_load_all((base / res).read_text()):
            kinds[doc["kind"]] = doc
    assert {"Deployment", "StatefulSet", "DaemonSet", "ConfigMap", "Service", "Role", "RoleBinding", "Job"} <= set(kinds)
    assert kinds["StatefulSet"]["spec"]["replicas"] == 1  # DuckDB has a single writer
    args = kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "worker" and any(a.startswith("--metrics-port") for a in args)


def test_compose_services_and_loopback_ports() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert {"kafka", "worker", "evidence", "prometheus", "grafana"} <= set(compose["services"])
    for name, svc in compose["services"].items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)
    for svc in compose["services"].values():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("./"):
                assert (ROOT / src).exists(), src


def test_alerts_and_dashboard_use_only_exported_metrics() -> None:
    names = exported_names()
    rules = yaml.safe_load((PROM / "alerts.yaml").read_text())
    used = set()
    for group in rules["groups"]:
        for rule in group["rules"]:
            used |= referenced(rule["expr"])
    dash = json.loads((DEPLOY / "grafana" / "dashboards" / "rlhealth.json").read_text())
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            used |= referenced(target["expr"])
    for var in dash["templating"]["list"]:
        used |= referenced(var.get("definition", ""))
    unknown = {u for u in used if u not in names}
    assert not unknown, unknown


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)")
def test_promtool_checks_config_and_rule_unit_tests() -> None:
    for args in (["check", "config", "prometheus.yml"], ["check", "rules", "alerts.yaml"],
                 ["test", "rules", "alerts_test.yaml"]):
        proc = subprocess.run(["promtool", *args], cwd=PROM, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def alert_rules() -> list[dict]:
    rules = yaml.safe_load((PROM / "alerts.yaml").read_text())
    return [r for g in rules["groups"] for r in g["rules"] if "alert" in r]


def runbook_anchors() -> set[str]:
    text = (ROOT / "docs" / "runbook.md").read_text()
    return {m.group(1).strip().lower().replace(" ", "-") for m in re.finditer(r"^## (.+)$", text, re.M)}


def test_every_alert_has_a_runbook_section() -> None:
    anchors = runbook_anchors()
    for rule in alert_rules():
        url = rule["annotations"].get("runbook_url", "")
        assert url == f"docs/runbook.md#{rule['alert'].lower()}", (rule["alert"], url)
        assert url.split("#")[1] in anchors, f"docs/runbook.md has no section '## {rule['alert']}'"


def test_every_alert_has_a_promtool_case_that_fires_it_and_one_that_does_not() -> None:
    tests = yaml.safe_load((PROM / "alerts_test.yaml").read_text())["tests"]
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in tests:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {r["alert"] for r in alert_rules()}
    assert names - fires == set(), f"alerts never shown to fire: {names - fires}"
    assert names - quiet == set(), f"alerts never shown to stay quiet: {names - quiet}"


def test_supervisor_alerts_exist_for_escalation_and_blindness() -> None:
    by_name = {r["alert"]: r for r in alert_rules()}
    assert "rlhealth_job_escalate" in by_name["RLJobEscalatedUnanswered"]["expr"]
    assert 'status="UNKNOWN"' in by_name["RLJobBlind"]["expr"]
    assert "rlhealth_job_verdict_timestamp_seconds" in by_name["RLJobVerdictStale"]["expr"]


def test_alertmanager_routes_name_only_existing_alerts() -> None:
    am = yaml.safe_load((DEPLOY / "alertmanager" / "alertmanager.yml").read_text())
    names = {r["alert"] for r in alert_rules()}
    matchers = [m for route in am["route"]["routes"] for m in route["matchers"]]
    for rule in am["inhibit_rules"]:
        matchers += rule["source_matchers"] + rule["target_matchers"]
    receivers = {r["name"] for r in am["receivers"]}
    assert {route["receiver"] for route in am["route"]["routes"]} | {am["route"]["receiver"]} <= receivers
    for matcher in matchers:
        m = re.fullmatch(r'alertname\s*(=~|=)\s*"(.+)"', matcher)
        assert m, matcher
        pattern = m.group(2) if m.group(1) == "=~" else re.escape(m.group(2))
        assert any(re.fullmatch(pattern, n) for n in names), f"{matcher} matches no alert"
    kill_route = am["route"]["routes"][0]
    assert kill_route["matchers"] == ['alertname = "RLJobKillRecommended"']


@pytest.mark.skipif(shutil.which("amtool") is None, reason="amtool not installed (apt-get install prometheus-alertmanager)")
def test_amtool_checks_the_alertmanager_config() -> None:
    proc = subprocess.run(["amtool", "check-config", str(DEPLOY / "alertmanager" / "alertmanager.yml")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dashboard_is_importable_into_any_grafana() -> None:
    """No hard-coded datasource uid: an import input plus a datasource variable every query uses."""
    dash = json.loads((DEPLOY / "grafana" / "dashboards" / "rlhealth.json").read_text())
    inputs = {i["name"]: i for i in dash["__inputs"]}
    assert inputs["DS_PROMETHEUS"]["type"] == "datasource" and inputs["DS_PROMETHEUS"]["pluginId"] == "prometheus"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert dash.get("id") is None

    def datasources(obj: object) -> list[dict]:
        if isinstance(obj, dict):
            found = [obj["datasource"]] if isinstance(obj.get("datasource"), dict) else []
            return found + [d for v in obj.values() for d in datasources(v)]
        if isinstance(obj, list):
            return [d for v in obj for d in datasources(v)]
        return []

    used = datasources(dash["panels"]) + datasources([v for v in dash["templating"]["list"] if v["name"] != "datasource"])
    assert used and all(d == {"type": "prometheus", "uid": "${datasource}"} for d in used), used
    titles = {p["title"] for p in dash["panels"]}
    assert {"Verdict", "Escalated", "Job status", "Confidence", "Verdict age", "Gate status"} <= titles
