"""Harbor trial directories (a SkyRL/MarinSkyRL `trials_dir`, "trace_jobs") -> `TrialEvent`s.

Layout and semantics follow shared/reference/harbor-skyrl-formats.md §1-§2:

* a trial dir is a directory holding `config.json`, `result.json`, `trial.log` or `agent/`
  (a Harbor *job* dir, which also has `job.log`, is descended into, not read as a trial);
  trial dirs are direct children of the trials dir, or of
  `eval_sessions/<run>_eval[_<set>]_step<N>/` for MarinSkyRL eval sessions, or of a Harbor
  job dir (`trace_jobs/<run_tag>/`, CLI mode);
* **session**: a trial under an `eval_sessions` directory is `session="eval"`; every other
  trial is `"train"` (SkyRL writes training trials straight into `trials_dir`);
* `result.json` is the completion marker: present -> a `completed` event, absent -> the trial
  is running (a `started` event only);
* every trial dir gets a `started` event. Its time comes from content, never from a file time
  when content has one: `result.json.started_at`, else the first `agent/trajectory.json` step
  timestamp, else the first timestamped line of `trial.log`, else the mtime of `config.json`
  (or the dir) clamped to `ref_time` (a copied capture has copy-time mtimes; `ref_time` is
  `captured_at` offline, "now" live);
* `completed` time: `result.json.finished_at`, else the latest phase `finished_at`, else
  `exception_info.occurred_at` (naive local time, read as UTC), else the result.json mtime
  clamped to `ref_time`; never before the started time;
* reward = `verifier_result.rewards.reward` (or the only value of a one-key rewards dict), when
  finite; exception type/message from `exception_info`, else from the last line of
  `exception.txt` (`module.Type: message` -> `Type`);
* assistant_turns (§2.3): count of `role=="assistant"` in `agent_result.metadata.all_messages`,
  else `source=="agent"` steps of `agent/trajectory.json` (not `is_copied_context`), else
  `metadata.n_episodes`, else `len(rollout_details[0].completion_token_ids)`, else 0 when
  `agent_result` is null (the trial failed before the agent ran). For a running trial
  the started event carries the turns and samples seen so far (as of reading time);
* output_samples: the last <= 5 assistant outputs (message content), each cut to 4000 chars,
  redacted; timings_s: total, environment_setup, agent_setup, agent_execution, verifier, and llm
  (= sum of api_request_times_msec / 1000);
* an unreadable/truncated result.json is a problem entry plus a `completed` event with whatever a
  regex salvage of the text finds (reward, exception type, times); other trials are unaffected.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from rlhealth.agents.normalize import line_timestamp
from rlhealth.schemas.common import Source
from rlhealth.schemas.events import MAX_OUTPUT_SAMPLE_CHARS, MAX_OUTPUT_SAMPLES, TrialEvent
from rlhealth.sources.encoding import without_bom
from rlhealth.sources.json_objects import dict_at as _dict_at
from rlhealth.sources.json_objects import list_at as _list_at
from rlhealth.sources.redact import redact

EVAL_DIR = "eval_sessions"
MAX_DEPTH = 4
_TIMING_PHASES = ("environment_setup", "agent_setup", "agent_execution", "verifier")
# (path relative to the trial dir, problem, note)
TrialProblem = tuple[str, str, str]


@dataclass
class TrialRead:
    name: str
    rel: str
    session: str
    started: TrialEvent
    completed: TrialEvent | None
    problems: list[TrialProblem] = field(default_factory=list)


def _is_trial_dir(d: Path) -> bool:
    if (d / "job.log").exists():
        return False
    return any((d / n).exists() for n in ("config.json", "result.json", "trial.log", "agent"))


def find_trial_dirs(root: Path) -> list[tuple[Path, str]]:
    """(trial dir, session) pairs under `root`, sorted by path. Never raises for a missing root."""
    out: list[tuple[Path, str]] = []

    def walk(d: Path, depth: int, session: str) -> None:
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            return
        for e in entries:
            try:
                if not e.is_dir():
                    continue
            except OSError:
                continue
            p = Path(e.path)
            if _is_trial_dir(p):
                out.append((p, session))
            elif depth < MAX_DEPTH:
                walk(p, depth + 1, "eval" if e.name == EVAL_DIR or session == "eval" else session)

    walk(root, 1, "train")
    return out


def parse_iso_utc(v: Any) -> datetime | None:
    """An ISO 8601 / RFC 3339 string as an aware UTC datetime (naive = UTC); None for anything else."""
    if not isinstance(v, str) or not v.strip():
        return None
    s = v.strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    try:
        d = datetime.fromisoformat(s)
    except ValueError:
        return None
    return d.replace(tzinfo=UTC) if d.tzinfo is None else d.astimezone(UTC)


def _finite(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _text_of(message: Any) -> str:
    if isinstance(message, str):
        return message
    if isinstance(message, list):
        parts = []
        for p in message:
            if isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
            elif isinstance(p, str):
                parts.append(p)
        return "\n".join(parts)
    return ""


def _samples(texts: list[str]) -> list[str]:
    return [redact(t[:MAX_OUTPUT_SAMPLE_CHARS])[:MAX_OUTPUT_SAMPLE_CHARS] for t in texts[-MAX_OUTPUT_SAMPLES:]]


def _check_regular(path: Path) -> None:
    """Raise OSError unless `path` is a regular file: opening a FIFO would block forever."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(f"{path.name}: not a regular file (FIFO, socket or device): skipped")


