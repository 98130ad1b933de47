"""Failure classes: a coarse name for an exception or a scheduler error, to compare attempts.

Two attempts that failed with the same class and the same fingerprint failed the same way. The
exception-type sets say which trial exceptions are passthroughs, infrastructure or verifier faults.
"""

from __future__ import annotations

import re

# Exception types that are trial-level passthroughs in healthy runs, never a job death by themselves.
BENIGN_EXCEPTIONS = frozenset({
    "ContextLengthExceededError", "AgentTimeoutError", "CancelledError", "KeyboardInterrupt",
})

# Trial exceptions that mean the environment/infra failed, not the model (Harbor's environment errors and the
# team fork's INFRASTRUCTURE category, reference/harbor-skyrl-formats.md §1.6).
INFRA_EXCEPTIONS = frozenset({
    "VerificationNotCompletedError", "SandboxError", "DaytonaError", "EnvironmentStartTimeoutError",
    "SandboxCreationError", "AuthenticationError", "PermissionDeniedError", "APIConnectionError",
    "DockerError", "EnvironmentError", "RuntimeEnvSetupError", "AgentSetupTimeoutError",
    "AgentEnvironmentTimeoutError", "SnapshotQuotaExceeded", "HealthcheckError", "BridgeOutageError",
    "EnrootMemoryLimitExceededError", "NetworkError", "ConnectionError",
    # The verifier could not copy the tests into the environment or its results out of it: the sandbox is gone
    # or degraded (the fork's INFRASTRUCTURE category; scaleapi/vero#58: 'sandbox died, seen from the verifier').
    "AddTestsDirError", "DownloadVerifierDirError",
})
# Sandbox SDKs name their errors after the provider or the sandbox, one class per HTTP status: the Daytona SDK
# raises DaytonaBadRequestError, DaytonaRateLimitError, DaytonaNotFoundError, ... (all DaytonaError subclasses),
# E2B SandboxException, Modal SandboxTimeoutError. A trial records only the bare class name.
INFRA_EXCEPTION_PREFIXES = ("Daytona",)
INFRA_EXCEPTION_PARTS = ("Sandbox", "Auth")

# Trial exception classes that do not say who failed (a builtin, an SDK's catch-all or per-status class): only
# these are read by their message as well (a sandbox provider's text in it makes them infra). A specific class
# keeps its own meaning whatever its message quotes: NonZeroAgentExitCodeError carries the agent's stdout,
# which may itself print a docker or sandbox error from the task.
GENERIC_EXCEPTIONS = frozenset({
    "Exception", "RuntimeError", "OSError", "IOError", "TimeoutError", "NotFoundError", "HTTPError",
    "HTTPStatusError", "ClientError", "APIError", "APIStatusError", "InternalError", "InternalServerError",
    "ServiceUnavailableError", "RemoteError", "ExecutionError", "InvalidError", "ConflictError",
})

VERIFIER_EXCEPTIONS = frozenset({
    "VerifierTimeoutError", "VerifierError", "VerifierOutputParseError", "RewardFileNotFoundError",
})


def is_infra_exception(name: str) -> bool:
    """A trial exception type that says the environment/sandbox failed before or around the agent."""
    return (name in INFRA_EXCEPTIONS or name.startswith(INFRA_EXCEPTION_PREFIXES)
            or any(part in name for part in INFRA_EXCEPTION_PARTS))


