"""Group Python tracebacks into one record each, incrementally and with bounded state.

Feed every line of one stream in order: ``feed(index, text, ts)`` returns the tracebacks that
completed with (or before) this line; ``flush()`` returns whatever is still open. Lines may
carry ANSI codes and prefixes; they are stripped here. Interleaved writers are separated by
their prefix (Ray ``(Actor pid=N, ip=A)``, vLLM ``(EngineCore_DP0 pid=N)``, torch ``[rankN]:``),
so each writer's traceback is assembled on its own.

Recognised shapes:

* ``Traceback (most recent call last):`` blocks, 3.11 caret lines, chained tracebacks
  ("The above exception was the direct cause …" / "During handling of the above exception …")
  -> one record; ``exc_type``/``message`` are the **last** exception (the one raised),
  ``chain`` lists every exception type in order (the first is usually the root cause);
* Ray ``ray.exceptions.RayTaskError(Cause): ray::Class.method() (pid=…)`` wrappers (they replace
  the remote ``Traceback`` header and continue with remote frames and the original exception);
* vLLM multi-line records whose every line repeats ``LEVEL MM-DD HH:MM:SS [file:line] ``;
* exception groups (``  + Exception Group Traceback``, ``  | `` lines).

State is bounded: at most ``max_lines`` lines per open traceback (head and tail kept), at most
``max_streams`` concurrently open writers (the oldest is closed and emitted), text <= 4 KB.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rlhealth.agents.normalize import peel_prefixes, strip_ansi

__all__ = ["Traceback", "TracebackAssembler", "fingerprint", "normalize_message"]

MAX_TEXT = 4096

_VLLM_HEADER_RE = re.compile(
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \[?[\w./-]+(?:/\.\.\./[\w./-]+)?:\d+\] ?"
)
_TB_START_RE = re.compile(r"^[ +|]*(?:Exception Group )?Traceback \(most recent call last\):")
_RAY_WRAPPER_RE = re.compile(r"^(?:[\w.]+\.)?RayTaskError\(([\w.]+)\): ray::(\S+?)\(\)")
_EXC_RE = re.compile(
    r"^[ |]*((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Failure|Group|Warning)"
    r"(?:\([\w.]+\))?|(?:[a-z_][\w]*\.)+[A-Z]\w*)(?::(?: (.*))?)?\s*$"
)
_GUTTER_RE = re.compile(r"^ *(?:\| ?)+")
_GROUP_START_RE = re.compile(r"^[ +|]*Exception Group Traceback \(most recent call last\):")
_FRAME_RE = re.compile(r'^[ |]*File "([^"]+)", line \d+, in (\S+)')
_CHAIN_RE = re.compile(
    r"^[ |]*(?:The above exception was the direct cause of the following exception:"
    r"|During handling of the above exception, another exception occurred:)"
)

_HEX_RE = re.compile(r"0x[0-9a-fA-F]+")
_PATH_RE = re.compile(r"(?:[A-Za-z]:)?(?:/[\w.@+~-]+)+/?")
_NUM_RE = re.compile(r"\d+(?:[.,]\d+)*")
_HEXID_RE = re.compile(r"\b[0-9a-f]{12,}\b")
_WS_RE = re.compile(r"\s+")


def normalize_message(message: str) -> str:
    """Message with numbers, sizes, hex addresses, ids, paths and pids masked."""
    m = _HEX_RE.sub("<hex>", message)
    m = _HEXID_RE.sub("<id>", m)
    m = _PATH_RE.sub("<path>", m)
    m = _NUM_RE.sub("<n>", m)
    m = _WS_RE.sub(" ", m).strip()
    return m[:300]


def fingerprint(exc_type: str, message: str) -> str:
    """Stable id of a failure across attempts: ignores numbers, sizes, hex addresses, pids,
    paths and the module path of the exception class (torch.cuda.X == torch.X).

    The frames are not part of it: a shipper cuts a traceback into batches wherever it flushes, so
    the frames a reader sees before the exception line differ from attempt to attempt, and a state
    poll's error text has none; the same failure must get the same id from each."""
    if "(" not in exc_type:
        base = exc_type.rsplit(".", 1)[-1]
    else:  # RayTaskError(torch.OutOfMemoryError): both class names without their modules
        outer, inner = exc_type.split("(", 1)
        base = outer.rsplit(".", 1)[-1] + "(" + inner.rsplit(".", 1)[-1]
    parts = [base, normalize_message(message)]
    return hashlib.sha1("\x1f".join(parts).encode("utf-8", "replace")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Traceback:
    exc_type: str
    message: str
    fingerprint: str
    first_index: int
    last_index: int
    frames: tuple[str, ...]
    text: str
    ts: datetime | None
    chain: tuple[str, ...] = ()
    stream: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"exc_type": self.exc_type, "message": self.message,
                "fingerprint": self.fingerprint, "first_index": self.first_index,
                "last_index": self.last_index, "frames": list(self.frames), "text": self.text,
                "ts": self.ts.isoformat() if self.ts else None, "chain": list(self.chain),
                "stream": self.stream}


