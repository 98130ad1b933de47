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

    python bench/stream.py [--batches 8000] [--jobs 48] [--probes 100] [--partitions 12] [--signal-ratio 0.02]

With `--deadletter-flood N` it measures bad records instead: N undecodable records are produced
before the worker starts, the rate at which they reach the dead-letter topic is read from
`rlhealth_events_dead_lettered_total` (10%..90%), then probes (good batches ending in a fault line)
are timed to their verdict while bad records keep arriving at `--flood-per-s`; ends with
    RESULT deadletter_records_per_s=<x> p99_good_behind_flood_s=<y> flood_per_s=<z>
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: E402
from aiokafka.structs import TopicPartition as AioTP  # noqa: E402

from bench._kafka_harness import broker_env as _broker_env  # noqa: E402
from bench._kafka_harness import (  # noqa: E402
    cpu_seconds,
    free_port,
    listener_pid,
    machine_cpu,
    scrape,
    start_broker,
    stop_worker_and_topics,
)
from rlhealth.schemas import LogBatch, Source, decode_verdict, encode, job_key  # noqa: E402
from rlhealth.schemas.topics import TopicCatalog  # noqa: E402
from rlhealth.sinks.kafka import ensure_topics  # noqa: E402


def broker_env() -> dict[str, str] | None:
    return _broker_env("bench")

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


def dense_lines(n: int) -> list[str]:
    """`n` lines of the dense mix of bench/probe.py (`--corpus dense`): ~70% metric and progress lines
    that match a rule (vLLM stats from 16 engines, SGLang decode batches, verl step metrics, HF Trainer
    log dicts, Megatron iterations, SkyRL progress bars), the rest DEBUG request and access lines."""
    sys.path.insert(0, str(REPO / "bench"))
    from probe import DenseGen

    g = DenseGen(7)
    t = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)
    out: list[str] = []
    while len(out) < n:
        g.engine_tick(t, out)
        g.trainer_tick(t, out)
        t += timedelta(seconds=10)
    return out[:n]






async def _produce_backlog(bootstrap: str, topic: str, templates: dict[int, list[bytes]], batches: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20, max_batch_size=1 << 20,
                                max_request_size=8 << 20)
    await producer.start()
    try:
        jobs = len(templates)
        for i in range(batches):
            j = i % jobs
            await producer.send(topic, templates[j][i % 8], key=job_key(f"load-{j:03d}"))
        await producer.flush()
    finally:
        await producer.stop()


class _Where(NamedTuple):
    """One sample of the latency phase: who had the CPU, and how far behind the worker was."""

    t: float  # monotonic
    sent: int  # background messages produced so far
    folded: float  # the worker's rlhealth_log_lines_processed_total
    cpu: tuple[float, float, float]  # CPU seconds so far of the worker, the broker, this bench process
    machine: tuple[float, float]  # (busy, total) CPU seconds of the machine


def _where(sent: int, folded: float, worker_pid: int | None, broker_pid: int | None) -> _Where:
    def cpu(pid: int | None) -> float:
        try:
            return cpu_seconds(pid) if pid else float("nan")
        except OSError:
            return float("nan")

    return _Where(time.monotonic(), sent, folded, (cpu(worker_pid), cpu(broker_pid), cpu(os.getpid())),
                  machine_cpu())


