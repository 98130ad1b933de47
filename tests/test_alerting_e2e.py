"""End to end with real servers: a KILL on the verdict topic becomes a firing alert in a real Prometheus.

The real broker, `rlhealth worker` with the real core, and a real Prometheus server (Debian's
`prometheus`) started here on 127.0.0.1 with the project's own alert rules
(deploy/prometheus/alerts.yaml) and a test-local config that scrapes the worker's metrics port every
second and evaluates the rules every second. The rules file is loaded with its expressions,
labels and annotations unchanged; only every `for:` is divided by `FOR_SCALE` (1m -> 1s), which
keeps the test short while checking the rules Prometheus actually runs in production.

One KILL scenario and one healthy capture are replayed to Kafka (`rlhealth replay`). The test waits
until Prometheus' own API reports RLJobKillRecommended firing for the KILL job (within two
evaluation intervals of the verdict, plus the scaled `for:` and one scrape), checks that the healthy
job has no alert at all, pending or firing, once every scaled `for:` has passed, and evaluates every
query of the Grafana dashboard against that Prometheus: each returns series.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlhealth.schemas import job_key
from rlhealth.schemas.topics import TopicCatalog
from rlhealth.sinks.kafka import ensure_topics

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "rlhealth.json"
KILL_CAPTURE = TESTS / "scenarios" / "tail_only_nccl_hang" / "capture"
HEALTHY_CAPTURE = ROOT / "rlhealth" / "examples" / "capture-healthy"

SCRAPE_S = 1.0
EVAL_S = 1.0
FOR_SCALE = 60  # production `for:` durations are divided by this in the test's copy of the rules

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="prometheus server not installed (apt-get install prometheus; `make test-deps`)"),
]

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_s(text: str) -> float:
    """A Prometheus duration ("1m", "1h30m", "90s") in seconds."""
    parts = re.findall(r"(\d+)(ms|s|m|h|d)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNITS[u] for n, u in parts)


def scaled_rules(scale: int) -> tuple[dict, dict[str, float]]:
    """The project's alert rules with every `for:` divided by `scale`; returns (rules, alert -> for seconds)."""
    rules = yaml.safe_load(ALERTS.read_text())
    fors: dict[str, float] = {}
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            secs = max(duration_s(rule.get("for", "0s")) / scale, 0.0)
            rule["for"] = f"{int(round(secs * 1000))}ms"
            fors[rule["alert"]] = secs
    return rules, fors


def test_scaled_rules_keep_expressions_and_scale_every_for() -> None:
    original = yaml.safe_load(ALERTS.read_text())
    rules, fors = scaled_rules(60)
    flat = [r for g in original["groups"] for r in g["rules"]]
    scaled = [r for g in rules["groups"] for r in g["rules"]]
    assert [r["expr"] for r in flat] == [r["expr"] for r in scaled]
    assert [r.get("annotations") for r in flat] == [r.get("annotations") for r in scaled]
    assert fors["RLJobKillRecommended"] == 1.0 and fors["RLJobEscalatedUnanswered"] == 30.0
    assert duration_s("1h30m") == 5400 and duration_s("250ms") == 0.25


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read().decode())


def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.2,
             on_timeout: Callable[[], str] = lambda: "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{on_timeout()}")
        time.sleep(interval)


