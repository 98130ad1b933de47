"""Rotated and compressed logs in a capture: read as the one log they were.

logrotate (`x.log.1`, `x.log.2.gz`, `x.log-20261201.gz`) and the kubelet (`0.log.20261201-101500.gz`)
leave a log's older lines beside it under other names; the older ones often hold an earlier attempt's
crash. Before, compressed rotations were skipped and a rotated SLURM leg (`123.out.1`) lost its leg.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rlhealth.embedded import probe
from rlhealth.runtime import build_core
from rlhealth.sources.compressed import decompress_to, rotation_groups, unrotated_name
from rlhealth.sources.logfiles import describe_log
from tests.scenario_support import ROOT, gap_param, scenario_dirs, shared_dir


@pytest.mark.parametrize(("name", "unrotated"), [
    ("pod_rank0.log", "pod_rank0.log"),
    ("pod_rank0.log.1", "pod_rank0.log"),
    ("pod_rank0.log.12.gz", "pod_rank0.log"),
    ("8801233.out.1", "8801233.out"),
    ("8801233.out", "8801233.out"),  # a SLURM job id is not a rotation
    ("slurm-77_3.err.2.xz", "slurm-77_3.err"),
    ("0.log.20261201-101500.gz", "0.log"),  # kubelet
    ("trainer.log-20261201.bz2", "trainer.log"),  # logrotate dateext
    ("worker-7.log", "worker-7.log"),
    ("vllm.3", "vllm.3"),  # nothing left with an extension: not a rotation
    ("dmesg-gpu-b17.log.1", "dmesg-gpu-b17.log"),
])
def test_unrotated_name(name: str, unrotated: str) -> None:
    assert unrotated_name(name) == unrotated


def test_a_rotated_file_says_what_its_unrotated_name_says() -> None:
    assert describe_log("logs/8801233.out.1").slurm_job_id == "8801233"
    assert describe_log("logs/pod_rank3.log.2.gz").rank == 3
    assert describe_log("logs/dmesg-gpu-b17.log.1").host == "gpu-b17"


def test_rotation_groups_put_each_log_oldest_first() -> None:
    names = ["a.log", "a.log.1", "a.log.3.gz", "a.log.2", "b.log-20261202.gz", "b.log", "b.log-20261130.gz",
             "c.log"]
    groups = rotation_groups([(Path("/cap/logs") / n, f"logs/{n}") for n in names])
    assert [[p.name for p, _ in g] for g in groups] == [
        ["a.log.3.gz", "a.log.2", "a.log.1", "a.log"],
        ["b.log-20261130.gz", "b.log-20261202.gz", "b.log"],
        ["c.log"],
    ]


@pytest.mark.parametrize(("suffix", "pack"), [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)])
def test_each_codec_unpacks_whole(tmp_path: Path, suffix: str, pack) -> None:
    data = b"".join(b"line %d\n" % i for i in range(50_000))
    src = tmp_path / f"x.log.1{suffix}"
    src.write_bytes(pack(data))
    out = decompress_to(src, tmp_path / "out", max_bytes=1 << 30)
    assert (out.problem, out.bytes_written) == (None, len(data))
    assert out.path.read_bytes() == data


def test_concatenated_members_and_zero_padding_are_read_whole(tmp_path: Path) -> None:
    src = tmp_path / "x.log.1.gz"
    src.write_bytes(gzip.compress(b"first member\n") + gzip.compress(b"second member\n") + b"\x00" * 512)
    out = decompress_to(src, tmp_path / "out", max_bytes=1 << 30)
    assert out.problem is None
    assert out.path.read_bytes() == b"first member\nsecond member\n"


def test_a_stream_cut_short_keeps_what_came_before_the_cut(tmp_path: Path) -> None:
    data = b"".join(b"2026-11-29 10:00:%02d INFO step %d\n" % (i % 60, i) for i in range(20_000))
    packed = gzip.compress(data)
    src = tmp_path / "x.log.1.gz"
    src.write_bytes(packed[: len(packed) // 2])  # pulled while the rotation was being written
    out = decompress_to(src, tmp_path / "out", max_bytes=1 << 30)
    assert out.problem == "truncated"
    assert 0 < out.bytes_written < len(data)
    assert data.startswith(out.path.read_bytes())


def test_a_bomb_stops_at_the_cap(tmp_path: Path) -> None:
    src = tmp_path / "x.log.1.gz"
    src.write_bytes(gzip.compress(b"\n" * 5_000_000))
    out = decompress_to(src, tmp_path / "out", max_bytes=1_000_000)
    assert (out.problem, out.bytes_written) == ("truncated", 1_000_000)


def test_not_gzip_at_all_is_unreadable(tmp_path: Path) -> None:
    src = tmp_path / "x.log.1.gz"
    src.write_bytes(b"this was never compressed\n")
    out = decompress_to(src, tmp_path / "out", max_bytes=1 << 30)
    assert (out.problem, out.bytes_written) == ("unreadable", 0)


# -- the verdict does not depend on how the logs were rotated or stored -------------------------

SCENARIOS = scenario_dirs(shared_dir() / "scenarios") + scenario_dirs(ROOT / "tests" / "scenarios")


def _call(capture: Path, workers: int = 0) -> tuple:
    v = probe(capture, build_core(), workers=workers).verdict
    return (v.verdict, v.confidence, v.job_status,
            tuple((k, getattr(v.gates, k).status, tuple(getattr(v.gates, k).codes)) for k in "ABC"))


def _rotate_in_thirds(capture: Path) -> None:
    """Each log becomes `.2.gz` (oldest third), `.1` and the live file; CRLF endings for good measure."""
    for p in sorted(q for q in (capture / "logs").rglob("*") if q.is_file()):
        lines = p.read_bytes().replace(b"\r\n", b"\n").splitlines(keepends=True)
        if len(lines) < 6:
            continue
        a, b = len(lines) // 3, 2 * len(lines) // 3
        Path(f"{p}.2.gz").write_bytes(gzip.compress(b"".join(lines[:a])))
        Path(f"{p}.1").write_bytes(b"".join(lines[a:b]).replace(b"\n", b"\r\n"))
        p.write_bytes(b"".join(lines[b:]))


@pytest.mark.parametrize("scenario", [gap_param(p, "rotated_logs") for p in SCENARIOS],
                         ids=[p.name for p in SCENARIOS])
def test_rotated_and_compressed_logs_give_the_same_verdict_and_codes(scenario: Path, tmp_path: Path) -> None:
    rotated = tmp_path / "capture"
    shutil.copytree(scenario / "capture", rotated)
    _rotate_in_thirds(rotated)
    assert _call(rotated) == _call(scenario / "capture")


def test_log_reading_workers_read_rotated_groups_too(tmp_path: Path) -> None:
    scenario = ROOT / "tests" / "scenarios" / "slurm_same_checkpoint_crash"
    rotated = tmp_path / "capture"
    shutil.copytree(scenario / "capture", rotated)
    _rotate_in_thirds(rotated)
    assert _call(rotated, workers=2) == _call(scenario / "capture")


@pytest.mark.parametrize("scenario", [gap_param(p, "rotated_logs") for p in SCENARIOS],
                         ids=[p.name for p in SCENARIOS])
def test_watch_reads_rotated_logs_as_the_probe_does(scenario: Path, tmp_path: Path) -> None:
    """`watch --clock capture` on a rotated capture: its first poll reads each log's rotations oldest first,
    with the time carried across, and judges as the probe does."""
    from rlhealth.embedded import Watcher

    rotated = tmp_path / "capture"
    shutil.copytree(scenario / "capture", rotated)
    _rotate_in_thirds(rotated)
    w = Watcher(build_core(), [rotated], clock=lambda: datetime.now(UTC), clock_mode="capture")
    w.tick()
    (v,) = w.verdicts.values()
    watched = (v.verdict, v.confidence, v.job_status,
               tuple((k, getattr(v.gates, k).status, tuple(getattr(v.gates, k).codes)) for k in "ABC"))
    assert watched == _call(scenario / "capture")


def test_an_archive_or_an_unknown_codec_is_unreadable_not_an_error(tmp_path: Path) -> None:
    from rlhealth.sources.compressed import unpack_log

    for name in ("x.log.1.zst", "logs.tar", "x.log.1.lz4"):
        src = tmp_path / name
        src.write_bytes(b"\x28\xb5\x2f\xfd whatever")
        got = unpack_log(src, tmp_path / "out", max_bytes=1 << 20)
        assert (got.problem, got.bytes_written) == ("unreadable", 0)
    missing = unpack_log(tmp_path / "gone.log.1.gz", tmp_path / "out", max_bytes=1 << 20)
    assert (missing.problem, missing.bytes_written) == ("unreadable", 0)


@pytest.mark.parametrize("cut", [1, 40])
def test_a_newer_rotations_unstamped_head_comes_after_the_older_ones_stamp(tmp_path: Path, cut: int) -> None:
    """open-r1#658 with a stamped start-up line before the steps: read as one file it is a hang KILL. Rotated so
    that the older file ends after `cut` lines (the stamp, and maybe some steps) and the newer file starts with
    unstamped steps, the reader lends those steps the watchdog's stamp (the first after them); the core must
    time them from the older rotation's stamp instead, or the hang reads as fresh progress."""
    scenario = ROOT / "tests" / "scenarios" / "openr1_allgather_watchdog_after_verify_timeout" / "capture"
    one = tmp_path / "one"
    shutil.copytree(scenario, one)
    log = one / "logs" / "train.log"
    lines = log.read_bytes().splitlines(keepends=True)
    lines.insert(0, b"[rank0]:[W1120 03:30:00.000000000 init.py:1] Warning: start-up\n")
    log.write_bytes(b"".join(lines))
    whole = _call(one)
    assert whole[:3] == ("KILL", "medium", "WEDGED")
    rotated = tmp_path / "rotated"
    shutil.copytree(one, rotated)
    rlog = rotated / "logs" / "train.log"
    Path(f"{rlog}.1").write_bytes(b"".join(lines[:cut]))
    rlog.write_bytes(b"".join(lines[cut:]))
    assert _call(rotated)[:3] == whole[:3]
