"""Prometheus exporter: per-job health gauges and per-worker pipeline counters.

Everything lives in the exporter's own `CollectorRegistry` (never the global one), so several
exporters can coexist in one process (tests, the embedded probe next to a worker).

Per-job series come from a custom collector over a dict ``job_id -> JobMetrics``:
``update(metrics)`` replaces a job's snapshot and ``remove(job_id)`` drops it, so a job's series
vanish on the next scrape when the job ends or its partition moves to another worker (style.md H6).
``update`` also renders the job's sample lines in the text format once (`rlhealth.sinks.exposition`),
and the exporter's own HTTP server answers a scrape by joining them after the pipeline series
(`JobExporter.exposition`, byte for byte what ``generate_latest`` gives for the same registry): at
10,000 jobs (250k series) ``generate_latest`` takes seconds per scrape, the join tens of milliseconds.
It serves text format 0.0.4 only (gzipped when asked), not OpenMetrics.
Label sets are bounded: ``job_id`` (bounded by live jobs), ``role`` (a fixed set, see ``ROLES``),
``gate`` (A, B, C), ``status`` (``JOB_STATUSES``), ``kind`` (event kinds), ``reason``
(``DEAD_LETTER_REASONS``), ``verdict``, ``topic``. Never rank, trial, request or line.

Gate status is a gauge with 1 = PASS, 0 = FAIL, -1 = UNKNOWN (one series per gate), chosen over a
StateSet so that ``min by (job_id) (rlhealth_job_gate_status) == 0`` reads naturally in alerts.
``rlhealth_job_verdict_kill`` is 1 for KILL and 0 for NO-KILL; it is absent while the job has no
verdict yet. The other fields a supervisor acts on come from the verdict itself (``update(metrics,
verdict)``): ``rlhealth_job_escalate`` (1/0), ``rlhealth_job_status{status}`` (one series per
JobStatus, 1 for the current one, so ``rlhealth_job_status{status="UNKNOWN"} == 1`` selects blind
jobs), ``rlhealth_job_confidence`` (1 high, 0.5 medium, 0 low) and
``rlhealth_job_verdict_timestamp_seconds`` (when the verdict was produced: ``time() - it`` is the
verdict's age, which grows when nothing judges the job any more).

Two exporters: `JobExporter` serves only the per-job series (``rlhealth watch``), `Exporter` adds the
streaming worker's pipeline series (consumer lag, caught-up, dead letters...). A process exports
only what it measures: ``watch`` has no partitions, so it must not export ``rlhealth_worker_caught_up``.

Per-job gauges whose value is unknown (None) are omitted rather than exported as 0, because an
absent series and a zero mean different things to an alert.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    disable_created_metrics,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from rlhealth.agents.findings import JobMetrics
from rlhealth.schemas.events import EVENT_MODELS
from rlhealth.schemas.verdict import Verdict
from rlhealth.sinks.exposition import MetricsServer, escape_label_value, header, sample_name

ROLES = ("trainer", "engine", "ray", "scheduler", "shipper", "other")
GATES = ("A", "B", "C")
GATE_VALUE = {"PASS": 1.0, "FAIL": 0.0, "UNKNOWN": -1.0}
EVENT_KINDS = tuple(EVENT_MODELS) + ("unknown",)
# Dead-letter reasons: the codec's EventDecodeError reasons plus the worker's own stages.
DEAD_LETTER_REASONS = (
    "invalid_json",
    "not_an_object",
    "unsupported_schema_version",
    "unknown_kind",
    "wrong_kind_for_topic",
    "invalid_fields",
    "missing_key",
    "key_mismatch",
    "core_error",
    "other",
)
VERDICTS = ("KILL", "NO-KILL")
JOB_STATUSES = ("ALIVE", "WEDGED", "TERMINAL", "UNKNOWN")
CONFIDENCE_VALUE = {"high": 1.0, "medium": 0.5, "low": 0.0}


def bounded(value: str | None, allowed: Iterable[str], fallback: str) -> str:
    """Map a label value onto a fixed set, so no input can grow the series count."""
    return value if value is not None and value in allowed else fallback


# Per-job families, in export order: (name, type, help, label after job_id or None).
_JOB_FAMILIES: tuple[tuple[str, str, str, str | None], ...] = (
    ("rlhealth_job_log_staleness_seconds", "gauge", "Seconds since the job's last log line, per producer role.",
     "role"),
    ("rlhealth_job_generation_tokens_per_second", "gauge",
     "Generation throughput summed over inference engines (recent window).", None),
    ("rlhealth_job_running_requests", "gauge", "Requests running on the inference engines.", None),
    ("rlhealth_job_waiting_requests", "gauge", "Requests waiting on the inference engines.", None),
    ("rlhealth_job_trials_completed", "counter", "Rollout trials completed.", None),
    ("rlhealth_job_trial_reward_mean", "gauge", "Mean reward of recent completed training trials.", None),
    ("rlhealth_job_trials_nonzero_reward_ratio", "gauge",
     "Share of recent completed training trials with a non-zero reward (0-1).", None),
    ("rlhealth_job_nccl_watchdog_hits", "counter", "NCCL watchdog timeout lines seen.", None),
    ("rlhealth_job_oom_events", "counter", "Out-of-memory events seen (CUDA OOM, OOMKilled).", None),
    ("rlhealth_job_ray_worker_deaths", "counter", "Ray worker deaths seen.", None),
    ("rlhealth_job_restarts_burned", "gauge", "Scheduler restarts already used.", None),
    ("rlhealth_job_restarts_max", "gauge", "Scheduler restarts allowed.", None),
    ("rlhealth_job_gate_status", "gauge",
     "Gate status: 1 PASS, 0 FAIL, -1 UNKNOWN (A liveness, B resources, C rollouts).", "gate"),
    ("rlhealth_job_verdict_kill", "gauge", "Current recommendation: 1 KILL, 0 NO-KILL.", None),
    ("rlhealth_job_escalate", "gauge", "1 when the verdict asks a person to look (escalate), else 0.", None),
    ("rlhealth_job_status", "gauge", "Job status of the verdict: 1 for the current status, 0 for the others.",
     "status"),
    ("rlhealth_job_confidence", "gauge", "Confidence of the verdict: 1 high, 0.5 medium, 0 low.", None),
    ("rlhealth_job_verdict_timestamp_seconds", "gauge",
     "When the current verdict was produced (Unix seconds); time() minus it is its age.", None),
    ("rlhealth_job_last_event_timestamp_seconds", "gauge",
     "Event time of the newest event seen for the job (Unix seconds).", None),
    ("rlhealth_job_trainer_last_step", "gauge", "Last trainer step seen in the logs.", None),
    ("rlhealth_job_effective_training_ratio", "gauge",
     "Share of the job's wall-clock time spent in productive trainer steps so far (0-1); absent when unknown.",
     None),
    ("rlhealth_job_training_time_seconds", "gauge",
     "The job's wall-clock seconds so far by use: productive, bring_up, stalled, failures, unattributed.", "use"),
)
_INDEX = {f[0]: i for i, f in enumerate(_JOB_FAMILIES)}

# One sample of a job: (family index, value of the family's extra label or None, value).
_Row = tuple[int, str | None, float]


def _families() -> list[CounterMetricFamily | GaugeMetricFamily]:
    out: list[CounterMetricFamily | GaugeMetricFamily] = []
    for name, kind, doc, extra in _JOB_FAMILIES:
        labels = ["job_id"] if extra is None else ["job_id", extra]
        out.append(CounterMetricFamily(name, doc, labels=labels) if kind == "counter"
                   else GaugeMetricFamily(name, doc, labels=labels))
    return out


def job_rows(m: JobMetrics, v: Verdict | None) -> list[_Row]:
    """Every sample of one job, in family order: the one place that decides what a job exports.

    (Written out with the families' indexes rather than a helper taking each family's name: this runs
    for every judgement, ~34 samples each.)"""
    out: list[_Row] = []
    put = out.append
    stale: dict[str, float] = {}
    for role, secs in (m.log_staleness_s or {}).items():
        r = bounded(role, ROLES, "other")
        stale[r] = max(stale.get(r, secs), secs)  # several unknown roles fold into "other"
    for role, secs in sorted(stale.items()):
        if secs is not None:
            put((_I_STALE, role, float(secs)))
    for i, value in ((_I_GEN, m.generation_tokens_per_s), (_I_RUNNING, m.running_requests),
                     (_I_WAITING, m.waiting_requests), (_I_TRIALS, m.trials_completed_total),
                     (_I_REWARD, m.trial_reward_mean), (_I_NONZERO, m.trials_nonzero_reward_ratio),
                     (_I_NCCL, m.nccl_watchdog_hits_total), (_I_OOM, m.oom_events_total),
                     (_I_RAY, m.ray_worker_deaths_total), (_I_BURNED, m.restarts_burned),
                     (_I_RESTARTS_MAX, m.restarts_max)):
        if value is not None:  # unknown is absent, not 0
            put((i, None, float(value)))
    statuses = m.gate_status or {}
    for gate in GATES:
        put((_I_GATE, gate, float(GATE_VALUE.get(statuses.get(gate, "UNKNOWN"), -1.0))))
    if m.verdict in VERDICTS:
        put((_I_KILL, None, 1.0 if m.verdict == "KILL" else 0.0))
    if v is not None:
        put((_I_ESCALATE, None, 1.0 if v.escalate else 0.0))
        for status in JOB_STATUSES:
            put((_I_STATUS, status, 1.0 if v.job_status == status else 0.0))
        confidence = CONFIDENCE_VALUE.get(v.confidence)
        if confidence is not None:
            put((_I_CONFIDENCE, None, float(confidence)))
        put((_I_VERDICT_TS, None, float(v.produced_at.timestamp())))
    if isinstance(m.last_event_time, datetime):
        put((_I_LAST_EVENT, None, float(m.last_event_time.timestamp())))
    if m.trainer_last_step is not None:
        put((_I_STEP, None, float(m.trainer_last_step)))
    if m.training_time is not None:
        if m.training_time.ratio is not None:
            put((_I_RATIO, None, float(m.training_time.ratio)))
        for use, seconds in m.training_time.as_dict().items():  # a fixed set of five label values
            if seconds is not None:
                put((_I_TIME, use, float(seconds)))
    return out


def _job_rows_by_name(m: JobMetrics, v: Verdict | None) -> list[_Row]:
    """`job_rows` as it was written before, family by family name (tests hold the two equal)."""
    out: list[_Row] = []

    def add(name: str, value: float | int | None, extra: str | None = None) -> None:
        if value is not None:  # unknown is absent, not 0
            out.append((_INDEX[name], extra, float(value)))

    stale: dict[str, float] = {}
    for role, secs in (m.log_staleness_s or {}).items():
        r = bounded(role, ROLES, "other")
        stale[r] = max(stale.get(r, secs), secs)  # several unknown roles fold into "other"
    for role, secs in sorted(stale.items()):
        add("rlhealth_job_log_staleness_seconds", secs, role)
    add("rlhealth_job_generation_tokens_per_second", m.generation_tokens_per_s)
    add("rlhealth_job_running_requests", m.running_requests)
    add("rlhealth_job_waiting_requests", m.waiting_requests)
    add("rlhealth_job_trials_completed", m.trials_completed_total)
    add("rlhealth_job_trial_reward_mean", m.trial_reward_mean)
    add("rlhealth_job_trials_nonzero_reward_ratio", m.trials_nonzero_reward_ratio)
    add("rlhealth_job_nccl_watchdog_hits", m.nccl_watchdog_hits_total)
    add("rlhealth_job_oom_events", m.oom_events_total)
    add("rlhealth_job_ray_worker_deaths", m.ray_worker_deaths_total)
    add("rlhealth_job_restarts_burned", m.restarts_burned)
    add("rlhealth_job_restarts_max", m.restarts_max)
    for gate in GATES:
        status = (m.gate_status or {}).get(gate, "UNKNOWN")
        add("rlhealth_job_gate_status", GATE_VALUE.get(status, -1.0), gate)
    if m.verdict in VERDICTS:
        add("rlhealth_job_verdict_kill", 1.0 if m.verdict == "KILL" else 0.0)
    if v is not None:
        add("rlhealth_job_escalate", 1.0 if v.escalate else 0.0)
        for status in JOB_STATUSES:
            add("rlhealth_job_status", 1.0 if v.job_status == status else 0.0, status)
        add("rlhealth_job_confidence", CONFIDENCE_VALUE.get(v.confidence))
        add("rlhealth_job_verdict_timestamp_seconds", v.produced_at.timestamp())
    if isinstance(m.last_event_time, datetime):
        add("rlhealth_job_last_event_timestamp_seconds", m.last_event_time.timestamp())
    add("rlhealth_job_trainer_last_step", m.trainer_last_step)
    if m.training_time is not None:
        add("rlhealth_job_effective_training_ratio", m.training_time.ratio)
        for use, seconds in m.training_time.as_dict().items():  # a fixed set of five label values
            add("rlhealth_job_training_time_seconds", seconds, use)
    return out


(_I_STALE, _I_GEN, _I_RUNNING, _I_WAITING, _I_TRIALS, _I_REWARD, _I_NONZERO, _I_NCCL, _I_OOM, _I_RAY, _I_BURNED,
 _I_RESTARTS_MAX, _I_GATE, _I_KILL, _I_ESCALATE, _I_STATUS, _I_CONFIDENCE, _I_VERDICT_TS, _I_LAST_EVENT, _I_STEP,
 _I_RATIO, _I_TIME) = (_INDEX[name] for name in (
    "rlhealth_job_log_staleness_seconds", "rlhealth_job_generation_tokens_per_second", "rlhealth_job_running_requests",
    "rlhealth_job_waiting_requests", "rlhealth_job_trials_completed", "rlhealth_job_trial_reward_mean",
    "rlhealth_job_trials_nonzero_reward_ratio", "rlhealth_job_nccl_watchdog_hits", "rlhealth_job_oom_events",
    "rlhealth_job_ray_worker_deaths", "rlhealth_job_restarts_burned", "rlhealth_job_restarts_max",
    "rlhealth_job_gate_status", "rlhealth_job_verdict_kill", "rlhealth_job_escalate", "rlhealth_job_status",
    "rlhealth_job_confidence", "rlhealth_job_verdict_timestamp_seconds", "rlhealth_job_last_event_timestamp_seconds",
    "rlhealth_job_trainer_last_step", "rlhealth_job_effective_training_ratio", "rlhealth_job_training_time_seconds"))


_HEADERS = tuple(header(f) for f in _families())


def _line_template(family: Metric, extra: str | None) -> tuple[str, str, str, bool]:
    """(head, middle, tail, extra first) of a family's sample line: head + first value + middle + second
    value + tail + value. The text format sorts label names, so "gate" goes before "job_id"."""
    name = sample_name(family)
    if extra is None:
        return f'{name}{{job_id="', "", '"} ', False
    if extra < "job_id":
        return f'{name}{{{extra}="', '",job_id="', '"} ', True
    return f'{name}{{job_id="', f'",{extra}="', '"} ', False


_TEMPLATES = tuple(_line_template(f, spec[3]) for f, spec in zip(_families(), _JOB_FAMILIES, strict=True))


# The values most samples take (gate and job status, escalate, zero counters), written once; -0.0 is
# not among them (it equals 0.0 but is written "-0.0").
_COMMON_VALUES = {1.0: "1.0", -1.0: "-1.0", 0.5: "0.5"}


def _value_text(value: float) -> str:
    got = _COMMON_VALUES.get(value)
    if got is not None:
        return got
    if value == 0.0 and str(value) == "0.0":
        return "0.0"
    return floatToGoString(value)


def render_rows(job_id: str, rows: list[_Row]) -> tuple[str, ...]:
    """A job's sample lines, one string per family (`_JOB_FAMILIES` order), as `generate_latest` writes them."""
    parts = [""] * len(_JOB_FAMILIES)
    _render_into(parts, job_id, rows)
    return tuple(parts)


