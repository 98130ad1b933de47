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


def kafka_security_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The `--kafka-*` security options of every command that talks to Kafka, passed as `kafka_security`.

    Each defaults to its RLHEALTH_KAFKA_* variable (rlhealth.schemas.kafka_security). Passwords are
    never taken on the command line (they would show in `ps`): RLHEALTH_KAFKA_SASL_PASSWORD or
    --kafka-sasl-password-file, RLHEALTH_KAFKA_SSL_KEY_PASSWORD or --kafka-ssl-key-password-file.
    """
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
