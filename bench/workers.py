"""Two `rlhealth worker` processes against one: throughput on 12 partitions, and job ownership across
rebalances. Real broker ($KAFKA_BOOTSTRAP, or one started with scripts/kafka.sh), real health core.

1. throughput: the same backlog (`--batches` 500-line LogBatches over `--jobs` jobs, stream.py's sparse
   mix) is produced to two fresh topic sets; one worker folds in the first, two workers of one group the
   second. The rate is lines/s (sum of the workers' `rlhealth_log_lines_processed_total`) from the
   first sample where the group holds every partition and 10% of the backlog is done, to 90%. Each
   worker's CPU time (/proc) is sampled too: on a machine whose CPUs are shared with the broker and
   the load generator, the wall ratio is bounded by the CPU left over, and records per CPU second
   says whether a worker got slower or only got less CPU.
2. rebalance: `--rebalance-jobs` jobs with events; worker A runs alone until it holds and exports every
   job; while refresh batches keep arriving, worker B starts (join), then later B is stopped with
   SIGTERM (leave). Ownership is read from each worker's /metrics: the jobs it exports (per-job
   series, which a worker keeps only for jobs of partitions it owns and has caught up on) and
   `rlhealth_partitions_owned`. The rebalance time is from B's start (resp. its SIGTERM) to the first
   sample where every job is exported by exactly one worker and the partitions add up, and stay so
   for two ticks and a second (a join can take two rebalance generations). After the
   join the ownership is sampled for `--settle-secs` more: `jobs_owned_twice` is the most jobs ever
   exported by both workers at once after settling, `jobs_unowned` the most exported by neither.
   Finally the verdict topic is read: a job with two verdicts of different judging times under one
   `seq` was published twice around a hand-over (at-least-once: readers drop a seq they have seen).

Ends with
    RESULT workers=2 throughput_ratio=<x> rebalance_s=<y> jobs_owned_twice=<n> jobs_unowned=<m> ...

    python bench/workers.py [--batches 30000] [--jobs 48] [--partitions 12] [--rebalance-jobs 240]

30,000 batches (15M lines, ~10 s to produce) keep the measured window at 10-20 s at the rates seen on a
2-vCPU machine; with a few thousand the two workers' join falls inside a window of 2-4 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from aiokafka import AIOKafkaProducer  # noqa: E402
from stream import LINES_PER_BATCH, _produce_backlog, broker_env, corpus_lines  # noqa: E402

from bench._kafka_harness import (  # noqa: E402
    cpu_seconds,
    free_port,
    listener_pid,
    machine_cpu,
    scrape,
    start_broker,
    stop_broker,
    stop_process,
    stop_worker_and_topics,
)
from rlhealth.schemas import LogBatch, Source, encode, job_key  # noqa: E402
from rlhealth.schemas.topics import TopicCatalog  # noqa: E402
from rlhealth.sinks.kafka import ensure_topics  # noqa: E402
from rlhealth.streams.verdict_reader import read_verdicts  # noqa: E402

LOG_DIR = REPO / ".kafka"


class Worker:
    """One `rlhealth worker` process of the bench's group, with its /metrics port."""

    def __init__(self, name: str, bootstrap: str, catalog: TopicCatalog, tick_secs: float) -> None:
        self.name = name
        self.port = free_port()
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.log_path = LOG_DIR / f"workers-{name}.log"
        env = dict(os.environ, RLHEALTH_PARTITIONS=str(catalog.partitions))
        with open(self.log_path, "ab") as log:  # the child has its own copy of the descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rlhealth", "worker", "--bootstrap", bootstrap,
                 "--topic-prefix", catalog.prefix, "--metrics-port", str(self.port), "--tick-secs", str(tick_secs),
                 "--heartbeat-secs", "60", "--session-timeout-secs", "10",
                 "--loglevel", os.environ.get("BENCH_WORKER_LOGLEVEL", "warning"),
                 "--no-create-topics"],
                env=env, stdout=log, stderr=subprocess.STDOUT)

    def metrics(self) -> dict[str, float]:
        if self.proc.poll() is not None:
            raise SystemExit(f"worker {self.name} exited {self.proc.returncode}; see {self.log_path}")
        return scrape(self.port)

    def cpu(self) -> float:
        try:
            return cpu_seconds(self.proc.pid)
        except OSError:
            return 0.0

    def stop(self) -> None:
        stop_process(self.proc)


def jobs_of(m: dict[str, float]) -> set[str]:
    """The jobs a worker exports per-job series for (it drops them for partitions it gave up)."""
    return {k.split('job_id="', 1)[1].split('"', 1)[0] for k in m if 'job_id="' in k}


