"""fold_engines.fold_engine_rows (a batch's engine stats rows, C's engine_fold when built) leaves the state
the per-line fold leaves (roll_gen_bucket when a line's bucket is new, then engine_sample), with the C pass
and with its Python twin, on generated engines and rows (plain and odd values, times at bucket edges)."""

from __future__ import annotations

import copy
import random

import pytest

from rlhealth.agents import bytescan, fold_engines
from rlhealth.agents.fold_common import finite_or_zero
from rlhealth.agents.fold_engines import (
    ENGINE_BUCKET_S,
    GEN_HISTORY_BUCKET_S,
    MAX_ENGINE_SAMPLES,
    engine_fold_py,
    engine_sample,
    fold_engine_rows,
    kv_pct,
    roll_gen_bucket,
)
from rlhealth.agents.state import EngineState, JobHealth

native_fold = bytescan.native_function("engine_fold")
needs_native = pytest.mark.skipif(native_fold is None, reason="rlhealth._fastlines not built")

T0 = 1_760_000_100.0  # a multiple of 300 s: a 5-minute bucket starts here


def _value(rnd: random.Random) -> object:
    r = rnd.random()
    if r < 0.6:
        return round(rnd.uniform(0, 3000), rnd.choice([0, 1, 2]))
    return rnd.choice([None, 0, 7, 2**70, -3, 0.0, -0.0, float("nan"), float("inf"), -float("inf"), "12.5", "x",
                       True, 1e308, -1e-300])


def _fields(rnd: random.Random) -> dict:
    f: dict = {}
    for key in ("generation_tokens_per_s", "prompt_tokens_per_s", "running", "waiting"):
        if rnd.random() < 0.9:
            f[key] = _value(rnd)
    r = rnd.random()
    if r < 0.6:
        f["kv_cache_pct"] = round(rnd.uniform(0, 100), 1)
    elif r < 0.75:
        f["kv_cache_frac"] = rnd.choice([0.45, 0.0, float("nan"), 3, "0.5", None, 1e307])
    elif r < 0.9:
        f["kv_cache_pct"] = rnd.choice([float("nan"), float("inf"), 5, "7.5", None, -0.0])
        if rnd.random() < 0.5:
            f["kv_cache_frac"] = rnd.choice([0.25, float("inf"), None, 2])
    if rnd.random() < 0.3:
        f["engine"] = "0"
    return f


def _engine(rnd: random.Random) -> EngineState:
    eng = EngineState(host="h")
    eng.last_ts = rnd.choice([None, T0 - 100.0, T0 + 5000.0, T0])
    for j in range(rnd.choice([0, 0, 1, 3, MAX_ENGINE_SAMPLES])):
        t0: object = rnd.choice([round(T0 - 200 + 10 * j), T0 - 200.0 + 10 * j, T0 - 30.5 + j])
        nums = [rnd.uniform(0, 100) for _ in range(5)]
        if rnd.random() < 0.1:
            nums[rnd.randrange(5)] = 3  # an int where a float is stored (a decoded state may hold one)
        n = rnd.choice([1, 2, 5, 40, 2**60])
        eng.samples.append((t0, *nums, n))  # type: ignore[arg-type]
    if eng.samples and rnd.random() < 0.05:
        eng.samples[-1] = eng.samples[-1][:6]  # type: ignore[assignment]  # not a 7-tuple: to Python
    return eng


def _case(rnd: random.Random) -> tuple[JobHealth, list[int], list[float], list[dict]]:
    state = JobHealth(job_id="j")
    for e in range(rnd.randint(1, 4)):
        state.engines[f"e{e}"] = _engine(rnd)
    start = rnd.choice([T0 - 40.0, T0 + 290.0, T0 + 299.99999, T0, T0 - 300.0])
    state.gen_bucket = rnd.choice([None, int(T0), int(T0) - 300, int(T0) + 300])
    t = start
    eids: list[int] = []
    tss: list[float] = []
    fields: list[dict] = []
    for _ in range(rnd.choice([1, 5, 40, 200])):
        t += rnd.choice([0.0, 0.5, 5.0, 10.0, 30.0, 61.0, -20.0, 1e-7, 300.0])
        eids.append(rnd.randrange(len(state.engines)))
        tss.append(t)
        fields.append(_fields(rnd))
    return state, eids, tss, fields


