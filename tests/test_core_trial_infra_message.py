"""Gate C: a trial exception is infrastructure by its class or, when the class is generic, by its message.

Real shape: scaleapi/vero#51/#58 (scenario modal_sandbox_outage_every_trial): every trial on Modal ended in
NotFoundError ('Modal Sandbox with container ID ta-... not found'), RuntimeError ('FetchSpec failed: loading
container: file does not exist') or Harbor's AddTestsDirError, reward 0 everywhere. The classes alone named no
sandbox, so Gate C read 'all rewards zero but outputs coherent' and escalated instead of failing on infra.
"""

from __future__ import annotations

from rlhealth.agents.failures import is_infra_exception
from rlhealth.runtime import build_core
from rlhealth.schemas import TrialEvent
from tests.corekit import Job, at

MODAL_GONE = "Modal Sandbox with container ID ta-01K0R3Q8ZP4MN2V7XJ5B6C9DEFG not found"
IMAGE = "FetchSpec failed: loading container: file does not exist"


def _job() -> Job:
    return Job(build_core()).spec().states(0, 60).steps(0, 60)


def test_verifier_file_transfer_errors_are_infra_classes() -> None:
    """Harbor's verifier could not copy the tests into the sandbox (or results out): the fork files both under
    INFRASTRUCTURE, and the thread's census reads AddTestsDirError as 'sandbox died, seen from the verifier'."""
    assert is_infra_exception("AddTestsDirError")
    assert is_infra_exception("DownloadVerifierDirError")
    assert not is_infra_exception("NotFoundError") and not is_infra_exception("RuntimeError")


def test_generic_classes_with_sandbox_messages_fail_gate_c_on_infra() -> None:
    job = _job()
    job.trials(30, 4, reward=0.0, exception="NotFoundError", message=MODAL_GONE, prefix="a")
    job.trials(40, 4, reward=0.0, exception="RuntimeError", message=IMAGE, prefix="b")
    job.trials(50, 4, reward=0.0, exception="AddTestsDirError",
               message="Failed to add tests directory to environment.", prefix="c")
    v = job.judge(58)
    assert (v.verdict, v.gates.C.status) == ("KILL", "FAIL")
    assert v.gates.C.codes[0] == "C.infra_failures"


def test_generic_class_with_a_task_message_is_not_infra() -> None:
    """The same class with a message about the task's own files is the agent's business, not the sandbox's."""
    job = _job()
    job.trials(30, 6, reward=0.0, exception="NotFoundError", message="File /app/output.txt not found", prefix="a")
    job.trials(45, 6, reward=0.0, exception="RuntimeError", message="assertion in user code", prefix="b")
    v = job.judge(58)
    assert v.gates.C.codes[0] != "C.infra_failures"



def test_a_passthrough_class_is_never_infra_by_its_message() -> None:
    """AgentTimeoutError is a Harbor passthrough that healthy runs show (the seed's Gate C), and a weak early
    policy times out on every trial with reward 0 after many turns. Whatever sandbox text its message carries
    (here Modal's function timeout, which an infra rule matches), the agent ran out of time: no infra FAIL
    (before: Gate C FAIL on C.infra_failures; the verdict a KILL when the trials also record 0 turns)."""
    job = _job()
    for i in range(8):
        name = f"t-{i}__abc{i}"
        job.events.append(TrialEvent(job_id=job.job_id, event_time=at(30 + i), phase="started", trial_name=name,
                                     task_name="t"))
        job.events.append(TrialEvent(
            job_id=job.job_id, event_time=at(45 + i), phase="completed", trial_name=name, task_name="t",
            reward=0.0, exception_type="AgentTimeoutError", assistant_turns=24,
            exception_message=f"Task's current input in-wrd5Ktt6HmXMgu9T6pyhA{i} hit its timeout of 900s",
            output_samples=["I will list the files with ls -la and then grep for the pattern."]))
    v = job.judge(58)
    assert v.gates.C.codes[0] != "C.infra_failures"
    assert v.verdict == "NO-KILL"


def test_a_specific_class_quoting_the_tasks_output_is_not_infra_by_it() -> None:
    """NonZeroAgentExitCodeError carries the agent's stdout; a task that itself runs docker prints the daemon's
    error, which an infra rule matches. The class says the agent's command failed: no infra FAIL by its message."""
    job = _job()
    job.trials(30, 8, reward=0.0, exception="NonZeroAgentExitCodeError", prefix="a",
               message="Agent exited with code 125. stdout: docker: Error response from daemon: failed to create "
                       "task for container: failed to create shim task: OCI runtime create failed")
    v = job.judge(58)
    assert v.gates.C.codes[0] != "C.infra_failures"
