"""Multi-line incident excerpts copied verbatim from public threads, judged by the gates in a job that was
healthy until the incident. Only the timestamp text of a line is moved onto the test clock (the message after
it is untouched), as tests/scenarios/make_real_scenarios.py does for the capture scenarios.

Each excerpt is the whole of what the thread shows of the crash: a real crash often leaves only its
consequences (peers losing their NCCL connection, an OOM kill reported by the scheduler, torchrun closing its
workers after a GPU fault), and the call must still name it. Next steps are checked against the remediation
declared for the expected cause (rlhealth/rules/remediations.toml), not against wording."""

from __future__ import annotations

import re

import pytest

from rlhealth.runtime import build_core
from tests.corekit import Job, at, healthy

# sgl-project/sglang#3752: every TP rank's scheduler watchdog fires, the launcher gets SIGQUIT, the shell
# reports the kill.
SGLANG_WATCHDOG = [
    "[2025-03-09 00:57:15 TP4] Watchdog timeout (self.watchdog_timeout=300)",
    "[2025-03-09 00:57:15 TP6] Watchdog timeout (self.watchdog_timeout=300)",
    "[2025-03-09 00:57:15 TP1] Watchdog timeout (self.watchdog_timeout=300)",
    "[2025-03-09 00:57:15 TP2] Watchdog timeout (self.watchdog_timeout=300)",
    "[2025-03-09 00:57:15 TP5] Watchdog timeout (self.watchdog_timeout=300)",
    "[2025-03-09 00:57:15 TP7] Watchdog timeout (self.watchdog_timeout=300)",
    "[2025-03-09 00:57:16 TP3] Watchdog timeout (self.watchdog_timeout=300)",
    "[2025-03-09 00:57:16 TP0] Watchdog timeout (self.watchdog_timeout=300)",
    "[2025-03-09 00:57:20] Received sigquit from a child proces. It usually means the child failed.",
    "Killed",
]

# NVIDIA/nccl#795: a surviving rank's view of a peer that went away (socket recv fails, the proxy gives up, the
# peer closes the connection). No watchdog line, no traceback.
NCCL_PEER_LOST = [
    "a100-st-p4d24xlarge-22:183006:183220 [1] misc/socket.cc:518 NCCL WARN Net : Call to recv from "
    "10.200.84.247<58355> failed : Broken pipe",
    "a100-st-p4d24xlarge-22:183006:183220 [1] NCCL INFO misc/socket.cc:535 -> 6",
    "a100-st-p4d24xlarge-22:183006:183220 [1] NCCL INFO transport/net_socket.cc:368 -> 6",
    "a100-st-p4d24xlarge-22:183006:183220 [1] NCCL INFO include/net.h:26 -> 6",
    "a100-st-p4d24xlarge-22:183006:183220 [1] NCCL INFO transport/net.cc:517 -> 6",
    "a100-st-p4d24xlarge-22:183006:183220 [1] NCCL INFO proxy.cc:991 -> 6",
    "a100-st-p4d24xlarge-22:183006:183220 [1] proxy.cc:1119 NCCL WARN [Proxy Service 9] Failed to execute "
    "operation Connect from rank 9, retcode 6",
    "a100-st-p4d24xlarge-22:183006:183181 [1] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer "
    "a100-st-p4d24xlarge-22.luciodelelis-92732890-0458-4f76-8369-c4fee80b23e7.pcluster<47861>",
]

# hafs-community/HAFS#101: the step's cgroup OOM killer, as SLURM reports it.
SLURM_CGROUP_OOM = [
    "slurmstepd: error: Detected 1 oom-kill event(s) in step 3495064.0 cgroup. Some of your processes may have "
    "been killed by the cgroup out-of-memory handler.",
    "srun: error: Orion-01-01: task 4: Out Of Memory",
    "srun: Terminating job step 3495064.0",
    "slurmstepd: error: *** STEP 3495064.0 ON orion-01-01 CANCELLED AT 2021-10-27T19:35:36 ***",
]

# huggingface/accelerate#1192: an uncorrectable ECC error, then the launcher tears the workers down.
ECC_THEN_TEARDOWN = [
    "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "CUDA kernel errors might be asynchronously reported at some other API call,so the stacktrace below might be "
    "incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
    "[15:58:29] WARNING  Sending process 197 closing signal SIGTERM                                              "
    "                                                                   api.py:699",
    "           WARNING  Sending process 198 closing signal SIGTERM                                              "
    "                                                                   api.py:699",
]

