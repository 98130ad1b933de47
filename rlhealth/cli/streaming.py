"""`rlhealth worker`, `rlhealth verdicts`, `rlhealth replay`: the Kafka side of rlhealth."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import click
import orjson

from rlhealth.cli.options import bootstrap_option, kafka_security_options

EXIT_KILL = 10  # as `rlhealth probe`


def _catalog(prefix: str | None, partitions: int | None = None):
    from rlhealth.schemas.topics import TopicCatalog

    return TopicCatalog.from_env(prefix=prefix, partitions=partitions)


prefix_option = click.option("--topic-prefix", "topic_prefix", envvar="RLHEALTH_TOPIC_PREFIX", default=None,
                             show_envvar=True, help="Prefix of every topic name (isolates deployments and tests).")


@click.command()
@bootstrap_option()
@click.option("--metrics-port", type=int, default=None, help="Serve Prometheus /metrics on this port.")
@click.option("--metrics-addr", default="127.0.0.1", show_default=True, help="Address of the /metrics server.")
@click.option("--tick-secs", type=float, default=10.0, show_default=True, help="How often owned jobs are judged.")
@click.option("--heartbeat-secs", type=float, default=300.0, show_default=True,
              help="Republish an unchanged verdict this often.")
@click.option("--db", "db_path", type=click.Path(dir_okay=False), default=None,
              help="Write findings, verdicts and dead letters to this DuckDB file (one worker per file).")
@click.option("--idle-expiry-secs", type=float, default=6 * 3600.0, show_default=True,
              help="Publish a final verdict for, and forget, a job that sent nothing this long.")
@click.option("--terminal-expiry-secs", type=float, default=1800.0, show_default=True,
              help="... and a job whose scheduler state has been terminal this long.")
@prefix_option
@click.option("--app-id", default="rlhealth", show_default=True, help="faust app id (consumer group, changelogs).")
@click.option("--session-timeout-secs", type=float, default=30.0, show_default=True,
              help="Kafka group session timeout: how soon a crashed worker's partitions move.")
@click.option("--no-create-topics", is_flag=True, help="Do not create missing topics at start.")
@click.option("--loglevel", default="info", show_default=True)
@click.option("--clock", "clock_mode", type=click.Choice(["wall", "event"]), default="wall", show_default=True,
              help="wall: judge at the current time (live jobs); event: judge each job at its newest event time "
                   "(backfills, full-speed replays: each verdict is what `probe --now` says at that time).")
@kafka_security_options
def worker(bootstrap: str, metrics_port: int | None, metrics_addr: str, tick_secs: float, heartbeat_secs: float,
           db_path: str | None, idle_expiry_secs: float, terminal_expiry_secs: float, topic_prefix: str | None,
           app_id: str, session_timeout_secs: float, no_create_topics: bool, loglevel: str, clock_mode: str,
           kafka_security) -> None:
    """Run the streaming worker: events in, verdicts out, state in a changelogged table.

    Exits non-zero if its stream agent dies (70), so the orchestrator restarts it.
    """
    from rlhealth.streams.workers import StreamWorker, WorkerSettings

    catalog = _catalog(topic_prefix)
    if not no_create_topics:
        from rlhealth.sinks.kafka import ensure_topics

        ensure_topics(bootstrap, catalog, security=kafka_security)
    worker_settings = WorkerSettings(
        bootstrap=bootstrap, catalog=catalog, app_id=app_id, tick_secs=tick_secs, heartbeat_secs=heartbeat_secs,
        metrics_port=metrics_port, metrics_addr=metrics_addr, db_path=db_path, loglevel=loglevel,
        session_timeout_s=session_timeout_secs, security=kafka_security, clock_mode=clock_mode,
        idle_expiry_secs=idle_expiry_secs, terminal_expiry_secs=terminal_expiry_secs)
    run = StreamWorker(worker_settings).run
    from rlhealth import settings

    profile_to = settings.load().profile
    sys.exit(_profiled(run, str(profile_to)) if profile_to else run())




def _profiled(run: Callable[[], int], path: str) -> int:
    """Run the worker under cProfile and write the stats to `path` when it stops (`python -m pstats path`)."""
    import cProfile

    profiler = cProfile.Profile()
    try:
        return profiler.runcall(run)
    finally:
        profiler.dump_stats(path)


@click.command()
@bootstrap_option()
@click.option("--follow", "-f", is_flag=True, help="Keep printing new verdicts.")
@click.option("--job", default=None, help="Only this job.")
@click.option("--latest", is_flag=True, help="Only each job's newest verdict (highest seq).")
@click.option("--only-kill", is_flag=True, help="Only KILL verdicts.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--group", default=None,
              help="Consumer group (commits offsets); default: read everything, commit nothing.")
@click.option("--db", "db_path", type=click.Path(dir_okay=False), default=None,
              help="Also store every verdict read in this DuckDB evidence file.")
@prefix_option
@kafka_security_options
def verdicts(bootstrap: str, follow: bool, job: str | None, latest: bool, only_kill: bool, fmt: str,
             group: str | None, db_path: str | None, topic_prefix: str | None, kafka_security) -> None:
    """Print verdicts from the verdict topic.

    `--latest --job J --format json` prints that job's newest verdict as one JSON object (exit 1 if none).
    With `--latest` the exit code is `probe`'s: 10 when any verdict printed is a KILL, else 0.
    """
    from rlhealth.schemas import render_text
    from rlhealth.streams.verdict_reader import latest_verdicts, read_verdicts

    if latest and follow:
        raise click.UsageError("--latest and --follow do not combine")
    topic = _catalog(topic_prefix).verdicts
    store = None
    if db_path:
        from rlhealth.sinks.duckdb import EvidenceStore

        # Verdicts are few (changes plus heartbeats): each is flushed at once, so the group's auto-commit
        # only ever commits stored verdicts. Findings and metric points are many: the evidence thread
        # flushes once per polled batch and commits after (`follow_evidence`).
        store = EvidenceStore(db_path, flush_rows=50_000, snapshot_secs=30.0)

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # close the store on SIGTERM too

    def emit(v) -> None:
        if store is not None:
            store.add_verdict(v)
            store.flush()
        if fmt == "json":
            click.echo(v.model_dump_json())
        else:
            click.echo(render_text(v) + "\n")

    exit_code = 0
    evidence_thread = None
    stop_evidence = None
    if store is not None and follow:
        # the evidence writer: findings and metric points from the worker go to the same store
        import threading

        from rlhealth.streams.verdict_reader import follow_evidence

        catalog = _catalog(topic_prefix)
        stop_evidence = threading.Event()
        evidence_thread = threading.Thread(
            target=follow_evidence, name="rlhealth-evidence", daemon=True,
            args=(bootstrap, catalog.findings, catalog.metrics),
            kwargs={"on_finding": store.add_finding_record, "on_metrics": store.add_metrics_point,
                    "stop": stop_evidence, "group_id": f"{group}-evidence" if group else None,
                    "security": kafka_security, "on_batch": store.flush})
        evidence_thread.start()
    try:
        if latest:
            newest = latest_verdicts(bootstrap, topic, job=job, only_kill=only_kill, security=kafka_security)
            if not newest:
                raise click.ClickException("no verdict" + (f" for job {job}" if job else ""))
            for v in newest.values():
                emit(v)
            if any(v.verdict == "KILL" for v in newest.values()):
                exit_code = EXIT_KILL
        else:
            for v in read_verdicts(bootstrap, topic, follow=follow, job=job, only_kill=only_kill, group_id=group,
                                   security=kafka_security):
                emit(v)
                sys.stdout.flush()
    except KeyboardInterrupt:
        pass
    finally:
        if stop_evidence is not None and evidence_thread is not None:
            stop_evidence.set()
            evidence_thread.join(timeout=10)
        if store is not None:
            store.close()
    sys.exit(exit_code)


@click.command()
@click.argument("capture", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--to-kafka", is_flag=True, required=True, help="Produce to the event topics (the only target).")
@bootstrap_option()
@click.option("--speed", type=float, default=None,
              help="Compress the capture's timeline X times (default: as fast as possible, times shifted to now).")
@click.option("--job-id", default=None, help="Replay under another job id (e.g. to run one capture twice).")
@prefix_option
@click.option("--no-create-topics", is_flag=True, help="Do not create missing topics first.")
@kafka_security_options
def replay(capture: Path, to_kafka: bool, bootstrap: str, speed: float | None, job_id: str | None,
           topic_prefix: str | None, no_create_topics: bool, kafka_security) -> None:
    """Produce a capture's events to Kafka in event-time order, rebased so it ends now."""
    from rlhealth.streams.replay import replay_capture

    catalog = _catalog(topic_prefix)
    if not no_create_topics:
        from rlhealth.sinks.kafka import ensure_topics

        ensure_topics(bootstrap, catalog, security=kafka_security)
    logging.basicConfig(level=logging.WARNING)
    stats = replay_capture(capture, bootstrap, catalog=catalog, speed=speed, job_id=job_id, security=kafka_security)
    click.echo(orjson.dumps({"events": stats.events, "by_kind": stats.by_kind, "shift_s": round(stats.shift_s, 3),
                             "started_at": stats.started_at.isoformat() if stats.started_at else None,
                             "finished_at": stats.finished_at.isoformat() if stats.finished_at else None}).decode())
