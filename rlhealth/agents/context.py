"""Facts several gates share, derived once per judgement from the folded state."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime

from rlhealth.agents.progress_time import progress_time
from rlhealth.agents.recheck import Recheck
from rlhealth.agents.signals import Catalog
from rlhealth.agents.state import EngineState, JobHealth, SignalStat, TracebackRec
from rlhealth.agents.thresholds import DEFAULT, Thresholds
from rlhealth.agents.throughput import Floor, ThroughputTable

EngineBucket = tuple[float, float, float, float, float, float, int]


@dataclass
class Context:
    now: float
    state: JobHealth
    catalog: Catalog
    t: Thresholds
    cadence_s: float | None
    cadence_source: str
    trainer_stale: bool
    trainer_late: bool  # past its cadence, not yet stale: enough with a hang line, else an escalation
    trainer_since_s: float | None
    stale_threshold_s: float
    open_phase: tuple[str, float, float | None] | None  # (name, running for s, longest seen s)
    current_attempt: int | None
    fatal_tb: TracebackRec | None  # a job-fatal traceback after which the trainer did not progress
    engines_recent: dict[str, list[EngineBucket]]  # engine id -> recent buckets
    engines_generating: bool
    latest_engine_ts: float | None
    floor: Floor | None
    spec: dict
    terminal: bool
    blind: str | None  # why the monitor itself cannot see (shipper silent), if so
    # the trainer's last progress as the evidence places it (progress_time.py): every decision reads this,
    # not TrainerState.last_progress_ts
    progress_ts: float | None = None
    # (lent time, issue time, ran for s) when a stuck collective moved a lent progress time back
    progress_bounded: tuple[float, float, float] | None = None

    def signals(self, effect: str, attempt: int | None = None,
                since: float | None = None) -> list[tuple[str, SignalStat]]:
        """(signal, stat) of every declared signal with `effect` seen (in `attempt`, after `since`), newest first."""
        names = self.catalog.names(effect)
        if len(self.state.signals) < len(names):
            # A job has seen fewer signals than the catalogue declares for this effect (~15; 5 effects a
            # judgement): walking its own and testing membership finds the same ones, in an order the
            # sort below makes irrelevant (names are unique, so the sort key is total).
            wanted = self.catalog.name_set(effect)
            names = tuple(n for n in self.state.signals if n in wanted)
        return latest_signals(self.state, names, attempt, since)


def latest_signals(state: JobHealth, names: tuple[str, ...] | list[str], attempt: int | None = None,
                   since: float | None = None) -> list[tuple[str, SignalStat]]:
    """(signal, stat) of each of `names` (distinct) the job has seen, newest first (ties: by name, descending)."""
    out = []
    for name in names:
        stat = state.signals.get(name)
        if stat is None or stat.count == 0:
            continue
        if attempt is not None and stat.attempts and attempt not in stat.attempts:
            continue
        if since is not None and (stat.last_ts is None or stat.last_ts < since):
            continue
        out.append((name, stat))
    out.sort(key=lambda x: (x[1].last_ts or 0.0, x[0]), reverse=True)
    return out


def build_context(state: JobHealth, now_dt: datetime, table: ThroughputTable, catalog: Catalog,
                  t: Thresholds = DEFAULT, recheck: Recheck | None = None) -> Context:
    """With `recheck`, the judging time is its `Moment`: every comparison made with it, here and in the
    gates, records when it would flip (`rlhealth.agents.recheck`)."""
    now: float = now_dt.timestamp() if recheck is None else recheck.moment()
    spec = state.spec or {}
    tr = state.trainer
    cadence, source = cadence_of(state, spec)
    progress = progress_time(state, t)
    since = None if progress.ts is None else now - progress.ts
    threshold = (max(t.stale_cadence_factor * cadence, cadence + t.stale_cadence_margin_s, t.stale_min_s)
                 if cadence else t.stale_unknown_cadence_s)
    open_phase = None
    if tr.open_timers:
        name, started = max(tr.open_timers.items(), key=lambda kv: kv[1])
        # The innermost (latest-started) open timer is what the trainer is doing now.
        open_phase = (name, now - started, tr.phase_max_s.get(name))
    late = bool(since is not None and cadence
                and since > max(t.late_cadence_factor * cadence, cadence + t.late_cadence_margin_s))
    stale = False
    if since is not None:
        stale = since > threshold
        if open_phase and open_phase[2]:
            longest = open_phase[2]
            stale = stale or (open_phase[1] > max(t.phase_overrun_factor * longest, longest + t.phase_overrun_margin_s)
                              and since > max(longest + t.phase_overrun_margin_s, t.stale_min_s))
    sc = state.sched
    # "failed/killed/absent, or 0 pods": a scheduler view with no pods left (and not waiting to start) is terminal.
    terminal = sc.state in ("failed", "killed", "succeeded") or (sc.state not in (None, "pending") and sc.pods == 0)
    fatal_tb = None
    for tb in reversed(state.tracebacks):
        if not tb.fatal:
            continue
        if sc.attempt is not None and tb.attempt is not None and tb.attempt != sc.attempt:
            continue
        if progress.ts is None or tb.ts is None or progress.ts < tb.ts + t.fatal_progress_grace_s:
            fatal_tb = tb
        break
    latest_engine_ts = max((e.last_ts for e in state.engines.values() if e.last_ts is not None), default=None)
    engines_recent: dict[str, list[EngineBucket]] = {}
    if latest_engine_ts is not None:
        for eid, eng in state.engines.items():
            if eng.last_ts is None or (eng.last_ts < latest_engine_ts - t.engine_ghost_s
                                       and not _core_still_waiting(state, eng, latest_engine_ts - t.engine_ghost_s)):
                continue  # a respawned engine's ghost
            window = [s for s in eng.samples if s[0] >= latest_engine_ts - t.engine_window_s]
            if window:
                engines_recent[eid] = window
        # A single stray line (a rotated log cut mid-line loses its prefix) is not an engine.
        if any(sum(s[6] for s in w) >= 3 for w in engines_recent.values()):
            engines_recent = {k: w for k, w in engines_recent.items() if sum(s[6] for s in w) >= 2}
    engines_generating = bool(latest_engine_ts is not None and now - latest_engine_ts < t.engine_generating_s and any(
        s[1] > 0 for w in engines_recent.values() for s in w[-3:]))
    model = spec.get("model") or {}
    hardware = spec.get("hardware") or {}
    active = model.get("active_params_b") or model.get("params_b")
    floor = table.floor(active, hardware.get("gpu"))
    return Context(now, state, catalog, t, cadence, source, stale, late or stale, since, threshold, open_phase,
                   sc.attempt, fatal_tb, engines_recent, engines_generating, latest_engine_ts, floor, spec, terminal,
                   blindness(state, now, t), progress.ts, progress.bounded)


def cadence_of(state: JobHealth, spec: dict) -> tuple[float | None, str]:
    """The trainer's step cadence: learned from steps, else declared in the spec, else unknown."""
    tr = state.trainer
    durations = list(tr.step_durations)
    if len(durations) < 2 and len(tr.step_ts) >= 3:
        pts = sorted(tr.step_ts)
        durations = [b[0] - a[0] for a, b in zip(pts, pts[1:], strict=False) if b[1] > a[1] and b[0] > a[0]]
    prior = spec.get("expected_step_s")
    if len(durations) >= 2:
        return statistics.median(durations[-8:]), f"learned from {len(durations)} steps"
    if durations and prior:
        return max(durations[-1], float(prior)), "spec + 1 observed step"
    if prior:
        return float(prior), "spec expected_step_s"
    if durations:
        return durations[-1], "1 observed step"
    return None, "unknown"


def blindness(state: JobHealth, now: float, t: Thresholds = DEFAULT) -> str | None:
    """A shipper that stopped heartbeating means our silence, not the job's."""
    silent = [sid for sid, (ts, interval, stopping) in state.shippers.items()
              if not stopping and now - ts > max(t.shipper_silent_intervals * interval, t.shipper_silent_min_s)]
    if silent and len(silent) == len(state.shippers):
        return ", ".join(sorted(silent)[:3])
    return None


def _core_still_waiting(state: JobHealth, eng: EngineState, since: float) -> bool:
    """Has the engine's own EngineCore printed waits on its workers since its last stats line, the newest after
    `since`? Then its process is alive and stuck, not a respawned engine's ghost (Gate B judges it stalled or hung
    however long its stats are silent)."""
    run = state.core_waits.get(eng.core) if eng.core else None
    return run is not None and run[0] > (eng.last_ts or 0.0) and run[1] >= since
