"""A job's pods through a Kubernetes WATCH (read-only: list + watch on pods) -> `JobStatePoll`s.

A background thread keeps the job's pod set current the way an informer does:

* **list** the pods matching the selector (`list_namespaced_pod`), remember the list's
  `resourceVersion`;
* **watch** from that version (`kubernetes.watch.Watch`, server-side `timeout_seconds`, bookmarks
  asked for): ADDED/MODIFIED replace a pod, DELETED removes it, every event (and bookmark)
  advances the resource version, so a watch that ends (server timeout, dropped connection) is
  resumed from where it stopped without a re-list;
* **410 Gone** (the version is older than the API server keeps; an ERROR event or a 410 answer):
  list again, then watch from the new version;
* any other failure (API server down, 5xx, a connection reset, a read timeout) is counted per
  reason and retried after a backoff that doubles up to `backoff_max_s` and resets once a
  watch delivers again.

Each change is kept with the time it arrived; `poll()` (the shipper's tick) turns every change since
the last tick into a `JobStatePoll` of the whole pod set as it was after that change, so a pod that
was OOMKilled and restarted between two ticks is still seen. A tick without a change sends the
current set (the watch is the source of truth between lists: no API call per tick). Pod JSON goes
through the parser of `kubectl get pods -o json` snapshots (`kubectl.pod_status`), as the list-based
`kubernetes_api.pod_statuses` does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
import urllib3
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from rlhealth.schemas.common import EventBase, Source
from rlhealth.schemas.events import JobStatePoll, PodStatus
from rlhealth.sources.kubectl import MAX_PODS, infer_state, pod_status
from rlhealth.sources.kubernetes_api import make_api
from rlhealth.sources.live import SourceCounters

MAX_CHANGES = 1_000  # changes kept between two ticks (the oldest are dropped, and counted, past it)
GONE = 410


class PodWatcher:
    """`LiveSource` of a job's pods, kept current by list + watch in a daemon thread."""

    def __init__(self, namespace: str, label_selector: str, *, job_id: str | None = None,
                 api: k8s.CoreV1Api | None = None, configuration: k8s.Configuration | None = None,
                 clock: Callable[[], datetime] | None = None, shipper: str | None = None,
                 cluster: str | None = None, watch_timeout_s: int = 300, request_timeout_s: float = 30.0,
                 backoff_s: float = 1.0, backoff_max_s: float = 60.0) -> None:
        self.namespace = namespace
        self.selector = label_selector
        self.job_id = job_id or label_selector
        self._api = api
        self._configuration = configuration
        self.clock = clock or (lambda: datetime.now(UTC))
        self.watch_timeout_s = watch_timeout_s
        self.request_timeout_s = request_timeout_s
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.name = f"k8s-watch:{namespace}/{label_selector}"[:200]
        # the stream name of the list-based poll: a restart's watermark covers both
        self.source = Source(cluster=cluster, stream=f"k8s:{namespace}/{label_selector}", shipper=shipper)
        self.counters = SourceCounters()
        self.resource_version: str | None = None
        self.lists = 0  # how often the pods were listed (the first time, and after every 410)
        self.watches = 0  # watch requests made
        self.dropped_changes = 0
        self._pods: dict[str, PodStatus] = {}
        self._changes: list[tuple[datetime, list[PodStatus]]] = []
        self._listed = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch: k8s_watch.Watch | None = None
        self._thread: threading.Thread | None = None

    # -- the watch thread ------------------------------------------------------------------
    def start(self) -> PodWatcher:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"rlhealth-{self.name}", daemon=True)
            self._thread.start()
        return self

    def _fail(self, exc: BaseException) -> None:
        if isinstance(exc, k8s.ApiException):
            reason = f"api_{exc.status}"
            text = f"Kubernetes API {exc.status}: {exc.reason}"
        elif isinstance(exc, urllib3.exceptions.ReadTimeoutError | TimeoutError):
            reason, text = "timeout", f"{type(exc).__name__}: {exc}"
        elif isinstance(exc, urllib3.exceptions.HTTPError | OSError):
            reason, text = "connection", f"{type(exc).__name__}: {exc}"
        else:
            reason, text = type(exc).__name__, f"{type(exc).__name__}: {exc}"
        self.counters.fail(reason, text)

    def _run(self) -> None:
        delay = self.backoff_s
        while not self._stop.is_set():
            try:
                if self._api is None:
                    self._api = make_api(self._configuration)
                if self.resource_version is None:
                    self._list()
                if self._watch_once():
                    delay = self.backoff_s  # the watch delivered: the API server is fine again
                continue
            except k8s.ApiException as exc:
                if self._stop.is_set():
                    break
                if exc.status == GONE:
                    # expired version: start over from a fresh list (not a failure of the source)
                    self.counters.errors["gone"] = self.counters.errors.get("gone", 0) + 1
                    self.resource_version = None
                    continue
                self._fail(exc)
            except Exception as exc:  # noqa: BLE001 - urllib3/socket errors of every kind: count, back off, retry
                if self._stop.is_set():
                    break  # close() cut the stream
                self._fail(exc)
            if self._stop.wait(delay):
                break
            delay = min(delay * 2, self.backoff_max_s)

    def _list(self) -> None:
        assert self._api is not None
        # the raw urllib3 response (`_preload_content=False`): JSON for the kubectl parser, no models built
        resp: Any = self._api.list_namespaced_pod(self.namespace, label_selector=self.selector,
                                                  _preload_content=False, _request_timeout=self.request_timeout_s)
        try:
            obj = orjson.loads(resp.data)
        finally:
            resp.release_conn()
        items = obj.get("items") or []
        pods = {}
        for i, raw in enumerate(items[:MAX_PODS]):
            if isinstance(raw, dict):
                st = pod_status(raw, f"pod-{i}")
                pods[st.name] = st
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        with self._lock:
            self._pods = pods
            self._listed = True
            self._change()
        self.lists += 1
        self.resource_version = str(rv) if rv else None
        if self.resource_version is None:
            raise k8s.ApiException(status=0, reason="pod list without a resourceVersion")

    def _watch_once(self) -> bool:
        """One watch request from `resource_version`; True when it delivered at least one event."""
        assert self._api is not None
        w = k8s_watch.Watch(return_type="object")  # raw dicts: the kubectl parser reads them, no model building
        self._watch = w
        self.watches += 1
        delivered = False
        # the read timeout outlasts the server's: a connection that went silent is dropped and resumed
        timeouts = (self.request_timeout_s, self.watch_timeout_s + self.request_timeout_s)
        try:
            for ev in w.stream(self._api.list_namespaced_pod, self.namespace, label_selector=self.selector,
                               resource_version=self.resource_version, timeout_seconds=self.watch_timeout_s,
                               allow_watch_bookmarks=True, _request_timeout=timeouts):
                delivered = True
                self._apply(ev.get("type"), ev.get("raw_object"))
                if self._stop.is_set():
                    w.stop()
                    break
        finally:
            self._watch = None
        return delivered

    def _apply(self, kind: Any, raw: Any) -> None:
        if not isinstance(raw, dict):
            return
        meta: dict[str, Any] = raw["metadata"] if isinstance(raw.get("metadata"), dict) else {}
        rv = meta.get("resourceVersion")
        if rv:
            self.resource_version = str(rv)
        if kind == "BOOKMARK":
            return
        name = meta.get("name")
        if not isinstance(name, str):
            return
        with self._lock:
            if kind == "DELETED":
                if self._pods.pop(name, None) is None:
                    return
            elif kind in ("ADDED", "MODIFIED"):
                st = pod_status(raw, name)
                if self._pods.get(name) == st:
                    return  # a change the core cannot see (annotations, resource version)
                if name not in self._pods and len(self._pods) >= MAX_PODS:
                    return
                self._pods[name] = st
            else:
                return
            self._change()

    def _change(self) -> None:
        """Record the pod set as it is now (the lock is held)."""
        self._changes.append((self.clock(), sorted(self._pods.values(), key=lambda p: p.name)))
        if len(self._changes) > MAX_CHANGES:
            self.dropped_changes += len(self._changes) - MAX_CHANGES
            del self._changes[: len(self._changes) - MAX_CHANGES]

    # -- the shipper's side ----------------------------------------------------------------
    def _poll_event(self, t: datetime, pods: list[PodStatus]) -> JobStatePoll:
        return JobStatePoll(job_id=self.job_id, event_time=t, ingest_time=self.clock(), source=self.source,
                            state=infer_state(pods), pods=len(pods), pod_statuses=pods, scheduler="kubernetes")

    def poll(self) -> list[EventBase]:
        with self._lock:
            changes, self._changes = self._changes, []
            current = sorted(self._pods.values(), key=lambda p: p.name) if self._listed else None
        if changes:
            out: list[EventBase] = [self._poll_event(t, pods) for t, pods in changes]
        elif current is not None:
            out = [self._poll_event(self.clock(), current)]
        else:
            out = []  # never listed yet: nothing known (the failures are counted)
        self.counters.received += len(out)
        return out

    def close(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        w = self._watch
        if w is not None:
            w.stop()
        if self._thread is not None:
            self._thread.join(timeout_s)


__all__ = ["PodWatcher"]
