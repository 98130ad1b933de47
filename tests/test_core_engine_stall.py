"""Gate B: an engine stalled on its own workers (requests Running, 0.0 prompt and generation tok/s, then only its
EngineCore's shm_broadcast waits), read without needing a second engine to show the log flows.

Real shapes: vllm-project/vllm#48752 (the scenario vllm_engine_zero_throughput_running_wedge), eugr/spark-vllm-docker#409
(0.0/0.0 with Running 1, EngineCore waits each minute, 'RPC call ... timed out' exactly 300 s after the stall
began), MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#128 (the same EngineCore wait, counters frozen 90 s to 15 min,
then serving again by itself). The negatives: an RL engine idle between rollouts (Running 0, or stale Running after
aborts: vllm-project/vllm#22545), an idle worker's own wait (printed before vllm-project/vllm#25720), a weight sync.
"""

from __future__ import annotations

import pytest

from rlhealth.runtime import build_core
from rlhealth.schemas import LogBatch
from rlhealth.sources.logfiles import source_for
from tests.corekit import Job, at, loguru_ts, vllm_ts

ACTOR = "(AsyncVLLMInferenceEngine pid=4000, ip=10.0.0.1)"
CORE = f"{ACTOR} (EngineCore_DP0 pid=4100)"
WAIT = ("{prefix} INFO {ts} [shm_broadcast.py:705] No available shared memory broadcast block found in 60 seconds. "
        "This typically happens when some processes are hanging or doing some time-consuming work (e.g. compilation, "
        "weight/kv cache quantization).")
STATS = ("{prefix} INFO {ts} [loggers.py:248] {label}: Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation "
         "throughput: {gen:.1f} tokens/s, Running: {running} reqs, Waiting: 0 reqs, GPU KV cache usage: 20.0%, "
         "Prefix cache hit rate: 0.0%")
ZERO_AT = 50 + 10 / 60  # the 0.0 line, 10 s after the last generating one


def _stats(job: Job, minute: float, prefix: str = ACTOR, label: str = "Engine 000", gen: float = 0.0,
           prompt: float = 0.0, running: int = 12, stream: str = "logs/pod_rank1.log") -> None:
    job.log(minute, [STATS.format(prefix=prefix, ts=vllm_ts(at(minute)), label=label, gen=gen, prompt=prompt,
                                  running=running)], stream=stream)


def _waits(job: Job, n: int, prefix: str = CORE, stream: str = "logs/pod_rank1.log", first: float = ZERO_AT + 50 / 60,
           every_min: float = 1.0) -> None:
    for k in range(n):
        m = first + k * every_min
        job.log(m, [WAIT.format(prefix=prefix, ts=vllm_ts(at(m)))], stream=stream)


def _job(running: int = 12, prompt: float = 0.0, gen: float = 0.0) -> Job:
    """One engine of one (the spec says so) generating until minute 50, then its newest stats line at ZERO_AT;
    the trainer steps every 15 min until 45 (so Gate A stays within its cadence while Gate B is judged)."""
    job = Job(build_core()).spec(geometry={"num_inference_engines": 1, "engine_tp": 2, "engine_pods": ["pod-1"],
                                           "policy_pods": ["pod-0"]})
    job.states(0, 70).steps(0, 45).trials(30, 8).trials(44, 8)
    job.engine_stats(20, 50, engines=1)
    _stats(job, ZERO_AT, gen=gen, prompt=prompt, running=running)
    return job


def _b(job: Job, minute: float) -> tuple:
    v = job.judge(minute)
    return v.verdict, v.escalate, v.gates.B.status, v.gates.B.codes[0] if v.gates.B.codes else ""


STALLED = "B.engine_stalled_on_workers"
HUNG = "B.engine_hung"


@pytest.mark.parametrize(("waits", "minute", "expected"), [
    # one 60-s wait: a one-off slow step (a kernel compiled mid-serving); the stats are still within cadence
    (1, ZERO_AT + 1.0, ("NO-KILL", False, "PASS", "B.generating")),
    # two and four consecutive waits: stalled, short of vLLM's 300 s step limit: escalate, never a KILL yet
    (2, ZERO_AT + 2.0, ("NO-KILL", True, "UNKNOWN", STALLED)),
    (4, ZERO_AT + 4.2, ("NO-KILL", True, "UNKNOWN", STALLED)),
    # five: its EngineCore's own lines attest one wait of 300 s with the requests in flight: hung
    (5, ZERO_AT + 5.2, ("KILL", False, "FAIL", HUNG)),
    (8, ZERO_AT + 8.2, ("KILL", False, "FAIL", HUNG)),
])
def test_zero_line_then_own_engine_core_waits(waits: int, minute: float, expected: tuple) -> None:
    job = _job()
    _waits(job, waits)
    assert _b(job, minute) == expected


