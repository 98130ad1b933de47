"""The same job captured another way gives the same verdict and codes (metamorphic tests).

Real captures differ from ours in ways that carry no information about the job: `kubectl logs
--timestamps` or the kubelet's own files put a stamp (and a stream tag) before every line, files
exported on Windows carry a byte-order mark and CRLF endings, a pull nests the logs a level deeper,
colours the log levels, or cuts a file mid-line; a busy job prints the seed's benign noise between
the lines that matter. Each transform below is applied to every scenario
capture; a verdict or code that changes is a misreading of the format, not of the job.
"""

from __future__ import annotations

import random
import re
import shutil
import tomllib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from rlhealth.agents.normalize import line_timestamp, peel_prefixes
from rlhealth.embedded import probe
from rlhealth.runtime import build_core
from tests.scenario_support import ROOT, gap_param, scenario_dirs, shared_dir

SCENARIOS = scenario_dirs(shared_dir() / "scenarios") + scenario_dirs(ROOT / "tests" / "scenarios")
_TEXT_SUFFIXES = (".csv", ".jsonl", ".txt", ".yaml", ".yml", ".log", ".out", ".err")


def _logs(capture: Path) -> list[Path]:
    return sorted(p for p in (capture / "logs").rglob("*") if p.is_file()) if (capture / "logs").is_dir() else []


def _text_files(capture: Path) -> Iterator[Path]:
    return (p for p in sorted(capture.rglob("*")) if p.is_file() and p.suffix in _TEXT_SUFFIXES)


def _prefix_stamps(capture: Path, prefix: Callable[[datetime], str]) -> None:
    """Every line of every log gets the time it was written (its own stamp, else the latest before it), the
    way the kubelet records it. Lines before a log's first stamp keep no prefix: nothing in the capture says
    when they were written, and giving them the first stamp would claim they were all written at that
    instant (a trainer's unstamped steps would then read as fresh at the crash that follows them)."""
    captured_at = datetime.fromisoformat(orjson.loads((capture / "capture.json").read_bytes())["captured_at"]
                                         .replace("Z", "+00:00"))
    for p in _logs(capture):
        raw = p.read_bytes().split(b"\n")
        times = [line_timestamp(r.decode("utf-8", "replace"), captured_at) for r in raw]
        if all(t is None for t in times):
            continue  # nothing says when its lines were written
        out = []
        current = None
        for r, t in zip(raw, times):
            current = t or current
            out.append(prefix(current.astimezone(UTC)).encode() + r if r and current is not None else r)
        p.write_bytes(b"\n".join(out))


