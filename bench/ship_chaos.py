"""Chaos benchmark of `rlhealth ship`: real broker, real shipper processes, numbered lines counted on the topic.

Every case writes numbered lines ("... seq <n> ...") into a fresh job folder while one or more real
`rlhealth ship` processes follow it, injects its fault, stops the shipper with SIGTERM (it drains),
then reads the log topic back and counts:

* lost: numbers written but absent from the topic;
* raw duplicates: copies on the topic beyond the first (resends after a crash or an outage);
* duplicated: copies left after the core's dedupe (`rlhealth.agents.ingest.drop_folded_lines`,
  what `HealthCore.step` applies), the number that matters.

Cases (`--cases`, default all): outage-60, outage-300 (broker stopped that long under load; the
lengths come from `--outages`), kill9 (three `kill -9` + restart), rename (three rename rotations),
copytruncate (three), big (500 lines of 12 KB and one 20 MB line), spool-cap (an outage with a small
spool: the dropped count must equal the lines missing), backlog (peak RSS reading a `--backlog-mb`
file), throughput (file -> broker against `kcat -P` on the same file and broker).

Prints one line per case and ends with
    RESULT lost=<n> duplicated=<m>

    python bench/ship_chaos.py [--cases outage-60,kill9,...] [--outages 60,300] [--rate 200] [--backlog-mb 400]

The broker is started with scripts/kafka.sh in its own directory (`--kafka-dir`) and restarted with
RLHEALTH_KAFKA_KEEP=1 (same port, same data) for the outages; it is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kafka import KafkaConsumer  # noqa: E402

from rlhealth.agents import ingest  # noqa: E402
from rlhealth.agents.state import JobHealth  # noqa: E402
from rlhealth.schemas import decode_event  # noqa: E402
from rlhealth.schemas.events import LogBatch, ShipperHeartbeat  # noqa: E402
from rlhealth.schemas.topics import TopicCatalog  # noqa: E402
from rlhealth.sinks.kafka import ensure_topics  # noqa: E402

KAFKA_SH = REPO / "scripts" / "kafka.sh"
SEQ_RE = re.compile(r" seq (\d+) ")


# -- broker ---------------------------------------------------------------------------------------


class Broker:
    def __init__(self, directory: Path) -> None:
        self.env = dict(os.environ, RLHEALTH_KAFKA_DIR=str(directory))
        self.bootstrap = ""

    def start(self, keep: bool = False) -> str:
        env = dict(self.env, RLHEALTH_KAFKA_KEEP="1") if keep else self.env
        out = subprocess.run([str(KAFKA_SH), "start"], env=env, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise SystemExit(f"kafka.sh start failed: {out.stderr[-2000:]}")
        self.bootstrap = out.stdout.strip().splitlines()[-1]
        return self.bootstrap

    def stop(self) -> None:
        subprocess.run([str(KAFKA_SH), "stop"], env=self.env, capture_output=True, text=True, timeout=300)


# -- writer and shipper ---------------------------------------------------------------------------


class Writer(threading.Thread):
    """Appends numbered lines at `rate` lines/s; `rotate(kind)` rotates between two lines."""

    def __init__(self, path: Path, rate: float, width: int = 60) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.rate = rate
        self.width = width
        self.n = 0
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.f = path.open("a", buffering=1)

    def run(self) -> None:
        t0 = time.monotonic()
        pad = "p" * self.width
        while not self.stop_flag.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            with self.lock:
                while self.n < due:
                    self.f.write(f"2026-10-14 16:20:00 INFO seq {self.n} {pad}\n")
                    self.n += 1
                self.f.flush()
            time.sleep(0.01)

    def rotate(self, kind: str) -> None:
        with self.lock:
            self.f.flush()
            d, name = self.path.parent, self.path.name
            for k in range(8, 0, -1):
                older = d / f"{name}.{k}"
                if older.exists():
                    os.replace(older, d / f"{name}.{k + 1}")
            if kind == "rename":
                self.f.close()
                os.replace(self.path, d / f"{name}.1")
                self.f = self.path.open("a", buffering=1)
            else:  # copytruncate: copy, then truncate in place; the writer keeps its O_APPEND handle
                shutil.copyfile(self.path, d / f"{name}.1")
                os.truncate(self.path, 0)

    def finish(self) -> int:
        self.stop_flag.set()
        self.join()
        with self.lock:
            self.f.close()
        return self.n


@dataclass
class Job:
    root: Path
    state: Path
    job_id: str
    prefix: str
    catalog: TopicCatalog


def new_job(base: Path, bootstrap: str, name: str) -> Job:
    job_id = f"chaos-{name}-{uuid.uuid4().hex[:6]}"
    root = base / job_id
    (root / "logs").mkdir(parents=True)
    prefix = f"chaos{uuid.uuid4().hex[:8]}."
    catalog = TopicCatalog.from_env(prefix=prefix)
    ensure_topics(bootstrap, catalog)
    return Job(root, base / f"{job_id}.state", job_id, prefix, catalog)


def start_shipper(job: Job, bootstrap: str, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, RLHEALTH_TOPIC_PREFIX=job.prefix, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "rlhealth", "ship", str(job.root), "--bootstrap", bootstrap, "--job-id", job.job_id,
           "--interval", "0.5", "--state-dir", str(job.state), "--flush-timeout", "5", *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop_shipper(proc: subprocess.Popen, timeout: float = 180) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        _out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _out, err = proc.communicate()
        err += "\n(shipper did not stop in time: killed)"
    return err


def wait_checkpoint(job: Job, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (job.state / "checkpoints.json").exists():
        time.sleep(0.2)


# -- counting -------------------------------------------------------------------------------------


@dataclass
class Count:
    written: int
    lost: int
    raw_duplicates: int
    duplicated: int
    batches: int
    heartbeats: int
    cut: int


def count(job: Job, bootstrap: str, written: set[int]) -> Count:
    consumer = KafkaConsumer(job.catalog.topic_for_kind("log_batch"), job.catalog.topic_for_kind("heartbeat"),
                             bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=8000,
                             enable_auto_commit=False, fetch_max_bytes=64 << 20, max_partition_fetch_bytes=16 << 20)
    state = JobHealth(job_id=job.job_id)
    raw: list[int] = []
    kept: list[int] = []
    batches = heartbeats = cut = 0
    for record in consumer:
        ev = decode_event(record.value)
        if isinstance(ev, ShipperHeartbeat):
            heartbeats += 1
            continue
        if not isinstance(ev, LogBatch):
            continue
        batches += 1
        cut += ev.truncated_lines
        raw.extend(_numbers(ev.lines))
        new = ingest.drop_folded_lines(state, ev)
        if new is not None:
            kept.extend(_numbers(new.lines))
    consumer.close()
    seen = set(raw)
    return Count(written=len(written), lost=len(written - seen), raw_duplicates=len(raw) - len(seen),
                 duplicated=len(kept) - len(set(kept)), batches=batches, heartbeats=heartbeats, cut=cut)


def _numbers(lines: list[str]) -> list[int]:
    out = []
    for s in lines:
        m = SEQ_RE.search(s[:200])
        if m:
            out.append(int(m.group(1)))
    return out


def report(name: str, c: Count, extra: str = "") -> Count:
    print(f"{name:14s} written={c.written} lost={c.lost} duplicated={c.duplicated} raw_duplicates={c.raw_duplicates} "
          f"batches={c.batches} heartbeats={c.heartbeats}{(' ' + extra) if extra else ''}", flush=True)
    return c


# -- cases ----------------------------------------------------------------------------------------


def case_outage(base: Path, broker: Broker, rate: float, outage_s: float) -> Count:
    job = new_job(base, broker.bootstrap, f"outage{int(outage_s)}")
    w = Writer(job.root / "logs" / "app.log", rate)
    w.start()
    proc = start_shipper(job, broker.bootstrap)
    time.sleep(8)
    broker.stop()
    time.sleep(outage_s)
    broker.start(keep=True)
    time.sleep(10)
    n = w.finish()
    time.sleep(5)
    err = stop_shipper(proc)
    c = count(job, broker.bootstrap, set(range(n)))
    return report(f"outage-{int(outage_s)}", c, _tail(err))


def case_kill9(base: Path, broker: Broker, rate: float) -> Count:
    job = new_job(base, broker.bootstrap, "kill9")
    w = Writer(job.root / "logs" / "app.log", rate)
    w.start()
    proc = start_shipper(job, broker.bootstrap)
    for _ in range(3):
        time.sleep(6)
        proc.kill()
        proc.wait()
        proc = start_shipper(job, broker.bootstrap)
    time.sleep(6)
    n = w.finish()
    time.sleep(3)
    err = stop_shipper(proc)
    c = count(job, broker.bootstrap, set(range(n)))
    return report("kill9x3", c, f"max_raw_dup_per_kill={c.raw_duplicates / 3:.0f}" + _tail(err))


def write_backlog(job: Job, mb: int, fill: str, line_len: int = 120) -> tuple[Path, int]:
    """`mb` MiB of numbered 120-byte lines in the job's app.log: (path, number of lines)."""
    log = job.root / "logs" / "app.log"
    n = mb * (1 << 20) // line_len
    with log.open("w") as f:
        pad = fill * (line_len - 45)
        for i in range(n):
            f.write(f"2026-10-14 16:20:00 INFO seq {i:010d} {pad}\n")
    return log, n


