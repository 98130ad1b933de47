#!/usr/bin/env python3
"""Session 12's incident captures (deterministic; rerun to regenerate), built like make_incident_scenarios.py:
each replays ONE public thread's incident as the poster saw it, keeps the time of day of every verbatim line and
only rebases the date (to 2026-11-20).

    python tests/scenarios/make_incident_scenarios_s12.py            # all
    python tests/scenarios/make_incident_scenarios_s12.py NAME ...   # some

The real lines live in tests/scenarios/real_excerpts/*.txt (provenance: real_excerpts/README.md); everything else
is reconstructed in the formats the real programs print, and each expected.json `sources` says which is which.
expected.json records the verdict a careful prober would give from what the THREAD says happened, decided and
committed before the capture was first probed.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _lib import (
    SACCT_HEADER,
    Capture,
    Log,
    TrialSpec,
    gpu_uuids,
    h100_nodes,
    loguru,
    model_info,
    ray_pfx,
    run_builders,
    v1_stats,
    vllm_033,
    write_trial,
)
from _tasks import EASY, coherent_turns
from make_incident_scenarios import DAY, M, S, add_block, at, incident_capture, rebase
from make_real_scenarios import excerpt, h100_busy, verl_step_line
from make_scenarios import generator_group_lines, skyrl_zero_reward_steps

ROOT = Path(__file__).resolve().parent


# ============================================================== sgl-project/sglang#7553


def build_sglang_dp_attention_decode_hang_watchdog(root: Path):
    """slime-style GRPO whose rollouts come from an external SGLang server (DeepSeek-R1-0528, TP8 + DP-attention 8):
    the decode batches stop at 07:20:31, and 300 s later the scheduler's watchdog fires on DP4 TP4 (py-spy missing,
    so no stack). Captured 39 s after the watchdog; the trainer's own silence is still inside its ~12 min cycle."""
    now, start = at("07:26:10"), at("05:02:00")
    cap = incident_capture(root, "sglang_dp_attention_decode_hang_watchdog", 75531, job_id="slime-grpo-dsr1-sglang-dpattn",
                           scheduler="kubernetes", now=now, polls=(start + M(1), now - S(20), 120),
                           model=model_info("DeepSeek-R1-0528", 671.0, 37.0), hardware=("H200-141GB", 8, 6), engines=1,
                           engine_tp=8, colocated=False, max_retries=1,
                           new="first rollouts from an external SGLang server with --enable-dp-attention (dp 8)")
    rng = cap.rng
    real = excerpt("sglang-7553_decode_hang_watchdog")
    srv, drv = Log(), Log()
    tr = "(MegatronTrainRayActor pid=20714) "

    def stamp(t: datetime, rank: int | None = None) -> str:
        return f"[{t:%Y-%m-%d %H:%M:%S}" + (f" DP{rank} TP{rank}]" if rank is not None else "]")

    def decode(t0: datetime, t1: datetime) -> None:
        """Every DP rank's 'Decode batch.' line about every 12 s (SGLang logs each 40 decode steps per rank)."""
        t = t0
        while t < t1:
            for rank in range(8):
                tk = t + S(rng.random() * 2)
                r = rng.randint(96, 200)
                srv.add(tk, f"{stamp(tk, rank)} Decode batch. #running-req: {r}, #token: {r * rng.randint(1800, 4200)}, "
                            f"token usage: {0.25 + rng.random() * 0.4:.2f}, cuda graph: False, gen throughput (token/s): "
                            f"{rng.uniform(700, 1500):.2f}, #queue-req: {rng.randint(0, 24)}, ")
            t += S(12 + rng.random())

    # reconstructed cycles: ~8 min of rollout (decode batches + the trainer's rollout metrics), ~4 min of training
    t, n = start + M(8), 0
    while t < at("07:12:00"):
        gen_end = t + M(7.5 + rng.random())
        decode(t, gen_end)
        drv.add(gen_end, f"{tr}{stamp(gen_end)} data.py:212 - rollout {n}: {{'rollout/response_lengths': "
                         f"{6000 + rng.random() * 2500:.2f}, 'rollout/rewards': {0.18 + 0.01 * n + rng.random() * 0.03:.4f}, "
                         f"'rollout/truncated': {rng.random() * 0.1:.4f}}}")
        drv.add(gen_end + S(0.01), f"{tr}{stamp(gen_end)} timer.py:24 - Timer actor_train start")
        t = gen_end + M(4 + rng.random() * 0.4)
        n += 1
    # the hung rollout: decode batches until 07:20:31, then nothing until the watchdog 300 s later
    decode(t, at("07:20:31"))
    t_wd = at("07:25:31")
    head = (f"{stamp(t_wd, 4)} self.cur_batch.batch_size()=143, self.cur_batch.reqs=[Req(rid=9b0e6c2f4a7d41e3b5c8d1f2a6e4b7c9, "
            "input_ids=[0, 128803, 4913, 25, 1531, 15, 4366], output_ids=[128798, 271, 5024], ")
    srv.add(t_wd, head + real[0])
    add_block(srv, t_wd + S(0.001), real[1:], ("2025-06-26", DAY))
    cap.write_text("logs/sglang-server-0.log", srv.render())
    cap.write_text("logs/pod_rank0.log", drv.render())
    cap.expect(verdict=["KILL"], status=["WEDGED"], failing=["A"], must_not_fail=["restarts"],
               evidence=["(?i)watchdog"],
               next_steps=["(?i)(sglang|engine|server|watchdog|hang|stack|py-spy)"],
               why="Gate A WEDGED on the rollout engine (seed §2: a real hang signature + stale-beyond-cadence logs on a "
                   "running job -> lean KILL). The poster's title: 'decode hang & watchdog timeout'. Every DP rank printed a "
                   "'Decode batch.' line every ~12 s until 07:20:31, then nothing; at 07:25:31 the scheduler of DP4 TP4 "
                   "reports 'Watchdog timeout (self.watchdog_timeout=300)' (one forward batch has run 300 s) and could not "
                   "even dump its stack ('py-spy: command not found'). SGLang's watchdog then takes the server down, so the "
                   "rollout that the trainer waits on will never finish. The trainer's own silence (11 min, inside its "
                   "~12 min rollout+train cycle) is not the evidence: the engine's hang signature plus 5.5 min of engine "
                   "silence against a 12 s cadence are two families. KILL; install py-spy in the image and capture the "
                   "schedulers' stacks before relaunching.",
               sources=[
                   ("sgl-project/sglang#7553", "logs/sglang-server-0.log: the tail of the watchdog's batch dump (from "
                    "'self.grammar=None, ...' to the end of the line), '[... DP4 TP4] Pyspy failed to dump PID 113688. "
                    "Error: /bin/bash: line 1: py-spy: command not found' and '[... DP4 TP4] Watchdog timeout "
                    "(self.watchdog_timeout=300)'",
                    "date rebased 2025-06-26 -> 2026-11-20 (times kept); the head of the batch-dump line (stamp, batch "
                    "size, the first Req) is reconstructed because the stored excerpt starts mid-line; the thread ran "
                    "sglang.bench_serving at 5000 concurrency against DeepSeek-R1-0528 with DP attention, here the load "
                    "is an RL job's rollouts"),
                   ("-", "-", "every 'Decode batch.' line before the hang (its 07:20:31 end is 300 s before the watchdog, "
                    "as the timeout implies), the slime trainer lines, capture.json, job.json (6x8 H200; one TP8/DP8 "
                    "server) and state.jsonl; no GPU polls (none in the thread)"),
               ])


