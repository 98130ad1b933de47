"""A prefiltering log reader (`open_capture(..., prefilter=core.classifier)`) leaves empty the lines the
core will not read; the core must end up in exactly the same place as with the dense reader.

End to end: the same capture is replayed through the same core both ways, and the state (msgpack), the
verdict, the findings, the capture's problems and its stats must be equal; batch by batch the prefiltered
events must equal the dense ones except for lines left "" (see `rlhealth.agents.ingest.FRESHNESS_LINES`).
"""

from __future__ import annotations

import json
import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

import msgspec
import pytest

from rlhealth.agents import ingest
from rlhealth.agents.normalize import line_timestamp
from rlhealth.embedded import run_events
from rlhealth.runtime import build_core
from rlhealth.schemas import LogBatch
from rlhealth.schemas.common import Source
from rlhealth.schemas.events import MAX_LINE_CHARS
from rlhealth.sources import capture as capture_mod
from rlhealth.sources import logfiles as logfiles_mod
from rlhealth.sources.capture import open_capture
from rlhealth.sources.logfiles import LogReader
from rlhealth.sources.redact import Redactor
from tests.scenario_support import ROOT, shared_dir

CORE = build_core()


def _capture_dirs() -> list[Path]:
    own = sorted((ROOT / "tests" / "scenarios").glob("*/capture"))
    shared = sorted((shared_dir() / "scenarios").glob("*/capture"))
    example = ROOT / "rlhealth" / "examples" / "capture-healthy"
    return own + shared + ([example] if example.is_dir() else [])


# -- replay both ways ------------------------------------------------------------------------


def _replay(path: Path, prefiltered: bool, batch_lines: int, chunk: int | None, monkeypatch,
            whole: bool | None = None) -> dict:
    """Run the capture through the core; return everything that must not depend on the prefilter.

    `whole`: True makes the prefiltering reader decode every batch whole (as it does dense batches),
    False never; None keeps its rule (`logfiles.DENSE_BATCH_MIN_SHARE`)."""
    if whole is not None:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(logfiles_mod, "DENSE_BATCH_MIN_SHARE", 0.0 if whole else 2.0)
            return _replay(path, prefiltered, batch_lines, chunk, monkeypatch)
    if chunk is not None:
        # Capture.events() sets `_chunk_bytes` itself from the number of log files (>= 64 KiB): a small
        # chunk has to come from there.
        monkeypatch.setattr(capture_mod, "chunk_bytes_for", lambda n_files: chunk)
    cap = open_capture(path, batch_lines=batch_lines, prefilter=CORE.classifier if prefiltered else None)
    events: list = []
    findings: list = []

    def on_findings(_job: str, fs: list) -> None:
        findings.extend((f.rule_id, f.kind, f.text, f.ref, f.event_time, f.fields, f.source) for f in fs)

    def tee(it):
        for ev in it:
            events.append(ev)
            yield ev

    now = cap.info.captured_at
    state, n_events, n_findings = run_events(CORE, cap.info.job_id, tee(cap.events()), now, on_findings)
    if chunk is not None:
        assert cap._chunk_bytes == chunk
        monkeypatch.undo()
    return dict(
        state=msgspec.msgpack.encode(state),
        verdict=CORE.judge(state, now).model_dump_json(),
        findings=findings,
        problems=list(cap.problems),
        stats=cap.stats,
        counts=(n_events, n_findings),
        events=events,
        rule_ids={f[0] for f in findings},
    )


def _assert_same_batches(dense: list, sparse: list) -> tuple[int, int]:
    """Event for event equal, except that a prefiltered line may be "" where the dense one is not.
    Returns (lines, lines left empty)."""
    assert len(dense) == len(sparse)
    lines = emptied = 0
    for d, s in zip(dense, sparse):
        assert type(d) is type(s)
        if not isinstance(d, LogBatch):
            assert d.model_dump() == s.model_dump()
            continue
        assert s.model_dump(exclude={"lines", "ingest_time"}) == d.model_dump(exclude={"lines", "ingest_time"})
        assert len(s.lines) == len(d.lines)
        for i, (a, b) in enumerate(zip(d.lines, s.lines)):
            if b != a:
                assert b == "", (d.source.stream, d.offsets[i], a[:120], b[:120])
                emptied += 1
        # the core's freshness (and the reader's own event_time) look at the last lines: never emptied
        assert s.lines[-ingest.FRESHNESS_LINES:] == d.lines[-ingest.FRESHNESS_LINES:]
        lines += len(d.lines)
    return lines, emptied


def _assert_equivalent(path: Path, batch_lines: int, chunk: int | None, monkeypatch,
                       whole: bool | None = None) -> tuple[dict, int, int]:
    dense = _replay(path, False, batch_lines, chunk, monkeypatch)
    sparse = _replay(path, True, batch_lines, chunk, monkeypatch, whole)
    assert sparse["findings"] == dense["findings"]
    assert sparse["verdict"] == dense["verdict"]
    assert sparse["state"] == dense["state"]
    assert sparse["problems"] == dense["problems"]
    assert sparse["stats"] == dense["stats"]
    assert sparse["counts"] == dense["counts"]
    lines, emptied = _assert_same_batches(dense["events"], sparse["events"])
    return dense, lines, emptied


