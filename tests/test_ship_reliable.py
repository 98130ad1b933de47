"""The shipper loses nothing and sends nothing twice: checkpoints, rotation, outages, spool, splitting."""

from __future__ import annotations

import gzip
import os
import shutil
import socket
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kafka.errors import KafkaTimeoutError, MessageSizeTooLargeError

from rlhealth.schemas import EventBase, decode_event
from rlhealth.schemas.events import LogBatch
from rlhealth.sinks.delivery import ReliableSender, split_batch
from rlhealth.sinks.spool import Record, Spool
from rlhealth.sources.logship import CheckpointStore
from rlhealth.sources.shipper import FolderShipper

CLOCK = lambda: datetime(2026, 10, 14, 16, 20, tzinfo=UTC)  # noqa: E731


def job(tmp_path: Path) -> Path:
    root = tmp_path / "job"
    (root / "logs").mkdir(parents=True)
    return root


def write(path: Path, start: int, n: int, width: int = 0) -> None:
    with path.open("a") as f:
        for i in range(start, start + n):
            f.write(f"line {i:08d} {'x' * width}\n")


def numbers(batches: list[LogBatch]) -> list[int]:
    return [int(s.split()[1]) for b in batches for s in b.lines if s.startswith("line ")]


class Collect:
    """A `deliver` that keeps log batches; `fail` makes it report an undelivered call."""

    def __init__(self) -> None:
        self.batches: list[LogBatch] = []
        self.events: list[EventBase] = []
        self.fail = False

    def __call__(self, events: list[EventBase]) -> bool:
        if self.fail:
            return False
        self.events.extend(events)
        self.batches.extend(e for e in events if isinstance(e, LogBatch))
        return True


def shipper(root: Path, state: Path, sink: Collect, **kw) -> FolderShipper:
    return FolderShipper(root, deliver=sink, job_id="j1", shipper_id="t", clock=CLOCK, state_dir=state, **kw)


# -- checkpoints ---------------------------------------------------------------------------------


def test_restart_resumes_from_the_checkpoint_and_failed_delivery_is_reread(tmp_path: Path) -> None:
    root, state = job(tmp_path), tmp_path / "state"
    log = root / "logs" / "app.log"
    write(log, 0, 1000)
    sink = Collect()
    s = shipper(root, state, sink, batch_lines=300)
    s.tick()
    assert numbers(sink.batches) == list(range(1000))
    write(log, 1000, 10)
    sink.fail = True
    s.tick()  # not delivered: the checkpoint stays, the lines are read again
    sink.fail = False
    s.tick()
    assert numbers(sink.batches) == list(range(1010))
    # a new process (kill -9 after the last commit) starts where the checkpoint is
    write(log, 1010, 5)
    sink2 = Collect()
    s2 = shipper(root, state, sink2)
    s2.tick()
    assert numbers(sink2.batches) == list(range(1010, 1015))
    assert sink2.batches[0].first_line_no == 1010
    assert sink2.batches[0].offsets[0] == log.stat().st_size - 5 * len("line 00000000 \n")


def test_checkpoint_is_written_only_after_delivery(tmp_path: Path) -> None:
    root, state = job(tmp_path), tmp_path / "state"
    write(root / "logs" / "a.log", 0, 10)
    sink = Collect()
    sink.fail = True
    shipper(root, state, sink).tick()
    sink.fail = False
    again = Collect()
    shipper(root, state, again).tick()  # the first process never committed: everything is read again
    assert numbers(again.batches) == list(range(10))


def test_backlog_is_read_in_bounded_steps(tmp_path: Path) -> None:
    root, state = job(tmp_path), tmp_path / "state"
    write(root / "logs" / "a.log", 0, 20_000, width=40)  # ~1.1 MB
    sink = Collect()
    s = shipper(root, state, sink, max_bytes_per_tick=128 << 10)
    steps = 0
    s.tick()
    while s.more:
        steps += 1
        assert len(numbers(sink.batches)) < 20_000
        s.tick()
    assert steps >= 5 and numbers(sink.batches) == list(range(20_000))


# -- rotation ------------------------------------------------------------------------------------


def test_rename_rotation_three_times_no_loss_no_repeat(tmp_path: Path) -> None:
    root, state = job(tmp_path), tmp_path / "state"
    log = root / "logs" / "app.log"
    sink = Collect()
    s = shipper(root, state, sink)
    n = 0
    for _round in range(3):
        write(log, n, 100)
        n += 100
        s.tick()
        write(log, n, 50)  # written after the last read, before the rename
        n += 50
        for k in range(3, 0, -1):  # logrotate: app.log.2 -> .3, .1 -> .2, app.log -> .1
            src = log.with_name(f"app.log.{k}" if k > 1 else "app.log.1")
            if k > 1 and log.with_name(f"app.log.{k - 1}").exists():
                os.replace(log.with_name(f"app.log.{k - 1}"), src)
        os.replace(log, log.with_name("app.log.1"))
        write(log, n, 30)
        n += 30
        s.tick()
    s.tick()
    assert numbers(sink.batches) == list(range(n))
    assert {b.source.stream for b in sink.batches} == {"logs/app.log"}
    assert s.logs.counters.files_rotated >= 3
    # a restart ships none of the rotated files again
    again = Collect()
    shipper(root, state, again).tick()
    assert again.batches == []