def test_a_raised_warning_interval_attests_its_own_length() -> None:
    """VLLM_RINGBUFFER_WARNING_INTERVAL=600: one line says one wait has lasted 10 min, past the 300 s step limit."""
    job = _job()
    m = ZERO_AT + 10
    job.log(m, [WAIT.format(prefix=CORE, ts=vllm_ts(at(m))).replace("in 60 seconds", "in 600 seconds")],
            stream="logs/pod_rank1.log")
    assert _b(job, m + 0.2) == ("KILL", False, "FAIL", HUNG)


def test_hung_engine_names_its_wait_and_three_families() -> None:
    job = _job()
    _waits(job, 6)
    v = job.judge(ZERO_AT + 6.2)
    assert "B.engine_core_waiting" in v.gates.B.codes
    assert set(v.gates.B.families) == {"engine_throughput", "progress_stall", "hang_log"}
    assert v.confidence == "high" and "waiting on its workers for 6 min" in v.gates.B.summary
    assert any("shm_broadcast" in e.text for e in v.gates.B.evidence)
    assert any("py-spy" in s for s in v.next_steps)


def test_a_restarted_servers_ghost_does_not_hide_the_stall() -> None:
    """vllm serve restarted in the same log: the old APIServer's engine, silent for an hour, shares the EngineCore
    key but is no longer an engine of the job's; the new server's stall is still its own."""
    job = _job()
    _stats(job, 5, prefix="(APIServer pid=1)", gen=50.0, running=2, stream="logs/serve.log")
    for m in (ZERO_AT - 0.5, ZERO_AT):
        _stats(job, m, prefix="(APIServer pid=605)", gen=80.0 if m < ZERO_AT else 0.0, running=3,
               stream="logs/serve.log")
    _waits(job, 3, prefix="(EngineCore pid=1154)", stream="logs/serve.log")
    assert _b(job, ZERO_AT + 3.2)[3] == STALLED


def test_stalled_engine_says_when_vllm_settles_it() -> None:
    job = _job()
    _waits(job, 3)
    v = job.judge(ZERO_AT + 3.2)
    assert "Running 12" in v.gates.B.summary and "3 'No available shared memory" in v.gates.B.summary
    assert any("within ~2 min" in s and "EngineDeadError" in s for s in v.next_steps)


@pytest.mark.parametrize(("running", "prompt", "gen"), [
    (0, 0.0, 0.0),    # an RL engine idle between rollouts: its newest line says no request is in flight
    (12, 400.0, 0.0),  # a prefill interval: tokens were computed in it
    (12, 0.0, 35.0),  # still generating when last logged
])
def test_waits_after_a_line_that_is_not_a_stall_never_stall(running: int, prompt: float, gen: float) -> None:
    job = _job(running=running, prompt=prompt, gen=gen)
    _waits(job, 8)
    verdict, escalate, status, code = _b(job, ZERO_AT + 8.2)
    assert verdict == "NO-KILL" and status != "FAIL" and code not in (STALLED, HUNG)


def test_stale_running_after_aborts_without_waits_is_not_hung() -> None:
    """vllm#22545: aborting every request leaves 'Running: N' at 0.0 tok/s; the idle EngineCore then runs no step and
    prints no wait. One engine, so no other engine shows the log flowing either: never hung on the silence alone."""
    job = _job()
    for minute in (ZERO_AT + 2, ZERO_AT + 6, ZERO_AT + 12):
        verdict, _, status, code = _b(job, minute)
        assert verdict == "NO-KILL" and status != "FAIL" and code not in (STALLED, HUNG)


def test_an_idle_workers_wait_is_not_its_engines() -> None:
    """Before vllm#25720 idle workers printed the wait too; only the EngineCore's own line counts."""
    job = _job()
    _waits(job, 8, prefix=f"{ACTOR} (Worker_TP1 pid=4201)")
    _waits(job, 8, prefix="", first=ZERO_AT + 0.9)  # an unprefixed (V0-style) line names no engine either
    assert _b(job, ZERO_AT + 8.2)[3] not in (STALLED, HUNG)


def test_another_engines_core_waits_are_not_this_ones() -> None:
    job = _job()
    _waits(job, 8, prefix="(AsyncVLLMInferenceEngine pid=4001, ip=10.0.0.2) (EngineCore_DP0 pid=4101)")
    assert _b(job, ZERO_AT + 8.2)[3] not in (STALLED, HUNG)


def test_a_stats_line_after_the_waits_is_a_recovery() -> None:
    """MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#128: the stuck step returned and the engine served again."""
    job = _job()
    _waits(job, 3)
    job.engine_stats(ZERO_AT + 3.5, ZERO_AT + 5, engines=1)
    assert _b(job, ZERO_AT + 5.1) == ("NO-KILL", False, "PASS", "B.generating")


