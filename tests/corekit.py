"""A small builder for health-core scenarios: events with an explicit clock, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rlhealth.agents.core import HealthCore
from rlhealth.schemas import (
    AttemptRecord,
    ComputeApp,
    GpuPoll,
    GpuReading,
    JobSpec,
    JobStatePoll,
    LogBatch,
    ShipperHeartbeat,
    Source,
    TrialEvent,
    Verdict,
)

T0 = datetime(2026, 6, 28, 12, 0, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def vllm_ts(t: datetime) -> str:
    return t.strftime("%m-%d %H:%M:%S")


def loguru_ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond // 1000:03d}"


def c10_ts(t: datetime) -> str:
    return f"{t.month}{t.day:02d} {t.strftime('%H:%M:%S')}.123456789"


class Job:
    """Collects events in time order and judges them through one HealthCore."""

    def __init__(self, core: HealthCore, job_id: str = "job-1") -> None:
        self.core = core
        self.job_id = job_id
        self.events: list = []

    # ---- event builders -------------------------------------------------------------
    def spec(self, **kw) -> Job:
        base = dict(job_id=self.job_id, event_time=T0,
                    model={"name": "Qwen3-8B", "params_b": 8.2, "active_params_b": 8.2, "moe": False},
                    hardware={"gpu": "H100-80GB-SXM", "gpus_per_node": 8, "nodes": 2},
                    geometry={"num_inference_engines": 2, "engine_tp": 2, "engine_pods": ["pod-1"],
                              "policy_pods": ["pod-0"]},
                    rollout={"n_concurrent_trials": 16, "expected_episode_s": 1200},
                    expected_step_s=900, max_retries=1, enforce_eager=False)
        base.update(kw)
        self.events.append(JobSpec(**base))
        return self

    def state(self, minute: float, state: str = "running", pods: int = 2, attempt: int = 0, attempts=(),
              max_retries: int = 1, pod_statuses=(), scheduler: str | None = None) -> Job:
        self.events.append(JobStatePoll(job_id=self.job_id, event_time=at(minute), state=state, pods=pods,
                                        failure_count=len(attempts), attempt=attempt, max_retries=max_retries,
                                        attempts=[AttemptRecord(**a) for a in attempts],
                                        pod_statuses=list(pod_statuses), scheduler=scheduler))
        return self

    def states(self, start: float, end: float, every: float = 1.0, **kw) -> Job:
        m = start
        while m <= end:
            self.state(m, **kw)
            m += every
        return self

    def log(self, minute: float, lines: list[str], stream: str = "logs/pod_rank0.log", attempt: int | None = None) -> Job:
        self.events.append(LogBatch(job_id=self.job_id, event_time=at(minute), lines=lines,
                                    source=Source(stream=stream, attempt=attempt)))
        return self

    def engine_stats(self, start: float, end: float, gen: float = 1500.0, running: int = 20, waiting: int = 0,
                     kv: float = 30.0, every_s: float = 10.0, engines: int = 2, prompt: float = 0.0) -> Job:
        """vLLM V1 stats lines from `engines` Ray-launched engines (all print Engine 000)."""
        t = at(start)
        end_t = at(end)
        batch: list[str] = []
        while t <= end_t:
            for e in range(engines):
                batch.append(f"(AsyncVLLMInferenceEngine pid={4000 + e}, ip=10.0.0.{e + 1}) INFO {vllm_ts(t)} "
                             f"[loggers.py:248] Engine 000: Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation "
                             f"throughput: {gen:.1f} tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, GPU KV "
                             f"cache usage: {kv:.1f}%, Prefix cache hit rate: 50.0%")
            if len(batch) >= 200:
                self.events.append(LogBatch(job_id=self.job_id, event_time=t, lines=batch,
                                            source=Source(stream="logs/pod_rank1.log")))
                batch = []
            t += timedelta(seconds=every_s)
        if batch:
            self.events.append(LogBatch(job_id=self.job_id, event_time=end_t, lines=batch,
                                        source=Source(stream="logs/pod_rank1.log")))
        return self

    def steps(self, start: float, end: float, step_min: float = 15.0, first_step: int = 1) -> Job:
        """SkyRL step timers: Started/Finished 'step' every `step_min` minutes."""
        m, step = start, first_step
        while m + step_min <= end:
            t0, t1 = at(m), at(m + step_min)
            self.log(m, [f"(skyrl_entrypoint pid=3716, ip=10.0.3.95) {loguru_ts(t0)} | INFO     | "
                         f"skyrl_train.fully_async_trainer:_train_loop:658 - Started: 'step'"])
            self.log(m + step_min * 0.6, [
                f"(skyrl_entrypoint pid=3716, ip=10.0.3.95) {loguru_ts(at(m + step_min * 0.6))} | INFO     | "
                f"skyrl_train.trainer:train_critic_and_policy:1639 - Started: 'policy_train'"])
            self.log(m + step_min, [
                f"(skyrl_entrypoint pid=3716, ip=10.0.3.95) {loguru_ts(t1)} | INFO     | "
                f"skyrl_train.trainer:train_critic_and_policy:1639 - Finished: 'policy_train', time cost: "
                f"{step_min * 24:.2f}s",
                f"(skyrl_entrypoint pid=3716, ip=10.0.3.95) {loguru_ts(t1)} | INFO     | "
                f"skyrl_train.fully_async_trainer:_train_loop:658 - Finished: 'step', time cost: {step_min * 60:.2f}s"])
            m += step_min
            step += 1
        return self

    def gpu(self, minute: float, host: str, util: float | None, mem: float | None = 40000.0, n: int = 8,
            apps: tuple[str, ...] = ()) -> Job:
        self.events.append(GpuPoll(job_id=self.job_id, event_time=at(minute), host=host,
                                   gpus=[GpuReading(index=i, uuid=f"GPU-{host}-{i}", util_pct=util, mem_used_mib=mem,
                                                    mem_total_mib=81559.0, power_w=300.0) for i in range(n)],
                                   apps=[ComputeApp(gpu_uuid=f"GPU-{host}-0", pid=1, process_name=a) for a in apps]))
        return self

    def trials(self, minute: float, n: int, reward: float | None = 1.0, every_other_zero: bool = True,
               exception: str | None = None, turns: int = 6, session: str = "train", prefix: str = "task",
               samples: tuple[str, ...] = ("I will list the files with ls -la and then grep for the pattern.",),
               message: str | None = None) -> Job:
        for i in range(n):
            name = f"{prefix}-{minute:g}-{i}__abc{i}"
            r = reward
            if reward is not None and every_other_zero and i % 2:
                r = 0.0
            self.events.append(TrialEvent(job_id=self.job_id, event_time=at(minute - 5), phase="started",
                                          trial_name=name, task_name=prefix, session=session))
            self.events.append(TrialEvent(job_id=self.job_id, event_time=at(minute), phase="completed",
                                          trial_name=name, task_name=prefix, session=session, reward=r,
                                          exception_type=exception,
                                          exception_message=(message or f"{exception} happened") if exception else None,
                                          assistant_turns=turns if exception is None else 0,
                                          output_samples=list(samples)))
        return self

    def heartbeat(self, minute: float, shipper: str = "shipper-a", interval_s: float = 30.0) -> Job:
        self.events.append(ShipperHeartbeat(job_id=self.job_id, event_time=at(minute), shipper=shipper,
                                            interval_s=interval_s))
        return self

    # ---- judging --------------------------------------------------------------------
    def judge(self, minute: float) -> Verdict:
        state = self.core.new_state(self.job_id)
        now = at(minute)
        for ev in sorted(self.events, key=lambda e: (0 if e.kind == "job_spec" else 1, e.event_time)):
            state, _ = self.core.step(state, ev, now)
        self.last_state = state
        return self.core.judge(state, now)


def healthy(job: Job, until: float = 120.0) -> Job:
    """A healthy job: steps every 15 min, engines generating, rewards flowing, GPUs busy."""
    job.spec().states(0, until, every=5)
    job.steps(0, until)
    job.engine_stats(until - 30, until - 0.2)
    for m in range(0, int(until) + 1, 10):
        job.gpu(m, "pod-0", 85.0).gpu(m, "pod-1", 70.0)
    job.trials(until - 20, 8).trials(until - 5, 8)
    return job
