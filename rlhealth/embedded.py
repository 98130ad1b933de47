"""The embedded default: the whole health core in one process, fed from capture directories.

`probe` replays one capture in event-time order and judges it at `now` (default: the
capture's `captured_at`). `watch` follows growing captures and re-judges continuously.
"""

from __future__ import annotations

import copy
import functools
import gc
import multiprocessing
import os
import sys
import time
import traceback
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

from rlhealth import settings
from rlhealth.agents.core import HealthCore
from rlhealth.agents.findings import Finding, JobMetrics
from rlhealth.agents.normalize import parse_memo, remember_parse
from rlhealth.agents.signatures import Classifier, LineMatch
from rlhealth.agents.stability import Stability, stabilize
from rlhealth.agents.stability import changed as key_facts_changed
from rlhealth.agents.state import JobHealth
from rlhealth.agents.verdict import apply_source_notes
from rlhealth.schemas import EventBase, Verdict
from rlhealth.schemas.events import LogBatch


@dataclass
class ProbeResult:
    verdict: Verdict
    state: JobHealth
    events: int
    findings: int
    problems: list = field(default_factory=list)
    seconds: float = 0.0


def _notes(problems) -> list[tuple[str, str, str]]:
    return [(p.gate, p.problem, p.note) for p in problems if getattr(p, "gate", None) in ("A", "B", "C")]


def _until(events: Iterable[EventBase], when: datetime) -> Iterator[EventBase]:
    """Judging "as of" an earlier time sees only what had happened by then (the job spec always)."""
    for event in events:
        if event.kind == "job_spec" or event.event_time <= when:  # type: ignore[attr-defined]
            yield event


def run_events(core: HealthCore, job_id: str, events: Iterable[EventBase], now: datetime,
               on_findings: Callable[[str, list[Finding]], None] | None = None,
               on_event: Callable[[EventBase], None] | None = None) -> tuple[JobHealth, int, int]:
    state = core.new_state(job_id)
    n_events = n_findings = 0
    for event in events:
        state, findings = core.step(state, event, now)
        n_events += 1
        if findings:
            n_findings += len(findings)
            if on_findings is not None:
                on_findings(job_id, findings)
        if on_event is not None:
            on_event(event)
    return state, n_events, n_findings


# With prefiltered reading a batch costs about the same whatever its size (~100 us: its last
# lines' timestamps, the event, the step), so the probe reads bigger batches than the shippers.
# A batch's event_time (its last stamped line) only orders it against the other sources: the core
# times every matched line by its own stamp.
PROBE_BATCH_LINES = 2000
ASOF_BATCH_LINES = 500


def probe(capture_dir: Path, core: HealthCore, now: datetime | None = None,
          on_findings: Callable[[str, list[Finding]], None] | None = None,
          progress: Callable[[EventBase], None] | None = None, batch_lines: int | None = None,
          workers: int | None = None, seq: int | None = None) -> ProbeResult:
    """Judge one capture. Raises rlhealth.sources.capture.CaptureError when it cannot be read at all.

    `batch_lines`: lines per log batch; default `PROBE_BATCH_LINES`, or `ASOF_BATCH_LINES` when
    judging as of an earlier `now` (a batch that ends after `now` is left out whole).

    `workers`: log-reading worker processes (see `_LogPool`); None = automatic (one per CPU up to
    `_MAX_WORKERS`, at most one per log file, when there are 2+ CPUs, the capture has 2-64 log files
    and `PARALLEL_MIN_BYTES` of logs, and this process has a single thread; env
    `RLHEALTH_PROBE_WORKERS` overrides),
    0 or 1 = everything in this process. The events, the matches and so the verdict are the same
    either way.

    `seq`: the verdict's sequence number; default `run_seq_base()`, unique per run."""
    from rlhealth.sources.capture import open_capture

    t0 = time.perf_counter()
    if batch_lines is None:
        batch_lines = PROBE_BATCH_LINES if now is None else ASOF_BATCH_LINES
    # The core's classifier as the readers' prefilter: lines the core would not read stay empty.
    cap = open_capture(Path(capture_dir), batch_lines=batch_lines, prefilter=core.classifier, prefilter_now=now)
    when = now or cap.info.captured_at
    # Workers replay matches batch by batch; judging "as of" an earlier time drops batches, so that path
    # stays in one process.
    n_workers = _probe_workers(cap.log_files(), workers) if now is None else 0
    if n_workers >= 2:
        with _LogPool(core.classifier, n_workers, len(cap.log_files())) as pool:
            step_core = copy.copy(core)
            step_core.classifier = pool.replay  # type: ignore[assignment]
            events = cap.events(open_log=_PoolOpener(pool, cap))
            state, n_events, n_findings = run_events(step_core, cap.info.job_id, events, when, on_findings,
                                                     progress)
    else:
        events = cap.events() if now is None else _until(cap.events(), when)
        state, n_events, n_findings = run_events(core, cap.info.job_id, events, when, on_findings, progress)
    verdict = core.judge(state, when, seq=run_seq_base() if seq is None else seq)
    verdict = apply_source_notes(verdict, _notes(cap.problems))
    verdict = verdict.model_copy(update={"captured": str(capture_dir)})
    return ProbeResult(verdict, state, n_events, n_findings, list(cap.problems), time.perf_counter() - t0)



