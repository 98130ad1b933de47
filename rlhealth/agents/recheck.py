"""When a judgement could next change: the judging time as a value that remembers its comparisons.

For a fixed state the core's judgement depends on the judging time `now` only through comparisons
(`now - ts > limit`, a window `ts >= now - span`, a truthiness test of an age...). Each such
comparison keeps its outcome until `now` reaches the point where its two sides meet. `Moment` is a
float whose value is a linear function of `now` (`value + slope * (t - now)` at time `t`): arithmetic
with plain numbers keeps it a `Moment`, and every comparison records in its `Recheck` the earliest
future time at which that comparison would flip. After a judgement, `Recheck.at` is therefore a time
before which no branch the core took can go the other way: with the same state, the same decisions,
codes, families and evidence, only the continuously growing numbers (ages in the English text) differ.

Operations that are not linear in `now` (a product of two Moments, int(), round(), floor division,
as_integer_ratio...) cannot be followed; they return a plain value and mark the recheck as due at
once (`Recheck.at == now`), so a value the core went on comparing is never lost silently. `float(m)`
is the one deliberate exit, for numbers that are only printed. `Recheck(strict=True)` raises instead
of marking (the tests use it to find such operations).

Pure: no clock is read; the judging time is given.
"""

from __future__ import annotations

import math
from typing import Any

# A crossing computed in floating point may be off by an ulp or two: recheck this much earlier.
MARGIN_S = 1e-3


class UntrackedTimeArithmetic(ArithmeticError):
    """A strict `Recheck` saw an operation on the judging time it cannot follow."""


class Recheck:
    """The earliest judging time at which a comparison made so far could flip."""

    __slots__ = ("at", "now", "strict")

    def __init__(self, now: float, *, strict: bool = False) -> None:
        self.now = now
        self.at = math.inf
        self.strict = strict

    def moment(self) -> Moment:
        """The judging time itself (slope 1)."""
        return Moment(self.now, 1.0, self)

    def crossing(self, gap: float, slope: float) -> None:
        """A comparison of two sides whose difference is `gap` now and changes by `slope` per second."""
        if slope == 0.0:
            return
        t = self.now - gap / slope
        if t >= self.now - MARGIN_S:  # a crossing now or later; an earlier one stays crossed as time goes on
            t = max(t - MARGIN_S, self.now)
            if t < self.at:
                self.at = t

    def lost(self, what: str) -> None:
        if self.strict:
            raise UntrackedTimeArithmetic(what)
        self.at = self.now


def _parts(x: Any) -> tuple[float, float] | None:
    """(value, slope) of a number, None for what is not one."""
    if isinstance(x, Moment):
        return _value(x), x.slope
    if isinstance(x, (int, float)):
        return float(x), 0.0
    return None


_value = float.__float__  # a Moment's (or any float's) plain value