def test_copytruncate_recovers_lines_from_the_copy(tmp_path: Path) -> None:
    root, state = job(tmp_path), tmp_path / "state"
    log = root / "logs" / "app.log"
    sink = Collect()
    s = shipper(root, state, sink)
    n = 0
    for _round in range(3):
        write(log, n, 100)
        n += 100
        s.tick()
        write(log, n, 40)  # between our read and the copy
        n += 40
        for k in range(3, 1, -1):
            if log.with_name(f"app.log.{k - 1}").exists():
                os.replace(log.with_name(f"app.log.{k - 1}"), log.with_name(f"app.log.{k}"))
        shutil.copyfile(log, log.with_name("app.log.1"))
        with log.open("r+") as f:
            f.truncate(0)
        write(log, n, 20)
        n += 20
        s.tick()
    assert numbers(sink.batches) == list(range(n))
    assert s.logs.counters.files_truncated == 3 and s.logs.counters.lost_bytes == 0


def test_copytruncate_without_a_copy_counts_the_loss(tmp_path: Path) -> None:
    root, state = job(tmp_path), tmp_path / "state"
    log = root / "logs" / "app.log"
    sink = Collect()
    s = shipper(root, state, sink)
    write(log, 0, 10)
    s.tick()
    write(log, 10, 5)
    s.logs._reconcile(s.logs.scan())  # the shipper saw the 5 new lines' size, not their bytes
    with log.open("r+") as f:
        f.truncate(0)
    write(log, 100, 3)
    s.tick()
    assert numbers(sink.batches) == [*range(10), 100, 101, 102]
    assert s.logs.counters.lost_bytes == 5 * len("line 00000000 \n")
    assert s.logs.counters.files_truncated == 1


def test_compressed_rotations_are_skipped(tmp_path: Path) -> None:
    root, state = job(tmp_path), tmp_path / "state"
    write(root / "logs" / "app.log", 0, 5)
    with gzip.open(root / "logs" / "app.log.1.gz", "wt") as f:
        f.write("line 99999999 old\n")
    sink = Collect()
    s = shipper(root, state, sink)
    s.tick()
    assert numbers(sink.batches) == list(range(5))
    assert s.logs.counters.skipped == {"compressed": 1}


def test_a_new_file_at_an_old_inode_is_a_new_file(tmp_path: Path) -> None:
    root, state = job(tmp_path), tmp_path / "state"
    log = root / "logs" / "app.log"
    write(log, 0, 50)
    sink = Collect()
    shipper(root, state, sink).tick()
    store = CheckpointStore(state)
    (cp,) = store.files.values()
    # forge the checkpoint of a file that had other first bytes at this inode (inode reuse)
    cp.fp = "0" * 40
    store.save()
    again = Collect()
    shipper(root, state, again).tick()
    assert numbers(again.batches) == list(range(50))


# -- safety --------------------------------------------------------------------------------------


def test_fifo_socket_and_outward_symlink_are_skipped(tmp_path: Path) -> None:
    root, state = job(tmp_path), tmp_path / "state"
    write(root / "logs" / "app.log", 0, 3)
    os.mkfifo(root / "logs" / "pipe.log")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "logs" / "s.sock"))
    outside = tmp_path / "secret.txt"
    outside.write_text("root:x:0:0:root\n")
    (root / "logs" / "passwd.log").symlink_to(outside)
    (root / "logs" / "dir-link").symlink_to(tmp_path)
    (root / "logs" / "inside.log").symlink_to(root / "logs" / "app.log")
    sink = Collect()
    s = shipper(root, state, sink)
    s.tick()  # returns: a FIFO is never opened
    sock.close()
    assert numbers(sink.batches) == [0, 1, 2]  # the inside link is the same file: read once
    assert all("root:x" not in line for b in sink.batches for line in b.lines)
    assert s.logs.counters.skipped == {"not_regular": 2, "symlink_outside": 2}


# -- spool and delivery ----------------------------------------------------------------------------


class FakeFuture:
    def __init__(self, exc: Exception | None) -> None:
        self.is_done = True
        self.exception = exc

    def succeeded(self) -> bool:
        return self.exception is None


class FakeProducer:
    """Records what it accepted; `down` makes every send fail; `limit` rejects bigger records."""

    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.closed = False

    def send(self, topic: str, value: bytes, key: bytes | None = None) -> FakeFuture:
        if self.broker.down:
            raise KafkaTimeoutError("no metadata")
        if len(value) > self.broker.limit:
            return FakeFuture(MessageSizeTooLargeError())
        self.broker.topics.setdefault(topic, []).append(value)
        return FakeFuture(None)

    def flush(self, timeout: float | None = None) -> None:
        pass

    def close(self, timeout: float | None = None) -> None:
        self.closed = True


