"""What `probe --html` costs over `probe`: whole-process wall time, side by side in alternating rounds.

    python bench/report.py [--capture DIR] [--rounds 3]

`probe --html` runs the probe, then a second pass over the capture in 20-line batches that judges it
every ~1/240 of its span (`rlhealth.embedded.judge_along`), then builds the page through an in-memory
DuckDB store. Default capture: the KILL scenario of the README screenshot. Prints the medians and
`RESULT probe_s=<s> probe_html_s=<s> html_over_probe=<ratio> html_bytes=<n>`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str]) -> float:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "rlhealth", "probe", *args, "--format", "json", "--no-progress"],
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode not in (0, 10):
        raise SystemExit(f"probe failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--capture", type=Path, default=ROOT / "tests" / "scenarios" / "resident_idle_engine" / "capture")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    print(f"capture {a.capture}  load average {os.getloadavg()[0]:.2f}", flush=True)
    plain, html = [], []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.html"
        for i in range(a.rounds):
            order = [("probe", plain, []), ("html", html, ["--html", str(out)])]
            for name, times, extra in order if i % 2 == 0 else order[::-1]:
                times.append(run([str(a.capture), *extra]))
                print(f"round {i + 1} {name}: {times[-1]:.2f} s", flush=True)
        size = out.stat().st_size
    p, h = statistics.median(plain), statistics.median(html)
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(f"RESULT probe_s={p:.2f} probe_html_s={h:.2f} html_over_probe={h / p:.2f} html_bytes={size}")


if __name__ == "__main__":
    main()
