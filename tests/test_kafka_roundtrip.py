"""Events through a real Kafka broker: produce with kafka-python (the shippers' client), consume with
aiokafka (faust's client), dead-letter what does not decode, and check the topic catalogue.

The first section needs no broker (catalogue data, record handling); the rest is marked `kafka`.
"""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.partitioner import DefaultPartitioner
from click.testing import CliRunner

from rlhealth.schemas import EVENT_MODELS, DeadLetter, decode_event, encode, job_key
from rlhealth.schemas import topics as t
from rlhealth.schemas.topics import KIND_TOPICS, TopicCatalog

# ---------------------------------------------------------------- catalogue and handling, no broker


def test_every_event_kind_has_a_topic_and_each_topic_lists_its_kinds():
    assert set(KIND_TOPICS) == set(EVENT_MODELS)
    catalog = TopicCatalog(prefix="p.", partitions=5)
    for kind in EVENT_MODELS:
        topic = catalog.topic_for_kind(kind)
        assert topic.startswith("p.rlhealth.")
        assert kind in catalog.kinds_for_topic(topic)
    assert catalog.topic_for_kind("job_ended") == catalog.topic_for_kind("job_state") == "p.rlhealth.jobstate"
    assert catalog.kinds_for_topic(catalog.verdicts) == ()
    with pytest.raises(KeyError):
        catalog.topic_for_kind("dead_letter")


def test_catalogue_names_and_cleanup_policies():
    catalog = TopicCatalog()
    names = catalog.all_topics
    assert len(names) == len(set(names)) == 10
    assert set(names) == {t.LOGS, t.GPU, t.TRIALS, t.JOBSTATE, t.JOBSPEC, t.HEARTBEATS, t.VERDICTS, t.DEADLETTER,
                          t.FINDINGS, t.METRICS}
    compacted = {s.base for s in t.TOPIC_SPECS if s.compacted}
    assert compacted == {t.VERDICTS, t.JOBSPEC, t.JOBSTATE}
    for name, cfg in catalog.topic_configs().items():
        if name in compacted:
            assert cfg["cleanup.policy"] == "compact"
        else:
            assert cfg["cleanup.policy"] == "delete" and int(cfg["retention.ms"]) >= 3_600_000
    # a dead letter wraps the largest event base64-encoded, so its topic must accept more
    cfgs = catalog.topic_configs()
    assert int(cfgs[t.DEADLETTER]["max.message.bytes"]) > 4 / 3 * int(cfgs[t.LOGS]["max.message.bytes"])


def test_catalogue_reads_partitions_and_prefix_from_env(monkeypatch):
    monkeypatch.delenv("RLHEALTH_PARTITIONS", raising=False)
    monkeypatch.delenv("RLHEALTH_TOPIC_PREFIX", raising=False)
    assert TopicCatalog.from_env() == TopicCatalog(prefix="", partitions=12)
    monkeypatch.setenv("RLHEALTH_PARTITIONS", "3")
    monkeypatch.setenv("RLHEALTH_TOPIC_PREFIX", "ci-7.")
    cat = TopicCatalog.from_env()
    assert cat.partitions == 3 and cat.verdicts == "ci-7.rlhealth.verdicts"
    assert TopicCatalog.from_env(prefix="", partitions=6) == TopicCatalog(prefix="", partitions=6)
    for bad in ("zero", "0", "-2"):
        monkeypatch.setenv("RLHEALTH_PARTITIONS", bad)
        with pytest.raises(ValueError):
            TopicCatalog.from_env()


class _ListSink:
    def __init__(self):
        self.records: list[DeadLetter] = []

    def send_dead_letter(self, record):
        self.records.append(record)


