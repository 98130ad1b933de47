"""`rlhealth ship DIR`: follow a job's live folder and send its events (and heartbeats) to Kafka."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rlhealth.cli.options import bootstrap_option, kafka_security_options

if TYPE_CHECKING:
    from rlhealth.sources.live import LiveSource


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
@click.option("--k8s-namespace", help="Also follow the job's pods through the Kubernetes API in this namespace "
              "(a read-only list + watch).")
@click.option("--k8s-selector", help="Label selector for the job's pods (with --k8s-namespace).")
@click.option("--k8s-list", is_flag=True, help="List the pods every interval instead of watching them.")
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
@click.option("--gpu", "gpu", type=click.Choice(["nvml", "nvidia-smi", "auto"]),
              help="Also poll this node's GPUs every interval: through NVML (nvidia-ml-py), by running "
                   "nvidia-smi, or NVML with nvidia-smi as the fallback (auto).")
@click.option("--nvidia-smi", "nvidia_smi", is_flag=True, help="The same as --gpu nvidia-smi.")
@click.option("--gpu-host", help="Host name GPU polls carry (default: this host's name; a DaemonSet passes "
              "the node's name).")
@click.option("--slurm-job-id", "slurm_job_ids", multiple=True,
              help="Also poll this SLURM job's state with sacct (squeue as the fallback) every interval; "
                   "repeat it or separate ids with commas for the legs of a chain.")
@click.option("--source-timeout-secs", type=float, default=30.0, show_default=True,
              help="Timeout of one run of sacct, squeue, nvidia-smi or the state command.")
@click.option("--metrics-port", type=int, help="Serve the shipper's counters on this port (/metrics).")
@click.option("--metrics-addr", default="127.0.0.1", show_default=True)
@kafka_security_options(fail_fast=False)  # a shipper started during an outage spools
def ship(directory: Path, bootstrap: str, job_id: str | None, interval_secs: float, shipper_id: str | None,
         k8s_namespace: str | None, k8s_selector: str | None, k8s_list: bool, iterations: int,
         state_dir: Path | None, spool_max_bytes: int, max_bytes_per_tick: int, flush_timeout: float,
         state_command: str | None, gpu: str | None, nvidia_smi: bool, gpu_host: str | None,
         slurm_job_ids: tuple[str, ...],
         source_timeout_secs: float, metrics_port: int | None, metrics_addr: str, kafka_security: Any) -> None:
    """Follow DIRECTORY (laid out like a capture) and produce its events to rlhealth's Kafka topics.

    Secrets in log lines are redacted before anything leaves this process. A heartbeat every
    interval lets the workers tell a silent job from a dead shipper; it lists the live sources
    (--gpu, --slurm-job-id, --k8s-namespace, --state-command) with what each received, sent and
    failed. Log files are checkpointed (resumed after a restart, advanced only once the broker
    acknowledged); while the broker is down events go to a bounded spool on disk. SIGTERM drains
    and flushes before exiting.
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
    try:
        sources = live_sources(job_id, shipper_id=shipper_id, k8s_namespace=k8s_namespace, k8s_selector=k8s_selector,
                               k8s_list=k8s_list, state_command=state_command,
                               gpu=gpu or ("nvidia-smi" if nvidia_smi else None), slurm_job_ids=slurm_job_ids,
                               timeout_s=source_timeout_secs, host=gpu_host)
    except ValueError as exc:
        click.echo(f"rlhealth ship: {exc}", err=True)
        sys.exit(2)
    try:
        shipper = FolderShipper(directory, deliver=sender.deliver, job_id=job_id, shipper_id=shipper_id,
                                interval_s=interval_secs, state_dir=state, max_bytes_per_tick=max_bytes_per_tick,
                                sources=sources)
    except CaptureError as exc:
        for src in sources:
            src.close()
        click.echo(f"rlhealth ship: {exc}", err=True)
        sys.exit(2)

    if spool is not None:
        shipper.pending = spool.size
    if metrics_port is not None:
        from rlhealth.sinks.prometheus import serve_snapshot

        port = serve_snapshot(lambda: shipper_metrics(shipper, sender), metrics_port, metrics_addr,
                              labels=SHIPPER_METRIC_LABELS)
        click.echo(f"rlhealth ship: metrics on http://{metrics_addr}:{port}/metrics", err=True)

    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    n = 0
    failures: dict[str, int] = {}
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
            for src in shipper.sources:
                if src.counters.failed > failures.get(src.name, 0):
                    failures[src.name] = src.counters.failed
                    click.echo(f"rlhealth ship: source {src.name}: {src.counters.last_error}", err=True)
            if iterations and n >= iterations:
                break
            # a backlog to read, or a spool to send to a broker that is back: go on without sleeping
            draining = spool is not None and sender.healthy and bool(spool)
            if not shipper.more and not draining:
                stop.wait(interval_secs)
    finally:
        # drain: what is already written (a backlog in bounded steps, within the grace time), then the
        # spool, then the stopping heartbeat
        deadline = time.monotonic() + max(flush_timeout, 30.0)
        try:
            shipper.tick()
            while shipper.more and time.monotonic() < deadline:
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
        shipper.close()
        c = sender.counters
        click.echo(f"rlhealth ship: stopped; sent {c.records_sent} record(s) ({c.lines_sent} log lines), "
                   f"dropped lines {c.dropped_lines or 0}, lost bytes {shipper.logs.counters.lost_bytes}", err=True)


