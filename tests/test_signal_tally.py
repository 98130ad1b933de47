"""SignalTally (a batch's note_signal calls applied per signal at its end) leaves the very state the
same note_signal calls in order leave: held equal on generated call sequences and starting books."""

from __future__ import annotations

import random

from rlhealth.agents.fold_common import clip, note_signal
from rlhealth.agents.signal_tally import SignalTally
from rlhealth.agents.state import MAX_SIGNALS, Ev, JobHealth, SignalStat

SIGNALS = ["vllm_stats", "sglang_stats", "trainer_metrics", "tqdm", "python_exception"]


def _start_state(rnd: random.Random) -> JobHealth:
    state = JobHealth(job_id="j")
    if rnd.random() < 0.15:  # a nearly full book: creation order meets the cap
        for i in range(MAX_SIGNALS - rnd.randint(0, 2)):
            state.signals[f"old{i}"] = SignalStat(count=1)
    for name in rnd.sample(SIGNALS, rnd.randint(0, 3)):
        n_ev = rnd.randint(0, 3)
        evs = [Ev(rnd.choice([None, float(rnd.randint(0, 40))]), "s0", f"old {name} {j}") for j in range(n_ev)]
        tss = [e.ts for e in evs if e.ts is not None]
        state.signals[name] = SignalStat(
            count=n_ev, first_ts=min(tss) if tss else rnd.choice([None, 5.0]),
            last_ts=max(tss) if tss else rnd.choice([None, 50.0]), evidence=evs,
            attempts=rnd.sample(range(20), rnd.randint(0, 16)), role=rnd.choice(["", "engine"]),
            stream="s0")
    return state


def _calls(rnd: random.Random) -> list[tuple[str, float | None, int | None, str, bool]]:
    out = []
    n = rnd.choice([1, 2, 5, 30, 200])
    base = float(rnd.randint(0, 60))
    for _ in range(n):
        ts = None if rnd.random() < 0.05 else base + rnd.choice([0.0, 0.0, 1.0, 2.5, -3.0, 10.0, -0.0])
        if rnd.random() < 0.8:
            base = ts if ts is not None else base
        out.append((rnd.choice(SIGNALS), ts, rnd.choice([None, 0, 1, 1, 1, 2, 17]),
                    rnd.choice(["engine", "engine", "engine", "", "trainer"]), rnd.random() < 0.5))
    return out


def test_tally_equals_note_signal_in_order() -> None:
    rnd = random.Random(20261203)
    checked = 0
    for case in range(3000):
        seed = rnd.getrandbits(32)
        calls = _calls(random.Random(seed))
        texts = [f"line {case} {i} " + "x" * (i % 7) * 100 for i in range(len(calls))]
        one = _start_state(random.Random(seed))
        two = _start_state(random.Random(seed))

        def make_ev(k: int, ts: float | None, texts: list[str] = texts) -> Ev:
            return Ev(ts, "stream-a", clip(texts[k]), "rule", "f.log", k)

        tally = SignalTally("stream-a", make_ev)
        for k, (sig, ts, attempt, role, lazy) in enumerate(calls):
            note_signal(one, sig, make_ev(k, ts), attempt, role)
            tally.note(sig, ts, k if lazy else make_ev(k, ts), attempt, role)
        tally.flush(two)
        assert one.to_bytes() == two.to_bytes(), (case, seed)
        checked += 1
    assert checked == 3000


def test_tally_keeps_the_first_call_order_of_new_signals() -> None:
    state = JobHealth(job_id="j")
    tally = SignalTally("s", lambda k, ts: Ev(ts, "s", str(k)))
    for sig in ("b", "a", "b", "c"):
        tally.note(sig, 1.0, 0, None)
    tally.flush(state)
    assert list(state.signals) == ["b", "a", "c"]
    assert state.signals["b"].count == 2
