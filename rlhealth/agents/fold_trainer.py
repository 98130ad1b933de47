"""Trainer progress lines folded into JobHealth: step frontier, phase timers, weight-sync windows
and metric histories (loss, grad norm, entropy). Pure."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from rlhealth.agents import roles, training_time
from rlhealth.agents.bytescan import native_function
from rlhealth.agents.fold_common import as_int, to_float, touch_role
from rlhealth.agents.state import (
    MAX_METRIC_HISTORY,
    MAX_STEP_HISTORY,
    MAX_TIMERS,
    Ev,
    JobHealth,
    TrainerState,
    push_capped,
)


class LatestProgress:
    """A batch's newest progress line: `trainer_progress` notes it here and `apply` writes it to the
    trainer at the batch's end (nothing else reads last_progress_ts), so the line's Ev is built once
    (`make_ev(k, ts)`, k standing for the line) instead of per progress line."""

    __slots__ = ("ts", "k")

    def __init__(self, tr: TrainerState) -> None:
        self.ts = tr.last_progress_ts
        self.k = -1

    def apply(self, tr: TrainerState, make_ev: Callable[[int, float | None], Ev]) -> None:
        if self.k >= 0:
            ev = make_ev(self.k, self.ts)
            tr.last_progress_ts = self.ts
            tr.last_progress_text = ev.text
            tr.last_progress_source = ev.source


def trainer_progress(state: JobHealth, sig: str, f: dict, ts: float | None, k: int,
                     make_ev: Callable[[int, float | None], Ev], latest: LatestProgress) -> None:
    """Fold one progress line (k: the line, as `make_ev` knows it); the newest progress line goes to `latest`."""
    tr = state.trainer
    touch_role(state, roles.TRAINER, ts)
    if sig == "trainer_step":
        step = as_int(f.get("step"))
        if step is not None and tr.last_step is not None and step <= tr.last_step:
            # A restarted process re-printing the same step is not progress.
            return
    if ts is not None and (latest.ts is None or ts >= latest.ts):
        latest.ts = ts
        latest.k = k
    if sig == "timer_start":
        name = str(f.get("name", ""))
        if ts is not None and name:
            if len(tr.open_timers) >= MAX_TIMERS and name not in tr.open_timers:
                tr.open_timers.pop(next(iter(tr.open_timers)))
            tr.open_timers[name] = ts
        if name in ("sync_weights", "weight_sync", "broadcast_to_inference_engines"):
            tr.in_weight_sync_since = ts
    elif sig == "timer_finish":
        name = str(f.get("name", ""))
        secs = to_float(f.get("seconds"))
        tr.open_timers.pop(name, None)
        if secs is not None and name:
            if name not in tr.phase_max_s and len(tr.phase_max_s) >= MAX_TIMERS:
                return
            tr.phase_max_s[name] = max(tr.phase_max_s.get(name, 0.0), secs)
            if name in ("step", "train_step", "training_step"):
                push_capped(tr.step_durations, secs, MAX_STEP_HISTORY)
        if name in ("sync_weights", "weight_sync", "broadcast_to_inference_engines"):
            tr.in_weight_sync_since = None
    elif sig == "trainer_step":
        step = as_int(f.get("step"))
        if step is not None and ts is not None:
            if tr.last_step is None or step != tr.last_step:
                push_capped(tr.step_ts, (ts, step), MAX_STEP_HISTORY)
            tr.last_step = step if tr.last_step is None else max(tr.last_step, step)
            training_time.note_step(state.clock, ts, step)
    elif sig == "trainer_metrics":
        _trainer_metrics(state, f, ts, k, make_ev)


def fold_progress(state: JobHealth, sigs: list[str], fields: list[dict], tss: list[float | None], ks: list[int],
                  make_ev: Callable[[int, float | None], Ev], latest: LatestProgress) -> None:
    """`trainer_progress(state, sigs[i], fields[i], tss[i], ks[i], make_ev, latest)` for each line in
    order, but for its `touch_role(state, roles.TRAINER, ts)`, which the caller did in the lines' order
    (the roles' dict order is part of the state). Step and metric lines (most of a dense trainer log)
    are folded here with what they read hoisted out of the loop; nothing else in a batch's fold reads
    or writes the trainer, its clock or the metric histories between them (the caller folds these
    lines before any line of another effect)."""
    tr = state.trainer
    clock = state.clock
    hist = state.metrics
    plans = _PLANS
    for sig, f, ts, k in zip(sigs, fields, tss, ks):
        if sig == "trainer_metrics":
            if ts is not None and (latest.ts is None or ts >= latest.ts):
                latest.ts = ts
                latest.k = k
            raw = f.get("metrics")
            step = f.get("step")
            if type(step) is not int:
                step = as_int(step)
            if isinstance(raw, str):
                pairs = ("'" in raw or '"' in raw) and _quoted_pairs(raw) or _bare_pairs(raw)
                plan = plans.get(tuple([key for key, _ in pairs])) or _plan_of(pairs)
            else:
                pairs = []
                plan = _plan_of(pairs)
            if step is not None and ts is not None:
                last = tr.last_step
                if last is None or step > last:
                    push_capped(tr.step_ts, (ts, step), MAX_STEP_HISTORY)
                    tr.last_step = step
                    training_time.note_step(clock, ts, step, _step_time(pairs, plan) if plan[0] >= 0 else None)
                elif step == last and clock.untimed_from is not None and plan[0] >= 0 \
                        and (duration := _step_time(pairs, plan)) is not None:
                    training_time.note_duration(clock, step, duration)
            if ts is None or not plan[1]:
                continue
            seen = 0  # the kinds already kept from this line, as bits (one value per kind per line)
            nonfinite_line = False
            for i, kind, loss_or_grad in plan[1]:
                v = float(pairs[i][1].replace("Infinity", "inf"))
                if v - v != 0.0:  # not finite (inf - inf and nan - nan are nan)
                    if loss_or_grad and not nonfinite_line:
                        nonfinite_line = True
                        hist.nonfinite += 1
                        hist.nonfinite_ev = make_ev(k, ts)
                    continue
                if kind is None:
                    continue
                bit = _KIND_BITS[kind]
                if seen & bit:
                    continue
                seen |= bit
                items = getattr(hist, kind)
                items.append((ts, v))
                if len(items) > MAX_METRIC_HISTORY:
                    del items[: len(items) - MAX_METRIC_HISTORY]
        elif sig == "trainer_step":
            step = f.get("step")
            if type(step) is not int:
                step = as_int(step)
            last = tr.last_step
            if step is not None and last is not None and step <= last:
                continue  # a restarted process re-printing the same step is not progress
            if ts is not None and (latest.ts is None or ts >= latest.ts):
                latest.ts = ts
                latest.k = k
            if step is not None and ts is not None:
                if last is None or step != last:
                    push_capped(tr.step_ts, (ts, step), MAX_STEP_HISTORY)
                tr.last_step = step if last is None else max(last, step)
                training_time.note_step(clock, ts, step)
        else:
            trainer_progress(state, sig, f, ts, k, make_ev, latest)


_KIND_BITS = {"loss": 1, "grad_norm": 2, "entropy": 4}


# Unquoted "key:value" (verl " - actor/entropy:0.5") and "key: value |" (Megatron "lm loss: 2.1E+00 |").
_BARE_PAIR_RE = re.compile(r"(?:^|[\s|{,])([A-Za-z][\w/.\-]*(?: [a-z][\w/.\-]*)?)\s*:\s*"
                           r"(-?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+)|-?(?:nan|NaN|inf|Infinity))(?=\s*(?:\||-\s|,|\}|$))")


# findall of it, written out in C when the helper is built (tests/test_bytescan.py holds the two equal)
_bare_pairs: Callable[[str], list[tuple[str, str]]] = native_function("bare_pairs") or _BARE_PAIR_RE.findall


_METRIC_PAIR_RE = re.compile(r"""['"]([\w/.\-]+)['"]\s*:\s*"""
                             r"(-?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+)|-?(?:nan|NaN|inf|Infinity))")


# findall of it, written out in C when the helper is built (tests/test_bytescan.py holds the two equal)
_quoted_pairs: Callable[[str], list[tuple[str, str]]] = native_function("quoted_pairs") or _METRIC_PAIR_RE.findall


# A step's own wall time in trainer metric dicts (verl prints it on every step line).
_STEP_TIME_KEYS = frozenset({"timing_s/step", "timing/step", "time/step", "step_time", "train/step_time"})


# What a metric line's keys ask of it, by the tuple of its keys (a trainer prints the same keys on every
# line): the index of its first step-time pair (-1: none), and (index, kind, non-finite alarm) of each pair
# whose metric is kept or watched, in order (the others are skipped whatever their value).
_Plan = tuple[int, tuple[tuple[int, str | None, bool], ...]]
_PLANS: dict[tuple[str, ...], _Plan] = {}


def _plan_of(pairs: list[tuple[str, str]]) -> _Plan:
    keys = tuple([key for key, _ in pairs])
    plan = _PLANS.get(keys)
    if plan is None:
        step_time = next((i for i, key in enumerate(keys) if key.lower() in _STEP_TIME_KEYS), -1)
        watched = []
        for i, key in enumerate(keys):
            kind, loss_or_grad = _metric_key(key)
            if kind is not None or loss_or_grad:
                watched.append((i, kind, loss_or_grad))
        plan = (step_time, tuple(watched))
        if len(_PLANS) >= 1024:
            _PLANS.clear()
        _PLANS[keys] = plan
    return plan


def _step_time(pairs: list[tuple[str, str]], plan: _Plan) -> float | None:
    """The first step-time pair's value, when finite."""
    i = plan[0]
    if i < 0:
        return None
    v = float(pairs[i][1].replace("Infinity", "inf"))
    return v if math.isfinite(v) else None


def _metric_key(key: str) -> tuple[str | None, bool]:
    """(the history a metric name feeds: loss, grad_norm, entropy or None; whether a non-finite value
    of it is an alarm); a line's plan (`_plan_of`) holds them for its keys."""
    lk = key.lower().replace(" ", "_")
    kind = ("loss" if (lk.endswith("policy_loss") or lk in ("final_loss", "loss", "lm_loss") or lk.endswith("/loss")
                       or lk.endswith("pg_loss"))
            else "grad_norm" if "grad_norm" in lk
            else "entropy" if lk.endswith("entropy") else None)
    return kind, "loss" in lk or "grad" in lk


def _trainer_metrics(state: JobHealth, f: dict, ts: float | None, k: int,
                     make_ev: Callable[[int, float | None], Ev]) -> None:
    """Loss, grad norm and entropy from WANDB_MIRROR JSON or SkyRL's printed stats dict (both key: number)."""
    raw = f.get("metrics")
    step = as_int(f.get("step"))
    # quoted pairs need a quote: verl's and Megatron's lines skip that search (a substring test is ~free)
    pairs = (("'" in raw or '"' in raw) and _quoted_pairs(raw) or _bare_pairs(raw)) \
        if isinstance(raw, str) else []
    plan = _plan_of(pairs)
    if step is not None and ts is not None:
        tr = state.trainer
        if tr.last_step is None or step > tr.last_step:
            push_capped(tr.step_ts, (ts, step), MAX_STEP_HISTORY)
            tr.last_step = step
            training_time.note_step(state.clock, ts, step, _step_time(pairs, plan))
        elif step == tr.last_step and state.clock.untimed_from is not None \
                and (duration := _step_time(pairs, plan)) is not None:
            # the step line came first and moved the frontier without time passing (unstamped)
            training_time.note_duration(state.clock, step, duration)
    if not isinstance(raw, str) or ts is None:
        return
    hist = state.metrics
    seen: set[str] = set()
    nonfinite_line = False
    for i, kind, loss_or_grad in plan[1]:  # only the pairs kept or watched for non-finite values, in order
        v = float(pairs[i][1].replace("Infinity", "inf"))
        if not math.isfinite(v):
            if loss_or_grad and not nonfinite_line:
                nonfinite_line = True  # one line is one occurrence, however many fields it makes NaN
                hist.nonfinite += 1
                hist.nonfinite_ev = make_ev(k, ts)
            continue
        if kind is None or kind in seen:
            continue  # one value per kind per line (the first is the headline one)
        seen.add(kind)
        push_capped(getattr(hist, kind), (ts, v), MAX_METRIC_HISTORY)