def _rfc3339_nano(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def kubectl_timestamps(capture: Path) -> None:
    _prefix_stamps(capture, lambda t: _rfc3339_nano(t) + " ")


def kubelet_cri_files(capture: Path) -> None:
    # /var/log/pods/<ns>_<pod>_<uid>/<container>/0.log: "<time> <stream> <F|P> <line>"
    _prefix_stamps(capture, lambda t: _rfc3339_nano(t) + " stdout F ")


def windows_export(capture: Path) -> None:
    for p in _text_files(capture):
        b = p.read_bytes().replace(b"\r\n", b"\n").rstrip(b"\n").replace(b"\n", b"\r\n")
        p.write_bytes((b"\xef\xbb\xbf" if p.suffix not in (".log", ".out", ".err") else b"") + b)


_LEVEL = re.compile(rb"\b(INFO|WARNING|ERROR|DEBUG|WARN)\b")


def messy_pull(capture: Path) -> None:
    for p in _logs(capture):
        b = _LEVEL.sub(lambda m: b"\x1b[32m" + m.group(1) + b"\x1b[0m", p.read_bytes())
        p.write_bytes(b + b"\xff\xfe\x00 cut mid-wri")  # a binary tail cut mid-line
    logs = capture / "logs"
    if logs.is_dir():
        logs.rename(capture / "pulled")
        logs.mkdir()
        (capture / "pulled").rename(logs / "node-a")


def _benign_examples() -> list[str]:
    """The benign pack's own example lines, without their prefixes and stamps (an inserted line takes
    the time of the line before it), less the trainer-metric examples: those are progress, not noise."""
    pack = tomllib.loads((ROOT / "rlhealth" / "rules" / "packs" / "benign.toml").read_text())
    out = []
    for rule in pack["rule"]:
        for line in rule.get("match", []):
            text = peel_prefixes(line)[1] or line
            text = re.sub(r"^(INFO|WARNING|DEBUG|ERROR)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+", r"\1 ", text)
            if "WANDB_MIRROR" not in text and "prob_diff" not in text:
                out.append(text)
    return out


def benign_noise(capture: Path) -> None:
    """A fifth of the stamped lines (never inside a traceback, never in a log's last 20 lines) are
    followed by one of the seed's benign lines."""
    rnd = random.Random(7)
    examples = _benign_examples()
    assert len(examples) >= 10
    captured_at = datetime.fromisoformat(orjson.loads((capture / "capture.json").read_bytes())["captured_at"]
                                         .replace("Z", "+00:00"))
    for p in _logs(capture):
        raw = p.read_bytes().split(b"\n")
        stamped = [line_timestamp(r.decode("utf-8", "replace"), captured_at) is not None for r in raw]
        out = []
        for i, r in enumerate(raw):
            out.append(r)
            if i + 1 < len(raw) - 20 and stamped[i] and stamped[i + 1] and rnd.random() < 0.2:
                out.append(rnd.choice(examples).encode())
        p.write_bytes(b"\n".join(out))


TRANSFORMS = [kubectl_timestamps, kubelet_cri_files, windows_export, messy_pull, benign_noise]


def _call(capture: Path) -> tuple:
    v = probe(capture, build_core(), workers=0).verdict
    return (v.verdict, v.confidence, v.job_status,
            tuple((k, getattr(v.gates, k).status, tuple(getattr(v.gates, k).codes)) for k in "ABC"))


@pytest.fixture(scope="module")
def as_captured() -> dict[str, tuple]:
    return {}


@pytest.mark.parametrize(("scenario", "transform"),
                         [gap_param(sc, f"capture_variants:{t.__name__}", t) for sc in SCENARIOS for t in TRANSFORMS],
                         ids=[f"{sc.name}-{t.__name__}" for sc in SCENARIOS for t in TRANSFORMS])
def test_a_capture_taken_another_way_gives_the_same_verdict(scenario: Path, transform, tmp_path: Path,
                                                            as_captured: dict[str, tuple]) -> None:
    if scenario.name not in as_captured:
        as_captured[scenario.name] = _call(scenario / "capture")
    variant = tmp_path / "capture"
    shutil.copytree(scenario / "capture", variant)
    transform(variant)
    assert _call(variant) == as_captured[scenario.name]


# -- less evidence never makes a KILL ------------------------------------------------------------

# Sources a capture may lack (CAPTURE_FORMAT.md: "any file may be missing"). The scheduler's view is
# not among them: without it, a job whose every attempt died the same way stays a KILL (+ ESCALATE)
# even when the scheduler would have said the job is already over.
REMOVABLE = ["job.json", "gpu", "trace_jobs", "config", "pods"]


_REMOVALS = [(sc, src) for sc in SCENARIOS for src in REMOVABLE if (sc / "capture" / src).exists()]


@pytest.mark.parametrize(("scenario", "source"), _REMOVALS, ids=[f"{sc.name}-{src}" for sc, src in _REMOVALS])
def test_a_missing_source_never_turns_a_no_kill_into_a_kill(scenario: Path, source: str, tmp_path: Path,
                                                            as_captured: dict[str, tuple]) -> None:
    if scenario.name not in as_captured:
        as_captured[scenario.name] = _call(scenario / "capture")
    if as_captured[scenario.name][0] == "KILL":
        pytest.skip("a KILL with every source: nothing to turn")
    variant = tmp_path / "capture"
    shutil.copytree(scenario / "capture", variant, ignore=lambda d, names: [source] if Path(d) == scenario / "capture"
                    else [])
    assert _call(variant)[0] == "NO-KILL"
