"""`rlhealth ship DIR`: follow a job's live folder and send its events (and heartbeats) to Kafka."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from rlhealth.cli.options import bootstrap_option, run_every


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
def ship(directory: Path, bootstrap: str, job_id: str | None, interval_secs: float, shipper_id: str | None,
         k8s_namespace: str | None, k8s_selector: str | None, iterations: int) -> None:
    """Follow DIRECTORY (laid out like a capture) and produce its events to rlhealth's Kafka topics.

    Secrets in log lines are redacted before anything leaves this process. A heartbeat every
    interval lets the workers tell a silent job from a dead shipper.
    """
    from rlhealth.sinks.kafka import EventProducer, retrying
    from rlhealth.sources.capture import CaptureError
    from rlhealth.sources.shipper import FolderShipper

    producer = EventProducer(bootstrap)
    extra = []
    if k8s_namespace and k8s_selector:
        from rlhealth.sources.kubernetes_api import pod_statuses

        extra.append(lambda: pod_statuses(k8s_namespace, k8s_selector, job_id=shipper.job_id))
    try:
        send = retrying(producer.send, say=lambda msg: click.echo(f"rlhealth ship: {msg}", err=True))
        shipper = FolderShipper(directory, send, job_id=job_id, shipper_id=shipper_id,
                                interval_s=interval_secs, extra_polls=extra)
    except CaptureError as exc:
        click.echo(f"rlhealth ship: {exc}", err=True)
        sys.exit(2)
    def tick() -> None:
        sent = shipper.tick()
        producer.flush()
        click.echo(f"shipped {sent} event(s) for {shipper.job_id}", err=True)

    try:
        run_every(interval_secs, iterations, tick)
    finally:
        shipper.heartbeat(stopping=True)
        producer.flush()
        producer.close()
