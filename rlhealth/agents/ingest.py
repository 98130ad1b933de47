"""Folding log batches into JobHealth (other events: `fold_events`). Pure; `now` is an argument.

The hot path: the classifier scans the whole batch in C, and only matched lines
(about 1 in 100) reach Python code here. Timestamps are parsed only for matched lines and the
last line of each batch.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

from rlhealth.agents import roles
from rlhealth.agents.bar_clock import bar_time
from rlhealth.agents.failures import BENIGN_EXCEPTIONS, failure_class_of, is_consequence
from rlhealth.agents.findings import Finding
from rlhealth.agents.fold_common import as_int, clip, epoch, to_float, touch_role
from rlhealth.agents.fold_engines import (
    engine_config,
    engine_core_start,
    engine_core_wait,
    engine_stats,
    fold_engine_rows,
)
from rlhealth.agents.fold_trainer import LatestProgress, fold_progress, trainer_progress
from rlhealth.agents.lognames import unrotated_name
from rlhealth.agents.normalize import (
    date_time_only,
    line_timestamp,
    line_timestamp_seen,
    peel_and_stamp_batch,
    peel_prefixes,
    strip_ansi,
)
from rlhealth.agents.signal_tally import SignalCalls, SignalTally
from rlhealth.agents.signals import Catalog
from rlhealth.agents.signatures import Classifier, LineMatch, Rule
from rlhealth.agents.state import (
    MAX_FOLDED_FILES,
    MAX_FOLDED_RANGES,
    MAX_STEP_HISTORY,
    MAX_STREAMS,
    MAX_TRACEBACKS,
    EngineState,
    Ev,
    JobHealth,
    StreamState,
    TracebackRec,
    push_capped,
)
from rlhealth.agents.tracebacks import fingerprint
from rlhealth.schemas import LogBatch

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
assert _FATAL_CONTEXT_LINES < _TB_LOOKBACK, "_unraisable reads the line before a header inside the window"
# Python's unraisable-exception hook (a finalizer, __del__, a weakref callback) prints this line, then the
# traceback, and carries on: the exception was discarded, so its traceback says nothing about the job dying
# (the python.unraisable rule's pattern, which the batch loop reads: both must say the same)
_UNRAISABLE_RE = re.compile(r"(?:^|[])] |\]: |[0-9]Z |(?:stdout|stderr) [FP] ) *Exception ignored (?:in|on|while)[: ]")


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

    batch_ts = epoch(batch.event_time)
    prev_stream_ts = st.last_ts
    # Until a line of the stream shows its own time, every time its lines get is lent from later (see
    # StreamState.stamped)
    unstamped = head = not st.stamped
    if head:
        rotated = _rotation_time(state, key)
        if rotated is not None:
            # an older rotation of this log was stamped: this file's unstamped lines come after its newest
            # time (a lower bound), whatever later stamp the reader lent them
            head, prev_stream_ts = False, rotated
    now_ts = now.timestamp()
    log_name = unrotated_name(key)
    bar_keys: dict[tuple, str] = {}  # a bar's key per prefixes (bar_clock.py)
    seen_lo: float | None = None  # the newest stamp read so far in this batch (a matched line's or one before it)
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
    elif unstamped:
        st.stamped = True
    if last_ts is not None and (st.last_ts is None or last_ts > st.last_ts):
        st.last_ts = last_ts

    matches = classifier.scan(lines)
    findings: list[Finding] = []
    memo: dict[int, datetime | None] = {}
    walked: dict[int, tuple[datetime | None, int]] = {}
    # Per batch, what depends only on the rule (its declaration) or only on a line's prefixes (role,
    # attempt: the scheduler's attempt and the batch's source do not change within a batch); most
    # matched lines of dense logs share both with many others.
    # (fast path: 1 engine stats, 2 progress, 0 _apply_match; the signal's declared role; a finding kind;
    # the declared effect; the tally's calls of a fast-path rule)
    # (..., the rule is Python's unraisable-hook line)
    by_rule: dict[str, tuple[int, str | None, bool, str, SignalCalls | None, bool]] = {}
    # (role, attempt, engine id by engine label) per prefixes tuple
    by_prefixes: dict[tuple, tuple[str | None, int | None, dict[str | None, str]]] = {}
    no_ts = prev_stream_ts if prev_stream_ts is not None else batch_ts
    offsets = batch.offsets
    stream = batch.source.stream
    newest_context = -1
    context_void = False  # the newest context line is a traceback header the unraisable hook printed
    # index of the newest "Exception ignored" line (-1: the previous batch's last line)
    newest_unraisable = -1 if st.unraisable_at_end else -2
    # engine-stats lines (most matched lines of dense logs) are folded here, without _apply_match's
    # dispatch and with their engine's identity memoised per batch: what engine_stats does for them
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
    # every matched line's prefixes and own timestamp in one pass (C when built): own_dt ==
    # line_timestamp(lines[m.index], now), m.text being lines[m.index] ANSI-stripped
    parsed = peel_and_stamp_batch([m.text for m in matches], now) if matches else ()

    def make_ev(k: int, ts: float | None) -> Ev:
        m = matches[k]
        return Ev(ts, key, clip(m.text), m.rule.id, stream, offsets[m.index] if offsets is not None else None)

    # the batch's note_signal calls, applied per signal at the end; an engine-stats line's Ev is built
    # only if it is kept as evidence (`make_ev`)
    tally = SignalTally(key, make_ev)
    ev: Ev | None = None
    # engine stats lines of known engines and times, folded in order by fold_engine_rows (one pass per
    # run between two 5-minute buckets, C when built): before a line that may add or evict an engine,
    # and at the end (nothing else in a batch reads the engines or the generation bucket)
    rows_eng: list[EngineState] = []
    rows_ts: list[float] = []
    rows_f: list[dict] = []
    latest = LatestProgress(state.trainer)  # the batch's newest progress line, written at its end
    # progress lines, folded in order by fold_progress before a line of another effect and at the end
    prog_sig: list[str] = []
    prog_f: list[dict] = []
    prog_ts: list[float | None] = []
    prog_k: list[int] = []
    TRAINER = roles.TRAINER
    for k, (m, pk_dt) in enumerate(zip(matches, parsed)):
        text = m.text
        rule = m.rule
        if m.index != index:
            # a line's time and prefixes, once per line (a line may match several rules)
            index = m.index
            pk, own_dt = pk_dt
            dt = explicit_ts[index] if explicit_ts is not None else None
            if dt is None:
                dt = memo[index] = own_dt
                if dt is None:
                    dt = _line_time(lines, index, now, memo, explicit_ts, walked)
                if dt is None and rule.signal == "python_exception":
                    # a long traceback's exception line: its look-back lines are read anyway, and the time
                    # before the traceback places it in its attempt better than the stream's last time
                    dt = _line_time(lines, index, now, memo, explicit_ts, None, _TB_LOOKBACK)
                if dt is not None and own_dt is None:
                    # a time-only stamp (OpenHands' "HH:MM:SS - ") takes its date from that earlier full stamp
                    dt = date_time_only(pk[1], dt) or dt
            if dt is None:
                ts = no_ts
            elif dt is stamp:
                ts = stamp_ts
            else:
                stamp, ts = dt, dt.timestamp()
                stamp_ts = ts
            # this line's stamp or an earlier line's: a lower bound for the lines after it
            if dt is not None and ts is not None and (seen_lo is None or ts > seen_lo):
                seen_lo = ts
            # peel_prefixes strips again: only a text that still holds an ESC can differ from the peel above
            prefixes, rest = peel_prefixes(text) if "\x1b" in text else pk[:2]
        ri = by_rule.get(rule.id)
        if ri is None:
            decl = catalog.signals.get(rule.signal)
            effect = decl.effect if decl is not None else "death"
            plain = rule.signal not in ("python_exception", "trainer_metrics_nonfinite")
            # the tally's calls of a rule the loop notes itself (engine stats, progress): this very line
            # is noted below, so the signal's place among the batch's first calls is kept
            fast = (1 if effect == "engine_stats" else 2 if effect == "progress" else 0) if plain else 0
            ri = by_rule[rule.id] = (fast, decl.role if decl is not None and decl.role in roles.ROLES else None,
                                     rule.kind in FINDING_KINDS, effect, tally.calls_of(rule.signal) if fast else None,
                                     rule.signal == "python_unraisable")
        pa = by_prefixes.get(prefixes)
        if pa is None:
            pa = by_prefixes[prefixes] = (roles.role_of_prefixes(prefixes), _named_attempt(batch, prefixes), {})
        role = pa[0] or st.role
        if role == OTHER and ri[1] is not None:
            role = ri[1]
        attempt = pa[1]
        if attempt is None:
            attempt = sched_attempt if ts is None or ends_by is None or ts > ends_by else attempt_at(state, ts)
        fast = ri[0]
        if fast == 1:
            f = m.fields
            if ts is not None:  # touch_role(state, roles.ENGINE, ts)
                prev = role_last_ts.get(ENGINE)
                if prev is None or ts > prev:
                    role_last_ts[ENGINE] = ts
            label = f.get("engine")
            if type(label) is not str or not label:  # a non-empty str is its own label
                label = str(label or "") or None
            eid = pa[2].get(label)
            if eid is None:
                eid = pa[2][label] = roles.engine_identity(prefixes, label, engine_stream)
            eng = engines.get(eid)
            if eng is None or ts is None:
                if rows_ts:  # the engines as the lines before left them (an engine may be evicted)
                    fold_engine_rows(state, rows_eng, rows_ts, rows_f)
                    rows_eng, rows_ts, rows_f = [], [], []
                engine_stats(state, f, prefixes, ts, batch, key)  # a new engine (may evict one), or no time
            else:
                rows_eng.append(eng)
                rows_ts.append(ts)
                rows_f.append(f)
            ev = None  # tallied below: its Ev is built only if kept
        elif fast == 2:
            # trainer progress lines (most of a dense trainer log), without _apply_match's dispatch and
            # with their Ev built only when kept: what _apply_match does for them
            pts = ts
            if ts is not None and "elapsed" in m.fields:
                # a tqdm bar dates itself past the earlier stamp it borrowed (bar_clock.py). Its base must be a
                # lower bound: the line's own or an earlier line's time, never one lent by a later stamp (the
                # unstamped head's): there, the newest stamp seen earlier in this batch, if any
                lo = ts if dt is not None or not head else seen_lo
                if lo is not None:
                    total = m.fields.get("total")  # a trainer's bar and its eval bar are two clocks
                    bar_key = bar_keys.get((prefixes, total))
                    if bar_key is None:
                        bar_key = bar_keys[(prefixes, total)] = f"{log_name}{prefixes!r}/{total}"
                    pts = max(ts, min(bar_time(state.bars, bar_key, m.fields["elapsed"], lo), now_ts))
            if pts is not None:  # touch_role(state, role, ts), then trainer_progress's touch_role(state, TRAINER, ts)
                prev = role_last_ts.get(role)
                if prev is None or pts > prev:
                    role_last_ts[role] = pts
                prev = role_last_ts.get(TRAINER)
                if prev is None or pts > prev:
                    role_last_ts[TRAINER] = pts
            prog_sig.append(rule.signal)
            prog_f.append(m.fields)
            prog_ts.append(pts)
            prog_k.append(k)
            ev = None  # tallied below: its Ev is built only if kept
        else:
            if prog_k:
                fold_progress(state, prog_sig, prog_f, prog_ts, prog_k, make_ev, latest)
                prog_sig, prog_f, prog_ts, prog_k = [], [], [], []
            # an EngineCore's wait or start-up banner reads (and the banner writes) the engines
            if (ri[3] == "engine_stats" or ri[3] == "engine_wait" or rule.signal == "version_banner") and rows_ts:
                fold_engine_rows(state, rows_eng, rows_ts, rows_f)
                rows_eng, rows_ts, rows_f = [], [], []
            ev = Ev(ts, key, clip(text), rule.id, stream, offsets[index] if offsets is not None else None)
            _apply_match(state, m, rest, prefixes, role, ts, ev, attempt, lines, batch, key, catalog, ri[3], tally,
                         k, make_ev, latest)
        if fast:  # an engine-stats or progress line: its signal call, applied once per batch
            calls = ri[4]
            assert calls is not None
            calls.tss.append(ts)
            calls.attempts.append(attempt)
            calls.roles.append(role)
            calls.evs.append(k)
        if ri[2]:
            if ev is None:
                ev = make_ev(k, ts)
            offset = ev.offset
            if index > newest_context and _FATAL_CONTEXT_RE.search(text):
                newest_context = index
                context_void = newest_unraisable == index - 1
            findings.append(Finding(
                kind=m.rule.kind, rule_id=m.rule.id, text=ev.text, event_time=dt, source=key,
                severity=m.rule.severity, gates=m.rule.gates, fields=dict(m.fields),
                # `file_offset` names the byte offset in the source file (`offset` is a Kafka offset in
                # EvidenceRef); `batch_index` keeps two hits of one rule in one batch apart.
                ref={"file": batch.source.stream, "file_offset": offset, "batch_index": m.index,
                     "line_no": (batch.first_line_no + m.index) if batch.first_line_no is not None else None},
            ))
        elif ri[5]:
            newest_unraisable = index
    if rows_ts:
        fold_engine_rows(state, rows_eng, rows_ts, rows_f)
    if prog_k:
        fold_progress(state, prog_sig, prog_f, prog_ts, prog_k, make_ev, latest)
    if latest.k >= 0:
        state.trainer.last_progress_bound = head and _lent_time(matches[latest.k].index, explicit_ts, memo, walked)
    if unstamped and not st.stamped and (explicit_ts is not None and any(t is not None for t in explicit_ts)
                                         or any(dt is not None for dt in memo.values())):
        st.stamped = True
    latest.apply(state.trainer, make_ev)
    tally.flush(state)
    # Carry the traceback context over the batch boundary (matched lines only, so a reader that
    # decodes only matches and their look-back carries the same).
    ago = len(lines) - newest_context if newest_context >= 0 else (
        None if st.fatal_context_ago is None else st.fatal_context_ago + len(lines))
    st.fatal_context_ago = ago if ago is not None and ago <= _FATAL_CONTEXT_LINES else None
    if newest_context >= 0:
        st.fatal_context_swallowed = context_void  # a header the unraisable hook printed: its exception was discarded
    st.unraisable_at_end = newest_unraisable == len(lines) - 1
    return findings


_NO_TS = object()


def _rotation_time(state: JobHealth, key: str) -> float | None:
    """The newest time of an (older) rotation of this stream's log that showed a timestamp, if any."""
    name = unrotated_name(key)
    return max((s.last_ts for k, s in state.streams.items()
                if k != key and s.stamped and s.last_ts is not None and unrotated_name(k) == name), default=None)


