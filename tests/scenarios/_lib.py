"""Shared writers for make_scenarios.py: capture glue files, log-line formats, GPU polls, Harbor trials.

Every format follows /work/shared/reference/log-vocabulary.md and harbor-skyrl-formats.md; values are invented.
Deterministic: everything is derived from explicit seeds and fixed timestamps.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ESC = "\x1b"


def dt(s: str) -> datetime:
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)


def iso(t: datetime, frac: bool = False) -> str:
    if frac:
        return t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------- capture dir


class Capture:
    def __init__(self, root: Path, name: str, seed: int):
        self.dir = root / name / "capture"
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True)
        self.scenario_dir = root / name
        self.rng = random.Random(seed)
        self.name = name
        self._uuid_rng = random.Random(seed * 7919 + 1)

    def uuid4(self) -> str:
        return str(uuid.UUID(int=self._uuid_rng.getrandbits(128), version=4))

    def hexid(self, n: int) -> str:
        return "".join(self._uuid_rng.choice("0123456789abcdef") for _ in range(n))

    def path(self, rel: str) -> Path:
        p = self.dir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_text(self, rel: str, text: str) -> None:
        self.path(rel).write_bytes(text.encode("utf-8"))

    def write_bytes(self, rel: str, data: bytes) -> None:
        self.path(rel).write_bytes(data)

    def write_json(self, rel: str, obj, indent: int | None = 2) -> None:
        self.write_text(rel, json.dumps(obj, indent=indent, ensure_ascii=False) + ("\n" if indent else ""))

    def capture_json(self, job_id: str, cluster: str, scheduler: str, captured_at: datetime) -> None:
        self.write_json(
            "capture.json",
            {"job_id": job_id, "cluster": cluster, "scheduler": scheduler, "captured_at": iso(captured_at)},
        )

    def state_jsonl(self, rows: list[dict]) -> None:
        self.write_text("state.jsonl", "".join(json.dumps(r) + "\n" for r in rows))

    def expected(self, obj: dict) -> None:
        obj = {"scenario": self.name, **obj}
        (self.scenario_dir / "expected.json").write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")

    def expect(self, *, verdict: list[str], status: list[str], failing: list[str], must_not_fail: list[str], why: str,
               escalate: bool | None = None, evidence: list[str] | None = None, next_steps: list[str] | None = None,
               next_steps_not: list[str] | None = None, sources: list[tuple[str, str, str]] | None = None) -> None:
        """expected.json, its keys always in one order (so regenerating is byte-stable); a key given as None is left out.

        sources: (thread, verbatim, reconstructed) per origin of the capture's lines (real-excerpt scenarios)."""
        obj = {"verdict_in": verdict, "job_status_in": status, "failing_gates": failing, "must_not_fail_gates": must_not_fail,
               "escalate": escalate, "evidence_must_match": evidence, "next_steps_must_match": next_steps,
               "next_steps_must_not_match": next_steps_not, "why": why,
               "sources": None if sources is None else [{"thread": t, "verbatim": v, "reconstructed": r}
                                                        for t, v, r in sources]}
        self.expected({k: v for k, v in obj.items() if v is not None})

    # Scenario preambles shared by both generators: one place owns the job.json key order and the
    # sacct.txt layout, so every builder writes them alike.

    def k8s_running(self, job_id: str, cluster: str, now: datetime, first: datetime, last: datetime, *,
                    pods: int, every_s: int = 60) -> None:
        """capture.json + a state.jsonl that polls 'running' from first to last (a healthy-looking k8s job)."""
        self.capture_json(job_id, cluster, "kubernetes", now)
        self.state_jsonl(state_rows(first, last, every_s, self.rng, pods=pods))

    def slurm_running(self, job_id: str, name: str, cluster: str, now: datetime, start: datetime) -> None:
        """capture.json + the sacct.txt of a single SLURM leg still RUNNING since start."""
        self.capture_json(job_id, cluster, "slurm", now)
        self.write_text("sacct.txt", f"{SACCT_HEADER}\n{job_id}|{name}|RUNNING|{start:%Y-%m-%dT%H:%M:%S}|Unknown|0:0|0\n")

    def job_json(self, job_id: str, model: dict, hardware: tuple[str, int, int], geometry: dict, *,
                 new: str | list[str], rollout: dict | None = None, expected_step_s: int | None = None,
                 max_retries: int | None = None, enforce_eager: bool | None = None) -> None:
        """job.json in its fixed key order; an optional key given as None is left out (as older jobs omit it)."""
        gpu, per_node, nodes = hardware
        obj = {"job_id": job_id, "model": model, "hardware": {"gpu": gpu, "gpus_per_node": per_node, "nodes": nodes},
               "geometry": geometry, "rollout": rollout, "expected_step_s": expected_step_s,
               "new_or_untested": [new] if isinstance(new, str) else new, "max_retries": max_retries,
               "enforce_eager": enforce_eager}
        self.write_json("job.json", {k: v for k, v in obj.items() if v is not None})

    def gpu_polls(self, host: str, uuids: list[str], start: datetime, end: datetime, every_s: float, fn, total_mib: int,
                  na_cells: set[tuple[int, int, str]] = frozenset()) -> None:
        """gpu/<host>.csv: nvidia-smi polls of len(uuids) GPUs; fn(t, gpu_index) -> (util, mem, power)."""
        polls = gpu_series(start, end, every_s, self.rng, len(uuids), fn)
        self.write_text(f"gpu/{host}.csv", gpu_csv(polls, uuids, total_mib, na_cells))