@dataclass
class History:
    """A capture judged along the way (`judge_along`): `verdicts` are the judgements whose key facts
    changed, through the hysteresis as `watch` prints them; `metrics` one point per judgement."""

    verdicts: list[Verdict]
    metrics: list[JobMetrics]


HISTORY_POINTS = 240
HISTORY_MIN_STEP_S = 30.0
# A batch is folded in at its last line's time, so a batch spanning an hour of a quiet log would show up
# all at once at its end: small batches keep each line near its own time in the history.
HISTORY_BATCH_LINES = 20


def judge_along(capture_dir: Path, core: HealthCore, now: datetime | None = None, *,
                points: int = HISTORY_POINTS, seq: int | None = None,
                batch_lines: int = HISTORY_BATCH_LINES,
                progress: Callable[[EventBase], None] | None = None) -> History:
    """The history before a probe's verdict: one pass over the capture in event-time order that judges
    the state so far at up to `points` evenly spaced times between its first event and `now` (default
    captured_at; at least `HISTORY_MIN_STEP_S` apart; `now` itself excluded: that is `probe`'s verdict).
    Sequence numbers count up from `seq` + 1 (default `run_seq_base()`), at most `points` of them."""
    from rlhealth.sources.capture import open_capture

    cap = open_capture(Path(capture_dir), batch_lines=batch_lines, prefilter=core.classifier, prefilter_now=now)
    when = now or cap.info.captured_at
    base = run_seq_base() if seq is None else seq
    state = core.new_state(cap.info.job_id)
    out = History([], [])
    book: Stability | None = None
    grid: deque[datetime] = deque()
    started = False

    def judge(at: datetime) -> None:
        nonlocal book
        raw = core.judge(state, at, seq=base + len(out.verdicts) + 1)
        raw = apply_source_notes(raw, _notes(cap.problems)).model_copy(update={"captured": str(capture_dir)})
        shown, book = stabilize(book, raw)
        out.metrics.append(core.metrics(state, at, shown))
        if key_facts_changed(out.verdicts[-1] if out.verdicts else None, shown):
            out.verdicts.append(shown)

    for event in _until(cap.events(), when):
        t = event.event_time
        if not started and getattr(event, "kind", None) != "job_spec":
            started = True
            step = max(HISTORY_MIN_STEP_S, (when - t).total_seconds() / max(1, points))
            grid.extend(t + timedelta(seconds=step * k) for k in range(1, points + 1)
                        if t + timedelta(seconds=step * k) < when)
        while grid and grid[0] < t:
            judge(grid.popleft())
        state, _ = core.step(state, event, when)
        if progress is not None:
            progress(event)
    while grid:
        judge(grid.popleft())
    return out

