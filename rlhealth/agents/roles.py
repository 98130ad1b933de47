"""Which part of an RL job a log line or GPU belongs to: trainer, engine, rollout, ray, or other.

Roles matter because each has its own cadence, and because a busy engine must never vouch
for a frozen trainer (the colocated-engine deception).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

from rlhealth.agents.normalize import Prefix

TRAINER, ENGINE, ROLLOUT, RAY, SCHEDULER, OTHER = "trainer", "engine", "rollout", "ray", "scheduler", "other"
ROLES = (TRAINER, ENGINE, ROLLOUT, RAY, SCHEDULER, OTHER)

# Process / Ray actor names by role. Order matters: the first match wins.
_ROLE_NAME_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (ENGINE, re.compile(r"vllm|inferenceengine|llmrayactor|enginecore|apiserver|^worker(_|$)|rayworkerwrapper|"
                        r"sglang", re.I)),
    (ROLLOUT, re.compile(r"rollout|generator|coordinator|harbor|terminalbench|envworker", re.I)),
    (TRAINER, re.compile(r"skyrl_entrypoint|policy|critic|refworker|ref_worker|reward_?model|fsdp|megatron|deepspeed|"
                         r"trainer|taskrunner|main_task|workerdict|actormodel|learner|driver|^rank\d+$", re.I)),
    (RAY, re.compile(r"^raylet$|gcs_server|autoscaler|dashboard|runtime_env|monitor", re.I)),
)

_POD_GEN_RE = re.compile(r"^pod/(?P<pod>[^/\s]+?)(?:/(?P<container>[^\s]+))?$")


def role_of_name(name: str) -> str | None:
    for role, pattern in _ROLE_NAME_PATTERNS:
        if pattern.search(name):
            return role
    return None


@lru_cache(maxsize=4096)  # pure; called for every matched line, whose prefixes repeat
def role_of_prefixes(prefixes: tuple[Prefix, ...]) -> str | None:
    """The innermost named process decides (a vLLM child inside a Ray worker is an engine)."""
    for p in reversed(prefixes):
        if p.name.startswith("pod/"):
            continue
        role = role_of_name(p.name)
        if role:
            return role
    return None


# Words of a log file's name that say which part of the job writes it. Pod and file names end with
# the component (`<job>-<component>-<index>`), so the last such word wins: `rl-q3-vllm-trainer-0.log`
# is a trainer's log although the job's name says vllm.
_STREAM_ROLE_WORDS: dict[str, str] = {
    **dict.fromkeys(("vllm", "sglang", "engine", "enginecore", "inference", "decode", "prefill"), ENGINE),
    **dict.fromkeys(("rollout", "rollouts", "generator", "harbor"), ROLLOUT),
    **dict.fromkeys(("trainer", "driver", "policy", "learner", "fsdp", "megatron", "critic"), TRAINER),
}
_WORD_RE = re.compile(r"[a-z0-9]+")


def role_of_stream(stream: str | None) -> str:
    """A default role from a file name; mixed streams (pod_rank*.log) fall back to OTHER."""
    if not stream:
        return OTHER
    s = stream.lower()
    if "/ray/" in s or s.startswith("ray/") or "raylet" in s or "gcs_server" in s:
        return RAY
    if "dmesg" in s:
        return OTHER
    for word in reversed(_WORD_RE.findall(s.rsplit("/", 1)[-1])):
        role = _STREAM_ROLE_WORDS.get(word)
        if role is not None:
            return role
    if "vllm" in s or "engine" in s:
        return ENGINE
    if "trainer" in s or "driver" in s:
        return TRAINER
    return OTHER


def pod_of(prefixes: tuple[Prefix, ...]) -> str | None:
    for p in prefixes:
        if p.name.startswith("pod/"):
            m = _POD_GEN_RE.match(p.name)
            if m:
                return m.group("pod")
    return None


_GEN_SUFFIX_RE = re.compile(r"-(\d+)$")


@lru_cache(maxsize=4096)
def generation_of_prefixes(prefixes: tuple[Prefix, ...]) -> int | None:
    """generation_of_pod(pod_of(prefixes)), memoised: called for every matched line."""
    return generation_of_pod(pod_of(prefixes))


def generation_of_pod(pod: str | None) -> int | None:
    """iris pods end in -<generation>; generation N is attempt N."""
    if not pod:
        return None
    m = _GEN_SUFFIX_RE.search(pod)
    return int(m.group(1)) if m else None


@lru_cache(maxsize=4096)  # pure; an engine prints the same prefixes on every stats line
def engine_identity(prefixes: tuple[Prefix, ...], label: str | None, stream: str | None = None) -> str:
    """Every Ray-launched engine prints "Engine 000", so the process prefix is part of the identity."""
    parts = _where(prefixes, stream, lambda name: True)
    if label:
        parts.append(label)
    return " | ".join(parts) or "engine"


# vLLM's own process names around an engine: the front end that prints its stats lines (APIServer, ApiServer_N)
# and the EngineCore process that drives its workers (EngineCore, EngineCore_N (0.10), EngineCore_DP<n> (0.11+)).
_FRONTEND_RE = re.compile(r"^(?:APIServer|ApiServer_\d+)$")
_ENGINE_CORE_RE = re.compile(r"^EngineCore(?:_DP(\d+)|_(\d+))?$")
_ENGINE_LABEL_RE = re.compile(r"^Engine (\d+)$")


def _core_base(prefixes: tuple[Prefix, ...], stream: str | None) -> str:
    return " | ".join(_where(prefixes, stream,
                             lambda name: not _FRONTEND_RE.match(name) and not _ENGINE_CORE_RE.match(name)))


def _where(prefixes: tuple[Prefix, ...], stream: str | None, keep: Callable[[str], bool]) -> list[str]:
    """Where a line comes from: its pod (else its stream), then each process prefix with a pid that `keep` takes."""
    parts = []
    if stream and not any(p.name.startswith("pod/") for p in prefixes):
        parts.append(stream)
    for p in prefixes:
        if p.name.startswith("pod/"):
            parts.append(p.name.split("/")[1] if "/" in p.name else p.name)
        elif p.pid is not None and keep(p.name):
            parts.append(f"{p.name} pid={p.pid}" + (f" ip={p.ip}" if p.ip else ""))
    return parts


@lru_cache(maxsize=4096)
def engine_core_of_stats(prefixes: tuple[Prefix, ...], label: str | None, stream: str | None = None) -> str:
    """Where an engine's EngineCore logs, from its stats line: the stream or pod and the processes around the
    front end (a Ray actor that hosts AsyncLLM), plus the data-parallel index its label names ("Engine 003"
    is EngineCore_DP3). "" for an aggregated line ("4 Engines Aggregated"), which no one EngineCore owns."""
    if label:
        m = _ENGINE_LABEL_RE.match(label)
        if m is None:
            return ""
        dp = int(m.group(1))
    else:
        dp = 0
    return f"{_core_base(prefixes, stream)} | DP{dp}"


@lru_cache(maxsize=4096)
def engine_core_of_line(prefixes: tuple[Prefix, ...], stream: str | None = None) -> str:
    """The same key from a line an EngineCore process printed itself (its innermost prefix names it); ""
    for a line of any other process (a worker's, an API server's, an unprefixed V0 line)."""
    inner = next((p for p in reversed(prefixes) if not p.name.startswith("pod/")), None)
    if inner is None:
        return ""
    m = _ENGINE_CORE_RE.match(inner.name)
    if m is None:
        return ""
    dp = int(m.group(1) or m.group(2) or 0)
    return f"{_core_base(prefixes, stream)} | DP{dp}"


def gpu_host_role(host: str, engine_pods: list[str], policy_pods: list[str], app_names: list[str]) -> tuple[str, str]:
    """(role, how we know): the job spec first, then compute-app process names, then pod naming."""
    in_engine = any(p and (p == host or p in host or host in p) for p in engine_pods)
    in_policy = any(p and (p == host or p in host or host in p) for p in policy_pods)
    if in_engine and not in_policy:
        return "engine", "spec"
    if in_policy and not in_engine:
        return "policy", "spec"
    if in_engine and in_policy:
        return "mixed", "spec"
    names = " ".join(app_names).lower()
    has_engine = "vllm" in names or "sglang" in names
    has_policy = any(k in names for k in ("fsdp", "policy", "megatron", "trainer", "deepspeed"))
    if has_engine and has_policy:
        return "mixed", "apps"
    if has_engine:
        return "engine", "apps"
    if has_policy:
        return "policy", "apps"
    low = host.lower()
    if "vllm" in low or "engine" in low or "rollout" in low:
        return "engine", "naming"
    if "policy" in low or "trainer" in low or "learner" in low:
        return "policy", "naming"
    return "unknown", ""
