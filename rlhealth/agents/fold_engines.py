"""Engine stats lines folded into JobHealth: per-engine ~1-minute buckets and the job's 5-minute
generation history. Pure."""

from __future__ import annotations

from collections.abc import Callable

from rlhealth.agents import roles
from rlhealth.agents.bytescan import native_function
from rlhealth.agents.fold_common import finite_or_zero, to_float
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
    label = str(f.get("engine") or "") or None
    eid = roles.engine_identity(prefixes, label, batch.source.host or key)
    eng = state.engines.get(eid)
    if eng is None:
        if len(state.engines) >= MAX_ENGINES:
            # Forget the engine that has been silent longest (respawned pids leave ghosts).
            oldest = min(state.engines, key=lambda k: state.engines[k].last_ts or 0.0)
            del state.engines[oldest]
        # its EngineCore's key names the stream, not the host: Ray's per-worker files of one node (host = node) are
        # one process tree each, with no actor prefix on their lines
        eng = state.engines[eid] = EngineState(host=roles.pod_of(prefixes) or batch.source.host,
                                               core=roles.engine_core_of_stats(prefixes, label, key))
    if ts is not None:
        roll_gen_bucket(state, ts)
        engine_sample(eng, ts, to_float(f.get("generation_tokens_per_s")) or 0.0,
                       to_float(f.get("prompt_tokens_per_s")) or 0.0, to_float(f.get("running")) or 0.0,
                       to_float(f.get("waiting")) or 0.0, kv_pct(f))


def engine_core_wait(state: JobHealth, f: dict, prefixes, ts: float | None, stream: str) -> None:
    """An EngineCore's shm_broadcast long-wait line, into its run of waits (JobHealth.core_waits).

    vLLM prints it every VLLM_RINGBUFFER_WARNING_INTERVAL (60 s) that one dequeue or enqueue keeps waiting; from
    0.11 idle workers no longer print it (vllm-project/vllm#25720), so an EngineCore's line says that process
    waits on its own workers. A worker's or an unprefixed (V0) line is no engine's and is not kept. A run ends
    at a gap of more than two intervals, or at a stats line of an engine that logs through this EngineCore."""
    if ts is None:
        return
    key = roles.engine_core_of_line(prefixes, stream)
    if not key:
        return
    interval = to_float(f.get("seconds")) or 60.0
    run = state.core_waits.get(key)
    if run is not None:
        first, last, n, _ = run
        stats_since = any(e.core == key and e.last_ts is not None and e.last_ts > last for e in state.engines.values())
        if ts <= last:
            return  # a resent or reordered line: the run already covers it
        if ts - last <= 2 * interval and not stats_since:
            state.core_waits[key] = (first, ts, n + 1, interval)
            return
    elif len(state.core_waits) >= MAX_ENGINES:
        del state.core_waits[min(state.core_waits, key=lambda k: state.core_waits[k][1])]
    state.core_waits[key] = (ts, ts, 1, interval)


def engine_core_start(state: JobHealth, prefixes, ts: float | None, stream: str) -> None:
    """An EngineCore's start-up banner ('Initializing a V1 LLM engine (v0.11.0) ...'): a new EngineCore process under
    this key. A restarted vllm serve logs into the same stream, and its EngineCore key names no pid (the stream or
    pod, the Ray actor around it, the DP index), so the old engine's requests in flight died with the process the
    banner replaces: its newest stats line no longer says that anything is Running (neither its 0.0 line is a hang
    nor the new EngineCore's waits while its workers load, profile and compile are its stall), and the old
    EngineCore's run of waits is over. The engine's next stats line (a container's APIServer often has the same pid
    on every start, so the same engine id) says again what is Running."""
    if ts is None:
        return
    key = roles.engine_core_of_line(prefixes, stream)
    if not key:
        return
    state.core_waits.pop(key, None)
    for eng in state.engines.values():
        if eng.core == key and eng.last_ts is not None and eng.last_ts <= ts:
            eng.last_running = 0.0


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
        eng.last_prompt = prompt
        return
    push_capped(eng.samples, (round(ts), gen, prompt, running, waiting, kv, 1), MAX_ENGINE_SAMPLES)
    eng.last_gen = gen
    eng.last_running = running
    eng.last_prompt = prompt


def _sample_row(eng: EngineState, ts: float, f: dict) -> None:
    """engine_sample of one stats line's fields (what engine_stats passes, the common cases first)."""
    kv = f.get("kv_cache_pct")
    engine_sample(eng, ts, finite_or_zero(f.get("generation_tokens_per_s")),
                  finite_or_zero(f.get("prompt_tokens_per_s")), finite_or_zero(f.get("running")),
                  finite_or_zero(f.get("waiting")), kv if type(kv) is float and kv - kv == 0.0 else kv_pct(f))


def engine_fold_py(engs: list[EngineState], tss: list[float], fields: list[dict], start: int,
                   gen_bucket: int | None, gen_bucket_s: int, engine_bucket_s: float, max_samples: int) -> int:
    """Rows start, start + 1, ... (an engine, a line time, the line's fields) folded by `_sample_row` up to
    the first that starts a new generation bucket (or any, while there is none): its index, else len(tss).
    The twin of the C helper's engine_fold (rlhealth/_native/foldbatch.c), which may also leave a row of
    unusual values to its caller; its bucket sizes and cap are this module's constants."""
    for i in range(start, len(tss)):
        ts = tss[i]
        if gen_bucket is None or int(ts // gen_bucket_s) * gen_bucket_s > gen_bucket:
            return i
        _sample_row(engs[i], ts, fields[i])
    return len(tss)


_engine_fold: Callable[[list[EngineState], list[float], list[dict], int, int | None, int, float, int], int] = (
    native_function("engine_fold") or engine_fold_py)


def fold_engine_rows(state: JobHealth, engs: list[EngineState], tss: list[float], fields: list[dict]) -> None:
    """A batch's engine stats lines of known engines and times, in order: as each line's
    roll_gen_bucket (when its bucket is new) and `_sample_row` in turn, the run between two rolls
    in one pass (C when built). Nothing else may touch the engines or the bucket between the lines."""
    i, n = 0, len(tss)
    while i < n:
        i = _engine_fold(engs, tss, fields, i, state.gen_bucket, GEN_HISTORY_BUCKET_S, ENGINE_BUCKET_S,
                         MAX_ENGINE_SAMPLES)
        if i < n:  # a row the pass left: a new bucket, or values it leaves to Python
            ts = tss[i]
            gb = state.gen_bucket
            if gb is None or int(ts // GEN_HISTORY_BUCKET_S) * GEN_HISTORY_BUCKET_S > gb:
                roll_gen_bucket(state, ts)
            _sample_row(engs[i], ts, fields[i])
            i += 1