def _lent_time(index: int, explicit_ts: list | None, memo: dict, walked: dict) -> bool:
    """In a stream not stamped before this batch: did line `index` get its time from no line at or before
    it (the batch's or the stream's time, i.e. a later stamp's)?"""
    if explicit_ts is not None and explicit_ts[index] is not None:
        return False
    if memo.get(index) is not None:
        return False
    w = walked.get(index)
    return w is None or w[0] is None


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
                 effect: str, tally: SignalTally, k: int, make_ev: Callable[[int, float | None], Ev],
                 latest: LatestProgress) -> None:
    """Fold one matched line by its signal's declared `effect` (rules/signals.toml; "death" when
    the signal is not declared)."""
    rule = m.rule
    sig = rule.signal
    f = m.fields
    if effect in ("progress", "activity", "engine_stats", "engine_pressure", "engine_up", "weight_sync"):
        touch_role(state, roles.ENGINE if effect in ("engine_stats", "engine_up") else role, ts)
    if effect == "engine_stats":
        engine_stats(state, f, prefixes, ts, batch, key)
    elif effect == "progress":
        trainer_progress(state, sig, f, ts, k, make_ev, latest)
    elif effect == "weight_sync":
        if sig == "weight_sync_start":
            state.trainer.in_weight_sync_since = ts
        elif sig == "weight_sync_finish":
            state.trainer.in_weight_sync_since = None
    elif effect == "trial_summary" and sig == "batch_complete":
        ok, total = f.get("successful"), f.get("total")
        if isinstance(ok, int) and isinstance(total, int) and ts is not None:
            push_capped(state.batch_progress, (ts, ok, total), MAX_STEP_HISTORY)
        touch_role(state, roles.ROLLOUT, ts)
    elif effect == "config":
        engine_config(state, sig, f)
    elif effect == "engine_wait":
        engine_core_wait(state, f, prefixes, ts, key)
    elif effect == "activity" and sig == "version_banner":
        engine_core_start(state, prefixes, ts, key)
    elif effect == "hardware" and sig == "xid":
        code = as_int(f.get("xid"))
        if code is not None and ts is not None:
            push_capped(state.xids, (ts, batch.source.host or key, code, ev.text), MAX_TRACEBACKS)
    elif effect in ("engine_warmup", "engine_up"):
        _engine_phase(state, effect == "engine_up", roles.pod_of(prefixes) or batch.source.host or "", ts)
    elif effect == "hang":
        _rank_progress(state, f, m.text, ts)
        _collective_stuck(state, f, ts, attempt, key)
        _stated_stall(state, f, ts, key)
        if ts is not None and (key in state.hang_streams or len(state.hang_streams) < MAX_RANKS):
            state.hang_streams[key] = max(ts, state.hang_streams.get(key, ts))
    if sig == "python_exception":
        _python_exception(state, m, role, ts, ev, attempt, lines, key, tally)
        return
    if sig == "trainer_metrics_nonfinite":
        state.metrics.nonfinite += 1
        state.metrics.nonfinite_ev = ev
    tally.note(sig, ts, ev, attempt, role)


