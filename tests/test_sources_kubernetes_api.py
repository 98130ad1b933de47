"""kubernetes_api.pod_statuses against a local HTTP server answering real-shaped PodLists."""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes import client as k8s

from rlhealth.sources.kubernetes_api import pod_statuses

SHARED = Path(os.environ.get("RLHEALTH_SHARED_DIR") or Path(__file__).resolve().parents[1].parent / "shared")
LOGS = SHARED / "reference" / "examples" / "logs"
pytestmark = pytest.mark.skipif(not LOGS.is_dir(), reason="shared reference fixtures not available")


def _pod(name: str) -> dict:
    text = (LOGS / name).read_text().split("# --- the same container")[0]
    return json.loads("\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#")))


@pytest.fixture()
def server():
    seen: list[tuple[str, dict]] = []
    body = json.dumps({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "42"},
                       "items": [_pod("k8s_pod_oomkilled_crashloop.json.txt"),
                                 _pod("k8s_pod_imagepullbackoff.json.txt")]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            u = urlparse(self.path)
            seen.append((u.path, parse_qs(u.query)))
            if u.path != "/api/v1/namespaces/ml/pods":
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a) -> None:
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield httpd, seen
    httpd.shutdown()
    httpd.server_close()


def test_pod_statuses_from_api(server) -> None:
    httpd, seen = server
    cfg = k8s.Configuration()
    cfg.host = f"http://127.0.0.1:{httpd.server_address[1]}"
    now = datetime(2026, 1, 1, tzinfo=UTC)
    poll = pod_statuses("ml", "job-name=grpo-qwen7b", job_id="grpo-qwen7b", configuration=cfg, clock=lambda: now)
    assert seen[0] == ("/api/v1/namespaces/ml/pods", {"labelSelector": ["job-name=grpo-qwen7b"]})
    assert poll.job_id == "grpo-qwen7b" and poll.event_time == now and poll.scheduler == "kubernetes"
    assert poll.pods == 2 and poll.state == "running"
    trainer, vllm = poll.pod_statuses
    assert trainer.name == "rl-trainer-0" and trainer.reasons == ["CrashLoopBackOff", "OOMKilled"]
    assert trainer.restart_count == 3 and trainer.exit_code == 137 and trainer.ready is False
    assert vllm.name == "vllm-rollout-3" and vllm.phase == "Pending" and vllm.reasons == ["ImagePullBackOff"]


def test_api_error_propagates(server) -> None:
    httpd, _seen = server
    cfg = k8s.Configuration()
    cfg.host = f"http://127.0.0.1:{httpd.server_address[1]}"
    with pytest.raises(k8s.ApiException):
        pod_statuses("other-ns", "x=y", configuration=cfg)