def _rerender(job_id: str, rows: list[_Row], values: array, old: _Job) -> tuple[str, ...]:
    """`render_rows(job_id, rows)` given the job's previous `_Job` of the same layout: the families
    whose samples all kept their value (bit for bit: 0.0 and -0.0 are written differently) keep their
    text; the others are written again. A family's text is its rows' lines in row order either way.
    About half of a job's ~34 samples (gates, status, counters, restarts) do not change from one
    judgement to the next."""
    new_bits, old_bits = array("q", values.tobytes()), array("q", old.values.tobytes())
    if new_bits == old_bits:
        return old.text
    layout = old.layout
    changed = {layout[k][0] for k in range(len(new_bits)) if new_bits[k] != old_bits[k]}
    parts = list(old.text)
    for i in changed:
        parts[i] = ""
    _render_into(parts, job_id, [row for row in rows if row[0] in changed])
    return tuple(parts)


def _render_into(parts: list[str], job_id: str, rows: list[_Row]) -> None:
    job = escape_label_value(job_id)
    templates = _TEMPLATES
    escaped = _ESCAPED_EXTRA
    for i, extra, value in rows:
        head, middle, tail, extra_first = templates[i]
        if extra is None:
            parts[i] += f"{head}{job}{tail}{_value_text(value)}\n"
            continue
        ext = escaped.get(extra)
        if ext is None:  # the extra labels are bounded sets (roles, gates, statuses, uses)
            ext = escaped[extra] = escape_label_value(extra)
        if extra_first:
            parts[i] += f"{head}{ext}{middle}{job}{tail}{_value_text(value)}\n"
        else:
            parts[i] += f"{head}{job}{middle}{ext}{tail}{_value_text(value)}\n"