# -- (a) every example capture ---------------------------------------------------------------


@pytest.mark.parametrize("capture_dir", _capture_dirs(), ids=lambda p: p.parent.name if p.name == "capture" else p.name)
def test_prefiltered_replay_equals_dense_on_example_captures(capture_dir: Path, monkeypatch) -> None:
    dense, lines, emptied = _assert_equivalent(capture_dir, 2000, None, monkeypatch)  # the probe's batch size
    has_logs = any(p.is_file() for p in (capture_dir / "logs").rglob("*")) if (capture_dir / "logs").is_dir() else False
    assert (lines > 0) == has_logs
    _assert_equivalent(capture_dir, 7, 4096, monkeypatch)


# -- (b) generated captures aimed at the edges -----------------------------------------------

CAPTURED_AT = datetime(2026, 10, 14, 17, 0, 0, tzinfo=UTC)
RAY = "\x1b[36m(RayWorker pid=1, ip=10.0.0.1)\x1b[0m "
SECRETS = [
    "Authorization: Bearer abcdef0123456789abcdef",
    "HF_TOKEN=hf_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "export WANDB_API_KEY=0123456789abcdef0123",
    "cloning https://user:s3cretpass@git.example.com/repo.git",
    "--api-key sk-abcdefghijklmnopqrstuvwx",
]
VLLM_STATS = ("INFO {md} {hms} [loggers.py:271] Engine 000: Avg prompt throughput: {p:.1f} tokens/s, Avg generation "
              "throughput: {g:.1f} tokens/s, Running: {r} reqs, Waiting: 0 reqs, GPU KV cache usage: 5.0%, "
              "Prefix cache hit rate: 1.0%")
NOISE = [
    "  warnings.warn(", "loading shard 3/8", "", "    return forward_call(*args, **kwargs)", "{'a': 1}",
    "some output with a colon: value", "Epoch 1:  50%|#####     | 5/10 [00:01<00:01, 4.0it/s]",
    "\rProcessed prompts:  12%|#2        | 12/100 [00:03<00:22, 3.91it/s]", "==== separator ====",
    "  | frame info", "\x1b[32mOK\x1b[0m", "12:34", "ratio 1:2:3",
]
BAD_UTF8 = [b"\xff\xfe broken bytes", b"caf\xc3 latin", b"surrogate \xed\xa0\x80 here", b"\xc0\x80 overlong",
            b"cut \xe2\x82"]


def _rule_examples() -> list[str]:
    return [m for r in CORE.classifier.rules for m in r.match]


def _is_exception_line(line: str) -> bool:
    """Would the core read the 80 lines before this one (a python_exception match)?"""
    return any(ingest.lines_before_match(rule) for _i, rule in
               ((i, CORE.classifier.rules[r]) for i, r in CORE.classifier.raw_hits([line])))


EXAMPLES = _rule_examples()
QUIET_EXAMPLES = [m for m in EXAMPLES if not _is_exception_line(m)]


