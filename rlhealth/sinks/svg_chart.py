"""Inline SVG charts on one shared time axis, for the incident report. Pure: values in, markup out.

Every chart of a report uses the same `Axis` (same width, margins and time range), so a moment sits
at the same x in every chart and the charts read as one timeline. Each data point is a small circle
with a native `<title>` tooltip (no script); markers are links to anchors elsewhere in the page.
All text is escaped here: series names, titles and tooltips come from logs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
           "#d62728")

# Circles (with their tooltips) drawn per chart; past that every k-th point of each series gets one, so
# a page of weeks of 16 engines stays a few MB (the lines still pass through every point).
MAX_DOTS = 1500

_TICK_STEPS_S = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)


def esc(text: object) -> str:
    """Text for element content and quoted attribute values alike."""
    return escape(str(text), quote=True)


@dataclass(frozen=True, slots=True)
class Axis:
    """The shared time axis: epoch seconds t0..t1 over `width` pixels, plot area between the margins."""

    t0: float
    t1: float
    width: int = 1080
    left: int = 64
    right: int = 16

    @staticmethod
    def spanning(times: Sequence[float], width: int = 1080) -> Axis:
        if not times:
            return Axis(0.0, 60.0, width)
        lo, hi = min(times), max(times)
        pad = max((hi - lo) * 0.02, 30.0)
        return Axis(lo - pad, hi + pad, width)

    def x(self, t: float) -> float:
        span = (self.t1 - self.t0) or 1.0
        return round(self.left + (t - self.t0) / span * (self.width - self.left - self.right), 1)

    def ticks(self, target: int = 8) -> list[tuple[float, str]]:
        span = self.t1 - self.t0
        step = next((s for s in _TICK_STEPS_S if span / s <= target), _TICK_STEPS_S[-1])
        first = math.ceil(self.t0 / step) * step
        fmt = "%m-%d %H:%M" if span > 86400 or step >= 86400 else "%H:%M"
        out = []
        t = first
        while t <= self.t1:
            out.append((self.x(t), datetime.fromtimestamp(t, UTC).strftime(fmt)))
            t += step
        return out


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    points: list[tuple[float, float]]  # (epoch seconds, value), in time order
    color: str
    dashed: bool = False
    step: bool = False  # a counter: hold each value until the next point
    label: str = ""  # the legend's text (default: the name; the full name is its tooltip)


@dataclass(frozen=True, slots=True)
class Marker:
    t: float
    href: str  # an anchor in the page ("#v-12")
    title: str
    css: str  # one of the classes the page's stylesheet defines
    label: str = ""


@dataclass(frozen=True, slots=True)
class Lane:
    name: str
    markers: list[Marker] = field(default_factory=list)


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def si(v: float) -> str:
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    if a >= 100 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.3g}"


def duration(v: float) -> str:
    a = abs(v)
    if a >= 86400:
        return f"{v / 86400:.3g}d"
    if a >= 3600:
        return f"{v / 3600:.3g}h"
    if a >= 60:
        return f"{v / 60:.3g}m"
    return f"{v:.3g}s"


_NICE_DURATIONS_S = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 10800, 14400, 21600, 43200,
                     86400, 172800, 345600, 604800)


def _nice_max(v: float, durations: bool = False) -> float:
    if v <= 0:
        return 1.0
    if durations and v <= _NICE_DURATIONS_S[-1]:
        return float(next(d for d in _NICE_DURATIONS_S if d >= v))
    mag = 10 ** math.floor(math.log10(v))
    return next(m * mag for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if m * mag >= v)


def _segments(points: list[tuple[float, float]]) -> list[list[tuple[float, float]]]:
    """Split a series where it falls silent (a gap far above its usual spacing): no line across the gap."""
    if len(points) < 3:
        return [points] if points else []
    gaps = sorted(b[0] - a[0] for a, b in zip(points, points[1:]))
    limit = max(4 * gaps[len(gaps) // 2], 120.0)
    out, cur = [], [points[0]]
    for a, b in zip(points, points[1:]):
        if b[0] - a[0] > limit:
            out.append(cur)
            cur = []
        cur.append(b)
    out.append(cur)
    return out


def _frame(axis: Axis, height: int, top: int, bottom: int) -> list[str]:
    parts = [f'<rect class="plot" x="{axis.left}" y="{top}" width="{axis.width - axis.left - axis.right}" '
             f'height="{height - top - bottom}"/>']
    for x, label in axis.ticks():
        parts.append(f'<line class="grid" x1="{x}" x2="{x}" y1="{top}" y2="{height - bottom}"/>'
                     f'<text class="tick" x="{x}" y="{height - bottom + 13}" text-anchor="middle">{esc(label)}</text>')
    return parts


def _vmarks(axis: Axis, marks: Sequence[Marker], top: int, bottom_y: float) -> list[str]:
    return [f'<a href="{esc(m.href)}" class="vmark-link"><line class="vmark {esc(m.css)}" x1="{axis.x(m.t)}" '
            f'x2="{axis.x(m.t)}" y1="{top}" y2="{bottom_y}"><title>{esc(m.title)}</title></line></a>'
            for m in marks if axis.t0 <= m.t <= axis.t1]


def line_chart(chart_id: str, title: str, axis: Axis, series: Sequence[Series], *,
               fmt: Callable[[float], str] = si, unit: str = "", vmarks: Sequence[Marker] = (),
               height: int = 150, empty_note: str = "no data in the store for this chart") -> str:
    """One figure: a line per series, a circle per data point, vertical links at the verdict changes."""
    top, bottom = 8, 20
    n_points = sum(len(s.points) for s in series)
    every = max(1, math.ceil(n_points / MAX_DOTS))
    values = [v for s in series for _, v in s.points]
    ymax = _nice_max(max(values), durations=fmt is duration) if values else 1.0
    inner = height - top - bottom

    def y(v: float) -> float:
        return round(top + inner - (v / ymax) * inner, 1) if ymax else float(top + inner)

    n_dots = sum(len(s.points[::every]) for s in series)
    parts = [f'<figure class="chart" id="{esc(chart_id)}" data-points="{n_points}" data-dots="{n_dots}" '
             f'data-series="{len(series)}">',
             f'<figcaption>{esc(title)}{" (" + esc(unit) + ")" if unit else ""}</figcaption>',
             f'<svg width="{axis.width}" height="{height}" viewBox="0 0 {axis.width} {height}" role="img" '
             f'aria-label="{esc(title)}">']
    parts += _frame(axis, height, top, bottom)
    for frac in (0.0, 0.5, 1.0):
        v = ymax * frac
        parts.append(f'<line class="ygrid" x1="{axis.left}" x2="{axis.width - axis.right}" y1="{y(v)}" y2="{y(v)}"/>'
                     f'<text class="tick" x="{axis.left - 4}" y="{y(v) + 4}" text-anchor="end">{esc(fmt(v))}</text>')
    parts += _vmarks(axis, vmarks, top, height - bottom)
    for s in series:
        for seg in _segments(s.points):
            pts: list[tuple[float, float]] = []
            for i, (t, v) in enumerate(seg):
                if s.step and i:
                    pts.append((axis.x(t), y(seg[i - 1][1])))
                pts.append((axis.x(t), y(v)))
            if len(pts) > 1:
                coords = " ".join(f"{a},{b}" for a, b in pts)
                parts.append(f'<polyline class="line{" dashed" if s.dashed else ""}" stroke="{esc(s.color)}" '
                             f'points="{coords}"/>')
        for t, v in s.points[::every]:
            parts.append(f'<circle class="pt" data-series="{esc(s.name)}" cx="{axis.x(t)}" cy="{y(v)}" r="2.2" '
                         f'fill="{esc(s.color)}"><title>{esc(s.name)} · {stamp(t)} · {esc(fmt(v))}'
                         f'{" " + esc(unit) if unit else ""}</title></circle>')
    if every > 1:
        parts.append(f'<text class="empty" x="{axis.width - axis.right - 4}" y="{top + 10}" text-anchor="end">'
                     f'a dot every {every} points</text>')
    if not n_points:
        parts.append(f'<text class="empty" x="{axis.width / 2}" y="{top + inner / 2}" text-anchor="middle">'
                     f'{esc(empty_note)}</text>')
    parts.append("</svg>")
    if series:
        parts.append('<div class="legend">' + "".join(
            f'<span class="key" title="{esc(s.name)}"><i class="swatch{" dashed" if s.dashed else ""}" '
            f'style="border-color:{esc(s.color)}"></i>{esc(s.label or s.name)}</span>' for s in series) + "</div>")
    parts.append("</figure>")
    return "".join(parts)


def lane_chart(chart_id: str, title: str, axis: Axis, lanes: Sequence[Lane], *, vmarks: Sequence[Marker] = ()) -> str:
    """Events as marks on named lanes (findings by severity, verdict changes), each a link."""
    lane_h, top, bottom = 22, 6, 20
    height = top + bottom + lane_h * max(1, len(lanes))
    n = sum(len(lane.markers) for lane in lanes)
    parts = [f'<figure class="chart lanes" id="{esc(chart_id)}" data-points="{n}" data-series="{len(lanes)}">',
             f'<figcaption>{esc(title)}</figcaption>',
             f'<svg width="{axis.width}" height="{height}" viewBox="0 0 {axis.width} {height}" role="img" '
             f'aria-label="{esc(title)}">']
    parts += _frame(axis, height, top, bottom)
    parts += _vmarks(axis, vmarks, top, height - bottom)
    for i, lane in enumerate(lanes):
        cy = top + lane_h * i + lane_h / 2
        parts.append(f'<text class="lane-name" x="{axis.left - 4}" y="{cy + 4}" text-anchor="end">{esc(lane.name)}'
                     f'</text>')
        free_from = -1e9  # a label is drawn only where it does not run into the previous one
        for m in lane.markers:
            x = axis.x(m.t)
            shape = (f'<path class="mark {esc(m.css)}" d="M{x},{cy - 8} l6,4 l-6,4 z"/>' if m.label
                     else f'<rect class="mark {esc(m.css)}" x="{x - 1.5}" y="{cy - 7}" width="3" height="14"/>')
            label = ""
            if m.label and x >= free_from and x + 8 + 6.5 * len(m.label) <= axis.width:
                label = f'<text class="mark-label" x="{x + 7}" y="{cy + 4}">{esc(m.label)}</text>'
                free_from = x + 12 + 6.5 * len(m.label)
            parts.append(f'<a href="{esc(m.href)}">{shape}{label}<title>{esc(m.title)}</title></a>')
    parts.append("</svg></figure>")
    return "".join(parts)


__all__ = ["PALETTE", "Axis", "Lane", "Marker", "Series", "duration", "esc", "lane_chart", "line_chart", "si",
           "stamp"]