_ESCAPED_EXTRA: dict[str, str] = {}


# Row layouts ((family index, extra label) of each sample) shared by the jobs that have them: most jobs
# export the same series. Bounded: past this many distinct layouts a job keeps its own.
_LAYOUTS: dict[tuple[tuple[int, str | None], ...], tuple[tuple[int, str | None], ...]] = {}
_MAX_LAYOUTS = 4096


class _Job:
    """What the collector holds per job: its samples (for `collect`) and their text (for `render`).

    The samples are kept as a shared layout and an array of doubles (exact: a float is a double),
    ~0.4 kB a job instead of ~3 kB of tuples and float objects (10,000 jobs: ~25 MB of the worker)."""

    __slots__ = ("layout", "text", "values")

    def __init__(self, layout: tuple[tuple[int, str | None], ...], values: array, text: tuple[str, ...]) -> None:
        self.layout = layout
        self.values = values
        self.text = text

    @classmethod
    def of(cls, job_id: str, rows: list[_Row], old: _Job | None = None) -> _Job:
        """The job of `rows`; `old`: the job's previous one, whose text is reused where it still holds."""
        layout = tuple([(i, extra) for i, extra, _ in rows])
        shared = _LAYOUTS.get(layout)
        if shared is None and len(_LAYOUTS) < _MAX_LAYOUTS:
            shared = _LAYOUTS[layout] = layout
        if shared is not None:
            layout = shared
        values = array("d", [v for _, _, v in rows])
        if old is not None and (old.layout is layout or old.layout == layout):
            return cls(layout, values, _rerender(job_id, rows, values, old))
        return cls(layout, values, render_rows(job_id, rows))

    @property
    def rows(self) -> list[_Row]:
        return [(i, extra, v) for (i, extra), v in zip(self.layout, self.values, strict=True)]


