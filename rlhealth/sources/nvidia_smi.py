"""nvidia-smi CSV: parse `--query-gpu` / `--query-compute-apps` output into `GpuPoll` events.

The capture reader feeds whole `gpu/<host>.csv` files through `GpuCsvParser`; the live
`NvidiaSmiPoller` runs nvidia-smi (through an injectable runner) and parses its output the same
way. Format facts handled here:

* separator ", " (read with the csv module: a quoted cell may hold a comma); a header line may
  repeat at every poll; ``--format=csv,noheader`` files have
  none (the column order of `GPU_QUERY` is then assumed);
* cells carry units ("97 %", "70371 MiB", "587.47 W") unless ``nounits``; special values are
  bracketed (``[N/A]``, ``[Not Supported]``, ``[Unknown Error]``, ...) or bare ``N/A``: all -> None;
* the ``timestamp`` column is ``YYYY/MM/DD HH:MM:SS.mmm`` in the node's local time, which we read
  as UTC (pods run in UTC; pass ``tz`` otherwise);
* one poll = consecutive rows whose timestamps lie within 2 s of the first and whose GPU index
  does not repeat; a header line also starts a new poll;
* error lines ("No devices were found", "Unable to determine the device handle for GPU3: ...",
  "NVIDIA-SMI has failed ...") are kept as `GpuPoll.errors` of the poll they precede (or, when no
  rows follow, of an error-only poll at the last known poll time);
* rows that are neither (wrong cell count, bad timestamp) are counted in `bad_rows`, never fatal.
"""

from __future__ import annotations

import bisect
import csv
import re
import subprocess
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo

from rlhealth.schemas.common import EventBase, Source
from rlhealth.schemas.events import ComputeApp, GpuPoll, GpuReading
from rlhealth.sources.live import Runner, RunResult, SourceCounters, subprocess_runner

# The column order of capture files written with `noheader` (kept: old captures depend on it).
GPU_QUERY = "timestamp,index,uuid,utilization.gpu,memory.used,memory.total,power.draw"
# The live poll asks for more (its output has a header, so the columns are read from it): the
# fields NVML gives too, so both GPU sources produce the same readings.
LIVE_GPU_QUERY = GPU_QUERY + ",temperature.gpu,ecc.errors.uncorrected.volatile.total"
APPS_QUERY = "timestamp,gpu_uuid,pid,process_name,used_memory"
GPU_COMMAND = ["nvidia-smi", f"--query-gpu={LIVE_GPU_QUERY}", "--format=csv"]
APPS_COMMAND = ["nvidia-smi", f"--query-compute-apps={APPS_QUERY}", "--format=csv"]

POLL_GROUP_S = 2.0
MAX_GPUS = 64
MAX_APPS = 512
MAX_ERRORS = 16

_GPU_FIELDS = {
    "timestamp": "timestamp",
    "index": "index",
    "uuid": "uuid",
    "gpu_uuid": "uuid",
    "utilization.gpu": "util_pct",
    "memory.used": "mem_used_mib",
    "memory.total": "mem_total_mib",
    "power.draw": "power_w",
    "power.draw.instant": "power_w",
    "power.draw.average": "power_w",
    "temperature.gpu": "temperature_c",
    "ecc.errors.uncorrected.volatile.total": "ecc_uncorrected",
}
_APP_FIELDS = {
    "timestamp": "timestamp",
    "gpu_uuid": "gpu_uuid",
    "pid": "pid",
    "process_name": "process_name",
    "name": "process_name",
    "used_gpu_memory": "used_mib",
    "used_memory": "used_mib",
}
_DEFAULT_GPU_COLUMNS = [_GPU_FIELDS[c] for c in GPU_QUERY.split(",")]
_DEFAULT_APP_COLUMNS = [_APP_FIELDS[c] for c in APPS_QUERY.split(",")]

_ERROR_RE = re.compile(
    r"^(No devices were found|No running processes found|Unable to determine the device handle|"
    r"NVIDIA-SMI has failed|Failed to initialize NVML|Unable to determine|GPU is lost|"
    r"Driver/library version mismatch|Insufficient Permissions)",
    re.IGNORECASE,
)
_TS_RE = re.compile(r"^(\d{4})[/-](\d{2})[/-](\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")


def split_cells(line: str) -> list[str]:
    """One CSV line of nvidia-smi output -> its cells (", " separated; quotes honoured). A line the
    csv module refuses (a stray carriage return or NUL in a damaged file) is split on commas: the
    row is then judged by the same cell checks as any other."""
    try:
        return next(csv.reader([line], skipinitialspace=True), [])
    except csv.Error:
        return [cell.strip() for cell in line.split(",")]


