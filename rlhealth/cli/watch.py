"""`rlhealth watch DIR...`: follow growing captures or live folders and print each verdict change."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from rlhealth.cli.options import run_every


@click.command()
@click.argument("dirs", nargs=-1, required=True, type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--interval", "interval_secs", type=float, default=30.0, show_default=True,
              help="Seconds between re-reads and re-judgements.")
@click.option("--metrics-port", type=int, default=None, help="Serve Prometheus /metrics on 127.0.0.1:PORT.")
@click.option("--metrics-addr", default="127.0.0.1", show_default=True, help="Address for /metrics.")
@click.option("--db", type=click.Path(path_type=Path, dir_okay=False),
              help="Append evidence and verdicts to this DuckDB file.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--clock", "clock_mode", type=click.Choice(["wall", "capture"]), default="wall", show_default=True,
              help="wall: judge at the current time (live folders); capture: at each capture's captured_at, "
                   "as `probe` does (static captures).")
@click.option("--job-id", "job_ids", multiple=True,
              help="Job id for a bare live folder without capture.json (repeat once per DIR, in order).")
@click.option("--iterations", type=int, default=0, help="Stop after N ticks (0: run until interrupted).")
@click.option("--rules-dir", "rules_dirs", multiple=True, type=click.Path(path_type=Path, file_okay=False),
              help="Extra rule-pack directory (repeatable).")
def watch(dirs: tuple[Path, ...], interval_secs: float, metrics_port: int | None, metrics_addr: str, db: Path | None,
          fmt: str, clock_mode: str, job_ids: tuple[str, ...], iterations: int, rules_dirs: tuple[Path, ...]) -> None:
    """Follow growing captures (or live log/trial folders laid out the same way) in one process.

    Prints every verdict change, serves the per-job Prometheus gauges the streaming worker serves, and
    optionally appends evidence to DuckDB. rlhealth recommends; it never kills.
    """
    from rlhealth.embedded import Watcher
    from rlhealth.runtime import build_core
    from rlhealth.schemas import render_text
    from rlhealth.sources.capture import CaptureError

    core = build_core(tuple(str(d) for d in rules_dirs))
    exporter = store = None
    if metrics_port is not None:
        from rlhealth.sinks.prometheus import JobExporter

        exporter = JobExporter()  # per-job series only: watch has no partitions, lag or dead letters
        port = exporter.serve(metrics_port, metrics_addr)
        click.echo(f"serving /metrics on http://{metrics_addr}:{port}/metrics", err=True)
    if db is not None:
        from rlhealth.sinks.duckdb import EvidenceStore

        store = EvidenceStore(db, snapshot_secs=30.0)  # readers open <db>.snapshot while watch runs
    ids: list[str | None] = list(job_ids) + [None] * (len(dirs) - len(job_ids))
    try:
        watcher = Watcher(core, list(dirs), clock_mode=clock_mode, job_ids=ids, exporter=exporter, store=store)
    except CaptureError as exc:
        click.echo(f"rlhealth watch: {exc}", err=True)
        sys.exit(2)
    def tick() -> None:
        for v in watcher.tick():
            click.echo(v.model_dump_json() if fmt == "json" else render_text(v) + "\n")
        sys.stdout.flush()

    try:
        run_every(interval_secs, iterations, tick)
    finally:
        if store is not None:
            store.close()
        if exporter is not None:
            exporter.shutdown()