def test_record_handler_dead_letters_wrong_kind_and_skips_tombstones(sample_events):
    from rlhealth.sources.kafka import RecordHandler

    catalog = TopicCatalog(prefix="x.")
    sink = _ListSink()
    handler = RecordHandler(catalog, sink)
    gpu = next(e for e in sample_events if e.kind == "gpu_poll")
    ended = next(e for e in sample_events if e.kind == "job_ended")
    # a gpu poll on the logs topic is valid JSON but in the wrong place
    assert handler.handle(catalog.topic_for_kind("log_batch"), 2, 10, b"k", encode(gpu)) is None
    # job_ended belongs on the jobstate topic
    ok = handler.handle(catalog.topic_for_kind("job_state"), 2, 11, job_key(ended.job_id), encode(ended))
    assert ok is not None and ok.event == ended and ok.offset == 11
    assert handler.handle(catalog.topic_for_kind("job_state"), 2, 12, b"k", None) is None
    c = handler.counters
    assert (c.received, c.decoded, c.dead_lettered, c.tombstones) == (3, 1, 1, 1)
    assert [r.reason for r in sink.records] == ["wrong_kind_for_topic"]
    assert sink.records[0].original() == encode(gpu) and sink.records[0].job_id == "k"


# ---------------------------------------------------------------- helpers for the broker tests