class Prometheus:
    """A real Prometheus server on 127.0.0.1 with a test-local config and the project's rules."""

    def __init__(self, workdir: Path, metrics_port: int, rules: dict) -> None:
        from test_streaming_worker import free_port

        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "alerts.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
        config = {
            "global": {"scrape_interval": f"{int(SCRAPE_S * 1000)}ms",
                       "evaluation_interval": f"{int(EVAL_S * 1000)}ms",
                       "scrape_timeout": f"{int(SCRAPE_S * 1000)}ms"},
            "rule_files": ["alerts.yaml"],
            # the job name the rules expect (RLHealthWorkerDown matches up{job=~"rlhealth-worker.*"})
            "scrape_configs": [{"job_name": "rlhealth-worker",
                                "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        check = subprocess.run(["promtool", "check", "config", "prometheus.yml"], cwd=workdir,
                               capture_output=True, text=True, timeout=60) if shutil.which("promtool") else None
        assert check is None or check.returncode == 0, check.stdout + check.stderr
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "prometheus.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h"],
            cwd=workdir, stdout=self._log, stderr=subprocess.STDOUT)
        wait_for("prometheus to be ready", self._ready, 60, on_timeout=self.tail)

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited {self.proc.returncode}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        query = ("?" + urllib.parse.urlencode(params)) if params else ""
        body = get_json(f"{self.url}/api/v1/{path}{query}")
        assert body["status"] == "success", body
        return body["data"]

    def alerts(self) -> list[dict]:
        return self.api("alerts")["alerts"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def tail(self, n: int = 30) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


@pytest.fixture
def worker_and_prometheus(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> Iterator[tuple[Any, Any, dict]]:
    sys.path.insert(0, str(TESTS))  # the worker harness of test_streaming_worker
    from test_streaming_worker import PARTITIONS, Worker

    ensure_topics(kafka_bootstrap, TopicCatalog(prefix=topic_prefix, partitions=PARTITIONS))
    rules, fors = scaled_rules(FOR_SCALE)
    worker = Worker(kafka_bootstrap, topic_prefix, tmp_path / "worker.log", core=None, tick=1.0)
    prom = None
    try:
        prom = Prometheus(tmp_path / "prometheus", worker.port, rules)
        yield worker, prom, fors
    finally:
        if prom is not None:
            prom.stop()
        worker.stop()


def replay(capture: Path, bootstrap: str, prefix: str, job_id: str) -> None:
    from test_streaming_worker import PARTITIONS

    out = subprocess.run([sys.executable, "-m", "rlhealth", "replay", str(capture), "--to-kafka", "--bootstrap",
                          bootstrap, "--topic-prefix", prefix, "--no-create-topics", "--job-id", job_id],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "RLHEALTH_PARTITIONS": str(PARTITIONS)})
    assert out.returncode == 0, out.stderr


def job_alerts(alerts: list[dict], job_id: str) -> list[dict]:
    return [a for a in alerts if a["labels"].get("job_id") == job_id]


def test_kill_verdict_fires_in_real_prometheus_and_healthy_job_fires_nothing(
        worker_and_prometheus, kafka_bootstrap: str, topic_prefix: str) -> None:
    worker, prom, fors = worker_and_prometheus
    run = uuid.uuid4().hex[:6]
    kill_job, healthy_job = f"e2e-kill-{run}", f"e2e-healthy-{run}"

    # Prometheus runs the project's rules, all of them, and scrapes the worker.
    loaded = {r["name"] for g in prom.api("rules")["groups"] for r in g["rules"] if r["type"] == "alerting"}
    assert loaded == set(fors), loaded ^ set(fors)
    wait_for("the worker target to be up", lambda: any(
        t["health"] == "up" for t in prom.api("targets")["activeTargets"]), 60, on_timeout=prom.tail)
    worker.wait_caught_up()

    replay(HEALTHY_CAPTURE, kafka_bootstrap, topic_prefix, healthy_job)
    replay(KILL_CAPTURE, kafka_bootstrap, topic_prefix, kill_job)
    # one record the worker cannot use: it is dead-lettered (the dashboard's dead-letter panel has a series)
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    producer.send(TopicCatalog(prefix=topic_prefix, partitions=4).topic_for_kind("log_batch"),
                  key=job_key(healthy_job), value=b"{not json")
    producer.flush(30)
    producer.close()

    kill_series = f'rlhealth_job_verdict_kill{{job_id="{kill_job}"}}'
    wait_for("the worker to export KILL for the kill job", lambda: worker.metrics().get(kill_series) == 1.0, 120,
             interval=0.05, on_timeout=worker.tail)
    t_verdict = time.monotonic()

    def kill_firing() -> list[dict]:
        return [a for a in job_alerts(prom.alerts(), kill_job)
                if a["labels"]["alertname"] == "RLJobKillRecommended" and a["state"] == "firing"]

    (firing,) = wait_for("RLJobKillRecommended to fire for the kill job", kill_firing, 60, interval=0.1,
                         on_timeout=lambda: json.dumps(prom.alerts(), indent=1)[-3000:] + prom.tail())
    latency = time.monotonic() - t_verdict
    # scrape (the sample reaches Prometheus), the scaled `for:`, and two evaluation intervals; plus the
    # polling and a little scheduling slack on a shared two-CPU machine
    bound = SCRAPE_S + fors["RLJobKillRecommended"] + 2 * EVAL_S + 3.0
    sys.stderr.write(f"KILL alert firing {latency:.2f}s after the worker exported the verdict (bound {bound}s)\n")
    assert latency <= bound, (latency, bound)
    assert firing["labels"]["severity"] == "critical"
    assert firing["annotations"]["runbook_url"] == "docs/runbook.md#rljobkillrecommended"
    assert kill_job in firing["annotations"]["summary"]

    # The healthy job: exported and judged NO-KILL, and no alert at all (pending or firing) once every
    # scaled `for:` of the job alerts has had time to pass.
    healthy_series = f'rlhealth_job_verdict_kill{{job_id="{healthy_job}"}}'
    wait_for("the healthy job's verdict", lambda: worker.metrics().get(healthy_series) == 0.0, 60,
             on_timeout=worker.tail)
    t_healthy = time.monotonic()
    longest = max(secs for name, secs in fors.items() if name.startswith("RLJob"))
    while time.monotonic() - t_healthy < longest + 3 * EVAL_S:
        noisy = job_alerts(prom.alerts(), healthy_job)
        assert not noisy, noisy
        assert worker.metrics().get(healthy_series) == 0.0
        time.sleep(1.0)
    assert prom.query(f'rlhealth_job_verdict_kill{{job_id="{healthy_job}"}}') != []  # seen, not absent
    assert prom.query(f'ALERTS{{job_id="{healthy_job}"}}') == []

    # Every dashboard query returns series from this Prometheus, for these two jobs.
    dash = json.loads(DASHBOARD.read_text())
    jobs_re = f"{kill_job}|{healthy_job}"
    empty = []
    checked = 0
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$job_id", jobs_re)
            checked += 1
            if not prom.query(expr):
                empty.append((panel["title"], expr))
    assert checked >= 20 and not empty, empty
    for var in dash["templating"]["list"]:
        m = re.fullmatch(r"label_values\((\w+), (\w+)\)", var.get("definition", ""))
        if m:
            values = prom.api(f"label/{m.group(2)}/values", **{"match[]": m.group(1)})
            assert {kill_job, healthy_job} <= set(values), (var["name"], values)
