"""rlhealth's configuration from the environment: every `RLHEALTH_*` variable, read in one place.

`load()` returns a validated `Settings` (a frozen pydantic model filled from the variables, as
pydantic-settings would: tests/test_settings.py holds the two equal; importing pydantic-settings pulled in
asyncio, argparse and dotenv, ~7% of a probe's start-up instructions); a malformed value is one clear error
naming the variable, not a failure deep in a command. Command-line options that also take a
variable (click's `envvar`, shown in each command's `--help`) win over it. `describe()` renders the
table that `rlhealth --help` prints, so the documentation is the model itself.

The health core (`rlhealth.agents`) never reads configuration (an import-linter contract); the one
exception is `RLHEALTH_NATIVE`, read by `agents.bytescan` at import to choose the C helper or its
pure-Python twin (same results either way), listed here so it is documented with the rest.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

PREFIX = "RLHEALTH_"


class SettingsError(ValueError):
    """A malformed RLHEALTH_* variable."""


class Settings(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    kafka_bootstrap: str | None = Field(None, description="Kafka bootstrap servers, HOST:PORT[,HOST:PORT...]")
    kafka_connect_timeout: float = Field(10.0, gt=0, description="seconds to wait for a broker before exit 2")
    topic_prefix: str = Field("", description="prefix of every topic name (isolates deployments and tests)")
    partitions: int = Field(12, ge=1, le=10_000, description="partitions of every topic rlhealth creates")
    db: Path | None = Field(None, description="DuckDB evidence store (`evidence`, `probe --db`, `watch --db`)")
    throughput_table: Path | None = Field(None, description="TOML table of expected tok/s floors (replaces the "
                                                            "shipped one)")
    rules_dirs: str = Field("", description="extra rule/signal/remediation folders, colon-separated; later "
                                            "definitions of a pack replace earlier ones")
    redact_names: str = Field("", description="site-specific secret names to redact, comma-separated "
                                              "(e.g. sas,conn_str)")
    probe_workers: int | None = Field(None, ge=0, description="log-reading worker processes of `probe` "
                                                              "(0: one process; unset: chosen by size and CPUs)")
    max_decompressed_log_bytes: int = Field(4 << 30, ge=1, description="a compressed rotated log in a capture "
                                            "(.gz, .bz2, .xz) is unpacked up to this size; the rest is not read")
    core_factory: str = Field("", description="module:callable building the worker's HealthCore (tests)")
    duckdb_memory_limit_bytes: int = Field(512 << 20, ge=0, description="memory cap of the evidence store's "
                                           "DuckDB writer (0: DuckDB's own default, 80% of RAM)")
    lean_delivery: bool = Field(False, description="1: the worker delivers each record to its agent in place "
                                                   "in steady state (~35% less CPU per record under floods; "
                                                   "opt-in until a long rebalance soak test has run)")
    batch_intake: bool = Field(True, description="the worker takes event-topic records in lists past faust's "
                                                 "per-message stream (rlhealth/streams/batch_intake.py; ~4x less "
                                                 "CPU per bad record); 0: faust's per-message stream")
    fetch_max_wait_ms: int = Field(100, ge=0, description="longest wait of the worker's consumer at the broker per "
                                   "fetch; a fetch of quiet partitions holds back the busy ones that long "
                                   "(rlhealth/streams/fetch_wait.py; 0: faust's 1,500 ms)")
    profile: Path | None = Field(None, description="the worker's event loop is profiled (cProfile) into this file")
    gc_young_threshold: int = Field(7000, ge=1, description="the worker's young-generation garbage-collector "
                                    "threshold (CPython's default: 700; full collections of a large heap "
                                    "were a third of a judging tick)")
    gc_thaw_every: int = Field(6, ge=0, description="the worker freezes its heap after each regular judging "
                               "pass (full collections skip what survived) and thaws and collects it in full "
                               "every this many passes (rlhealth/streams/heap.py; 0: never freezes)")
    state_cache_jobs: int = Field(3000, ge=0, description="decoded job states the worker keeps after writing "
                                  "them, so the next buffer with the job's events does not decode them again "
                                  "(~27 kB each; 0: none)")
    faust_datadir: Path | None = Field(None, description="faust's local table store of the worker")
    native: bool = Field(True, description="0 forces the pure-Python twins of the C line helper")
    hs_cache: bool = Field(True, description="compiled Hyperscan databases (rules, secret markers) are kept "
                                             "between runs in the cache folder; 0: compiled at every start")
    cache_dir: Path | None = Field(None, description="rlhealth's cache folder (default: $XDG_CACHE_HOME/rlhealth, "
                                                     "else ~/.cache/rlhealth)")

    def rules_dir_list(self) -> list[Path]:
        return [Path(p) for p in self.rules_dirs.split(":") if p]

    def redact_name_list(self) -> list[str]:
        return [n.strip() for n in self.redact_names.split(",") if n.strip()]


# The last load's RLHEALTH_* variables and its (frozen) Settings: a probe calls load() ~9 times from as many
# modules (each a validation of ~20 fields; through pydantic-settings ~3-5 ms)
_last: tuple[tuple[tuple[str, str], ...], Settings] | None = None


def _our_variables() -> tuple[tuple[str, str], ...]:
    """What a Settings is made of: the variables named rlhealth_* in any case, in the environment's order."""
    prefix = PREFIX.lower()
    return tuple((k, v) for k, v in os.environ.items() if k.lower().startswith(prefix))


def from_variables(variables: tuple[tuple[str, str], ...]) -> Settings:
    """The Settings of these (name, value) variables, as pydantic-settings' env source reads them: a name is
    matched without regard to case (of two names differing only in case, the later one wins), the value is
    the str as it stands (no stripping; "" is a value), and the model validates it in lax mode."""
    prefix = PREFIX.lower()
    values = {}
    for name, value in variables:
        low = name.lower()  # pydantic-settings lowers every name, then looks up prefix + field
        if low.startswith(prefix):
            values[low[len(prefix):]] = value
    return Settings.model_validate(values)


def load() -> Settings:
    """The settings from the current environment (read anew: tests and callers may change it; the same
    variables give the same frozen object)."""
    global _last
    key = _our_variables()
    if _last is not None and _last[0] == key:
        return _last[1]
    try:
        loaded = from_variables(key)
    except ValidationError as e:
        problems = "; ".join(f"{PREFIX}{'.'.join(str(p) for p in err['loc']).upper()}: {err['msg']}"
                             for err in e.errors())
        raise SettingsError(problems) from None
    _last = (key, loaded)
    return loaded


def env_name(field: str) -> str:
    return PREFIX + field.upper()


def describe() -> str:
    """One line per variable: name, default and meaning (for `rlhealth --help`)."""
    lines = []
    for name, info in Settings.model_fields.items():
        default = info.default
        shown = "" if default in (None, "") else f" [default: {int(default) if default is True else default}]"
        lines.append(f"{env_name(name)}: {info.description}{shown}")
    return "\n".join(lines)


__all__ = ["PREFIX", "Settings", "SettingsError", "describe", "env_name", "load"]
