"""A verdict must not depend on where a shipper cut the log into batches.

Shippers batch by size and time, so a traceback's header and its exception line often arrive in
different LogBatch events; the probe reads 2,000-line batches, a live shipper a few lines at a time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlhealth.agents import roles
from rlhealth.embedded import probe
from rlhealth.runtime import build_core
from tests.corekit import Job, at, loguru_ts
from tests.scenario_support import ROOT, gap_param, scenario_dirs, shared_dir

SCENARIOS = scenario_dirs(shared_dir() / "scenarios") + scenario_dirs(ROOT / "tests" / "scenarios")


def _call(capture: Path, batch_lines: int) -> tuple:
    r = probe(capture, build_core(), workers=0, batch_lines=batch_lines)
    v = r.verdict
    # the failures as restart-burn compares them: one failure, one id, wherever the batches were cut
    failures = sorted((tb.exc_type, tb.fingerprint, tb.attempt, tb.fatal) for tb in r.state.tracebacks)
    return (v.verdict, v.confidence, v.job_status,
            tuple((k, getattr(v.gates, k).status, tuple(getattr(v.gates, k).codes)) for k in "ABC"), failures)


@pytest.mark.parametrize("scenario", [gap_param(p, "batch_boundaries") for p in SCENARIOS],
                         ids=[p.name for p in SCENARIOS])
def test_small_batches_give_the_probe_s_verdict_and_codes(scenario: Path) -> None:
    whole = _call(scenario / "capture", 2000)
    assert _call(scenario / "capture", 7) == whole


@pytest.mark.parametrize(("stream", "role"), [
    ("logs/rl-q25-32b-sgl-coder-sglang-0.log", roles.ENGINE),  # the job's name says nothing, the component does
    ("logs/rl-q3-30b-a3b-swe-llmd-decode-1.log", roles.ENGINE),  # llm-d decode pod: a vLLM engine
    ("logs/rl-q3-8b-vllm-trainer-0.log", roles.TRAINER),  # the last role word wins over the job's name
    ("logs/rl-q3-8b-nl2bash-4eng-vllm-3.log", roles.ENGINE),
    ("logs/job-driver-raysubmit_Vn3kQ8sT2bLxRw4e.log", roles.TRAINER),
    ("logs/harbor-rollout-0.log", roles.ROLLOUT),
    ("logs/pod_rank0.log", roles.OTHER),  # a mixed stream stays OTHER
    ("logs/ray/node-1/raylet.out", roles.RAY),
    ("logs/dmesg-gpu-h100-b17.log", roles.OTHER),
    ("logs/myvllmserver.log", roles.ENGINE),  # no role word: the substring fallback
    (None, roles.OTHER),
])
def test_role_of_stream(stream: str | None, role: str) -> None:
    assert roles.role_of_stream(stream) == role


def _traceback(t, gap: int) -> list[str]:
    stamp = loguru_ts(at(t))
    return ([f"{stamp} | INFO | trainer step 3 started", "Traceback (most recent call last):"]
            + [f'  File "/app/train.py", line {10 + i}, in step_{i}' for i in range(gap)]
            + ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.52 GiB."])


def _judge(batches: list[list[str]]):
    job = Job(build_core()).spec().states(0, 60).steps(0, 30).trials(20, 4)
    for lines in batches:
        job.log(31, lines)
    return job.judge(60)


@pytest.mark.parametrize("cut", [2, 3, 10])
def test_a_traceback_cut_by_a_batch_boundary_is_still_fatal(cut: int) -> None:
    lines = _traceback(31, 12)
    whole = _judge([lines])
    assert whole.gates.A.codes[0] == "A.fatal_traceback_no_progress"
    split = _judge([lines[:cut], lines[cut:]])
    assert split.gates.A.codes == whole.gates.A.codes
    assert (split.verdict, split.confidence) == (whole.verdict, whole.confidence)


def test_a_header_beyond_the_look_back_is_not_carried() -> None:
    # 70 frames: the header is more than 60 lines before the exception, in one batch or two
    lines = _traceback(31, 70)
    whole = _judge([lines])
    split = _judge([lines[:3], lines[3:]])
    assert whole.gates.A.codes[0] != "A.fatal_traceback_no_progress"
    assert split.gates.A.codes == whole.gates.A.codes
