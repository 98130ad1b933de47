"""The contract of a live source beside the job folder (NVML, nvidia-smi, sacct, the pod watch, a state command).

A `LiveSource` has a `name` (what it reads, e.g. ``nvml``, ``sacct:48213``), a `poll()` that returns
the events it has now without blocking for long and never raises, and `counters` the shipper
exposes on its /metrics and in every heartbeat (Vector-style: received, sent, failed). The
shipper (`FolderShipper`) owns the rest of the contract: it drops events older than what was
delivered before a restart (per-stream watermarks in the checkpoint file), counts what was
delivered, and sends a heartbeat every tick listing the sources and their counters.

A source that cannot read (command missing, timeout, API down) counts a failure with a reason and
returns what it has (often nothing): a failing source is a visible problem, never a crash.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from rlhealth.schemas.common import EventBase
from rlhealth.schemas.events import SourceStat

MAX_ERROR_CHARS = 300


class RunResult(Protocol):
    returncode: int
    stdout: str
    stderr: str


Runner = Callable[[list[str]], RunResult]


def subprocess_runner(timeout_s: float = 30.0) -> Runner:
    """Run a command with a timeout (`subprocess.TimeoutExpired` past it), output as text."""
    def run(cmd: list[str]) -> RunResult:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)

    return run


@dataclass
class SourceCounters:
    """What one live source received, sent and failed (the shipper fills `sent` and `discarded`)."""

    received: int = 0  # events the source produced
    sent: int = 0  # events delivered (acknowledged by the broker or spooled)
    discarded: int = 0  # events not sent: delivered before a restart already, or the delivery failed
    failed: int = 0  # polls that failed
    errors: dict[str, int] = field(default_factory=dict)  # reason -> failures
    last_error: str | None = None

    def fail(self, reason: str, text: str) -> None:
        self.failed += 1
        self.errors[reason] = self.errors.get(reason, 0) + 1
        self.last_error = text[:MAX_ERROR_CHARS]


class LiveSource(Protocol):
    name: str
    counters: SourceCounters

    def poll(self) -> list[EventBase]:
        """The events this source has now; never raises (a failure is counted)."""
        ...

    def close(self) -> None:
        ...


def run_command(runner: Runner, argv: list[str], counters: SourceCounters) -> str | None:
    """Run `argv`; its stdout, or None with the failure counted (missing, timeout, status)."""
    try:
        r = runner(argv)
    except FileNotFoundError:
        counters.fail("command_not_found", f"{argv[0]}: command not found")
        return None
    except subprocess.TimeoutExpired:
        counters.fail("timeout", f"{argv[0]} timed out")
        return None
    except OSError as exc:
        counters.fail("os_error", f"{argv[0]}: {exc}")
        return None
    if r.returncode != 0:
        err = " ".join((r.stderr or "").split())[-MAX_ERROR_CHARS:]
        counters.fail("exit_status", f"{argv[0]} exited with status {r.returncode}: {err}")
        return None
    return r.stdout or ""


class PollSource:
    """A callable returning one event or None (a state command, a test's poll) as a `LiveSource`."""

    def __init__(self, name: str, poll: Callable[[], EventBase | None],
                 errors: list[str] | None = None) -> None:
        self.name = name
        self._poll = poll
        self.counters = SourceCounters()
        self._errors = errors  # the callable's own error list, read to count its failures
        self._seen_errors = len(errors) if errors is not None else 0

    def poll(self) -> list[EventBase]:
        try:
            event = self._poll()
        except Exception as exc:  # noqa: BLE001 - a failing source is counted, the shipper goes on
            self.counters.fail(type(exc).__name__, f"{type(exc).__name__}: {exc}")
            return []
        if self._errors is not None and len(self._errors) > self._seen_errors:
            for text in self._errors[self._seen_errors:]:
                self.counters.fail("poll_error", text)
            self._seen_errors = len(self._errors)
        if event is None:
            return []
        self.counters.received += 1
        return [event]

    def close(self) -> None:
        pass


def source_stat(source: LiveSource) -> SourceStat:
    c = source.counters
    return SourceStat(name=source.name[:200], received=c.received, sent=c.sent, failed=c.failed,
                      last_error=c.last_error)


__all__ = ["LiveSource", "PollSource", "RunResult", "Runner", "SourceCounters", "run_command", "source_stat",
           "subprocess_runner"]
