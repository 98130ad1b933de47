#!/usr/bin/env python3
"""Writes tests/scenarios/<name>/ captures around real incident pastes not used before (deterministic; rerun to
regenerate). Session 10's batch: each capture replays ONE public thread's incident as the poster saw it.

    python tests/scenarios/make_incident_scenarios.py            # all
    python tests/scenarios/make_incident_scenarios.py NAME ...   # some

The real lines live in tests/scenarios/real_excerpts/*.txt (provenance: real_excerpts/README.md). Unlike
make_real_scenarios.py, these builders keep the thread's own time of day on every verbatim line and only rebase
the DATE (to 2026-11-20), so each capture keeps the intervals the poster reported (e.g. 1800 s between the last
server line and the watchdog). Everything else (state polls, job.json, progress lines before the incident) is
reconstructed in the formats the real programs print, and each expected.json `sources` says which is which.

expected.json records the verdict a careful prober would give from what the THREAD says happened, decided before
the capture was ever probed.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _lib import Capture, Log, dt, h100_nodes, md, model_info, rollout_info, run_builders, state_rows
from make_real_scenarios import excerpt, verl_step_line

ROOT = Path(__file__).resolve().parent
DAY = "2026-11-20"


def S(x: float) -> timedelta:
    return timedelta(seconds=x)


def M(x: float) -> timedelta:
    return timedelta(minutes=x)


def at(hms: str) -> datetime:
    """A time of day on the capture's (rebased) date."""
    return dt(f"{DAY}T{hms}")


def rebase(line: str, *pairs: tuple[str, str]) -> str:
    """Swap the poster's date text for the capture's date; the time of day and the message stay as pasted."""
    for old, new in pairs:
        line = line.replace(old, new, 1)
    return line



def incident_capture(root: Path, name: str, seed: int, *, job_id: str, scheduler: str, now: datetime,
                     polls: tuple[datetime, datetime, int], model: dict, hardware: tuple[str, int, int],
                     engines: int, engine_tp: int, colocated: bool, max_retries: int, new: str,
                     expected_step_s: int | None = None, final_rows: tuple[dict, ...] = ()) -> Capture:
    """The glue files every incident capture has, written in one order: capture.json, state.jsonl (one pod
    'running' from polls[0] to polls[1] every polls[2] s, then `final_rows`), job.json. The running polls draw
    from the capture's rng before any log line does, as they always did, so the captures stay byte-identical."""
    cap = Capture(root, name, seed)
    cap.capture_json(job_id, "local", scheduler, now)
    start, end, every_s = polls
    cap.state_jsonl(state_rows(start, end, every_s, cap.rng, pods=1, max_retries=max_retries) + list(final_rows))
    cap.job_json(job_id, model, hardware,
                 {"num_inference_engines": engines, "engine_tp": engine_tp, "engine_ep": 1, "colocated": colocated},
                 rollout=rollout_info(), expected_step_s=expected_step_s, max_retries=max_retries,
                 enforce_eager=False, new=new)
    return cap


def add_block(log: Log, t0: datetime, lines: list[str], *pairs: tuple[str, str]) -> None:
    """Verbatim lines printed together (a traceback, a watchdog burst): 1 ms apart from t0 in their pasted
    order, each with the poster's date text swapped by `pairs`."""
    for k, line in enumerate(lines):
        log.add(t0 + S(0.001 * k), rebase(line, *pairs))


def core_gap(cap: Capture, reason: str, breaks: tuple[str, ...] = ()) -> None:
    """Mark expected.json with the core decision that keeps the probe from the thread's verdict today: the
    scenario tests xfail (strict) on it until the core is fixed, and the expectation stays what the thread says.
    `breaks` names the equivalence checks (tests/scenario_support.gap_param) the gap makes differ."""
    path = cap.scenario_dir / "expected.json"
    obj = json.loads(path.read_text(encoding="utf-8"))
    obj["core_gap"] = reason
    if breaks:
        obj["core_gap_breaks"] = list(breaks)
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


