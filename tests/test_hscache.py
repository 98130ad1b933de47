"""Compiled Hyperscan databases kept between runs (`rlhealth.hscache`): a database loaded from the cache
finds what a fresh compile finds; a file that does not load is compiled again; the cache can be off."""

from __future__ import annotations

from pathlib import Path

import pytest

hyperscan = pytest.importorskip("hyperscan")

from rlhealth import hscache  # noqa: E402
from rlhealth.agents.signatures import block_pattern, hs_compile  # noqa: E402
from rlhealth.rules.loader import load_rules  # noqa: E402

RULES = load_rules(use_env=False).rules
EXPRS = [block_pattern(r.pattern).encode("utf-8") for r in RULES]
IDS = list(range(len(EXPRS)))
FLAGS = [hyperscan.HS_FLAG_MULTILINE] * len(EXPRS)
TEXT = b"\n".join([
    b"RuntimeError: CUDA error: an illegal memory access was encountered",
    b"[rank3]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)",
    b"INFO 10-14 16:19:57 [loggers.py:127] Engine 000: Avg prompt throughput: 1706.3 tokens/s, Avg generation "
    b"throughput: 812.0 tokens/s, Running: 31 reqs, Waiting: 0 reqs, GPU KV cache usage: 12.5%",
    b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    b"nothing to see here",
] * 50)


def _hits(db) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    db.scan(TEXT, match_event_handler=lambda i, f, t, _fl, _c: out.append((i, f, t)), scratch=hyperscan.Scratch(db))
    return sorted(out)


def _compile_fails(*_a, **_k):
    raise AssertionError("compiled although the cache holds the database")


def test_a_cached_database_finds_what_a_fresh_compile_finds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLHEALTH_CACHE_DIR", str(tmp_path))
    fresh = _hits(hs_compile(EXPRS, IDS, FLAGS, hyperscan.HS_MODE_BLOCK))
    assert len({i for i, _f, _t in fresh}) >= 3  # not vacuous
    first = hscache.compile_database(EXPRS, IDS, FLAGS, hyperscan.HS_MODE_BLOCK)
    files = list(tmp_path.glob("hs-*.db"))
    assert len(files) == 1 and not list(tmp_path.glob(".hs-*"))
    monkeypatch.setattr(hscache, "_compile", _compile_fails)
    again = hscache.compile_database(EXPRS, IDS, FLAGS, hyperscan.HS_MODE_BLOCK)
    assert _hits(first) == _hits(again) == fresh
    # another pattern set (or other flags) is another entry
    monkeypatch.undo()
    monkeypatch.setenv("RLHEALTH_CACHE_DIR", str(tmp_path))
    other = hscache.compile_database(EXPRS[:-1], IDS[:-1], FLAGS[:-1], hyperscan.HS_MODE_BLOCK)
    hscache.compile_database(EXPRS, IDS, [0] * len(EXPRS), hyperscan.HS_MODE_BLOCK)
    assert len(list(tmp_path.glob("hs-*.db"))) == 3
    assert _hits(other) == [h for h in fresh if h[0] != IDS[-1]]


def test_a_damaged_file_is_compiled_again_and_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLHEALTH_CACHE_DIR", str(tmp_path))
    fresh = _hits(hs_compile(EXPRS, IDS, FLAGS, hyperscan.HS_MODE_BLOCK))
    hscache.compile_database(EXPRS, IDS, FLAGS, hyperscan.HS_MODE_BLOCK)
    (path,) = tmp_path.glob("hs-*.db")
    good = path.read_bytes()
    for damaged in (good[: len(good) // 2], good[:100] + bytes(64) + good[164:], b""):
        path.write_bytes(damaged)
        assert _hits(hscache.compile_database(EXPRS, IDS, FLAGS, hyperscan.HS_MODE_BLOCK)) == fresh
        assert path.read_bytes() == good


def test_the_cache_can_be_off_or_unwritable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = _hits(hs_compile(EXPRS, IDS, FLAGS, hyperscan.HS_MODE_BLOCK))
    monkeypatch.setenv("RLHEALTH_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("RLHEALTH_HS_CACHE", "0")
    assert _hits(hscache.compile_database(EXPRS, IDS, FLAGS, hyperscan.HS_MODE_BLOCK)) == fresh
    assert not (tmp_path / "c").exists()
    monkeypatch.delenv("RLHEALTH_HS_CACHE")
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("RLHEALTH_CACHE_DIR", str(tmp_path / "file" / "c"))
    assert _hits(hscache.compile_database(EXPRS, IDS, FLAGS, hyperscan.HS_MODE_BLOCK)) == fresh


def test_the_core_and_the_redactor_use_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlhealth.agents import signatures
    from rlhealth.runtime import build_core
    from rlhealth.sources.redact import Redactor

    monkeypatch.setenv("RLHEALTH_CACHE_DIR", str(tmp_path))
    build_core()
    assert signatures.HS_COMPILE is hscache.compile_database
    lines = TEXT.decode().split("\n")
    want = signatures.Classifier(load_rules(use_env=False)).raw_hits(lines)
    monkeypatch.setattr(hscache, "_compile", _compile_fails)
    assert signatures.Classifier(load_rules(use_env=False)).raw_hits(lines) == want
    block = b"x HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz\nplain\n--api-key sk-abcdefghijklmnopqrstu\n"
    monkeypatch.undo()
    monkeypatch.setenv("RLHEALTH_CACHE_DIR", str(tmp_path))
    want_lines = Redactor("hyperscan").hit_lines(block)
    monkeypatch.setattr(hscache, "_compile", _compile_fails)
    assert Redactor("hyperscan").hit_lines(block) == want_lines == [0, 2]