class JobCollector(Collector):
    """Exports the latest JobMetrics (and verdict) of every job this process currently owns.

    `update` renders the job's lines once; `render` joins every job's lines for a scrape (what the
    exporter's HTTP server serves) and `collect` gives the same samples to prometheus_client
    (`generate_latest`, `get_sample_value`): both come from `job_rows`, and follow the jobs' first
    insertion order within each family."""

    def __init__(self) -> None:
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()
        self._version = 0  # bumped by every change of `_jobs`
        # `render_bytes` of version `_version_rendered`, kept until it is rendered again
        self._rendered: bytes | None = None
        self._version_rendered = -1

    def update(self, metrics: JobMetrics, verdict: Verdict | None = None) -> None:
        """Replace a job's snapshot. Without `verdict` the verdict-only series of the job are absent."""
        rows = job_rows(metrics, verdict)
        # (read without the lock: only the owner's thread changes `_jobs`; scrapes only read it)
        job = _Job.of(metrics.job_id, rows, self._jobs.get(metrics.job_id))
        with self._lock:
            self._jobs[metrics.job_id] = job
            self._version += 1

    def remove(self, job_id: str) -> bool:
        with self._lock:
            gone = self._jobs.pop(job_id, None) is not None
            self._version += gone
            return gone

    def retain(self, job_ids: Iterable[str]) -> list[str]:
        """Drop every job not in `job_ids`; returns the dropped ids."""
        keep = set(job_ids)
        with self._lock:
            dropped = [j for j in self._jobs if j not in keep]
            for j in dropped:
                del self._jobs[j]
            self._version += bool(dropped)
        return dropped

    @property
    def changed(self) -> bool:
        """Whether a job changed since the text was last rendered (`render_bytes`)."""
        return self._version != self._version_rendered

    def render_bytes(self) -> bytes:
        """`render()` in UTF-8, rendered again only when a job changed since the last call."""
        with self._lock:
            if self._rendered is not None and self._version_rendered == self._version:
                return self._rendered
            version = self._version
            texts = [job.text for job in self._jobs.values()]
        data = _join(texts).encode("utf-8")
        with self._lock:
            if version >= self._version_rendered:  # a concurrent render of a newer version is kept
                self._rendered, self._version_rendered = data, version
        return data

    def job_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._jobs)

    def describe(self) -> Iterator[Metric]:
        # Declaring the families without samples lets the registry check for name clashes
        # without calling collect() at registration time.
        return iter(_families())

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            jobs = list(self._jobs.items())
        fams = _families()
        for job_id, job in jobs:
            for i, extra, value in job.rows:
                fams[i].add_metric([job_id] if extra is None else [job_id, extra], value)
        yield from fams

    def render(self) -> str:
        """This collector's part of `generate_latest` (text format 0.0.4), byte for byte, from stored text."""
        with self._lock:
            texts = [job.text for job in self._jobs.values()]
        return _join(texts)