@dataclass
class _Open:
    key: str
    first_index: int
    last_index: int
    ts: datetime | None
    head: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    dropped: int = 0
    frames: list[str] = field(default_factory=list)
    chain: list[tuple[str, str]] = field(default_factory=list)
    state: str = "frames"  # frames | exc | blank | chain
    seq: int = 0
    group: bool = False  # opened by "Exception Group Traceback"

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "first_index": self.first_index, "last_index": self.last_index,
                "ts": self.ts.isoformat() if self.ts else None, "head": self.head,
                "tail": self.tail, "dropped": self.dropped, "frames": self.frames,
                "chain": [list(c) for c in self.chain], "state": self.state, "seq": self.seq,
                "group": self.group}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> _Open:
        return cls(key=d["key"], first_index=d["first_index"], last_index=d["last_index"],
                   ts=datetime.fromisoformat(d["ts"]) if d.get("ts") else None,
                   head=list(d["head"]), tail=list(d["tail"]), dropped=d["dropped"],
                   frames=list(d["frames"]), chain=[(a, b) for a, b in d["chain"]],
                   state=d["state"], seq=d.get("seq", 0), group=d.get("group", False))


class TracebackAssembler:
    def __init__(self, max_lines: int = 200, max_streams: int = 64, max_frames: int = 8) -> None:
        self.max_lines = max_lines
        self.max_streams = max_streams
        self.max_frames = max_frames
        self._open: dict[str, _Open] = {}
        self._seq = 0

    # -- helpers -------------------------------------------------------------------------
    @staticmethod
    def _split(text: str) -> tuple[str, str]:
        prefixes, rest = peel_prefixes(strip_ansi(text))
        m = _VLLM_HEADER_RE.match(rest)
        if m:
            rest = rest[m.end():]
        key = "|".join(f"{p.name}:{p.pid}" for p in prefixes if not p.name.startswith("pod/"))
        return key, rest.rstrip("\r")

    def _add_line(self, ob: _Open, line: str) -> None:
        keep_head = 20
        if len(ob.head) < keep_head:
            ob.head.append(line)
            return
        ob.tail.append(line)
        limit = self.max_lines - keep_head
        if len(ob.tail) > limit:
            drop = len(ob.tail) - limit
            del ob.tail[:drop]
            ob.dropped += drop

    def _finish(self, ob: _Open) -> Traceback:
        if ob.chain:
            exc_type, message = ob.chain[-1]
        else:
            exc_type, message = "", ""
        if ob.group:
            # An exception group is raised as the group; its sub-exceptions are what went wrong,
            # so they follow the group's own message (classification and fingerprints see them).
            top = next((i for i, (t, _m) in enumerate(ob.chain) if t.endswith("Group")), None)
            if top is not None:
                exc_type, message = ob.chain[top]
                subs = "; ".join(f"{t}: {m}" if m else t for i, (t, m) in enumerate(ob.chain) if i != top)
                if subs:
                    message = f"{message} [{subs}]"[:1000]
        # A Ray wrapper followed by the original exception: report the original (last).
        frames = tuple(ob.frames[-self.max_frames:])
        lines = list(ob.head)
        if ob.dropped:
            lines.append(f"[... {ob.dropped} lines dropped ...]")
        lines.extend(ob.tail)
        text = "\n".join(lines)
        if len(text) > MAX_TEXT:
            text = text[:1024] + "\n[...]\n" + text[-(MAX_TEXT - 1024 - 7):]
        return Traceback(exc_type=exc_type, message=message,
                         fingerprint=fingerprint(exc_type, message),
                         first_index=ob.first_index, last_index=ob.last_index, frames=frames,
                         text=text, ts=ob.ts, chain=tuple(c[0] for c in ob.chain), stream=ob.key)

    def _start(self, key: str, index: int, ts: datetime | None, line: str, out: list[Traceback]) -> _Open:
        if len(self._open) >= self.max_streams:
            oldest = min(self._open.values(), key=lambda o: o.seq)
            out.append(self._finish(self._open.pop(oldest.key)))
        self._seq += 1
        ob = _Open(key=key, first_index=index, last_index=index, ts=ts, seq=self._seq)
        self._open[key] = ob
        self._add_line(ob, line)
        return ob

    # -- public --------------------------------------------------------------------------
    def feed(self, index: int, text: str, ts: datetime | None = None) -> list[Traceback]:
        out: list[Traceback] = []
        key, line = self._split(text)
        ob = self._open.get(key)
        if ob is None:
            if _TB_START_RE.match(line):
                self._start(key, index, ts, line, out).group = bool(_GROUP_START_RE.match(line))
            else:
                m = _RAY_WRAPPER_RE.match(line)
                if m:
                    ob = self._start(key, index, ts, line, out)
                    ob.chain.append((f"RayTaskError({m.group(1)})", line.split(": ", 1)[1]))
            return out
        stripped = line.strip()
        if _TB_START_RE.match(line):
            nested = line.lstrip().startswith("|")
            if ob.state == "chain" or nested or (ob.state == "frames" and not ob.chain
                                                 and len(ob.head) <= 1):
                ob.state = "frames"
                self._take(ob, index, line)
                return out
            # a new, unchained traceback: close the open one first
            out.append(self._finish(self._open.pop(key)))
            self._start(key, index, ts, line, out).group = bool(_GROUP_START_RE.match(line))
            return out
        if _CHAIN_RE.match(line):
            ob.state = "chain"
            self._take(ob, index, line)
            return out
        fm = _FRAME_RE.match(line)
        if fm:
            path, func = fm.group(1), fm.group(2)
            ob.frames.append(f"{path.rsplit('/', 1)[-1]}:{func}")
            if len(ob.frames) > 4 * self.max_frames:
                del ob.frames[: len(ob.frames) - self.max_frames]
            ob.state = "frames"
            self._take(ob, index, line)
            return out
        if not stripped or stripped.strip("|+- ") == "":
            if ob.state == "exc":
                ob.state = "blank"
            self._take(ob, index, line, count=False)
            return out
        # inside an exception group the frame and source lines sit behind a "  | " gutter
        g = _GUTTER_RE.match(line)
        inner = line[g.end():] if g else line
        indented = inner[:1] in (" ", "\t") and not inner.lstrip().startswith("|")
        if ob.state == "frames" and indented:
            self._take(ob, index, line)  # source / caret / abbreviated-frames lines
            return out
        em = _EXC_RE.match(line)
        if em and (ob.state in ("frames", "exc") or line.lstrip().startswith("|")):
            exc_type, message = em.group(1), (em.group(2) or "").strip()
            ob.chain.append((exc_type, message))
            ob.state = "frames" if _RAY_WRAPPER_RE.match(line.lstrip()) else "exc"
            self._take(ob, index, line)
            return out
        if ob.state == "exc" and indented:
            self._take(ob, index, line)  # multi-line message continuation (\tclass_name: ...)
            return out
        if ob.state == "frames" and not ob.chain:
            # unprefixed line from another writer inside the frames: keep waiting
            return out
        # anything else closes the traceback; the line may open a new one
        out.append(self._finish(self._open.pop(key)))
        out.extend(self.feed(index, text, ts))
        return out

    def _take(self, ob: _Open, index: int, line: str, count: bool = True) -> None:
        ob.last_index = index if count else ob.last_index
        self._add_line(ob, line)

    def flush(self) -> list[Traceback]:
        out = [self._finish(ob) for ob in sorted(self._open.values(), key=lambda o: o.seq)]
        self._open.clear()
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"max_lines": self.max_lines, "max_streams": self.max_streams,
                "max_frames": self.max_frames, "seq": self._seq,
                "open": [o.to_dict() for o in self._open.values()]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TracebackAssembler:
        a = cls(max_lines=d.get("max_lines", 200), max_streams=d.get("max_streams", 64),
                max_frames=d.get("max_frames", 8))
        a._seq = d.get("seq", 0)
        for od in d.get("open", []):
            o = _Open.from_dict(od)
            a._open[o.key] = o
        return a