# ============================================================== NovaSky-AI/SkyRL#24


def build_skyrl_rollout_allreduce_watchdog(root: Path):
    """SkyRL (verl-based, June 2025) + OpenHands on Qwen3-14B: ~1 h of steps, then 'stuck during rollouts' for an
    hour; one policy rank's ALLREDUCE times out after 7200 s and its worker dies. The Ray job still reads running."""
    now, start = at("23:11:00"), at("19:58:00")
    cap = incident_capture(root, "skyrl_rollout_allreduce_watchdog", 2401, job_id="skyrl-oh-qwen3-14b-0617",
                           scheduler="other", now=now, polls=(start + M(1), now - S(20), 300),
                           model=model_info("Qwen3-14B", 14.8), hardware=h100_nodes(1), engines=4, engine_tp=2,
                           colocated=True, max_retries=0, expected_step_s=720,
                           new="reproducing the SkyRL-v0 Qwen3-14B OpenHands recipe on a new 64-CPU box")
    rng = cap.rng
    real = excerpt("SkyRL-24_rollout_wait_then_allreduce_watchdog")
    log = Log()
    drv = "(main_task pid=52880) "
    # ~1 h of training: a verl step line every ~12 min (SkyRL-v0 prints verl's metrics line)
    t, step = start + M(12), 1
    while t < at("21:04:00"):
        log.add(t, drv + verl_step_line(step, rng, score=0.08 + 0.01 * step, step_s=700 + rng.random() * 40))
        # rollouts of the next step: OpenHands evaluation chatter on the generator workers
        for k in range(6):
            tk = t + S(60 + 95 * k + rng.random() * 20)
            inst = rng.choice(["django__django-11099", "sympy__sympy-20590", "pandas-dev__pandas-24725",
                               "pydantic__pydantic-4911", "getmoto__moto-5752"])
            log.add(tk, f"(WorkerDict pid={rng.choice([53697, 54152])}) Successfully completed evaluating instance "
                        f"{inst}, trajectory {rng.randint(0, 7)} in {40 + rng.random() * 60:.2f}s")
        step += 1
        t += S(700 + rng.random() * 40)
    # the hung step's rollouts keep trickling until ~22:03 (the poster's last evaluation lines), then nothing
    for k in range(8):
        tk = at("21:10:00") + M(6.5 * k) + S(rng.random() * 30)
        log.add(tk, f"(WorkerDict pid=54152) {tk:%H:%M:%S} - openhands:INFO: codeact.py:1054 - [iterative__dvc-2231, 1] "
                    f"[{int((tk - at('21:45:12')).total_seconds())}s] Evaluation still running, waiting..."
                if tk > at("21:46:00") else
                f"(WorkerDict pid=53697) Successfully completed evaluating instance python__mypy-1{1000 + k * 37}, "
                f"trajectory {k % 8} in {50 + rng.random() * 40:.2f}s")
    log.add(at("22:02:40"), real[0])
    log.add(at("22:03:14"), real[1])
    log.add(at("22:03:44"), real[2])
    log.add(at("22:03:47"), real[3])
    log.add(at("22:03:48"), real[4])
    t_wd = at("23:04:48")
    add_block(log, t_wd, real[5:11], ("2025-06-17", DAY))
    log.add(t_wd + S(2.4), real[11])
    cap.write_text("logs/pod_rank0.log", log.render())
    cap.expect(verdict=["KILL"], status=["WEDGED"], failing=["A"], must_not_fail=["restarts"],
               evidence=["(?i)(7200095|ALLREDUCE|watchdog)"],
               next_steps=["(?i)(nccl|watchdog|collective|hang|rank|stack)"],
               why="Gate A WEDGED (seed §2: RUNNING + a real hang signature + stale-beyond-cadence logs -> lean KILL; the "
                   "colocated-engine deception: rollout workers kept printing while the policy mesh sat in a collective). "
                   "The poster: 'After training for about 1 hour, the program got stuck, seemingly during the rollouts. It "
                   "remained stuck for approximately another hour before throwing an error.' The last step line is ~2 h old "
                   "(cadence ~12 min), the OpenHands workers fell silent at 22:03, and at 23:04:48 the policy worker's "
                   "ProcessGroupNCCL watchdog reports WorkNCCL(SeqNum=937, OpType=ALLREDUCE, ..., Timeout(ms)=7200000) ran "
                   "for 7200095 ms, 'Process group watchdog thread terminated', then the raylet reports a worker died with "
                   "SYSTEM_ERROR. Hang signature + progress stall + worker death: KILL, debug the collective hang.",
               sources=[
                   ("NovaSky-AI/SkyRL#24", "logs/pod_rank0.log: the five '(WorkerDict ...)' OpenHands lines at 22:02-22:03, the "
                    "six watchdog/stack lines at 23:04:48 and the '(raylet) A worker died ...' line (that one from a later "
                    "paste in the same thread)",
                    "date rebased 2025-06-17 -> 2026-11-20 (times kept); the 22:02:40 time of the first line (the paste gives "
                    "none); every step line, earlier OpenHands line, capture.json, job.json (Qwen3-14B, 1 node) and "
                    "state.jsonl (ray job status 'running') are reconstructed; no GPU polls (the thread gives none)"),
               ])


