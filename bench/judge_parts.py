"""Where one judgement's CPU goes, stage by stage, in process (no broker, no profiler).

Builds N jobs with `bench/scale.py`'s events (two rounds folded, as `bench/judge_all.py` does), then
times each stage of the worker's judgement (`JudgingPass._judge_key` and the core's
`judge_with_recheck`) over all N decoded states, one stage at a time, `--repeat` times, and prints the
best CPU time per judgement of each stage (the least disturbed by other processes on a shared
machine; cProfile's per-call cost inflated the small functions several-fold). Stages:

    decode / encode      JobHealth.from_bytes / to_bytes of the job's state
    context              build_context (with a Recheck) + restart_burn
    gates                gate_a, gate_b, gate_c
    decide               verdict.decide (the typed decisions and their English)
    event_time           the core's model_copy of the verdict's event time and age
    metrics              the core's _metrics
    core                 judge_with_recheck, whole (the sum of the five above, measured at once)
    exporter             Exporter.update (rows and their text)
    captured             raw.model_copy(captured=...)
    facts                facts_digest(key_facts(verdict))
    seq_copy             verdict.model_copy(seq=...)
    dump                 out.model_dump(mode="json") + orjson.dumps
    book                 VerdictBook.published(...).to_bytes(out_json) + BookFacts.of
    point                as_of_verdict + metrics_point + encode (once per metrics_every_secs)

    python bench/judge_parts.py [--jobs 2000] [--repeat 5] [--code DIR]

Ends with `RESULT jobs=<n> <stage>_us=<best us a judgement> ... worker_us=<sum of the worker's stages>`.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CODE = Path(sys.argv[sys.argv.index("--code") + 1]) if "--code" in sys.argv else REPO
sys.path.insert(0, str(CODE))
sys.path.insert(0, str(REPO / "bench"))
importlib.import_module("rlhealth")

import orjson  # noqa: E402
from judge_all import Clock, fold, offline_worker  # noqa: E402

from rlhealth.agents import verdict as verdict_mod  # noqa: E402
from rlhealth.agents.context import build_context  # noqa: E402
from rlhealth.agents.core import as_of_verdict  # noqa: E402
from rlhealth.agents.gate_liveness import gate_a  # noqa: E402
from rlhealth.agents.gate_resources import gate_b  # noqa: E402
from rlhealth.agents.gate_rollouts import gate_c  # noqa: E402
from rlhealth.agents.recheck import Recheck  # noqa: E402
from rlhealth.agents.restarts import restart_burn  # noqa: E402
from rlhealth.agents.stability import key_facts  # noqa: E402
from rlhealth.runtime import build_core  # noqa: E402
from rlhealth.schemas import encode, job_key  # noqa: E402
from rlhealth.sinks.evidence_records import metrics_point  # noqa: E402
from rlhealth.streams.tables import BookFacts, VerdictBook, facts_digest  # noqa: E402

WORKER_STAGES = ("decode", "core", "exporter", "captured", "facts", "seq_copy", "dump", "book", "point")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--code", help="import rlhealth from this checkout")
    args = ap.parse_args()
    core = build_core()
    t0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    clock = Clock(t0)
    w = offline_worker(core, clock, state_cache=args.jobs + 1)
    jobs = [f"scale-{i:05d}" for i in range(args.jobs)]
    fold(w, jobs, t0, 1, True)
    fold(w, jobs, t0, 2, False)
    now = t0 + timedelta(seconds=10)
    keys = [job_key(j) for j in jobs]
    raws = [w.tables.job_health[k] for k in keys]
    states = [type(core.new_state(j)).from_bytes(r) for j, r in zip(jobs, raws, strict=True)]
    n = len(states)

    # the intermediate values each stage starts from, made once
    ctxs = []
    for s in states:
        rec = Recheck(now.timestamp())
        ctx = build_context(s, now, core.throughput, core.catalog, recheck=rec)
        ctxs.append((ctx, restart_burn(ctx)))
    gated = [(gate_a(c, r),) for c, r in ctxs]
    gated = [(a, gate_b(c, a), gate_c(c)) for (a,), (c, r) in zip(gated, ctxs, strict=True)]
    decided = [verdict_mod.decide(c, a, b, cc, r, s.job_id, now, core.rule_packs, 0)
               for (c, r), (a, b, cc), s in zip(ctxs, gated, states, strict=True)]
    judged = [core.judge_with_recheck(s, now) for s in states]
    verdicts = [v.model_copy(update={"captured": "stream: bench"}) for v, _, _ in judged]
    outs = [v.model_copy(update={"seq": 7}) for v in verdicts]
    out_jsons = [o.model_dump(mode="json") for o in outs]
    facts = [facts_digest(key_facts(v)) for v in verdicts]

    def st_decode() -> None:
        cls = type(states[0])
        for r in raws:
            cls.from_bytes(r)

    def st_encode() -> None:
        for s in states:
            s.to_bytes()

    def st_context() -> None:
        for s in states:
            rec = Recheck(now.timestamp())
            restart_burn(build_context(s, now, core.throughput, core.catalog, recheck=rec))

    def st_gates() -> None:
        for c, r in ctxs:
            a = gate_a(c, r)
            gate_b(c, a)
            gate_c(c)

    def st_decide() -> None:
        for (c, r), (a, b, cc), s in zip(ctxs, gated, states, strict=True):
            verdict_mod.decide(c, a, b, cc, r, s.job_id, now, core.rule_packs, 0)

    def st_event_time() -> None:
        for v, s in zip(decided, states, strict=True):
            covered = datetime.fromtimestamp(s.last_event_ts, UTC)
            v.model_copy(update={"event_time": covered, "age_s": round((now - covered).total_seconds(), 3)})

    def st_metrics() -> None:
        for (c, r), s, (v, _, _) in zip(ctxs, states, judged, strict=True):
            core._metrics(c, r, s, now, v)

    def st_core() -> None:
        for s in states:
            core.judge_with_recheck(s, now)

    def st_exporter() -> None:
        for v, m, _ in judged:
            w.exporter.update(m, v)

    def st_captured() -> None:
        for v, _, _ in judged:
            v.model_copy(update={"captured": "stream: bench"})

    def st_facts() -> None:
        for v in verdicts:
            facts_digest(key_facts(v))

    def st_seq_copy() -> None:
        for v in verdicts:
            v.model_copy(update={"seq": 7})

    def st_dump() -> None:
        for o in outs:
            orjson.dumps(o.model_dump(mode="json"))

    def st_book() -> None:
        for o, j, f in zip(outs, out_jsons, facts, strict=True):
            book = VerdictBook.published(o, 1.0, f, None, None)
            BookFacts.of(book, book.to_bytes(j))

    def st_point() -> None:
        for v, (_, m, _) in zip(verdicts, judged, strict=True):
            encode(metrics_point(as_of_verdict(m, v)))

    stages: dict[str, Callable[[], None]] = {
        "decode": st_decode, "encode": st_encode, "context": st_context, "gates": st_gates, "decide": st_decide,
        "event_time": st_event_time, "metrics": st_metrics, "core": st_core, "exporter": st_exporter,
        "captured": st_captured, "facts": st_facts, "seq_copy": st_seq_copy, "dump": st_dump, "book": st_book,
        "point": st_point}
    best: dict[str, float] = {name: float("inf") for name in stages}
    gc.collect()
    gc.freeze()  # the states and intermediates: a full collection must not walk them inside a stage
    for _ in range(args.repeat):
        for name, fn in stages.items():
            c = time.process_time()
            fn()
            best[name] = min(best[name], (time.process_time() - c) / n * 1e6)
    for name, us in best.items():
        print(f"{name:12s} {us:8.1f} us")
    worker = sum(best[s] for s in WORKER_STAGES)
    print("RESULT jobs=%d " % n + " ".join(f"{k}_us={v:.1f}" for k, v in best.items()) + f" worker_us={worker:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
