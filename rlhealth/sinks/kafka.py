"""Kafka adapter (kafka-python): create the catalogue's topics and produce events, verdicts and
dead letters to them.

Every record is keyed by `job_key(job_id)` and its value is `rlhealth.schemas.encode(model)`.
kafka-python's default partitioner is murmur2 like the Java client's and aiokafka's, so faust
agents (aiokafka) and this producer put a job's records in the same partition.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kafka import KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from kafka.errors import TopicAlreadyExistsError

from rlhealth.schemas import DeadLetter, EventBase, Verdict, encode, job_key
from rlhealth.schemas.kafka_security import KafkaSecurity, resolve
from rlhealth.schemas.topics import MAX_DEAD_LETTER_BYTES, TopicCatalog

log = logging.getLogger(__name__)

CLIENT_ID = "rlhealth"


class TopicMismatchError(RuntimeError):
    """An existing topic has a partition count other than the catalogue's (co-partitioning broken)."""


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    config: dict[str, str]


def admin_client(bootstrap: str, timeout_s: float = 30.0, security: KafkaSecurity | None = None) -> KafkaAdminClient:
    """An admin client; `security` defaults to the environment's (`KafkaSecurity.from_env`)."""
    ms = int(timeout_s * 1000)
    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id=f"{CLIENT_ID}-admin",
                            request_timeout_ms=ms, bootstrap_timeout_ms=ms, **resolve(security).kafka_python())


def ensure_topics(
    bootstrap: str,
    catalog: TopicCatalog | None = None,
    *,
    replication_factor: int = 1,
    timeout_s: float = 30.0,
    security: KafkaSecurity | None = None,
) -> dict[str, str]:
    """Create every topic of the catalogue that is missing; return {topic: "created" | "exists"}.

    Existing topics are kept as they are, but a partition count that differs from the catalogue's
    raises TopicMismatchError: jobs would no longer meet in one partition across topics.
    Safe to run concurrently with another ensure_topics (a lost creation race counts as "exists").
    """
    catalog = catalog or TopicCatalog.from_env()
    wanted = catalog.topic_configs()
    with admin_client(bootstrap, timeout_s, security) as admin:
        present = set(admin.list_topics())
        missing = {name: cfg for name, cfg in wanted.items() if name not in present}
        status = {name: "exists" for name in wanted if name in present}
        if missing:
            result = admin.create_topics(
                {name: {"num_partitions": catalog.partitions, "replication_factor": replication_factor,
                        "configs": cfg}
                 for name, cfg in missing.items()},
                timeout_ms=int(timeout_s * 1000),
                raise_errors=False,
            )
            for topic in result["topics"]:
                code = topic.get("error_code", 0)
                if code == 0:
                    status[topic["name"]] = "created"
                elif code == TopicAlreadyExistsError.errno:
                    status[topic["name"]] = "exists"
                else:
                    raise RuntimeError(f"creating {topic['name']} failed: error {code} {topic.get('error_message')}")
            admin.wait_for_topics(list(missing), timeout_ms=int(timeout_s * 1000))
        counts = _partition_counts(admin, list(wanted))
    wrong = {name: n for name, n in counts.items() if n != catalog.partitions}
    if wrong:
        raise TopicMismatchError(
            f"topics with a partition count other than {catalog.partitions}: "
            + ", ".join(f"{name}={n}" for name, n in sorted(wrong.items())))
    return dict(sorted(status.items()))


def _partition_counts(admin: KafkaAdminClient, names: list[str]) -> dict[str, int]:
    return {t["name"]: len(t.get("partitions") or []) for t in admin.describe_topics(names)}


def describe_topics(bootstrap: str, names: Iterable[str] | None = None, *, timeout_s: float = 30.0,
                    prefix: str | None = None, security: KafkaSecurity | None = None) -> list[TopicInfo]:
    """Partition count and non-default configs of topics (all, or `names`, or those starting with `prefix`)."""
    with admin_client(bootstrap, timeout_s, security) as admin:
        if names is None:
            names = [n for n in admin.list_topics() if not n.startswith("__")]
        names = sorted(n for n in names if prefix is None or n.startswith(prefix))
        if not names:
            return []
        counts = _partition_counts(admin, names)
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in names])
    topic_configs = configs.get("topic", {})
    return [
        TopicInfo(name=n, partitions=counts.get(n, 0),
                  config={k: v.get("value") for k, v in topic_configs.get(n, {}).items()})
        for n in names
    ]


class EventProducer:
    """Produce wire models to their topics, keyed by job.

    `send` returns kafka-python's future (its `.get()` gives the RecordMetadata). Call `flush()`
    before relying on delivery and `close()` at the end (or use it as a context manager).
    """

    def __init__(self, bootstrap: str, catalog: TopicCatalog | None = None, *,
                 security: KafkaSecurity | None = None, **producer_config: Any) -> None:
        self.catalog = catalog or TopicCatalog.from_env()
        config: dict[str, Any] = {
            **resolve(security).kafka_python(),
            "bootstrap_servers": bootstrap,
            "client_id": f"{CLIENT_ID}-producer",
            "acks": "all",
            "linger_ms": 5,
            "max_request_size": MAX_DEAD_LETTER_BYTES,
        }
        config.update(producer_config)
        self._producer = KafkaProducer(**config)
        self.sent = 0

    def send(self, event: EventBase):
        """Route an event by its kind to its topic."""
        topic = self.catalog.topic_for_kind(event.kind)  # type: ignore[attr-defined]
        return self._send(topic, job_key(event.job_id), encode(event))

    def send_verdict(self, verdict: Verdict):
        return self._send(self.catalog.verdicts, job_key(verdict.job_id), encode(verdict))

    def send_dead_letter(self, record: DeadLetter):
        # Keyed by the job when we know it, else by the original key, so a job's bad records stay together.
        if record.job_id:
            key: bytes | None = job_key(record.job_id)
        elif record.original_key_b64 is not None:
            key = base64.b64decode(record.original_key_b64)
        else:
            key = None
        return self._send(self.catalog.deadletter, key, encode(record))

    def send_raw(self, topic: str, value: bytes, key: bytes | None = None):
        """Produce bytes as they are (replay of captured records, tests of malformed input)."""
        return self._send(topic, key, value)

    def _send(self, topic: str, key: bytes | None, value: bytes):
        future = self._producer.send(topic, value=value, key=key)
        self.sent += 1
        return future

    def flush(self, timeout: float | None = None) -> None:
        self._producer.flush(timeout=timeout)

    def close(self, timeout: float | None = None) -> None:
        self._producer.close(timeout=timeout)

    def __enter__(self) -> EventProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["EventProducer", "TopicInfo", "TopicMismatchError", "admin_client", "describe_topics", "ensure_topics"]