SACCT_HEADER = "JobID|JobName|State|Start|End|ExitCode|Restarts"


def model_info(name: str, params_b: float, active_params_b: float | None = None) -> dict:
    """job.json 'model': dense unless active_params_b (the MoE active size) is given; always bf16."""
    moe = active_params_b is not None
    return {"name": name, "params_b": params_b, "active_params_b": active_params_b if moe else params_b, "moe": moe,
            "dtype": "bfloat16"}


def h100_nodes(n: int) -> tuple[str, int, int]:
    """job.json 'hardware' of n 8-GPU H100 nodes (the common case)."""
    return ("H100-80GB-SXM", 8, n)


def rollout_info(n_concurrent_trials: int | None = None, expected_episode_s: int | None = None) -> dict:
    """job.json 'rollout': Harbor jobs name their concurrency and episode length; the others only n=8."""
    if n_concurrent_trials is None:
        return {"n_samples_per_prompt": 8}
    return {"n_concurrent_trials": n_concurrent_trials, "n_samples_per_prompt": 8, "expected_episode_s": expected_episode_s}


def state_rows(
    start: datetime,
    end: datetime,
    every_s: int,
    rng: random.Random,
    *,
    pods: int,
    attempt: int = 0,
    max_retries: int = 1,
    attempts: list | None = None,
    state: str = "running",
) -> list[dict]:
    rows, t = [], start
    while t <= end:
        rows.append(
            {
                "ts": iso(t),
                "state": state,
                "pods": pods,
                "failure_count": len(attempts or []),
                "preemption_count": 0,
                "attempt": attempt,
                "max_retries": max_retries,
                "attempts": attempts or [],
            }
        )
        t += timedelta(seconds=every_s + rng.randint(-6, 7))
    return rows


# ---------------------------------------------------------------- log lines


class Log:
    """Timestamped lines of one file; rendered sorted by time (stable), so ranks interleave."""

    def __init__(self):
        self.items: list[tuple[datetime, int, str]] = []
        self._n = 0

    def add(self, t: datetime, line: str) -> None:
        self.items.append((t, self._n, line))
        self._n += 1

    def extend(self, t: datetime, lines: list[str]) -> None:
        for ln in lines:
            self.add(t, ln)

    def render(self, *, truncate_last: int | None = None, head_cut: int | None = None, crlf: bool = False) -> str:
        lines = [ln for _, _, ln in sorted(self.items, key=lambda x: (x[0], x[1]))]
        text = ("\r\n" if crlf else "\n").join(lines) + "\n"
        if truncate_last:
            # the capture caught the writer mid-line: drop the final newline and the tail of the last line
            text = text.rstrip("\n")
            text = text[: len(text) - truncate_last]
        if head_cut:
            text = text[head_cut:]
        return text


