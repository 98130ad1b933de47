#!/usr/bin/env python3
"""Writes tests/scenarios/<name>/ captures built around REAL log lines (deterministic; rerun to regenerate).

    python tests/scenarios/make_real_scenarios.py            # all
    python tests/scenarios/make_real_scenarios.py NAME ...   # some

The real lines live in tests/scenarios/real_excerpts/*.txt, copied verbatim from public GitHub issue threads
(provenance table: real_excerpts/README.md). This script only re-times them (the timestamp text of a line is
replaced by the capture's clock; the message after it is untouched) and, where a scenario's expected.json
`sources` says so, renames hosts / job ids / pids. Everything around them (state polls, job.json, GPU polls,
progress lines, trials) is reconstructed in the formats the real programs print, as in make_scenarios.py.

expected.json carries the verdict the seed's rules require (not what the probe happens to say today), plus
`sources` and, where the seed asks for it, `escalate` and `next_steps_must_not_match`.
"""

from __future__ import annotations

import re
import sys
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _lib import (
    SACCT_HEADER,
    Capture,
    Log,
    TrialSpec,
    dt,
    gpu_csv,
    gpu_series,
    gpu_uuids,
    h100_nodes,
    loguru,
    md,
    model_info,
    pytest_stdout,
    ray_pfx,
    ray_py,
    rollout_info,
    run_builders,
    v0_stats,
    v1_stats,
    vllm_033,
    vllm_v0,
    write_trial,
)
from _tasks import EASY, coherent_turns
from make_scenarios import generator_group_lines, skyrl_async_step, skyrl_zero_reward_steps

ROOT = Path(__file__).resolve().parent
EXCERPTS = ROOT / "real_excerpts"


def S(x: float) -> timedelta:
    return timedelta(seconds=x)


def M(x: float) -> timedelta:
    return timedelta(minutes=x)


# ============================================================== real excerpts + re-timing


def excerpt(name: str) -> list[str]:
    """The lines of one verbatim excerpt file (no trailing newline handling beyond the final one)."""
    text = (EXCERPTS / f"{name}.txt").read_text(encoding="utf-8")
    return text[:-1].split("\n") if text.endswith("\n") else text.split("\n")


_VLLM_TS = re.compile(r"\b\d\d-\d\d \d\d:\d\d:\d\d\b")
_TORCH_TS = re.compile(r"\[([EWFI])\d{3,4} \d\d:\d\d:\d\d\.(\d+)")
_SGL_TS = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
_CTIME = re.compile(r"^\[\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\]")
_UPTIME = re.compile(r"^\[\s*(\d+\.\d+)\]")


def retime_vllm(line: str, t: datetime) -> str:
    """vLLM's 'MM-DD HH:MM:SS' (first occurrence) -> t."""
    return _VLLM_TS.sub(md(t), line, count=1)


def retime_torch(line: str, t: datetime) -> str:
    """c10 log prefix '[E513 12:38:14.493976596' (month not zero-padded) -> t; the sub-second digits are kept."""
    return _TORCH_TS.sub(lambda m: f"[{m.group(1)}{t.month}{t:%d %H:%M:%S}.{m.group(2)}", line, count=1)


def retime_sglang(line: str, t: datetime) -> str:
    return _SGL_TS.sub("[" + t.strftime("%Y-%m-%d %H:%M:%S"), line, count=1)


def retime_ctime(line: str, t: datetime) -> str:
    return _CTIME.sub(t.strftime("[%a %b %d %H:%M:%S %Y]"), line, count=1)


def add_burst(log: Log, lines: list[str], t: datetime, retime, *, spacing: float, stamp: datetime | None = None):
    """A verbatim multi-line block (traceback, warning burst) written from t on, one line every `spacing` s so it
    keeps its order; each line's own timestamp text is re-timed to `stamp` (default t): the process printed it at once."""
    for k, ln in enumerate(lines):
        log.add(t + S(k * spacing), retime(ln, stamp or t))


def retime_uptime(lines: list[str], boot: datetime, t_first: datetime) -> list[tuple[datetime, str]]:
    """dmesg '[74889.644138]' lines: keep their relative spacing, move the first to t_first (boot = uptime 0)."""
    first = float(_UPTIME.match(lines[0]).group(1))
    out = []
    for ln in lines:
        m = _UPTIME.match(ln)
        u = float(m.group(1))
        new_u = (t_first - boot).total_seconds() + (u - first)
        out.append((t_first + S(u - first), f"[{new_u:12.6f}]" + ln[m.end():]))
    return out


# ============================================================== reconstructed progress formats


def verl_step_line(step: int, rng, *, score: float, grad: str | None = None, pg: str | None = None,
                   step_s: float = 420.0) -> str:
    """A verl trainer metrics line (same key layout as the verl#721 / #498 pastes; values invented)."""
    smin = 15000 + rng.randint(0, 3000)
    smax = smin + 2500 + rng.randint(0, 2500)
    g = grad if grad is not None else f"{0.12 + rng.random() * 0.2:.3f}"
    p = pg if pg is not None else f"{rng.uniform(-0.02, 0.02):.3f}"
    gen = step_s * (0.45 + rng.random() * 0.05)
    upd = step_s * (0.30 + rng.random() * 0.04)
    return (f"step:{step} - global_seqlen/min:{smin}.000 - global_seqlen/max:{smax}.000 - "
            f"global_seqlen/minmax_diff:{smax - smin}.000 - global_seqlen/mean:{(smin + smax) / 2:.3f} - "
            f"actor/kl_loss:0.00{rng.randint(1, 9)} - actor/kl_coef:0.001 - actor/entropy_loss:{0.3 + rng.random() * 0.2:.3f} - "
            f"actor/pg_loss:{p} - actor/pg_clipfrac:0.00{rng.randint(1, 6)} - actor/ppo_kl:0.000 - actor/grad_norm:{g} - "
            f"perf/mfu/actor:0.0{rng.randint(38, 52)} - perf/max_memory_allocated_gb:{27 + rng.random() * 2:.3f} - "
            f"perf/max_memory_reserved_gb:{29 + rng.random() * 2:.3f} - actor/lr:0.000 - training/global_step:{step} - "
            f"critic/score/mean:{score:.3f} - critic/score/max:1.000 - critic/score/min:0.000 - "
            f"critic/rewards/mean:{score:.3f} - response_length/mean:{900 + rng.random() * 300:.3f} - "
            f"response_length/clip_ratio:0.0{rng.randint(0, 3)}0 - timing_s/gen:{gen:.3f} - "
            f"timing_s/old_log_prob:{step_s * 0.08:.3f} - timing_s/update_actor:{upd:.3f} - timing_s/step:{step_s:.3f}")


def vllm011_stats(log: Log, start: datetime, end: datetime, rng, *, pid: int = 1, every: float = 10.0,
                  gen=(1800, 3600), run=(24, 48), wait=(0, 1), kv=(18, 45), prefix=(40, 70), ts_prefix: bool = False,
                  proc: str = "APIServer", pfx: str = "", prompt_frac: float | None = None):
    """vLLM 0.10/0.11 stats lines: '(APIServer pid=1) INFO MM-DD ... [loggers.py:127] Engine 000: ...'.

    proc/pfx: the same line as an engine actor's Ray-forwarded '(EngineCore_DP0 pid=N)' output;
    prompt_frac: a fixed prompt/generation ratio instead of a random one (draws one number less per line)."""
    t = start + S(rng.random() * every)
    while t <= end:
        g = rng.uniform(*gen)
        p = rng.uniform(0.2, 1.0) * g if prompt_frac is None else g * prompt_frac
        line = vllm_033(t, proc, pid, "INFO", "loggers.py:127",
                        v1_stats(p, g, rng.randint(*run), rng.randint(*wait), rng.uniform(*kv), rng.uniform(*prefix)))
        if ts_prefix:
            line = t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "402Z " + line
        log.add(t, pfx + line)
        t += S(every + rng.uniform(-0.05, 0.05))


def v0_engine_stats(log: Log, pfx: str, start: datetime, end: datetime, rng, *, file_line: str, gen, prompt_frac: float,
                    run, kv, pending=None, every: float = 10.0, jitter: float = 0.0,
                    warn: str | None = None, warn_every: int = 0, warn_at: int = 0, warn_delay: float = 0.0):
    """vLLM V0 'Avg prompt throughput ...' lines of one engine from start until end (exclusive).

    pending=None prints 'Pending: 0' without drawing a number; jitter=0 keeps the cadence exact (no draw);
    warn: a verbatim warning line re-timed warn_delay s after every warn_every-th stats line (index warn_at)."""
    t, k = start, 0
    while t < end:
        g = rng.uniform(*gen)
        log.add(t, pfx + vllm_v0(t, "INFO", file_line, v0_stats(g * prompt_frac, g, rng.randint(*run), 0,
                                                                 rng.randint(*pending) if pending else 0,
                                                                 rng.uniform(*kv))))
        if warn is not None and k % warn_every == warn_at:
            tw = t + S(warn_delay)
            log.add(tw, pfx + retime_vllm(warn, tw))
        t += S(every + rng.uniform(-jitter, jitter)) if jitter else S(every)
        k += 1


def sglang_decode_lines(log: Log, start: datetime, end: datetime, rng, *, every: float = 8.0, tp: str = "TP0"):
    """SGLang scheduler 'Decode batch.' lines (format of sglang 0.4.x; values invented)."""
    t = start + S(rng.random() * every)
    while t <= end:
        r = rng.randint(40, 96)
        tok = r * rng.randint(900, 1800)
        log.add(t, f"[{t:%Y-%m-%d %H:%M:%S} {tp}] Decode batch. #running-req: {r}, #token: {tok}, "
                   f"token usage: {tok / 420000:.2f}, cuda graph: True, gen throughput (token/s): {rng.uniform(1900, 3400):.2f}, "
                   f"#queue-req: {rng.randint(0, 2)}")
        t += S(every + rng.uniform(-0.4, 0.4))


def skyrl_run(log: Log, pfx: str, t0: datetime, step0: int, rng, *, until: datetime, step_s: float,
              total: int = 300, stop_after: str | None = None, freeze_from: datetime | None = None,
              reward=(0.25, 0.45)) -> tuple[int, datetime]:
    """SkyRL fully-async steps from t0 until `until`; the first step starting after freeze_from stops at stop_after."""
    t, step = t0, step0
    while t < until:
        freeze = freeze_from is not None and t >= freeze_from
        te = skyrl_async_step(log, pfx, t, step, buf_s=step_s * 0.35 * (0.9 + 0.2 * rng.random()),
                              fwd_s=step_s * 0.12, train_s=step_s * 0.4 * (0.9 + 0.2 * rng.random()),
                              sync_s=12 + rng.random() * 5, reward=round(rng.uniform(*reward), 6),
                              pass_at=round(rng.uniform(0.5, 0.8), 6), total_steps=total,
                              stop_after=stop_after if freeze else None)
        if te is None:
            return step, t
        t, step = te, step + 1
    return step, t