class FakeBroker:
    def __init__(self) -> None:
        self.down = False
        self.limit = 1 << 30
        self.topics: dict[str, list[bytes]] = {}
        self.producers = 0

    def producer(self) -> FakeProducer:
        self.producers += 1
        return FakeProducer(self)

    def lines(self) -> list[int]:
        out: list[LogBatch] = []
        for values in self.topics.values():
            for v in values:
                ev = decode_event(v)
                if isinstance(ev, LogBatch):
                    out.append(ev)
        return numbers(out)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_outage_goes_to_the_spool_and_drains_in_order(tmp_path: Path) -> None:
    root, state = job(tmp_path), tmp_path / "state"
    log = root / "logs" / "app.log"
    broker, clock = FakeBroker(), Clock()
    sender = ReliableSender("x:1", spool=Spool(tmp_path / "spool", 1 << 30), producer_factory=broker.producer,
                            clock=clock)
    s = FolderShipper(root, deliver=sender.deliver, job_id="j1", clock=CLOCK, state_dir=state)
    write(log, 0, 100)
    s.tick()
    broker.down = True
    for k in range(5):
        write(log, 100 + 100 * k, 100)
        s.tick()
        clock.t += 60
    assert broker.lines() == list(range(100)) and sender.spool is not None and sender.spool.size() > 0
    assert sender.counters.producer_rebuilds >= 1 and not sender.healthy
    broker.down = False
    clock.t += 60
    write(log, 600, 10)
    s.tick()
    assert broker.lines() == list(range(610))
    assert not sender.spool and sender.healthy
    # the checkpoints were committed while the broker was down (the spool held the lines)
    again = Collect()
    shipper(root, state, again).tick()
    assert again.batches == []


def test_spool_cap_drops_are_counted_and_equal_the_missing_lines(tmp_path: Path) -> None:
    root, state = job(tmp_path), tmp_path / "state"
    log = root / "logs" / "app.log"
    broker, clock = FakeBroker(), Clock()
    sender = ReliableSender("x:1", spool=Spool(tmp_path / "spool", 64 << 10), producer_factory=broker.producer,
                            clock=clock)
    s = FolderShipper(root, deliver=sender.deliver, job_id="j1", clock=CLOCK, state_dir=state, batch_lines=100)
    broker.down = True
    total = 0
    for _k in range(10):
        write(log, total, 400, width=20)
        total += 400
        s.tick()
        clock.t += 60
    broker.down = False
    clock.t += 60
    s.tick()
    assert sender.drain(10)
    got = broker.lines()
    assert got == sorted(got) and len(set(got)) == len(got)
    dropped = sender.counters.dropped_lines.get("spool_full", 0)
    assert dropped > 0 and dropped == total - len(got)


def test_spool_survives_a_restart_and_cuts_a_torn_record(tmp_path: Path) -> None:
    sp = Spool(tmp_path / "sp", 1 << 20)
    recs = [Record("t", b"k", f"v{i}".encode(), i) for i in range(5)]
    assert sp.append(recs) == []
    seg = next((tmp_path / "sp").glob("*.seg"))
    with seg.open("ab") as f:
        f.write(b"\x00\x01garbage")  # a crash mid-append
    sp2 = Spool(tmp_path / "sp", 1 << 20)
    got = sp2.peek()
    assert [r.value for r, _p in got] == [f"v{i}".encode() for i in range(5)]
    sp2.advance(got[1][1])
    sp3 = Spool(tmp_path / "sp", 1 << 20)
    assert [r.value for r, _p in sp3.peek()] == [b"v2", b"v3", b"v4"]
    sp3.advance(sp3.peek()[-1][1])
    assert not sp3 and sp3.append([Record("t", None, b"x")]) == []
    assert [(r.key, r.value) for r, _p in Spool(tmp_path / "sp", 1 << 20).peek()] == [(None, b"x")]


def test_big_batches_are_split_under_the_record_limit_and_a_broker_rejection_splits_again(tmp_path: Path) -> None:
    root, state = job(tmp_path), tmp_path / "state"
    write(root / "logs" / "big.log", 0, 500, width=12_000)  # 6 MB in one 500-line batch
    broker = FakeBroker()
    sender = ReliableSender("x:1", spool=Spool(tmp_path / "spool", 1 << 30), producer_factory=broker.producer)
    s = FolderShipper(root, deliver=sender.deliver, job_id="j1", clock=CLOCK, state_dir=state)
    s.tick()
    assert broker.lines() == list(range(500))
    assert sender.counters.batches_split > 0
    assert max(len(v) for vs in broker.topics.values() for v in vs) <= sender.max_record_bytes
    # a broker with a smaller limit than ours: rejected records are split further, nothing is lost
    broker.topics.clear()
    broker.limit = 300_000
    write(root / "logs" / "big.log", 500, 200, width=12_000)
    s.tick()
    assert broker.lines() == list(range(500, 700))
    assert sender.counters.dropped_lines == {}


