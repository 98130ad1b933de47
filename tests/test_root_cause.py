"""The verdict's typed root cause (`Verdict.root_cause`, rlhealth.agents.rootcause): what it names for captures
whose logs hold the causal traceback, null where the verdict names none, the same record behind the English, and
every sink carrying it. Assertions are on the typed fields, not on wording."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import orjson
import pytest

from rlhealth.agents.rootcause import causal_traceback
from rlhealth.embedded import ProbeResult, probe
from rlhealth.runtime import build_core
from rlhealth.schemas import RootCauseRef, Verdict, decode_verdict, encode, render_text
from rlhealth.schemas.verdict import ROOT_CAUSE_MESSAGE_CHARS
from tests.corekit import Job, at
from tests.scenario_support import shared_dir

SCENARIOS = Path(__file__).parent / "scenarios"


@pytest.fixture(scope="module")
def core():
    return build_core()


@cache
def probed(capture: Path) -> ProbeResult:
    return probe(capture, build_core())


def judged(name: str) -> Verdict:
    return probed(SCENARIOS / name / "capture").verdict


def _shared(name: str) -> Verdict:
    capture = shared_dir() / "scenarios" / name / "capture"
    if not capture.is_dir():
        pytest.skip(f"shared scenario {name} not present ({capture})")
    return probed(capture).verdict


# ---------------------------------------------------------------- captures whose traceback names the cause


def test_vllm_engine_dead_names_the_valueerror_above_the_enginedeaderror() -> None:
    """LMCache#2306: the EngineDeadError is the consequence; the cause is the EngineCore's ValueError."""
    v = judged("vllm_engine_dead_root_cause")
    rc = v.root_cause
    assert rc is not None and v.verdict == "KILL"
    assert (rc.origin, rc.exc_type, rc.role) == ("traceback", "ValueError", "engine")
    assert rc.message == "vllm model for vllm-instance not found."
    assert rc.component == "EngineCore_DP0"
    assert rc.source == "logs/rl-q3-14b-lmcache-kvoff-vllm-0.log"
    assert rc.fatal is False and rc.deterministic is None  # an engine's traceback; no restart burned
    assert rc.event_time is not None and rc.attempt == 0


def test_sglang_server_dead_names_the_cuda_error() -> None:
    v = judged("sglang_rollout_server_dead")
    rc = v.root_cause
    assert rc is not None and v.verdict == "KILL"
    assert (rc.origin, rc.exc_type, rc.role) == ("traceback", "RuntimeError", "engine")
    assert rc.message.startswith("CUDA error: an illegal memory access")
    assert rc.source.endswith("sglang-0.log")


def test_slurm_terminal_config_error_is_a_deterministic_valueerror() -> None:
    """Both SLURM legs failed on the same verl _validate_config ValueError: terminal, deterministic."""
    v = judged("slurm_terminal_config_error")
    rc = v.root_cause
    assert rc is not None and v.job_status == "TERMINAL"
    assert (rc.origin, rc.exc_type, rc.fatal, rc.deterministic) == ("traceback", "ValueError", True, True)
    assert "ppo_micro_batch_size_per_gpu" in rc.message
    assert (rc.source, rc.attempt) == ("logs/9124411.err", 1)


def test_swift_weight_sync_terminal_names_the_store_timeout_on_rank0() -> None:
    v = judged("swift_weight_sync_store_timeout_terminal")
    rc = v.root_cause
    assert rc is not None and v.job_status == "TERMINAL"
    assert (rc.exc_type, rc.failure_class, rc.role, rc.component) == (
        "torch.distributed.DistStoreError", "timeout", "trainer", "rank0")
    assert rc.message.startswith("wait timeout after 300000ms")


def test_shared_same_crash_every_restart_names_the_fatal_oom() -> None:
    v = _shared("same_crash_every_restart")
    rc = v.root_cause
    assert rc is not None and "A.fatal_traceback_no_progress" in v.gates.A.codes
    assert (rc.exc_type, rc.failure_class, rc.fatal, rc.deterministic) == (
        "torch.OutOfMemoryError", "cuda_oom", True, True)
    assert len(rc.message) <= ROOT_CAUSE_MESSAGE_CHARS


def test_shared_terminal_failed_names_the_keyerror() -> None:
    rc = _shared("terminal_failed").root_cause
    assert rc is not None and (rc.exc_type, rc.message) == ("KeyError", "'model.layers.0.mlp.experts.gate_up_proj'")


