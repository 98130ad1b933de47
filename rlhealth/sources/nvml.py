"""This node's GPUs through NVML (`nvidia-ml-py`, import name `pynvml`) -> `GpuPoll` events.

The same events as the nvidia-smi path (`nvidia_smi.NvidiaSmiPoller`), read in-process instead of
forking nvidia-smi every interval: per GPU utilisation, memory (MiB), power (W), temperature (C),
uncorrected volatile ECC errors, the Xid codes NVML reported since the last poll (an event set
registered for critical Xid errors), and the compute processes. NVML errors map onto what
nvidia-smi prints for the same condition:

* a value the GPU or driver cannot give (``NVMLError_NotSupported``, ``NoPermission``,
  ``NoData``, ``Unknown``, ...) is None, like nvidia-smi's ``[N/A]`` / ``[Not Supported]`` cells;
* a GPU whose handle cannot be obtained is left out and noted as nvidia-smi does
  (``Unable to determine the device handle for GPU3: GPU is lost``);
* ``NVMLError_GpuIsLost`` / ``ResetRequired`` on a value: the reading stays (its values None, like
  ``[GPU is lost]`` cells) and the poll carries an error ``GPU3 (<uuid>): GPU is lost`` (the core
  reads both wordings as a lost GPU);
* NVML that cannot start (no driver, no library) gives an error-only poll
  ``Failed to initialize NVML: Driver Not Loaded``, and init is retried on the next poll.

`nvml=` takes the module object (tests pass a recorded session: an object with the same
functions). `gpu_source()` picks NVML or nvidia-smi for `rlhealth ship --gpu`.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from rlhealth.schemas.common import EventBase, Source
from rlhealth.schemas.events import ComputeApp, GpuPoll, GpuReading
from rlhealth.sources.live import LiveSource, SourceCounters
from rlhealth.sources.nvidia_smi import MAX_APPS, MAX_ERRORS, MAX_GPUS, NvidiaSmiPoller

MIB = 1 << 20
MAX_XID_EVENTS = 256  # Xid events drained per poll (the rest wait for the next poll)
# nvidia-smi's words for NVML's error codes (the pynvml message needs the library loaded)
_ERROR_TEXT = {
    "NVML_ERROR_UNINITIALIZED": "Uninitialized",
    "NVML_ERROR_NOT_SUPPORTED": "Not Supported",
    "NVML_ERROR_NO_PERMISSION": "Insufficient Permissions",
    "NVML_ERROR_NOT_FOUND": "Not Found",
    "NVML_ERROR_DRIVER_NOT_LOADED": "Driver Not Loaded",
    "NVML_ERROR_TIMEOUT": "Timeout",
    "NVML_ERROR_LIBRARY_NOT_FOUND": "NVML Shared Library Not Found",
    "NVML_ERROR_FUNCTION_NOT_FOUND": "Function Not Found",
    "NVML_ERROR_GPU_IS_LOST": "GPU is lost",
    "NVML_ERROR_RESET_REQUIRED": "GPU requires reset",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": "Driver/library version mismatch",
    "NVML_ERROR_NO_DATA": "No data",
    "NVML_ERROR_UNKNOWN": "Unknown Error",
}
_LOST = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED")

GpuMode = Literal["nvml", "nvidia-smi", "auto"]


def load_nvml() -> Any | None:
    """The `pynvml` module of nvidia-ml-py, or None when it is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