# ============================================================== huggingface/open-r1#658


def build_openr1_allgather_watchdog_after_verify_timeout(root: Path):
    """open-r1 GRPO (accelerate, 3 training ranks) against `trl vllm-serve`: the server's last line is a prefix-cache
    reset, math_verify's signal timeout fires on a rank, and 1800 s later ranks 1 and 2 report the _ALLGATHER_BASE
    watchdog timeout. Captured a minute after, the pod still running."""
    now, start = at("06:10:30"), at("03:02:00")
    cap = incident_capture(root, "openr1_allgather_watchdog_after_verify_timeout", 6581,
                           job_id="open-r1-grpo-qwen-math-0516", scheduler="kubernetes", now=now,
                           polls=(start + M(1), now - S(15), 120), model=model_info("Qwen2.5-Math-7B", 7.6),
                           hardware=("H100-80GB-SXM", 4, 1), engines=1, engine_tp=1, colocated=False, max_retries=0,
                           expected_step_s=60, new="GRPO with math_verify rewards against a separate trl vllm-serve GPU")
    rng = cap.rng
    real = excerpt("open-r1-658_verify_timeout_then_allgather_watchdog")
    srv, trn = Log(), Log()
    # reconstructed: the step rhythm before the hang (one generate + weight update + prefix-cache reset per step)
    t, step, total = start + M(6), 1, 1200
    last_step_at = at("05:38:40")
    while t <= last_step_at:
        srv.add(t - S(40), f'INFO:     127.0.0.1:{40000 + rng.randint(0, 9999)} - "POST /generate/ HTTP/1.1" 200 OK')
        srv.add(t - S(2), f'INFO:     127.0.0.1:{40000 + rng.randint(0, 9999)} - "POST /update_named_param/ HTTP/1.1" 200 OK')
        srv.add(t - S(1), f"INFO {md(t - S(1))} [block_pool.py:264] Successfully reset prefix cache")
        r = 0.3 + 0.3 * step / 200 + rng.random() * 0.05
        trn.add(t, "{" + f"'loss': {rng.uniform(-0.01, 0.02):.4f}, 'grad_norm': {0.1 + rng.random() * 0.2:.4f}, "
                     f"'learning_rate': 3e-06, 'num_tokens': {step * 412000.0:.1f}, "
                     f"'completions/mean_length': {600 + rng.random() * 200:.4f}, 'rewards/accuracy_reward/mean': {r:.4f}, "
                     f"'reward': {r:.4f}, 'reward_std': {0.3 + rng.random() * 0.1:.4f}, 'kl': {0.001 + rng.random() * 0.002:.6f}, "
                     f"'epoch': {step / total:.2f}" + "}")
        el = int((t - start).total_seconds())
        trn.add(t + S(0.1), f" {100 * step // total:2d}%|▏         | {step}/{total} [{el // 3600}:{el % 3600 // 60:02d}:{el % 60:02d}<"
                            f"{(total - step) * 60 // 3600}:{(total - step) * 60 % 3600 // 60:02d}:00, {58 + rng.random() * 6:.2f}s/it]")
        step += 1
        t += S(58 + rng.random() * 6)
    srv.add(at("05:38:52"), rebase(real[0], ("05-16", "11-20")))
    add_block(trn, at("05:39:03"), real[1:9])
    add_block(trn, at("06:09:16"), real[9:12], ("E516", "E1120"))
    cap.write_text("logs/train.log", trn.render())
    cap.write_text("logs/vllm-serve.log", srv.render())
    cap.expect(verdict=["KILL"], status=["WEDGED"], failing=["A"], must_not_fail=["restarts"],
               evidence=["(?i)(_ALLGATHER_BASE|1800076|watchdog)"],
               next_steps=["(?i)(nccl|watchdog|collective|hang|rank|stack)"],
               why="Gate A WEDGED (seed §2: a real hang signature + stale-beyond-cadence logs, pod still running -> lean KILL). "
                   "The trainer stepped every ~60 s; its last step and the server's last 'Successfully reset prefix cache' "
                   "are at 05:38; a math_verify 'TimeoutError: Operation timed out!' was printed (and ignored) at 05:39; at "
                   "06:09:16 ranks 1 and 2 report WorkNCCL(SeqNum=49296, OpType=_ALLGATHER_BASE, ..., Timeout(ms)=1800000) "
                   "ran for 1800076 ms and 'failure detected by watchdog ... last completed work: 49295'. The thread title: "
                   "'GRPO training timeout'. 31 min of silence at 30x cadence + the watchdog = two families. The TimeoutError "
                   "is the trigger the poster saw, not a proof of cause; the KILL rests on the collective hang.",
               sources=[
                   ("huggingface/open-r1#658", "logs/vllm-serve.log: the last 'Successfully reset prefix cache' line; "
                    "logs/train.log: the 7-line 'Exception ignored in: <finalize object ...>' / math_verify TimeoutError block "
                    "and the three ProcessGroupNCCL watchdog lines",
                    "dates rebased (05-16 / E516 -> 11-20 / E1120; times kept); the time of the TimeoutError block (the paste "
                    "gives none; placed just after the last server line); every earlier server request line, metrics dict and "
                    "tqdm line, capture.json, job.json and state.jsonl are reconstructed; no GPU polls (none in the thread)"),
               ])