# ============================================================== verl-project/verl#4921


def build_verl_actor_died_in_sleep_slurm_terminal(root: Path):
    """verl GRPO with async vLLM servers (agent loop) on one SLURM node: after a rollout the trainer puts the vLLM
    workers to sleep and one colocated WorkerDict dies (SYSTEM_ERROR, connection error code 2); the driver exits
    through Hydra. sacct says FAILED: nothing left to kill."""
    jid, name = "5128867", "verl-grpo-q25-7b-agentloop"
    start, end, now = at("09:41:12"), at("12:37:58"), at("12:45:30")
    cap = Capture(root, "verl_actor_died_in_sleep_slurm_terminal", 49211)
    cap.capture_json(jid, "local", "slurm", now)
    cap.write_text("sacct.txt", f"{SACCT_HEADER}\n{jid}|{name}|FAILED|{start:%Y-%m-%dT%H:%M:%S}|"
                                f"{end:%Y-%m-%dT%H:%M:%S}|1:0|0\n")
    cap.job_json(jid, model_info("Qwen2.5-7B-Instruct", 7.6), h100_nodes(1),
                 {"num_inference_engines": 4, "engine_tp": 2, "engine_ep": 1, "colocated": True},
                 rollout={"n_samples_per_prompt": 8}, expected_step_s=420, max_retries=0, enforce_eager=False,
                 new="first run of the async agent-loop rollout (vLLMHttpServer replicas) with free_cache_engine")
    rng = cap.rng
    real = excerpt("verl-4921_actor_died_in_sleep")
    out = Log()
    ip = "10.29.214.5"
    tk = ray_pfx("TaskRunner", 84512, ip, color=False)
    srv = [f"(vLLMHttpServer pid={p}, ip={ip}) " for p in (88410, 88412, 88415, 88419)]
    t, step = start + M(6), 1
    out.add(start + S(40), f"{tk}TaskRunner hostname: gpu-node-017, PID: 84512")
    t_end = at("12:37:50")  # the last rollout ends here; putting its servers to sleep kills the job

    def stats(t0: datetime, t1: datetime) -> None:
        """Each server's vLLM stats line every 10 s while a rollout runs."""
        tt = t0
        while tt < t1:
            for k, p in enumerate(srv):
                tj = tt + S(rng.random() * 2)
                out.add(tj, p + vllm_033(tj, "APIServer", 88410 + k, "INFO", "loggers.py:127",
                                         v1_stats(rng.uniform(300, 900), rng.uniform(1900, 3400), rng.randint(30, 64), 0,
                                                  rng.uniform(20, 60), rng.uniform(40, 70))).split(") ", 1)[1])
            tt += S(10)

    while True:
        gen_s = 190 + rng.random() * 30
        step_s = gen_s + 200 + rng.random() * 30
        if t + S(step_s) > t_end:
            stats(t, t_end - S(3))
            break
        stats(t, t + S(gen_s))
        out.add(t + S(step_s), tk + verl_step_line(step, rng, score=0.31 + 0.004 * step, step_s=step_s))
        t += S(step_s + 2)
        step += 1
    # the step's rollout ended; the sleep of the servers' workers fails: the raylet reports the death, the driver exits
    t_die = at("12:37:55")
    out.add(t_die, "(raylet) A worker died or was killed while executing a task by an unexpected system error.")
    tb_head = [
        "Error executing job with overrides: ['algorithm.adv_estimator=grpo', 'data.train_batch_size=256', "
        "'actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct', 'actor_rollout_ref.rollout.name=vllm', "
        "'actor_rollout_ref.rollout.mode=async', 'actor_rollout_ref.rollout.tensor_model_parallel_size=2', "
        "'actor_rollout_ref.rollout.n=8', 'trainer.n_gpus_per_node=8', 'trainer.nnodes=1']",
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.10/dist-packages/verl/trainer/main_ppo.py", line 42, in main',
        "    run_ppo(config)",
        '  File "/usr/local/lib/python3.10/dist-packages/verl/trainer/main_ppo.py", line 96, in run_ppo',
        "    ray.get(runner.run.remote(config))",
        '  File "/usr/local/lib/python3.10/dist-packages/ray/_private/worker.py", line 2882, in get',
        "    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)",
        '  File "/usr/local/lib/python3.10/dist-packages/ray/_private/worker.py", line 968, in get_objects',
        "    raise value.as_instanceof_cause()",
        f"ray.exceptions.RayTaskError(ActorDiedError): ray::TaskRunner.run() (pid=84512, ip={ip}, "
        "actor_id=2c1f0a7be3d94c55a8e1f60b01000000, repr=<main_ppo.TaskRunner object at 0x7f3b2c1d9f60>)",
        '  File "/usr/local/lib/python3.10/dist-packages/verl/trainer/ppo/ray_trainer.py", line 1318, in fit',
        "    self.async_rollout_manager.sleep()",
        '  File "/usr/local/lib/python3.10/dist-packages/verl/experimental/agent_loop/agent_loop.py", line 802, in sleep',
        "    self._run_all([replica.sleep() for replica in self.rollout_replicas])",
        '  File "/usr/local/lib/python3.10/dist-packages/verl/experimental/agent_loop/agent_loop.py", line 820, in _run_all',
        "    asyncio.run(run_all())",
        '  File "/usr/lib/python3.10/asyncio/runners.py", line 44, in run',
        "    return loop.run_until_complete(main)",
        '  File "/usr/lib/python3.10/asyncio/base_events.py", line 649, in run_until_complete',
        "    return future.result()",
        '  File "/usr/local/lib/python3.10/dist-packages/verl/workers/rollout/replica.py", line 156, in sleep',
        "    await self.server_handle.sleep.remote()",
        '  File "/usr/lib/python3.10/concurrent/futures/_base.py", line 451, in result',
    ]
    add_block(out, t_die + S(2.6), tb_head + real)
    cap.write_text(f"logs/{jid}.out", out.render())
    cap.write_text(f"logs/{jid}.err", "")
    cap.expect(verdict=["NO-KILL"], status=["TERMINAL"], failing=["A"], must_not_fail=["restarts"],
               evidence=["(?i)(ActorDiedError|SYSTEM_ERROR|worker died)"],
               next_steps=["(?i)(memory|OOM|SIGSEGV|worker|raylet|dmesg)"],
               why="Gate A TERMINAL (seed §2: the state poll - here sacct - says FAILED -> nothing to kill; report the "
                   "root-cause traceback and whether it is transient). The thread's title is the raylet's 'A worker died "
                   "or was killed while executing a task by an unexpected system error.'; the driver's traceback ends in "
                   "vllm_async_server.py 'sleep' -> 'ray.exceptions.ActorDiedError: The actor died unexpectedly before "
                   "finishing this task. ... WorkerDict ... Worker exit type: SYSTEM_ERROR ... connection error code 2. "
                   "End of file.' and Hydra's 'Set the environment variable HYDRA_FULL_ERROR=1'. The leg is FAILED with "
                   "exit 1:0 and max_retries 0. Root cause: a colocated WorkerDict process died while the vLLM workers "
                   "were put to sleep after a rollout (Ray names the OOM killer or a SIGSEGV as the usual causes): check the "
                   "node's dmesg/raylet logs and host memory before relaunching.",
               sources=[
                   ("verl-project/verl#4921", f"logs/{jid}.out: the issue title as the '(raylet) A worker died or was "
                    "killed ...' line, and the traceback tail from '    return self.__get_result()' to 'Set the environment "
                    "variable HYDRA_FULL_ERROR=1 for a complete stack trace.' (the stored excerpt keeps GitHub's link "
                    "markup in the 'ip:' line)",
                    "the traceback head (Hydra's 'Error executing job with overrides', main_ppo/ray frames down to the "
                    "concurrent.futures frame) is reconstructed because the stored excerpt starts mid-traceback; the "
                    "excerpt's trailing '(vLLMHttpServer pid=884' cut is left out"),
                   ("-", "-", "every verl step line and vLLM stats line, the 12:37:55 time of the death (the paste gives "
                    "none), capture.json, job.json (Qwen2.5-7B on one 8-GPU node: assumed) and sacct.txt"),
               ])


