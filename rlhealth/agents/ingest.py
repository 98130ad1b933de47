"""Folding events into JobHealth: one function per event kind. Pure; `now` is an argument.

The hot path is LogBatch: the classifier scans the whole batch in C, and only matched lines
(about 1 in 100) reach Python code here. Timestamps are parsed only for matched lines and the
last line of each batch.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

from rlhealth.agents import roles, training_time
from rlhealth.agents.coherence import incoherence_reason, trial_incoherence
from rlhealth.agents.failures import BENIGN_EXCEPTIONS, failure_class_of, is_consequence
from rlhealth.agents.findings import Finding
from rlhealth.agents.normalize import line_timestamp, line_timestamp_seen, peel_and_stamp, peel_prefixes, strip_ansi
from rlhealth.agents.signals import Catalog
from rlhealth.agents.signatures import Classifier, LineMatch, Rule
from rlhealth.agents.state import (
    EVIDENCE_TEXT_CHARS,
    MAX_ENGINE_SAMPLES,
    MAX_ENGINES,
    MAX_EVIDENCE_PER_SIGNAL,
    MAX_EXC_TYPES,
    MAX_FOLDED_FILES,
    MAX_FOLDED_RANGES,
    MAX_GPU_POLLS,
    MAX_GPUS_PER_HOST,
    MAX_HOSTS,
    MAX_METRIC_HISTORY,
    MAX_REWARDS,
    MAX_SAMPLES,
    MAX_SHIPPERS,
    MAX_SIGNALS,
    MAX_STEP_HISTORY,
    MAX_STREAMS,
    MAX_TIMERS,
    MAX_TRACEBACKS,
    MAX_TRIAL_NAMES,
    EngineState,
    Ev,
    GpuHost,
    JobHealth,
    SignalStat,
    StreamState,
    TracebackRec,
    push_capped,
)
from rlhealth.agents.thresholds import DEFAULT as DEFAULT_THRESHOLDS
from rlhealth.agents.tracebacks import fingerprint
from rlhealth.schemas import GpuPoll, JobEnded, JobSpec, JobStatePoll, LogBatch, ShipperHeartbeat, TrialEvent

# Kinds whose matches become findings (kept as forensic evidence); metric/progress lines are too many.
FINDING_KINDS = frozenset({
    "death", "wedge", "oom", "nccl", "engine", "ray", "hardware", "infra", "config", "weight_sync",
})
# Trainer phases that count as progress when they start or finish.
PROGRESS_SIGNALS = frozenset({"timer_start", "timer_finish", "trainer_step", "trainer_metrics", "reward_summary"})

# What `step_log_batch` reads of a batch's lines besides classifying them: the last
# FRESHNESS_LINES lines; each matched line; before a match, the lines back to the nearest one with
# its own timestamp (at most TIME_LOOKBACK_LINES, the match included); and TRACEBACK_LOOKBACK_LINES
# before a python_exception match. A reader that knows the matches may leave every other line
# empty (`LogReader(prefilter=...)`): the step gives the same state. Keep this list true.
FRESHNESS_LINES = 5
TIME_LOOKBACK_LINES = 12
TRACEBACK_LOOKBACK_LINES = 80
_TB_LOOKBACK = TRACEBACK_LOOKBACK_LINES


def lines_before_match(rule: Rule) -> int:
    """How many lines before a match of `rule` step_log_batch reads whatever their timestamps."""
    return TRACEBACK_LOOKBACK_LINES if rule.signal == "python_exception" else 0

_FATAL_CONTEXT_RE = re.compile(r"Error executing job|RayTaskError|Traceback \(most recent call last\)|"
                               r"Fatal Python error")
_FATAL_CONTEXT_LINES = 60  # how far before an exception line its traceback's header may be


def _ts(dt: datetime | None) -> float | None:
    return dt.timestamp() if dt is not None else None


def _clip(text: str, n: int = EVIDENCE_TEXT_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= n else text[: n - 1] + "…"


def stream_key(event) -> str:
    s = event.source
    return s.stream or s.host or "unknown"


def _named_attempt(event, prefixes) -> int | None:
    """The attempt a line names itself: its pod's generation, else its file's (a SLURM leg)."""
    gen = roles.generation_of_prefixes(prefixes)
    return gen if gen is not None else event.source.attempt


# A dying attempt's last lines may be stamped a little after the scheduler recorded its end (clock
# skew, buffered output); no successor prints a line this soon after its predecessor ended.
ATTEMPT_END_SLACK_S = 30.0


def attempts_end_by(state: JobHealth) -> float | None:
    """Lines stamped after this belong to the scheduler's current attempt (None: no attempt ended)."""
    ends = [a[3] for a in state.sched.attempts if a[3] is not None]
    return max(ends) + ATTEMPT_END_SLACK_S if ends else None