def test_a_new_stall_after_a_recovery_counts_its_own_waits_only() -> None:
    """Waits of an earlier stall a minute before a stats line belong to that stall, not to the next one."""
    job = _job()
    _waits(job, 3)  # ZERO_AT + 0.83 .. + 2.83
    job.engine_stats(ZERO_AT + 2.9, ZERO_AT + 3.2, engines=1)
    _stats(job, ZERO_AT + 3.3)
    _waits(job, 1, first=ZERO_AT + 3.9)  # within two intervals of the last old wait, but after a stats line
    assert _b(job, ZERO_AT + 4.0)[3] not in (STALLED, HUNG)
    _waits(job, 1, first=ZERO_AT + 4.9)
    assert _b(job, ZERO_AT + 5.0)[3] == STALLED


def test_weight_sync_holds_the_engine_core_without_a_stall() -> None:
    """A weight update is a call to the workers that can outlast a minute with requests held
    (allenai/open-instruct#1535, in-flight updates): not a stall while the trainer is in it."""
    job = _job()
    t = at(ZERO_AT - 0.05)
    job.log(ZERO_AT - 0.05, [f"(skyrl_entrypoint pid=3716, ip=10.0.3.95) {loguru_ts(t)} | INFO     | "
                             f"skyrl_train.trainer:sync_weights:800 - Started: 'sync_weights'"])
    _waits(job, 6)
    assert _b(job, ZERO_AT + 6.2)[3] not in (STALLED, HUNG)


@pytest.mark.parametrize(("core_dp", "stalls"), [(1, True), (0, False)])
def test_data_parallel_engine_core_maps_to_its_engine_label(core_dp: int, stalls: bool) -> None:
    """One vllm serve with DP=2: 'Engine 001' is EngineCore_DP1's; Engine 000 keeps generating."""
    job = Job(build_core()).spec(geometry={"num_inference_engines": 2, "engine_tp": 2})
    job.states(0, 70).steps(0, 45).trials(30, 8).trials(44, 8)
    m = 40.0
    while m <= ZERO_AT + 4.2:
        _stats(job, m, prefix="(APIServer pid=2201)", gen=2000.0, running=100, stream="logs/serve.log")
        if m < 50:
            _stats(job, m, prefix="(APIServer pid=2201)", label="Engine 001", gen=1900.0, running=100,
                   stream="logs/serve.log")
        m += 1 / 6
    _stats(job, ZERO_AT, prefix="(APIServer pid=2201)", label="Engine 001", running=100, stream="logs/serve.log")
    _waits(job, 4, prefix=f"(EngineCore_DP{core_dp} pid=2318)", stream="logs/serve.log")
    code = _b(job, ZERO_AT + 4.2)[3]
    assert (code == STALLED) is stalls


def test_two_front_ends_on_one_log_make_a_wait_nobodys() -> None:
    """Two vllm serve processes printing into one file: an 'EngineCore' line cannot say whose it is."""
    job = _job()
    for m in (ZERO_AT - 0.5, ZERO_AT):
        _stats(job, m, prefix="(APIServer pid=605)", running=3, stream="logs/serve.log")
        _stats(job, m, prefix="(APIServer pid=705)", gen=80.0, running=2, stream="logs/serve.log")
    _waits(job, 4, prefix="(EngineCore pid=1154)", stream="logs/serve.log")
    assert _b(job, ZERO_AT + 4.2)[3] not in (STALLED, HUNG)


def test_resent_wait_lines_do_not_count_twice() -> None:
    job = _job()
    _waits(job, 1)
    _waits(job, 1)  # the same line shipped again
    assert _b(job, ZERO_AT + 1.2)[3] != STALLED
    assert [run[2] for run in job.last_state.core_waits.values()] == [1]


BANNER = "{prefix} INFO {ts} [core.py:93] Initializing a V1 LLM engine (v0.11.0) with config: model='Qwen/Qwen3-8B'"


def _restarted_serve(new_pid: int = 905) -> Job:
    """vllm serve in one log: generating, then one 0.0/0.0 line with Running 3, then the server restarts (a new
    EngineCore's start-up banner): the old requests died with the old EngineCore."""
    job = Job(build_core()).spec(geometry={"num_inference_engines": 1, "engine_tp": 2, "engine_pods": ["pod-1"],
                                           "policy_pods": ["pod-0"]})
    job.states(0, 70).steps(0, 60).trials(30, 8).trials(44, 8).trials(58, 8)
    m = 30.0
    while m < ZERO_AT:
        _stats(job, m, prefix="(APIServer pid=605)", gen=800.0, running=3, stream="logs/serve.log")
        m += 1 / 6
    _stats(job, ZERO_AT, prefix="(APIServer pid=605)", running=3, stream="logs/serve.log")
    job.log(ZERO_AT + 1, [BANNER.format(prefix="(EngineCore_DP0 pid=1300)", ts=vllm_ts(at(ZERO_AT + 1)))],
            stream="logs/serve.log")
    return job


