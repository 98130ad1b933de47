"""GPU hardware faults in Gate B, read through the Xid table (rules/xid.toml). Explicit clocks, no I/O."""

from __future__ import annotations

import pytest

from rlhealth.runtime import build_core
from rlhealth.schemas import GpuPoll
from tests.corekit import Job, at, healthy


@pytest.fixture(scope="module")
def core():
    return build_core()


def _xid(minute: float, code: int, text: str) -> str:
    return f"[{int(minute * 60) + 100000}.123456] NVRM: Xid (PCI:0000:4e:00): {code}, pid='<unknown>', name=<unknown>, {text}"


def test_application_xid_is_not_blamed_on_the_node(core) -> None:
    job = healthy(Job(core))
    job.log(60, [_xid(60, 13, "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address")],
            stream="logs/dmesg.log")
    v = job.judge(121)
    assert v.gates.B.status == "PASS" and v.verdict == "NO-KILL"


def test_hardware_xid_the_job_trained_through_escalates_without_kill(core) -> None:
    job = healthy(Job(core))
    job.log(40, [_xid(40, 79, "GPU has fallen off the bus.")], stream="logs/dmesg.log")
    v = job.judge(121)
    assert v.gates.B.codes[0] == "B.gpu_hardware_fault" and v.gates.B.status == "UNKNOWN"
    assert (v.verdict, v.escalate) == ("NO-KILL", True)


def test_gpu_off_the_bus_and_lost_from_nvidia_smi_is_a_fail_and_kill(core) -> None:
    job = Job(core).spec().states(0, 120, every=5)
    job.steps(0, 60)
    job.log(70, [_xid(70, 79, "GPU has fallen off the bus.")], stream="logs/dmesg.log")
    job.events.append(GpuPoll(job_id=job.job_id, event_time=at(90), host="pod-1",
                              errors=["Unable to determine the device handle for GPU0000:4E:00.0: Unknown Error"]))
    v = job.judge(120)
    assert v.gates.B.status == "FAIL" and {"hardware_log", "gpu_poll"} <= set(v.gates.B.families)
    assert v.verdict == "KILL" and any("drain" in s for s in v.next_steps)
