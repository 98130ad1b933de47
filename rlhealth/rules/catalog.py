"""Loads the core's knowledge tables: signal declarations, remediations per cause, the Xid table.

Shipped files sit beside the packs (`signals.toml`, `remediations.toml`, `xid.toml`); a site may
add or override entries with files of the same names in its rules directories (the same
directories `load_rules` reads, including ``$RLHEALTH_RULES_DIRS``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from rlhealth import settings
from rlhealth.agents.signals import Catalog, XidEntry, parse_signal_table

__all__ = ["load_catalog", "parse_remediations", "parse_xid"]

_FILES = ("signals.toml", "remediations.toml", "xid.toml")


def parse_remediations(data: dict[str, Any],
                       source: str = "<memory>") -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    causes: dict[str, tuple[str, ...]] = {}
    for cause, raw in (data.get("cause") or {}).items():
        steps = raw.get("steps") if isinstance(raw, dict) else None
        if not isinstance(steps, list) or not steps or not all(isinstance(s, str) and s for s in steps):
            raise ValueError(f"{source}: cause {cause} needs a non-empty list of steps")
        causes[cause] = tuple(steps)
    generic = tuple((data.get("generic") or {}).get("steps") or ())
    return causes, generic


def parse_xid(data: dict[str, Any], source: str = "<memory>") -> dict[int, XidEntry]:
    out: dict[int, XidEntry] = {}
    for code, raw in (data.get("xid") or {}).items():
        if (not str(code).isdigit() or not isinstance(raw, dict)
                or raw.get("blame") not in ("hardware", "application", "driver")):
            raise ValueError(f"{source}: xid {code} needs blame = hardware | application | driver")
        out[int(code)] = XidEntry(int(code), raw["blame"], str(raw.get("meaning", "")))
    return out


def _texts(extra_dirs: Sequence[Path], use_env: bool) -> dict[str, list[tuple[str, str]]]:
    root = resources.files("rlhealth.rules")
    found: dict[str, list[tuple[str, str]]] = {
        name: [(f"rlhealth/rules/{name}", root.joinpath(name).read_text("utf-8"))] for name in _FILES
    }
    dirs = [Path(d) for d in extra_dirs]
    if use_env:
        dirs.extend(settings.load().rules_dir_list())
    for d in dirs:
        for name in _FILES:
            p = d / name
            if d.is_dir() and p.is_file():
                found[name].append((str(p), p.read_text("utf-8")))
    return found


def load_catalog(extra_dirs: Sequence[Path] = (), *, use_env: bool = True) -> Catalog:
    texts = _texts(extra_dirs, use_env)
    signals: dict = {}
    for src, text in texts["signals.toml"]:
        signals.update(parse_signal_table(tomllib.loads(text), src))
    remediations: dict[str, tuple[str, ...]] = {}
    generic: tuple[str, ...] = ()
    for src, text in texts["remediations.toml"]:
        causes, gen = parse_remediations(tomllib.loads(text), src)
        remediations.update(causes)
        generic = gen or generic
    xid: dict[int, XidEntry] = {}
    for src, text in texts["xid.toml"]:
        xid.update(parse_xid(tomllib.loads(text), src))
    return Catalog(signals=signals, remediations=remediations, generic_remediation=generic, xid=xid)