def skyrl_trainer(rng, now: datetime, pid: int, ip: str, start: datetime, step0: int, step_s: float, *,
                  rollout_dead: datetime | None = None, freeze_lead_min: float = 5) -> Log:
    """The SkyRL trainer half of pod_rank0.log.

    Healthy (rollout_dead=None): steps up to 2 s before capture. Otherwise the first step starting
    freeze_lead_min before the rollout side died waits in wait_for_generation_buffer for good."""
    log = Log()
    P = ray_pfx("skyrl_entrypoint", pid, ip)
    if rollout_dead is None:
        skyrl_run(log, P, start, step0, rng, until=now, step_s=step_s)
        log.items = [it for it in log.items if it[0] <= now - S(2)]
    else:
        skyrl_run(log, P, start, step0, rng, until=now, step_s=step_s, freeze_from=rollout_dead - M(freeze_lead_min),
                  stop_after="wait_for_generation_buffer")
    return log


def coordinator_groups(log: Log, ip: str, pids: tuple[int, ...], first: datetime, every_s: float, n: int, *,
                       bad_every: int, bad_ok: int = 7, since: datetime | None = None, until: datetime | None = None):
    """n RolloutCoordinator 'Batch generation complete' groups every every_s, round-robin over the actors' pids.

    Every bad_every-th group has only bad_ok/8 successes; groups outside [since, until) are not written
    (the rollout side died at until, or the actor came back under new pids at since)."""
    RC = [ray_pfx("RolloutCoordinator", p, ip) for p in pids]
    for k in range(n):
        tg = first + S(every_s * k)
        if (since is None or tg >= since) and (until is None or tg < until):
            generator_group_lines(log, RC[k % len(RC)], tg, "x", ok=8 if k % bad_every else bad_ok)


def trials(cap: Capture, rng, now: datetime, *, n: int, job: str, model: str, api_base: str, first: datetime,
           every_s: float, p_good: float = 0.45, host: str = "5e1f0a9c2b7d"):
    for k in range(n):
        task = EASY[k % len(EASY)]
        st = first + S(every_s * k)
        done = st + M(15) < now
        good = rng.random() < p_good
        turns = coherent_turns(rng, host, task, complete=good)
        spec = TrialSpec(f"{task[0]}-{2000 + k}", task[1], turns if done else turns[:1], started=st,
                         agent_s=240 + rng.random() * 400, reward=1.0 if good else 0.0, completed=done, host=host,
                         verifier_stdout=pytest_stdout(3, [] if good else [("test_output", "AssertionError: output differs")], 0.3))
        write_trial(cap, spec, trials_dir=f"/data/experiments/{job}/trace_jobs", model=model, api_base=api_base,
                    task_root="/data/tasks/extracted_tasks")


def h100_busy(rng):
    return (88 + rng.random() * 12, 70000 + rng.random() * 6000, 540 + rng.random() * 140)


def h100_engine(rng):
    return (55 + rng.random() * 40, 72000 + rng.random() * 600, 330 + rng.random() * 260)


def busy_until(rng, t_stop: datetime, mem: float, mem_jitter: float, watts: float, watts_jitter: float):
    """GPU fn of a trainer that computed until t_stop and since waits: 0 %, memory resident, near-idle power."""
    return lambda tp, g: h100_busy(rng) if tp < t_stop else (0, mem + rng.random() * mem_jitter,
                                                            watts + rng.random() * watts_jitter)


def healthy_pod_gpus(cap: Capture, rng, now: datetime, trainer: str, engines: list[str]):
    """gpu/<pod>.csv for a healthy disaggregated job: the trainer's 8 GPUs busy, every engine pod generating."""
    for p in [trainer, *engines]:
        uu = gpu_uuids(rng, 8)
        fn = (lambda tp, g: h100_busy(rng)) if p == trainer else (lambda tp, g: h100_engine(rng))
        cap.gpu_polls(p, uu, now - M(40), now - S(25), 120, fn, 81559)


# ============================================================== 1. tail-only NCCL heartbeat hang


def build_tail_only_nccl_hang(root: Path):
    cap = Capture(root, "tail_only_nccl_hang", 2101)
    rng = cap.rng
    now = dt("2026-10-14T09:40:00")
    job = "rl-q3-8b-grpo-mathtool"
    pol, eng = f"{job}-0-7kq2x-0", f"{job}-1-7kq2x-0"
    cap.k8s_running(job, "coreweave", now, now - M(70), now - S(25), pods=2)
    cap.job_json(job, model_info("Qwen3-8B", 8.2), h100_nodes(2),
                 {"num_inference_engines": 4, "engine_tp": 2, "engine_ep": 1, "colocated": False,
                  "policy_pods": [pol], "engine_pods": [eng]},
                 rollout=rollout_info(64, 600), expected_step_s=600, max_retries=1, enforce_eager=False,
                 new="first GRPO run with FSDP2 + TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=480")
    # the policy pod's log as captured: `kubectl logs --tail=...` caught only the failing tail
    trio = excerpt("warpem-miss-alignment-105_nccl_watchdog_trio")
    term_tail = excerpt("NVIDIA-Fuser-3055_nccl_terminating")[0].split("Terminating th", 1)[1]
    t_e = now - M(31) - S(14)
    t_f = t_e + M(8)  # the heartbeat monitor aborts 480 s after it noticed the stuck watchdog
    tail = Log()
    tail.add(t_e, retime_torch(trio[0], t_e))
    tail.add(t_e + S(0.0004), retime_torch(trio[1], t_e))
    tail.add(t_f, retime_torch(trio[2] + term_tail, t_f))
    tail.add(t_f + S(2), excerpt("verl-2189_raylet_worker_died")[0])
    cap.write_text("logs/pod_rank0.log", tail.render())

    uu_p, uu_e = gpu_uuids(rng, 8), gpu_uuids(rng, 8)
    hang = t_e - S(480)

    def pol_gpu(tp, g):
        if tp < hang:
            return h100_busy(rng)
        if tp >= t_f and g == 1:  # rank 1 aborted: its memory is gone
            return (0, 0, 69 + rng.random() * 3)
        return (0, 61200 + rng.random() * 80, 71 + rng.random() * 5)  # resident, not computing

    def eng_gpu(tp, g):
        if tp < hang + M(4):
            return h100_engine(rng)
        return (0, 71900 + rng.random() * 50, 68 + rng.random() * 4)  # weights + KV resident, no requests
    cap.gpu_polls(pol, uu_p, now - M(50), now - S(30), 120, pol_gpu, 81559)
    cap.gpu_polls(eng, uu_e, now - M(50), now - S(30), 120, eng_gpu, 81559, na_cells={(3, 5, "power")})
    cap.expect(verdict=["KILL"], status=["WEDGED"], failing=["A"], must_not_fail=["restarts"],
               evidence=["(?i)watchdog got stuck for 480 seconds",
                         "(?i)(worker died|SYSTEM_ERROR|0 ?%|idle|not computing|resident)"],
               next_steps=["(?i)(nccl|watchdog|hang|dump|flight|collective|rank)"],
               why="Gate A WEDGED (seed §2: RUNNING + a real hang signature + stale-beyond-cadence logs -> lean KILL). The state "
                   "poll reads running with 2 pods, but the only policy-pod output is the PyTorch heartbeat-monitor tail: "
                   "'ProcessGroupNCCL's watchdog got stuck for 480 seconds ...', 'preparing to dump debug info', and 8 min "
                   "later 'Terminating the process after attempting to dump debug info, due to ProcessGroupNCCL watchdog "
                   "hang.', then the raylet's 'A worker died ... SYSTEM_ERROR ... connection error code 2. End of file.' "
                   "Nothing has been written for 23 min and the tail has no step/progress line to learn a cadence from, so "
                   "the core must judge from the signatures. Two independent families agree: the NCCL heartbeat abort "
                   "(log) and the policy GPUs holding ~61 GB at 0 % util / ~70 W since the hang (rank 1's memory freed "
                   "after its abort) plus the Ray worker death; the engines idle at 0 % with weights resident. KILL; "
                   "capture the flight-recorder dump and debug the collective hang before relaunch.",
               sources=[
                   ("warpem/miss-alignment#105", "logs/pod_rank0.log lines 1-3 (the watchdog-stuck, preparing-to-dump and Terminating lines; only the glog timestamp re-timed)",
                    "timestamps; the third line's text after 'Terminating th' (the stored excerpt is cut there) is completed from NVIDIA/Fuser#3055"),
                   ("NVIDIA/Fuser#3055", "tail of logs/pod_rank0.log line 3 ('e process after attempting to dump debug info, due to ProcessGroupNCCL watchdog hang.')", "nothing else"),
                   ("verl-project/verl#2189", "logs/pod_rank0.log line 4 (raylet worker died, unchanged)", "its placement 2 s after the abort"),
                   ("-", "-", "capture.json, state.jsonl, job.json (Qwen3-8B, 2x8 H100, 4 TP2 engines), both gpu/*.csv polls"),
               ])


# ============================================================== 2. GPU fell off the bus on an engine node


