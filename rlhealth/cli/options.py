"""Click options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

BOOTSTRAP_ENV = "RLHEALTH_KAFKA_BOOTSTRAP"
CONNECT_TIMEOUT_ENV = "RLHEALTH_KAFKA_CONNECT_TIMEOUT"
DEFAULT_CONNECT_TIMEOUT_S = 10.0


def wait_reachable(servers: str, timeout_s: float) -> str | None:
    """Try a TCP connection to each bootstrap server until one answers or `timeout_s` passes.
    Returns None when one is reachable, else the last error in a few words."""
    import socket
    import time

    deadline = time.monotonic() + timeout_s
    last = "no server"
    while True:
        for server in servers.split(","):
            host, _, port = server.strip().rpartition(":")
            left = max(0.2, min(2.0, deadline - time.monotonic()))
            try:
                with socket.create_connection((host.strip("[]"), int(port)), timeout=left):
                    return None
            except OSError as exc:
                last = exc.strerror or type(exc).__name__
        if time.monotonic() >= deadline:
            return last
        time.sleep(0.25)


def _check_bootstrap(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    for server in value.split(","):
        host, sep, port = server.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise click.BadParameter(f"expected HOST:PORT[,HOST:PORT...], got {value!r}")
    # Fail fast, in one line, when no broker answers: not a 30 s hang and a client traceback.
    import os

    try:
        timeout = float(os.environ.get(CONNECT_TIMEOUT_ENV, "") or DEFAULT_CONNECT_TIMEOUT_S)
    except ValueError:
        timeout = DEFAULT_CONNECT_TIMEOUT_S
    error = wait_reachable(value, timeout)
    if error is not None:
        names, c = [], ctx
        while c.parent is not None:
            names.append(c.info_name or "")
            c = c.parent
        click.echo(f"rlhealth {' '.join(reversed(names))}: Kafka unreachable at {value} after {timeout:g} s ({error}); "
                   f"check --bootstrap / ${BOOTSTRAP_ENV}", err=True)
        ctx.exit(2)
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
        help="Kafka bootstrap servers (comma-separated HOST:PORT). Unreachable for "
             f"${CONNECT_TIMEOUT_ENV} seconds (default {DEFAULT_CONNECT_TIMEOUT_S:g}): one line on stderr, exit 2.",
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
