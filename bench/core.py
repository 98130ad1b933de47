"""Health-core throughput and state size, measured side by side in one run.

Measures events/s and log lines/s through HealthCore.step for realistic 500-line LogBatch events
(about 1% signal lines), plus GPU polls, trial events and state polls; the cost of judge(); and the
serialised state size per job. Ratios against a bare classifier scan of the same batches show how
much the core adds on top of the scan.

    .venv/bin/python bench/core.py [--batches 400] [--rounds 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlhealth.runtime import build_core
from rlhealth.schemas import GpuPoll, GpuReading, JobStatePoll, LogBatch, Source, TrialEvent

T0 = datetime(2026, 6, 28, 12, 0, tzinfo=UTC)

NOISE = [
    '\x1b[36m(APIServer pid=1032)\x1b[0m INFO:     127.0.0.1:51122 - "POST /v1/completions HTTP/1.1" 200 OK',
    "(skyrl_entrypoint pid=3716, ip=10.0.3.95) {ts} | DEBUG    | skyrl_train.utils:log:12 - micro-step 17 loss=0.0113",
    "Processed prompts:  45%|████▌     | 29/64 [00:12<00:14,  2.41it/s, est. speed input: 812.3 toks/s]",
    "NCCL INFO Channel 02/0 : 3[3] -> 4[4] via P2P/IPC/read",
    '{{"level": "info", "msg": "rollout sample", "reward": 0.0, "len": 5169}}',
    "(RolloutCoordinator pid=10662, ip=10.0.3.95) {ts} | INFO     | examples.terminal_bench.terminal_bench_generator"
    ":_process_trial_result:1269 - Trajectory TrajectoryID(instance_id='nl2bash-00413', repetition_id=3) done",
]
SIGNAL = [
    "\x1b[36m(AsyncVLLMInferenceEngine pid=36095, ip=10.0.4.193)\x1b[0m INFO 06-28 {hms} [loggers.py:248] Engine 000: "
    "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 494.7 tokens/s, Running: 4 reqs, Waiting: 0 "
    "reqs, GPU KV cache usage: 4.0%, Prefix cache hit rate: 55.9%",
    "(skyrl_entrypoint pid=3716, ip=10.0.3.95) {ts} | INFO     | skyrl_train.fully_async_trainer:_train_loop:658 - "
    "Finished: 'step', time cost: 993.21s",
    "(EngineCore_DP0 pid=2211) INFO 06-28 {hms} [shm_broadcast.py:466] No available shared memory broadcast block "
    "found in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming work.",
]


def make_batches(n: int, seed: int = 7) -> list[LogBatch]:
    rnd = random.Random(seed)
    out = []
    for b in range(n):
        t = T0 + timedelta(seconds=5 * b)
        ts = t.strftime("%Y-%m-%d %H:%M:%S.000")
        hms = t.strftime("%H:%M:%S")
        lines = []
        for _ in range(500):
            pool = SIGNAL if rnd.random() < 0.01 else NOISE
            lines.append(rnd.choice(pool).format(ts=ts, hms=hms))
        out.append(LogBatch(job_id="bench-job", event_time=t, lines=lines, source=Source(stream="logs/pod_rank0.log"),
                            offsets=list(range(0, 500 * 120, 120))))
    return out


def other_events(n: int) -> list:
    evs = []
    for i in range(n):
        t = T0 + timedelta(seconds=10 * i)
        evs.append(GpuPoll(job_id="bench-job", event_time=t, host=f"pod-{i % 4}",
                           gpus=[GpuReading(index=g, util_pct=80.0, mem_used_mib=50000, mem_total_mib=81559,
                                            power_w=400) for g in range(8)]))
        evs.append(TrialEvent(job_id="bench-job", event_time=t, phase="completed", trial_name=f"t{i}", reward=i % 2,
                              assistant_turns=5, output_samples=["ls -la && grep -r pattern ."]))
        evs.append(JobStatePoll(job_id="bench-job", event_time=t, state="running", pods=4, attempt=0))
    return evs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    core = build_core()
    batches = make_batches(args.batches)
    others = other_events(2000)
    now = T0 + timedelta(hours=2)
    lines = 500 * len(batches)
    scan_s, step_s, other_s, judge_s = [], [], [], []
    for _ in range(args.rounds):
        t = time.perf_counter()
        for b in batches:
            core.classifier.scan(b.lines)
        scan_s.append(time.perf_counter() - t)
        state = core.new_state("bench-job")
        t = time.perf_counter()
        for b in batches:
            state, _ = core.step(state, b, now)
        step_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        for ev in others:
            state, _ = core.step(state, ev, now)
        other_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        for _ in range(200):
            core.judge(state, now)
        judge_s.append((time.perf_counter() - t) / 200)
    scan, step, other, judge = (statistics.median(x) for x in (scan_s, step_s, other_s, judge_s))
    size = state.size_bytes()
    print(f"classifier engine: {core.classifier.engine}; {len(batches)} batches x 500 lines, {args.rounds} rounds (medians)")
    print(f"classifier scan only : {lines / scan:12,.0f} lines/s")
    print(f"core.step (LogBatch) : {lines / step:12,.0f} lines/s  = {len(batches) / step:,.0f} batches/s")
    print(f"core.step (other)    : {len(others) / other:12,.0f} events/s (GPU polls, trials, state polls)")
    print(f"core.judge           : {judge * 1e3:12.2f} ms per verdict")
    print(f"state size           : {size:12,d} bytes per job (msgpack)")
    print(f"RESULT step_lines_per_s={lines / step:.0f} step_over_scan_time={step / scan:.2f} "
          f"other_events_per_s={len(others) / other:.0f} judge_ms={judge * 1e3:.2f} state_bytes={size}")


if __name__ == "__main__":
    main()