def ray_pfx(name: str, pid: int, ip: str | None = None, color: bool = True) -> str:
    body = f"({name} pid={pid}" + (f", ip={ip}" if ip else "") + ")"
    return f"{ESC}[36m{body}{ESC}[0m " if color else body + " "


def vllm_proc_pfx(name: str, pid: int) -> str:
    """vLLM 0.10-0.11 process prefix: always coloured."""
    return f"{ESC}[1;36m({name} pid={pid}){ESC}[0;0m "


def md(t: datetime) -> str:
    return t.strftime("%m-%d %H:%M:%S")


def vllm_v0(t: datetime, level: str, file_line: str, msg: str) -> str:
    return f"{level} {md(t)} {file_line}] {msg}"


def vllm_v1(t: datetime, level: str, file_line: str, msg: str) -> str:
    return f"{level} {md(t)} [{file_line}] {msg}"


def vllm_033(t: datetime, proc: str, pid: int, level: str, file_line: str, msg: str) -> str:
    return f"({proc} pid={pid}) {level} {md(t)} [{file_line}] {msg}"


def loguru(t: datetime, level: str, loc: str, msg: str, color: bool = True) -> str:
    ts = t.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    mod, fn, line = loc.split(":")
    if not color:
        return f"{ts} | {level:<8} | {mod}:{fn}:{line} - {msg}"
    return (
        f"{ESC}[32m{ts}{ESC}[0m | {ESC}[1m{level:<8}{ESC}[0m | {ESC}[36m{mod}{ESC}[0m:{ESC}[36m{fn}{ESC}[0m:"
        f"{ESC}[36m{line}{ESC}[0m - {ESC}[1m{msg}{ESC}[0m"
    )


def ray_py(t: datetime, level: str, file_line: str, msg: str) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S,%f")[:-3] + f"\t{level} {file_line} -- {msg}"


def v0_stats(p: float, g: float, run: int, swp: int, pend: int, gkv: float) -> str:
    return (
        f"Avg prompt throughput: {p:.1f} tokens/s, Avg generation throughput: {g:.1f} tokens/s, Running: {run} reqs, "
        f"Swapped: {swp} reqs, Pending: {pend} reqs, GPU KV cache usage: {gkv:.1f}%, CPU KV cache usage: 0.0%."
    )


def v1_stats(p: float, g: float, run: int, wait: int, kv: float, prefix: float | None, engine: bool = True,
             deferred: int | None = None, preempt: int = 0) -> str:
    parts = [
        f"Avg prompt throughput: {p:.1f} tokens/s",
        f"Avg generation throughput: {g:.1f} tokens/s",
        f"Running: {run} reqs",
        f"Waiting: {wait} reqs",
    ]
    if deferred is not None:
        parts.append(f"Deferred: {deferred} reqs")
    if preempt:
        parts.append(f"Preemptions: {preempt}")
    parts.append(f"GPU KV cache usage: {kv:.1f}%")
    if prefix is not None:
        parts.append(f"Prefix cache hit rate: {prefix:.1f}%")
    return ("Engine 000: " if engine else "") + ", ".join(parts)


def tqdm_bar(desc: str, n: int, total: int, elapsed: str, remain: str, rate: str) -> str:
    pct = int(100 * n / total)
    filled = int(10 * n / total)
    bar = "\u2588" * filled + (" " * (10 - filled))
    return f"{desc}: {pct:3d}%|{bar}| {n}/{total} [{elapsed}<{remain}, {rate}]"


def cr_progress(desc: str, total: int, secs_per: float) -> str:
    """A tqdm bar redrawn with \\r (as it lands in a file), ending at 100%."""
    frames = []
    for i in range(total + 1):
        el = int(i * secs_per)
        rem = int((total - i) * secs_per)
        frames.append(
            tqdm_bar(desc, i, total, f"{el // 60:02d}:{el % 60:02d}", f"{rem // 60:02d}:{rem % 60:02d}",
                     f"{secs_per:.2f}s/it" if i else "?it/s")
        )
    return "\r".join(frames)


