"""Engine stats lines folded into JobHealth: per-engine ~1-minute buckets and the job's 5-minute
generation history. Pure."""

from __future__ import annotations

from rlhealth.agents import roles
from rlhealth.agents.fold_common import to_float
from rlhealth.agents.state import (
    MAX_ENGINE_SAMPLES,
    MAX_ENGINES,
    EngineState,
    JobHealth,
    push_capped,
)
from rlhealth.schemas import LogBatch


def engine_stats(state: JobHealth, f: dict, prefixes, ts: float | None, batch: LogBatch, key: str) -> None:
    # Separate pods can print identical prefixes ("(APIServer pid=1)"), so the stream is part of the identity.
    eid = roles.engine_identity(prefixes, str(f.get("engine") or "") or None, batch.source.host or key)
    eng = state.engines.get(eid)
    if eng is None:
        if len(state.engines) >= MAX_ENGINES:
            # Forget the engine that has been silent longest (respawned pids leave ghosts).
            oldest = min(state.engines, key=lambda k: state.engines[k].last_ts or 0.0)
            del state.engines[oldest]
        eng = state.engines[eid] = EngineState(host=roles.pod_of(prefixes) or batch.source.host)
    if ts is not None:
        roll_gen_bucket(state, ts)
        engine_sample(eng, ts, to_float(f.get("generation_tokens_per_s")) or 0.0,
                       to_float(f.get("prompt_tokens_per_s")) or 0.0, to_float(f.get("running")) or 0.0,
                       to_float(f.get("waiting")) or 0.0, kv_pct(f))


def engine_config(state: JobHealth, sig: str, f: dict) -> None:
    if sig == "enforce_eager":
        value = f.get("value")
        if isinstance(value, str):
            value = value.strip().lower() == "true"
        if isinstance(value, bool) and state.enforce_eager_source != "spec":
            state.enforce_eager = value
            state.enforce_eager_source = "log"
    elif sig == "cuda_graph_capture":
        state.cuda_graphs_seen = True


def kv_pct(f: dict) -> float:
    """KV-cache use in percent: vLLM prints a percentage, SGLang a fraction ("token usage: 0.45")."""
    pct = to_float(f.get("kv_cache_pct"))
    if pct is None:
        frac = to_float(f.get("kv_cache_frac"))
        pct = frac * 100.0 if frac is not None else 0.0
    return pct


ENGINE_BUCKET_S = 60.0


GEN_HISTORY_BUCKET_S = 300


MAX_GEN_HISTORY = 24


def roll_gen_bucket(state: JobHealth, ts: float) -> None:
    """When a new 5-minute bucket starts, fold the finished one (summed over engines) into gen_history."""
    bucket = int(ts // GEN_HISTORY_BUCKET_S) * GEN_HISTORY_BUCKET_S
    if state.gen_bucket is None:
        state.gen_bucket = bucket
        return
    if bucket <= state.gen_bucket:
        return
    start, end = state.gen_bucket, state.gen_bucket + GEN_HISTORY_BUCKET_S
    gen = running = 0.0
    seen = False
    for eng in state.engines.values():
        window = [smp for smp in eng.samples if start <= smp[0] < end]
        if window:
            seen = True
            gen += sum(smp[1] for smp in window) / len(window)
            running += sum(smp[3] for smp in window) / len(window)
    if seen:
        push_capped(state.gen_history, (start, round(gen, 1), round(running, 1)), MAX_GEN_HISTORY)
    state.gen_bucket = bucket


def engine_sample(eng: EngineState, ts: float, gen: float, prompt: float, running: float, waiting: float,
                   kv: float) -> None:
    """Fold a stats line into ~1-minute buckets so 36 samples cover half an hour."""
    eng.last_ts = ts if eng.last_ts is None else max(eng.last_ts, ts)
    last = eng.samples[-1] if eng.samples else None
    if last is not None and 0 <= ts - last[0] < ENGINE_BUCKET_S:
        n = last[6]
        k = n + 1
        # Running means (msgpack stores a float in 9 bytes however it is rounded).
        eng.samples[-1] = (last[0], (last[1] * n + gen) / k, (last[2] * n + prompt) / k,
                           (last[3] * n + running) / k, (last[4] * n + waiting) / k, max(last[5], kv), k)
        eng.last_gen = gen
        eng.last_running = running
        return
    push_capped(eng.samples, (round(ts), gen, prompt, running, waiting, kv, 1), MAX_ENGINE_SAMPLES)
    eng.last_gen = gen
    eng.last_running = running
