"""Evidence store: findings ingest rate and one job's window query, at N findings.

    python bench/evidence.py [--rows 10000000] [--jobs 1000] [--batch 100000] [--order random|time]
                             [--db PATH] [--snapshot]

Builds synthetic findings (deterministic, seed 7) for `--jobs` jobs over 30 days and feeds them to
`EvidenceStore.add_findings` (the path `probe`/`watch`/`worker --db` and the evidence writer use:
columnar buffers, duplicates skipped, one Parquet file per touched bucket per flush, merges on the
store's merge thread), in batches of `--batch` findings with one `flush()` each. `--order random`:
every batch spans the whole 30 days (the worst case for pruning by time); `--order time`: findings
arrive in event-time order with up to 2 minutes of jitter, as a worker writes them. The ingest rate
counts the store's time only (`add_findings`, `flush`, and `close`, which finishes the merges);
building the Finding objects is reported apart. CPU time is the whole process's (merge thread
included) over the store's calls.

Then times `rlhealth.sinks.forensics.timeline` for one job over one hour on a fresh read-only
connection, as `rlhealth evidence timeline` runs it (median of 20 after one warm-up), apart the
cost of opening a connection alone, and the same query on one open read connection (`con=`).
`--snapshot` also times one reader snapshot of the whole store.
Ends with `RESULT findings_rows_per_s=<x> window_query_ms=<y>` (y: the fresh-connection time).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb

from rlhealth.agents.findings import Finding
from rlhealth.sinks import forensics
from rlhealth.sinks.duckdb import EvidenceStore, connect_readonly

RULES = ["nccl.watchdog_timeout", "nccl.terminating", "vllm.engine_dead", "python.traceback", "cuda.oom",
         "ray.worker_died", "xid.79", "harbor.verifier_timeout"]
T0 = datetime(2026, 6, 1, tzinfo=UTC)
SPAN_S = 30 * 86400


def batch(rng: random.Random, done: int, n: int, args: argparse.Namespace) -> dict[str, list[Finding]]:
    by_job: dict[str, list[Finding]] = {}
    for i in range(n):
        job = f"job-{rng.randrange(args.jobs):05d}"
        k = done + i
        if args.order == "time":
            offset = min(SPAN_S - 1, k * SPAN_S // args.rows + rng.randrange(120))
        else:
            offset = rng.randrange(SPAN_S)
        by_job.setdefault(job, []).append(Finding(
            kind="fatal", rule_id=RULES[k % len(RULES)], text=f"line {k}: something failed on rank {k % 64}",
            event_time=T0 + timedelta(seconds=offset), source="logs/pod_rank0.log",
            severity="error", gates=("A",), ref={"file": "logs/pod_rank0.log", "file_offset": k * 120}))
    return by_job


def timed(fn, rounds: int = 20) -> tuple[float, float]:
    """Median wall and CPU milliseconds of `fn` over `rounds`, after one warm-up."""
    fn()
    wall, cpu = [], []
    for _ in range(rounds):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - w0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--order", choices=["random", "time"], default="random")
    ap.add_argument("--db", type=Path, default=None)
    ap.add_argument("--snapshot", action="store_true", help="also time one reader snapshot of the store")
    args = ap.parse_args()
    rng = random.Random(7)
    db = args.db or Path(tempfile.mkdtemp(prefix="rlhealth-bench-")) / "evidence.duckdb"
    load0 = os.getloadavg()
    store = EvidenceStore(db, flush_rows=args.batch + 1)
    store_s = gen_s = store_cpu = 0.0
    cpu0 = time.process_time()
    done = 0
    while done < args.rows:
        n = min(args.batch, args.rows - done)
        g0 = time.perf_counter()
        by_job = batch(rng, done, n, args)
        s0, sc0 = time.perf_counter(), time.process_time()
        gen_s += s0 - g0
        for job, fs in by_job.items():
            store.add_findings(job, fs, now=T0)
        store.flush()
        store_s += time.perf_counter() - s0
        store_cpu += time.process_time() - sc0
        done += n
        if done % (10 * args.batch) == 0 or done == args.rows:
            print(f"  {done:,} rows, store {done / store_s:,.0f} rows/s, load {os.getloadavg()[0]:.1f}", flush=True)
    c0, cc0 = time.perf_counter(), time.process_time()
    store.close()
    store_s += time.perf_counter() - c0
    store_cpu += time.process_time() - cc0
    cpu_s = time.process_time() - cpu0
    rate = store.rows_written["findings"] / store_s
    size = sum(p.stat().st_size for p in db.parent.rglob("*") if p.is_file())
    print(f"ingest: {store.rows_written['findings']:,} rows stored in {store_s:.1f} s ({rate:,.0f} rows/s), store CPU {store_cpu:.1f} s """
          f"({store.rows_written['findings'] / store_cpu:,.0f} rows per CPU-s); "
          f"building the findings {gen_s:.1f} s; process CPU {cpu_s:.1f} s; peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB; store {size / 1e6:.0f} MB")

    since, until = T0 + timedelta(days=10), T0 + timedelta(days=10, hours=1)
    rows = len(forensics.timeline(db, "job-00007", since, until).rows)
    q_wall, q_cpu = timed(lambda: forensics.timeline(db, "job-00007", since, until))
    o_wall, o_cpu = timed(lambda: duckdb.connect(str(db), read_only=True).close())
    a_wall, a_cpu = timed(lambda: forensics.timeline(db, "job-00007"))
    con = connect_readonly(db)
    k_wall, k_cpu = timed(lambda: forensics.timeline(db, "job-00007", since, until, con=con))
    con.close()
    print(f"window query (job-00007, 1 h, {rows} rows), fresh connection each (as `rlhealth evidence timeline`): "
          f"{q_wall:.1f} ms wall, {q_cpu:.1f} ms CPU; of which opening a connection {o_wall:.1f} ms wall, "
          f"{o_cpu:.1f} ms CPU; on an open read connection: {k_wall:.1f} ms wall, {k_cpu:.1f} ms CPU; "
          f"whole timeline (500 rows, fresh) {a_wall:.1f} ms wall")
    if args.snapshot:
        s0 = time.perf_counter()
        with EvidenceStore(db) as again:
            again.snapshot()
        print(f"one snapshot of the store: {time.perf_counter() - s0:.1f} s")
    print(f"load average at start {load0[0]:.1f}, at end {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
    print(f"RESULT findings_rows_per_s={rate:.0f} window_query_ms={q_wall:.1f}")


if __name__ == "__main__":
    main()
