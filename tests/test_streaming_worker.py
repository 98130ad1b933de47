"""The streaming worker against a real broker: dead letters, recovery after SIGKILL, rebalancing.

Each test runs `rlhealth worker` as a subprocess (as in production) on topics with a unique
prefix, with 4 partitions to keep rebalances quick. Most use the stub core of
test_streaming_stubcore.py so the worker's own responsibilities are tested with known verdicts.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from rlhealth.schemas import DeadLetter, LogBatch, Source, Verdict, encode
from rlhealth.schemas.topics import TopicCatalog
from rlhealth.sinks.kafka import EventProducer, ensure_topics
from rlhealth.streams.verdict_reader import latest_verdicts, read_verdicts

pytestmark = pytest.mark.kafka

TESTS = Path(__file__).resolve().parent
PARTITIONS = 4
STUB = "test_streaming_stubcore:build"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Worker:
    def __init__(self, bootstrap: str, prefix: str, log_path: Path, *, core: str | None = STUB,
                 tick: float = 1.0, heartbeat: float = 300.0, extra_env: dict[str, str] | None = None,
                 db: Path | None = None, extra_args: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        env = dict(os.environ, RLHEALTH_PARTITIONS=str(PARTITIONS), PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        if core:
            env["RLHEALTH_CORE_FACTORY"] = core
        env["RLHEALTH_FAUST_DATADIR"] = str(log_path.parent / f"faust-{self.port}")
        env.update(extra_env or {})
        cmd = [sys.executable, "-m", "rlhealth", "worker", "--bootstrap", bootstrap, "--topic-prefix", prefix,
               "--tick-secs", str(tick), "--heartbeat-secs", str(heartbeat), "--metrics-port", str(self.port),
               "--session-timeout-secs", "10"]
        if db is not None:
            cmd += ["--db", str(db)]
        cmd += list(extra_args)
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - the worker's stdout, closed in stop()
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def metrics(self) -> dict[str, float]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as resp:
                text = resp.read().decode()
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def jobs(self) -> set[str]:
        return {k.split('job_id="')[1].split('"')[0] for k in self.metrics() if k.startswith("rlhealth_job_gate_status{")}

    def wait_metric(self, name: str, pred, timeout: float = 60.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited {self.proc.returncode}:\n{self.tail()}")
            value = self.metrics().get(name)
            if value is not None and pred(value):
                return value
            time.sleep(0.3)
        raise AssertionError(f"{name} did not reach the expected value in {timeout}s (last {value}):\n{self.tail()}")

    def wait_caught_up(self, timeout: float = 90.0) -> None:
        self.wait_metric("rlhealth_worker_caught_up", lambda v: v == 1.0, timeout)

    def tail(self, n: int = 40) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode


@contextmanager
def running(*args, **kwargs) -> Iterator[Worker]:
    w = Worker(*args, **kwargs)
    try:
        yield w
    finally:
        w.stop()


@pytest.fixture
def catalog(kafka_bootstrap: str, topic_prefix: str) -> TopicCatalog:
    cat = TopicCatalog(prefix=topic_prefix, partitions=PARTITIONS)
    ensure_topics(kafka_bootstrap, cat)
    return cat


def batch(job: str, *lines: str, at: datetime | None = None) -> LogBatch:
    return LogBatch(job_id=job, event_time=at or datetime.now(UTC), lines=list(lines) or ["step ok"],
                    source=Source(stream="logs/pod_rank0.log"))


def read_topic(bootstrap: str, topic: str, want: int, timeout: float = 60.0) -> list:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=500)
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or []]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < want and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                out.extend(records)
        return out
    finally:
        consumer.close()


def test_bad_payloads_are_dead_lettered_with_their_reason(kafka_bootstrap, catalog, tmp_path) -> None:
    logs = catalog.topic_for_kind("log_batch")
    trials = catalog.topic_for_kind("trial")
    good = encode(batch("job-ok"))
    bad = {
        "invalid_json": (logs, b"{not json", b"job-a"),
        "not_an_object": (logs, b"[1, 2]", b"job-a"),
        "unsupported_schema_version": (logs, good.replace(b'"schema_version":1', b'"schema_version":99'), b"job-ok"),
        "unknown_kind": (logs, b'{"schema_version": 1, "kind": "telemetry", "job_id": "job-a"}', b"job-a"),
        "invalid_fields": (logs, b'{"schema_version": 1, "kind": "log_batch", "job_id": "job-a", "lines": 3}', b"job-a"),
        "wrong_kind_for_topic": (trials, good, b"job-ok"),
        "key_mismatch": (logs, good, b"some-other-job"),
        "missing_key": (logs, good, None),
        "core_error": (logs, encode(batch("job-boom", "EXPLODE")), b"job-boom"),
    }
    with EventProducer(kafka_bootstrap, catalog) as producer:
        for topic, value, key in bad.values():
            producer.send_raw(topic, value, key=key)
        producer.send(batch("job-ok"))
        producer.flush()

    with running(kafka_bootstrap, catalog.prefix, tmp_path / "worker.log", db=tmp_path / "ev.duckdb") as w:
        records = read_topic(kafka_bootstrap, catalog.deadletter, len(bad))
        assert len(records) == len(bad), w.tail()
        letters = {DeadLetter.model_validate_json(r.value).reason: DeadLetter.model_validate_json(r.value)
                   for r in records}
        assert set(letters) == set(bad)
        for reason, (topic, value, _key) in bad.items():
            dl = letters[reason]
            assert dl.original() == value, reason  # kept whole
            assert dl.source_topic == topic and dl.source_offset is not None
            assert dl.stage == ("core" if reason == "core_error" else "decode")
        assert letters["core_error"].job_id == "job-boom"
        assert base64.b64decode(letters["key_mismatch"].original_key_b64) == b"some-other-job"
        # the worker kept going: the good job is judged and exported
        w.wait_metric('rlhealth_job_verdict_kill{job_id="job-ok"}', lambda v: v == 0.0)
        m = w.metrics()
        assert m['rlhealth_events_dead_lettered_total{kind="log_batch",reason="invalid_json"}'] == 1.0
        assert m['rlhealth_events_dead_lettered_total{kind="log_batch",reason="core_error"}'] == 1.0
        assert m['rlhealth_events_dead_lettered_total{kind="log_batch",reason="wrong_kind_for_topic"}'] == 1.0
        assert sum(v for k, v in m.items() if k.startswith("rlhealth_events_dead_lettered_total")) == len(bad)
        assert w.proc.poll() is None
        assert w.stop() == 0
    from rlhealth.sinks.duckdb import query

    assert query(tmp_path / "ev.duckdb", "SELECT count(*) FROM dead_letters") == [(len(bad),)]


def test_verdicts_are_published_with_increasing_seq_and_read_back(kafka_bootstrap, catalog, tmp_path) -> None:
    with running(kafka_bootstrap, catalog.prefix, tmp_path / "worker.log", heartbeat=2.0) as w:
        with EventProducer(kafka_bootstrap, catalog) as producer:
            producer.send(batch("job-a", "all good"))
            producer.send(batch("job-b", "FATAL: engine died"))
            producer.flush()
        w.wait_metric('rlhealth_job_verdict_kill{job_id="job-b"}', lambda v: v == 1.0)
        time.sleep(5)  # at least one heartbeat republish of unchanged calls
        with EventProducer(kafka_bootstrap, catalog) as producer:
            producer.send(batch("job-a", "FATAL now"))  # the call changes: published at the next tick
            producer.flush()
        w.wait_metric('rlhealth_job_verdict_kill{job_id="job-a"}', lambda v: v == 1.0)
        time.sleep(1.5)
    newest = latest_verdicts(kafka_bootstrap, catalog.verdicts)
    assert newest["job-a"].verdict == "KILL" and newest["job-b"].verdict == "KILL"
    seqs = [v.seq for v in read_verdicts(kafka_bootstrap, catalog.verdicts, job="job-a", dedupe=False)]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= 2  # heartbeat + change, strictly increasing

    cli = subprocess.run([sys.executable, "-m", "rlhealth", "verdicts", "--bootstrap", kafka_bootstrap,
                          "--topic-prefix", catalog.prefix, "--latest", "--job", "job-b", "--format", "json"],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 10, cli.stderr  # probe's exit code for a KILL
    v = Verdict.model_validate_json(cli.stdout)
    assert (v.job_id, v.verdict) == ("job-b", "KILL")
    assert v.captured and catalog.verdicts in v.captured  # where it was judged, never "-"
    assert v.seq == newest["job-b"].seq
    text = subprocess.run([sys.executable, "-m", "rlhealth", "verdicts", "--bootstrap", kafka_bootstrap,
                           "--topic-prefix", catalog.prefix, "--only-kill"], capture_output=True, text=True,
                          timeout=120)
    assert text.returncode == 0 and "VERDICT: KILL" in text.stdout and "NO-KILL" not in text.stdout

    # the evidence writer's mode: every verdict read lands in DuckDB once, however often it is read
    db = tmp_path / "evidence.duckdb"
    for _ in range(2):
        stored = subprocess.run([sys.executable, "-m", "rlhealth", "verdicts", "--bootstrap", kafka_bootstrap,
                                 "--topic-prefix", catalog.prefix, "--format", "json", "--db", str(db)],
                                capture_output=True, text=True, timeout=120)
        assert stored.returncode == 0, stored.stderr
    from rlhealth.sinks.duckdb import query

    total = len(list(read_verdicts(kafka_bootstrap, catalog.verdicts, dedupe=False)))
    assert query(db, "SELECT count(*), count(DISTINCT (job_id, seq)) FROM verdicts") == [(total, total)]


def test_agent_death_exits_the_worker_non_zero(kafka_bootstrap, catalog, tmp_path) -> None:
    with running(kafka_bootstrap, catalog.prefix, tmp_path / "worker.log") as w:
        w.wait_caught_up()
        with EventProducer(kafka_bootstrap, catalog) as producer:
            producer.send(batch("job-x", "AGENT-DIES"))
            producer.flush()
        w.proc.wait(60)
        assert w.proc.returncode == 70, w.tail()
        assert "exiting with status 70" in w.tail(200)


def test_sigkill_restart_restores_state_and_the_gap_is_not_the_jobs_silence(kafka_bootstrap, catalog, tmp_path
                                                                           ) -> None:
    """A worker SIGKILLed mid-stream, down for twice the stub's staleness limit while the job keeps
    logging, comes back with its state (the event count continues) and never calls the job stale:
    it judges only after folding in the backlog written while it was down."""
    stale_s = 8.0
    # a slow core, so the backlog takes seconds to fold in and ticks happen meanwhile
    env = {"STUB_STALE_S": str(stale_s), "STUB_STEP_DELAY_S": "0.1"}
    sent = 0
    stop = threading.Event()

    def keep_logging() -> None:
        nonlocal sent
        with EventProducer(kafka_bootstrap, catalog) as producer:
            while not stop.is_set():
                producer.send(batch("job-live"))
                producer.flush()
                sent += 1
                time.sleep(0.5)

    logger = threading.Thread(target=keep_logging, daemon=True)
    logger.start()
    try:
        w = Worker(kafka_bootstrap, catalog.prefix, tmp_path / "w1.log", extra_env=env)
        try:
            w.wait_metric('rlhealth_job_trials_completed_total{job_id="job-live"}', lambda v: v >= 10)
            w.wait_metric('rlhealth_verdicts_published_total{verdict="NO-KILL"}', lambda v: v >= 1)
            w.proc.send_signal(signal.SIGKILL)
            w.proc.wait(10)
            before = sent
        finally:
            w.stop()
        time.sleep(2 * stale_s)
        with running(kafka_bootstrap, catalog.prefix, tmp_path / "w2.log", extra_env=env) as w2:
            # the state came back from the changelog: the count continues past what was sent before the kill
            w2.wait_metric('rlhealth_job_trials_completed_total{job_id="job-live"}', lambda v: v > before + 10, 90)
            w2.wait_caught_up()
            time.sleep(3)
            assert w2.metrics().get('rlhealth_job_verdict_kill{job_id="job-live"}') == 0.0
    finally:
        stop.set()
        logger.join(10)
    verdicts = list(read_verdicts(kafka_bootstrap, catalog.verdicts, job="job-live", dedupe=False))
    assert verdicts, "no verdict published"
    assert [v.reasoning for v in verdicts if v.verdict == "KILL"] == []
    seqs = [v.seq for v in verdicts]
    assert seqs == list(range(1, len(seqs) + 1))


def test_two_workers_split_the_jobs_after_a_rebalance(kafka_bootstrap, catalog, tmp_path) -> None:
    jobs = [f"job-{i:02d}" for i in range(16)]
    with EventProducer(kafka_bootstrap, catalog) as producer:
        for j in jobs:
            producer.send(batch(j))
        producer.flush()
    with running(kafka_bootstrap, catalog.prefix, tmp_path / "a.log") as a:
        a.wait_metric("rlhealth_jobs_owned", lambda v: v == len(jobs))
        assert a.jobs() == set(jobs)
        with running(kafka_bootstrap, catalog.prefix, tmp_path / "b.log") as b:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                ja, jb = a.jobs(), b.jobs()
                pa = a.metrics().get("rlhealth_partitions_owned", 0)
                pb = b.metrics().get("rlhealth_partitions_owned", 0)
                if ja and jb and not (ja & jb) and ja | jb == set(jobs) and pa + pb == PARTITIONS:
                    break
                time.sleep(0.5)
            else:
                raise AssertionError(f"no clean split: a={sorted(a.jobs())} b={sorted(b.jobs())}\n{a.tail()}\n{b.tail()}")
            assert pa > 0 and pb > 0
            # more events after the split keep going to the owner only
            with EventProducer(kafka_bootstrap, catalog) as producer:
                for j in jobs:
                    producer.send(batch(j))
                producer.flush()
            time.sleep(3)
            ja, jb = a.jobs(), b.jobs()
            assert not (ja & jb) and ja | jb == set(jobs)
            both = {**{k: v for k, v in a.metrics().items() if "trials_completed" in k},
                    **{k: v for k, v in b.metrics().items() if "trials_completed" in k}}
            assert all(v == 2.0 for v in both.values()), both  # state moved with the partition
            # both tables' changelogs came with the event partitions (a verdict book not restored
            # restarts the job's seq at 1)
            assert [w.metrics().get("rlhealth_changelogs_unassigned_total", -1) for w in (a, b)] == [0, 0]
    verdicts = list(read_verdicts(kafka_bootstrap, catalog.verdicts, dedupe=False))
    per_job: dict[str, list[int]] = {}
    for v in verdicts:
        per_job.setdefault(v.job_id, []).append(v.seq)
    # the seq bookkeeping moved with the partition: per job, seqs only go up
    assert set(per_job) == set(jobs)
    assert all(s == sorted(set(s)) for s in per_job.values()), per_job


def changelog_values(bootstrap: str, topic: str, key: bytes, timeout: float = 20.0) -> list[bytes | None]:
    """Every value written for `key` to a changelog topic, oldest first (None: a tombstone)."""
    deadline = time.monotonic() + timeout
    while True:
        values = [r.value for r in read_topic(bootstrap, topic, 1 << 30, timeout=3.0) if r.key == key]
        if (values and values[-1] is None) or time.monotonic() > deadline:
            return values


def test_ended_job_gets_a_final_verdict_and_is_expired(kafka_bootstrap, catalog, tmp_path) -> None:
    from rlhealth.schemas import JobEnded

    with running(kafka_bootstrap, catalog.prefix, tmp_path / "worker.log") as w:
        with EventProducer(kafka_bootstrap, catalog) as producer:
            producer.send(batch("job-end"))
            producer.send(batch("job-stay"))
            producer.flush()
            w.wait_metric("rlhealth_jobs_owned", lambda v: v == 2)
            producer.send(JobEnded(job_id="job-end", event_time=datetime.now(UTC) + timedelta(seconds=1)))
            producer.flush()
        w.wait_metric('rlhealth_jobs_expired_total{reason="ended"}', lambda v: v == 1.0)
        w.wait_metric("rlhealth_jobs_owned", lambda v: v == 1)
        assert w.jobs() == {"job-stay"}
    final = [v for v in read_verdicts(kafka_bootstrap, catalog.verdicts, dedupe=False) if v.job_id == "job-end"]
    assert final and "Final verdict: the job ended" in final[-1].reasoning
    assert [v.seq for v in final] == sorted({v.seq for v in final})
    # the state and the verdict book were deleted: tombstones on both changelogs
    for table in ("job_health", "verdict_book"):
        values = changelog_values(kafka_bootstrap, f"{catalog.prefix}rlhealth-{table}-changelog", b"job-end")
        assert values and values[-1] is None, (table, values)


def test_idle_and_terminal_jobs_are_expired(kafka_bootstrap, catalog, tmp_path) -> None:
    from rlhealth.schemas import JobStatePoll

    now = datetime.now(UTC)
    # the real core: the scheduler state is read from its state
    with running(kafka_bootstrap, catalog.prefix, tmp_path / "worker.log", core=None,
                 extra_args=("--idle-expiry-secs", "4", "--terminal-expiry-secs", "1")) as w:
        with EventProducer(kafka_bootstrap, catalog) as producer:
            producer.send(batch("job-idle"))
            producer.send(JobStatePoll(job_id="job-done", event_time=now, state="succeeded", scheduler="slurm"))
            producer.send(batch("job-busy"))
            producer.flush()
            w.wait_metric('rlhealth_jobs_expired_total{reason="terminal"}', lambda v: v == 1.0)
            assert "job-done" not in w.jobs()
            deadline = time.monotonic() + 60
            while w.metrics().get('rlhealth_jobs_expired_total{reason="idle"}') != 1.0:
                assert time.monotonic() < deadline, w.tail()
                producer.send(batch("job-busy"))  # keeps sending: never idle
                producer.flush()
                time.sleep(0.5)
        assert w.jobs() == {"job-busy"}
    finals = {v.job_id: v for v in read_verdicts(kafka_bootstrap, catalog.verdicts)}
    assert "terminal state" in finals["job-done"].reasoning
    assert "idle expiry" in finals["job-idle"].reasoning


def test_a_flood_of_bad_records_is_dead_lettered_in_batches(kafka_bootstrap, catalog, tmp_path) -> None:
    logs = catalog.topic_for_kind("log_batch")
    n = 3000
    with EventProducer(kafka_bootstrap, catalog) as producer:
        for i in range(n):
            producer.send_raw(logs, b"{not json %d" % i, key=b"job-flood-%d" % (i % 50))
        producer.send(batch("job-ok"))
        producer.flush()
    with running(kafka_bootstrap, catalog.prefix, tmp_path / "worker.log") as w:
        w.wait_metric('rlhealth_job_verdict_kill{job_id="job-ok"}', lambda v: v == 0.0, timeout=120)
        records = read_topic(kafka_bootstrap, catalog.deadletter, n)
        assert len(records) == n
        assert len({DeadLetter.model_validate_json(r.value).source_offset for r in records}) <= n
        m = w.metrics()
        assert m['rlhealth_events_dead_lettered_total{kind="log_batch",reason="invalid_json"}'] == n