# ---------------------------------------------------------------- nvidia-smi polls

GPU_HEADER = "timestamp, index, uuid, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W]"


def gpu_uuids(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        h = "".join(rng.choice("0123456789abcdef") for _ in range(32))
        out.append(f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    return out


def gpu_series(start: datetime, end: datetime, every_s: float, rng: random.Random, n_gpus: int, fn) -> list:
    """fn(t, gpu_index) -> (util, mem, power)."""
    polls, t = [], start
    while t <= end:
        polls.append((t, [fn(t, g) for g in range(n_gpus)]))
        t += timedelta(seconds=every_s + rng.uniform(-3, 3))
    return polls


def gpu_csv(polls: list[tuple[datetime, list[tuple]]], uuids: list[str], total_mib: int,
            na_cells: set[tuple[int, int, str]] = frozenset()) -> str:
    """polls: [(t, [(util, mem, power), ...per gpu])]; na_cells: {(poll_i, gpu_i, 'power'|'util')} -> [N/A]."""
    out = []
    for pi, (t, rows) in enumerate(polls):
        out.append(GPU_HEADER)
        for gi, (util, mem, power) in enumerate(rows):
            ts = (t + timedelta(milliseconds=gi * 0.7)).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
            u = "[N/A]" if (pi, gi, "util") in na_cells else f"{int(util)} %"
            pw = "[N/A]" if (pi, gi, "power") in na_cells else f"{power:.2f} W"
            out.append(f"{ts}, {gi}, {uuids[gi]}, {u}, {int(mem)} MiB, {total_mib} MiB, {pw}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- Harbor trials

PROMPT_HEAD = (
    "You are an AI assistant tasked with solving command-line tasks in a Linux environment. You will be given a task "
    "description and the output from previously executed commands. ...\n\nTask Description:\n"
)


def raw_json_turn(analysis: str, plan: str, keys: list[str], complete: bool = False) -> str:
    cmds = ", ".join(json.dumps({"keystrokes": k, "duration": 0.1 if len(k) < 40 else 1.0}) for k in keys)
    return (
        "{" + f"\"analysis\": {json.dumps(analysis)}, \"plan\": {json.dumps(plan)}, \"commands\": [{cmds}], "
        f"\"task_complete\": {'true' if complete else 'false'}" + "}"
    )


def trial_name(rng: random.Random, task: str) -> str:
    alphabet = "23456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
    return f"{task[:32].rstrip('_-')}__{''.join(rng.choice(alphabet) for _ in range(7))}"


def trial_config(name: str, task: str, trials_dir: str, model: str, api_base: str, session: str, *,
                 agent_timeout: float, verifier_timeout: float, max_input_tokens: int, env_type: str,
                 task_root: str) -> dict:
    return {
        "task": {"path": f"{task_root}/{task}", "git_url": None, "git_commit_id": None, "overwrite": False,
                 "download_dir": None, "source": None},
        "trial_name": name,
        "trials_dir": trials_dir,
        "timeout_multiplier": 1.0,
        "agent_timeout_multiplier": None,
        "verifier_timeout_multiplier": None,
        "agent_setup_timeout_multiplier": None,
        "environment_build_timeout_multiplier": None,
        "agent": {
            "name": "terminus-2", "import_path": None, "model_name": f"hosted_vllm/{model}",
            "override_timeout_sec": agent_timeout, "override_setup_timeout_sec": None, "max_timeout_sec": None,
            "kwargs": {
                "max_episodes": 999999, "enable_summarize": False, "store_all_messages": True,
                "interleaved_thinking": False, "collect_rollout_details": False, "strict_json_parser": True,
                "enable_episode_logging": False, "record_terminal_session": False, "enable_pane_logging": False,
                "trajectory_config": {"raw_content": True}, "api_base": api_base, "key": "fake_key",
                "session_id": session,
                "model_info": {"max_input_tokens": max_input_tokens, "max_output_tokens": 4096,
                               "input_cost_per_token": 0, "output_cost_per_token": 0},
            },
            "env": {},
        },
        "environment": {
            "type": env_type, "import_path": None, "force_build": False, "delete": True, "override_cpus": 1,
            "override_memory_mb": 2048, "override_storage_mb": 4096, "override_gpus": None,
            "suppress_override_warnings": False, "mounts_json": None, "env": {}, "kwargs": {"auto_snapshot": True},
        },
        "verifier": {"override_timeout_sec": verifier_timeout, "max_timeout_sec": None, "disable": False},
        "artifacts": [],
        "job_id": None,
    }


class TrialSpec:
    """One trial: instruction, per-turn (assistant raw text, observation), outcome."""

    def __init__(self, task: str, instruction: str, turns: list[tuple[str, str]], *, started: datetime,
                 agent_s: float, reward: float | None = None, exc: str | None = None, exc_msg: str = "",
                 verifier_stdout: str | None = None, completed: bool = True, host: str = "3f9c1d2e7a10",
                 tb: str | None = None, env_failed: bool = False):
        self.task, self.instruction, self.turns = task, instruction, turns
        self.started, self.agent_s, self.reward, self.exc, self.exc_msg = started, agent_s, reward, exc, exc_msg
        self.verifier_stdout, self.completed, self.host = verifier_stdout, completed, host
        # tb: the exception.txt text (default: EXC_TRACEBACKS); env_failed: the environment never started, so
        # Harbor leaves agent_setup / agent_execution / agent_result null and writes no trajectory
        self.tb, self.env_failed = tb, env_failed


EXC_TRACEBACKS = {
    "AgentTimeoutError": (
        "Traceback (most recent call last):\n  File \"/usr/lib/python3.12/asyncio/tasks.py\", line 520, in wait_for\n"
        "    return await fut\n           ^^^^^^^^^\n  ...\nasyncio.exceptions.CancelledError\n\nThe above exception was "
        "the direct cause of the following exception:\n\nTraceback (most recent call last):\n  File \".../harbor/trial/"
        "trial.py\", line 500, in run\n    await self._execute_agent()\n  File \".../harbor/trial/trial.py\", line 277, "
        "in _execute_agent\n    raise AgentTimeoutError(\nharbor.trial.trial.AgentTimeoutError: {msg}\n"
    ),
    "VerifierTimeoutError": (
        "Traceback (most recent call last):\n  File \"/usr/lib/python3.12/asyncio/tasks.py\", line 520, in wait_for\n"
        "    return await fut\n  ...\nTimeoutError\n\nThe above exception was the direct cause of the following "
        "exception:\n\nTraceback (most recent call last):\n  File \".../harbor/trial/trial.py\", line 520, in run\n"
        "    await self._run_verification()\n  File \".../tenacity/asyncio/__init__.py\", line 189, in async_wrapped\n"
        "    ...\n  File \".../harbor/trial/trial.py\", line 312, in _verify_with_retry\n    raise VerifierTimeoutError(\n"
        "harbor.trial.trial.VerifierTimeoutError: {msg}\n"
    ),
    "ContextLengthExceededError": (
        "Traceback (most recent call last):\n  File \".../harbor/llms/lite_llm.py\", line 412, in call\n"
        "    response = await litellm.acompletion(**completion_kwargs)\n  ...\nlitellm.exceptions.BadRequestError: "
        "litellm.BadRequestError: Hosted_vllmException - This model's maximum context length is 32768 tokens. However, "
        "your request has 32911 input tokens. Please reduce the length of the input messages.\n\nDuring handling of the "
        "above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \".../harbor/trial/"
        "trial.py\", line 500, in run\n    await self._execute_agent()\n  ...\n  File \".../harbor/llms/lite_llm.py\", "
        "line 592, in _handle_llm_error\n    raise ContextLengthExceededError\nharbor.llms.base.ContextLengthExceededError\n"
    ),
}


def write_trial(cap: Capture, spec: TrialSpec, *, trials_dir: str, model: str, api_base: str, task_root: str,
                agent_timeout: float = 900.0, verifier_timeout: float = 120.0, max_input_tokens: int = 32768,
                env_type: str = "daytona", model_short: str | None = None) -> str:
    rng = cap.rng
    name = trial_name(rng, spec.task)
    base = f"trace_jobs/{name}"
    session = cap.hexid(32)
    cfg = trial_config(name, spec.task, trials_dir, model, api_base, session, agent_timeout=agent_timeout,
                       verifier_timeout=verifier_timeout, max_input_tokens=max_input_tokens, env_type=env_type,
                       task_root=task_root)
    cap.write_text(f"{base}/config.json", json.dumps(cfg, indent=4))
    cap.write_text(f"{base}/trial.log", "")
    short = model_short or model.split("/")[-1]

    env_start = spec.started + timedelta(milliseconds=30)
    env_end = env_start + timedelta(seconds=6 + rng.random() * 9)
    ag_setup_end = env_end + timedelta(seconds=1 + rng.random() * 2)
    n = len(spec.turns)
    # turns spread over agent_s; only the turns that happened before now are written for running trials
    turn_times = [ag_setup_end + timedelta(seconds=spec.agent_s * (i + 1) / max(n, 1) * (0.85 + 0.1 * rng.random()))
                  for i in range(n)]
    prompt = PROMPT_HEAD + spec.instruction + f"\n\nCurrent terminal state:\nCurrent Terminal Screen:\nroot@{spec.host}:/app# \n"
    steps = [{"step_id": 1, "timestamp": ag_setup_end.isoformat(), "source": "user", "message": prompt}]
    messages = [{"role": "user", "content": prompt}]
    api_ms = []
    for i, ((assistant, obs), tt) in enumerate(zip(spec.turns, turn_times)):
        ptoks = 900 + 700 * i + rng.randint(0, 400)
        ctoks = max(20, len(assistant) // 3 + rng.randint(0, 60))
        step = {"step_id": i + 2, "timestamp": tt.isoformat(), "source": "agent", "model_name": short,
                "message": assistant}
        if obs is not None:
            step["observation"] = {"results": [{"content": obs}]}
        step["metrics"] = {"prompt_tokens": ptoks, "completion_tokens": ctoks}
        steps.append(step)
        messages.append({"role": "assistant", "content": assistant})
        if obs is not None and i < n - 1:
            messages.append({"role": "user", "content": obs})
        api_ms.append(round(2000 + rng.random() * 30000, 1))
    traj = {"schema_version": "ATIF-v1.6", "session_id": cap.uuid4(),
            "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": f"hosted_vllm/{model}",
                      "extra": {"parser": "json", "temperature": 1.0}},
            "steps": steps}
    if spec.completed:
        traj["final_metrics"] = {"total_prompt_tokens": sum(s.get("metrics", {}).get("prompt_tokens", 0) for s in steps),
                                 "total_completion_tokens": sum(s.get("metrics", {}).get("completion_tokens", 0) for s in steps),
                                 "total_cached_tokens": 0, "total_cost_usd": 0.0, "total_steps": len(steps)}
    if not spec.env_failed:
        cap.write_text(f"{base}/agent/trajectory.json", json.dumps(traj, indent=2, ensure_ascii=False))
    if not spec.completed:
        return name

    ag_end = env_end if spec.env_failed else ag_setup_end + timedelta(seconds=spec.agent_s)
    verifier_ran = spec.exc in (None, "AgentTimeoutError", "VerifierTimeoutError")
    v_start = ag_end + timedelta(milliseconds=100)
    if spec.exc == "VerifierTimeoutError":
        v_end = v_start + timedelta(seconds=2 * verifier_timeout + 3 + rng.random() * 4)
    else:
        v_end = v_start + timedelta(seconds=8 + rng.random() * 30)
    finished = (v_end if verifier_ran else ag_end) + timedelta(seconds=0.5 + rng.random())
    if spec.exc != "VerifierTimeoutError" and verifier_ran and spec.reward is not None:
        if spec.verifier_stdout:
            cap.write_text(f"{base}/verifier/test-stdout.txt", spec.verifier_stdout)
        cap.write_text(f"{base}/verifier/reward.txt", f"{int(spec.reward) if spec.reward in (0, 1) else spec.reward}\n")
    exc_info = None
    if spec.exc:
        tb = spec.tb or EXC_TRACEBACKS.get(spec.exc, "Traceback (most recent call last):\n  ...\n{msg}\n").replace("{msg}", spec.exc_msg)
        occurred = (v_end if spec.exc == "VerifierTimeoutError" else ag_end)
        exc_info = {"exception_type": spec.exc, "exception_message": spec.exc_msg, "exception_traceback": tb,
                    "occurred_at": occurred.strftime("%Y-%m-%dT%H:%M:%S.%f")}
        cap.write_text(f"{base}/exception.txt", tb)
    n_episodes = n + (1 if spec.exc in ("AgentTimeoutError", "ContextLengthExceededError") else 0)
    result = {
        "id": cap.uuid4(),
        "task_name": spec.task,
        "trial_name": name,
        "trial_uri": f"file://{trials_dir}/{name}",
        "task_id": {"path": f"{task_root}/{spec.task}"},
        "source": None,
        "task_checksum": hashlib.sha256(spec.task.encode()).hexdigest(),
        "config": cfg,
        "agent_info": {"name": "terminus-2", "version": "2.0.0",
                       "model_info": {"name": short, "provider": "hosted_vllm"}},
        "agent_result": None if spec.env_failed else {
            "n_input_tokens": sum(s.get("metrics", {}).get("prompt_tokens", 0) for s in steps),
            "n_cache_tokens": 0,
            "n_output_tokens": sum(s.get("metrics", {}).get("completion_tokens", 0) for s in steps),
            "cost_usd": None,
            "rollout_details": None,
            "metadata": {"n_episodes": n_episodes, "api_request_times_msec": api_ms, "summarization_count": 0,
                         "all_messages": messages},
        },
        "verifier_result": ({"rewards": {"reward": spec.reward}}
                            if (verifier_ran and spec.exc != "VerifierTimeoutError" and spec.reward is not None) else None),
        "exception_info": exc_info,
        "started_at": iso(spec.started, frac=True),
        "finished_at": iso(finished, frac=True),
        "environment_setup": {"started_at": iso(env_start, frac=True), "finished_at": iso(env_end, frac=True)},
        "agent_setup": None if spec.env_failed else {"started_at": iso(env_end, frac=True), "finished_at": iso(ag_setup_end, frac=True)},
        "agent_execution": None if spec.env_failed else {"started_at": iso(ag_setup_end, frac=True), "finished_at": iso(ag_end, frac=True)},
        "verifier": ({"started_at": iso(v_start, frac=True), "finished_at": iso(v_end, frac=True)}
                     if verifier_ran else None),
    }
    cap.write_text(f"{base}/result.json", json.dumps(result, indent=4, ensure_ascii=False))
    return name


def pytest_stdout(passed: int, failed: list[tuple[str, str]], secs: float) -> str:
    total = passed + len(failed)
    marks = "F" * len(failed) + "." * passed
    out = [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.9, pytest-8.3.3, pluggy-1.5.0",
        "rootdir: /tests",
        f"collected {total} items",
        "",
        f"../tests/test_outputs.py {marks}{' ' * max(1, 44 - len(marks))}[100%]",
        "",
    ]
    if failed:
        out += ["=================================== FAILURES ==================================="]
        for test, err in failed:
            out += [f"_{'_' * 20} {test} {'_' * 20}", "", f"E       {err}", ""]
        out += ["=========================== short test summary info ============================"]
        out += [f"FAILED ../tests/test_outputs.py::{t} - {e}" for t, e in failed]
        out += [f"========================= {len(failed)} failed, {passed} passed in {secs:.2f}s ========================="]
    else:
        out += [f"============================== {passed} passed in {secs:.2f}s =============================="]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- command line


def run_builders(builders: dict, root: Path, argv: list[str]) -> None:
    """Both generators' CLI: build the named scenarios (all when none) and print each capture's size."""
    for n in argv or list(builders):
        builders[n](root)
        size = sum(p.stat().st_size for p in (root / n / "capture").rglob("*") if p.is_file())
        print(f"{n}: {size / 1024:.0f} KB")