# -- optional parallel log reading for `probe` ------------------------------------------------------
#
# Reading, redacting and classifying a log file is independent of every other file; folding the
# batches into the job state is not (one state, event-time order). With workers, each log file is
# read by the same `LogReader` in a forked worker process, which also runs the same `Classifier.scan`
# on every batch and sends the batch with its matches back; this process merges the batches in
# event-time order exactly as before (`Capture.events(open_log=...)`) and steps the same core, whose
# classifier hands back the worker's matches for that very batch (`_ReplayClassifier`). Workers run
# ahead on credit: a file never has more than `credit` batches read but not yet taken by the merge,
# so memory stays bounded (`_BATCH_BUDGET` batches over all files).

PARALLEL_MIN_BYTES = 64 << 20
_MAX_WORKERS = 4
_AUTO_MAX_FILES = 64  # beyond that each worker holds many suspended readers; stay in one process
_AUTO_MIN_CPUS = 2


def _single_threaded() -> bool:
    """Fork only a process with one thread (a DuckDB store, say, may run native threads)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


_BATCH_BUDGET = 256  # batches read ahead over all files (~100 KB of text each)
_MAX_CREDIT = 32  # per file
_STEP = 2  # batches per message / per turn of a worker's round robin


def _probe_workers(log_files: list[Path], workers: int | None) -> int:
    if workers is None:
        workers = settings.load().probe_workers
    sizes = []
    for f in log_files:
        try:
            sizes.append(f.stat().st_size)
        except OSError:
            pass
    n_files = sum(1 for s in sizes if s > 0)
    if workers is None:
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = os.cpu_count() or 1
        # With prefiltered reading a batch crossing the pipe is small and the workers send their
        # parses along, so workers paid on 2 shared vCPUs whether they were idle or not: -20% wall
        # when idle, -10% with one CPU-bound process beside the probe, -15..-28% with two
        # (BENCHMARKS.md). No load check, then: the choice depends on the capture alone.
        big = (sum(sizes) >= PARALLEL_MIN_BYTES and 2 <= n_files <= _AUTO_MAX_FILES
               and cpus >= _AUTO_MIN_CPUS)
        workers = min(cpus, _MAX_WORKERS) if big and _single_threaded() else 0
    workers = min(workers, n_files)
    if workers < 2 or not sys.platform.startswith("linux") or "fork" not in multiprocessing.get_all_start_methods():
        return 0
    return workers


class _ReplayClassifier:
    """The core's classifier in the probe's main process when workers classify: `scan(lines)` returns
    the matches `Classifier.scan` gave for that same list in the worker (or scans itself)."""

    def __init__(self, classifier: Classifier) -> None:
        self.classifier = classifier
        self.pending: dict[int, tuple[list[str], list[LineMatch]]] = {}

    def expect(self, lines: list[str], matches: list[LineMatch]) -> None:
        self.pending[id(lines)] = (lines, matches)

    def scan(self, lines: list[str]) -> list[LineMatch]:
        hit = self.pending.pop(id(lines), None)
        if hit is not None and hit[0] is lines:
            return hit[1]
        return self.classifier.scan(lines)

    def __getattr__(self, name: str):
        return getattr(self.classifier, name)


# A batch crosses the pipe as its varying fields, with its lines joined by "\n" (one str: a prefiltered
# batch is mostly empty lines) and its offsets as an int64 array: a third of the pickling of the model
# with two 2,000-item lists. The main process rebuilds it from a template holding the file's constant
# fields (`model_copy`, as `LogReader` builds it): the same values and the same fields set. A batch
# that does not have exactly that shape crosses as itself.
_PACKED_FIELDS = frozenset({"job_id", "event_time", "source", "lines", "offsets", "first_line_no",
                            "truncated_lines", "invalid_utf8_lines"})


def _pack(batch: LogBatch, source) -> LogBatch | tuple:
    d = batch.__dict__
    lines = d["lines"]
    offsets = d["offsets"]
    if (not lines or offsets is None or d["source"] is not source or d["ts"] is not None or d["file_id"] is not None
            or d["ingest_time"] is not None or batch.model_fields_set != _PACKED_FIELDS):
        return batch
    text = "\n".join(lines)
    if text.count("\n") != len(lines) - 1:  # a line holds a newline
        return batch
    return (d["event_time"], text, array("q", offsets).tobytes(), d["first_line_no"], d["truncated_lines"],
            d["invalid_utf8_lines"])


def _unpack(packed: LogBatch | tuple, template: LogBatch) -> LogBatch:
    if not isinstance(packed, tuple):
        return packed
    event_time, text, offsets, first_line_no, truncated, invalid = packed
    return template.model_copy(update={
        "event_time": event_time, "lines": text.split("\n"), "offsets": array("q", offsets).tolist(),
        "first_line_no": first_line_no, "truncated_lines": truncated, "invalid_utf8_lines": invalid})


def _template(job_id: str, source, when: datetime) -> LogBatch:
    """A batch with the constant fields of a file's batches, made as `LogReader._construct` makes one."""
    return LogBatch(job_id=job_id, event_time=when, source=source, lines=[], offsets=[], first_line_no=0,
                    truncated_lines=0, invalid_utf8_lines=0)


