"""The HTML incident report: the renderer as a pure function, the store reader, and the two commands
(`rlhealth report JOB --db`, `rlhealth probe CAPTURE --html`). The page in a real browser:
tests/test_html_report_browser.py."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from rlhealth.sinks.html_report import CHARTS, changes, render
from rlhealth.sinks.report_model import (
    DeadLetterRow,
    EnginePoint,
    Line,
    MetricRow,
    Problem,
    ReportData,
    VerdictRow,
)
from tests.html_dom import Dom
from tests.scenario_support import ROOT

KILL_CAPTURE = ROOT / "tests" / "scenarios" / "resident_idle_engine" / "capture"
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
EVIL = '<script>alert(1)</script>"><img src=x onerror=alert(2)></style></svg><iframe src="http://x"> & &amp;'


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def verdict(i: int, call: str, escalate: bool = False, gate_b: str = "PASS", text: str = "a line",
            source: str = "logs/pod_rank0.log") -> VerdictRow:
    ev = (Line(event_time=at(60 * i - 5), source=source, text=text, rule_id="vllm.engine_dead", gate="B",
               location=source, offset=1000 + i, line_no=10 + i),)
    return VerdictRow(seq=100 + i, produced_at=at(60 * i), event_time=at(60 * i - 5), age_s=5.0, verdict=call,
                      confidence="high", escalate=escalate, job_status="WEDGED" if call == "KILL" else "ALIVE",
                      gates={"A": "PASS", "B": gate_b, "C": "PASS"}, gate_summaries={"B": f"summary {text}"},
                      why=f"why {text}", kill_command="scancel 42" if call == "KILL" else None, evidence=ev)


def sample(job_id: str = "job-1", text: str = "a line", engine: str = "engine-0", role: str = "trainer",
           source: str = "logs/pod_rank0.log") -> ReportData:
    verdicts = [verdict(0, "NO-KILL", text=text, source=source), verdict(1, "NO-KILL", text=text, source=source),
                verdict(2, "NO-KILL", escalate=True, text=text, source=source),
                verdict(3, "KILL", gate_b="FAIL", text=text, source=source)]
    metrics = []
    for i in range(6):
        metrics.append(MetricRow(
            judged_at=at(40 * i), generation_tokens_per_s=100.0 * i, running=float(i), waiting=float(2 * i),
            staleness_s={role: 10.0 * i, "engine": 5.0}, trials_completed=i, reward_mean=0.1 * i,
            nonzero_reward_ratio=0.5, restarts_burned=0 if i < 4 else 1,
            effective_training_ratio=None if i == 0 else 0.9 - 0.1 * i,
            training_time_s={"productive": 40.0 * i * (0.9 - 0.1 * i), "stalled": 40.0 * i * (0.1 + 0.1 * i)},
            # two buckets per point, overlapping the previous point's: each bucket is plotted once
            engines={engine: tuple(EnginePoint(at(40 * j), 10.0 * j, float(j), 1.0) for j in (i - 1, i) if j >= 0)},
        ))
    findings = [Line(event_time=at(30 * i), source=source, text=f"finding {i} {text}", rule_id=f"rule.{i} {text}",
                     severity=sev, kind="death", location=source, offset=10 * i, line_no=i)
                for i, sev in enumerate(["fatal", "error", "info", "warning", "bogus"])]
    return ReportData(job_id=job_id, origin="store.duckdb", verdicts=verdicts, metrics=metrics, findings=findings)


def circles(dom: Dom, chart: str) -> int:
    return len(dom.find("circle", "pt", inside=chart))


def test_every_chart_has_its_points_and_the_history_its_rows() -> None:
    data = sample()
    dom = Dom(render(data))
    for chart in CHARTS:
        assert dom.by_id(chart) is not None, chart
    n = len(data.metrics)
    assert circles(dom, "chart-throughput") == n  # buckets 0..5, each once although seen twice
    assert circles(dom, "chart-requests") == 2 * n  # running and waiting
    assert circles(dom, "chart-staleness") == 2 * n  # two roles
    assert circles(dom, "chart-trials") == n
    assert circles(dom, "chart-reward") == 2 * n
    assert circles(dom, "chart-restarts") == n
    assert circles(dom, "chart-training-time") == n - 1  # unknown at the first point: no dot, not 0
    assert dom.by_id("training-time").text.startswith("Effective training time: 40% of")  # type: ignore[union-attr]
    for chart in CHARTS[1:]:
        assert int(dom.by_id(chart).attrs["data-points"]) == circles(dom, chart)  # type: ignore[union-attr]
    rows = dom.find("tr", "verdict")
    assert [r.attrs["data-verdict"] for r in rows] == ["NO-KILL", "NO-KILL", "NO-KILL", "KILL"]
    assert [r.attrs["id"] for r in dom.find("tr", "change")] == ["v-0", "v-2", "v-3"]  # the repeat is not a change
    assert dom.by_id("latest-call").text == "KILL"  # type: ignore[union-attr]
    assert dom.by_id("kill-command").text == "scancel 42"  # type: ignore[union-attr]


def test_findings_and_verdict_changes_are_marked_and_link_to_their_rows() -> None:
    data = sample()
    html = render(data)
    dom = Dom(html)
    ids = dom.ids()
    lane_links = [a.attrs["href"] for a in dom.find("a", inside="chart-events")]
    assert sorted(h for h in lane_links if h.startswith("#f-")) == [f"#f-{i}" for i in range(len(data.findings))]
    # each change of verdict is flagged, linked to the evidence lines behind it ...
    assert [h for h in lane_links if h.startswith("#ev-")] == ["#ev-0", "#ev-2", "#ev-3"]
    # ... and is a dashed rule across every value chart, linked to its row of the history
    rules = [a.attrs["href"] for a in dom.find("a", "vmark-link", inside="chart-throughput")]
    assert rules == ["#v-0", "#v-2", "#v-3"] and changes(data.verdicts) == [0, 2, 3]
    # the evidence of each change is listed with its file and offset
    for i in changes(data.verdicts):
        line = dom.by_id(f"ev-{i}-0")
        assert line is not None and f"logs/pod_rank0.log @{1000 + i} (line {11 + i})" in line.text
    # every link of the page points into the page
    for a in dom.find("a"):
        assert a.attrs["href"].startswith("#") and a.attrs["href"][1:] in ids, a.attrs["href"]
    # an unknown severity is drawn as info, never as a class from the data
    assert 'class="mark sev-bogus' not in html and len(dom.find("rect", "sev-info", inside="chart-events")) == 2


def test_log_text_cannot_inject_markup() -> None:
    data = sample(job_id=EVIL, text=EVIL, engine=EVIL, role=EVIL, source=EVIL)
    data.problems.append(Problem(path=EVIL, problem=EVIL, gate="A", note=EVIL, count=1))
    data.dead_letters.append(DeadLetterRow(received_at=T0, reason=EVIL, stage=EVIL, detail=EVIL, origin=EVIL))
    html = render(data)
    dom = Dom(html)
    assert not dom.find("script") and not dom.find("img") and not dom.find("iframe")
    assert all(not k.startswith("on") for e in dom.elements for k in e.attrs)
    assert html.count("<style>") == 1 and html.count("</style>") == 1
    assert EVIL in dom.by_id("job-id").text  # type: ignore[union-attr]  # shown as text, verbatim
    assert EVIL in dom.by_id("latest-why").text  # type: ignore[union-attr]
    assert any(EVIL in e.text for e in dom.find("li", "evline"))
    assert dom.by_id("problems") is not None and dom.by_id("dead-letters") is not None
    assert sum(EVIL in td.text for td in dom.find("td")) >= 7  # problem path/kind/note, dead letter fields
    legend = " ".join(e.text for e in dom.find("span", "key", inside="chart-staleness"))
    assert EVIL in legend
    assert {c.attrs["data-series"] for c in dom.find("circle", "pt", inside="chart-throughput")} == {EVIL}


def test_the_page_is_self_contained() -> None:
    html = render(sample())
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b", html)
    assert "src=" not in html and "url(" not in html and "@import" not in html
    assert not re.search(r"href=\"(?!#)", html)


def test_an_empty_store_still_renders_every_chart() -> None:
    dom = Dom(render(ReportData(job_id="j", origin="-", verdicts=[], metrics=[], findings=[])))
    assert all(dom.by_id(c) is not None for c in CHARTS)
    assert "no verdict stored" in dom.by_id("latest").text  # type: ignore[union-attr]


# -- from the store and the commands ----------------------------------------------------------------

def run_cli(*args: str) -> tuple[int, str, str]:
    from rlhealth.cli import main

    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def kill_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    db = tmp_path_factory.mktemp("store") / "evidence.duckdb"
    code, out, _ = run_cli("probe", str(KILL_CAPTURE), "--db", str(db), "--format", "json")
    assert code == 10
    return db, json.loads(out)


def test_report_from_the_store_shows_the_stored_verdict(kill_store: tuple[Path, dict], tmp_path: Path) -> None:
    db, v = kill_store
    out = tmp_path / "r.html"
    code, _, err = run_cli("report", v["job_id"], "--db", str(db), "--html", str(out))
    assert code == 0, err
    dom = Dom(out.read_text(encoding="utf-8"))
    row = dom.find("tr", "verdict")
    assert len(row) == 1 and row[0].attrs["data-seq"] == str(v["seq"]) and row[0].attrs["data-verdict"] == "KILL"
    assert dom.by_id("latest-call").text == "KILL"  # type: ignore[union-attr]
    with duckdb.connect(str(db), read_only=True) as con:
        (n_lines,) = con.execute("SELECT count(*) FROM evidence_lines WHERE job_id = ?", [v["job_id"]]).fetchone()
        (n_findings,) = con.execute("SELECT count(*) FROM findings WHERE job_id = ?", [v["job_id"]]).fetchone()
        engines = con.execute("SELECT engines FROM metrics WHERE job_id = ?", [v["job_id"]]).fetchall()
    assert len(dom.find("li", "evline")) == n_lines > 0
    assert len(dom.find("tr", "finding")) == n_findings
    buckets = sum(len(b) for (e,) in engines for b in json.loads(e).values())
    assert circles(dom, "chart-throughput") == buckets > 0


def test_report_names_the_jobs_when_asked_for_another(kill_store: tuple[Path, dict], tmp_path: Path) -> None:
    db, v = kill_store
    code, _, err = run_cli("report", "no-such-job", "--db", str(db), "--html", str(tmp_path / "x.html"))
    assert code != 0 and "nothing stored for job 'no-such-job'" in err and v["job_id"] in err
    assert not (tmp_path / "x.html").exists()


def test_a_store_without_per_engine_columns_plots_the_totals(kill_store: tuple[Path, dict], tmp_path: Path) -> None:
    from rlhealth.sinks.report_store import load_file

    db, v = kill_store
    old = tmp_path / "old.duckdb"
    old.write_bytes(db.read_bytes())
    with duckdb.connect(str(old)) as con:  # a file written before the column existed
        con.execute("ALTER TABLE metrics DROP COLUMN engines")
    data = load_file(old, v["job_id"])
    assert data.metrics and not data.metrics[0].engines
    dom = Dom(render(data))
    assert {c.attrs["data-series"] for c in dom.find("circle", "pt", inside="chart-throughput")} == {"all engines"}


def test_probe_html_charts_the_history_and_ends_with_the_probes_verdict(tmp_path: Path) -> None:
    from rlhealth.embedded import judge_along, probe
    from rlhealth.runtime import build_core

    out = tmp_path / "p.html"
    code, stdout, err = run_cli("probe", str(KILL_CAPTURE), "--html", str(out), "--format", "json")
    assert code == 10, err
    v = json.loads(stdout)
    dom = Dom(out.read_text(encoding="utf-8"))
    rows = dom.find("tr", "verdict")
    history = judge_along(KILL_CAPTURE, build_core())  # the same pass, independently
    assert len(rows) == len(history.verdicts) + 1
    assert rows[-1].attrs["data-seq"] == str(v["seq"]) and rows[-1].attrs["data-verdict"] == v["verdict"] == "KILL"
    seqs = [int(r.attrs["data-seq"]) for r in rows]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert [r.attrs["data-verdict"] for r in rows[:-1]] == [h.verdict for h in history.verdicts]
    core = build_core()
    probed = probe(KILL_CAPTURE, core)
    final = core.metrics(probed.state, probed.verdict.produced_at, probed.verdict)
    metrics = [*history.metrics, final]
    assert circles(dom, "chart-trials") == len(metrics)
    assert circles(dom, "chart-staleness") == sum(len(m.log_staleness_s) for m in metrics)
    buckets = {(e, b[0]) for m in metrics for e, bs in m.engines.items() for b in bs}
    assert circles(dom, "chart-throughput") == len(buckets) > 10


def test_a_long_history_draws_every_point_in_the_line_and_a_bounded_number_of_dots() -> None:
    from rlhealth.sinks.svg_chart import MAX_DOTS

    n = 3 * MAX_DOTS
    metrics = [MetricRow(judged_at=at(60 * i), engines={"e0": (EnginePoint(at(60 * i), float(i % 7), 1.0, 0.0),)})
               for i in range(n)]
    dom = Dom(render(ReportData(job_id="j", origin="-", verdicts=[], metrics=metrics, findings=[])))
    chart = dom.by_id("chart-throughput")
    assert chart is not None and int(chart.attrs["data-points"]) == n
    assert circles(dom, "chart-throughput") == int(chart.attrs["data-dots"]) <= MAX_DOTS
    (line,) = dom.find("polyline", inside="chart-throughput")
    assert len(line.attrs["points"].split()) == n


def test_the_history_is_judged_before_the_probe_and_numbered_below_it(tmp_path: Path) -> None:
    from rlhealth.embedded import judge_along
    from rlhealth.runtime import build_core
    from rlhealth.sources.capture import open_capture

    captured = open_capture(KILL_CAPTURE).info.captured_at
    h = judge_along(KILL_CAPTURE, build_core(), seq=1000, points=60)
    times = [m.at for m in h.metrics]
    assert 1 < len(times) <= 60 and times == sorted(times) and all(t < captured for t in times)  # type: ignore[operator]
    assert [v.seq for v in h.verdicts] == list(range(1001, 1001 + len(h.verdicts)))
    assert {v.produced_at for v in h.verdicts} <= set(times)
    # --db keeps its meaning with --html: the probe's one verdict
    db = tmp_path / "e.duckdb"
    code, _, err = run_cli("probe", str(KILL_CAPTURE), "--db", str(db), "--html", str(tmp_path / "r.html"))
    assert code == 10, err
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM verdicts").fetchone() == (1,)


def test_engine_buckets_survive_the_wire_and_the_store(tmp_path: Path) -> None:
    """The worker's metric point (topic JSON) -> the evidence writer's store -> the report's engine points."""
    from rlhealth.agents.findings import JobMetrics
    from rlhealth.schemas.evidence import MetricsPoint
    from rlhealth.sinks.duckdb import EvidenceStore
    from rlhealth.sinks.evidence_records import metrics_point
    from rlhealth.sinks.report_store import load_file

    buckets = {"e0": ((at(0).timestamp(), 100.5, 3.0, 1.0), (at(60).timestamp(), 90.0, 2.0, 0.0)),
               "e1": ((at(30).timestamp(), 0.0, 0.0, 7.0),)}
    m = JobMetrics(job_id="j", log_staleness_s={"trainer": 12.0}, generation_tokens_per_s=190.5, running_requests=5.0,
                   waiting_requests=1.0, trials_completed_total=3, trial_reward_mean=None,
                   trials_nonzero_reward_ratio=None, nccl_watchdog_hits_total=0, oom_events_total=0,
                   ray_worker_deaths_total=0, restarts_burned=0, restarts_max=3, gate_status={}, verdict=None,
                   job_status=None, last_event_time=at(60), at=at(90), engines=buckets)
    wire = MetricsPoint.model_validate_json(metrics_point(m).model_dump_json())
    with EvidenceStore(tmp_path / "e.duckdb") as store:
        store.add_metrics_point(wire)
    (row,) = load_file(tmp_path / "e.duckdb", "j").metrics
    got = {e: tuple((p.at.timestamp(), p.generation_tokens_per_s, p.running, p.waiting) for p in pts)
           for e, pts in row.engines.items()}
    assert got == buckets
    assert row.staleness_s == {"trainer": 12.0} and row.trials_completed == 3


def test_engine_legends_leave_out_what_every_engine_id_shares() -> None:
    from rlhealth.sinks.html_report import short_names

    ids = [f"logs/rl-vllm-{i}.log | APIServer pid=1 | Engine 000" for i in range(3)]
    assert short_names(ids) == {n: f"rl-vllm-{i}.log" for i, n in enumerate(ids)}
    ids = [f"logs/pod_rank1.log | AsyncVLLMInferenceEngine pid={p} | Engine 00{i}" for i, p in enumerate((7, 8))]
    assert list(short_names(ids).values()) == ["AsyncVLLMInferenceEngine pid=7 | Engine 000",
                                               "AsyncVLLMInferenceEngine pid=8 | Engine 001"]
    odd = ["logs/pod_rank1.log", "logs/pod_rank1.log | Engine 000"]  # different shapes: left whole
    assert short_names(odd) == {n: n for n in odd}
