"""`rlhealth evidence`: canned questions over the DuckDB evidence store (docs/forensics.md)."""

from __future__ import annotations

import csv
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from rlhealth.cli.options import parse_rfc3339

db_option = click.option("--db", "db", required=True, envvar="RLHEALTH_DB", show_envvar=True,
                         type=click.Path(path_type=Path, dir_okay=False),
                         help="The evidence file (read-only; its <file>.snapshot while a writer holds it).")
fmt_option = click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table",
                          show_default=True)




since_option = click.option("--since", metavar="RFC3339", help="Window start (inclusive).")
until_option = click.option("--until", metavar="RFC3339", help="Window end (inclusive).")


def _cell(v: Any) -> Any:
    if isinstance(v, datetime):
        return v.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return v


def _emit(answer, fmt: str) -> None:
    if fmt == "json":
        import orjson

        for row in answer.rows:
            click.echo(orjson.dumps(dict(zip(answer.columns, row)), default=str).decode())
    elif fmt == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(answer.columns)
        w.writerows([[_cell(c) for c in row] for row in answer.rows])
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(*answer.columns, show_lines=False, highlight=False)
        for row in answer.rows:
            table.add_row(*("" if c is None else str(_cell(c)) for c in row))
        Console(width=200).print(table)
        click.echo(f"{len(answer.rows)} rows", err=True)


def _ask(fn, *args: Any, **kwargs: Any):
    import duckdb

    try:
        return fn(*args, **kwargs)
    except (duckdb.IOException, FileNotFoundError) as exc:
        raise click.ClickException(f"cannot open the evidence store: {str(exc).splitlines()[0]}") from None
    except (duckdb.Error, ValueError) as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None


@click.group()
def evidence() -> None:
    """Canned questions over the evidence store written by `probe --db`, `watch --db`, `worker --db`
    or `verdicts --follow --db`. Readable while a writer runs (it reads the writer's snapshot)."""


@evidence.command()
@click.argument("job")
@db_option
@since_option
@until_option
@click.option("--limit", type=int, default=500, show_default=True)
@fmt_option
def timeline(job: str, db: Path, since: str | None, until: str | None, limit: int, fmt: str) -> None:
    """A job's findings and verdicts between two times, in time order."""
    from rlhealth.sinks import forensics

    _emit(_ask(forensics.timeline, db, job, parse_rfc3339(since), parse_rfc3339(until), limit), fmt)


@evidence.command()
@click.argument("job")
@db_option
@click.option("-n", "n", type=int, default=10, show_default=True, help="How many.")
@fmt_option
def verdicts(job: str, db: Path, n: int, fmt: str) -> None:
    """A job's last verdicts, newest first (judging time, event time, age, seq, gates)."""
    from rlhealth.sinks import forensics

    _emit(_ask(forensics.last_verdicts, db, job, n), fmt)


@evidence.command()
@click.argument("rule_glob", default="*")
@db_option
@since_option
@until_option
@click.option("--limit", type=int, default=50, show_default=True)
@fmt_option
def signals(rule_glob: str, db: Path, since: str | None, until: str | None, limit: int, fmt: str) -> None:
    """Every job that hit a rule matching RULE_GLOB (e.g. 'nccl.*') in a window; top signals first."""
    from rlhealth.sinks import forensics

    _emit(_ask(forensics.signal_hits, db, rule_glob, parse_rfc3339(since), parse_rfc3339(until), limit), fmt)


@evidence.command()
@click.argument("job")
@click.argument("seq", type=int, required=False)
@db_option
@fmt_option
def behind(job: str, seq: int | None, db: Path, fmt: str) -> None:
    """The evidence lines behind a verdict of JOB (SEQ; default its newest), with file/topic offsets."""
    from rlhealth.sinks import forensics

    _emit(_ask(forensics.behind, db, job, seq), fmt)


@evidence.command()
@db_option
@since_option
@until_option
@click.option("--verdict", type=click.Choice(["KILL", "NO-KILL"]), default=None)
@click.option("--gate", default=None, metavar="A|B|C=STATUS", help="e.g. A=FAIL")
@fmt_option
def jobs(db: Path, since: str | None, until: str | None, verdict: str | None, gate: str | None, fmt: str) -> None:
    """Jobs by their newest verdict in a window, filtered by verdict and gate status."""
    from rlhealth.sinks import forensics

    _emit(_ask(forensics.jobs, db, parse_rfc3339(since), parse_rfc3339(until), verdict, gate), fmt)


@evidence.command("sql")
@click.argument("statement")
@db_option
@fmt_option
def sql_cmd(statement: str, db: Path, fmt: str) -> None:
    """Run one read-only SQL statement (tables: docs/forensics.md)."""
    from rlhealth.sinks import forensics

    _emit(_ask(forensics.sql, db, statement), fmt)


@evidence.command()
@db_option
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Directory for <table>/job_id=<id>/*.parquet (dead_letters.parquet).")
@click.option("--table", "tables", multiple=True, help="Only these tables (repeatable).")
def export(db: Path, out_dir: Path, tables: tuple[str, ...]) -> None:
    """Export the store to Parquet, partitioned by job (DuckDB, Spark, pandas read it as is)."""
    from rlhealth.sinks import forensics
    from rlhealth.sinks.duckdb import TABLES

    written = _ask(forensics.export_parquet, db, out_dir, tables or TABLES)
    for table, path in written.items():
        click.echo(f"{table}\t{path}")