# ============================================================== huggingface/open-r1#690 + modelscope/ms-swift#4906


def build_swift_weight_sync_store_timeout_terminal(root: Path):
    """ms-swift GRPO (ClevrCount best practice) with a `swift rollout` server: after ~90 steps the weight push to the
    server times out (TCPStore 300 s), the server's collective_rpc fails and the trainer exits. Captured after the
    pod ended: nothing left to kill."""
    now, start, end = at("17:06:00"), at("14:58:00"), at("16:59:05")
    failed = tuple({"ts": f"{DAY}T{t}Z", "state": "failed", "pods": 0, "failure_count": 1, "preemption_count": 0,
                    "attempt": 0, "max_retries": 0,
                    "attempts": [{"attempt": 0, "terminal_state": "failed", "exit_code": 1,
                                  "ended_at": f"{DAY}T16:59:05Z",
                                  "error": "torch.distributed.DistStoreError: wait timeout after 300000ms, keys: "
                                           "/broadcast_from/0/75465"}]}
                   for t in ("17:00:10", "17:02:11", "17:04:09"))
    cap = incident_capture(root, "swift_weight_sync_store_timeout_terminal", 6901, job_id="swift-grpo-clevr-count-0710",
                           scheduler="kubernetes", now=now, polls=(start + M(1), end - S(20), 120), final_rows=failed,
                           model=model_info("Qwen2.5-VL-3B-Instruct", 3.8), hardware=("H100-80GB-SXM", 8, 1),
                           engines=1, engine_tp=1, colocated=False, max_retries=0, expected_step_s=75,
                           new="ms-swift multimodal GRPO (ClevrCount) with vllm_mode=server")
    rng = cap.rng
    trainer_real = excerpt("open-r1-690_swift_trainer_socket_timeout")
    tail_real = excerpt("ms-swift-4906_diststore_barrier_tail")
    server_real = excerpt("open-r1-690_rollout_server_collective_rpc")
    trn, srv = Log(), Log()
    t, step, total = start + M(4), 1, 500
    while step <= 90:
        srv.add(t - S(30), f'INFO:     127.0.0.1:{50000 + rng.randint(0, 9999)} - "POST /infer/ HTTP/1.1" 200 OK')
        for _ in range(3):
            srv.add(t - S(3), f'INFO:     127.0.0.1:{50000 + rng.randint(0, 9999)} - "POST /update_named_param/ HTTP/1.1" 200 OK')
        r = 0.45 + 0.4 * step / 90 + rng.random() * 0.05
        trn.add(t, "{" + f"'loss': {rng.uniform(-0.005, 0.02):.5f}, 'grad_norm': {0.3 + rng.random() * 0.4:.5f}, "
                     f"'learning_rate': 1e-06, 'memory(GiB)': {31 + rng.random() * 2:.2f}, 'train_speed(iter/s)': 0.0125, "
                     f"'rewards/MultiModalAccuracyORM/mean': {min(r, 1.0):.4f}, 'rewards/Format/mean': 1.0, "
                     f"'reward': {min(r, 1.0) + 1.0:.4f}, 'reward_std': {0.2 + rng.random() * 0.1:.5f}, "
                     f"'kl': {0.0003 + rng.random() * 0.001:.6f}, 'epoch': {step / total * 2:.2f}, "
                     f"'global_step/max_steps': '{step}/{total}', 'percentage': '{100 * step / total:.2f}%', "
                     f"'elapsed_time': '{int((t - start).total_seconds()) // 60}m', 'remaining_time': '{(total - step) * 80 // 60}m'" + "}")
        step += 1
        t += S(76 + rng.random() * 8)
    # the 91st weight push never completes: the server accepts one last param, then the store waits run out
    srv.add(at("16:40:36"), server_real[0])
    add_block(srv, at("16:53:50"), server_real[1:], ("07-10", "11-20"))
    glog = [("[W710", "[W1120")]
    trn.add(at("16:45:37"), rebase(trainer_real[0], *glog))
    trn.add(at("16:53:50"), rebase(trainer_real[1], *glog))
    trn.add(at("16:58:50"), rebase(trainer_real[2], *glog))
    add_block(trn, at("16:58:51"), trainer_real[3:] + tail_real)
    cap.write_text("logs/train.log", trn.render())
    cap.write_text("logs/swift-rollout.log", srv.render())
    cap.expect(verdict=["NO-KILL"], status=["TERMINAL"], failing=["A"], must_not_fail=["restarts"],
               evidence=["(?i)DistStoreError"],
               next_steps=["(?i)(weight|sync|update_named_param|store|51216|rollout server|timeout)"],
               why="Gate A TERMINAL (seed §2: the state poll reads failed with 0 pods -> nothing to kill; report the root-cause "
                   "traceback and whether it is transient). The poster: 'after 90 steps, the training procedure corrupted'. "
                   "The trainer's weight push to the rollout server (update_named_param -> pynccl barrier -> TCPStore get) "
                   "waited 300 s three times ('waitForInput ... 51216 timed out after 300000ms') and died in "
                   "'torch.distributed.DistStoreError: wait timeout after 300000ms, keys: /broadcast_from/0/75465'; the "
                   "server's side logged 'Invocation of collective_rpc method failed'. Fix the weight-sync path (store port "
                   "51216 / timeout) before relaunching.",
               sources=[
                   ("huggingface/open-r1#690", "logs/train.log: the three [c10d] waitForInput lines, the two "
                    "'[INFO:swift] ..._model_checkpoint: None' lines and the plain Traceback head; logs/swift-rollout.log: "
                    "the last 'POST /update_named_param/' line and the 'Invocation of collective_rpc method failed' lines",
                    "dates rebased (W710 / 07-10 -> W1120 / 11-20; times kept); the stored excerpt cuts the plain traceback "
                    "after the trainer.py:2245 frame"),
                   ("modelscope/ms-swift#4906", "logs/train.log: the '[rank0]:'-prefixed traceback tail from _fast_infer down "
                    "to 'torch.distributed.DistStoreError: wait timeout after 300000ms, keys: /broadcast_from/0/75465'",
                    "the same poster's report of the same run ('training to 90 steps'); the stored excerpt starts "
                    "mid-traceback, so the prefixed block has no head"),
                   ("-", "-", "the 90 metrics dicts, earlier server request lines, the 16:40:36 time of the last "
                    "update_named_param line, capture.json, job.json and state.jsonl (running, then failed with 0 pods)"),
               ])


