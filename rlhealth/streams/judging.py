"""The worker's judging pass: a mixin of `StreamWorker` (`streams/workers.py`), which owns the
tables, the topics and the intake.

A timer (`tick_secs`) judges the jobs of the partitions the worker owns, a fast timer the jobs whose
last events produced findings or scheduler changes; each judgement goes through the hysteresis of
`agents.stability`, is published when a key fact changed or as a heartbeat, refreshes the exporter,
and expires jobs that ended, went terminal or idle. A job whose state is unchanged is not judged again
until its judgement could change (`_Fresh`). A pass has priority over the intake
(`streams/priority.py`) and judges in slices of `JUDGE_SLICE`, with up to `SENDS_IN_FLIGHT` groups of
verdict sends out at once. The worker module's docstring tells the whole loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from faust.types import TP

from rlhealth.agents.core import as_of_verdict
from rlhealth.agents.findings import JobMetrics
from rlhealth.agents.stability import key_facts, needs_shown, next_band_at, stabilize_facts
from rlhealth.schemas import Verdict, encode
from rlhealth.schemas.codec import encode_direct
from rlhealth.sinks.evidence_records import metrics_point
from rlhealth.sinks.prometheus import Exporter
from rlhealth.streams.priority import JudgingPriority
from rlhealth.streams.record_batches import RecordBatches
from rlhealth.streams.state_cache import DecodedStates
from rlhealth.streams.tables import BookFacts, Tables, VerdictBook, facts_digest

if TYPE_CHECKING:
    from rlhealth.streams.workers import WorkerSettings

log = logging.getLogger("rlhealth.worker")

EXPIRY_TEXT = {
    "ended": "the job ended (JobEnded)",
    "terminal": "the scheduler reported a terminal state",
    "idle": "nothing arrived for the job within the idle expiry",
}


class _Sent(NamedTuple):
    """A verdict send in flight, with what recording it needs once it is delivered."""

    future: Any
    key: bytes
    job_id: str
    verdict: Verdict
    facts: str  # tables.facts_digest(stability.key_facts(verdict))
    wall: float
    expiry: str | None
    pending_call: tuple[str, bool] | None  # the hysteresis' memory after this verdict (`stabilize_facts`)
    pending_since: datetime | None
    until: datetime | None  # `_Fresh.until` once this verdict is out, None: judge the job again next time
    expiry_due: float
    writes: int  # the job's `_writes` when its state was loaded


class _Fresh(NamedTuple):
    """Why the job need not be judged again yet: its last judgement, and until when it holds.

    Valid while the job's state is the one judged (its `_writes` count is still `writes`; any change of
    assignment drops every `_Fresh`), its book's facts are the same object (`memo`) and describe the
    book's bytes, the judging time is in [judged_at, until) and the wall clock before `wall_until`."""

    writes: int
    memo: BookFacts
    judged_at: datetime
    until: datetime  # the core's recheck, the age band's next crossing, the next metrics point
    wall_until: float  # the next heartbeat, the job's expiry


# A judging pass yields (sends, heartbeats, /metrics run) after this many judgements (~30 ms of CPU)
JUDGE_SLICE = 50
# Passes of more jobs than this send their verdicts and metric points in record batches (`_batching`)
BATCHED_PASS_MIN = 1000
# Groups of verdict sends (one per slice) out at once before the pass waits for the oldest to be delivered
SENDS_IN_FLIGHT = 8
# A pass of jobs with news judges at most this many (~1 s of judging); the rest stay due for the next fast
# tick or the regular tick, whichever comes first. A fast pass of every job (a burst in which each reports
# news) held the judging lock for tens of seconds, and the regular tick's pass waited behind it (33 s of
# a 53 s pass at 10,000 jobs) for jobs it would judge anyway.
FAST_PASS_MAX = 1000

# Scheduler states after which a job produces nothing more (a retry shows up as pending/running again).
TERMINAL_STATES = frozenset({"succeeded", "failed", "killed"})