# ============================================================== scaleapi/vero#51 (+ #58)


def build_modal_sandbox_outage_every_trial(root: Path):
    """SkyRL + Harbor rollouts on Modal sandboxes: every finished trial ends in a Modal/environment exception (the
    sandbox vanished, the image never materialised, the verifier could not add the tests dir), reward 0 everywhere,
    while the trainer keeps stepping on zeros. Mixed exception classes, none of them named 'Daytona...'."""
    now, start = at("21:14:00"), at("20:06:00")
    job = "rl-q3-8b-swe-atlas-modal"
    trainer, engine = f"{job}-trainer-0", f"{job}-vllm-0"
    cap = incident_capture(root, "modal_sandbox_outage_every_trial", 5158, job_id=job, scheduler="kubernetes", now=now,
                           polls=(start + M(1), now - S(30), 60), model=model_info("Qwen3-8B", 8.2),
                           hardware=h100_nodes(2), engines=4, engine_tp=2, colocated=False, max_retries=1,
                           expected_step_s=900, new="first run of the SWE task set on Modal sandboxes",
                           pods={"engine_pods": [engine], "policy_pods": [trainer]})
    rng = cap.rng
    real = excerpt("vero-58_modal_trial_exceptions")

    def split(line: str) -> tuple[str, str]:
        cls, msg = line.split(": ", 1)
        return cls, msg

    def container_id() -> str:
        return "ta-01K" + "".join(rng.choice("0123456789ABCDEFGHJKMNPQRSTVWXYZ") for _ in range(23))

    kinds = []  # (class, message, traceback last line, env_failed, turns_done)
    for k in range(24):
        r = k % 12
        if r in (0, 3, 5, 8, 10):      # the sandbox vanished mid-episode
            cid = container_id()
            msg = split(real[0])[1].replace("ta-…", cid)
            kinds.append(("NotFoundError", msg, f"modal.exception.NotFoundError: {msg}", False, 2))
        elif r in (1, 6, 11):          # the sandbox image never materialised
            msg = split(real[1])[1]
            kinds.append(("RuntimeError", msg, f"RuntimeError: {msg}", True, 0))
        elif r in (2, 7, 9):           # the agent finished, the verifier could not upload the tests
            msg = split(real[2])[1]
            kinds.append(("AddTestsDirError", msg, f"harbor.trial.trial.AddTestsDirError: {msg}", False, 3))
        else:                          # the sandbox's task already ended
            msg = split(real[3])[1]
            kinds.append(("NotFoundError", msg, f"modal.exception.NotFoundError: {msg}", False, 1))
    # the trainer + rollout coordinators: every group 0/8, the steps train on zero reward
    out = Log()
    P = ray_pfx("skyrl_entrypoint", 6120, "10.52.7.21")
    RC = [ray_pfx("RolloutCoordinator", p, "10.52.7.21") for p in (6201, 6202, 6203, 6204)]
    skyrl_zero_reward_steps(out, P, start + M(9), now, rng, buf_s=(300, 60))
    k, tg = 0, start + M(7)
    while tg < now - S(20):
        rc = RC[k % 4]
        breakdown: dict[str, int] = {}
        for r in range(8):
            cls, msg, _, _, _ = kinds[(8 * k + r) % 24]
            breakdown[cls] = breakdown.get(cls, 0) + 1
            tt = tg - S(8 - 0.5 * r)
            first = (f"Trajectory TrajectoryID(instance_id='swe-atlas-{7300 + k}', repetition_id={r}) failed with Harbor "
                     f"exception: {msg} (type={cls}, exclude_from_baseline=False)")
            out.add(tt, rc + loguru(tt, "WARNING", "examples.terminal_bench.terminal_bench_generator:_process_trial_result:1292",
                                    first))
        generator_group_lines(out, rc, tg, "x", ok=0, exc=breakdown)
        k += 1
        tg += S(150 + rng.random() * 60)
    cap.write_text("logs/pod_rank0.log", out.render())
    # engines: health checks plus the few agent calls that happen before a sandbox dies
    e = Log()
    tt = start + M(6)
    while tt < now - S(5):
        e.add(tt, f"(APIServer pid=1) INFO:     10.52.7.21:{40100 + rng.randint(0, 900)} - \"GET /health HTTP/1.1\" 200 OK")
        tt += S(30)
    cap.write_text(f"logs/{engine}.log", e.render())
    cap.gpu_polls(trainer, gpu_uuids(rng, 8), now - M(40), now - S(30), 120,
                  lambda tp, g: h100_busy(rng) if rng.random() < 0.5 else (3 + rng.random() * 6, 60500 + rng.random() * 900,
                                                                         140 + rng.random() * 30), 81559)
    cap.gpu_polls(engine, gpu_uuids(rng, 8), now - M(40), now - S(30), 120,
                  lambda tp, g: ((rng.random() * 9, 71900 + rng.random() * 40, 70 + rng.random() * 25)), 81559)
    for n in range(24):
        cls, msg, last, env_failed, n_turns = kinds[n]
        task = EASY[n % len(EASY)]
        turns = coherent_turns(rng, "7c2e9b1a4d60", task, complete=cls == "AddTestsDirError")[:n_turns]
        st = now - M(62) + S(140 * n + rng.random() * 30)
        tb = ("Traceback (most recent call last):\n  File \".../harbor/trial/trial.py\", line 500, in run\n"
              "    await self._execute_agent()\n  ...\n" + last + "\n")
        spec = TrialSpec(f"swe-atlas-{7300 + n // 8}", task[1], turns, started=st,
                         agent_s=0.0 if env_failed else 60.0 * max(n_turns, 1), exc=cls, exc_msg=msg, tb=tb,
                         env_failed=env_failed)
        write_trial(cap, spec, trials_dir=f"/data/experiments/{job}/trace_jobs", model="Qwen3-8B",
                    api_base=f"http://{engine}:8000/v1", task_root="/data/tasks/swe-atlas", env_type="modal")
    cap.expect(verdict=["KILL"], status=["ALIVE", "UNKNOWN"], failing=["C"], must_not_fail=["A", "restarts"],
               evidence=["(?i)(modal|sandbox|AddTestsDirError|FetchSpec)"],
               next_steps=["(?i)(sandbox|modal|environment|infra)"],
               next_steps_not=["(?i)tool-call parsing", "(?i)agent harness"],
               why="Gate C infrastructure (seed §4: 'Every trial ends in an environment/infra exception ... => infra, not "
                   "model - KILL + fix the infra, relaunch'). The thread: on a full run 'every evaluation case failed to "
                   "run and scored 0.0' with Modal sandbox NotFoundError ('The Sandbox is unavailable / may have already "
                   "shut down'), AddTestsDirError ('Failed to add tests directory to environment') and RuntimeError; "
                   "'This is infrastructure, not candidate quality'. The follow-up census names the messages: 'Modal "
                   "Sandbox with container ID ... not found', 'FetchSpec failed: loading container: file does not exist' "
                   "(image never materialised), AddTestsDirError ('sandbox died, seen from the verifier'), 'Task has "
                   "already finished with status failure'. Here all 24 finished trials end in one of those, no verifier "
                   "ever scores, every rollout group is 0/8, and the trainer steps on zero reward: no learning signal "
                   "for an infrastructure reason. The classes are generic (NotFoundError, RuntimeError) or Harbor's own "
                   "(AddTestsDirError), not 'Daytona*' or '*Sandbox*'; the messages name the sandbox. KILL, fix the "
                   "Modal sandbox provisioning, relaunch.",
               sources=[
                   ("scaleapi/vero#51", "- (the incident: every case failed on Modal sandbox / tests-dir provisioning, "
                    "flat zero, 'infrastructure, not candidate quality')", "the premise and the mix of exception classes"),
                   ("scaleapi/vero#58", "the four exception texts of the per-case census ('NotFoundError: Modal Sandbox with "
                    "container ID ta-… not found', 'RuntimeError: FetchSpec failed: loading container: file does not "
                    "exist', 'AddTestsDirError: Failed to add tests directory to environment.', 'NotFoundError: Task has "
                    "already finished with status failure'): each trial's exception_type/exception_message and the "
                    "Harbor trial-exception records in logs/pod_rank0.log",
                    "the container IDs (the census elides them as 'ta-…'); the traceback heads and module paths "
                    "(modal.exception., harbor.trial.trial.); the census's DeploymentNotFound rows (a missing model "
                    "deployment of that eval harness) have no counterpart in an RL job and are left out"),
                   ("-", "-", "SkyRL trainer steps, rollout-group lines, health-check lines, trial conversations, GPU "
                    "polls, capture.json, job.json and state.jsonl; the thread is an optimizer's eval harness, here the "
                    "same sandbox failures hit an RL job's rollouts"),
               ])