# ============================================================== instructlab/instructlab#2092 (+ #1965)


def build_vllm_slow_startup_client_waiting(root: Path):
    """A training pipeline's vLLM (TP=8) still starting up 2 min in while the controlling process polls it:
    'Waiting for the vLLM server to start ... Attempt: 9/100' next to weights loading and CUDA-graph capture.
    Healthy: the maintainers say start-up can take ~10 min, which is why the client allows 100-300 attempts."""
    now, start = at("23:29:40"), at("23:27:31")
    cap = incident_capture(root, "vllm_slow_startup_client_waiting", 2092, job_id="ilab-phased-train-eval-0817",
                           scheduler="kubernetes", now=now, polls=(start + S(4), now - S(6), 30),
                           model=model_info("granite-7b-lab", 7.0), hardware=("H100-80GB-SXM", 8, 1), engines=1,
                           engine_tp=8, colocated=False, max_retries=1,
                           new="phased training's evaluation step serving the checkpoint with TP=8")
    rng = cap.rng
    real = excerpt("instructlab-2092_vllm_loading_while_client_waits")
    log = Log()
    # reconstructed bring-up before the pasted window: the engine prints its config, the client starts polling
    log.add(at("23:28:20"), f"INFO {md(at('23:28:20'))} llm_engine.py:184] Initializing an LLM engine (v0.5.3.post1) with "
                            "config: model='/var/mnt/inst-xfs/ckpts/hf_format/samples_29117', tensor_parallel_size=8, "
                            "dtype=torch.bfloat16, max_seq_len=4096, enforce_eager=False")

    def waiting(tk: datetime, attempt: int) -> None:
        log.add(tk, f"INFO {DAY} {tk:%H:%M:%S},{rng.randint(100, 999)} instructlab.model.backends.backends:466: Waiting "
                    f"for the vLLM server to start at http://127.0.0.1:43911/v1, this might take a moment... Attempt: "
                    f"{attempt}/100")

    for k in range(1, 5):
        waiting(at("23:28:58") + S(4.45 * (k - 1)) + S(rng.random() * 0.2), k)
    stamps = ["23:29:12", "23:29:16", "23:29:21", "23:29:21", "23:29:22", "23:29:22", "23:29:22", "23:29:22",
              "23:29:22", "23:29:22", "23:29:30", "23:29:34"]
    for k, (ln, hms) in enumerate(zip(real, stamps, strict=True)):
        log.add(at(hms) + S(0.001 * k), rebase(ln, ("2024-08-17", DAY), ("08-17", "11-20")))
    waiting(at("23:29:25"), 7)
    waiting(at("23:29:30"), 8)
    cap.write_text("logs/pod_rank0.log", log.render())
    cap.expect(verdict=["NO-KILL"], status=["ALIVE", "UNKNOWN"], failing=[], must_not_fail=["A", "B", "C", "restarts"],
               why="Early bring-up (seed §5: 'NO-KILL if ... the only failures have a legitimate early-bring-up explanation'). "
                   "2 min after launch the TP=8 vLLM workers have just loaded their weights ('Loading model weights took "
                   "1.5874 GB' on every rank) and are about to capture CUDA graphs, while the controlling process polls the "
                   "server ('Waiting for the vLLM server to start ... Attempt: 9/100'). Start-up was progressing; the "
                   "instructlab maintainers note it 'can take up to 10ish mins to start with some models' (#1965), which is "
                   "why the client allows 100-300 attempts. Nothing is stale, no error: watch for the first "
                   "'Avg generation throughput' line or attempts running out.",
               sources=[
                   ("instructlab/instructlab#2092", "logs/pod_rank0.log: the 12 pasted lines (custom_all_reduce P2P cache, "
                    "Attempts 5, 6 and 9, seven 'Loading model weights took 1.5874 GB', the CUDA-graphs note)",
                    "dates rebased 2024-08-17 / 08-17 -> 2026-11-20 / 11-20 (times kept)"),
                   ("instructlab/instructlab#1965", "- (a fact: 'it can take up to 10ish mins to start with some models')",
                    "why the long poll is expected"),
                   ("-", "-", "the engine config line, Attempts 1-4, 7 and 8, capture.json, job.json and state.jsonl"),
               ])


