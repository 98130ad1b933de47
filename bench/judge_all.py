"""Judging every job of one worker, in process: the worker's own per-tick code without a broker.

Builds N jobs with the events of `bench/scale.py` (spec, state poll, log batch, GPU polls, trial),
folds them through the real core, then runs the worker's tick body (`StreamWorker._judge_locked`:
load the state, judge, stabilise, refresh the exporter, decide whether to publish) for `--ticks`
ticks, `--tick-secs` of clock apart, against in-memory stand-ins for the two tables and the
verdict topic. A refresh round (one log batch, GPU polls, a trial per job) is folded in before every
`--refresh-every`-th tick (default 1: every tick; 3 with a 10 s tick is the scale bench's
`--refresh-secs 30`). Ends with

    RESULT jobs=<n> judge_all_s=<median of the ticks after the first> judge_all_cpu_s=<same, CPU> first_tick_s=<first>
           judge_all_max_s=<slowest tick after the first> judge_cpu_mean_s=<mean CPU per tick after the first>
           rejudged=<median jobs the core ran on per tick after the first> refresh_every=<k> skip=<0|1>
           gc=<the garbage collector's thresholds: the worker's `gc_thresholds()` where the code has them>

    python bench/judge_all.py [--jobs 2000] [--ticks 4] [--tick-secs 10] [--refresh-every 1] [--no-skip]
                              [--profile out.prof] [--against /path/to/base/checkout [--rounds 2]]

The RESULT line also gives `rss_mb` (the process's resident memory after the last tick: the N jobs'
states, books, exporter and judgement memory, plus the interpreter) and `held_mb` (what tracemalloc
counts as allocated by then, `--trace-memory` only: slower).

`--against DIR` runs this same bench (these events, this script) in child processes alternately on
DIR's `rlhealth` and on this checkout's, `--rounds` times each, and prints each RESULT and the
medians side by side (`RESULT_AGAINST`).

`--no-skip` judges every job at every tick (`WorkerSettings.skip_unchanged=False`), as the worker did
before it kept judgements that cannot change yet.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import importlib
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# `--code DIR` (what `--against` passes to a child): import rlhealth from DIR instead of this checkout
CODE = Path(sys.argv[sys.argv.index("--code") + 1]) if "--code" in sys.argv else REPO
sys.path.insert(0, str(CODE))
sys.path.insert(0, str(REPO / "bench"))

importlib.import_module("rlhealth")  # first, from CODE: scale.py puts this checkout first on the path

from scale import job_events  # noqa: E402

from rlhealth.runtime import build_core  # noqa: E402
from rlhealth.schemas import job_key  # noqa: E402
from rlhealth.sinks.prometheus import Exporter  # noqa: E402
from rlhealth.streams import workers  # noqa: E402
from rlhealth.streams.workers import StreamWorker, WorkerSettings  # noqa: E402


class MemTable(dict):
    """A dict with the `PartitionedTable` calls the judging uses."""

    def __init__(self) -> None:
        super().__init__()
        self.key_partitions: dict[bytes, int] = {}


class Tables:
    def __init__(self) -> None:
        self.job_health = MemTable()
        self.verdicts = MemTable()


class Topic:
    """Accepts sends at once (a delivered future), counting them."""

    def __init__(self) -> None:
        self.sent = 0
        self.log: list[bytes] | None = None  # every value sent, when asked (`--dump`)

    async def send(self, key: bytes, value: bytes) -> asyncio.Future:
        self.sent += 1
        if self.log is not None:
            self.log.append(value)
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


class Clock:
    def __init__(self, t: datetime) -> None:
        self.t = t

    def __call__(self) -> datetime:
        return self.t


try:
    from rlhealth.streams.state_cache import DecodedStates
except ImportError:  # older code
    DecodedStates = None  # type: ignore[assignment,misc]

SKIPS = hasattr(StreamWorker, "_still_fresh")  # False on code from before the worker skipped unchanged jobs


def offline_worker(core: Any, clock: Clock, skip: bool = True, state_cache: int = 3000) -> StreamWorker:
    """A StreamWorker without its faust app: only what `_judge_locked` touches."""
    w = StreamWorker.__new__(StreamWorker)
    w.settings = WorkerSettings(bootstrap="offline", catalog=None)  # type: ignore[arg-type]
    if "skip_unchanged" in WorkerSettings.__dataclass_fields__:  # so that the bench also runs on older code
        w.settings = replace(w.settings, skip_unchanged=skip)
    w.core, w.exporter, w.clock = core, Exporter(), clock
    w.tables = Tables()  # type: ignore[assignment]
    w.verdict_topic, w.metrics_topic = Topic(), Topic()  # type: ignore[assignment]
    w.store = None
    w.captured = "stream: bench"
    w._judging = asyncio.Lock()
    w._metrics_at, w._seen, w._terminal_since, w._dirty, w._books = {}, {}, {}, set(), {}
    w._news = set()  # type: ignore[attr-defined]  # (code since session 6: jobs with news not written back yet)
    if SKIPS:
        w._fresh, w._rejudged, w._writes, w._waited, w._wait_parts = {}, 0, {}, 0.0, {}  # type: ignore[attr-defined]
    if DecodedStates is not None:  # code since session 7: decoded states kept after the write
        w._decoded = DecodedStates(state_cache)  # type: ignore[attr-defined]
    return w


def fold(w: StreamWorker, jobs: list[str], t: datetime, step: int, first: bool) -> None:
    table = w.tables.job_health
    for job in jobs:
        key = job_key(job)
        state = w._load(key, job, take=True) if DecodedStates is not None else w._load(key, job)
        for ev in job_events(job, t, step, first):
            state, _ = w.core.step(state, ev, t)
        w._write_back({key: state})  # as the agent writes it (and so judged again)
        table.key_partitions[key] = 0
        w._seen[key] = t.timestamp()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--ticks", type=int, default=4)
    ap.add_argument("--tick-secs", type=float, default=10.0)
    ap.add_argument("--refresh-every", type=int, default=1, help="fold a refresh round before every k-th tick")
    ap.add_argument("--no-skip", action="store_true", help="judge every job at every tick")
    ap.add_argument("--profile", help="write a cProfile of the ticks after the first here")
    ap.add_argument("--dump", help="write every published verdict here (one JSON a line) at a fixed start time, "
                                   "to compare two versions of the code")
    ap.add_argument("--state-cache", type=int, default=3000,
                    help="decoded states kept after the write (RLHEALTH_STATE_CACHE_JOBS), where the code has it")
    ap.add_argument("--trace-memory", action="store_true", help="also report tracemalloc's count (held_mb)")
    ap.add_argument("--against", help="a base checkout: run this bench on it and on this checkout, alternating")
    ap.add_argument("--rounds", type=int, default=2, help="with --against: runs of each")
    ap.add_argument("--code", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.against:
        return against(args)
    if args.trace_memory:
        tracemalloc.start()
    if hasattr(workers, "gc_thresholds"):  # what `StreamWorker.run` sets in the worker process
        gc.set_threshold(*workers.gc_thresholds())
    core = build_core()
    t = datetime(2026, 6, 1, 12, 0, tzinfo=UTC) if args.dump else datetime.now(UTC).replace(microsecond=0)
    clock = Clock(t)
    w = offline_worker(core, clock, skip=not args.no_skip, state_cache=args.state_cache)
    if args.dump:
        w.verdict_topic.log = []  # type: ignore[attr-defined]
    jobs = [f"scale-{i:05d}" for i in range(args.jobs)]
    fold(w, jobs, t, 1, True)
    keys = list(w.tables.job_health)
    times: list[float] = []
    cpus: list[float] = []  # CPU time of this process: less disturbed than wall time on a shared machine
    prof = cProfile.Profile(time.process_time) if args.profile else None
    rejudged: list[int] = []
    for k in range(args.ticks):
        if k % args.refresh_every == 0:
            fold(w, jobs, clock.t, 2 + k // args.refresh_every, False)
        clock.t = t + timedelta(seconds=args.tick_secs * (k + 1))
        if prof is not None and k:
            prof.enable()
        started, cpu = time.perf_counter(), time.process_time()
        _exported, published = asyncio.run(w._judge_locked(keys))
        times.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
        if prof is not None:
            prof.disable()
        rejudged.append(getattr(w, "_rejudged", len(keys)))
        print(f"tick {k}: judged {len(keys)} jobs in {times[-1]:.2f}s ({cpus[-1]:.2f}s CPU), core ran on "
              f"{rejudged[-1]}, published {published}, load {os.getloadavg()[0]:.2f}", flush=True)
    if prof is not None:
        prof.dump_stats(args.profile)
    if args.dump:
        Path(args.dump).write_bytes(b"\n".join(w.verdict_topic.log) + b"\n")  # type: ignore[attr-defined]
    rest, rest_cpu = times[1:] or times, cpus[1:] or cpus
    print(f"RESULT jobs={len(jobs)} judge_all_s={statistics.median(rest):.2f} "
          f"judge_all_cpu_s={statistics.median(rest_cpu):.2f} first_tick_s={times[0]:.2f} "
          f"judge_all_max_s={max(rest):.2f} judge_cpu_mean_s={statistics.mean(rest_cpu):.2f} "
          f"rejudged={statistics.median(rejudged[1:] or rejudged):.0f} refresh_every={args.refresh_every} "
          f"skip={int(SKIPS and not args.no_skip)} gc={','.join(map(str, gc.get_threshold()))} "
          f"rss_mb={rss_mb():.0f}" + (f" held_mb={tracemalloc.get_traced_memory()[0] / 2**20:.0f}"
                                       if args.trace_memory else ""))
    return 0


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def against(args: argparse.Namespace) -> int:
    """Run the bench on `args.against` and on this checkout, alternately, in child processes."""
    argv = [a for a in sys.argv[1:]]
    i = argv.index("--against")
    del argv[i:i + 2]
    if "--rounds" in argv:
        i = argv.index("--rounds")
        del argv[i:i + 2]
    results: dict[str, list[dict[str, float]]] = {"base": [], "this": []}
    for r in range(args.rounds):
        for name, code in (("base", args.against), ("this", str(REPO))):
            out = subprocess.run([sys.executable, __file__, *argv, "--code", code], capture_output=True, text=True,
                                 check=True).stdout
            line = [x for x in out.splitlines() if x.startswith("RESULT ")][-1]
            print(f"{name} ({code}) round {r + 1}: {line}", flush=True)
            fields = dict(kv.split("=", 1) for kv in line.split()[1:])
            results[name].append({k: float(v) for k, v in fields.items() if k != "gc"})
    med = {name: {k: statistics.median(run[k] for run in runs) for k in runs[0]} for name, runs in results.items()}
    keys = ["judge_all_cpu_s", "judge_cpu_mean_s", "judge_all_s", "rss_mb"]
    print("RESULT_AGAINST " + " ".join(
        f"{k}={med['base'][k]:.2f}/{med['this'][k]:.2f}(x{med['this'][k] / med['base'][k]:.2f})"
        for k in keys if k in med["base"] and k in med["this"] and med["base"][k]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