# ============================================================== ray-project/kuberay#4287


def _k8s_pod(name: str, job: str, container: str, mem: str, gpus: int, node: str, ip: str, status: dict) -> dict:
    limits = {"cpu": "2", "memory": mem} | ({"nvidia.com/gpu": str(gpus)} if gpus else {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "rl", "labels": {"ray.io/cluster": job,
                                                                     "ray.io/node-type": "head" if gpus == 0 else "worker"}},
            "spec": {"nodeName": node, "restartPolicy": "Always",
                     "containers": [{"name": container, "resources": {"limits": limits, "requests": limits}}]},
            "status": {"hostIP": ip, "podIP": ip, "startTime": f"{DAY}T10:56:21Z", **status}}


def build_kuberay_head_oomkilled_crashloop(root: Path):
    """A verl job on KubeRay whose head pod is OOMKilled 9 s after every start (its memory limit is below what the
    head's Ray processes need): restartCount climbing, CrashLoopBackOff, the GPU workers never join, the driver never
    starts. Captured 8.5 min in."""
    now, start = at("11:05:00"), at("10:56:20")
    job = "verl-grpo-q3-8b-kuberay"
    head, worker = f"{job}-head-x7k2p", f"{job}-gpu-group-worker-4mzqd"
    cap = incident_capture(root, "kuberay_head_oomkilled_crashloop", 42871, job_id=job, scheduler="kubernetes", now=now,
                           polls=(start + S(30), now - S(20), 60), model=model_info("Qwen3-8B", 8.2),
                           hardware=h100_nodes(1), engines=4, engine_tp=2, colocated=True, max_retries=1,
                           new="first launch on KubeRay from the sample RayCluster manifest",
                           pods={"engine_pods": [worker], "policy_pods": [worker]})
    real = excerpt("kuberay-4287_head_oomkilled_last_state")
    verbatim = {ln.split(": ", 1)[0]: ln.split(": ", 1)[1].strip('"') for ln in real}

    def starts() -> list[tuple[datetime, datetime]]:
        """Each run of the head container: 9 s to the OOM kill, then CrashLoopBackOff's 10 s, 20 s, 40 s ... wait."""
        out, t, back = [], at("10:56:35"), 10
        while t < now:
            out.append((t, t + S(9)))
            t = t + S(9 + back)
            back = min(back * 2, 300)
        return out

    runs = starts()
    worker_status = {"phase": "Pending",
                     "initContainerStatuses": [{"name": "wait-gcs-ready", "ready": False, "restartCount": 0,
                                                "state": {"running": {"startedAt": f"{DAY}T10:56:40Z"}}}],
                     "containerStatuses": [{"name": "ray-worker", "ready": False, "restartCount": 0,
                                            "state": {"waiting": {"reason": "PodInitializing"}}}]}
    for snap in (at("10:57:00"), at("10:59:00"), at("11:04:30")):
        done = [r for r in runs if r[1] <= snap]
        last_start, last_end = done[-1]
        cur = [r for r in runs if r[0] <= snap < r[1]]
        first = len(done) == 1
        terminated = {"containerID": verbatim["containerID"] if first else f"containerd://{cap.hexid(64)}",
                      "exitCode": int(verbatim["exitCode"]),
                      "finishedAt": rebase(verbatim["finishedAt"], ("2025-12-17", DAY)) if first else f"{last_end:%Y-%m-%dT%H:%M:%SZ}",
                      "reason": verbatim["reason"],
                      "startedAt": rebase(verbatim["startedAt"], ("2025-12-17", DAY)) if first else f"{last_start:%Y-%m-%dT%H:%M:%SZ}"}
        state = ({"running": {"startedAt": f"{cur[0][0]:%Y-%m-%dT%H:%M:%SZ}"}} if cur else
                 {"waiting": {"reason": "CrashLoopBackOff",
                              "message": f"back-off {min(10 * 2 ** (len(done) - 1), 300)}s restarting failed "
                                         f"container=ray-head pod={head}_rl(3f0c2a1e-7b9d-4c51-9e2a-0d6b1f8a4c37)"}})
        head_status = {"phase": "Running",
                       "containerStatuses": [{"name": "ray-head", "ready": bool(cur), "restartCount": len(done),
                                              "started": bool(cur), "image": "rayproject/ray:2.52.0",
                                              "lastState": {"terminated": terminated}, "state": state}]}
        items = [_k8s_pod(head, job, "ray-head", "2G", 0, "gke-h100-pool-1-3c9e", "10.84.2.11", head_status),
                 _k8s_pod(worker, job, "ray-worker", "512Gi", 8, "gke-h100-pool-1-7a21", "10.84.2.40", worker_status)]
        cap.write_text(f"pods/{snap:%Y-%m-%dT%H:%M:%SZ}.json",
                       json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=1) + "\n")

    def head_log(t0: datetime) -> list[tuple[datetime, str]]:
        pfx = lambda t: t.strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]  # noqa: E731
        return [(t0 + S(2.1), f"{pfx(t0 + S(2.1))}\tINFO usage_lib.py:473 -- Usage stats collection is enabled by default "
                              "without user confirmation because this terminal is detected to be non-interactive."),
                (t0 + S(2.2), f"{pfx(t0 + S(2.2))}\tINFO scripts.py:914 -- Local node IP: 10.84.2.11"),
                (t0 + S(7.8), f"{pfx(t0 + S(7.8))}\tSUCC scripts.py:950 -- Ray runtime started.")]

    # kubectl logs (--previous): the last run that was killed, and the run alive at capture time if there is one
    prev, cur = Log(), Log()
    for t, ln in head_log([r for r in runs if r[1] <= now][-1][0]):
        prev.add(t, ln)
    for t0, t1 in runs:
        if t0 <= now < t1:
            for t, ln in head_log(t0):
                if t <= now:
                    cur.add(t, ln)
    cap.write_text("logs/pod_rank0.previous.log", prev.render())
    cap.write_text("logs/pod_rank0.log", cur.render() if cur.items else "")
    cap.expect(verdict=["KILL"], status=["WEDGED", "UNKNOWN"], failing=["B"], must_not_fail=[],
               evidence=["(?i)(OOMKilled|oom)"],
               next_steps=["(?i)(memory|limit|OOM)"],
               why="Gate B host-OOM (seed §3 B-training: 'Not RAM/host-OOM: no OOMKilled in pod state ..., no repeated pod "
                   "restarts') with the same failure every restart. The thread: the sample RayCluster's 'Ray head pod is "
                   "OOMKilled when starting' - lastState.terminated reason OOMKilled, exitCode 137, 9 s after startedAt. "
                   "Here it repeats on every restart (restartCount 1 -> 4 -> 6 in 8.5 min, CrashLoopBackOff between), the "
                   "GPU worker pod never leaves its wait-gcs-ready init container and the driver never starts: no "
                   "progress is possible until the head's memory limit is raised. Deterministic, not a transient: KILL, "
                   "raise the head container's memory limit (2G in the manifest) and relaunch.",
               sources=[
                   ("ray-project/kuberay#4287", "pods/2026-11-20T10:57:00Z.json: the head container's lastState.terminated "
                    "(containerID, exitCode 137, reason OOMKilled, startedAt 10:56:35, finishedAt 10:56:44)",
                    "date rebased 2025-12-17 -> 2026-11-20 (times kept); the later snapshots' lastState repeat the same "
                    "9 s OOM kill at CrashLoopBackOff's doubling back-off, with new container IDs"),
                   ("-", "-", "the pod specs (2G head limit as in the sample manifest's head group; an 8-GPU worker), the "
                    "worker's init-container status, the head's three 'ray start' log lines per run, capture.json, job.json "
                    "(a verl Qwen3-8B job: assumed) and state.jsonl (running, 1 pod)"),
               ])


