"""Instructions per judgement, counted by callgrind: a measure of a judgement's CPU that the other
processes on a shared machine do not disturb (wall and CPU times moved by +-20% from run to run at load
4-7 in session 11; an instruction count of the same work is the same every run).

Builds N jobs with `bench/scale.py`'s events (as `bench/judge_all.py`), then runs the worker's tick
body (`_judge_locked`: load, judge, stabilise, export, publish, settle) over every job after a refresh
round, under `valgrind --tool=callgrind` with the instrumentation switched on only for that pass
(`callgrind_control -i on/off`), for each checkout given, alternately:

    python bench/judge_ir.py [--jobs 300] [--ticks 2] CHECKOUT [CHECKOUT ...]

prints `RESULT_IR <checkout> ir_per_judgement=<instructions / judgement> judgements=<n> published=<verdicts sent>`
per run (a refresh round at each judging time: every judgement publishes, the worst case; `--same-times`:
rounds dated as the first, so none does) and
`RESULT_IR_RATIO <second>/<first>=<ratio>` for two checkouts. `--stage core` counts only the core's
`judge_with_recheck` over the same states instead of the worker's pass.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CHILD = r'''
import asyncio, os, subprocess, sys
from datetime import UTC, datetime, timedelta
code, jobs_n, ticks, stage, same = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
sys.path.insert(0, code)
sys.path.insert(0, os.path.join(os.environ["RLHEALTH_BENCH_DIR"]))
import rlhealth  # from `code`
from judge_all import Clock, fold, offline_worker
from rlhealth.runtime import build_core
from rlhealth.schemas import job_key
core = build_core()
t = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
clock = Clock(t)
w = offline_worker(core, clock, state_cache=jobs_n + 1)
jobs = [f"scale-{i:05d}" for i in range(jobs_n)]
fold(w, jobs, t, 1, True)
keys = list(w.tables.job_health)
fold(w, jobs, clock.t, 2, False)
clock.t = t + timedelta(seconds=10)
asyncio.run(w._judge_locked(keys))  # the first judgement of each job (books, series, caches made)
pid = str(os.getpid())
judged = 0
sent_before = w.verdict_topic.sent
for k in range(ticks):
    fold(w, jobs, t if same else clock.t, 3 + k, False)  # a refresh round at the judging time: new evidence times, so
    clock.t = t + timedelta(seconds=10 * (k + 2))  # every judgement publishes (as judge_all's ticks do)
    states = [w._load(key, key.decode()) for key in keys]
    subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
    if stage == "core":
        for s in states:
            core.judge_with_recheck(s, clock.t)
        judged += len(states)
    else:
        asyncio.run(w._judge_locked(keys))
        judged += w._rejudged
    subprocess.run(["callgrind_control", "-i", "off", pid], check=True, capture_output=True)
print("JUDGED", judged, "PUBLISHED", w.verdict_topic.sent - sent_before)
'''


def run(checkout: str, jobs: int, ticks: int, stage: str, keep: str | None = None,
        same: bool = False) -> tuple[float, int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        env = dict(os.environ, PYTHONPATH=checkout, RLHEALTH_BENCH_DIR=str(REPO / "bench"), PYTHONHASHSEED="0")
        p = subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                            sys.executable, "-c", _CHILD, checkout, str(jobs), str(ticks), stage, str(int(same))],
                           capture_output=True, text=True, env=env, cwd=checkout, check=False)
        if p.returncode != 0:
            raise SystemExit(f"{checkout}: failed\n{p.stderr[-3000:]}")
        found = re.search(r"JUDGED (\d+) PUBLISHED (\d+)", p.stdout)
        assert found is not None, p.stdout
        judged, published = int(found.group(1)), int(found.group(2))
        ir = 0
        for name in os.listdir(tmp):
            if name.startswith("cg.out"):
                for line in Path(tmp, name).read_text(errors="replace").splitlines():
                    if line.startswith("summary:") or line.startswith("totals:"):
                        ir = max(ir, int(line.split()[1]))
                if keep:
                    Path(keep).write_bytes(Path(tmp, name).read_bytes())
        return ir / max(judged, 1), judged, published


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkouts", nargs="+")
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--ticks", type=int, default=2)
    ap.add_argument("--stage", choices=("pass", "core"), default="pass")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--same-times", action="store_true", help="refresh rounds dated as the first one: the verdicts' "
                    "key facts do not change, so nothing is published (the other half of a worker's judgements)")
    ap.add_argument("--keep", help="keep the last run's callgrind file here (callgrind_annotate it)")
    args = ap.parse_args()
    got: dict[str, list[float]] = {c: [] for c in args.checkouts}
    for _ in range(args.rounds):
        for c in args.checkouts:
            ir, judged, published = run(c, args.jobs, args.ticks, args.stage, args.keep, args.same_times)
            got[c].append(ir)
            print(f"RESULT_IR {c} stage={args.stage} ir_per_judgement={ir:.0f} judgements={judged} "
                  f"published={published}", flush=True)
    if len(args.checkouts) == 2:
        a, b = (min(got[c]) for c in args.checkouts)
        print(f"RESULT_IR_RATIO stage={args.stage} {args.checkouts[1]}/{args.checkouts[0]}={b / a:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
