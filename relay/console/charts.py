"""Inline SVG charts drawn on the server (no JavaScript). Numbers only go in; every label is
escaped by the template that embeds the chart's data, and the SVG here is built from numbers
and fixed words."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

# Outcome -> CSS class (the colours live in console.css).
OUTCOMES = ("succeeded", "rejected", "error")


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    outcome: str
    count: int
    hour: int


@dataclass(frozen=True)
class StackedBars:
    width: int
    height: int
    bars: list[Bar]
    max_value: int
    ticks: list[tuple[float, str]]  # (x, label) along the bottom


def stacked_hours(hourly: list[Counter[str]], width: int = 900, height: int = 180) -> StackedBars:
    """24 hourly columns, each stacked by outcome, scaled to the busiest hour."""
    top = max((sum(c.values()) for c in hourly), default=0) or 1
    plot_h = height - 24
    slot = width / max(1, len(hourly))
    bars: list[Bar] = []
    for i, counts in enumerate(hourly):
        y = float(plot_h)
        for outcome in OUTCOMES:
            n = counts.get(outcome, 0)
            if not n:
                continue
            h = n / top * (plot_h - 8)
            y -= h
            bars.append(Bar(i * slot + 2, y, slot - 4, h, outcome, n, i))
    ticks = [(i * slot + slot / 2, f"-{24 - i}h") for i in range(0, 24, 4)]
    return StackedBars(width, height, bars, top, ticks)