async def _aio_consume(bootstrap: str, partitions_by_topic: dict[str, int], expected: int, timeout_s: float = 30.0):
    """Read every partition of the topics from the beginning with aiokafka until `expected` records."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for topic, n in partitions_by_topic.items() for p in range(n)])
        await consumer.seek_to_beginning()
        records = []
        deadline = time.monotonic() + timeout_s
        while len(records) < expected and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for batch in batches.values():
                records.extend(batch)
        # one more short poll: anything beyond `expected` would be a duplicate or a stray record
        for batch in (await consumer.getmany(timeout_ms=300)).values():
            records.extend(batch)
        return records
    finally:
        await consumer.stop()


def consume(bootstrap, partitions_by_topic, expected, timeout_s=30.0):
    return asyncio.run(_aio_consume(bootstrap, partitions_by_topic, expected, timeout_s))


# ---------------------------------------------------------------- broker: topics


@pytest.mark.kafka
def test_topics_have_configured_partitions_and_cleanup(kafka_bootstrap, kafka_catalog):
    from rlhealth.sinks.kafka import describe_topics

    infos = {i.name: i for i in describe_topics(kafka_bootstrap, prefix=kafka_catalog.prefix)}
    assert set(infos) == set(kafka_catalog.all_topics)
    expected_cfg = kafka_catalog.topic_configs()
    for name, info in infos.items():
        assert info.partitions == kafka_catalog.partitions, name
        for key in ("cleanup.policy", "retention.ms", "max.message.bytes", "min.compaction.lag.ms"):
            if key in expected_cfg[name]:
                assert info.config.get(key) == expected_cfg[name][key], (name, key)
    assert {n for n, i in infos.items() if i.config.get("cleanup.policy") == "compact"} == {
        kafka_catalog.verdicts, kafka_catalog.name(t.JOBSPEC), kafka_catalog.name(t.JOBSTATE)}


@pytest.mark.kafka
def test_ensure_topics_is_idempotent_and_refuses_other_partition_counts(kafka_bootstrap, kafka_catalog):
    from rlhealth.sinks.kafka import TopicMismatchError, ensure_topics

    again = ensure_topics(kafka_bootstrap, kafka_catalog)
    assert again == {name: "exists" for name in sorted(kafka_catalog.all_topics)}
    other = TopicCatalog(prefix=kafka_catalog.prefix, partitions=kafka_catalog.partitions + 1)
    with pytest.raises(TopicMismatchError, match="partition count"):
        ensure_topics(kafka_bootstrap, other)


@pytest.mark.kafka
def test_changelogs_are_created_compacted_and_listed_before_the_worker_joins(kafka_bootstrap, topic_prefix):
    from rlhealth.sinks.kafka import TopicMismatchError, describe_topics, ensure_changelogs

    names = [f"{topic_prefix}app-job_health-changelog", f"{topic_prefix}app-verdict_book-changelog"]
    assert ensure_changelogs(kafka_bootstrap, names, 6) == {n: "created" for n in names}
    infos = {i.name: i for i in describe_topics(kafka_bootstrap, prefix=topic_prefix)}
    assert {n: (infos[n].partitions, infos[n].config.get("cleanup.policy")) for n in names} == {
        n: (6, "compact") for n in names}
    assert ensure_changelogs(kafka_bootstrap, names, 6) == {n: "exists" for n in names}
    with pytest.raises(TopicMismatchError, match="partition count"):
        ensure_changelogs(kafka_bootstrap, names, 4)


@pytest.mark.kafka
def test_topics_cli_create_and_list(kafka_bootstrap, topic_prefix):
    from rlhealth.cli import main
    from rlhealth.sinks.kafka import admin_client

    runner = CliRunner()
    env = {"RLHEALTH_KAFKA_BOOTSTRAP": kafka_bootstrap, "RLHEALTH_TOPIC_PREFIX": topic_prefix}
    try:
        created = runner.invoke(main, ["topics", "create", "--partitions", "3"], env=env)
        assert created.exit_code == 0, created.output
        assert created.output.count("created ") == 10
        listed = runner.invoke(main, ["topics", "list", "--json", "--bootstrap", kafka_bootstrap], env=env)
        assert listed.exit_code == 0, listed.output
        rows = [orjson.loads(line) for line in listed.output.splitlines()]
        assert sorted(r["name"] for r in rows) == sorted(TopicCatalog(prefix=topic_prefix).all_topics)
        assert {r["partitions"] for r in rows} == {3}
        mismatch = runner.invoke(main, ["topics", "create", "--partitions", "4"], env=env)
        assert mismatch.exit_code != 0 and "partition count" in mismatch.output
    finally:
        with admin_client(kafka_bootstrap) as admin:
            admin.delete_topics(TopicCatalog(prefix=topic_prefix).all_topics, raise_errors=False)


# ---------------------------------------------------------------- broker: round trip


@pytest.mark.kafka
def test_every_event_kind_round_trips_kafka_python_to_aiokafka(kafka_bootstrap, kafka_catalog, sample_events):
    from rlhealth.sinks.kafka import EventProducer

    # a second job so that more than one partition is used
    other_job = [e.model_copy(update={"job_id": "job-7"}) for e in sample_events]
    events = sample_events + other_job
    with EventProducer(kafka_bootstrap, kafka_catalog) as producer:
        metas = [producer.send(e) for e in events]
        producer.flush(timeout=30)
        metas = [m.get(timeout=30) for m in metas]
    for event, meta in zip(events, metas):
        assert meta.topic == kafka_catalog.topic_for_kind(event.kind)

    n = kafka_catalog.partitions
    records = consume(kafka_bootstrap, {topic: n for topic in kafka_catalog.event_topics}, len(events))
    assert len(records) == len(events)
    by_position = {(r.topic, r.partition, r.offset): r for r in records}
    partitioner = DefaultPartitioner()
    partitions_of_job: dict[str, set[int]] = {}
    for event, meta in zip(events, metas):
        record = by_position[(meta.topic, meta.partition, meta.offset)]
        assert record.key == job_key(event.job_id)
        decoded = decode_event(record.value)
        assert decoded == event
        assert type(decoded) is type(event)
        # faust (aiokafka) would route this key to the same partition
        assert record.partition == partitioner(record.key, list(range(n)), list(range(n)))
        partitions_of_job.setdefault(event.job_id, set()).add(record.partition)
    # co-partitioning: every topic holds a job's events in the same partition number
    assert all(len(p) == 1 for p in partitions_of_job.values())


@pytest.mark.kafka
def test_verdicts_are_keyed_by_job(kafka_bootstrap, kafka_catalog):
    from rlhealth.schemas import RootCauseRef, Verdict, decode_verdict
    from rlhealth.sinks.kafka import EventProducer

    rc = RootCauseRef(origin="traceback", exc_type="ValueError", message="vllm model for vllm-instance not found.",
                      source="logs/vllm-0.log", role="engine", event_time="2025-12-31T23:50:00Z",
                      component="EngineCore_DP0", fatal=False)
    v = Verdict(job_id="job-9", verdict="NO-KILL", confidence="medium", job_status="ALIVE",
                reasoning="progressing", produced_at="2026-01-01T00:00:00Z", seq=1, root_cause=rc)
    with EventProducer(kafka_bootstrap, kafka_catalog) as producer:
        meta = producer.send_verdict(v).get(timeout=30)
    records = consume(kafka_bootstrap, {kafka_catalog.verdicts: kafka_catalog.partitions}, 1)
    assert len(records) == 1 and records[0].key == b"job-9" and records[0].partition == meta.partition
    assert decode_verdict(records[0].value) == v and decode_verdict(records[0].value).root_cause == rc


@pytest.mark.kafka
def test_bad_payloads_go_to_dead_letter_and_valid_events_survive(kafka_bootstrap, kafka_catalog, sample_events):
    from rlhealth.sinks.kafka import EventProducer
    from rlhealth.sources.kafka import EventConsumer

    logs_topic = kafka_catalog.topic_for_kind("log_batch")
    batch = next(e for e in sample_events if e.kind == "log_batch")
    good = [batch.model_copy(update={"first_line_no": i, "lines": [f"line {i}"], "offsets": None, "ts": None})
            for i in range(4)]
    unknown_version = orjson.loads(encode(good[0]))
    unknown_version["schema_version"] = 99
    bad = {
        "malformed": b"{this is not json at all",
        "unknown_version": orjson.dumps(unknown_version),
        "truncated": encode(good[1])[:-7],
        "non_utf8": b'{"schema_version":1,"kind":"log_batch","job_id":"\xff\xfe"}',
    }
    expected_reason = {"malformed": "invalid_json", "unknown_version": "unsupported_schema_version",
                       "truncated": "invalid_json", "non_utf8": "invalid_json"}
    key = job_key(batch.job_id)  # same key: one partition, so the order below is the log order
    sequence = [("good", good[0]), ("malformed", None), ("good", good[1]), ("unknown_version", None),
                ("good", good[2]), ("truncated", None), ("non_utf8", None), ("good", good[3])]
    sent = []
    with EventProducer(kafka_bootstrap, kafka_catalog) as producer:
        for label, event in sequence:
            fut = producer.send(event) if event is not None else producer.send_raw(logs_topic, bad[label], key=key)
            sent.append((label, event, fut))
        producer.flush(timeout=30)
        sent = [(label, event, fut.get(timeout=30)) for label, event, fut in sent]

    got = []
    with EventProducer(kafka_bootstrap, kafka_catalog) as dead_letters, \
            EventConsumer(kafka_bootstrap, [logs_topic], catalog=kafka_catalog, dead_letters=dead_letters) as consumer:
        deadline = time.monotonic() + 30
        while consumer.counters.received < len(sequence) and time.monotonic() < deadline:
            got.extend(consumer.poll(timeout_s=0.5))
        counters = consumer.counters.as_dict()
    assert counters["received"] == len(sequence)
    assert counters["decoded"] == 4 and counters["dead_lettered"] == 4
    assert counters["dead_letter_reasons"] == {"invalid_json": 3, "unsupported_schema_version": 1}
    # valid events around the bad ones are all there, in order, with their positions
    assert [c.event for c in got] == good
    assert [c.offset for c in got] == [m.offset for label, _, m in sent if label == "good"]

    dl_records = consume(kafka_bootstrap, {kafka_catalog.deadletter: kafka_catalog.partitions}, 4)
    assert len(dl_records) == 4
    letters = sorted((DeadLetter.model_validate_json(r.value) for r in dl_records), key=lambda d: d.source_offset)
    bad_sent = [(label, meta) for label, _, meta in sent if label != "good"]
    for (label, meta), letter, record in zip(bad_sent, letters, sorted(dl_records, key=lambda r: r.offset)):
        assert letter.original() == bad[label], label
        assert (letter.source_topic, letter.source_partition, letter.source_offset) == (logs_topic, meta.partition, meta.offset)
        assert letter.reason == expected_reason[label], (label, letter.reason, letter.detail)
        assert letter.job_id == batch.job_id and letter.original_key_b64 is not None
        assert record.key == key  # dead letters stay keyed by job