class _LogGen:
    """Random but reproducible log text: timestamps in several flavours, every rule's examples, tracebacks
    with up to 100 context lines, secrets, invalid UTF-8, ANSI Ray prefixes, tqdm bars."""

    def __init__(self, rnd: random.Random, t0: datetime) -> None:
        self.rnd = rnd
        self.t = t0
        self.examples = EXAMPLES
        self.out: list[bytes] = []

    def tick(self) -> datetime:
        self.t += timedelta(seconds=self.rnd.randint(0, 20), milliseconds=self.rnd.randint(0, 999))
        return self.t

    def stamp(self) -> str:
        t = self.tick()
        return self.rnd.choice([
            t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z ",
            t.strftime("%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d} INFO ",
            t.strftime("INFO %m-%d %H:%M:%S "),
            t.strftime("I%m%d %H:%M:%S.%f 4242 x.py:1] "),
            t.strftime("[%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d} I 1 2] ",
        ])

    def add(self, line: str | bytes) -> None:
        self.out.append(line if isinstance(line, bytes) else line.encode("utf-8"))

    def wrap(self, text: str, stamped: float = 0.5) -> str:
        rnd = self.rnd
        if rnd.random() < stamped:
            text = self.stamp() + text
        if rnd.random() < 0.3:
            text = rnd.choice([RAY, "(pid=77) ", "[rank0]: ", "(EngineCore_DP0 pid=9) ", "[pod/t-0/main] "]) + text
        return text

    def noise(self, stamped: float = 0.5) -> None:
        self.add(self.wrap(self.rnd.choice(NOISE) + f" {self.rnd.randint(0, 10**6)}", stamped))

    def rule_line(self) -> None:
        self.add(self.wrap(self.rnd.choice(self.examples), 0.4))

    def secret(self) -> None:
        rnd = self.rnd
        s = rnd.choice(SECRETS)
        if rnd.random() < 0.5:  # on a line that also matches a rule
            s = rnd.choice([f"RuntimeError: request failed with {s}", f"{rnd.choice(self.examples)} {s}",
                            f"ValueError: bad header {s}"] if self.examples is EXAMPLES
                           else [f"{rnd.choice(self.examples)} {s}"])
        self.add(self.wrap(s, 0.5))

    def vllm_stats(self) -> None:
        t = self.tick()
        r = self.rnd
        line = VLLM_STATS.format(md=t.strftime("%m-%d"), hms=t.strftime("%H:%M:%S"), p=r.uniform(0, 500),
                                 g=r.uniform(0, 900), r=r.randint(0, 64))
        self.add((r.choice([RAY, "(APIServer pid=1) ", ""])) + line)

    def traceback(self) -> None:
        rnd = self.rnd
        head = "Traceback (most recent call last):"
        self.add(self.wrap(head, 0.7))
        depth = rnd.choice([0, 1, 5, 11, 12, 13, 40, 78, 79, 80, 81, 99, 100, rnd.randint(0, 100)])
        for k in range(depth):
            x = rnd.random()
            if x < 0.45:
                self.add(f'  File "/app/pkg/mod{k % 7}.py", line {k + 3}, in f{k % 5}')
            elif x < 0.8:
                self.add(f"    call_{k}(x, y)")
            elif x < 0.86:
                self.secret()
            elif x < 0.9:
                self.add(self.stamp() + "interleaved line from another thread")
            elif x < 0.93:
                self.rule_line()
            elif x < 0.95:
                self.add("The above exception was the direct cause of the following exception:")
            else:
                self.noise(stamped=0.0)
        exc = rnd.choice(["RuntimeError: boom", "torch.OutOfMemoryError: CUDA out of memory.",
                          "ValueError: bad value", "ray.exceptions.RayTaskError(ValueError): nope",
                          "KeyboardInterrupt: ", "ContextLengthExceededError: too long",
                          "RuntimeError: NCCL communicator was aborted"])
        self.add(self.wrap(exc, 0.2))

    def body(self, n: int, *, stamped: float = 0.6, busy: bool = True) -> None:
        """`busy`: matches everywhere (every line near one); else mostly ordinary stamped output with a
        match every few dozen lines and a traceback every few hundred (the prefilter's fast path)."""
        rnd = self.rnd
        # thresholds: noise, rule example, vLLM stats, traceback, secret, anchored match, else noise
        cut = (0.45, 0.62, 0.7, 0.76, 0.84, 0.93) if busy else (0.93, 0.96, 0.985, 0.9865, 0.9885, 0.995)
        # quiet text: python exceptions (80 lines of context each) only at the end of the rare tracebacks
        self.examples = EXAMPLES if busy else QUIET_EXAMPLES
        while len(self.out) < n:
            x = rnd.random()
            if x < cut[0]:
                self.noise(stamped)
            elif x < cut[1]:
                self.rule_line()
            elif x < cut[2]:
                self.vllm_stats()
            elif x < cut[3]:
                self.traceback()
            elif x < cut[4]:
                self.secret()
            elif x < cut[5]:  # a matched line whose timestamp comes from 1..14 lines before it
                self.add(self.stamp() + "anchor line")
                for _ in range(rnd.randint(0, 13)):
                    self.noise(stamped=0.0)
                self.add(rnd.choice(["Training Step Progress:   3%|▎         | 7/200 [1:02:11<28:33:10, 532.70s/it]",
                                     "RuntimeError: no timestamp here" if busy else "Fatal Python error: Aborted",
                                     rnd.choice(self.examples)]))
            else:
                self.noise(stamped)

    def data(self, final_newline: bool = True) -> bytes:
        return b"\n".join(self.out) + (b"\n" if final_newline else b"")


def _unstamped(lines: list[bytes]) -> list[bytes]:
    return [x for x in lines if line_timestamp(x.decode("utf-8", "replace"), CAPTURED_AT) is None]


def _write_capture(root: Path, seed: int) -> Path:
    rnd = random.Random(seed)
    cap = root / f"cap{seed}"
    (cap / "logs" / "ray" / "node1").mkdir(parents=True)
    (cap / "capture.json").write_text(json.dumps({"job_id": f"gen-{seed}", "cluster": "test",
                                                  "scheduler": "kubernetes",
                                                  "captured_at": CAPTURED_AT.strftime("%Y-%m-%dT%H:%M:%SZ")}))
    t0 = CAPTURED_AT - timedelta(hours=3)
    polls = [{"ts": (t0 + timedelta(minutes=20 * i)).strftime("%Y-%m-%dT%H:%M:%SZ"), "state": "running", "pods": 2,
              "failure_count": 0, "attempt": 0, "max_retries": 1} for i in range(9)]
    (cap / "state.jsonl").write_text("".join(json.dumps(p) + "\n" for p in polls))

    # an ordinary log, secrets and tracebacks everywhere, one line over MAX_LINE_CHARS, cut mid-line
    g = _LogGen(rnd, t0)
    g.body(rnd.randint(1500, 2500))
    at = rnd.randint(100, len(g.out) - 100)
    g.out.insert(at, (g.stamp() + "long " + "x" * (MAX_LINE_CHARS + rnd.randint(1, 5000))).encode())
    for _ in range(3):  # a few lines with invalid UTF-8 (their whole chunk takes the exact path)
        g.out.insert(rnd.randint(0, len(g.out)), rnd.choice(BAD_UTF8) + f" {rnd.randint(0, 99)}".encode())
    (cap / "logs" / "pod_rank0.log").write_bytes(g.data(final_newline=False))

    # a head of many lines without any timestamp (more than the reader holds back), matches among them
    g = _LogGen(rnd, t0 + timedelta(seconds=5))
    head = rnd.choice([30, 150, 400])
    g.body(head, stamped=0.0)
    g.out = _unstamped(g.out)[:head]
    g.body(len(g.out) + rnd.randint(1500, 2500), busy=False)
    (cap / "logs" / "pod_rank1.log").write_bytes(g.data())

    # Ray worker output: every line behind a coloured prefix
    g = _LogGen(rnd, t0 + timedelta(seconds=9))
    g.body(rnd.randint(1000, 2000), busy=rnd.random() < 0.3)
    g.out = [x if x.startswith(b"\x1b[36m(") else RAY.encode() + x for x in g.out]
    (cap / "logs" / "ray" / "node1" / "worker-1.out").write_bytes(g.data())

    # no timestamp at all: the file's mtime
    g = _LogGen(rnd, t0)
    for _ in range(rnd.randint(50, 300)):
        if rnd.random() < 0.2:
            g.add(rnd.choice(EXAMPLES))
        else:
            g.add(rnd.choice(NOISE))
    g.out = _unstamped(g.out)
    (cap / "logs" / "plain.log").write_bytes(g.data())
    mtime = (CAPTURED_AT - timedelta(hours=2)).timestamp()
    os.utime(cap / "logs" / "plain.log", (mtime, mtime))
    return cap


GEN_CASES = [(seed, batch_lines, chunk)
             for seed, batch_lines, chunk in [
                 (0, 7, 4096), (0, 500, None), (1, 64, 4096), (1, 7, None), (2, 500, 4096), (2, 13, 4096),
                 (3, 100, 4096), (3, 250, None), (4, 7, 8192), (5, 500, 4096), (6, 2000, None), (6, 2000, 4096),
             ]]


@pytest.mark.parametrize("seed,batch_lines,chunk", GEN_CASES)
def test_prefiltered_replay_equals_dense_on_generated_captures(tmp_path: Path, monkeypatch, seed: int,
                                                               batch_lines: int, chunk: int | None) -> None:
    cap = _write_capture(tmp_path, seed)
    # the reader's own choice (busy stretches are decoded whole), then every batch line by line
    _assert_equivalent(cap, batch_lines, chunk, monkeypatch)
    dense, lines, emptied = _assert_equivalent(cap, batch_lines, chunk, monkeypatch, whole=False)
    # the run is not vacuous: many rules fired, tracebacks were folded, lines were left out, secrets masked
    assert len(dense["rule_ids"]) >= 20
    assert "python.exception_line" in dense["rule_ids"]
    # a batch of 7 is all tail: nothing can be left out; a file's first batch (up to its first
    # timestamp) is read whole: with 2000-line batches that is most of these files
    if 2 * ingest.FRESHNESS_LINES + 3 < batch_lines <= 500:
        assert emptied > lines // 10, (emptied, lines)
    elif batch_lines > 500:
        assert emptied > 0
    problems = {(p.path, p.problem) for p in dense["problems"]}
    assert ("logs/pod_rank0.log", "truncated") in problems  # no final newline and the long line
    assert ("logs/pod_rank0.log", "invalid_utf8") in problems
    texts = [x for ev in dense["events"] if isinstance(ev, LogBatch) for x in ev.lines]
    assert any("[REDACTED]" in x for x in texts)
    assert not any("hf_aaaaaaaaaaaa" in x or "abcdef0123456789abcdef" in x for x in texts)


def test_generated_capture_judges_the_same_at_every_batch_size(tmp_path: Path, monkeypatch) -> None:
    """Batching must not change what the core concludes from the matched lines it sees (a sanity check of
    the generator: the equality above is about the prefilter, this one about the data being meaningful)."""
    cap = _write_capture(tmp_path, 7)
    dense, lines, emptied = _assert_equivalent(cap, 500, 4096, monkeypatch)
    assert json.loads(dense["verdict"])["verdict"] in ("KILL", "NO-KILL")
    assert lines > 2000


# -- targeted edges ---------------------------------------------------------------------------


def _tiny_capture(root: Path, name: str, logs: dict[str, bytes]) -> Path:
    cap = root / name
    (cap / "logs").mkdir(parents=True)
    (cap / "capture.json").write_text(json.dumps({"job_id": name, "cluster": "t", "scheduler": "other",
                                                  "captured_at": "2026-10-14T17:00:00Z"}))
    for rel, data in logs.items():
        (cap / "logs" / rel).parent.mkdir(parents=True, exist_ok=True)
        (cap / "logs" / rel).write_bytes(data)
    return cap


def _ts(i: int) -> str:
    return (CAPTURED_AT - timedelta(hours=1) + timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("gap", [0, 1, 10, 11, 12, 13, 78, 79, 80, 81, 100])
def test_time_and_traceback_lookback_boundaries(tmp_path: Path, monkeypatch, gap: int) -> None:
    """A stamped line then `gap` unstamped lines then a match: the time lookback (12 lines with the match)
    and the traceback context (80 lines) end exactly where the core stops looking."""
    lines = [f"{_ts(i)} warmup {i}" for i in range(30)]
    lines += [f"{_ts(40)} Traceback (most recent call last):"]
    lines += [f'  File "/app/m{k}.py", line {k}, in f{k}' if k % 2 else f"    code_{k}()" for k in range(gap)]
    lines += ["RuntimeError: boom", "Training Step Progress:   3%|▎         | 7/200 [1:02:11<28:33:10, 532.70s/it]"]
    lines += [f"plain {k}" for k in range(20)] + [f"{_ts(90)} done"]
    cap = _tiny_capture(tmp_path, f"gap{gap}", {"pod_rank0.log": "\n".join(lines).encode() + b"\n"})
    for batch_lines in (500, 150, 7):
        dense, _, _ = _assert_equivalent(cap, batch_lines, None, monkeypatch)
        assert "python.exception_line" in dense["rule_ids"]
    state = msgspec.msgpack.decode(dense["state"])
    assert state["tracebacks"], "the traceback was folded into the state"


@pytest.mark.parametrize("gap", [0, 1, 9, 10, 11, 12, 13])
def test_time_lookback_of_a_progress_bar(tmp_path: Path, monkeypatch, gap: int) -> None:
    """A match that is not an exception (no 80-line context): only the time lookback decodes lines before
    it. Its timestamp comes from the stamped line when that is at most 11 lines back."""
    # a first batch of stamped lines: the batches after it are read sparsely (500 = 12 * 40 + 20)
    lines = [f"{_ts(i // 10)} warmup {i}" for i in range(500)] + [f"{_ts(100)} epoch start"]
    lines += [f"    loading part {k}" for k in range(gap)]
    lines += ["Training Step Progress:   3%|▎         | 7/200 [1:02:11<28:33:10, 532.70s/it]"]
    lines += [f"plain {k}" for k in range(30)] + [f"{_ts(200)} done"]
    cap = _tiny_capture(tmp_path, f"tq{gap}", {"pod_rank0.log": "\n".join(lines).encode() + b"\n"})
    for batch_lines in (500, 40):
        dense, _, emptied = _assert_equivalent(cap, batch_lines, None, monkeypatch)
        assert emptied > 0
    state = msgspec.msgpack.decode(dense["state"])
    step_ts = state["signals"]["trainer_step"]["first_ts"]
    if gap + 1 < ingest.TIME_LOOKBACK_LINES:  # the stamped line is gap + 1 lines back
        assert step_ts == (CAPTURED_AT - timedelta(hours=1) + timedelta(seconds=100)).timestamp()
    else:
        assert step_ts != (CAPTURED_AT - timedelta(hours=1) + timedelta(seconds=100)).timestamp()


@pytest.mark.parametrize("filler", [40, 60, 70, 73, 74, 75, 79, 80])
def test_traceback_frames_far_before_the_exception_line(tmp_path: Path, monkeypatch, filler: int) -> None:
    """The frames of a traceback sit 61-86 lines before its exception line, its header further: dense and
    prefiltered reading see the same of them (up to 80 lines back), and the fingerprint is the exception's
    own (frames are not part of it)."""
    lines = [f"{_ts(i // 10)} warmup {i}" for i in range(500)] + [f"{_ts(101)} Traceback (most recent call last):"]
    lines += [f'  File "/app/mod{k}.py", line {k}, in fn{k}' for k in range(6)]
    lines += [f"    locals dump {k}" for k in range(filler)]
    lines += ["RuntimeError: boom"] + [f"{_ts(300 + i)} after {i}" for i in range(30)]
    cap = _tiny_capture(tmp_path, f"fr{filler}", {"pod_rank0.log": "\n".join(lines).encode() + b"\n"})
    dense, _, emptied = _assert_equivalent(cap, 500, None, monkeypatch)
    assert emptied > 0
    (tb,) = msgspec.msgpack.decode(dense["state"])["tracebacks"]
    from rlhealth.agents.tracebacks import fingerprint

    assert tb["fingerprint"] == fingerprint("RuntimeError", "boom")


@pytest.mark.parametrize("batch_lines", [7, 13, 500])
def test_long_head_without_timestamps(tmp_path: Path, monkeypatch, batch_lines: int) -> None:
    """More unstamped lines than the reader holds back (MAX_HELD_LINES, made small here): the held batches get
    the fallback time, and every later batch is read sparsely."""
    head = []
    for i in range(300):
        head.append(["loading weights", "Training Step Progress:   3%|▎         | 7/200 [1:02:11<28:33:10, 532.70s/it]",
                     "Traceback (most recent call last):", '  File "/a.py", line 1, in f',
                     "RuntimeError: early failure", "Fatal Python error: Aborted", ""][i % 7] + f" {i}")
    body = [f"{_ts(i)} INFO step {i}" if i % 150 != 75 else "[rank0]: RuntimeError: later" for i in range(400)]
    cap = _tiny_capture(tmp_path, f"head{batch_lines}", {"pod_rank0.log": "\n".join(head + body).encode() + b"\n",
                                                         "nots.log": "\n".join(head).encode() + b"\n"})
    mtime = (CAPTURED_AT - timedelta(hours=2)).timestamp()
    os.utime(cap / "logs" / "nots.log", (mtime, mtime))
    with mock.patch("rlhealth.sources.logfiles.MAX_HELD_LINES", 140):  # (_replay undoes monkeypatch)
        dense, lines, emptied = _assert_equivalent(cap, batch_lines, 4096, monkeypatch)
    assert {"python.exception_line", "python.fatal_error"} <= dense["rule_ids"]
    if batch_lines == 13:
        assert emptied > 0


def test_secret_lines_inside_a_traceback_and_on_matched_lines(tmp_path: Path, monkeypatch) -> None:
    lines = [f"{_ts(i)} start {i}" for i in range(10)]
    lines += ["Traceback (most recent call last):", '  File "/app/train.py", line 3, in main',
              "    hf_hub_download(token=HF_TOKEN)", "HF_TOKEN=hf_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
              '  File "/app/hub.py", line 9, in download', "Authorization: Bearer abcdef0123456789abcdef",
              "RuntimeError: 401 Client Error with Authorization: Bearer abcdef0123456789abcdef",
              "tail no stamp", f"{_ts(60)} x", "y"]
    cap = _tiny_capture(tmp_path, "secrets", {"pod_rank0.log": "\n".join(lines).encode()})
    for batch_lines in (500, 4, 1):
        dense, _, _ = _assert_equivalent(cap, batch_lines, None, monkeypatch)
        text = json.dumps([f[2] for f in dense["findings"]]) + dense["state"].decode("utf-8", "replace")
        assert "abcdef0123456789abcdef" not in text and "hf_aaaa" not in text
        assert "[REDACTED]" in text


def test_ansi_ray_prefixes_and_vllm_stats(tmp_path: Path, monkeypatch) -> None:
    rows = []
    for i in range(300):
        t = CAPTURED_AT - timedelta(minutes=30) + timedelta(seconds=5 * i)
        rows.append(RAY + VLLM_STATS.format(md=t.strftime("%m-%d"), hms=t.strftime("%H:%M:%S"), p=10.0,
                                            g=20.0 + i, r=3))
        rows.append(RAY + "chatter without a time")
    cap = _tiny_capture(tmp_path, "vllm", {"ray/node0/worker-7.out": "\n".join(rows).encode() + b"\n"})
    for batch_lines, chunk in ((7, 4096), (50, 4096), (500, None)):
        dense, lines, emptied = _assert_equivalent(cap, batch_lines, chunk, monkeypatch, whole=False)
        state = msgspec.msgpack.decode(dense["state"])
        assert state["engines"], "vLLM stats reached the engine table"
        # half the lines are matches: by its own rule the reader decodes such batches whole
        assert _assert_equivalent(cap, batch_lines, chunk, monkeypatch)[2] == 0
        if batch_lines == 50:  # the chatter between stats lines (all but each batch's tail) is left out
            # every batch, the first one too (its time comes from its last stamped line), leaves 21 empty
            assert emptied == 12 * 21, emptied


def test_prefiltered_reader_decodes_few_lines_of_an_ordinary_log(tmp_path: Path, monkeypatch) -> None:
    rnd = random.Random(42)
    t = CAPTURED_AT - timedelta(hours=5)
    rows = []
    for i in range(20_000):
        t += timedelta(milliseconds=rnd.randint(0, 900))
        if i % 4000 == 1999:
            rows.append(f"{t:%Y-%m-%d %H:%M:%S},000 ERROR [rank0]: RuntimeError: NCCL communicator was aborted")
        elif i % 7000 == 5:
            rows.append("[rank3]:[E321 02:07:08.414090775 ProcessGroupNCCL.cpp:1515] [PG 1 Rank 3] Process group "
                        "watchdog thread terminated with exception: [Rank 3] Watchdog caught collective operation "
                        "timeout")
        elif i % 5000 == 3:
            rows.append(f"INFO {t:%m-%d %H:%M:%S} [loggers.py:271] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
                        "Avg generation throughput: 20.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache "
                        "usage: 5.0%, Prefix cache hit rate: 1.0%")
        else:
            rows.append(f"{t:%Y-%m-%d %H:%M:%S},{rnd.randint(0, 999):03d} INFO worker {rnd.randint(0, 99)}: "
                        f"handled request {i} in {rnd.random():.3f}s")
    log = tmp_path / "big.log"
    log.write_bytes("\n".join(rows).encode() + b"\n")

    def read(prefilter):
        r = LogReader(log, job_id="j", source=Source(stream="big.log"), batch_lines=500, prefilter=prefilter)
        batches = list(r.read(final=True, ref_time=CAPTURED_AT, fallback_time=CAPTURED_AT))
        return r, batches

    dense_r, dense_b = read(None)
    sparse_r, sparse_b = read(CORE.classifier)
    assert sparse_r.lines_read == dense_r.lines_read == 20_000
    assert dense_r.lines_decoded == 0  # counted by the prefiltering reader only
    assert 0 < sparse_r.lines_decoded < sparse_r.lines_read // 10, sparse_r.lines_decoded
    assert sum(x == "" for b in sparse_b for x in b.lines) > 18_000
    _assert_same_batches(dense_b, sparse_b)
    cap = _tiny_capture(tmp_path, "big", {"big.log": log.read_bytes()})
    dense, _, _ = _assert_equivalent(cap, 500, None, monkeypatch)
    assert {f[0] for f in dense["findings"]} >= {"python.exception_line", "nccl.watchdog_terminated"}


# -- regressions: bugs found while writing these tests ---------------------------------------------


def _offsets(log: Path, prefilter, chunk: int) -> list[int]:
    r = LogReader(log, job_id="j", source=Source(stream="g.log"), prefilter=prefilter, chunk_bytes=chunk)
    return [o for b in r.read(final=True, ref_time=CAPTURED_AT, fallback_time=CAPTURED_AT) for o in b.offsets]


@pytest.mark.parametrize("chunk", [4096, 1 << 20])
def test_offsets_after_a_giant_line(tmp_path: Path, chunk: int) -> None:
    log = tmp_path / "g.log"
    log.write_bytes(b"2026-10-14T16:00:00Z a\n" + b"g" * ((1 << 20) + 10) + b"\n2026-10-14T16:00:01Z after\n")
    true = [0, 23, 23 + (1 << 20) + 11]
    assert _offsets(log, None, chunk) == true
    assert _offsets(log, CORE.classifier, chunk) == true


def test_as_of_probe_with_a_leap_day_stamp_equals_dense(tmp_path: Path) -> None:
    from rlhealth.embedded import _until, probe

    rows = [f"2027-12-29T00:{i // 60 % 60:02d}:{i % 60:02d}Z warmup {i}" for i in range(500)]
    rows += ["2027-12-30T00:00:00Z start", "INFO 02-29 10:00:00 [x.py:1] a line from a leap day",
             "Training Step Progress:   3%|▎         | 7/200 [1:02:11<28:33:10, 532.70s/it]"]
    rows += [f"chatter {i}" for i in range(5)] + [f"2027-12-30T01:00:0{i}Z tail" for i in range(8)]
    cap = tmp_path / "leap"
    (cap / "logs").mkdir(parents=True)
    (cap / "capture.json").write_text(json.dumps({"job_id": "j", "cluster": "c", "scheduler": "other",
                                                  "captured_at": "2028-03-05T00:00:00Z"}))
    (cap / "logs" / "train.log").write_text("\n".join(rows) + "\n")
    when = datetime(2027, 12, 31, tzinfo=UTC)  # 2027 and 2026 have no Feb 29; 2028 (captured_at) has
    dense, _n, _f = run_events(CORE, "j", _until(open_capture(cap, batch_lines=500).events(), when), when)
    assert dense.signals["trainer_step"].first_ts == datetime(2027, 12, 30, tzinfo=UTC).timestamp()
    got = probe(cap, CORE, now=when, workers=0, batch_lines=500).state
    assert msgspec.msgpack.encode(got) == msgspec.msgpack.encode(dense)


@pytest.mark.parametrize("prefiltered", [False, True])
def test_redaction_that_lengthens_a_full_length_line_does_not_crash(tmp_path: Path, prefiltered: bool) -> None:
    line = "2026-10-14T16:00:00Z x Bearer abcdef " + "y" * (MAX_LINE_CHARS - 37)
    assert len(line) == MAX_LINE_CHARS
    log = tmp_path / "a.log"
    log.write_bytes(line.encode() + b"\n" + b"2026-10-14T16:00:01Z ok\n")
    r = LogReader(log, job_id="j", source=Source(stream="a.log"), prefilter=CORE.classifier if prefiltered else None)
    batches = list(r.read(final=True, ref_time=CAPTURED_AT, fallback_time=CAPTURED_AT))
    assert all(len(x) <= MAX_LINE_CHARS for b in batches for x in b.lines)


# -- watch: followed captures, read a little at a time ------------------------------------------


@pytest.mark.parametrize("capture_dir", _capture_dirs()[:6], ids=lambda p: p.parent.name if p.name == "capture" else p.name)
def test_followed_capture_prefiltered_equals_dense(capture_dir: Path) -> None:
    """`watch` prefilters its followers' log readers: the state it folds equals the dense one."""
    from rlhealth.sources.follow import CaptureFollower

    cap = open_capture(capture_dir)
    now = cap.info.captured_at
    out = {}
    for prefilter in (None, CORE.classifier):
        f = CaptureFollower(capture_dir, batch_lines=50, clock=lambda: now, prefilter=prefilter)
        state = CORE.new_state(f.info.job_id)
        for _ in range(2):  # a second poll finds nothing new
            for ev in f.poll():
                state, _findings = CORE.step(state, ev, now)
        out[prefilter is None] = (msgspec.msgpack.encode(state), CORE.judge(state, now).model_dump_json())
    assert out[True] == out[False]


# -- (c) the dense mix of bench/probe.py: most lines are metric and progress matches ----------


@pytest.mark.parametrize("batch_lines,chunk", [(2000, None), (7, 4096), (500, 1 << 16)])
def test_prefiltered_replay_equals_dense_on_the_dense_bench_corpus(tmp_path: Path, monkeypatch, batch_lines: int,
                                                                   chunk: int | None) -> None:
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from probe import build_capture
    finally:
        sys.path.remove(str(ROOT / "bench"))
    cap = tmp_path / "dense"
    build_capture(cap, 1, seed=11, corpus="dense")  # ~1 MB: ~5,000 lines, ~70% of them matched
    dense, lines, emptied = _assert_equivalent(cap, batch_lines, chunk, monkeypatch)
    assert lines > 4000
    if batch_lines > 2 * ingest.FRESHNESS_LINES:  # dense batches are decoded whole: none left empty
        assert emptied == 0
    _assert_equivalent(cap, batch_lines, chunk, monkeypatch, whole=False)  # and line by line, as before
    assert len(dense["findings"]) >= 2  # the traceback and the NCCL watchdog line


@pytest.mark.parametrize("corpus", ["dense", "generated"])
def test_hits_a_reader_hands_to_the_core_are_what_the_core_would_find(tmp_path: Path, monkeypatch, corpus: str) -> None:
    """A prefiltering reader hands the core its hits for a batch (`Classifier.hand_hits`): they must equal
    a fresh scan of the batch's final lines, and the core must use them (no second scan)."""
    import sys

    from rlhealth.agents.signatures import Classifier

    if corpus == "dense":
        sys.path.insert(0, str(ROOT / "bench"))
        try:
            from probe import build_capture
        finally:
            sys.path.remove(str(ROOT / "bench"))
        cap = tmp_path / "dense"
        build_capture(cap, 1, seed=3, corpus="dense")
    else:
        cap = _write_capture(tmp_path, 5)
    handed: list[tuple[list[str], list]] = []
    real_hand = Classifier.hand_hits

    def record(self, lines, hits):
        handed.append((lines, list(hits)))
        real_hand(self, lines, hits)

    monkeypatch.setattr(Classifier, "hand_hits", record)
    n_handed: dict[int, int] = {}
    for batch_lines in (2000, 500):
        handed.clear()
        c = open_capture(cap, batch_lines=batch_lines, prefilter=CORE.classifier)
        run_events(CORE, c.info.job_id, c.events(), c.info.captured_at)
        n_handed[batch_lines] = len(handed)
        # hits are handed batch by batch: finer batches hand more of them (the generated capture's file sizes
        # follow the rule packs' examples, so the counts themselves are not fixed)
        assert len(handed) >= 1 and (batch_lines == 2000 or len(handed) > n_handed[2000]), \
            [len(x[0]) for x in handed]
        # the core's scan took every batch's hits (other tests' readers may have left theirs)
        assert not any(id(lines) in CORE.classifier._handed for lines, _ in handed)
        for lines, hits in handed:
            assert hits == CORE.classifier.raw_hits(list(lines))  # a copy: scanned afresh
    monkeypatch.undo()


# -- (d) secret markers on ordinary text: a marked line the mask leaves alone costs only itself -------


def test_marked_lines_the_mask_leaves_alone_cost_nothing(tmp_path: Path, monkeypatch) -> None:
    """A secret marker also fires on prose (a colour code right after the word "token", as in
    loguru lines): without its colour codes such a line carries no marker, so the reader neither
    decodes it nor reads context before it; a line the mask changes gets the traceback lookback (it
    may match anew)."""
    rnd = random.Random(5)
    t = CAPTURED_AT - timedelta(hours=3)
    rows = []
    for i in range(12_000):
        t += timedelta(milliseconds=rnd.randint(0, 900))
        stamp = f"\x1b[32m{t:%Y-%m-%d %H:%M:%S}.{rnd.randint(0, 999):03d}\x1b[0m | INFO | "
        if i % 50 == 7:  # prose ending in a credential word before an ANSI reset: marked, nothing to mask
            rows.append(RAY + stamp + f"\x1b[1mrollout {rnd.randint(0, 99)} sync token\x1b[0m")
        elif i % 3000 == 1500:  # a real secret among them, then a traceback it precedes
            rows.append(RAY + stamp + "\x1b[1mWANDB_API_KEY\x1b[0m=0123456789abcdef0123")
            rows += ["Traceback (most recent call last):", '  File "/app/train.py", line 3, in main',
                     "RuntimeError: reward server returned 503"]
        else:
            rows.append(RAY + stamp + f"\x1b[1mhandled request {i} in {rnd.random():.3f}s\x1b[0m")
    log = tmp_path / "pod.log"
    log.write_bytes("\n".join(rows).encode() + b"\n")
    r = LogReader(log, job_id="j", source=Source(stream="pod.log"), batch_lines=500, prefilter=CORE.classifier)
    batches = list(r.read(final=True, ref_time=CAPTURED_AT, fallback_time=CAPTURED_AT))
    text = "\n".join(x for b in batches for x in b.lines)
    assert "0123456789abcdef0123" not in text and "WANDB_API_KEY=[REDACTED]" in text
    assert len(Redactor().hit_lines(log.read_bytes())) >= 244  # the prose lines do carry a marker
    assert text.count("sync token") < 20  # only those among batch tails are decoded
    # 4 secrets with their 80 lines of context, tracebacks, batch tails: not 80 (nor 1) per marked line
    assert r.lines_decoded < 500, r.lines_decoded
    cap = _tiny_capture(tmp_path, "marked", {"pod.log": log.read_bytes()})
    for batch_lines, chunk in ((500, None), (37, 4096)):
        dense, lines, emptied = _assert_equivalent(cap, batch_lines, chunk, monkeypatch)
        assert emptied > 0.7 * lines, (emptied, lines)  # even 37-line batches (5 tail lines each)
        assert "python.exception_line" in {f[0] for f in dense["findings"]}
