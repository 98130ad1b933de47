"""What the Kafka benchmarks share: their own broker (scripts/kafka.sh, unless $KAFKA_BOOTSTRAP points
at one), a free local port, and a /metrics scrape."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> dict[str, float]:
    """A worker's /metrics as {series: value}; empty when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            out[k] = float(v)
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (/proc/<pid>/stat): a rate per CPU second
    does not depend on how many other processes share the machine's CPUs, a wall-clock rate does."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, summed over its CPUs (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    tck = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / tck, sum(fields) / tck


def listener_pid(bootstrap: str) -> int | None:
    """The local process listening on the bootstrap's port (the broker), or None when it is not
    on this machine or cannot be seen (/proc/net/tcp, then the socket among /proc/*/fd)."""
    try:
        port = int(bootstrap.split(",")[0].rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return None
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{cols[9]}]")
    if not inodes:
        return None
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return int(pid)
        except OSError:
            continue
    return None


def broker_env(name: str) -> dict[str, str] | None:
    """scripts/kafka.sh's environment with a broker dir of this bench's own; None with $KAFKA_BOOTSTRAP."""
    if os.environ.get("KAFKA_BOOTSTRAP", "").strip():
        return None
    return dict(os.environ, RLHEALTH_KAFKA_DIR=str(REPO / ".kafka" / name), RLHEALTH_PYTHON=sys.executable)


def start_broker(env: dict[str, str] | None) -> str:
    if env is None:
        return os.environ["KAFKA_BOOTSTRAP"].strip()
    out = subprocess.run([str(REPO / "scripts" / "kafka.sh"), "start"], env=env, capture_output=True, text=True,
                         timeout=600, check=True)
    return out.stdout.strip().splitlines()[-1]


def stop_broker(env: dict[str, str] | None) -> None:
    if env is not None:
        subprocess.run([str(REPO / "scripts" / "kafka.sh"), "stop"], env=env, capture_output=True, timeout=120)


def stop_process(proc: subprocess.Popen, grace_s: float = 60.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s`; waits for it either way."""
    import signal

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def stop_worker_and_topics(worker: subprocess.Popen, bootstrap: str, prefix: str) -> None:
    """Cleanup of a bench run: SIGTERM the worker (kill after 60 s), delete the bench's topics."""
    stop_process(worker)
    try:
        from rlhealth.sinks.kafka import admin_client

        with admin_client(bootstrap, timeout_s=10) as admin:
            admin.delete_topics([t for t in admin.list_topics() if t.startswith(prefix)], raise_errors=False)
    except Exception as exc:  # noqa: BLE001 - cleanup only
        print(f"could not delete bench topics: {exc}", file=sys.stderr)
