"""`rlhealth report JOB --db STORE --html OUT`: a job's incident report, one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path

import click


def write_report(data, out: Path) -> None:
    """Render `data` (report_model.ReportData) to `out`, stamped with the wall clock."""
    from datetime import UTC, datetime

    from rlhealth.sinks.html_report import render

    try:
        out.write_text(render(data, generated_at=datetime.now(UTC)), encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write {out}: {exc.strerror or exc}") from None


@click.command()
@click.argument("job")
@click.option("--db", "db", required=True, envvar="RLHEALTH_DB", show_envvar=True,
              type=click.Path(path_type=Path, dir_okay=False),
              help="The evidence file (read-only; its <file>.snapshot while a writer holds it).")
@click.option("--html", "out", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="Write the page here (inline CSS and SVG: no script, nothing fetched).")
def report(job: str, db: Path, out: Path) -> None:
    """One job's incident report from the evidence store: verdict history, charts of throughput,
    queues, staleness, trials, reward and restarts on one time axis, and the evidence lines."""
    import duckdb

    from rlhealth.sinks import report_store
    from rlhealth.sinks.duckdb import connect_readonly

    try:
        con = connect_readonly(db)
    except (duckdb.IOException, FileNotFoundError) as exc:
        raise click.ClickException(f"cannot open the evidence store: {str(exc).splitlines()[0]}") from None
    try:
        def query(sql, params):
            return con.execute(sql, list(params)).fetchall()

        data = report_store.load(query, job, str(db))
        if not data.verdicts and not data.metrics and not data.findings:
            known = report_store.job_ids(query)
            hint = f"; jobs in it: {', '.join(known[:10])}{' ...' if len(known) > 10 else ''}" if known else ""
            raise click.ClickException(f"{db}: nothing stored for job {job!r}{hint}")
    except duckdb.Error as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None
    finally:
        con.close()
    write_report(data, out)
    click.echo(f"{out}: {len(data.verdicts)} verdicts, {len(data.metrics)} metric points, "
               f"{len(data.findings)} findings", err=True)
