"""The NVML GPU source against a recorded session, its nvidia-smi fallback, and the shipper contract.

No GPU is lent to this task, so the "recorded session" below is a fake `pynvml` module object: the
functions `rlhealth.sources.nvml` calls, answering in NVML's units (bytes, milliwatts) and raising
the real `pynvml.NVMLError` subclasses. Its values are the H100 80GB HBM3 rows of the nvidia-smi
reference capture (shared/reference/examples/logs/nvidia_smi_query.txt: 70371/81559 MiB,
587.47 W, ...) converted to those units, plus the failure shapes that capture documents (a
[Not Supported] value, a GPU whose handle cannot be obtained, a GPU lost). The same node state is
also written as nvidia-smi CSV, so both GPU sources are checked to produce the same readings.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pynvml
import pytest

from rlhealth.schemas import GpuPoll, ShipperHeartbeat
from rlhealth.sources.nvidia_smi import NvidiaSmiPoller
from rlhealth.sources.nvml import NvmlPoller, gpu_source
from rlhealth.sources.shipper import FolderShipper

T0 = datetime(2026, 10, 14, 16, 20, tzinfo=UTC)
MIB = 1 << 20
E = pynvml.NVMLError  # NVMLError(code) builds the matching subclass, e.g. NVMLError_NotSupported


@dataclass
class Gpu:
    uuid: str
    util: int | None  # None: NVML_ERROR_NOT_SUPPORTED
    used_mib: int
    total_mib: int
    power_mw: int | None
    temp_c: int
    ecc: int | None
    procs: tuple[tuple[int, int | None, str], ...] = ()
    handle_error: int | None = None  # nvmlDeviceGetHandleByIndex fails with this code
    lost_after_uuid: bool = False  # every value after the UUID raises NVML_ERROR_GPU_IS_LOST


# One H100 node: GPUs 0-1 busy (the reference rows), 2 idle with [Not Supported] utilisation and
# power (the reference "special values" row), 3 off the bus (no handle), 4 lost mid-read.
NODE = [
    Gpu("GPU-4f1e2a1c-0000-0000-0000-000000000000", 100, 70371, 81559, 587470, 61, 0,
        ((4242, 69000 * MIB, "ray::AsyncVLLMInferenceEngine"),)),
    Gpu("GPU-4f1e2a1c-0000-0000-0000-000000000001", 98, 70365, 81559, 579020, 59, 0,
        ((4243, None, "python"),)),
    Gpu("GPU-4f1e2a1c-0000-0000-0000-000000000002", None, 4, 81559, None, 33, None),
    Gpu("GPU-4f1e2a1c-0000-0000-0000-000000000003", 0, 0, 81559, 0, 0, 0, handle_error=pynvml.NVML_ERROR_GPU_IS_LOST),
    Gpu("GPU-4f1e2a1c-0000-0000-0000-000000000004", 0, 0, 81559, 0, 0, 0, lost_after_uuid=True),
]
# nvidia-smi's view of the same node (LIVE_GPU_QUERY columns, with a header, as `--format=csv` prints)
SMI_CSV = """\
timestamp, index, uuid, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W], temperature.gpu, ecc.errors.uncorrected.volatile.total
2026/10/14 16:20:00.000, 0, GPU-4f1e2a1c-0000-0000-0000-000000000000, 100 %, 70371 MiB, 81559 MiB, 587.47 W, 61, 0
2026/10/14 16:20:00.001, 1, GPU-4f1e2a1c-0000-0000-0000-000000000001, 98 %, 70365 MiB, 81559 MiB, 579.02 W, 59, 0
2026/10/14 16:20:00.002, 2, GPU-4f1e2a1c-0000-0000-0000-000000000002, [Not Supported], 4 MiB, 81559 MiB, [N/A], 33, [N/A]
2026/10/14 16:20:00.003, 4, GPU-4f1e2a1c-0000-0000-0000-000000000004, [GPU is lost], [GPU is lost], [GPU is lost], [GPU is lost], [GPU is lost], [GPU is lost]
"""
SMI_STDERR = "Unable to determine the device handle for GPU3: 0000:5F:00.0: GPU is lost\n"


def recorded_session(node: list[Gpu] = NODE, xids: list[tuple[int, int]] = (), init_error: int | None = None,
                     calls: list[str] | None = None) -> Any:
    """A `pynvml`-shaped module over `node`; `xids` = (gpu index, Xid code) waiting in the event set."""
    calls = calls if calls is not None else []
    pending = list(xids)

    def h(i: int) -> Gpu:
        return node[i]

    def value(name: str, fn):
        def call(handle, *args):
            calls.append(name)
            if handle.lost_after_uuid:
                raise E(pynvml.NVML_ERROR_GPU_IS_LOST)
            return fn(handle, *args)
        return call

    def init() -> None:
        calls.append("nvmlInit")
        if init_error is not None:
            raise E(init_error)

    def handle_by_index(i: int) -> Gpu:
        if node[i].handle_error is not None:
            raise E(node[i].handle_error)
        return h(i)

    def util(g: Gpu):
        if g.util is None:
            raise E(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return types.SimpleNamespace(gpu=g.util, memory=0)

    def power(g: Gpu):
        if g.power_mw is None:
            raise E(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return g.power_mw

    def ecc(g: Gpu, error_type: int, counter: int):
        assert (error_type, counter) == (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
        if g.ecc is None:
            raise E(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return g.ecc

    names = {pid: name for g in node for pid, _m, name in g.procs}

    def wait(event_set, timeout_ms: int):
        assert timeout_ms == 0  # a poll never blocks on the event set
        if not pending:
            raise E(pynvml.NVML_ERROR_TIMEOUT)
        idx, code = pending.pop(0)
        return types.SimpleNamespace(device=node[idx], eventType=pynvml.nvmlEventTypeXidCriticalError,
                                     eventData=code)

    def uuid(g: Gpu) -> str:
        return g.uuid

    consts = {k: getattr(pynvml, k) for k in dir(pynvml) if k.startswith("NVML_")}
    return types.SimpleNamespace(
        **consts,
        NVMLError=pynvml.NVMLError,
        nvmlEventTypeXidCriticalError=pynvml.nvmlEventTypeXidCriticalError,
        nvmlInit=init,
        nvmlShutdown=lambda: calls.append("nvmlShutdown"),
        nvmlDeviceGetCount=lambda: len(node),
        nvmlDeviceGetHandleByIndex=handle_by_index,
        nvmlDeviceGetUUID=uuid,
        nvmlDeviceGetUtilizationRates=value("util", util),
        nvmlDeviceGetMemoryInfo=value("mem", lambda g: types.SimpleNamespace(
            total=g.total_mib * MIB, used=g.used_mib * MIB, free=(g.total_mib - g.used_mib) * MIB)),
        nvmlDeviceGetPowerUsage=value("power", power),
        nvmlDeviceGetTemperature=value("temp", lambda g, sensor: g.temp_c),
        nvmlDeviceGetTotalEccErrors=value("ecc", ecc),
        nvmlDeviceGetComputeRunningProcesses=value("procs", lambda g: [
            types.SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem, _n in g.procs]),
        nvmlSystemGetProcessName=lambda pid: names[pid],
        nvmlEventSetCreate=lambda: object(),
        nvmlEventSetFree=lambda s: calls.append("nvmlEventSetFree"),
        nvmlDeviceRegisterEvents=lambda handle, types_, s: None,
        nvmlEventSetWait=wait,
    )


@dataclass
class _R:
    returncode: int
    stdout: str
    stderr: str


def smi_runner(cmd: list[str]) -> _R:
    if cmd[1].startswith("--query-gpu"):
        return _R(0, SMI_CSV, SMI_STDERR)
    return _R(0, "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
                 "2026/10/14 16:20:00.010, GPU-4f1e2a1c-0000-0000-0000-000000000000, 4242, "
                 "ray::AsyncVLLMInferenceEngine, 69000 MiB\n"
                 "2026/10/14 16:20:00.011, GPU-4f1e2a1c-0000-0000-0000-000000000001, 4243, python, [N/A]\n", "")


def test_nvml_poll_reads_the_recorded_node() -> None:
    poll = NvmlPoller(job_id="j", host="node-7", nvml=recorded_session(xids=[(1, 48)]), clock=lambda: T0).poll_once()
    assert poll.event_time == T0 and poll.host == "node-7" and poll.source.stream == "nvml"
    g0, g1, g2, g4 = poll.gpus
    assert [g.index for g in poll.gpus] == [0, 1, 2, 4]  # GPU3 has no handle: left out, as nvidia-smi does
    assert (g0.util_pct, g0.mem_used_mib, g0.mem_total_mib, g0.power_w, g0.temperature_c, g0.ecc_uncorrected) == (
        100.0, 70371.0, 81559.0, 587.47, 61.0, 0)
    assert g1.xids == [48] and g0.xids == []
    assert g2.util_pct is None and g2.power_w is None and g2.ecc_uncorrected is None and g2.mem_used_mib == 4.0
    assert g4.uuid == NODE[4].uuid and g4.util_pct is None and g4.mem_total_mib is None
    assert poll.errors == ["Unable to determine the device handle for GPU3: GPU is lost",
                           f"GPU4 ({NODE[4].uuid}): GPU is lost"]
    assert [(a.pid, a.process_name, a.used_mib) for a in poll.apps] == [
        (4242, "ray::AsyncVLLMInferenceEngine", 69000.0), (4243, "python", None)]


def test_an_xid_of_a_gpu_without_a_reading_is_kept_as_an_error() -> None:
    # GPU3 has no handle, so no reading carries its Xid 79 (fallen off the bus): it stays in the poll
    poll = NvmlPoller(job_id="j", host="h", nvml=recorded_session(xids=[(3, 79), (0, 13)]),
                      clock=lambda: T0).poll_once()
    assert poll.gpus[0].xids == [13]
    assert f"NVML: Xid 79 on GPU {NODE[3].uuid}" in poll.errors


def test_nvml_and_nvidia_smi_give_the_same_readings() -> None:
    nvml = NvmlPoller(job_id="j", host="h", nvml=recorded_session(), clock=lambda: T0).poll_once()
    smi = NvidiaSmiPoller(lambda p: None, job_id="j", host="h", runner=smi_runner, clock=lambda: T0).poll_once()
    assert [g.model_dump(exclude={"xids"}) for g in nvml.gpus] == [g.model_dump(exclude={"xids"}) for g in smi.gpus]
    assert nvml.apps == smi.apps
    # both wordings of a lost GPU are what the core reads as one
    from rlhealth.agents.gate_resources import _GPU_LOST_RE

    assert all(_GPU_LOST_RE.search(e) for e in nvml.errors) and all(_GPU_LOST_RE.search(e) for e in smi.errors)


def test_nvml_init_failure_is_an_error_poll_and_is_retried() -> None:
    calls: list[str] = []
    session = recorded_session(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED, calls=calls)
    p = NvmlPoller(job_id="j", host="h", nvml=session, clock=lambda: T0)
    a, b = p.poll_once(), p.poll_once()
    assert a.gpus == [] and a.errors == ["Failed to initialize NVML: Driver Not Loaded"] and b.errors == a.errors
    assert calls.count("nvmlInit") == 2 and p.counters.failed == 2 and p.counters.errors == {"init": 2}
    missing = NvmlPoller(job_id="j", host="h", nvml=None, clock=lambda: T0)
    missing.nvml = None  # as when nvidia-ml-py is not installed
    assert "not installed" in missing.poll_once().errors[0]


def test_auto_falls_back_to_nvidia_smi_when_nvml_cannot_start() -> None:
    broken = recorded_session(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    src, note = gpu_source("auto", job_id="j", host="h", nvml=broken, smi_runner=smi_runner, clock=lambda: T0)
    assert src.name == "nvidia-smi" and note is not None and "NVML Shared Library Not Found" in note
    (poll,) = src.poll()
    assert isinstance(poll, GpuPoll) and [g.index for g in poll.gpus] == [0, 1, 2, 4]
    good, note = gpu_source("auto", job_id="j", host="h", nvml=recorded_session(), clock=lambda: T0)
    assert good.name == "nvml" and note is None
    forced, _ = gpu_source("nvml", job_id="j", host="h", nvml=broken, clock=lambda: T0)
    assert forced.name == "nvml" and forced.poll()[0].errors  # no fallback when NVML was asked for
    smi, _ = gpu_source("nvidia-smi", job_id="j", host="h", nvml=recorded_session(), smi_runner=smi_runner)
    assert smi.name == "nvidia-smi"


def test_close_ends_the_session() -> None:
    calls: list[str] = []
    p = NvmlPoller(job_id="j", host="h", nvml=recorded_session(calls=calls), clock=lambda: T0)
    p.poll_once()
    p.close()
    assert calls[-2:] == ["nvmlEventSetFree", "nvmlShutdown"] and not p.started


def test_shipper_sends_nvml_polls_counts_them_and_skips_them_after_a_restart(tmp_path: Path) -> None:
    root = tmp_path / "job"
    (root / "logs").mkdir(parents=True)
    now = [T0]
    sent: list = []

    def deliver(events: list) -> bool:
        sent.extend(events)
        return True

    def shipper() -> tuple[FolderShipper, NvmlPoller]:
        src = NvmlPoller(job_id="j1", host="h", nvml=recorded_session(), clock=lambda: now[0])
        return FolderShipper(root, deliver=deliver, job_id="j1", shipper_id="t", clock=lambda: now[0],
                             state_dir=tmp_path / "state", sources=[src]), src

    s, src = shipper()
    s.tick()
    now[0] = T0.replace(second=15)
    s.tick()
    polls = [e for e in sent if isinstance(e, GpuPoll)]
    assert [p.event_time.second for p in polls] == [0, 15]
    hb = [e for e in sent if isinstance(e, ShipperHeartbeat)][-1]
    assert hb.sources == ["nvml"]
    (stat,) = hb.source_stats
    assert (stat.name, stat.received, stat.sent, stat.failed) == ("nvml", 2, 1, 0)  # the 2nd goes out with it
    assert src.counters.sent == 2
    # a restart: a poll not newer than what was delivered is not sent again; a newer one is
    sent.clear()
    s2, src2 = shipper()
    s2.tick()
    assert not any(isinstance(e, GpuPoll) for e in sent) and src2.counters.discarded == 1
    now[0] = T0.replace(second=30)
    s2.tick()
    assert len([e for e in sent if isinstance(e, GpuPoll)]) == 1 and src2.counters.sent == 1


def test_an_nvml_xid_reaches_gate_b_like_a_kernel_line() -> None:
    from rlhealth.runtime import build_core
    from rlhealth.schemas import GpuReading
    from tests.corekit import Job, at, healthy

    job = healthy(Job(build_core()))
    job.events.append(GpuPoll(job_id=job.job_id, event_time=at(40), host="pod-1", source={"stream": "nvml"},
                              gpus=[GpuReading(index=3, uuid="GPU-x", util_pct=90.0, xids=[79])]))
    v = job.judge(121)
    assert v.gates.B.codes[0] == "B.gpu_hardware_fault"
    assert any("Xid 79" in e.text for e in v.gates.B.evidence)
    quiet = healthy(Job(build_core())).judge(121)
    assert quiet.gates.B.status == "PASS"


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NO_PERMISSION, pynvml.NVML_ERROR_UNKNOWN,
                                  pynvml.NVML_ERROR_NOT_SUPPORTED])
def test_values_nvml_cannot_give_are_none_like_smi_brackets(code: int) -> None:
    node = [Gpu("GPU-a", 50, 1, 2, 3000, 40, 0)]
    session = recorded_session(node=node)

    def refuse(handle, *a):
        raise E(code)

    session.nvmlDeviceGetTemperature = refuse
    (g,) = NvmlPoller(job_id="j", host="h", nvml=session, clock=lambda: T0).poll_once().gpus
    assert g.temperature_c is None and g.util_pct == 50.0 and g.power_w == 3.0
