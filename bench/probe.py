"""Whole-process `rlhealth probe` on a ~1 GB capture vs one `grep -E -c -f patterns.txt` pass.

    python bench/probe.py [--size-mb 1024] [--rounds 3] [--out bench/out] [--regen]
                          [--skip-grep] [--profile FILE.prof] [--corpus sparse|dense]

`--corpus dense` (default size 200 MB) builds a capture where most lines match a rule: vLLM stats
from 16 engines every 5 s and SGLang decode-batch lines (engine pod), verl step-metric lines, HF
Trainer log dicts, Megatron iteration lines and SkyRL tqdm progress bars (trainer pod), between
vLLM DEBUG request lines and access lines that match nothing, plus the same few faults.

1. Builds (deterministically, seed 7; skipped when bench/out/probe_<N>mb/ is already complete) a
   capture of about N MB of logs: logs/pod_rank0.log (trainer pod: loguru lines, python logging,
   tqdm bars with several \\r updates, NCCL INFO bursts, Ray ANSI prefixes), logs/pod_rank1.log
   (engine pod: vLLM `Engine 00N: Avg prompt throughput` stats every 10 s for 4 engines, uvicorn
   access lines, vLLM request lines), plus a few signals (SkyRL step start/finish every 20 min,
   one Python traceback, one NCCL watchdog timeout line, planted fake HF/W&B keys), and the small
   sources: state.jsonl, gpu/<host>.csv, job.json, capture.json, 5 trial dirs copied from
   shared/scenarios/healthy_learning/capture/trace_jobs.
2. Exports the rule packs as ERE (`to_ere`, like bench/classify.py) to patterns.txt.
3. Times, in alternating rounds (the first method alternates), medians:
   * probe : `python -m rlhealth probe CAPTURE --format json --no-progress` as a subprocess
             (interpreter start, imports, Hyperscan compile, reading + redaction + batching +
             classification + the whole core, verdict) - wall time and peak RSS (wait4 rusage);
   * grep  : `LC_ALL=C grep -E -c -f patterns.txt logs/*.log` (whole process, stdout to a pipe).
   Ends with `RESULT probe_time_over_grep=<probe median s / grep median s>`.
Each run also reports CPU seconds (user + system of the subprocess: steadier than wall time on a shared
machine) and `RESULT ... probe_cpu_over_grep_cpu=<x>`. `--against DIR` times the probe of another
checkout (say the commit before a change, from `git archive`, with the built helper copied in) in the
same alternating rounds: `RESULT ... probe_speedup_over_other=<x> cpu_speedup_over_other=<y>`.
`--profile FILE` additionally runs the probe once in-process under cProfile and prints the top
functions (not timed). `--workers N` sets RLHEALTH_PROBE_WORKERS for the probe (0: one process;
N >= 2: that many log-reading worker processes; default: `rlhealth.embedded` decides).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GEN_VERSION = "probe-capture-v1"
SHARED = Path(os.environ.get("RLHEALTH_SHARED_DIR") or ROOT.parent / "shared")
TRIALS_SRC = SHARED / "scenarios" / "healthy_learning" / "capture" / "trace_jobs"
END = datetime(2026, 10, 14, 16, 15, 0, tzinfo=UTC)
TICK_S = 10
ENGINE_HOST = "iris-bench-rl-q3-8b-1-abcde-0"
TRAINER_HOST = "iris-bench-rl-q3-8b-0-abcde-0"
ENGINE_IP = "10.0.2.100"
TRAINER_IP = "10.0.2.179"
ESC = "\x1b"

WORDS = ["the", "model", "request", "token", "batch", "rollout", "policy", "reward", "sample", "prompt", "response", "engine", "worker", "step", "update", "sync", "gradient", "optimizer", "cache", "queue", "trajectory", "advantage", "generator", "buffer", "group"]
BLOCKS = "▏▎▍▌▋▊▉█"


def _ray(actor: str, pid: int, ip: str) -> str:
    return f"{ESC}[36m({actor} pid={pid}, ip={ip}){ESC}[0m "


class DenseGen:
    """The dense mix: about 70% of lines match a metric or progress rule (real line formats)."""

    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)
        self.engine_pids = [20531 + 97 * i for i in range(16)]
        self.step = 0
        self.iteration = 0

    def engine_tick(self, t: datetime, out: list[str]) -> None:
        rnd = self.rnd
        vts = [(t + timedelta(seconds=s)).strftime("%m-%d %H:%M:%S") for s in range(TICK_S)]
        for half in (4, 9):
            for e, pid in enumerate(self.engine_pids):
                out.append(_ray("AsyncVLLMInferenceEngine", pid, ENGINE_IP)
                           + f"INFO {vts[half]} [loggers.py:271] Engine {e:03d}: Avg prompt throughput: "
                           f"{rnd.uniform(0, 9000):.1f} tokens/s, Avg generation throughput: {rnd.uniform(200, 1800):.1f} "
                           f"tokens/s, Running: {rnd.randint(1, 48)} reqs, Waiting: {rnd.randint(0, 4)} reqs, GPU KV cache "
                           f"usage: {rnd.uniform(1, 90):.1f}%, Prefix cache hit rate: {rnd.uniform(10, 90):.1f}%")
        st = (t + timedelta(seconds=3)).strftime("%Y-%m-%d %H:%M:%S")
        for tp in range(8):
            out.append(f"[{st} TP{tp}] Decode batch. #running-req: {rnd.randint(1, 64)}, #token: {rnd.randint(100, 90000)}, "
                       f"token usage: {rnd.uniform(0, 0.95):.2f}, gen throughput (token/s): {rnd.uniform(100, 3000):.2f}, "
                       f"#queue-req: {rnd.randint(0, 9)}")
        for _ in range(14):
            pid = rnd.choice(self.engine_pids)
            out.append(_ray("AsyncVLLMInferenceEngine", pid, ENGINE_IP)
                       + f"DEBUG {rnd.choice(vts)} [async_llm.py:312] Added request "
                       f"chatcmpl-{rnd.getrandbits(64):016x}-{rnd.getrandbits(32):08x}.")
        for _ in range(6):
            out.append(_ray("AsyncVLLMInferenceEngine", rnd.choice(self.engine_pids), ENGINE_IP)
                       + f"INFO:     127.0.0.1:{rnd.randint(30000, 65000)} - \"POST /v1/chat/completions HTTP/1.1\" 200 OK")

    def trainer_tick(self, t: datetime, out: list[str]) -> None:
        rnd = self.rnd
        lts = [(t + timedelta(seconds=s)).strftime("%Y-%m-%d %H:%M:%S") for s in range(TICK_S)]
        for k in range(3):
            self.step += 1
            out.append(f"(TaskRunner pid=23871) step:{self.step} - global_seqlen/min:{rnd.randint(300000, 400000)} - "
                       f"actor/pg_loss:{rnd.uniform(-0.01, 0.01):.4f} - actor/entropy:{rnd.uniform(0.2, 1.2):.4f} - "
                       f"actor/grad_norm:{rnd.uniform(0.1, 2):.4f} - critic/score/mean:{rnd.uniform(0, 1):.4f} - "
                       f"timing_s/gen:{rnd.uniform(20, 90):.2f} - timing_s/update_actor:{rnd.uniform(5, 30):.2f} - "
                       f"training/global_step:{self.step}")
            out.append(f"{{'loss': {rnd.uniform(0.1, 2):.4f}, 'grad_norm': {rnd.uniform(0.1, 3):.4f}, "
                       f"'learning_rate': {rnd.uniform(1e-7, 1e-5):.3e}, 'epoch': {self.step / 1000:.3f}}}")
            self.iteration += 1
            out.append(f" [{lts[3 * k]}] iteration {self.iteration:8d}/  100000 | consumed samples: {64 * self.iteration:12d} | "
                       f"elapsed time per iteration (ms): {rnd.uniform(5000, 9000):.1f} | learning rate: 6.680E-06 | "
                       f"global batch size:    64 | lm loss: {rnd.uniform(0.5, 2):.6E} | loss scale: 1.0 | "
                       f"grad norm: {rnd.uniform(0.3, 1.5):.3f} | number of skipped iterations:   0 |")
        for _ in range(6):
            done = rnd.randint(1, 199)
            out.append(_ray("skyrl_entrypoint", 7760, TRAINER_IP)
                       + f"Training Step Progress: {done * 100 // 200:3d}%|{BLOCKS[-1] * (done // 20)}{' ' * (10 - done // 20)}| "
                       f"{done}/200 [1:02:11<28:33:10, {rnd.uniform(100, 600):.2f}s/it]")
        for _ in range(8):
            out.append(f"{rnd.choice(lts)},{rnd.randint(0, 999):03d}\tDEBUG worker.py:{rnd.randint(1, 3000)} -- "
                       f"sent {rnd.randint(1, 64)} prompts to engine {rnd.randint(0, 15)}")


class Gen:
    """Pools of line bodies (built once) + per-line timestamps; deterministic for a seed."""

    def __init__(self, seed: int) -> None:
        self.rnd = rnd = random.Random(seed)
        self.engine_pids = [20531 + 1000 * i for i in range(4)]

        def sentence(k: int) -> str:
            return " ".join(rnd.choice(WORDS) for _ in range(k))

        self.sentences = [sentence(rnd.randint(5, 22)) for _ in range(4096)]
        self.access = [
            _ray("AsyncVLLMInferenceEngine", rnd.choice(self.engine_pids), ENGINE_IP)
            + f"INFO:     127.0.0.1:{rnd.randint(30000, 65000)} - \"POST /v1/chat/completions HTTP/1.1\" "
            + rnd.choice(("200 OK", "200 OK", "200 OK", "200 OK", "200 OK", "400 Bad Request"))
            for _ in range(4096)
        ]
        self.nccl = [
            _ray("FSDPPolicyWorkerBase", 6289 + rnd.randint(0, 7) * 558, TRAINER_IP)
            + f"{TRAINER_HOST}:{rnd.randint(6000, 7000)}:{rnd.randint(6800, 7600)} [{rnd.randint(0, 7)}] NCCL INFO "
            + f"{rnd.choice(('AllReduce', 'Broadcast', 'AllGather', 'ReduceScatter'))}: opCount {rnd.randint(0, 0xfff):x} "
            + f"sendbuff 0x7f{rnd.getrandbits(36):09x} recvbuff 0x7f{rnd.getrandbits(36):09x} count {rnd.randint(1, 9999999)} "
            + f"datatype {rnd.randint(0, 9)} op 0 root 0 comm 0x55d1c8a3e2f0 [nranks=8] stream 0x55d1c8b01230"
            for _ in range(4096)
        ]
        bars = []
        for _ in range(1024):
            desc = rnd.choice(("Generation Buffer Progress", "Processed prompts", "Adding requests"))
            total = 512
            parts = []
            done = rnd.randint(0, 400)
            for _ in range(rnd.randint(2, 5)):
                done = min(total, done + rnd.randint(1, 60))
                pct = done * 100 // total
                bar = BLOCKS[-1] * (pct // 10) + rnd.choice(BLOCKS) + " " * (9 - pct // 10)
                parts.append(f"{desc}: {pct:3d}%|{bar}| {done}/{total} [00:{rnd.randint(10, 59)}<00:"
                             f"{rnd.randint(10, 59)}, {rnd.uniform(1, 40):.2f}it/s]")
            bars.append(_ray("skyrl_entrypoint", 7760, TRAINER_IP) + "\r" + "\r".join(parts))
        self.bars = bars
        self.modules = [("skyrl_train.generators.base", "generate"), ("skyrl_train.fully_async_trainer", "_run_generation"),
                        ("skyrl_train.inference_engines.utils", "route"), ("harbor.trial", "run_trial")]

    # -- per tick -------------------------------------------------------------------------
    def engine_tick(self, t: datetime, out: list[str]) -> None:
        rnd = self.rnd
        vts = [(t + timedelta(seconds=s)).strftime("%m-%d %H:%M:%S") for s in range(TICK_S)]
        for _ in range(95):
            out.append(rnd.choice(self.access))
        for _ in range(45):
            pid = rnd.choice(self.engine_pids)
            out.append(_ray("AsyncVLLMInferenceEngine", pid, ENGINE_IP)
                       + f"INFO {rnd.choice(vts)} [async_llm.py:{rnd.choice((270, 312, 421))}] Added request "
                       f"chatcmpl-{rnd.getrandbits(64):016x}-{rnd.getrandbits(32):08x}.")
        for e, pid in enumerate(self.engine_pids):
            out.append(_ray("AsyncVLLMInferenceEngine", pid, ENGINE_IP)
                       + f"INFO {vts[-1]} [loggers.py:271] Engine {e:03d}: Avg prompt throughput: "
                       f"{rnd.uniform(0, 9000):.1f} tokens/s, Avg generation throughput: {rnd.uniform(200, 1800):.1f} tokens/s, "
                       f"Running: {rnd.randint(1, 48)} reqs, Waiting: {rnd.randint(0, 4)} reqs, GPU KV cache usage: "
                       f"{rnd.uniform(1, 90):.1f}%, Prefix cache hit rate: {rnd.uniform(10, 90):.1f}%")

    def trainer_tick(self, t: datetime, out: list[str]) -> None:
        rnd = self.rnd
        lts = [(t + timedelta(seconds=s)).strftime("%Y-%m-%d %H:%M:%S") for s in range(TICK_S)]
        for _ in range(40):
            mod, fn = rnd.choice(self.modules)
            out.append(_ray("skyrl_entrypoint", 7760, TRAINER_IP)
                       + f"{ESC}[32m{rnd.choice(lts)}.{rnd.randint(0, 999):03d}{ESC}[0m | {ESC}[1mINFO    {ESC}[0m | "
                       f"{ESC}[36m{mod}{ESC}[0m:{ESC}[36m{fn}{ESC}[0m:{ESC}[36m{rnd.randint(1, 900)}{ESC}[0m - "
                       f"{ESC}[1m{rnd.choice(self.sentences)}{ESC}[0m")
        for _ in range(12):
            out.append(f"{rnd.choice(lts)},{rnd.randint(0, 999):03d}\tINFO {rnd.choice(('worker.py', 'trainer.py'))}:"
                       f"{rnd.randint(1, 3000)} -- {rnd.choice(self.sentences)}")
        for _ in range(8):
            out.append(rnd.choice(self.bars))
        for _ in range(70):
            out.append(rnd.choice(self.nccl))
        out.append(f"{lts[-1]},000\tINFO worker.py:1694 -- heartbeat ok")


def _estimate_tick_bytes(gen: type = None) -> float:  # type: ignore[assignment]
    g = (gen or Gen)(99)
    out: list[str] = []
    t = END
    for _ in range(40):
        g.engine_tick(t, out)
        g.trainer_tick(t, out)
    return sum(len(s.encode()) + 1 for s in out) / 40


def build_capture(cap: Path, size_mb: int, seed: int = 7, corpus: str = "sparse") -> None:
    marker = cap / ".complete"
    want = f"{GEN_VERSION} size_mb={size_mb} seed={seed}" + (f" corpus={corpus}" if corpus != "sparse" else "")
    gen_cls = DenseGen if corpus == "dense" else Gen
    if marker.exists() and marker.read_text() == want:
        return
    if cap.exists():
        shutil.rmtree(cap)
    (cap / "logs").mkdir(parents=True)
    t0 = time.perf_counter()
    ticks = max(10, int(size_mb * 1e6 / _estimate_tick_bytes(gen_cls)))
    start = END - timedelta(seconds=ticks * TICK_S)
    g = gen_cls(seed)
    job_id = "bench-probe-q3-8b"
    tb_tick = int(ticks * 0.55)
    wd_tick = int(ticks * 0.8)
    step = 0
    with open(cap / "logs" / "pod_rank1.log", "w", encoding="utf-8", newline="\n") as f1, \
            open(cap / "logs" / "pod_rank0.log", "w", encoding="utf-8", newline="\n") as f0:
        f0.write("+ env | grep -E '^(SKYRL|VLLM|NCCL|WANDB|HF)_' | sort\n"
                 "HF_TOKEN=hf_82013224c91143fd83fa4ae7a45ed81761\n"
                 "WANDB_API_KEY=wandb_v1_30d4e58e353e56710496a7f23167fe3b27a951e5\n")
        f1.write("export DAYTONA_API_KEY=dtn_0123456789abcdef0123456789abcdef\n")
        for k in range(ticks):
            t = start + timedelta(seconds=k * TICK_S)
            e: list[str] = []
            tr: list[str] = []
            g.engine_tick(t, e)
            g.trainer_tick(t, tr)
            lt = (t + timedelta(seconds=9)).strftime("%Y-%m-%d %H:%M:%S")
            pre = _ray("skyrl_entrypoint", 7760, TRAINER_IP) + f"{ESC}[32m{lt}.500{ESC}[0m | {ESC}[1mINFO    {ESC}[0m | " \
                f"{ESC}[36mskyrl_train.fully_async_trainer{ESC}[0m:{ESC}[36m_train_loop{ESC}[0m:{ESC}[36m658{ESC}[0m - "
            if k % 120 == 0:
                if k:
                    tr.append(pre + f"{ESC}[1mFinished: 'step', time cost: {1190 + g.rnd.uniform(0, 20):.2f}s{ESC}[0m")
                    step += 1
                    tr.append(pre + f"{ESC}[1mStep {step}: effective_batch=64 samples (8/8 groups), discard_rate=0.0%{ESC}[0m")
                tr.append(pre + f"{ESC}[1mStarted: 'step'{ESC}[0m")
            if k == tb_tick:
                tr += [f"{lt},100\tERROR trainer.py:412 -- reward worker failed, retrying",
                       "Traceback (most recent call last):",
                       '  File "/app/skyrl-train/skyrl_train/generators/base.py", line 88, in generate',
                       "    out = self._call(batch)",
                       '  File "/app/skyrl-train/skyrl_train/generators/base.py", line 131, in _call',
                       "    raise RuntimeError(\"reward server returned 503\")",
                       "RuntimeError: reward server returned 503"]
            if k == wd_tick:
                ct = (t + timedelta(seconds=9)).strftime("%m%d %H:%M:%S")
                tr.append(f"[rank0]:[E{ct}.968558948 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective "
                          "operation timeout: WorkNCCL(SeqNum=2635, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                          "Timeout(ms)=1800000) ran for 1800031 milliseconds before timing out.")
            f1.write("\n".join(e))
            f1.write("\n")
            f0.write("\n".join(tr))
            f0.write("\n")
    # small sources
    (cap / "capture.json").write_text(json.dumps({"job_id": job_id, "cluster": "bench", "scheduler": "kubernetes",
                                                  "captured_at": (END + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")}))
    job = {"job_id": job_id,
           "model": {"name": "Qwen3-8B", "params_b": 8.2, "active_params_b": 8.2, "moe": False, "dtype": "bfloat16"},
           "hardware": {"gpu": "H100-80GB-SXM", "gpus_per_node": 8, "nodes": 2},
           "geometry": {"num_inference_engines": 4, "engine_tp": 2, "engine_ep": 1, "colocated": False,
                        "engine_pods": [ENGINE_HOST], "policy_pods": [TRAINER_HOST]},
           "rollout": {"n_concurrent_trials": 48, "n_samples_per_prompt": 8, "expected_episode_s": 900},
           "max_retries": 1, "enforce_eager": False, "expected_step_s": 1200}
    (cap / "job.json").write_text(json.dumps(job, indent=2))
    with open(cap / "state.jsonl", "w") as f:
        t = start
        while t <= END:
            f.write(json.dumps({"ts": t.strftime("%Y-%m-%dT%H:%M:%SZ"), "state": "running", "pods": 2, "failure_count": 0,
                                "preemption_count": 0, "attempt": 0, "max_retries": 1, "attempts": []}) + "\n")
            t += timedelta(seconds=300)
    (cap / "gpu").mkdir()
    rnd = random.Random(seed + 1)
    for h, host in enumerate((TRAINER_HOST, ENGINE_HOST)):
        with open(cap / "gpu" / f"{host}.csv", "w") as f:
            f.write("timestamp, index, uuid, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W]\n")
            t = start
            while t <= END:
                ts = t.strftime("%Y/%m/%d %H:%M:%S")
                for i in range(8):
                    f.write(f"{ts}.{850 + i:03d}, {i}, GPU-{h:02d}{i:06d}-652e-b6fa-7cd6-2de963a8cc7d, "
                            f"{rnd.randint(60, 100)} %, {rnd.randint(60000, 78000)} MiB, 81559 MiB, {rnd.uniform(300, 690):.2f} W\n")
                t += timedelta(seconds=300)
    tj = cap / "trace_jobs"
    tj.mkdir()
    if TRIALS_SRC.is_dir():
        for d in sorted(TRIALS_SRC.iterdir())[:5]:
            if d.is_dir():
                shutil.copytree(d, tj / d.name)
    size = sum(p.stat().st_size for p in (cap / "logs").iterdir())
    print(f"built {cap}: {ticks} ticks of {TICK_S}s, logs {size / 1e6:.1f} MB in {time.perf_counter() - t0:.1f}s",
          flush=True)
    marker.write_text(want)


def export_patterns(path: Path) -> int:
    from rlhealth.agents.signatures import to_ere
    from rlhealth.rules.loader import load_rules

    rules = load_rules(use_env=False)
    eres = [to_ere(r.pattern) for r in rules.rules]
    path.write_text("\n".join(eres) + "\n")
    return len(eres)


_CPU: dict[str, list[float]] = {}  # CPU seconds (user + system) of each timed subprocess, by name


def run_probe(cap: Path, root: Path = ROOT, name: str = "probe") -> tuple[float, int, int, str]:
    """(wall s, peak RSS bytes, exit code, verdict) of one `rlhealth probe` subprocess of the
    checkout at `root`."""
    cmd = [sys.executable, "-m", "rlhealth", "probe", str(cap), "--format", "json", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=str(root), env=env)
    chunks = []
    assert p.stdout is not None
    for chunk in iter(lambda: p.stdout.read(65536), b""):  # type: ignore[union-attr]
        chunks.append(chunk)
    _pid, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    _CPU.setdefault(name, []).append(ru.ru_utime + ru.ru_stime)
    p.returncode = os.waitstatus_to_exitcode(status)
    verdict = "?"
    try:
        verdict = json.loads(b"".join(chunks)).get("verdict", "?")
    except ValueError:
        pass
    return wall, ru.ru_maxrss * 1024, p.returncode, verdict


def warm_bytecode(root: Path) -> None:
    """Write `root`'s rlhealth bytecode (__pycache__) before timing: an installed package has it, but a
    checkout run with PYTHONDONTWRITEBYTECODE=1 (this machine's environment) compiled its ~60 modules
    from source in every timed probe (~0.7 G of the ~2.7 G instructions of a start-up). py_compile
    writes whatever that variable says; the probe still reads what is there."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "rlhealth")], check=True,
                   stdout=subprocess.DEVNULL)


