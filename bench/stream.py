"""Streaming benchmark: log lines/s per worker process, and fault-line-to-verdict latency.

Runs against a real Kafka broker ($KAFKA_BOOTSTRAP, or one started with scripts/kafka.sh and
stopped at the end) and one `rlhealth worker` process with the real health core:

1. throughput: N messages of 500-line LogBatch (2% of lines from a shared scenario's logs, the
   rest noise that matches no signature; `--signal-ratio`) are produced over J jobs *before* the worker starts; the worker's
   `rlhealth_log_lines_processed_total` is sampled and the rate between 10% and 90% of the backlog
   is the worker's lines/s;
2. latency: while the worker is loaded with background batches at about half that rate, a fresh
   probe job gets one batch whose last line is a CUDA OOM (which flips gate B to FAIL); the latency
   is from producing it to the first verdict of that job with gate B FAIL on the verdict topic.

Prints a summary and ends with
    RESULT lines_per_s_per_worker=<x> p99_signal_to_verdict_s=<y>

    python bench/stream.py [--batches 2000] [--jobs 48] [--probes 60] [--partitions 12] [--signal-ratio 0.02]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402

from rlhealth.schemas import LogBatch, Source, decode_verdict, encode, job_key  # noqa: E402
from rlhealth.sinks.kafka import ensure_topics  # noqa: E402
from rlhealth.streams.topics import TopicCatalog  # noqa: E402

LINES_PER_BATCH = 500
FAULT = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.20 GiB is free."
SCENARIO_LOGS = [Path(os.environ.get("RLHEALTH_SHARED", "/work/shared")) / "scenarios" / "healthy_learning" / "capture" / "logs",
                 REPO.parent / "shared" / "scenarios" / "healthy_learning" / "capture" / "logs"]


NOISE_TEMPLATES = [
    "2026-11-29 10:{m:02d}:{s:02d},{ms:03d} INFO worker.py:{ln} processing rollout {i} prompt_len={a} tokens",
    "(RayWorkerWrapper pid={pid}) INFO 11-29 10:{m:02d}:{s:02d} [model_runner.py:{ln}] batch {i}: {a} seqs scheduled",
    "[2026-11-29 10:{m:02d}:{s:02d}] env step {i} container=task-{a} exit=0 duration={ms}ms",
    "Processed prompts: {pct}%|####      | {i}/{a} [00:{s:02d}<00:{m:02d}, {ms}.00it/s]",
    "2026-11-29T10:{m:02d}:{s:02d}.{ms:03d}Z DEBUG harbor.trial trial-{i} turn {a} tool=bash returned {ln} bytes",
]


def corpus_lines(n: int, signal_ratio: float) -> list[str]:
    """`n` lines: `signal_ratio` of them from a shared scenario's logs (almost every one of which
    matches a signature), the rest varied INFO/DEBUG/progress noise that matches none. Production
    logs are mostly noise (perf-study: ~1% of lines match)."""
    sig: list[str] = []
    for d in SCENARIO_LOGS:
        if d.is_dir():
            for f in sorted(d.rglob("*.log")):
                sig.extend(x for x in f.read_text(errors="replace").splitlines() if x.strip())
            break
    out = []
    every = int(1 / signal_ratio) if signal_ratio > 0 else 0
    for i in range(n):
        if sig and every and i % every == 0:
            out.append(sig[(i // every) % len(sig)])
        else:
            t = NOISE_TEMPLATES[i % len(NOISE_TEMPLATES)]
            out.append(t.format(m=i % 60, s=(i * 7) % 60, ms=i % 1000, ln=i % 997, i=i, a=(i * 13) % 4096,
                                pid=4000 + i % 64, pct=i % 100))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            out[k] = float(v)
    return out


def start_broker() -> tuple[str, dict[str, str] | None]:
    given = os.environ.get("KAFKA_BOOTSTRAP", "").strip()
    if given:
        return given, None
    env = dict(os.environ, RLHEALTH_KAFKA_DIR=str(REPO / ".kafka" / "bench"), RLHEALTH_PYTHON=sys.executable)
    out = subprocess.run([str(REPO / "scripts" / "kafka.sh"), "start"], env=env, capture_output=True, text=True,
                         timeout=600, check=True)
    return out.stdout.strip().splitlines()[-1], env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=2000, help="500-line messages in the throughput backlog")
    ap.add_argument("--jobs", type=int, default=48)
    ap.add_argument("--probes", type=int, default=60)
    ap.add_argument("--probe-interval", type=float, default=0.5)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--tick-secs", type=float, default=10.0)
    ap.add_argument("--signal-ratio", type=float, default=0.02,
                    help="share of lines taken from a scenario's (signature-dense) logs; 1.0 = worst case")
    args = ap.parse_args()

    bootstrap, broker_env = start_broker()
    catalog = TopicCatalog(prefix=f"bench-{uuid.uuid4().hex[:8]}.", partitions=args.partitions)
    ensure_topics(bootstrap, catalog)
    logs_topic = catalog.topic_for_kind("log_batch")
    lines = corpus_lines(LINES_PER_BATCH * 8, args.signal_ratio)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20, batch_size=1 << 20,
                             max_request_size=8 << 20)

    def make_batch(job: str, chunk: int, extra: list[str] | None = None) -> bytes:
        body = lines[(chunk % 8) * LINES_PER_BATCH:(chunk % 8 + 1) * LINES_PER_BATCH]
        if extra:
            body = body[: LINES_PER_BATCH - len(extra)] + extra
        return encode(LogBatch(job_id=job, event_time=datetime.now(timezone.utc), lines=body,
                               source=Source(stream="logs/pod_rank0.log", host="bench")))

    # ---- throughput: backlog first, then the worker
    t0 = time.perf_counter()
    templates = {j: [make_batch(f"load-{j:03d}", c) for c in range(8)] for j in range(args.jobs)}
    for i in range(args.batches):
        j = i % args.jobs
        producer.send(logs_topic, key=job_key(f"load-{j:03d}"), value=templates[j][i % 8])
    producer.flush()
    total_lines = args.batches * LINES_PER_BATCH
    print(f"produced {args.batches} batches ({total_lines} lines, "
          f"{sum(len(t[0]) for t in templates.values()) / len(templates) / 1024:.0f} KiB each) "
          f"in {time.perf_counter() - t0:.1f}s", flush=True)

    port = free_port()
    env = dict(os.environ, RLHEALTH_PARTITIONS=str(args.partitions))
    log_path = REPO / ".kafka" / "bench-worker.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    worker = subprocess.Popen(
        [sys.executable, "-m", "rlhealth", "worker", "--bootstrap", bootstrap, "--topic-prefix", catalog.prefix,
         "--metrics-port", str(port), "--tick-secs", str(args.tick_secs), "--loglevel", "warning",
         "--no-create-topics"],
        env=env, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT)
    samples: list[tuple[float, float]] = []
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                raise SystemExit(f"worker exited {worker.returncode}; see {log_path}")
            done = scrape(port).get("rlhealth_log_lines_processed_total", 0.0)
            samples.append((time.monotonic(), done))
            if done >= total_lines:
                break
            time.sleep(0.2)
        lo = next(t for t, d in samples if d >= 0.1 * total_lines)
        hi = next(t for t, d in samples if d >= 0.9 * total_lines)
        rate = 0.8 * total_lines / (hi - lo)
        print(f"throughput: {rate:,.0f} lines/s per worker ({rate / LINES_PER_BATCH:,.0f} msgs/s), "
              f"10%..90% of the backlog in {hi - lo:.1f}s", flush=True)

        # ---- latency under ~half that load
        stop = threading.Event()
        sent_at: dict[str, float] = {}
        got_at: dict[str, float] = {}
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=10)
        tps = [TopicPartition(catalog.verdicts, p) for p in range(args.partitions)]
        consumer.assign(tps)
        consumer.seek_to_end(*tps)
        for tp in tps:
            consumer.position(tp)

        def read_verdicts() -> None:
            while not stop.is_set():
                for recs in consumer.poll(timeout_ms=50).values():
                    now = time.time()
                    for r in recs:
                        v = decode_verdict(r.value)
                        if v.job_id in sent_at and v.job_id not in got_at and v.gates.B.status == "FAIL":
                            got_at[v.job_id] = now

        load_rate = rate / 2 / LINES_PER_BATCH  # messages/s

        def background_load() -> None:
            i, start = 0, time.monotonic()
            while not stop.is_set():
                due = start + i / load_rate
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(min(wait, 0.05))
                    continue
                j = i % args.jobs
                producer.send(logs_topic, key=job_key(f"load-{j:03d}"), value=templates[j][i % 8])
                i += 1

        reader = threading.Thread(target=read_verdicts, daemon=True)
        loader = threading.Thread(target=background_load, daemon=True)
        reader.start()
        loader.start()
        time.sleep(3)
        probe_tpl = {}
        for k in range(args.probes):
            job = f"probe-{k:04d}"
            probe_tpl[job] = make_batch(job, k, [f"2026-11-29T10:20:02Z {FAULT}"])
        for job, value in probe_tpl.items():
            sent_at[job] = time.time()
            producer.send(logs_topic, key=job_key(job), value=value)
            producer.flush()
            time.sleep(args.probe_interval)
        deadline = time.monotonic() + 30
        while len(got_at) < len(sent_at) and time.monotonic() < deadline:
            time.sleep(0.2)
        stop.set()
        loader.join(5)
        reader.join(5)
        consumer.close()
        m = scrape(port)
        lat = sorted(got_at[j] - sent_at[j] for j in got_at)
        missing = len(sent_at) - len(got_at)
        if not lat:
            raise SystemExit("no probe verdict arrived")
        p50 = statistics.median(lat)
        p99 = lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))]
        print(f"latency under ~{load_rate * LINES_PER_BATCH:,.0f} lines/s background: n={len(lat)} missing={missing} "
              f"p50={p50:.3f}s p99={p99:.3f}s max={lat[-1]:.3f}s", flush=True)
        lag_key = 'rlhealth_consumer_lag{topic="%s"}' % logs_topic
        print(f"worker: event loop lag {m.get('rlhealth_event_loop_lag_seconds', float('nan')):.3f}s, "
              f"consumer lag logs={m.get(lag_key, float('nan')):.0f}", flush=True)
        if missing:
            lat.extend([float("inf")] * missing)
            p99 = lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))]
        print(f"RESULT lines_per_s_per_worker={rate:.0f} p99_signal_to_verdict_s={p99:.3f}")
        return 0
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                worker.kill()
        producer.close()
        try:
            from rlhealth.sinks.kafka import admin_client

            with admin_client(bootstrap, timeout_s=10) as admin:
                admin.delete_topics([t for t in admin.list_topics() if t.startswith(catalog.prefix)],
                                    raise_errors=False)
        except Exception as exc:  # noqa: BLE001 - cleanup only
            print(f"could not delete bench topics: {exc}", file=sys.stderr)
        if broker_env is not None:
            subprocess.run([str(REPO / "scripts" / "kafka.sh"), "stop"], env=broker_env, capture_output=True,
                           timeout=120)


if __name__ == "__main__":
    sys.exit(main())
