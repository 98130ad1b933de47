"""`rlhealth ship DIR`: follow a job's live folder and send its events (and heartbeats) to Kafka."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rlhealth.cli.options import bootstrap_option, kafka_security_options

if TYPE_CHECKING:
    from rlhealth.schemas import EventBase


def default_state_dir(job_id: str) -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "rlhealth" / "ship" / re.sub(r"[^A-Za-z0-9_.-]", "_", job_id)


@click.command()
@click.argument("directory", type=click.Path(path_type=Path, file_okay=False, exists=True))
@bootstrap_option()
@click.option("--job-id", help="Job id when the folder has no capture.json.")
@click.option("--interval", "interval_secs", type=float, default=15.0, show_default=True,
              help="Seconds between reads; a heartbeat is sent every interval.")
@click.option("--shipper-id", help="Name of this shipper in heartbeats (default: host:folder).")
@click.option("--k8s-namespace", help="Also poll pod statuses from the Kubernetes API in this namespace.")
@click.option("--k8s-selector", help="Label selector for the job's pods (with --k8s-namespace).")
@click.option("--iterations", type=int, default=0, help="Stop after N reads (0: until interrupted).")
@click.option("--state-dir", type=click.Path(path_type=Path, file_okay=False),
              help="Where the per-file checkpoints and the spool live "
                   "(default: $XDG_STATE_HOME/rlhealth/ship/<job id>).")
@click.option("--spool-max-bytes", type=int, default=256 << 20, show_default=True,
              help="Cap of the on-disk spool used while the broker is unreachable; 0: no spool "
                   "(the checkpoints then hold the files back). What does not fit is dropped and counted.")
@click.option("--max-bytes-per-tick", type=int, default=8 << 20, show_default=True,
              help="Log bytes read per step: a backlog is read in bounded steps, back to back.")
@click.option("--flush-timeout", type=float, default=10.0, show_default=True,
              help="Seconds to wait for the broker's acknowledgements before spooling.")
@click.option("--state-command", help="A command printing the job's state as one JSON object "
              "(a state.jsonl line: state, pods, attempt, ...), run every interval.")
@click.option("--nvidia-smi", "nvidia_smi", is_flag=True,
              help="Also poll this node's GPUs with nvidia-smi every interval.")
@click.option("--metrics-port", type=int, help="Serve the shipper's counters on this port (/metrics).")
@click.option("--metrics-addr", default="127.0.0.1", show_default=True)
@kafka_security_options(fail_fast=False)  # a shipper started during an outage spools
def ship(directory: Path, bootstrap: str, job_id: str | None, interval_secs: float, shipper_id: str | None,
         k8s_namespace: str | None, k8s_selector: str | None, iterations: int, state_dir: Path | None,
         spool_max_bytes: int, max_bytes_per_tick: int, flush_timeout: float, state_command: str | None,
         nvidia_smi: bool, metrics_port: int | None, metrics_addr: str, kafka_security: Any) -> None:
    """Follow DIRECTORY (laid out like a capture) and produce its events to rlhealth's Kafka topics.

    Secrets in log lines are redacted before anything leaves this process. A heartbeat every
    interval lets the workers tell a silent job from a dead shipper. Log files are checkpointed
    (resumed after a restart, advanced only once the broker acknowledged); while the broker is
    down events go to a bounded spool on disk. SIGTERM drains and flushes before exiting.
    """
    from rlhealth.sinks.delivery import ReliableSender
    from rlhealth.sinks.spool import Spool
    from rlhealth.sources.capture import CaptureError, read_capture_info
    from rlhealth.sources.shipper import FolderShipper

    if job_id is None:
        try:
            job_id = read_capture_info(directory).job_id
        except CaptureError as exc:
            click.echo(f"rlhealth ship: {exc}", err=True)
            sys.exit(2)
    state = state_dir or default_state_dir(job_id)
    state.mkdir(parents=True, exist_ok=True)
    spool = Spool(state / "spool", spool_max_bytes) if spool_max_bytes > 0 else None
    sender = ReliableSender(bootstrap, spool=spool, flush_timeout_s=flush_timeout, security=kafka_security)
    extra: list[Callable[[], EventBase | None]] = []
    if k8s_namespace and k8s_selector:
        from rlhealth.sources.kubernetes_api import pod_statuses

        extra.append(lambda: pod_statuses(k8s_namespace, k8s_selector, job_id=shipper.job_id))
    if state_command:
        from rlhealth.sources.state_command import StateCommandPoller

        extra.append(StateCommandPoller(state_command, job_id=job_id, shipper=shipper_id).poll)
    if nvidia_smi:
        import socket

        from rlhealth.sources.nvidia_smi import NvidiaSmiPoller

        smi = NvidiaSmiPoller(lambda _p: None, job_id=job_id, host=socket.gethostname(), shipper=shipper_id)
        extra.append(smi.poll_once)
    try:
        shipper = FolderShipper(directory, deliver=sender.deliver, job_id=job_id, shipper_id=shipper_id,
                                interval_s=interval_secs, extra_polls=extra, state_dir=state,
                                max_bytes_per_tick=max_bytes_per_tick)
    except CaptureError as exc:
        click.echo(f"rlhealth ship: {exc}", err=True)
        sys.exit(2)

    if spool is not None:
        shipper.pending = spool.size
    if metrics_port is not None:
        from rlhealth.sinks.prometheus import serve_snapshot

        port = serve_snapshot(lambda: shipper_metrics(shipper, sender), metrics_port, metrics_addr)
        click.echo(f"rlhealth ship: metrics on http://{metrics_addr}:{port}/metrics", err=True)

    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    n = 0
    try:
        while not stop.is_set():
            try:
                sent = shipper.tick()
            except Exception as exc:  # noqa: BLE001 - e.g. the spool's disk is full: keep following
                click.echo(f"rlhealth ship: tick failed ({type(exc).__name__}: {exc}); retrying", err=True)
                shipper.logs.rewind()
                sent = 0
                stop.wait(interval_secs)
            n += 1
            if sent:
                click.echo(f"read {sent} event(s) for {shipper.job_id}", err=True)
            for rel, what in shipper.logs.notes:
                click.echo(f"rlhealth ship: {rel}: {what}", err=True)
            if iterations and n >= iterations:
                break
            # a backlog to read, or a spool to send to a broker that is back: go on without sleeping
            draining = spool is not None and sender.healthy and bool(spool)
            if not shipper.more and not draining:
                stop.wait(interval_secs)
    finally:
        # drain: what is already written, then the spool, then the stopping heartbeat
        try:
            shipper.tick()
        except Exception as exc:  # noqa: BLE001 - still send the spool and the stopping heartbeat
            click.echo(f"rlhealth ship: last read failed ({type(exc).__name__}: {exc})", err=True)
        if spool is not None:
            drained = sender.drain(max(flush_timeout, 30.0), ignore_backoff=True)
            if not drained:
                click.echo(f"rlhealth ship: broker unreachable; {spool.size()} bytes stay in the spool "
                           f"({state / 'spool'}) for the next start", err=True)
        shipper.heartbeat(stopping=True)
        if spool is not None:
            sender.drain(flush_timeout, ignore_backoff=True)
        sender.flush(flush_timeout)
        sender.close()
        c = sender.counters
        click.echo(f"rlhealth ship: stopped; sent {c.records_sent} record(s) ({c.lines_sent} log lines), "
                   f"dropped lines {c.dropped_lines or 0}, lost bytes {shipper.logs.counters.lost_bytes}", err=True)


def shipper_metrics(shipper: Any, sender: Any) -> dict[str, float | dict[str, float]]:
    """The shipper's component counters (Vector style) for /metrics."""
    lc = shipper.logs.counters
    dc = sender.counters
    spool = sender.spool
    return {
        "lines_read_total": lc.lines_read,
        "bytes_read_total": lc.bytes_read,
        "lines_cut_total": lc.lines_cut,
        "files_rotated_total": lc.files_rotated,
        "files_truncated_total": lc.files_truncated,
        "lost_bytes_total": lc.lost_bytes,
        "files_skipped_total": {k: float(v) for k, v in lc.skipped.items()},
        "records_sent_total": dc.records_sent,
        "batches_sent_total": dc.log_batches_sent,
        "lines_sent_total": dc.lines_sent,
        "bytes_sent_total": dc.bytes_sent,
        "send_errors_total": dc.send_errors,
        "retries_total": dc.retries,
        "producer_rebuilds_total": dc.producer_rebuilds,
        "batches_split_total": dc.batches_split,
        "spooled_bytes_total": dc.bytes_spooled,
        "spooled_records_total": dc.records_spooled,
        "spool_bytes": float(spool.size()) if spool is not None else 0.0,
        "lines_dropped_total": {k: float(v) for k, v in dc.dropped_lines.items()},
        "checkpoint_lag_bytes": float(shipper.logs.lag_bytes()),
        "checkpoint_writes_total": shipper.store.writes,
        "behind": 1.0 if shipper.behind() else 0.0,
        "broker_healthy": 1.0 if sender.healthy else 0.0,
    }