def attempt_at(state: JobHealth, ts: float | None) -> int | None:
    """The attempt that was running at `ts`: the first ended attempt that ended at or after it (the
    slack included), else the scheduler's current one. A line's attempt follows from its time, not
    from when it was folded: a scheduler log spanning every attempt is often folded after the
    scheduler has moved on to the next."""
    if ts is not None:
        for a in sorted(state.sched.attempts):
            if a[3] is not None and ts <= a[3] + ATTEMPT_END_SLACK_S:
                return a[0]
    return state.sched.attempt


def note_signal(state: JobHealth, signal: str, ev: Ev, attempt: int | None, role: str = "") -> SignalStat:
    stat = state.signals.get(signal)
    if stat is None:
        if len(state.signals) >= MAX_SIGNALS:
            return SignalStat()
        stat = state.signals[signal] = SignalStat()
    stat.count += 1
    ts = ev.ts
    if ts is not None:
        # min()/max() spelled out (what they compare, and which they keep on a tie): once per matched line
        first, last = stat.first_ts, stat.last_ts
        stat.first_ts = ts if first is None or ts < first else first
        stat.last_ts = ts if last is None or ts > last else last
    # Keep the first pieces of evidence and the latest one (per-signal hot path: no sorting).
    evidence = stat.evidence
    if len(evidence) < MAX_EVIDENCE_PER_SIGNAL:
        evidence.append(ev)
        if len(evidence) > 1 and (ts or 0.0) < (evidence[-2].ts or 0.0):
            evidence.sort(key=lambda e: (e.ts or 0.0))
    elif ts is None or (kept := evidence[-1].ts) is None or ts >= kept:
        evidence[-1] = ev
    if attempt is not None and attempt not in stat.attempts and len(stat.attempts) < 16:
        stat.attempts.append(attempt)
    if ts is None or stat.last_ts is None or ts >= stat.last_ts:
        stat.stream = ev.source
        if role:
            stat.role = role
    return stat


def _touch_role(state: JobHealth, role: str, ts: float | None) -> None:
    if ts is None:
        return
    prev = state.role_last_ts.get(role)
    if prev is None or ts > prev:
        state.role_last_ts[role] = ts


def _float(v: object) -> float | None:
    """A finite float or None: NaN/Inf never enter the state (they break equality and medians)."""
    if v is None:
        return None  # a field the line did not carry: float(None) would raise, slowly
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


def _round(v: object) -> int | None:
    f = _float(v)
    # Absurd readings (a broken poll) are dropped rather than stored.
    return None if f is None or abs(f) > 1e12 else int(round(f))


# ------------------------------------------------------------------------------------------ logs


def drop_folded_lines(state: JobHealth, batch: LogBatch) -> LogBatch | None:
    """The lines of `batch` not folded before (None: none are new), and remember them as folded.

    Only batches that name their file (`file_id`, with `first_line_no`) take part: a shipper resends
    a batch after a crash or an outage, and the same lines must not count twice. Captures and
    replays carry no file_id and pass unchanged."""
    if batch.file_id is None or batch.first_line_no is None or not batch.lines:
        return batch
    key = f"{batch.source.stream}\0{batch.file_id}"
    first, n = batch.first_line_no, len(batch.lines)
    ranges = state.folded.pop(key, [])
    if any(a < first + n and first < b for a, b in ranges):
        keep = [i for i in range(n) if not any(a <= first + i < b for a, b in ranges)]
    else:
        keep = list(range(n))
    merged = sorted([*ranges, (first, first + n)])
    out: list[tuple[int, int]] = []
    for a, b in merged:
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    while len(out) > MAX_FOLDED_RANGES:
        out[0:2] = [(out[0][0], out[1][1])]
    state.folded[key] = out
    while len(state.folded) > MAX_FOLDED_FILES:
        del state.folded[next(iter(state.folded))]
    if len(keep) == n:
        return batch
    if not keep:
        return None
    k = keep[0]
    offs, ts = batch.offsets, batch.ts
    return batch.model_copy(update={
        "lines": [batch.lines[i] for i in keep],
        "offsets": [offs[i] for i in keep] if offs is not None else None,
        "ts": [ts[i] for i in keep] if ts is not None else None,
        "first_line_no": first + k})


