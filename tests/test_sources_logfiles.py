"""Log files -> LogBatch: batching, offsets, UTF-8, giant lines, event times, the live shipper."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from rlhealth.schemas.events import MAX_LINE_CHARS
from rlhealth.sources.logfiles import (
    LogFileShipper,
    LogReader,
    TailReader,
    describe_log,
    slurm_leg_order,
    source_for,
)

REF = datetime(2026, 10, 14, 18, tzinfo=UTC)
FB = datetime(2026, 10, 14, 1, tzinfo=UTC)


def _read(path: Path, batch_lines: int = 3) -> tuple[LogReader, list]:
    r = LogReader(path, job_id="j", source=source_for("logs/" + path.name), batch_lines=batch_lines)
    return r, list(r.read(final=True, ref_time=REF, fallback_time=FB))


def test_describe_log() -> None:
    assert describe_log("logs/pod_rank3.log").rank == 3
    assert describe_log("logs/ray/node-a/raylet.out").host == "node-a"
    assert describe_log("logs/finelog-x.log").kind == "finelog"
    assert describe_log("logs/dmesg-gpu07.log").host == "gpu07"
    assert describe_log("logs/48215.err").slurm_job_id == "48215"
    assert slurm_leg_order(["logs/48216.out", "logs/48215.err", "logs/48215.out", "logs/x.log"]) == {"48215": 0, "48216": 1}
    assert source_for("logs/48216.out", leg_index={"48215": 0, "48216": 1}).attempt == 1


def test_batches_offsets_and_times(tmp_path: Path) -> None:
    lines = [
        b"+ ray start --head",  # no timestamp: held until the first stamped line
        b"2026-10-14 13:00:00,000\tINFO a",
        b"progress 10%\r progress 20%",
        b"INFO 10-14 13:05:00 [loggers.py:1] Engine 000: Running: 1 reqs",
        b"no stamp here",
        b"HF_TOKEN=hf_abcdefghijklmnopqrstuvwx",
        b"\xff\xfe broken bytes",
    ]
    f = tmp_path / "pod_rank0.log"
    f.write_bytes(b"\n".join(lines) + b"\n")
    r, batches = _read(f)
    assert [b.first_line_no for b in batches] == [0, 3, 6]
    assert [len(b.lines) for b in batches] == [3, 3, 1]
    assert batches[0].offsets == [0, 19, 50]
    assert batches[0].lines[2] == "progress 10%\r progress 20%"
    assert batches[0].event_time == datetime(2026, 10, 14, 13, 0, tzinfo=UTC)
    assert batches[1].event_time == datetime(2026, 10, 14, 13, 5, tzinfo=UTC)
    assert batches[2].event_time == batches[1].event_time  # carried forward
    assert batches[1].lines[2] == "HF_TOKEN=[REDACTED]"
    assert batches[2].invalid_utf8_lines == 1 and "\ufffd" in batches[2].lines[0]
    assert batches[0].source.rank == 0 and batches[0].ts is None
    assert r.lines_read == 7 and r.invalid_utf8_lines == 1 and not r.tail.missing_final_newline


def test_no_timestamps_uses_fallback_and_giant_line(tmp_path: Path) -> None:
    f = tmp_path / "other.log"
    f.write_bytes(b"a\n" + b"x" * (MAX_LINE_CHARS * 5) + b"\nb\nlast-without-newline")
    r, batches = _read(f, batch_lines=500)
    (b,) = batches
    assert b.event_time == FB
    assert [len(x) for x in b.lines] == [1, MAX_LINE_CHARS, 1, len("last-without-newline")]
    assert b.truncated_lines == 1 and r.tail.missing_final_newline
    assert b.offsets[2] == 2 + MAX_LINE_CHARS * 5 + 1


def test_event_time_never_decreases(tmp_path: Path) -> None:
    f = tmp_path / "finelog.log"
    f.write_text("2026-10-14T13:00:00Z a\n2026-10-14T12:00:00Z b\n")
    _r, batches = _read(f, batch_lines=1)
    assert [b.event_time.hour for b in batches] == [13, 13]


def test_shipper_tails_appends_rotation_and_partial_lines(tmp_path: Path) -> None:
    got: list = []
    now = datetime(2026, 10, 14, 12, tzinfo=UTC)
    f = tmp_path / "app.log"
    f.write_text("2026-10-14T11:00:00Z one\ntwo without newline yet")
    sh = LogFileShipper([str(tmp_path / "*.log")], got.append, job_id="j", clock=lambda: now, root=tmp_path)
    assert sh.poll() == 1
    assert got[-1].lines == ["2026-10-14T11:00:00Z one"] and got[-1].source.stream == "app.log"
    with f.open("a") as fh:
        fh.write(" ... done\nthree\n")
    assert sh.poll() == 1
    assert got[-1].lines == ["two without newline yet ... done", "three"] and got[-1].first_line_no == 1
    assert sh.poll() == 0
    f.write_text("fresh\n")  # truncated (shorter than our offset)
    assert sh.poll() == 1 and got[-1].lines == ["fresh"] and got[-1].first_line_no == 0
    assert sh.events[-1] == (str(f), "truncated")
    f.rename(tmp_path / "app.log.1")
    f.write_text("rotated file line one is longer\n")
    assert sh.poll() == 1 and got[-1].lines == ["rotated file line one is longer"]
    assert sh.events[-1] == (str(f), "rotated")
    # no timestamp in the new generation: the last known time is carried forward (monotonic)
    assert got[-1].event_time == datetime(2026, 10, 14, 11, tzinfo=UTC)
    g = tmp_path / "plain.log"
    g.write_text("no stamps at all\n")
    assert sh.poll() == 1 and got[-1].source.stream == "plain.log"
    assert got[-1].event_time == now  # never saw a timestamp -> the poll time


def test_a_suspended_reader_holds_no_consumed_batch(tmp_path: Path) -> None:
    """A capture merge keeps one reader per file suspended; none may keep a batch it already gave
    away (with 400 files and 2000-line batches that alone was ~500 MB)."""
    from rlhealth.runtime import build_core

    p = tmp_path / "a.log"
    p.write_text("".join(f"2026-10-14T16:00:{i % 60:02d}Z line {i}\n" for i in range(50)))
    for prefilter in (None, build_core().classifier):
        r = LogReader(p, job_id="j", source=source_for("logs/a.log"), batch_lines=10, prefilter=prefilter)
        it = r.read(final=True, ref_time=REF, fallback_time=FB)
        first = next(it)
        assert r._last_utf8 == (None, None)
        assert len(first.lines) == 10
        r2 = LogReader(p, job_id="j", source=source_for("logs/a.log"), batch_lines=10, prefilter=prefilter)
        it2 = r2.read_utf8(final=True, ref_time=REF, fallback_time=FB)
        _batch, data = next(it2)
        assert r2._last_utf8 == (None, None)  # handed on, not kept
        assert prefilter is not None or data == "\n".join(_batch.lines).encode()


def test_tail_reader_cuts_giant_lines_at_its_own_limit(tmp_path: Path) -> None:
    # `rlhealth classify --max-line-bytes` reads through this: the head of a giant line, the rest skipped
    p = tmp_path / "x.log"
    p.write_bytes(b"a\n" + b"y" * 5000 + b"\nb\n" + b"z" * 3000)
    tail = TailReader(p, max_line_bytes=1024)
    got = list(tail.lines(final=True, chunk_bytes=700))
    assert [(no, off, len(line)) for no, off, line in got] == [(0, 0, 1), (1, 2, 1024), (2, 5003, 1), (3, 5005, 1024)]
    assert got[2][2] == b"b" and tail.giant_lines == 2 and tail.offset == p.stat().st_size
