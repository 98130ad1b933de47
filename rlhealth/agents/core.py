"""HealthCore: the one object every mode (probe, watch, faust worker, replay) calls."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from rlhealth.agents import fold_events, ingest, training_time, verdict
from rlhealth.agents.context import Context, build_context
from rlhealth.agents.findings import Finding, JobMetrics
from rlhealth.agents.gate_liveness import gate_a
from rlhealth.agents.gate_resources import gate_b
from rlhealth.agents.gate_rollouts import gate_c
from rlhealth.agents.reasons import RestartResult
from rlhealth.agents.recheck import Recheck
from rlhealth.agents.restarts import restart_burn
from rlhealth.agents.signals import Catalog
from rlhealth.agents.signatures import Classifier, RuleSet
from rlhealth.agents.state import JobHealth
from rlhealth.agents.throughput import ThroughputTable
from rlhealth.schemas import (
    EventBase,
    GpuPoll,
    JobEnded,
    JobSpec,
    JobStatePoll,
    LogBatch,
    ShipperHeartbeat,
    TrialEvent,
    Verdict,
)

# Event kind -> the fold that applies it (LogBatch and TrialEvent also need the classifier, so they are handled apart).
_FOLDS: dict[type[EventBase], Callable[[JobHealth, Any, datetime], None]] = {
    GpuPoll: fold_events.step_gpu_poll,
    JobStatePoll: fold_events.step_job_state,
    JobSpec: fold_events.step_job_spec,
    ShipperHeartbeat: fold_events.step_heartbeat,
    JobEnded: fold_events.step_job_ended,
}


class HealthCore:
    """Pure per-job health logic: `step` folds an event in, `judge` gives the verdict at `now`."""

    def __init__(self, rules: RuleSet, throughput: ThroughputTable, catalog: Catalog) -> None:
        self.rules = rules
        self.catalog = catalog
        self.classifier = Classifier(rules)
        self.throughput = throughput
        self.rule_packs = dict(rules.versions)
        self.rule_packs[f"throughput:{throughput.id}"] = throughput.version

    def _infra_message(self, message: str | None) -> bool:
        """Does a trial's exception message name an infrastructure failure (a rule of kind infra matches a line of
        it)? The class a trial records can be generic (Modal's NotFoundError, a RuntimeError); its text is not."""
        if not message:
            return False
        return any(m.rule.kind == "infra" for m in self.classifier.scan(message.splitlines()))

    def new_state(self, job_id: str) -> JobHealth:
        return JobHealth(job_id=job_id)

    def step(self, state: JobHealth, event: EventBase, now: datetime) -> tuple[JobHealth, list[Finding]]:
        """Fold one event into the state. May reuse `state`; store the returned object."""
        findings: list[Finding] = []
        if isinstance(event, LogBatch) and event.file_id is not None:
            kept = ingest.drop_folded_lines(state, event)  # a shipper's resend: its lines count once
            if kept is None:
                return state, findings
            event = kept
        ts = event.event_time.timestamp()
        state.events += 1
        if not isinstance(event, (JobSpec, ShipperHeartbeat)):
            state.first_event_ts = ts if state.first_event_ts is None else min(state.first_event_ts, ts)
            state.last_event_ts = ts if state.last_event_ts is None else max(state.last_event_ts, ts)
        if isinstance(event, LogBatch):
            findings = ingest.step_log_batch(state, event, now, self.classifier, self.catalog)
        elif isinstance(event, TrialEvent):
            fold_events.step_trial(state, event, now, infra_message=self._infra_message(event.exception_message))
        else:
            fold = _FOLDS.get(type(event))
            if fold is not None:
                fold(state, event, now)
        return state, findings

    def judge(self, state: JobHealth, now: datetime, seq: int = 0) -> Verdict:
        ctx = build_context(state, now, self.throughput, self.catalog)
        return self._judge(ctx, restart_burn(ctx), state, now, seq)

    def judge_with_metrics(self, state: JobHealth, now: datetime) -> tuple[Verdict, JobMetrics]:
        """`judge(state, now)` and `metrics(state, now, last=<that verdict>)`, sharing one context.

        The worker does both for every job at every tick; the context and the restart burn are pure
        functions of (state, now) that the gates only read, so building them once changes nothing."""
        ctx = build_context(state, now, self.throughput, self.catalog)
        r = restart_burn(ctx)
        v = self._judge(ctx, r, state, now, 0)
        return v, self._metrics(ctx, r, state, now, v)

    def judge_with_recheck(self, state: JobHealth, now: datetime, *,
                           strict: bool = False) -> tuple[Verdict, JobMetrics, datetime | None]:
        """`judge_with_metrics(state, now)` and the recheck time: the earliest judging time at which,
        with this same state, the judgement could differ in anything but the growing ages it prints
        (its call, status, gates' codes and families, evidence; `rlhealth.agents.recheck`). None when
        nothing the judgement compared depends on time. The verdict and metrics are the same objects
        `judge_with_metrics` returns. `strict`: raise on time arithmetic the recheck cannot follow (tests)."""
        rec = Recheck(now.timestamp(), strict=strict)
        ctx = build_context(state, now, self.throughput, self.catalog, recheck=rec)
        r = restart_burn(ctx)
        v = self._judge(ctx, r, state, now, 0)
        m = self._metrics(ctx, r, state, now, v)
        at = None if rec.at == math.inf else datetime.fromtimestamp(rec.at, UTC)
        return v, m, at

    def _judge(self, ctx: Context, r: RestartResult, state: JobHealth, now: datetime, seq: int) -> Verdict:
        a = gate_a(ctx, r)
        b = gate_b(ctx, a)
        c = gate_c(ctx)
        v = verdict.decide(ctx, a, b, c, r, state.job_id, now, self.rule_packs, seq)
        if state.last_event_ts is None:
            return v
        covered = datetime.fromtimestamp(state.last_event_ts, UTC)
        return v.model_copy(update={"event_time": covered, "age_s": round((now - covered).total_seconds(), 3)})

    _ray_death_names: tuple[Catalog | None, tuple[str, ...]] = (None, ())

    def _ray_deaths(self) -> tuple[str, ...]:
        """The catalogue's death signals logged by Ray, worked out once per catalogue (a frozen dataclass)."""
        catalog, names = self._ray_death_names
        if catalog is not self.catalog:
            names = tuple(n for n in self.catalog.names("death") if self.catalog.signals[n].role == "ray")
            self._ray_death_names = (self.catalog, names)
        return names

    def metrics(self, state: JobHealth, now: datetime, last: Verdict | None = None) -> JobMetrics:
        ctx = build_context(state, now, self.throughput, self.catalog)
        return self._metrics(ctx, restart_burn(ctx), state, now, last)

    def _metrics(self, ctx: Context, r: RestartResult, state: JobHealth, now: datetime,
                 last: Verdict | None) -> JobMetrics:
        n = now.timestamp()
        staleness = {role: max(n - ts, 0.0) for role, ts in state.role_last_ts.items()}
        gen = run = wait = None
        if ctx.engines_recent:
            gen = sum(w[-1][1] for w in ctx.engines_recent.values())
            run = sum(w[-1][3] for w in ctx.engines_recent.values())
            wait = sum(w[-1][4] for w in ctx.engines_recent.values())
        t = state.trials
        rewards = [r for _, r in t.rewards]
        signals = state.signals
        def count(*names: str) -> int:
            if len(signals) < len(names):  # the job's few signals, not the catalogue's many (ints: any order)
                wanted = frozenset(names)
                return sum(stat.count for nm, stat in signals.items() if nm in wanted)
            return sum(signals[nm].count for nm in names if nm in signals)
        return JobMetrics(
            job_id=state.job_id,
            log_staleness_s=staleness,
            generation_tokens_per_s=gen,
            running_requests=run,
            waiting_requests=wait,
            trials_completed_total=t.completed,
            trial_reward_mean=(sum(rewards) / len(rewards)) if rewards else None,
            trials_nonzero_reward_ratio=(t.nonzero_rewards / t.completed) if t.completed else None,
            nccl_watchdog_hits_total=count(*self.catalog.names("hang")),
            oom_events_total=count(*self.catalog.names("oom")),
            ray_worker_deaths_total=count(*self._ray_deaths()),
            restarts_burned=r.burned,
            restarts_max=r.max,
            **_verdict_fields(last),
            last_event_time=datetime.fromtimestamp(state.last_event_ts, now.tzinfo) if state.last_event_ts else None,
            trainer_last_step=state.trainer.last_step,
            at=now,
            gpu_util_mean=_gpu_util_mean(state),
            training_time=training_time_of(state, now, ctx.cadence_s),
            engines={eid: tuple((s[0], s[1], s[3], s[4]) for s in w[-ENGINE_BUCKETS_IN_METRICS:])
                     for eid, w in ctx.engines_recent.items()},
        )


_ENDED_STATES = frozenset({"succeeded", "failed", "killed"})


def _verdict_fields(last: Verdict | None) -> dict[str, Any]:
    """The JobMetrics fields that come from the verdict rather than the state."""
    return {"gate_status": {k: getattr(last.gates, k).status for k in "ABC"} if last else {},
            "verdict": last.verdict if last else None,
            "job_status": last.job_status if last else None}


def as_of_verdict(m: JobMetrics, last: Verdict | None) -> JobMetrics:
    """`m` with its verdict fields from `last`: `metrics(state, now, last)` without re-deriving the rest."""
    return replace(m, **_verdict_fields(last))


def training_time_of(state: JobHealth, now: datetime, cadence_s: float | None = None) -> training_time.TrainingTime:
    """Where the job's wall-clock time went up to `now`, or up to its end once it ended."""
    origin = state.first_event_ts
    if state.sched.first_running_ts is not None:
        origin = state.sched.first_running_ts if origin is None else min(origin, state.sched.first_running_ts)
    until = now.timestamp()
    if (state.ended or state.sched.state in _ENDED_STATES) and state.last_event_ts is not None:
        until = min(until, state.last_event_ts)
    ended_attempts = tuple(a[3] for a in state.sched.attempts if a[3] is not None)
    return training_time.summarize(state.clock, origin, until, cadence_s, ended_attempts)


ENGINE_BUCKETS_IN_METRICS = 5  # ~5 minutes of each engine's stats per metric point


def _gpu_util_mean(state: JobHealth) -> float | None:
    utils: list[float] = []
    for host in state.gpus.values():
        if host.polls:
            utils.extend(g[1] for g in host.polls[-1][1] if g[1] is not None)
    return round(sum(utils) / len(utils), 2) if utils else None
