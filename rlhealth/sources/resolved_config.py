"""The resolved trainer config (`config/*.yaml`, OmegaConf.to_yaml output) -> job-spec facts.

`flatten_config` turns the YAML tree into flat dotted keys (`generator.enforce_eager`); only
scalars and short lists of scalars are kept, string values are passed through `redact` and
keys that name a credential are dropped. `spec_facts` then picks the typed facts the health core
uses, looking keys up by their last component so that SkyRL (`generator.enforce_eager`), verl
(`actor_rollout_ref.rollout.enforce_eager`) and OpenRLHF-style layouts all work:

| JobSpec field | keys (last component, first match in this order of preference) |
|---|---|
| enforce_eager | `enforce_eager` (a key under `generator`/`rollout` first) |
| rollout.n_concurrent_trials | `n_concurrent_trials` |
| rollout.max_num_seqs | `max_num_seqs` |
| rollout.n_samples_per_prompt | `n_samples_per_prompt`, `n_samples` |
| geometry.num_inference_engines | `num_inference_engines`, `vllm_num_engines` |
| geometry.engine_tp | `inference_engine_tensor_parallel_size`, `vllm_tensor_parallel_size`, `tensor_model_parallel_size`, `tensor_parallel_size` |
| geometry.engine_ep | `inference_engine_expert_parallel_size`, `expert_parallel_size` |
| geometry.colocated | `colocate_all` |
| model.name | `trainer.policy.model.path`, `model.path`, `pretrain`, `model_name_or_path` (last path component) |
"""  # noqa: E501 - a Markdown table row does not wrap

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from rlhealth.sources.encoding import without_bom
from rlhealth.sources.redact import redact

MAX_KEYS = 2000
MAX_LIST = 32
MAX_STR = 1000

_SECRETISH = re.compile(r"(?i)(api[_-]?key|token|secret|passw|credential)$")


def flatten_config(tree: Any, prefix: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    out = {} if out is None else out
    if isinstance(tree, dict):
        for k, v in tree.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if _SECRETISH.search(str(k)):
                continue
            flatten_config(v, key, out)
    elif isinstance(tree, list):
        if len(tree) <= MAX_LIST and all(isinstance(x, (str, int, float, bool)) or x is None for x in tree):
            out[prefix] = [redact(x)[:MAX_STR] if isinstance(x, str) else x for x in tree]
        else:
            for i, v in enumerate(tree[:MAX_LIST]):
                flatten_config(v, f"{prefix}.{i}", out)
    elif isinstance(tree, str):
        out[prefix] = redact(tree)[:MAX_STR]
    elif isinstance(tree, (int, float, bool)) or tree is None:
        out[prefix] = tree
    else:  # dates and other YAML scalars
        out[prefix] = str(tree)[:MAX_STR]
    if len(out) > MAX_KEYS:
        raise ValueError("config has too many keys")
    return out


def load_config_files(paths: list[Path]) -> tuple[dict[str, Any], list[tuple[Path, str]]]:
    """Read and flatten YAML files (later files override earlier keys). Returns (flat, errors)."""
    flat: dict[str, Any] = {}
    errors: list[tuple[Path, str]] = []
    for p in sorted(paths):
        try:
            text = without_bom(p.read_bytes()).decode("utf-8", errors="replace")
            tree = yaml.safe_load(text)
        except (OSError, yaml.YAMLError, ValueError) as exc:
            errors.append((p, str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__))
            continue
        if tree is None:
            errors.append((p, "empty"))
            continue
        if not isinstance(tree, dict):
            errors.append((p, f"top level is a {type(tree).__name__}, not a mapping"))
            continue
        try:
            flatten_config(tree, "", flat)
        except ValueError as exc:
            errors.append((p, str(exc)))
    return flat, errors


def _by_last(flat: dict[str, Any], names: tuple[str, ...], prefer: tuple[str, ...] = ()) -> tuple[str, Any] | None:
    for name in names:
        hits = [k for k in flat if k == name or k.endswith("." + name)]
        if not hits:
            continue
        hits.sort(key=lambda k: (not any(k.startswith(p + ".") or ("." + p + ".") in k for p in prefer), len(k)))
        for k in hits:
            if flat[k] is not None:
                return k, flat[k]
    return None


def _as_bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
        return v.strip().lower() in ("true", "1", "yes")
    if isinstance(v, int):
        return bool(v)
    return None


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return None


def spec_facts(flat: dict[str, Any]) -> dict[str, Any]:
    """Typed facts, as a partial JobSpec dict: {"enforce_eager": False, "rollout": {...}, ...}."""
    facts: dict[str, Any] = {}

    def put(section: str | None, field: str, value: Any) -> None:
        if value is None:
            return
        if section is None:
            facts.setdefault(field, value)
        else:
            facts.setdefault(section, {}).setdefault(field, value)

    hit = _by_last(flat, ("enforce_eager",), prefer=("generator", "rollout"))
    if hit:
        put(None, "enforce_eager", _as_bool(hit[1]))
    for field, names in (
        ("n_concurrent_trials", ("n_concurrent_trials",)),
        ("max_num_seqs", ("max_num_seqs",)),
        ("n_samples_per_prompt", ("n_samples_per_prompt", "n_samples")),
    ):
        hit = _by_last(flat, names, prefer=("generator", "harbor", "rollout"))
        if hit:
            put("rollout", field, _as_int(hit[1]))
    for field, conv_names, conv in (
        ("num_inference_engines", ("num_inference_engines", "vllm_num_engines"), _as_int),
        (
            "engine_tp",
            (
                "inference_engine_tensor_parallel_size",
                "vllm_tensor_parallel_size",
                "tensor_model_parallel_size",
                "tensor_parallel_size",
            ),
            _as_int,
        ),
        ("engine_ep", ("inference_engine_expert_parallel_size",), _as_int),
        ("colocated", ("colocate_all",), _as_bool),
    ):
        hit = _by_last(flat, conv_names, prefer=("generator", "rollout"))
        if hit:
            put("geometry", field, conv(hit[1]))
    for key in ("trainer.policy.model.path", "actor_rollout_ref.model.path", "model.path", "pretrain",
                "model_name_or_path"):
        hit = _by_last(flat, (key,))
        if hit and isinstance(hit[1], str) and hit[1].strip():
            put("model", "name", hit[1].rstrip("/").rsplit("/", 1)[-1])
            break
    return facts


__all__ = ["flatten_config", "load_config_files", "spec_facts"]