class _Stop(Exception):
    """The main process asked a worker to stop while a reader waited for its fallback time."""


def _log_worker(requests, replies, classifier: Classifier) -> None:
    """Worker process. Requests: ("open", fid, path, source, fallback_time, params, credit),
    ("fallback", fid, time) for a file opened with fallback_time None (sent before the main
    process waits for that file; the reader asks for it only when it needs it), ("credit", fid, n),
    None (stop). Replies (sent by a thread, so reading goes on while this process waits for the
    main one to take them): (fid, [(batch, matches)], done, error, stats)."""
    import queue
    import threading

    from rlhealth.sources.logfiles import LogReader

    outbox: queue.Queue = queue.Queue()

    def sender() -> None:
        while True:
            msg = outbox.get()
            if msg is None:
                return
            try:
                replies.send(msg)
            except OSError:
                return

    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    rule_index = {id(r): i for i, r in enumerate(classifier.rules)}
    files: dict[int, list] = {}  # fid -> [reader, iterator, credit]
    turn: list[int] = []  # round robin over open files
    fallbacks: dict[int, datetime] = {}

    def handle(msg) -> None:
        if msg is None:
            raise _Stop
        if msg[0] == "open":
            _, fid, path, source, fallback_time, params, credit = msg
            reader = LogReader(path, job_id=params["job_id"], source=source,
                               batch_lines=params["batch_lines"], chunk_bytes=params["chunk_bytes"],
                               prefilter=classifier)
            if fallback_time is not None:
                fallbacks[fid] = fallback_time
            it = reader.read_utf8(final=True, ref_time=params["ref_time"],
                                  fallback_time=functools.partial(fallback_of, fid))
            files[fid] = [reader, it, credit, params["ref_time"], reader.source]
            turn.insert(0, fid)  # a new file's first batch is awaited right away
        elif msg[0] == "fallback":
            fallbacks[msg[1]] = msg[2]
        elif msg[1] in files:
            files[msg[1]][2] += msg[2]

    def fallback_of(fid: int) -> datetime:
        while fid not in fallbacks:
            handle(requests.recv())
        return fallbacks[fid]

    try:
        while True:
            ready = [fid for fid in turn if files[fid][2] > 0]
            if not ready or requests.poll():
                handle(requests.recv())
                continue
            fid = ready[0]
            turn.remove(fid)
            turn.append(fid)
            entry = files[fid]
            reader, it, ref, source = entry[0], entry[1], entry[3], entry[4]
            out = []
            done = False
            error = None
            for _ in range(min(_STEP, entry[2])):
                try:
                    batch, data = next(it)
                except StopIteration:
                    done = True
                    break
                except OSError as exc:
                    done, error = True, str(exc)
                    break
                # with each match, the reader's parse of its line (prefixes, timestamp): the main
                # process memoises it and the core's step does not parse the line again
                matches = [(m.index, rule_index[id(m.rule)], m.fields, m.text, parse_memo(m.text, ref))
                           for m in classifier.scan(batch.lines, data)]
                out.append((_pack(batch, source), matches))
            entry[2] -= len(out)
            stats = None
            if done:
                del files[fid]
                turn.remove(fid)
                stats = (reader.lines_read, reader.bytes_read, reader.invalid_utf8_lines, reader.truncated_lines,
                         reader.tail.missing_final_newline)
            outbox.put((fid, out, done, error, stats))
    except (_Stop, KeyboardInterrupt, EOFError, BrokenPipeError):
        pass
    except BaseException:  # noqa: BLE001 - sent to the parent, which raises it there
        outbox.put((-1, traceback.format_exc(), True, None, None))
    outbox.put(None)
    thread.join()