# ============================================================== verl-project/verl#472 (+ #719)


def build_verl_thread_limit_workers_never_ran_terminal(root: Path):
    """verl 0.2 GRPO on one shared 8-GPU box: while the colocated WorkerDicts start, the Ray workers cannot create
    threads ('thread: Resource temporarily unavailable [system:11]'), one WorkerDict dies before it ran, and the
    driver exits through Hydra. The Ray job is FAILED. Ray's death message guesses OOM / ray stop / SIGSEGV; the
    worker's own line says thread creation failed."""
    now, start = at("19:33:00"), at("19:24:10")
    failed = tuple({"ts": f"{DAY}T{t}Z", "state": "failed", "pods": 0, "failure_count": 1, "preemption_count": 0,
                    "attempt": 0, "max_retries": 0,
                    "attempts": [{"attempt": 0, "terminal_state": "failed", "exit_code": 1,
                                  "ended_at": f"{DAY}T19:28:31Z", "error": "Job entrypoint command failed with exit code 1"}]}
                   for t in ("19:29:05", "19:31:04", "19:32:58"))
    cap = incident_capture(root, "verl_thread_limit_workers_never_ran_terminal", 4721, job_id="verl-grpo-q25-7b-shared-box",
                           scheduler="other", now=now, polls=(start + S(20), at("19:28:25"), 60), final_rows=failed,
                           model=model_info("Qwen2.5-7B-Instruct", 7.6), hardware=h100_nodes(1), engines=8, engine_tp=1,
                           colocated=True, max_retries=0, new="first GRPO run on a shared lab machine (verl 0.2, Ray 2.43)")
    real = excerpt("verl-472_thread_limit_actor_never_ran")
    out = Log()
    mt = "(main_task pid=26626) "
    out.add(start + S(25), f"{mt}{{'actor_rollout_ref': {{'actor': {{'clip_ratio': 0.2,")
    for k, ln in enumerate(["'algorithm': {'adv_estimator': 'grpo',", "'gamma': 1.0,",
                            "'kl_ctrl': {'kl_coef': 0.001, 'type': 'fixed'},", "'trainer': {'n_gpus_per_node': 8,",
                            "'nnodes': 1,", "'total_epochs': 15}}"]):
        out.add(start + S(25.01 + 0.001 * k), f"{mt} {ln}")
    out.add(start + S(31), f"{mt}Size of train dataloader: 58")
    out.add(start + S(31.5), f"{mt}Total training steps: 870")
    t_die = at("19:28:29")
    head = [
        "Error executing job with overrides: ['algorithm.adv_estimator=grpo', 'data.train_batch_size=128', "
        "'actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct', 'actor_rollout_ref.rollout.name=vllm', "
        "'actor_rollout_ref.rollout.n=5', 'trainer.n_gpus_per_node=8', 'trainer.nnodes=1']",
        "Traceback (most recent call last):",
        '  File "/fs/archive/share/verl/verl/trainer/main_ppo.py", line 25, in main',
        "    run_ppo(config)",
        '  File "/fs/archive/share/verl/verl/trainer/main_ppo.py", line 33, in run_ppo',
        "    ray.get(main_task.remote(config, compute_score))",
        '  File "/fs/archive/share/verl_env/lib/python3.9/site-packages/ray/_private/worker.py", line 2771, in get',
        "    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)",
        '  File "/fs/archive/share/verl_env/lib/python3.9/site-packages/ray/_private/worker.py", line 919, in get_objects',
        "    raise value.as_instanceof_cause()",
        "ray.exceptions.RayTaskError(ActorDiedError): ray::main_task() (pid=26626, ip=10.0.0.1)",
        '  File "/fs/archive/share/verl/verl/trainer/main_ppo.py", line 124, in main_task',
        "    trainer.init_workers()",
        '  File "/fs/archive/share/verl/verl/trainer/ppo/ray_trainer.py", line 712, in init_workers',
        "    self.actor_rollout_wg.init_model()",
        '  File "/fs/archive/share/verl/verl/single_controller/ray/base.py", line 42, in func',
        "    output = ray.get(output)",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        "\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict",
        "\tactor_id: 7d0e2f1c9a8b4c3d2e1f0a9b01000000",
    ]
    add_block(out, t_die, head + real[:7])
    out.add(at("19:28:30") + S(0.014), rebase(real[7], ("2025-03-04", DAY)))
    out.add(at("19:28:30") + S(0.101), rebase(real[8], ("2025-03-04", DAY)))
    cap.write_text("logs/ray_job_driver.log", out.render())
    cap.expect(verdict=["NO-KILL"], status=["TERMINAL"], failing=["A"], must_not_fail=["restarts"],
               evidence=["(?i)(Resource temporarily unavailable|thread)"],
               next_steps=["(?i)(ulimit|max user processes|thread|pids|RAY_worker_num_grpc_internal_threads)"],
               why="Gate A TERMINAL (seed §2: the state poll reads failed with 0 pods -> nothing to kill; report the "
                   "root-cause traceback and whether it is transient). The driver died in init_workers with "
                   "'ray.exceptions.ActorDiedError ... WorkerDict ... SYSTEM_ERROR ... connection error code 2' and "
                   "'The actor never ran - it was cancelled before it started running.' Ray's message lists generic "
                   "causes (OOM killer, ray stop --force, SIGSEGV), but the workers' own line, printed right after, says "
                   "what happened: 'Unhandled exception: N5boost10wrapexceptINS_6system12system_errorEEE. what(): "
                   "thread: Resource temporarily unavailable [system:11]' - thread creation failed with EAGAIN, the "
                   "per-user process/thread limit. The same failure in verl#719 was fixed by raising 'ulimit -u' (and "
                   "Ray's RAY_worker_num_grpc_internal_threads). Deterministic on this machine: the root cause and the "
                   "next steps must name the thread limit, not host OOM.",
               sources=[
                   ("verl-project/verl#472", "logs/ray_job_driver.log: the tail of the ActorDiedError ('\\tname: "
                    "31cVuRWorkerDict_0:3' to 'Set the environment variable HYDRA_FULL_ERROR=1 ...') and the two "
                    "'(WorkerDict pid=...) [... E ...] logging.cc:...' lines (Unhandled exception ... Resource "
                    "temporarily unavailable; Stack trace)",
                    "date rebased 2025-03-04 -> 2026-11-20 (times kept); the traceback head (Hydra's 'Error executing "
                    "job', main_ppo / ray / init_workers frames, class_name and actor_id) is reconstructed because the "
                    "stored excerpt starts at the 'name:' line; the excerpt's cut stack-trace frame is left out"),
                   ("verl-project/verl#719", "- (the same error: 'Maybe the linux max user processes caused this problem, "
                    "you can try increase this limit by ulimit -u 16384'; RAY_worker_num_grpc_internal_threads)",
                    "what the line means and the fix"),
                   ("-", "-", "the main_task config lines, capture.json, job.json (Qwen2.5-7B, 8 GPUs: assumed) and "
                    "state.jsonl (running, then failed with 0 pods)"),
               ])