def case_kill9_midsend(base: Path, broker: Broker, mb: int = 60) -> Count:
    """`kill -9` while the shipper is busy sending a backlog (not between ticks): three times, each
    once the checkpoint shows the file part-way shipped; then a restart finishes the file."""
    import json

    job = new_job(base, broker.bootstrap, "kill9mid")
    log, n = write_backlog(job, mb, "m")
    size = log.stat().st_size

    def shipped() -> int:
        try:
            cps = json.loads((job.state / "checkpoints.json").read_text())["files"]
            return int(cps[0]["offset"]) if cps else 0
        except (OSError, ValueError, KeyError, IndexError):
            return 0

    kills_mid = 0
    for k in range(3):
        proc = start_shipper(job, broker.bootstrap, "--max-bytes-per-tick", str(4 << 20))
        start = shipped()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and shipped() <= start:
            time.sleep(0.05)  # wait for one acknowledged step, then kill during the next one
        time.sleep(0.3 + 0.2 * k)
        before = shipped()
        proc.kill()
        proc.wait()
        kills_mid += int(0 < before < size)
    proc = start_shipper(job, broker.bootstrap, "--max-bytes-per-tick", str(4 << 20))
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and shipped() < size:
        time.sleep(0.5)
    err = stop_shipper(proc)
    c = count(job, broker.bootstrap, set(range(n)))
    return report("kill9-midsend", c, f"kills_with_file_part_shipped={kills_mid}/3 "
                                      f"raw_dup_lines_per_kill={c.raw_duplicates / 3:.0f}" + _tail(err))


