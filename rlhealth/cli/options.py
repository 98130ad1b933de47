"""Click options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

BOOTSTRAP_ENV = "RLHEALTH_KAFKA_BOOTSTRAP"


def _check_bootstrap(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    for server in value.split(","):
        host, sep, port = server.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise click.BadParameter(f"expected HOST:PORT[,HOST:PORT...], got {value!r}")
    return value


def bootstrap_option(required: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--bootstrap HOST:PORT`, defaulting to $RLHEALTH_KAFKA_BOOTSTRAP; passed as `bootstrap`."""
    return click.option(
        "--bootstrap",
        "bootstrap",
        envvar=BOOTSTRAP_ENV,
        required=required,
        metavar="HOST:PORT",
        callback=_check_bootstrap,
        show_envvar=True,
        help="Kafka bootstrap servers (comma-separated HOST:PORT).",
    )


def run_every(interval_secs: float, iterations: int, tick: Callable[[], None]) -> None:
    """Call `tick` every `interval_secs` until Ctrl-C, or `iterations` times when that is > 0."""
    import time

    n = 0
    try:
        while True:
            tick()
            n += 1
            if iterations and n >= iterations:
                return
            time.sleep(interval_secs)
    except KeyboardInterrupt:
        return
