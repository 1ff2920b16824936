"""The lateness charts of the dashboard: a histogram of first-attempt start lateness
and a scatter over time, as inline SVG geometry (templates draw the shapes)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from cronwheel.observability.lateness import (
    BUCKETS_S,
    STARTED_STATES,
    first_attempt_lateness_s,
    objective_ms,
)
from cronwheel.store.protocol import ApiStore
from cronwheel.web.ids import ids_for

from .data import CHART_SAMPLE, fmt_ms, fmt_utc


@dataclass(slots=True)
class Bar:
    x: float
    y: float
    w: float
    h: float
    label: str
    count: int
    over: bool


@dataclass(slots=True)
class Point:
    x: float
    y: float
    over: bool
    title: str


@dataclass(slots=True)
class Charts:
    bars: list[Bar]
    points: list[Point]
    objective_y: float
    y_ticks: list[tuple[float, str]]
    span: str
    samples: int
    width: int = 380
    height: int = 130


_BUCKET_LABELS = ["1ms", "2.5", "5", "10", "25", "50", "100", "200", "500"]
_BUCKET_LABELS += ["1s", "2.5s", "5s", "10s", "30s", "60s", ">60s"]
_LOG_MIN, _LOG_MAX = math.log10(0.0001), math.log10(60.0)  # 0.1 ms .. 60 s


def _log_y(seconds: float, top: float, height: float) -> float:
    v = math.log10(min(max(seconds, 0.0001), 60.0))
    return top + height - (v - _LOG_MIN) / (_LOG_MAX - _LOG_MIN) * height


def charts(store: ApiStore, namespace: str | None) -> Charts:
    """The lateness charts of ``namespace``'s firings (None: every namespace's, for a
    cluster token)."""
    recent = store.list_firings(namespace=namespace, states=STARTED_STATES, limit=CHART_SAMPLE)
    samples = [(f, max(0.0, s)) for f in recent if (s := first_attempt_lateness_s(f)) is not None]
    goal_s = objective_ms() / 1000
    counts = [0] * (len(BUCKETS_S) + 1)
    for _, s in samples:
        counts[next((i for i, b in enumerate(BUCKETS_S) if s <= b), len(BUCKETS_S))] += 1
    width, height, top, bottom = 380, 130, 14, 22
    plot_h = height - top - bottom
    slot = width / len(counts)
    peak = max(counts) or 1
    bars = []
    for i, c in enumerate(counts):
        h = plot_h * c / peak
        bound = BUCKETS_S[i] if i < len(BUCKETS_S) else math.inf
        bars.append(
            Bar(
                x=round(i * slot + 1, 1),
                y=round(top + plot_h - h, 1),
                w=round(slot - 2, 1),
                h=round(h, 1),
                label=_BUCKET_LABELS[i],
                count=c,
                over=bound > goal_s,
            )
        )
    points: list[Point] = []
    span = "no finished firings yet"
    timed = sorted(
        ((f.started_at, s, f) for f, s in samples if f.started_at is not None),
        key=lambda x: x[0],
    )
    left, plot_w = 44, width - 50
    if timed:
        ids = ids_for(store)

        def shown(internal: int) -> int:
            return ids.encode("firing", internal)

        t0, t1 = timed[0][0], timed[-1][0]
        total = max((t1 - t0).total_seconds(), 1e-6)
        for started, s, f in timed:
            x = left + (started - t0).total_seconds() / total * plot_w if len(timed) > 1 else left
            points.append(
                Point(
                    x=round(x, 1),
                    y=round(_log_y(s, top, plot_h), 1),
                    over=s > goal_s,
                    title=f"{f.job_name} #{shown(f.id)}: {fmt_ms(s * 1000)} late",
                )
            )
        span = f"{fmt_utc(t0)[11:19]} – {fmt_utc(t1)[11:19]} UTC"
    ticks = [(round(_log_y(v, top, plot_h), 1), lbl) for v, lbl in _TICKS]
    return Charts(
        bars=bars,
        points=points,
        objective_y=round(_log_y(goal_s, top, plot_h), 1),
        y_ticks=ticks,
        span=span,
        samples=len(samples),
    )


_TICKS = [(0.001, "1 ms"), (0.01, "10 ms"), (0.1, "100 ms"), (1.0, "1 s"), (10.0, "10 s")]
