"""Score the shipped rule packs on the real-line corpus (tests/corpus/lines.jsonl).

Every corpus line was copied from a public issue thread or doc page (see tests/corpus/README.md);
its label says what the classifier must make of it:

* ``fault``   - matched by a fault-kind rule (after benign suppression); the kind of the most
  specific such rule must equal ``kind``;
* ``benign`` / ``neutral`` - no fault-kind match at all;
* ``metric``  - a metric rule extracts every field in ``fields`` with that value;
* ``progress`` - a progress rule matches, and extracts ``step`` when the line has one.

"Most specific" fault rule: a rule that is not one of the generic catch-alls (a bare exception
line, a traceback header) wins over the catch-alls; among the rest a rule that names a cause
(oom, nccl, hardware, wedge, engine, ray, infra) wins over one that only says something died;
ties go to rule order. A line matched only by a catch-all counts as kind ``death``.

The thresholds are the acceptance bar of issue #11; the assertion messages carry a per-area
breakdown and the missed lines so a failure says what to fix.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rlhealth.agents.signatures import FAULT_KINDS, Classifier, LineMatch
from rlhealth.rules import load_rules

CORPUS = Path(__file__).parent / "corpus" / "lines.jsonl"

LABELS = ("fault", "benign", "neutral", "metric", "progress")
GENERIC_SIGNALS = frozenset({"python_exception", "traceback_start"})

FAULT_RECALL_MIN = 0.97
FAULT_KIND_MIN = 0.90
FALSE_FAULT_MAX = 0.01
PROGRESS_MIN = 0.95


def load_corpus() -> list[dict]:
    recs = []
    with open(CORPUS, encoding="utf-8") as fh:
        for n, raw in enumerate(fh, 1):
            if raw.strip():
                rec = json.loads(raw)
                rec["_line"] = n
                recs.append(rec)
    return recs


def fault_kind(matches: list[LineMatch]) -> str | None:
    """Kind of the most specific fault-kind match (None: no fault match)."""
    faults = [m for m in matches if m.rule.kind in FAULT_KINDS]
    if not faults:
        return None
    specific = [m for m in faults if m.rule.signal not in GENERIC_SIGNALS]
    if not specific:
        return "death"
    causes = [m for m in specific if m.rule.kind != "death"]
    return (causes or specific)[0].rule.kind


def same_value(want: object, got: object) -> bool:
    if isinstance(want, (int, float)) and isinstance(got, (int, float)) \
            and not isinstance(want, bool) and not isinstance(got, bool):
        return math.isclose(float(want), float(got), rel_tol=1e-9, abs_tol=1e-9)
    return want == got


@dataclass
class Tally:
    total: int = 0
    ok: int = 0
    misses: list[str] = field(default_factory=list)

    def add(self, ok: bool, why: str) -> None:
        self.total += 1
        if ok:
            self.ok += 1
        else:
            self.misses.append(why)

    @property
    def rate(self) -> float:
        return self.ok / self.total if self.total else 1.0


@dataclass
class Score:
    recall: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    kind: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    false_fault: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    metric: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    progress: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))

    @staticmethod
    def overall(by_area: dict[str, Tally]) -> Tally:
        t = Tally()
        for a in by_area.values():
            t.total += a.total
            t.ok += a.ok
            t.misses.extend(a.misses)
        return t

    @staticmethod
    def report(title: str, by_area: dict[str, Tally], limit: int = 40) -> str:
        t = Score.overall(by_area)
        lines = [f"{title}: {t.ok}/{t.total} = {t.rate:.1%}"]
        for area in sorted(by_area):
            a = by_area[area]
            lines.append(f"  {area:<10} {a.ok:>4}/{a.total:<4} {a.rate:7.1%}")
        if t.misses:
            lines.append("  misses:")
            lines.extend(f"    {m}" for m in t.misses[:limit])
            if len(t.misses) > limit:
                lines.append(f"    ... {len(t.misses) - limit} more")
        return "\n".join(lines)


def score(recs: list[dict], clf: Classifier) -> Score:
    texts = [r["text"] for r in recs]
    per_line: dict[int, list[LineMatch]] = defaultdict(list)
    for m in clf.scan(texts):
        per_line[m.index].append(m)
    s = Score()
    for i, r in enumerate(recs):
        ms = per_line.get(i, [])
        area, label = r["area"], r["label"]
        where = f"line {r['_line']} [{area}] {r['text'][:110]!r}"
        rules = ",".join(m.rule.id for m in ms) or "-"
        if label == "fault":
            got = fault_kind(ms)
            s.recall[area].add(got is not None, f"{where} (rules: {rules})")
            s.kind[area].add(got == r["kind"], f"{where} want {r['kind']} got {got} (rules: {rules})")
        elif label in ("benign", "neutral"):
            bad = [m.rule.id for m in ms if m.rule.kind in FAULT_KINDS]
            s.false_fault[area].add(not bad, f"{where} flagged by {bad}")
        elif label == "metric":
            want = r["fields"]
            metric_fields = [m.fields for m in ms if m.rule.kind == "metric"]
            ok = any(all(k in f and same_value(v, f[k]) for k, v in want.items()) for f in metric_fields)
            s.metric[area].add(ok, f"{where} want {want} got {metric_fields}")
        elif label == "progress":
            prog = [m for m in ms if m.rule.kind == "progress"]
            ok = bool(prog)
            if ok and r.get("step") is not None:
                ok = any(same_value(r["step"], m.fields.get("step")) for m in prog)
            got_steps = [m.fields.get("step") for m in prog]
            s.progress[area].add(ok, f"{where} want step {r.get('step')} got {got_steps} (rules: {rules})")
    return s


@pytest.fixture(scope="module")
def corpus() -> list[dict]:
    return load_corpus()


@pytest.fixture(scope="module")
def result(corpus) -> Score:
    return score(corpus, Classifier(load_rules(use_env=False)))


def test_corpus_shape(corpus):
    assert len(corpus) >= 420
    counts = defaultdict(int)
    for r in corpus:
        assert r["label"] in LABELS, r
        assert r["text"] and "\n" not in r["text"], r
        assert r["area"] and r["source"], r
        counts[r["label"]] += 1
        if r["label"] == "fault":
            assert r["kind"] in FAULT_KINDS, r
        if r["label"] == "metric":
            assert r["fields"], r
    assert counts["fault"] >= 200
    assert counts["benign"] + counts["neutral"] >= 80
    assert counts["metric"] >= 60
    assert counts["progress"] >= 60
    texts = [r["text"] for r in corpus]
    assert len(texts) == len(set(texts)), "duplicate corpus lines"


def test_fault_recall(result):
    t = Score.overall(result.recall)
    assert t.rate >= FAULT_RECALL_MIN, Score.report("fault recall", result.recall)


def test_fault_kind(result):
    t = Score.overall(result.kind)
    assert t.rate >= FAULT_KIND_MIN, Score.report("fault kind", result.kind)


def test_false_fault_rate(result):
    t = Score.overall(result.false_fault)
    assert 1 - t.rate <= FALSE_FAULT_MAX, Score.report("benign/neutral not flagged", result.false_fault)


def test_metric_fields(result):
    t = Score.overall(result.metric)
    assert t.rate == 1.0, Score.report("metric fields", result.metric)


def test_progress_steps(result):
    t = Score.overall(result.progress)
    assert t.rate >= PROGRESS_MIN, Score.report("progress", result.progress)


def test_scoring_can_fail():
    """The scorer reads the classifier: with no rules every fault is missed."""
    from rlhealth.agents.signatures import RuleSet

    recs = [{"text": "Fatal Python error: Segmentation fault", "label": "fault", "kind": "death",
             "area": "x", "source": "s", "_line": 1}]
    empty = score(recs, Classifier(RuleSet(rules=())))
    assert Score.overall(empty.recall).rate == 0.0
    full = score(recs, Classifier(load_rules(use_env=False)))
    assert Score.overall(full.recall).rate == 1.0
