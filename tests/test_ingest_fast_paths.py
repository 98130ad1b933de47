"""The shortcuts of the dense-log fold (issue #15) give what the plain code gives: a batch's walks back to a
stamped line reusing earlier walks, the engine-stats value conversion, the median step time without
restart flags. Explicit clocks, no I/O; the whole-capture check is bench/same_core.py."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlhealth.agents import fold_common, ingest, training_time

NOW = datetime(2026, 10, 14, 17, 0, tzinfo=UTC)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# a stamped line, an unstamped one (tqdm bar, traceback body), an empty one (not read by a prefiltering reader)
_LINES = ["2026-10-14 09:27:4{} | INFO | x", "Training Step Progress:  9%|  | 19/200", "", "  File \"a.py\", line 3"]


@st.composite
def batches(draw):
    n = draw(st.integers(1, 60))
    kinds = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    lines = [_LINES[k].format(i % 10) for i, k in enumerate(kinds)]
    explicit = draw(st.one_of(st.none(), st.lists(st.sampled_from([None, None, None, NOW]), min_size=n, max_size=n)))
    # the walks start at matched lines, in line order
    starts = sorted(set(draw(st.lists(st.integers(0, n - 1), max_size=n))))
    return lines, explicit, starts


@SETTINGS
@given(batches())
def test_walks_that_reuse_earlier_walks_find_the_same_time(batch) -> None:
    lines, explicit, starts = batch
    memo: dict = {}
    walked: dict = {}
    for index in starts:
        plain = ingest._line_time(lines, index, NOW, {}, explicit)
        assert ingest._line_time(lines, index, NOW, memo, explicit, walked) == plain, index


def test_a_walk_stops_at_an_earlier_walk_inside_its_window_and_not_beyond() -> None:
    stamped = "2026-10-14 09:27:40 | INFO | x"
    bar = "Training Step Progress:  9%|  | 19/200"
    lines = [stamped] + [bar] * 20
    walked: dict = {}
    memo: dict = {}
    want = datetime(2026, 10, 14, 9, 27, 40, tzinfo=UTC)
    assert ingest._line_time(lines, 5, NOW, memo, None, walked) == want
    assert walked[5] == (want, 0)
    # the window is the line and the 11 before it (TIME_LOOKBACK_LINES = 12 lines)
    assert ingest._line_time(lines, 11, NOW, memo, None, walked) == want  # line 0 is 11 back: inside
    assert ingest._line_time(lines, 12, NOW, memo, None, walked) is None  # 12 back: outside
    assert ingest._line_time(lines, 12, NOW, {}, None) is None


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**400, 10**400), st.none(),
                 st.text(max_size=6), st.booleans()))
def test_finite_or_zero_is_float_or_zero(v) -> None:
    want = fold_common.to_float(v) or 0.0
    got = fold_common.finite_or_zero(v)
    assert got == want and type(got) is type(want) and math.copysign(1, got) == math.copysign(1, want)


@given(st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 1e4), st.integers(1, 5)), max_size=80),
       st.lists(st.floats(0, 1e6), max_size=4))
def test_typical_step_with_and_without_restarts(raw, restarts) -> None:
    advances = [(a, a + d, n) for a, d, n in raw]
    restarts = sorted(restarts)
    flags = [training_time._restart_within(restarts, a, b) for a, b, _ in advances]
    kept = sorted((b - a) / n for (a, b, n), r in zip(advances, flags, strict=True) if not r)
    want = None if len(kept) < training_time.MIN_TYPICAL_SAMPLES else (
        kept[len(kept) // 2] if len(kept) % 2 else (kept[len(kept) // 2 - 1] + kept[len(kept) // 2]) / 2)
    assert training_time._typical(advances, flags, None) == want
