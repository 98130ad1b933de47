"""Scale per worker: many live jobs through one `rlhealth worker` on a real broker.

Each job gets a JobSpec, a running JobStatePoll, GPU polls for two hosts of 8 GPUs, trial
completions and log batches with vLLM stats lines from 4 engines and SkyRL trainer step lines,
all timestamped now. The events are produced before the worker starts; once the worker has caught
up and holds every job, a refresh round (a state poll, one log batch, GPU polls and one trial per
job) is produced every `--refresh-secs` (default: the tick) so that the jobs stay live, and after
each of `--ticks` rounds the bench samples

* the worker's RSS (/proc/<pid>/status VmRSS),
* `rlhealth_judge_all_seconds` (wall time of the last tick's judgement of every owned job), polled
  every ~3 s so that every pass is seen,
* the Prometheus series count and the wall time of every `/metrics` scrape (plain text, no gzip).

Ends with
    RESULT jobs=<n> rss_mb=<x> judge_all_s=<y> tick_s=<t> scrape_s=<z> series=<s> refresh_s=<r>
           judge_all_p50_s=<median pass> passes=<passes seen> rejudged_p50=<median jobs the core ran on per pass>
           judge_busy_max_s=<most time a pass spent judging, not waiting for sends or the event intake>
           judge_all_max_s=<the worst regular pass's wall time during the rounds> passes_over_tick=<k>/<n>
           fold_round_max_s=<most time from a round's production to its last event folded (inf: not within
           twice the refresh interval)> rounds_not_folded=<k>/<rounds> judgements_per_job_round=<core runs per job per round>
           intake_held_s=<seconds the intake waited for judging passes during the rounds>
           loop_lag_max_s=<longest the worker's event loop was blocked, since start> gc_full_max_s=<longest full
           garbage collection, since start> gc_s=<seconds in garbage collections during the rounds> assignments=<partition
           assignments during the rounds (0: no rebalance)> log=<the worker's log>
(the maximum over the sampled rounds for rss, judge and scrape). `passes_over_tick` counts, from the
worker's own counters, the regular passes that took longer than the tick (some job judged late)
out of all passes completed during the rounds: "every job judged within its tick" is 0/<n>.
`judge_all_max_s` is the worker's own running maximum when it rose during the rounds, else the
largest pass sampled (both bound every pass of the rounds). A worker without these counters
(code before them) is reported from the sampled passes only, marked `counted=sampled`.

    python bench/scale.py [--jobs 2000] [--tick-secs 30] [--refresh-secs 30] [--ticks 4] [--partitions 12]
                          [--loglevel info] [--profile-worker FILE]

The worker's stdout and stderr (its log, `--loglevel`, default info: assignments, revocations, event
loop stalls, the consumer's heartbeat and commit errors) are kept in bench/out/scale-worker-<time>.log,
whose path is printed at the start and in the RESULT line.

The worker's default tick is 10 s; a refresh round of 10,000 jobs is 50,000 events (460,000 log lines:
one batch of 46 a job), which one worker on this 2-vCPU machine cannot fold every 10 s on top of
judging, so the judging at a 10 s tick is measured with `--tick-secs 10 --refresh-secs 30` (jobs that
report every 30 s).

The issue's figure is 10,000 jobs (`--jobs 10000`); on a 2-vCPU machine shared with other work
that run takes a long time to produce and fold in, so the default is 2,000.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from aiokafka import AIOKafkaProducer  # noqa: E402
from stream import broker_env, free_port, start_broker  # noqa: E402

from bench._kafka_harness import stop_worker_and_topics  # noqa: E402
from rlhealth import schemas as s  # noqa: E402
from rlhealth.schemas import encode, job_key  # noqa: E402
from rlhealth.schemas.topics import TopicCatalog  # noqa: E402
from rlhealth.sinks.kafka import ensure_topics  # noqa: E402

ENGINE_PIDS = (20531, 21531, 22531, 23531)
FULL_GC_MAX = 'rlhealth_gc_pause_max_seconds{generation="2"}'


def log_lines(t: datetime, step: int) -> list[str]:
    vts = t.strftime("%m-%d %H:%M:%S")
    lts = t.strftime("%Y-%m-%d %H:%M:%S")
    out = []
    for e, pid in enumerate(ENGINE_PIDS):
        out.append(f"(AsyncVLLMInferenceEngine pid={pid}, ip=10.0.2.100) INFO {vts} [loggers.py:271] Engine {e:03d}: "
                   f"Avg prompt throughput: {1000 + 37 * e:.1f} tokens/s, Avg generation throughput: {900 + 11 * e:.1f} "
                   f"tokens/s, Running: {20 + e} reqs, Waiting: 0 reqs, GPU KV cache usage: 41.5%, "
                   "Prefix cache hit rate: 55.0%")
    for k in range(40):
        out.append(f"{lts},{k:03d}\tINFO worker.py:{100 + k} -- processing rollout {step * 40 + k}")
    out.append(f"(skyrl_entrypoint pid=7760, ip=10.0.2.179) {lts}.500 | INFO     | "
               f"skyrl_train.fully_async_trainer:_train_loop:658 - Finished: 'step', time cost: 118.20s")
    out.append(f"(skyrl_entrypoint pid=7760, ip=10.0.2.179) {lts}.501 | INFO     | "
               f"skyrl_train.fully_async_trainer:_train_loop:658 - Step {step}: effective_batch=64 samples")
    return out


def job_events(job: str, t: datetime, step: int, first: bool) -> list:
    src = s.Source(cluster="bench", host="pod-trainer-0", stream="logs/pod_rank0.log", shipper="bench")
    evs: list = []
    if first:
        evs.append(s.JobSpec(job_id=job, event_time=t,
                             model=s.ModelSpec(name="Qwen3-8B", params_b=8.2, active_params_b=8.2, moe=False,
                                               dtype="bfloat16"),
                             hardware=s.HardwareSpec(gpu="H100-80GB-SXM", gpus_per_node=8, nodes=2),
                             geometry=s.GeometrySpec(num_inference_engines=4, engine_tp=2, colocated=False,
                                                     engine_pods=["pod-engine-0"], policy_pods=["pod-trainer-0"]),
                             rollout=s.RolloutSpec(n_concurrent_trials=48, expected_episode_s=300.0),
                             expected_step_s=120.0, max_retries=1, enforce_eager=False))
    evs.append(s.JobStatePoll(job_id=job, event_time=t, state="running", pods=2, failure_count=0, preemption_count=0,
                              attempt=0, max_retries=1, scheduler="kubernetes"))
    evs.append(s.LogBatch(job_id=job, event_time=t, source=src, lines=log_lines(t, step)))
    for host in ("pod-trainer-0", "pod-engine-0"):
        evs.append(s.GpuPoll(job_id=job, event_time=t, source=src, host=host,
                             gpus=[s.GpuReading(index=i, uuid=f"GPU-{host[-8:]}-{i}", util_pct=85.0, mem_used_mib=70000.0,
                                                mem_total_mib=81559.0, power_w=550.0) for i in range(8)]))
    evs.append(s.TrialEvent(job_id=job, event_time=t, phase="completed", trial_name=f"trial-{step}",
                            task_name="fix-bug", session="train", reward=0.5, assistant_turns=10,
                            started_at=t - timedelta(minutes=5), finished_at=t))
    return evs


async def produce(bootstrap: str, catalog: TopicCatalog, jobs: list[str], step: int, first: bool) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20, max_batch_size=1 << 20,
                                max_request_size=8 << 20)
    await producer.start()
    n = 0
    try:
        t = datetime.now(UTC)
        for job in jobs:
            for ev in job_events(job, t, step, first):
                await producer.send(catalog.topic_for_kind(ev.kind), encode(ev), key=job_key(job))
                n += 1
        await producer.flush()
    finally:
        await producer.stop()
    return n


def scrape(port: int) -> tuple[float, dict[str, float], int]:
    import urllib.request

    t = time.perf_counter()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            text = r.read().decode()
    except OSError:
        return 0.0, {}, 0
    dt = time.perf_counter() - t
    out: dict[str, float] = {}
    series = 0
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series += 1
            k, _, v = line.rpartition(" ")
            if not k.startswith("rlhealth_job_"):
                out[k] = float(v)
    return dt, out, series


def processed(m: dict[str, float]) -> float:
    """Events the worker folded so far (every kind)."""
    return sum(v for k, v in m.items() if k.startswith("rlhealth_events_processed_total"))


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--tick-secs", type=float, default=30.0)
    ap.add_argument("--refresh-secs", type=float, default=None, help="one refresh round per job this often "
                    "(default: --tick-secs)")
    ap.add_argument("--ticks", type=int, default=4, help="refresh rounds sampled")
    ap.add_argument("--profile-worker", help="run the worker under cProfile, writing its stats here")
    ap.add_argument("--loglevel", default="info", help="the worker's log level (its log is kept in bench/out)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="give up waiting for the worker after this long")
    args = ap.parse_args()
    env = broker_env()
    try:
        return _bench(args, start_broker(env))
    finally:
        if env is not None:
            subprocess.run([str(REPO / "scripts" / "kafka.sh"), "stop"], env=env, capture_output=True, timeout=120)


def _bench(args: argparse.Namespace, bootstrap: str) -> int:
    catalog = TopicCatalog(prefix=f"scale-{uuid.uuid4().hex[:8]}.", partitions=args.partitions)
    ensure_topics(bootstrap, catalog)
    jobs = [f"scale-{i:05d}" for i in range(args.jobs)]
    t0 = time.perf_counter()
    n = asyncio.run(produce(bootstrap, catalog, jobs, 1, True))
    print(f"produced {n} events for {len(jobs)} jobs in {time.perf_counter() - t0:.1f}s "
          f"(machine load {' '.join(f'{x:.2f}' for x in os.getloadavg())})", flush=True)
    port = free_port()
    log_path = REPO / "bench" / "out" / f"scale-worker-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    print(f"worker log: {log_path}", flush=True)
    with open(log_path, "wb") as worker_log:
        worker = subprocess.Popen(
            [sys.executable, *(["-m", "cProfile", "-o", args.profile_worker] if args.profile_worker else []),
             "-m", "rlhealth", "worker", "--bootstrap", bootstrap, "--topic-prefix", catalog.prefix,
             "--metrics-port", str(port), "--tick-secs", str(args.tick_secs), "--loglevel", args.loglevel,
             "--no-create-topics"],
            env=dict(os.environ, RLHEALTH_PARTITIONS=str(args.partitions)), stdout=worker_log,
            stderr=subprocess.STDOUT)
    try:
        t1 = time.monotonic()
        while True:
            if worker.poll() is not None:
                raise SystemExit(f"worker exited {worker.returncode}; see {log_path}")
            if time.monotonic() - t1 > args.timeout:
                raise SystemExit("the worker did not judge every job in time")
            _, m, _ = scrape(port)
            if m.get("rlhealth_worker_caught_up") == 1.0 and m.get("rlhealth_jobs_owned", 0) >= len(jobs):
                break
            time.sleep(2)
        print(f"worker holds {len(jobs)} jobs, caught up {time.monotonic() - t1:.0f}s after start", flush=True)
        samples = []
        _, m0, _ = scrape(port)
        passes0 = m0.get("rlhealth_judge_passes_total")
        over0 = m0.get("rlhealth_judge_passes_over_tick_total")
        max0 = m0.get("rlhealth_judge_all_max_seconds")
        held0 = m0.get("rlhealth_intake_held_seconds")
        assigned0 = m0.get("rlhealth_partition_assignments_total")
        processed0 = processed(m0)
        per_round = len(jobs) * 5  # events of a refresh round (job_events with first=False)
        fold_rounds: list[float] = []
        unfolded = 0  # rounds not folded within twice the refresh interval
        judged0 = m0.get("rlhealth_jobs_judged_total", float("nan"))
        passes: list[float] = []  # judge_all of every judgement pass seen (the gauge polled every ~3 s)
        rejudged: list[float] = []  # jobs the core ran on in each of those passes (nan: a worker without the gauge)
        busy: list[float] = []  # of each pass, the time spent judging (not waiting for sends or the intake)
        refresh = args.refresh_secs or args.tick_secs
        for k in range(args.ticks):
            start = time.monotonic()
            asyncio.run(produce(bootstrap, catalog, jobs, 2 + k, False))  # keep every job live
            target = processed0 + per_round * (k + 1)
            folded_at: float | None = None
            seen: list[float] = []
            scrapes: list[float] = []
            last = passes[-1] if passes else None
            while True:
                dt, m, series = scrape(port)
                scrapes.append(dt)
                if folded_at is None and processed(m) >= target:
                    folded_at = time.monotonic() - start
                judge = m.get("rlhealth_judge_all_seconds", float("nan"))
                if judge != last:  # a pass ended since the last poll (equal times of two passes are merged)
                    seen.append(judge)
                    last = judge
                    rejudged.append(m.get("rlhealth_jobs_rejudged", float("nan")))
                    busy.append(m.get("rlhealth_judge_all_busy_seconds", float("nan")))
                left = refresh - (time.monotonic() - start)
                if left <= 0:
                    break
                time.sleep(min(3.0, left))
            passes.extend(seen)
            if folded_at is None:  # the round is not folded within its refresh interval: wait a while
                while time.monotonic() - start < refresh * 2:
                    _, m, _ = scrape(port)
                    if processed(m) >= target:
                        folded_at = time.monotonic() - start
                        break
                    time.sleep(1.0)
            if folded_at is None:  # still behind: the intake does not keep up with the rounds
                unfolded += 1
                folded_at = float("inf")
            fold_rounds.append(folded_at)
            judged_total = m.get("rlhealth_jobs_judged_total", float("nan"))
            rss = rss_mb(worker.pid)
            samples.append((rss, max(scrapes), series))
            print(f"round {k}: rss {rss:.0f} MB, judge-all passes {', '.join(f'{x:.2f}' for x in seen) or '-'} s "
                  f"(core ran on {', '.join(f'{x:.0f}' for x in rejudged[-len(seen):]) if seen else '-'} jobs, "
                  f"judging for {', '.join(f'{x:.2f}' for x in busy[-len(seen):]) if seen else '-'} s of them) "
                  f"(tick {args.tick_secs:.0f} s), scrapes {min(scrapes):.2f}-{max(scrapes):.2f} s, {series} series, "
                  f"jobs owned {m.get('rlhealth_jobs_owned', 0):.0f}, round folded {folded_at:.1f} s after "
                  f"production began, judgements so far {judged_total - judged0:.0f}, "
                  f"loop blocked max {m.get('rlhealth_event_loop_lag_max_seconds', float('nan')):.1f} s, "
                  f"full GC max {m.get(FULL_GC_MAX, float('nan')):.2f} s "
                  f"({gc_seconds(m):.1f} s in GC), "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
        rss = max(x[0] for x in samples)
        judge = max(passes) if passes else float("nan")
        p50 = statistics.median(passes) if passes else float("nan")
        scr = max(x[1] for x in samples)
        series = samples[-1][2]
        _, m1, _ = scrape(port)
        if passes0 is not None and "rlhealth_judge_passes_total" in m1:
            n_passes = int(m1["rlhealth_judge_passes_total"] - passes0)
            n_over = int(m1.get("rlhealth_judge_passes_over_tick_total", 0) - (over0 or 0))
            worst = max(passes, default=0.0)
            if m1.get("rlhealth_judge_all_max_seconds", 0.0) > (max0 or 0.0):
                worst = max(worst, m1["rlhealth_judge_all_max_seconds"])
            held = m1.get("rlhealth_intake_held_seconds", 0.0) - (held0 or 0.0)
            counted = "worker"
        else:
            n_passes, n_over = len(passes), sum(1 for x in passes if x > args.tick_secs)
            worst, held, counted = max(passes, default=float("nan")), float("nan"), "sampled"
        print(f"RESULT jobs={len(jobs)} rss_mb={rss:.0f} judge_all_s={judge:.2f} tick_s={args.tick_secs:.0f} "
              f"scrape_s={scr:.2f} series={series} refresh_s={refresh:.0f} judge_all_p50_s={p50:.2f} "
              f"passes={len(passes)} rejudged_p50={statistics.median(rejudged) if rejudged else float('nan'):.0f} "
              f"judge_busy_max_s={max(busy) if busy else float('nan'):.2f} judge_all_max_s={worst:.2f} "
              f"passes_over_tick={n_over}/{n_passes} fold_round_max_s={max(fold_rounds):.1f} "
              f"rounds_not_folded={unfolded}/{len(fold_rounds)} "
              f"judgements_per_job_round={(m1.get('rlhealth_jobs_judged_total', float('nan')) - judged0) / len(jobs) / args.ticks:.2f} "
              f"intake_held_s={held:.1f} counted={counted} {cache_hits(m0, m1)}"
              f"loop_lag_max_s={m1.get('rlhealth_event_loop_lag_max_seconds', float('nan')):.1f} "
              f"gc_full_max_s={m1.get(FULL_GC_MAX, float('nan')):.2f} "
              f"gc_s={gc_seconds(m1) - gc_seconds(m0):.1f} "
              f"assignments={m1.get('rlhealth_partition_assignments_total', float('nan')) - (assigned0 or 0.0):.0f} "
              f"load={' '.join(f'{x:.2f}' for x in os.getloadavg())} log={log_path}")
        return 0
    finally:
        stop_worker_and_topics(worker, bootstrap, catalog.prefix)


def gc_seconds(m: dict[str, float]) -> float:
    """The worker's seconds in garbage collections so far, every generation (0 without the gauge)."""
    return sum(v for k, v in m.items() if k.startswith("rlhealth_gc_seconds{"))


def cache_hits(m0: dict[str, float], m1: dict[str, float]) -> str:
    """`state_cache_hit_ratio=` over the rounds: the share of state loads (fold and judging) served from
    the worker's cache of decoded states (empty against a worker without one)."""
    if "rlhealth_state_cache_hits" not in m1:
        return ""
    hits = m1["rlhealth_state_cache_hits"] - m0.get("rlhealth_state_cache_hits", 0.0)
    misses = m1.get("rlhealth_state_cache_misses", 0.0) - m0.get("rlhealth_state_cache_misses", 0.0)
    return f"state_cache_hit_ratio={hits / max(hits + misses, 1.0):.2f} "


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
