"""A job's scheduler state from any command that prints JSON (`rlhealth ship --state-command CMD`).

The command runs once per shipper tick and prints one object in the shape of a `state.jsonl` line
(`{"state": "running", "pods": 8, "attempt": 1, ...}`, see `capture.parse_state_line`); a missing
`ts` is the time it ran. A failure (exit status, timeout, bad JSON) gives no poll and a note: the
core then sees the scheduler as silent, never as healthy.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime

import orjson
from pydantic import ValidationError

from rlhealth.schemas.common import Source
from rlhealth.schemas.events import JobStatePoll
from rlhealth.sources.capture import parse_state_line
from rlhealth.sources.nvidia_smi import Runner, subprocess_runner


class StateCommandPoller:
    def __init__(self, command: str, *, job_id: str, runner: Runner | None = None,
                 clock: Callable[[], datetime] | None = None, shipper: str | None = None,
                 scheduler: str | None = None) -> None:
        self.argv = shlex.split(command)
        if not self.argv:
            raise ValueError("empty --state-command")
        self.job_id = job_id
        self.runner = runner or subprocess_runner(timeout_s=30.0)
        self.clock = clock or (lambda: datetime.now(UTC))
        self.source = Source(stream="state-command", shipper=shipper)
        self.scheduler = scheduler
        self.errors: list[str] = []

    def poll(self) -> JobStatePoll | None:
        now = self.clock()
        try:
            r = self.runner(self.argv)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.errors.append(f"{self.argv[0]}: {exc}"[:300])
            return None
        if r.returncode != 0:
            self.errors.append(f"{self.argv[0]} exited with status {r.returncode}: {(r.stderr or '')[-200:]}")
            return None
        text = (r.stdout or "").strip()
        try:
            obj = orjson.loads(text)
            if not isinstance(obj, dict):
                raise ValueError("the command must print one JSON object")
            obj.setdefault("ts", now.isoformat())
            return parse_state_line(orjson.dumps(obj), job_id=self.job_id, source=self.source,
                                    scheduler=self.scheduler)
        except (ValueError, ValidationError) as exc:
            self.errors.append(f"{self.argv[0]}: bad output: {str(exc)[:200]}")
            return None


__all__ = ["StateCommandPoller"]
