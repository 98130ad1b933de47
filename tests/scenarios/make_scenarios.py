#!/usr/bin/env python3
"""Writes the capture directories of tests/scenarios/<name>/ (deterministic; rerun to regenerate).

    python tests/scenarios/make_scenarios.py            # all scenarios
    python tests/scenarios/make_scenarios.py NAME ...   # some

Each scenario is a different cluster / scheduler / framework / log-format version than the shared CoreWeave examples.
expected.json carries the verdict the seed's rules require (not what the probe happens to say).
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _lib import (
    ESC,
    SACCT_HEADER,
    Capture,
    Log,
    TrialSpec,
    cr_progress,
    dt,
    gpu_uuids,
    h100_nodes,
    iso,
    loguru,
    model_info,
    pytest_stdout,
    ray_pfx,
    ray_py,
    rollout_info,
    run_builders,
    state_rows,
    tqdm_bar,
    v0_stats,
    v1_stats,
    vllm_033,
    vllm_proc_pfx,
    vllm_v0,
    vllm_v1,
    write_trial,
)
from _tasks import EASY, HARD, coherent_turns, hard_turns, hard_verifier, salad_turns

ROOT = Path(__file__).resolve().parent
TD = timedelta


def S(x: float) -> timedelta:
    return timedelta(seconds=x)


def M(x: float) -> timedelta:
    return timedelta(minutes=x)


# ============================================================== SkyRL helpers


def skyrl_zero_reward_steps(log: Log, pfx: str, t0, now, rng, buf_s: tuple[float, float]) -> None:
    """Fully-async SkyRL steps from t0 training on zero reward (every trial failed), the last one ending before
    `now`; lines of the step in progress at `now` stop 4 s before it. `buf_s`: the buffer wait's base and spread."""
    t, step = t0, 1
    while True:
        te = skyrl_async_step(log, pfx, t, step, buf_s=buf_s[0] + rng.random() * buf_s[1], fwd_s=40 + rng.random() * 8,
                              train_s=95 + rng.random() * 15, sync_s=14 + rng.random() * 3, reward=0.0, pass_at=0.0,
                              total_steps=200)
        if te is None or te > now:
            break
        t, step = te, step + 1
    log.items = [it for it in log.items if it[0] <= now - S(4)]


def skyrl_async_step(log: Log, pfx: str, t0, step: int, *, buf_s: float, fwd_s: float, train_s: float, sync_s: float,
                     reward: float, pass_at: float, total_steps: int, color: bool = True, stop_after: str | None = None,
                     resp_len: float = 3000.0):
    """One fully-async SkyRL step from 'Started: step'. Returns the end time. stop_after=<timer> freezes after its Start."""
    L = lambda t, loc, msg, lvl="INFO": log.add(t, pfx + loguru(t, lvl, loc, msg, color))  # noqa: E731
    t = t0
    L(t, "skyrl_train.fully_async_trainer:_train_loop:658", "Started: 'step'")
    t += S(0.3)
    L(t, "skyrl_train.fully_async_trainer:_train_loop:661", "Started: 'wait_for_generation_buffer'")
    if stop_after == "wait_for_generation_buffer":
        return None
    t += S(buf_s)
    L(t, "skyrl_train.fully_async_trainer:_train_loop:661", f"Finished: 'wait_for_generation_buffer', time cost: {buf_s:.2f}s")
    L(t + S(0.03), "skyrl_train.trainer:postprocess_generator_output:1206",
      f"reward/avg_pass_at_8: {pass_at:g}, reward/avg_raw_reward: {reward:g} (effective_batch=48 samples)")
    t += S(0.05)
    L(t, "skyrl_train.fully_async_trainer:convert_generation_group_mini_batch_to_training_input:1157",
      f"Step {step}: effective_batch=48 samples (6/6 groups), discard_rate=0.0%")
    L(t + S(0.01), "skyrl_train.fully_async_trainer:_train_loop:684", "Started: 'convert_to_training_input'")
    L(t + S(2.1), "skyrl_train.trainer:convert_to_training_input:1115", "Number of sequences before padding: 48")
    L(t + S(2.1), "skyrl_train.trainer:convert_to_training_input:1117", "Number of sequences after padding: 48")
    t += S(2.2)
    L(t, "skyrl_train.fully_async_trainer:_train_loop:684", "Finished: 'convert_to_training_input', time cost: 2.19s")
    L(t, "skyrl_train.fully_async_trainer:_train_loop:711", "Started: 'run_training'")
    L(t, "skyrl_train.fully_async_trainer:_run_training:939", "Started: 'fwd_logprobs_values_reward'")
    if stop_after == "fwd_logprobs_values_reward":
        return None
    t += S(fwd_s)
    L(t, "skyrl_train.fully_async_trainer:_run_training:939", f"Finished: 'fwd_logprobs_values_reward', time cost: {fwd_s:.2f}s")
    L(t, "skyrl_train.fully_async_trainer:_run_training:948", "Started: 'compute_advantages_and_returns'")
    L(t + S(0.6), "skyrl_train.trainer:compute_advantages_and_returns:1321",
      f"avg_final_rewards: {reward:g}, avg_response_length: {resp_len:.1f}")
    L(t + S(0.62), "skyrl_train.fully_async_trainer:_run_training:948", "Finished: 'compute_advantages_and_returns', time cost: 0.62s")
    t += S(0.63)
    L(t, "skyrl_train.fully_async_trainer:_run_training:964", "Started: 'train_critic_and_policy'")
    L(t, "skyrl_train.trainer:train_critic_and_policy:1639", "Started: 'policy_train'")
    if stop_after == "policy_train":
        return None
    t += S(train_s)
    L(t, "skyrl_train.trainer:train_critic_and_policy:1639", f"Finished: 'policy_train', time cost: {train_s:.2f}s")
    L(t, "skyrl_train.fully_async_trainer:_run_training:964", f"Finished: 'train_critic_and_policy', time cost: {train_s + 0.1:.2f}s")
    L(t, "skyrl_train.fully_async_trainer:_train_loop:711", f"Finished: 'run_training', time cost: {fwd_s + train_s + 0.8:.2f}s")
    L(t + S(0.1), "skyrl_train.fully_async_trainer:_train_loop:732", "Started: 'sync_weights'")
    t += S(sync_s)
    L(t, "skyrl_train.fully_async_trainer:_train_loop:732", f"Finished: 'sync_weights', time cost: {sync_s:.2f}s")
    L(t, "skyrl_train.fully_async_trainer:_train_loop:743",
      f"{{'final_loss': {-0.01 - reward / 50:.4f}, 'policy_loss': {-0.01 - reward / 50:.4f}, 'policy_lr': 1e-06, "
      f"'ppo_clip_ratio': 0.0021, 'policy_entropy': 0.4711, 'raw_grad_norm': 0.1873, 'policy_update_steps': 1.0}}")
    el = (t - t0).total_seconds()
    log.add(t, pfx + tqdm_bar("Training Step Progress", step, total_steps, f"{int(el // 60):02d}:{int(el % 60):02d}",
                               "??:??", f"{el:.2f}s/it"))
    L(t + S(0.3), "skyrl_train.fully_async_trainer:_train_loop:658", f"Finished: 'step', time cost: {el:.2f}s")
    metrics = {"reward/avg_pass_at_8": pass_at, "reward/avg_raw_reward": reward, "trainer/global_step": step,
               "timing/step": round(el, 2), "timing/policy_train": round(train_s, 2), "timing/sync_weights": round(sync_s, 2),
               "generate/avg_num_tokens": resp_len}
    L(t + S(0.6), "skyrl_train.trainer:_log_metrics_stdout:1965",
      f"WANDB_MIRROR kind=train step={step} metrics={json.dumps(metrics, sort_keys=True)}")
    return t + S(0.7)


def generator_group_lines(log: Log, pfx: str, t, task: str, ok: int, n: int = 8, exc: dict | None = None,
                          color: bool = True):
    L = lambda tt, loc, msg, lvl="INFO": log.add(tt, pfx + loguru(tt, lvl, loc, msg, color))  # noqa: E731
    if exc:
        L(t, "examples.terminal_bench.terminal_bench_generator:generate:984", f"Exception breakdown: {exc!r}")
    L(t + S(0.01), "examples.terminal_bench.terminal_bench_generator:generate:988",
      f"Batch generation complete: {ok}/{n} successful, {n - ok} failed instances, 0 masked (excluded from baseline)")
    L(t + S(0.5), "examples.terminal_bench.terminal_bench_generator:generate:713",
      f"Starting batch generation for {n} trials (mode=training)")


def engine_stats_v1(log: Log, pfx: str, start, end, rng, *, every=10.0, gen=(2000, 4000), run=(20, 40), wait=(0, 1),
                    kv=(10, 40), prefix=(55, 70), fmt="v1", file_line="loggers.py:127", proc=None, pid=None,
                    deferred=False, k8s_ts=False):
    t = start + S(rng.random() * every)
    while t <= end:
        g = rng.uniform(*gen)
        r = rng.randint(*run)
        p = rng.uniform(0.3, 1.2) * g
        w = rng.randint(*wait)
        k = rng.uniform(*kv)
        pr = None if prefix is None else rng.uniform(*prefix)
        if fmt == "v0":
            line = vllm_v0(t, "INFO", file_line, v0_stats(p, g, r, 0, w, k))
        elif fmt == "033":
            line = vllm_033(t, proc, pid, "INFO", file_line,
                            v1_stats(p, g, r, w, k, None, deferred=rng.randint(0, 2) if deferred else None))
        else:
            line = vllm_v1(t, "INFO", file_line, v1_stats(p, g, r, w, k, pr))
        if k8s_ts:
            line = (t + S(0.000331)).strftime("%Y-%m-%dT%H:%M:%S.%f") + "044Z " + line
        log.add(t, pfx + line)
        t += S(every + rng.uniform(-0.05, 0.05))


def tasks_mix(rng, n, pool):
    return [pool[rng.randrange(len(pool))] for _ in range(n)]


# ============================================================== 1. SLURM + verl + vLLM V0, TIMEOUT chain leg


