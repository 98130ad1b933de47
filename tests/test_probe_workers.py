"""The probe's log-reading workers give what one process gives: the same state, verdict, findings and
source problems, also when logs start reading before the small sources are parsed (prefetch) and a
log's fallback time is known only after that (its mtime is after captured_at)."""

from __future__ import annotations

import os
import shutil
import signal
from datetime import datetime
from pathlib import Path

import msgspec
import pytest

from rlhealth.embedded import probe
from rlhealth.runtime import build_core
from tests.scenario_support import ROOT

EXAMPLE = ROOT / "rlhealth" / "examples" / "capture-healthy"


def _hang(_sig: int, _frame: object) -> None:
    raise TimeoutError("the probe hung")


def _outcome(capture: Path, workers: int) -> tuple:
    found: list[str] = []
    old = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(120)  # a worker waiting for a fallback time that never comes would hang here
    try:
        r = probe(capture, build_core(), workers=workers, seq=1,
                  on_findings=lambda _j, fs: found.extend(repr(f) for f in fs))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    verdict = r.verdict.model_dump(mode="json", exclude={"produced_at"})
    problems = [(p.path, p.problem, p.gate, p.note, p.count) for p in r.problems]
    return msgspec.msgpack.encode(r.state), verdict, found, problems, r.events


def _stamp(path: Path, when: datetime) -> None:
    os.utime(path, (when.timestamp(), when.timestamp()))


@pytest.mark.parametrize("future", [(), ("b",), ("a", "c"), ("a", "b", "c")])
def test_workers_equal_one_process_with_unstamped_logs_and_late_fallbacks(tmp_path: Path, future: tuple) -> None:
    cap = tmp_path / "capture"
    shutil.copytree(EXAMPLE, cap)
    captured_at = datetime.fromisoformat("2026-10-14T16:20:00+00:00")
    # Logs with no timestamp at all take their fallback time: the mtime when it is not after
    # captured_at, else the window's start (known only once state.jsonl and the GPU polls are read).
    body = "".join(f"worker {i}: Traceback (most recent call last):\n  File \"x.py\", line {i}\n"
                   f"RuntimeError: CUDA error: an illegal memory access was encountered\n" for i in range(300))
    for name in ("a", "b", "c"):
        p = cap / "logs" / f"{name}_unstamped.log"
        p.write_text(body + "plain line without a time\n" * 5000)
        _stamp(p, captured_at.replace(year=2027) if name in future else captured_at.replace(hour=15))
    for p in (cap / "logs").glob("pod_rank*.log"):
        _stamp(p, captured_at.replace(year=2027) if "b" in future else captured_at.replace(hour=14))
    one = _outcome(cap, 0)
    assert one[4] > 0
    assert _outcome(cap, 2) == one
    assert _outcome(cap, 3) == one


def test_a_batch_crosses_the_pipe_packed_and_comes_back_the_same(tmp_path: Path) -> None:
    """What a worker sends for a batch (`_pack`) is rebuilt (`_unpack`) into an equal LogBatch with the same
    fields set, on dense and prefiltered reading; a batch of another shape crosses as itself."""
    import pickle
    from datetime import UTC

    from rlhealth.embedded import _pack, _template, _unpack
    from rlhealth.schemas.common import Source
    from rlhealth.schemas.events import LogBatch
    from rlhealth.sources.logfiles import LogReader

    log = tmp_path / "x.log"
    log.write_bytes(b"".join(
        (f"2026-10-14 12:00:{i % 60:02d} INFO step {i} \xc3\xa9 \x1b[1mtoken\x1b[0m\r50%|###\n" if i % 7 else
         f"Traceback (most recent call last):\nRuntimeError: CUDA error {i} HF_TOKEN=hf_{'a' * 30}\n").encode()
        for i in range(5000)) + b"\xff bad utf-8\nno newline at the end")
    ref = datetime(2026, 10, 14, 16, 15, tzinfo=UTC)
    src = Source(stream="logs/x.log", rank=0)
    packed = 0
    for prefilter in (build_core().classifier, None):
        reader = LogReader(log, job_id="j", source=src, batch_lines=700, prefilter=prefilter)
        template = _template("j", src, ref)
        batches = list(reader.read(final=True, ref_time=ref, fallback_time=ref))
        assert len(batches) > 7
        for b in batches:
            got = _unpack(pickle.loads(pickle.dumps(_pack(b, src))), template)
            assert got == b
            assert got.model_fields_set == b.model_fields_set and list(got.__dict__) == list(b.__dict__)
            packed += got is not b
    assert packed > 14
    odd = batches[0].model_copy(update={"lines": ["a\nb", *batches[0].lines[1:]]})
    assert _pack(odd, src) is odd
    stamped = LogBatch(job_id="j", event_time=ref, source=src, lines=["x"], offsets=[0], ts=[ref])
    assert _pack(stamped, src) is stamped