def make_batch(lines: list[str], job: str, chunk: int) -> bytes:
    body = lines[(chunk % 8) * LINES_PER_BATCH:(chunk % 8 + 1) * LINES_PER_BATCH]
    return encode(LogBatch(job_id=job, event_time=datetime.now(UTC), lines=body,
                           source=Source(stream="logs/pod_rank0.log", host="bench")))


class Phase(NamedTuple):
    """One throughput phase over its measured window: lines/s, and CPU cores used on average by the
    workers, by the broker and by the whole machine (everything: other processes too)."""

    rate: float
    workers_cores: float
    broker_cores: float
    machine_cores: float
    window_s: float

    def cpu_per_mline(self, cores: float) -> float:
        """CPU seconds per million lines at `cores` cores of use."""
        return cores / self.rate * 1e6


def throughput(bootstrap: str, n_workers: int, args: argparse.Namespace, lines: list[str]) -> Phase:
    """`n_workers` workers folding a fresh backlog produced in full before they start (no producer
    competes for the CPU while they run); the rate is from their own processed-line counters."""
    catalog = TopicCatalog(prefix=f"wk{n_workers}-{uuid.uuid4().hex[:8]}.", partitions=args.partitions)
    ensure_topics(bootstrap, catalog)
    templates = {j: [make_batch(lines, f"load-{j:03d}", c) for c in range(8)] for j in range(args.jobs)}
    t0 = time.perf_counter()
    asyncio.run(_produce_backlog(bootstrap, catalog.topic_for_kind("log_batch"), templates, args.batches))
    total = args.batches * LINES_PER_BATCH
    print(f"produced {args.batches} batches ({total:,} lines) in {time.perf_counter() - t0:.1f}s", flush=True)
    broker = listener_pid(bootstrap)

    def broker_cpu() -> float:
        try:
            return cpu_seconds(broker) if broker else float("nan")
        except OSError:
            return float("nan")

    time.sleep(2)  # the broker's own work after the produce (flushes) is not counted against the workers
    workers = [Worker(f"t{n_workers}-{i}", bootstrap, catalog, args.tick_secs) for i in range(n_workers)]
    # time, lines done, group holds every partition, workers' CPU s, broker CPU s, machine busy CPU s
    samples: list[tuple[float, float, bool, float, float, float]] = []
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            ms = [w.metrics() for w in workers]
            done = sum(m.get("rlhealth_log_lines_processed_total", 0.0) for m in ms)
            owned = [m.get("rlhealth_partitions_owned", 0.0) for m in ms]
            whole = all(o > 0 for o in owned) and sum(owned) == args.partitions
            samples.append((time.monotonic(), done, whole, sum(w.cpu() for w in workers), broker_cpu(),
                            machine_cpu()[0]))
            if done >= total:
                break
            lag = sum(v for m in ms for k, v in m.items() if k.startswith("rlhealth_consumer_lag"))
            if all(ms) and lag == 0 and whole and len(samples) > 50 and samples[-50][1] == done:
                print(f"!! {n_workers} worker(s): no lag and nothing new for 10s, but only {done:,.0f} of {total:,} "
                      f"lines counted: {total - done:,.0f} lines ({(total - done) / LINES_PER_BATCH:,.0f} batches) "
                      "never processed", flush=True)
                break
            time.sleep(0.2)
        lo = next(s for s in samples if s[1] >= 0.1 * total and s[2])
        hi = next(s for s in samples if s[1] >= 0.9 * total)
        if hi[0] <= lo[0]:
            raise SystemExit("the group settled only after 90% of the backlog: raise --batches")
        span = hi[0] - lo[0]
        phase = Phase((hi[1] - lo[1]) / span, (hi[3] - lo[3]) / span, (hi[4] - lo[4]) / span,
                      (hi[5] - lo[5]) / span, span)
        print(f"{n_workers} worker(s): {phase.rate:,.0f} lines/s over {span:.1f}s "
              f"({(hi[1] - lo[1]) / total:.0%} of the backlog); CPU cores used: workers {phase.workers_cores:.2f}, "
              f"broker {phase.broker_cores:.2f}, whole machine {phase.machine_cores:.2f} of {os.cpu_count()}; "
              f"CPU s per million lines: workers {phase.cpu_per_mline(phase.workers_cores):.2f}, broker "
              f"{phase.cpu_per_mline(phase.broker_cores):.2f}; load average {os.getloadavg()[0]:.1f}", flush=True)
        return phase
    finally:
        for w in workers[1:]:
            w.stop()
        stop_worker_and_topics(workers[0].proc, bootstrap, catalog.prefix)