@pytest.mark.parametrize("name", ["tail_only_nccl_hang", "nccl_watchdog_torch22_wedged", "healthy_nan_loss_lines",
                                  "state_poll_only", "ambiguous_silent_trainer"])
def test_no_root_cause_where_the_verdict_names_none(name: str) -> None:
    """A hang with no traceback, a healthy job, a blind view: null, and no ROOT CAUSE line in the text."""
    v = judged(name)
    assert v.root_cause is None
    assert "ROOT CAUSE:" not in render_text(v)


def test_the_reasoning_names_the_same_record() -> None:
    """One record behind the words and the field: the KILL's 'Root cause:' and the TERMINAL's are the typed one."""
    kill = judged("vllm_engine_dead_root_cause")
    assert kill.root_cause is not None
    assert f"Root cause: {kill.root_cause.exc_type}: {kill.root_cause.message}" in kill.reasoning
    terminal = judged("slurm_terminal_config_error")
    assert terminal.root_cause is not None
    assert f"Root cause: {terminal.root_cause.exc_type}: {terminal.root_cause.message}" in terminal.reasoning
    assert f"ROOT CAUSE: {terminal.root_cause.exc_type}: " in render_text(terminal)


def test_a_swallowed_exception_is_never_the_causal_traceback() -> None:
    r = probed(SCENARIOS / "openr1_allgather_watchdog_after_verify_timeout" / "capture")
    assert any(tb.exc_type == "TimeoutError" and tb.swallowed and not tb.fatal for tb in r.state.tracebacks)
    tb = causal_traceback(r.state.tracebacks, r.state.sched.attempt)
    assert tb is None or tb.exc_type != "TimeoutError"
    assert r.verdict.root_cause is None or r.verdict.root_cause.exc_type != "TimeoutError"


# ---------------------------------------------------------------- origins without a traceback (core kit)


def test_a_terminal_job_with_only_the_schedulers_error_names_it(core) -> None:
    err = "KeyError: 'model.layers.0.mlp.experts.gate_up_proj'\n  raised in weight sync, see the pod log"
    attempts = [dict(attempt=0, terminal_state="failed", exit_code=1, error=err, ended_at=at(20)),
                dict(attempt=1, terminal_state="failed", exit_code=1, error=err, ended_at=at(41))]
    v = Job(core).spec().states(0, 40, attempt=1).state(41, state="failed", pods=0, attempt=1,
                                                        attempts=attempts).judge(45)
    rc = v.root_cause
    assert rc is not None and v.job_status == "TERMINAL"
    assert (rc.origin, rc.exc_type, rc.source, rc.attempt) == ("attempt_error", None, "state poll", 1)
    assert rc.message == "KeyError: 'model.layers.0.mlp.experts.gate_up_proj'"  # the first line only
    assert rc.deterministic is True and rc.event_time == at(41)


def test_a_terminal_job_with_only_an_oom_kill_line_names_the_line(core) -> None:
    job = Job(core).spec().states(0, 40)
    job.log(39, ["[Sat Jun 28 12:39:00 2026] Out of memory: Killed process 4242 (python) total-vm:812345kB, "
                 "anon-rss:790000kB"], stream="logs/dmesg-pod-0.log")
    v = job.state(41, state="failed", pods=0).judge(45)
    rc = v.root_cause
    assert rc is not None and v.job_status == "TERMINAL"
    assert (rc.origin, rc.exc_type, rc.source) == ("signal_line", None, "logs/dmesg-pod-0.log")
    assert rc.rule_id and "Killed process 4242" in rc.message



_RAY_OOM_TAIL = ("(ActorModelRayActor pid=8249) Refer to the documentation on how to address the out of memory issue: "
                 "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider provisioning more "
                 "memory on this node or reducing task parallelism by requesting more CPUs per task.")


def _failed_with(core, err: str, lines: list[str]) -> Verdict:
    attempts = [dict(attempt=0, terminal_state="failed", exit_code=1, error=err, ended_at=at(40))]
    job = Job(core).spec().states(0, 39)
    job.log(39.5, lines, stream="logs/ray_job_submit.log")
    return job.state(41, state="failed", pods=0, attempts=attempts, max_retries=0).judge(45)