def build_slurm_verl_timeout_chain_healthy(root: Path):
    cap = Capture(root, "slurm_verl_timeout_chain_healthy", 101)
    rng = cap.rng
    now = dt("2026-03-11T10:31:40")
    prev_id, run_id, next_id = "7713402", "7715518", "7715519"
    name = "grpo-q25-7b-dapo"
    leg1_end = dt("2026-03-11T09:14:21")  # leg 1 started 2026-03-10T09:14:02
    leg2_start = dt("2026-03-11T09:16:47")
    cap.capture_json(run_id, "leonardo", "slurm", now)
    cap.write_text("sacct.txt", "\n".join([
        SACCT_HEADER,
        f"{prev_id}|{name}|TIMEOUT|2026-03-10T09:14:02|2026-03-11T09:14:21|0:0|0",
        f"{run_id}|{name}|RUNNING|2026-03-11T09:16:47|Unknown|0:0|0",
        f"{next_id}|{name}|PENDING|Unknown|Unknown|0:0|0",
    ]) + "\n")
    cap.job_json(run_id, model_info("Qwen2.5-7B-Instruct", 7.6), ("A100-SXM-64GB", 4, 2),
                 {"num_inference_engines": 4, "engine_tp": 2, "engine_ep": 1, "colocated": True},
                 rollout=rollout_info(), expected_step_s=420, max_retries=1,
                 new="first run of the DAPO-17k math mix on Leonardo booster")
    cap.write_text("config/verl_ppo_trainer.yaml", """# resolved by hydra (verl main_ppo), dumped at startup
data:
  train_files: /leonardo_work/AIFAC_L01_028/data/dapo17k/train.parquet
  train_batch_size: 128
  max_prompt_length: 2048
  max_response_length: 8192
actor_rollout_ref:
  model:
    path: /leonardo_work/AIFAC_L01_028/models/Qwen2.5-7B-Instruct
  actor:
    strategy: fsdp
    ppo_mini_batch_size: 32
    ppo_micro_batch_size_per_gpu: 2
    fsdp_config:
      param_offload: false
      optimizer_offload: false
  rollout:
    name: vllm
    mode: sync
    tensor_model_parallel_size: 2
    gpu_memory_utilization: 0.6
    enforce_eager: false
    free_cache_engine: true
    disable_log_stats: false
    n: 8
algorithm:
  adv_estimator: grpo
trainer:
  nnodes: 2
  n_gpus_per_node: 4
  total_training_steps: 600
  save_freq: 20
  resume_mode: auto
  default_local_dir: /leonardo_scratch/fast/AIFAC_L01_028/ckpt/grpo-q25-7b-dapo
  logger: ['console', 'wandb']
""")
    ips = {"lrdn1203": "10.12.3.3", "lrdn1204": "10.12.3.4"}
    tr_pid = 1187233
    workers = [(1188012, None), (1188013, None), (1188014, None), (1188015, None),
               (2203117, ips["lrdn1204"]), (2203118, ips["lrdn1204"]), (2203119, ips["lrdn1204"]), (2203120, ips["lrdn1204"])]
    engines = [workers[0], workers[2], workers[4], workers[6]]  # TP rank 0 of each TP=2 engine prints the stats

    def step_line(step, t_gen, t_step, score):
        return (f"step:{step} - global_seqlen/min:{rng.randint(380000, 400000)} - global_seqlen/max:{rng.randint(410000, 440000)} - "
                f"actor/entropy:{0.41 + rng.random() * 0.05:.4f} - actor/pg_loss:{rng.uniform(-0.006, 0.004):.4f} - "
                f"actor/pg_clipfrac:{0.0015 + rng.random() * 0.001:.4f} - actor/grad_norm:{0.18 + rng.random() * 0.08:.4f} - "
                f"actor/lr:1e-06 - critic/score/mean:{score:.4f} - critic/rewards/mean:{score:.4f} - "
                f"response_length/mean:{2100 + rng.random() * 400:.1f} - response_length/clip_ratio:{0.02 + rng.random() * 0.02:.4f} - "
                f"timing_s/gen:{t_gen:.2f} - timing_s/old_log_prob:{20 + rng.random() * 4:.2f} - timing_s/ref:{19 + rng.random() * 3:.2f} - "
                f"timing_s/adv:0.{rng.randint(10, 40)} - timing_s/update_actor:{150 + rng.random() * 20:.2f} - "
                f"timing_s/update_weights:{9 + rng.random() * 2:.2f} - timing_s/step:{t_step:.2f} - "
                f"perf/throughput:{1900 + rng.random() * 300:.1f} - training/global_step:{step} - training/epoch:0")

    # ---- previous leg (TIMEOUT): rsynced .out is the rotated tail (starts mid-line), .err ends with the time limit
    prev = Log()
    t = leg1_end - M(95)
    for step in range(170, 184):
        tg = 170 + rng.random() * 30
        ts = 400 + rng.random() * 40
        prev.add(t, ray_pfx("TaskRunner", 3390121, color=False) + step_line(step, tg, ts, 0.30 + 0.002 * step + rng.random() * 0.03))
        t += S(ts)
    prev.add(t, ray_pfx("TaskRunner", 3390121, color=False) + "Saving actor checkpoint to /leonardo_scratch/fast/AIFAC_L01_028/ckpt/grpo-q25-7b-dapo/global_step_180")
    cap.write_text(f"logs/{prev_id}.out", prev.render(head_cut=417))
    cap.write_text(f"logs/{prev_id}.err", "\n".join([
        "\r".join(tqdm_bar("Training Progress", s, 600, "23:41:07", "52:11:52", "451.63s/it") for s in (181, 182, 183)),
        f"slurmstepd: error: *** JOB {prev_id} ON lrdn1203 CANCELLED AT 2026-03-11T09:14:21 DUE TO TIME LIMIT ***",
        f"slurmstepd: error: *** STEP {prev_id}.0 ON lrdn1203 CANCELLED AT 2026-03-11T09:14:21 DUE TO TIME LIMIT ***",
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    ]) + "\n")

    # ---- running leg
    out, err = Log(), Log()
    t = leg2_start + S(4)
    out.extend(t, [f"+ echo 'chain leg {run_id} (afterany:{prev_id}) on lrdn[1203-1204]'",
                   f"chain leg {run_id} (afterany:{prev_id}) on lrdn[1203-1204]",
                   "+ srun --nodes=1 --ntasks=1 -w lrdn1203 ray start --head --node-ip-address=10.12.3.3 --port=6379 --num-gpus=4 --block &"])
    t += S(9)
    out.extend(t, ["Local node IP: 10.12.3.3", "", "--------------------", "Ray runtime started.", "--------------------"])
    t += S(31)
    out.add(t, ray_py(t, "INFO", "worker.py:1694", "Connecting to existing Ray cluster at address: 10.12.3.3:6379..."))
    out.add(t + S(1), ray_py(t + S(1), "INFO", "worker.py:1879",
                             f"Connected to Ray cluster. View the dashboard at {ESC}[1m{ESC}[32mhttp://127.0.0.1:8265 {ESC}[39m{ESC}[22m"))
    TR = ray_pfx("TaskRunner", tr_pid, color=False)
    t += S(12)
    out.add(t, TR + "Total training steps: 600")
    t += S(160)
    for pid, ip in engines:
        tt = t + S(rng.random() * 20)
        out.add(tt, ray_pfx("WorkerDict", pid, ip, color=False) + vllm_v0(tt, "INFO", "llm_engine.py:237",
                "Initializing an LLM engine (v0.6.3.post1) with config: model='/leonardo_work/AIFAC_L01_028/models/Qwen2.5-7B-Instruct', "
                "speculative_config=None, tokenizer='/leonardo_work/AIFAC_L01_028/models/Qwen2.5-7B-Instruct', skip_tokenizer_init=False, "
                "tokenizer_mode=auto, revision=None, override_neuron_config=None, rope_scaling=None, rope_theta=None, tokenizer_revision=None, "
                "trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=10240, download_dir=None, load_format=LoadFormat.DUMMY, "
                "tensor_parallel_size=2, pipeline_parallel_size=1, disable_custom_all_reduce=False, quantization=None, enforce_eager=False, "
                "kv_cache_dtype=auto, quantization_param_path=None, device_config=cuda, decoding_config=DecodingConfig(guided_decoding_backend='outlines'), "
                "observability_config=ObservabilityConfig(otlp_traces_endpoint=None, collect_model_forward_time=False, collect_model_execute_time=False), "
                "seed=0, served_model_name=/leonardo_work/AIFAC_L01_028/models/Qwen2.5-7B-Instruct, num_scheduler_steps=1, chunked_prefill_enabled=False "
                "multi_step_stream_outputs=True, enable_prefix_caching=False, use_async_output_proc=True, use_cached_outputs=False, mm_processor_kwargs=None)"))
        tt += S(40)
        out.add(tt, ray_pfx("WorkerDict", pid, ip, color=False) + vllm_v0(tt, "INFO", "gpu_executor.py:122", "# GPU blocks: 21311, # CPU blocks: 4681"))
        out.add(tt, ray_pfx("WorkerDict", pid, ip, color=False) + vllm_v0(tt, "INFO", "model_runner.py:1395",
                "Capturing the model for CUDA graphs. This may lead to unexpected consequences if the model is not static. To run the model in eager mode, set 'enforce_eager=True' or use '--enforce-eager' in the CLI."))
        out.add(tt + S(14), ray_pfx("WorkerDict", pid, ip, color=False) + vllm_v0(tt + S(14), "INFO", "model_runner.py:1523", "Graph capturing finished in 14 secs."))
    t += S(80)
    ck = "/leonardo_scratch/fast/AIFAC_L01_028/ckpt/grpo-q25-7b-dapo/global_step_180"
    out.extend(t, [TR + f"Load from checkpoint folder: {ck}", TR + "Setting global step to 180", TR + f"Resuming from {ck}"])
    err.extend(t, [TR + "wandb: Currently logged in as: lrdn-rl (aifac-rl). Use `wandb login --relogin` to force relogin",
                   TR + "wandb: Tracking run with wandb version 0.19.11",
                   TR + "wandb: Resuming run grpo-q25-7b-dapo",
                   TR + "wandb: WARNING (User provided step: 180 is less than current step: 183. Dropping entry: {'actor/pg_loss': 0.0012, '_timestamp': 1773220811.5})."])
    # steps 181.. : gen phase (stats every 5 s), then train
    step = 181
    while True:
        t_gen = 55 + rng.random() * 15
        gen_end = t + S(t_gen)
        for pid, ip in engines:
            ps = ray_pfx("WorkerDict", pid, ip, color=False)
            tt = t + S(rng.random() * 5)
            k = 0
            while tt < min(gen_end, now - S(1)):
                frac = (tt - t).total_seconds() / t_gen
                run_n = max(4, int(128 * (1 - frac ** 3)) - rng.randint(0, 6))
                g = (1700 + rng.random() * 900) * (0.4 + 0.6 * min(1, run_n / 64))
                p = (9000 + rng.random() * 3000) if k == 0 else rng.uniform(0, 40)
                out.add(tt, ps + vllm_v0(tt, "INFO", "metrics.py:349", v0_stats(p, g, run_n, 0, 0 if k else rng.randint(0, 24), 14 + 50 * frac)))
                tt += S(5 + rng.uniform(-0.02, 0.02))
                k += 1
        if gen_end >= now:
            break
        t_step = 395 + rng.random() * 40
        te = t + S(t_step)
        if te >= now:
            break
        out.add(te, TR + step_line(step, t_gen, t_step, 0.34 + 0.002 * (step - 180) + rng.random() * 0.03))
        err.add(te, TR + tqdm_bar("Training Progress", step, 600, "00:0%d:00" % (step - 180), "41:12:00", f"{t_step:.2f}s/it"))
        step += 1
        t = te + S(0.2)
    cap.write_text(f"logs/{run_id}.out", out.render(truncate_last=37))
    cap.write_text(f"logs/{run_id}.err", err.render())

    uu = {h: gpu_uuids(rng, 4) for h in ips}
    for hi, h in enumerate(ips):
        def f(tp, g):
            ph = ((tp - leg2_start).total_seconds() % 420)
            if (tp - leg2_start).total_seconds() < 330:
                return (0, 4, 61.0 + rng.random() * 5)
            if ph < 70:
                return (88 + rng.random() * 11, 41000 + rng.random() * 900, 310 + rng.random() * 80)
            return (93 + rng.random() * 7, 52000 + rng.random() * 4000, 340 + rng.random() * 60)
        cap.gpu_polls(h, uu[h], now - M(40), now - S(20), 90, f, 65536, na_cells={(7, 2, "power")} if hi == 1 else set())

    cap.expect(verdict=["NO-KILL"], status=["ALIVE"], failing=[], must_not_fail=["A", "B", "C", "restarts"],
               evidence=["(?i)(step|score|reward)", "(?i)(tok(en)?s?/s|throughput)"],
               why="SLURM chain restart, not a burn (seed §0): sacct shows leg 7713402 ended TIMEOUT 0:0 after its 24 h wall clock "
                   "('CANCELLED ... DUE TO TIME LIMIT' in its .err) and the afterany successor 7715518 is RUNNING, resumed from "
                   "global_step_180 and advancing verl 'step:N' lines every ~7 min (critic/score/mean ~0.35) up to minutes before capture; "
                   "the vLLM 0.6.3 V0 engines print 'Running: .. reqs, Swapped: 0 reqs, Pending: .. reqs' at 1-2.5k tok/s per engine "
                   "during each generation phase (idle intervals are DEBUG, so the stats go quiet during update_actor - not a stall). "
                   "'a clean TIMEOUT->successor is a normal chain restart, NOT a burn'; all gates pass -> NO-KILL.")


# ============================================================== 2. OpenRLHF + vLLM 0.8.5 enforce_eager, floored throughput