# ============================================================== THUDM/slime#1487


def build_slime_silent_hang_after_actor_train(root: Path):
    """slime (Megatron + colocated SGLang, 8x B200, Qwen3-4B): ten rollout/train cycles, then 'Timer actor_train
    start' and for hours nothing but the engines answering the router's /metrics scrape. No error, no watchdog,
    no GPU view in the thread: silence alone."""
    now, start = at("09:52:00"), at("03:10:00")
    cap = incident_capture(root, "slime_silent_hang_after_actor_train", 14871, job_id="slime-qwen3-4b-cp4-tp2-0324",
                           scheduler="other", now=now, polls=(start + M(1), now - S(25), 300),
                           model=model_info("Qwen3-4B", 4.0), hardware=("B200-180GB", 8, 1), engines=8, engine_tp=1,
                           colocated=True, max_retries=0,
                           new="first run with context-parallel 4 x tensor-parallel 2 and 40k-token responses")
    rng = cap.rng
    real = excerpt("slime-1487_actor_train_start_then_pings")
    log = Log()
    tr, en = "(MegatronTrainRayActor pid=19450) ", "(SGLangEngine pid=17467) "

    def stamp(t: datetime) -> str:
        return t.strftime("[%Y-%m-%d %H:%M:%S]")

    def pings(t0: datetime, t1: datetime) -> None:
        t = t0
        while t < t1:
            log.add(t, f'{en}{stamp(t)} INFO:     172.17.0.11:{rng.randint(32768, 60999)} - "GET /metrics HTTP/1.1" '
                       "200 OK [repeated 4x across cluster]")
            t += S(15)

    # reconstructed cycles 0-8: ~16 min of rollout (decode batches) then ~4 min of actor_train
    def decode(t0: datetime, t1: datetime) -> None:
        tt = t0
        while tt < t1:
            r = rng.randint(40, 120)
            log.add(tt, f"{en}{stamp(tt)} Decode batch. #running-req: {r}, #token: {r * rng.randint(4000, 9000)}, token usage: "
                        f"{0.3 + rng.random() * 0.5:.2f}, cuda graph: True, gen throughput (token/s): {rng.uniform(5200, 9400):.2f}, "
                        "#queue-req: 0, ")
            tt += S(20 + rng.random() * 4)

    t = start + M(6)
    for n in range(9):
        gen_end = t + M(15 + rng.random() * 2)
        decode(t, gen_end)
        log.add(gen_end, f"{tr}{stamp(gen_end)} data.py:212 - rollout {n}: {{'rollout/response_lengths': "
                         f"{15000 + rng.random() * 5000:.2f}, 'rollout/rewards': {rng.uniform(-0.01, 0.01):.3e}, "
                         f"'rollout/truncated': {rng.random() * 0.3:.4f}}}")
        log.add(gen_end, f"{tr}{stamp(gen_end)} data.py:212 - passrate {n}: {{'passrate/pass@1': {0.2 + 0.01 * n:.4f}, "
                         f"'passrate/pass@8': {0.6 + 0.02 * n:.4f}}}")
        log.add(gen_end, f"{tr}{stamp(gen_end)} timer.py:24 - Timer actor_train start")
        pings(gen_end + S(2), gen_end + M(4))
        t = gen_end + M(4.2)
    # cycle 9 as the thread shows it: the metrics, 'Timer actor_train start', then only the /metrics scrape
    t9 = at("06:36:50")
    decode(t, t9 - S(5))
    for k, ln in enumerate(real):
        tk = t9 + S([0, 0, 0, 2, 17, 32][k]) + S(0.001 * k)
        log.add(tk, rebase(ln, ("2026-03-24", DAY)))
    pings(at("06:37:37"), now - S(3))
    cap.write_text("logs/pod_rank0.log", log.render())
    cap.expect(verdict=["NO-KILL"], status=["WEDGED", "UNKNOWN"], failing=[], must_not_fail=["restarts"], escalate=True,
               evidence=["(?i)(actor_train|silent|stale|no progress|last)"],
               why="Suspected silent wedge, escalate (seed §5: 'Default to NO-KILL + escalate on genuine ambiguity'; the project "
                   "rule: KILL needs two independent evidence families). The poster: 'Training gets stuck indefinitely after "
                   "the rollout phase completes ... The system shows only SGLang health check pings for hours with no training "
                   "progress.' The trainer's last line is 'Timer actor_train start' at 06:36:50, 3 h 15 min before the "
                   "capture against a ~20 min cycle, and the only output since is '\"GET /metrics HTTP/1.1\" 200 OK' every "
                   "15 s: a scrape answered by an idle engine is neither progress nor a hang signature. No watchdog, no "
                   "traceback, no worker death, and no GPU poll in the capture, so the stall is one family: hand the "
                   "supervisor the evidence (and ask for a py-spy dump + GPU poll) rather than kill on silence alone.",
               sources=[
                   ("THUDM/slime#1487", "logs/pod_rank0.log: the 'multi_turn 9' / 'passrate 9' / 'Timer actor_train start' "
                    "trainer lines and the first three SGLang '\"GET /metrics HTTP/1.1\" 200 OK' lines (from the paste in "
                    "turn 1; the leading '> ' quote marks dropped)",
                    "date rebased 2026-03-24 -> 2026-11-20 (times kept); the later /metrics lines repeat the pasted line's "
                    "format with new ports every 15 s; cycles 0-8 (decode batches, rollout/passrate lines), capture.json, "
                    "job.json (8x B200, Qwen3-4B, colocated, from the issue's config) and state.jsonl are reconstructed"),
               ])


BUILDERS = {
    "skyrl_rollout_allreduce_watchdog": build_skyrl_rollout_allreduce_watchdog,
    "openr1_allgather_watchdog_after_verify_timeout": build_openr1_allgather_watchdog_after_verify_timeout,
    "swift_weight_sync_store_timeout_terminal": build_swift_weight_sync_store_timeout_terminal,
    "vllm_slow_startup_client_waiting": build_vllm_slow_startup_client_waiting,
    "slime_silent_hang_after_actor_train": build_slime_silent_hang_after_actor_train,
}


if __name__ == "__main__":
    run_builders(BUILDERS, ROOT, sys.argv[1:])