def step_log_batch(state: JobHealth, batch: LogBatch, now: datetime, classifier: Classifier,
                   catalog: Catalog) -> list[Finding]:
    key = stream_key(batch)
    st = state.streams.get(key)
    if st is None:
        if len(state.streams) >= MAX_STREAMS:
            key = "other-streams"
            st = state.streams.setdefault(key, StreamState())
        else:
            st = state.streams[key] = StreamState(role=roles.role_of_stream(batch.source.stream),
                                                  host=batch.source.host, attempt=batch.source.attempt)
    lines = batch.lines
    st.lines += len(lines)
    st.invalid_utf8_lines += batch.invalid_utf8_lines
    st.truncated_lines += batch.truncated_lines
    state.lines += len(lines)

    batch_ts = _ts(batch.event_time)
    prev_stream_ts = st.last_ts
    # Freshness of the stream: the newest timestamp among the last few lines. Shipper-parsed
    # times (`batch.ts`, which a replay also rebases) win over the text.
    last_ts = None
    explicit_ts = batch.ts
    if explicit_ts is not None:
        known = [t for t in explicit_ts[-FRESHNESS_LINES:] if t is not None]
        if known:
            last_ts = max(known).timestamp()
    if last_ts is None:
        for text in reversed(lines[-FRESHNESS_LINES:]):
            dt = line_timestamp(text, now)
            if dt is not None:
                last_ts = dt.timestamp()
                break
    if last_ts is None:
        last_ts = batch_ts
    if last_ts is not None and (st.last_ts is None or last_ts > st.last_ts):
        st.last_ts = last_ts

    matches = classifier.scan(lines)
    findings: list[Finding] = []
    memo: dict[int, datetime | None] = {}
    walked: dict[int, tuple[datetime | None, int]] = {}
    # Per batch, what depends only on the rule (its declaration) or only on a line's prefixes (role,
    # attempt: the scheduler's attempt and the batch's source do not change within a batch); most
    # matched lines of dense logs share both with many others.
    by_rule: dict[str, tuple[str, str | None, bool, bool]] = {}
    # (role, attempt, engine id by engine label) per prefixes tuple
    by_prefixes: dict[tuple, tuple[str | None, int | None, dict[str | None, str]]] = {}
    no_ts = prev_stream_ts if prev_stream_ts is not None else batch_ts
    offsets = batch.offsets
    stream = batch.source.stream
    newest_context = -1
    # engine-stats lines (most matched lines of dense logs) are folded here, without _apply_match's
    # dispatch and with their engine's identity memoised per batch: what _engine_stats does for them
    engines = state.engines
    role_last_ts = state.role_last_ts
    engine_stream = batch.source.host or key
    index = -1
    ts: float | None = None
    stamp: datetime | None = None  # lines stamped in the same second share one datetime (a parse memo's)
    stamp_ts: float | None = None
    OTHER, ENGINE = roles.OTHER, roles.ENGINE
    sched_attempt, ends_by = state.sched.attempt, attempts_end_by(state)
    prefixes: tuple = ()
    rest = ""
    for m in matches:
        text = m.text
        rule = m.rule
        if m.index != index:
            # a line's time and prefixes, once per line (a line may match several rules)
            index = m.index
            # m.text is lines[index] ANSI-stripped: one peel gives its prefixes and its own timestamp
            pk, own_dt = peel_and_stamp(text, now)  # own_dt == line_timestamp(lines[index], now)
            dt = explicit_ts[index] if explicit_ts is not None else None
            if dt is None:
                dt = memo[index] = own_dt
                if dt is None:
                    dt = _line_time(lines, index, now, memo, explicit_ts, walked)
                if dt is None and rule.signal == "python_exception":
                    # a long traceback's exception line: its look-back lines are read anyway, and the time
                    # before the traceback places it in its attempt better than the stream's last time
                    dt = _line_time(lines, index, now, memo, explicit_ts, None, _TB_LOOKBACK)
            if dt is None:
                ts = no_ts
            elif dt is stamp:
                ts = stamp_ts
            else:
                stamp, ts = dt, dt.timestamp()
                stamp_ts = ts
            # peel_prefixes strips again: only a text that still holds an ESC can differ from the peel above
            prefixes, rest = peel_prefixes(text) if "\x1b" in text else pk[:2]
        ri = by_rule.get(rule.id)
        if ri is None:
            decl = catalog.signals.get(rule.signal)
            ri = by_rule[rule.id] = (decl.effect if decl is not None else "death",
                                     decl.role if decl is not None and decl.role in roles.ROLES else None,
                                     rule.kind in FINDING_KINDS,
                                     rule.signal not in ("python_exception", "trainer_metrics_nonfinite"))
        pa = by_prefixes.get(prefixes)
        if pa is None:
            pa = by_prefixes[prefixes] = (roles.role_of_prefixes(prefixes), _named_attempt(batch, prefixes), {})
        role = pa[0] or st.role
        if role == OTHER and ri[1] is not None:
            role = ri[1]
        attempt = pa[1]
        if attempt is None:
            attempt = sched_attempt if ts is None or ends_by is None or ts > ends_by else attempt_at(state, ts)
        offset = offsets[index] if offsets is not None else None
        ev = Ev(ts, key, _clip(text), rule.id, stream, offset)
        if ri[0] == "engine_stats" and ri[3]:
            f = m.fields
            if ts is not None:  # _touch_role(state, roles.ENGINE, ts)
                prev = role_last_ts.get(ENGINE)
                if prev is None or ts > prev:
                    role_last_ts[ENGINE] = ts
            label = str(f.get("engine") or "") or None
            eid = pa[2].get(label)
            if eid is None:
                eid = pa[2][label] = roles.engine_identity(prefixes, label, engine_stream)
            eng = engines.get(eid)
            if eng is None or ts is None:
                _engine_stats(state, f, prefixes, ts, batch, key)  # a new engine (may evict one), or no time
            else:
                gb = state.gen_bucket
                if gb is None or int(ts // GEN_HISTORY_BUCKET_S) * GEN_HISTORY_BUCKET_S > gb:
                    _roll_gen_bucket(state, ts)
                _engine_sample(eng, ts, _finite_or_zero(f.get("generation_tokens_per_s")),
                               _finite_or_zero(f.get("prompt_tokens_per_s")), _finite_or_zero(f.get("running")),
                               _finite_or_zero(f.get("waiting")),
                               kv if type(kv := f.get("kv_cache_pct")) is float and kv - kv == 0.0 else _kv_pct(f))
            note_signal(state, rule.signal, ev, attempt, role)
        else:
            _apply_match(state, m, rest, prefixes, role, ts, ev, attempt, lines, batch, key, catalog, ri[0])
        if ri[2]:
            if index > newest_context and _FATAL_CONTEXT_RE.search(text):
                newest_context = index
            findings.append(Finding(
                kind=m.rule.kind, rule_id=m.rule.id, text=ev.text, event_time=dt, source=key,
                severity=m.rule.severity, gates=m.rule.gates, fields=dict(m.fields),
                # `file_offset` names the byte offset in the source file (`offset` is a Kafka offset in
                # EvidenceRef); `batch_index` keeps two hits of one rule in one batch apart.
                ref={"file": batch.source.stream, "file_offset": offset, "batch_index": m.index,
                     "line_no": (batch.first_line_no + m.index) if batch.first_line_no is not None else None},
            ))
    # Carry the traceback context over the batch boundary (matched lines only, so a reader that
    # decodes only matches and their look-back carries the same).
    ago = len(lines) - newest_context if newest_context >= 0 else (
        None if st.fatal_context_ago is None else st.fatal_context_ago + len(lines))
    st.fatal_context_ago = ago if ago is not None and ago <= _FATAL_CONTEXT_LINES else None
    return findings


def _finite_or_zero(v: object) -> float:
    """`_float(v) or 0.0`, with the common cases (a float or an int from the extraction) first."""
    t = type(v)
    if t is float:
        return (v or 0.0) if v - v == 0.0 else 0.0  # type: ignore[operator,return-value]  # finite: inf-inf, nan-nan are nan
    if t is int:
        try:
            return float(v) or 0.0  # type: ignore[arg-type]
        except OverflowError:
            return 0.0
    return _float(v) or 0.0


_NO_TS = object()


def _line_time(lines: list[str], index: int, now: datetime, memo: dict,
               explicit_ts: list | None = None, walked: dict[int, tuple[datetime | None, int]] | None = None,
               lookback: int = TIME_LOOKBACK_LINES) -> datetime | None:
    """A line's own timestamp, else the nearest earlier one in the batch (tqdm bars, traceback bodies).

    An earlier line's time in the batch's `ts` column wins over its text: a replay rebases `ts`
    (the text keeps the capture's time). `walked` (per batch) remembers each walk's answer and the
    line it stopped at: a later walk that reaches a walked line ends there (runs of unstamped progress
    bars), with that answer when its stop lies inside this walk's window, else with none (every line
    between was unstamped)."""
    lo = max(index - lookback, -1)
    found: datetime | None = None
    stop = lo
    for j in range(index, lo, -1):
        if explicit_ts is not None and explicit_ts[j] is not None:
            found, stop = explicit_ts[j], j
            break
        if walked is not None and j != index:
            w = walked.get(j)
            if w is not None:
                if w[1] > lo:
                    found, stop = w
                break
        dt = memo.get(j, _NO_TS)
        if dt is _NO_TS:
            dt = memo[j] = line_timestamp_seen(lines[j], now)
        if dt is not None:
            found, stop = dt, j
            break
    if walked is not None:
        walked[index] = (found, stop)
    return found


def _apply_match(state: JobHealth, m: LineMatch, rest: str, prefixes, role: str, ts: float | None, ev: Ev,
                 attempt: int | None, lines: list[str], batch: LogBatch, key: str, catalog: Catalog,
                 effect: str) -> None:
    """Fold one matched line by its signal's declared `effect` (rules/signals.toml; "death" when
    the signal is not declared)."""
    rule = m.rule
    sig = rule.signal
    f = m.fields
    if effect in ("progress", "activity", "engine_stats", "engine_pressure", "engine_up", "weight_sync"):
        _touch_role(state, roles.ENGINE if effect in ("engine_stats", "engine_up") else role, ts)
    if effect == "engine_stats":
        _engine_stats(state, f, prefixes, ts, batch, key)
    elif effect == "progress":
        _trainer_progress(state, sig, f, ts, ev)
    elif effect == "weight_sync":
        if sig == "weight_sync_start":
            state.trainer.in_weight_sync_since = ts
        elif sig == "weight_sync_finish":
            state.trainer.in_weight_sync_since = None
    elif effect == "trial_summary" and sig == "batch_complete":
        ok, total = f.get("successful"), f.get("total")
        if isinstance(ok, int) and isinstance(total, int) and ts is not None:
            push_capped(state.batch_progress, (ts, ok, total), MAX_STEP_HISTORY)
        _touch_role(state, roles.ROLLOUT, ts)
    elif effect == "config":
        _engine_config(state, sig, f)
    elif effect == "hardware" and sig == "xid":
        code = _as_int(f.get("xid"))
        if code is not None and ts is not None:
            push_capped(state.xids, (ts, batch.source.host or key, code, ev.text), MAX_TRACEBACKS)
    elif effect == "hang":
        _rank_progress(state, f, m.text, ts)
        if ts is not None and (key in state.hang_streams or len(state.hang_streams) < MAX_RANKS):
            state.hang_streams[key] = max(ts, state.hang_streams.get(key, ts))
    if sig == "python_exception":
        _python_exception(state, m, role, ts, ev, attempt, lines, key)
        return
    if sig == "trainer_metrics_nonfinite":
        state.metrics.nonfinite += 1
        state.metrics.nonfinite_ev = ev
    note_signal(state, sig, ev, attempt, role)


def _engine_stats(state: JobHealth, f: dict, prefixes, ts: float | None, batch: LogBatch, key: str) -> None:
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
        _roll_gen_bucket(state, ts)
        _engine_sample(eng, ts, _float(f.get("generation_tokens_per_s")) or 0.0,
                       _float(f.get("prompt_tokens_per_s")) or 0.0, _float(f.get("running")) or 0.0,
                       _float(f.get("waiting")) or 0.0, _kv_pct(f))


def _engine_config(state: JobHealth, sig: str, f: dict) -> None:
    if sig == "enforce_eager":
        value = f.get("value")
        if isinstance(value, str):
            value = value.strip().lower() == "true"
        if isinstance(value, bool) and state.enforce_eager_source != "spec":
            state.enforce_eager = value
            state.enforce_eager_source = "log"
    elif sig == "cuda_graph_capture":
        state.cuda_graphs_seen = True


_RANK_RE = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]|\brank[ =:]+(\d+)", re.I)
MAX_RANKS = 64