def _log_failed_point(delivery: Any, job_id: str) -> None:
    """A metric point's delivery failed: evidence is best effort, so it is logged (and not retried)."""
    exc = None if delivery.cancelled() else delivery.exception()
    if exc is not None:
        log.error("recording metrics of job %s failed: %r", job_id, exc)


class JudgingPass:
    """The judging half of `StreamWorker`; the names below are set by its `__init__`."""

    settings: WorkerSettings
    core: Any
    exporter: Exporter
    tables: Tables
    app: Any
    store: Any
    clock: Callable[[], datetime]
    priority: JudgingPriority
    verdict_topic: Any
    # With it, verdicts go to the producer as one record batch per partition and slice (`RecordBatches`);
    # without (offline workers of the tests and benches), one `verdict_topic.send` each.
    verdict_batches: RecordBatches | None = None
    metrics_topic: Any
    metrics_batches: RecordBatches | None = None  # the same for metric points
    # Whether this pass queues its sends in the record batches: only a pass of more than `BATCHED_PASS_MIN`
    # jobs does. Handing a batch over waits until the partition's previous batch has left (aiokafka's
    # `add_batch`); with every pass batched, a pass of ~150 jobs under a heavy intake held the judging lock
    # in those waits and put the p99 of signal-to-verdict at 2.4-2.6 s against 0.5 s (bench/stream.py at
    # 450k lines/s, BENCHMARKS.md session 9 close). The batches pay off on passes of thousands of jobs.
    _batching: bool = False
    event_topics: set[str]
    processed_next: dict[TP, int]
    captured: str
    _books: dict[bytes, BookFacts]
    _fresh: dict[bytes, _Fresh]
    _dirty: set[bytes]
    _seen: dict[bytes, float]
    _writes: dict[bytes, int]
    _decoded: DecodedStates
    _terminal_since: dict[bytes, float]
    _metrics_at: dict[str, datetime]
    _judging: asyncio.Lock
    _rejudged: int
    _waited: float  # of the current pass, seconds spent awaiting (sends, the event intake)
    _wait_parts: dict[str, float]  # ... by what was awaited (`_waiting`)
    _busy: float  # of the last pass, seconds spent judging
    _judge_all_max: float  # the longest regular pass so far (wall seconds)
    _pass_ended: bool = False  # a regular pass ended since `_after_passes` last ran

    # the worker's own (intake and rebalance)
    def _load(self, key: bytes, job_id: str, *, take: bool = False) -> Any:
        raise NotImplementedError

    def owned_partitions(self) -> set[int]:
        raise NotImplementedError

    def ready_partitions(self, owned: set[int] | None = None) -> set[int]:
        raise NotImplementedError

    async def _tick(self) -> None:
        try:
            await self.judge_owned_jobs()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed tick is retried at the next one
            self.exporter.verdicts_failed.inc()
            log.exception("judging failed: %r", exc)

    async def _fast_tick(self) -> None:
        if not self._dirty or self.app.rebalancing:
            return
        if self._backlogged():
            return  # the jobs with news stay dirty: the regular tick judges them (see `_backlogged`)
        ready = self.ready_partitions()
        parts = self.tables.job_health.key_partitions
        keys = [k for k in self._dirty if parts.get(k) in ready][:FAST_PASS_MAX]
        self._dirty.difference_update(keys)
        try:
            await self._judge(keys)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.exporter.verdicts_failed.inc()
            log.exception("judging jobs with news failed: %r", exc)

    def _backlogged(self) -> bool:
        """Whether the intake is more than `fast_tick_max_lag` records behind. Then judging a job at once
        for its news is mostly wasted: the job's next events are already queued behind it (a burst, a
        catch-up), so it would be judged again at the regular tick, which judges every changed job
        anyway; and the news is already late by the backlog. Skipping these fast passes halves the
        judgements of a burst in which every job reports (its state poll is news), leaving the CPU to
        the fold that drains the backlog."""
        limit = self.settings.fast_tick_max_lag
        if limit < 0:
            return False
        lag = self._event_lag()
        return bool(lag) and sum(lag.values()) > limit  # type: ignore[union-attr]

    async def judge_owned_jobs(self) -> int:
        """Judge every job of the ready partitions; publish changes and heartbeats. Returns publishes."""
        if self.app.rebalancing:
            return 0
        owned = self.owned_partitions()
        ready = self.ready_partitions(owned)
        self.exporter.partitions_owned.set(len(owned))
        self.exporter.caught_up.set(1 if owned and ready == owned else 0)
        self._update_lag()
        keys = self.tables.job_health.keys_in(ready)
        self._dirty.difference_update(keys)
        started = time.perf_counter()
        exported, published = await self._judge(keys)
        took = time.perf_counter() - started
        parts = self._wait_parts
        log.info("regular pass: the core ran on %d of %d jobs in %.2f s: %.2f s judging, %.2f s waiting for the "
                 "judging lock (a pass of jobs with news), %.2f s for room in the producer, %.2f s yielding, %.2f s "
                 "for deliveries", self._rejudged, len(keys), took, self._busy, parts.get("lock", 0.0),
                 parts.get("send", 0.0), parts.get("yield", 0.0), parts.get("deliveries", 0.0))
        self.exporter.judge_all_seconds.set(took)
        self.exporter.judge_passes.inc()
        if took > self.settings.tick_secs:  # some job was judged later than its tick
            self.exporter.judge_passes_over_tick.inc()
        self._judge_all_max = max(self._judge_all_max, took)
        self.exporter.judge_all_max_seconds.set(self._judge_all_max)
        self.exporter.intake_held_seconds.set(self.priority.intake_waited_s)
        self.exporter.judge_all_busy_seconds.set(self._busy)
        self.exporter.jobs_rejudged.set(self._rejudged)
        self.exporter.state_cache_hits.set(self._decoded.hits)
        self.exporter.state_cache_misses.set(self._decoded.misses)
        self.exporter.retain(exported)
        self.exporter.jobs_owned.set(len(exported))
        # The `/metrics` text and the heap freeze follow on the worker's 1 s timer (`_after_passes`), not
        # here: the pass's last books are being handed to the changelog now, and a collection holding
        # the GIL at this point only delayed that (a SIGKILL then lost a book a scrape had seen counted).
        self._pass_ended = True
        return published

    async def _judge(self, keys: list[bytes]) -> tuple[list[str], int]:
        """Judge `keys` under the judging lock, with priority over the intake: no buffer is folded
        while the pass judges (rlhealth/streams/priority.py)."""
        called = time.perf_counter()
        async with self._judging:
            self._waited = 0.0
            started = time.perf_counter()
            self._wait_parts = {"lock": started - called}
            try:
                async with self.priority.hold():
                    exported, published, inflight = await self._judge_slices(keys)
                # Every job is judged; what is left is awaiting the last deliveries (no CPU), so the
                # intake may fold meanwhile: holding it here only idled the process on broker acks.
                published += await self._settle_all(inflight)
                return exported, published
            finally:
                self._busy = max(time.perf_counter() - started - self._waited, 0.0)

    async def _judge_locked(self, keys: list[bytes]) -> tuple[list[str], int]:
        """Judge `keys` and settle every verdict sent (the pass without the intake gate)."""
        exported, published, inflight = await self._judge_slices(keys)
        return exported, published + await self._settle_all(inflight)

    async def _judge_slices(self, keys: list[bytes]) -> tuple[list[str], int, deque[list[_Sent]]]:
        """Judge `keys` in slices of `JUDGE_SLICE` judgements; returns the jobs exported, the verdicts
        settled so far and the groups of sends still to settle (`_settle_all`)."""
        table, book_table = self.tables.job_health, self.tables.verdicts
        exported: list[str] = []
        published = 0
        # Verdicts are sent without waiting for each delivery (a round trip per job made a tick of
        # thousands of jobs take minutes). A group (one slice's sends) is settled (delivered, then its
        # books written) once delivered, so a verdict's seq is recorded only once it is out; up to
        # `SENDS_IN_FLIGHT` groups are out while the next slices are judged (awaiting each group's
        # round trip before judging on left the pass idle on the broker: most of its wall time once
        # the intake no longer ran in those waits).
        inflight: deque[list[_Sent]] = deque()
        sent: list[_Sent] = []
        judged = 0
        in_slice = 0
        self._batching = self.verdict_batches is not None and len(keys) > BATCHED_PASS_MIN
        try:
            for key in keys:
                if in_slice >= JUDGE_SLICE:
                    in_slice = 0
                    await self._hand_over()
                    inflight.append(sent)
                    sent = []
                    published += await self._settle_delivered(inflight)
                    # a slice boundary: sends, heartbeats and /metrics run; the intake waits (`priority`)
                    await self._waiting(asyncio.sleep(0), "yield")
                if await self._judge_key(key, table, book_table, exported, sent):
                    judged += 1
                    in_slice += 1
        except Exception:
            inflight.append(sent)
            try:  # hand over what the slice queued: its futures are settled below
                await self._hand_over()
            except Exception:  # noqa: BLE001 - the first failure is the one raised
                pass
            try:  # record what was delivered before the failure, as the settled groups were
                await self._settle_all(inflight)
            except Exception:  # noqa: BLE001 - the first failure is the one raised
                pass
            raise
        await self._hand_over()
        inflight.append(sent)
        self._rejudged = judged
        self.exporter.jobs_judged.inc(judged)
        return exported, published, inflight

    async def _judge_key(self, key: bytes, table: Any, book_table: Any, exported: list[str],
                         sent: list[_Sent]) -> bool:
        """Judge one job (unless its last judgement still holds): export its series, record what did
        not change, or send its verdict (appended to `sent`). Returns whether the core ran."""
        raw = table.get(key)
        if not raw:
            return False
        job_id = key.decode("utf-8", "replace")
        writes = self._writes.get(key, 0)
        if self._still_fresh(key, writes):
            exported.append(job_id)  # its series stay as the last judgement left them
            return False
        self._fresh.pop(key, None)
        try:
            state = self._load(key, job_id)
            now = self._judging_time(state)
            wall = self.clock().timestamp()
            expiry = self._expiry(key, state, wall)
            raw, metrics, recheck = self._judge_one(state, now)
            if expiry is None:
                self.exporter.update(metrics, raw)
                exported.append(job_id)
        except Exception as exc:  # one job's failure must not stop the others
            self.exporter.verdicts_failed.inc()
            log.exception("judging job %s failed: %r", job_id, exc)
            return True
        # The book's facts come from memory; the book itself is decoded only when a published KILL is
        # held back (the verdict re-published is in it).
        book_bytes = book_table.get(key)
        memo, book = self._book_facts(key, book_bytes)
        pending_call: tuple[str, bool] | None = None
        pending_since: datetime | None = None
        # Where the verdict is the raw one (nearly always), its `captured` is set in the copy that sends it
        # (nothing before reads it: key facts, metrics, the age band); a verdict the hysteresis makes from
        # the raw one or the published one gets it as before, from the raw verdict or the published one.
        captured: dict[str, Any] = {"captured": self.captured}
        if memo.held_until(raw) is None:  # what `stabilize` gives then, without the published verdict
            verdict = raw
        else:
            raw = raw.model_copy(update=captured)
            captured = {}
            shown = None
            if needs_shown(memo.shown_call):
                book = book or VerdictBook.from_bytes(book_bytes)
                shown = book.shown
            if shown is None and needs_shown(memo.shown_call):  # a book without it (damaged): start afresh
                verdict = raw
            else:
                verdict, pending_call, pending_since = stabilize_facts(
                    memo.shown_at, memo.shown_call, shown, memo.pending_call, memo.pending_since, raw)
        facts = facts_digest(key_facts(verdict))
        until = None
        if expiry is None and pending_call is None and verdict.held is None:
            until = recheck  # (the metrics point and the age band are added below)
        if expiry is not None:
            # The final verdict goes out whatever the last call was; then the job is forgotten.
            verdict = verdict.model_copy(update={
                "reasoning": f"{verdict.reasoning} Final verdict: {EXPIRY_TEXT[expiry]}; the job is no longer "
                             "watched.".strip(), **captured})
            captured = {}
        else:
            await self._record_metrics(key, job_id, state, now, verdict, metrics)
            if until is not None:
                until = self._fresh_until(job_id, until, verdict)
            unchanged = memo.last_facts is not None and memo.last_facts == facts  # not `stability.changed`
            if unchanged and wall - memo.published_at < self.settings.heartbeat_secs:
                if (pending_call, pending_since) != (memo.pending_call, memo.pending_since):
                    # a held change started or ended: remembered (the published verdict stays `shown`)
                    book = book or VerdictBook.from_bytes(book_bytes)
                    book = replace(book, pending_call=pending_call, pending_since=pending_since)
                    data = book_table[key] = book.to_bytes()
                    memo = self._books[key] = BookFacts.of(book, data)
                if until is not None and until > now:
                    heartbeat = memo.published_at + self.settings.heartbeat_secs
                    self._fresh[key] = _Fresh(writes, memo, now, until, min(heartbeat, self._expiry_due(key)))
                return True
        out = verdict.model_copy(update={"seq": memo.seq + 1, **captured})
        value = encode_direct(out)  # (the book dumps the verdict again only when it keeps it: a KILL)
        if self._batching and self.verdict_batches is not None:
            delivery = self.verdict_batches.add(key, value)  # handed over at the slice's end (`_hand_over`)
        else:
            delivery = await self._waiting(self.verdict_topic.send(key=key, value=value), "send")
        sent.append(_Sent(delivery, key, job_id, out,
                          facts, wall, expiry, pending_call, pending_since,
                          until if until is not None and until > now
                          else None, self._expiry_due(key) if expiry is None else wall, writes))
        return True

    async def _hand_over(self) -> None:
        """Give the producer the verdicts and metric points the slice queued (`verdict_batches`,
        `metrics_batches`), waiting only for room in its queues."""
        for batches in (self.verdict_batches, self.metrics_batches):
            if batches is not None and batches:
                await self._waiting(batches.flush(), "send")

    async def _settle_delivered(self, inflight: deque[list[_Sent]]) -> int:
        """Settle, oldest first, the groups whose sends are all delivered; while more than
        `SENDS_IN_FLIGHT` groups are out, wait for the oldest. Returns the verdicts published."""
        published = 0
        while inflight and (len(inflight) > SENDS_IN_FLIGHT
                            or all(asyncio.isfuture(x.future) and x.future.done() for x in inflight[0])):
            published += await self._settle(inflight.popleft())
        return published

    async def _settle_all(self, inflight: deque[list[_Sent]]) -> int:
        """Settle every group left, oldest first; a failed delivery is raised once all are recorded."""
        published = 0
        failed: Exception | None = None
        while inflight:
            try:
                published += await self._settle(inflight.popleft())
            except Exception as exc:  # noqa: BLE001 - the others' deliveries are still recorded
                failed = failed or exc
        if failed is not None:
            raise failed
        return published

    async def _waiting(self, awaitable: Any, what: str = "other") -> Any:
        """`await awaitable`, counting the time in `_waited` (a pass's time not spent judging) and in
        `_wait_parts[what]`: "send" (a send waiting for room in the producer's batch of its partition),
        "deliveries", "yield" (the other tasks' turn at a slice boundary)."""
        t = time.perf_counter()
        try:
            return await awaitable
        finally:
            took = time.perf_counter() - t
            self._waited += took
            self._wait_parts[what] = self._wait_parts.get(what, 0.0) + took

    def _still_fresh(self, key: bytes, writes: int) -> bool:
        """Whether the job's last judgement still holds (`_Fresh`) for its state as of `writes`: then
        judging it again would change nothing that is published, written or recorded (docs/verdicts.md,
        "Judging only what can change")."""
        f = self._fresh.get(key)
        if f is None or not self.settings.skip_unchanged or f.writes != writes:
            return False
        if self._books.get(key) is not f.memo or not f.memo.describes(self.tables.verdicts.get(key)):
            return False
        if self.clock().timestamp() >= f.wall_until:
            return False
        if self.settings.clock_mode == "event":
            return True  # the same state is judged at the same time: its newest event's
        now = self.clock()
        return f.judged_at <= now < f.until

    def _fresh_until(self, job_id: str, recheck: datetime, verdict: Verdict) -> datetime:
        """The judging time until which the job need not be judged again: the core's recheck, the next
        crossing of the verdict's age band, the job's next metrics point, whichever comes first."""
        until = recheck
        band = next_band_at(verdict)
        if band is not None and band < until:
            until = band
        last = self._metrics_at.get(job_id)
        if last is not None:
            due = last + timedelta(seconds=self.settings.metrics_every_secs)
            if due < until:
                until = due
        return until

    def _expiry_due(self, key: bytes) -> float:
        """Wall time at which `_expiry` would first say to expire the job, as its bookkeeping stands now."""
        s = self.settings
        seen = self._seen.get(key)
        due = seen + s.idle_expiry_secs if seen is not None else float("-inf")
        since = self._terminal_since.get(key)
        if since is not None:
            due = min(due, since + s.terminal_expiry_secs)
        return due

    async def _settle(self, sent: list[_Sent]) -> int:
        """Wait for a group of verdict sends; record each delivered one (book, metrics, evidence, expiry)."""
        if not sent:
            return 0
        results = await self._waiting(asyncio.gather(*(x.future for x in sent), return_exceptions=True), "deliveries")
        failed: BaseException | None = None
        done = 0
        for result, (_fut, key, job_id, out, facts, wall, expiry, pending_call, pending_since, until,
                     expiry_due, writes) in zip(results, sent, strict=True):
            if isinstance(result, BaseException):
                failed = failed or result
                continue
            self.exporter.verdict_published(out.verdict)
            done += 1
            if self.store is not None:
                self.store.add_verdict(out)
            if expiry is not None:
                self._expire(key, job_id, expiry)
            else:
                book = VerdictBook.published(out, wall, facts, pending_call, pending_since)
                data = self.tables.verdicts[key] = book.to_bytes()
                memo = self._books[key] = BookFacts.of(book, data)
                if until is not None:
                    self._fresh[key] = _Fresh(writes, memo, out.produced_at, until,
                                              min(wall + self.settings.heartbeat_secs, expiry_due))
        if failed is not None:
            raise failed
        return done

    def _book_facts(self, key: bytes, data: bytes | None) -> tuple[BookFacts, VerdictBook | None]:
        """The facts of the job's book `data`: remembered when this worker wrote those bytes, else
        decoded (and then the decoded book is returned too, so it is not decoded twice)."""
        memo = self._books.get(key)
        if memo is not None and memo.describes(data):
            return memo, None
        book = VerdictBook.from_bytes(data)
        memo = self._books[key] = BookFacts.of(book, data)
        return memo, book

    def _expiry(self, key: bytes, state: Any, wall: float) -> str | None:
        """Why the job should be expired now ("ended", "terminal", "idle"), or None to keep watching it."""
        s = self.settings
        if getattr(state, "ended", False):
            return "ended"
        sched_state = getattr(getattr(state, "sched", None), "state", None)
        if sched_state in TERMINAL_STATES:
            since = self._terminal_since.setdefault(key, wall)
            if wall - since >= s.terminal_expiry_secs:
                return "terminal"
        else:
            self._terminal_since.pop(key, None)
        seen = self._seen.get(key)
        if seen is None:  # restored from the changelog: count from its last event, never from the future
            last_ts = getattr(state, "last_event_ts", None)
            seen = self._seen[key] = min(last_ts, wall) if isinstance(last_ts, (int, float)) else wall
        if wall - seen >= s.idle_expiry_secs:
            return "idle"
        return None

    def _expire(self, key: bytes, job_id: str, reason: str) -> None:
        """Forget a job: metric series, state and verdict book (tombstones on both changelogs), bookkeeping."""
        health, book = self.tables.job_health, self.tables.verdicts
        for table in (health, book):
            if key in table:
                del table[key]  # the deletion writes the tombstone, in the key's remembered partition
        health.key_partitions.pop(key, None)  # shared by both tables
        self.exporter.remove(job_id)
        self._seen.pop(key, None)
        self._terminal_since.pop(key, None)
        self._books.pop(key, None)
        self._fresh.pop(key, None)
        self._writes.pop(key, None)
        self._decoded.drop(key)
        self._metrics_at.pop(job_id, None)
        self._dirty.discard(key)
        self.exporter.jobs_expired.labels(reason).inc()
        log.info("job %s expired (%s)", job_id, reason)

    def _judging_time(self, state: Any) -> datetime:
        if self.settings.clock_mode == "event" and getattr(state, "last_event_ts", None):
            return datetime.fromtimestamp(state.last_event_ts, UTC)
        return self.clock()

    def _judge_one(self, state: Any, now: datetime) -> tuple[Verdict, Any, datetime | None]:
        """The raw verdict, the metrics as of it and the core's recheck time (None: judge again next
        time): `HealthCore.judge_with_recheck` when the core offers it, else `judge` and `metrics`."""
        if self.settings.skip_unchanged:
            with_recheck = getattr(self.core, "judge_with_recheck", None)
            if with_recheck is not None:
                raw, metrics, at = with_recheck(state, now)
                # None: nothing it compared depends on time; the other bounds (`_fresh_until`) still apply
                return raw, metrics, at if at is not None else datetime.max.replace(tzinfo=UTC)
        both = getattr(self.core, "judge_with_metrics", None)
        if both is not None:
            return (*both(state, now), None)
        raw = self.core.judge(state, now)
        return raw, self.core.metrics(state, now, last=raw), None

    async def _record_metrics(self, key: bytes, job_id: str, state: Any, now: datetime, verdict: Any,
                              metrics: Any) -> None:
        """One point of the job's metric time series per `metrics_every_secs` of judging time: to the
        metrics topic (the evidence writer stores it) and to this worker's own store, if any.

        `metrics` are the raw verdict's; the point carries the published (stabilised) verdict's call."""
        last = self._metrics_at.get(job_id)
        if last is not None and 0 <= (now - last).total_seconds() < self.settings.metrics_every_secs:
            return
        self._metrics_at[job_id] = now
        try:
            if isinstance(metrics, JobMetrics):
                metrics = as_of_verdict(metrics, verdict)
            else:  # a core of another shape: ask it
                metrics = self.core.metrics(state, now, last=verdict)
            point = metrics_point(metrics)
            if self._batching and self.metrics_batches is not None:  # handed over with the slice's verdicts
                delivery = self.metrics_batches.add(key, encode_direct(point))
                delivery.add_done_callback(partial(_log_failed_point, job_id=job_id))
            else:
                await self._waiting(self.metrics_topic.send(key=key, value=encode(point)), "send")
            if self.store is not None:
                self.store.add_metrics_point(point)
        except Exception as exc:  # noqa: BLE001 - evidence is best effort
            log.error("recording metrics of job %s failed: %r", job_id, exc)

    def _update_lag(self) -> None:
        per_topic = self._event_lag()
        if per_topic is None:
            return
        for topic in self.event_topics:
            self.exporter.consumer_lag.labels(topic).set(per_topic.get(topic, 0))

    def _event_lag(self) -> dict[str, int] | None:
        """Per event topic, the records of owned partitions not processed yet (None: no consumer yet)."""
        per_topic: dict[str, int] = {}
        try:
            assignment = self.app.consumer.assignment()
        except Exception:  # noqa: BLE001
            return None
        for tp in assignment:
            if tp.topic not in self.event_topics:
                continue
            try:
                hw = self.app.consumer.highwater(tp)
            except Exception:  # noqa: BLE001
                hw = None
            if hw is None:
                continue
            done = self.processed_next.get(tp)
            if done is None:
                continue
            per_topic[tp.topic] = per_topic.get(tp.topic, 0) + max(int(hw) - done, 0)
        return per_topic
