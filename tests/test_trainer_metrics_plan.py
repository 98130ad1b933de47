"""fold_trainer._trainer_metrics walks only the pairs its per-keys plan names: the same state as the walk over
every pair (written out here as it was), on generated metric lines (repeated and new key sets, duplicate
kinds, non-finite values, step-time keys in any case)."""

from __future__ import annotations

import copy
import math
import random

from rlhealth.agents import fold_trainer, training_time
from rlhealth.agents.state import MAX_METRIC_HISTORY, MAX_STEP_HISTORY, Ev, JobHealth, push_capped

KEYS = ["actor/pg_loss", "actor/entropy", "actor/grad_norm", "critic/score/mean", "timing_s/gen", "timing_s/step",
        "Timing/Step", "loss", "grad_norm", "learning_rate", "lm loss", "grad norm", "final_loss", "policy_loss",
        "entropy", "train/step_time", "epoch", "kl_loss"]
VALUES = ["0.5", "-1.25", "3", "2.1E+00", ".5", "nan", "NaN", "inf", "-inf", "Infinity", "-Infinity", "1e400"]


def _reference(state: JobHealth, f: dict, ts: float | None, ev: Ev) -> None:
    """The walk over every pair (before the plans)."""
    raw = f.get("metrics")
    step = fold_trainer.as_int(f.get("step"))
    pairs = (("'" in raw or '"' in raw) and fold_trainer._METRIC_PAIR_RE.findall(raw)
             or fold_trainer._bare_pairs(raw)) if isinstance(raw, str) else []

    def step_time() -> float | None:
        for key, value in pairs:
            if key.lower() in fold_trainer._STEP_TIME_KEYS:
                v = float(value.replace("Infinity", "inf"))
                return v if math.isfinite(v) else None
        return None

    if step is not None and ts is not None:
        tr = state.trainer
        if tr.last_step is None or step > tr.last_step:
            push_capped(tr.step_ts, (ts, step), MAX_STEP_HISTORY)
            tr.last_step = step
            training_time.note_step(state.clock, ts, step, step_time())
        elif step == tr.last_step and state.clock.untimed_from is not None and (d := step_time()) is not None:
            training_time.note_duration(state.clock, step, d)
    if not isinstance(raw, str) or ts is None:
        return
    hist = state.metrics
    seen: set[str] = set()
    nonfinite_line = False
    for key, value in pairs:
        kind, loss_or_grad = fold_trainer._metric_key(key)
        if kind is None and not loss_or_grad:
            continue
        v = float(value.replace("Infinity", "inf"))
        if not math.isfinite(v):
            if loss_or_grad and not nonfinite_line:
                nonfinite_line = True
                hist.nonfinite += 1
                hist.nonfinite_ev = ev
            continue
        if kind is None or kind in seen:
            continue
        seen.add(kind)
        push_capped(getattr(hist, kind), (ts, v), MAX_METRIC_HISTORY)


def _line(rnd: random.Random, shapes: list[list[str]]) -> str:
    keys = rnd.choice(shapes)
    if rnd.random() < 0.3:
        pairs = ", ".join(f"'{k}': {rnd.choice(VALUES[:5]) if rnd.random() < 0.8 else rnd.choice(VALUES)}"
                          for k in keys)
        return "{" + pairs + "}"
    return " - ".join(f"{k}:{rnd.choice(VALUES[:5]) if rnd.random() < 0.8 else rnd.choice(VALUES)}" for k in keys)


def test_plan_walk_equals_the_full_walk() -> None:
    rnd = random.Random(42)
    shapes = [rnd.sample(KEYS, rnd.randint(1, 8)) for _ in range(30)]
    for case in range(200):
        one, two = JobHealth(job_id="j"), JobHealth(job_id="j")
        if rnd.random() < 0.3:
            one.clock.untimed_from = two.clock.untimed_from = 0
        step = 0
        t = 1_700_000_000.0
        for k in range(rnd.randint(1, 60)):
            step += rnd.choice([0, 1, 1, 2, -1])
            t += rnd.choice([0.0, 1.0, 7.5])
            ts = None if rnd.random() < 0.05 else t
            f: dict = {"metrics": _line(rnd, shapes)}
            if rnd.random() < 0.8:
                f["step"] = step
            ev = Ev(ts, "s", f"line {k}")
            _reference(one, copy.deepcopy(f), ts, ev)
            fold_trainer._trainer_metrics(two, f, ts, k, lambda _k, _ts, ev=ev: ev)
        assert one.to_bytes() == two.to_bytes(), case


def test_fold_progress_equals_trainer_progress_line_by_line() -> None:
    """fold_progress (a batch's progress lines in one call, the caller touching the trainer role) leaves the
    state and the batch's latest line as trainer_progress called per line: metric lines, step lines (ints,
    digit strings, re-printed and unstamped steps), timers, a signal it only notes."""
    from rlhealth.agents import roles

    rnd = random.Random(7)
    shapes = [rnd.sample(KEYS, rnd.randint(1, 8)) for _ in range(30)]
    sigs = ["trainer_metrics", "trainer_metrics", "trainer_step", "trainer_step", "timer_start", "timer_finish",
            "reward_summary"]
    for case in range(200):
        one, two = JobHealth(job_id="j"), JobHealth(job_id="j")
        step = 0
        t = 1_700_000_000.0
        for _batch in range(rnd.randint(1, 4)):
            rows = []
            for _ in range(rnd.randint(0, 30)):
                sig = rnd.choice(sigs)
                step += rnd.choice([0, 1, 1, 2, -1])
                t += rnd.choice([0.0, 1.0, 7.5])
                ts = None if rnd.random() < 0.05 else t
                f: dict = {}
                if sig == "trainer_metrics":
                    f["metrics"] = _line(rnd, shapes) if rnd.random() < 0.95 else None
                if sig in ("trainer_metrics", "trainer_step") and rnd.random() < 0.9:
                    f["step"] = step if rnd.random() < 0.8 else str(step)
                if sig.startswith("timer"):
                    f["name"] = rnd.choice(["step", "sync_weights", "generate", ""])
                    f["seconds"] = rnd.choice([1.5, "2.5", None])
                rows.append((sig, f, ts))
            evs = [Ev(ts, "s", f"line {k}") for k, (_, _, ts) in enumerate(rows)]

            def make_ev(k: int, _ts: float | None, evs: list[Ev] = evs) -> Ev:
                return evs[k]

            latest_one = fold_trainer.LatestProgress(one.trainer)
            for k, (sig, f, ts) in enumerate(rows):
                fold_trainer.trainer_progress(one, sig, copy.deepcopy(f), ts, k, make_ev, latest_one)
            latest_one.apply(one.trainer, make_ev)
            latest_two = fold_trainer.LatestProgress(two.trainer)
            for _sig, _f, ts in rows:
                fold_trainer.touch_role(two, roles.TRAINER, ts)
            fold_trainer.fold_progress(two, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows],
                                       list(range(len(rows))), make_ev, latest_two)
            latest_two.apply(two.trainer, make_ev)
            assert (latest_one.ts, latest_one.k) == (latest_two.ts, latest_two.k), case
            assert one.to_bytes() == two.to_bytes(), case