class _Lost(Exception):
    """A value read found the GPU lost (or needing a reset): its readings stop for this poll."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class NvmlPoller:
    """One `GpuPoll` per `poll()` from an NVML session kept open between polls."""

    def __init__(self, *, job_id: str, host: str | None = None, nvml: Any | None = None,
                 clock: Callable[[], datetime] | None = None, shipper: str | None = None,
                 with_apps: bool = True, xids: bool = True) -> None:
        self.nvml: Any = nvml if nvml is not None else load_nvml()
        self.job_id = job_id
        self.host = host or socket.gethostname()
        self.clock = clock or (lambda: datetime.now(UTC))
        self.with_apps = with_apps
        self.want_xids = xids
        self.source = Source(host=self.host, stream="nvml", shipper=shipper)
        self.name = "nvml"
        self.counters = SourceCounters()
        self.started = False
        self._event_set: Any = None
        self._codes: dict[int, str] = {}
        if self.nvml is not None:
            self._codes = {int(getattr(self.nvml, n)): n for n in _ERROR_TEXT if hasattr(self.nvml, n)}

    # -- errors ------------------------------------------------------------------------------
    def _code(self, exc: BaseException) -> str:
        return self._codes.get(getattr(exc, "value", -1), "NVML_ERROR_UNKNOWN")

    def _text(self, exc: BaseException) -> str:
        code = getattr(exc, "value", None)
        return _ERROR_TEXT.get(self._code(exc), f"NVML error {code}")

    def _value(self, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args), None when NVML cannot give it; `_Lost` when the GPU is gone."""
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            if self._code(exc) in _LOST:
                raise _Lost(self._text(exc)) from exc
            return None

    # -- session -----------------------------------------------------------------------------
    def start(self) -> str | None:
        """Initialise NVML (once); the error text when it cannot start."""
        if self.started:
            return None
        if self.nvml is None:
            return "Failed to initialize NVML: nvidia-ml-py (pynvml) is not installed"
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            return f"Failed to initialize NVML: {self._text(exc)}"
        except OSError as exc:  # a broken libnvidia-ml.so
            return f"Failed to initialize NVML: {exc}"[:500]
        self.started = True
        if self.want_xids:
            self._register_xids()
        return None

    def _register_xids(self) -> None:
        try:
            self._event_set = self.nvml.nvmlEventSetCreate()
            for i in range(self.nvml.nvmlDeviceGetCount()):
                try:
                    h = self.nvml.nvmlDeviceGetHandleByIndex(i)
                    self.nvml.nvmlDeviceRegisterEvents(h, self.nvml.nvmlEventTypeXidCriticalError, self._event_set)
                except self.nvml.NVMLError:
                    continue  # not supported on this GPU (or lost): its Xids come from the kernel log only
        except self.nvml.NVMLError:
            self._event_set = None

    def close(self) -> None:
        if not self.started:
            return
        try:
            if self._event_set is not None:
                self.nvml.nvmlEventSetFree(self._event_set)
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass
        self.started = False
        self._event_set = None

    # -- reading -----------------------------------------------------------------------------
    def _drain_xids(self) -> dict[str, list[int]]:
        """uuid -> Xid codes reported since the last poll (a zero timeout: never waits)."""
        out: dict[str, list[int]] = {}
        if self._event_set is None:
            return out
        for _ in range(MAX_XID_EVENTS):
            try:
                data = self.nvml.nvmlEventSetWait(self._event_set, 0)
            except self.nvml.NVMLError:
                break  # NVML_ERROR_TIMEOUT: nothing more
            if int(getattr(data, "eventType", 0)) & int(self.nvml.nvmlEventTypeXidCriticalError):
                try:
                    uuid = _str(self.nvml.nvmlDeviceGetUUID(data.device))
                except self.nvml.NVMLError:
                    uuid = "?"
                out.setdefault(uuid, []).append(int(data.eventData))
        return out

    def _apps(self, h: Any, uuid: str | None) -> list[ComputeApp]:
        procs = self._value(self.nvml.nvmlDeviceGetComputeRunningProcesses, h) or []
        apps = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            name = None
            try:
                name = _str(self.nvml.nvmlSystemGetProcessName(p.pid))
            except self.nvml.NVMLError:
                pass
            apps.append(ComputeApp(gpu_uuid=uuid, pid=int(p.pid), process_name=(name or None) and name[:1000],
                                   used_mib=used / MIB if isinstance(used, int) else None))
        return apps

    def _reading(self, i: int, h: Any, xids: dict[str, list[int]], errors: list[str],
                 apps: list[ComputeApp]) -> GpuReading:
        nv = self.nvml
        uuid: str | None = None
        values: dict[str, Any] = {}
        try:
            raw_uuid = self._value(nv.nvmlDeviceGetUUID, h)
            uuid = _str(raw_uuid) if raw_uuid is not None else None
            util = self._value(nv.nvmlDeviceGetUtilizationRates, h)
            values["util_pct"] = float(util.gpu) if util is not None else None
            mem = self._value(nv.nvmlDeviceGetMemoryInfo, h)
            if mem is not None:
                values["mem_used_mib"] = mem.used / MIB
                values["mem_total_mib"] = mem.total / MIB
            power = self._value(nv.nvmlDeviceGetPowerUsage, h)
            values["power_w"] = power / 1000.0 if power is not None else None
            temp = self._value(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
            values["temperature_c"] = float(temp) if temp is not None else None
            ecc = self._value(nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                              nv.NVML_VOLATILE_ECC)
            values["ecc_uncorrected"] = int(ecc) if ecc is not None else None
            if self.with_apps:
                apps.extend(self._apps(h, uuid))
        except _Lost as lost:
            errors.append(f"GPU{i} ({uuid or 'uuid unknown'}): {lost.text}")
            values = {}  # what was read before the loss is not trusted either
        return GpuReading(index=i, uuid=uuid, xids=xids.get(uuid or "", [])[:16], **values)

    def poll(self) -> list[EventBase]:
        return [self.poll_once()]

    def poll_once(self) -> GpuPoll:
        now = self.clock()
        errors: list[str] = []
        gpus: list[GpuReading] = []
        apps: list[ComputeApp] = []
        failure = self.start()
        if failure is not None:
            self.counters.fail("init", failure)
            errors.append(failure)
        else:
            nv = self.nvml
            try:
                count = nv.nvmlDeviceGetCount()
            except nv.NVMLError as exc:
                count = 0
                errors.append(f"Unable to determine the number of GPUs: {self._text(exc)}")
                self.counters.fail("device_count", errors[-1])
            xids = self._drain_xids()
            for i in range(min(count, MAX_GPUS)):
                try:
                    h = nv.nvmlDeviceGetHandleByIndex(i)
                except nv.NVMLError as exc:
                    errors.append(f"Unable to determine the device handle for GPU{i}: {self._text(exc)}")
                    continue
                gpus.append(self._reading(i, h, xids, errors, apps))
            # an Xid of a GPU no reading names (lost before its UUID was read) is kept as an error
            named = {g.uuid for g in gpus}
            errors.extend(f"NVML: Xid {code} on GPU {uuid}" for uuid, codes in xids.items() if uuid not in named
                          for code in codes)
            if count == 0 and not errors:
                errors.append("No devices were found")
        self.counters.received += 1
        return GpuPoll(job_id=self.job_id, event_time=now, ingest_time=now, source=self.source, host=self.host,
                       gpus=gpus, apps=apps[:MAX_APPS], errors=[e[:500] for e in errors[:MAX_ERRORS]])


def _str(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def gpu_source(mode: GpuMode, *, job_id: str, host: str | None = None, shipper: str | None = None,
               nvml: Any | None = None, smi_runner: Any | None = None,
               clock: Callable[[], datetime] | None = None) -> tuple[LiveSource, str | None]:
    """The GPU source for `ship --gpu MODE`, and a note when `auto` fell back to nvidia-smi.

    ``nvml``: NVML only (a failed init is an error poll, retried every interval); ``nvidia-smi``:
    the command; ``auto``: NVML when it starts, else nvidia-smi.
    """
    host = host or socket.gethostname()
    if mode != "nvidia-smi":
        poller = NvmlPoller(job_id=job_id, host=host, nvml=nvml, clock=clock, shipper=shipper)
        if mode == "nvml":
            return poller, None
        failure = poller.start()
        if failure is None:
            return poller, None
        note = f"{failure}; polling with nvidia-smi instead"
    else:
        note = None
    smi = NvidiaSmiPoller(lambda _p: None, job_id=job_id, host=host, shipper=shipper, runner=smi_runner,
                          clock=clock)
    return smi, note


__all__ = ["GpuMode", "NvmlPoller", "gpu_source", "load_nvml"]