# ============================================================== huggingface/open-r1#239 (+ #257)


def build_grpo_loss_zero_rewards_rising_healthy(root: Path):
    """open-r1 GRPO (TRL, 4 training ranks + vLLM on the 5th GPU), 13 min in: every logged step reads
    'loss': 0.0 while rewards and KL move. The poster asked why; the thread's answer: completely normal (the
    GRPO loss value is beta x KL, which starts at 0; its gradient is not 0). Healthy, alarming number."""
    now, start = at("10:31:40"), at("10:17:30")
    cap = incident_capture(root, "grpo_loss_zero_rewards_rising_healthy", 2391, job_id="open-r1-grpo-r1-distill-1p5b",
                           scheduler="kubernetes", now=now, polls=(start + S(30), now - S(15), 60),
                           model=model_info("DeepSeek-R1-Distill-Qwen-1.5B", 1.8), hardware=h100_nodes(1), engines=1,
                           engine_tp=1, colocated=False, max_retries=1, expected_step_s=60,
                           new="first GRPO run with the new accuracy/format/reasoning-steps/cosine rewards")
    rng = cap.rng
    real = excerpt("open-r1-239_grpo_loss_zero_rewards_rising")
    trn = Log()
    lr_step, total = 1.1043622308117063e-07, 3000  # the pasted lines' learning rate rises this much per logged step
    # TRL runs vLLM inside the trainer process (vllm_device: auto): its start-up lines are the log's only stamps
    trn.add(at("10:18:52"), "INFO 11-20 10:18:52 llm_engine.py:234] Initializing a V0 LLM engine (v0.7.2) with config: "
                            "model='/home/base-model/deepseek-r1-distill-qwen-1.5b', dtype=torch.bfloat16, "
                            "max_seq_len=4608, tensor_parallel_size=1, enforce_eager=False")
    trn.add(at("10:19:20"), "INFO 11-20 10:19:20 model_runner.py:1115] Loading model weights took 3.3460 GB")
    trn.add(at("10:19:41"), "INFO 11-20 10:19:41 model_runner.py:1562] Graph capturing finished in 14 secs, total time: "
                            "14 secs")
    bar0 = at("10:20:00")
    trn.add(bar0, f"  0%|          | 0/{total} [00:00<?, ?it/s]")
    t, step = bar0 + S(52), 1
    while t < now - S(20):
        if step in (5, 6):
            line = real[step - 5]
        else:
            acc = 0.15 + 0.012 * step + rng.random() * 0.08
            fmt = 0.01875 * (1 + step // 4)
            steps_r = 0.62 + rng.random() * 0.06
            cos = -0.15 + rng.random() * 0.12
            line = ("{" + f"'loss': 0.0, 'grad_norm': {0.35 + rng.random() * 0.6}, 'learning_rate': {lr_step * step}, "
                    f"'rewards/accuracy_reward': {acc}, 'rewards/format_reward': {fmt}, "
                    f"'rewards/reasoning_steps_reward': {steps_r}, 'rewards/cosine_scaled_reward': {cos}, "
                    f"'reward': {acc + fmt + steps_r + cos}, 'reward_std': {0.7 + rng.random() * 0.15}, "
                    f"'completion_length': {820 + rng.random() * 90}, 'kl': {0.00004 * step + rng.random() * 0.00003}, "
                    "'epoch': 0.0}")
        trn.add(t, line)
        el = int((t - bar0).total_seconds())
        rem = (total - step) * 52
        trn.add(t + S(0.1), f"  0%|          | {step}/{total} [{el // 60:02d}:{el % 60:02d}<{rem // 3600}:{rem % 3600 // 60:02d}:"
                            f"{rem % 60:02d}, {50 + rng.random() * 5:.2f}s/it]")
        step += 1
        t += S(50 + rng.random() * 5)
    cap.write_text("logs/train.log", trn.render())
    cap.expect(verdict=["NO-KILL"], status=["ALIVE"], failing=[], must_not_fail=["A", "B", "C", "restarts"],
               escalate=False,
               why="Healthy with an alarming number (seed §2/§5: benign noise is not a fault; NO-KILL when every gate "
                   "passes or has nothing against it). Every logged step prints 'loss': 0.0 ('Why does the loss start at "
                   "0 when I train GRPO?'), while 'rewards/accuracy_reward', 'rewards/format_reward', 'reward' and 'kl' "
                   "move from step to step and the trainer logs a step every ~52 s. The thread's answer: 'It is "
                   "completely normal for the loss to start at zero and then increase' - the GRPO loss value equals "
                   "beta x KL, which is ~0 while the policy is still the reference (kl 8.6e-05); its gradient is not zero. "
                   "No stall, no error: NO-KILL, nothing to escalate; watch the KL and the rewards, not the loss.",
               sources=[
                   ("huggingface/open-r1#239", "logs/train.log: the two pasted metrics dicts (steps 5 and 6: 'loss': 0.0, "
                    "accuracy 0.275 then 0.1625, kl 8.58e-05 then 1.04e-04)",
                    "the step numbers (the pasted learning rates rise by 1.104e-07 per logged step from 5x that: steps 5 "
                    "and 6 of a run logging every step) and their times; the thread's answer is the verdict's premise"),
                   ("huggingface/open-r1#257", "- (the same poster's config of the same run: DeepSeek-R1-Distill-Qwen-1.5B, "
                    "num_processes 4 with vLLM on one GPU, num_generations 8)", "job.json's model and geometry"),
                   ("-", "-", "every other metrics dict (loss 0.0, rewards and KL drifting), every tqdm line, the three "
                    "vLLM start-up lines (TRL's in-process vLLM prints them into the trainer's log; they are its only "
                    "timestamps), capture.json, job.json and state.jsonl; no GPU polls"),
               ])


BUILDERS = {
    "sglang_dp_attention_decode_hang_watchdog": build_sglang_dp_attention_decode_hang_watchdog,
    "verl_actor_died_in_sleep_slurm_terminal": build_verl_actor_died_in_sleep_slurm_terminal,
    "modal_sandbox_outage_every_trial": build_modal_sandbox_outage_every_trial,
    "kuberay_head_oomkilled_crashloop": build_kuberay_head_oomkilled_crashloop,
    "verl_thread_limit_workers_never_ran_terminal": build_verl_thread_limit_workers_never_ran_terminal,
    "grpo_loss_zero_rewards_rising_healthy": build_grpo_loss_zero_rewards_rising_healthy,
}


if __name__ == "__main__":
    run_builders(BUILDERS, ROOT, sys.argv[1:])