# Benign lines from threads where the run went on (maintainers or posters say so): W&B API 500s and retries
# (wandb/wandb#4537, #5372, #8683), a Hub read timeout that huggingface_hub retries (unslothai/unsloth#3486),
# Ray's pending-actor notice (ray-project/xgboost_ray#13), a vLLM V0 preemption under load (GAIR-NLP/LIMO#29).
BENIGN_STORM = [
    "wandb: ERROR Error while calling W&B API: internal database error (<Response [500]>)",
    "wandb: ERROR Error while calling W&B API: context deadline exceeded (<Response [500]>)",
    "wandb: Network error (HTTPError), entering retry loop.",
    'wandb: 500 encountered ({"errors":[{"message":"An internal error occurred. Please contact support.","path":'
    '["upsertBucket"]}],"data":{"upsertBucket":null}}), retrying request',
    "'(ReadTimeoutError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Read timed out. (read timeout=10)\"), "
    "'(Request ID: 7d76f590-4653-46a3-8cec-2473bc91d595)')' thrown while requesting HEAD https://huggingface.co/"
    "unsloth/Qwen2.5-7B-Instruct-bnb-4bit/resolve/main/model.safetensors.index.json",
    "2020-11-23 11:03:56,109\tWARNING worker.py:1050 -- The actor or task with ID ffffffffffffffff3ee74f330a000000 "
    "cannot be scheduled right now. It requires {CPU: 1.000000} for placement, but this node only has remaining "
    "{CPU: 1.000000}, {actor_cpus: 4.000000}, {node:172.31.28.207: 1.000000}, {memory: 10.498047 GiB}, "
    "{object_store_memory: 3.076172 GiB}. In total there are 0 pending tasks and 1 pending actors on this node. "
    "This is likely due to all cluster resources being claimed by actors. To resolve the issue, consider creating "
    "fewer actors or increase the resources available to this Ray cluster. You can ignore this message if this Ray "
    "cluster is expected to auto-scale.",
    " Sequence group 221 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. "
    "This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide "
    "more KV cache memory. total_num_cumulative_preemption=101",
    "FutureWarning: `torch.cuda.amp.custom_fwd(args...)` is deprecated. Please use `torch.amp.custom_fwd(args..., "
    "device_type='cuda')` instead.",
]

_ISO_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
_CLOCK_PREFIX = re.compile(r"^\[\d\d:\d\d:\d\d\]")
_ISO_INLINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def retimed(lines: list[str], minute: float) -> list[str]:
    """Move a line's leading timestamp onto the test clock; the rest of the line is kept as copied."""
    t = at(minute)
    out = []
    for line in lines:
        line = _ISO_PREFIX.sub("[" + t.strftime("%Y-%m-%d %H:%M:%S"), line)
        line = _CLOCK_PREFIX.sub("[" + t.strftime("%H:%M:%S") + "]", line)
        out.append(_ISO_INLINE.sub(t.strftime("%Y-%m-%d %H:%M:%S"), line))
    return out


@pytest.fixture(scope="module")
def core():
    return build_core()


def crashed_at(core, minute: float, lines: list[str], stream: str, engines_until: float = 159.8,
               until: float = 160.0) -> Job:
    """Healthy until the last step at minute 90; the excerpt at `minute`; then the trainer prints nothing more
    while the scheduler still says running and the policy GPUs sit at 0 % with their memory resident."""
    job = Job(core).spec().states(0, until, every=5)
    job.steps(0, 90)
    job.engine_stats(60, engines_until)
    for m in range(0, int(until) + 1, 10):
        job.gpu(m, "pod-0", 0.0 if m > minute else 85.0).gpu(m, "pod-1", 70.0 if m <= engines_until else 0.0)
    job.trials(80, 8)
    job.log(minute, retimed(lines, minute), stream=stream)
    return job


def first_step(core, cause: str) -> str:
    steps = core.catalog.steps_for(cause)
    assert steps, cause
    return steps[0]


def test_sglang_watchdog_storm_names_the_rollout_server_even_in_a_plain_pod_log(core) -> None:
    # the engine pod's log is pod_rank1.log: nothing in the file name says SGLang, the lines do
    v = crashed_at(core, 100, SGLANG_WATCHDOG, "logs/pod_rank1.log", engines_until=95).judge(160)
    assert (v.verdict, v.job_status, v.gates.A.status) == ("KILL", "WEDGED", "FAIL")
    assert "A.hang_line" in v.gates.A.codes and "hang_log" in v.gates.A.families
    assert v.culprit is not None and v.culprit.role == "engine"
    assert v.next_steps[0] == first_step(core, "rollout_server_dead")


def test_nccl_peer_loss_then_silence_is_a_kill_on_the_lost_peer(core) -> None:
    v = crashed_at(core, 100, NCCL_PEER_LOST, "logs/pod_rank0.log").judge(160)
    assert (v.verdict, v.job_status) == ("KILL", "WEDGED")
    assert v.gates.A.codes[:2] == ["A.wedged", "A.crash_line_after_step"]
    assert {"fallout_log", "progress_stall"} <= set(v.gates.A.families)
    assert first_step(core, "peer_lost") in v.next_steps