def build_openrlhf_vllm085_eager_floor(root: Path):
    cap = Capture(root, "openrlhf_vllm085_eager_floor", 202)
    rng = cap.rng
    now = dt("2025-10-21T15:48:10")
    job_id = "raysubmit_Vn3kQ8sT2bLxRw4e"
    start = now - M(64)
    cap.capture_json(job_id, "lambda-1cc", "other", now)
    cap.state_jsonl(state_rows(start + S(20), now - S(15), 120, rng, pods=1, max_retries=0))
    cap.job_json(job_id, model_info("Llama-3.1-8B-Instruct", 8.0), h100_nodes(1),
                 {"num_inference_engines": 2, "engine_tp": 1, "engine_ep": 1, "colocated": False},
                 rollout=rollout_info(), new="first OpenRLHF run on the 1-click cluster with vLLM 0.8.5.post1")
    cap.write_text("config/train_ppo_ray_args.yaml", """# openrlhf.cli.train_ppo_ray arguments as parsed (args.__dict__ dumped by our launcher)
pretrain: meta-llama/Llama-3.1-8B-Instruct
reward_pretrain: null
remote_rm_url: http://10.19.4.2:5000/get_reward
actor_num_nodes: 1
actor_num_gpus_per_node: 4
ref_num_nodes: 1
ref_num_gpus_per_node: 2
vllm_num_engines: 2
vllm_tensor_parallel_size: 1
vllm_gpu_memory_utilization: 0.85
vllm_sync_backend: nccl
enforce_eager: true
enable_prefix_caching: true
micro_train_batch_size: 4
train_batch_size: 256
micro_rollout_batch_size: 16
rollout_batch_size: 64
n_samples_per_prompt: 8
generate_max_len: 4096
prompt_max_len: 2048
zero_stage: 3
bf16: true
gradient_checkpointing: true
adam_offload: false
num_episodes: 1
max_epochs: 1
use_wandb: true
""")
    d = Log()
    d.add(start, ray_py(start, "INFO", "worker.py:1694", "Connecting to existing Ray cluster at address: 10.19.4.2:6379..."))
    d.add(start + S(1), ray_py(start + S(1), "INFO", "worker.py:1879",
                               f"Connected to Ray cluster. View the dashboard at {ESC}[1m{ESC}[32m127.0.0.1:8265 {ESC}[39m{ESC}[22m"))
    eng = [(51822, None), (51823, None)]
    t = start + S(40)
    for pid, _ in eng:
        P = ray_pfx("LLMRayActor", pid)
        d.add(t, P + vllm_v1(t, "INFO", "config.py:717",
                             "This model supports multiple tasks: {'generate', 'embed', 'reward', 'score', 'classify'}. Defaulting to 'generate'."))
        d.add(t, P + vllm_v1(t, "WARNING", "arg_utils.py:1536", "Detected VLLM_USE_V1=1 with Engine in background thread. Usage should be considered experimental. Please report any issues on Github."))
        d.add(t + S(1), P + vllm_v1(t + S(1), "INFO", "core.py:58",
              "Initializing a V1 LLM engine (v0.8.5.post1) with config: model='meta-llama/Llama-3.1-8B-Instruct', speculative_config=None, "
              "tokenizer='meta-llama/Llama-3.1-8B-Instruct', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, override_neuron_config=None, "
              "tokenizer_revision=None, trust_remote_code=True, dtype=torch.bfloat16, max_seq_len=6144, download_dir=None, load_format=LoadFormat.AUTO, "
              "tensor_parallel_size=1, pipeline_parallel_size=1, disable_custom_all_reduce=False, quantization=None, enforce_eager=True, "
              "kv_cache_dtype=auto,  device_config=cuda, decoding_config=DecodingConfig(guided_decoding_backend='xgrammar', reasoning_backend=None), "
              "observability_config=ObservabilityConfig(show_hidden_metrics=False, otlp_traces_endpoint=None, collect_model_forward_time=False, "
              "collect_model_execute_time=False), seed=0, served_model_name=meta-llama/Llama-3.1-8B-Instruct, num_scheduler_steps=1, "
              "multi_step_stream_outputs=True, enable_prefix_caching=True, chunked_prefill_enabled=True, use_async_output_proc=False, "
              "disable_mm_preprocessor_cache=False, mm_processor_kwargs=None, pooler_config=None, compilation_config={\"level\":0,"
              "\"splitting_ops\":[],\"compile_sizes\":[],\"cudagraph_capture_sizes\":[],\"max_capture_size\":0}"))
        d.add(t + S(4), P + vllm_v1(t + S(4), "INFO", "gpu_model_runner.py:1329", "Starting to load model meta-llama/Llama-3.1-8B-Instruct..."))
        d.add(t + S(9), P + "\r".join(f"Loading safetensors checkpoint shards: {p:3d}% Completed | {i}/4 [00:{i * 3:02d}<00:{(4 - i) * 3:02d},  3.1{i}s/it]"
                                       for i, p in enumerate((0, 25, 50, 75, 100))))
        d.add(t + S(22), P + vllm_v1(t + S(22), "INFO", "gpu_model_runner.py:1347", "Model loading took 14.9889 GiB and 17.114062 seconds"))
        d.add(t + S(27), P + vllm_v1(t + S(27), "INFO", "kv_cache_utils.py:634", "GPU KV cache size: 437,664 tokens"))
        d.add(t + S(27), P + vllm_v1(t + S(27), "INFO", "kv_cache_utils.py:637", "Maximum concurrency for 6,144 tokens per request: 71.23x"))
        d.add(t + S(28), P + vllm_v1(t + S(28), "INFO", "core.py:159", "init engine (profile, create kv cache, warmup model) took 6.87 seconds"))
    PT = ray_pfx("PPOTrainer", 50977)
    t += S(150)
    d.add(t, PT + vllm_v0(t, "INFO", "ppo_trainer.py:218", "wandb: Syncing run llama31-8b-grpo-math-1cc"))
    gen_start = t + S(30)
    # two steps finished (~44 min each, almost all generation), third one generating
    step_ends = [gen_start + M(27.4)]
    for i, te in enumerate(step_ends):
        gen = 1571.7 + rng.random() * 40
        d.add(te, PT + vllm_v0(te, "INFO", "ppo_trainer.py:547",
              f"\u2728 Global step {i + 1}: {{'policy_loss': {rng.uniform(-0.004, 0.002):.4f}, 'actor_lr': 5e-07, 'kl': 0.0{rng.randint(1, 9)}, "
              f"'reward': {0.31 + 0.02 * i:.4f}, 'response_length': {1710 + rng.random() * 80:.1f}, 'timing/make_experience': {gen + 61:.1f}, "
              f"'timing/ppo_train': {88 + rng.random() * 9:.1f}, 'timing/broadcast': {6.1 + rng.random():.1f}, 'timing/generation': {gen:.1f}, "
              f"'timing/step_total': {gen + 170:.1f}}}"))
        d.add(te + S(0.2), PT + tqdm_bar("Episode [1/1]", i + 1, 78, f"{int((te - gen_start).total_seconds() // 60)}:00", "55:12:00", "2653.20s/it"))
    for pid, _ in eng:
        engine_stats_v1(d, ray_pfx("LLMRayActor", pid), gen_start, now - S(3), rng, every=10, gen=(31, 58), run=(44, 64),
                        wait=(0, 1), kv=(6, 14), prefix=(40, 55), file_line="loggers.py:111")
    cap.write_text(f"logs/job-driver-{job_id}.log", d.render(truncate_last=61))
    uu = gpu_uuids(rng, 8)

    def f(tp, g):
        if g < 4:
            return (rng.choice((0, 0, 0, 3)), 31200 + rng.random() * 400, 71 + rng.random() * 5)
        if g < 6:
            return (0, 16400 + rng.random() * 100, 69 + rng.random() * 4)
        return (38 + rng.random() * 20, 74100 + rng.random() * 200, 142 + rng.random() * 40)
    cap.gpu_polls("lambda-hgx-07", uu, now - M(30), now - S(30), 60, f, 81559, na_cells={(12, 5, "power")})
    cap.expect(verdict=["KILL"], status=["ALIVE"], failing=["B"], must_not_fail=["restarts"],
               evidence=["(?i)(tok(en)?s?/s|throughput)", "(?i)enforce_eager"],
               next_steps=["(?i)enforce_eager"],
               why="Gate B floored throughput (seed §3): both vLLM 0.8.5.post1 engines (Ray LLMRayActor, 'Engine 000:' V1 stats "
                   "every 10 s) report 31-58 tok/s generation with 44-64 Running and Waiting 0-1 for the whole run on a dense "
                   "Llama-3.1-8B (LUT: healthy 2,000-6,000 tok/s, 'awful' < ~500); the one finished step took ~28 min, almost all of it generation. "
                   "The engine init line and the resolved args carry enforce_eager=True (compilation level 0, no cudagraph sizes) - "
                   "'if you measure floor-or-below throughput, FIRST check enforce_eager'. Lean KILL; fix: enforce_eager false "
                   "(CUDA graphs on) and relaunch.")


# ============================================================== 3. vLLM 0.33 stats format, healthy


def build_vllm033_remote_engines_healthy(root: Path):
    cap = Capture(root, "vllm033_remote_engines_healthy", 303)
    rng = cap.rng
    now = dt("2026-11-10T11:42:30")
    job = "rl-q3-30b-a3b-swe-h200"
    cap.k8s_running(job, "nebius", now, now - M(60), now - S(40), pods=3)
    trainer_pod, eng_pods = f"{job}-trainer-0", [f"{job}-vllm-0", f"{job}-vllm-1"]
    cap.job_json(job, model_info("Qwen3-30B-A3B-Instruct-2507", 30.5, 3.3), ("H200-141GB-SXM", 8, 2),
                 {"num_inference_engines": 2, "engine_tp": 4, "engine_ep": 1, "colocated": False,
                  "engine_pods": eng_pods, "policy_pods": [trainer_pod]},
                 rollout=rollout_info(64, 1200), expected_step_s=720, max_retries=1, enforce_eager=False,
                 new="first run against remote vLLM 0.33 serve pods (in-place weight reload)")
    # engine pods: `kubectl logs --timestamps --since=50m` (startup not in window)
    for i, ep in enumerate(eng_pods):
        e = Log()
        es = now - M(30)
        engine_stats_v1(e, "", es, now - S(2), rng, every=10, gen=(2600, 4700), run=(38, 62), wait=(0, 2),
                        kv=(22, 48), fmt="033", proc="APIServer", pid=1, file_line="loggers.py:335", deferred=True, k8s_ts=True)
        # weight reloads at each step boundary + uvicorn access lines
        for k in range(4):
            tr = now - M(47) + M(12 * k) + S(i * 2)
            for ln in [vllm_033(tr, "EngineCore", 87, "INFO", "inplace.py:91", "Reloading weights inplace..."),
                       vllm_033(tr + S(3), "EngineCore", 87, "INFO", "inplace.py:113", f"Reloading and processing weights took {2.6 + rng.random():.2f} seconds")]:
                e.add(tr, tr.strftime("%Y-%m-%dT%H:%M:%S.%f") + "044Z " + ln)
        tw = now - M(35) + S(7)
        e.add(tw, tw.strftime("%Y-%m-%dT%H:%M:%S.%f") + "231Z " + vllm_033(tw, "EngineCore", 87, "INFO", "shm_broadcast.py:542",
              "No available shared memory broadcast block found in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization)."))
        for _ in range(25):
            ta = now - M(50) + S(rng.random() * 3000)
            e.add(ta, ta.strftime("%Y-%m-%dT%H:%M:%S.%f") + "411Z " +
                  f"(APIServer pid=1) INFO:     10.40.{i}.{rng.randint(10, 60)}:{rng.randint(30000, 60000)} - \"POST /v1/chat/completions HTTP/1.1\" 200 OK")
        cap.write_text(f"logs/{ep}.log", e.render())
    # trainer pod (SkyRL, loguru colours, Ray prefixes)
    tl = Log()
    P = ray_pfx("skyrl_entrypoint", 6120, "10.40.2.11")
    t = now - M(52) + S(5)
    step = 11
    while True:
        te = skyrl_async_step(tl, P, t, step, buf_s=190 + rng.random() * 90, fwd_s=80 + rng.random() * 20,
                              train_s=300 + rng.random() * 40, sync_s=14 + rng.random() * 4, reward=round(0.28 + rng.random() * 0.15, 6),
                              pass_at=round(0.5 + rng.random() * 0.3, 6), total_steps=300, resp_len=5200 + rng.random() * 900)
        if te is None or te > now:
            break
        t = te
        step += 1
    tl.items = [it for it in tl.items if it[0] <= now - S(1)]
    RC = [ray_pfx("RolloutCoordinator", p, "10.40.2.11") for p in (7301, 7302, 7303, 7304)]
    tasks = ["swe-lite-0412", "swe-lite-0977", "swe-lite-1205", "swe-lite-0088", "swe-lite-0631", "swe-lite-1420"]
    for k in range(14):
        tg = now - M(50) + S(200 * k + rng.random() * 100)
        generator_group_lines(tl, RC[k % 4], tg, tasks[k % 6], ok=8 if k % 5 else 7)
    cap.write_text("logs/pod_rank0.log", tl.render(truncate_last=23))
    # GPUs
    for node, role in (("trainer-0", "policy"), ("vllm-0", "engine")):
        uu = gpu_uuids(rng, 8)

        def f(tp, g, role=role):
            if role == "engine":
                return (62 + rng.random() * 35, 129000 + rng.random() * 2000, 380 + rng.random() * 220)
            ph = ((tp - now).total_seconds() % 720) / 720
            busy = ph > 0.45
            return ((90 + rng.random() * 10, 98000 + rng.random() * 9000, 560 + rng.random() * 120) if busy else
                    (rng.random() * 4, 61000 + rng.random() * 500, 118 + rng.random() * 20))
        cap.gpu_polls(f"{job}-{node}", uu, now - M(25), now - S(25), 120, f, 143771,
                      na_cells={(3, 6, "power")} if role == "engine" else set())
    # trials
    host = "a91c3be0d2f4"
    for k in range(12):
        task = EASY[k % 4]
        st = now - M(44) + S(200 * k)
        done = k < 9
        good = rng.random() < 0.45
        turns = coherent_turns(rng, host, task, complete=good)
        spec = TrialSpec(f"{task[0]}-{1000 + (k // 2) * 7}", task[1], turns if done else turns[:2], started=st,
                         agent_s=300 + rng.random() * 500, reward=1.0 if good else 0.0, completed=done, host=host,
                         verifier_stdout=pytest_stdout(4, [] if good else [("test_output_matches", "AssertionError: assert 1873 == 1874")], 0.4))
        write_trial(cap, spec, trials_dir=f"/app/experiments/{job}/trace_jobs", model="Qwen3-30B-A3B-Instruct-2507",
                    api_base="http://rl-q3-30b-a3b-swe-h200-vllm-router:8000/v1", task_root="/app/data/tasks/swe-lite")
    cap.expect(verdict=["NO-KILL"], status=["ALIVE"], failing=[], must_not_fail=["A", "B", "C", "restarts"],
               evidence=["(?i)(tok(en)?s?/s|throughput)", "(?i)reward"],
               why="Healthy run read through vLLM 0.33 formats (seed §5 'NO-KILL if all three gates pass'): both remote engine pods "
                   "print '(APIServer pid=1) INFO MM-DD ... [loggers.py:335] Engine 000: ... Running: 38-62 reqs, Waiting: 0-2 reqs, "
                   "Deferred: N reqs, GPU KV cache usage: ..%' (no 'Prefix cache hit rate' segment, k8s --timestamps prefix) at "
                   "2.6-4.7k tok/s - far above the 30B-A3B floor; in-place weight reloads and one shm_broadcast 60 s note at a reload "
                   "are benign; SkyRL steps advance on a ~12 min cadence; trials complete with ~45% reward and coherent turns.")