def test_a_giant_line_is_cut_with_a_note_and_heartbeats_go_on(tmp_path: Path) -> None:
    root, state = job(tmp_path), tmp_path / "state"
    log = root / "logs" / "app.log"
    write(log, 0, 3)
    with log.open("a") as f:
        f.write("line 00000003 " + "y" * (20 << 20) + "\n")
    write(log, 4, 3)
    broker = FakeBroker()
    sender = ReliableSender("x:1", spool=Spool(tmp_path / "spool", 1 << 30), producer_factory=broker.producer)
    s = FolderShipper(root, deliver=sender.deliver, job_id="j1", clock=CLOCK, state_dir=state,
                      max_bytes_per_tick=64 << 20)
    while True:
        s.tick()
        if not s.more:
            break
    assert broker.lines() == list(range(7))
    batches = [decode_event(v) for vs in broker.topics.values() for v in vs]
    assert sum(b.truncated_lines for b in batches if isinstance(b, LogBatch)) == 1
    assert s.logs.counters.lines_cut == 1
    assert sum(1 for b in batches if b.kind == "heartbeat") == s.counters.heartbeats >= 1


def test_split_batch_keeps_offsets_and_line_numbers() -> None:
    b = LogBatch(job_id="j", event_time=CLOCK(), lines=["a", "bb", "ccc"], offsets=[0, 2, 5], first_line_no=7,
                 truncated_lines=1)
    x, y = split_batch(b)
    assert (x.lines, x.offsets, x.first_line_no) == (["a"], [0], 7)
    assert (y.lines, y.offsets, y.first_line_no) == (["bb", "ccc"], [2, 5], 8)
    assert x.truncated_lines + y.truncated_lines == 1


def test_without_a_spool_a_failed_delivery_keeps_the_checkpoint(tmp_path: Path) -> None:
    root, state = job(tmp_path), tmp_path / "state"
    write(root / "logs" / "a.log", 0, 20)
    broker, clock = FakeBroker(), Clock()
    broker.down = True
    sender = ReliableSender("x:1", spool=None, producer_factory=broker.producer, clock=clock)
    s = FolderShipper(root, deliver=sender.deliver, job_id="j1", clock=CLOCK, state_dir=state)
    s.tick()
    assert s.counters.deliveries_failed == 1
    broker.down = False
    clock.t += 100
    s.tick()
    assert broker.lines() == list(range(20))


@pytest.mark.parametrize("n", [1, 3])
def test_spool_rejects_in_order_when_full(tmp_path: Path, n: int) -> None:
    sp = Spool(tmp_path / "sp", 100)
    recs = [Record("t", None, b"x" * 40, 1) for _ in range(n)]
    rejected = sp.append(recs)
    assert len(rejected) == max(0, n - 1)


# -- the real broker -------------------------------------------------------------------------------