def _join(texts: list[tuple[str, ...]]) -> str:
    """The collector's text from its jobs' lines: each family's header, then its lines of every job."""
    out: list[str] = []
    for i, head in enumerate(_HEADERS):
        out.append(head)
        out.extend(t[i] for t in texts if t[i])
    return "".join(out)


class JobExporter:
    """Per-job series only: what `rlhealth watch` measures (it has no partitions, lag or dead letters)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # `*_created` series double the series count and nothing of ours reads them. This is a
        # process-wide switch of prometheus_client; rlhealth processes export nothing else.
        disable_created_metrics()
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.jobs = JobCollector()
        self.registry.register(self.jobs)
        # Everything else this exporter exports lives in its own registry, registered after the jobs:
        # `exposition` renders it with `generate_latest` (a few dozen samples) behind the jobs' text.
        self.pipeline = CollectorRegistry(auto_describe=True)
        self._server: MetricsServer | None = None
        self._snapshot: tuple[bytes, bytes] | None = None  # (per-job text, pipeline text): `refresh_exposition`

    # per-job
    def update(self, metrics: JobMetrics, verdict: Verdict | None = None) -> None:
        self.jobs.update(metrics, verdict)

    def remove(self, job_id: str) -> bool:
        return self.jobs.remove(job_id)

    def retain(self, job_ids: Iterable[str]) -> list[str]:
        return self.jobs.retain(job_ids)

    def exposition(self) -> bytes:
        """`generate_latest(self.registry)`, byte for byte, with the per-job part pre-rendered."""
        return self.jobs.render_bytes() + generate_latest(self.pipeline)

    def rendered_exposition(self) -> bytes:
        """`exposition` as of the last `refresh_exposition` (taken now if never before): what the worker
        serves, so that a scrape does no work per series (see `serve`). The per-job and the pipeline
        series are of the same moment, as in `exposition` (a job's series are gone once the counter of
        its expiry counts it; `rlhealth_jobs_owned` counts the jobs exported)."""
        snap = self._snapshot
        if snap is None:
            self.refresh_exposition()
            snap = self._snapshot
            assert snap is not None
        return snap[0] + snap[1]

    def refresh_exposition(self) -> bool:
        """Take the snapshot `rendered_exposition` serves; returns whether the per-job text was rendered
        again (a job changed since the last time)."""
        changed = self.jobs.changed
        self._snapshot = (self.jobs.render_bytes(), generate_latest(self.pipeline))
        return changed

    def serve(self, port: int, addr: str = "127.0.0.1", *, rendered: bool = False) -> int:
        """Serve `exposition` on any path in daemon threads; returns the bound port (useful with port 0).

        `rendered`: serve `rendered_exposition`, the snapshot the owner last took (`refresh_exposition`).
        The worker takes it on its event loop, about every second between judging passes: joining and
        encoding 340k series (22 MB) took ~0.1 s of CPU per scrape in the scrape's thread, which
        competed for the GIL with the judging, and 10% of the worker's CPU with a scrape every 3 s
        (bench/scale.py at 10,000 jobs, BENCHMARKS.md session 10)."""
        self._server = MetricsServer(self.rendered_exposition if rendered else self.exposition, port, addr)
        return self._server.port

    def shutdown(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server = None


class Exporter(JobExporter):
    """The worker's exporter: per-job collector plus Vector-style per-component counters."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        r = self.pipeline
        self.events_received = Counter("rlhealth_events_received", "Records fetched from event topics.",
                                       ["kind"], registry=r)
        self.events_processed = Counter("rlhealth_events_processed", "Events decoded and fed to the health core.",
                                        ["kind"], registry=r)
        self.events_failed = Counter("rlhealth_events_failed", "Events that could not be decoded or processed.",
                                     ["kind"], registry=r)
        self.events_dead_lettered = Counter("rlhealth_events_dead_lettered", "Records sent to the dead-letter topic.",
                                            ["kind", "reason"], registry=r)
        self.log_lines_processed = Counter("rlhealth_log_lines_processed", "Log lines fed to the health core.",
                                           registry=r)
        self.consumer_lag = Gauge("rlhealth_consumer_lag",
                                  "Records not yet consumed, summed over the owned partitions.", ["topic"], registry=r)
        self.partitions_owned = Gauge("rlhealth_partitions_owned", "Event-topic partitions assigned to this worker.",
                                      registry=r)
        self.jobs_owned = Gauge("rlhealth_jobs_owned", "Jobs whose state this worker holds.", registry=r)
        self.event_loop_lag = Gauge("rlhealth_event_loop_lag_seconds",
                                    "How late the last event-loop probe woke up.", registry=r)
        self.event_loop_lag_max = Gauge(
            "rlhealth_event_loop_lag_max_seconds",
            "The longest the event loop was blocked since start (how late an event-loop probe woke up): "
            "heartbeats to the group coordinator wait as long.", registry=r)
        self.gc_pause_max = Gauge("rlhealth_gc_pause_max_seconds",
                                  "The longest garbage-collector pause since start, per generation.", ["generation"],
                                  registry=r)
        self.gc_seconds = Gauge("rlhealth_gc_seconds",
                                "Seconds spent in garbage collections since start, per generation.", ["generation"],
                                registry=r)
        self.assignments = Counter(
            "rlhealth_partition_assignments",
            "Partition assignments this worker received (the first one, then one per rebalance).", registry=r)
        self.caught_up = Gauge("rlhealth_worker_caught_up",
                               "1 once the worker consumed up to the end its partitions had at assignment.",
                               registry=r)
        self.last_processed = Gauge("rlhealth_last_processed_timestamp_seconds",
                                    "Wall clock of the last event processed (Unix seconds).", registry=r)
        self.verdicts_published = Counter("rlhealth_verdicts_published", "Verdicts published to the verdict topic.",
                                          ["verdict"], registry=r)
        self._published_by_verdict: dict[str, Any] = {}
        self.verdicts_failed = Counter("rlhealth_verdicts_failed", "Judgements or publishes that raised.",
                                       registry=r)
        self.judge_all_seconds = Gauge("rlhealth_judge_all_seconds",
                                       "Wall time of the last tick's judgement of every owned job.", registry=r)
        self.judge_all_busy_seconds = Gauge(
            "rlhealth_judge_all_busy_seconds",
            "Of the last tick's judgement pass, the seconds spent judging: its wall time less the time it "
            "waited for sends and yielded to the event intake.", registry=r)
        self.judge_passes = Counter("rlhealth_judge_passes", "Regular ticks' judgement passes completed.",
                                    registry=r)
        self.judge_passes_over_tick = Counter(
            "rlhealth_judge_passes_over_tick",
            "Regular judgement passes whose wall time exceeded the tick interval (a job judged late).", registry=r)
        self.jobs_judged = Counter("rlhealth_jobs_judged",
                                   "Judgements the core made, in every pass (regular ticks and jobs with news).",
                                   registry=r)
        self.judge_all_max_seconds = Gauge("rlhealth_judge_all_max_seconds",
                                           "Wall time of the longest regular judgement pass since start.", registry=r)
        self.intake_held_seconds = Gauge(
            "rlhealth_intake_held_seconds",
            "Seconds the event intake has waited, since start, for judgement passes to end before folding "
            "a buffer (judging has priority; Kafka holds the records).", registry=r)
        self.state_cache_hits = Gauge(
            "rlhealth_state_cache_hits",
            "Job states taken decoded from the worker's cache of states it just wrote, since start "
            "(rlhealth/streams/state_cache.py); the misses were decoded from the table.", registry=r)
        self.state_cache_misses = Gauge("rlhealth_state_cache_misses",
                                        "Job states decoded from the table's bytes since start.", registry=r)
        self.jobs_rejudged = Gauge("rlhealth_jobs_rejudged",
                                   "Jobs the last tick ran the core on; the others' state was unchanged and their "
                                   "judgement could not change yet (docs/verdicts.md).", registry=r)
        self.jobs_expired = Counter("rlhealth_jobs_expired",
                                    "Jobs whose state was dropped after a final verdict (ended, terminal, idle).",
                                    ["reason"], registry=r)
        self.delivery_stalls = Counter(
            "rlhealth_delivery_stalls",
            "Dead-letter batches undelivered for the stall time: the producer's metadata was refreshed "
            "(action=metadata_refresh), then their records sent again (action=resend).", ["action"], registry=r)
        self.changelogs_unassigned = Counter(
            "rlhealth_changelogs_unassigned",
            "Assignments in which a table's changelog partitions did not match the event partitions: "
            "that table is not restored for the jobs taken over (the group leader did not know the topic).",
            registry=r)
        self.registry.register(self.pipeline)

    # per-component
    def received(self, kind: str | None, n: int = 1) -> None:
        self.events_received.labels(bounded(kind, EVENT_KINDS, "unknown")).inc(n)

    def processed(self, kind: str | None, n: int = 1) -> None:
        self.events_processed.labels(bounded(kind, EVENT_KINDS, "unknown")).inc(n)

    def failed(self, kind: str | None, n: int = 1) -> None:
        self.events_failed.labels(bounded(kind, EVENT_KINDS, "unknown")).inc(n)

    def dead_lettered(self, kind: str | None, reason: str, n: int = 1) -> None:
        self.events_dead_lettered.labels(bounded(kind, EVENT_KINDS, "unknown"),
                                         bounded(reason, DEAD_LETTER_REASONS, "other")).inc(n)

    def verdict_published(self, verdict: str) -> None:
        # The labelled child, kept once made: `labels()` takes the metric's lock and builds its key each
        # time (~2% of a judging pass that publishes thousands of verdicts). Made on first use, as
        # `labels()` does, so no series appears before its first verdict.
        child = self._published_by_verdict.get(verdict)
        if child is None:
            child = self._published_by_verdict[verdict] = self.verdicts_published.labels(
                bounded(verdict, VERDICTS, "NO-KILL"))
        child.inc()