_RANK_RE = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]|\brank[ =:]+(\d+)", re.I)
MAX_RANKS = 64


def _rank_progress(state: JobHealth, f: dict, text: str, ts: float | None) -> None:
    """Per-rank last completed collective from watchdog lines: the straggler has the lowest."""
    seq = as_int(f.get("last_completed"))
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


def _collective_stuck(state: JobHealth, f: dict, ts: float | None, attempt: int | None, key: str) -> None:
    """A hang line that says how long its collective ran ("ran for N milliseconds", field `ran_ms`)
    dates when it was issued; the newest such line is kept (progress_time.py reads it)."""
    ran_ms = to_float(f.get("ran_ms"))
    if ts is None or ran_ms is None or not ran_ms > 0:
        return
    issued = ts - ran_ms / 1000.0
    cur = state.collective_stuck
    if cur is None or ts > cur[0] or (ts == cur[0] and issued < cur[1]):
        state.collective_stuck = (ts, issued, attempt, key)


def _engine_phase(state: JobHealth, ready: bool, host: str, ts: float | None) -> None:
    """The newest warm-up and ready line of the engine(s) on `host` (gate_resources._warming_up reads them)."""
    cur = state.engine_phase.get(host)
    if ts is None or (cur is None and len(state.engine_phase) >= MAX_RANKS):
        return
    warm, up = cur if cur is not None else (None, None)
    if ready:
        up = ts if up is None else max(up, ts)
    else:
        warm = ts if warm is None else max(warm, ts)
    state.engine_phase[host] = (warm, up)


