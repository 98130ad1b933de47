"""Live pod statuses from the Kubernetes API by listing (`ship --k8s-list`; the watch is `pod_watch`).

`pod_statuses(namespace, label_selector)` lists the job's pods with CoreV1Api and returns one
`JobStatePoll` with `pod_statuses` filled. The raw JSON (`_preload_content=False`) goes through
the same parser as `kubectl get pods -o json` snapshots (`rlhealth.sources.kubectl`), so live and
offline pod views cannot drift apart. The job state is inferred from pod phases
(`kubectl.infer_state`); callers with a better source (a state poll) override it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
from kubernetes import client as k8s

from rlhealth.schemas.common import Source
from rlhealth.schemas.events import JobStatePoll
from rlhealth.sources.kubectl import infer_state, pod_statuses_from_json


def make_api(configuration: k8s.Configuration | None = None) -> k8s.CoreV1Api:
    """A CoreV1Api; without a configuration, in-cluster config or ~/.kube/config is loaded."""
    if configuration is None:
        from kubernetes import config as k8s_config

        try:
            k8s_config.load_incluster_config()
        except k8s_config.ConfigException:
            k8s_config.load_kube_config()
        return k8s.CoreV1Api()
    return k8s.CoreV1Api(k8s.ApiClient(configuration))


def pod_statuses(
    namespace: str,
    label_selector: str,
    *,
    job_id: str | None = None,
    api: k8s.CoreV1Api | None = None,
    configuration: k8s.Configuration | None = None,
    clock: Callable[[], datetime] | None = None,
    timeout_s: float = 10.0,
    cluster: str | None = None,
) -> JobStatePoll:
    """List pods matching `label_selector` in `namespace` -> JobStatePoll (scheduler "kubernetes").

    `job_id` defaults to the label selector. API errors propagate (kubernetes ApiException,
    urllib3 errors): the caller decides whether a failed poll is an "unknown" state.
    """
    api = api or make_api(configuration)
    now = (clock or (lambda: datetime.now(UTC)))()
    resp = api.list_namespaced_pod(
        namespace, label_selector=label_selector, _preload_content=False, _request_timeout=timeout_s
    )
    # _preload_content=False: the raw urllib3 response, not the V1PodList the stubs promise
    raw: Any = resp
    try:
        obj = orjson.loads(raw.data)
    finally:
        raw.release_conn()
    pods = pod_statuses_from_json(obj)
    return JobStatePoll(
        job_id=job_id or label_selector,
        event_time=now,
        ingest_time=now,
        source=Source(cluster=cluster, stream=f"k8s:{namespace}/{label_selector}", shipper="kubernetes_api"),
        state=infer_state(pods),
        pods=len(pods),
        pod_statuses=pods,
        scheduler="kubernetes",
    )


__all__ = ["make_api", "pod_statuses"]