def _header_name(cell: str) -> str:
    name = cell.strip().lower()
    cut = name.find(" [")
    return name[:cut] if cut >= 0 else name


def parse_smi_timestamp(text: str, tz: tzinfo = UTC) -> datetime | None:
    m = _TS_RE.match(text.strip())
    if m is None:
        return None
    y, mo, d, h, mi, s, frac = m.groups()
    us = int((frac or "0").ljust(6, "0"))
    try:
        return datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), us, tzinfo=tz).astimezone(UTC)
    except ValueError:
        return None


def parse_number(cell: str) -> float | None:
    """`"97 %"` -> 97.0; `"[N/A]"`, `"N/A"`, `"[Not Supported]"`, `""` -> None."""
    c = cell.strip()
    if not c or c[0] == "[" or c.upper() in ("N/A", "NA"):
        return None
    sp = c.find(" ")
    if sp > 0:
        c = c[:sp]
    try:
        v = float(c)
    except ValueError:
        return None
    if v != v:  # NaN
        return None
    return v


def _int(cell: str) -> int | None:
    v = parse_number(cell)
    return int(v) if v is not None else None


def _text(cell: str) -> str | None:
    c = cell.strip()
    if not c or c[0] == "[" or c.upper() == "N/A":
        return None
    return c


@dataclass
class _Group:
    time: datetime | None = None
    gpus: list[GpuReading] = field(default_factory=list)
    indexes: set = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


class GpuCsvParser:
    """Incremental parser of one host's `--query-gpu` CSV. Feed lines, collect finished polls.

    `fallback_time` is used for polls without a timestamp column (a live `noheader` query without
    `timestamp`) and for error-only polls before any timestamp was seen.
    """

    def __init__(
        self,
        *,
        job_id: str,
        host: str,
        source: Source | None = None,
        tz: tzinfo = UTC,
        fallback_time: datetime | None = None,
    ) -> None:
        self.job_id = job_id
        self.host = host
        self.source = source or Source(host=host)
        self.tz = tz
        self.fallback_time = fallback_time
        self.columns: list[str] = list(_DEFAULT_GPU_COLUMNS)
        self.bad_rows = 0
        self.bad_examples: list[str] = []
        self.rows = 0
        self._group = _Group()
        self._last_time: datetime | None = None

    # -- internals -------------------------------------------------------------------------
    def _bad(self, line: str) -> None:
        self.bad_rows += 1
        if len(self.bad_examples) < 3:
            self.bad_examples.append(line[:200])

    def _close(self) -> GpuPoll | None:
        g = self._group
        self._group = _Group()
        if not g.gpus and not g.errors:
            return None
        t = g.time or self._last_time or self.fallback_time
        if t is None:
            self.bad_rows += len(g.gpus) or 1
            return None
        if g.time is not None:
            self._last_time = g.time
        return GpuPoll(
            job_id=self.job_id,
            event_time=t,
            source=self.source,
            host=self.host,
            gpus=g.gpus[:MAX_GPUS],
            errors=g.errors[:MAX_ERRORS],
        )

    def feed_line(self, line: str) -> list[GpuPoll]:
        """Consume one line (without newline); returns the polls this line completed (0 or 1)."""
        s = line.strip().strip("\ufeff")
        if not s or s.startswith("#"):
            return []
        cells = split_cells(s)
        out: list[GpuPoll]
        # A header has no number in it; checked first because a data row stops that test at its
        # first number, before any header name is parsed.
        if not any(parse_number(c) is not None for c in cells):
            names = [_header_name(c) for c in cells]
            if any(n in _GPU_FIELDS for n in names):
                out = self._close_if_rows()
                self.columns = [_GPU_FIELDS.get(n, n) for n in names]
                return out
        if len(cells) == 1 or _ERROR_RE.match(s):
            out = self._close_if_rows()
            self._group.errors.append(s[:500])
            return out
        if len(cells) != len(self.columns):
            self._bad(s)
            return []
        values = dict(zip(self.columns, cells))
        t = None
        if "timestamp" in values:
            t = parse_smi_timestamp(values["timestamp"], self.tz)
            if t is None:
                self._bad(s)
                return []
        idx = _int(values["index"]) if "index" in values else None
        out = []
        g = self._group
        if g.gpus and (
            (idx is not None and idx in g.indexes)
            or (t is not None and g.time is not None and abs((t - g.time).total_seconds()) > POLL_GROUP_S)
        ):
            out = self._close_if_rows()
            g = self._group
        if g.time is None:
            g.time = t
        g.gpus.append(
            GpuReading(
                index=idx,
                uuid=_text(values["uuid"]) if "uuid" in values else None,
                util_pct=parse_number(values["util_pct"]) if "util_pct" in values else None,
                mem_used_mib=parse_number(values["mem_used_mib"]) if "mem_used_mib" in values else None,
                mem_total_mib=parse_number(values["mem_total_mib"]) if "mem_total_mib" in values else None,
                power_w=parse_number(values["power_w"]) if "power_w" in values else None,
                temperature_c=parse_number(values["temperature_c"]) if "temperature_c" in values else None,
                ecc_uncorrected=_int(values["ecc_uncorrected"]) if "ecc_uncorrected" in values else None,
            )
        )
        if idx is not None:
            g.indexes.add(idx)
        self.rows += 1
        return out

    def _close_if_rows(self) -> list[GpuPoll]:
        if not self._group.gpus:
            return []
        p = self._close()
        return [p] if p is not None else []

    @property
    def pending(self) -> bool:
        return bool(self._group.gpus or self._group.errors)

    def flush(self) -> list[GpuPoll]:
        """Close the poll being assembled (end of file, or no new rows for a while)."""
        p = self._close()
        return [p] if p is not None else []

    def feed(self, lines: Iterable[str]) -> list[GpuPoll]:
        out: list[GpuPoll] = []
        for line in lines:
            out.extend(self.feed_line(line))
        return out


