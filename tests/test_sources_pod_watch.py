"""The pod WATCH with the official client against a local API server (threaded http.server).

The server answers what a kube-apiserver answers (API concepts, "Efficient detection of changes"):
a PodList with `metadata.resourceVersion`, then for `?watch=true&resourceVersion=N` a chunked
stream of one JSON event per line (ADDED/MODIFIED/DELETED with the whole Pod, BOOKMARK), and an
ERROR event whose object is a `Status` with code 410 ("too old resource version") when N expired.
The pod objects are the reference `kubectl get pod -o json` fixtures (shared/reference/examples/logs).
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes import client as k8s

from rlhealth.schemas import JobStatePoll, ShipperHeartbeat
from rlhealth.sources.pod_watch import PodWatcher
from rlhealth.sources.shipper import FolderShipper

SHARED = Path(os.environ.get("RLHEALTH_SHARED_DIR") or Path(__file__).resolve().parents[1].parent / "shared")
LOGS = SHARED / "reference" / "examples" / "logs"
pytestmark = pytest.mark.skipif(not LOGS.is_dir(), reason="shared reference fixtures not available")
T0 = datetime(2026, 1, 1, tzinfo=UTC)
GONE = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                    "message": "too old resource version: 100 (150)", "reason": "Expired",
                                    "code": 410}}


def _pod(name: str) -> dict:
    text = (LOGS / name).read_text().split("# --- the same container")[0]
    return json.loads("\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#")))


def at_version(pod: dict, rv: int, **status: Any) -> dict:
    p = copy.deepcopy(pod)
    p["metadata"]["resourceVersion"] = str(rv)
    p["status"].update(status)
    return p


if not LOGS.is_dir():  # the fixtures below are read at collection: skip the module, do not error
    pytest.skip("shared reference fixtures not available", allow_module_level=True)
TRAINER = _pod("k8s_pod_oomkilled_crashloop.json.txt")  # rl-trainer-0: CrashLoopBackOff after OOMKilled
ROLLOUT = _pod("k8s_pod_imagepullbackoff.json.txt")  # vllm-rollout-3: Pending, ImagePullBackOff
ROLLOUT_UP = at_version(ROLLOUT, 102, phase="Running", containerStatuses=[
    {"name": "vllm", "ready": True, "restartCount": 0, "image": "vllm/vllm-openai:v0.10.1",
     "imageID": "", "started": True, "state": {"running": {"startedAt": "2026-01-01T00:01:00Z"}}}],
    conditions=[{"type": "Ready", "status": "True"}])
EXTRA = at_version(TRAINER, 101)
EXTRA["metadata"]["name"] = "rl-trainer-1"


class ApiServer:
    """Scripted answers: `lists` (PodList bodies, one per list call) and `watches` (event lists, one per
    watch call; a number instead is an HTTP status to answer with; the last script holds the stream open)."""

    def __init__(self, lists: list[dict], watches: list[list[dict] | int]) -> None:
        self.lists, self.watches = lists, watches
        self.seen: list[tuple[str, dict]] = []
        self.release = threading.Event()
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _json(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                u = urlparse(self.path)
                q = parse_qs(u.query)
                srv.seen.append((u.path, q))
                if u.path != "/api/v1/namespaces/ml/pods" or q.get("labelSelector") != ["job-name=grpo"]:
                    self._json(404, {"kind": "Status", "code": 404})
                    return
                if q.get("watch") != ["true"]:
                    self._json(200, srv.lists.pop(0) if len(srv.lists) > 1 else srv.lists[0])
                    return
                script = srv.watches.pop(0) if len(srv.watches) > 1 else srv.watches[0]
                if isinstance(script, int):
                    self._json(script, {"kind": "Status", "code": script, "message": "etcdserver: leader changed"})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for ev in script:
                    line = json.dumps(ev).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                if not srv.watches[1:] and script is srv.watches[0]:
                    srv.release.wait(10)  # the last script: a quiet, open watch until the test ends
                self.wfile.write(b"0\r\n\r\n")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def configuration(self) -> k8s.Configuration:
        cfg = k8s.Configuration()
        cfg.host = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        return cfg

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def requests(self) -> list[tuple[str, str | None]]:
        return [("watch" if q.get("watch") else "list", (q.get("resourceVersion") or [None])[0]) for _p, q in self.seen]


def pod_list(rv: int, *pods: dict) -> dict:
    return {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": str(rv)}, "items": list(pods)}


def wait_for(cond, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out")
        time.sleep(0.02)


@pytest.fixture()
def servers():
    made: list[ApiServer] = []
    yield lambda *a: made.append(ApiServer(*a)) or made[-1]
    for s in made:
        s.close()


def test_list_then_watch_events_then_410_relists(servers) -> None:
    api = servers(
        [pod_list(100, TRAINER, ROLLOUT), pod_list(200, EXTRA, ROLLOUT_UP)],
        [[{"type": "ADDED", "object": EXTRA},
          {"type": "MODIFIED", "object": ROLLOUT_UP},
          {"type": "DELETED", "object": at_version(TRAINER, 103)},
          {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "140"}}},
          GONE],
         []])
    w = PodWatcher("ml", "job-name=grpo", job_id="grpo", configuration=api.configuration, clock=lambda: T0,
                   backoff_s=0.05).start()
    try:
        wait_for(lambda: w.lists == 2 and w.watches >= 2)
        polls = w.poll()
    finally:
        w.close()
    # list, watch from the list's version, 410 -> list again, watch from the new list's version
    assert api.requests()[:4] == [("list", None), ("watch", "100"), ("list", None), ("watch", "200")]
    assert all(isinstance(p, JobStatePoll) and p.scheduler == "kubernetes" for p in polls)
    sets = [[(s.name, s.phase) for s in p.pod_statuses] for p in polls]
    assert sets == [
        [("rl-trainer-0", "Running"), ("vllm-rollout-3", "Pending")],  # the list
        [("rl-trainer-0", "Running"), ("rl-trainer-1", "Running"), ("vllm-rollout-3", "Pending")],  # ADDED
        [("rl-trainer-0", "Running"), ("rl-trainer-1", "Running"), ("vllm-rollout-3", "Running")],  # MODIFIED
        [("rl-trainer-1", "Running"), ("vllm-rollout-3", "Running")],  # DELETED
        [("rl-trainer-1", "Running"), ("vllm-rollout-3", "Running")],  # the re-list after 410
    ]
    assert polls[1].pod_statuses[0].reasons == ["CrashLoopBackOff", "OOMKilled"]
    assert polls[3].pods == 2 and polls[3].state == "running"
    assert w.counters.errors == {"gone": 1} and w.counters.failed == 0
    # no change since: a tick sends the current set once, from the watch's cache (no API call)
    n = len(api.seen)
    (again,) = w.poll()
    assert again.pods == 2 and len(api.seen) == n


def test_api_errors_back_off_and_reconnect(servers) -> None:
    api = servers([pod_list(100, TRAINER)], [500, 500, [{"type": "MODIFIED", "object": at_version(TRAINER, 101)}],
                                              []])
    w = PodWatcher("ml", "job-name=grpo", configuration=api.configuration, clock=lambda: T0, backoff_s=0.05).start()
    t0 = time.monotonic()
    try:
        wait_for(lambda: w.watches >= 4)
    finally:
        w.close()
    assert time.monotonic() - t0 >= 0.05 + 0.1  # two failures: 0.05 s then 0.1 s of backoff
    assert w.counters.errors == {"api_500": 2} and "500" in (w.counters.last_error or "")
    assert api.requests()[:4] == [("list", None), ("watch", "100"), ("watch", "100"), ("watch", "100")]
    assert w.lists == 1 and w.resource_version == "101"  # a 5xx keeps the version: no re-list


def test_an_unreachable_api_server_is_counted_never_raised() -> None:
    cfg = k8s.Configuration()
    cfg.host = "http://127.0.0.1:9"  # discard port: connection refused
    w = PodWatcher("ml", "job-name=grpo", configuration=cfg, backoff_s=0.05, request_timeout_s=2).start()
    try:
        wait_for(lambda: w.counters.failed >= 2)
        assert w.poll() == []  # nothing known yet: no state poll rather than a made-up one
    finally:
        w.close()
    assert sum(w.counters.errors.values()) >= 2


def test_the_shipper_sends_watch_changes_and_lists_the_source(servers, tmp_path: Path) -> None:
    api = servers([pod_list(100, TRAINER, ROLLOUT)], [[{"type": "MODIFIED", "object": ROLLOUT_UP}], []])
    clock = [T0]
    w = PodWatcher("ml", "job-name=grpo", job_id="grpo", configuration=api.configuration,
                   clock=lambda: clock[0], backoff_s=0.05).start()
    root = tmp_path / "job"
    (root / "logs").mkdir(parents=True)
    sent: list = []
    s = FolderShipper(root, deliver=lambda ev: sent.extend(ev) or True, job_id="grpo", shipper_id="t",
                      clock=lambda: clock[0], state_dir=tmp_path / "state", sources=[w])
    try:
        wait_for(lambda: w.watches >= 2)
        s.tick()
    finally:
        s.close()
    states = [e for e in sent if isinstance(e, JobStatePoll)]
    assert [[p.phase for p in e.pod_statuses] for e in states] == [["Running", "Pending"], ["Running", "Running"]]
    hb = sent[-1]
    assert isinstance(hb, ShipperHeartbeat) and hb.sources == ["k8s-watch:ml/job-name=grpo"]
    assert hb.source_stats[0].received == 2 and w.counters.sent == 2
    assert not w._thread.is_alive()  # close() ends the watch thread
