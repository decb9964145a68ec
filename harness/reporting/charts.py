"""The figures of the reports as inline SVG text, drawn with matplotlib (object-oriented API,
SVG canvas, no pyplot; text kept as text so the SVG stays small and searchable).

Every function returns an ``<svg ...>...</svg>`` string (no XML prolog) that an HTML page
can hold inline; the output is deterministic (fixed ``svg.hashsalt``, no date).
"""

from __future__ import annotations

import io
import math
from typing import Mapping, Sequence

from harness.evaluation.metrics import families as metric_families

#: Colours of the series (matplotlib's default cycle, fixed here so reports look alike).
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def _figure(width: float = 5.6, height: float = 3.2):
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    fig.subplots_adjust(left=0.12, right=0.97, bottom=0.16, top=0.95)  # fixed margins: an automatic layout doubles the drawing time
    FigureCanvasSVG(fig)
    return fig, fig.add_subplot(1, 1, 1)


def _svg(fig) -> str:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "harness-report", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    return text[text.index("<svg") :]


def recall_curve(metrics: Mapping[str, float], ks: Sequence[int], families: Sequence[str] | None = None) -> str:
    """``family@k`` against k (one line per family present in ``metrics``; ``families`` None:
    the registry's ``curve`` families, :func:`harness.evaluation.metrics.families`); values in [0, 1]."""
    families = metric_families("curve") if families is None else families
    fig, ax = _figure()
    for i, family in enumerate(families):
        points = [(k, metrics[f"{family}@{k}"]) for k in ks if f"{family}@{k}" in metrics]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=COLOURS[i], label=f"{family}@k")
    ax.set_xlabel("k (retrieved chunks)")
    ax.set_ylabel("mean over queries")
    ax.set_ylim(0, 1.02)
    ax.set_xticks(list(ks))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return _svg(fig)


def size_histogram(tokens: Sequence[int], max_seq_length: int | None, unit: str = "model tokens") -> str:
    """Histogram of chunk sizes (``tokens``, one value per chunk) with the model window
    ``max_seq_length`` drawn as a vertical line; bars past it in red."""
    import numpy as np

    fig, ax = _figure()
    data = np.asarray(list(tokens), dtype=float)
    if data.size:
        edges = np.histogram_bin_edges(data, bins=min(40, max(5, int(math.sqrt(data.size)))))
        counts, edges = np.histogram(data, bins=edges)
        colours = [COLOURS[3] if max_seq_length and left >= max_seq_length else COLOURS[0] for left in edges[:-1]]
        ax.bar(edges[:-1], counts, width=np.diff(edges), align="edge", color=colours, edgecolor="white")
    if max_seq_length:
        ax.axvline(max_seq_length, color=COLOURS[3], linestyle="--", label=f"model window {max_seq_length}")
        ax.legend(loc="upper left", fontsize=8)
    ax.set_xlabel(f"chunk size ({unit})")
    ax.set_ylabel("chunks")
    ax.grid(alpha=0.3, axis="y")
    return _svg(fig)


def miss_bars(counts: Mapping[str, int], k: int) -> str:
    """Horizontal bars: queries missed at ``k`` per miss reason."""
    fig, ax = _figure(height=2.4)
    fig.subplots_adjust(left=0.22, bottom=0.2)
    names = list(counts)
    ax.barh(names[::-1], [counts[n] for n in names][::-1], color=COLOURS[1])
    for y, n in enumerate(names[::-1]):
        ax.text(counts[n], y, f" {counts[n]}", va="center", fontsize=8)
    ax.set_xlabel(f"queries missed at k={k}")
    ax.grid(alpha=0.3, axis="x")
    return _svg(fig)


def lines_by_group(groups: Mapping[str, Sequence[tuple[float, float]]], xlabel: str, ylabel: str) -> str:
    """One line per group of ``(x, y)`` points (sorted by x), e.g. recall@5 against chunk size per chunker."""
    fig, ax = _figure(width=6.0, height=3.4)
    for i, (name, points) in enumerate(groups.items()):
        pts = sorted(points)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=COLOURS[i % len(COLOURS)], label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if groups:
        ax.legend(fontsize=8)
    return _svg(fig)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indexes of the points not dominated when ``x`` (cost) is minimised and ``y`` (quality)
    maximised, ordered by ``x``; a point is dominated when another has ``x' <= x`` and
    ``y' >= y`` with one of them strict. NaN points are never on the front."""
    order = sorted((i for i, (x, y) in enumerate(points) if not (math.isnan(x) or math.isnan(y))), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def pareto_scatter(points: Sequence[tuple[float, float]], labels: Sequence[str], xlabel: str, ylabel: str) -> str:
    """Scatter of ``(cost, quality)`` points with the Pareto front (:func:`pareto_front`) drawn as a step line and labelled."""
    fig, ax = _figure(width=6.0, height=3.4)
    ax.scatter([p[0] for p in points], [p[1] for p in points], color=COLOURS[0], s=18, label="runs")
    front = pareto_front(points)
    if front:
        ax.step([points[i][0] for i in front], [points[i][1] for i in front], where="post", color=COLOURS[3], label="Pareto front")
        middle = (min(p[0] for p in points) + max(p[0] for p in points)) / 2
        for i in front:  # labels point inwards so that none is cut at the edge
            right = points[i][0] > middle
            ax.annotate(labels[i], points[i], fontsize=7, xytext=(-4 if right else 4, -10), textcoords="offset points", ha="right" if right else "left")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return _svg(fig)