class _RemoteLog:
    """What `Capture.events` needs of a `LogReader`, served by a worker."""

    def __init__(self, pool: _LogPool, fid: int, worker: int, ref_time: datetime, template: LogBatch) -> None:
        self.ref_time = ref_time  # the probe's `now` (workers run only for probes at captured_at)
        self.template = template
        self.pool = pool
        self.fid = fid
        self.worker = worker
        self.lines_read = self.bytes_read = self.invalid_utf8_lines = self.truncated_lines = 0
        self.tail = SimpleNamespace(missing_final_newline=False)

    def read(self) -> Iterator[EventBase]:
        pool = self.pool
        rules = pool.rules
        refill = max(1, pool.credit // 2)
        taken = 0
        while True:
            _fid, items, done, error, stats = pool.receive(self.worker, self.fid)
            for packed, matches in items:
                batch = _unpack(packed, self.template)
                for _i, _r, _fields, text, parsed in matches:
                    if parsed is not None:
                        remember_parse(text, parsed, self.ref_time)
                pool.replay.expect(batch.lines,
                                   [LineMatch(i, rules[r], fields, text) for i, r, fields, text, _p in matches])
                taken += 1
                if taken >= refill and not done:
                    pool.requests[self.worker].send(("credit", self.fid, taken))
                    taken = 0
                yield batch
            if done:
                (self.lines_read, self.bytes_read, self.invalid_utf8_lines, self.truncated_lines,
                 self.tail.missing_final_newline) = stats
                if error is not None:
                    raise OSError(error)
                return


class _PoolOpener:
    """`Capture.events`'s `open_log` (with `prefetch`) for a `_LogPool`."""

    def __init__(self, pool: _LogPool, cap) -> None:
        self.pool = pool
        self.cap = cap

    def __call__(self, path: Path, source, fallback: Callable[[], datetime]) -> _RemoteLog:
        return self.pool.open(path, source, fallback, self.cap.reader_params())

    def prefetch(self, path: Path, source, fallback: datetime | Callable[[], datetime]) -> None:
        self.pool.prefetch(path, source, fallback, self.cap.reader_params())


def _widen_pipe(conn) -> None:
    """Replies are a few hundred KB: a 1 MiB pipe takes one without the reader waking up every 64 KB."""
    try:
        import fcntl

        fcntl.fcntl(conn.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except (ImportError, OSError, ValueError):
        pass


class _LogPool:
    def __init__(self, classifier: Classifier, n_workers: int, n_files: int) -> None:
        self.replay = _ReplayClassifier(classifier)
        self.rules = classifier.rules
        self.credit = max(_STEP, min(_MAX_CREDIT, _BATCH_BUDGET // max(1, n_files)))
        # This process masks secrets too (job spec, trials): compiled before the fork, the workers'
        # readers share it instead of compiling one each
        from rlhealth.sources.redact import default_redactor

        default_redactor()
        ctx = multiprocessing.get_context("fork")
        self.requests = []
        self.replies = []
        self.procs = []
        for _ in range(n_workers):
            req_r, req_w = ctx.Pipe(duplex=False)
            rep_r, rep_w = ctx.Pipe(duplex=False)
            _widen_pipe(rep_w)
            proc = ctx.Process(target=_log_worker, args=(req_r, rep_w, classifier), daemon=True)
            proc.start()
            req_r.close()
            rep_w.close()
            self.requests.append(req_w)
            self.replies.append(rep_r)
            self.procs.append(proc)
        self.load = [0] * n_workers
        self.inbox: dict[int, deque] = {}
        self.n_files = 0
        self.early: dict[Path, tuple[_RemoteLog, object]] = {}  # prefetched: reader, source
        self.deferred: list[tuple[_RemoteLog, Callable[[], datetime]]] = []  # fallback times to send

    def open(self, path: Path, source, fallback: Callable[[], datetime], params: dict) -> _RemoteLog:
        while self.deferred:  # before waiting for any file: a worker may wait for one of these
            remote, later = self.deferred.pop()
            self.requests[remote.worker].send(("fallback", remote.fid, later()))
        early = self.early.pop(path, None)
        if early is not None and early[1] == source:
            return early[0]
        return self.start(path, source, fallback(), params)

    def prefetch(self, path: Path, source, fallback: datetime | Callable[[], datetime], params: dict) -> None:
        """Start reading `path` now; `open(path, source, ...)` later returns that reader. A fallback
        time not known yet (a callable) is sent at the first `open` of any file."""
        known = not callable(fallback)
        remote = self.start(path, source, fallback if known else None, params)  # type: ignore[arg-type]
        self.early[path] = (remote, source)
        if not known:
            self.deferred.append((remote, fallback))  # type: ignore[arg-type]

    def start(self, path: Path, source, fallback_time: datetime | None, params: dict) -> _RemoteLog:
        fid = self.n_files
        self.n_files += 1
        w = min(range(len(self.load)), key=self.load.__getitem__)
        try:
            self.load[w] += max(1, path.stat().st_size)
        except OSError:
            self.load[w] += 1
        self.inbox[fid] = deque()
        self.requests[w].send(("open", fid, path, source, fallback_time, params, self.credit))
        return _RemoteLog(self, fid, w, params["ref_time"], _template(params["job_id"], source, params["ref_time"]))

    def receive(self, worker: int, fid: int) -> tuple:
        box = self.inbox[fid]
        while not box:
            try:
                got = self.replies[worker].recv()
            except EOFError:
                raise RuntimeError("probe: a log worker process died") from None
            if got[0] == -1:
                raise RuntimeError(f"probe: a log worker failed:\n{got[1]}")
            self.inbox[got[0]].append(got)
        return box.popleft()

    def close(self) -> None:
        for conn in self.requests:
            try:
                conn.send(None)
            except OSError:
                pass
        for conn in self.replies:  # let blocked senders finish
            try:
                while conn.poll(0):
                    conn.recv()
            except (OSError, EOFError):
                pass
        for proc in self.procs:
            proc.join(timeout=2)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        for conn in self.requests + self.replies:
            conn.close()

    def __enter__(self) -> _LogPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def keep_freed_memory() -> None:
    """Let this process (and the log workers it forks) reuse freed memory instead of returning it.

    A probe allocates and frees MB-sized buffers all the time (chunks read, stripped, sliced). glibc
    gives each back to the system (an mmap over its adaptive threshold, or trimmed off the heap top)
    and the next one faults its pages in again: ~300k page faults and ~0.6 s of CPU on a 1 GB capture
    (BENCHMARKS.md). Serving buffers up to 32 MB from the heap and trimming it only past 256 MB free
    brings that to ~34k; peak RSS is unchanged (what is kept is what was just in use). glibc only;
    a no-op elsewhere. For a process that ends with its probe (the CLI): the setting stays."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    mallopt(m_mmap_threshold, 32 << 20)  # the largest glibc takes (HEAP_MAX_SIZE / 2 on 64-bit)
    mallopt(m_trim_threshold, 256 << 20)


def collect_garbage_rarely() -> None:
    """Spare a probe the cyclic garbage collector's work: nearly everything it allocates is freed by
    reference counting.

    At CPython's default (700, 10, 10) a dense 200 MB capture ran ~3,900 young and 9 full
    collections, ~0.7 s of its ~7.5 s of CPU (gc callbacks, BENCHMARKS.md, session 9), each full one
    walking the imports, the rules and their compiled databases again. Freezing what start-up built
    (never garbage) and the worker's young threshold ($RLHEALTH_GC_YOUNG_THRESHOLD, default 7000)
    brought that to ~0.1 s. For a process that ends with its probe (the CLI), called once the core is
    built: the setting stays, and cyclic garbage waits longer to be collected."""
    gc.freeze()
    gc.set_threshold(settings.load().gc_young_threshold, 10, 10)


def utc_now() -> datetime:
    return datetime.now(UTC)


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()


def run_seq_base() -> int:
    """A per-run base for verdict sequence numbers: microseconds since the epoch at the call.

    `probe` stamps its verdict with it and `watch` counts up from it, so a second probe of the same
    job or a restarted watch never reuses a (job, seq) already stored (`--db`)."""
    return time.time_ns() // 1000


class Watcher:
    """Follows several captures or live folders in one process and re-judges them on each tick.

    `clock` gives "now": the wall clock for live folders; `capture` mode judges a static capture at
    its own captured_at, exactly as `probe` does, so a finished capture is not read as stale just
    because it is old. In capture mode the readers take captured_at as their time too (a scheduler
    poll read from sacct.txt is dated captured_at, as in `probe`).

    Every raw judgement goes through the hysteresis of `rlhealth.agents.stability`; a verdict is
    returned (printed, stored) when one of its key facts changed (`stability.changed`).
    Sequence numbers count up from `seq_base` (default: `run_seq_base()`).
    """

    def __init__(self, core: HealthCore, dirs: list[Path], *, clock: Callable[[], datetime] = utc_now,
                 clock_mode: str = "wall", job_ids: list[str | None] | None = None, exporter=None, store=None,
                 batch_lines: int = 500, seq_base: int | None = None) -> None:
        from rlhealth.sources.follow import CaptureFollower

        self.core = core
        self.clock = clock
        self.clock_mode = clock_mode
        self.exporter = exporter
        self.store = store
        ids = job_ids or [None] * len(dirs)
        self.followers = [CaptureFollower(d, job_id=j, batch_lines=batch_lines, clock=clock, prefilter=core.classifier)
                          for d, j in zip(dirs, ids)]
        if clock_mode == "capture":
            for f in self.followers:
                f.clock = functools.partial(self._now_for, f)
                f.static = True
        self.states: dict[str, JobHealth] = {}
        self.verdicts: dict[str, Verdict] = {}
        self.books: dict[str, Stability] = {}
        self.seq_base = run_seq_base() if seq_base is None else seq_base
        self.seq: dict[str, int] = {}

    def _now_for(self, follower) -> datetime:
        if self.clock_mode == "capture":
            return follower.info.captured_at
        return self.clock()

    def tick(self) -> list[Verdict]:
        """Read what is new, fold it in, judge every job; returns the verdicts whose key facts changed."""
        changed: list[Verdict] = []
        for f in self.followers:
            job_id = f.info.job_id
            state = self.states.get(job_id) or self.core.new_state(job_id)
            now = self._now_for(f)
            for event in f.poll():
                state, findings = self.core.step(state, event, now)
                if findings and self.store is not None:
                    self.store.add_findings(job_id, findings)
            self.states[job_id] = state
            when = self._now_for(f)
            seq = self.seq.get(job_id, self.seq_base) + 1
            raw = self.core.judge(state, when, seq=seq)
            raw = apply_source_notes(raw, _notes(f.problems)).model_copy(update={"captured": str(f.path)})
            verdict, book = stabilize(self.books.get(job_id), raw)
            self.books[job_id] = book
            previous = self.verdicts.get(job_id)
            if self.exporter is not None:
                self.exporter.update(self.core.metrics(state, when, verdict), verdict)
            if self.store is not None:
                self.store.add_metrics(self.core.metrics(state, when, verdict))
                self.store.add_problems(job_id, f.problems)
            if key_facts_changed(previous, verdict):
                self.seq[job_id] = seq
                self.verdicts[job_id] = verdict
                changed.append(verdict)
                if self.store is not None:
                    self.store.add_verdict(verdict)
        if self.store is not None:
            self.store.flush()
        return changed