class Moment(float):
    """A number that is `float(self) + slope * (t - now)` at judging time `t` (see the module doc)."""

    __slots__ = ("rec", "slope")
    slope: float
    rec: Recheck

    def __new__(cls, value: float, slope: float, rec: Recheck) -> Moment:
        m = super().__new__(cls, value)
        m.slope, m.rec = slope, rec
        return m

    def _make(self, value: float, slope: float) -> float:
        return Moment(value, slope, self.rec) if slope != 0.0 else value

    # -- linear arithmetic: stays tracked (plain floats first: the judging time minus a timestamp)
    def __add__(self, other: Any) -> Any:
        if type(other) is float:
            return Moment(_value(self) + other, self.slope, self.rec)
        p = _parts(other)
        if p is None:
            return NotImplemented
        return self._make(_value(self) + p[0], self.slope + p[1])

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        if type(other) is float:
            return Moment(_value(self) - other, self.slope, self.rec)
        p = _parts(other)
        if p is None:
            return NotImplemented
        return self._make(_value(self) - p[0], self.slope - p[1])

    def __rsub__(self, other: Any) -> Any:
        if type(other) is float:
            return Moment(other - _value(self), -self.slope, self.rec)
        p = _parts(other)
        if p is None:
            return NotImplemented
        return self._make(p[0] - _value(self), p[1] - self.slope)

    def __mul__(self, other: Any) -> Any:
        p = _parts(other)
        if p is None:
            return NotImplemented
        if p[1] != 0.0:
            self.rec.lost("Moment * Moment")
            return float.__float__(self) * p[0]
        return self._make(float.__float__(self) * p[0], self.slope * p[0])

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> Any:
        p = _parts(other)
        if p is None:
            return NotImplemented
        if p[1] != 0.0:
            self.rec.lost("Moment / Moment")
            return float.__float__(self) / p[0]
        return self._make(float.__float__(self) / p[0], self.slope / p[0])

    def __rtruediv__(self, other: Any) -> Any:
        p = _parts(other)
        if p is None:
            return NotImplemented
        self.rec.lost("number / Moment")
        return p[0] / float.__float__(self)

    def __neg__(self) -> Any:
        return self._make(-float.__float__(self), -self.slope)

    def __pos__(self) -> Any:
        return self

    def __abs__(self) -> Any:
        v = float.__float__(self)
        self.rec.crossing(v, self.slope)
        return self._make(abs(v), self.slope if v >= 0 else -self.slope)

    # -- comparisons: record when they flip
    def _cmp(self, other: Any) -> float | None:
        if type(other) is float:
            gap = _value(self) - other
            self.rec.crossing(gap, self.slope)
            return gap
        p = _parts(other)
        if p is None:
            return None
        gap = _value(self) - p[0]
        self.rec.crossing(gap, self.slope - p[1])
        return gap

    def __lt__(self, other: Any) -> Any:
        gap = self._cmp(other)
        return NotImplemented if gap is None else gap < 0

    def __le__(self, other: Any) -> Any:
        gap = self._cmp(other)
        return NotImplemented if gap is None else gap <= 0

    def __gt__(self, other: Any) -> Any:
        gap = self._cmp(other)
        return NotImplemented if gap is None else gap > 0

    def __ge__(self, other: Any) -> Any:
        gap = self._cmp(other)
        return NotImplemented if gap is None else gap >= 0

    def __eq__(self, other: Any) -> Any:
        gap = self._cmp(other)
        return NotImplemented if gap is None else gap == 0

    def __ne__(self, other: Any) -> Any:
        gap = self._cmp(other)
        return NotImplemented if gap is None else gap != 0

    __hash__ = float.__hash__

    def __bool__(self) -> bool:
        v = float.__float__(self)
        self.rec.crossing(v, self.slope)
        return v != 0.0

    # -- the deliberate exit (printing) and the operations that cannot be followed
    def __float__(self) -> float:
        return float.__float__(self)

    def _lost(self, what: str) -> float:
        self.rec.lost(what)
        return float.__float__(self)

    def __int__(self) -> int:
        return int(self._lost("int()"))

    def __trunc__(self) -> int:
        return math.trunc(self._lost("trunc()"))

    def __floor__(self) -> int:
        return math.floor(self._lost("floor()"))

    def __ceil__(self) -> int:
        return math.ceil(self._lost("ceil()"))

    def __round__(self, ndigits: Any = None) -> Any:
        v = self._lost("round()")
        return round(v) if ndigits is None else round(v, ndigits)

    def __floordiv__(self, other: Any) -> Any:
        return self._lost("//") // other

    def __rfloordiv__(self, other: Any) -> Any:
        return other // self._lost("//")

    def __mod__(self, other: Any) -> Any:
        return self._lost("%") % other

    def __rmod__(self, other: Any) -> Any:
        return other % self._lost("%")

    def __divmod__(self, other: Any) -> Any:
        return divmod(self._lost("divmod()"), other)

    def __pow__(self, other: Any, mod: Any = None) -> Any:
        return pow(self._lost("**"), other, mod)

    def __rpow__(self, other: Any, mod: Any = None) -> Any:
        return pow(other, self._lost("**"), mod)

    def as_integer_ratio(self) -> tuple[int, int]:
        return self._lost("as_integer_ratio()").as_integer_ratio()

    def __reduce__(self) -> Any:
        return (float, (float.__float__(self),))


def plain(x: Any) -> Any:
    """`x` without tracking (a Moment as its float value), for values that leave the judgement."""
    return float.__float__(x) if isinstance(x, Moment) else x


__all__ = ["MARGIN_S", "Moment", "Recheck", "UntrackedTimeArithmetic", "plain"]
