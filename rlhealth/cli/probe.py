"""`rlhealth probe CAPTURE`: judge one captured job and print its verdict."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import click

EXIT_NO_KILL = 0
EXIT_KILL = 10
EXIT_USAGE = 2


def _parse_now(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise click.BadParameter(f"not an RFC 3339 time: {value}") from exc
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


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
def probe(capture: Path, now_text: str | None, fmt: str, db: Path | None, rules_dirs: tuple[Path, ...],
          progress: bool | None) -> None:
    """Judge one captured job (a capture directory) and print ONE verdict.

    rlhealth recommends; it never kills. Replays the capture through the health core in
    event-time order, with no Kafka and no cluster.
    """
    from rlhealth.embedded import probe as run_probe
    from rlhealth.embedded import stderr_is_tty
    from rlhealth.runtime import build_core
    from rlhealth.schemas import render_text
    from rlhealth.sources.capture import CaptureError

    now = _parse_now(now_text)
    if not capture.is_dir():
        click.echo(f"rlhealth probe: {capture}: not a directory", err=True)
        sys.exit(EXIT_USAGE)
    core = build_core(tuple(str(d) for d in rules_dirs))
    store = None
    if db is not None:
        from rlhealth.sinks.duckdb import EvidenceStore

        store = EvidenceStore(db)
    show = stderr_is_tty() if progress is None else progress
    counter = {"n": 0}

    def tick(_event) -> None:
        counter["n"] += 1
        if counter["n"] % 2000 == 0:
            click.echo(f"\r  {counter['n']:,} events", err=True, nl=False)

    try:
        result = run_probe(capture, core, now, on_findings=store.add_findings if store else None,
                           progress=tick if show else None)
    except CaptureError as exc:
        click.echo(f"rlhealth probe: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    finally:
        if show:
            click.echo("", err=True)
    if store is not None:
        store.add_verdict(result.verdict)
        store.close()
    v = result.verdict
    if fmt == "json":
        click.echo(v.model_dump_json(indent=2))
    else:
        click.echo(render_text(v))
        for p in result.problems:
            click.echo(f"note: {p.path}: {p.problem}: {p.note}", err=True)
    sys.exit(EXIT_KILL if v.verdict == "KILL" else EXIT_NO_KILL)