def parse_nvidia_smi_csv(
    text: str,
    *,
    job_id: str = "unknown",
    host: str = "unknown",
    source: Source | None = None,
    fallback_time: datetime | None = None,
    tz: tzinfo = UTC,
) -> list[GpuPoll]:
    """Parse a whole `--query-gpu ... --format=csv` text into polls, in file order."""
    p = GpuCsvParser(job_id=job_id, host=host, source=source, fallback_time=fallback_time, tz=tz)
    polls = p.feed(text.splitlines())
    polls.extend(p.flush())
    return polls


@dataclass
class AppGroup:
    time: datetime | None
    apps: list[ComputeApp]


@dataclass
class AppsParse:
    groups: list[AppGroup]
    bad_rows: int = 0


def parse_compute_apps_csv(text: str, tz: tzinfo = UTC) -> AppsParse:
    """Parse `--query-compute-apps` output into groups of apps (one group per poll time)."""
    columns = list(_DEFAULT_APP_COLUMNS)
    groups: list[AppGroup] = []
    bad = 0
    cur: AppGroup | None = None
    for line in text.splitlines():
        s = line.strip().strip("\ufeff")
        if not s or s.startswith("#"):
            continue
        cells = split_cells(s)
        names = [_header_name(c) for c in cells]
        if any(n in _APP_FIELDS for n in names) and not any(parse_number(c) is not None for c in cells):
            columns = [_APP_FIELDS.get(n, n) for n in names]
            cur = None
            continue
        if len(cells) == 1 or _ERROR_RE.match(s):
            continue
        if len(cells) != len(columns):
            bad += 1
            continue
        values = dict(zip(columns, cells))
        t = None
        if "timestamp" in values:
            t = parse_smi_timestamp(values["timestamp"], tz)
            if t is None:
                bad += 1
                continue
        if cur is None or (
            t is not None and cur.time is not None and abs((t - cur.time).total_seconds()) > POLL_GROUP_S
        ):
            cur = AppGroup(time=t, apps=[])
            groups.append(cur)
        cur.apps.append(
            ComputeApp(
                gpu_uuid=_text(values.get("gpu_uuid", "")),
                pid=_int(values.get("pid", "")),
                process_name=_text(values.get("process_name", "")),
                used_mib=parse_number(values.get("used_mib", "")),
            )
        )
    return AppsParse(groups=groups, bad_rows=bad)


def attach_apps(polls: list[GpuPoll], groups: Sequence[AppGroup], tolerance_s: float = 60.0) -> list[GpuPoll]:
    """Attach each app group to the poll with the nearest timestamp (within `tolerance_s`).

    `polls` must be sorted by event_time. Returns a new list (polls are frozen models).
    """
    if not polls or not groups:
        return polls
    times = [p.event_time for p in polls]
    extra: dict[int, list[ComputeApp]] = {}
    for g in groups:
        if g.time is None:
            continue
        i = bisect.bisect_left(times, g.time)
        best = None
        for j in (i - 1, i):
            if 0 <= j < len(times):
                d = abs((times[j] - g.time).total_seconds())
                if d <= tolerance_s and (best is None or d < best[0]):
                    best = (d, j)
        if best is not None:
            extra.setdefault(best[1], []).extend(g.apps)
    if not extra:
        return polls
    out = list(polls)
    for j, apps in extra.items():
        out[j] = out[j].model_copy(update={"apps": (list(out[j].apps) + apps)[:MAX_APPS]})
    return out