def build_gpu_fallen_off_bus(root: Path):
    cap = Capture(root, "gpu_fallen_off_bus", 2102)
    rng = cap.rng
    now = dt("2026-09-03T16:05:00")
    job = "rl-q3-32b-swe-neb"
    trainer, engines = f"{job}-trainer-0", [f"{job}-vllm-0", f"{job}-vllm-1"]
    node = "gpu-h100-b17"  # host of vllm-1
    cap.k8s_running(job, "nebius", now, now - M(60), now - S(20), pods=3)
    cap.job_json(job, model_info("Qwen3-32B", 32.8), h100_nodes(3),
                 {"num_inference_engines": 2, "engine_tp": 8, "engine_ep": 1, "colocated": False,
                  "engine_pods": engines, "policy_pods": [trainer]},
                 rollout=rollout_info(48, 900), expected_step_s=900, max_retries=1, enforce_eager=False,
                 new="first run on the b17-b19 H100 nodes")
    t_x = now - M(27)  # the Xid
    # node dmesg
    boot = now - timedelta(days=3, hours=2)
    dm = retime_uptime(excerpt("gpu-burn-1_dmesg_xid79"), boot, t_x - S(104.2))
    cap.write_text(f"logs/dmesg-{node}.log", "\n".join(ln for _, ln in dm) + "\n")
    # the two engine pods
    for i, ep in enumerate(engines):
        e = Log()
        end = now - S(3) if i == 0 else t_x
        vllm011_stats(e, now - M(55), end, rng, gen=(900, 1900), run=(30, 60), kv=(30, 70))
        if i == 1:
            dead = excerpt("vllm-27405_worker_proc_died")
            t = t_x + S(1.5)
            e.add(t, retime_torch(dead[0], t))
            e.add(t + S(0.1), retime_vllm(dead[1], t + S(0.1)))
            e.add(t + S(0.1), dead[2])
            api = excerpt("club-3090-751_apiserver_enginedeaderror")
            add_burst(e, api, t + S(0.4), retime_vllm, spacing=0.001)
        cap.write_text(f"logs/{ep}.log", e.render())
    # trainer: steps until the Xid, then waiting on the generation buffer
    tl = skyrl_trainer(rng, now, 4410, "10.60.1.12", now - M(118), 21, 900, rollout_dead=t_x, freeze_lead_min=6)
    coordinator_groups(tl, "10.60.1.12", (4501, 4502), now - M(110), 480, 10, bad_every=4, until=t_x)
    cap.write_text("logs/pod_rank0.log", tl.render())
    # GPUs
    uu = {p: gpu_uuids(rng, 8) for p in (trainer, *engines)}
    cap.gpu_polls(trainer, uu[trainer], now - M(45), now - S(30), 120, busy_until(rng, t_x, 66000, 300, 112, 8), 81559)
    cap.gpu_polls(engines[0], uu[engines[0]], now - M(45), now - S(30), 120, lambda tp, g: h100_engine(rng), 81559)
    pre = gpu_series(now - M(45), t_x - S(10), 120, rng, 8, lambda tp, g: h100_engine(rng))
    txt = gpu_csv(pre, uu[engines[1]], 81559)
    lost = excerpt("dcgm-exporter-604_nvidia_smi_device_handle")[0].replace("GPU 000:BA:80.0", "GPU 00000000:02:00.0")
    t = t_x + S(60)
    while t < now:
        txt += lost + "\n"  # nvidia-smi gives up on the whole query once one GPU is gone
        t += S(120)
    cap.write_text(f"gpu/{node}.csv", txt)
    cap.expect(verdict=["KILL"], status=["WEDGED", "ALIVE"], failing=["B"], must_not_fail=["restarts"],
               evidence=["(?i)(fallen off the bus|Xid\\W{0,20}79)"],
               next_steps=["(?i)(cordon|drain)"],
               why="Gate B (seed §3: every inference engine must be alive and generating; an engine that is gone is a hard "
                   "FAIL) with a hardware root cause: node gpu-h100-b17's kernel log shows a PCIe Surprise Down then "
                   "'NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.'; seconds later engine vllm-1's "
                   "EngineCore reports 'Worker proc VllmWorker-0 died unexpectedly, shutting down executor.' and the API "
                   "server 'EngineDeadError'; nvidia-smi on that host now only prints 'Unable to determine the device handle "
                   "for GPU 00000000:02:00.0: Unknown Error'. The other engine still generates but the trainer has sat in "
                   "wait_for_generation_buffer for ~30 min. A lost GPU does not come back without a node reset: KILL, "
                   "cordon/drain the node (GPU reset / RMA) and relaunch on healthy nodes.",
               sources=[
                   ("wilicc/gpu-burn#1", "logs/dmesg-gpu-h100-b17.log (all 13 lines; message text unchanged)", "the [uptime] stamps, shifted so the Xid lands 27 min before capture"),
                   ("vllm-project/vllm#27405", "logs/rl-q3-32b-swe-neb-vllm-1.log: TCPStore warning, 'Worker proc VllmWorker-0 died unexpectedly', 'Process EngineCore_DP0:'", "timestamps"),
                   ("noonghunna/club-3090#751", "logs/rl-q3-32b-swe-neb-vllm-1.log: the three APIServer EngineDeadError lines", "timestamps"),
                   ("NVIDIA/dcgm-exporter#604", "the 'Unable to determine the device handle for GPU ...: Unknown Error' line in gpu/gpu-h100-b17.csv",
                    "PCI id changed to the dmesg GPU's (00000000:02:00.0); repeated once per failed poll"),
                   ("-", "-", "vLLM 0.11 stats lines, SkyRL trainer/generator lines, state.jsonl, job.json, other GPU polls"),
               ])


# ============================================================== 3. healthy job with three NaN metric lines


def build_healthy_nan_loss_lines(root: Path):
    cap = Capture(root, "healthy_nan_loss_lines", 2103)
    rng = cap.rng
    now = dt("2026-05-19T13:12:00")
    jid = "4418207"
    name = "grpo-q25-7b-gsm-dapo"
    start = now - M(470)
    cap.slurm_running(jid, name, "tacc-vista", now, start)
    cap.job_json(jid, model_info("Qwen2.5-7B-Instruct", 7.6), ("GH200-96GB", 1, 8),
                 {"num_inference_engines": 8, "engine_tp": 1, "colocated": True},
                 rollout=rollout_info(), expected_step_s=420, max_retries=0, new="low_var_kl + lr 2e-6 (first try)")
    out = Log()
    TR = ray_pfx("TaskRunner", 903117, color=False)
    WD = [ray_pfx("WorkerDict", 903400 + i, f"10.71.0.{11 + i}", color=False) for i in range(4)]
    nan_line = excerpt("verl-721_nan_step_line")[0]
    t = now - M(255)
    step = 36
    nan_steps = {47, 66}
    while t < now - S(30):
        gen0 = t + S(5)
        for w in WD:
            v0_engine_stats(out, w, gen0 + S(rng.random() * 4), gen0 + S(170), rng, file_line="metrics.py:455",
                            gen=(2400, 4600), prompt_frac=0.6, run=(40, 120), kv=(20, 60), jitter=0.05)
        step_s = 400 + rng.random() * 40
        te = t + S(step_s)
        if te > now - S(30):
            break
        if step == 59:
            line = nan_line
        elif step in nan_steps:
            line = verl_step_line(step, rng, score=rng.uniform(0.55, 0.7), grad="nan", pg="nan", step_s=step_s)
        else:
            line = verl_step_line(step, rng, score=rng.uniform(0.52 + step * 0.002, 0.62 + step * 0.002), step_s=step_s)
        out.add(te, TR + line)
        t = te + S(2)
        step += 1
    assert step > 70, step
    cap.write_text(f"logs/slurm-{jid}.out", out.render())
    err = Log()
    err.add(start, "+ export VLLM_USE_V1=0 HYDRA_FULL_ERROR=1")
    cap.write_text(f"logs/slurm-{jid}.err", err.render())
    for n in range(8):
        uu = gpu_uuids(rng, 1)

        def f(tp, g):
            ph = ((tp - now).total_seconds() % 420) / 420
            return (90 + rng.random() * 10, 80000 + rng.random() * 8000, 450 + rng.random() * 200) if ph > 0.1 else \
                (20 + rng.random() * 30, 60000 + rng.random() * 2000, 180 + rng.random() * 60)
        cap.gpu_polls(f"c6{n:02d}-0{n % 4 + 1}1", uu, now - M(30), now - S(20), 150, f, 97871)
    cap.expect(verdict=["NO-KILL"], status=["ALIVE"], failing=[], must_not_fail=["A", "B", "restarts"],
               escalate=True,
               evidence=["(?i)\\bnan\\b"],
               why="Healthy, progressing run with a numerical wobble the seed has no kill rule for (seed §5: 'Default to NO-KILL "
                   "+ escalate on genuine ambiguity'). sacct says RUNNING; verl steps land every ~7 min through step 7x with "
                   "finite losses and critic/score/mean rising 0.55 -> 0.70; the colocated vLLM engines keep printing "
                   "~2.4-4.6k tok/s. Exactly three step lines carry NaN (steps 47, 59, 66; step 59 is the verbatim verl#721 "
                   "line with actor/kl_loss, entropy_loss, pg_loss, ppo_kl and grad_norm all nan) and every following step is "
                   "finite again (verl skips a non-finite update). No gate FAILs, so NO-KILL; but a NaN in the policy loss "
                   "is a learning-signal risk worth a human look: escalate=true, and flip to KILL if NaN persists across "
                   "consecutive steps or rewards collapse / outputs degrade to '!!!!'.",
               sources=[
                   ("verl-project/verl#721", "the step:59 line in logs/slurm-4418207.out (unchanged apart from the Ray '(TaskRunner pid=...)' prefix added by us)",
                    "every other step line (same key layout, invented values; steps 47 and 66 carry grad_norm:nan / pg_loss:nan in that format), the vLLM V0 stats lines, sacct.txt, job.json, GPU polls"),
               ])


# ============================================================== 4. vLLM V1 engine death with the real cause above


def build_vllm_engine_dead_root_cause(root: Path):
    cap = Capture(root, "vllm_engine_dead_root_cause", 2104)
    rng = cap.rng
    now = dt("2026-08-21T11:50:00")
    job = "rl-q3-14b-lmcache-kvoff"
    trainer, engine = f"{job}-trainer-0", f"{job}-vllm-0"
    cap.k8s_running(job, "oci", now, now - M(60), now - S(30), pods=2)
    cap.job_json(job, model_info("Qwen3-14B", 14.8), h100_nodes(2),
                 {"num_inference_engines": 1, "engine_tp": 4, "engine_ep": 1, "colocated": False,
                  "engine_pods": [engine], "policy_pods": [trainer]},
                 rollout=rollout_info(32, 900), expected_step_s=780, max_retries=1, enforce_eager=False,
                 new="vLLM V1 with the LMCache KV connector (kv offload) for the first time")
    t_d = now - M(34)
    e = Log()
    vllm011_stats(e, now - M(58), t_d - S(4), rng, pid=697224, gen=(1200, 2600), run=(20, 40))
    head = excerpt("LMCache-2306_enginecore_fatal_head")
    step_frame = [ln.replace("pid=595868", "pid=697344") for ln in excerpt("LMCache-2306_enginecore_step_frame_turn6")]
    pfx = head[0].split("EngineCore encountered")[0]  # '(EngineCore_DP0 pid=697344) ERROR MM-DD ... [core.py:844] '
    cause = pfx + "ValueError: vllm model for vllm-instance not found."
    add_burst(e, head + step_frame + [cause], t_d, retime_vllm, spacing=0.0005)
    add_burst(e, excerpt("LMCache-2306_apiserver_enginedeaderror"), t_d + S(0.2), retime_vllm, spacing=0.0005, stamp=t_d)
    for k in range(6):
        ta = t_d + S(0.3 + k * 0.7)
        e.add(ta, f"(APIServer pid=697224) INFO:     10.44.2.{17 + k}:{41000 + 37 * k} - \"POST /v1/chat/completions HTTP/1.1\" 500 Internal Server Error")
    cap.write_text(f"logs/{engine}.log", e.render())
    tl = skyrl_trainer(rng, now, 2280, "10.44.1.9", now - M(120), 8, 780, rollout_dead=t_d)
    coordinator_groups(tl, "10.44.1.9", (2301,), now - M(112), 600, 8, bad_every=3, until=t_d)
    cap.write_text("logs/pod_rank0.log", tl.render())
    uu_t, uu_e = gpu_uuids(rng, 8), gpu_uuids(rng, 8)
    cap.gpu_polls(trainer, uu_t, now - M(45), now - S(30), 120, busy_until(rng, t_d, 64000, 200, 110, 9), 81559)
    cap.gpu_polls(engine, uu_e, now - M(45), now - S(30), 120,
                  lambda tp, g: (h100_engine(rng) if g < 4 else (0, 0, 66.0)) if tp < t_d else (0, 0, 67 + rng.random() * 4),
                  81559)
    # the last trial finishes before the engine died (none can complete after it)
    trials(cap, rng, now, n=7, job=job, model="Qwen3-14B", api_base=f"http://{engine}:8000/v1", first=now - M(110),
           every_s=600)
    cap.expect(verdict=["KILL"], status=["WEDGED"], failing=["A"], must_not_fail=["restarts"],
               evidence=["ValueError", "(?i)EngineDeadError|EngineCore encountered a fatal error"],
               next_steps=["ValueError"],
               why="Gate A WEDGED (seed §2: RUNNING + a death signature 'EngineDeadError' + stale trainer): the only vLLM "
                   "engine's EngineCore logged 'EngineCore encountered a fatal error.' with a traceback through "
                   "run_busy_loop -> step -> future.result() ending in 'ValueError: vllm model for vllm-instance not found.' "
                   "(the LMCache KV connector cannot find its registered vLLM instance), then the API server raised "
                   "'EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.' and answers "
                   "500 since. The state poll still says running; the SkyRL trainer has waited in "
                   "wait_for_generation_buffer for ~39 min against a ~13 min cadence. KILL, and the next steps must name the "
                   "cause above the EngineDeadError (the ValueError in the LMCache connector path), not just 'engine died': "
                   "fix/disable the kv connector config before relaunch.",
               sources=[
                   ("LMCache/LMCache#2306", "logs/rl-q3-14b-lmcache-kvoff-vllm-0.log: the 9 EngineCore 'fatal error' traceback-head lines and the 11 APIServer EngineDeadError / EngineCore _bootstrap lines (turn 8), plus the 2 'line 342, in step / future.result()' frame lines (turn 6)",
                    "timestamps; the turn-6 frame's pid 595868 -> 697344 to sit in the turn-8 traceback; the final 'ValueError: vllm model for vllm-instance not found.' line is built from the thread title in the same log prefix (the stored excerpt is cut before it); the 500 access lines"),
                   ("-", "-", "vLLM 0.11 stats lines, SkyRL trainer, state.jsonl, job.json, GPU polls, Harbor trials"),
               ])


