"""The incident report: one self-contained HTML page per job (inline CSS and SVG, no script, nothing
fetched), rendered by `render(ReportData)`, a pure function.

Top to bottom: the newest verdict (why, gates, kill command, next steps); on one shared time axis the
verdict changes and findings, generation tok/s and Running/Waiting per engine, log staleness per
role, trial completions, reward, restarts; the verdict history; the evidence lines behind each change
of verdict with their file or Kafka offsets; every finding; source problems and dead letters.
Marks in the charts link to those rows (`#v-N`, `#ev-N-I`, `#f-N`). Every string from a log, a
capture or the store goes through `esc`, so a log line cannot inject markup.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from rlhealth.sinks.report_model import Line, MetricRow, ReportData, VerdictRow
from rlhealth.sinks.svg_chart import (
    PALETTE,
    Axis,
    Lane,
    Marker,
    Series,
    duration,
    esc,
    lane_chart,
    line_chart,
)

SEVERITIES = ("fatal", "error", "warning", "info")
GATE_NAMES = {"A": "liveness", "B": "resources", "C": "rollouts"}
# Ids of the charts, in page order (tests and readers find them by these).
CHARTS = ("chart-events", "chart-throughput", "chart-requests", "chart-staleness", "chart-trials", "chart-reward",
          "chart-training-time", "chart-restarts")

CSS = """
:root { --kill: #c62828; --ok: #2e7d32; --warn: #ef6c00; --unknown: #757575; --ink: #1d2330; --mute: #5f6b7a;
        --line: #dde3ea; --bg: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 "DejaVu Sans", "Helvetica Neue", Arial, sans-serif; color: var(--ink);
       background: #fff; }
main { max-width: 1140px; margin: 0 auto; padding: 18px 24px 48px; }
h1 { font-size: 20px; margin: 0 0 2px; } h2 { font-size: 16px; margin: 28px 0 8px; border-bottom: 1px solid var(--line);
     padding-bottom: 4px; }
.sub { color: var(--mute); font-size: 12px; }
.card { border: 1px solid var(--line); border-left: 6px solid var(--unknown); border-radius: 6px; padding: 12px 16px;
        margin-top: 14px; background: var(--bg); }
.card.kill { border-left-color: var(--kill); } .card.nokill { border-left-color: var(--ok); }
.call { font-size: 22px; font-weight: bold; } .call.kill { color: var(--kill); } .call.nokill { color: var(--ok); }
.badge { display: inline-block; padding: 1px 7px; border-radius: 9px; font-size: 12px; font-weight: bold;
         color: #fff; background: var(--unknown); vertical-align: middle; margin-left: 4px; }
.badge.escalate { background: var(--warn); } .badge.held { background: #6a1b9a; }
.st { font-weight: bold; } .st.PASS { color: var(--ok); } .st.FAIL { color: var(--kill); }
.st.UNKNOWN { color: var(--unknown); }
.why { font-size: 15px; margin: 6px 0; }
.gates { margin: 6px 0; padding-left: 18px; } .gates li { margin: 2px 0; }
code, .mono { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12px; }
.cmd { background: #fff3f3; border: 1px solid #f3c4c4; padding: 4px 8px; border-radius: 4px; display: inline-block; }
figure.chart { margin: 10px 0 4px; } figcaption { font-weight: bold; font-size: 13px; margin-bottom: 2px; }
svg { display: block; overflow: visible; }
svg .plot { fill: #fbfcfd; stroke: var(--line); } svg .grid, svg .ygrid { stroke: #eef1f4; }
svg .tick, svg .lane-name, svg .mark-label, svg .empty { font-size: 10px; fill: var(--mute); }
svg .mark-label { font-size: 10px; fill: var(--ink); font-weight: bold; }
svg .line { fill: none; stroke-width: 1.6; } svg .line.dashed { stroke-dasharray: 5 3; }
svg .vmark { stroke-width: 1.2; stroke-dasharray: 3 3; } svg .vmark.v-kill { stroke: var(--kill); }
svg .vmark.v-nokill { stroke: var(--ok); } svg .vmark.v-escalate { stroke: var(--warn); }
svg .mark.v-kill { fill: var(--kill); } svg .mark.v-nokill { fill: var(--ok); }
svg .mark.v-escalate { fill: var(--warn); }
svg .mark.sev-fatal { fill: var(--kill); } svg .mark.sev-error { fill: #e57373; }
svg .mark.sev-warning { fill: var(--warn); } svg .mark.sev-info { fill: #90a4ae; }
.legend { font-size: 11px; color: var(--mute); margin: 2px 0 0 64px; }
.legend .key { margin-right: 14px; white-space: nowrap; }
.swatch { display: inline-block; width: 18px; height: 0; border-top: 2px solid; vertical-align: middle;
          margin-right: 4px; }
.swatch.dashed { border-top-style: dashed; }
table { border-collapse: collapse; width: 100%; font-size: 12px; }
th { text-align: left; background: var(--bg); border-bottom: 1px solid var(--line); padding: 4px 6px; }
td { border-bottom: 1px solid #eef1f4; padding: 3px 6px; vertical-align: top; }
tr.change td { background: #fffbe6; } tr:target td, li:target { background: #e3f2fd; }
td.text, li .text { word-break: break-word; }
.evblock { margin: 10px 0; } .evblock h3 { font-size: 13px; margin: 0 0 4px; }
.evblock ol { margin: 0; padding-left: 22px; } .evblock li { margin: 2px 0; }
.loc { color: var(--mute); }
.note { color: var(--mute); font-size: 12px; }
tr.sev-fatal td:nth-child(2) { color: var(--kill); font-weight: bold; } tr.sev-error td:nth-child(2) { color: #e57373; }
tr.sev-warning td:nth-child(2) { color: var(--warn); }
.nowrap { white-space: nowrap; } td.seq { font-size: 10px; color: var(--mute); }
"""


def _ts(t: datetime | None) -> float | None:
    return t.timestamp() if t is not None else None


def _stamp(t: datetime | None) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ") if t is not None else "-"


def _age(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 60:
        return f"{s:.3g}s"
    m = int(s // 60)
    return f"{m}m {int(s % 60):02d}s" if m < 60 else f"{m // 60}h {m % 60:02d}m"


def _call_css(v: VerdictRow) -> str:
    return "kill" if v.verdict == "KILL" else "nokill"


def _mark_css(v: VerdictRow) -> str:
    if v.verdict == "KILL":
        return "v-kill"
    return "v-escalate" if v.escalate else "v-nokill"


def _status(s: str) -> str:
    s = s if s in ("PASS", "FAIL", "UNKNOWN") else "UNKNOWN"
    return f'<span class="st {s}">{s}</span>'


def _severity(f: Line) -> str:
    s = (f.severity or "info").lower()
    return "warning" if s == "warn" else (s if s in SEVERITIES else "info")


def changes(verdicts: Sequence[VerdictRow]) -> list[int]:
    """Indexes of the verdicts that changed the call (verdict, escalate) or a gate status: the marked ones."""
    out = []
    for i, v in enumerate(verdicts):
        prev = verdicts[i - 1] if i else None
        if prev is None or (prev.verdict, prev.escalate, prev.gates) != (v.verdict, v.escalate, v.gates):
            out.append(i)
    return out


def _where(line: Line) -> str:
    """Where to find the line again: its file (or topic[partition]) unless that is its source, the offset, the line."""
    if not line.location:
        return ""
    out = esc(line.location) if line.location != line.source else ""
    if line.offset is not None:
        out += f" @{line.offset}"
    if line.line_no is not None:
        out += f" (line {line.line_no + 1})"
    return f'<span class="loc mono">{out.strip()}</span>'


# -- sections ---------------------------------------------------------------------------------------

def _training_time(m: MetricRow | None) -> str:
    """The job's effective training time so far and where the rest of its time went."""
    if m is None or not m.training_time_s:
        return ""
    ratio = "unknown" if m.effective_training_ratio is None else f"{m.effective_training_ratio:.0%}"
    total = sum(m.training_time_s.values())
    parts = " · ".join(f"{esc(k.replace('_', '-'))} {duration(v)}" for k, v in m.training_time_s.items() if v >= 1)
    return (f'<p class="sub" id="training-time">Effective training time: <b>{ratio}</b> of {duration(total)}'
            f'{" (" + parts + ")" if parts else ""}</p>')


def _latest(v: VerdictRow | None, anchor: int | None) -> str:
    if v is None:
        return '<section class="card" id="latest"><div class="call">no verdict stored for this job</div></section>'
    css = _call_css(v)
    badges = ('<span class="badge escalate">ESCALATE</span>' if v.escalate else "") + \
             ('<span class="badge held">HELD</span>' if v.held else "")
    gates = "".join(f'<li>Gate {k} ({GATE_NAMES[k]}): {_status(v.gates.get(k, "UNKNOWN"))} '
                    f'{esc(v.gate_summaries.get(k, ""))}</li>' for k in "ABC")
    steps = "".join(f"<li>{esc(s)}</li>" for s in v.next_steps)
    parts = [f'<section class="card {css}" id="latest">',
             f'<div><span class="call {css}" id="latest-call">{esc(v.verdict)}</span>{badges} '
             f'<span class="sub">confidence {esc(v.confidence)} · job {esc(v.job_status)} · seq {v.seq}'
             f' · judged {_stamp(v.produced_at)} · events to {_stamp(v.event_time)} · age {_age(v.age_s)}</span></div>',
             f'<div class="why" id="latest-why">{esc(v.why)}</div>']
    if v.headline:
        parts.append(f'<div class="sub">{esc(v.headline)}</div>')
    parts.append(f'<ul class="gates">{gates}</ul>')
    if v.root_cause:
        parts.append(f'<div id="root-cause"><b>Root cause</b>: {esc(v.root_cause)}</div>')
    if v.held:
        parts.append(f'<div class="note">held: {esc(v.held)}</div>')
    if v.kill_command:
        parts.append('<div>Kill command, for the supervisor (rlhealth never runs it): '
                     f'<code class="cmd" id="kill-command">{esc(v.kill_command)}</code></div>')
    if steps:
        parts.append(f"<div><b>Next steps</b><ol>{steps}</ol></div>")
    if anchor is not None:
        parts.append(f'<div class="note"><a href="#v-{anchor}">in the history</a> · '
                     f'<a href="#ev-{anchor}">its evidence</a></div>')
    parts.append("</section>")
    return "".join(parts)


def short_names(names: Sequence[str]) -> dict[str, str]:
    """Engine ids for a legend: the " | " parts every id shares are left out, and a directory they all
    share ("logs/"), so "logs/x-vllm-0.log | APIServer pid=1 | Engine 000" reads "x-vllm-0.log"."""
    split = [n.split(" | ") for n in names]
    if len(names) < 2 or len({len(p) for p in split}) != 1:
        return {n: n for n in names}
    keep = [i for i in range(len(split[0])) if len({p[i] for p in split}) > 1]
    short = [" | ".join(p[i] for i in keep) for p in split]
    head = short[0].rsplit("/", 1)[0] + "/" if "/" in short[0] else ""
    if head and all(s.startswith(head) for s in short):
        short = [s[len(head):] for s in short]
    if len(set(short)) != len(short) or not all(short):
        return {n: n for n in names}
    return dict(zip(names, short))


def _engine_series(metrics: Sequence[MetricRow]) -> tuple[list[Series], list[Series]]:
    per: dict[str, dict[float, tuple[float, float, float]]] = {}
    for m in metrics:  # in judging order: a bucket seen again later holds its final means
        for eid, buckets in m.engines.items():
            for e in buckets:
                per.setdefault(eid, {})[e.at.timestamp()] = (e.generation_tokens_per_s, e.running, e.waiting)
    gen: list[Series] = []
    req: list[Series] = []
    label = short_names(sorted(per))
    for i, eid in enumerate(sorted(per)):
        pts = sorted(per[eid].items())
        color = PALETTE[i % len(PALETTE)]
        gen.append(Series(eid, [(t, g) for t, (g, _, _) in pts], color, label=label[eid]))
        req.append(Series(f"{eid} running", [(t, r) for t, (_, r, _) in pts], color, label=f"{label[eid]} running"))
        req.append(Series(f"{eid} waiting", [(t, w) for t, (_, _, w) in pts], color, dashed=True,
                          label=f"{label[eid]} waiting"))
    if not per:  # a store written before per-engine stats: the sum over engines at each judgement
        def total(attr: str) -> list[tuple[float, float]]:
            return [(m.judged_at.timestamp(), float(getattr(m, attr))) for m in metrics
                    if getattr(m, attr) is not None]

        if total("generation_tokens_per_s"):
            gen.append(Series("all engines", total("generation_tokens_per_s"), PALETTE[0]))
            req.append(Series("all engines running", total("running"), PALETTE[0]))
            req.append(Series("all engines waiting", total("waiting"), PALETTE[0], dashed=True))
    return gen, req


def _metric(metrics: Iterable[MetricRow], attr: str) -> list[tuple[float, float]]:
    return [(m.judged_at.timestamp(), float(getattr(m, attr))) for m in metrics if getattr(m, attr) is not None]


def _charts(data: ReportData, marked: list[int]) -> str:
    verdicts, metrics = data.verdicts, data.metrics
    gen, req = _engine_series(metrics)
    roles = sorted({r for m in metrics for r in m.staleness_s})
    stale = [Series(role, [(m.judged_at.timestamp(), m.staleness_s[role]) for m in metrics if role in m.staleness_s],
                    PALETTE[i % len(PALETTE)]) for i, role in enumerate(roles)]
    times = [t for s in (*gen, *req, *stale) for t, _ in s.points]
    times += [m.judged_at.timestamp() for m in metrics]
    times += [v.produced_at.timestamp() for v in verdicts]
    times += [t for f in data.findings if (t := _ts(f.event_time)) is not None]
    axis = Axis.spanning(times)
    vmarks = [Marker(verdicts[i].produced_at.timestamp(), f"#ev-{i}",
                     f"{verdicts[i].verdict}{' + escalate' if verdicts[i].escalate else ''} · seq {verdicts[i].seq}"
                     f" · {_stamp(verdicts[i].produced_at)}", _mark_css(verdicts[i]),
                     label=verdicts[i].verdict + ("+E" if verdicts[i].escalate else ""))
              for i in marked]
    lanes = [Lane("verdict", vmarks)]
    for sev in SEVERITIES:
        ms = [Marker(t, f"#f-{n}", f"{f.rule_id} · {_stamp(f.event_time)} · {f.source}", f"sev-{sev}")
              for n, f in enumerate(data.findings)
              if _severity(f) == sev and (t := _ts(f.event_time)) is not None]
        lanes.append(Lane(sev, ms))
    # the verdict changes across every chart, linked to their rows of the history
    rules = [Marker(m.t, f"#v-{i}", m.title, m.css) for i, m in zip(marked, vmarks)]
    out = [lane_chart("chart-events", "Verdict changes and findings (by severity)", axis, lanes),
           line_chart("chart-throughput", "Generation throughput per engine", axis, gen, unit="tok/s", vmarks=rules),
           line_chart("chart-requests", "Requests per engine: Running (solid) and Waiting (dashed)", axis, req,
                      unit="requests", vmarks=rules),
           line_chart("chart-staleness", "Log staleness per role (time since its last line)", axis, stale,
                      fmt=duration, vmarks=rules),
           line_chart("chart-trials", "Trials completed (cumulative)", axis,
                      [Series("trials completed", _metric(metrics, "trials_completed"), PALETTE[2], step=True)],
                      unit="trials", vmarks=rules),
           line_chart("chart-reward", "Reward: mean and share of trials with a non-zero reward", axis,
                      [Series("reward mean", _metric(metrics, "reward_mean"), PALETTE[3]),
                       Series("non-zero share", _metric(metrics, "nonzero_reward_ratio"), PALETTE[1], dashed=True)],
                      vmarks=rules),
           line_chart("chart-training-time", "Effective training time (share of wall-clock time in productive "
                      "steps, so far)", axis,
                      [Series("effective training time", _metric(metrics, "effective_training_ratio"), PALETTE[4])],
                      vmarks=rules, height=110),
           line_chart("chart-restarts", "Restarts burned", axis,
                      [Series("restarts burned", _metric(metrics, "restarts_burned"), PALETTE[9], step=True)],
                      vmarks=rules, height=110)]
    if data.metrics_total > len(metrics):
        out.append(f'<p class="note">{len(metrics)} of {data.metrics_total} metric points shown (evenly thinned).</p>')
    return "".join(out)


def _evidence_label(v: VerdictRow, change: VerdictRow, own: bool) -> str:
    if own:
        return f"{len(v.evidence)} lines"
    return "as at " + change.produced_at.astimezone(UTC).strftime("%H:%M:%S")


def _history(verdicts: Sequence[VerdictRow], marked: set[int], total: int) -> str:
    rows = []
    for i, v in enumerate(verdicts):
        change = i in marked
        ref = max((j for j in marked if j <= i), default=i)  # a repeat shares its change's evidence
        call = (f'<span class="call-cell {_call_css(v)}"><b>{esc(v.verdict)}</b></span>'
                f'{" + escalate" if v.escalate else ""}')
        gates = "<br>".join(f"{k} {_status(v.gates.get(k, 'UNKNOWN'))}" for k in "ABC")
        held = f'<div class="note">held: {esc(v.held)}</div>' if v.held else ""
        rows.append(
            f'<tr id="v-{i}" class="verdict{" change" if change else ""}" data-verdict="{esc(v.verdict)}" '
            f'data-escalate="{str(v.escalate).lower()}" data-seq="{v.seq}">'
            f'<td class="mono nowrap">{_stamp(v.produced_at)}</td><td class="mono nowrap">{_age(v.age_s)}</td>'
            f'<td class="mono seq">{v.seq}</td><td class="nowrap">{call}</td><td>{esc(v.confidence)}</td>'
            f'<td>{esc(v.job_status)}</td><td class="mono nowrap">{gates}</td>'
            f'<td class="text">{esc(v.why)}{held}</td>'
            f'<td class="nowrap"><a href="#ev-{ref}">{_evidence_label(v, verdicts[ref], ref == i)}</a></td></tr>')
    note = (f'<p class="note">the newest {len(verdicts)} of {total} verdicts.</p>' if total > len(verdicts) else "")
    return (f'<h2 id="history">Verdict history ({len(verdicts)})</h2>{note}'
            '<table id="verdicts"><thead><tr><th>judged (UTC)</th><th>age</th><th>seq</th><th>call</th>'
            '<th>confidence</th><th>job</th><th>gates</th><th>why</th><th>evidence</th></tr></thead><tbody>'
            + "".join(rows) + "</tbody></table>")


def _evidence(verdicts: Sequence[VerdictRow], marked: list[int]) -> str:
    blocks = []
    for i in marked:
        v = verdicts[i]
        items = []
        for idx, e in enumerate(v.evidence):
            part = "verdict" if not e.gate else f"gate {esc(e.gate)}"
            items.append(f'<li id="ev-{i}-{idx}" class="evline"><span class="mono">{_stamp(e.event_time)}</span> '
                         f'[{part}] <b>{esc(e.source)}</b> {_where(e)}'
                         f'{" <code>" + esc(e.rule_id) + "</code>" if e.rule_id else ""}'
                         f'<div class="text mono">{esc(e.text)}</div></li>')
        body = f"<ol>{''.join(items)}</ol>" if items else '<p class="note">no evidence lines stored</p>'
        blocks.append(f'<div class="evblock" id="ev-{i}"><h3><a href="#v-{i}">{esc(v.verdict)}'
                      f'{" + escalate" if v.escalate else ""} · seq {v.seq} · {_stamp(v.produced_at)}</a></h3>'
                      f"{body}</div>")
    return '<h2 id="evidence">Evidence behind each change of verdict</h2>' + "".join(blocks)


def _findings(findings: Sequence[Line], total: int) -> str:
    rows = [f'<tr id="f-{n}" class="finding sev-{_severity(f)}"><td class="mono">{_stamp(f.event_time)}</td>'
            f'<td>{esc(_severity(f))}</td><td><code>{esc(f.rule_id)}</code></td><td>{esc(f.kind)}</td>'
            f'<td>{esc(f.source)}<br>{_where(f)}</td><td class="text mono">{esc(f.text)}</td></tr>'
            for n, f in enumerate(findings)]
    note = (f'<p class="note">{len(findings)} of {total} findings shown (the most severe first; '
            '`rlhealth evidence timeline` lists them all).</p>' if total > len(findings) else "")
    return (f'<h2 id="findings">Findings ({total})</h2>{note}<table id="findings-table"><thead><tr><th>time (UTC)</th>'
            '<th>severity</th><th>rule</th><th>kind</th><th>source / offset</th><th>line</th></tr></thead><tbody>'
            + "".join(rows) + "</tbody></table>")


def _problems(data: ReportData) -> str:
    out = []
    if data.problems:
        out.append('<h2 id="problems">Source problems</h2><table><thead><tr><th>path</th><th>problem</th>'
                   '<th>gate</th><th>count</th><th>note</th></tr></thead><tbody>'
                   + "".join(f"<tr><td class='mono'>{esc(p.path)}</td><td>{esc(p.problem)}</td><td>{esc(p.gate)}</td>"
                             f"<td>{p.count}</td><td class='text'>{esc(p.note)}</td></tr>" for p in data.problems)
                   + "</tbody></table>")
    if data.dead_letters:
        out.append('<h2 id="dead-letters">Dead letters</h2><table><thead><tr><th>received (UTC)</th><th>reason</th>'
                   '<th>stage</th><th>record</th><th>detail</th></tr></thead><tbody>'
                   + "".join(f"<tr><td class='mono'>{_stamp(d.received_at)}</td><td>{esc(d.reason)}</td>"
                             f"<td>{esc(d.stage)}</td><td class='mono'>{esc(d.origin)}</td>"
                             f"<td class='text'>{esc(d.detail)}</td></tr>" for d in data.dead_letters)
                   + "</tbody></table>")
    return "".join(out)


def render(data: ReportData, generated_at: datetime | None = None) -> str:
    """The whole page. `generated_at` is printed as is (pass the clock's time; none = not printed)."""
    marked = changes(data.verdicts)
    last = len(data.verdicts) - 1 if data.verdicts else None
    if last is not None and last not in marked:
        marked.append(last)  # the newest verdict's evidence is always listed
    latest = data.verdicts[-1] if data.verdicts else None
    gen = f" · generated {_stamp(generated_at)}" if generated_at else ""
    title = f"rlhealth: {data.job_id}" + (f" — {latest.verdict}" if latest else "")
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>",
        f'<h1>Incident report: <span id="job-id">{esc(data.job_id)}</span></h1>',
        f'<div class="sub">from {esc(data.origin)}{gen} · rlhealth recommends; people own the kill.</div>',
        _latest(latest, last),
        _training_time(data.metrics[-1] if data.metrics else None),
        '<h2 id="timeline">Timeline</h2>',
        _charts(data, marked),
        _history(data.verdicts, set(marked), data.verdicts_total or len(data.verdicts)),
        _evidence(data.verdicts, marked),
        _findings(data.findings, data.findings_total or len(data.findings)),
        _problems(data),
        "</main></body></html>\n",
    ])


__all__ = ["CHARTS", "changes", "render"]
