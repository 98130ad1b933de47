"""The streaming worker: thin faust agents and timers around the pure health core.

One agent (`judge_job_events`) reads every event topic as raw bytes. Per record it

1. decodes with `rlhealth.schemas.decode_event`; a record it cannot use (bad JSON, unknown kind or
   version, invalid fields, a kind on the wrong topic, a key that is not `job_key(job_id)`) goes
   whole to the dead-letter topic with its reason, and is counted; nothing crashes the agent;
2. loads the job's `JobHealth` from the `job_health` table, calls `core.step(state, event, now)`
   and REASSIGNS `table[key] = state.to_bytes()` (the assignment writes the changelog);
   an exception from the core dead-letters the record with stage="core", reason="core_error";
3. on `JobEnded`, marks the job ended; the fast timer then publishes its final verdict and expires it.

A job is expired (final verdict published, metric series removed, table entries deleted, which
writes tombstones to the changelogs) when it ended (`JobEnded`), when the scheduler has reported a
terminal state (succeeded, failed, killed) for `terminal_expiry_secs`, or when nothing arrived for
it for `idle_expiry_secs` (default 6 h, longer than any legitimate stall). Events that arrive for
an expired job start a fresh state (and its verdict `seq` starts again at 1).

A timer (`tick_secs`) judges the jobs of the partitions this worker owns, with the wall clock
(and a fast timer, `fast_tick_secs`, judges at once the jobs whose last events produced findings
or were scheduler state/spec changes, so a fault reaches the verdict topic in well under a tick):
each raw judgement goes through the hysteresis of `rlhealth.agents.stability` (documented in
docs/verdicts.md), and the result is published to the verdict topic when one of its key facts
changed (`stability.key_facts`: the call, job status, gate status/codes/families, the staleness band,
the evidence, a held change) or as a heartbeat every `heartbeat_secs`, with a per-job `seq` kept in
the `verdict_book` table; it refreshes the Prometheus exporter from `core.metrics`. A job whose state
is unchanged since its last judgement is not judged again until that judgement could change (the
core's recheck time, the staleness band, the next metrics point, heartbeat or expiry: `_Fresh`,
docs/verdicts.md "Judging only what can change"). With
`clock_mode="event"` a job is judged at its newest event time rather than the wall clock (a
backfill or a replay at full speed: each verdict is then what `probe --now` says at that time).
Series of jobs this worker no longer owns (revoked
partitions, ended jobs) are removed.

Worker downtime is not the job's silence: after an assignment a partition is judged only once
the worker has processed every record that was in it at assignment time ("caught up": the
committed offset reached the high-water mark the partition had when it was assigned). Until then
the backlog, which holds the job's events from while we were down, is still being folded in.

If anything escapes the per-record handling (a bug in the worker itself), the process exits with
status 70 instead of idling with a dead agent (anchors.md §B.2 item 2); the orchestrator restarts
it and the changelog restores the state.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

import faust
from aiokafka.partitioner import murmur2
from faust.types import TP

from rlhealth import settings as _settings  # the module; `settings` is shadowed by parameters below
from rlhealth.agents.stability import AGE_BANDS_S
from rlhealth.schemas import DeadLetter, EventDecodeError, decode_event, encode, job_key
from rlhealth.schemas.codec import dead_letter_json
from rlhealth.schemas.kafka_security import KafkaSecurity, resolve
from rlhealth.schemas.topics import TopicCatalog
from rlhealth.sinks.evidence_records import finding_record
from rlhealth.sinks.prometheus import Exporter
from rlhealth.streams.app import DEFAULT_APP_ID, group_id, make_app
from rlhealth.streams.batch_intake import BatchIntake, install_batch_intake
from rlhealth.streams.delivery import Stall, await_batches, track_topics
from rlhealth.streams.fetch_wait import install_fetch_wait
from rlhealth.streams.heap import HeapFreezer
from rlhealth.streams.intake import RawBytes, install_lean_delivery
from rlhealth.streams.judging import JudgingPass, _Fresh
from rlhealth.streams.pauses import GcPauses
from rlhealth.streams.priority import JudgingPriority
from rlhealth.streams.record_batches import RecordBatches
from rlhealth.streams.state_cache import DecodedStates
from rlhealth.streams.tables import BookFacts, Tables, compact, make_tables

log = logging.getLogger("rlhealth.worker")

EXIT_AGENT_DIED = 70
# Kinds that can change a call on their own: judged within `fast_tick_secs`, not at the next tick.
URGENT_KINDS = frozenset({"job_state", "job_spec", "job_ended"})
PROBE_SECS = 0.5  # the event-loop probe's interval
# The snapshot `/metrics` serves is taken on the event loop by a timer this often, between judging
# passes; after a regular pass the heap is frozen too (`_after_passes`)
AFTER_PASSES_SECS = 1.0
# ... and the per-job text changed by passes of jobs with news is rendered again at most this share of
# the loop's time (~0.1 s per render at 10,000 jobs)
METRICS_TEXT_DUTY = 0.1
# A probe this late is logged: nothing else ran meanwhile, the group coordinator's heartbeats included
LOOP_STALL_WARN_SECS = 2.0


@dataclass(frozen=True)
class WorkerSettings:
    bootstrap: str
    catalog: TopicCatalog
    app_id: str = DEFAULT_APP_ID
    tick_secs: float = 10.0
    heartbeat_secs: float = 300.0
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"
    db_path: str | None = None
    web_port: int | None = None
    loglevel: str = "info"
    session_timeout_s: float = 30.0
    fast_tick_secs: float = 0.25  # jobs with new findings are judged this soon
    # ... unless the intake is this many records behind (then at the regular tick: `_backlogged`); -1: always
    fast_tick_max_lag: int = 10_000
    batch_max: int = 200  # events folded before states are written back
    batch_within_secs: float = 0.02  # ... or after this long
    # with the batch intake: records taken at most at once (what arrived while the last buffer was
    # folded and its dead letters delivered; a round trip to the broker per 200 capped a flood)
    intake_batch_max: int = 2000
    security: KafkaSecurity | None = None  # None: from the environment (KafkaSecurity.from_env)
    clock_mode: str = "wall"  # wall: judge at the wall clock; event: at each job's newest event time (backfills)
    metrics_every_secs: float = 60.0  # one metrics row per job per this much judging time in the evidence store
    idle_expiry_secs: float = 6 * 3600.0  # a job that sent nothing this long is ended and expired
    terminal_expiry_secs: float = 1800.0  # ... and one the scheduler has called terminal this long
    # skip judging a job whose state is unchanged while its last judgement cannot change (docs/verdicts.md)
    skip_unchanged: bool = True
    # dead letters undelivered this long with no batch completing: repair the producer's metadata, then resend
    delivery_stall_secs: float = 5.0
    # verdicts and metric points handed to the producer as a record batch per partition and judging slice
    # (`RecordBatches`), not through faust's per-record topic path
    batch_verdicts: bool = True


class OutgoingDeadLetter(NamedTuple):
    """A dead letter ready to send: its key and partition on the dead-letter topic, and the record's
    bytes (`dead_letter_json`, what `encode(DeadLetter.build(...))` gives)."""

    key: bytes | None
    partition: int
    value: bytes
    reason: str

    def letter(self) -> DeadLetter:
        """The validated model (the evidence store takes it); built only when something needs it."""
        return DeadLetter.model_validate_json(self.value)


class _Tally:
    """Per-record counts of a buffer, given to the exporter once per buffer (three labelled
    Prometheus increments per bad record were a tenth of the worker's own cost under a flood)."""

    __slots__ = ("dead", "failed", "lines", "processed", "received")

    def __init__(self) -> None:
        self.received: Counter[str | None] = Counter()
        self.processed: Counter[str | None] = Counter()
        self.failed: Counter[str | None] = Counter()
        self.dead: Counter[tuple[str | None, str]] = Counter()
        self.lines = 0


CORE_FACTORY_ENV = "RLHEALTH_CORE_FACTORY"


def gc_thresholds() -> tuple[int, int, int]:
    """The worker's garbage-collector thresholds (CPython's default is (700, 10, 10)).

    Judging allocates many short-lived containers, nearly all freed by reference counting; at the
    default, judging 4,000 jobs per tick in process (`bench/judge_all.py`) ran ~2,400 young collections
    and 20 full ones, a third of the tick's CPU. Ten times the young threshold
    ($RLHEALTH_GC_YOUNG_THRESHOLD, default 7000) makes full collections rare; cyclic garbage waits
    longer to be collected."""
    return (_settings.load().gc_young_threshold, 10, 10)


def default_core() -> Any:
    """The process's HealthCore, built once by the composition helper.

    $RLHEALTH_CORE_FACTORY=module:callable swaps in another factory (tests use it to make the core
    fail on purpose); unset, it is `rlhealth.runtime.build_core`.
    """
    target = _settings.load().core_factory.strip()
    if target:
        import importlib

        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)()
    from rlhealth.runtime import build_core  # the lead's composition root

    return build_core()