def case_rotation(base: Path, broker: Broker, rate: float, kind: str) -> Count:
    job = new_job(base, broker.bootstrap, kind)
    w = Writer(job.root / "logs" / "app.log", rate)
    w.start()
    proc = start_shipper(job, broker.bootstrap)
    for _ in range(3):
        time.sleep(5)
        w.rotate(kind)
    time.sleep(5)
    n = w.finish()
    time.sleep(3)
    err = stop_shipper(proc)
    c = count(job, broker.bootstrap, set(range(n)))
    lost_bytes = re.search(r"lost bytes (\d+)", err)
    return report(f"{kind}x3", c, f"counted_lost_bytes={lost_bytes.group(1) if lost_bytes else '?'}" + _tail(err))


def case_big(base: Path, broker: Broker) -> Count:
    job = new_job(base, broker.bootstrap, "big")
    log = job.root / "logs" / "app.log"
    with log.open("w") as f:
        for i in range(500):
            f.write(f"2026-10-14 16:20:00 INFO seq {i} {'x' * 12_000}\n")
        f.write(f"2026-10-14 16:20:00 INFO seq 500 {'y' * (20 << 20)}\n")
        for i in range(501, 600):
            f.write(f"2026-10-14 16:20:00 INFO seq {i} after\n")
    proc = start_shipper(job, broker.bootstrap)
    time.sleep(15)
    err = stop_shipper(proc)
    c = count(job, broker.bootstrap, set(range(600)))
    return report("big-lines", c, f"lines_cut={c.cut}" + _tail(err))


def case_spool_cap(base: Path, broker: Broker, rate: float) -> Count:
    job = new_job(base, broker.bootstrap, "spoolcap")
    w = Writer(job.root / "logs" / "app.log", rate * 5)
    w.start()
    proc = start_shipper(job, broker.bootstrap, "--spool-max-bytes", str(256 << 10))
    time.sleep(5)
    broker.stop()
    time.sleep(30)
    broker.start(keep=True)
    time.sleep(10)
    n = w.finish()
    time.sleep(4)
    err = stop_shipper(proc)
    c = count(job, broker.bootstrap, set(range(n)))
    m = re.search(r"'spool_full': (\d+)", err)
    dropped = int(m.group(1)) if m else 0
    ok = "OK" if dropped == c.lost else "MISMATCH"
    # the dropped lines are counted, not silent: they are not "lost" in the RESULT sum
    c2 = Count(c.written, c.lost - dropped, c.raw_duplicates, c.duplicated, c.batches, c.heartbeats, c.cut)
    report("spool-cap", c, f"dropped_counted={dropped} missing={c.lost} {ok}" + _tail(err))
    return c2