def run_grep(patterns: Path, logs: list[Path]) -> tuple[float, int]:
    t = time.perf_counter()
    before = os.times()
    p = subprocess.run(["grep", "-E", "-c", "-f", str(patterns), *map(str, logs)], stdout=subprocess.PIPE,
                       env={"LC_ALL": "C", "PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    wall = time.perf_counter() - t
    after = os.times()
    _CPU.setdefault("grep", []).append(after.children_user - before.children_user
                                       + after.children_system - before.children_system)
    n = sum(int(x.rsplit(b":", 1)[-1]) for x in p.stdout.split() if x)
    return wall, n


def profile(cap: Path, out: Path) -> None:
    import cProfile
    import pstats

    from rlhealth.embedded import probe
    from rlhealth.runtime import build_core

    core = build_core(())
    pr = cProfile.Profile()
    pr.enable()
    res = probe(cap, core)
    pr.disable()
    pr.dump_stats(str(out))
    print(f"profile: verdict={res.verdict.verdict} events={res.events} seconds={res.seconds:.1f} -> {out}")
    st = pstats.Stats(str(out))
    st.sort_stats("tottime").print_stats(25)
    st.sort_stats("cumulative").print_stats(30)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=None, help="MB of logs (default 1024 sparse, 200 dense)")
    ap.add_argument("--corpus", choices=("sparse", "dense"), default="sparse",
                    help="sparse: ~1.5%% of lines match a rule; dense: ~70%% (metric and progress lines)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out"))
    ap.add_argument("--regen", action="store_true")
    ap.add_argument("--skip-grep", action="store_true")
    ap.add_argument("--profile", metavar="FILE")
    ap.add_argument("--against", metavar="CHECKOUT",
                    help="also time the probe of another checkout (e.g. the previous commit: `git archive C | "
                         "tar -x -C DIR`, built helper copied in) in the same alternating rounds")
    ap.add_argument("--workers", type=int, default=None,
                    help="RLHEALTH_PROBE_WORKERS for the probe (0 = one process; default: automatic)")
    args = ap.parse_args()
    if args.workers is not None:
        os.environ["RLHEALTH_PROBE_WORKERS"] = str(args.workers)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.size_mb is None:
        args.size_mb = 200 if args.corpus == "dense" else 1024
    cap = out / (f"probe_{args.size_mb}mb" + ("_dense" if args.corpus == "dense" else ""))
    if args.regen and cap.exists():
        shutil.rmtree(cap)
    build_capture(cap, args.size_mb, corpus=args.corpus)
    logs = sorted((cap / "logs").rglob("*.log"))
    size = sum(p.stat().st_size for p in logs)
    n_lines = 0
    for p in logs:
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                n_lines += block.count(b"\n")
    patterns = out / "patterns.txt"
    n_pat = export_patterns(patterns)
    print(f"capture={cap} log_files={len(logs)} log_MB={size / 1e6:.1f} lines={n_lines:,} patterns={n_pat}")
    print(f"machine: nproc={os.cpu_count()} loadavg={' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"RLHEALTH_PROBE_WORKERS={os.environ.get('RLHEALTH_PROBE_WORKERS', '(auto)')}")
    if args.profile:
        profile(cap, Path(args.profile))
        return 0

    # warm-up (page cache, pyc)
    warm_bytecode(ROOT)
    if args.against:
        warm_bytecode(Path(args.against).resolve())
    run_grep(patterns, logs)
    _CPU.clear()
    times: dict[str, list[float]] = {"probe": [], "grep": [], "other": []}
    rss: list[int] = []
    verdicts: set[str] = set()
    grep_lines = 0
    names = ["probe", "grep"] + (["other"] if args.against else [])
    for rnd in range(args.rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for name in order:
            if name in ("probe", "other"):
                root = ROOT if name == "probe" else Path(args.against).resolve()
                wall, peak, rc, verdict = run_probe(cap, root, name)
                if rc not in (0, 10):
                    print(f"{name} failed rc={rc}")
                    return 1
                times[name].append(wall)
                if name == "probe":
                    rss.append(peak)
                    verdicts.add(f"{verdict}(rc={rc})")
                print(f"  round {rnd} {name:5} wall_s={wall:.2f} cpu_s={_CPU[name][-1]:.2f} "
                      f"peak_rss_MB={peak / 2**20:.0f} verdict={verdict}", flush=True)
            elif not args.skip_grep:
                wall, grep_lines = run_grep(patterns, logs)
                times["grep"].append(wall)
                print(f"  round {rnd} grep  wall_s={wall:.2f} cpu_s={_CPU['grep'][-1]:.2f} "
                      f"matching_lines={grep_lines:,}", flush=True)
    mp = statistics.median(times["probe"])
    print(f"probe median_s={mp:.2f} min_s={min(times['probe']):.2f} max_s={max(times['probe']):.2f} "
          f"MB_per_s={size / 1e6 / mp:.0f} lines_per_s={n_lines / mp:,.0f} peak_rss_MB={max(rss) / 2**20:.0f} "
          f"verdicts={sorted(verdicts)}")
    print(f"machine after: loadavg={' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.skip_grep:
        return 0
    mg = statistics.median(times["grep"])
    print(f"grep  median_s={mg:.2f} min_s={min(times['grep']):.2f} max_s={max(times['grep']):.2f} "
          f"MB_per_s={size / 1e6 / mg:.0f} matching_lines={grep_lines:,}")
    print(f"peak_rss_MB={max(rss) / 2**20:.0f} (limit 1024)")
    cpu = {k: statistics.median(v) for k, v in _CPU.items()}
    print(f"cpu medians: probe={cpu['probe']:.2f}s grep={cpu['grep']:.2f}s"
          + (f" other={cpu['other']:.2f}s" if "other" in cpu else ""))
    if args.against:
        mo = statistics.median(times["other"])
        print(f"RESULT other_probe_time_over_grep={mo / mg:.2f} probe_speedup_over_other={mo / mp:.2f} "
              f"cpu_speedup_over_other={cpu['other'] / cpu['probe']:.2f} other={args.against}")
    print(f"RESULT probe_time_over_grep={mp / mg:.2f} probe_cpu_over_grep_cpu={cpu['probe'] / cpu['grep']:.2f} "
          f"corpus={args.corpus} workers={os.environ.get('RLHEALTH_PROBE_WORKERS', 'auto')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
