"""The live SLURM source: fake `sacct`/`squeue` executables on PATH print recorded real-format output.

The sacct text is the `-P` layout of shared/reference/examples/logs/slurm_sacct.txt (SchedMD's
print_fields.c: `|` between fields, no trailing `|`; times `%FT%T`; `Unknown` for unset times;
ExitCode `status:signal`); with `-X` only allocation rows are printed. The squeue lines are what
`squeue -h -o '%i|%j|%T|%S'` prints (long state names, `N/A` for a pending job's start).
"""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rlhealth.schemas import JobStatePoll, ShipperHeartbeat
from rlhealth.sources.live import subprocess_runner
from rlhealth.sources.sacct import SACCT_FIELDS, SacctPoller
from rlhealth.sources.shipper import FolderShipper

T0 = datetime(2025, 11, 29, 9, 0, tzinfo=UTC)
HEADER = "JobID|JobName|State|Start|End|ExitCode"
# a two-leg chain (`--dependency=afterany`): the first leg runs, the second waits
RUNNING = f"""{HEADER}
48213|grpo-7b|RUNNING|2025-11-29T08:00:04|Unknown|0:0
48214|grpo-7b|PENDING|Unknown|Unknown|0:0
"""
# the first leg hit its time limit, the second one started
RESTARTED = f"""{HEADER}
48213|grpo-7b|TIMEOUT|2025-11-29T08:00:04|2025-11-29T09:00:19|0:0
48214|grpo-7b|RUNNING|2025-11-29T09:00:31|Unknown|0:0
"""
# the second leg died on an OOM (SIG_OOM: 0:125)
ENDED = f"""{HEADER}
48213|grpo-7b|TIMEOUT|2025-11-29T08:00:04|2025-11-29T09:00:19|0:0
48214|grpo-7b|OUT_OF_MEMORY|2025-11-29T09:00:31|2025-11-29T09:42:09|0:125
"""
SQUEUE = "48213|grpo-7b|RUNNING|2025-11-29T08:00:04\n48214|grpo-7b|PENDING|N/A\n"

FAKE = """#!/bin/sh
# a recorded {name}: logs its arguments, prints {name}.out, exits with {name}.rc, sleeps {name}.sleep seconds
d="$(dirname "$0")"
echo "$*" >> "$d/{name}.args"
[ -f "$d/{name}.sleep" ] && sleep "$(cat "$d/{name}.sleep")"
[ -f "$d/{name}.err" ] && cat "$d/{name}.err" >&2
[ -f "$d/{name}.out" ] && cat "$d/{name}.out"
exit "$(cat "$d/{name}.rc" 2>/dev/null || echo 0)"
"""


@pytest.fixture()
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sacct", "squeue"):
        exe = bin_dir / name
        exe.write_text(FAKE.format(name=name))
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    return bin_dir


def args(bin_dir: Path, name: str) -> list[str]:
    p = bin_dir / f"{name}.args"
    return p.read_text().splitlines() if p.exists() else []


def test_sacct_polls_follow_the_chain_and_send_only_what_is_new(fake_bin: Path) -> None:
    now = [T0]
    p = SacctPoller(["48213,48214"], job_id="grpo-7b", clock=lambda: now[0])
    (fake_bin / "sacct.out").write_text(RUNNING)
    first = p.poll()
    assert args(fake_bin, "sacct") == [f"-P -X -j 48213,48214 --format={SACCT_FIELDS}"]
    assert [(e.state, e.attempt, e.event_time) for e in first] == [
        ("running", 0, datetime(2025, 11, 29, 8, 0, 4, tzinfo=UTC)), ("running", 0, T0)]
    assert all(isinstance(e, JobStatePoll) and e.scheduler == "slurm" and e.source.stream == "sacct:48213,48214"
               for e in first)
    now[0] = T0 + timedelta(seconds=15)
    assert [(e.state, e.event_time) for e in p.poll()] == [("running", now[0])]  # the current state, once
    (fake_bin / "sacct.out").write_text(RESTARTED)
    now[0] = T0 + timedelta(minutes=1)
    got = p.poll()
    assert [(e.state, e.attempt) for e in got] == [("pending", 1), ("running", 1), ("running", 1)]
    assert got[-1].attempts[0].terminal_state == "timeout" and got[-1].event_time == now[0]
    (fake_bin / "sacct.out").write_text(ENDED)
    now[0] = T0 + timedelta(minutes=45)
    last = p.poll()[-1]
    assert last.state == "failed" and last.failure_count == 1 and last.attempts[-1].exit_code == 253
    assert p.counters.failed == 0 and p.counters.received == 2 + 1 + 3 + 2  # the end, then the state now


