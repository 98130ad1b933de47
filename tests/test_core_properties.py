"""Property tests: arbitrary orders, duplicates and garbage never crash the step function, the state stays
under its cap, and replaying the same events gives the same verdict."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlhealth.agents.state import JobHealth
from rlhealth.runtime import build_core
from rlhealth.schemas import GpuPoll, GpuReading, JobStatePoll, LogBatch, Source, TrialEvent
from tests.corekit import T0, Job, at, healthy

CORE = build_core()
BASE_EVENTS = healthy(Job(CORE), until=90).events

garbage_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=300)
interesting_lines = st.sampled_from([
    "Traceback (most recent call last):",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.52 GiB.",
    "[rank0]:[E628 17:56:14.245089597 ProcessGroupNCCL.cpp:1595] ProcessGroupNCCL's watchdog got stuck for 1800 seconds",
    "(raylet, ip=10.0.3.95) A worker died or was killed while executing a task. Worker exit type: SYSTEM_ERROR",
    "INFO 06-28 12:00:00 [loggers.py:248] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: "
    "nan tokens/s, Running: 99999999999 reqs, Waiting: 0 reqs, GPU KV cache usage: 400.0%",
    "\x1b[36m(AsyncVLLMInferenceEngine pid=1, ip=1.2.3.4)\x1b[0m " + "x" * 5000,
    "Started: '" + "y" * 400 + "'",
    "KeyError: ''",
    "WANDB_MIRROR kind=train step=-5 metrics={not json",
])


@st.composite
def garbage_events(draw):
    minute = draw(st.floats(min_value=-10_000, max_value=10_000, allow_nan=False))
    kind = draw(st.sampled_from(["log", "gpu", "trial", "state"]))
    t = T0 + timedelta(minutes=minute)
    if kind == "log":
        lines = draw(st.lists(st.one_of(garbage_text, interesting_lines), max_size=20))
        return LogBatch(job_id="job-1", event_time=t, lines=lines,
                        source=Source(stream=draw(st.sampled_from(["a.log", "logs/x/y.log", None]))))
    if kind == "gpu":
        vals = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))
        gpus = [GpuReading(index=draw(st.one_of(st.none(), st.integers(-5, 100))), util_pct=draw(vals),
                           mem_used_mib=draw(vals), mem_total_mib=draw(vals)) for _ in range(draw(st.integers(0, 10)))]
        return GpuPoll(job_id="job-1", event_time=t, host=draw(st.text(min_size=1, max_size=30)), gpus=gpus,
                       errors=draw(st.lists(garbage_text, max_size=3)))
    if kind == "trial":
        return TrialEvent(job_id="job-1", event_time=t, phase=draw(st.sampled_from(["started", "completed", "vanished"])),
                          trial_name=draw(st.text(max_size=20)), reward=draw(st.one_of(st.none(), st.floats(allow_nan=False))),
                          exception_type=draw(st.one_of(st.none(), st.text(max_size=30))),
                          assistant_turns=draw(st.one_of(st.none(), st.integers(0, 1000))),
                          output_samples=draw(st.lists(garbage_text, max_size=2)))
    return JobStatePoll(job_id="job-1", event_time=t,
                        state=draw(st.sampled_from(["pending", "running", "succeeded", "failed", "killed", "unknown"])),
                        pods=draw(st.one_of(st.none(), st.integers(0, 100))),
                        attempt=draw(st.one_of(st.none(), st.integers(0, 5))))


def run(events, minute: float = 91):
    state = CORE.new_state("job-1")
    for ev in events:
        state, _ = CORE.step(state, ev, at(minute))
    return state, CORE.judge(state, at(minute))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(garbage_events(), max_size=40))
def test_garbage_never_crashes_and_state_stays_bounded(events) -> None:
    state, verdict = run(BASE_EVENTS + events)
    assert verdict.verdict in ("KILL", "NO-KILL")
    assert state.size_bytes() < 64 * 1024
    assert JobHealth.from_bytes(state.to_bytes()) == state


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.integers(0, 30))
def test_any_order_and_duplicates_never_crash_and_replay_is_deterministic(rnd, dups) -> None:
    events = list(BASE_EVENTS)
    events += [rnd.choice(BASE_EVENTS) for _ in range(dups)]
    rnd.shuffle(events)
    state_a, a = run(events)
    state_b, b = run(events)
    assert a.model_dump(exclude={"produced_at"}) == b.model_dump(exclude={"produced_at"})
    assert state_a == state_b
    assert state_a.size_bytes() < 64 * 1024


def test_duplicated_delivery_gives_the_same_verdict_as_single_delivery() -> None:
    _, once = run(BASE_EVENTS)
    _, twice = run([e for e in BASE_EVENTS for _ in (0, 1)])
    assert (once.verdict, once.job_status, [g.status for g in (once.gates.A, once.gates.B, once.gates.C)]) == \
           (twice.verdict, twice.job_status, [g.status for g in (twice.gates.A, twice.gates.B, twice.gates.C)])


def test_state_cap_holds_under_a_flood_of_streams_engines_and_hosts() -> None:
    state = CORE.new_state("job-1")
    now = at(500)
    for i in range(400):
        t = at(i)
        state, _ = CORE.step(state, LogBatch(job_id="job-1", event_time=t, source=Source(stream=f"logs/s{i}.log"), lines=[
            f"(AsyncVLLMInferenceEngine pid={i}, ip=10.0.{i % 250}.1) INFO 06-28 12:00:00 [loggers.py:248] Engine 000: Avg "
            "prompt throughput: 1.0 tokens/s, Avg generation throughput: 100.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, "
            "GPU KV cache usage: 1.0%",
            f"RuntimeError{i}Error: boom {i} " + "z" * 2000,
        ]), now)
        state, _ = CORE.step(state, GpuPoll(job_id="job-1", event_time=t, host=f"host-{i}",
                                            gpus=[GpuReading(index=j, util_pct=50) for j in range(64)],
                                            errors=[f"Unable to determine the device handle for GPU {i}: Unknown Error"]), now)
        state, _ = CORE.step(state, TrialEvent(job_id="job-1", event_time=t, phase="completed", trial_name=f"t{i}",
                                               reward=0.5, exception_type=f"Err{i}Error", output_samples=["x" * 4000]), now)
    assert state.size_bytes() < 64 * 1024, state.size_bytes()
    CORE.judge(state, now)
