"""Click options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click

from rlhealth import settings

BOOTSTRAP_ENV = "RLHEALTH_KAFKA_BOOTSTRAP"
CONNECT_TIMEOUT_ENV = "RLHEALTH_KAFKA_CONNECT_TIMEOUT"
DEFAULT_CONNECT_TIMEOUT_S = 10.0


def parse_rfc3339(value: str | None) -> datetime | None:
    """An RFC 3339 time option (a trailing Z allowed; no zone means UTC), or None."""
    if value is None:
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise click.BadParameter(f"not an RFC 3339 time: {value}") from exc
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


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
    return value


def require_reachable(value: str) -> None:
    """Fail fast, in one line, when no broker answers: not a 30 s hang and a client traceback.

    Called once every option is parsed and checked (so a usage error is reported first)."""
    timeout = settings.load().kafka_connect_timeout
    error = wait_reachable(value, timeout)
    if error is not None:
        ctx = click.get_current_context()
        names, c = [], ctx
        while c.parent is not None:
            names.append(c.info_name or "")
            c = c.parent
        click.echo(f"rlhealth {' '.join(reversed(names))}: Kafka unreachable at {value} after {timeout:g} s ({error}); "
                   f"check --bootstrap / ${BOOTSTRAP_ENV}", err=True)
        ctx.exit(2)


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


_SECURITY_PARAMS = ("kafka_security_protocol", "kafka_sasl_mechanism", "kafka_sasl_username",
                    "kafka_sasl_password_file", "kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile",
                    "kafka_ssl_key_password_file", "kafka_ssl_check_hostname")


def _read_secret(path: str | None, env_name: str) -> str | None:
    import os

    if path:
        with open(path, encoding="utf-8") as fh:
            return fh.read().rstrip("\r\n")
    value = os.environ.get(env_name)
    return value if value else None


def kafka_security_options(f: Callable[..., Any] | None = None, *, fail_fast: bool = True) -> Any:
    """The `--kafka-*` security options of every command that talks to Kafka, passed as `kafka_security`.

    Each defaults to its RLHEALTH_KAFKA_* variable (rlhealth.schemas.kafka_security). Passwords are
    never taken on the command line (they would show in `ps`): RLHEALTH_KAFKA_SASL_PASSWORD or
    --kafka-sasl-password-file, RLHEALTH_KAFKA_SSL_KEY_PASSWORD or --kafka-ssl-key-password-file.
    With `fail_fast` (the default) the command exits 2 in one line when no broker answers; `ship`
    turns it off, since a shipper started during an outage spools instead.
    """
    if f is None:
        return lambda g: kafka_security_options(g, fail_fast=fail_fast)
    import functools

    from rlhealth.schemas.kafka_security import ENV, PROTOCOLS, SASL_MECHANISMS

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from rlhealth.schemas.kafka_security import KafkaSecurity, KafkaSecurityError

        v = {k: kwargs.pop(k) for k in _SECURITY_PARAMS}
        try:
            security = KafkaSecurity(
                protocol=v["kafka_security_protocol"] or "PLAINTEXT",
                sasl_mechanism=v["kafka_sasl_mechanism"], sasl_username=v["kafka_sasl_username"] or None,
                sasl_password=_read_secret(v["kafka_sasl_password_file"], ENV["sasl_password"]),
                ssl_cafile=v["kafka_ssl_cafile"] or None, ssl_certfile=v["kafka_ssl_certfile"] or None,
                ssl_keyfile=v["kafka_ssl_keyfile"] or None,
                ssl_key_password=_read_secret(v["kafka_ssl_key_password_file"], ENV["ssl_key_password"]),
                ssl_check_hostname=v["kafka_ssl_check_hostname"])
        except (KafkaSecurityError, OSError) as exc:
            raise click.UsageError(f"Kafka security settings: {exc}") from None
        if fail_fast and kwargs.get("bootstrap"):
            require_reachable(kwargs["bootstrap"])
        return f(*args, kafka_security=security, **kwargs)

    existing = click.Path(exists=True, dir_okay=False)
    options = [
        click.option("--kafka-security-protocol", type=click.Choice(PROTOCOLS, case_sensitive=False),
                     envvar=ENV["protocol"], show_envvar=True, default=None,
                     help="PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL."),
        click.option("--kafka-sasl-mechanism", type=click.Choice(SASL_MECHANISMS, case_sensitive=False),
                     envvar=ENV["sasl_mechanism"], show_envvar=True, default=None, help="SASL mechanism."),
        click.option("--kafka-sasl-username", envvar=ENV["sasl_username"], show_envvar=True, default=None,
                     help="SASL username."),
        click.option("--kafka-sasl-password-file", type=existing, default=None,
                     help=f"File holding the SASL password (else ${ENV['sasl_password']})."),
        click.option("--kafka-ssl-cafile", type=existing, envvar=ENV["ssl_cafile"], show_envvar=True, default=None,
                     help="PEM CA bundle that signed the brokers' certificates (default: the system's CAs)."),
        click.option("--kafka-ssl-certfile", type=existing, envvar=ENV["ssl_certfile"], show_envvar=True,
                     default=None, help="Client certificate, PEM (mutual TLS)."),
        click.option("--kafka-ssl-keyfile", type=existing, envvar=ENV["ssl_keyfile"], show_envvar=True, default=None,
                     help="Client private key, PEM (mutual TLS)."),
        click.option("--kafka-ssl-key-password-file", type=existing, default=None,
                     help=f"File holding the client key's password (else ${ENV['ssl_key_password']})."),
        click.option("--kafka-ssl-check-hostname/--kafka-ssl-no-check-hostname", envvar=ENV["ssl_check_hostname"],
                     show_envvar=True, default=True, show_default=True,
                     help="Verify the broker's host name against its certificate."),
    ]
    out: Callable[..., Any] = wrapper
    for option in reversed(options):
        out = option(out)
    return out
