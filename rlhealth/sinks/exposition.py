"""Prometheus text format 0.0.4 written by hand, and a small HTTP server for it.

prometheus_client renders every sample in Python at every scrape (`generate_latest`): ~2 s for the
210k series of 10,000 jobs, and several seconds while the worker's judging holds the GIL. The per-job
exporter instead renders a job's sample lines once, when it stores the job's snapshot, with the
helpers here, and a scrape joins the stored text (`rlhealth.sinks.prometheus.JobCollector.render`).
The helpers write exactly what `generate_latest` writes (tests compare the two byte for byte):
label names sorted, label values escaped (backslash, newline, double quote), values through
prometheus_client's own `floatToGoString`.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.core import Metric
from prometheus_client.utils import floatToGoString

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def escape_label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def sample_name(family: Metric) -> str:
    """The name a family's samples (and its HELP/TYPE lines) carry in the text format."""
    return family.name + "_total" if family.type == "counter" else family.name


def header(family: Metric) -> str:
    """The HELP and TYPE lines of a family (gauges and counters only: the job series have no others)."""
    if family.type not in ("gauge", "counter"):
        raise ValueError(f"{family.name}: only gauge and counter families are pre-rendered, not {family.type}")
    name = sample_name(family)
    doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {family.type}\n"


def labels_text(labels: dict[str, str]) -> str:
    """``{a="x",b="y"}`` with the names sorted, as `generate_latest` writes them; "" without labels."""
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in sorted(labels.items())) + "}"


def sample_line(name: str, labels: str, value: float) -> str:
    """One sample line; `labels` as `labels_text` gives it."""
    return f"{name}{labels} {floatToGoString(value)}\n"


class MetricsServer:
    """Serves ``body()`` on every GET path in daemon threads (text format 0.0.4; gzip when asked).

    A Prometheus server asks for gzip: the 13 MB of 10,000 jobs compress to well under 1 MB at
    level 1 in a few tens of milliseconds."""

    def __init__(self, body: Callable[[], bytes], port: int, addr: str = "127.0.0.1") -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                data = body()
                gz = "gzip" in (self.headers.get("Accept-Encoding") or "")
                if gz:
                    data = gzip.compress(data, compresslevel=1)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                if gz:
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass  # one line per scrape would flood the worker's log

        self._server = ThreadingHTTPServer((addr, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="rlhealth-metrics", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()
