"""Gate B names the engines by the kind their stats lines come from: an SGLang rollout fleet that went quiet
is 'no SGLang stats', not 'no vLLM stats' (the rules of both emit the one vllm_stats signal)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rlhealth.agents.reasons import Code, GateResult
from rlhealth.agents.render import gate_summary
from rlhealth.agents.state import Ev
from rlhealth.runtime import build_core
from rlhealth.schemas import LogBatch, Source
from tests.corekit import Job, at

SHAPE = {"engines": 2, "gen": 0.0, "running": 0.0, "waiting": 0.0, "window_s": 600.0}


def _quiet(*rule_ids: str) -> str:
    g = GateResult(code=Code.ENGINES_QUIET, facts={"silent_s": 1200.0, "shape": SHAPE},
                   evidence=[Ev(0.0, "logs/x.log", "stats", rid) for rid in rule_ids])
    return gate_summary(g)


def test_the_quiet_engines_are_named_by_their_stats_lines_rules() -> None:
    assert _quiet("sglang.decode_batch").startswith("no SGLang stats for 20 min")
    assert _quiet("vllm.v1_stats").startswith("no vLLM stats for 20 min")
    assert _quiet("vllm.v1_stats", "sglang.decode_batch").startswith("no SGLang/vLLM stats")
    assert _quiet().startswith("no engine stats")


@pytest.fixture(scope="module")
def core():
    return build_core()


def test_an_sglang_fleet_gone_quiet_reads_sglang_in_the_verdict(core) -> None:
    job = Job(core).spec().states(0, 60, every=1)
    job.steps(0, 60)
    lines, t = [], at(0)
    while t <= at(30):
        lines.append(f"[{t:%Y-%m-%d %H:%M:%S} TP0] Decode batch. #running-req: 0, #token: 0, token usage: 0.00, "
                     "gen throughput (token/s): 0.00, #queue-req: 0")
        t += timedelta(seconds=30)
    job.events.append(LogBatch(job_id=job.job_id, event_time=at(30), lines=lines,
                               source=Source(stream="logs/sglang_engine0.log")))
    v = job.judge(60)
    assert "SGLang" in v.gates.B.summary and "vLLM" not in v.gates.B.summary, v.gates.B.summary
