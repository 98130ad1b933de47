"""Compiled Hyperscan databases kept on disk between runs, keyed by everything they are compiled from.

Every `rlhealth probe` compiles the rule packs' ~150 patterns (~0.2-0.3 s on 2 shared vCPUs) and the
secret markers (~0.06 s) before it reads a byte; a serialized database loads in about a millisecond.
`compile_database` returns a database equal to a fresh compile: the key is a SHA-256 of the
expressions, ids, flags and mode, the Hyperscan and binding versions and this CPU's model and flags
(a database is compiled for the CPU it runs on), and a file that does not load (another version,
a torn or corrupt write: Hyperscan checks its header and checksum) is compiled again and replaced.
Files are written to a temporary name and renamed (concurrent probes never see half a file).

`RLHEALTH_HS_CACHE=0` turns it off; `RLHEALTH_CACHE_DIR` moves it (default `$XDG_CACHE_HOME/rlhealth`, else
`~/.cache/rlhealth`). Any error reading or writing the cache only means compiling as before.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from rlhealth import settings


def cache_dir() -> Path | None:
    s = settings.load()
    if not s.hs_cache:
        return None
    if s.cache_dir is not None:
        return s.cache_dir
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "rlhealth"
    try:
        return Path.home() / ".cache" / "rlhealth"
    except RuntimeError:  # no home directory to be found: no cache
        return None


@functools.lru_cache(maxsize=1)
def _machine() -> bytes:
    """What a compiled database depends on besides its patterns: the library and this CPU."""
    import hyperscan

    cpu = b""
    try:
        with open("/proc/cpuinfo", "rb") as f:
            for line in f:
                if line.startswith((b"model name", b"flags")):
                    cpu += line
                if line.strip() == b"":  # the first processor is enough
                    break
    except OSError:
        pass
    version = getattr(hyperscan, "__version__", "")
    native = getattr(hyperscan, "HS_VERSION", b"")  # not every binding exposes it
    return repr((version, native, cpu)).encode()


def _key(expressions: list[bytes], ids: list[int], flags: list[int], mode: int) -> str:
    h = hashlib.sha256(_machine())
    h.update(repr((mode, ids, flags)).encode())
    for e in expressions:
        h.update(len(e).to_bytes(8, "little"))
        h.update(e)
    return h.hexdigest()[:40]


def _compile(expressions: list[bytes], ids: list[int], flags: list[int], mode: int) -> Any:
    import hyperscan

    db = hyperscan.Database(mode=mode)
    db.compile(expressions=expressions, ids=ids, elements=len(expressions), flags=flags)
    return db


def compile_database(expressions: list[bytes], ids: list[int], flags: list[int], mode: int) -> Any:
    """A `hyperscan.Database` of `expressions` (what `Database(mode).compile(...)` makes), from the cache
    when it holds one."""
    import hyperscan

    folder = cache_dir()
    if folder is None:
        return _compile(expressions, ids, flags, mode)
    path = folder / f"hs-{_key(expressions, ids, flags, mode)}.db"
    try:
        return hyperscan.loadb(path.read_bytes(), mode)
    except (OSError, hyperscan.error):  # absent, unreadable, or not a database this library can load
        pass
    db = _compile(expressions, ids, flags, mode)
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".hs-", dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(hyperscan.dumpb(db))
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except (OSError, hyperscan.error):
        pass
    return db


__all__ = ["cache_dir", "compile_database"]
