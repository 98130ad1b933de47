"""Detection benchmark: how often the verdict is right, and how soon a fault becomes a KILL.

Every capture with an expected.json (tests/scenarios/*, and the shared scenarios when present:
$RLHEALTH_SHARED_DIR or ../shared/scenarios, as tests/scenario_support.py finds them) goes through

1. the embedded core: `rlhealth.embedded.probe` at the capture's captured_at, checked against
   expected.json (tests/scenario_support.check_expected). Then time-to-detect: the capture's events,
   with every log batch cut where its lines cross a `--slice` boundary of their own stamps (what a
   live shipper sends; see `time_sliced`), are folded in event-time order through one HealthCore and
   the job is judged every `--step` seconds of event time and after every event from the first fault
   finding on; judging at T sees exactly the events with event_time <= T (what `probe --now T` sees).
   The first causal signal is the earliest of: a finding of a fault kind (death, wedge, oom, nccl,
   engine, ray, hardware, infra) and the earliest stamped evidence of a FAIL gate of the first KILL
   (else of the first escalation with a FAIL gate). TTD = the first judgement at or after it that is
   KILL or escalates, minus it (and time to the first KILL alone).
2. the streaming path: a real broker and one real `rlhealth worker` (wall clock, default ticks). Each
   case is replayed twice under its own job ids:
   * "final": as `rlhealth replay` does (`replay_capture`: every event at once, times shifted so that
     captured_at is now); the newest verdict on the verdict topic is the streamed "got";
   * "timed" (cases with an embedded alarm): the fold's events shifted so that the embedded alarm
     lands `--lead` s (+1.7 s per case) after an anchor `--backlog` s away. Events before the anchor
     go out at once as a backlog, the rest at real speed. The first KILL/escalating verdict of that
     job on the verdict topic (the call standing at the anchor counts from the anchor), mapped back
     to capture time, minus the embedded alarm time, is the stream lag (negative when the worker's
     10 s tick catches what the embedded `--step` grid judged later).

Prints one line per case, then KILL precision / recall / F1 (cases whose expected.json allows both
KILL and NO-KILL count in neither), false KILLs, the share of cases whose every expected failing gate
is FAIL, TTD median and p95, and ends with

    RESULT kill_precision=<p> kill_recall=<r> false_kills=<n> ttd_p95_s=<t> stream_lag_p95_s=<l>

It starts and stops its own broker (scripts/kafka.sh, state in .kafka/detect) unless KAFKA_BOOTSTRAP
is set; SIGTERM stops the worker, deletes the bench topics and stops the broker.

    python bench/detect.py [--step 10] [--slice 10] [--lead 30] [--only NAME ...] [--no-stream] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from scenario_support import check_expected, load_expected, scenario_dirs, shared_dir  # noqa: E402

from bench._kafka_harness import broker_env as _broker_env  # noqa: E402
from bench._kafka_harness import free_port, scrape, start_broker, stop_broker, stop_process  # noqa: E402
from rlhealth.agents.context import build_context  # noqa: E402
from rlhealth.agents.core import HealthCore  # noqa: E402
from rlhealth.embedded import probe  # noqa: E402
from rlhealth.runtime import build_core  # noqa: E402
from rlhealth.schemas import EventBase, Verdict  # noqa: E402
from rlhealth.sources.capture import open_capture  # noqa: E402


def broker_env() -> dict[str, str] | None:
    return _broker_env("detect")

FAULT_KINDS = frozenset({"death", "wedge", "oom", "nccl", "engine", "ray", "hardware", "infra"})
GATES = ("A", "B", "C")


# ----------------------------------------------------------------------------------------- cases

@dataclass
class Case:
    name: str
    origin: str  # "tests" or "shared"
    capture: Path
    expected: dict

    @property
    def expect_kill(self) -> bool | None:
        """True: only KILL is right; False: only NO-KILL; None: either (counted in neither class)."""
        allowed = set(self.expected["verdict_in"])
        if allowed == {"KILL"}:
            return True
        if allowed == {"NO-KILL"}:
            return False
        return None

    @property
    def expected_text(self) -> str:
        return "|".join(self.expected["verdict_in"])


def find_cases(only: Iterable[str] = ()) -> list[Case]:
    wanted = set(only)
    out = []
    for origin, base in (("tests", REPO / "tests" / "scenarios"), ("shared", shared_dir() / "scenarios")):
        for d in scenario_dirs(base):
            if wanted and d.name not in wanted:
                continue
            out.append(Case(d.name, origin, d / "capture", load_expected(d)))
    return out


# -------------------------------------------------------------------------------------- embedded

@dataclass
class Alarm:
    time: datetime  # event time of the judgement
    verdict: Verdict


@dataclass
class Embedded:
    verdict: Verdict
    problems: list[str]
    judgements: int = 0
    first_fault: datetime | None = None  # earliest fault-kind finding
    first_fault_what: str = ""
    alarm: Alarm | None = None  # first KILL or escalating judgement
    kill: Alarm | None = None  # first KILL judgement
    causal: datetime | None = None  # first causal signal (see the module docstring)
    causal_what: str = ""
    cadence_s: float | None = None
    cadence_source: str = ""
    kills_seen: int = 0  # judgements with KILL over the whole fold
    start: datetime | None = None
    captured_at: datetime | None = None
    fold_final: Verdict | None = None  # the fold's judgement at captured_at (checked against the probe)

    @property
    def ttd_s(self) -> float | None:
        if self.alarm is None or self.causal is None:
            return None
        return (self.alarm.time - self.causal).total_seconds()

    @property
    def ttk_s(self) -> float | None:
        if self.kill is None or self.causal is None:
            return None
        return (self.kill.time - self.causal).total_seconds()


def _alarming(v: Verdict) -> bool:
    return v.verdict == "KILL" or v.escalate


def _fail_evidence_times(v: Verdict) -> list[tuple[datetime, str]]:
    out = []
    for key in GATES:
        gate = getattr(v.gates, key)
        if gate.status != "FAIL":
            continue
        for ev in gate.evidence:
            if ev.event_time is not None:
                out.append((ev.event_time, f"gate {key} evidence: {ev.source}: {ev.text[:70]}"))
    return out


def time_sliced(events: Iterable[EventBase], window_s: float, ref: datetime) -> list[EventBase]:
    """The capture's events with every log batch cut where its lines cross a `window_s` boundary of
    their own time, as a live shipper that sends what is new every `window_s` seconds would cut them.

    A capture reader batches 500 lines at a time and a batch's event time is its last stamped line,
    so a quiet log (one step line every 10 minutes) puts hours of lines into one batch that only
    "exists" at its end. Lines without a stamp (traceback bodies) stay with the stamped line before
    them; each piece carries the parsed stamps in `ts` and a per-stream non-decreasing event time."""
    from rlhealth.agents.ingest import TIME_LOOKBACK_LINES
    from rlhealth.agents.normalize import line_timestamp
    from rlhealth.schemas import LogBatch

    out: list[EventBase] = []
    last_of_stream: dict[str, datetime] = {}
    for ev in events:
        if not isinstance(ev, LogBatch) or not ev.lines:
            out.append(ev)
            continue
        stream = (ev.source.stream or "") if ev.source else ""
        old = ev.ts or [None] * len(ev.lines)
        own = [t if t is not None else (line_timestamp(x, ref) if x else None) for t, x in zip(old, ev.lines)]
        # a line without a stamp of its own takes the nearest earlier stamp within the core's lookback, as
        # the core's ingest does from the text (it reads the text, not `ts`, of earlier lines: see
        # the report of issue #11; without this a rebased replay dates such lines by their un-moved text)
        stamps: list[datetime | None] = []
        last_i = -1
        for i, t in enumerate(own):
            if t is not None:
                last_i = i
                stamps.append(t)
            else:
                stamps.append(own[last_i] if last_i >= 0 and i - last_i < TIME_LOOKBACK_LINES else None)
        cuts = [0]
        win = None
        for i, t in enumerate(own):
            if t is None:
                continue
            w = int(t.timestamp() // window_s)
            if win is not None and w > win and i > cuts[-1]:
                cuts.append(i)
            win = w if win is None else max(win, w)
        cuts.append(len(ev.lines))
        for a, b in zip(cuts, cuts[1:]):
            known = [t for t in own[a:b] if t is not None]
            t_end = max(known) if known else ev.event_time
            prev = last_of_stream.get(stream)
            if prev is not None and t_end < prev:
                t_end = prev
            last_of_stream[stream] = t_end
            update: dict = {"lines": ev.lines[a:b], "ts": stamps[a:b], "event_time": t_end}
            if ev.offsets is not None:
                update["offsets"] = ev.offsets[a:b]
            if ev.first_line_no is not None:
                update["first_line_no"] = ev.first_line_no + a
            out.append(ev.model_copy(update=update))
    spec = [e for e in out if e.kind == "job_spec"]  # type: ignore[attr-defined]
    rest = [e for e in out if e.kind != "job_spec"]  # type: ignore[attr-defined]
    rest.sort(key=lambda e: e.event_time)  # type: ignore[attr-defined]  # stable: a stream keeps its order
    return spec + rest


def capture_events(core: HealthCore, capture: Path, slice_s: float) -> tuple[list[EventBase], datetime, str]:
    """(events, captured_at, job_id): the capture read densely, log batches cut every `slice_s` s."""
    cap = open_capture(capture, batch_lines=500)
    events = list(cap.events())
    return time_sliced(events, slice_s, cap.info.captured_at), cap.info.captured_at, cap.info.job_id


def fold_capture(core: HealthCore, events: list[EventBase], captured_at: datetime, job_id: str,
                 step_s: float) -> Embedded:
    """Time-to-detect by folding the events through one core, judging on a grid of `step_s` seconds
    and after every event from the first fault on; judging at T sees the events up to T."""
    res = Embedded(verdict=None, problems=[])  # type: ignore[arg-type]
    state = core.new_state(job_id)
    step = timedelta(seconds=step_s)
    timed = [e.event_time for e in events if e.kind != "job_spec"]  # type: ignore[attr-defined]
    start = min(timed) if timed else captured_at
    res.start, res.captured_at = start, captured_at
    next_tick = start
    judged: list[tuple[datetime, Verdict]] = []

    def judge(at: datetime) -> None:
        v = core.judge(state, at)
        res.fold_final = v
        res.judgements += 1
        if v.verdict == "KILL":
            res.kills_seen += 1
            if res.kill is None:
                res.kill = Alarm(at, v)
        if _alarming(v):
            judged.append((at, v))

    for ev in events:
        t = ev.event_time  # type: ignore[attr-defined]
        if ev.kind != "job_spec":  # type: ignore[attr-defined]
            while next_tick < t and next_tick <= captured_at:  # judged before this event exists
                judge(next_tick)
                next_tick += step
        state, findings = core.step(state, ev, captured_at)
        for f in findings:
            if (f.kind in FAULT_KINDS and f.event_time is not None and f.severity != "info"
                    and (res.first_fault is None or f.event_time < res.first_fault)):
                res.first_fault = f.event_time
                res.first_fault_what = f"{f.kind}/{f.rule_id}: {f.text[:70]}"
        if res.first_fault is not None and ev.kind != "job_spec" and start <= t <= captured_at:  # type: ignore[attr-defined]
            judge(t)
    while next_tick <= captured_at:
        judge(next_tick)
        next_tick += step
    judge(captured_at)
    ctx = build_context(state, captured_at, core.throughput, core.catalog)
    res.cadence_s, res.cadence_source = ctx.cadence_s, ctx.cadence_source
    # the first causal signal: the earliest fault finding, or the earliest timestamped evidence of a FAIL
    # gate of the first KILL (else of the first alarm with a FAIL gate); the alarm is the first KILL or
    # escalation from then on (an escalation before any fault, e.g. while the job is still blind at
    # its start, detects nothing)
    basis = res.kill or next((Alarm(at, v) for at, v in judged
                              if any(getattr(v.gates, g).status == "FAIL" for g in GATES)), None)
    cands: list[tuple[datetime, str]] = []
    if res.first_fault is not None:
        cands.append((res.first_fault, res.first_fault_what))
    if basis is not None:
        cands += [(t, w) for t, w in _fail_evidence_times(basis.verdict) if t <= basis.time]
    if cands:
        res.causal, res.causal_what = min(cands, key=lambda c: c[0])
        res.alarm = next((Alarm(at, v) for at, v in judged if at >= res.causal), None)
    return res


def run_embedded(core: HealthCore, case: Case, step_s: float, slice_s: float
                 ) -> tuple[list[EventBase], Embedded]:
    events, captured_at, job_id = capture_events(core, case.capture, slice_s)
    res = fold_capture(core, events, captured_at, job_id, step_s)
    pr = probe(case.capture, core)
    res.verdict = pr.verdict
    res.problems = check_expected(pr.verdict, case.expected)
    if res.fold_final is not None and not res.fold_final.same_call(pr.verdict):
        print(f"  note: {case.name}: the fold's call at captured_at ({res.fold_final.verdict}, "
              f"{res.fold_final.job_status}) differs from the probe's ({pr.verdict.verdict}, {pr.verdict.job_status})",
              flush=True)
    return events, res


# ------------------------------------------------------------------------------------- streaming






@dataclass
class Streamed:
    final: Verdict | None = None  # newest verdict of the "final" replay
    final_problems: list[str] = field(default_factory=list)
    shift_s: float | None = None  # timed replay: wall = capture time + shift
    alarm_capture_time: datetime | None = None  # first KILL/escalation of the timed replay, in capture time
    alarm_verdict: Verdict | None = None
    lag_s: float | None = None
    censored: bool = False  # no alarm within the wait
    catchup_alarms: int = 0  # alarming verdicts published while the backlog was being folded
    timeline: list[dict] = field(default_factory=list)  # timed replay: every verdict, in capture time


class WorkerProc:
    """One real `rlhealth worker` (real core, wall clock, default ticks) on the bench's topics."""

    def __init__(self, bootstrap: str, prefix: str, partitions: int, log_path: Path) -> None:
        self.port = free_port()
        env = dict(os.environ, RLHEALTH_PARTITIONS=str(partitions), PYTHONUNBUFFERED="1",
                   RLHEALTH_FAUST_DATADIR=str(log_path.parent / f"faust-{self.port}"))
        env["PYTHONPATH"] = os.pathsep.join(x for x in (str(REPO), env.get("PYTHONPATH", "")) if x)
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rlhealth", "worker", "--bootstrap", bootstrap, "--topic-prefix", prefix,
             "--metrics-port", str(self.port), "--loglevel", "warning", "--no-create-topics",
             "--session-timeout-secs", "10"],
            env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def metrics(self) -> dict[str, float]:
        return scrape(self.port)

    def total(self, prefix: str) -> float:
        return sum(v for k, v in self.metrics().items() if k.startswith(prefix))

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"worker exited {self.proc.returncode}; see {self.log_path}")
            m = self.metrics()
            if m.get("rlhealth_partitions_owned", 0) > 0 and m.get("rlhealth_worker_caught_up", 0) == 1.0:
                return
            time.sleep(0.5)
        raise SystemExit(f"worker not ready after {timeout:.0f}s; see {self.log_path}")

    def wait_processed(self, n: float, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        done = 0.0
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"worker exited {self.proc.returncode}; see {self.log_path}")
            done = self.total("rlhealth_events_processed_total") + self.total("rlhealth_events_failed_total")
            if done >= n:
                return done
            time.sleep(0.5)
        return done

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()


