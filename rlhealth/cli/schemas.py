"""`rlhealth schemas`: export or check the JSON Schemas of the wire contract."""

from __future__ import annotations

from pathlib import Path

import click

from rlhealth.schemas.export import JSON_DIR, schema_documents, write


@click.group()
def schemas() -> None:
    """Export or check the JSON Schemas of the wire contract."""


@schemas.command("export")
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=JSON_DIR, show_default=True,
              help="Directory to write <kind>.schema.json files into.")
def export(directory: Path) -> None:
    """Write one JSON Schema file per event kind, the verdict and the dead letter."""
    for path in write(directory):
        click.echo(str(path))


@schemas.command("check")
def check() -> None:
    """Exit 1 when the checked-in schema files differ from the models."""
    stale = [name for name, text in schema_documents().items()
             if not (JSON_DIR / name).exists() or (JSON_DIR / name).read_text(encoding="utf-8") != text]
    if stale:
        raise click.ClickException("out of date: " + ", ".join(stale) + " (run `rlhealth schemas export`)")
    click.echo("schemas up to date")