def _report_where(samples: list[_Where], lines_before: float, load_rate: float) -> None:
    """Where the latency phase's CPU went and whether the worker kept up (the backlog in lines it had
    not folded: the lines produced, backlog of the throughput phase included, minus the lines folded)."""
    if len(samples) < 2:
        return
    a, b = samples[0], samples[-1]
    span = b.t - a.t
    shares = [(y - x) / span for x, y in zip(a.cpu, b.cpu, strict=True)]
    busy = (b.machine[0] - a.machine[0]) / span
    print(f"latency phase CPU (of one core): worker {shares[0]:.0%}, broker {shares[1]:.0%}, this bench "
          f"(producer and verdict reader) {shares[2]:.0%}; machine busy {busy:.2f} of "
          f"{(b.machine[1] - a.machine[1]) / span:.0f} cores; load average {os.getloadavg()[0]:.1f}", flush=True)
    folded = b.folded - a.folded
    print(f"background produced at {(b.sent - a.sent) / span * LINES_PER_BATCH:,.0f} lines/s "
          f"(asked {load_rate * LINES_PER_BATCH:,.0f}), folded at {folded / span:,.0f} lines/s, worker "
          f"{(b.cpu[0] - a.cpu[0]) / max(folded, 1) * 1e6:.2f} us of CPU per line folded", flush=True)
    backlog = [(s.t - a.t, lines_before + s.sent * LINES_PER_BATCH - s.folded) for s in samples]
    print("worker backlog (lines produced, not folded) at +s: "
          + ", ".join(f"{t:.0f}:{max(x, 0) / 1000:.0f}k" for t, x in backlog[:: max(1, len(backlog) // 12)]), flush=True)


async def _measure_latency(bootstrap: str, catalog: TopicCatalog, templates: dict[int, list[bytes]],
                           probes: dict[str, bytes], load_rate: float, interval: float,
                           port: int | None = None, worker_pid: int | None = None,
                           lines_before: float = 0.0) -> tuple[list[float], int]:
    """Background load at `load_rate` msgs/s; each probe's produce-to-verdict(B FAIL) latency."""
    topic = catalog.topic_for_kind("log_batch")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=2, max_batch_size=1 << 20,
                                max_request_size=8 << 20)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=10,
                                auto_offset_reset="latest")
    await producer.start()
    await consumer.start()
    sent_at: dict[str, float] = {}
    got_at: dict[str, float] = {}
    judged_at: dict[str, float] = {}  # the B FAIL verdict's judging time (the worker's clock)
    first_seen: dict[str, tuple[float, str, int]] = {}  # the job's first verdict: arrival, gate B, seq
    stop = asyncio.Event()
    try:
        tps = [AioTP(catalog.verdicts, p) for p in range(catalog.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        for tp in tps:
            await consumer.position(tp)

        async def read() -> None:
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=50)
                now = time.time()
                for recs in batch.values():
                    for r in recs:
                        v = decode_verdict(r.value)
                        if v.job_id in sent_at and v.job_id not in first_seen:
                            first_seen[v.job_id] = (now, v.gates.B.status, v.seq)
                        if v.job_id in sent_at and v.job_id not in got_at and v.gates.B.status == "FAIL":
                            got_at[v.job_id] = now
                            judged_at[v.job_id] = v.produced_at.timestamp()

        produced = [0]  # background messages sent so far

        async def watch() -> None:
            """Sample the CPU of the worker, the broker and this process, and the worker's fold, every 2 s."""
            broker_pid = listener_pid(bootstrap)
            while not stop.is_set():
                folded = await asyncio.to_thread(scrape, port) if port else {}
                n = folded.get("rlhealth_log_lines_processed_total", float("nan"))
                # the probes' lines count as background here (a batch each, 500 lines)
                where.append(_where(produced[0] + len(sent_at), n, worker_pid, broker_pid))
                await asyncio.sleep(2.0)
            _report_where(where, lines_before, load_rate)

        where: list[_Where] = []

        async def load() -> None:
            i, start, jobs = 0, time.monotonic(), len(templates)
            while not stop.is_set():
                wait = start + i / load_rate - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(min(wait, 0.05))
                    continue
                j = i % jobs
                await producer.send(topic, templates[j][i % 8], key=job_key(f"load-{j:03d}"))
                i += 1
                produced[0] = i

        tasks = [asyncio.create_task(read()), asyncio.create_task(load())]
        if port is not None:
            tasks.append(asyncio.create_task(watch()))
        await asyncio.sleep(3)
        for job, value in probes.items():
            sent_at[job] = time.time()
            await producer.send(topic, value, key=job_key(job))  # queued; linger 2 ms
            await asyncio.sleep(interval)
        deadline = time.monotonic() + 30
        while len(got_at) < len(sent_at) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await consumer.stop()
        await producer.stop()
    slowest = sorted(got_at, key=lambda j: sent_at[j] - got_at[j])[:3]
    # where a slow probe's time went: to the worker's judgement of it (judged - sent), then to the
    # verdict's way back (got - judged); and whether its first verdict already had gate B FAIL
    print("slowest probes: " + ", ".join(
        f"{j} (#{list(sent_at).index(j) + 1} of {len(sent_at)}) {got_at[j] - sent_at[j]:.2f}s "
        f"[judged +{judged_at[j] - sent_at[j]:.2f}s; first verdict +{first_seen[j][0] - sent_at[j]:.2f}s "
        f"B={first_seen[j][1]} seq={first_seen[j][2]}]" for j in slowest), flush=True)
    return sorted(got_at[j] - sent_at[j] for j in got_at), len(sent_at) - len(got_at)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=8000, help="500-line messages in the throughput backlog")
    ap.add_argument("--jobs", type=int, default=48)
    ap.add_argument("--probes", type=int, default=100)
    ap.add_argument("--probe-interval", type=float, default=0.3)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--tick-secs", type=float, default=10.0)
    ap.add_argument("--load-fraction", type=float, default=0.5,
                    help="background load during the latency probes, as a fraction of the measured rate")
    ap.add_argument("--load-lines-per-s", type=float, default=None,
                    help="background load during the latency probes in lines/s (overrides --load-fraction); "
                         "125000 = half of the 250k lines/s target")
    ap.add_argument("--signal-ratio", type=float, default=0.02,
                    help="share of lines taken from a scenario's (signature-dense) logs; 1.0 = worst case")
    ap.add_argument("--corpus", choices=("sparse", "dense"), default="sparse",
                    help="sparse: --signal-ratio of scenario lines in noise; dense: bench/probe.py's dense mix")
    ap.add_argument("--deadletter-flood", type=int, default=0,
                    help="measure the dead-letter path instead: this many bad records in the backlog")
    ap.add_argument("--flood-per-s", type=float, default=5000.0,
                    help="bad records/s produced while the probes of the dead-letter run are timed")
    args = ap.parse_args()

    env = broker_env()
    try:
        return _bench(args, start_broker(env))
    finally:  # also on SIGTERM while the broker starts or the backlog is produced
        if env is not None:
            subprocess.run([str(REPO / "scripts" / "kafka.sh"), "stop"], env=env, capture_output=True, timeout=120)


def _bench(args: argparse.Namespace, bootstrap: str) -> int:
    catalog = TopicCatalog(prefix=f"bench-{uuid.uuid4().hex[:8]}.", partitions=args.partitions)
    ensure_topics(bootstrap, catalog)
    logs_topic = catalog.topic_for_kind("log_batch")
    lines = (dense_lines(LINES_PER_BATCH * 8) if args.corpus == "dense"
             else corpus_lines(LINES_PER_BATCH * 8, args.signal_ratio))

    def make_batch(job: str, chunk: int, extra: list[str] | None = None) -> bytes:
        body = lines[(chunk % 8) * LINES_PER_BATCH:(chunk % 8 + 1) * LINES_PER_BATCH]
        if extra:
            body = body[: LINES_PER_BATCH - len(extra)] + extra
        return encode(LogBatch(job_id=job, event_time=datetime.now(UTC), lines=body,
                               source=Source(stream="logs/pod_rank0.log", host="bench")))

    # ---- throughput: backlog first, then the worker
    t0 = time.perf_counter()
    flood = args.deadletter_flood
    if flood:  # records no decoder accepts, a few KiB like a real batch gone wrong, keyed over the jobs
        bad = [b'{"schema_version": 1, "kind": "log_batch", "lines": ' + str(c).encode() * 2000 for c in range(8)]
        templates = {j: bad for j in range(args.jobs)}
        asyncio.run(_produce_backlog(bootstrap, logs_topic, templates, flood))
        print(f"produced {flood} bad records in {time.perf_counter() - t0:.1f}s", flush=True)
    else:
        templates = {j: [make_batch(f"load-{j:03d}", c) for c in range(8)] for j in range(args.jobs)}
        asyncio.run(_produce_backlog(bootstrap, logs_topic, templates, args.batches))
    total_lines = args.batches * LINES_PER_BATCH
    if not flood:
        print(f"produced {args.batches} batches ({total_lines} lines, "
              f"{sum(len(t[0]) for t in templates.values()) / len(templates) / 1024:.0f} KiB each, "
              f"corpus {args.corpus}" + (f", signal ratio {args.signal_ratio}" if args.corpus == "sparse" else "")
              + f") in {time.perf_counter() - t0:.1f}s", flush=True)

    port = free_port()
    env = dict(os.environ, RLHEALTH_PARTITIONS=str(args.partitions))
    log_path = REPO / ".kafka" / "bench-worker.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as worker_log:  # the child has its own copy of the descriptor
        worker = subprocess.Popen(
            [sys.executable, "-m", "rlhealth", "worker", "--bootstrap", bootstrap, "--topic-prefix", catalog.prefix,
             "--metrics-port", str(port), "--tick-secs", str(args.tick_secs), "--loglevel", "warning",
             "--no-create-topics"],
            env=env, stdout=worker_log, stderr=subprocess.STDOUT)
    samples: list[tuple[float, float, float]] = []
    try:
        if flood:
            return _bench_flood(args, bootstrap, catalog, port, worker, log_path, templates, make_batch)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                raise SystemExit(f"worker exited {worker.returncode}; see {log_path}")
            done = scrape(port).get("rlhealth_log_lines_processed_total", 0.0)
            samples.append((time.monotonic(), done, cpu_seconds(worker.pid)))
            if done >= total_lines:
                break
            time.sleep(0.1)
        lo = next(s for s in samples if s[1] >= 0.1 * total_lines)
        hi = next(s for s in samples if s[1] >= 0.9 * total_lines)
        rate = 0.8 * total_lines / (hi[0] - lo[0])
        # CPU per line does not depend on what else shares the machine: compare it with the latency phase's
        print(f"throughput: {rate:,.0f} lines/s per worker ({rate / LINES_PER_BATCH:,.0f} msgs/s), "
              f"10%..90% of the backlog in {hi[0] - lo[0]:.1f}s; worker CPU {(hi[2] - lo[2]) / (hi[0] - lo[0]):.0%} "
              f"of one core, {(hi[2] - lo[2]) / (hi[1] - lo[1]) * 1e6:.2f} us per line; load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)

        # ---- latency under ~half that load
        load_lines = args.load_lines_per_s if args.load_lines_per_s is not None else rate * args.load_fraction
        load_rate = load_lines / LINES_PER_BATCH  # messages/s
        print(f"latency probes under a background load of {load_lines:,.0f} lines/s", flush=True)
        probes = {f"probe-{k:04d}": make_batch(f"probe-{k:04d}", k, [f"2026-11-29T10:20:02Z {FAULT}"])
                  for k in range(args.probes)}
        lat, missing = asyncio.run(_measure_latency(bootstrap, catalog, templates, probes, load_rate,
                                                    args.probe_interval, port, worker.pid, total_lines))
        m = scrape(port)
        if not lat:
            raise SystemExit("no probe verdict arrived")
        p50 = statistics.median(lat)
        lat_all = lat + [float("inf")] * missing
        p99 = lat_all[min(len(lat_all) - 1, int(round(0.99 * (len(lat_all) - 1))))]
        lag_key = 'rlhealth_consumer_lag{topic="%s"}' % logs_topic
        print(f"latency under ~{load_rate * LINES_PER_BATCH:,.0f} lines/s background: n={len(lat)} missing={missing} "
              f"p50={p50:.3f}s p99={p99:.3f}s max={lat[-1]:.3f}s", flush=True)
        print(f"worker after the run: event loop lag {m.get('rlhealth_event_loop_lag_seconds', float('nan')):.3f}s, "
              f"consumer lag on logs {m.get(lag_key, float('nan')):.0f} records", flush=True)
        print(f"RESULT lines_per_s_per_worker={rate:.0f} p99_signal_to_verdict_s={p99:.3f} corpus={args.corpus} "
              f"background_lines_per_s={load_lines:.0f}")
        return 0
    finally:
        stop_worker_and_topics(worker, bootstrap, catalog.prefix)


def _bench_flood(args: argparse.Namespace, bootstrap: str, catalog: TopicCatalog, port: int,
                 worker: subprocess.Popen, log_path: Path, templates: dict[int, list[bytes]], make_batch) -> int:
    total = args.deadletter_flood
    samples: list[tuple[float, float, float]] = []  # (monotonic, dead letters, worker CPU seconds)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise SystemExit(f"worker exited {worker.returncode}; see {log_path}")
        done = sum(v for k, v in scrape(port).items() if k.startswith("rlhealth_events_dead_lettered_total"))
        samples.append((time.monotonic(), done, cpu_seconds(worker.pid)))
        if done >= total:
            break
        time.sleep(0.1)
    lo = next(s for s in samples if s[1] >= 0.1 * total)
    hi = next(s for s in samples if s[1] >= 0.9 * total)
    rate = (hi[1] - lo[1]) / (hi[0] - lo[0])
    # what one worker could do on a CPU of its own: the machine's 2 vCPUs are shared with the broker
    # and the load generator (and, on a busy day, other jobs), so the wall rate alone says little
    cpu_rate = (hi[1] - lo[1]) / max(hi[2] - lo[2], 1e-9)
    print(f"dead letters: {rate:,.0f} records/s, 10%..90% of {total} in {hi[0] - lo[0]:.1f}s; worker CPU "
          f"{(hi[2] - lo[2]) / (hi[0] - lo[0]):.0%} of one core, {1e6 / cpu_rate:.0f} us per record "
          f"({cpu_rate:,.0f} records per CPU second); load average {os.getloadavg()[0]:.1f}", flush=True)
    probes = {f"probe-{k:04d}": make_batch(f"probe-{k:04d}", k, [f"2026-11-29T10:20:02Z {FAULT}"])
              for k in range(args.probes)}
    print(f"latency probes while {args.flood_per_s:,.0f} bad records/s keep arriving", flush=True)
    lat, missing = asyncio.run(_measure_latency(bootstrap, catalog, templates, probes, args.flood_per_s,
                                                args.probe_interval))
    m = scrape(port)
    print("worker after the probes: " + ("exited %s" % worker.returncode if worker.poll() is not None else ", ".join(
        f"{k.removeprefix('rlhealth_')}={v:g}" for k, v in sorted(m.items())
        if k.startswith(("rlhealth_consumer_lag", "rlhealth_event_loop_lag", "rlhealth_partitions_owned",
                         "rlhealth_caught_up", "rlhealth_events_processed_total", "rlhealth_jobs_owned")))),
          flush=True)
    if not lat:
        raise SystemExit("no probe verdict arrived")
    lat_all = lat + [float("inf")] * missing
    p99 = lat_all[min(len(lat_all) - 1, int(round(0.99 * (len(lat_all) - 1))))]
    print(f"good batch behind the flood: n={len(lat)} missing={missing} p50={statistics.median(lat):.3f}s "
          f"p99={p99:.3f}s max={lat[-1]:.3f}s (tick {args.tick_secs}s)", flush=True)
    print(f"RESULT deadletter_records_per_s={rate:.0f} p99_good_behind_flood_s={p99:.3f} "
          f"flood_per_s={args.flood_per_s:.0f} records_per_cpu_s={cpu_rate:.0f}")
    return 0


if __name__ == "__main__":
    # SIGTERM (timeout(1), a CI cancel) must run main's cleanup too, or the worker and broker outlive us
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