def _sched_view(state: Any) -> tuple[Any, ...] | None:
    """(time of the last state poll, then everything a poll sets in the job's scheduler view), or None
    for a state without one (another core)."""
    sc = getattr(state, "sched", None)
    if sc is None:
        return None
    try:
        return (sc.last_ts, sc.state, sc.pods, sc.failure_count, sc.preemption_count, sc.attempt, sc.max_retries,
                sc.scheduler, sc.first_running_ts, tuple(sc.attempts), tuple(sc.last_pod_reasons), sc.crashloop_ts,
                tuple(sc.restart_history), sc.max_pod_restarts, tuple(sorted(sc.pod_reasons.items())))
    except AttributeError:
        return None


class StreamWorker(JudgingPass):
    """Wires the app, tables, agent, timers, exporter and (optionally) the evidence store."""

    heap: HeapFreezer | None = None  # set by `run`: freezes the heap after regular passes (`_after_passes`)

    def __init__(self, settings: WorkerSettings, *, core: Any | None = None, exporter: Exporter | None = None,
                 clock: Callable[[], datetime] | None = None) -> None:
        self.settings = settings
        self.catalog = settings.catalog
        self.core = core if core is not None else default_core()
        self.exporter = exporter or Exporter()
        self.clock = clock or (lambda: datetime.now(UTC))
        self.app: faust.App = make_app(settings.bootstrap, app_id=settings.app_id, catalog=self.catalog,
                                       web_port=settings.web_port, session_timeout_s=settings.session_timeout_s,
                                       security=settings.security)
        self.group_id = group_id(settings.app_id, self.catalog)
        self.tables: Tables = make_tables(self.app, self.catalog.partitions)
        self.event_topics = set(self.catalog.event_topics)
        self._kinds = {t: self.catalog.kinds_for_topic(t) for t in self.event_topics}
        config = _settings.load()
        if config.fetch_max_wait_ms:  # first: the consumer classes below build on this one
            install_fetch_wait(self.app, config.fetch_max_wait_ms)
        if config.lean_delivery:
            install_lean_delivery(self.app)
        self._intake: BatchIntake | None = None
        if config.batch_intake:  # installed after the lean delivery: it falls back to that consumer
            self._intake = BatchIntake(self.app, self.event_topics)
            install_batch_intake(self.app, self._intake)
        self.source = self.app.topic(*sorted(self.event_topics), schema=RawBytes())
        self.verdict_topic = self.app.topic(self.catalog.verdicts, key_type=bytes, value_type=bytes)
        if settings.batch_verdicts:
            def producer() -> Any:
                return self.app.producer._ensure_producer()  # type: ignore[attr-defined]  # aiokafka's

            self.verdict_batches = RecordBatches(producer, self.catalog.verdicts, self.catalog.partitions)
            self.metrics_batches = RecordBatches(producer, self.catalog.metrics, self.catalog.partitions)
        self.dead_letter_topic = self.app.topic(self.catalog.deadletter, key_type=bytes, value_type=bytes)
        self.findings_topic = self.app.topic(self.catalog.findings, key_type=bytes, value_type=bytes)
        self.metrics_topic = self.app.topic(self.catalog.metrics, key_type=bytes, value_type=bytes)
        self._finding_outbox: list[tuple[bytes, Any]] = []
        self.store = None
        if settings.db_path:
            from rlhealth.sinks.duckdb import EvidenceStore

            self.store = EvidenceStore(settings.db_path, flush_rows=50_000, snapshot_secs=30.0)
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlhealth-io")
        self._admin = None
        # caught-up bookkeeping: tp -> next offset to process / high-water mark at assignment
        self.processed_next: dict[TP, int] = {}
        self.catchup_targets: dict[TP, int] = {}
        self._assignment_pending = True
        self._dirty: set[bytes] = set()
        self._news: set[bytes] = set()  # jobs with news whose new state is not in the table yet
        self._tally = _Tally()
        self._dead_partitions: dict[bytes, int] = {}  # key -> its partition of the dead-letter topic
        # Expiry bookkeeping (wall clock, Unix s): when a record last arrived for a job, and since when
        # its scheduler state has been terminal. Not persisted: a restarted worker takes the job's last
        # event time (or now) as its start, which only ever delays an expiry.
        self._seen: dict[bytes, float] = {}
        self._terminal_since: dict[bytes, float] = {}
        self._judging = asyncio.Lock()  # the two timers never judge (and bump a seq) concurrently
        # A judging pass keeps the intake out while it runs (rlhealth/streams/priority.py)
        self.priority = JudgingPriority()
        self._metrics_at: dict[str, datetime] = {}
        # Per job, the facts of its verdict book the tick needs (`_book_facts`), so that the book, two
        # validated verdicts, is not decoded for every job at every tick.
        self._books: dict[bytes, BookFacts] = {}
        self._fresh: dict[bytes, _Fresh] = {}  # jobs whose judgement holds for now (`_still_fresh`)
        # How often each job's state was written back: a judgement is kept only for the state it judged,
        # also when the agent folds an event while the judgement awaits its sends.
        self._writes: dict[bytes, int] = {}
        # The states just written, decoded: the next buffer with the job's events skips decoding them
        self._decoded = DecodedStates(config.state_cache_jobs)
        self._rejudged = 0  # jobs the last `_judge_locked` ran the core on
        self._waited = 0.0  # of the current pass, seconds spent awaiting (sends, the event intake)
        self._wait_parts: dict[str, float] = {}  # ... by what was awaited
        self._busy = 0.0  # of the last pass, seconds spent judging
        self._judge_all_max = 0.0  # the longest regular pass so far (wall seconds)
        self.captured = f"stream: {self.catalog.verdicts} via app {settings.app_id}"
        self._register()

    # ------------------------------------------------------------------ wiring
    def _register(self) -> None:
        app = self.app
        if self._intake is None:
            app.agent(self.source, name="judge_job_events", concurrency=1)(self._consume)
        else:
            # The topics are subscribed through a channel of the conductor (faust subscribes to
            # what is iterated); their records never reach it: the intake takes them first.
            self.app.topics.add(self.source.__aiter__())  # type: ignore[arg-type]
            app.task(self._consume_intake)
        app.timer(self.settings.tick_secs, name="judge_owned_jobs")(self._tick)
        app.timer(self.settings.fast_tick_secs, name="judge_jobs_with_news")(self._fast_tick)
        app.timer(2.0, name="flush_evidence")(self._flush_evidence)
        app.timer(PROBE_SECS, name="probe_event_loop")(self._probe_loop)
        app.timer(AFTER_PASSES_SECS, name="after_judging_passes")(self._after_passes)
        # faust's signal stubs type receivers as taking `signal=`; faust calls them with the sender and
        # the partitions, as its own documentation shows
        app.on_partitions_assigned.connect(self._on_assigned)  # type: ignore[arg-type]
        app.on_partitions_revoked.connect(self._on_revoked)  # type: ignore[arg-type]
        self._probe_at: float | None = None
        self._metrics_text_next = 0.0  # monotonic time before which `_after_passes` renders no changed jobs
        self._loop_lag_max = 0.0
        self.gc_pauses = GcPauses()  # installed by `run`

    # ------------------------------------------------------------------ per record
    async def _consume(self, stream: faust.StreamT) -> None:
        s = self.settings
        try:
            # Events come in small buffers; each job's state is written back (and changelogged) once
            # per buffer, not once per event. The buffer's events are acked only after this body
            # ran, and a commit flushes the producer first, so the changelog never lags a commit.
            # take_events (faust >= 0.11) is on the Stream class, not in its StreamT protocol
            async for events in stream.take_events(s.batch_max, within=s.batch_within_secs):  # type: ignore[attr-defined]
                await self.priority.turn()  # a judging pass first (rlhealth/streams/priority.py)
                await self._fold([event.message for event in events])
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - a dead agent must take the process down
            self._die("agent judge_job_events died", exc)

    async def _consume_intake(self) -> None:
        """The same folding as `_consume`, for records taken whole from the batch intake."""
        intake = self._intake
        assert intake is not None
        try:
            while True:
                messages = await intake.take(self.settings.intake_batch_max)
                await self.priority.turn()  # a judging pass first (rlhealth/streams/priority.py)
                self._mark_inbound(messages)
                await self._fold(messages)
                intake.done(messages)  # acked only once folded, as the stream does after its body
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - a dead intake must take the process down
            self._die("batch intake judge_job_events died", exc)

    def _mark_inbound(self, messages: list[Any]) -> None:
        """Tell faust's monitor that the records' partitions are being processed, as its streams do per
        event: its livelock check (every partition behind its high-water mark, 5 min after start) read
        the batch intake's partitions as never processed and logged a page-long ERROR for each of them."""
        inbound = getattr(getattr(self.app, "monitor", None), "stream_inbound_time", None)
        if inbound is None:
            return
        now = time.monotonic()  # faust's monitor and its livelock check read this clock
        for tp in {TP(m.topic, m.partition) for m in messages}:
            inbound[tp] = now

    async def _fold(self, messages: list[Any]) -> None:
        """Fold a buffer of records: dead letters delivered, states written back, findings sent."""
        pending: dict[bytes, Any] = {}
        dead_letters: list[OutgoingDeadLetter] = []
        for m in messages:
            dead = self.handle(m.topic, m.partition, m.offset, m.key, m.value, pending=pending)
            if dead is not None:
                dead_letters.append(dead)
        if dead_letters:  # sent together, awaited together, before the buffer counts as processed
            await self._send_dead_letters(dead_letters)
        self._write_back(pending)
        self._flush_tally()
        await self._send_findings()
        for m in messages:  # "processed" once the states are in the table
            self.processed_next[TP(m.topic, m.partition)] = m.offset + 1

    def handle(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
               *, pending: dict[bytes, Any] | None = None) -> OutgoingDeadLetter | None:
        """Fold one record into its job's state. Returns a dead letter for records we cannot use.

        With `pending`, new states are collected there (key -> state, None for an ended job) for
        `_write_back`, and the counts wait in the tally for `_flush_tally`; without, both are
        written at once.
        """
        kinds = self._kinds.get(topic, ())
        hint = kinds[0] if len(kinds) == 1 else None
        if pending is None:
            self.processed_next[TP(topic, partition)] = offset + 1
            out: dict[bytes, Any] = {}
            try:
                return self.handle(topic, partition, offset, key, value, pending=out)
            finally:
                self._write_back(out)
                self._flush_tally()
        if value is None:  # tombstone on a compacted topic: nothing to fold in
            return None
        tally = self._tally
        try:
            ev = decode_event(value)
        except EventDecodeError as exc:
            tally.received[hint] += 1
            return self._dead(value, key, topic, partition, offset, exc.reason, exc.detail, kind=hint)
        kind = ev.kind  # type: ignore[attr-defined]
        tally.received[kind] += 1
        if kinds and kind not in kinds:
            return self._dead(value, key, topic, partition, offset, "wrong_kind_for_topic", f"{kind} on {topic}",
                              kind=kind, job_id=ev.job_id)
        expected = job_key(ev.job_id)
        if key is None:
            return self._dead(value, key, topic, partition, offset, "missing_key",
                              "records must be keyed by job_key(job_id)", kind=kind, job_id=ev.job_id)
        if key != expected:
            return self._dead(value, key, topic, partition, offset, "key_mismatch",
                              f"key {key[:80]!r} is not job_key({ev.job_id!r})", kind=kind, job_id=ev.job_id)

        now = self.clock()
        try:
            if expected in pending:
                state = pending[expected] if pending[expected] is not None else self.core.new_state(ev.job_id)
            else:
                state = self._load(expected, ev.job_id, take=True)
            before = _sched_view(state) if kind == "job_state" else None
            newest_before = getattr(state, "last_event_ts", None)
            state, findings = self.core.step(state, ev, now)
        except Exception as exc:  # noqa: BLE001 - one bad event must not stop the partition
            log.warning("core failed on %s/%d@%d (job %s): %r", topic, partition, offset, ev.job_id, exc)
            return self._dead(value, key, topic, partition, offset, "core_error", f"{type(exc).__name__}: {exc}",
                              stage="core", kind=kind, job_id=ev.job_id)

        self.tables.job_health.remember(expected, partition)
        self._seen[expected] = now.timestamp()
        pending[expected] = state  # an ended job keeps its state until its final verdict is out (`_expire`)
        if findings or (kind in URGENT_KINDS and not self._repeated_poll(before, state, newest_before)):
            self._news.add(expected)  # due for a fast judgement once the state is in the table
        tally.processed[kind] += 1
        lines = getattr(ev, "lines", None)
        if lines:
            tally.lines += len(lines)
        if findings:
            ref = {"topic": topic, "partition": partition, "offset": offset}
            # Keep both: where the line was in its file and where the event sits in Kafka.
            located = [replace(f, ref={**ref, **(f.ref or {})}) for f in findings]
            self._finding_outbox.extend((expected, finding_record(ev.job_id, f)) for f in located)
            if self.store is not None:
                self.store.add_findings(ev.job_id, located)
        return None

    def _dead(self, value: bytes, key: bytes | None, topic: str, partition: int, offset: int, reason: str,
              detail: str = "", *, stage: str = "decode", kind: str | None = None,
              job_id: str | None = None) -> OutgoingDeadLetter:
        """The dead letter of a record (counted in the tally), keyed by its job when known, else by
        the record's own key, so it lands where the default partitioner puts the job's records."""
        self._tally.failed[kind] += 1
        self._tally.dead[(kind, reason)] += 1
        out_key = job_key(job_id) if job_id else key
        if out_key is None:
            out_part = partition % self.catalog.partitions
        else:
            out_part = self._dead_partitions.get(out_key, -1)
            if out_part < 0:
                if len(self._dead_partitions) >= 100_000:  # a flood of distinct keys: start over
                    self._dead_partitions.clear()
                out_part = self._dead_partitions[out_key] = (murmur2(out_key) & 0x7FFFFFFF) % self.catalog.partitions
        value = value if isinstance(value, bytes) else bytes(value)
        return OutgoingDeadLetter(out_key, out_part, dead_letter_json(
            value, reason, detail, key=key, topic=topic, partition=partition, offset=offset, job_id=job_id,
            stage=stage, received_at=self.clock()), reason)

    def _flush_tally(self) -> None:
        """Hand the buffer's counts to the exporter."""
        tally, self._tally = self._tally, _Tally()
        exporter = self.exporter
        for kind, n in tally.received.items():
            exporter.received(kind, n)
        for kind, n in tally.failed.items():
            exporter.failed(kind, n)
        for (kind, reason), n in tally.dead.items():
            exporter.dead_lettered(kind, reason, n)
        if tally.processed:
            for kind, n in tally.processed.items():
                exporter.processed(kind, n)
            exporter.last_processed.set(time.time())
        if tally.lines:
            exporter.log_lines_processed.inc(tally.lines)
        exporter.state_cache_hits.set(self._decoded.hits)
        exporter.state_cache_misses.set(self._decoded.misses)

    def _repeated_poll(self, before: tuple[Any, ...] | None, state: Any, newest_before: Any = None) -> bool:
        """A state poll that repeats the job's scheduler view is no news when the verdict cannot show it:
        the regular tick judges the job within `tick_secs` anyway. Judging it at once, too, doubled the
        judging of every job polled every tick (and, polled every 30 s at a 10 s tick, added a
        judgement per job and poll). That is the case within a tick of the previous poll, or when the
        poll comes less than the first age band (`AGE_BANDS_S[0]`) after the job's newest event before
        it (event times): a repeated view changes only the job's freshness, which the verdict's key
        facts show as the age band and as the blindness of a job silent for `stale_view_s` (longer than
        that band), and the job was not silent that long. (Judged by the wall clock instead, every poll
        folded a minute late, behind a backlog, was news.) Any change of the view, or a poll after a
        longer silence of the whole job, is still judged at once."""
        if before is None:
            return False
        after = _sched_view(state)
        if after is None or after[1:] != before[1:] or before[0] is None or after[0] is None:
            return False
        gap = after[0] - before[0]
        if gap < 0:
            return False
        if gap <= self.settings.tick_secs:
            return True
        return isinstance(newest_before, (int, float)) and after[0] - newest_before < AGE_BANDS_S[0]

    async def _send_findings(self) -> None:
        """Publish the buffer's findings to the findings topic (the evidence writer stores them)."""
        out, self._finding_outbox = self._finding_outbox, []
        for key, record in out:
            try:
                await self.findings_topic.send(key=key, value=encode(record))
            except Exception as exc:  # noqa: BLE001 - evidence is best effort; verdicts are the contract
                log.error("could not publish a finding of %r: %r", key, exc)
                return

    def _write_back(self, states: dict[bytes, Any]) -> None:
        """Reassign each job's table value (never mutate it in place): the assignment is the changelog write.

        Jobs with news become due for the fast judgement only here: marked while their new state was
        still in the buffer (its dead letters being delivered), the fast tick judged the table's older
        state, or skipped a new job, and the news waited for the next regular tick."""
        table = self.tables.job_health
        for key, state in states.items():
            self._writes[key] = self._writes.get(key, 0) + 1  # a new state: judge it
            if state is None:
                self._decoded.drop(key)
                if key in table:
                    del table[key]
            else:
                data = table[key] = compact(state.to_bytes())  # kept as long as the job lives: no slack
                self._decoded.put(key, data, state)
        if self._news:
            self._dirty |= self._news
            self._news = set()

    # The core's state class, and the core it is of: `_load` built a whole new state per event only to
    # take its type (~5 us of the ~250 us an event of the scale bench costs to fold).
    _state_of: tuple[Any, Any] = (None, None)

    def _load(self, key: bytes, job_id: str, *, take: bool = False) -> Any:
        """The job's state from the table; `take`: the caller (the fold) will change it (`DecodedStates`)."""
        raw = self.tables.job_health.get(key)
        if raw:
            cached = self._decoded.take(key, raw) if take else self._decoded.peek(key, raw)
            if cached is not None:
                return cached
            core, cls = self._state_of
            if core is not self.core:
                cls = type(self.core.new_state(job_id))
                self._state_of = (self.core, cls)
            try:
                return cls.from_bytes(raw)
            except Exception as exc:  # noqa: BLE001 - an unreadable state (version bump) restarts the job's state
                log.warning("state of job %s unreadable (%r); starting afresh", job_id, exc)
        return self.core.new_state(job_id)

    async def _send_dead_letters(self, records: list[OutgoingDeadLetter]) -> None:
        """Produce every dead letter of a buffer as one record batch per partition, then wait for all.

        They are delivered before the buffer is acknowledged, so a record is never lost between
        "bad" and "kept"; awaiting each one alone capped a flood of bad records at ~130/s, and a
        send per record (partitioner, accumulator, future) was most of what remained of ours.
        """
        topic = self.catalog.deadletter
        by_partition: dict[int, list[OutgoingDeadLetter]] = {}
        for record in records:
            by_partition.setdefault(record.partition, []).append(record)
        try:
            client = self.app.producer._ensure_producer()  # type: ignore[attr-defined]  # aiokafka's: its batch API
            track_topics(client, [topic])  # else a metadata refresh can drop it with batches queued (delivery.py)
            sent: list[tuple[Any, list[OutgoingDeadLetter]]] = []
            for part, items in by_partition.items():
                batch, start = client.create_batch(), 0
                for i, item in enumerate(items):
                    if batch.append(key=item.key, value=item.value, timestamp=None) is None:  # full: send it
                        sent.append((await client.send_batch(batch, topic, partition=part), items[start:i]))
                        batch, start = client.create_batch(), i
                        batch.append(key=item.key, value=item.value, timestamp=None)  # the first always fits
                batch.close()  # complete: sent at once (no linger), and no other send is appended to it
                sent.append((await client.send_batch(batch, topic, partition=part), items[start:]))
            await await_batches(client, topic, sent, stall_secs=self.settings.delivery_stall_secs,
                                on_stall=self._delivery_stalled)
        except Exception as exc:
            log.error("could not publish %d dead letters (%s): %r", len(records),
                      ", ".join(sorted({r.reason for r in records})), exc)
            raise
        if self.store is not None:
            for record in records:
                self.store.add_dead_letter(record.letter())

    def _delivery_stalled(self, action: Stall, records: int) -> None:
        """A dead-letter batch was not delivered for `delivery_stall_secs` (delivery.py): count, say so."""
        self.exporter.delivery_stalls.labels(action.value).inc()
        log.warning("%d dead letters undelivered for %.1f s: %s", records, self.settings.delivery_stall_secs,
                    action.value)

    # ------------------------------------------------------------------ rebalancing
    def owned_partitions(self) -> set[int]:
        try:
            assignment = self.app.consumer.assignment()
        except Exception:  # noqa: BLE001 - consumer not started yet
            return set()
        return {tp.partition for tp in assignment if tp.topic in self.event_topics}

    async def _on_assigned(self, sender: Any, assigned: set[TP], **kwargs: Any) -> None:
        self._fresh.clear()  # states may be restored from the changelog: judge everything afresh
        self.exporter.assignments.inc()
        self._track_output_topics()
        event_tps = {tp for tp in assigned if tp.topic in self.event_topics}
        self.exporter.partitions_owned.set(len({tp.partition for tp in event_tps}))
        try:
            highwaters = await self.app.consumer.highwaters(*event_tps) if event_tps else {}
            committed = await asyncio.get_running_loop().run_in_executor(self._io, self._committed, event_tps)
        except Exception as exc:  # noqa: BLE001 - without targets every partition waits for the next assignment
            log.error("could not read offsets at assignment: %r", exc)
            highwaters, committed = {tp: 1 << 62 for tp in event_tps}, {}
        targets = {}
        for tp in event_tps:
            hw = int(highwaters.get(tp) or 0)
            start = committed.get(tp, 0)
            if hw > max(start, self.processed_next.get(tp, 0)):
                targets[tp] = hw
        self.catchup_targets = targets
        self._check_changelogs_assigned(assigned, {tp.partition for tp in event_tps})
        self._assignment_pending = False
        log.info("assigned %d event partitions; %d have a backlog to fold in before judging",
                 len({tp.partition for tp in event_tps}), len({tp.partition for tp in targets}))

    def _check_changelogs_assigned(self, assigned: set[TP], partitions: set[int]) -> None:
        """Each table's changelog must come with the event partitions: a table whose changelog the
        group leader did not know restores nothing (its values for moved jobs are lost)."""
        for topic in self.changelog_topics():
            have = {tp.partition for tp in assigned if tp.topic == topic}
            if have != partitions:
                self.exporter.changelogs_unassigned.inc()
                log.error("changelog %s: partitions %s assigned with event partitions %s; its table will not "
                          "be restored for the others", topic, sorted(have), sorted(partitions))

    def _track_output_topics(self) -> None:
        """Keep every topic this worker writes to in the producer's metadata refreshes, before anything
        is folded: a refresh that dropped one left its queued records undeliverable (delivery.py)."""
        c = self.catalog
        topics = [c.deadletter, c.verdicts, c.findings, c.metrics]
        try:
            topics += self.changelog_topics()
            track_topics(self.app.producer._ensure_producer(), topics)  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 - the dead-letter path tracks its topic itself too
            log.error("could not track the output topics in the producer's metadata: %r", exc)

    def _committed(self, tps: set[TP]) -> dict[TP, int]:
        if not tps:
            return {}
        from kafka import TopicPartition
        from kafka.admin import KafkaAdminClient

        if self._admin is None:
            self._admin = KafkaAdminClient(bootstrap_servers=self.settings.bootstrap,
                                           client_id="rlhealth-worker-admin",
                                           **resolve(self.settings.security).kafka_python())
        wanted = [TopicPartition(tp.topic, tp.partition) for tp in tps]
        admin: Any = self._admin
        if hasattr(admin, "list_group_offsets"):  # kafka-python >= 3
            offsets = admin.list_group_offsets({self.group_id: wanted}).get(self.group_id, {})
        else:  # kafka-python 2.x
            offsets = admin.list_consumer_group_offsets(self.group_id, partitions=wanted)
        return {TP(tp.topic, tp.partition): om.offset for tp, om in offsets.items() if om.offset >= 0}

    async def _on_revoked(self, sender: Any, revoked: set[TP], **kwargs: Any) -> None:
        self._fresh.clear()
        gone = {tp.partition for tp in revoked if tp.topic in self.event_topics}
        self._assignment_pending = True
        if gone:
            for key in self.tables.job_health.keys_in(gone):
                self.exporter.remove(key.decode("utf-8", "replace"))
                self._seen.pop(key, None)
                self._terminal_since.pop(key, None)
                self._books.pop(key, None)
                self._writes.pop(key, None)
                self._decoded.drop(key)
        log.info("revoked %d event partitions", len(gone))

    def ready_partitions(self, owned: set[int] | None = None) -> set[int]:
        """Owned partitions whose backlog at assignment has been processed."""
        owned = self.owned_partitions() if owned is None else owned
        if self._assignment_pending:
            return set()
        behind = {tp.partition for tp, hw in self.catchup_targets.items()
                  if self.processed_next.get(tp, 0) < hw}
        return owned - behind

    # ------------------------------------------------------------------ timers
    async def _flush_evidence(self) -> None:
        if self.store is None or not self.store.pending():
            return
        try:
            await asyncio.get_running_loop().run_in_executor(self._io, self.store.flush)
        except Exception as exc:  # noqa: BLE001 - evidence is best effort; the verdict topic is the contract
            log.error("evidence flush failed: %r", exc)

    async def _after_passes(self) -> None:
        """Not while a pass judges: take the snapshot `/metrics` serves (`Exporter.refresh_exposition`)
        and, after a regular pass ended, freeze the heap (`HeapFreezer`). When jobs changed (a pass of
        jobs with news), rendering them again takes at most `METRICS_TEXT_DUTY` of the time."""
        if self._judging.locked():
            return
        if self._pass_ended:
            self._pass_ended = False
            self.refresh_metrics()
            if self.heap is not None:
                self.heap.after_pass()
            return
        if self.exporter.jobs.changed and time.monotonic() < self._metrics_text_next:
            return  # the snapshot stays whole (per-job and pipeline series of one moment) until then
        self.refresh_metrics()

    def refresh_metrics(self) -> None:
        """Take the snapshot the next scrapes serve (`Exporter.serve(rendered=True)`)."""
        started = time.monotonic()
        if self.exporter.refresh_exposition():
            self._metrics_text_next = started + (time.monotonic() - started) / METRICS_TEXT_DUTY

    async def _probe_loop(self) -> None:
        now = time.monotonic()
        if self._probe_at is not None:
            lag = max(now - self._probe_at - PROBE_SECS, 0.0)
            self.exporter.event_loop_lag.set(lag)
            if lag > self._loop_lag_max:
                self._loop_lag_max = lag
                self.exporter.event_loop_lag_max.set(lag)
            if lag >= LOOP_STALL_WARN_SECS:  # heartbeats, commits and fetches waited as long
                log.warning("the event loop was blocked for %.1f s (session timeout %.0f s)", lag,
                            self.settings.session_timeout_s)
        self._probe_at = now
        pauses = self.gc_pauses
        for gen in range(3):
            self.exporter.gc_pause_max.labels(str(gen)).set(pauses.max_s[gen])
            self.exporter.gc_seconds.labels(str(gen)).set(pauses.total_s[gen])

    # ------------------------------------------------------------------ lifecycle
    def _die(self, what: str, exc: BaseException) -> None:
        log.critical("%s: %r; exiting with status %d so the worker is restarted", what, exc, EXIT_AGENT_DIED,
                     exc_info=exc)
        for handler in logging.getLogger().handlers:
            try:
                handler.flush()
            except Exception:  # noqa: BLE001
                pass
        sys.stderr.flush()
        os._exit(EXIT_AGENT_DIED)

    def close(self) -> None:
        if self.store is not None:
            try:
                self.store.close()
            except Exception as exc:  # noqa: BLE001
                log.error("closing the evidence store failed: %r", exc)
        if self._admin is not None:
            self._admin.close()
        self._io.shutdown(wait=False)
        datadir = str(self.app.conf.datadir)
        if datadir.startswith(os.path.join(tempfile.gettempdir(), "rlhealth-faust")):
            shutil.rmtree(datadir, ignore_errors=True)  # memory store: nothing in it worth keeping

    def changelog_topics(self) -> list[str]:
        return [t.changelog_topic.get_topic_name() for t in (self.tables.job_health, self.tables.verdicts)]

    def _declare_changelogs(self) -> None:
        """Make sure both tables' changelogs exist before the group is joined (`ensure_changelogs`:
        one missing from the leader's first metadata is assigned to nobody, and its table restores
        nothing on a hand-over). A failure is logged: faust still declares them itself."""
        from rlhealth.sinks.kafka import ensure_changelogs

        try:
            status = ensure_changelogs(self.settings.bootstrap, self.changelog_topics(), self.catalog.partitions,
                                       security=self.settings.security)
        except Exception as exc:  # noqa: BLE001 - the worker can run; a hand-over may then lose books
            log.error("could not create the table changelogs before joining: %r", exc)
            return
        log.info("table changelogs: %s", status)

    def run(self) -> int:
        """Run until SIGTERM/SIGINT; returns the process exit status."""
        gc.set_threshold(*gc_thresholds())
        self.gc_pauses.install()
        # only the worker's own process freezes its heap (not the tests' and benches' offline workers)
        self.heap = HeapFreezer(_settings.load().gc_thaw_every)
        port = None
        if self.settings.metrics_port is not None:
            port = self.exporter.serve(self.settings.metrics_port, self.settings.metrics_addr, rendered=True)
            log.info("metrics on http://%s:%d/metrics", self.settings.metrics_addr, port)
        self._declare_changelogs()
        worker = faust.Worker(self.app, loglevel=self.settings.loglevel, quiet=True)
        # At --loglevel warning or above faust's start-up spinner sets the root logger to DEBUG for
        # good (its handler advances the spinner per record), so every debug call of faust and
        # aiokafka built a LogRecord (10 s of a profiled 2,000-job scale run). Without the spinner the
        # root logger keeps the level asked for.
        worker.spinner = None
        try:
            worker.execute_from_commandline()
        except SystemExit as exc:
            return int(exc.code or 0)
        finally:
            self.gc_pauses.uninstall()
            self.close()
            self.exporter.shutdown()
        return 0


__all__ = ["EXIT_AGENT_DIED", "StreamWorker", "WorkerSettings", "default_core"]
