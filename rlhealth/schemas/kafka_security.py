"""How rlhealth's Kafka clients authenticate and encrypt: one settings object for every client.

Pure data plus the stdlib `ssl` module; no Kafka client is imported here. The adapters turn it into
their client's options: `kafka_python()` for kafka-python (admin, producer, consumers: sinks,
sources, the verdict reader) and `ssl_context()` + the SASL fields for faust/aiokafka (the worker).
It sits in `rlhealth.schemas` next to the topic catalogue, the other piece of Kafka configuration
that sources, sinks and streams share.

Every field can come from the environment (`from_env`), which is also what every command's
`--kafka-*` options default to:

| variable | meaning |
|---|---|
| RLHEALTH_KAFKA_SECURITY_PROTOCOL | PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL |
| RLHEALTH_KAFKA_SASL_MECHANISM | PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (SASL_* protocols) |
| RLHEALTH_KAFKA_SASL_USERNAME, RLHEALTH_KAFKA_SASL_PASSWORD | SASL credentials |
| RLHEALTH_KAFKA_SSL_CAFILE | PEM bundle of the CAs that signed the brokers' certificates |
| RLHEALTH_KAFKA_SSL_CERTFILE, RLHEALTH_KAFKA_SSL_KEYFILE | client certificate and key (mutual TLS) |
| RLHEALTH_KAFKA_SSL_KEY_PASSWORD | password of the client key |
| RLHEALTH_KAFKA_SSL_CHECK_HOSTNAME | 1 (default) or 0: verify the broker's name against its certificate |
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
ENV = {
    "protocol": "RLHEALTH_KAFKA_SECURITY_PROTOCOL",
    "sasl_mechanism": "RLHEALTH_KAFKA_SASL_MECHANISM",
    "sasl_username": "RLHEALTH_KAFKA_SASL_USERNAME",
    "sasl_password": "RLHEALTH_KAFKA_SASL_PASSWORD",
    "ssl_cafile": "RLHEALTH_KAFKA_SSL_CAFILE",
    "ssl_certfile": "RLHEALTH_KAFKA_SSL_CERTFILE",
    "ssl_keyfile": "RLHEALTH_KAFKA_SSL_KEYFILE",
    "ssl_key_password": "RLHEALTH_KAFKA_SSL_KEY_PASSWORD",
    "ssl_check_hostname": "RLHEALTH_KAFKA_SSL_CHECK_HOSTNAME",
}


class KafkaSecurityError(ValueError):
    """Settings that no broker could accept (SASL without a mechanism, a key without a certificate...)."""


@dataclass(frozen=True)
class KafkaSecurity:
    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = None
    ssl_check_hostname: bool = True

    def __post_init__(self) -> None:
        protocol = (self.protocol or "PLAINTEXT").upper()
        object.__setattr__(self, "protocol", protocol)
        if self.sasl_mechanism:
            object.__setattr__(self, "sasl_mechanism", self.sasl_mechanism.upper())
        self.check()

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def check(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise KafkaSecurityError(f"security protocol {self.protocol!r} is not one of {', '.join(PROTOCOLS)}")
        if self.uses_sasl:
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise KafkaSecurityError(f"{self.protocol} needs a SASL mechanism, one of {', '.join(SASL_MECHANISMS)}"
                                         f" (got {self.sasl_mechanism!r})")
            if not self.sasl_username or self.sasl_password is None:
                raise KafkaSecurityError(f"{self.protocol} needs a SASL username and password")
        elif self.sasl_mechanism or self.sasl_username or self.sasl_password:
            raise KafkaSecurityError(f"SASL settings given but the security protocol is {self.protocol}")
        tls_files = (self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile)
        if not self.uses_tls and any(tls_files):
            raise KafkaSecurityError(f"TLS files given but the security protocol is {self.protocol}")
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise KafkaSecurityError("a client certificate needs its key and a key its certificate")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KafkaSecurity:
        env = os.environ if env is None else env

        def get(field: str) -> str | None:
            value = env.get(ENV[field], "")
            return value if value != "" else None

        check = (get("ssl_check_hostname") or "1").strip().lower() not in ("0", "false", "no", "off")
        return cls(protocol=get("protocol") or "PLAINTEXT", sasl_mechanism=get("sasl_mechanism"),
                   sasl_username=get("sasl_username"), sasl_password=get("sasl_password"),
                   ssl_cafile=get("ssl_cafile"), ssl_certfile=get("ssl_certfile"), ssl_keyfile=get("ssl_keyfile"),
                   ssl_key_password=get("ssl_key_password"), ssl_check_hostname=check)

    def with_overrides(self, **fields: Any) -> KafkaSecurity:
        """A copy with the given fields replaced; None values keep the current ones."""
        return replace(self, **{k: v for k, v in fields.items() if v is not None})

    def kafka_python(self) -> dict[str, Any]:
        """Keyword arguments for kafka-python's KafkaAdminClient, KafkaProducer and KafkaConsumer."""
        out: dict[str, Any] = {"security_protocol": self.protocol}
        if self.uses_sasl:
            out.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.sasl_username,
                       sasl_plain_password=self.sasl_password)
        if self.uses_tls:
            out["ssl_check_hostname"] = self.ssl_check_hostname
            for key, value in (("ssl_cafile", self.ssl_cafile), ("ssl_certfile", self.ssl_certfile),
                               ("ssl_keyfile", self.ssl_keyfile), ("ssl_password", self.ssl_key_password)):
                if value:
                    out[key] = value
        return out

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for aiokafka/faust (None without TLS): the CA bundle, or the system's CAs."""
        if not self.uses_tls:
            return None
        ctx = ssl.create_default_context(cafile=self.ssl_cafile)
        ctx.check_hostname = self.ssl_check_hostname
        if self.ssl_certfile and self.ssl_keyfile:
            ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile, password=self.ssl_key_password)
        return ctx

    def describe(self) -> str:
        """For logs: never the password."""
        parts = [self.protocol]
        if self.uses_sasl:
            parts.append(f"{self.sasl_mechanism} as {self.sasl_username}")
        if self.uses_tls:
            check = "" if self.ssl_check_hostname else ", no hostname check"
            parts.append(f"CA {self.ssl_cafile or 'system'}{check}")
        return ", ".join(parts)

    def __repr__(self) -> str:  # the password stays out of reprs, logs and tracebacks
        hidden = "***" if self.sasl_password is not None else None
        return (f"KafkaSecurity(protocol={self.protocol!r}, sasl_mechanism={self.sasl_mechanism!r}, "
                f"sasl_username={self.sasl_username!r}, sasl_password={hidden!r}, ssl_cafile={self.ssl_cafile!r}, "
                f"ssl_certfile={self.ssl_certfile!r}, ssl_keyfile={self.ssl_keyfile!r}, "
                f"ssl_check_hostname={self.ssl_check_hostname!r})")


def resolve(security: KafkaSecurity | None) -> KafkaSecurity:
    """The given settings, or the environment's."""
    return security if security is not None else KafkaSecurity.from_env()


__all__ = ["ENV", "PROTOCOLS", "SASL_MECHANISMS", "KafkaSecurity", "KafkaSecurityError", "resolve"]