def test_a_bare_exit_status_yields_to_the_oom_kill_logged_in_that_attempt(core) -> None:
    """OpenRLHF#911: the scheduler only says the entrypoint exited 1; the Ray memory-monitor kill in the log says
    why. The OOM line is the root cause (host OOM), the scheduler's error stays in the evidence."""
    v = _failed_with(core, "Job entrypoint command failed with exit code 1", [_RAY_OOM_TAIL])
    rc = v.root_cause
    assert rc is not None and v.job_status == "TERMINAL"
    assert (rc.origin, rc.source) == ("signal_line", "logs/ray_job_submit.log")
    assert any(e.source == "state poll" for e in v.gates.A.evidence)
    assert any(s.startswith("Host OOM") for s in v.next_steps)


def test_an_attempt_error_naming_an_exception_keeps_precedence_over_an_oom_line(core) -> None:
    v = _failed_with(core, "torch.distributed.DistStoreError: wait timeout after 300000ms, keys: /x", [_RAY_OOM_TAIL])
    assert v.root_cause is not None and v.root_cause.origin == "attempt_error"


def test_a_bare_exit_status_with_no_typed_line_is_still_named(core) -> None:
    v = _failed_with(core, "Job entrypoint command failed with exit code 1", ["step 3 done"])
    assert v.root_cause is not None and v.root_cause.origin == "attempt_error"


# ---------------------------------------------------------------- the wire and the sinks


def test_the_field_is_on_the_wire_as_null_or_an_object_and_old_payloads_still_decode() -> None:
    v = judged("slurm_terminal_config_error")
    wire = orjson.loads(encode(v))
    assert wire["root_cause"]["exc_type"] == "ValueError"
    assert decode_verdict(encode(v)) == v
    none = judged("healthy_nan_loss_lines")
    old = orjson.loads(encode(none))
    assert old.pop("root_cause") is None  # every verdict carries the key
    assert decode_verdict(orjson.dumps(old)).root_cause is None  # a payload written before the field


def test_the_message_is_bounded_and_one_line() -> None:
    with pytest.raises(ValueError):
        RootCauseRef(origin="traceback", message="x" * (ROOT_CAUSE_MESSAGE_CHARS + 1))


def test_duckdb_stores_the_root_cause_and_migrates_an_older_file(tmp_path: Path) -> None:
    import duckdb

    from rlhealth.sinks.duckdb import EvidenceStore

    path = tmp_path / "ev.duckdb"
    con = duckdb.connect(str(path))  # a verdicts table as session 10 created it: no root_cause column
    con.execute("""CREATE TABLE verdicts (
        job_id VARCHAR NOT NULL, seq BIGINT NOT NULL, produced_at TIMESTAMPTZ NOT NULL, verdict VARCHAR,
        confidence VARCHAR, job_status VARCHAR, escalate BOOLEAN, gates JSON, reasoning VARCHAR,
        payload JSON, inserted_at TIMESTAMPTZ, event_time TIMESTAMPTZ, age_s DOUBLE, gate_a VARCHAR,
        gate_b VARCHAR, gate_c VARCHAR, captured VARCHAR, held BOOLEAN,
        PRIMARY KEY (job_id, seq, produced_at))""")
    con.execute("INSERT INTO verdicts (job_id, seq, produced_at, verdict) VALUES ('old', 1, now(), 'NO-KILL')")
    con.close()
    with EvidenceStore(path) as store:
        store.add_verdict(judged("slurm_terminal_config_error"))
        store.add_verdict(judged("healthy_nan_loss_lines"))
        store.flush()
        rows = dict(store.query("SELECT job_id, root_cause->>'exc_type' FROM verdicts"))
        nulls = store.query("SELECT count(*) FROM verdicts WHERE root_cause IS NULL")[0][0]
    assert rows[judged("slurm_terminal_config_error").job_id] == "ValueError"
    assert rows["old"] is None and nulls == 2


def test_the_html_report_shows_the_root_cause(tmp_path: Path) -> None:
    from rlhealth.sinks.html_report import render
    from rlhealth.sinks.report_store import from_records

    v = judged("slurm_terminal_config_error")
    page = render(from_records(v.job_id, "capture", [v], [], []))
    assert 'id="root-cause"' in page and "ppo_micro_batch_size_per_gpu" in page
    quiet = judged("healthy_nan_loss_lines")
    assert 'id="root-cause"' not in render(from_records(quiet.job_id, "capture", [quiet], [], []))