def live_sources(job_id: str, *, shipper_id: str | None = None, k8s_namespace: str | None = None,
                 k8s_selector: str | None = None, k8s_list: bool = False, state_command: str | None = None,
                 gpu: str | None = None, slurm_job_ids: tuple[str, ...] = (), timeout_s: float = 30.0,
                 host: str | None = None) -> list[LiveSource]:
    """The live sources `ship`'s options ask for (each a `live.LiveSource`); ValueError on a bad option."""
    import socket

    from rlhealth.sources.live import PollSource, subprocess_runner

    sources: list[LiveSource] = []
    host = host or socket.gethostname()
    if gpu:
        from rlhealth.sources.nvml import gpu_source

        src, note = gpu_source(gpu, job_id=job_id, host=host, shipper=shipper_id,  # type: ignore[arg-type]
                               smi_runner=subprocess_runner(timeout_s))
        if note:
            click.echo(f"rlhealth ship: {note}", err=True)
        sources.append(src)
    if slurm_job_ids:
        from rlhealth.sources.sacct import SacctPoller

        sources.append(SacctPoller(list(slurm_job_ids), job_id=job_id, shipper=shipper_id, timeout_s=timeout_s))
    if k8s_namespace or k8s_selector:
        if not (k8s_namespace and k8s_selector):
            raise ValueError("--k8s-namespace and --k8s-selector go together")
        if k8s_list:
            from rlhealth.sources.kubernetes_api import pod_statuses

            ns, sel = k8s_namespace, k8s_selector
            sources.append(PollSource(f"k8s-list:{ns}/{sel}",
                                      lambda: pod_statuses(ns, sel, job_id=job_id, timeout_s=min(timeout_s, 30.0))))
        else:
            from rlhealth.sources.pod_watch import PodWatcher

            sources.append(PodWatcher(k8s_namespace, k8s_selector, job_id=job_id, shipper=shipper_id).start())
    if state_command:
        from rlhealth.sources.state_command import StateCommandPoller

        poller = StateCommandPoller(state_command, job_id=job_id, shipper=shipper_id,
                                    runner=subprocess_runner(timeout_s))
        sources.append(PollSource("state-command", poller.poll, errors=poller.errors))
    return sources


# label names of the per-source counters in `shipper_metrics` (the others have one label, "reason")
SHIPPER_METRIC_LABELS = {
    "source_received_events_total": ("source",),
    "source_sent_events_total": ("source",),
    "source_discarded_events_total": ("source",),
    "source_errors_total": ("source", "reason"),
}


def shipper_metrics(shipper: Any, sender: Any) -> dict[str, Any]:
    """The shipper's component counters (Vector style) for /metrics; the per-source ones carry a
    `source` label (see SHIPPER_METRIC_LABELS)."""
    lc = shipper.logs.counters
    dc = sender.counters
    spool = sender.spool
    per_source: dict[str, dict[Any, float]] = {k: {} for k in SHIPPER_METRIC_LABELS}
    for src in shipper.sources:
        c = src.counters
        per_source["source_received_events_total"][src.name] = c.received
        per_source["source_sent_events_total"][src.name] = c.sent
        per_source["source_discarded_events_total"][src.name] = c.discarded
        for reason, n in c.errors.items():
            per_source["source_errors_total"][(src.name, reason)] = n
    return {
        **{k: v for k, v in per_source.items() if v},
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
