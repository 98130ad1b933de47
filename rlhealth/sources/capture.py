"""A capture directory (shared/CAPTURE_FORMAT.md) -> the same events the live shippers send.

    cap = open_capture(path)            # raises CaptureError when capture.json is missing/invalid
    for event in cap.events():          # JobSpec first, then every event in event-time order
        ...
    cap.problems                        # what was missing/broken, and which gate it starves

Every source becomes an iterator that is already ordered by event time; `events()` merges them
with a heap, so a 1 GB capture streams through in constant memory (log files are read lazily in
chunks; GPU CSVs, state lines, pod snapshots, sacct and trials are small and read eagerly).

Choices worth knowing (see also the logfiles / harbor / nvidia_smi / kubectl / slurm modules):

* JobSpec: `job.json` fields win; missing typed fields are filled from `config/*.yaml` facts
  (`resolved_config.spec_facts`); `JobSpec.config` holds the flat dotted config keys.
  Its event_time is the earliest event of the capture, or `captured_at` when there is none.
* pods/*.json snapshots become `JobStatePoll`s with `pod_statuses`; their state (and attempt
  fields) are copied from the latest state.jsonl poll at or before the snapshot time (the
  earliest one after it when none is before); without state.jsonl the sacct timeline is used
  the same way; with neither, the state is inferred from the pod phases.
* sacct.txt -> state polls per leg start/end (`slurm.sacct_state_polls`), emitted in addition
  to state.jsonl when both exist.
* Log files with no timestamps at all: event_time = file mtime when it is not after
  `captured_at`, else the start of the capture window (earliest state/GPU/pod/sacct/trial time),
  else `captured_at`.
* `problems` lists static findings (missing/empty sources) right after `open_capture`; problems
  found while reading (bad rows, invalid UTF-8, truncated files) are added as `events()` runs
  and are complete once it is exhausted. Nothing but capture.json is ever fatal.
"""

from __future__ import annotations

import functools
import heapq
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ValidationError

from rlhealth import settings
from rlhealth.agents.signatures import Classifier
from rlhealth.schemas.common import EventBase, Source
from rlhealth.schemas.events import (
    GeometrySpec,
    GpuPoll,
    HardwareSpec,
    JobSpec,
    JobStatePoll,
    ModelSpec,
    RolloutSpec,
)
from rlhealth.sources import harbor, kubectl, slurm
from rlhealth.sources.compressed import is_packed, rotation_groups, unpack_log
from rlhealth.sources.encoding import without_bom
from rlhealth.sources.logfiles import CHUNK_BYTES, FirstStampAfter, LogReader, slurm_leg_order, source_for
from rlhealth.sources.redact import redact, redact_config

SHIPPER = "capture"
_SCHEDULERS = ("kubernetes", "slurm", "other")

Problem = Literal["missing", "empty", "truncated", "invalid_utf8", "unreadable", "parse_error"]
Gate = Literal["A", "B", "C", "restarts"]


class CaptureError(Exception):
    """The directory is not a capture (no readable capture.json). The CLI exits with status 2."""


@dataclass(frozen=True)
class CaptureInfo:
    job_id: str
    cluster: str | None
    scheduler: str
    captured_at: datetime


@dataclass
class SourceProblem:
    path: str  # relative to the capture root
    problem: Problem
    gate: Gate | None  # the gate that loses evidence; None for job-spec inputs
    note: str
    count: int = 1


_parse_time = harbor.parse_iso_utc


_STATES = ("pending", "running", "succeeded", "failed", "killed")


