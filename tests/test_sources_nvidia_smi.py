"""nvidia-smi CSV parsing, compute apps, and the poller with an injected runner."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rlhealth.sources.nvidia_smi import (
    NvidiaSmiPoller,
    attach_apps,
    parse_compute_apps_csv,
    parse_nvidia_smi_csv,
)

SHARED = Path(os.environ.get("RLHEALTH_SHARED_DIR") or Path(__file__).resolve().parents[1].parent / "shared")
SCEN = SHARED / "scenarios"
FIXTURE = SHARED / "reference" / "examples" / "logs" / "nvidia_smi_query.txt"
needs_shared = pytest.mark.skipif(not SCEN.is_dir(), reason="shared scenarios not available")
T0 = datetime(2026, 1, 1, tzinfo=UTC)

HEADER = "timestamp, index, uuid, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W]"


def test_repeated_headers_and_special_values() -> None:
    text = "\n".join([
        HEADER,
        "2026/10/14 13:36:25.852, 0, GPU-a, 0 %, 4 MiB, 81559 MiB, 69.73 W",
        "2026/10/14 13:36:25.853, 1, GPU-b, [N/A], [Not Supported], 81559 MiB, [N/A]",
        HEADER,
        "2026/10/14 13:37:13.901, 0, GPU-a, 97 %, 70000 MiB, 81559 MiB, 600.10 W",
        "2026/10/14 13:37:13.902, 1, GPU-b, N/A, 5 MiB, 81559 MiB, 70.00 W",
        "garbage, row",
        "",
    ])
    polls = parse_nvidia_smi_csv(text, job_id="j", host="node-0")
    assert len(polls) == 2
    p0, p1 = polls
    assert p0.event_time == datetime(2026, 10, 14, 13, 36, 25, 852000, tzinfo=UTC)
    assert p0.host == "node-0" and [g.index for g in p0.gpus] == [0, 1]
    assert p0.gpus[0].util_pct == 0.0 and p0.gpus[0].mem_used_mib == 4.0 and p0.gpus[0].power_w == 69.73
    assert p0.gpus[1].util_pct is None and p0.gpus[1].mem_used_mib is None and p0.gpus[1].power_w is None
    assert p0.gpus[1].mem_total_mib == 81559.0
    assert p1.gpus[0].util_pct == 97.0 and p1.gpus[1].util_pct is None


def test_index_repeat_without_header_starts_a_new_poll() -> None:
    text = "\n".join([
        "2026/10/14 13:36:25.852, 0, GPU-a, 1 %, 4 MiB, 8 MiB, 1.00 W",
        "2026/10/14 13:36:25.853, 1, GPU-b, 2 %, 4 MiB, 8 MiB, 1.00 W",
        "2026/10/14 13:36:26.100, 0, GPU-a, 3 %, 4 MiB, 8 MiB, 1.00 W",
    ])
    polls = parse_nvidia_smi_csv(text, job_id="j", host="h")
    assert [len(p.gpus) for p in polls] == [2, 1]


@pytest.mark.skipif(not FIXTURE.exists(), reason="reference fixture missing")
def test_reference_fixture_errors_and_nounits() -> None:
    polls = parse_nvidia_smi_csv(FIXTURE.read_text(), job_id="j", host="h", fallback_time=T0)
    assert [len(p.gpus) for p in polls] == [2, 4, 3, 2, 4, 0]
    special = polls[3]
    assert special.gpus[0].util_pct is None and special.gpus[0].power_w is None
    assert special.gpus[1].mem_used_mib is None and special.gpus[1].util_pct == 55.0
    lost = polls[4]
    assert [g.index for g in lost.gpus] == [0, 1, 2, 4]
    assert lost.errors == ["Unable to determine the device handle for GPU3: 0000:5F:00.0: Unknown Error"]
    assert polls[2].gpus[0].power_w == 587.47  # nounits
    assert polls[5].errors[0] == "No devices were found"
    assert polls[5].errors[1].startswith("NVIDIA-SMI has failed")
    assert all(p.event_time == T0 for p in polls)  # no timestamp column -> fallback


@needs_shared
def test_scenario_gpu_csv() -> None:
    f = SCEN / "healthy_learning/capture/gpu/iris-benjaminfeuer-rl-q3-8b-nl2bash-tp2-0-z6kpw-0.csv"
    polls = parse_nvidia_smi_csv(f.read_text(), job_id="j", host="h")
    assert len(polls) == 191
    assert all(len(p.gpus) == 8 for p in polls)
    times = [p.event_time for p in polls]
    assert times == sorted(times)
    assert times[0] == datetime(2026, 10, 14, 13, 36, 25, 852000, tzinfo=UTC)
    missing = [(p.event_time.strftime("%H:%M:%S"), g.index) for p in polls for g in p.gpus
               if g.power_w is None or g.util_pct is None]
    assert len(missing) == 7
    assert ("13:44:49", 4) in missing


def test_apps_attach_to_nearest_poll() -> None:
    gpu = "\n".join([HEADER,
                     "2026/10/14 13:00:00.000, 0, GPU-a, 90 %, 70000 MiB, 81559 MiB, 600.00 W",
                     HEADER,
                     "2026/10/14 13:01:00.000, 0, GPU-a, 91 %, 70000 MiB, 81559 MiB, 600.00 W"])
    apps = "\n".join([
        "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]",
        "2026/10/14 13:00:50.000, GPU-a, 4242, ray::AsyncVLLMInferenceEngine, 69000 MiB",
        "2026/10/14 13:00:50.001, GPU-a, 4243, python, [N/A]",
    ])
    polls = parse_nvidia_smi_csv(gpu, job_id="j", host="h")
    res = parse_compute_apps_csv(apps)
    assert len(res.groups) == 1 and res.bad_rows == 0
    out = attach_apps(polls, res.groups)
    assert out[0].apps == []
    assert [(a.pid, a.process_name, a.used_mib) for a in out[1].apps] == [
        (4242, "ray::AsyncVLLMInferenceEngine", 69000.0), (4243, "python", None)]


@dataclass
class _R:
    returncode: int
    stdout: str
    stderr: str


def test_poller_with_injected_runner() -> None:
    calls: list[list[str]] = []

    def runner(cmd: list[str]) -> _R:
        calls.append(cmd)
        if "--query-gpu" in cmd[1]:
            return _R(0, HEADER + "\n2026/10/14 13:00:00.000, 0, GPU-a, 90 %, 1 MiB, 2 MiB, 3.00 W\n", "")
        return _R(0, "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
                     "2026/10/14 13:00:00.010, GPU-a, 7, python, 1 MiB\n", "")

    got = []
    poller = NvidiaSmiPoller(got.append, job_id="j", host="h", runner=runner, clock=lambda: T0)
    poll = poller.poll_once()
    assert got == [poll] and len(calls) == 2
    assert poll.event_time == datetime(2026, 10, 14, 13, tzinfo=UTC) and poll.ingest_time == T0
    assert poll.gpus[0].util_pct == 90.0 and poll.apps[0].pid == 7 and poll.errors == []


def test_poller_reports_failures_as_data() -> None:
    def missing(cmd: list[str]) -> _R:
        raise FileNotFoundError(cmd[0])

    def broken(cmd: list[str]) -> _R:
        return _R(9, "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")

    def slow(cmd: list[str]) -> _R:
        raise subprocess.TimeoutExpired(cmd, 30)

    for runner, needle in ((missing, "not found"), (broken, "NVIDIA-SMI has failed"), (slow, "timed out")):
        poll = NvidiaSmiPoller(lambda e: None, job_id="j", host="h", runner=runner, clock=lambda: T0,
                               with_apps=False).poll_once()
        assert poll.gpus == [] and poll.event_time == T0
        assert any(needle in e for e in poll.errors), poll.errors


def test_a_line_the_csv_module_refuses_is_split_not_raised() -> None:
    from rlhealth.sources.nvidia_smi import split_cells

    assert split_cells("0, 45 %, 10\r20 MiB") == ["0", "45 %", "10\r20 MiB"]
    assert split_cells('0, "a, b", 3') == ["0", "a, b", "3"]