# ============================================================== 4. host OOM crash-loop (k8s)


def build_host_oom_crashloop_k8s(root: Path):
    cap = Capture(root, "host_oom_crashloop_k8s", 404)
    rng = cap.rng
    now = dt("2026-04-17T14:36:00")
    job = "verl-q25-14b-gsm-offload"
    pod = f"{job}-trainer-0"
    node = "gke-a3mega-pool-2-7f3c9a1e-x2lq"
    start = now - M(140)
    cap.k8s_running(job, "gke-a3mega", now, now - M(70), now - S(30), pods=1)
    cap.job_json(job, model_info("Qwen2.5-14B-Instruct", 14.7), h100_nodes(1),
                 {"num_inference_engines": 4, "engine_tp": 2, "colocated": True, "policy_pods": [pod], "engine_pods": [pod]},
                 expected_step_s=360, max_retries=0, new="param_offload + optimizer_offload on a 512Gi pod (first try)")
    cap.write_text("config/verl_ppo_trainer.yaml", """actor_rollout_ref:
  model:
    path: Qwen/Qwen2.5-14B-Instruct
  actor:
    strategy: fsdp
    ppo_micro_batch_size_per_gpu: 4
    fsdp_config:
      param_offload: true
      optimizer_offload: true
  ref:
    fsdp_config:
      param_offload: true
  rollout:
    name: vllm
    tensor_model_parallel_size: 2
    gpu_memory_utilization: 0.7
    enforce_eager: false
trainer:
  nnodes: 1
  n_gpus_per_node: 8
  save_freq: 10
  resume_mode: auto
""")
    kills = [now - M(97), now - M(73), now - M(45), now - M(15)]  # container restarts 2..5 (1 happened earlier)
    uid = cap.uuid4()

    def boot(log: Log, t0, killed_at):
        TR = ray_pfx("TaskRunner", 2211, color=False)
        log.extend(t0, ["+ ray start --head --num-gpus=8 --disable-usage-stats", "Local node IP: 10.84.3.21", "",
                        "--------------------", "Ray runtime started.", "--------------------"])
        t = t0 + S(25)
        log.add(t, ray_py(t, "INFO", "worker.py:1879", "Connected to Ray cluster. View the dashboard at " + f"{ESC}[1m{ESC}[32m127.0.0.1:8265 {ESC}[39m{ESC}[22m"))
        log.add(t + S(3), TR + "Total training steps: 435")
        ck = f"/gcs/rl-ckpt/{job}/global_step_40"
        t += S(260)
        log.extend(t, [TR + f"Load from checkpoint folder: {ck}", TR + "Setting global step to 40", TR + f"Resuming from {ck}"])
        wd = ray_pfx("WorkerDict", 2790, color=False)
        t += S(15)
        for k in range(8):
            tt = t + S(5 * k)
            if tt >= killed_at:
                return
            log.add(tt, wd + vllm_v1(tt, "INFO", "loggers.py:118", v1_stats(9000 * (k == 0), 2600 + rng.random() * 1400,
                                                                            max(2, 256 - 30 * k), 0, 30 + 5 * k, 4.1)))
        t += S(190)
        if t < killed_at:
            log.add(t, TR + "step:41 - actor/entropy:0.3911 - actor/pg_loss:-0.0031 - actor/grad_norm:0.2210 - critic/score/mean:0.6172 - "
                            "response_length/mean:388.1 - timing_s/gen:47.20 - timing_s/old_log_prob:31.90 - timing_s/update_actor:118.41 - "
                            "timing_s/update_weights:14.02 - timing_s/step:211.53 - training/global_step:41 - training/epoch:0")
        t += S(52)
        if t < killed_at:
            log.add(t, wd + vllm_v1(t, "INFO", "loggers.py:118", v1_stats(8800, 3100.4, 256, 0, 30.2, 4.0)))
            log.add(t + S(4), wd + vllm_v1(t + S(4), "INFO", "gpu_worker.py:98", "Sleep mode freed 61.22 GiB memory, 2.71 GiB memory is still in use."))

    prev = Log()
    boot(prev, kills[2] + M(1.2), kills[3])
    cap.write_text("logs/pod_rank0.previous.log", prev.render(truncate_last=44))
    cur = Log()
    boot(cur, kills[3] + M(2.7), now + M(30))
    cap.write_text("logs/pod_rank0.log", cur.render())
    dm = []
    pids = [88123, 131877, 174402, 219940]
    for i, k in enumerate(kills):
        ts = "[" + k.strftime("%a %b %d %H:%M:%S %Y") + "]"
        cg = f"/kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice"
        dm += [f"{ts} ray::WorkerDict invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=-997",
               f"{ts} CPU: {rng.randint(10, 200)} PID: {pids[i] + 7} Comm: ray::WorkerDict Tainted: P           OE      6.1.100+ #1",
               f"{ts} memory: usage 536870912kB, limit 536870912kB, failcnt {rng.randint(100, 900)}",
               f"{ts} oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=cri-containerd-{cap.hexid(12)}.scope,mems_allowed=0-1,"
               f"oom_memcg={cg},task_memcg={cg}/cri-containerd-{cap.hexid(12)}.scope,task=ray::WorkerDict,pid={pids[i]},uid=0",
               f"{ts} Memory cgroup out of memory: Killed process {pids[i]} (ray::WorkerDict) total-vm:612771244kB, anon-rss:{489000000 + rng.randint(0, 9000000)}kB, "
               f"file-rss:1243556kB, shmem-rss:2097152kB, UID:0 pgtables:{900000 + rng.randint(0, 90000)}kB oom_score_adj:-997",
               f"{ts} Tasks in {cg}/cri-containerd-{cap.hexid(12)}.scope are going to be killed due to memory.oom.group set"]
        for j in range(3):
            dm.append(f"{ts} Memory cgroup out of memory: Killed process {pids[i] - 40 + j} (ray::WorkerDict) total-vm:98771244kB, "
                      f"anon-rss:{12000000 + rng.randint(0, 900000)}kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:41220kB oom_score_adj:-997")
        dm.append(f"[{(k + S(2)).strftime('%a %b %d %H:%M:%S %Y')}] NVRM: Xid (PCI:0000:0c:00): 43, pid={pids[i] - 40}, name=ray::WorkerDict, Ch 00000008")
    cap.write_text(f"logs/dmesg-{node}.log", "\n".join(dm) + "\n")

    def pod_json(snap, restarts, waiting, last_kill):
        cs = {"name": "trainer",
              "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": iso(last_kill - M(22)),
                                           "finishedAt": iso(last_kill), "containerID": f"containerd://{cap.hexid(64)}"}},
              "ready": not waiting, "restartCount": restarts, "started": not waiting,
              "image": "us-docker.pkg.dev/rl-infra/verl/verl:v0.4.1-vllm0.9.2", "imageID": f"us-docker.pkg.dev/rl-infra/verl/verl@sha256:{cap.hexid(64)}",
              "containerID": f"containerd://{cap.hexid(64)}"}
        cs["state"] = ({"waiting": {"reason": "CrashLoopBackOff",
                                    "message": f"back-off 2m40s restarting failed container=trainer pod={pod}_rl({uid})"}}
                       if waiting else {"running": {"startedAt": iso(last_kill + M(2.7))}})
        return {"apiVersion": "v1", "kind": "List", "items": [{
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": "rl", "uid": uid, "labels": {"job-name": job}},
            "spec": {"nodeName": node, "restartPolicy": "OnFailure",
                     "containers": [{"name": "trainer", "resources": {"limits": {"memory": "512Gi", "nvidia.com/gpu": "8"},
                                                                       "requests": {"memory": "512Gi", "nvidia.com/gpu": "8"}}}]},
            "status": {"phase": "Running", "hostIP": "10.84.3.21", "podIP": "10.84.3.21", "startTime": iso(start),
                       "conditions": [{"type": "Ready", "status": "False" if waiting else "True", "lastProbeTime": None,
                                       "lastTransitionTime": iso(last_kill)}],
                       "containerStatuses": [cs], "qosClass": "Guaranteed"}}]}
    cap.write_json(f"pods/{iso(kills[2] + M(3))}.json", pod_json(kills[2] + M(3), 4, False, kills[2]))
    cap.write_json(f"pods/{iso(kills[3] + M(1))}.json", pod_json(kills[3] + M(1), 5, True, kills[3]))
    cap.write_json(f"pods/{iso(now - S(20))}.json", pod_json(now, 5, False, kills[3]))
    uu = gpu_uuids(rng, 8)

    def f(tp, g):
        since = min(((tp - k).total_seconds() for k in kills if tp >= k), default=9e9)
        if since < 170:
            return (0, 0, 70 + rng.random() * 4)
        if since < 420:
            return (0, 2 + rng.random() * 30, 72 + rng.random() * 5)
        return (70 + rng.random() * 29, 58000 + rng.random() * 8000, 380 + rng.random() * 250)
    cap.gpu_polls(pod, uu, now - M(60), now - S(40), 90, f, 81559, na_cells={(20, 3, "util")})
    cap.expect(verdict=["KILL"], status=["ALIVE", "WEDGED", "UNKNOWN"], failing=["B"], must_not_fail=[],
               evidence=["(?i)(OOMKilled|oom[-_ ]?kill|out of memory)"],
               next_steps=["(?i)(memory|offload|RAM|OOM|limit)"],
               why="Gate B host-RAM OOM (seed §3 B-training: 'no OOMKilled in pod state, no oom-killer / Killed in the rank logs, no "
                   "repeated pod restarts'): the pod reads phase Running and the state poll 'running', but the trainer container's "
                   "lastState is terminated OOMKilled/137 with restartCount climbing 4 -> 5 (CrashLoopBackOff between), and the node's "
                   "dmesg shows 'Memory cgroup out of memory: Killed process ... (ray::WorkerDict)' + oom-kill:constraint=CONSTRAINT_MEMCG "
                   "at each restart. Each restart resumes from global_step_40, prints step:41 and dies in step 42 - no progress for "
                   "~2 h. Lean KILL; fix the host-memory budget (param/optimizer offload to CPU on a 512Gi limit) before relaunch.")


# ============================================================== 5. incoherent outputs on a new MoE geometry