def _read_json(path: Path) -> tuple[Any, str | None, str | None, bytes]:
    """(obj, problem, note, raw) — problem in {missing, empty, truncated, parse_error, unreadable}."""
    try:
        _check_regular(path)
        raw = without_bom(path.read_bytes())
    except FileNotFoundError:
        return None, "missing", None, b""
    except OSError as exc:
        return None, "unreadable", str(exc)[:200], b""
    if not raw.strip():
        return None, "empty", "file is empty", raw
    try:
        return orjson.loads(raw), None, None, raw
    except orjson.JSONDecodeError as exc:
        tail = raw.rstrip()[-1:]
        problem = "truncated" if tail not in (b"}", b"]") else "parse_error"
        return None, problem, str(exc)[:200], raw


_SALVAGE = {
    "trial_name": re.compile(rb'"trial_name"\s*:\s*"([^"]{1,300})"'),
    "task_name": re.compile(rb'"task_name"\s*:\s*"([^"]{1,300})"'),
    "reward": re.compile(rb'"reward"\s*:\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)'),
    "exception_type": re.compile(rb'"exception_type"\s*:\s*"([A-Za-z_][\w.]{0,200})"'),
    "n_episodes": re.compile(rb'"n_episodes"\s*:\s*(\d+)'),
}