# ============================================================== 5. SGLang rollout server died


def build_sglang_rollout_server_dead(root: Path):
    cap = Capture(root, "sglang_rollout_server_dead", 2105)
    rng = cap.rng
    now = dt("2026-06-30T02:15:00")
    job = "rl-q25-32b-sgl-coder"
    trainer, server = f"{job}-trainer-0", f"{job}-sglang-0"
    cap.k8s_running(job, "gke-a3mega", now, now - M(60), now - S(35), pods=2)
    cap.job_json(job, model_info("Qwen2.5-Coder-32B-Instruct", 32.8), h100_nodes(2),
                 {"num_inference_engines": 1, "engine_tp": 8, "colocated": False,
                  "engine_pods": [server], "policy_pods": [trainer]},
                 rollout=rollout_info(64, 900), expected_step_s=840, max_retries=1,
                 new="remote SGLang rollout server (sglang 0.4.3) instead of vLLM")
    t_c = now - M(38)
    s = Log()
    sglang_decode_lines(s, now - M(58), t_c - S(3), rng)
    exc = excerpt("sglang-3713_scheduler_exception")
    add_burst(s, exc, t_c, retime_sglang, spacing=0.0001)
    s.add(t_c + S(0.01), retime_sglang(excerpt("sglang-3730_sigquit")[0], t_c))
    cap.write_text(f"logs/{server}.log", s.render())
    tl = skyrl_trainer(rng, now, 7712, "10.8.0.5", now - M(125), 14, 840, rollout_dead=t_c, freeze_lead_min=4)
    coordinator_groups(tl, "10.8.0.5", (7790,), now - M(118), 540, 9, bad_every=4, bad_ok=6, until=t_c)
    cap.write_text("logs/pod_rank0.log", tl.render())
    uu_t, uu_s = gpu_uuids(rng, 8), gpu_uuids(rng, 8)
    cap.gpu_polls(trainer, uu_t, now - M(45), now - S(30), 120, busy_until(rng, t_c, 59000, 300, 108, 9), 81559)
    cap.gpu_polls(server, uu_s, now - M(45), now - S(30), 120,
                  lambda tp, g: h100_engine(rng) if tp < t_c else (0, 0, 66 + rng.random() * 4), 81559)
    trials(cap, rng, now, n=7, job=job, model="Qwen2.5-Coder-32B-Instruct", api_base=f"http://{server}:30000/v1",
           first=now - M(115), every_s=600)
    cap.expect(verdict=["KILL"], status=["WEDGED"], failing=["A"], must_not_fail=["restarts"],
               evidence=["(?i)(sglang|rollout server)", "(?i)(illegal memory access|Scheduler hit an exception|sigquit)"],
               next_steps_not=["(?i)policy mesh"],
               why="Gate A WEDGED on the ROLLOUT side (seed §2 death signatures: a real Traceback + stale trainer while the "
                   "state poll says running): the remote SGLang server's scheduler logged '[... TP0] Scheduler hit an "
                   "exception' ending in 'RuntimeError: CUDA error: an illegal memory access was encountered' and the "
                   "launcher 'Received sigquit from a child proces. It usually means the child failed.'; its GPUs are "
                   "empty since. The SkyRL trainer has sat in wait_for_generation_buffer for ~40 min (cadence ~14 min). "
                   "The policy side is fine - there is no NCCL/FSDP signature - so the evidence must name the SGLang "
                   "rollout server and the next steps must not send the supervisor to debug a policy mesh: KILL, "
                   "restart/relaunch the SGLang server (or fall back to vLLM) with the crash reproduced/fixed "
                   "(CUDA_LAUNCH_BLOCKING, a pinned sglang version).",
               sources=[
                   ("sgl-project/sglang#3713", "logs/rl-q25-32b-sgl-coder-sglang-0.log: the 'Scheduler hit an exception' traceback (18 lines)", "its timestamp"),
                   ("sgl-project/sglang#3730", "the 'Received sigquit from a child proces. It usually means the child failed.' line", "its timestamp (moved next to the #3713 crash)"),
                   ("-", "-", "SGLang 'Decode batch.' lines (sglang 0.4 format, invented values), SkyRL trainer, state.jsonl, job.json, GPU polls, trials"),
               ])


# ============================================================== 6. one engine resident but never generating


def build_resident_idle_engine(root: Path):
    cap = Capture(root, "resident_idle_engine", 2106)
    rng = cap.rng
    now = dt("2026-11-05T20:30:00")
    job = "rl-q3-8b-nl2bash-4eng"
    trainer = f"{job}-trainer-0"
    engines = [f"{job}-vllm-{i}" for i in range(4)]
    cap.k8s_running(job, "coreweave", now, now - M(60), now - S(25), pods=5)
    cap.job_json(job, model_info("Qwen3-8B", 8.2), h100_nodes(2),
                 {"num_inference_engines": 4, "engine_tp": 2, "engine_ep": 1, "colocated": False,
                  "engine_pods": engines, "policy_pods": [trainer]},
                 rollout=rollout_info(64, 600), expected_step_s=600, max_retries=1, enforce_eager=False,
                 new="4 separate engine pods behind a new router")
    t_up = now - M(72)
    for i, ep in enumerate(engines):
        e = Log()
        if i < 3:
            vllm011_stats(e, now - M(60), now - S(3), rng, pid=1, gen=(2200, 4200), run=(20, 42))
        else:
            startup = excerpt("GLM-V-204_engine_startup_no_stats")
            # offsets are from the first line's own clock, 09:11:55, kept relative
            for ln in startup:
                m = re.search(r"\d\d-\d\d (\d\d):(\d\d):(\d\d)", ln)
                off = (int(m.group(1)) - 9) * 3600 + (int(m.group(2)) - 11) * 60 + int(m.group(3)) - 55
                t = t_up + S(off)
                e.add(t, retime_vllm(ln, t))
        cap.write_text(f"logs/{ep}.log", e.render())
    tl = skyrl_trainer(rng, now, 3302, "10.12.0.4", now - M(118), 5, 620)
    coordinator_groups(tl, "10.12.0.4", (3401, 3402, 3403), now - M(115), 420, 16, bad_every=5)
    cap.write_text("logs/pod_rank0.log", tl.render())
    for i, p in enumerate([trainer, *engines]):
        uu = gpu_uuids(rng, 8 if p == trainer else 2)
        if p == trainer:
            fn = lambda tp, g: h100_busy(rng)  # noqa: E731
        elif i < 4:
            fn = lambda tp, g: h100_engine(rng)  # noqa: E731
        else:
            fn = lambda tp, g: (0, 71680 + rng.random() * 20, 69 + rng.random() * 4)  # noqa: E731  ~70 GiB, 0 %
        cap.gpu_polls(p, uu, now - M(40), now - S(20), 120, fn, 81559)
    trials(cap, rng, now, n=12, job=job, model="Qwen3-8B", api_base=f"http://{job}-router:8000/v1",
           first=now - M(110), every_s=420)
    cap.expect(verdict=["KILL", "NO-KILL"], status=["ALIVE"], failing=["B"], must_not_fail=["restarts"],
               evidence=["(?i)(vllm-3|engine 3|4th engine|one engine|1 of 4|3 of 4)",
                         "(?i)(0 ?%|idle|not generating|resident|no (vllm )?stats)"],
               why="Gate B FAIL (seed §3: 'A GPU at 0% util with memory resident across several polls = an engine that loaded "
                   "weights but is not generating'): engine pod vllm-3 finished start-up (KV cache sized, CUDA graphs "
                   "captured, 'init engine ... took 25.99 seconds', cache_config_info) 72 min ago and has never printed a "
                   "stats line, while its 2 GPUs hold ~70 GiB at 0 % util / ~70 W on all 10 polls; the other three engines "
                   "print 2.2-4.2k tok/s each. The seed's verdict rule says engines resident-but-not-generating -> lean KILL, "
                   "but the job is otherwise progressing (steps every ~10 min, trials completing with rewards) and no "
                   "second family (no hang, no crash) corroborates a kill, so either verdict is defensible: the failing "
                   "gate is the firm expectation (likely the router never registered vllm-3).",
               sources=[
                   ("zai-org/GLM-V#204", "logs/rl-q3-8b-nl2bash-4eng-vllm-3.log (8 start-up lines, message text unchanged)", "their timestamps (kept relative, moved to 72 min before capture)"),
                   ("-", "-", "the other engines' vLLM 0.11 stats lines, SkyRL trainer, state.jsonl, job.json, GPU polls, trials"),
               ])


# ============================================================== 7. SLURM chain: same checkpoint-save crash twice


