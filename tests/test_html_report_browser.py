"""The incident report of a KILL scenario in a real browser: Debian's Chromium, headless, reads the
page from disk with networking off; the test reads the DOM Chromium built (`--dump-dom`) and takes a
screenshot. Chromium comes from `make test-deps` (apt-get install chromium). Without it the test is
skipped, except in CI (`CI` set), where it must run: there a missing browser fails it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from rlhealth.sinks.html_report import CHARTS
from tests.html_dom import Dom
from tests.scenario_support import ROOT

CHROMIUM = Path("/usr/bin/chromium")
KILL_CAPTURE = ROOT / "tests" / "scenarios" / "resident_idle_engine" / "capture"
IN_CI = bool(os.environ.get("CI"))

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists() and not IN_CI,
    reason="chromium not installed at /usr/bin/chromium (apt-get install chromium; `make test-deps`); "
           "skipped outside CI only")


def chromium(profile: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    assert CHROMIUM.exists(), "chromium is missing at /usr/bin/chromium: `make test-deps` installs it (CI)"
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"chromium exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def kill_report(tmp_path_factory: pytest.TempPathFactory):
    """The report `probe --html` writes for a KILL scenario, and the data it was drawn from."""
    from rlhealth.cli import main
    from rlhealth.embedded import judge_along, probe
    from rlhealth.runtime import build_core

    out = tmp_path_factory.mktemp("report") / "report.html"
    result = CliRunner().invoke(main, ["probe", str(KILL_CAPTURE), "--html", str(out)], catch_exceptions=False)
    assert result.exit_code == 10, result.stderr
    core = build_core()
    history = judge_along(KILL_CAPTURE, core)
    probed = probe(KILL_CAPTURE, core)
    metrics = [*history.metrics, core.metrics(probed.state, probed.verdict.produced_at, probed.verdict)]
    return out, history, probed, metrics


def test_kill_report_renders_in_chromium(kill_report, tmp_path: Path) -> None:
    out, history, probed, metrics = kill_report
    proc = chromium(tmp_path / "profile", "--dump-dom", out.resolve().as_uri())
    dom = Dom(proc.stdout)
    assert dom.find("main"), proc.stdout[:500]

    # every chart, each with the points of its series
    for chart in CHARTS:
        assert dom.by_id(chart) is not None, chart
        assert dom.find("svg", inside=chart), chart

    def points(chart: str) -> int:
        return len(dom.find("circle", "pt", inside=chart))

    buckets = {(e, b[0]) for m in metrics for e, bs in m.engines.items() for b in bs}
    assert points("chart-throughput") == len(buckets) > 0
    assert points("chart-requests") == 2 * len(buckets)
    assert points("chart-staleness") == sum(len(m.log_staleness_s) for m in metrics)
    assert points("chart-trials") == len(metrics)
    assert points("chart-reward") == sum((m.trial_reward_mean is not None) + (m.trials_nonzero_reward_ratio is not None)
                                         for m in metrics)
    assert points("chart-restarts") == sum(m.restarts_burned is not None for m in metrics)
    assert points("chart-training-time") == sum(m.training_time is not None and m.training_time.ratio is not None
                                                for m in metrics)
    engines = {c.attrs["data-series"] for c in dom.find("circle", "pt", inside="chart-throughput")}
    assert engines == {e for e, _ in buckets}

    # the verdict history: one row per change of key facts, then the probe's own verdict, KILL
    rows = dom.find("tr", "verdict")
    assert len(rows) == len(history.verdicts) + 1
    assert rows[-1].attrs["data-verdict"] == probed.verdict.verdict == "KILL"
    assert [r.attrs["data-verdict"] for r in rows[:-1]] == [v.verdict for v in history.verdicts]
    assert dom.by_id("latest-call").text.strip() == "KILL"  # type: ignore[union-attr]
    assert "KILL" in dom.by_id("latest-why").text  # type: ignore[union-attr]
    assert dom.by_id("kill-command") is not None

    # evidence anchors: each change of verdict lists its lines with their file offsets, and every
    # link of the page (chart marks, history rows) lands on an element Chromium built
    last = len(rows) - 1
    lines = dom.find("li", "evline", inside=f"ev-{last}")
    n_evidence = len(probed.verdict.evidence) + sum(len(getattr(probed.verdict.gates, k).evidence) for k in "ABC")
    assert len(lines) == n_evidence > 0
    assert any("@" in e.text and "logs/" in e.text for e in lines)
    ids = dom.ids()
    links = [a.attrs["href"] for a in dom.find("a")]
    assert any(h.startswith("#f-") for h in links) and any(h.startswith("#v-") for h in links)
    assert all(h.startswith("#") and h[1:] in ids for h in links)
    kill_marks = [a for a in dom.find("a", inside="chart-events") if any(
        "v-kill" in e.classes for e in dom.elements if e.parents and e.parents[-1] is a)]
    assert kill_marks, "the KILL is marked on the timeline"
    for a in kill_marks:  # and links to the evidence lines behind it
        assert a.attrs["href"].startswith("#ev-") and dom.find("li", "evline", inside=a.attrs["href"][1:])
    assert not dom.find("script")


def test_kill_report_screenshot(kill_report, tmp_path: Path) -> None:
    out = kill_report[0]
    shot = tmp_path / "report.png"
    chromium(tmp_path / "profile", f"--screenshot={shot}", "--window-size=1200,1900", "--hide-scrollbars",
             out.resolve().as_uri())
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1200, 1900)
    assert len(data) > 50_000  # a page with charts, not a blank one
