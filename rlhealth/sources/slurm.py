"""SLURM: `sacct -P -X --format=JobID,JobName,State,Start,End,ExitCode,Restarts` -> legs and state polls.

A chained SLURM job is a sequence of *legs* (separate job ids, usually `afterany` dependencies):
every leg that ended is an earlier attempt, the last one is the current state. Conventions:

* only allocation rows are legs (`48213`, `48223_[1-4]`, `48223_2`); step rows (`48213.batch`,
  `48213.0`) are ignored (`-X` omits them anyway); legs are ordered by job id (numeric);
* times are `%FT%T` in the cluster's local time, read as UTC (pass `tz` otherwise);
  `Unknown`/`None`/empty -> None;
* `ExitCode` is `status:signal`; `exit_code` = status, or 128+signal when status is 0 and a
  signal is set (`0:15` -> 143, `0:125` -> 253, matching what a shell would report);
* terminal_state is the lower-cased first word of State (`timeout`, `failed`, `cancelled`,
  `out_of_memory`, `node_fail`, `preempted`, `completed`, ...); a TIMEOUT leg followed by another
  leg is a chain restart, not a failure, and is recorded as such (terminal_state "timeout");
* job state: RUNNING/COMPLETING -> running, PENDING/REQUEUED/CONFIGURING -> pending,
  COMPLETED -> succeeded, FAILED/OUT_OF_MEMORY/NODE_FAIL/BOOT_FAIL -> failed,
  CANCELLED/TIMEOUT/PREEMPTED/DEADLINE -> killed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from rlhealth.schemas.common import Source
from rlhealth.schemas.events import AttemptRecord, JobState, JobStatePoll

_LEG_ID_RE = re.compile(r"^(\d+)(?:_(\d+|\[[^\]]*\]))?(?:\+\d+)?$")

_STATE_MAP: dict[str, JobState] = {
    "RUNNING": "running",
    "COMPLETING": "running",
    "SUSPENDED": "running",
    "STAGE_OUT": "running",
    "SIGNALING": "running",
    "PENDING": "pending",
    "REQUEUED": "pending",
    "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending",
    "CONFIGURING": "pending",
    "RESIZING": "running",
    "COMPLETED": "succeeded",
    "FAILED": "failed",
    "OUT_OF_MEMORY": "failed",
    "NODE_FAIL": "failed",
    "BOOT_FAIL": "failed",
    "SPECIAL_EXIT": "failed",
    "CANCELLED": "killed",
    "TIMEOUT": "killed",
    "PREEMPTED": "killed",
    "DEADLINE": "killed",
    "REVOKED": "killed",
}
_ACTIVE = {"running", "pending"}
_FAILURES = {"failed", "out_of_memory", "boot_fail", "special_exit", "deadline"}


@dataclass(frozen=True)
class SlurmLeg:
    job_id: str
    name: str | None
    state: str  # raw first word, upper case: RUNNING, TIMEOUT, CANCELLED, ...
    raw_state: str
    start: datetime | None
    end: datetime | None
    exit_status: int | None
    exit_signal: int | None
    restarts: int | None

    @property
    def sort_key(self) -> tuple[int, int]:
        m = _LEG_ID_RE.match(self.job_id)
        if m is None:
            return (1 << 62, 0)
        task = m.group(2)
        return (int(m.group(1)), int(task) if task and task.isdigit() else -1)

    @property
    def job_state(self) -> JobState:
        return _STATE_MAP.get(self.state, "unknown")

    @property
    def terminal(self) -> bool:
        js = self.job_state
        return js not in _ACTIVE and (js != "unknown" or self.end is not None)

    @property
    def exit_code(self) -> int | None:
        if self.exit_status is None:
            return None
        if self.exit_status == 0 and self.exit_signal:
            return 128 + self.exit_signal
        return self.exit_status

    def attempt_record(self, attempt: int) -> AttemptRecord:
        error = None
        if self.state not in ("COMPLETED",):
            error = self.raw_state
            if self.exit_signal:
                error += f" (signal {self.exit_signal})"
            elif self.exit_status:
                error += f" (exit {self.exit_status})"
        return AttemptRecord(
            attempt=attempt,
            terminal_state=self.state.lower(),
            exit_code=self.exit_code,
            started_at=self.start,
            ended_at=self.end,
            error=error,
        )


def _time(text: str, tz: tzinfo) -> datetime | None:
    t = text.strip()
    if not t or t in ("Unknown", "None", "INVALID", "N/A"):
        return None
    try:
        dt = datetime.fromisoformat(t)
    except ValueError:
        return None
    return dt.replace(tzinfo=tz).astimezone(UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def _exit(text: str) -> tuple[int | None, int | None]:
    a, _, b = text.strip().partition(":")
    try:
        return int(a), int(b) if b else 0
    except ValueError:
        return None, None


@dataclass
class SacctParse:
    legs: list[SlurmLeg]
    bad_lines: int = 0


def parse_sacct(text: str, tz: tzinfo = UTC) -> SacctParse:
    """Parse `sacct -P` / `-p` output (header line required). Legs come back sorted by job id."""
    header: list[str] | None = None
    legs: list[SlurmLeg] = []
    bad = 0
    for line in text.splitlines():
        s = line.rstrip("\r\n")
        if not s.strip() or s.lstrip().startswith("#"):
            continue
        if "|" not in s:
            bad += 1
            continue
        cells = s.split("|")
        if cells and cells[-1] == "" and header is not None and len(cells) == len(header) + 1:
            cells = cells[:-1]  # `-p` prints a trailing "|"
        if header is None or cells[0].strip() == "JobID":
            header = [c.strip() for c in cells]
            if header and header[-1] == "":
                header = header[:-1]
            continue
        if len(cells) != len(header):
            bad += 1
            continue
        row = dict(zip(header, cells))
        jid = row.get("JobID", "").strip()
        if "." in jid:
            continue  # job step
        if not _LEG_ID_RE.match(jid):
            bad += 1
            continue
        raw_state = row.get("State", "").strip()
        status, signal = _exit(row.get("ExitCode", ""))
        restarts = row.get("Restarts", "").strip()
        legs.append(
            SlurmLeg(
                job_id=jid,
                name=row.get("JobName", "").strip() or None,
                state=(raw_state.split() or ["UNKNOWN"])[0].upper(),
                raw_state=raw_state,
                start=_time(row.get("Start", ""), tz),
                end=_time(row.get("End", ""), tz),
                exit_status=status,
                exit_signal=signal,
                restarts=int(restarts) if restarts.isdigit() else None,
            )
        )
    legs.sort(key=lambda leg: leg.sort_key)
    return SacctParse(legs=legs, bad_lines=bad)


def leg_index(legs: list[SlurmLeg]) -> dict[str, int]:
    """job id -> attempt index (position in job-id order)."""
    return {leg.job_id: i for i, leg in enumerate(legs)}


def chain_legs(legs: list[SlurmLeg]) -> list[SlurmLeg]:
    """The legs that count as attempts: every leg up to the last one that started or ended.

    Pending legs after the current one are future dependencies of the chain (`afterany`), not
    attempts yet. When no leg has started, the first pending leg is the (pending) attempt 0.
    """
    last = -1
    for i, leg in enumerate(legs):
        if leg.start is not None or leg.terminal:
            last = i
    if last < 0:
        return legs[:1]
    return legs[: last + 1]


def sacct_state_polls(
    legs: list[SlurmLeg],
    *,
    job_id: str,
    captured_at: datetime,
    source: Source | None = None,
    max_retries: int | None = None,
) -> list[JobStatePoll]:
    """State polls replaying the chain (see `chain_legs`): one when each leg starts, one when it ends.

    After a leg ends and another follows, the job is "pending" on the next attempt; after the
    last leg ends the state is that leg's mapped state. A lone pending leg is reported at
    `captured_at`. `attempts` holds every ended leg before the poll. Sorted by event_time.
    """
    src = source or Source(stream="sacct.txt")
    chain = chain_legs(legs)
    polls: list[JobStatePoll] = []
    n = len(chain)

    def _poll(t: datetime, state: JobState, attempt: int, ended: int) -> JobStatePoll:
        records = [chain[k].attempt_record(k) for k in range(ended) if chain[k].terminal]
        return JobStatePoll(
            job_id=job_id,
            event_time=t,
            source=src,
            state=state,
            scheduler="slurm",
            attempt=attempt,
            max_retries=max_retries,
            attempts=records[-64:],
            failure_count=sum(1 for r in records if r.terminal_state in _FAILURES),
            preemption_count=sum(1 for r in records if r.terminal_state in ("preempted", "node_fail")),
        )

    for i, leg in enumerate(chain):
        if leg.start is not None:
            polls.append(_poll(leg.start, "running", i, i))
        if leg.terminal:
            t = leg.end or leg.start or captured_at
            if i + 1 < n:
                polls.append(_poll(t, "pending", i + 1, i + 1))
            else:
                polls.append(_poll(t, leg.job_state if leg.job_state != "unknown" else "failed", i, i + 1))
        elif leg.start is None:
            polls.append(_poll(captured_at, leg.job_state, i, i))
    # sacct.txt itself is the scheduler's view at capture time: a running leg is running *now*,
    # not only when it started (otherwise a healthy job's state poll reads hours stale).
    if polls and chain and captured_at > polls[-1].event_time:
        last = polls[-1]
        polls.append(last.model_copy(update={"event_time": captured_at}))
    polls.sort(key=lambda p: p.event_time)
    return polls


__all__ = ["SacctParse", "SlurmLeg", "chain_legs", "leg_index", "parse_sacct", "sacct_state_polls"]