def test_slurm_cgroup_oom_then_silence_is_a_host_oom_kill(core) -> None:
    v = crashed_at(core, 100, SLURM_CGROUP_OOM, "logs/3495064.err").judge(160)
    assert (v.verdict, v.gates.A.status, v.gates.B.status) == ("KILL", "FAIL", "FAIL")
    assert "A.crash_line_after_step" in v.gates.A.codes and "oom_log" in v.gates.A.families
    assert v.gates.B.codes[0] == "B.training_oom"
    assert first_step(core, "host_oom") in v.next_steps


def test_uncorrectable_ecc_then_teardown_drains_the_node(core) -> None:
    v = crashed_at(core, 100, ECC_THEN_TEARDOWN, "logs/pod_rank0.log").judge(160)
    assert (v.verdict, v.gates.B.status) == ("KILL", "FAIL")
    assert v.gates.B.codes[0] == "B.gpu_hardware_fault"
    assert "A.crash_line_after_step" in v.gates.A.codes and "hardware_log" in v.gates.A.families
    assert first_step(core, "gpu_hardware") in v.next_steps


@pytest.mark.parametrize("lines", [NCCL_PEER_LOST, SLURM_CGROUP_OOM, ECC_THEN_TEARDOWN, SGLANG_WATCHDOG],
                         ids=["nccl", "slurm_oom", "ecc", "sglang"])
def test_the_same_excerpt_while_the_trainer_keeps_stepping_is_no_kill(core, lines) -> None:
    """The crash-after-step reading needs a stale trainer: a run that steps on after the lines is not dead."""
    job = healthy(Job(core))
    job.log(100, retimed(lines, 100), stream="logs/pod_rank2.log")
    v = job.judge(121)
    assert v.verdict == "NO-KILL"
    assert "A.crash_line_after_step" not in v.gates.A.codes


def test_a_storm_of_real_benign_lines_leaves_a_healthy_job_alive(core) -> None:
    job = healthy(Job(core))
    for minute in (95, 100, 105, 110, 115):
        job.log(minute, retimed(BENIGN_STORM, minute) * 4, stream="logs/pod_rank0.log")
    v = job.judge(121)
    assert (v.verdict, v.job_status, v.escalate) == ("NO-KILL", "ALIVE", False)
    assert v.gates.A.status == "PASS" and v.gates.B.status == "PASS"



def test_an_application_xid_after_the_last_step_is_not_read_as_the_crash(core) -> None:
    """NVIDIA/open-gpu-kernel-modules#363: Xid 31 (an MMU fault the Xid table blames on the application; the
    poster: nothing breaks). In the kernel log after the last step it must not be taken for the node's failure."""
    xid31 = ["NVRM: Xid (PCI:0000:08:00): 31, pid=169800, name=chrome, Ch 00000023, intr 00000000. MMU Fault: "
             "ENGINE CE0 HUBCLIENT_HSCE0 faulted @ 0x0_0abe0000. Fault is of type FAULT_PTE ACCESS_TYPE_VIRT_READ"]
    v = crashed_at(core, 100, xid31, "logs/dmesg-node0.log").judge(160)
    assert "A.crash_line_after_step" not in v.gates.A.codes
    assert "hardware_log" not in v.gates.A.families


def test_sglang_swa_decode_lines_without_a_queue_field_count_as_generation(core) -> None:
    """sgl-project/sglang#26248: a hybrid-attention (SWA) model's decode lines end at the throughput, with no
    '#queue-req'. An engine printing only those is generating, not silent."""
    from datetime import timedelta

    job = Job(core).spec(geometry={"num_inference_engines": 1, "engine_tp": 1, "engine_pods": ["pod-1"],
                                   "policy_pods": ["pod-0"]}).states(0, 120, every=5)
    job.steps(0, 120)
    for m in range(0, 121, 10):
        job.gpu(m, "pod-0", 85.0).gpu(m, "pod-1", 70.0)
    job.trials(100, 8).trials(115, 8)
    for minute in range(90, 120):
        lines = []
        for k in range(6):
            t = at(minute) + timedelta(seconds=10 * k)
            lines.append(f"[{t.strftime('%H:%M:%S')}] Decode batch, #running-req: 6, #full token: 2435072, full token "
                         f"usage: 0.92, swa token usage: 0.09, gen throughput (token/s): 924.33")
        job.log(minute + 0.99, lines, stream="logs/pod_rank1.log")
    v = job.judge(120.5)
    assert v.gates.B.codes[0] == "B.generating" and v.gates.B.status == "PASS"
    assert v.verdict == "NO-KILL"
