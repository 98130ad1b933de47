"""The faust app: one consumer group over every event topic, tables co-partitioned with them.

`make_app` only configures faust; the agents and timers are attached by
`rlhealth.streams.workers.StreamWorker`. Choices, with the faust pitfalls they avoid
(anchors.md §B.2):

* faust-streaming >= 0.15.2 (rebalance fix without opentracing);
* `memory://` store: state is rebuilt from the compacted changelog topic at every assignment
  (rocksdb is not a dependency); `table_standby_replicas=0` because standbys of an in-memory store
  cost a full second copy of every job's state and buy little when recovery is a changelog read;
* `at_least_once` (not exactly_once): verdicts carry a per-job `seq` and every sink is idempotent;
* raw bytes in and out: payloads are the wire contract's JSON, decoded by `rlhealth.schemas`,
  never faust Records (style.md H7);
* every topic and table changelog has the catalogue's partition count (co-partitioning, H3);
* the faust web server is off unless a port is given (our metrics have their own server).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any

import faust

from rlhealth import settings
from rlhealth.schemas.kafka_security import KafkaSecurity, resolve
from rlhealth.schemas.topics import TopicCatalog

DEFAULT_APP_ID = "rlhealth"


@dataclass(frozen=True)
class AppSettings:
    bootstrap: str
    catalog: TopicCatalog
    app_id: str = DEFAULT_APP_ID
    store: str = "memory://"
    web_port: int | None = None
    replication_factor: int = 1
    session_timeout_s: float = 30.0


def group_id(app_id: str, catalog: TopicCatalog) -> str:
    """The consumer group and changelog-name prefix: distinct per topic prefix so test runs never share."""
    return f"{catalog.prefix}{app_id}" if catalog.prefix else app_id


def _credentials(security: KafkaSecurity) -> dict[str, Any]:
    """faust's `broker_credentials` for the settings (nothing for PLAINTEXT)."""
    if security.uses_sasl:
        return {"broker_credentials": faust.SASLCredentials(
            username=security.sasl_username, password=security.sasl_password,
            ssl_context=security.ssl_context(), mechanism=security.sasl_mechanism)}
    if security.uses_tls:
        return {"broker_credentials": faust.SSLCredentials(security.ssl_context())}
    return {}


def make_app(
    bootstrap: str,
    *,
    app_id: str = DEFAULT_APP_ID,
    partitions: int | None = None,
    catalog: TopicCatalog | None = None,
    store: str = "memory://",
    web_port: int | None = None,
    replication_factor: int = 1,
    session_timeout_s: float = 30.0,
    datadir: str | None = None,
    security: KafkaSecurity | None = None,
) -> faust.App:
    catalog = catalog or TopicCatalog.from_env(partitions=partitions)
    if partitions is not None and partitions != catalog.partitions:
        raise ValueError(f"partitions={partitions} but the catalogue has {catalog.partitions}")
    servers = ";".join(f"kafka://{s.strip()}" for s in bootstrap.split(",") if s.strip())
    web = {"web_enabled": False} if web_port is None else {"web_enabled": True, "web_port": web_port,
                                                           "web_bind": "127.0.0.1"}
    gid = group_id(app_id, catalog)
    # faust keeps a data directory even with the memory store; never in the working directory
    datadir = datadir or (str(d) if (d := settings.load().faust_datadir) else None) or os.path.join(
        tempfile.gettempdir(), "rlhealth-faust", f"{gid}-{os.getpid()}")
    # faust creates only the last path component: make sure its parent exists (a fresh /tmp has none).
    os.makedirs(os.path.dirname(os.path.abspath(datadir)), exist_ok=True)
    app = faust.App(
        gid,
        datadir=datadir,
        broker=servers,
        **_credentials(resolve(security)),
        store=store,
        topic_partitions=catalog.partitions,
        topic_replication_factor=replication_factor,
        topic_allow_declare=True,  # faust creates only its internal topics (changelogs); ours exist already
        table_standby_replicas=0,
        processing_guarantee="at_least_once",
        key_serializer="raw",
        value_serializer="raw",
        consumer_auto_offset_reset="earliest",
        # a crashed worker's partitions move after this long (faust's default is 60 s)
        broker_session_timeout=session_timeout_s,
        broker_heartbeat_interval=min(3.0, session_timeout_s / 3),
        broker_commit_every=500,
        broker_commit_interval=1.0,
        stream_wait_empty=False,
        producer_max_request_size=8 * 1024 * 1024,
        producer_linger=0.005,
        # faust's 16 KiB default closes a batch every ~5 dead letters (a few KiB each): a produce
        # request per handful of records under a flood of bad ones
        producer_max_batch_size=1024 * 1024,
        consumer_max_fetch_size=8 * 1024 * 1024,
        autodiscover=False,
        **web,
    )
    app.rlhealth_catalog = catalog  # type: ignore[attr-defined]
    return app


__all__ = ["AppSettings", "DEFAULT_APP_ID", "group_id", "make_app"]