def parse_state_line(line: str | bytes, *, job_id: str, source: Source, scheduler: str | None) -> JobStatePoll:
    """One state.jsonl line -> JobStatePoll. Raises ValueError (or ValidationError) when bad.

    Unknown keys are ignored; a state outside the known set becomes "unknown".
    """
    obj = orjson.loads(line)
    if not isinstance(obj, dict):
        raise ValueError("not an object")
    t = _parse_time(obj.get("ts"))
    if t is None:
        raise ValueError("no ts")
    state = obj.get("state")
    return JobStatePoll(
        job_id=job_id,
        event_time=t,
        source=source,
        state=state if state in _STATES else "unknown",
        pods=obj.get("pods"),
        failure_count=obj.get("failure_count"),
        preemption_count=obj.get("preemption_count"),
        attempt=obj.get("attempt"),
        max_retries=obj.get("max_retries"),
        attempts=[_redacted_attempt(a) for a in obj.get("attempts") or []],
        scheduler=scheduler if scheduler in _SCHEDULERS else None,
    )


def _redacted_attempt(a: Any) -> Any:
    # An attempt's error text is a log excerpt too: it can carry a token.
    if isinstance(a, dict) and isinstance(a.get("error"), str):
        return {**a, "error": redact(a["error"])}
    return a


def pod_snapshot_poll(pods: list, t: datetime, timeline: list[JobStatePoll], *, job_id: str,
                      source: Source) -> JobStatePoll:
    """A pods snapshot as a state poll: state fields copied from the latest `timeline` poll at or
    before `t` (else the earliest after it); with no timeline, the state inferred from pod phases."""
    ref = None
    for s in timeline:
        if s.event_time <= t:
            ref = s
        else:
            break
    if ref is None and timeline:
        ref = timeline[0]
    base: dict[str, Any]
    if ref is not None:
        base = dict(state=ref.state, failure_count=ref.failure_count, preemption_count=ref.preemption_count,
                    attempt=ref.attempt, max_retries=ref.max_retries, attempts=list(ref.attempts),
                    scheduler=ref.scheduler)
    else:
        base = dict(state=kubectl.infer_state(pods), scheduler="kubernetes")
    return JobStatePoll(job_id=job_id, event_time=t, source=source, pods=len(pods), pod_statuses=pods, **base)