def serve(port: int, addr: str = "127.0.0.1", registry: CollectorRegistry | None = None) -> int:
    """Serve a registry's /metrics in a daemon thread; returns the bound port."""
    if registry is None:
        raise ValueError("pass the exporter's registry: rlhealth never serves the global registry")
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return int(server.server_port)


class SnapshotCollector(Collector):
    """Vector-style component counters of one process (the shipper), read at scrape time.

    `snapshot()` returns ``{name: value}`` or ``{name: {label_value: value}}`` for one label
    (``label``), or ``{name: {(value, ...): value}}`` for the label names `labels[name]` gives;
    names ending in ``_total`` are counters, the others gauges. Metric names get the
    ``rlhealth_shipper_`` prefix."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]], label: str = "reason",
                 prefix: str = "rlhealth_shipper_", labels: dict[str, tuple[str, ...]] | None = None) -> None:
        self.snapshot = snapshot
        self.label = label
        self.prefix = prefix
        self.labels = labels or {}

    def collect(self) -> Iterator[Metric]:
        for name, value in sorted(self.snapshot().items()):
            full = self.prefix + name
            family: CounterMetricFamily | GaugeMetricFamily
            is_counter = name.endswith("_total")
            base = full[: -len("_total")] if is_counter else full
            labels = list(self.labels.get(name, (self.label,))) if isinstance(value, dict) else []
            if is_counter:
                family = CounterMetricFamily(base, name.replace("_", " "), labels=labels)
            else:
                family = GaugeMetricFamily(base, name.replace("_", " "), labels=labels)
            if isinstance(value, dict):
                for lv, v in sorted(value.items()):
                    family.add_metric(list(lv) if isinstance(lv, tuple) else [lv], float(v))
            else:
                family.add_metric([], float(value))
            yield family


def serve_snapshot(snapshot: Callable[[], dict[str, Any]], port: int,
                   addr: str = "127.0.0.1", labels: dict[str, tuple[str, ...]] | None = None) -> int:
    """Serve a `SnapshotCollector` on its own registry; returns the bound port."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot, labels=labels))
    return serve(port, addr, registry)