def build_incoherent_moe_new_geometry(root: Path):
    cap = Capture(root, "incoherent_moe_new_geometry", 505)
    rng = cap.rng
    now = dt("2026-08-02T09:12:00")
    job = "rl-q3-30b-2507-tp2ep2"
    cap.k8s_running(job, "azure-ndv5", now, now - M(90), now - S(20), pods=3, every_s=90)
    pods = [f"{job}-{i}" for i in range(3)]
    cap.job_json(job, model_info("Qwen3-30B-A3B-Instruct-2507", 30.5, 3.3), h100_nodes(3),
                 {"num_inference_engines": 4, "engine_tp": 2, "engine_ep": 2, "colocated": False,
                  "engine_pods": pods[1:], "policy_pods": pods[:1]},
                 rollout=rollout_info(48, 900), expected_step_s=600, max_retries=1, enforce_eager=False,
                 new=["first TP=2+EP=2 engine geometry for the 2507 MoE", "weight-sync refactor (bucketed broadcast) first launch"])
    l0, l1 = Log(), Log()
    t = now - M(92)
    l0.extend(t, ["+ env | grep -E '^(SKYRL|VLLM|NCCL|TORCH_NCCL)_' | sort", "NCCL_DEBUG=WARN", "SKYRL_DUMP_INFRA_LOG_TO_STDOUT=1",
                  "SKYRL_FUSE_WEIGHTS=1", "SKYRL_W13_RELOAD_BRACKET=0", "TORCH_NCCL_DUMP_ON_TIMEOUT=1", "VLLM_USE_V1=1"])
    P = ray_pfx("skyrl_entrypoint", 4410, "10.7.0.4")
    engs = [(9120 + i, f"10.7.0.{5 + i // 2}") for i in range(4)]
    for pid, ip in engs:
        tt = t + S(70 + rng.random() * 10)
        l1.add(tt, ray_pfx("AsyncVLLMInferenceEngine", pid, ip) + vllm_proc_pfx("EngineCore_0", pid + 300) + vllm_v1(tt, "INFO", "core.py:74",
               "Initializing a V1 LLM engine (v0.10.1.1) with config: model='Qwen/Qwen3-30B-A3B-Instruct-2507', speculative_config=None, "
               "tokenizer='Qwen/Qwen3-30B-A3B-Instruct-2507', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, dtype=torch.bfloat16, "
               "max_seq_len=32768, tensor_parallel_size=2, pipeline_parallel_size=1, data_parallel_size=1, disable_custom_all_reduce=False, "
               "quantization=None, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, seed=0, served_model_name=Qwen3-30B-A3B-Instruct-2507, "
               "enable_prefix_caching=True, chunked_prefill_enabled=True, use_async_output_proc=True, compilation_config={\"level\":3}"))
        l1.add(tt + S(60), ray_pfx("AsyncVLLMInferenceEngine", pid, ip) + vllm_proc_pfx("EngineCore_0", pid + 300) +
               vllm_v1(tt + S(60), "INFO", "gpu_model_runner.py:2708", "Graph capturing finished in 11 secs, took 0.81 GiB"))
        engine_stats_v1(l1, ray_pfx("AsyncVLLMInferenceEngine", pid, ip), now - M(12), now - S(2), rng, every=10,
                        gen=(2100, 3900), run=(22, 40), wait=(0, 1), kv=(8, 30), prefix=(30, 55), file_line="loggers.py:123")
    t = now - M(86)
    l0.add(t, P + loguru(t, "INFO", "skyrl_train.trainer:init_weight_sync_state:918", "Initialized weight sync state for policy model and inference engines."))
    l0.add(t + S(31), P + loguru(t + S(31), "INFO", "skyrl_train.fully_async_trainer:_train_loop:598", "Finished: 'sync_weights_to_inference_engines', time cost: 30.88s"))
    t = now - M(84)
    step = 1
    while True:
        te = skyrl_async_step(l0, P, t, step, buf_s=260 + rng.random() * 60, fwd_s=70 + rng.random() * 15,
                              train_s=200 + rng.random() * 30, sync_s=26 + rng.random() * 5, reward=0.0, pass_at=0.0,
                              total_steps=250, resp_len=3900 + rng.random() * 400)
        if te is None or te > now:
            break
        t, step = te, step + 1
    l0.items = [it for it in l0.items if it[0] <= now]
    RC = [ray_pfx("RolloutCoordinator", p, "10.7.0.4") for p in (5101, 5102, 5103, 5104)]
    for k in range(16):
        tg = now - M(78) + S(280 * k + rng.random() * 60)
        if tg < now:
            generator_group_lines(l0, RC[k % 4], tg, "x", ok=8, exc={"ContextLengthExceededError": 2} if k % 3 == 0 else None)
    cap.write_text("logs/pod_rank0.log", l0.render())
    cap.write_text("logs/pod_rank1.log", l1.render(truncate_last=19))
    for p in pods:
        uu = gpu_uuids(rng, 8)

        def f(tp, g, p=p):
            if p.endswith("-0"):
                return ((85 + rng.random() * 14, 67000 + rng.random() * 5000, 560 + rng.random() * 120) if rng.random() < 0.5
                        else (rng.random() * 5, 52000 + rng.random() * 400, 120 + rng.random() * 15))
            return (55 + rng.random() * 40, 71500 + rng.random() * 400, 300 + rng.random() * 250)
        cap.gpu_polls(p, uu, now - M(20), now - S(20), 120, f, 81559)
    host = "5d1e77c0b9aa"
    for k in range(12):
        task = EASY[k % 4]
        st = now - M(75) + S(300 * k)
        kind = k % 8
        if kind in (0, 4):
            spec = TrialSpec(f"{task[0]}-{2000 + k // 8}", task[1], salad_turns(rng, rng.randint(3, 6)), started=st,
                             agent_s=420 + rng.random() * 200, exc="ContextLengthExceededError", exc_msg="", host=host)
        elif kind == 6:
            spec = TrialSpec(f"{task[0]}-{2000 + k // 8}", task[1], salad_turns(rng, rng.randint(6, 10)), started=st,
                             agent_s=900, reward=0.0, exc="AgentTimeoutError", exc_msg="Agent execution timed out after 900.0 seconds",
                             verifier_stdout=pytest_stdout(0, [("test_output_exists", "AssertionError: /app/users_clean.csv does not exist")], 0.2), host=host)
        else:
            spec = TrialSpec(f"{task[0]}-{2000 + k // 8}", task[1], salad_turns(rng, rng.randint(1, 4)), started=st,
                             agent_s=200 + rng.random() * 300, reward=0.0,
                             verifier_stdout=pytest_stdout(1, [("test_output_exists", "AssertionError: expected output file was not created")], 0.3), host=host)
        write_trial(cap, spec, trials_dir=f"/app/experiments/{job}/trace_jobs", model="Qwen3-30B-A3B-Instruct-2507",
                    api_base="http://10.7.0.4:8000/v1", task_root="/app/data/tasks/extracted_tasks")
    cap.expect(verdict=["KILL"], status=["ALIVE"], failing=["C"], must_not_fail=["restarts"],
               evidence=["(?i)reward", "(?i)(incoheren|salad|repet|garbage|gibberish|nonsens|degenerate|parse|pars(e|ing) error)"],
               next_steps=["(?i)(weight[ _-]?sync|w13|reload|sync)"],
               why="Gate C incoherent generations on a new geometry (seed §4): engines are up and generating at MoE-healthy rates "
                   "and steps advance, but every completed trial has reward 0 (reward/avg_raw_reward 0.0, avg_pass_at_8 0.0 every "
                   "step) and the agent outputs in trajectory.json / all_messages are token salad and repetition loops ('ls ls ls', "
                   "'the the', mixed-script fragments) answered by JSON parse-error prompts, some running into "
                   "ContextLengthExceededError. TP=2+EP=2 and the sync refactor are new_or_untested and SKYRL_W13_RELOAD_BRACKET=0 "
                   "- 'correct tokenizer + salad output = sync/build' -> KILL; fix the FSDP->vLLM weight sync (w13 reload bracket) "
                   "before relaunch.")


# ============================================================== 6. early bring-up, long episodes