def read_capture_info(path: Path) -> CaptureInfo:
    p = Path(path)
    if not p.is_dir():
        raise CaptureError(f"{p}: not a directory")
    cj = p / "capture.json"
    try:
        if cj.exists() and not stat.S_ISREG(os.stat(cj).st_mode):
            raise CaptureError(f"{cj}: not a regular file")
        raw = without_bom(cj.read_bytes())
    except FileNotFoundError:
        raise CaptureError(f"{cj}: missing (every capture needs capture.json with job_id, cluster, scheduler, "
                           "captured_at)") from None
    except OSError as exc:
        raise CaptureError(f"{cj}: unreadable: {exc}") from None
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CaptureError(f"{cj}: not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise CaptureError(f"{cj}: must hold a JSON object")
    job_id = obj.get("job_id")
    if not isinstance(job_id, str) or not job_id.strip() or len(job_id) > 256:
        raise CaptureError(f"{cj}: job_id must be a non-empty string")
    captured_at = _parse_time(obj.get("captured_at"))
    if captured_at is None:
        raise CaptureError(f"{cj}: captured_at must be an RFC 3339 time, got {obj.get('captured_at')!r}")
    scheduler = obj.get("scheduler")
    scheduler = scheduler if scheduler in _SCHEDULERS else "other"
    cluster = obj.get("cluster") if isinstance(obj.get("cluster"), str) else None
    return CaptureInfo(job_id=job_id.strip(), cluster=cluster, scheduler=scheduler, captured_at=captured_at)


def unsafe_reason(path: Path, root: Path) -> str | None:
    """Why `path` must not be read (None: a regular file inside `root`, possibly through a symlink)."""
    try:
        lst = os.lstat(path)
        if stat.S_ISLNK(lst.st_mode):
            real = Path(os.path.realpath(path))
            top = Path(os.path.realpath(root))
            if real != top and top not in real.parents:
                return "symlink pointing out of the folder: not followed"
        st = os.stat(path)
    except OSError as exc:
        return f"unreadable: {str(exc)[:200]}"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (FIFO, socket or device): skipped"
    return None


def _read_text(path: Path) -> tuple[str | None, int, str | None]:
    """(text, invalid utf-8 line count, error). Only regular files are opened."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None, 0, "not a regular file (FIFO, socket or device): skipped"
        raw = without_bom(path.read_bytes())
    except OSError as exc:
        return None, 0, str(exc)[:200]
    try:
        return raw.decode("utf-8"), 0, None
    except UnicodeDecodeError:
        bad = 0
        for line in raw.split(b"\n"):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                bad += 1
        return raw.decode("utf-8", errors="replace"), bad, None


@dataclass
class _Peeked:
    first: EventBase
    rest: Iterator[EventBase]

    def __iter__(self) -> Iterator[EventBase]:
        yield self.first
        yield from self.rest


@dataclass
class CaptureStats:
    events: dict[str, int] = field(default_factory=dict)
    log_files: int = 0
    log_lines: int = 0
    log_bytes: int = 0


# open_log(path, source, fallback) -> an object with read() and LogReader's counters (see Capture.events)
OpenLog = Callable[[Path, Source, Callable[[], datetime]], Any]

LOG_READ_BUDGET = 192 << 20  # bytes of raw chunks held by all suspended log readers together
MIN_CHUNK_BYTES = 64 << 10


def chunk_bytes_for(n_files: int) -> int:
    """Read size per log file when `n_files` are merged at once (1 MiB down to 64 KiB)."""
    return max(MIN_CHUNK_BYTES, min(CHUNK_BYTES, LOG_READ_BUDGET // max(1, n_files)))


class Capture:
    _chunk_bytes = CHUNK_BYTES
    _logs_have_lines = False  # some log file of the capture is not empty (set when events() starts)
    _mtimes: dict[Path, datetime]  # log file -> its mtime (set when events() starts)

    def __init__(self, path: Path, info: CaptureInfo, *, batch_lines: int = 500,
                 prefilter: Classifier | None = None, prefilter_now: datetime | None = None) -> None:
        self.path = Path(path)
        self.info = info
        self.batch_lines = batch_lines
        # the core's classifier: log lines the core will not read are left empty (LogReader prefilter)
        self.prefilter = prefilter
        self.prefilter_now = prefilter_now  # the `now` that core will judge at (default captured_at)
        self._static: list[SourceProblem] = []
        self.problems: list[SourceProblem] = []
        self._skipped: set[str] = set()
        self.stats = CaptureStats()
        self._scan()

    # -- helpers ----------------------------------------------------------------------------
    def _rel(self, p: Path) -> str:
        return p.relative_to(self.path).as_posix()

    def _source(self, rel: str, **kw: Any) -> Source:
        return Source(cluster=self.info.cluster, stream=rel, shipper=SHIPPER, **kw)

    def _problem(self, path: str, problem: Problem, gate: Gate | None, note: str, count: int = 1) -> None:
        self.problems.append(SourceProblem(path, problem, gate, note, count))

    def _scan(self) -> None:
        """Static problems: what is missing or empty, before reading anything big."""
        p = self.path
        add = lambda *a: self._static.append(SourceProblem(*a))  # noqa: E731
        logs = self.log_files()
        if not (p / "logs").is_dir():
            add("logs", "missing", "A", "no logs/ directory: liveness has no log evidence")
        elif not logs:
            add("logs", "empty", "A", "logs/ holds no files: liveness has no log evidence")
        if not (p / "state.jsonl").exists():
            if (p / "sacct.txt").exists():
                pass  # sacct.txt is the SLURM state poll: nothing is missing
            elif self.pod_files():
                add("state.jsonl", "partial", "A", "no state.jsonl: scheduler state inferred from pod snapshots only")
            else:
                add("state.jsonl", "missing", "A", "no state.jsonl: the scheduler's view of the job is unknown")
        if not (p / "gpu").is_dir():
            add("gpu", "missing", "B", "no gpu/ directory: GPU utilisation is unknown")
        elif not self.gpu_files():
            add("gpu", "empty", "B", "gpu/ holds no <host>.csv files: GPU utilisation is unknown")
        if not (p / "trace_jobs").is_dir():
            add("trace_jobs", "missing", "C", "no trace_jobs/: rollout quality is unknown")
        if self.info.scheduler == "slurm" and not (p / "sacct.txt").exists() and not (p / "state.jsonl").exists():
            add("sacct.txt", "missing", "restarts", "no sacct.txt: earlier SLURM legs (attempts) are unknown")
        if not (p / "job.json").exists() and not self.config_files():
            add("job.json", "missing", None, "no job.json and no config/*.yaml: model/geometry expectations unknown")
        self.problems = list(self._static)

    def _safe(self, paths: Iterable[Path]) -> list[Path]:
        """Regular files only (a FIFO would block `open` forever; sockets and devices are not logs),
        and no symlink that leaves the capture folder. What is skipped is noted once."""
        out: list[Path] = []
        for q in paths:
            why = unsafe_reason(q, self.path)
            if why is None:
                out.append(q)
                continue
            rel = self._rel(q)
            if rel not in self._skipped:
                self._skipped.add(rel)
                self._static.append(SourceProblem(rel, "unreadable", None, why))
                self.problems.append(SourceProblem(rel, "unreadable", None, why))
        return out

    def log_files(self) -> list[Path]:
        root = self.path / "logs"
        out: list[Path] = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for f in sorted(filenames):
                out.append(Path(dirpath) / f)
        return self._safe(sorted(out, key=lambda q: q.relative_to(root).as_posix()))

    def gpu_files(self) -> list[Path]:
        d = self.path / "gpu"
        if not d.is_dir():
            return []
        return self._safe(sorted(q for q in d.glob("*.csv") if not q.name.endswith(".apps.csv")))

    def pod_files(self) -> list[Path]:
        d = self.path / "pods"
        return self._safe(sorted(d.glob("*.json"))) if d.is_dir() else []

    def config_files(self) -> list[Path]:
        d = self.path / "config"
        return self._safe(sorted(list(d.glob("*.yaml")) + list(d.glob("*.yml")))) if d.is_dir() else []

    # -- job spec ---------------------------------------------------------------------------
    def job_spec(self, event_time: datetime | None = None) -> JobSpec:
        fields: dict[str, Any] = {}
        jp = self.path / "job.json"
        if jp.exists():
            try:
                why = unsafe_reason(jp, self.path)
                if why is not None:
                    raise ValueError(why)
                obj = orjson.loads(without_bom(jp.read_bytes()))
                if not isinstance(obj, dict):
                    raise ValueError("job.json must hold an object")
            except (OSError, ValueError) as exc:
                self._problem("job.json", "parse_error", None, f"job.json ignored: {str(exc)[:200]}")
                obj = {}
            models: dict[str, type[BaseModel]] = {"model": ModelSpec, "hardware": HardwareSpec,
                                                  "geometry": GeometrySpec, "rollout": RolloutSpec}
            for k, v in obj.items():
                if k in models:
                    try:
                        fields[k] = models[k].model_validate(v).model_dump(exclude_none=True, exclude_defaults=True)
                    except ValidationError as exc:
                        detail = exc.errors()[0]
                        where = ".".join(str(x) for x in (k, *detail["loc"]))
                        self._problem("job.json", "parse_error", None,
                                      f"job.json {k} ignored: {where}={detail.get('input')!r}: {detail['msg']}")
                elif k in ("expected_step_s", "new_or_untested", "max_retries", "enforce_eager", "started_at",
                           "config"):
                    fields[k] = v
        flat: dict[str, Any] = {}
        cfgs = self.config_files()
        if cfgs:
            from rlhealth.sources.resolved_config import load_config_files, spec_facts  # yaml: ~20 ms, rarely needed

            flat, errors = load_config_files(cfgs)
            for path, err in errors:
                self._problem(self._rel(path), "empty" if err == "empty" else "parse_error", None,
                              f"config ignored: {err}")
            for k, v in spec_facts(flat).items():
                if isinstance(v, dict):
                    sect = fields.setdefault(k, {})
                    for kk, vv in v.items():
                        sect.setdefault(kk, vv)
                else:
                    if fields.get(k) is None:
                        fields[k] = v
        cfg = dict(flat)
        if isinstance(fields.get("config"), dict):
            cfg.update(fields["config"])
        # credentials never leave the node: secret-looking keys and secrets inside values are masked
        fields["config"] = redact_config(cfg)
        base = dict(job_id=self.info.job_id, event_time=event_time or self.info.captured_at,
                    source=self._source("job.json"))
        try:
            return JobSpec(**base, **fields)
        except ValidationError as exc:
            self._problem("job.json", "parse_error", None, f"job spec fields dropped: {exc.errors()[0]['msg']}")
            keep = {k: v for k, v in fields.items() if k in ("model", "hardware", "geometry", "rollout", "config")}
            try:
                return JobSpec(**base, **keep)
            except ValidationError:
                return JobSpec(**base)

    # -- state ------------------------------------------------------------------------------
    def _state_polls(self) -> list[JobStatePoll]:
        sp = self.path / "state.jsonl"
        if not sp.exists():
            return []
        text, bad_utf8, err = _read_text(sp)
        if text is None:
            self._problem("state.jsonl", "unreadable", "A", err or "unreadable")
            return []
        if not text.strip():
            self._problem("state.jsonl", "empty", "A", "state.jsonl is empty: scheduler state unknown")
            return []
        if bad_utf8:
            self._problem("state.jsonl", "invalid_utf8", "A", "lines with invalid UTF-8", bad_utf8)
        sched = self.info.scheduler
        polls: list[JobStatePoll] = []
        bad = 0
        lines = text.split("\n")
        truncated = bool(lines and lines[-1].strip())
        src = self._source("state.jsonl")
        for line in lines:
            if not line.strip():
                continue
            try:
                polls.append(parse_state_line(line, job_id=self.info.job_id, source=src, scheduler=sched))
            except (ValueError, ValidationError):
                bad += 1
        if bad:
            kind: Problem = "truncated" if truncated and bad == 1 else "parse_error"
            self._problem("state.jsonl", kind, "A", "state lines skipped (bad JSON or fields)", bad)
        polls.sort(key=lambda e: e.event_time)
        return polls

    def _sacct(self) -> list[slurm.SlurmLeg]:
        sp = self.path / "sacct.txt"
        if not sp.exists():
            return []
        text, _bad, err = _read_text(sp)
        if text is None:
            self._problem("sacct.txt", "unreadable", "restarts", err or "unreadable")
            return []
        if not text.strip():
            self._problem("sacct.txt", "empty", "restarts", "sacct.txt is empty")
            return []
        res = slurm.parse_sacct(text)
        if res.bad_lines:
            self._problem("sacct.txt", "parse_error", "restarts", "sacct lines skipped", res.bad_lines)
        return res.legs

    def _pod_polls(self, timeline: list[JobStatePoll]) -> list[JobStatePoll]:
        out: list[JobStatePoll] = []
        for f in self.pod_files():
            rel = self._rel(f)
            t = kubectl.snapshot_time(f)
            if t is None:
                try:
                    t = min(datetime.fromtimestamp(f.stat().st_mtime, UTC), self.info.captured_at)
                except OSError:
                    t = self.info.captured_at
                self._problem(rel, "parse_error", "A", "file name is not an RFC 3339 time; used its mtime")
            try:
                raw = without_bom(f.read_bytes())
                if not raw.strip():
                    self._problem(rel, "empty", "A", "empty pod snapshot")
                    continue
                pods = kubectl.load_pods_json(raw)
            except (OSError, ValueError, ValidationError) as exc:
                self._problem(rel, "truncated" if raw.rstrip()[-1:] not in (b"}", b"]") else "parse_error", "A",
                              f"pod snapshot ignored: {str(exc)[:150]}")
                continue
            out.append(pod_snapshot_poll(pods, t, timeline, job_id=self.info.job_id, source=self._source(rel)))
        out.sort(key=lambda e: e.event_time)
        return out

    # -- gpu --------------------------------------------------------------------------------
    def _gpu_polls(self, f: Path) -> list[GpuPoll]:
        rel = self._rel(f)
        host = f.name[: -len(".csv")]
        text, bad_utf8, err = _read_text(f)
        if text is None:
            self._problem(rel, "unreadable", "B", err or "unreadable")
            return []
        if not text.strip():
            self._problem(rel, "empty", "B", f"no nvidia-smi polls for {host}")
            return []
        if bad_utf8:
            self._problem(rel, "invalid_utf8", "B", "lines with invalid UTF-8", bad_utf8)
        # imported here (~10 ms): a probe's log workers are already reading by then
        from rlhealth.sources.nvidia_smi import GpuCsvParser, attach_apps, parse_compute_apps_csv

        parser = GpuCsvParser(job_id=self.info.job_id, host=host, source=self._source(rel, host=host))
        lines = text.split("\n")
        tail_cut = bool(lines and lines[-1].strip())
        polls = parser.feed(lines)
        polls.extend(parser.flush())
        if parser.bad_rows:
            kind: Problem = "truncated" if tail_cut and parser.bad_rows == 1 else "parse_error"
            self._problem(rel, kind, "B", f"rows skipped, e.g. {parser.bad_examples[:1]}", parser.bad_rows)
        if not polls:
            self._problem(rel, "parse_error", "B", f"no parseable nvidia-smi rows for {host}")
        polls.sort(key=lambda e: e.event_time)
        apps = f.with_name(host + ".apps.csv")
        if apps.exists() and polls:
            atext, _b, aerr = _read_text(apps)
            if atext is None:
                self._problem(self._rel(apps), "unreadable", "B", aerr or "unreadable")
            else:
                res = parse_compute_apps_csv(atext)
                if res.bad_rows:
                    self._problem(self._rel(apps), "parse_error", "B", "compute-app rows skipped", res.bad_rows)
                polls = attach_apps(polls, res.groups)
        return polls

    # -- logs -------------------------------------------------------------------------------
    def _log_iter(self, f: Path, source: Source, fallback: Callable[[], datetime],
                  open_log: OpenLog | None = None, *, rel: str | None = None) -> Iterator[EventBase]:
        rel = rel if rel is not None else self._rel(f)
        gate: Gate = "B" if f.name.startswith("dmesg") else "A"
        try:
            size = f.stat().st_size
        except OSError as exc:
            self._problem(rel, "unreadable", gate, str(exc)[:200])
            return
        if size == 0:
            # An empty stderr beside logs with lines is the norm (a SLURM leg's .err): only when every
            # log is empty has liveness lost its evidence.
            self._problem(rel, "empty", None if self._logs_have_lines else gate, "empty log file")
            return
        if open_log is None:
            reader = LogReader(f, job_id=self.info.job_id, source=source, batch_lines=self.batch_lines,
                               chunk_bytes=self._chunk_bytes, prefilter=self.prefilter,
                               prefilter_now=self.prefilter_now)
            batches = reader.read(final=True, ref_time=self.info.captured_at, fallback_time=fallback)
        else:
            reader = open_log(f, source, fallback)
            batches = reader.read()
        try:
            yield from batches
        except OSError as exc:
            self._problem(rel, "unreadable", gate, f"read stopped: {str(exc)[:200]}")
        self.stats.log_files += 1
        self.stats.log_lines += reader.lines_read
        self.stats.log_bytes += reader.bytes_read
        if reader.invalid_utf8_lines:
            self._problem(rel, "invalid_utf8", gate, "lines with invalid UTF-8 (decoded with U+FFFD)",
                          reader.invalid_utf8_lines)
        if reader.tail.missing_final_newline:
            self._problem(rel, "truncated", gate, "last line has no newline (file cut mid-line)")
        if reader.truncated_lines:
            self._problem(rel, "truncated", gate, "lines longer than 65536 characters were cut",
                          reader.truncated_lines)

    def reader_params(self) -> dict[str, Any]:
        """What `events()` gives every `LogReader` (for an `open_log` that runs them elsewhere)."""
        return dict(job_id=self.info.job_id, batch_lines=self.batch_lines, chunk_bytes=self._chunk_bytes,
                    ref_time=self.info.captured_at)

    # -- trials -----------------------------------------------------------------------------
    def _trial_events(self) -> list[EventBase]:
        root = self.path / "trace_jobs"
        if not root.is_dir():
            return []
        out: list[EventBase] = []
        n = 0
        for tr in harbor.read_trials(root, job_id=self.info.job_id, ref_time=self.info.captured_at,
                                     source=Source(cluster=self.info.cluster, shipper=SHIPPER)):
            n += 1
            out.append(tr.started)
            if tr.completed is not None:
                out.append(tr.completed)
            for sub, problem, note in tr.problems:
                self._problem(f"{tr.rel}/{sub}" if sub else tr.rel, problem, "C", note)  # type: ignore[arg-type]
        if n == 0:
            self._problem("trace_jobs", "empty", "C", "trace_jobs/ holds no trial directories")
        out.sort(key=lambda e: e.event_time)
        return out

    # -- the stream -------------------------------------------------------------------------
    def events(self, open_log: OpenLog | None = None) -> Iterator[EventBase]:
        """JobSpec first, then every event of the capture in event-time order.

        `open_log(path, source, fallback)` replaces the in-process `LogReader` of each log file
        (the embedded probe's worker processes run the same reader elsewhere): it returns an
        object whose `read()` yields exactly what `LogReader.read(final=True, ref_time=captured_at,
        fallback_time=fallback)` would, with the reader's counters set once it is exhausted
        (`chunk_bytes`, `batch_lines`, `job_id`: `self.reader_params()`). When `open_log` also has
        `prefetch(path, source, fallback)`, it is called first, before the small sources are parsed,
        for the first file of each log that `open_log` will get with that path and source, so that
        reading can start: `fallback` is the fallback time, or a callable giving it from the first
        `open_log` call on (it depends on the small sources)."""
        self.problems = list(self._static)
        self.stats = CaptureStats()
        info = self.info
        state = self._state_polls()
        legs = self._sacct()
        chain = slurm.chain_legs(legs) if legs else []
        sacct_polls = (slurm.sacct_state_polls(legs, job_id=info.job_id, captured_at=info.captured_at,
                                               source=self._source("sacct.txt")) if legs else [])
        log_files = self.log_files()
        rels = [self._rel(f) for f in log_files]
        # Every log file's reader stays suspended in the merge holding its current chunk (split
        # into lines): share a fixed budget between them so RSS stays bounded.
        self._chunk_bytes = chunk_bytes_for(len(log_files))
        legs_by_id = slurm.leg_index(chain) if chain else slurm_leg_order(rels)
        self._logs_have_lines = any(_size(f) > 0 for f in log_files)
        groups = rotation_groups(list(zip(log_files, rels)))
        self._mtimes: dict[Path, datetime] = {}
        window: list[datetime] = []  # the window's start, once the small sources are parsed
        prefetch = getattr(open_log, "prefetch", None)
        if prefetch is not None:
            # Readers that run elsewhere start now, while this process parses the small sources.
            # A log's fallback time is known now unless its mtime is after captured_at: then it is
            # the window's start, which `prefetch` gets as a callable valid from the first open_log.
            for group in groups:
                f, rel = group[0]
                if is_packed(f.name) or _size(f) == 0:
                    continue
                mtime = self._mtime(f)
                prefetch(f, source_for(rel, cluster=info.cluster, shipper=SHIPPER, leg_index=legs_by_id),
                         mtime if mtime <= info.captured_at else functools.partial(window.__getitem__, 0))

        pods = self._pod_polls(state or sacct_polls)
        gpu = [self._gpu_polls(f) for f in self.gpu_files()]
        trials = self._trial_events()

        eager: list[list[EventBase]] = [state, sacct_polls, pods, *gpu, trials]  # type: ignore[list-item]
        firsts = [lst[0].event_time for lst in eager if lst]
        window_start = min(firsts) if firsts else info.captured_at
        window.append(window_start)

        iters: list[list[EventBase] | _Peeked] = [lst for lst in eager if lst]
        unpacked = tempfile.TemporaryDirectory(prefix="rlhealth-capture-") if any(
            is_packed(f.name) for f in log_files) else None
        for group in groups:
            it = self._rotated_log_iter(group, legs_by_id, window_start, open_log,
                                        Path(unpacked.name) if unpacked is not None else None)
            first = next(it, None)
            if first is not None:
                iters.append(_Peeked(first, it))
        heads = [lst[0] if isinstance(lst, list) else lst.first for lst in iters]
        start = min((h.event_time for h in heads), default=info.captured_at)
        spec = self.job_spec(start)
        counts = self.stats.events
        counts["job_spec"] = 1
        yield spec
        try:
            for ev in heapq.merge(*iters, key=lambda e: e.event_time):
                counts[ev.kind] = counts.get(ev.kind, 0) + 1  # type: ignore[attr-defined]
                yield ev
        finally:
            if unpacked is not None:
                unpacked.cleanup()

    def _rotated_log_iter(self, group: list[tuple[Path, str]], legs_by_id: dict[str, int],
                          window_start: datetime, open_log: OpenLog | None,
                          unpack_dir: Path | None) -> Iterator[EventBase]:
        """One log's files, oldest rotation first, read as the one file they were: a rotated file's
        lines with no timestamp of their own continue from the time its predecessor ended."""
        info = self.info
        last: datetime | None = None
        for n, (f, rel) in enumerate(group):
            readable = f
            if unpack_dir is not None and is_packed(f.name):
                got = unpack_log(f, unpack_dir / f"{id(group)}-{n}-{f.name}",
                                 max_bytes=settings.load().max_decompressed_log_bytes)
                if got.problem is not None:
                    self._problem(rel, got.problem, "A", got.note)
                if not got.bytes_written:
                    continue
                readable = got.path
            fallback: Callable[[], datetime]
            if last is not None:
                fallback = functools.partial(_constant, last)
            else:
                mtime = self._mtime(f)
                # Lines with no time before them take the first timestamp after them, as in the one file
                # they were: a later rotation's.
                fallback = FirstStampAfter([g for g, _ in group[n + 1:]], info.captured_at,
                                           mtime if mtime <= info.captured_at else window_start)
            # the stream keeps the compressed file's name: evidence offsets count the unpacked bytes
            src = source_for(rel, cluster=info.cluster, shipper=SHIPPER, leg_index=legs_by_id)
            for ev in self._log_iter(readable, src, fallback, open_log, rel=rel):
                last = ev.event_time
                yield ev
            if readable is not f:
                readable.unlink(missing_ok=True)  # unpacked files are read once: free the disk now


    def _mtime(self, f: Path) -> datetime:
        """A log's mtime, read once per `events()` (a prefetched reader and the merge agree on it)."""
        got = self._mtimes.get(f)
        if got is None:
            try:
                got = datetime.fromtimestamp(f.stat().st_mtime, UTC)
            except OSError:
                got = self.info.captured_at
            self._mtimes[f] = got
        return got


def open_capture(path: Path | str, *, batch_lines: int = 500, prefilter: Classifier | None = None,
                 prefilter_now: datetime | None = None) -> Capture:
    """Open a capture directory. Raises `CaptureError` when it has no valid capture.json.

    `prefilter`: the classifier of the core the events go to; log batches then carry only the
    lines that core reads (the others are empty strings) and the core's state is the same;
    `prefilter_now` is the `now` that core will step them with, when it is not `captured_at`."""
    p = Path(path)
    info = read_capture_info(p)
    return Capture(p, info, batch_lines=batch_lines, prefilter=prefilter, prefilter_now=prefilter_now)


__all__ = ["Capture", "CaptureError", "CaptureInfo", "CaptureStats", "SourceProblem", "open_capture",
           "parse_state_line", "pod_snapshot_poll", "read_capture_info", "unsafe_reason"]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _constant(value: datetime) -> datetime:
    return value