def _per_line(state: JobHealth, eids: list[int], tss: list[float], fields: list[dict]) -> None:
    """What step_log_batch did for each line before the batch fold."""
    engs = list(state.engines.values())
    for e, ts, f in zip(eids, tss, fields):
        gb = state.gen_bucket
        if gb is None or int(ts // GEN_HISTORY_BUCKET_S) * GEN_HISTORY_BUCKET_S > gb:
            roll_gen_bucket(state, ts)
        engine_sample(engs[e], ts, finite_or_zero(f.get("generation_tokens_per_s")),
                      finite_or_zero(f.get("prompt_tokens_per_s")), finite_or_zero(f.get("running")),
                      finite_or_zero(f.get("waiting")),
                      kv if type(kv := f.get("kv_cache_pct")) is float and kv - kv == 0.0 else kv_pct(f))


def _batch(state: JobHealth, eids: list[int], tss: list[float], fields: list[dict]) -> None:
    engs = list(state.engines.values())
    fold_engine_rows(state, [engs[e] for e in eids], list(tss), fields)


def _outcome(state: JobHealth) -> tuple:
    return (state.to_bytes(), repr([(e.last_ts, e.samples, e.last_gen, e.last_running) for e in state.engines.values()]),
            state.gen_bucket, repr(state.gen_history))


@pytest.mark.parametrize("which", ["native", "twin"])
def test_batch_fold_equals_the_per_line_fold(which: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if which == "native":
        if native_fold is None:
            pytest.skip("rlhealth._fastlines not built")
        monkeypatch.setattr(fold_engines, "_engine_fold", native_fold)
    else:
        monkeypatch.setattr(fold_engines, "_engine_fold", engine_fold_py)
    rnd = random.Random(151203)
    for case in range(1500):
        state, eids, tss, fields = _case(rnd)
        one, two = copy.deepcopy(state), copy.deepcopy(state)
        try:
            _per_line(one, eids, tss, copy.deepcopy(fields))
        except (IndexError, OverflowError) as e:  # a broken sample tuple: both folds raise the same
            with pytest.raises(type(e)):
                _batch(two, eids, tss, copy.deepcopy(fields))
            continue
        _batch(two, eids, tss, copy.deepcopy(fields))
        assert _outcome(one) == _outcome(two), case


@needs_native
def test_native_pass_folds_plain_rows_itself() -> None:
    """On plain values the C pass stops only where its twin stops (a new bucket), not row by row."""
    assert native_fold is not None
    rnd = random.Random(5)
    engs = [EngineState(host="h") for _ in range(4)]
    tss = [T0 + 1.0 + 0.25 * i for i in range(800)]
    fields = [{"generation_tokens_per_s": rnd.uniform(1, 900), "prompt_tokens_per_s": float(rnd.randint(0, 9)),
               "running": rnd.randint(0, 40), "waiting": 0, "kv_cache_pct": rnd.uniform(0, 90)} for _ in tss]
    rows = [engs[i % 4] for i in range(len(tss))]
    twin_engs = copy.deepcopy(engs)
    twin_rows = [twin_engs[i % 4] for i in range(len(tss))]
    args = (int(T0), GEN_HISTORY_BUCKET_S, ENGINE_BUCKET_S, MAX_ENGINE_SAMPLES)
    assert native_fold(rows, tss, fields, 0, *args) == len(tss)
    assert engine_fold_py(twin_rows, tss, fields, 0, *args) == len(tss)
    assert repr([(e.last_ts, e.samples, e.last_gen, e.last_prompt) for e in engs]) == \
        repr([(e.last_ts, e.samples, e.last_gen, e.last_prompt) for e in twin_engs])
    # a row in the next bucket is left to the caller (it rolls the bucket), and so is no bucket at all
    n = len(tss)
    assert native_fold(rows + [engs[0]], tss + [T0 + 300.5], fields + [{}], n, *args) == n
    assert native_fold(rows, tss, fields, 0, None, *args[1:]) == 0
    with pytest.raises(ValueError):
        native_fold(rows, tss + [T0], fields, 0, *args)
