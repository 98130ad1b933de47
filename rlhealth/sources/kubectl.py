"""`kubectl get pods -o json` (a `List`/`PodList`, or one `Pod`) -> `PodStatus` records.

Used by the capture reader for `pods/<RFC3339>.json` snapshots and by `kubernetes_api` for live
polls (it fetches the same JSON from the API server). Pure functions over decoded JSON.

Per pod:

* `phase` = status.phase; `ready` = the `Ready` condition (else all containers ready);
* `restart_count` = sum of restartCount over init and app containers;
* `reasons` = pod-level reason (`Evicted`), container `state.waiting.reason`
  (`CrashLoopBackOff`, `ImagePullBackOff`, `ErrImagePull`, ...), `state.terminated.reason` and
  `lastState.terminated.reason` (`OOMKilled`, `Error`, `Completed`, ...), plus an unscheduled
  `PodScheduled` condition's reason (`Unschedulable`); duplicates removed, order kept;
* `exit_code` = current terminated exit code, else the last terminated one;
* `message` = the first non-empty waiting/terminated/pod message (trimmed to 1000 chars).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from rlhealth.schemas.events import JobState, PodStatus
from rlhealth.sources.json_objects import dict_at as _dict_at
from rlhealth.sources.redact import redact

MAX_PODS = 256


def _containers(status: dict) -> list[dict]:
    out: list[dict] = []
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        v = status.get(key)
        if isinstance(v, list):
            out.extend(c for c in v if isinstance(c, dict))
    return out


def _add(reasons: list[str], r: Any) -> None:
    if isinstance(r, str) and r and r not in reasons:
        reasons.append(r)


def pod_status(pod: dict, fallback_name: str = "pod") -> PodStatus:
    """One pod object (as kubectl prints it) -> PodStatus. Tolerates partial objects."""
    meta = _dict_at(pod, "metadata")
    status = _dict_at(pod, "status") if isinstance(pod.get("status"), dict) else pod
    name = meta.get("name") if isinstance(meta.get("name"), str) else fallback_name
    reasons: list[str] = []
    messages: list[str] = []
    exit_code: int | None = None
    last_exit: int | None = None
    _add(reasons, status.get("reason"))
    if isinstance(status.get("message"), str):
        messages.append(status["message"])
    restarts = 0
    containers = _containers(status)
    all_ready = bool(containers)
    for c in containers:
        rc = c.get("restartCount")
        if isinstance(rc, int):
            restarts += rc
        if not c.get("ready"):
            all_ready = False
        state = _dict_at(c, "state")
        last = _dict_at(c, "lastState")
        for sname in ("waiting", "terminated"):
            s = state.get(sname)
            if isinstance(s, dict):
                _add(reasons, s.get("reason"))
                if isinstance(s.get("message"), str):
                    messages.append(s["message"])
                if sname == "terminated" and isinstance(s.get("exitCode"), int) and exit_code is None:
                    exit_code = s["exitCode"]
        lt = last.get("terminated")
        if isinstance(lt, dict):
            _add(reasons, lt.get("reason"))
            if isinstance(lt.get("exitCode"), int) and last_exit is None:
                last_exit = lt["exitCode"]
            if isinstance(lt.get("message"), str):
                messages.append(lt["message"])
    ready: bool | None = all_ready if containers else None
    for cond in status.get("conditions") or []:
        if not isinstance(cond, dict):
            continue
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            _add(reasons, cond.get("reason"))
            if isinstance(cond.get("message"), str):
                messages.append(cond["message"])
    return PodStatus(
        name=name,
        phase=status.get("phase") if isinstance(status.get("phase"), str) else None,
        ready=ready,
        restart_count=restarts,
        reasons=reasons,
        exit_code=exit_code if exit_code is not None else last_exit,
        message=next((redact(m.strip()[:1000]) for m in messages if m and m.strip()), None),
    )


def pod_statuses_from_json(obj: Any) -> list[PodStatus]:
    """A decoded `kubectl get pods -o json` document (List/PodList or a single Pod)."""
    if isinstance(obj, dict) and isinstance(obj.get("items"), list):
        items = obj["items"]
    elif isinstance(obj, dict):
        items = [obj]
    elif isinstance(obj, list):
        items = obj
    else:
        raise ValueError(f"not a pod list: {type(obj).__name__}")
    return [pod_status(p, f"pod-{i}") for i, p in enumerate(items[:MAX_PODS]) if isinstance(p, dict)]


def infer_state(pods: Iterable[PodStatus]) -> JobState:
    """The job's state as far as its pods tell: used only when nothing better (state.jsonl) exists."""
    phases = [p.phase for p in pods]
    if not phases:
        return "unknown"
    if any(ph == "Failed" for ph in phases):
        return "failed"
    if all(ph == "Succeeded" for ph in phases):
        return "succeeded"
    if any(ph == "Running" for ph in phases):
        return "running"
    if all(ph == "Pending" for ph in phases):
        return "pending"
    return "unknown"


_STAMP_RE = re.compile(r"(\d{4}-\d{2}-\d{2})[T _](\d{2})[:\-_]?(\d{2})[:\-_]?(\d{2})(?:\.\d+)?(Z|[+-]\d{2}:?\d{2})?")


def snapshot_time(path: Path) -> datetime | None:
    """`pods/2026-10-14T13:45:00Z.json` -> 2026-10-14 13:45:00 UTC (also tolerates `-`/`_` for `:`)."""
    m = _STAMP_RE.search(path.name)
    if m is None:
        return None
    d, h, mi, s, tz = m.groups()
    text = f"{d}T{h}:{mi}:{s}"
    if tz and tz != "Z":
        text += tz if ":" in tz else f"{tz[:3]}:{tz[3:]}"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def load_pods_json(text: str | bytes) -> list[PodStatus]:
    """Parse kubectl JSON text. Leading `# ...` annotation lines (our fixtures) are skipped."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    lines = text.splitlines()
    while lines and lines[0].lstrip().startswith("#"):
        lines.pop(0)
    return pod_statuses_from_json(orjson.loads("\n".join(lines)))


__all__ = ["infer_state", "load_pods_json", "pod_status", "pod_statuses_from_json", "snapshot_time"]
