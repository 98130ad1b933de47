"""Composition root: builds the health core from shipped data plus configuration."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from rlhealth import settings
from rlhealth.agents.core import HealthCore


@lru_cache(maxsize=4)
def _cached(extra_dirs: tuple[str, ...], throughput_path: str | None) -> HealthCore:
    from rlhealth import hscache
    from rlhealth.agents import signatures
    from rlhealth.rules.catalog import load_catalog
    from rlhealth.rules.loader import load_rules
    from rlhealth.rules.tables import load_throughput

    dirs = [Path(d) for d in extra_dirs]
    rules = load_rules(dirs)
    table = load_throughput(Path(throughput_path) if throughput_path else None)
    signatures.HS_COMPILE = hscache.compile_database  # compiled databases kept between runs
    return HealthCore(rules, table, load_catalog(dirs))


def build_core(extra_rule_dirs: tuple[str, ...] = (), throughput_path: str | None = None) -> HealthCore:
    """A ready HealthCore. Rule packs compile once per process (hyperscan compile is ~0.2 s; a database
    compiled by an earlier run is loaded from `rlhealth.hscache`)."""
    env_tp = throughput_path or settings.load().throughput_table or None
    return _cached(tuple(str(d) for d in extra_rule_dirs), env_tp)