def build_early_bringup_long_episode(root: Path):
    cap = Capture(root, "early_bringup_long_episode", 606)
    rng = cap.rng
    start = dt("2026-09-03T07:10:12")
    now = start + M(12) + S(20)
    jid = "118204"
    cap.slurm_running(jid, "rl-q3-8b-131k-tb2", "nebius-soperator", now, start)
    hosts = ["worker-0", "worker-1"]
    cap.job_json(jid, model_info("Qwen3-8B", 8.2), h100_nodes(2),
                 {"num_inference_engines": 4, "engine_tp": 2, "colocated": False, "policy_pods": ["worker-0"], "engine_pods": ["worker-1"]},
                 rollout=rollout_info(16, 3600), expected_step_s=4800, max_retries=1, enforce_eager=False,
                 new="131k context arm, first launch on Nebius")
    out = Log()
    P = ray_pfx("skyrl_entrypoint", 30112)
    t = start + S(6)
    out.extend(t, ["+ srun --overlap -N1 -w worker-0 ray start --head --port=6379 --num-gpus=8 --block &", "Local node IP: 10.0.128.14"])
    t += S(44)
    out.add(t, P + loguru(t, "INFO", "skyrl_train.entrypoints.main_base:_configure_log_level:225", "SkyRL log level set to: INFO"))
    engs = [(41200 + i, "10.0.128.15") for i in range(4)]
    t_up = start + M(5.5)
    for pid, ip in engs:
        EP = ray_pfx("AsyncVLLMInferenceEngine", pid, ip)
        tt = start + M(2) + S(rng.random() * 20)
        out.add(tt, EP + vllm_proc_pfx("EngineCore_DP0", pid + 77) + vllm_v1(tt, "INFO", "core.py:77",
                "Initializing a V1 LLM engine (v0.11.0) with config: model='Qwen/Qwen3-8B', speculative_config=None, tokenizer='Qwen/Qwen3-8B', "
                "skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, dtype=torch.bfloat16, max_seq_len=131072, tensor_parallel_size=2, "
                "pipeline_parallel_size=1, data_parallel_size=1, disable_custom_all_reduce=False, quantization=None, enforce_eager=False, "
                "kv_cache_dtype=auto, device_config=cuda, seed=0, served_model_name=Qwen3-8B, enable_prefix_caching=True, "
                "chunked_prefill_enabled=True, pooler_config=None, compilation_config={\"level\":3,\"cudagraph_mode\":[2,1]}"))
        tt += S(95)
        out.add(tt, EP + vllm_proc_pfx("Worker_TP0", pid + 90) + cr_progress("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)", 10, 0.6))
        out.add(tt + S(8), EP + vllm_proc_pfx("Worker_TP0", pid + 90) + vllm_v1(tt + S(8), "INFO", "gpu_model_runner.py:3480", "Graph capturing finished in 9 secs, took 1.02 GiB"))
        out.add(tt + S(9), EP + vllm_proc_pfx("EngineCore_DP0", pid + 77) + vllm_v1(tt + S(9), "INFO", "core.py:210", "init engine (profile, create kv cache, warmup model) took 88.21 seconds"))
        engine_stats_v1(out, EP, t_up + S(60), now - S(3), rng, every=10, gen=(1500, 2800), run=(6, 10), wait=(0, 0),
                        kv=(10, 45), prefix=(40, 80), file_line="loggers.py:127")
    t = start + M(4.2)
    out.add(t, P + loguru(t, "INFO", "skyrl_train.trainer:init_weight_sync_state:918", "Initialized weight sync state for policy model and inference engines."))
    out.add(t + S(40), P + loguru(t + S(40), "INFO", "skyrl_train.fully_async_trainer:_train_loop:598", "Finished: 'sync_weights_to_inference_engines', time cost: 39.77s"))
    RC = [ray_pfx("RolloutCoordinator", p) for p in (30901, 30902, 30903, 30904)]
    for i, rc in enumerate(RC):
        tt = start + M(5.3) + S(i)
        out.add(tt, rc + loguru(tt, "INFO", "examples.terminal_bench.rollout_coordinator:__init__:88", "[RolloutCoordinator] scaled n_concurrent_trials 16 -> 4 (// 4)"))
        out.add(tt + S(0.2), rc + loguru(tt + S(0.2), "INFO", "examples.terminal_bench.terminal_bench_generator:__init__:247",
                "TerminalBenchGenerator initialized with HarborConfigBuilder. Exposed fields: ['name', 'max_episodes', 'override_timeout_sec']. "
                "Retry config: max_retries=3, backoff=60-600s. Concurrent trials: 4. Reward shaping: enabled=False, shaper=None. Error classification: enabled=True"))
        out.add(tt + S(1), rc + loguru(tt + S(1), "INFO", "examples.terminal_bench.terminal_bench_generator:generate:713", "Starting batch generation for 4 trials (mode=training)"))
    t = start + M(5.8)
    skyrl_async_step(out, P, t, 1, buf_s=0, fwd_s=0, train_s=0, sync_s=0, reward=0, pass_at=0, total_steps=60,
                     stop_after="wait_for_generation_buffer")
    out.add(now - S(30), P + tqdm_bar("Generation Buffer Progress", 0, 6, "06:31", "?", "?it/s"))
    cap.write_text(f"logs/slurm-{jid}.out", out.render(truncate_last=52))
    cap.write_text(f"logs/slurm-{jid}.err", "wandb: Tracking run with wandb version 0.19.11\nwandb: Syncing run rl-q3-8b-131k-tb2\n"
                   "wandb: \U0001F680 View run at https://wandb.ai/ot-agent/marin-rl/runs/k1x9a0p2\n")
    for h in hosts:
        uu = gpu_uuids(rng, 8)

        def f(tp, g, h=h):
            if tp < start + M(3):
                return (0, 4 + rng.random() * 200, 70 + rng.random() * 5)
            if h == "worker-0":
                return (0, 39800 + rng.random() * 200, 112 + rng.random() * 8)
            return ((45 + rng.random() * 45, 72000 + rng.random() * 300, 260 + rng.random() * 200) if tp > t_up
                    else (0, 70000, 115))
        cap.gpu_polls(h, uu, start + M(1), now - S(15), 30, f, 81559,
                      na_cells={(5, 7, "power")} if h == "worker-1" else set())
    host = "c0ffee12ab34"
    for k in range(16):
        task = HARD[k % 3]
        st = t_up + S(10 + 8 * (k // 4) + rng.random() * 5)
        elapsed = (now - st).total_seconds()
        n = max(1, min(int(elapsed / 150), 4))
        spec = TrialSpec(f"{task[0]}-{k // 8:02d}", task[1], hard_turns(rng, host, task, n), started=st, agent_s=elapsed * 0.9,
                         completed=False, host=host)
        write_trial(cap, spec, trials_dir=f"/mnt/shared/rl/{jid}/trace_jobs", model="Qwen3-8B", api_base="http://10.0.128.14:8000/v1",
                    task_root="/mnt/shared/tasks/tb2-long", agent_timeout=3600.0, verifier_timeout=600.0, max_input_tokens=131072)
    cap.expect(verdict=["NO-KILL"], status=["ALIVE", "UNKNOWN"], failing=[], must_not_fail=["A", "B", "C", "restarts"],
               evidence=["(?i)(trial|rollout)"],
               why="Early bring-up on a long-episode arm (seed §4/§5): the SLURM leg has been RUNNING 12 min, expected_episode_s is "
                   "3600 (131k context, 3600 s agent timeout). All 4 engines initialised with CUDA graphs and print 'Avg generation "
                   "throughput' 1.5-2.8k tok/s with Waiting 0; 16 trial dirs exist with 1-4 coherent agent turns in trajectory.json but "
                   "0 result.json - 'At +15/30 min a 131k arm legitimately has ZERO completed ... report that as rollouts executing, "
                   "0 completed yet'. The trainer is in its first wait_for_generation_buffer and the policy GPUs idle with weights "
                   "resident, as expected before the first batch. 'NO-KILL if ... 0 completed trials at +15 min on a long-episode arm'.")


# ============================================================== 7. transient HF 503 on attempt 0, attempt 1 healthy


def build_transient_hf_restart_recovered(root: Path):
    cap = Capture(root, "transient_hf_restart_recovered", 707)
    rng = cap.rng
    now = dt("2026-05-20T18:05:00")
    job = "rl-q3-8b-pym2t-gke"
    a0_start, a0_end = now - M(128), now - M(121)
    a1_start = now - M(118)
    err = ("huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file on the Hub and we cannot "
           "find the requested files in the local cache. Please check your connection and try again or make sure your Internet "
           "connection is on.")
    attempts = [{"attempt": 0, "terminal_state": "failed", "exit_code": 1, "ended_at": iso(a0_end), "error": err}]
    cap.capture_json(job, "gke-a3", "kubernetes", now)
    rows = state_rows(a0_start + S(30), a0_end - S(20), 60, rng, pods=2, attempt=0)
    rows += state_rows(a0_end + S(10), a1_start, 60, rng, pods=0, attempt=1, attempts=attempts, state="pending")
    rows += state_rows(a1_start + S(40), now - S(30), 180, rng, pods=2, attempt=1, attempts=attempts)
    cap.state_jsonl(rows)
    pods = [f"{job}-0-g1", f"{job}-1-g1"]
    cap.job_json(job, model_info("Qwen3-8B", 8.2), h100_nodes(2),
                 {"num_inference_engines": 4, "engine_tp": 2, "colocated": False, "policy_pods": pods[:1], "engine_pods": pods[1:]},
                 rollout=rollout_info(48, 900), expected_step_s=900, max_retries=1, enforce_eager=False,
                 new="pymethods2test v3 task pool")
    # finelog spanning both attempts (scheduler log): attempt 0 traceback
    fl = Log()
    P0 = ray_pfx("skyrl_entrypoint", 7012, "10.128.0.41")
    t = a0_start + S(50)
    fl.add(t, P0 + loguru(t, "INFO", "skyrl_train.entrypoints.main_base:_configure_log_level:225", "SkyRL log level set to: INFO"))
    t = a0_end - S(15)
    tb = [
        "Traceback (most recent call last):",
        '  File "/app/.venv/lib/python3.12/site-packages/huggingface_hub/utils/_http.py", line 409, in hf_raise_for_status',
        "    response.raise_for_status()",
        '  File "/app/.venv/lib/python3.12/site-packages/requests/models.py", line 1024, in raise_for_status',
        "    raise HTTPError(http_error_msg, response=self)",
        "requests.exceptions.HTTPError: 503 Server Error: Service Unavailable for url: https://huggingface.co/api/models/Qwen/Qwen3-8B/revision/main",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "/app/.venv/lib/python3.12/site-packages/huggingface_hub/_snapshot_download.py", line 165, in snapshot_download',
        "    repo_info = api.repo_info(repo_id=repo_id, repo_type=repo_type, revision=revision)",
        "  ...",
        "huggingface_hub.errors.HfHubHTTPError: 503 Server Error: Service Unavailable for url: https://huggingface.co/api/models/Qwen/Qwen3-8B/revision/main",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "/app/skyrl-train/skyrl_train/entrypoints/main_base.py", line 318, in main',
        "    exp = BasePPOExp(cfg)",
        '  File "/app/skyrl-train/skyrl_train/entrypoints/main_base.py", line 102, in __init__',
        "    self.tokenizer = self.get_tokenizer()",
        '  File "/app/.venv/lib/python3.12/site-packages/huggingface_hub/_snapshot_download.py", line 235, in snapshot_download',
        "    raise LocalEntryNotFoundError(",
        err,
    ]
    for i, ln in enumerate(tb):
        fl.add(t + S(0.001 * i), P0 + ln)
    fl.add(a0_end, f"{a0_end.strftime('%Y-%m-%d %H:%M:%S')} iris finelog: task {job}/0 exited code=1 (attempt 0/1), rescheduling")
    fl.add(a1_start, f"{a1_start.strftime('%Y-%m-%d %H:%M:%S')} iris finelog: task {job}/0 started (attempt 1/1) pods={pods[0]},{pods[1]}")
    cap.write_text("logs/finelog.log", fl.render())
    # attempt 1 pod logs
    l0, l1 = Log(), Log()
    P = ray_pfx("skyrl_entrypoint", 6987, "10.128.0.52")
    t = a1_start + S(50)
    l0.add(t, P + loguru(t, "INFO", "skyrl_train.entrypoints.main_base:_configure_log_level:225", "SkyRL log level set to: INFO"))
    l0.add(t + S(200), P + loguru(t + S(200), "INFO", "skyrl_train.trainer:init_weight_sync_state:918", "Initialized weight sync state for policy model and inference engines."))
    t = a1_start + M(6)
    step = 1
    while True:
        te = skyrl_async_step(l0, P, t, step, buf_s=420 + rng.random() * 200, fwd_s=110 + rng.random() * 20,
                              train_s=280 + rng.random() * 30, sync_s=30 + rng.random() * 5, reward=round(0.3 + rng.random() * 0.2, 6),
                              pass_at=round(0.55 + rng.random() * 0.3, 6), total_steps=160)
        if te is None or te > now:
            break
        t, step = te, step + 1
    l0.items = [it for it in l0.items if it[0] <= now]
    RC = [ray_pfx("RolloutCoordinator", p, "10.128.0.52") for p in (8101, 8102, 8103, 8104)]
    for k in range(22):
        tg = a1_start + M(8) + S(290 * k + rng.random() * 60)
        if tg < now:
            generator_group_lines(l0, RC[k % 4], tg, "x", ok=8 if k % 4 else 7,
                                  exc={"AgentTimeoutError": 1} if k % 4 == 0 else None)
    cap.write_text("logs/pod_rank0.log", l0.render())
    for i in range(4):
        pid, ip = 55100 + i, "10.128.0.53"
        engine_stats_v1(l1, ray_pfx("AsyncVLLMInferenceEngine", pid, ip), now - M(12), now - S(2), rng, every=10,
                        gen=(1900, 3800), run=(18, 34), wait=(0, 1), kv=(12, 40), prefix=(50, 70), file_line="loggers.py:127")
    cap.write_text("logs/pod_rank1.log", l1.render(truncate_last=31, head_cut=133))
    for p in pods:
        uu = gpu_uuids(rng, 8)

        def f(tp, g, p=p):
            if p == pods[1]:
                return (50 + rng.random() * 45, 70200 + rng.random() * 300, 280 + rng.random() * 250)
            return ((92 + rng.random() * 8, 64000 + rng.random() * 6000, 600 + rng.random() * 80) if rng.random() < 0.4
                    else (0 + rng.random() * 3, 41000 + rng.random() * 300, 115 + rng.random() * 10))
        cap.gpu_polls(p, uu, now - M(30), now - S(20), 120, f, 81559, na_cells={(9, 0, "power")})
    host = "2b7c9e10aa51"
    for k in range(12):
        task = EASY[(k + 3) % 4]
        st = now - M(60) + S(250 * k)
        good = rng.random() < 0.5
        done = k < 9
        turns = coherent_turns(rng, host, task, complete=good)
        spec = TrialSpec(f"{task[0]}-{3100 + k // 4}", task[1], turns if done else turns[:1], started=st, agent_s=240 + rng.random() * 400,
                         reward=1.0 if good else 0.0, completed=done, host=host,
                         verifier_stdout=pytest_stdout(5 if good else 3, [] if good else [("test_contract", "AssertionError: peek on empty stack did not raise IndexError")], 0.3))
        write_trial(cap, spec, trials_dir=f"/app/experiments/{job}/trace_jobs", model="Qwen3-8B", api_base="http://10.128.0.52:8000/v1",
                    task_root="/app/data/tasks/extracted_tasks")
    cap.expect(verdict=["NO-KILL"], status=["ALIVE"], failing=[], must_not_fail=["A", "B", "C", "restarts"],
               evidence=["(?i)(LocalEntryNotFoundError|503|hugging ?face|transient)"],
               why="Restart burned on a genuine transient (seed §0/§5): state.jsonl attempts[0] failed with "
                   "huggingface_hub LocalEntryNotFoundError after a '503 Server Error: Service Unavailable' from huggingface.co "
                   "(finelog traceback), 1/1 retries used. Attempt 1 is healthy: steps advance every ~15 min with non-zero rewards, "
                   "4 engines generate 1.9-3.8k tok/s with Waiting ~0, trials complete with ~50% reward. 'A restart burned on a "
                   "genuine transient the run has since recovered from is NOT a kill' and 'an HF-weight-resolution flake that the "
                   "--max-retries/retry-wrapper is catching' -> NO-KILL; watch closely since no retries remain.")


# ============================================================== 8. NCCL watchdog (torch 2.2) on a plain trainer, frozen


def build_nccl_watchdog_torch22_wedged(root: Path):
    cap = Capture(root, "nccl_watchdog_torch22_wedged", 808)
    rng = cap.rng
    now = dt("2025-02-14T04:20:00")
    jid = "33519027"
    start = now - M(132)
    cap.slurm_running(jid, "orlhf-llama3-8b-ppo", "perlmutter", now, start)
    cap.job_json(jid, model_info("Meta-Llama-3-8B-Instruct", 8.0), ("A100-SXM4-80GB", 4, 4),
                 {"num_inference_engines": 2, "engine_tp": 1, "colocated": False},
                 expected_step_s=600, max_retries=0, new="first 4-node ZeRO-3 run (torch 2.2.1 / vLLM 0.4.1 stack)")
    out = Log()
    PT = ray_pfx("PPOTrainer", 1522077, color=False)
    actor_pids = [(1522301 + i, None if i < 4 else f"10.249.{i // 4}.{20 + i // 4}") for i in range(8)]
    eng = [(1793012 + i, "10.249.3.23") for i in range(2)]
    t = start + S(30)
    out.add(t, ray_py(t, "INFO", "worker.py:1724", "Connecting to existing Ray cluster at address: 10.249.0.20:6379..."))
    for pid, ip in eng:
        P = ray_pfx("LLMRayActor", pid, ip, color=False)
        tt = t + S(60 + rng.random() * 10)
        out.add(tt, P + vllm_v0(tt, "INFO", "llm_engine.py:100",
                "Initializing an LLM engine (v0.4.1) with config: model='meta-llama/Meta-Llama-3-8B-Instruct', speculative_config=None, "
                "tokenizer='meta-llama/Meta-Llama-3-8B-Instruct', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
                "tokenizer_revision=None, trust_remote_code=True, dtype=torch.bfloat16, max_seq_len=4096, download_dir=None, "
                "load_format=LoadFormat.AUTO, tensor_parallel_size=1, disable_custom_all_reduce=False, quantization=None, enforce_eager=False, "
                "kv_cache_dtype=auto, quantization_param_path=None, device_config=cuda, decoding_config=DecodingConfig(guided_decoding_backend='outlines'), seed=0)"))
        out.add(tt + S(30), P + vllm_v0(tt + S(30), "INFO", "model_runner.py:1051", "Graph capturing finished in 9 secs."))
    # steps every ~10 min; last at now-60 min
    step_times = [start + M(12) + M(10.1) * i for i in range(13)]
    step_times = [s for s in step_times if s <= now - M(60)]
    last_step = len(step_times)
    for i, te in enumerate(step_times):
        gen0 = te - S(600) + S(20)
        for pid, ip in eng:
            engine_stats_v1(out, ray_pfx("LLMRayActor", pid, ip, color=False), gen0, gen0 + S(150), rng, every=5, gen=(1200, 2300),
                            run=(60, 128), wait=(0, 20), kv=(20, 70), fmt="v0", file_line="metrics.py:229")
        out.add(te, PT + vllm_v0(te, "INFO", "ppo_trainer.py:206",
                f"\u2728 Global step {i + 1}: {{'policy_loss': {rng.uniform(-0.01, 0.01):.4f}, 'critic_loss': {0.05 + rng.random() * 0.05:.4f}, "
                f"'reward': {0.41 + rng.random() * 0.08:.4f}, 'kl': 0.00{rng.randint(1, 9)}, 'response_length': {512 + rng.random() * 60:.1f}, "
                f"'timing/make_experience': {300 + rng.random() * 30:.1f}, 'timing/ppo_train': {240 + rng.random() * 30:.1f}, "
                f"'timing/broadcast': {11 + rng.random() * 3:.1f}, 'timing/step_total': {598 + rng.random() * 20:.1f}}}"))
    # the next step: generation, then the ZeRO-3 grad-overflow all_reduce hangs (rank 5 never joins)
    gen0 = step_times[-1] + S(30)
    for pid, ip in eng:
        engine_stats_v1(out, ray_pfx("LLMRayActor", pid, ip, color=False), gen0, gen0 + S(150), rng, every=5, gen=(1200, 2300),
                        run=(60, 128), wait=(0, 20), kv=(20, 70), fmt="v0", file_line="metrics.py:229")
    t_hang = gen0 + S(330)
    t_to = t_hang + S(600.081)
    for r, (pid, ip) in enumerate(actor_pids):
        if r == 5:
            continue
        P = ray_pfx("ActorModelRayActor", pid, ip, color=False)
        out.add(t_to + S(r * 0.004), P + f"[rank{r}]:[E ProcessGroupNCCL.cpp:523] [Rank {r}] Watchdog caught collective operation timeout: "
                f"WorkNCCL(SeqNum=184213, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for {600081 + r * 3} milliseconds before timing out.")
    err = Log()
    err.add(start, "+ export TORCH_NCCL_ASYNC_ERROR_HANDLING=0 NCCL_DEBUG=WARN")
    err.add(start + S(200), "\r".join(tqdm_bar("Episode [1/1]", k, 120, "00:00", "20:00:00", "600.00s/it") for k in range(0, last_step + 1)))
    err.add(start + S(100), "wandb: Tracking run with wandb version 0.16.6")
    err.add(start + S(101), "wandb: Syncing run orlhf-llama3-8b-ppo-pm")
    cap.write_text(f"logs/slurm-{jid}.out", out.render())
    cap.write_text(f"logs/slurm-{jid}.err", err.render())
    nodes = ["nid001024", "nid001025", "nid001032", "nid001033"]
    for ni, n in enumerate(nodes):
        uu = gpu_uuids(rng, 4)

        def f(tp, g, ni=ni):
            if ni == 3:  # engines idle, weights + KV resident
                return (0, 71200 + rng.random() * 100, 62 + rng.random() * 4)
            if ni == 1 and g == 1:  # rank 5: straggler stuck elsewhere
                return (0, 60211 + rng.random() * 10, 88 + rng.random() * 3)
            return (100, 58300 + rng.random() * 50, 92 + rng.random() * 6)  # NCCL spin kernel: 100% util, idle power
        cap.gpu_polls(n, uu, now - M(35), now - S(40), 120, f, 81920, na_cells={(4, 2, "power")} if ni == 0 else set())
    cap.expect(verdict=["KILL"], status=["WEDGED"], failing=["A"], must_not_fail=["restarts"],
               evidence=[
     "(?i)Watchdog caught collective operation timeout",
     "(?i)((trainer|driver|step|progress)\\b[^\\n]{0,120}(stale|frozen|no progress|not advanc|no new|silent|hung|stuck|\\d+(\\.\\d+)? ?(min|minutes|h|hours)\\b))",
 ],
               next_steps=["(?i)(nccl|collective|watchdog|hang|dump|flight|straggler|rank)"],
               why="Gate A WEDGED (seed §2): sacct says RUNNING, but the OpenRLHF trainer's last '\u2728 Global step' line is ~60 min "
                   "old against a ~10 min cadence; the next step generated, then 7 of 8 DeepSpeed ranks logged the torch 2.2 "
                   "'[rankN]:[E ProcessGroupNCCL.cpp:523] [Rank N] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=184213, "
                   "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds' (rank 5 never joined); "
                   "with TORCH_NCCL_ASYNC_ERROR_HANDLING=0 nothing tears the gang down, so it holds 16 GPUs at 100% util / ~90 W "
                   "(NCCL spin) doing nothing and the engines sit idle. A real hang signature + stale-beyond-cadence logs -> KILL; "
                   "debug the rank-5 straggler / collective mismatch before relaunch.")


# ============================================================== 9. ambiguous: trainer silent 40 min, no signature


def build_ambiguous_silent_trainer(root: Path):
    cap = Capture(root, "ambiguous_silent_trainer", 909)
    rng = cap.rng
    now = dt("2026-12-02T22:50:00")
    job = "rl-q3-14b-nl2bash-oci"
    cap.k8s_running(job, "oci", now, now - M(80), now - S(30), pods=2)
    pods = [f"{job}-0-8xq2p-0", f"{job}-1-8xq2p-0"]
    cap.job_json(job, model_info("Qwen3-14B", 14.8), h100_nodes(2),
                 {"num_inference_engines": 4, "engine_tp": 2, "colocated": False, "policy_pods": pods[:1], "engine_pods": pods[1:]},
                 rollout=rollout_info(48, 900), expected_step_s=900, max_retries=1, enforce_eager=False,
                 new="14B on the OCI pool, seqlen-balanced micro-batching")
    l0, l1 = Log(), Log()
    P = ray_pfx("skyrl_entrypoint", 5120, "10.0.10.4")
    t = now - M(180)
    step = 3
    frozen = False
    while True:
        te = skyrl_async_step(l0, P, t, step, buf_s=330 + rng.random() * 60, fwd_s=100 + rng.random() * 10,
                              train_s=360 + rng.random() * 40, sync_s=35, reward=round(0.22 + rng.random() * 0.12, 6),
                              pass_at=round(0.5 + rng.random() * 0.2, 6), total_steps=200,
                              stop_after="policy_train" if t > now - M(50) else None)
        if te is None:
            frozen = True
            break
        t, step = te, step + 1
    assert frozen
    # drop anything after now, and make sure the policy_train Start sits ~40 min before now
    last_start = max(it[0] for it in l0.items)
    shift = (now - M(40)) - last_start
    l0.items = [(a + shift, b, c) for a, b, c in l0.items]
    RC = [ray_pfx("RolloutCoordinator", p, "10.0.10.4") for p in (5501, 5502, 5503, 5504)]
    for k in range(30):
        tg = now - M(175) + S(340 * k + rng.random() * 60)
        if tg < now:
            generator_group_lines(l0, RC[k % 4], tg, "x", ok=8 if k % 5 else 7, color=True)
    cap.write_text("logs/pod_rank0.log", l0.render())
    for i in range(4):
        pid, ip = 6100 + i, "10.0.10.5"
        engine_stats_v1(l1, ray_pfx("AsyncVLLMInferenceEngine", pid, ip, color=False) + f"(EngineCore_DP0 pid={pid + 40}) ",
                        now - M(12), now - S(2), rng, every=10, gen=(1300, 2600), run=(16, 30), wait=(0, 1), kv=(15, 45),
                        prefix=(55, 70), file_line="loggers.py:248")
    cap.write_text("logs/pod_rank1.log", l1.render(truncate_last=11, head_cut=201))
    for p in pods:
        uu = gpu_uuids(rng, 8)

        def f(tp, g, p=p):
            if p == pods[1]:
                return (45 + rng.random() * 50, 71000 + rng.random() * 300, 260 + rng.random() * 260)
            return (97 + rng.random() * 3, 74000 + rng.random() * 2500, 560 + rng.random() * 110)
        cap.gpu_polls(p, uu, now - M(45), now - S(20), 150, f, 81559,
                      na_cells={(30, 4, "power")} if p == pods[0] else set())
    host = "77aa01c3d9e2"
    for k in range(12):
        task = EASY[k % 4]
        st = now - M(70) + S(320 * k)
        done = st + M(14) < now
        good = rng.random() < 0.4
        turns = coherent_turns(rng, host, task, complete=good)
        spec = TrialSpec(f"{task[0]}-{4100 + k // 4}", task[1], turns if done else turns[:1], started=st, agent_s=300 + rng.random() * 300,
                         reward=1.0 if good else 0.0, completed=done, host=host,
                         verifier_stdout=pytest_stdout(3, [] if good else [("test_output", "AssertionError: 2 paths missing")], 0.2))
        write_trial(cap, spec, trials_dir=f"/app/experiments/{job}/trace_jobs", model="Qwen3-14B", api_base="http://10.0.10.4:8000/v1",
                    task_root="/app/data/tasks/extracted_tasks")
    cap.expect(verdict=["NO-KILL"], status=["ALIVE", "UNKNOWN"], failing=[], must_not_fail=["A", "B", "C", "restarts"],
               evidence=["(?i)(policy_train|trainer|step)"],
               why="Genuine ambiguity (seed §5 'Default to NO-KILL + escalate on genuine ambiguity'): the trainer's last line is "
                   "\"Started: 'policy_train'\" 40 min ago against a ~15 min step cadence (policy_train usually ~6 min) - "
                   "stale beyond cadence - but there is no hang signature anywhere (no NCCL watchdog, no Ray worker death, no "
                   "traceback), the policy GPUs read 97-100% util at 560-670 W (computing, not an NCCL spin), engines keep "
                   "generating with Waiting ~0 and trials keep completing with non-zero rewards. WEDGED needs 'a real hang "
                   "signature + stale-beyond-cadence logs'; without one this is NO-KILL, low confidence, escalate (expected "
                   "escalate=true), and flip to KILL if a watchdog/worker death appears or the silence passes the 30 min "
                   "watchdog window again.")


# ============================================================== 10. SLURM terminal: same config ValueError on both legs


def build_slurm_terminal_config_error(root: Path):
    cap = Capture(root, "slurm_terminal_config_error", 1010)
    rng = cap.rng
    now = dt("2026-01-22T16:40:00")
    ids = ["9124410", "9124411", "9124412"]
    name = "grpo-q3-14b-dapo"
    cap.capture_json(ids[1], "leonardo", "slurm", now)
    cap.write_text("sacct.txt", "\n".join([
        SACCT_HEADER,
        f"{ids[0]}|{name}|FAILED|2026-01-22T14:02:11|2026-01-22T14:09:43|1:0|0",
        f"{ids[1]}|{name}|FAILED|2026-01-22T14:10:02|2026-01-22T14:17:29|1:0|0",
        f"{ids[2]}|{name}|CANCELLED by 30112|None|2026-01-22T14:31:07|0:0|0",
    ]) + "\n")
    cap.job_json(ids[1], model_info("Qwen3-14B", 14.8), ("A100-SXM-64GB", 4, 4),
                 {"num_inference_engines": 8, "engine_tp": 2, "colocated": True},
                 max_retries=1, new="rollout.n=5 with micro batch 5 (new batch geometry)")
    for jid, st in ((ids[0], dt("2026-01-22T14:02:11")), (ids[1], dt("2026-01-22T14:10:02"))):
        out, err = Log(), Log()
        out.extend(st + S(5), ["+ srun --nodes=1 --ntasks=1 -w lrdn2201 ray start --head --port=6379 --num-gpus=4 --block &",
                               "Local node IP: 10.12.22.1", "", "--------------------", "Ray runtime started.", "--------------------"])
        t = st + S(60)
        out.add(t, ray_py(t, "INFO", "worker.py:1879", f"Connected to Ray cluster. View the dashboard at {ESC}[1m{ESC}[32m127.0.0.1:8265 {ESC}[39m{ESC}[22m"))
        TR = ray_pfx("TaskRunner", 77102 + int(jid[-1]), color=False)
        out.add(t + S(20), TR + "{'actor_rollout_ref': {'actor': {'ppo_mini_batch_size': 48, 'ppo_micro_batch_size_per_gpu': 5, ...}, 'rollout': {'n': 5, ...}}, ...}")
        t_err = st + M(7) + S(20)
        err.extend(t_err, [
            "Error executing job with overrides: ['algorithm.adv_estimator=grpo', 'data.train_batch_size=96', 'actor_rollout_ref.rollout.n=5', "
            "'actor_rollout_ref.actor.ppo_mini_batch_size=48', 'actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=5', 'trainer.nnodes=4', 'trainer.n_gpus_per_node=4']",
            "Traceback (most recent call last):",
            '  File "/leonardo_work/AIFAC_L01_028/verl/verl/trainer/main_ppo.py", line 42, in main',
            "    run_ppo(config)",
            '  File "/leonardo_work/AIFAC_L01_028/verl/verl/trainer/main_ppo.py", line 99, in run_ppo',
            "    ray.get(runner.run.remote(config))",
            '  File "/leonardo_work/AIFAC_L01_028/venv/lib/python3.11/site-packages/ray/_private/worker.py", line 2822, in get',
            "    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)",
            '  File "/leonardo_work/AIFAC_L01_028/venv/lib/python3.11/site-packages/ray/_private/worker.py", line 930, in get_objects',
            "    raise value.as_instanceof_cause()",
            f"ray.exceptions.RayTaskError(ValueError): {ESC}[36mray::TaskRunner.run(){ESC}[39m (pid={77102 + int(jid[-1])}, ip=10.12.22.1, "
            f"actor_id={cap.hexid(32)}, repr=<main_ppo.TaskRunner object at 0x7f1e2c3a9f90>)",
            '  File "/leonardo_work/AIFAC_L01_028/verl/verl/trainer/main_ppo.py", line 318, in run',
            "    trainer = RayPPOTrainer(",
            '  File "/leonardo_work/AIFAC_L01_028/verl/verl/trainer/ppo/ray_trainer.py", line 341, in __init__',
            "    self._validate_config()",
            '  File "/leonardo_work/AIFAC_L01_028/verl/verl/trainer/ppo/ray_trainer.py", line 512, in _validate_config',
            "    raise ValueError(",
            "ValueError: [actor] ppo_mini_batch_size * rollout.n // world_size (15) must be divisible by ppo_micro_batch_size_per_gpu (5 "
            "-> got remainder 0 of 3 micro-batches), but the sequence-balanced partition requires an even micro-batch count; got 3",
            "",
            "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
            "srun: error: lrdn2201: task 0: Exited with exit code 1",
        ])
        cap.write_text(f"logs/{jid}.out", out.render())
        cap.write_text(f"logs/{jid}.err", err.render())
    uu = gpu_uuids(rng, 4)
    end = dt("2026-01-22T14:17:29")
    cap.gpu_polls("lrdn2201", uu, end - M(6), end - S(30), 60,
                  lambda tp, g: (0, 4 + rng.random() * 500, 61 + rng.random() * 4),
                  65536, na_cells={(2, 1, "power")})
    cap.expect(verdict=["NO-KILL"], status=["TERMINAL"], failing=["A"], must_not_fail=[],
               evidence=["ValueError[^\\n]{0,200}(micro|batch)"],
               next_steps=["(?i)(fix|config|batch|relaunch|micro)"],
               why="Gate A TERMINAL (seed §2 'DEAD / TERMINAL -> there's nothing to kill; report TERMINAL + the root-cause "
                   "traceback + whether it's transient or deterministic'): sacct shows both chain legs FAILED with ExitCode 1:0 and "
                   "the pending successor 'CANCELLED by 30112' with Start None - nothing is running. Both legs' .err carry the same "
                   "Hydra 'Error executing job with overrides' + RayTaskError(ValueError) from verl's _validate_config about the "
                   "micro-batch geometry: deterministic, fix ppo_micro_batch_size_per_gpu / rollout.n before relaunch. NO-KILL "
                   "(nothing to kill); stale GPU polls are expected.")


# ============================================================== 11. all-zero rewards, coherent attempts on hard tasks


def build_hard_tasks_zero_reward_coherent(root: Path):
    cap = Capture(root, "hard_tasks_zero_reward_coherent", 1111)
    rng = cap.rng
    now = dt("2026-06-09T13:25:00")
    job = "rl-q3-8b-tbhard-crusoe"
    cap.k8s_running(job, "crusoe", now, now - M(70), now - S(30), pods=2)
    pods = [f"{job}-0", f"{job}-1"]
    cap.job_json(job, model_info("Qwen3-8B", 8.2), h100_nodes(2),
                 {"num_inference_engines": 4, "engine_tp": 2, "colocated": False, "policy_pods": pods[:1], "engine_pods": pods[1:]},
                 rollout=rollout_info(32, 1800), expected_step_s=1500, max_retries=1, enforce_eager=False,
                 new="first run on the tb-hard systems-debugging split")
    l0, l1 = Log(), Log()
    P = ray_pfx("skyrl_entrypoint", 3301, "10.3.0.8")
    t = now - M(118)
    step = 1
    while True:
        te = skyrl_async_step(l0, P, t, step, buf_s=900 + rng.random() * 200, fwd_s=110 + rng.random() * 20,
                              train_s=290 + rng.random() * 30, sync_s=30, reward=0.0, pass_at=0.0, total_steps=100,
                              resp_len=9800 + rng.random() * 1500)
        if te is None or te > now:
            break
        t, step = te, step + 1
    l0.items = [it for it in l0.items if it[0] <= now]
    RC = [ray_pfx("RolloutCoordinator", p, "10.3.0.8") for p in (3401, 3402, 3403, 3404)]
    for k in range(16):
        tg = now - M(100) + S(370 * k + rng.random() * 60)
        if tg < now:
            generator_group_lines(l0, RC[k % 4], tg, "x", ok=8, exc=None)
            l0.add(tg + S(0.3), RC[k % 4] + loguru(tg + S(0.3), "INFO", "examples.terminal_bench.terminal_bench_generator:_process_trial_result:1269",
                   f"Trajectory TrajectoryID(instance_id='{HARD[k % 3][0]}-{k % 5:02d}', repetition_id={k % 8}): AgentTimeoutError classified as PASSTHROUGH, using verifier reward"))
    cap.write_text("logs/pod_rank0.log", l0.render())
    for i in range(4):
        pid, ip = 3600 + i, "10.3.0.9"
        engine_stats_v1(l1, ray_pfx("AsyncVLLMInferenceEngine", pid, ip), now - M(12), now - S(2), rng, every=10,
                        gen=(1800, 3500), run=(14, 30), wait=(0, 1), kv=(20, 55), prefix=(60, 80), file_line="loggers.py:127")
    cap.write_text("logs/pod_rank1.log", l1.render(truncate_last=17, head_cut=95))
    for p in pods:
        uu = gpu_uuids(rng, 8)

        def f(tp, g, p=p):
            if p == pods[1]:
                return (55 + rng.random() * 40, 70500 + rng.random() * 300, 300 + rng.random() * 220)
            return ((93 + rng.random() * 7, 66000 + rng.random() * 5000, 590 + rng.random() * 90) if rng.random() < 0.3
                    else (rng.random() * 3, 40100 + rng.random() * 200, 112 + rng.random() * 10))
        cap.gpu_polls(p, uu, now - M(30), now - S(20), 120, f, 81559,
                      na_cells={(11, 2, "util")} if p == pods[0] else set())
    host = "4e8d2a7c1b90"
    for k in range(10):
        task = HARD[k % 3]
        st = now - M(95) + S(400 * k)
        timeout = k % 4 == 3
        n = rng.randint(7, 10)
        spec = TrialSpec(f"{task[0]}-{k % 5:02d}", task[1], hard_turns(rng, host, task, n), started=st,
                         agent_s=1800 if timeout else 900 + rng.random() * 800, reward=0.0,
                         exc="AgentTimeoutError" if timeout else None,
                         exc_msg="Agent execution timed out after 1800.0 seconds" if timeout else "",
                         verifier_stdout=hard_verifier(task, rng), completed=st + M(31) < now, host=host)
        write_trial(cap, spec, trials_dir=f"/app/experiments/{job}/trace_jobs", model="Qwen3-8B", api_base="http://10.3.0.8:8000/v1",
                    task_root="/app/data/tasks/tb-hard", agent_timeout=1800.0, verifier_timeout=300.0)
    cap.expect(verdict=["NO-KILL"], status=["ALIVE"], failing=[], must_not_fail=["A", "B", "C", "restarts"],
               evidence=["(?i)reward"],
               why="All-zero rewards with coherent agents (seed §4: 'Agent output is COHERENT but wrong / runs out of turns => tasks "
                   "genuinely hard or the harness/verifier mis-set - NOT necessarily a kill'; Gate C PASS includes 'coherent "
                   "multi-turn attempts on genuinely-hard tasks even at low pass-rate'): every finished trial on the tb-hard split "
                   "scores 0, but each runs 8-16 sensible turns (reading code, running the failing test, editing, re-running), the "
                   "verifier returns real pytest results (2 failed / 9 passed with concrete assertion messages) and AgentTimeoutError "
                   "trials are passthrough with a verifier reward. Engines and trainer are healthy. NO-KILL; watch for the first "
                   "non-zero reward and consider an easier curriculum mix.")


# ============================================================== 12. verifier timeouts everywhere


def build_verifier_timeouts_everywhere(root: Path):
    cap = Capture(root, "verifier_timeouts_everywhere", 1212)
    rng = cap.rng
    now = dt("2026-07-07T11:02:00")
    jid = "1893355"
    start = now - M(105)
    cap.slurm_running(jid, "rl-q3-8b-pym2t-jz", "jean-zay-h100", now, start)
    cap.job_json(jid, model_info("Qwen3-8B", 8.2), ("H100-80GB-SXM", 4, 4),
                 {"num_inference_engines": 4, "engine_tp": 2, "colocated": False},
                 rollout=rollout_info(32, 900), expected_step_s=900, max_retries=1, enforce_eager=False,
                 new="new verifier image (pytest-xdist) for pymethods2test v4")
    out = Log()
    P = ray_pfx("skyrl_entrypoint", 201877, "10.148.8.12")
    t = start + M(9)
    step = 1
    while True:
        te = skyrl_async_step(out, P, t, step, buf_s=520 + rng.random() * 100, fwd_s=95 + rng.random() * 10,
                              train_s=250 + rng.random() * 30, sync_s=29, reward=0.0, pass_at=0.0, total_steps=150, color=False)
        if te is None or te > now:
            break
        t, step = te, step + 1
    out.items = [it for it in out.items if it[0] <= now]
    RC = [ray_pfx("RolloutCoordinator", p, "10.148.8.12", color=False) for p in (202001, 202002, 202003, 202004)]
    for k in range(20):
        tg = start + M(12) + S(300 * k + rng.random() * 40)
        if tg >= now:
            break
        for r in range(3):
            tt = tg - S(30 + 20 * r)
            out.add(tt, RC[k % 4] + loguru(tt, "WARNING", "examples.terminal_bench.terminal_bench_generator:_process_trial_result:1292",
                    f"Trajectory TrajectoryID(instance_id='pymethods2test-{5000 + k}', repetition_id={r}) failed with Harbor exception: "
                    f"Verifier execution timed out after 180.0 seconds (type=VerifierTimeoutError, exclude_from_baseline=False)", color=False))
        generator_group_lines(out, RC[k % 4], tg, "x", ok=0, exc={"VerifierTimeoutError": 8}, color=False)
    out.add(start + S(20), P + loguru(start + S(20), "INFO", "skyrl_train.utils.utils:initialize_ray:512",
            f"Infrastructure logs will be written to: /lustre/fswork/projects/rech/rl/skyrl-logs/{jid}/infra-260707_091712.log", color=False))
    cap.write_text(f"logs/rl-q3-8b-pym2t-jz-{jid}.out", out.render(truncate_last=29))
    # SkyRL infra log (engines' stdout dup2'ed there, no Ray prefix); rotated/tail-copied, so it starts mid-line
    infra = Log()
    for _ in range(4):
        engine_stats_v1(infra, "", now - M(14), now - S(2), rng, every=10,
                        gen=(900, 2600), run=(6, 20), wait=(0, 0), kv=(5, 25), prefix=(60, 80), file_line="loggers.py:118")
    cap.write_text("logs/infra-260707_091712.log", infra.render(head_cut=77))
    for n in ("jzxh041", "jzxh042"):
        uu = gpu_uuids(rng, 4)

        def f(tp, g, n=n):
            if n == "jzxh042":
                return (35 + rng.random() * 50, 70300 + rng.random() * 300, 220 + rng.random() * 250)
            return ((90 + rng.random() * 9, 63000 + rng.random() * 6000, 560 + rng.random() * 100) if rng.random() < 0.35
                    else (rng.random() * 3, 40200 + rng.random() * 200, 110 + rng.random() * 10))
        cap.gpu_polls(n, uu, now - M(30), now - S(20), 120, f, 81559, na_cells={(6, 3, "power")})
    host = "9a0e4f2c7d13"
    for k in range(12):
        task = EASY[3] if k % 3 else EASY[1]
        st = now - M(80) + S(350 * k)
        done = st + M(14) < now
        spec = TrialSpec(f"pymethods2test-{5000 + k // 8}" if k % 3 else f"log-parse-{5100 + k // 8}", task[1],
                         coherent_turns(rng, host, task, complete=True), started=st, agent_s=200 + rng.random() * 300,
                         exc="VerifierTimeoutError", exc_msg="Verifier execution timed out after 180.0 seconds", completed=done,
                         host=host)
        write_trial(cap, spec, trials_dir=f"/lustre/fswork/projects/rech/rl/trace_jobs/{jid}", model="Qwen3-8B",
                    api_base="http://10.148.8.12:8000/v1", task_root="/lustre/fswork/projects/rech/rl/tasks/pym2t-v4",
                    verifier_timeout=180.0)
    cap.expect(verdict=["KILL"], status=["ALIVE"], failing=["C"], must_not_fail=["restarts"],
               evidence=["VerifierTimeoutError"],
               next_steps=["(?i)(verifier|test\\.sh|timeout)"],
               why="Gate C verifier fault (seed §4 'A verifier that never returns a real score => no learning signal even with good "
                   "generations'; verdict rule 'a verifier/infra path that yields zero learning signal with no transient "
                   "explanation -> lean KILL'): every finished trial's result.json has exception_type VerifierTimeoutError "
                   "('Verifier execution timed out after 180.0 seconds', verifier_result null) although the agents ran coherent "
                   "turns and marked the task complete; every group logs 'Exception breakdown: {'VerifierTimeoutError': 8}' / "
                   "'Batch generation complete: 0/8 successful'. Steps train on all-zero rewards. KILL; fix the new verifier "
                   "image / raise verifier_override_timeout_sec, then relaunch.")


BUILDERS = {f.__name__.removeprefix("build_"): f for f in [
    build_slurm_verl_timeout_chain_healthy, build_openrlhf_vllm085_eager_floor, build_vllm033_remote_engines_healthy,
    build_host_oom_crashloop_k8s, build_incoherent_moe_new_geometry, build_early_bringup_long_episode,
    build_transient_hf_restart_recovered, build_nccl_watchdog_torch22_wedged, build_ambiguous_silent_trainer,
    build_slurm_terminal_config_error, build_hard_tasks_zero_reward_coherent, build_verifier_timeouts_everywhere,
]}


if __name__ == "__main__":
    run_builders(BUILDERS, ROOT, sys.argv[1:])