def cpu_bound_ratio(one: Phase, two: Phase) -> float:
    """The highest two-worker/one-worker ratio the machine's CPUs allow: all of them, less what other
    processes used during the one-worker phase, spent at the two-worker phase's CPU cost per line
    (workers + broker), against the one-worker rate."""
    ncpu = os.cpu_count() or 1
    others = max(one.machine_cores - one.workers_cores - one.broker_cores, 0.0)
    per_line = (two.workers_cores + two.broker_cores) / two.rate
    return (ncpu - others) / per_line / one.rate


async def _refresh(bootstrap: str, topic: str, batches: dict[str, bytes], per_s: float, stop: asyncio.Event,
                   rounds: int | None = None) -> None:
    """Keep every job's partition busy during the rebalances: `per_s` small batches/s round the jobs
    (until `stop`, or `rounds` times round them)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5)
    await producer.start()
    try:
        jobs = sorted(batches)
        i, start = 0, time.monotonic()
        while not stop.is_set() and (rounds is None or i < rounds * len(jobs)):
            wait = start + i / per_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(min(wait, 0.05))
                continue
            job = jobs[i % len(jobs)]
            await producer.send(topic, batches[job], key=job_key(job))
            i += 1
    finally:
        await producer.stop()


def rebalance(bootstrap: str, args: argparse.Namespace) -> dict[str, float]:
    catalog = TopicCatalog(prefix=f"wkr-{uuid.uuid4().hex[:8]}.", partitions=args.partitions)
    ensure_topics(bootstrap, catalog)
    jobs = [f"reb-{i:04d}" for i in range(args.rebalance_jobs)]
    everyone = set(jobs)
    small = {j: encode(LogBatch(job_id=j, event_time=datetime.now(UTC), lines=[f"step {j} ok"] * 20,
                                source=Source(stream="logs/pod_rank0.log", host="bench"))) for j in jobs}
    logs_topic = catalog.topic_for_kind("log_batch")
    first = asyncio.Event()
    asyncio.run(_refresh(bootstrap, logs_topic, small, 1e6, first, rounds=1))

    stop = asyncio.Event()
    loop = asyncio.new_event_loop()
    refresher = threading.Thread(target=lambda: loop.run_until_complete(
        _refresh(bootstrap, logs_topic, small, args.refresh_per_s, stop)), daemon=True)
    a = Worker("a", bootstrap, catalog, args.tick_secs)
    b: Worker | None = None
    out: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 300
        while jobs_of(m := a.metrics()) != everyone:
            if time.monotonic() > deadline:
                raise SystemExit(f"worker a exported {len(jobs_of(m) & everyone)} of {len(jobs)} jobs in 300s "
                                 f"(partitions {m.get('rlhealth_partitions_owned')}, caught up "
                                 f"{m.get('rlhealth_worker_caught_up')}); see {a.log_path}")
            time.sleep(0.5)
        print(f"worker a alone exports all {len(jobs)} jobs", flush=True)
        refresher.start()
        time.sleep(2)

        def settle(workers: list[Worker], started: float, what: str) -> float:
            # Settled = the ownership condition held without a break for two ticks and a second: a join
            # can take two rebalance generations, and between them the condition holds for a moment.
            deadline = time.monotonic() + 300
            since: float | None = None
            while time.monotonic() < deadline:
                ms = [w.metrics() for w in workers]
                if not all(ms):
                    time.sleep(0.25)
                    continue
                sets = [jobs_of(m) for m in ms]
                owned = [m.get("rlhealth_partitions_owned", 0.0) for m in ms]
                twice = set.intersection(*sets) if len(sets) > 1 else set()
                ok = (not twice and set.union(*sets) == everyone and all(o > 0 for o in owned)
                      and sum(owned) == args.partitions)
                now = time.monotonic()
                if not ok:
                    since = None
                elif since is None:
                    since = now
                if since is not None and now - since >= 2 * args.tick_secs + 1:
                    took = since - started
                    print(f"{what}: every job exported by exactly one worker after {took:.1f}s "
                          f"(jobs per worker {[len(s) for s in sets]}, partitions {[int(o) for o in owned]})",
                          flush=True)
                    return took
                time.sleep(0.25)
            raise SystemExit(f"{what}: ownership did not settle in 300s")

        started = time.monotonic()
        print(f"{datetime.now(UTC):%H:%M:%S.%f} UTC: worker b starts", flush=True)
        b = Worker("b", bootstrap, catalog, args.tick_secs)
        out["join_s"] = settle([a, b], started, "join (worker b started)")
        twice_max = unowned_max = 0
        until = time.monotonic() + args.settle_secs
        while time.monotonic() < until:
            ms = [w.metrics() for w in (a, b)]
            if not all(ms):  # a scrape that timed out (busy machine) is no sample
                time.sleep(0.25)
                continue
            sets = [jobs_of(m) for m in ms]
            twice_max = max(twice_max, len(sets[0] & sets[1]))
            unowned_max = max(unowned_max, len(everyone - sets[0] - sets[1]))
            time.sleep(0.25)
        out["twice"], out["unowned"] = twice_max, unowned_max
        print(f"after the join, {args.settle_secs:.0f}s of samples: at most {twice_max} jobs exported by both "
              f"workers, at most {unowned_max} by neither", flush=True)

        started = time.monotonic()
        print(f"{datetime.now(UTC):%H:%M:%S.%f} UTC: worker b stops", flush=True)
        b.stop()
        out["leave_s"] = settle([a], started, "leave (worker b stopped)")
        stop.set()
        refresher.join(30)
        time.sleep(args.tick_secs * 2)  # the last verdicts out
        dup = defaultdict(set)
        calls: dict[tuple[str, int], list[str]] = defaultdict(list)
        for v in read_verdicts(bootstrap, catalog.verdicts, dedupe=False):
            dup[(v.job_id, v.seq)].add(v.produced_at)
            calls[(v.job_id, v.seq)].append(f"{v.produced_at:%H:%M:%S.%f} {v.verdict}")
        twice = sorted(key for key, seen in dup.items() if len(seen) > 1)
        out["dup_seq_jobs"] = len({job for job, _seq in twice})
        print(f"verdict topic: {len(dup)} (job, seq) pairs, {out['dup_seq_jobs']:.0f} jobs with two verdicts (judged at "
              "different times) under one seq", flush=True)
        for key in twice[:3]:  # what the duplicates were, against the join and leave times above
            print(f"  {key[0]} seq={key[1]}: {'; '.join(calls[key])}", flush=True)
        return out
    finally:
        stop.set()
        if b is not None:
            b.stop()
        stop_worker_and_topics(a.proc, bootstrap, catalog.prefix)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=30000, help="500-line messages in each throughput backlog")
    ap.add_argument("--jobs", type=int, default=48, help="jobs of the throughput backlog")
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--tick-secs", type=float, default=2.0)
    ap.add_argument("--rebalance-jobs", type=int, default=240)
    ap.add_argument("--refresh-per-s", type=float, default=50.0, help="batches/s produced during the rebalances")
    ap.add_argument("--settle-secs", type=float, default=15.0)
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-rebalance", action="store_true")
    ap.add_argument("--two-first", action="store_true", help="measure the two workers before the one")
    args = ap.parse_args()
    env = broker_env()
    try:
        bootstrap = start_broker(env)
        ratio = bound = float("nan")
        if not args.skip_throughput:
            lines = corpus_lines(LINES_PER_BATCH * 8, 0.02)
            if args.two_first:
                two = throughput(bootstrap, 2, args, lines)
                one = throughput(bootstrap, 1, args, lines)
            else:
                one = throughput(bootstrap, 1, args, lines)
                two = throughput(bootstrap, 2, args, lines)
            ratio = two.rate / one.rate
            bound = cpu_bound_ratio(one, two)
            print(f"throughput ratio 2 workers / 1: {ratio:.2f}; workers' CPU per line 2 vs 1: "
                  f"{two.workers_cores / two.rate / (one.workers_cores / one.rate):.2f}x; the most the CPUs allow "
                  f"(all {os.cpu_count()} CPUs less other processes' use, at the two-worker CPU cost per line of workers "
                  f"and broker): {bound:.2f}", flush=True)
            cpu = (f" cpu_bound_ratio={bound:.2f} workers_cores={one.workers_cores:.2f}/{two.workers_cores:.2f} "
                   f"broker_cores={one.broker_cores:.2f}/{two.broker_cores:.2f} "
                   f"machine_cores={one.machine_cores:.2f}/{two.machine_cores:.2f}")
        else:
            cpu = ""
        if args.skip_rebalance:
            print(f"RESULT workers=2 throughput_ratio={ratio:.2f}{cpu}")
            return 0
        r = rebalance(bootstrap, args)
        print(f"RESULT workers=2 throughput_ratio={ratio:.2f} rebalance_s={r['join_s']:.1f} "
              f"jobs_owned_twice={r['twice']:.0f} jobs_unowned={r['unowned']:.0f} leave_rebalance_s={r['leave_s']:.1f} "
              f"dup_seq_jobs={r['dup_seq_jobs']:.0f}{cpu}")
        return 0
    finally:
        stop_broker(env)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