def _stated_stall(state: JobHealth, f: dict, ts: float | None, key: str) -> None:
    """A hang line that says for how long its process has been stuck (field `timeout_s`: a watchdog that
    fires once one unit of work has run that long) dates when the stall began (gate_liveness reads it)."""
    secs = to_float(f.get("timeout_s"))
    if ts is None or secs is None or not secs > 0:
        return
    cur = state.stated_stalls.get(key)
    if cur is None and len(state.stated_stalls) >= MAX_RANKS:
        return
    if cur is None or ts >= cur[0]:
        state.stated_stalls[key] = (ts, ts - secs)


_CHAIN_RE = re.compile(r"During handling of the above exception|The above exception was the direct cause")


def _chained(context: list[str], header: int) -> bool:
    """Does the traceback header at `header` continue a chain (Python's 'During handling of the above
    exception, another exception occurred:' or '... direct cause ...' line just before it, blank lines aside)?"""
    for i in range(header - 1, max(-1, header - 4), -1):
        if context[i].strip():
            return bool(_CHAIN_RE.search(context[i]))
    return False


def _newest_fatal_context(context: list[str]) -> int | None:
    """Index in `context` of the newest traceback header (or other fatal context) within reach, if any."""
    for i in range(len(context) - 1, max(-1, len(context) - 1 - _FATAL_CONTEXT_LINES), -1):
        if _FATAL_CONTEXT_RE.search(context[i]):
            return i
    return None


