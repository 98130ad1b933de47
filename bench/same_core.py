"""Do two checkouts of rlhealth fold the same captures into the same state? (issue #15: the batched
per-matched-line path must leave the core's state, findings and verdicts byte-identical.)

    python bench/same_core.py OTHER_CHECKOUT [CAPTURE_DIR ...] [--dense-mb 40]

Runs, for this checkout and for OTHER_CHECKOUT (e.g. `git archive <commit> | tar -x -C /tmp/old`, with
the built `rlhealth/_fastlines*.so` copied in), each capture through the core twice (dense reading and
the probe's prefiltered reading), in a subprocess per checkout, and compares the msgpack state, the
verdict (minus its run sequence number), the findings and the capture's stats. A verdict field only one
side has (a field added to the wire model) is named, not counted as a difference, as long as every field
both have is equal. Default captures: every
scenario capture (tests/scenarios, shared scenarios), the bundled example, and a dense bench capture
(`bench/probe.py --corpus dense` mix, --dense-mb MB). Prints `RESULT same_core=<yes|no> captures=<n>`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r'''
import hashlib, json, sys
from pathlib import Path
import msgspec
from rlhealth.embedded import run_events
from rlhealth.runtime import build_core
from rlhealth.sources.capture import open_capture
core = build_core(())
out = {}
for path in sys.argv[1:]:
    for prefiltered in (False, True):
        cap = open_capture(Path(path), batch_lines=2000 if prefiltered else 500,
                           prefilter=core.classifier if prefiltered else None)
        found = []
        now = cap.info.captured_at
        state, n_ev, n_f = run_events(core, cap.info.job_id, cap.events(), now,
                                      lambda _j, fs: found.extend(repr(f) for f in fs))
        verdict = core.judge(state, now, seq=0).model_dump(mode="json")
        verdict.pop("produced_at", None)
        digest = lambda b: hashlib.sha256(b).hexdigest()
        out[f"{path} prefiltered={prefiltered}"] = {
            "state": digest(msgspec.msgpack.encode(state)), "verdict": digest(json.dumps(verdict, sort_keys=True).encode()),
            "verdict_fields": {k: digest(json.dumps(x, sort_keys=True).encode()) for k, x in verdict.items()},
            "call": verdict["verdict"], "findings": digest("\n".join(found).encode()), "n_findings": len(found),
            "events": n_ev, "stats": repr(cap.stats)}
print(json.dumps(out))
'''


def _run(checkout: Path, captures: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    p = subprocess.run([sys.executable, "-c", _CHILD, *captures], cwd=str(checkout), env=env, capture_output=True,
                       text=True, check=False)
    if p.returncode != 0:
        raise SystemExit(f"{checkout}: failed\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _same(a: dict, b: dict, added: set[str]) -> bool:
    """Equal outside the verdict, and equal in every verdict field both sides have."""
    skip = ("verdict", "verdict_fields")
    if {k: v for k, v in a.items() if k not in skip} != {k: v for k, v in b.items() if k not in skip}:
        return False
    fa, fb = a["verdict_fields"], b["verdict_fields"]
    added |= set(fa) ^ set(fb)
    return all(fa[k] == fb[k] for k in set(fa) & set(fb))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("other", help="the other checkout's root directory")
    ap.add_argument("captures", nargs="*")
    ap.add_argument("--dense-mb", type=int, default=40)
    args = ap.parse_args()
    captures = list(args.captures)
    if not captures:
        sys.path.insert(0, str(ROOT))
        from tests.scenario_support import shared_dir

        captures = [str(p) for p in sorted((ROOT / "tests" / "scenarios").glob("*/capture"))]
        captures += [str(p) for p in sorted((shared_dir() / "scenarios").glob("*/capture"))]
        captures.append(str(ROOT / "rlhealth" / "examples" / "capture-healthy"))
        sys.path.insert(0, str(ROOT / "bench"))
        from probe import build_capture

        dense = ROOT / "bench" / "out" / f"same_core_{args.dense_mb}mb_dense"
        build_capture(dense, args.dense_mb, corpus="dense")
        captures.append(str(dense))
    mine, theirs = _run(ROOT, captures), _run(Path(args.other).resolve(), captures)
    same = True
    added: set[str] = set()
    for key in sorted(mine):
        a, b = mine[key], theirs.get(key)
        ok = b is not None and _same(a, b, added)
        same &= ok
        print(f"{'same' if ok else 'DIFFERENT':9} {key} call={a['call']} findings={a['n_findings']} events={a['events']}"
              + ("" if ok else f"\n          mine={a}\n          other={b}"))
    if added:
        print(f"verdict fields only one side has (not compared): {', '.join(sorted(added))}")
    print(f"RESULT same_core={'yes' if same else 'no'} captures={len(captures)} "
          f"digest={hashlib.sha256(json.dumps(mine, sort_keys=True).encode()).hexdigest()[:12]}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
