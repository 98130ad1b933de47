"""The worker creates its tables' changelog topics before its consumer joins the group.

faust creates them at start-up itself, but a topic created a moment before the group's first
assignment was at times missing from that assignment's metadata; the consumer's periodic metadata
refresh found it five minutes later and rebalanced the group (every table restored from its changelog,
mid-work). `StreamWorker.ensure_changelog_topics` creates them first, as faust would, and waits for them.
"""

from __future__ import annotations

from rlhealth.sinks.kafka import admin_client, describe_topics
from rlhealth.streams.workers import StreamWorker, WorkerSettings


def test_changelog_topics_exist_compacted_and_copartitioned_before_start(kafka_bootstrap: str, kafka_catalog) -> None:
    worker = StreamWorker(WorkerSettings(bootstrap=kafka_bootstrap, catalog=kafka_catalog), core=object())
    names = [t.changelog_topic.get_topic_name() for t in (worker.tables.job_health, worker.tables.verdicts)]
    try:
        with admin_client(kafka_bootstrap) as admin:
            assert not set(names) & set(admin.list_topics())  # nothing created them yet
        assert worker.ensure_changelog_topics() == {name: "created" for name in sorted(names)}
        info = {t.name: t for t in describe_topics(kafka_bootstrap, names)}
        assert sorted(info) == sorted(names)
        for name in names:
            assert info[name].partitions == kafka_catalog.partitions  # co-partitioned with the event topics
            assert info[name].config.get("cleanup.policy") == "compact"  # what faust gives a changelog
        assert worker.ensure_changelog_topics() == {name: "exists" for name in sorted(names)}  # idempotent
    finally:
        worker.close()
        with admin_client(kafka_bootstrap) as admin:
            admin.delete_topics([n for n in names if n in admin.list_topics()])