def _rank_progress(state: JobHealth, f: dict, text: str, ts: float | None) -> None:
    """Per-rank last completed collective from watchdog lines: the straggler has the lowest."""
    seq = _as_int(f.get("last_completed"))
    if seq is None or ts is None:
        return
    rank = f.get("rank")
    if rank is None:
        m = _RANK_RE.search(text)
        rank = (m.group(1) or m.group(2)) if m else None
    if rank is None:
        return
    rank = str(rank)
    if rank in state.rank_last_completed or len(state.rank_last_completed) < MAX_RANKS:
        state.rank_last_completed[rank] = (seq, ts)


def _kv_pct(f: dict) -> float:
    """KV-cache use in percent: vLLM prints a percentage, SGLang a fraction ("token usage: 0.45")."""
    pct = _float(f.get("kv_cache_pct"))
    if pct is None:
        frac = _float(f.get("kv_cache_frac"))
        pct = frac * 100.0 if frac is not None else 0.0
    return pct


ENGINE_BUCKET_S = 60.0
GEN_HISTORY_BUCKET_S = 300
MAX_GEN_HISTORY = 24


def _roll_gen_bucket(state: JobHealth, ts: float) -> None:
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


def _engine_sample(eng: EngineState, ts: float, gen: float, prompt: float, running: float, waiting: float,
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


def _trainer_progress(state: JobHealth, sig: str, f: dict, ts: float | None, ev: Ev) -> None:
    tr = state.trainer
    _touch_role(state, roles.TRAINER, ts)
    if sig == "trainer_step":
        step = _as_int(f.get("step"))
        if step is not None and tr.last_step is not None and step <= tr.last_step:
            # A restarted process re-printing the same step is not progress.
            return
    if ts is not None and (tr.last_progress_ts is None or ts >= tr.last_progress_ts):
        tr.last_progress_ts = ts
        tr.last_progress_text = ev.text
        tr.last_progress_source = ev.source
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
        secs = _float(f.get("seconds"))
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
        step = _as_int(f.get("step"))
        if step is not None and ts is not None:
            if tr.last_step is None or step != tr.last_step:
                push_capped(tr.step_ts, (ts, step), MAX_STEP_HISTORY)
            tr.last_step = step if tr.last_step is None else max(tr.last_step, step)
            training_time.note_step(state.clock, ts, step)
    elif sig == "trainer_metrics":
        _trainer_metrics(state, f, ts, ev)


# Unquoted "key:value" (verl " - actor/entropy:0.5") and "key: value |" (Megatron "lm loss: 2.1E+00 |").
_BARE_PAIR_RE = re.compile(r"(?:^|[\s|{,])([A-Za-z][\w/.\-]*(?: [a-z][\w/.\-]*)?)\s*:\s*"
                           r"(-?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+)|-?(?:nan|NaN|inf|Infinity))(?=\s*(?:\||-\s|,|\}|$))")
_METRIC_PAIR_RE = re.compile(r"""['"]([\w/.\-]+)['"]\s*:\s*"""
                             r"(-?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+)|-?(?:nan|NaN|inf|Infinity))")


def _as_int(v: object) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return None


# A step's own wall time in trainer metric dicts (verl prints it on every step line).
_STEP_TIME_KEYS = frozenset({"timing_s/step", "timing/step", "time/step", "step_time", "train/step_time"})


def _step_time(pairs: list[tuple[str, str]]) -> float | None:
    for key, value in pairs:
        if key.lower() in _STEP_TIME_KEYS:
            v = float(value.replace("Infinity", "inf"))
            return v if math.isfinite(v) else None
    return None


_METRIC_KEYS: dict[str, tuple[str | None, bool]] = {}


def _metric_key(key: str) -> tuple[str | None, bool]:
    """(the history a metric name feeds: loss, grad_norm, entropy or None; whether a non-finite value
    of it is an alarm), memoised: trainers print the same names on every line."""
    lk = key.lower().replace(" ", "_")
    kind = ("loss" if (lk.endswith("policy_loss") or lk in ("final_loss", "loss", "lm_loss") or lk.endswith("/loss")
                       or lk.endswith("pg_loss"))
            else "grad_norm" if "grad_norm" in lk
            else "entropy" if lk.endswith("entropy") else None)
    info = (kind, "loss" in lk or "grad" in lk)
    if len(_METRIC_KEYS) < 4096:
        _METRIC_KEYS[key] = info
    return info


def _trainer_metrics(state: JobHealth, f: dict, ts: float | None, ev: Ev) -> None:
    """Loss, grad norm and entropy from WANDB_MIRROR JSON or SkyRL's printed stats dict (both key: number)."""
    raw = f.get("metrics")
    step = _as_int(f.get("step"))
    # quoted pairs need a quote: verl's and Megatron's lines skip that search (a substring test is ~free)
    pairs = (("'" in raw or '"' in raw) and _METRIC_PAIR_RE.findall(raw) or _BARE_PAIR_RE.findall(raw)) \
        if isinstance(raw, str) else []
    if step is not None and ts is not None:
        tr = state.trainer
        if tr.last_step is None or step > tr.last_step:
            push_capped(tr.step_ts, (ts, step), MAX_STEP_HISTORY)
            tr.last_step = step
            training_time.note_step(state.clock, ts, step, _step_time(pairs))
        elif step == tr.last_step and state.clock.untimed_from is not None \
                and (duration := _step_time(pairs)) is not None:
            # the step line came first and moved the frontier without time passing (unstamped)
            training_time.note_duration(state.clock, step, duration)
    if not isinstance(raw, str) or ts is None:
        return
    hist = state.metrics
    seen: set[str] = set()
    nonfinite_line = False
    for key, value in pairs:
        info = _METRIC_KEYS.get(key)
        if info is None:
            info = _metric_key(key)
        kind, loss_or_grad = info
        if kind is None and not loss_or_grad:
            continue  # neither kept nor a non-finite alarm, whatever its value
        v = float(value.replace("Infinity", "inf"))
        if not math.isfinite(v):
            if loss_or_grad and not nonfinite_line:
                nonfinite_line = True  # one line is one occurrence, however many fields it makes NaN
                hist.nonfinite += 1
                hist.nonfinite_ev = ev
            continue
        if kind is None or kind in seen:
            continue  # one value per kind per line (the first is the headline one)
        seen.add(kind)
        push_capped(getattr(hist, kind), (ts, v), MAX_METRIC_HISTORY)


def _python_exception(state: JobHealth, m: LineMatch, role: str, ts: float | None, ev: Ev, attempt: int | None,
                      lines: list[str], key: str) -> None:
    f = m.fields
    exc_type = str(f.get("exc_type") or "Exception")
    message = str(f.get("message") or "")
    short = exc_type.rsplit(".", 1)[-1]
    if short in BENIGN_EXCEPTIONS:
        note_signal(state, "python_exception_benign", ev, attempt)
        return
    start = max(0, m.index - _TB_LOOKBACK)
    context = [strip_ansi(x) for x in lines[start: m.index]]
    fatal_context = any(_FATAL_CONTEXT_RE.search(x) for x in context[-_FATAL_CONTEXT_LINES:])
    if not fatal_context:
        st = state.streams.get(key)
        carried = st.fatal_context_ago if st is not None else None
        fatal_context = carried is not None and carried + m.index <= _FATAL_CONTEXT_LINES
    fatal = role in (roles.TRAINER, roles.OTHER) and fatal_context
    fclass = failure_class_of(exc_type + ": " + message)
    rec = TracebackRec(
        ts=ts, exc_type=exc_type, message=_clip(message, 300), fingerprint=fingerprint(exc_type, message),
        failure_class=fclass, stream=key, attempt=attempt, role=role,
        text=_clip("\n".join(x for x in context[-6:] if x.strip()) + "\n" + m.text, 800), fatal=fatal,
    )
    rec.consequence = is_consequence(exc_type, message)
    # Consecutive exception lines of one stream within 2 s are one chained failure. Python prints the
    # original cause first ("The above exception was the direct cause ..."), so keep the first unless
    # it is itself a consequence or a wrapper (RayTaskError prints the remote cause after its header).
    tbs = state.tracebacks
    prev = tbs[-1] if tbs else None
    if prev is not None and prev.stream == key and prev.attempt == attempt and ts is not None and prev.ts is not None \
            and abs(ts - prev.ts) < 2.0:
        wrapper = prev.consequence or "RayTaskError" in prev.exc_type or prev.failure_class in ("RayTaskError", "other")
        if wrapper and not rec.consequence:
            rec.fatal = rec.fatal or prev.fatal
            tbs[-1] = rec
        else:
            prev.fatal = prev.fatal or rec.fatal
    else:
        push_capped(tbs, rec, MAX_TRACEBACKS)
    note_signal(state, "python_exception", ev, attempt, role)


# ------------------------------------------------------------------------------------------ other events


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
        (g.index if g.index is not None else i, _round(g.util_pct), _round(g.mem_used_mib), _round(g.mem_total_mib),
         _round(g.power_w))
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
            note_signal(state, "gpu_poll_error", Ev(ts, f"gpu/{host}", _clip(err)), state.sched.attempt)
    for app in poll.apps:
        name = (app.process_name or "").strip()
        if name and name not in gh.app_names and len(gh.app_names) < 8:
            gh.app_names.append(name[:80])
    _assign_gpu_role(state, host, gh)


def _assign_gpu_role(state: JobHealth, host: str, gh: GpuHost) -> None:
    geo = (state.spec or {}).get("geometry") or {}
    gh.role, gh.role_source = roles.gpu_host_role(host, geo.get("engine_pods") or [], geo.get("policy_pods") or [],
                                                  gh.app_names)


def step_trial(state: JobHealth, ev_in: TrialEvent, now: datetime) -> None:
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
        _touch_role(state, roles.ROLLOUT, ts)
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
        st_ts = _ts(ev_in.started_at) or ts
        stats.first_started_ts = st_ts if stats.first_started_ts is None else min(stats.first_started_ts, st_ts)
    push_capped(stats.completed_names, name, MAX_TRIAL_NAMES)
    stats.completed += 1
    push_capped(stats.completed_ts, round(ts), MAX_REWARDS)
    stats.last_completed_ts = ts if stats.last_completed_ts is None else max(stats.last_completed_ts, ts)
    _touch_role(state, roles.ROLLOUT, ts)
    reward = _float(ev_in.reward)
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
            if et not in stats.exc_examples:
                msg = f"trial {name}: {et}: {ev_in.exception_message or ''}"
                stats.exc_examples[et] = Ev(ts, f"trial/{name}", _clip(msg, 400))
    if ev_in.output_samples:
        reason = trial_incoherence(list(ev_in.output_samples))
        if reason is None:
            stats.coherent_samples += 1
        else:
            stats.incoherent_samples += 1
            stats.incoherent_reasons[reason] = stats.incoherent_reasons.get(reason, 0) + 1
            if len(stats.incoherent_examples) < MAX_SAMPLES:
                sample = next((x for x in ev_in.output_samples if incoherence_reason(x)), ev_in.output_samples[0])
                stats.incoherent_examples.append(Ev(ts, f"trial/{name}", _clip(f"[{reason}] {sample}", 300)))


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
            (a.attempt, a.terminal_state, a.exit_code, _ts(a.ended_at), (a.error or "")[:400])
            for a in poll.attempts[-16:]
        ]
    _touch_role(state, roles.SCHEDULER, ts)
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
                    sc.pod_reason_examples[reason] = Ev(ts, "pods", _clip(text, 300))


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


