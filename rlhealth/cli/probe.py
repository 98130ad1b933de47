"""`rlhealth probe CAPTURE`: judge one captured job and print its verdict."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from rlhealth.cli.options import parse_rfc3339

EXIT_NO_KILL = 0
EXIT_KILL = 10
EXIT_USAGE = 2


class ProbeProgress:
    """Progress on stderr while a probe reads: bytes and files of the capture's logs (rich)."""

    def __init__(self, capture: Path, min_interval: float = 0.25) -> None:
        import time

        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

        logs = [f for f in (capture / "logs").rglob("*") if f.is_file()] if (capture / "logs").is_dir() else []
        self.sizes = {f.relative_to(capture).as_posix(): f.stat().st_size for f in logs}
        self.total = sum(self.sizes.values())
        self.done: dict[str, int] = {}
        self.events = 0
        self._time = time.monotonic
        self._last = 0.0
        self.min_interval = min_interval
        self.bar = Progress(TextColumn("probe"), BarColumn(), DownloadColumn(), TextColumn("{task.fields[files]}"),
                            TextColumn("{task.fields[events]:,} events"), TimeElapsedColumn(),
                            console=Console(stderr=True), auto_refresh=False, transient=False)
        self.task = self.bar.add_task("logs", total=self.total or None, files=self._files(), events=0)
        self.bar.start()
        self.bar.refresh()

    def _files(self) -> str:
        full = sum(1 for k, n in self.done.items() if n >= self.sizes.get(k, 0))
        return f"files {full}/{len(self.sizes)} read, {len(self.done)} open"

    def event(self, ev) -> None:
        self.events += 1
        offsets = getattr(ev, "offsets", None)
        stream = ev.source.stream if getattr(ev, "source", None) else None
        if offsets and stream:
            end = offsets[-1] + (len(ev.lines[-1].encode("utf-8", "replace")) + 1 if ev.lines else 0)
            self.done[stream] = max(self.done.get(stream, 0), min(end, self.sizes.get(stream, end)))
        now = self._time()
        if now - self._last >= self.min_interval:
            self._last = now
            self.bar.update(self.task, completed=sum(self.done.values()), files=self._files(), events=self.events)
            self.bar.refresh()

    def close(self) -> None:
        self.bar.update(self.task, completed=self.total if self.total else sum(self.done.values()),
                        files=self._files(), events=self.events)
        self.bar.refresh()
        self.bar.stop()




@click.command(epilog="Exit codes: 0 NO-KILL, 10 KILL, 2 usage error or unreadable capture.\n\n"
                       "Environment: RLHEALTH_PROBE_WORKERS=0|N sets the number of log-reading processes "
                       "(default: one per CPU, up to 4, when the capture has 64 MB+ of logs in 2-64 files).")
@click.argument("capture", type=click.Path(path_type=Path, file_okay=False))
@click.option("--now", "now_text", metavar="RFC3339",
              help="Judge as of this time (default: the capture's captured_at).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: the deep probe's verdict block; json: the Verdict model exactly.")
@click.option("--db", type=click.Path(path_type=Path, dir_okay=False),
              help="Append evidence and the verdict to this DuckDB file.")
@click.option("--rules-dir", "rules_dirs", multiple=True, type=click.Path(path_type=Path, file_okay=False),
              help="Extra rule-pack directory (repeatable).")
@click.option("--progress/--no-progress", default=None, help="Progress on stderr (default: when stderr is a terminal).")
@click.option("--html", type=click.Path(path_type=Path, dir_okay=False),
              help="Also write the incident report (one HTML page): the capture also judged along the way "
                   "(a second pass, through the hysteresis as `watch` prints), charted on one time axis.")
def probe(capture: Path, now_text: str | None, fmt: str, db: Path | None, rules_dirs: tuple[Path, ...],
          progress: bool | None, html: Path | None) -> None:
    """Judge one captured job (a capture directory) and print ONE verdict.

    rlhealth recommends; it never kills. Replays the capture through the health core in
    event-time order, with no Kafka and no cluster.
    """
    from rlhealth.agents.render import training_time_text
    from rlhealth.embedded import collect_garbage_rarely, keep_freed_memory, stderr_is_tty
    from rlhealth.embedded import probe as run_probe
    from rlhealth.runtime import build_core
    from rlhealth.schemas import render_text
    from rlhealth.sources.capture import CaptureError

    now = parse_rfc3339(now_text)
    if not capture.is_dir():
        click.echo(f"rlhealth probe: {capture}: not a directory", err=True)
        sys.exit(EXIT_USAGE)
    keep_freed_memory()
    core = build_core(tuple(str(d) for d in rules_dirs))
    collect_garbage_rarely()
    store = None
    if db is not None:
        from rlhealth.sinks.duckdb import EvidenceStore

        store = EvidenceStore(db)
    show = stderr_is_tty() if progress is None else progress
    meter = ProbeProgress(capture) if show else None
    found: list = []

    def on_findings(job_id: str, findings: list) -> None:
        if store is not None:
            store.add_findings(job_id, findings)
        if html is not None:
            found.extend(findings)

    history = None
    from rlhealth.embedded import HISTORY_POINTS, judge_along, run_seq_base

    base = run_seq_base()  # the history's verdicts (--html) are numbered below the probe's
    try:
        result = run_probe(capture, core, now, on_findings=on_findings if store or html else None,
                           progress=meter.event if meter else None, seq=base + HISTORY_POINTS + 1)
        if html is not None:
            if meter is not None:
                meter.close()
                meter = ProbeProgress(capture)  # the second pass, for the report's history
            history = judge_along(capture, core, now, seq=base, progress=meter.event if meter else None)
    except CaptureError as exc:
        click.echo(f"rlhealth probe: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    finally:
        if meter is not None:
            meter.close()
    v = result.verdict
    metrics = core.metrics(result.state, v.produced_at, last=v)
    if store is not None:
        store.add_verdict(v)
        store.add_problems(v.job_id, result.problems)
        store.add_metrics(metrics)
        store.flush()
        if store.dropped["verdicts"]:
            click.echo(f"rlhealth probe: {db}: this verdict (job {v.job_id}, seq {v.seq}) was already stored",
                       err=True)
        store.close()
    if history is not None and html is not None:
        from rlhealth.cli.report import write_report
        from rlhealth.sinks.report_store import from_records

        final = core.metrics(result.state, v.produced_at, last=v)
        write_report(from_records(v.job_id, str(capture), [*history.verdicts, v], [*history.metrics, final], found,
                                  result.problems), html)
        click.echo(f"rlhealth probe: report written to {html}", err=True)
    if fmt == "json":
        click.echo(v.model_dump_json(indent=2))
    else:
        click.echo(render_text(v))
        if metrics.training_time is not None:
            click.echo(training_time_text(metrics.training_time))
        for p in result.problems:
            click.echo(f"note: {p.path}: {p.problem}: {p.note}", err=True)
    sys.exit(EXIT_KILL if v.verdict == "KILL" else EXIT_NO_KILL)
