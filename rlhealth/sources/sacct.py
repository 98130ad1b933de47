"""A SLURM job's state, live: `sacct` (or `squeue` when accounting is unavailable) -> `JobStatePoll`s.

`rlhealth ship --slurm-job-id ID` (on the batch host, e.g. from a prolog or the sbatch script)
runs every interval, with a timeout::

    sacct -P -X -j ID[,ID...] --format=JobID,JobName,State,Start,End,ExitCode

and reads it with `slurm.parse_sacct` / `slurm.sacct_state_polls`, the parser of a capture's
sacct.txt, so live and offline views agree: one poll when each leg starts and ends, and the current
state at every run. Only polls newer than the last one sent leave the poller (the shipper's
restart watermark does the same across restarts).

When sacct fails (not installed, accounting storage disabled, slurmdbd down, timeout), `squeue`
is asked instead (`-h -j IDs -o %i|%j|%T|%S`): it knows jobs still in the queue only, with no exit
code, so it is a fallback, not the source. Every failure is counted per reason
(`counters.errors`) and shows in the heartbeat; a poll that gets nothing returns nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, tzinfo

from rlhealth.schemas.common import EventBase, Source
from rlhealth.sources.live import Runner, SourceCounters, run_command, subprocess_runner
from rlhealth.sources.slurm import SlurmLeg, parse_sacct, sacct_state_polls

SACCT_FIELDS = "JobID,JobName,State,Start,End,ExitCode"
SQUEUE_FORMAT = "%i|%j|%T|%S"  # job id, name, long state, start time (N/A while pending)


def sacct_argv(job_ids: list[str]) -> list[str]:
    return ["sacct", "-P", "-X", "-j", ",".join(job_ids), f"--format={SACCT_FIELDS}"]


def squeue_argv(job_ids: list[str]) -> list[str]:
    return ["squeue", "-h", "-j", ",".join(job_ids), "-o", SQUEUE_FORMAT]


def squeue_as_sacct(text: str) -> str:
    """`squeue -h -o %i|%j|%T|%S` lines -> `sacct -P` text (no end time, no exit code yet)."""
    rows = [SACCT_FIELDS.replace(",", "|")]
    for line in text.splitlines():
        cells = line.strip().split("|")
        if len(cells) != 4 or not cells[0]:
            continue
        jid, name, state, start = cells
        rows.append(f"{jid}|{name}|{state}|{start}|Unknown|0:0")
    return "\n".join(rows) + "\n"


class SacctPoller:
    """`LiveSource` of one SLURM job (or chain of legs): state polls from sacct, squeue as fallback."""

    def __init__(self, job_ids: list[str], *, job_id: str, runner: Runner | None = None,
                 clock: Callable[[], datetime] | None = None, shipper: str | None = None,
                 timeout_s: float = 30.0, tz: tzinfo = UTC, squeue: bool = True,
                 max_retries: int | None = None, cluster: str | None = None) -> None:
        ids = [j.strip() for part in job_ids for j in part.split(",") if j.strip()]
        if not ids:
            raise ValueError("no SLURM job id")
        self.job_ids = ids
        self.job_id = job_id
        self.runner = runner or subprocess_runner(timeout_s)
        self.clock = clock or (lambda: datetime.now(UTC))
        self.tz = tz
        self.use_squeue = squeue
        self.max_retries = max_retries
        self.name = f"sacct:{','.join(ids)}"[:200]
        self.source = Source(cluster=cluster, stream=self.name, shipper=shipper)
        self.counters = SourceCounters()
        self.bad_lines = 0
        self.via = "sacct"  # which command gave the last poll
        self._last: datetime | None = None

    def _legs(self, text: str | None, via: str) -> list[SlurmLeg]:
        if text is None:
            return []
        parsed = parse_sacct(text, self.tz)
        if parsed.bad_lines:
            self.bad_lines += parsed.bad_lines
            self.counters.errors["bad_line"] = self.counters.errors.get("bad_line", 0) + parsed.bad_lines
        if not parsed.legs:  # ran, printed no row: accounting does not know the job (yet), or it left the queue
            self.counters.fail("no_record", f"{via} has no record of job {','.join(self.job_ids)}")
        return parsed.legs

    def poll(self) -> list[EventBase]:
        now = self.clock()
        legs = self._legs(run_command(self.runner, sacct_argv(self.job_ids), self.counters), "sacct")
        self.via = "sacct"
        if not legs and self.use_squeue:
            queued = run_command(self.runner, squeue_argv(self.job_ids), self.counters)
            legs = self._legs(squeue_as_sacct(queued) if queued is not None else None, "squeue")
            self.via = "squeue"
        if not legs:
            return []
        polls = sacct_state_polls(legs, job_id=self.job_id, captured_at=now, source=self.source,
                                  max_retries=self.max_retries)
        new = [p for p in polls if self._last is None or p.event_time > self._last]
        if new:
            self._last = new[-1].event_time
        self.counters.received += len(new)
        return list(new)

    def close(self) -> None:
        pass


__all__ = ["SACCT_FIELDS", "SacctPoller", "sacct_argv", "squeue_argv", "squeue_as_sacct"]
