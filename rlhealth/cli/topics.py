"""`rlhealth topics`: create or list rlhealth's Kafka topics."""

from __future__ import annotations

import json

import click

from rlhealth.cli.options import bootstrap_option, kafka_security_options
from rlhealth.schemas.topics import PARTITIONS_ENV, PREFIX_ENV, TopicCatalog


def _catalog_options(f):
    f = click.option("--prefix", default=None, envvar=PREFIX_ENV, show_envvar=True,
                     help="Topic-name prefix (isolates test or staging topics).")(f)
    f = click.option("--partitions", type=click.IntRange(min=1), default=None, envvar=PARTITIONS_ENV,
                     show_envvar=True, help="Partitions of every topic [default: 12].")(f)
    return f


@click.group()
def topics() -> None:
    """Create or list rlhealth's Kafka topics."""


@topics.command("create")
@bootstrap_option()
@_catalog_options
@click.option("--replication-factor", type=click.IntRange(min=1), default=1, show_default=True)
@kafka_security_options
def create(bootstrap: str, prefix: str | None, partitions: int | None, replication_factor: int,
           kafka_security) -> None:
    """Create the catalogue's topics that are missing (existing ones are checked, not changed)."""
    from rlhealth.sinks.kafka import TopicMismatchError, ensure_topics

    catalog = TopicCatalog.from_env(prefix=prefix, partitions=partitions)
    try:
        status = ensure_topics(bootstrap, catalog, replication_factor=replication_factor, security=kafka_security)
    except TopicMismatchError as exc:
        raise click.ClickException(str(exc)) from None
    for name, state in status.items():
        click.echo(f"{state:8} {name}  partitions={catalog.partitions}")


@topics.command("list")
@bootstrap_option()
@click.option("--prefix", default=None, envvar=PREFIX_ENV, show_envvar=True,
              help="Only topics whose name starts with this.")
@click.option("--all", "show_all", is_flag=True, help="All topics, not only rlhealth's.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per topic.")
@kafka_security_options
def list_(bootstrap: str, prefix: str | None, show_all: bool, as_json: bool, kafka_security) -> None:
    """List topics with their partition count and non-default configs."""
    from rlhealth.sinks.kafka import describe_topics

    infos = describe_topics(bootstrap, prefix=prefix or None, security=kafka_security)
    if not show_all:
        ours = set(TopicCatalog.from_env(prefix=prefix or "").all_topics)
        infos = [i for i in infos if i.name in ours]
    for info in infos:
        if as_json:
            click.echo(json.dumps({"name": info.name, "partitions": info.partitions, "config": info.config},
                                  sort_keys=True))
        else:
            cfg = " ".join(f"{k}={v}" for k, v in sorted(info.config.items()))
            click.echo(f"{info.name}  partitions={info.partitions}  {cfg}".rstrip())