def _topic_lines(bootstrap: str, catalog) -> tuple[list[int], int, list[bool]]:
    """(line numbers on the log topic, lines cut, each heartbeat's `stopping`) read back from the broker."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(catalog.topic_for_kind("log_batch"), catalog.topic_for_kind("heartbeat"),
                             bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000,
                             enable_auto_commit=False, fetch_max_bytes=64 << 20, max_partition_fetch_bytes=16 << 20)
    from rlhealth.schemas.events import ShipperHeartbeat

    batches: list[LogBatch] = []
    heartbeats: list[bool] = []
    for record in consumer:
        ev = decode_event(record.value)
        if isinstance(ev, LogBatch):
            batches.append(ev)
        elif isinstance(ev, ShipperHeartbeat):
            heartbeats.append(ev.stopping)
    consumer.close()
    batches.sort(key=lambda b: b.offsets[0] if b.offsets else 0)
    return numbers(batches), sum(b.truncated_lines for b in batches), heartbeats


@pytest.mark.kafka
def test_ship_cli_big_lines_giant_line_and_sigterm_drain(kafka_bootstrap: str, kafka_catalog, tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    root = job(tmp_path)
    log = root / "logs" / "big.log"
    write(log, 0, 500, width=12_000)  # 6 MB: over the topic's 4 MiB limit as one batch
    with log.open("a") as f:
        f.write("line 00000500 " + "z" * (20 << 20) + "\n")
    write(log, 501, 99)
    env = dict(os.environ, RLHEALTH_TOPIC_PREFIX=kafka_catalog.prefix)
    proc = subprocess.Popen([sys.executable, "-m", "rlhealth", "ship", str(root), "--bootstrap", kafka_bootstrap,
                             "--job-id", "j1", "--interval", "0.2", "--state-dir", str(tmp_path / "state")],
                            env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (tmp_path / "state" / "checkpoints.json").exists():
        time.sleep(0.2)
    write(log, 600, 10)  # written just before SIGTERM: drained on the way out
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    got, cut, heartbeats = _topic_lines(kafka_bootstrap, kafka_catalog)
    assert sorted(got) == list(range(610)) and len(got) == 610, err
    assert cut == 1 and len(heartbeats) >= 2 and heartbeats[-1] is True and heartbeats.count(True) == 1


def test_watch_and_probe_skip_fifos_and_outward_symlinks(tmp_path: Path) -> None:
    from rlhealth.sources.capture import open_capture
    from rlhealth.sources.follow import CaptureFollower

    root = job(tmp_path)
    write(root / "logs" / "app.log", 0, 3)
    os.mkfifo(root / "logs" / "pipe.log")
    (root / "gpu").mkdir()
    os.mkfifo(root / "gpu" / "host1.csv")
    os.mkfifo(root / "state.jsonl")
    os.mkfifo(root / "job.json")
    outside = tmp_path / "secret.txt"
    outside.write_text("root:x:0:0:root\n")
    (root / "logs" / "passwd.log").symlink_to(outside)
    (root / "capture.json").write_text('{"job_id": "j1", "cluster": "c", "scheduler": "other", '
                                       '"captured_at": "2026-10-14T16:20:00Z"}')
    f = CaptureFollower(root, clock=CLOCK)
    events = f.poll() + f.poll()  # returns: no FIFO is opened
    batches = [e for e in events if isinstance(e, LogBatch)]
    assert numbers(batches) == [0, 1, 2]
    skipped = {p.path for p in f._cap.problems if "not a regular file" in p.note or "symlink" in p.note}
    assert {"logs/pipe.log", "gpu/host1.csv", "logs/passwd.log"} <= skipped
    cap = open_capture(root)
    evs = list(cap.events())
    assert numbers([e for e in evs if isinstance(e, LogBatch)]) == [0, 1, 2]
    assert all("root:x" not in line for e in evs if isinstance(e, LogBatch) for line in e.lines)


# -- redaction and job-spec validation ----------------------------------------------------------------

LEAKED_FORMS = [
    ("\x1b[1;33mWANDB_API_KEY\x1b[0m=0123456789abcdef", "0123456789abcdef"),
    ("\x1b[31mpassword\x1b[0m: hunter2hunter2", "hunter2hunter2"),
    ("python train.py --aws-secret-access-key wJalrXUtnFEMIK7MDENGbPxRfiCY", "wJalrXUtnFEMIK7MDENGbPxRfiCY"),
    ("python train.py --wandb-key=abcdef0123456789", "abcdef0123456789"),
    ("WANDB_KEY=abcdef0123456789 python x.py", "abcdef0123456789"),
    ('{"wandb": {"key": "abcdef0123456789"}}', "abcdef0123456789"),
    ("  key: abcdef0123456789", "abcdef0123456789"),
    ("aws_secret_access_key: wJalrXUtnFEMIK7MDENG", "wJalrXUtnFEMIK7MDENG"),
    ("export MY_SERVICE_CREDENTIALS=s3cr3tvalue", "s3cr3tvalue"),
]


@pytest.mark.parametrize("line,secret", LEAKED_FORMS)
def test_every_leaked_form_is_masked_in_shipped_batches(tmp_path: Path, line: str, secret: str) -> None:
    root, state = job(tmp_path), tmp_path / "state"
    (root / "logs" / "app.log").write_text(f"2026-10-14 16:19:00 INFO start\n{line}\nafter\n")
    sink = Collect()
    shipper(root, state, sink).tick()
    text = "\n".join(line for b in sink.batches for line in b.lines)
    assert "after" in text and secret not in text and "[REDACTED]" in text


def test_ordinary_lines_with_colour_codes_are_shipped_unchanged(tmp_path: Path) -> None:
    from rlhealth.sources.redact import redact

    for line in ["\x1b[32mINFO\x1b[0m step 5 loss=0.3", "max_tokens=4096 tokenizer=qwen --max-tokens 8",
                 "monkey=banana"]:
        assert redact(line) == line


def test_config_and_job_spec_secrets_never_reach_the_spec(tmp_path: Path) -> None:
    import orjson

    from rlhealth.schemas.events import JobSpec

    root, state = job(tmp_path), tmp_path / "state"
    (root / "config").mkdir()
    (root / "config" / "train.yaml").write_text(
        "trainer:\n  password: hunter2hunter2\n  aws_secret_access_key: wJalrXUtnFEMIK7MDENG\n"
        "  db: postgres://u:pw12345@db/x\n  max_tokens: 4096\nwandb:\n  key: abcdef0123456789\n  project: p\n")
    (root / "job.json").write_text(orjson.dumps({"config": {"hf_token": "hf_abcdefghijklmnopqrstu",
                                                            "run_name": "r1"}}).decode())
    sink = Collect()
    shipper(root, state, sink).tick()
    (spec,) = [e for e in sink.events if isinstance(e, JobSpec)]
    dumped = spec.model_dump_json()
    for secret in ("hunter2hunter2", "wJalrXUtnFEMIK7MDENG", "pw12345", "abcdef0123456789", "hf_abcdefghij"):
        assert secret not in dumped
    assert spec.config["trainer.max_tokens"] == 4096 and spec.config["wandb.project"] == "p"
    assert spec.config["run_name"] == "r1" and spec.config["wandb.key"] == "[REDACTED]"


def test_job_spec_counts_are_validated_with_a_clear_error(tmp_path: Path) -> None:
    import orjson

    from rlhealth.schemas.events import JobSpec
    from rlhealth.sources.follow import CaptureFollower

    root = job(tmp_path)
    (root / "job.json").write_text(orjson.dumps({
        "geometry": {"num_inference_engines": 10**9, "engine_tp": 8},
        "hardware": {"nodes": -3, "gpus_per_node": 8}, "rollout": {"n_concurrent_trials": 64}}).decode())
    f = CaptureFollower(root, job_id="j1", clock=CLOCK)
    (spec,) = [e for e in f.poll() if isinstance(e, JobSpec)]
    assert spec.geometry.num_inference_engines is None and spec.hardware.nodes is None
    assert spec.rollout.n_concurrent_trials == 64
    notes = " | ".join(p.note for p in f.problems if p.path == "job.json")
    assert "geometry.num_inference_engines=1000000000" in notes and "hardware.nodes=-3" in notes


# -- exactly once as seen by the core ------------------------------------------------------------------


def _fold(batches: list[LogBatch]):
    from rlhealth.runtime import build_core

    core = build_core()
    state = core.new_state("j1")
    for b in batches:
        state, _f = core.step(state, b, CLOCK())
    return core, state


def test_resent_batches_change_no_count_and_no_verdict(tmp_path: Path) -> None:
    root, state_dir = job(tmp_path), tmp_path / "state"
    log = root / "logs" / "pod_rank0.log"
    lines = [f"2026-10-14 16:{m:02d}:00 INFO step {m} loss=0.5" for m in range(10)]
    lines.insert(5, "2026-10-14 16:05:30 ERROR torch.distributed.DistBackendError: NCCL error in: watchdog timeout")
    clean, resent = Collect(), Collect()
    for i, line in enumerate(lines):
        with log.open("a") as f:
            f.write(line + "\n")
        if i % 3 == 0:
            shipper(root, tmp_path / "clean", clean).tick()
            # the "crashing" shipper delivers, then dies before committing: every batch goes out twice
            s = shipper(root, state_dir, resent)
            events = s.logs.poll()
            resent.batches.extend(b for b, _m in events)
            s.logs.rewind()
            s.tick()
    shipper(root, tmp_path / "clean", clean).tick()
    shipper(root, state_dir, resent).tick()
    assert len(numbers_any(resent.batches)) > len(numbers_any(clean.batches))  # duplicates on the wire
    core, a = _fold(clean.batches)
    _core, b = _fold(resent.batches)
    assert a.lines == b.lines == len(lines) and a.events == b.events
    assert {k: v.lines for k, v in a.streams.items()} == {k: v.lines for k, v in b.streams.items()}
    assert {k: v.count for k, v in a.signals.items()} == {k: v.count for k, v in b.signals.items()}
    va, vb = core.judge(a, CLOCK()), core.judge(b, CLOCK())
    assert va.model_dump(exclude={"produced_at"}) == vb.model_dump(exclude={"produced_at"})


def numbers_any(batches: list[LogBatch]) -> list[str]:
    return [line for b in batches for line in b.lines]


def test_folded_lines_are_dropped_by_line_range_even_out_of_order() -> None:
    from rlhealth.agents import ingest
    from rlhealth.agents.state import JobHealth
    from rlhealth.schemas import Source

    st = JobHealth(job_id="j")
    src = Source(stream="logs/a.log")

    def batch(first: int, n: int, fid: str = "f#0") -> LogBatch:
        return LogBatch(job_id="j", event_time=CLOCK(), source=src, lines=[f"l{first + i}" for i in range(n)],
                        offsets=[10 * (first + i) for i in range(n)], first_line_no=first, file_id=fid)

    assert ingest.drop_folded_lines(st, batch(10, 5)) is not None  # 10..14
    assert ingest.drop_folded_lines(st, batch(0, 5)) is not None  # 0..4 arrives late: still new
    assert ingest.drop_folded_lines(st, batch(0, 5)) is None  # a resend
    part = ingest.drop_folded_lines(st, batch(3, 10))  # 3..12: only 5..9 are new
    assert part is not None and part.lines == [f"l{i}" for i in range(5, 10)] and part.first_line_no == 5
    assert part.offsets == [50, 60, 70, 80, 90]
    assert ingest.drop_folded_lines(st, batch(0, 15)) is None
    assert ingest.drop_folded_lines(st, batch(0, 3, fid="f#1")) is not None  # truncated: a new file id
    plain = LogBatch(job_id="j", event_time=CLOCK(), source=src, lines=["x"], first_line_no=0)
    assert ingest.drop_folded_lines(st, plain) is plain  # captures and replays carry no file id


def test_heartbeat_says_behind_while_the_spool_holds_records(tmp_path: Path) -> None:
    from rlhealth.schemas.events import ShipperHeartbeat

    root, state = job(tmp_path), tmp_path / "state"
    write(root / "logs" / "app.log", 0, 50)
    broker, clock = FakeBroker(), Clock()
    spool = Spool(tmp_path / "spool", 1 << 30)
    sender = ReliableSender("x:1", spool=spool, producer_factory=broker.producer, clock=clock)
    s = FolderShipper(root, deliver=sender.deliver, job_id="j1", clock=CLOCK, state_dir=state)
    s.pending = spool.size
    broker.down = True
    s.tick()
    s.tick()
    broker.down = False
    clock.t += 100
    s.tick()
    hbs = [decode_event(v) for vs in broker.topics.values() for v in vs]
    hbs = [h for h in hbs if isinstance(h, ShipperHeartbeat)]
    assert [h.behind for h in hbs] == [False, True, True]
    assert any(h.behind and (h.lag_bytes or 0) > 0 for h in hbs)
    s.tick()
    last = [decode_event(v) for vs in broker.topics.values() for v in vs][-1]
    assert isinstance(last, ShipperHeartbeat) and last.behind is False


def test_site_specific_secret_names_are_configurable() -> None:
    import subprocess
    import sys

    code = ("from rlhealth.sources.redact import redact, redact_config, Redactor\n"
            "assert redact('AZURE_SAS=sv2020abcdef') == 'AZURE_SAS=[REDACTED]'\n"
            "assert redact('run --conn_str Server=x') == 'run --conn_str [REDACTED]'\n"
            "assert redact('sassy=1') == 'sassy=1'\n"
            "assert redact_config({'storage': {'sas': 'abc'}}) == {'storage': {'sas': '[REDACTED]'}}\n"
            "for e in ('re', 'hyperscan'):\n"
            "    assert Redactor(e).hit_lines(b'a\\nAZURE_SAS=abc\\nb') == [1]\n")
    env = dict(os.environ, RLHEALTH_REDACT_NAMES="sas,conn_str")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_rotation_with_immediate_gzip_loses_nothing(tmp_path: Path) -> None:
    root, state = job(tmp_path), tmp_path / "state"
    log = root / "logs" / "app.log"
    sink = Collect()
    s = shipper(root, state, sink)
    n = 0
    for _round in range(3):
        write(log, n, 100)
        n += 100
        s.tick()
        write(log, n, 50)  # not read yet when the file is rotated, compressed and deleted
        n += 50
        os.replace(log, log.with_name("app.log.1"))
        with open(log.with_name("app.log.1"), "rb") as src, gzip.open(log.with_name("app.log.1.gz"), "wb") as dst:
            dst.write(src.read())
        os.unlink(log.with_name("app.log.1"))
        write(log, n, 10)
        n += 10
        s.tick()
    s.tick()
    assert numbers(sink.batches) == list(range(n))
    assert s.logs.counters.lost_bytes == 0 and not s.logs._fds.keys() - set(s.store.files)


def test_shipper_metrics_endpoint_serves_the_component_counters(tmp_path: Path) -> None:
    import urllib.request

    from rlhealth.cli.ship import shipper_metrics
    from rlhealth.sinks.prometheus import serve_snapshot

    root, state = job(tmp_path), tmp_path / "state"
    write(root / "logs" / "app.log", 0, 30)
    os.mkfifo(root / "logs" / "p.log")
    broker, clock = FakeBroker(), Clock()
    spool = Spool(tmp_path / "spool", 24_000)
    sender = ReliableSender("x:1", spool=spool, producer_factory=broker.producer, clock=clock)
    s = FolderShipper(root, deliver=sender.deliver, job_id="j1", clock=CLOCK, state_dir=state)
    s.tick()
    broker.down = True
    write(root / "logs" / "app.log", 30, 2000)
    s.tick()
    port = serve_snapshot(lambda: shipper_metrics(s, sender), 0)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
              if line and not line.startswith("#")}
    assert values["rlhealth_shipper_lines_read_total"] == 2030
    assert values["rlhealth_shipper_lines_sent_total"] == 30
    assert values['rlhealth_shipper_lines_dropped_total{reason="spool_full"}'] > 0
    assert values['rlhealth_shipper_files_skipped_total{reason="not_regular"}'] == 1
    assert values["rlhealth_shipper_spooled_bytes_total"] > 0 and values["rlhealth_shipper_send_errors_total"] >= 1
    assert values["rlhealth_shipper_checkpoint_lag_bytes"] == 0 and values["rlhealth_shipper_broker_healthy"] == 0
    assert "rlhealth_shipper_retries_total" in values and "rlhealth_shipper_batches_sent_total" in values


def test_folded_ranges_stay_bounded() -> None:
    from rlhealth.agents import ingest
    from rlhealth.agents.state import MAX_FOLDED_FILES, MAX_FOLDED_RANGES, JobHealth
    from rlhealth.schemas import Source

    st = JobHealth(job_id="j")
    for f in range(300):
        for k in range(20):  # every other 10-line range: 20 disjoint ranges per file
            b = LogBatch(job_id="j", event_time=CLOCK(), source=Source(stream=f"logs/pod_rank{f % 64}.log"),
                         lines=["x"] * 10, first_line_no=20 * k, file_id=f"64768:{1000 + f}:abcdef012345#0")
            assert ingest.drop_folded_lines(st, b) is not None
    assert len(st.folded) == MAX_FOLDED_FILES
    assert all(len(r) <= MAX_FOLDED_RANGES for r in st.folded.values())
    assert len(st.to_bytes()) < 32_000


def test_a_fifo_in_a_trial_dir_does_not_block_watch(tmp_path: Path) -> None:
    from rlhealth.sources.follow import CaptureFollower

    root = job(tmp_path)
    trial = root / "trace_jobs" / "task-1__abc"
    (trial / "agent").mkdir(parents=True)
    (trial / "config.json").write_text('{"task": {"path": "task-1"}}')
    os.mkfifo(trial / "result.json")
    os.mkfifo(trial / "exception.txt")
    os.mkfifo(trial / "agent" / "trajectory.json")
    f = CaptureFollower(root, job_id="j1", clock=CLOCK)
    f.poll()
    f.poll()  # returns: nothing blocks on a FIFO


# -- other live sources ----------------------------------------------------------------------------


class Ran:
    def __init__(self, returncode: int, stdout: str, stderr: str = "") -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def test_state_command_gives_state_polls_and_notes_failures() -> None:
    from rlhealth.sources.state_command import StateCommandPoller

    outputs = [Ran(0, '{"state": "running", "pods": 8, "attempt": 1, "max_retries": 3}\n'),
               Ran(0, '{"ts": "2026-10-14T16:00:00Z", "state": "failed", "failure_count": 2}'),
               Ran(1, "", "squeue: error: Invalid job id"), Ran(0, "not json")]
    p = StateCommandPoller("squeue --json -j 42", job_id="j1", runner=lambda argv: outputs.pop(0), clock=CLOCK,
                           scheduler="slurm")
    a = p.poll()
    assert a is not None and a.state == "running" and a.pods == 8 and a.event_time == CLOCK()
    b = p.poll()
    assert b is not None and b.state == "failed" and b.failure_count == 2 and b.scheduler == "slurm"
    assert p.poll() is None and p.poll() is None
    assert len(p.errors) == 2 and "status 1" in p.errors[0] and "bad output" in p.errors[1]


def test_state_command_runs_a_real_process_in_the_shipper(tmp_path: Path) -> None:
    import shlex
    import sys

    from rlhealth.schemas.events import JobStatePoll
    from rlhealth.sources.state_command import StateCommandPoller

    root, state = job(tmp_path), tmp_path / "state"
    cmd = f"{shlex.quote(sys.executable)} -c 'print(\"{{\\\"state\\\": \\\"running\\\", \\\"pods\\\": 2}}\")'"
    poller = StateCommandPoller(cmd, job_id="j1", clock=CLOCK)
    sink = Collect()
    shipper(root, state, sink, extra_polls=[poller.poll]).tick()
    (poll,) = [e for e in sink.events if isinstance(e, JobStatePoll)]
    assert poll.state == "running" and poll.pods == 2 and poller.errors == []


def test_a_restart_sends_no_gpu_state_or_trial_event_twice(tmp_path: Path) -> None:
    from tests.scenario_support import ROOT

    cap = tmp_path / "cap"
    shutil.copytree(ROOT / "rlhealth" / "examples" / "capture-healthy", cap)
    state = tmp_path / "state"
    first = Collect()
    s = FolderShipper(cap, deliver=first, shipper_id="t", clock=CLOCK, state_dir=state)
    s.tick()
    s.tick()
    kinds = {e.kind for e in first.events}
    assert {"gpu_poll", "trial", "job_state", "log_batch"} <= kinds
    again = Collect()
    s2 = FolderShipper(cap, deliver=again, shipper_id="t", clock=CLOCK, state_dir=state)
    s2.tick()
    s2.tick()
    assert {e.kind for e in again.events} <= {"job_spec", "heartbeat"}
    # new rows after the restart are sent
    gpu = next((cap / "gpu").glob("*.csv"))
    last = gpu.read_text().strip().splitlines()[-1]
    stamp = last.split(",")[0]
    newer = last.replace(stamp, stamp[:-2] + "59", 1)
    with gpu.open("a") as f:
        f.write(newer + "\n")
    s2.tick()
    s2.tick()
    assert any(e.kind == "gpu_poll" for e in again.events)


def test_a_corrupt_spool_segment_is_skipped_not_looped_on(tmp_path: Path) -> None:
    broker = FakeBroker()
    spool = Spool(tmp_path / "sp", 1 << 20)
    spool.append([Record("t", None, b"a" * 100, 1), Record("t", None, b"b" * 100, 1)])
    seg = next((tmp_path / "sp").glob("*.seg"))
    data = bytearray(seg.read_bytes())
    data[10] ^= 0xFF  # the first record's bytes no longer match its CRC
    seg.write_bytes(bytes(data))
    sender = ReliableSender("x:1", spool=spool, producer_factory=broker.producer)
    assert sender.drain(5) and not spool
    assert sender.counters.dropped_records == 1
    assert spool.append([Record("t", None, b"c", 1)]) == [] and sender.drain(5)
    assert broker.topics == {"t": [b"c"]}


def test_an_inode_reused_under_another_name_is_a_new_file(tmp_path: Path) -> None:
    root, state = job(tmp_path), tmp_path / "state"
    write(root / "logs" / "old.log", 0, 20)
    sink = Collect()
    shipper(root, state, sink).tick()
    store = CheckpointStore(state)
    (cp,) = store.files.values()
    # the shipper was down: old.log was deleted and new.log got its inode (forged: same inode, other name)
    os.replace(root / "logs" / "old.log", root / "logs" / "new.log")
    (root / "logs" / "new.log").write_text("".join(f"line {i:08d} \n" for i in range(100, 105)))
    again = Collect()
    s2 = shipper(root, state, again)
    s2.tick()
    assert numbers(again.batches) == list(range(100, 105))
    assert {b.source.stream for b in again.batches} == {"logs/new.log"}
    assert s2.logs.counters.files_truncated == 0