@pytest.mark.parametrize("waits", [2, 6])
def test_a_restarted_servers_start_up_waits_are_not_the_old_engines_stall(waits: int) -> None:
    """A new EngineCore prints the same wait while its workers profile and compile (noonghunna/club-3090#137: three
    in a row before 'Initial profiling/warmup run took 144 s'); its key is the old engine's (one stream, no pid of
    its own in it), but the old engine's requests died with the EngineCore its banner replaced."""
    job = _restarted_serve()
    _waits(job, waits, prefix="(EngineCore_DP0 pid=1300)", stream="logs/serve.log", first=ZERO_AT + 2)
    verdict, _, status, code = _b(job, ZERO_AT + 2 + waits - 1 + 0.2)
    assert verdict == "NO-KILL" and status != "FAIL" and code not in (STALLED, HUNG)


@pytest.mark.parametrize("new_pid", [905, 605])  # a container's APIServer is often pid 1 on every start
def test_a_restarted_server_generating_again_leaves_no_hung_ghost(new_pid: int) -> None:
    """The old engine's 0.0 line is its last; the new server generates: not a hung engine."""
    job = _restarted_serve()
    m = ZERO_AT + 4
    while m < ZERO_AT + 9:
        _stats(job, m, prefix=f"(APIServer pid={new_pid})", gen=800.0, running=3, stream="logs/serve.log")
        m += 1 / 6
    assert _b(job, ZERO_AT + 9) == ("NO-KILL", False, "PASS", "B.generating")


def test_a_restarted_server_that_stalls_is_still_read() -> None:
    """The same key after the restart: the new server's own 0.0/0.0 line, then its EngineCore's waits."""
    job = _restarted_serve(new_pid=605)
    for m in (ZERO_AT + 4, ZERO_AT + 4.5):
        _stats(job, m, prefix="(APIServer pid=605)", gen=800.0 if m < ZERO_AT + 4.5 else 0.0, running=3,
               stream="logs/serve.log")
    _waits(job, 3, prefix="(EngineCore_DP0 pid=1300)", stream="logs/serve.log", first=ZERO_AT + 5.3)
    assert _b(job, ZERO_AT + 7.5)[3] == STALLED


def test_ray_worker_files_of_one_node_keep_their_engine_cores_apart() -> None:
    """Ray's own per-worker files (logs/ray/<node>/worker-*.out) carry no actor prefix, and the shipper names their
    node as host: one actor's engine idle with a stale Running count after aborts (vllm#22545), another actor's
    EngineCore on the same node waiting while it starts (a respawned engine compiling). Each worker file is one
    process tree, so the waits are not the idle engine's."""
    job = Job(build_core()).spec(geometry={"num_inference_engines": 2, "engine_tp": 2})
    job.states(0, 70).steps(0, 60).trials(30, 8).trials(44, 8).trials(58, 8)

    def log(minute: float, line: str, worker: str) -> None:
        job.events.append(LogBatch(job_id=job.job_id, event_time=at(minute), lines=[line],
                                   source=source_for(f"logs/ray/node-1/worker-{worker}.out")))

    m = 30.0
    while m < ZERO_AT:
        log(m, STATS.format(prefix="", ts=vllm_ts(at(m)), label="Engine 000", gen=800.0, prompt=0.0,
                            running=3).lstrip(), "aaa")
        m += 1 / 6
    log(ZERO_AT, STATS.format(prefix="", ts=vllm_ts(at(ZERO_AT)), label="Engine 000", gen=0.0, prompt=0.0,
                              running=3).lstrip(), "aaa")
    for k in range(6):
        log(ZERO_AT + 1 + k, WAIT.format(prefix="(EngineCore_DP0 pid=7100)", ts=vllm_ts(at(ZERO_AT + 1 + k))), "ccc")
    verdict, _, status, code = _b(job, ZERO_AT + 6.2)
    assert verdict == "NO-KILL" and status != "FAIL" and code not in (STALLED, HUNG)
    # the idle engine's own EngineCore (its worker file) is still its own
    for k in range(6):
        log(ZERO_AT + 1.5 + k, WAIT.format(prefix="(EngineCore_DP0 pid=4100)", ts=vllm_ts(at(ZERO_AT + 1.5 + k))),
            "aaa")
    assert _b(job, ZERO_AT + 6.7)[3] == HUNG