def test_sacct_failure_falls_back_to_squeue_and_is_counted(fake_bin: Path) -> None:
    (fake_bin / "sacct.rc").write_text("1")
    (fake_bin / "sacct.err").write_text("sacct: error: Slurm accounting storage is disabled\n")
    (fake_bin / "squeue.out").write_text(SQUEUE)
    p = SacctPoller(["48213", "48214"], job_id="grpo-7b", clock=lambda: T0)
    polls = p.poll()
    assert args(fake_bin, "squeue") == ["-h -j 48213,48214 -o %i|%j|%T|%S"]
    assert polls[-1].state == "running" and polls[-1].event_time == T0 and p.via == "squeue"
    assert p.counters.errors == {"exit_status": 1} and "accounting storage is disabled" in p.counters.last_error


def test_missing_commands_and_timeouts_are_counted_never_raised(fake_bin: Path, tmp_path: Path) -> None:
    (fake_bin / "sacct.sleep").write_text("5")
    (fake_bin / "squeue.out").write_text("")  # the job left the queue
    p = SacctPoller(["48213"], job_id="j", clock=lambda: T0, runner=subprocess_runner(0.5))
    assert p.poll() == []
    assert p.counters.errors == {"timeout": 1, "no_record": 1} and p.counters.failed == 2
    for name in ("sacct", "squeue"):
        (fake_bin / name).unlink()
    assert p.poll() == [] and p.counters.errors["command_not_found"] == 2


def test_the_shipper_sends_slurm_state_and_reports_a_failing_source(fake_bin: Path, tmp_path: Path) -> None:
    root = tmp_path / "job"
    (root / "logs").mkdir(parents=True)
    (fake_bin / "sacct.out").write_text(RUNNING)
    now = [T0]
    sent: list = []

    def deliver(events: list) -> bool:
        sent.extend(events)
        return True

    src = SacctPoller(["48213"], job_id="grpo-7b", clock=lambda: now[0])
    s = FolderShipper(root, deliver=deliver, job_id="grpo-7b", shipper_id="t", clock=lambda: now[0],
                      state_dir=tmp_path / "state", sources=[src])
    s.tick()
    assert [e.state for e in sent if isinstance(e, JobStatePoll)] == ["running", "running"]
    (fake_bin / "sacct").unlink()
    (fake_bin / "squeue").unlink()
    now[0] += timedelta(seconds=15)
    sent.clear()
    s.tick()
    (hb,) = sent  # no state poll, still a heartbeat
    assert isinstance(hb, ShipperHeartbeat) and hb.sources == ["sacct:48213"]
    (st,) = hb.source_stats
    assert (st.received, st.sent, st.failed) == (2, 2, 2) and "command not found" in st.last_error
    # a restart re-reads sacct: the history already delivered is not sent again
    (fake_bin / "sacct").write_text(FAKE.format(name="sacct"))
    (fake_bin / "sacct").chmod(0o755)
    sent.clear()
    src2 = SacctPoller(["48213"], job_id="grpo-7b", clock=lambda: now[0])
    FolderShipper(root, deliver=deliver, job_id="grpo-7b", shipper_id="t", clock=lambda: now[0],
                  state_dir=tmp_path / "state", sources=[src2]).tick()
    assert [e.event_time for e in sent if isinstance(e, JobStatePoll)] == [now[0]]
    assert src2.counters.discarded == 1