def case_backlog(base: Path, broker: Broker, mb: int) -> Count:
    job = new_job(base, broker.bootstrap, "backlog")
    log, n = write_backlog(job, mb, "b")
    t0 = time.monotonic()
    proc = start_shipper(job, broker.bootstrap)
    size = log.stat().st_size
    peak = 0
    import json

    while time.monotonic() - t0 < 1800:
        peak = max(peak, _rss_peak_kb(proc.pid))
        try:
            cps = json.loads((job.state / "checkpoints.json").read_text())["files"]
            if cps and cps[0]["offset"] >= size:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.5)
    secs = time.monotonic() - t0
    peak = max(peak, _rss_peak_kb(proc.pid))
    err = stop_shipper(proc)
    c = count(job, broker.bootstrap, set(range(n)))
    return report(f"backlog-{mb}MB", c, f"peak_rss_mb={peak / 1024:.0f} seconds={secs:.0f} "
                                        f"MB_per_s={mb / secs:.1f}" + _tail(err))


def case_throughput(base: Path, broker: Broker, mb: int) -> None:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    job = new_job(base, broker.bootstrap, "tput")
    log = job.root / "logs" / "app.log"
    with log.open("w") as f:
        pad = "t" * 80
        for i in range(mb * (1 << 20) // 120):
            f.write(f"2026-10-14 16:20:00 INFO seq {i:010d} {pad}\n")
    size_mb = log.stat().st_size / (1 << 20)
    t0 = time.monotonic()
    env = dict(os.environ, RLHEALTH_TOPIC_PREFIX=job.prefix, PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-m", "rlhealth", "ship", str(job.root), "--bootstrap", broker.bootstrap,
                    "--job-id", job.job_id, "--iterations", "1", "--interval", "0", "--state-dir", str(job.state),
                    "--max-bytes-per-tick", str(1 << 30)], env=env, check=True, capture_output=True)
    ship_s = time.monotonic() - t0
    if kcat is None:
        print(f"throughput     rlhealth ship {size_mb / ship_s:.1f} MB/s; kcat not installed", flush=True)
        return
    topic = new_job(base, broker.bootstrap, "kcat").catalog.topic_for_kind("log_batch")
    t0 = time.monotonic()
    out = subprocess.run([kcat, "-P", "-b", broker.bootstrap, "-t", topic, "-X", "acks=all", "-l", str(log)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        print(f"throughput     kcat failed: {out.stderr[-500:]}", flush=True)
        return
    kcat_s = time.monotonic() - t0
    print(f"throughput     rlhealth_ship_MB_s={size_mb / ship_s:.1f} kcat_MB_s={size_mb / kcat_s:.1f} "
          f"ratio={kcat_s / ship_s:.2f} (file {size_mb:.0f} MB, process start included)", flush=True)


def _rss_peak_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tail(err: str) -> str:
    last = [ln for ln in err.strip().splitlines() if "stopped;" in ln]
    return f" | {last[-1].strip()}" if last else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="outage,kill9,kill9-midsend,rename,copytruncate,big,spool-cap,backlog,throughput")
    ap.add_argument("--outages", default="60,300", help="broker outage lengths in seconds")
    ap.add_argument("--rate", type=float, default=200.0, help="lines/s written under load")
    ap.add_argument("--backlog-mb", type=int, default=400)
    ap.add_argument("--throughput-mb", type=int, default=100)
    ap.add_argument("--kafka-dir", default=str(Path(tempfile.gettempdir()) / "rlhealth-chaos-kafka"))
    args = ap.parse_args()
    cases = set(args.cases.split(","))
    base = Path(tempfile.mkdtemp(prefix="ship-chaos-"))
    broker = Broker(Path(args.kafka_dir))
    broker.start()
    results: list[Count] = []
    try:
        if "outage" in cases:
            for s in args.outages.split(","):
                results.append(case_outage(base, broker, args.rate, float(s)))
        if "kill9" in cases:
            results.append(case_kill9(base, broker, args.rate))
        if "kill9-midsend" in cases:
            results.append(case_kill9_midsend(base, broker))
        for kind in ("rename", "copytruncate"):
            if kind in cases:
                results.append(case_rotation(base, broker, args.rate, kind))
        if "big" in cases:
            results.append(case_big(base, broker))
        if "spool-cap" in cases:
            results.append(case_spool_cap(base, broker, args.rate))
        if "backlog" in cases:
            results.append(case_backlog(base, broker, args.backlog_mb))
        if "throughput" in cases:
            case_throughput(base, broker, args.throughput_mb)
    finally:
        broker.stop()
        shutil.rmtree(base, ignore_errors=True)
    raw = sum(c.raw_duplicates for c in results)
    print(f"raw topic duplicates (before the core's dedupe): {raw}")
    print(f"RESULT lost={sum(c.lost for c in results)} duplicated={sum(c.duplicated for c in results)}")


if __name__ == "__main__":
    main()
