"""`gate_rollouts.exact_mean` (gate C's means without Fractions) is `statistics.mean`, value and type."""

from __future__ import annotations


def test_exact_mean_is_statistics_mean() -> None:
    import random
    import statistics

    from rlhealth.agents.gate_rollouts import exact_mean

    rng = random.Random(7)
    cases: list[list] = [[1], [1, 2], [3, 3, 4], [0.1, 0.2, 0.3], [1e308, 1e308], [5e-324, 1.0], [0.0, -0.0],
                         [-0.0], [1.5, -1.5], [0.1] * 3, [float("inf"), 1.0], [1, 2.5]]
    for _ in range(3000):
        k = rng.randint(1, 60)
        kind = rng.random()
        if kind < 0.3:
            cases.append([rng.randint(-50, 50) for _ in range(k)])
        elif kind < 0.6:
            cases.append([rng.choice((0.0, 1.0, 0.5, 0.25)) for _ in range(k)])
        else:
            cases.append([rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30) for _ in range(k)])
    for xs in cases:
        got, want = exact_mean(xs), statistics.mean(xs)
        assert type(got) is type(want) and repr(got) == repr(want), xs
