"""Loads throughput tables (data files) for the health core."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

from rlhealth.agents.throughput import ThroughputTable

DEFAULT_TABLE = "h100_vllm.toml"


def load_throughput(path: Path | None = None) -> ThroughputTable:
    """The shipped table, or one from `path` (same TOML shape)."""
    if path is not None:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    else:
        data = tomllib.loads(resources.files("rlhealth.rules").joinpath("throughput", DEFAULT_TABLE).read_text("utf-8"))
    return ThroughputTable.from_dict(data)