class VerdictLog:
    """Follows the verdict topic in a thread: every new verdict (higher seq) of every job, in order."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from rlhealth.streams.verdict_reader import read_verdicts

        self.by_job: dict[str, list[Verdict]] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()

        def run() -> None:
            while not self.stop.is_set():  # a reader that went idle starts again from the beginning
                for v in read_verdicts(bootstrap, topic, follow=True, idle_timeout_s=2.0):
                    with self.lock:
                        vs = self.by_job.setdefault(v.job_id, [])
                        if not vs or v.seq > vs[-1].seq:
                            vs.append(v)
                    if self.stop.is_set():
                        return

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def verdicts(self, job_id: str) -> list[Verdict]:
        with self.lock:
            return list(self.by_job.get(job_id, []))


def _job_events(events: Iterable[EventBase], job_id: str) -> Iterator[EventBase]:
    for ev in events:
        yield ev.model_copy(update={"job_id": job_id})


async def _produce(bootstrap: str, catalog, items: list[tuple[float, str, EventBase]],
                   done: dict[str, threading.Event] | None = None,
                   deadline_wall: dict[str, float] | None = None, paced: bool = False) -> int:
    """Produce (wall time, job, event) items in order; `paced`: each at its wall time, a job only
    until its alarm was seen (`done`) or its deadline passed."""
    import asyncio

    from aiokafka import AIOKafkaProducer

    from rlhealth.schemas import encode, job_key

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, max_batch_size=1 << 20,
                                max_request_size=8 << 20)
    await producer.start()
    sent = 0
    try:
        for wall, job, ev in items:
            if paced:
                assert done is not None and deadline_wall is not None
                if done[job].is_set() or wall > deadline_wall[job]:
                    continue
                wait = wall - time.time()
                if wait > 0:
                    await producer.flush()
                    await asyncio.sleep(wait)
            await producer.send(catalog.topic_for_kind(ev.kind), encode(ev),  # type: ignore[attr-defined]
                                key=job_key(job))
            sent += 1
        await producer.flush()
    finally:
        await producer.stop()
    return sent


def run_streaming(bootstrap: str, cases: list[Case], runs: dict[str, tuple[list[EventBase], Embedded]],
                  *, partitions: int, lead: float, wait: float, settle: float, backlog_s: float
                  ) -> dict[str, Streamed]:
    """Both replays of every case through one real worker; returns what the verdict topic showed."""
    import asyncio

    from rlhealth.schemas.topics import TopicCatalog
    from rlhealth.sinks.kafka import EventProducer, admin_client, ensure_topics
    from rlhealth.streams.replay import rebase_event, replay_capture

    run_id = uuid.uuid4().hex[:8]
    catalog = TopicCatalog(prefix=f"detect-{run_id}.", partitions=partitions)
    ensure_topics(bootstrap, catalog)
    log_path = REPO / ".kafka" / "detect-worker.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    worker = WorkerProc(bootstrap, catalog.prefix, partitions, log_path)
    out = {c.name: Streamed() for c in cases}
    try:
        worker.wait_ready()
        vlog = VerdictLog(bootstrap, catalog.verdicts)
        # 1. final: every capture as `rlhealth replay` sends it (500-line batches, ends now)
        t0 = time.monotonic()
        producer = EventProducer(bootstrap, catalog)
        n_final = 0
        try:
            for c in cases:
                st = replay_capture(c.capture, bootstrap, catalog=catalog, producer=producer,
                                    job_id=f"{c.name}.final.{run_id}")
                n_final += st.events
            producer.flush()
        finally:
            producer.close()
        done = worker.wait_processed(n_final, timeout=300)
        time.sleep(settle)  # a tick after the last event
        print(f"stream: final replays {n_final} events, {done:.0f} processed in {time.monotonic() - t0:.0f}s",
              flush=True)
        for c in cases:
            vs = vlog.verdicts(f"{c.name}.final.{run_id}")
            if vs:
                v = vs[-1].model_copy(update={"job_id": runs[c.name][1].verdict.job_id})
                out[c.name].final = v
                out[c.name].final_problems = check_expected(v, c.expected)
        # 2. timed: the embedded alarm lands `lead` s after the anchor, `backlog_s` from now. What lies
        # before the anchor goes out at once as a backlog; the worker folds it (in no set order across
        # topics: logs, GPU polls, state) before the anchor, so it briefly holds events ahead of its
        # clock. Verdicts published before the anchor are not used (alarms among them are counted);
        # the call standing at the anchor counts from the anchor. From the anchor on, real time.
        timed = [c for c in cases if runs[c.name][1].alarm is not None]
        anchor = time.time() + backlog_s
        backlog: list[tuple[float, str, EventBase]] = []
        live: list[tuple[float, str, EventBase]] = []
        flags: dict[str, threading.Event] = {}
        deadline_wall: dict[str, float] = {}
        for k, c in enumerate(timed):
            events, emb = runs[c.name]
            assert emb.alarm is not None
            # alarms 1.7 s apart: each case meets the worker's 10 s tick at another phase
            shift = anchor + lead + 1.7 * k - emb.alarm.time.timestamp()
            out[c.name].shift_s = shift
            delta = timedelta(seconds=shift)
            job = f"{c.name}.timed.{run_id}"
            for ev in _job_events(events, job):
                moved = rebase_event(ev, lambda t, d=delta: t + d)
                wall = moved.event_time.timestamp()  # type: ignore[attr-defined]
                (backlog if wall <= anchor or moved.kind == "job_spec" else live).append(  # type: ignore[attr-defined]
                    (wall, job, moved))
            flags[job] = threading.Event()
            deadline_wall[job] = anchor + lead + 1.7 * k + wait
        backlog.sort(key=lambda x: x[0])
        live.sort(key=lambda x: x[0])
        print(f"stream: timed replays of {len(timed)} cases: {len(backlog)} backlog events, then {len(live)} "
              f"at real time; alarm {lead:.0f}s after the backlog, waiting up to {wait:.0f}s past it", flush=True)
        before = worker.total("rlhealth_events_processed_total") + worker.total("rlhealth_events_failed_total")
        asyncio.run(_produce(bootstrap, catalog, backlog))
        worker.wait_processed(before + len(backlog), timeout=max(backlog_s, 30.0))
        ready = time.time()
        if ready > anchor:
            print(f"stream: WARNING the backlog was folded {ready - anchor:.1f}s after the anchor", flush=True)

        def watch() -> None:
            end = max(deadline_wall.values(), default=0) + 5
            while time.time() < anchor + 2.0:  # every verdict published before the anchor has been read
                time.sleep(0.1)
            while not all(f.is_set() for f in flags.values()) and time.time() < end:
                for c in timed:
                    job = f"{c.name}.timed.{run_id}"
                    if flags[job].is_set():
                        continue
                    emb = runs[c.name][1]
                    res = out[c.name]
                    assert res.shift_s is not None and emb.causal is not None and emb.alarm is not None
                    shift = timedelta(seconds=res.shift_s)
                    vs = vlog.verdicts(job)
                    # until the anchor the worker holds events from up to `backlog_s` ahead of its clock;
                    # the call standing at the anchor counts from the anchor, later ones when published
                    early = [v for v in vs if v.produced_at.timestamp() < anchor]
                    res.catchup_alarms = sum(1 for v in early if _alarming(v))
                    for v in early[-1:] + [v for v in vs if v.produced_at.timestamp() >= anchor]:
                        at = max(v.produced_at.timestamp(), anchor)
                        cap_t = datetime.fromtimestamp(at, UTC) - shift
                        if _alarming(v) and cap_t >= emb.causal:
                            res.alarm_capture_time, res.alarm_verdict = cap_t, v
                            res.lag_s = (cap_t - emb.alarm.time).total_seconds()
                            flags[job].set()
                            break
                time.sleep(0.2)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        sent = asyncio.run(_produce(bootstrap, catalog, live, flags, deadline_wall, paced=True))
        watcher.join(timeout=wait + lead + 1.7 * len(timed) + backlog_s + 60)
        for c in timed:
            res = out[c.name]
            if res.lag_s is None:
                res.censored = True
            alarm_t = runs[c.name][1].alarm.time  # type: ignore[union-attr]
            for v in vlog.verdicts(f"{c.name}.timed.{run_id}"):
                cap_t = v.produced_at - timedelta(seconds=res.shift_s or 0.0)
                res.timeline.append({"s_from_embedded_alarm": round((cap_t - alarm_t).total_seconds(), 1),
                                     "before_anchor": v.produced_at.timestamp() < anchor,
                                     "call": [v.verdict, v.escalate, v.job_status, v.gates.A.status,
                                              v.gates.B.status, v.gates.C.status],
                                     "codes": v.gates.A.codes[:3] + v.gates.B.codes[:3]})
        print(f"stream: timed replays sent {len(backlog) + sent} events; "
              f"{sum(f.is_set() for f in flags.values())}/{len(flags)} alarms seen; "
              f"{sum(1 for c in timed if out[c.name].catchup_alarms)} jobs had an alarm while the worker "
              f"caught up on their backlog", flush=True)
        vlog.stop.set()
    finally:
        worker.stop()
        try:
            with admin_client(bootstrap, timeout_s=10) as admin:
                admin.delete_topics([t for t in admin.list_topics() if t.startswith(catalog.prefix)],
                                    raise_errors=False)
        except Exception as exc:  # noqa: BLE001 - cleanup only
            print(f"could not delete bench topics: {exc}", file=sys.stderr)
    return out


# --------------------------------------------------------------------------------------- summary

def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of a non-empty list."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(-(-q * len(s) // 1)) - 1))
    return s[k]


def fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}" if abs(x) >= 10 else f"{x:.1f}"


def gates_named(v: Verdict, expected: dict) -> bool:
    """Every expected failing gate is FAIL (restarts: same failure on every attempt)."""
    for gate in expected.get("failing_gates", []):
        if gate == "restarts":
            if v.restarts.same_failure is not True:
                return False
        elif getattr(v.gates, gate).status != "FAIL":
            return False
    return True


def kill_scores(cases: list[Case], got: dict[str, str | None]) -> tuple[int, int, int, float, float, float]:
    """(tp, fp, fn, precision, recall, f1) of KILL over the cases that expect one call."""
    tp = fp = fn = 0
    for c in cases:
        g = got.get(c.name)
        if c.expect_kill is None or g is None:
            continue
        if g == "KILL":
            tp, fp = (tp + 1, fp) if c.expect_kill else (tp, fp + 1)
        elif c.expect_kill:
            fn += 1
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return tp, fp, fn, p, r, f1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--step", type=float, default=10.0, help="judge every STEP seconds of event time")
    ap.add_argument("--slice", type=float, default=10.0,
                    help="cut log batches where their lines cross a SLICE-second boundary (a live shipper's batches)")
    ap.add_argument("--only", nargs="*", default=(), help="only these scenario names")
    ap.add_argument("--no-stream", action="store_true", help="embedded only (no broker)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--lead", type=float, default=30.0,
                    help="timed replay: real-time seconds before the embedded alarm (>= --step)")
    ap.add_argument("--wait", type=float, default=120.0, help="timed replay: seconds to wait past the embedded alarm")
    ap.add_argument("--backlog", type=float, default=45.0,
                    help="timed replay: seconds allowed to produce and fold the backlog before real time starts")
    ap.add_argument("--settle", type=float, default=12.0, help="seconds after the final replays are processed")
    ap.add_argument("--json", type=Path, default=None, help="also write per-case results here")
    args = ap.parse_args()

    t_start = time.perf_counter()
    core = build_core()
    cases = find_cases(args.only)
    if not cases:
        raise SystemExit("no scenarios found")
    runs: dict[str, tuple[list[EventBase], Embedded]] = {}
    for case in cases:
        runs[case.name] = run_embedded(core, case, args.step, args.slice)
    print(f"embedded: {len(cases)} cases in {time.perf_counter() - t_start:.1f}s "
          f"(judged every {args.step:.0f}s of event time and after every event from the first fault; "
          f"log batches cut every {args.slice:.0f}s)", flush=True)

    streamed: dict[str, Streamed] = {}
    if not args.no_stream:
        env = broker_env()
        try:
            bootstrap = start_broker(env)
            print(f"stream: broker {bootstrap}", flush=True)
            streamed = run_streaming(bootstrap, cases, runs, partitions=args.partitions, lead=args.lead,
                                     wait=args.wait, settle=args.settle, backlog_s=args.backlog)
        finally:  # also on SIGTERM
            stop_broker(env)

    # ---- per case
    hdr = (f"{'case':36s} {'expected':13s} {'embedded':9s} {'streamed':9s} {'gates':5s} "
           f"{'TTD s':>7s} {'TTK s':>7s} {'cadence s':>12s} {'lag s':>7s}  first causal signal")
    print()
    print(hdr)
    rows = []
    for c in cases:
        emb = runs[c.name][1]
        st = streamed.get(c.name)
        v = emb.verdict
        got_e = v.verdict + ("" if not emb.problems else "!")
        got_s = "-" if st is None or st.final is None else st.final.verdict + ("" if not st.final_problems else "!")
        cad = f"{fmt_s(emb.cadence_s)}{'d' if emb.cadence_source.startswith('spec') else 'l' if emb.cadence_s else ''}"
        lag = "-" if st is None or (st.lag_s is None and not st.censored) else (
            f">{args.wait:.0f}" if st.censored else fmt_s(st.lag_s)) + ("c" if st and st.catchup_alarms else "")
        named = "yes" if gates_named(v, c.expected) else "NO"
        if not c.expected.get("failing_gates"):
            named = "-"
        print(f"{c.name[:36]:36s} {c.expected_text:13s} {got_e:9s} {got_s:9s} {named:5s} {fmt_s(emb.ttd_s):>7s} "
              f"{fmt_s(emb.ttk_s):>7s} {cad:>12s} {lag:>7s}  {emb.causal_what[:70]}")
        for prob in emb.problems:
            print(f"    embedded misses expected.json: {prob}")
        if st is not None:
            for prob in st.final_problems:
                print(f"    streamed misses expected.json: {prob}")
        rows.append({"case": c.name, "origin": c.origin, "expected": c.expected["verdict_in"],
                     "embedded": v.verdict, "embedded_escalate": v.escalate, "embedded_problems": emb.problems,
                     "streamed": st.final.verdict if st and st.final else None,
                     "streamed_problems": st.final_problems if st else None,
                     "gates_named": gates_named(v, c.expected),
                     "causal": emb.causal.isoformat() if emb.causal else None, "causal_what": emb.causal_what,
                     "alarm": emb.alarm.time.isoformat() if emb.alarm else None,
                     "ttd_s": emb.ttd_s, "ttk_s": emb.ttk_s, "cadence_s": emb.cadence_s,
                     "cadence_source": emb.cadence_source, "stream_lag_s": st.lag_s if st else None,
                     "stream_censored": st.censored if st else None,
                     "stream_catchup_alarms": st.catchup_alarms if st else None,
                     "stream_timeline": st.timeline if st else None,
                     "kill_judgements": emb.kills_seen, "judgements": emb.judgements,
                     "first_kill": emb.kill.time.isoformat() if emb.kill else None})
    print("(! = misses expected.json; cadence d = declared in job.json, l = learned; TTD = first KILL or "
          "escalation after the first causal signal, TTK = first KILL; lag c = the worker published an alarm "
          "while folding the case's backlog)")

    # ---- transient KILLs of the embedded fold on cases whose final call is not KILL
    flips = [(c, runs[c.name][1]) for c in cases if c.expect_kill is False and runs[c.name][1].kills_seen]
    if flips:
        print("\nKILL judgements during the fold of cases expected NO-KILL (a watcher would have shown them):")
        for c, emb in flips:
            assert emb.kill is not None
            print(f"  {c.name}: {emb.kills_seen} of {emb.judgements} judgements, first at {emb.kill.time.isoformat()} "
                  f"({emb.kill.verdict.job_status}; {emb.kill.verdict.reasoning[:150]})")

    # ---- summary
    got_e = {c.name: runs[c.name][1].verdict.verdict for c in cases}
    tp, fp, fn, p, r, f1 = kill_scores(cases, got_e)
    n_scored = sum(1 for c in cases if c.expect_kill is not None)
    print(f"\ncases: {len(cases)} ({sum(c.origin == 'tests' for c in cases)} tests/scenarios, "
          f"{sum(c.origin == 'shared' for c in cases)} shared); scored for KILL: {n_scored} "
          f"({len(cases) - n_scored} allow either call)")
    print(f"embedded: KILL precision {p:.3f} recall {r:.3f} F1 {f1:.3f} (tp {tp}, fp {fp}, fn {fn}); false KILLs {fp}; "
          f"meets expected.json: {sum(not runs[c.name][1].problems for c in cases)}/{len(cases)}")
    if streamed:
        got_s = {c.name: (streamed[c.name].final.verdict if streamed[c.name].final else None) for c in cases}
        stp, sfp, sfn, sp, sr, sf1 = kill_scores(cases, got_s)
        same = sum(1 for c in cases if got_s[c.name] == got_e[c.name])
        print(f"streamed: KILL precision {sp:.3f} recall {sr:.3f} F1 {sf1:.3f} (tp {stp}, fp {sfp}, fn {sfn}); "
              f"false KILLs {sfp}; same call as embedded {same}/{len(cases)}; meets expected.json: "
              f"{sum(1 for c in cases if streamed[c.name].final and not streamed[c.name].final_problems)}/{len(cases)}")
        fp = max(fp, sfp)
    with_gates = [c for c in cases if c.expected.get("failing_gates")]
    named = sum(gates_named(runs[c.name][1].verdict, c.expected) for c in with_gates)
    print(f"every expected failing gate FAIL: {named}/{len(with_gates)} "
          f"({named / len(with_gates) if with_gates else 1.0:.3f})")
    ttds = [runs[c.name][1].ttd_s for c in cases if c.expect_kill and got_e[c.name] == "KILL"]
    ttd = [x for x in ttds if x is not None]
    ttks = [x for x in (runs[c.name][1].ttk_s for c in cases if c.expect_kill and got_e[c.name] == "KILL")
            if x is not None]
    ttd_p95 = pct(ttd, 0.95) if ttd else float("nan")
    if ttd:
        print(f"TTD (first KILL or escalation), {len(ttd)} detected KILL cases: median {statistics.median(ttd):.0f}s "
              f"p95 {ttd_p95:.0f}s max {max(ttd):.0f}s")
    if ttks:
        print(f"time to the first KILL: median {statistics.median(ttks):.0f}s p95 {pct(ttks, 0.95):.0f}s")
    lag_p95 = float("nan")
    if streamed:
        lags = [streamed[c.name].lag_s for c in cases if streamed[c.name].lag_s is not None]
        cens = sum(1 for c in cases if streamed[c.name].censored)
        vals = [x for x in lags if x is not None] + [float("inf")] * cens
        if vals:
            lag_p95 = pct(vals, 0.95)
            print(f"stream lag (verdict topic vs embedded, capture time), {len(vals)} cases: "
                  f"median {statistics.median(vals):.1f}s p95 {lag_p95:.1f}s min {min(vals):.1f}s "
                  f"max {max(vals):.1f}s; no alarm within {args.wait:.0f}s: {cens}")
    print(f"wall time {time.perf_counter() - t_start:.0f}s")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(f"RESULT kill_precision={p:.3f} kill_recall={r:.3f} false_kills={fp} ttd_p95_s={ttd_p95:.0f} "
          f"stream_lag_p95_s={lag_p95:.1f}")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
