"""The `rlhealth` command: a thin layer that parses options and calls the library.

Each command group lives in its own module and is registered here, so commands load
their heavy dependencies (faust, duckdb, hyperscan) only when they run.
"""

from __future__ import annotations

import importlib

import click

from rlhealth import __version__, settings

# command name -> "module:attribute"; modules are imported lazily when the command runs.
COMMANDS: dict[str, str] = {
    "probe": "rlhealth.cli.probe:probe",
    "watch": "rlhealth.cli.watch:watch",
    "classify": "rlhealth.cli.classify:classify",
    "rules": "rlhealth.cli.classify:rules",
    "schemas": "rlhealth.cli.schemas:schemas",
    "worker": "rlhealth.cli.streaming:worker",
    "verdicts": "rlhealth.cli.streaming:verdicts",
    "replay": "rlhealth.cli.streaming:replay",
    "topics": "rlhealth.cli.topics:topics",
    "ship": "rlhealth.cli.ship:ship",
    "evidence": "rlhealth.cli.evidence:evidence",
    "report": "rlhealth.cli.report:report",
}

HELP = {
    "probe": "Judge one captured job and print its verdict (embedded, no Kafka).",
    "watch": "Follow growing captures or live folders and print each verdict change.",
    "classify": "Classify log lines against the rule packs; one JSON object per match.",
    "rules": "List and check the log-signature rule packs.",
    "schemas": "Export or check the JSON Schemas of the wire contract.",
    "worker": "Run the streaming faust worker against Kafka.",
    "verdicts": "Read verdicts from the verdict topic (the supervisor's subscription).",
    "replay": "Produce a capture's events to Kafka in event-time order.",
    "topics": "Create or list rlhealth's Kafka topics.",
    "ship": "Follow a job's live folder and send its events to Kafka (with heartbeats).",
    "evidence": "Ask the DuckDB evidence store canned questions, run SQL, export Parquet.",
    "report": "Write a job's incident report (one self-contained HTML page) from the evidence store.",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                return _not_yet(name)
            raise
        return getattr(module, attr)

    def invoke(self, ctx: click.Context) -> object:
        try:
            settings.load()  # a malformed RLHEALTH_* variable: one line naming it, before any work
            return super().invoke(ctx)
        except settings.SettingsError as exc:
            click.echo(f"rlhealth: bad environment: {exc}", err=True)
            ctx.exit(2)
        except Exception as exc:
            # A Kafka client error (broker gone mid-run, timeouts): one line and exit 2, no traceback.
            if type(exc).__module__.split(".")[0] in ("kafka", "aiokafka"):
                name = ctx.invoked_subcommand or "rlhealth"
                click.echo(f"rlhealth {name}: Kafka error: {type(exc).__name__}: {str(exc)[:300]}", err=True)
                ctx.exit(2)
            raise

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, HELP.get(name, "")) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from rlhealth.schemas.kafka_security import ENV as KAFKA_SECURITY_ENV

        rows = [tuple(line.split(": ", 1)) for line in settings.describe().splitlines()]
        rows += [(name, f"Kafka security: {field.replace('_', ' ')} (see each command's --kafka-* options)")
                 for field, name in KAFKA_SECURITY_ENV.items()]
        with formatter.section("Environment (command-line options win)"):
            formatter.write_dl(rows)  # type: ignore[arg-type]


def _not_yet(name: str) -> click.Command:
    @click.command(name=name, help=HELP.get(name, "") + " (not available in this build)")
    def missing() -> None:
        raise click.ClickException(f"'{name}' is not available in this build")

    return missing


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rlhealth")
def main() -> None:
    """rlhealth: KILL / NO-KILL health verdicts for RL jobs that train LLM agents.

    rlhealth recommends; people own the kill. It never kills anything.
    """
