"""Evidence store: findings ingest rate and one job's window query, at N findings.

    python bench/evidence.py [--rows 10000000] [--jobs 1000] [--batch 100000] [--db PATH]

Builds synthetic findings (deterministic, seed 7) for `--jobs` jobs over 30 days, feeds them to
`EvidenceStore.add_findings` (the path `probe`/`watch`/`worker --db` and the evidence writer use:
buffered, one Arrow INSERT per flush), then times `rlhealth.sinks.forensics.timeline` for one job
over one hour on a fresh read-only connection (median of 20, after one warm-up).
Ends with `RESULT findings_rows_per_s=<x> window_query_ms=<y>`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rlhealth.agents.findings import Finding
from rlhealth.sinks import forensics
from rlhealth.sinks.duckdb import EvidenceStore

RULES = ["nccl.watchdog_timeout", "nccl.terminating", "vllm.engine_dead", "python.traceback", "cuda.oom",
         "ray.worker_died", "xid.79", "harbor.verifier_timeout"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--db", type=Path, default=None)
    args = ap.parse_args()
    rng = random.Random(7)
    db = args.db or Path(tempfile.mkdtemp(prefix="rlhealth-bench-")) / "evidence.duckdb"
    t0 = datetime(2026, 6, 1, tzinfo=UTC)
    span = 30 * 86400
    store = EvidenceStore(db, flush_rows=args.batch)
    start = time.perf_counter()
    done = 0
    while done < args.rows:
        n = min(args.batch, args.rows - done)
        by_job: dict[str, list[Finding]] = {}
        for i in range(n):
            job = f"job-{rng.randrange(args.jobs):05d}"
            k = done + i
            by_job.setdefault(job, []).append(Finding(
                kind="fatal", rule_id=RULES[k % len(RULES)], text=f"line {k}: something failed on rank {k % 64}",
                event_time=t0 + timedelta(seconds=rng.randrange(span)), source="logs/pod_rank0.log",
                severity="error", gates=("A",), ref={"file": "logs/pod_rank0.log", "file_offset": k * 120}))
        for job, fs in by_job.items():
            store.add_findings(job, fs, now=t0)
        store.flush()
        done += n
        print(f"  {done:,} rows, {done / (time.perf_counter() - start):,.0f} rows/s", flush=True)
    store.close()
    rate = args.rows / (time.perf_counter() - start)
    since, until = t0 + timedelta(days=10), t0 + timedelta(days=10, hours=1)
    forensics.timeline(db, "job-00007", since, until)
    times = []
    for _ in range(20):
        q0 = time.perf_counter()
        forensics.timeline(db, "job-00007", since, until)
        times.append((time.perf_counter() - q0) * 1000)
    print(f"store {db} ({db.stat().st_size / 1e6:.0f} MB)")
    print(f"RESULT findings_rows_per_s={rate:.0f} window_query_ms={statistics.median(times):.1f}")


if __name__ == "__main__":
    main()
