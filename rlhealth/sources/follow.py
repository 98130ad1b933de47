"""Follow a growing capture (or a live folder laid out the same way) for `rlhealth watch`.

    f = CaptureFollower(path)           # capture.json, or job_id=... for a bare live folder
    events = f.poll()                   # first call: everything so far; later: only what is new

What "new" means per source:

* logs/** : lines appended since the last poll (per-file byte offsets; a new inode at the path
  = rotation, a size below our offset = truncation: both restart the file from 0 and are noted
  in `problems`); a partial last line is held until its newline arrives. Rotated or compressed
  files (`x.log.1`, `x.log.2.gz`) present at the first poll are history and are read once
  (compressed ones unpacked); one that appears later is a rotation of a log being followed, whose
  lines were read under its live name, and is not read again;
* gpu/<host>.csv : rows appended; the poll being assembled is emitted when the next poll starts
  or when a `poll()` finds no new rows for that host; compute apps from `<host>.apps.csv` are
  attached to the emitted poll nearest in time;
* state.jsonl : new complete lines; pods/*.json : new snapshot files; sacct.txt : re-read when
  it changes, only state polls not emitted before;
* trace_jobs/ : new trial dirs (`started`), new result.json (`completed`), dirs that disappeared
  (`vanished`, at the poll time) — see `harbor.TrialDirWatcher`;
* the JobSpec is emitted on the first poll and again whenever job.json or config/*.yaml change.

Events of one poll are returned sorted by event time (JobSpec first). Timestamp-less log lines
read by a later poll are stamped with the poll time (they just appeared).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rlhealth import settings
from rlhealth.agents.signatures import Classifier
from rlhealth.schemas.common import EventBase, Source
from rlhealth.schemas.events import GpuPoll, JobStatePoll
from rlhealth.sources import kubectl, slurm
from rlhealth.sources.capture import (
    SHIPPER,
    Capture,
    CaptureError,
    CaptureInfo,
    SourceProblem,
    parse_state_line,
    pod_snapshot_poll,
    read_capture_info,
    unsafe_reason,
)
from rlhealth.sources.compressed import is_packed, rotation_groups, unpack_log, unrotated_name
from rlhealth.sources.harbor import TrialDirWatcher
from rlhealth.sources.logfiles import FirstStampAfter, LogReader, TailReader, slurm_leg_order, source_for
from rlhealth.sources.nvidia_smi import AppGroup, GpuCsvParser, attach_apps, parse_compute_apps_csv


def _decode_lines(tail: TailReader) -> list[str]:
    return [b.decode("utf-8", errors="replace") for _no, _off, b in tail.lines(final=False)]


class _GpuHost:
    def __init__(self, path: Path, parser: GpuCsvParser) -> None:
        self.tail = TailReader(path)
        self.parser = parser
        self.apps_tail = TailReader(path.with_name(path.name[: -len(".csv")] + ".apps.csv"))
        self.apps: list[AppGroup] = []


class CaptureFollower:
    def __init__(
        self,
        path: Path | str,
        *,
        batch_lines: int = 500,
        clock: Callable[[], datetime] | None = None,
        job_id: str | None = None,
        cluster: str | None = None,
        scheduler: str = "other",
        prefilter: Classifier | None = None,
        logs: bool = True,
    ) -> None:
        self.path = Path(path)
        self.follow_logs = logs  # False: the caller reads logs/ itself (the shipper's checkpointed reader)
        # the in-process core's classifier (`watch`): log lines that core will not read stay empty;
        # a shipper sends every line and passes none
        self.prefilter = prefilter
        self.clock = clock or (lambda: datetime.now(UTC))
        self.batch_lines = batch_lines
        if (self.path / "capture.json").exists() or job_id is None:
            self.info = read_capture_info(self.path)  # raises CaptureError
        else:
            if not self.path.is_dir():
                raise CaptureError(f"{self.path}: not a directory")
            self.info = CaptureInfo(job_id=job_id, cluster=cluster, scheduler=scheduler, captured_at=self.clock())
        self._cap = Capture(self.path, self.info, batch_lines=batch_lines)
        self.problems: list[SourceProblem] = list(self._cap.problems)
        self._logs: dict[str, LogReader] = {}
        self._gpu: dict[str, _GpuHost] = {}
        self._state_tail = TailReader(self.path / "state.jsonl")
        self._timeline: list[JobStatePoll] = []
        self._pods_seen: set[str] = set()
        self._sacct_sig: tuple[int, int] | None = None
        self._sacct_seen: set[tuple] = set()
        self._legs: dict[str, int] = {}
        self._spec_sig: tuple | None = None
        self._trials: TrialDirWatcher | None = None
        self.polls = 0
        # A static capture (`watch --clock capture`): what is on disk is complete, e.g. the last GPU
        # poll of a CSV is taken at once instead of when the next poll starts.
        self.static = False
        self._cut_noted: set[str] = set()
        self._listed_logs = False
        self._rotations_skipped: set[str] = set()  # rotated or compressed files not followed (`_log_batches`)

    # -- helpers ----------------------------------------------------------------------------
    def _source(self, rel: str, **kw: Any) -> Source:
        return Source(cluster=self.info.cluster, stream=rel, shipper=SHIPPER, **kw)

    def _note(self, path: str, problem: str, gate: str | None, note: str, count: int = 1) -> None:
        self.problems.append(SourceProblem(path, problem, gate, note, count))  # type: ignore[arg-type]

    @staticmethod
    def _sig(paths: list[Path]) -> tuple:
        out = []
        for p in paths:
            try:
                st = p.stat()
                out.append((str(p), st.st_mtime_ns, st.st_size))
            except OSError:
                pass
        return tuple(out)

    # -- sources ----------------------------------------------------------------------------
    def _spec(self, now: datetime) -> list[EventBase]:
        sig = self._sig([self.path / "job.json", *self._cap.config_files()])
        if sig == self._spec_sig:
            return []
        self._spec_sig = sig
        before = len(self._cap.problems)
        spec = self._cap.job_spec(now)
        self.problems.extend(self._cap.problems[before:])
        return [spec]

    def _state(self) -> list[EventBase]:
        out: list[EventBase] = []
        if not self._state_tail.path.exists():
            return out
        what = self._state_tail.check()
        if what:
            self._note("state.jsonl", "truncated", "A", f"state.jsonl {what}; re-read from the start")
        src = self._source("state.jsonl")
        bad = 0
        for line in _decode_lines(self._state_tail):
            if not line.strip():
                continue
            try:
                p = parse_state_line(line, job_id=self.info.job_id, source=src, scheduler=self.info.scheduler)
            except (ValueError, ValidationError):
                bad += 1
                continue
            self._timeline.append(p)
            out.append(p)
        if bad:
            self._note("state.jsonl", "parse_error", "A", "state lines skipped (bad JSON or fields)", bad)
        self._timeline.sort(key=lambda e: e.event_time)
        return out

    def _sacct(self, now: datetime) -> list[EventBase]:
        sp = self.path / "sacct.txt"
        sig = self._sig([sp])
        if not sig or sig == self._sacct_sig:
            return []
        self._sacct_sig = sig
        try:
            if unsafe_reason(sp, self.path) is not None:
                return []
            legs = slurm.parse_sacct(sp.read_bytes().decode("utf-8", errors="replace")).legs
        except OSError:
            return []
        self._legs = slurm.leg_index(slurm.chain_legs(legs)) if legs else {}
        out: list[EventBase] = []
        for p in slurm.sacct_state_polls(legs, job_id=self.info.job_id, captured_at=now,
                                         source=self._source("sacct.txt")):
            key = (p.event_time, p.state, p.attempt, len(p.attempts))
            if key not in self._sacct_seen:
                self._sacct_seen.add(key)
                out.append(p)
                if not (self.path / "state.jsonl").exists():
                    self._timeline.append(p)
        self._timeline.sort(key=lambda e: e.event_time)
        return out

    def _pods(self, now: datetime) -> list[EventBase]:
        out: list[EventBase] = []
        for f in self._cap.pod_files():
            rel = f.relative_to(self.path).as_posix()
            if rel in self._pods_seen:
                continue
            try:
                raw = f.read_bytes()
                pods = kubectl.load_pods_json(raw)
            except (OSError, ValueError, ValidationError):
                continue  # maybe mid-write: try again next poll
            self._pods_seen.add(rel)
            t = kubectl.snapshot_time(f) or now
            out.append(pod_snapshot_poll(pods, t, self._timeline, job_id=self.info.job_id, source=self._source(rel)))
        return out

    def _gpu_polls(self) -> list[EventBase]:
        out: list[EventBase] = []
        for f in self._cap.gpu_files():
            rel = f.relative_to(self.path).as_posix()
            h = self._gpu.get(rel)
            host = f.name[: -len(".csv")]
            if h is None:
                h = _GpuHost(f, GpuCsvParser(job_id=self.info.job_id, host=host, source=self._source(rel, host=host)))
                self._gpu[rel] = h
            if h.tail.check():
                self._note(rel, "truncated", "B", "GPU CSV rotated or truncated; re-read from the start")
            bad_before = h.parser.bad_rows
            lines = _decode_lines(h.tail)
            polls: list[GpuPoll] = h.parser.feed(lines)
            if (not lines or self.static) and h.parser.pending:
                polls.extend(h.parser.flush())  # a static capture's last poll is complete now
            if h.parser.bad_rows > bad_before:
                self._note(rel, "parse_error", "B", "GPU rows skipped", h.parser.bad_rows - bad_before)
            if h.apps_tail.path.exists():
                h.apps_tail.check()
                atext = "\n".join(_decode_lines(h.apps_tail))
                if atext:
                    h.apps.extend(parse_compute_apps_csv(atext).groups)
            if polls and h.apps:
                polls = attach_apps(sorted(polls, key=lambda p: p.event_time), h.apps)
                last = max(p.event_time for p in polls)
                h.apps = [g for g in h.apps if g.time is not None and g.time > last]
            out.extend(polls)
        return out

    def _log_batches(self, now: datetime, window_start: datetime | None = None) -> list[EventBase]:
        out: list[EventBase] = []
        files = self._cap.log_files()
        rels = [f.relative_to(self.path).as_posix() for f in files]
        legs = self._legs or slurm_leg_order(rels)
        first_listing = not self._listed_logs
        self._listed_logs = True
        pairs = list(zip(files, rels))
        later: dict[str, list[Path]] = {}  # a rotated file's newer rotations (its unstamped head's time)
        if first_listing:
            # each log's rotations oldest first, and a rotated file's unstamped lines continue from the
            # time its predecessor ended, as `Capture.events` reads them
            groups = rotation_groups(pairs)
            later = {rel: [g for g, _ in group[n + 1:]] for group in groups for n, (_, rel) in enumerate(group)}
            pairs = [pr for group in groups for pr in group]
        ended: dict[tuple[Path, str], datetime] = {}  # per log (folder, unrotated name): its last event time
        for f, rel in pairs:
            if rel in self._rotations_skipped:
                continue
            log_key = (f.parent, unrotated_name(f.name))
            before = len(out)
            r = self._logs.get(rel)
            if is_packed(f.name) or f.name != unrotated_name(f.name):
                if not first_listing:
                    # history read at the first poll does not grow; a rotation that appears (or a
                    # rotated name that now holds the live file's old lines) was read under the live name
                    self._rotations_skipped.add(rel)
                    continue
                if is_packed(f.name):
                    # history from before the first poll, compressed: read once, whole
                    self._rotations_skipped.add(rel)
                    out.extend(self._compressed_history(f, rel, legs, now, window_start, ended.get(log_key),
                                                        later.get(rel, [])))
                    if len(out) > before:
                        ended[log_key] = out[-1].event_time
                    continue
            if r is None:
                src = source_for(rel, cluster=self.info.cluster, shipper=SHIPPER, leg_index=legs)
                r = LogReader(f, job_id=self.info.job_id, source=src, batch_lines=self.batch_lines, lookahead=False,
                              prefilter=self.prefilter)
                self._logs[rel] = r
            what = r.check()
            if what:
                self._note(rel, "truncated", "A", f"log {what}; re-read from the start")
            try:
                mtime = datetime.fromtimestamp(os.stat(f).st_mtime, UTC)
            except OSError:
                continue
            # as `Capture.events`: a file modified after "now" (a static capture checked out later) has
            # its unstamped lines dated at the start of the other sources' window, not at "now"
            fb = ended.get(log_key) or (mtime if mtime <= now else (window_start or now))
            bad_before = r.invalid_utf8_lines
            try:
                out.extend(r.read(final=self.static, ref_time=now, fallback_time=fb))
                if len(out) > before:
                    ended[log_key] = out[-1].event_time
                if self.static and r.tail.missing_final_newline and rel not in self._cut_noted:
                    self._cut_noted.add(rel)
                    gate = "B" if f.name.startswith("dmesg") else "A"
                    self._note(rel, "truncated", gate, "last line has no newline (file cut mid-line)")
            except OSError as exc:
                self._note(rel, "unreadable", "A", str(exc)[:200])
            if r.invalid_utf8_lines > bad_before:
                self._note(rel, "invalid_utf8", "A", "lines with invalid UTF-8", r.invalid_utf8_lines - bad_before)
        return out

    def _compressed_history(self, f: Path, rel: str, legs: dict[str, int], now: datetime,
                            window_start: datetime | None, after: datetime | None = None,
                            later: list[Path] | None = None) -> list[EventBase]:
        """A compressed log present at the first poll: unpacked and read once, as a capture reads it."""
        with tempfile.TemporaryDirectory(prefix="rlhealth-follow-") as tmp:
            got = unpack_log(f, Path(tmp) / f.name, max_bytes=settings.load().max_decompressed_log_bytes)
            if got.problem is not None:
                self._note(rel, got.problem, "A", got.note)
            if not got.bytes_written:
                return []
            src = source_for(rel, cluster=self.info.cluster, shipper=SHIPPER, leg_index=legs)
            reader = LogReader(got.path, job_id=self.info.job_id, source=src, batch_lines=self.batch_lines,
                               prefilter=self.prefilter)
            try:
                mtime = datetime.fromtimestamp(os.stat(f).st_mtime, UTC)
            except OSError:
                mtime = now
            default = mtime if mtime <= now else (window_start or now)
            # as `Capture.events`: an unstamped head takes the first timestamp of the newer rotations
            fb = after or FirstStampAfter(later or [], now, default)
            return list(reader.read(final=True, ref_time=now, fallback_time=fb))

    def _trial_events(self) -> list[EventBase]:
        root = self.path / "trace_jobs"
        if self._trials is None:
            if not root.is_dir():
                return []
            self._trials = TrialDirWatcher(root, job_id=self.info.job_id, clock=self.clock,
                                           source=Source(cluster=self.info.cluster, shipper=SHIPPER))
        before = len(self._trials.problems)
        evs: list[EventBase] = list(self._trials.poll())
        for rel, problem, note in self._trials.problems[before:]:
            self._note(rel, problem, "C", note)
        return evs

    # -- public -----------------------------------------------------------------------------
    def poll(self) -> list[EventBase]:
        """Events that appeared since the previous call (everything, on the first call)."""
        now = self.clock()
        self.polls += 1
        spec = self._spec(now)
        events: list[EventBase] = []
        events.extend(self._state())
        events.extend(self._sacct(now))
        events.extend(self._pods(now))
        events.extend(self._gpu_polls())
        events.extend(self._trial_events())
        window_start = min((e.event_time for e in events), default=None)
        if self.follow_logs:
            events.extend(self._log_batches(now, window_start))
        events.sort(key=lambda e: e.event_time)
        if spec and self.polls == 1 and events:
            spec = [spec[0].model_copy(update={"event_time": events[0].event_time})]
        return spec + events


__all__ = ["CaptureFollower"]
