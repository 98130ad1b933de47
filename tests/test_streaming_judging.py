"""The worker's per-tick judging keeps only facts of each verdict book in memory (`BookFacts`) and
decodes the book only when it must: what it publishes and writes must be exactly what decoding every
book at every tick gives (`stabilize` on the decoded memory, `changed` on the decoded last verdict).

Runs the worker's own `_judge_locked` without a broker: in-memory tables and verdict topic, and a
scripted core whose raw calls walk through the hysteresis (KILL held back, escalate rising and
falling, flapping, TERMINAL), heartbeats, a lost memory (restart) and a book rewritten behind the
worker's back (changelog restore)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rlhealth.agents.findings import JobMetrics
from rlhealth.schemas import Evidence, Gate, Gates, Verdict, job_key
from rlhealth.streams.tables import BookFacts, VerdictBook
from rlhealth.streams.workers import StreamWorker
from tests.offline_worker import offline_worker as make_worker

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
TICK_S = 60.0

# Per job, the raw call at each tick: (verdict, escalate, job status, evidence tag).
SCRIPTS: dict[str, list[tuple[str, bool, str, str]]] = {
    "steady": [("NO-KILL", False, "ALIVE", "e")] * 40,
    "kill-then-recovers": [("KILL", False, "WEDGED", "k")] * 3 + [("NO-KILL", False, "ALIVE", "r")] * 37,
    "flaps": [("KILL" if i % 4 in (0, 1) else "NO-KILL", False, "WEDGED", f"f{i % 4}") for i in range(40)],
    "escalates": [("NO-KILL", i % 12 >= 3, "ALIVE", "x") for i in range(40)],
    "new-evidence": [("NO-KILL", False, "ALIVE", f"n{i // 3}") for i in range(40)],
    "ends": [("KILL", True, "WEDGED", "w")] * 5 + [("NO-KILL", False, "TERMINAL", "t")] * 35,
}


@dataclass
class State:
    job_id: str
    tick: int = 0

    def to_bytes(self) -> bytes:
        return f"{self.job_id}|{self.tick}".encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> State:
        job, tick = data.decode().split("|")
        return cls(job, int(tick))


class ScriptedCore:
    def new_state(self, job_id: str) -> State:
        return State(job_id)

    def judge(self, state: State, now: datetime) -> Verdict:
        verdict, escalate, status, tag = SCRIPTS[state.job_id][state.tick]
        gate = Gate(status="FAIL" if verdict == "KILL" else "PASS", summary=tag,
                    evidence=[Evidence(source="trainer", text=f"line {tag}", event_time=T0, rule_id=f"r.{tag}")])
        return Verdict(job_id=state.job_id, verdict=verdict, confidence="high", job_status=status,  # type: ignore[arg-type]
                       escalate=escalate, reasoning=f"tick {state.tick}", produced_at=now, gates=Gates(A=gate),
                       event_time=now - timedelta(seconds=5), age_s=5.0)

    def metrics(self, state: State, now: datetime, last: Verdict | None = None) -> JobMetrics:
        return JobMetrics(job_id=state.job_id, log_staleness_s={}, generation_tokens_per_s=None,
                          running_requests=None, waiting_requests=None, trials_completed_total=state.tick,
                          trial_reward_mean=None, trials_nonzero_reward_ratio=None, nccl_watchdog_hits_total=0,
                          oom_events_total=0, ray_worker_deaths_total=0, restarts_burned=None, restarts_max=None,
                          gate_status={}, verdict=last.verdict if last else None, job_status=None,
                          last_event_time=None, at=now)


def offline_worker(clock: list[datetime]) -> StreamWorker:
    w = make_worker(ScriptedCore(), clock, heartbeat_secs=300.0)
    w.settings = replace(w.settings, idle_expiry_secs=1e9, terminal_expiry_secs=1e9)
    return w


def run(remember: bool) -> tuple[list[list[tuple[bytes, bytes]]], list[dict[bytes, bytes]]]:
    """Every tick's sends and the verdict table after it; `remember=False` decodes every book and
    always goes through `stabilize`, as the worker did before it kept `BookFacts`."""
    clock = [T0]
    w = offline_worker(clock)
    keys = [job_key(j) for j in SCRIPTS]
    sends, books = [], []
    for tick in range(40):
        clock[0] = T0 + timedelta(seconds=TICK_S * tick)
        for job, key in zip(SCRIPTS, keys, strict=True):
            w.tables.job_health[key] = State(job, tick).to_bytes()
            w._seen[key] = clock[0].timestamp()
        if not remember:
            w._books.clear()
        if tick == 17:
            w._books.clear()  # a restarted worker: the memory is gone, the table is not
        if tick == 23:  # a book restored from the changelog, other than the one this worker wrote
            for key in keys:
                book = VerdictBook.from_bytes(w.tables.verdicts[key])
                w.tables.verdicts[key] = replace(book, published_at=book.published_at - 1000.0).to_bytes()
        before = len(w.verdict_topic.sent)  # type: ignore[attr-defined]
        asyncio.run(w._judge_locked(keys))
        sends.append(w.verdict_topic.sent[before:])  # type: ignore[attr-defined]
        books.append(dict(w.tables.verdicts))
    return sends, books


def test_remembered_book_facts_publish_exactly_what_decoding_every_book_does(monkeypatch: pytest.MonkeyPatch) -> None:
    fast_sends, fast_books = run(remember=True)
    decoded = {"n": 0}
    real_from_bytes = VerdictBook.from_bytes.__func__  # type: ignore[attr-defined]

    def counting(cls: Any, data: bytes | None) -> VerdictBook:
        decoded["n"] += 1
        return real_from_bytes(cls, data)  # type: ignore[no-any-return]

    with monkeypatch.context() as m:
        # the reference: every book decoded, and every raw call through `stabilize` with the decoded memory
        m.setattr(BookFacts, "held_until", lambda self, raw: (raw.produced_at, raw.produced_at))
        m.setattr(VerdictBook, "from_bytes", classmethod(counting))
        ref_sends, ref_books = run(remember=False)
    assert decoded["n"] >= 40 * len(SCRIPTS) - len(SCRIPTS)
    assert fast_sends == ref_sends
    assert fast_books == ref_books
    published = [len(s) for s in fast_sends]
    assert published[0] == len(SCRIPTS) and 0 in published and sum(published) > len(published)
    sent = [Verdict.model_validate_json(v) for tick in fast_sends for _, v in tick]
    assert any(v.held is not None for v in sent)  # the hysteresis really held calls back
    assert any(v.held is None and v.verdict == "NO-KILL" and v.job_id == "kill-then-recovers" for v in sent[20:])


def test_book_facts_skip_decoding_the_books_this_worker_wrote(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = VerdictBook.from_bytes.__func__  # type: ignore[attr-defined]

    def counting(cls: Any, data: bytes | None) -> VerdictBook:
        calls["n"] += 1
        return real(cls, data)  # type: ignore[no-any-return]

    monkeypatch.setattr(VerdictBook, "from_bytes", classmethod(counting))
    clock = [T0]
    w = offline_worker(clock)
    key = job_key("steady")
    for tick in range(3):
        clock[0] = T0 + timedelta(seconds=TICK_S * tick)
        w.tables.job_health[key] = State("steady", tick).to_bytes()
        asyncio.run(w._judge_locked([key]))
    assert calls["n"] == 1  # the first tick, with no book yet; then the remembered facts describe the table's bytes


def test_a_poll_that_repeats_the_scheduler_view_is_not_judged_at_once() -> None:
    from rlhealth.runtime import build_core
    from rlhealth.schemas import JobStatePoll, encode

    clock = [T0]
    w = offline_worker(clock)
    w.core = build_core()
    w.settings = replace(w.settings, tick_secs=10.0)
    w.tables.job_health.remember = lambda key, partition: None  # type: ignore[attr-defined]
    w._kinds, w.processed_next, w._finding_outbox = {}, {}, []
    key = job_key("polled")

    def poll(at_s: float, **over: Any) -> bool:
        """Fold a state poll taken `at_s` after T0; returns whether the job is now due for a fast judgement."""
        w._dirty.clear()
        fields: dict[str, Any] = dict(job_id="polled", event_time=T0 + timedelta(seconds=at_s), state="running",
                                      pods=2, failure_count=0, attempt=0, max_retries=1, scheduler="kubernetes")
        pending: dict[bytes, Any] = {}
        assert w.handle("jobstate", 0, 0, key, encode(JobStatePoll(**{**fields, **over})), pending=pending) is None
        # not due before the new state is in the table: the fast tick would judge the older one (or,
        # for a new job, nothing) and the news would wait for the regular tick
        assert key not in w._dirty
        w._write_back(pending)
        return key in w._dirty

    assert poll(0)  # the first view of the job
    assert not poll(5)  # the same view 5 s later: the regular tick judges it
    assert poll(9, pods=1)  # a changed view
    assert not poll(12, pods=1)
    assert not poll(40, pods=1)  # the same view 28 s later: the job's age band cannot change (below)
    assert poll(101, pods=1)  # the same view after the job was silent 61 s: past the first age band
    assert poll(102, state="failed", pods=0)
    assert not poll(30, state="running")  # an older poll arriving late changes nothing
    # The same view after a longer gap, less than the first age band (60 s) after the job's newest event
    # (event times): its age band cannot change, so the regular tick judges it. Folded late, behind a
    # backlog, changes nothing: the wall clock is not what tells a silent job.
    assert poll(130)  # running again: a changed view
    assert not poll(160)  # 30 s after the last poll and the job's newest event
    clock[0] = T0 + timedelta(seconds=600)
    assert not poll(200)  # folded 400 s late
    assert poll(275)  # the job was silent 75 s: its age band changes


def test_a_bad_record_becomes_dead_letter_bytes_keyed_like_the_partitioner_and_is_counted() -> None:
    from aiokafka.partitioner import murmur2

    from rlhealth.schemas import DeadLetter
    from rlhealth.schemas.topics import TopicCatalog

    w = offline_worker([T0])
    w.catalog = TopicCatalog(prefix="t.", partitions=12)
    w._kinds, w.processed_next = {"logs": ("log_batch",)}, {}
    value = b'{"schema_version": 1, "kind": "log_batch", "lines": ["cut'
    # without `pending` (one record alone) the counts reach the exporter at once
    out = w.handle("logs", 3, 41, b"job-flood-7", value)
    assert out is not None and out.reason == "invalid_json"
    assert out.key == b"job-flood-7" and out.partition == (murmur2(b"job-flood-7") & 0x7FFFFFFF) % 12
    letter = DeadLetter.model_validate_json(out.value)
    assert letter.original() == value and (letter.source_topic, letter.source_partition, letter.source_offset) == (
        "logs", 3, 41)
    assert letter.received_at == T0 and out.letter() == letter
    registry = w.exporter.registry
    assert registry.get_sample_value("rlhealth_events_dead_lettered_total",
                                     {"kind": "log_batch", "reason": "invalid_json"}) == 1.0
    assert registry.get_sample_value("rlhealth_events_received_total", {"kind": "log_batch"}) == 1.0
    assert w.processed_next  # the offset counts as processed
    # inside a buffer (`pending`), the counts wait for the buffer's flush
    for offset in range(5):
        assert w.handle("logs", 3, 42 + offset, None, b"[1]", pending={}) is not None
    assert registry.get_sample_value("rlhealth_events_dead_lettered_total",
                                     {"kind": "log_batch", "reason": "not_an_object"}) is None
    w._flush_tally()
    assert registry.get_sample_value("rlhealth_events_dead_lettered_total",
                                     {"kind": "log_batch", "reason": "not_an_object"}) == 5.0
    assert registry.get_sample_value("rlhealth_events_failed_total", {"kind": "log_batch"}) == 6.0


def _verdict(tag: str, job: str = "steady") -> Verdict:
    return ScriptedCore().judge(State(job, 0), T0 + timedelta(seconds=len(tag)))


def test_a_book_keeps_the_published_verdict_only_when_it_may_be_republished() -> None:
    """A book keeps its last verdict's seq, time, key-facts digest and the hysteresis' memory as facts;
    the verdict itself only when it is a KILL (a held KILL re-publishes it). Books of the first layout
    (the whole verdict, the hysteresis' shown verdict written once as "last" or in full) still read,
    to the same facts; and a first-layout reader finds the seq and time it needs in a new book."""
    import orjson

    from rlhealth.agents.stability import Stability, call_of, key_facts
    from rlhealth.streams.tables import BOOK_LAYOUT, facts_digest

    for job, pending in (("steady", None), ("kill-then-recovers", ("NO-KILL", False))):
        last = _verdict("a", job).model_copy(update={"seq": 7})
        since = T0 if pending else None
        book = VerdictBook.published(last, 12.5, facts_digest(key_facts(last)), pending, since)
        data = book.to_bytes()
        obj = orjson.loads(data)
        assert obj["book"] == BOOK_LAYOUT and "last" not in obj and "stability" not in obj
        assert (obj["seq"], obj["published_at"]) == (7, 12.5)  # what a first-layout reader takes
        kept = last.verdict == "KILL"
        assert (book.shown is last) == kept and data.count(b'"reasoning"') == int(kept)
        if not kept:
            assert len(data) < 400, len(data)
        back = VerdictBook.from_bytes(data)
        assert back == book
        assert BookFacts.of(back, data) == BookFacts.of(book, data)
        assert (back.shown_at, back.shown_call, back.pending_call, back.pending_since) == (
            last.produced_at, call_of(last), pending, since)
        # the first layout: the shown verdict as "last" (session 7) or written out in full (before)
        shown_json = last.model_dump(mode="json")
        st = Stability(shown=last, pending_call=pending, pending_since=since).to_dict(shown_json)
        for shown in ("last", shown_json):
            first = orjson.dumps({"seq": 7, "published_at": 12.5, "last": shown_json,
                                  "stability": {**st, "shown": shown}})
            assert VerdictBook.from_bytes(first) == book
    # a first-layout book whose shown verdict is not its last one (nothing of ours writes it)
    last, other = _verdict("a"), _verdict("bb", "kill-then-recovers")
    first = orjson.dumps({"seq": 3, "published_at": 1.0, "last": last.model_dump(mode="json"),
                          "stability": Stability(shown=other).to_dict()})
    back = VerdictBook.from_bytes(first)
    assert (back.shown, back.shown_call, back.facts) == (other, call_of(other), facts_digest(key_facts(last)))
    empty = VerdictBook()
    assert VerdictBook.from_bytes(empty.to_bytes()) == empty == VerdictBook.from_bytes(None)


def test_facts_digest_is_the_same_for_equal_facts_whatever_the_time_zone_object() -> None:
    from datetime import timezone

    from rlhealth.agents.stability import key_facts
    from rlhealth.streams.tables import facts_digest

    v = _verdict("a", "kill-then-recovers")
    decoded = Verdict.model_validate_json(v.model_dump_json())
    other_tz = v.model_copy(update={"evidence": [e.model_copy(update={"event_time": e.event_time.astimezone(
        timezone(timedelta(0)))}) for e in v.evidence]})
    assert facts_digest(key_facts(v)) == facts_digest(key_facts(decoded)) == facts_digest(key_facts(other_tz))
    assert facts_digest(key_facts(v)) != facts_digest(key_facts(v.model_copy(update={"escalate": not v.escalate})))


def test_table_values_are_kept_in_exact_size_buffers() -> None:
    """orjson and msgspec return bytes with slack behind them (a 13 kB book in a 32 kB block); a
    table value lives as long as its job, so the worker keeps an exact-size copy."""
    import tracemalloc

    from rlhealth.agents.stability import key_facts
    from rlhealth.streams.tables import compact, facts_digest

    last = _verdict("a", "kill-then-recovers")  # a KILL: the book keeps the verdict (the largest book)
    book = VerdictBook.published(last, 1.0, facts_digest(key_facts(last)), None, None)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [book.to_bytes() for _ in range(50)]
        per = (tracemalloc.get_traced_memory()[0] - before) / 50
    finally:
        tracemalloc.stop()
    assert per < len(kept[0]) + 256, (per, len(kept[0]))
    assert compact(kept[0]) == kept[0]