def build_slurm_same_checkpoint_crash(root: Path):
    cap = Capture(root, "slurm_same_checkpoint_crash", 2107)
    rng = cap.rng
    name = "grpo-q3-8b-toolrl"
    ids = ["8801230", "8801231", "8801232", "8801233"]
    kinds = ["TIMEOUT", "FAILED", "FAILED", "RUNNING"]
    tb = excerpt("verl-3346_checkpoint_save_traceback")
    final = excerpt("verl-3346_title_final_exception")[0]
    slurm_to = excerpt("zetta_utils-671_slurm_time_limit")
    ck_root = "/leonardo_scratch/fast/AIFAC_L01_028/ckpt/grpo-q3-8b-toolrl"
    a = dt("2026-03-26T09:02:11")
    rows = []
    now = None
    for j, st in zip(ids, kinds):
        out, err = Log(), Log()
        TR = ray_pfx("TaskRunner", 51200 + int(j[-1]) * 7, color=False)
        out.extend(a + S(4), ["+ srun --nodes=1 --ntasks=1 -w lrdn3311 ray start --head --port=6379 --num-gpus=4 --block &",
                              "Local node IP: 10.12.33.11", "", "--------------------", "Ray runtime started.", "--------------------"])
        t = a + S(70)
        out.add(t, ray_py(t, "INFO", "worker.py:1879", "Connected to Ray cluster. View the dashboard at 127.0.0.1:8265 "))
        resume = 0 if j == ids[0] else 180
        t += S(240)
        if resume:
            out.extend(t, [TR + f"Load from checkpoint folder: {ck_root}/global_step_{resume}",
                           TR + f"Setting global step to {resume}", TR + f"Resuming from {ck_root}/global_step_{resume}"])
        step = resume + 1
        if st == "TIMEOUT":
            end = a + timedelta(hours=20, seconds=29)  # --time=20:00:00
        elif st == "RUNNING":
            end = now = a + M(58)
        else:
            end = None
        while True:
            step_s = 380 + rng.random() * 25
            t += S(step_s)
            if end is not None and t >= end - S(20):
                break
            out.add(t, TR + verl_step_line(step, rng, score=rng.uniform(0.3, 0.5), step_s=step_s))
            if step % 20 == 0:
                out.add(t + S(3), TR + f"local_global_step_folder: {ck_root}/global_step_{step}")
                t += S(55)
            if st == "FAILED" and step == 200:
                te = t + S(6)
                err.extend(te, [
                    "Error executing job with overrides: ['algorithm.adv_estimator=grpo', 'trainer.save_freq=20', "
                    f"'trainer.default_local_dir={ck_root}', 'trainer.resume_mode=auto', 'trainer.nnodes=4']",
                    "Traceback (most recent call last):",
                    '  File "/opt/tiger/SFT/ToolRL/verl/verl/trainer/main_ppo.py", line 42, in main',
                    "    run_ppo(config)",
                    '  File "/opt/tiger/SFT/ToolRL/verl/verl/trainer/main_ppo.py", line 99, in run_ppo',
                    "    ray.get(runner.run.remote(config))",
                    f"ray.exceptions.RayTaskError(RuntimeError): ray::TaskRunner.run() (pid={51200 + int(j[-1]) * 7}, ip=10.12.33.11, "
                    f"actor_id={cap.hexid(32)}, repr=<main_ppo.TaskRunner object at 0x7f51d83a2b90>)",
                    '  File "/opt/tiger/SFT/ToolRL/verl/verl/trainer/main_ppo.py", line 330, in run',
                    "    trainer.fit()",
                    *tb,
                    "ray::WorkerDict.actor_rollout_save_checkpoint() (pid=21050, ip=[2605:340:cd51:4b00:25cb:e433:652c:3043], "
                    "actor_id=3f653b9b10c3f0f70e39d87f03000000, repr=<verl.single_controller.ray.base.WorkerDict object at 0x7eec8e8d6a90>)",
                    '  File "/usr/local/lib/python3.11/dist-packages/torch/serialization.py", line 966, in save',
                    "    with _open_zipfile_writer(f) as opened_zipfile:",
                    '  File "/usr/local/lib/python3.11/dist-packages/torch/serialization.py", line 798, in __exit__',
                    "    self.file_like.write_end_of_file()",
                    final,
                    "",
                    "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
                    "srun: error: lrdn3311: task 0: Exited with exit code 1",
                ])
                end = te + S(4)
                break
            step += 1
        if st == "TIMEOUT":
            err.add(end - S(1), slurm_to[0])
            for ln in slurm_to[1:]:
                err.add(end, ln.replace("494583", j).replace("ON ...", "ON lrdn3311")
                        .replace("2024-04-20T09:09:37", end.strftime("%Y-%m-%dT%H:%M:%S")))
        cap.write_text(f"logs/{j}.out", out.render())
        cap.write_text(f"logs/{j}.err", err.render())
        ec = {"TIMEOUT": "0:0", "FAILED": "1:0", "RUNNING": "0:0"}[st]
        rows.append(f"{j}|{name}|{st}|{a:%Y-%m-%dT%H:%M:%S}|"
                    f"{'Unknown' if st == 'RUNNING' else end.strftime('%Y-%m-%dT%H:%M:%S')}|{ec}|0\n")
        a = end + S(130 + rng.randint(0, 40))
    cap.capture_json(ids[3], "leonardo", "slurm", now)
    cap.write_text("sacct.txt", SACCT_HEADER + "\n" + "".join(rows))
    cap.job_json(ids[3], model_info("Qwen3-8B", 8.2), ("A100-SXM-64GB", 4, 4),
                 {"num_inference_engines": 8, "engine_tp": 2, "colocated": True},
                 expected_step_s=390, max_retries=2, new="checkpoints to the new $FAST scratch quota")
    uu = gpu_uuids(rng, 4)
    cap.gpu_polls("lrdn3311", uu, now - M(20), now - S(30), 60,
                  lambda tp, g: (85 + rng.random() * 15, 52000 + rng.random() * 9000, 300 + rng.random() * 120), 65536)
    cap.expect(verdict=["KILL"], status=["ALIVE", "UNKNOWN"], failing=["restarts"], must_not_fail=[],
               evidence=["PytorchStreamWriter failed writing file"],
               next_steps=["(?i)(checkpoint|disk|quota|storage|save)"],
               why="Restart-burn corroboration (seed §0/§5: the same crash repeating across restarts = deterministically doomed "
                   "-> KILL). sacct: leg 8801230 TIMEOUT with a successor (a normal chain restart, not a burn), then 8801231 "
                   "and 8801232 both FAILED 1:0 about 2.3 h in, each at the step-200 save with the identical traceback "
                   "_save_checkpoint -> WorkerDict.actor_rollout_save_checkpoint -> 'RuntimeError: [enforce fail at "
                   "inline_container.cc:857] . PytorchStreamWriter failed writing file data/37: file write failed' -> "
                   "'unexpected pos ...'. Both resume from global_step_180, so 8801233 (RUNNING, healthy until now, max "
                   "retries 2 both burned) will reach the same step-200 save in ~80 min. Same failure every attempt: restarts."
                   "same_failure=true, KILL and fix the checkpoint storage (quota / filesystem) before relaunch.",
               sources=[
                   ("verl-project/verl#3346", "logs/8801231.err and logs/8801232.err: the 15-line block from 'File .../ray_trainer.py, line 1323, in fit' to 'During handling of the above exception, another exception occurred:' and the 'ray::WorkerDict.actor_rollout_save_checkpoint() (pid=21050, ...' line; the last line ('RuntimeError: [enforce fail at inline_container.cc:659] .unexpected pos 2387758464 vs 2387758376') is the thread title",
                    "the Hydra/main_ppo frames above the block, the torch.serialization frames between the cut and the title line, the srun exit line; identical in both legs"),
                   ("ZettaAI/zetta_utils#671", "logs/8801230.err: 'srun: Job step aborted ...' and the two 'slurmstepd: error: *** ... CANCELLED AT ... DUE TO TIME LIMIT ***' lines",
                    "job id 494583 -> 8801230, node '...' -> lrdn3311, time re-stamped to the leg's end"),
                   ("-", "-", "sacct.txt, job.json, .out step lines (verl format, invented values), GPU poll"),
               ])


# ============================================================== 8. all-reduce hang: 100 % util at idle power


def build_allreduce_hang_util_power(root: Path):
    cap = Capture(root, "allreduce_hang_util_power", 2108)
    rng = cap.rng
    now = dt("2026-07-08T06:45:00")
    job = "rl-q3-30b-a3b-fsdp-ep"
    pods = [f"{job}-{i}-vv81c-0" for i in range(2)]
    cap.k8s_running(job, "coreweave", now, now - M(150), now - S(30), pods=2)
    cap.job_json(job, model_info("Qwen3-30B-A3B", 30.5, 3.3), h100_nodes(2),
                 {"num_inference_engines": 4, "engine_tp": 4, "colocated": True, "policy_pods": pods, "engine_pods": pods},
                 expected_step_s=480, max_retries=1, enforce_eager=False, new="FSDP2 x EP=2 policy mesh (first run)")
    t_h = now - M(128)  # last step landed just before this
    for i, p in enumerate(pods):
        lg = Log()
        t0 = now - M(205)
        host = p
        for k, ln in enumerate(excerpt("nccl-188-tests_plugin_load_returned_2")):
            ln = ln.replace("user:852750:852750", f"{host}:{3120 + i}:{3120 + i}")
            lg.add(t0 + S(k * 0.01), ln)
        if i == 0:
            TR = ray_pfx("TaskRunner", 3011, color=False)
            t = t0 + S(300)
            step = 1
            while t < t_h:
                step_s = 460 + rng.random() * 40
                t += S(step_s)
                if t > t_h:
                    break
                lg.add(t, TR + verl_step_line(step, rng, score=rng.uniform(0.2, 0.35), step_s=step_s))
                step += 1
        cap.write_text(f"logs/pod_rank{i}.log", lg.render())
    for p in pods:
        uu = gpu_uuids(rng, 8)

        def f(tp, g):
            if tp < t_h:
                return h100_busy(rng)
            return (100, 70100 + rng.random() * 40, 110 + rng.random() * 12)  # NCCL spin: 100 %, ~115 W
        cap.gpu_polls(p, uu, now - M(140), now - S(30), 300, f, 81559)
    cap.expect(verdict=["KILL"], status=["WEDGED"], failing=["A"], must_not_fail=["restarts"],
               evidence=["(?i)power"],
               next_steps=["(?i)(nccl|collective|hang|rank|py-spy|dump|straggler)"],
               why="A silent collective hang (seed §2 colocated/policy-mesh wedge; §3 B-training: 'during a step the policy "
                   "ranks show high utilization.gpu + power draw'): the verl trainer's last step line is ~2 h old against a "
                   "~8 min cadence and no NCCL watchdog line has been printed (heartbeat monitoring off). All 16 GPUs read "
                   "100 % utilization but only ~110-122 W for 2 h - an H100 idles near 70 W and computes at 500-700 W - "
                   "which is the NCCL spin-wait signature (100 % 'util' with no math) the NCCL maintainers' users describe "
                   "(NVIDIA/nccl#968: 'the GPU util is 100% but the power consumption is pretty low (~70W)'). A util-only "
                   "read calls this busy; the power read plus the frozen step counter make it WEDGED -> KILL, dump stacks "
                   "(py-spy / flight recorder) to find the straggler rank first.",
               sources=[
                   ("NVIDIA/nccl-tests#188", "the 5 NCCL INFO start-up lines at the top of logs/pod_rank0.log and logs/pod_rank1.log", "host:pid:tid prefix 'user:852750:852750' renamed to the pod's"),
                   ("NVIDIA/nccl#968", "none (a fact: 100 % util at ~70 W during an NCCL hang)", "the GPU polls encode it (100 %, 110-122 W, memory resident for 2 h)"),
                   ("-", "-", "verl step lines, state.jsonl, job.json"),
               ])