def _unraisable(context: list[str], header: int, carried: bool) -> bool:
    """Is the traceback header at `header` one the unraisable hook printed (the line right before it says
    'Exception ignored in: ...'; `carried`: the previous batch ended with that line, `header` is the first)?

    `header` is 0 only when the look-back window starts at the batch's first line: a header is looked for in
    the last _FATAL_CONTEXT_LINES of a window of _TB_LOOKBACK, which is longer, so a window cut inside the batch
    never puts a header at its first line (whose preceding line this could not see)."""
    if header == 0:
        return carried
    return bool(_UNRAISABLE_RE.search(context[header - 1]))


def _python_exception(state: JobHealth, m: LineMatch, role: str, ts: float | None, ev: Ev, attempt: int | None,
                      lines: list[str], key: str, tally: SignalTally) -> None:
    f = m.fields
    exc_type = str(f.get("exc_type") or "Exception")
    message = str(f.get("message") or "")
    short = exc_type.rsplit(".", 1)[-1]
    if short in BENIGN_EXCEPTIONS:
        tally.note("python_exception_benign", ts, ev, attempt)
        return
    start = max(0, m.index - _TB_LOOKBACK)
    context = [strip_ansi(x) for x in lines[start: m.index]]
    header = _newest_fatal_context(context)
    st = state.streams.get(key)
    if header is not None:
        swallowed = _unraisable(context, header, start == 0 and st is not None and st.unraisable_at_end)
        fatal_context = not swallowed
    else:
        carried = st.fatal_context_ago if st is not None else None
        in_reach = carried is not None and carried + m.index <= _FATAL_CONTEXT_LINES
        swallowed = in_reach and st is not None and st.fatal_context_swallowed
        fatal_context = in_reach and not swallowed
    fatal = role in (roles.TRAINER, roles.OTHER) and fatal_context
    fclass = failure_class_of(exc_type + ": " + message)
    rec = TracebackRec(
        ts=ts, exc_type=exc_type, message=clip(message, 300), fingerprint=fingerprint(exc_type, message),
        failure_class=fclass, stream=key, attempt=attempt, role=role,
        text=clip("\n".join(x for x in context[-6:] if x.strip()) + "\n" + m.text, 800), fatal=fatal,
    )
    rec.consequence = is_consequence(exc_type, message)
    rec.swallowed = swallowed
    # Consecutive exception lines of one stream within 2 s are one chained failure. Python prints the
    # original cause first ("The above exception was the direct cause ..."), so keep the first unless
    # it is itself a consequence or a wrapper (RayTaskError prints the remote cause after its header).
    tbs = state.tracebacks
    prev = tbs[-1] if tbs else None
    close = prev is not None and prev.stream == key and prev.attempt == attempt and ts is not None \
        and prev.ts is not None and abs(ts - prev.ts) < 2.0
    if close and prev is not None and prev.swallowed:
        # only the rest of the chain the unraisable hook printed goes with it; a new traceback is its own failure
        close = header is not None and _chained(context, header)
        if close:
            rec.swallowed, rec.fatal = True, False
    if close and prev is not None:
        wrapper = prev.consequence or "RayTaskError" in prev.exc_type or prev.failure_class in ("RayTaskError", "other")
        if wrapper and not rec.consequence:
            rec.fatal = rec.fatal or prev.fatal
            tbs[-1] = rec
        else:
            prev.fatal = prev.fatal or rec.fatal
    else:
        push_capped(tbs, rec, MAX_TRACEBACKS)
    tally.note("python_exception", ts, ev, attempt, role)




