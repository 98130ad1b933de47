"""Folding the events that are not log lines into JobHealth: GPU polls, trials, scheduler state,
the job spec, shipper heartbeats. Pure; `now` is an argument."""

from __future__ import annotations

from datetime import datetime

from rlhealth.agents import roles, training_time
from rlhealth.agents.coherence import incoherence_reason, trial_incoherence
from rlhealth.agents.fold_common import clip, epoch, note_signal, round_reading, to_float, touch_role
from rlhealth.agents.state import (
    MAX_EXC_TYPES,
    MAX_GPU_POLLS,
    MAX_GPUS_PER_HOST,
    MAX_HOSTS,
    MAX_REWARDS,
    MAX_SAMPLES,
    MAX_SHIPPERS,
    MAX_TRACEBACKS,
    MAX_TRIAL_NAMES,
    Ev,
    GpuHost,
    JobHealth,
    push_capped,
)
from rlhealth.agents.thresholds import DEFAULT as DEFAULT_THRESHOLDS
from rlhealth.schemas import GpuPoll, JobEnded, JobSpec, JobStatePoll, ShipperHeartbeat, TrialEvent

# A poll whose every GPU reads at least this util while drawing under this power (thresholds.py
# keeps the same numbers for the gates) continues a "spinning" run.
SPIN_UTIL_PCT = DEFAULT_THRESHOLDS.spin_util_pct


SPIN_POWER_W = DEFAULT_THRESHOLDS.spin_power_w


def step_gpu_poll(state: JobHealth, poll: GpuPoll, now: datetime) -> None:
    host = poll.host
    gh = state.gpus.get(host)
    if gh is None:
        if len(state.gpus) >= MAX_HOSTS:
            return
        gh = state.gpus[host] = GpuHost()
    ts = poll.event_time.timestamp()
    readings = [
        (g.index if g.index is not None else i, round_reading(g.util_pct), round_reading(g.mem_used_mib),
         round_reading(g.mem_total_mib), round_reading(g.power_w))
        for i, g in enumerate(poll.gpus[:MAX_GPUS_PER_HOST])
    ]
    if gh.polls and ts < gh.polls[-1][0]:
        return  # late duplicate; polls are kept in time order
    push_capped(gh.polls, (ts, readings), MAX_GPU_POLLS)
    utils = [r[1] for r in readings if r[1] is not None]
    powers = [r[4] for r in readings if r[4] is not None]
    if utils and powers and min(utils) >= SPIN_UTIL_PCT and max(powers) < SPIN_POWER_W:
        gh.spin_since = ts if gh.spin_since is None else gh.spin_since
    else:
        gh.spin_since = None
    # Xids NVML reported (the kernel log may be out of reach in a pod): the same record a dmesg line gives
    for i, g in enumerate(poll.gpus[:MAX_GPUS_PER_HOST]):
        for code in g.xids[:4]:
            push_capped(state.xids, (ts, host, code, f"NVML: Xid {code} on GPU {g.index if g.index is not None else i}"
                                                     f"{f' ({g.uuid})' if g.uuid else ''}"), MAX_TRACEBACKS)
    for err in poll.errors[:4]:
        if err not in gh.errors:
            push_capped(gh.errors, err[:300], 4)
            note_signal(state, "gpu_poll_error", Ev(ts, f"gpu/{host}", clip(err)), state.sched.attempt)
    for app in poll.apps:
        name = (app.process_name or "").strip()
        if name and name not in gh.app_names and len(gh.app_names) < 8:
            gh.app_names.append(name[:80])
    _assign_gpu_role(state, host, gh)


def _assign_gpu_role(state: JobHealth, host: str, gh: GpuHost) -> None:
    geo = (state.spec or {}).get("geometry") or {}
    gh.role, gh.role_source = roles.gpu_host_role(host, geo.get("engine_pods") or [], geo.get("policy_pods") or [],
                                                  gh.app_names)