# ============================================================== 9. only the state poll


def build_state_poll_only(root: Path):
    cap = Capture(root, "state_poll_only", 2109)
    now = dt("2026-12-01T08:00:00")
    job = "rl-q3-14b-terminal-bench-v3"
    cap.k8s_running(job, "coreweave", now, now - M(30), now - S(40), pods=4)
    cap.expect(verdict=["NO-KILL"], status=["UNKNOWN"], failing=[], must_not_fail=["A", "B", "C", "restarts"],
               escalate=True,
               why="Nothing but the state poll (seed §1: 'If pull returns 0 trials / no logs: that is itself a signal, not a "
                   "tool failure'; §2: 'NEVER a single ... grep' and a running state poll is necessary-but-not-sufficient). "
                   "state.jsonl says running, 4 pods, failure_count 0 for 30 min; there are no logs, GPU polls or trials, so "
                   "liveness, resources and rollouts are all unknown. Never a KILL on no evidence, never a PASS either: "
                   "NO-KILL, status UNKNOWN, escalate so someone fixes the capture.",
               sources=[])


# ============================================================== 10. healthy: NCCL chatter, V0 preemption warnings, shutdown ImportError


def build_healthy_nccl_chatter_meta_path(root: Path):
    cap = Capture(root, "healthy_nccl_chatter_meta_path", 2110)
    rng = cap.rng
    now = dt("2026-02-11T21:05:00")
    jid = "33870415"
    name = "orlhf-l31-8b-ppo-eval-then-train"
    start = now - M(190)
    cap.slurm_running(jid, name, "perlmutter", now, start)
    cap.job_json(jid, model_info("Llama-3.1-8B-Instruct", 8.0), ("A100-SXM4-80GB", 4, 4),
                 {"num_inference_engines": 4, "engine_tp": 1, "colocated": False},
                 expected_step_s=540, max_retries=0, new="baseline eval stage runs in the same allocation before training")
    out, err = Log(), Log()
    nodes = ["nid004112", "nid004113", "nid004120", "nid004121"]
    # stage 1: offline vLLM (V0) eval, ends with the interpreter-shutdown noise
    t = start + S(20)
    out.add(t, "=== stage 1/2: baseline eval (vllm offline, 1 GPU) ===")
    t_end1 = start + M(34)
    pre = excerpt("vllm-6102_preemption_warning")[0]
    v0_engine_stats(out, "", t + S(90), t_end1 - S(30), rng, file_line="metrics.py:351", gen=(1500, 2600),
                    prompt_frac=0.7, run=(120, 256), pending=(0, 30), kv=(80, 99), every=5,
                    warn=pre, warn_every=13, warn_at=5, warn_delay=1.3)
    out.add(t_end1 - S(6), "eval done: gsm8k acc=0.7612 math500 acc=0.4480 -> /pscratch/sd/r/rlops/eval/base.json")
    for ln in excerpt("vllm-8208_shutdown_del_traceback") + excerpt("ray-37490_importerror_meta_path"):
        err.add(t_end1 - S(5), ln)
    # stage 2: OpenRLHF training with NCCL_DEBUG=INFO chatter
    t2 = t_end1 + S(40)
    out.add(t2, "=== stage 2/2: train (openrlhf.cli.train_ppo_ray) ===")
    err.add(t2, "+ export NCCL_DEBUG=INFO")
    # per rank: the nccl#1231 trio plus the one WARN line of the nccl#257 paste (the rest of that paste is an older NCCL)
    chatter = excerpt("nccl-1231_net_plugin_harmless") + [ln for ln in excerpt("nccl-257_ibverbs_warn") if "NCCL WARN" in ln]
    for r in range(8):
        node = nodes[r // 2]
        for k, ln in enumerate(chatter):
            ln = (ln.replace("VM-0-14-tencentos:162637:162637 [6]", f"{node}:{81200 + r}:{81200 + r} [{r % 4}]")
                    .replace("VM-0-14-tencentos:162635:162635 [4]", f"{node}:{81200 + r}:{81200 + r} [{r % 4}]")
                    .replace("jupyter-vmarkovtsev:15833:15833 [0]", f"{node}:{81200 + r}:{81200 + r} [{r % 4}]"))
            out.add(t2 + S(95 + r * 0.02 + k * 0.001), ray_pfx("ActorModelRayActor", 81200 + r, None if r < 2 else f"10.249.{r // 2}.7", color=False) + ln)
    PT = ray_pfx("PPOTrainer", 80991, color=False)
    eng = [ray_pfx("LLMRayActor", 82001 + i, "10.249.3.7", color=False) for i in range(4)]
    t = t2 + S(240)
    step = 1
    while True:
        gen0 = t + S(10)
        for ep in eng:
            v0_engine_stats(out, ep, gen0 + S(rng.random() * 3), gen0 + S(200), rng, file_line="metrics.py:351",
                            gen=(1300, 2400), prompt_frac=0.5, run=(60, 128), pending=(0, 12), kv=(40, 96),
                            warn=pre, warn_every=6, warn_at=4, warn_delay=0.8)
        step_s = 520 + rng.random() * 40
        te = t + S(step_s)
        if te > now - S(20):
            break
        out.add(te, PT + vllm_v0(te, "INFO", "ppo_trainer.py:206",
                f"\u2728 Global step {step}: {{'policy_loss': {rng.uniform(-0.01, 0.01):.4f}, 'critic_loss': {0.04 + rng.random() * 0.04:.4f}, "
                f"'reward': {0.35 + step * 0.01 + rng.random() * 0.05:.4f}, 'kl': 0.00{rng.randint(1, 9)}, 'response_length': {480 + rng.random() * 60:.1f}, "
                f"'timing/make_experience': {260 + rng.random() * 30:.1f}, 'timing/ppo_train': {220 + rng.random() * 20:.1f}, "
                f"'timing/step_total': {step_s:.1f}}}"))
        t = te
        step += 1
    cap.write_text(f"logs/slurm-{jid}.out", out.render())
    cap.write_text(f"logs/slurm-{jid}.err", err.render())
    for ni, n in enumerate(nodes):
        uu = gpu_uuids(rng, 4)
        fn = (lambda tp, g: (60 + rng.random() * 39, 72000 + rng.random() * 500, 220 + rng.random() * 160)) if ni == 3 else \
             (lambda tp, g: (80 + rng.random() * 20, 62000 + rng.random() * 9000, 300 + rng.random() * 110))
        cap.gpu_polls(n, uu, now - M(25), now - S(30), 120, fn, 81920)
    cap.expect(verdict=["NO-KILL"], status=["ALIVE"], failing=[], must_not_fail=["A", "B", "C", "restarts"],
               evidence=["(?i)(Global step|step|throughput|tok)"],
               why="Healthy run full of alarming-looking but harmless text (seed §2 'Benign noise - do NOT read as death'; §5 "
                   "NO-KILL if all gates pass). Stage 1 (offline vLLM eval) ended normally ('eval done') and the interpreter "
                   "shutdown printed 'Exception ignored in: <function LLMEngine.__del__ ...>' / 'ImportError: sys.meta_path is "
                   "None, Python is likely shutting down' - a known harmless destructor-at-exit message, not a crash. Stage 2 "
                   "prints NCCL_DEBUG=INFO chatter on every rank incl. 'NET/Plugin : dlerror=libnccl-net.so ... No plugin found "
                   "(libnccl-net.so), using internal implementation' (an NCCL maintainer in NVIDIA/nccl#1231: 'is harmless') "
                   "and 'NCCL WARN Failed to open libibverbs.so[.1]', and the V0 engines log periodic 'Sequence group ... is "
                   "preempted by PreemptionMode.RECOMPUTE' warnings while throughput stays 1.3-2.4k tok/s with Waiting small. "
                   "OpenRLHF global steps land every ~9 min with rising reward. No gate fails.",
               sources=[
                   ("vllm-project/vllm#8208", "logs/slurm-33870415.err: 'Exception ignored in: <function LLMEngine.__del__ ...>' + 3 traceback lines",
                    "their position at the end of stage 1 (the stored excerpt is cut after the shutdown frame)"),
                   ("run-llama/llama_index#13019 / ray-project/ray#37490", "'ImportError: sys.meta_path is None, Python is likely shutting down'", "placed as the last line of that traceback"),
                   ("NVIDIA/nccl#1231", "the 3 NCCL INFO lines (Bootstrap / NET/Plugin dlerror / cudaDriverVersion) per rank", "host:pid:tid prefix renamed per rank and node; Ray actor prefix added"),
                   ("NVIDIA/nccl#257", "the 'misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]' line per rank", "host:pid:tid prefix renamed per rank"),
                   ("vllm-project/vllm#6102", "every 'Sequence group 147 is preempted by PreemptionMode.RECOMPUTE ...' warning", "timestamps; repeated periodically in both stages"),
                   ("-", "-", "V0 stats lines, OpenRLHF global-step lines, stage banners, sacct.txt, job.json, GPU polls"),
               ])


# ============================================================== 11. healthy: application Xids + one Ray worker death, progress continues


def build_healthy_xid_and_worker_restart(root: Path):
    cap = Capture(root, "healthy_xid_and_worker_restart", 2111)
    rng = cap.rng
    now = dt("2026-04-02T17:40:00")
    job = "rl-q3-8b-tb-xidnode"
    pods = [f"{job}-0-m2c7d-0", f"{job}-1-m2c7d-0"]
    node = "gke-a3high-pool-4-2c9f1e7a-q8wz"
    cap.k8s_running(job, "gke-a3high", now, now - M(80), now - S(30), pods=2)
    cap.job_json(job, model_info("Qwen3-8B", 8.2), h100_nodes(2),
                 {"num_inference_engines": 4, "engine_tp": 2, "colocated": False, "policy_pods": pods[:1],
                  "engine_pods": pods[1:]},
                 rollout=rollout_info(64, 600), expected_step_s=600, max_retries=1, enforce_eager=False,
                 new="custom Triton sampling kernel in the engines")
    t_x = now - M(52)
    dm = []
    for _k, ln in enumerate(excerpt("gpud-46_xid13")):
        dm.append(retime_ctime(ln, t_x))
    x31 = excerpt("dxvk-2495_xid31")[0]
    dm.append((t_x + M(19)).strftime("[%a %b %d %H:%M:%S %Y] ") + x31)
    cap.write_text(f"logs/dmesg-{node}.log", "\n".join(dm) + "\n")
    l0 = skyrl_trainer(rng, now, 6610, "10.0.4.2", now - M(125), 11, 600)
    t_w = now - M(44)
    l0.add(t_w, excerpt("verl-2189_raylet_worker_died")[0])
    # the coordinator actors came back under new pids after the worker death
    coordinator_groups(l0, "10.0.4.2", (6701, 6702), now - M(120), 380, 18, bad_every=6, until=t_w)
    coordinator_groups(l0, "10.0.4.2", (6755, 6756), now - M(120), 380, 18, bad_every=6, since=t_w)
    cap.write_text("logs/pod_rank0.log", l0.render())
    l1 = Log()
    for i in range(4):
        vllm011_stats(l1, now - M(60), now - S(3), rng, proc="EngineCore_DP0", pid=7140 + i, prompt_frac=0.5,
                      pfx=ray_pfx("AsyncVLLMInferenceEngine", 7100 + i, "10.0.4.3", color=False),
                      gen=(2300, 4300), run=(18, 40), kv=(15, 45), prefix=(50, 70))
    cap.write_text("logs/pod_rank1.log", l1.render())
    healthy_pod_gpus(cap, rng, now, pods[0], pods[1:])
    trials(cap, rng, now, n=14, job=job, model="Qwen3-8B", api_base="http://10.0.4.2:8000/v1", first=now - M(115),
           every_s=380)
    cap.expect(verdict=["NO-KILL"], status=["ALIVE"], failing=[], must_not_fail=["A", "B", "C", "restarts"],
               evidence=["(?i)(step|throughput|tok|reward)"],
               why="Healthy despite scary lines (seed §2: liveness is state poll + log freshness, never a single grep; §5 "
                   "NO-KILL if all gates pass). The engine node's dmesg has three Xid 13 (Graphics SM Warp Exception / "
                   "Illegal Instruction Parameter) lines and later an Xid 31 MMU Fault - application-level Xids (a bad "
                   "kernel launch in one process), not the fatal 48/79/94 class - and 44 min ago the raylet reported one "
                   "'A worker died ... SYSTEM_ERROR ... End of file' for a rollout-coordinator actor that Ray brought back "
                   "(the coordinator reappears under a new pid). Since then: SkyRL steps keep landing every ~10 min, all 4 "
                   "engines print 2.3-4.3k tok/s, trials keep completing with ~45 % reward. No gate FAILs: NO-KILL, watch "
                   "for Xid repeats on the same GPU or a second worker death.",
               sources=[
                   ("leptonai/gpud#46", "logs/dmesg-gke-a3high-pool-4-2c9f1e7a-q8wz.log lines 1-3 (Xid 13; the PR quotes them with '> ', dropped)", "the --ctime stamps"),
                   ("doitsujin/dxvk#2495", "the Xid 31 MMU Fault line (message unchanged)", "the '[ctime] ' prefix (the paste had none)"),
                   ("verl-project/verl#2189", "the raylet 'A worker died ...' line in logs/pod_rank0.log", "its time; the coordinator's new pid after it"),
                   ("-", "-", "SkyRL trainer/generator lines, vLLM stats, state.jsonl, job.json, GPU polls, trials"),
               ])


# ============================================================== 12. healthy: vLLM V1 warning storm


def build_healthy_vllm_warning_storm(root: Path):
    cap = Capture(root, "healthy_vllm_warning_storm", 2112)
    rng = cap.rng
    now = dt("2026-09-22T04:10:00")
    job = "rl-q3-30b-a3b-swe-llmd"
    trainer, engines = f"{job}-trainer-0", [f"{job}-decode-0", f"{job}-decode-1"]
    cap.k8s_running(job, "coreweave", now, now - M(60), now - S(30), pods=3)
    cap.job_json(job, model_info("Qwen3-30B-A3B-Instruct-2507", 30.5, 3.3), h100_nodes(3),
                 {"num_inference_engines": 2, "engine_tp": 4, "colocated": False, "engine_pods": engines,
                  "policy_pods": [trainer]},
                 rollout=rollout_info(64, 900), expected_step_s=720, max_retries=1, enforce_eager=False,
                 new="engines deployed through llm-d (service env vars in the pods)")
    env = excerpt("llm-d-1269_unknown_env_vars")
    shm = excerpt("spark-vllm-docker-348_shm_broadcast")
    t_start = now - M(95)
    syncs = [now - M(90) + M(12) * k for k in range(8)]
    for _i, ep in enumerate(engines):
        e = Log()
        add_burst(e, env, t_start, retime_vllm, spacing=0.001)
        k = len(env) - 1  # n_shm below keys off the last line index of the previous burst
        # a paused engine (weight sync / trainer step) idles its shm ring: one line a minute while paused
        busy_from = t_start + M(4)
        for s in syncs:
            if s > now:
                break
            vllm011_stats(e, busy_from, s, rng, gen=(2400, 4800), run=(30, 60))
            n_shm = 3 + (k % 2)
            for k, ln in enumerate(shm[:n_shm]):
                tt = s + S(60 * (k + 1))
                e.add(tt, retime_vllm(ln, tt))
            busy_from = s + M(4.2)
        vllm011_stats(e, busy_from, now - S(3), rng, gen=(2400, 4800), run=(30, 60))
        cap.write_text(f"logs/{ep}.log", e.render())
    tl = skyrl_trainer(rng, now, 9120, "10.30.0.9", now - M(88), 3, 720)
    coordinator_groups(tl, "10.30.0.9", (9201, 9202), now - M(85), 420, 12, bad_every=5)
    cap.write_text("logs/pod_rank0.log", tl.render())
    healthy_pod_gpus(cap, rng, now, trainer, engines)
    trials(cap, rng, now, n=12, job=job, model="Qwen3-30B-A3B-Instruct-2507", api_base=f"http://{job}-gateway/v1",
           first=now - M(85), every_s=400)
    cap.expect(verdict=["NO-KILL"], status=["ALIVE"], failing=[], must_not_fail=["A", "B", "C", "restarts"],
               evidence=["(?i)(tok(en)?s?/s|throughput)"],
               why="Healthy run under a vLLM warning storm (seed §2 benign list: 'shm_broadcast ... No available shared memory "
                   "broadcast block found in 60/600s (engine idle-waiting - heartbeat, not a kill)' and the 'Unknown vLLM "
                   "environment variable' whitelist note). Each engine pod starts with a burst of 'Unknown vLLM environment "
                   "variable detected: VLLM_SVC_...' warnings (Kubernetes service env vars that happen to start with VLLM_) "
                   "and prints 3-4 shm_broadcast 60 s notes during every weight-sync pause, yet between pauses both engines "
                   "run 2.4-4.8k tok/s with Waiting ~0, SkyRL steps land every ~12 min and trials complete with rewards. "
                   "No gate fails: NO-KILL.",
               sources=[
                   ("llm-d/llm-d#1269", "the 8 'Unknown vLLM environment variable detected: VLLM_SVC_...' lines at the top of each engine log", "timestamps"),
                   ("eugr/spark-vllm-docker#348", "the '(EngineCore pid=222) INFO ... [shm_broadcast.py:705] No available shared memory broadcast block found in 60 seconds ...' lines",
                    "timestamps (3-4 per weight-sync pause)"),
                   ("-", "-", "vLLM 0.11 stats lines, SkyRL trainer, state.jsonl, job.json, GPU polls, trials"),
               ])


# ============================================================== 13. every trial dies on the sandbox provider (Daytona 400)


def build_daytona_disk_cap_every_trial(root: Path):
    cap = Capture(root, "daytona_disk_cap_every_trial", 2113)
    rng = cap.rng
    now = dt("2026-10-22T15:10:00")
    job = "rl-q3-8b-swe-daytona90"
    trainer, engine = f"{job}-trainer-0", f"{job}-vllm-0"
    start = now - M(66)
    cap.k8s_running(job, "coreweave", now, start + M(1), now - S(30), pods=2)
    cap.job_json(job, model_info("Qwen3-8B", 8.2), h100_nodes(2),
                 {"num_inference_engines": 4, "engine_tp": 2, "engine_ep": 1, "colocated": False,
                  "engine_pods": [engine], "policy_pods": [trainer]},
                 rollout=rollout_info(32, 1800), expected_step_s=900, max_retries=1, enforce_eager=False,
                 new="first run of the SWE task set on Daytona with override_storage_mb=92160 (90 GB sandbox disk)")
    err = excerpt("daytona-5156_bad_request_disk_cap")
    msg = "\n".join([err[0].split(": ", 1)[1], *err[1:]])  # str(e): the message without the class name
    # engines: start-up, then only the router's health checks; no agent ever reaches them
    t_up = start + M(3)
    e = Log()
    for ln in excerpt("GLM-V-204_engine_startup_no_stats"):
        m = re.search(r"\d\d-\d\d (\d\d):(\d\d):(\d\d)", ln)
        off = (int(m.group(1)) - 9) * 3600 + (int(m.group(2)) - 11) * 60 + int(m.group(3)) - 55
        e.add(t_up + S(off), retime_vllm(ln, t_up + S(off)))
    t = t_up + M(2)
    while t < now - S(5):
        e.add(t, f"(APIServer pid=1) INFO:     10.52.3.14:{40100 + rng.randint(0, 900)} - \"GET /health HTTP/1.1\" 200 OK")
        t += S(30)
    cap.write_text(f"logs/{engine}.log", e.render())
    # trainer + rollout coordinators in pod_rank0.log: every group's 8 trials fail on sandbox creation in seconds,
    # the fork scores unlisted exceptions 0 (default_error_treatment: zero), and the steps train on zeros
    out = Log()
    P = ray_pfx("skyrl_entrypoint", 5120, "10.52.3.14")
    RC = [ray_pfx("RolloutCoordinator", p, "10.52.3.14") for p in (5201, 5202, 5203, 5204)]
    skyrl_zero_reward_steps(out, P, start + M(8), now, rng, buf_s=(140, 40))
    k, tg = 0, start + M(6)
    while tg < now - S(20):
        rc = RC[k % 4]
        for r in range(8):
            tt = tg - S(6 - 0.4 * r)
            first = (f"Trajectory TrajectoryID(instance_id='swe-smith-{7100 + k}', repetition_id={r}) failed with Harbor "
                     f"exception: {err[0].split(': ', 1)[1]}")
            head = loguru(tt, "WARNING", "examples.terminal_bench.terminal_bench_generator:_process_trial_result:1292", first)
            # loguru colours the whole (multi-line) message: the reset lands after its last line
            out.add(tt, rc + head.removesuffix("\x1b[0m"))
            out.add(tt, err[1])
            out.add(tt, f"{err[2]} (type=DaytonaBadRequestError, exclude_from_baseline=False)\x1b[0m")
        generator_group_lines(out, rc, tg, "x", ok=0, exc={"DaytonaBadRequestError": 8})
        k += 1
        tg += S(70 + rng.random() * 30)
    cap.write_text("logs/pod_rank0.log", out.render())
    # GPUs: the trainer computes its zero-reward steps; the engines hold weights + KV at 0 %
    cap.gpu_polls(trainer, gpu_uuids(rng, 8), now - M(40), now - S(30), 120,
                  lambda tp, g: h100_busy(rng) if rng.random() < 0.6 else (4 + rng.random() * 6, 61000 + rng.random() * 900,
                                                                         140 + rng.random() * 30), 81559)
    cap.gpu_polls(engine, gpu_uuids(rng, 8), now - M(40), now - S(30), 120,
                  lambda tp, g: (0, 71900 + rng.random() * 40, 68 + rng.random() * 4), 81559)
    tb_head = ("Traceback (most recent call last):\n  File \".../harbor/trial/trial.py\", line 468, in run\n"
               "    await self._setup_environment()\n  ...\n")
    for n in range(24):
        st = now - M(55) + S(120 * n + rng.random() * 30)
        spec = TrialSpec(f"swe-smith-{7100 + n // 8}", EASY[n % len(EASY)][1], [], started=st, agent_s=0.0,
                         exc="DaytonaBadRequestError", exc_msg=msg, tb=tb_head + "\n".join(err) + "\n", env_failed=True)
        write_trial(cap, spec, trials_dir=f"/data/experiments/{job}/trace_jobs", model="Qwen3-8B",
                    api_base=f"http://{engine}:8000/v1", task_root="/data/tasks/swe-smith")
    cap.expect(verdict=["KILL"], status=["ALIVE", "UNKNOWN"], failing=["C"], must_not_fail=["A", "restarts"],
               evidence=["DaytonaBadRequestError", "(?i)Disk request 90GB exceeds maximum allowed per sandbox"],
               next_steps=["(?i)(sandbox|daytona)"],
               next_steps_not=["(?i)tool-call parsing", "(?i)agent harness"],
               why="Gate C infrastructure (seed §4: 'Every trial ends in an environment/infra exception ... => infra, not "
                   "model - KILL + fix the infra, relaunch'): all 24 finished trials' result.json carry exception_type "
                   "DaytonaBadRequestError with the Daytona API's 'Failed to create sandbox: / Disk request 90GB exceeds "
                   "maximum allowed per sandbox (10GB).' - the new override_storage_mb asks for more disk than the per-"
                   "sandbox cap, so no sandbox is ever created, no agent turn runs and no reward is produced; every rollout "
                   "group logs 'Exception breakdown: {'DaytonaBadRequestError': 8}' / 'Batch generation complete: 0/8'. The "
                   "trainer keeps stepping on all-zero rewards and the engines sit idle with weights resident because no "
                   "agent ever calls them: both are consequences. KILL, and the next steps must name the sandbox provider "
                   "(lower the requested disk to the cap or raise the Daytona limit), not the agent loop or the engines. "
                   "The Daytona SDK raises one DaytonaError subclass per HTTP status, so the bare class name a trial records "
                   "is DaytonaBadRequestError, not DaytonaError.",
               sources=[
                   ("daytonaio/daytona#5156", "the 3-line 'DaytonaBadRequestError: Failed to create sandbox: / Disk request 90GB exceeds maximum allowed per sandbox (10GB). / Need higher resource limits per-sandbox? Contact us at support' error: the tail of each trial's exception.txt, the message (after the class name) of each result.json exception_message, and lines 1-3 of each Harbor trial-exception record in logs/pod_rank0.log",
                    "the traceback head above it and the Harbor/SkyRL log prefix ('Trajectory ... failed with Harbor exception: ' before line 1, ' (type=DaytonaBadRequestError, exclude_from_baseline=False)' after line 3)"),
                   ("PhiloLabs/agentic-vbench#12", "- (a fact: 'Daytona caps disk at 10 GB per sandbox, so the 16 GB and 10 GB values were getting rejected at sandbox-creation time')", "the premise that a task-set storage request above the cap fails every trial at creation"),
                   ("zai-org/GLM-V#204", "the engine pod's 8 vLLM start-up lines", "their timestamps"),
                   ("-", "-", "SkyRL trainer steps, rollout-group lines, health-check access lines, state.jsonl, job.json, GPU polls, trial dirs"),
               ])


# ============================================================== 14. silent hang: the colocated engines fell asleep for good


def build_swift_sleep_then_silence(root: Path):
    cap = Capture(root, "swift_sleep_then_silence", 2114)
    rng = cap.rng
    now = dt("2026-11-12T21:05:00")
    jid, node = "8830417", "gpu-a-031"
    start = now - timedelta(hours=6, minutes=20)
    cap.slurm_running(jid, "grpo-q25-7b-swift", "leonardo", now, start)
    cap.job_json(jid, model_info("Qwen2.5-7B-Instruct", 7.6), h100_nodes(1),
                 {"num_inference_engines": 8, "engine_tp": 1, "engine_ep": 1, "colocated": True},
                 rollout=rollout_info(), expected_step_s=600, max_retries=0, enforce_eager=False,
                 new="ms-swift GRPO with vLLM colocate + sleep_level=1 on the new reward model")
    final = excerpt("ms-swift-6962_sleep_then_silence")
    hang_by = now - M(75)  # the silence has lasted ~75 min at capture (19:50:16 -> 21:05 in the thread's terms)
    out = Log()
    out.add(start + S(5), "[INFO:swift] rank: 0, local_rank: 0, world_size: 8")

    def wake(t):
        for k in range(8):
            tt = t + S(0.05 * k)
            out.add(tt, f"INFO {md(tt)} [executor_base.py:226] It took {0.2 + rng.random() * 0.6:.6f} seconds to wake up "
                        f"tags ['weights', 'kv_cache'].")

    def sleep(t):
        for k in range(8):
            tt = t + S(0.05 * k)
            freed = 23.5 + rng.random() * 0.5
            out.add(tt, f"INFO {md(tt)} [worker.py:152] Sleep mode freed {freed:.2f} GiB memory, "
                        f"{53.0 - freed:.2f} GiB memory is still in use.")
            out.add(tt, f"INFO {md(tt)} [executor_base.py:211] It took {0.9 + rng.random() * 0.3:.6f} seconds to fall asleep.")

    # each step: wake, ~66 s of generation, sleep, ~9 min of training, then the step's metrics line (the thread's
    # 9-minute asleep / ~1-minute awake rhythm); the metrics dict carries no timestamp of its own
    step, t = 1, start + M(6)
    while t + S(66 + 545 + 66) < hang_by:
        wake(t)
        sleep(t + S(66))
        te = t + S(66 + 535 + rng.random() * 10)
        r = 0.35 + 0.2 * step / 40 + rng.random() * 0.05
        out.add(te, "{" + f"'loss': {rng.uniform(-0.01, 0.03):.4f}, 'grad_norm': {0.2 + rng.random() * 0.3:.4f}, "
                    f"'learning_rate': 1e-06, 'reward': {r:.4f}, 'reward_std': {0.3 + rng.random() * 0.1:.4f}, "
                    f"'frac_reward_zero_std': {rng.random() * 0.2:.4f}, 'completions/mean_length': {700 + rng.random() * 300:.2f}, "
                    f"'kl': {0.0005 + rng.random() * 0.002:.6f}, 'clip_ratio/region_mean': 0.0, 'epoch': {step / 300:.2f}, "
                    f"'global_step/max_steps': '{step}/300', 'percentage': '{step / 3:.2f}%', "
                    f"'memory(GiB)': {51 + rng.random() * 2:.2f}, 'train_speed(iter/s)': {1 / 600:.6f}" + "}")
        step, t = step + 1, te + S(2)
    # the last cycle as the thread shows it: the engines wake, generate, fall asleep, and nothing follows but one
    # cleanup line from the trainer
    wake(t)
    t_h = t + S(66)
    for k in range(8):
        tt = t_h + S(0.05 * k)
        out.add(tt, retime_vllm(final[0], tt))
        out.add(tt, retime_vllm(final[1], tt))
    out.add(t_h + S(2.5), final[2])
    cap.write_text(f"logs/grpo-q25-7b-swift-{jid}.out", out.render())
    cap.gpu_polls(node, gpu_uuids(rng, 8), now - M(100), now - S(40), 120,
                  lambda tp, g: h100_busy(rng) if tp < t_h else (rng.random() * 0.8, 45800 + rng.random() * 300,
                                                                   62 + rng.random() * 9), 81559)
    cap.expect(verdict=["KILL"], status=["WEDGED"], failing=["A"], must_not_fail=["restarts"],
               evidence=["(?i)0 ?% util", "(?i)(frozen|stale|silent|last)"],
               next_steps=["(?i)(py-spy|stack|hang)"],
               why="Gate A WEDGED by the seed's own B-training rule ('All-0% with no log advance during training = wedge'; "
                   "§2 'a job can hold its whole gang for hours while hung and still read running'): sacct says RUNNING, the "
                   "ms-swift trainer printed a metrics line every ~10 min for 6 h, then the colocated vLLM engines logged "
                   "'Sleep mode freed 23.72 GiB memory ...' / 'It took 1.060974 seconds to fall asleep.' and the trainer only "
                   "'[INFO:swift] Memory cleanup attempt 1: Freed 0.00 GB reserved, 0.00 GB allocated' - then nothing for "
                   "~75 min (7x the cadence). No watchdog, traceback or worker death was printed, but all 8 GPUs have sat at "
                   "0-1 % util with ~45 GiB resident at idle power on every poll since: the training step never started. "
                   "Two families (progress stall + GPU polls) -> KILL; dump the stacks before relaunching.",
               sources=[
                   ("modelscope/ms-swift#6962", "logs/grpo-q25-7b-swift-8830417.out: the last 'Sleep mode freed 23.72 GiB memory, 29.27 GiB memory is still in use.' / 'It took 1.060974 seconds to fall asleep.' pair and the final '[INFO:swift] Memory cleanup attempt 1: Freed 0.00 GB reserved, 0.00 GB allocated' line",
                    "timestamps; the pair repeated for 8 engines (the poster elides them as '[... 8 similar sleep messages ...]'); the 9-10 min wake/sleep cadence and the ~45 GiB / 0 % GPUs are from the poster's description; every earlier wake/sleep line and metrics line is reconstructed in the same formats"),
                   ("NVIDIA-NeMo/RL#1846", "- (a fact: 'progress will suddenly halt and GPU usage goes down to zero (with GPU memory still being high and W&B considering the application to still be running)')", "the same silent-hang shape in another RL stack"),
                   ("-", "-", "sacct.txt, job.json, the nvidia-smi polls"),
               ])


BUILDERS = {
    "tail_only_nccl_hang": build_tail_only_nccl_hang,
    "gpu_fallen_off_bus": build_gpu_fallen_off_bus,
    "healthy_nan_loss_lines": build_healthy_nan_loss_lines,
    "vllm_engine_dead_root_cause": build_vllm_engine_dead_root_cause,
    "sglang_rollout_server_dead": build_sglang_rollout_server_dead,
    "resident_idle_engine": build_resident_idle_engine,
    "slurm_same_checkpoint_crash": build_slurm_same_checkpoint_crash,
    "allreduce_hang_util_power": build_allreduce_hang_util_power,
    "state_poll_only": build_state_poll_only,
    "healthy_nccl_chatter_meta_path": build_healthy_nccl_chatter_meta_path,
    "healthy_xid_and_worker_restart": build_healthy_xid_and_worker_restart,
    "healthy_vllm_warning_storm": build_healthy_vllm_warning_storm,
    "daytona_disk_cap_every_trial": build_daytona_disk_cap_every_trial,
    "swift_sleep_then_silence": build_swift_sleep_then_silence,
}


if __name__ == "__main__":
    run_builders(BUILDERS, ROOT, sys.argv[1:])
