"""Deployment files: they parse, reference only metrics the exporter has, and pass promtool."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest

from rlhealth.agents.findings import JobMetrics
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
                          verdict="KILL", job_status="ALIVE", last_event_time=None, trainer_last_step=1))
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
        doc = yaml.safe_load((base / res).read_text())
        kinds[doc["kind"]] = doc
    assert {"Deployment", "StatefulSet", "DaemonSet", "ConfigMap", "Service"} <= set(kinds)
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
        used |= referenced(var["definition"])
    unknown = {u for u in used if u not in names}
    assert not unknown, unknown


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)")
def test_promtool_checks_config_and_rule_unit_tests() -> None:
    for args in (["check", "config", "prometheus.yml"], ["check", "rules", "alerts.yaml"],
                 ["test", "rules", "alerts_test.yaml"]):
        proc = subprocess.run(["promtool", *args], cwd=PROM, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