# -- live poller ---------------------------------------------------------------------------


class NvidiaSmiPoller:
    """Runs nvidia-smi every `interval_s` and emits one `GpuPoll` per run through `emit`.

    A missing binary, a timeout or a non-zero exit is reported in `GpuPoll.errors` (a poll that
    could not see the GPUs is evidence, not a crash) and counted in `counters` (it is also a
    `live.LiveSource`: `poll()` for the shipper).
    """

    def __init__(
        self,
        emit: Callable[[GpuPoll], None],
        *,
        job_id: str,
        host: str,
        runner: Runner | None = None,
        clock: Callable[[], datetime] | None = None,
        with_apps: bool = True,
        source: Source | None = None,
        shipper: str | None = None,
    ) -> None:
        self.emit = emit
        self.job_id = job_id
        self.host = host
        self.runner = runner or subprocess_runner()
        self.clock = clock or (lambda: datetime.now(UTC))
        self.with_apps = with_apps
        self.source = source or Source(host=host, stream="nvidia-smi", shipper=shipper)
        self.name = "nvidia-smi"
        self.counters = SourceCounters()

    def _run(self, cmd: list[str]) -> tuple[str, list[str]]:
        try:
            r = self.runner(cmd)
        except FileNotFoundError:
            self.counters.fail("command_not_found", f"{cmd[0]}: command not found")
            return "", [f"{cmd[0]}: command not found"]
        except subprocess.TimeoutExpired:
            self.counters.fail("timeout", f"{cmd[0]} timed out")
            return "", [f"{cmd[0]} timed out"]
        except OSError as exc:
            self.counters.fail("os_error", f"{cmd[0]}: {exc}")
            return "", [f"{cmd[0]}: {exc}"[:500]]
        errors = [ln.strip() for ln in (r.stderr or "").splitlines() if ln.strip()]
        if r.returncode != 0 and not errors:
            errors.append(f"nvidia-smi exited with status {r.returncode}")
        if r.returncode != 0:
            self.counters.fail("exit_status", errors[0])
        return r.stdout or "", errors

    def poll_once(self) -> GpuPoll:
        now = self.clock()
        out, errors = self._run(list(GPU_COMMAND))
        parser = GpuCsvParser(job_id=self.job_id, host=self.host, source=self.source, fallback_time=now)
        polls = parser.feed(out.splitlines())
        polls.extend(parser.flush())
        gpus: list[GpuReading] = []
        t = None
        for p in polls:
            gpus.extend(p.gpus)
            errors.extend(p.errors)
            t = t or p.event_time
        apps: list[ComputeApp] = []
        if self.with_apps:
            aout, aerr = self._run(list(APPS_COMMAND))
            for g in parse_compute_apps_csv(aout).groups:
                apps.extend(g.apps)
            errors.extend(e for e in aerr if e not in errors)
        poll = GpuPoll(
            job_id=self.job_id,
            event_time=t or now,
            ingest_time=now,
            source=self.source,
            host=self.host,
            gpus=gpus[:MAX_GPUS],
            apps=apps[:MAX_APPS],
            errors=errors[:MAX_ERRORS],
        )
        self.counters.received += 1
        self.emit(poll)
        return poll

    def poll(self) -> list[EventBase]:
        return [self.poll_once()]

    def close(self) -> None:
        pass

    def run(self, interval_s: float, stop: threading.Event) -> None:
        """Poll until `stop` is set."""
        while not stop.is_set():
            self.poll_once()
            stop.wait(interval_s)


__all__ = [
    "APPS_COMMAND",
    "GPU_COMMAND",
    "LIVE_GPU_QUERY",
    "AppGroup",
    "AppsParse",
    "GpuCsvParser",
    "NvidiaSmiPoller",
    "RunResult",
    "Runner",
    "attach_apps",
    "parse_compute_apps_csv",
    "parse_nvidia_smi_csv",
    "parse_number",
    "parse_smi_timestamp",
    "split_cells",
    "subprocess_runner",
]