def step_trial(state: JobHealth, ev_in: TrialEvent, now: datetime, infra_message: bool = False) -> None:
    """`infra_message`: the trial's exception message matched an infrastructure rule (the caller classifies it)."""
    stats = state.eval_trials if ev_in.session == "eval" else state.trials
    ts = ev_in.event_time.timestamp()
    name = ev_in.trial_name
    if ev_in.phase == "started":
        if name in stats.running_names or name in stats.completed_names:
            return
        if name in stats.vanished_names:
            # The same trial directory came back (a retry): it was counted when first seen.
            stats.vanished_names.remove(name)
            push_capped(stats.running_names, name, MAX_TRIAL_NAMES)
            return
        stats.started += 1
        stats.first_started_ts = ts if stats.first_started_ts is None else min(stats.first_started_ts, ts)
        stats.last_started_ts = ts if stats.last_started_ts is None else max(stats.last_started_ts, ts)
        push_capped(stats.running_names, name, MAX_TRIAL_NAMES)
        touch_role(state, roles.ROLLOUT, ts)
        return
    if ev_in.phase == "vanished":
        if name in stats.running_names:
            stats.running_names.remove(name)
            stats.vanished += 1
            push_capped(stats.vanished_names, name, MAX_TRIAL_NAMES)
        return
    # completed
    if name in stats.completed_names:
        return  # duplicate delivery or a re-read trial dir
    if name in stats.running_names:
        stats.running_names.remove(name)
    elif name in stats.vanished_names:
        stats.vanished_names.remove(name)
    else:  # completed without a started event (e.g. the trial began before we looked)
        stats.started += 1
        st_ts = epoch(ev_in.started_at) or ts
        stats.first_started_ts = st_ts if stats.first_started_ts is None else min(stats.first_started_ts, st_ts)
    push_capped(stats.completed_names, name, MAX_TRIAL_NAMES)
    stats.completed += 1
    push_capped(stats.completed_ts, round(ts), MAX_REWARDS)
    stats.last_completed_ts = ts if stats.last_completed_ts is None else max(stats.last_completed_ts, ts)
    touch_role(state, roles.ROLLOUT, ts)
    reward = to_float(ev_in.reward)
    if reward is None:
        stats.null_rewards += 1
    else:
        push_capped(stats.rewards, (ts, reward), MAX_REWARDS)
        if reward > 0:
            stats.nonzero_rewards += 1
        else:
            stats.zero_rewards += 1
    if ev_in.assistant_turns is not None:
        push_capped(stats.turns, ev_in.assistant_turns, MAX_REWARDS)
    if ev_in.exception_type:
        et = ev_in.exception_type.rsplit(".", 1)[-1]
        if et in stats.exc_types or len(stats.exc_types) < MAX_EXC_TYPES:
            stats.exc_types[et] = stats.exc_types.get(et, 0) + 1
            if infra_message:
                stats.exc_infra[et] = stats.exc_infra.get(et, 0) + 1
            if et not in stats.exc_examples:
                msg = f"trial {name}: {et}: {ev_in.exception_message or ''}"
                stats.exc_examples[et] = Ev(ts, f"trial/{name}", clip(msg, 400))
    if ev_in.output_samples:
        reason = trial_incoherence(list(ev_in.output_samples))
        if reason is None:
            stats.coherent_samples += 1
        else:
            stats.incoherent_samples += 1
            stats.incoherent_reasons[reason] = stats.incoherent_reasons.get(reason, 0) + 1
            if len(stats.incoherent_examples) < MAX_SAMPLES:
                sample = next((x for x in ev_in.output_samples if incoherence_reason(x)), ev_in.output_samples[0])
                stats.incoherent_examples.append(Ev(ts, f"trial/{name}", clip(f"[{reason}] {sample}", 300)))


def step_job_state(state: JobHealth, poll: JobStatePoll, now: datetime) -> None:
    sc = state.sched
    ts = poll.event_time.timestamp()
    if sc.last_ts is not None and ts < sc.last_ts:
        return  # an older poll arriving late never overrides a newer one
    sc.last_ts = ts
    sc.state = poll.state
    sc.pods = poll.pods if poll.pods is not None else sc.pods
    sc.failure_count = poll.failure_count if poll.failure_count is not None else sc.failure_count
    sc.preemption_count = poll.preemption_count if poll.preemption_count is not None else sc.preemption_count
    if poll.attempt is not None and sc.attempt is not None and poll.attempt != sc.attempt:
        training_time.note_restart(state.clock, ts)
    sc.attempt = poll.attempt if poll.attempt is not None else sc.attempt
    sc.max_retries = poll.max_retries if poll.max_retries is not None else sc.max_retries
    sc.scheduler = poll.scheduler or sc.scheduler
    if poll.state == "running" and sc.first_running_ts is None:
        sc.first_running_ts = ts
    if poll.attempts:
        for a in poll.attempts[-16:]:
            if a.ended_at is not None:
                training_time.note_restart(state.clock, a.ended_at.timestamp())
        sc.attempts = [
            (a.attempt, a.terminal_state, a.exit_code, epoch(a.ended_at), (a.error or "")[:400])
            for a in poll.attempts[-16:]
        ]
    touch_role(state, roles.SCHEDULER, ts)
    if poll.pod_statuses:
        sc.last_pod_reasons = sorted({r for pod in poll.pod_statuses[:64] for r in pod.reasons[:4]})[:8]
        if "CrashLoopBackOff" in sc.last_pod_reasons:
            sc.crashloop_ts = ts
        restarts = max(pod.restart_count for pod in poll.pod_statuses[:64])
        if restarts > sc.max_pod_restarts:
            if sc.step_at_first_restart is None:
                sc.step_at_first_restart = state.trainer.last_step
            push_capped(sc.restart_history, (round(ts), restarts), 8)
            training_time.note_restart(state.clock, ts)  # at the poll that first shows it: its upper bound
    for pod in poll.pod_statuses[:64]:
        sc.max_pod_restarts = max(sc.max_pod_restarts, pod.restart_count)
        for reason in pod.reasons[:4]:
            if reason in sc.pod_reasons or len(sc.pod_reasons) < 16:
                sc.pod_reasons[reason] = sc.pod_reasons.get(reason, 0) + 1
                if reason not in sc.pod_reason_examples:
                    text = f"pod {pod.name}: {reason}" \
                        + (f" (exit {pod.exit_code})" if pod.exit_code is not None else "") \
                        + (f", restarts={pod.restart_count}" if pod.restart_count else "")
                    sc.pod_reason_examples[reason] = Ev(ts, "pods", clip(text, 300))


def step_job_spec(state: JobHealth, spec: JobSpec, now: datetime) -> None:
    state.spec = spec.model_dump(mode="json", exclude={"source", "ingest_time", "schema_version", "kind"})
    eager = spec.enforce_eager
    if eager is None:
        for key, value in spec.config.items():
            if key.endswith("enforce_eager") and isinstance(value, bool):
                eager = value
                break
    if eager is not None:
        state.enforce_eager = eager
        state.enforce_eager_source = "spec"
    for host, gh in state.gpus.items():
        _assign_gpu_role(state, host, gh)


def step_heartbeat(state: JobHealth, hb: ShipperHeartbeat, now: datetime) -> None:
    if hb.shipper not in state.shippers and len(state.shippers) >= MAX_SHIPPERS:
        return
    state.shippers[hb.shipper] = (hb.event_time.timestamp(), hb.interval_s, hb.stopping)


def step_job_ended(state: JobHealth, ev: JobEnded, now: datetime) -> None:
    state.ended = True