_CLASS_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # Ray's memory monitor kills for node RAM and names it OutOfMemoryError / 'out of memory issue': host, not CUDA.
    ("host_oom", re.compile(r"node running low on memory|killed due to memory pressure|ray-oom-prevention|"
                            r"exceeds the memory usage threshold", re.I)),
    ("cuda_oom", re.compile(r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|out of memory", re.I)),
    ("host_oom", re.compile(r"OOMKilled|oom-kill|Killed process", re.I)),
    ("checkpoint_write", re.compile(r"PytorchStreamWriter failed|failed writing file|No space left on device|"
                                    r"Disk quota exceeded|unexpected pos \d+", re.I)),
    # A thread or process could not be created (EAGAIN): the per-user process/thread or pids limit is exhausted.
    ("thread_limit", re.compile(r"thread: Resource temporarily unavailable|pthread_create failed: Resource "
                                r"temporarily unavailable|thread_resource_error|can't start new thread|"
                                r"fork: (?:retry: )?Resource temporarily unavailable", re.I)),
    ("nccl_hang", re.compile(r"watchdog|NCCL|DistBackendError|collective operation timeout", re.I)),
    ("image_pull", re.compile(r"ImagePullBackOff|ErrImagePull", re.I)),
    ("hf_resolution", re.compile(r"huggingface|HFValidationError|RepositoryNotFound|LocalEntryNotFound|"
                                 r"HTTPError: 5\d\d", re.I)),
    # An HTTP client refused by a service it needs (a remote reward model, a rollout server): nothing listens there.
    # urllib3's '[Errno 111] Connection refused' and OpenRLHF's remote-RM give-up; not torch's rendezvous socket.
    # After hf_resolution: the Hub refusing a download is that transient class (the retry wrapper's business).
    ("service_unreachable", re.compile(r"\[Errno 111\] Connection refused|"
                                       r"Request error for \d+ times, returning None")),
    ("preempted", re.compile(r"preempt|evict|NodeLost|node.*(drain|lost)", re.I)),
    ("ray_death", re.compile(r"ActorDiedError|RayActorError|worker died|SYSTEM_ERROR", re.I)),
    ("engine_dead", re.compile(r"EngineDeadError|EngineCore encountered", re.I)),
    ("timeout", re.compile(r"TIMEOUT|DUE TO TIME LIMIT|time limit", re.I)),
)
_EXC_NAME_RE = re.compile(r"(?:RayTaskError\()?([A-Za-z_][\w.]*?(?:Error|Exception|Exit))\)?[:(]")
TRANSIENT_CLASSES = frozenset({"image_pull", "hf_resolution", "preempted", "timeout"})


def failure_class_of(text: str | None) -> str:
    """A coarse class for comparing failures across attempts (same class + fingerprint = same failure)."""
    if not text:
        return "unknown"
    for name, pattern in _CLASS_PATTERNS:
        if pattern.search(text):
            return name
    inner = re.search(r"RayTaskError\((\w+)\)", text)
    if inner:
        return inner.group(1)
    m = _EXC_NAME_RE.search(text)
    if m:
        return m.group(1).rsplit(".", 1)[-1]
    return "other"


# Exceptions that report a failure elsewhere: the root cause is an earlier exception, not these.
CONSEQUENCE_EXCEPTIONS = frozenset({
    "EngineDeadError", "AsyncEngineDeadError", "MQEngineDeadError", "EngineGenerateError", "ActorDiedError",
    "RayActorError", "ActorUnavailableError", "ChildFailedError", "DistBackendError", "CancelledError",
    "BrokenPipeError", "ConnectionResetError", "KeyboardInterrupt", "SystemExit", "WorkerCrashedError",
})
_CONSEQUENCE_MESSAGE = re.compile(r"stack trace (?:\(?above\)?|above)|root cause above|"
                                  r"see (?:the )?(?:logs|error) above|"
                                  r"above for the root cause|initialization failed\. See", re.I)


_RAY_WRAPPED = re.compile(r"RayTaskError\((\w+)\)")


def is_consequence(exc_type: str, message: str) -> bool:
    """True for an exception that only reports a failure raised before it (see CONSEQUENCE_EXCEPTIONS); Ray's
    RayTaskError(X) is the remote X, so it is a consequence when X is ('RayTaskError(ActorDiedError)')."""
    short = exc_type.rsplit(".", 1)[-1]
    inner = _RAY_WRAPPED.search(short)
    return ((inner.group(1) if inner else short) in CONSEQUENCE_EXCEPTIONS
            or bool(_CONSEQUENCE_MESSAGE.search(message)))