def _salvage(raw: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, rx in _SALVAGE.items():
        m = rx.search(raw)
        if m:
            out[k] = m.group(1).decode("utf-8", errors="replace")
    return out


def _file_time(path: Path, ref_time: datetime) -> datetime | None:
    try:
        t = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except OSError:
        return None
    return min(t, ref_time)


def _exception_from_txt(path: Path) -> tuple[str | None, str | None]:
    try:
        _check_regular(path)
        text = path.read_bytes()[-200_000:].decode("utf-8", errors="replace")
    except OSError:
        return None, None
    for line in reversed(text.splitlines()):
        s = line.strip()
        if not s or s.startswith(("File ", "^", "~", "...")):
            continue
        m = re.match(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$", s)
        if m and (":" in s or m.group(1)[:1].isupper()):
            return m.group(1).rsplit(".", 1)[-1], (m.group(2) or "")
    return None, None


def _trajectory(path: Path) -> tuple[int | None, list[str], datetime | None, str | None]:
    """(agent turns, agent messages, first step timestamp, problem)."""
    obj, problem, _note, _raw = _read_json(path)
    if obj is None or not isinstance(obj, dict):
        return None, [], None, problem if problem not in (None, "missing") else None
    steps = _list_at(obj, "steps")
    turns = 0
    texts: list[str] = []
    first: datetime | None = None
    for st in steps:
        if not isinstance(st, dict):
            continue
        if first is None:
            first = parse_iso_utc(st.get("timestamp"))
        if st.get("source") == "agent" and st.get("is_copied_context") is not True:
            turns += 1
            texts.append(_text_of(st.get("message")))
    return turns, texts, first, None


def _first_log_time(path: Path, ref_time: datetime) -> datetime | None:
    try:
        _check_regular(path)
        with path.open("rb") as f:
            head = f.read(65536)
    except OSError:
        return None
    for line in head.decode("utf-8", errors="replace").splitlines()[:200]:
        t = line_timestamp(line, ref_time)
        if t is not None:
            return t
    return None


def read_trial_dir(
    trial_dir: Path,
    *,
    job_id: str,
    ref_time: datetime,
    session: str = "train",
    rel: str | None = None,
    source: Source | None = None,
) -> TrialRead:
    """Read one trial dir into a started event and, when result.json exists, a completed event."""
    name = trial_dir.name
    rel = rel or name
    src = source or Source(stream=rel)
    problems: list[TrialProblem] = []
    result_path = trial_dir / "result.json"
    has_result = result_path.exists()
    res: dict[str, Any] | None = None
    salvage: dict[str, Any] = {}
    if has_result:
        obj, problem, note, raw = _read_json(result_path)
        if isinstance(obj, dict):
            res = obj
        else:
            if obj is not None:
                problem, note = "parse_error", "result.json is not an object"
            problems.append(("result.json", problem or "parse_error", note or "unreadable result.json"))
            salvage = _salvage(raw)

    task_name: str | None = None
    if res is not None and isinstance(res.get("task_name"), str):
        task_name = res["task_name"]
    elif salvage.get("task_name"):
        task_name = salvage["task_name"]
    else:
        cfg, _p, _n, _r = _read_json(trial_dir / "config.json")
        task = cfg.get("task") if isinstance(cfg, dict) else None
        if isinstance(task, dict) and isinstance(task.get("path"), str) and task["path"]:
            task_name = task["path"].rstrip("/").rsplit("/", 1)[-1]
        elif "__" in name:
            task_name = name.rsplit("__", 1)[0]

    agent_result = _dict_at(res, "agent_result") if res is not None else {}
    metadata = _dict_at(agent_result, "metadata")

    # turns and samples
    turns: int | None = None
    texts: list[str] = []
    msgs = metadata.get("all_messages")
    if isinstance(msgs, list) and msgs:
        assistant = [m for m in msgs if isinstance(m, dict) and m.get("role") == "assistant"]
        turns = len(assistant)
        texts = [_text_of(m.get("content")) for m in assistant]
    traj_first: datetime | None = None
    traj_path = trial_dir / "agent" / "trajectory.json"
    need_traj = turns is None or res is None
    if need_traj and traj_path.exists():
        t_turns, t_texts, traj_first, t_problem = _trajectory(traj_path)
        if t_problem:
            problems.append(("agent/trajectory.json", t_problem, "unreadable trajectory"))
        if turns is None and t_turns is not None:
            turns, texts = t_turns, t_texts
    if turns is None and isinstance(metadata.get("n_episodes"), int):
        turns = metadata["n_episodes"]
    if turns is None:
        rd = agent_result.get("rollout_details")
        if (isinstance(rd, list) and rd and isinstance(rd[0], dict)
                and isinstance(rd[0].get("completion_token_ids"), list)):
            turns = len(rd[0]["completion_token_ids"])
    if turns is None and salvage.get("n_episodes"):
        turns = int(salvage["n_episodes"])
    if turns is None and res is not None and "agent_result" in res and res["agent_result"] is None:
        turns = 0  # agent_result is null only when the trial failed before the agent ran (§1.4)

    # times
    started_at = parse_iso_utc(res.get("started_at")) if res is not None else None
    if started_at is None:
        started_at = traj_first
    if started_at is None and (trial_dir / "trial.log").exists():
        started_at = _first_log_time(trial_dir / "trial.log", ref_time)
    start_time = started_at
    if start_time is None:
        start_time = _file_time(trial_dir / "config.json", ref_time) or _file_time(trial_dir, ref_time) or ref_time

    started = TrialEvent(
        job_id=job_id,
        event_time=start_time,
        source=src,
        phase="started",
        trial_name=name,
        task_name=task_name,
        session=session,
        started_at=started_at,
        assistant_turns=turns if not has_result else None,
        output_samples=_samples(texts) if not has_result else [],
    )
    if not has_result:
        return TrialRead(name, rel, session, started, None, problems)

    # completed
    reward = None
    exc_type = exc_msg = None
    finished_at = None
    timings: dict[str, float] = {}
    if res is not None:
        vr = _dict_at(res, "verifier_result")
        rewards = _dict_at(vr, "rewards")
        if "reward" in rewards:
            reward = _finite(rewards["reward"])
        elif len(rewards) == 1:
            reward = _finite(next(iter(rewards.values())))
        ei = res.get("exception_info") if isinstance(res.get("exception_info"), dict) else None
        if ei is not None:
            exc_type = ei.get("exception_type") if isinstance(ei.get("exception_type"), str) else None
            exc_msg = ei.get("exception_message") if isinstance(ei.get("exception_message"), str) else None
        finished_at = parse_iso_utc(res.get("finished_at"))
        if started_at is not None and finished_at is not None:
            timings["total"] = (finished_at - started_at).total_seconds()
        phase_end: datetime | None = None
        for ph in _TIMING_PHASES:
            ti = res.get(ph)
            if isinstance(ti, dict):
                a, b = parse_iso_utc(ti.get("started_at")), parse_iso_utc(ti.get("finished_at"))
                if a is not None and b is not None:
                    timings[ph] = (b - a).total_seconds()
                if b is not None and (phase_end is None or b > phase_end):
                    phase_end = b
        times = metadata.get("api_request_times_msec")
        if isinstance(times, list) and times:
            timings["llm"] = sum(x for x in times if isinstance(x, (int, float)) and not isinstance(x, bool)) / 1000.0
        if finished_at is None:
            finished_at = phase_end or (parse_iso_utc(ei.get("occurred_at")) if ei else None)
    else:
        r = salvage.get("reward")
        reward = _finite(float(r)) if r is not None else None
        exc_type = salvage.get("exception_type")
    if exc_type is None and (trial_dir / "exception.txt").exists():
        exc_type, exc_msg = _exception_from_txt(trial_dir / "exception.txt")
    if exc_type is not None and "." in exc_type:
        exc_type = exc_type.rsplit(".", 1)[-1]
    end_time = finished_at or _file_time(result_path, ref_time) or ref_time
    if end_time < start_time:
        end_time = start_time
    completed = TrialEvent(
        job_id=job_id,
        event_time=end_time,
        source=src,
        phase="completed",
        trial_name=name,
        task_name=task_name,
        session=session,
        reward=reward,
        exception_type=exc_type,
        exception_message=(redact(exc_msg[:MAX_OUTPUT_SAMPLE_CHARS])[:MAX_OUTPUT_SAMPLE_CHARS]
                           if exc_msg is not None else None),
        assistant_turns=turns,
        started_at=started_at,
        finished_at=finished_at,
        timings_s=timings,
        output_samples=_samples(texts),
    )
    return TrialRead(name, rel, session, started, completed, problems)


def read_trials(
    root: Path,
    *,
    job_id: str,
    ref_time: datetime,
    rel_prefix: str = "trace_jobs",
    source: Source | None = None,
) -> Iterator[TrialRead]:
    """Every trial dir under `root`, read. One bad trial never stops the others."""
    for d, session in find_trial_dirs(root):
        rel = f"{rel_prefix}/{d.relative_to(root).as_posix()}"
        src = (source or Source()).model_copy(update={"stream": rel})
        try:
            yield read_trial_dir(d, job_id=job_id, ref_time=ref_time, session=session, rel=rel, source=src)
        except (OSError, ValueError) as exc:  # pydantic ValidationError is a ValueError
            t = _file_time(d, ref_time) or ref_time
            yield TrialRead(
                d.name,
                rel,
                session,
                TrialEvent(job_id=job_id, event_time=t, source=src, phase="started", trial_name=d.name,
                           session=session),
                None,
                [("", "unreadable", f"{type(exc).__name__}: {str(exc)[:200]}")],
            )


@dataclass
class _Seen:
    ino: int
    completed: bool = False
    bad_result_size: int | None = None


class TrialDirWatcher:
    """Polls a trials dir and reports what changed since the last poll.

    * a new trial dir -> `started` (plus `completed` when it already has a result.json);
    * result.json appears -> `completed` (an unparseable result.json is retried on the next poll
      while its size still changes — Harbor may be mid-write — then salvaged);
    * a dir seen before is gone -> `vanished` at `clock()` (a Harbor retry deletes the dir and
      reruns the same trial name; when it reappears it is `started` again);
    * the same name with a new inode between polls -> `vanished` then `started`.
    """

    def __init__(
        self,
        root: Path,
        emit: Callable[[TrialEvent], None] | None = None,
        *,
        job_id: str,
        clock: Callable[[], datetime] | None = None,
        rel_prefix: str = "trace_jobs",
        source: Source | None = None,
    ) -> None:
        self.root = Path(root)
        self.emit = emit
        self.job_id = job_id
        self.clock = clock or (lambda: datetime.now(UTC))
        self.rel_prefix = rel_prefix
        self.source = source or Source()
        self._seen: dict[str, _Seen] = {}
        self.problems: list[tuple[str, str, str]] = []

    def _vanished(self, rel: str, name: str, now: datetime, session: str | None) -> TrialEvent:
        return TrialEvent(
            job_id=self.job_id,
            event_time=now,
            source=self.source.model_copy(update={"stream": rel}),
            phase="vanished",
            trial_name=name,
            session=session,
        )

    def poll(self) -> list[TrialEvent]:
        now = self.clock()
        out: list[TrialEvent] = []
        present: dict[str, tuple[Path, str]] = {}
        for d, session in find_trial_dirs(self.root):
            rel = f"{self.rel_prefix}/{d.relative_to(self.root).as_posix()}"
            present[rel] = (d, session)
        for rel in [r for r in self._seen if r not in present]:
            del self._seen[rel]
            session = "eval" if f"/{EVAL_DIR}/" in f"/{rel}/" else "train"
            out.append(self._vanished(rel, rel.rsplit("/", 1)[-1], now, session))
        for rel, (d, session) in present.items():
            try:
                ino = d.stat().st_ino
            except OSError:
                continue
            seen = self._seen.get(rel)
            if seen is not None and seen.ino != ino:
                out.append(self._vanished(rel, d.name, now, session))
                seen = None
            if seen is not None and seen.completed:
                continue
            result = d / "result.json"
            has_result = result.exists()
            if seen is not None and not has_result:
                continue
            src = self.source.model_copy(update={"stream": rel})
            try:
                tr = read_trial_dir(d, job_id=self.job_id, ref_time=now, session=session, rel=rel, source=src)
            except (OSError, ValueError):
                continue
            if tr.completed is not None and tr.problems and any(p[0] == "result.json" for p in tr.problems):
                try:
                    size = result.stat().st_size
                except OSError:
                    size = -1
                prev = seen.bad_result_size if seen is not None else None
                if prev != size:  # maybe mid-write: look again next poll
                    if seen is None:
                        out.append(tr.started)
                        seen = _Seen(ino=ino)
                        self._seen[rel] = seen
                    seen.bad_result_size = size
                    continue
            if seen is None:
                out.append(tr.started)
                seen = _Seen(ino=ino)
                self._seen[rel] = seen
            if tr.completed is not None:
                out.append(tr.completed)
                seen.completed = True
                self.problems.extend((f"{rel}/{p[0]}" if p[0] else rel, p[1], p[2]) for p in tr.problems)
        out.sort(key=lambda e: e.event_time)
        if self.emit is not None:
            for e in out:
                self.emit(e)
        return out


__all__ = ["TrialDirWatcher", "TrialRead", "find_trial_dirs", "read_trial_dir", "read_trials"]
