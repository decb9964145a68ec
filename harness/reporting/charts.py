"""Every figure the project draws, from one set of drawing functions, in two formats.

* PNG files logged with every run (MLflow artifacts): :func:`chunk_size_figure`
  (``chunk_sizes.png``), :func:`rank_curve_figure` (``recall_at_k.png``), both from
  :func:`run_figures`, and a sweep's :func:`objective_figure` (``sweep_objective.png``).
* Inline SVG text for the HTML reports (:mod:`harness.reporting.html`):
  :func:`size_histogram`, :func:`recall_curve`, :func:`miss_bars`, :func:`lines_by_group`,
  :func:`pareto_scatter`; each returns an ``<svg ...>...</svg>`` string (no XML prolog)
  that a page holds inline; deterministic (fixed ``svg.hashsalt``, no date), text kept as
  text so the SVG stays small and searchable.

The chunk-size histogram and the metric-against-k curve are drawn by one function each
(:func:`_draw_histogram` over the bins of :func:`histogram`, :func:`_draw_curve`), whatever
the format. Drawn with matplotlib's object-oriented API on the Agg or SVG canvas (no pyplot,
no display, no global backend switch); matplotlib is imported only when a figure is drawn
(~0.5-1 s the first time in a process, see :func:`preload`).
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import IO, Mapping, Sequence

from harness.evaluation.metrics import families as metric_families

#: Most bins a histogram gets (numpy's "auto" rule, capped so small plots stay legible).
MAX_BINS = 40

#: Metric families drawn against k (:func:`rank_curve_figure`, :func:`recall_curve`), when present:
#: the registry's ``curve`` families (:func:`harness.evaluation.metrics.families`).
CURVE_FAMILIES = metric_families("curve")

#: Colours of the series (matplotlib's default cycle, fixed here so reports look alike).
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def histogram(values: Sequence[float], max_bins: int = MAX_BINS) -> dict:
    """Histogram of ``values``: numpy's ``"auto"`` bin edges, at most ``max_bins`` bins.

    Returns:
        ``{"n": len(values), "edges": [b_0, ..., b_m], "counts": [c_1, ..., c_m]}``; bins are
        half-open ``[b_i, b_{i+1})`` except the last, which includes its right edge (numpy's
        convention), so ``sum(counts) == n``. Empty input gives empty edges and counts.

    Raises:
        ValueError: ``max_bins`` < 1.
    """
    import numpy as np

    if max_bins < 1:
        raise ValueError(f"max_bins must be >= 1, got {max_bins}")
    data = np.asarray(list(values), dtype=float)
    if data.size == 0:
        return {"n": 0, "edges": [], "counts": []}
    edges = np.histogram_bin_edges(data, bins="auto")
    if len(edges) - 1 > max_bins:
        edges = np.histogram_bin_edges(data, bins=max_bins)
    counts, edges = np.histogram(data, bins=edges)
    return {"n": int(data.size), "edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def preload() -> None:
    """Import matplotlib's figure module and its Agg and SVG canvases now (about 0.5 s the
    first time in a process, nothing later), e.g. in the tracking worker while the job
    embeds, so that the first figure does not pay for them. The modules stay for the
    process (:func:`harness.runtime.long_lived`)."""
    from harness.runtime import long_lived

    with long_lived("matplotlib"):
        import matplotlib.backends.backend_agg  # noqa: F401
        import matplotlib.backends.backend_svg  # noqa: F401
        import matplotlib.figure  # noqa: F401


def _figure(n_axes: int = 1, width: float = 6.4, height: float = 3.6, layout: str | None = None, svg: bool = False):
    """A figure with ``n_axes`` side-by-side axes on an Agg (PNG) or SVG canvas. Fixed
    margins by default: matplotlib's automatic layouts double the drawing time."""
    preload()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * n_axes, height), dpi=100, layout=layout)
    if svg:
        from matplotlib.backends.backend_svg import FigureCanvasSVG

        FigureCanvasSVG(fig)
        if layout is None:
            fig.subplots_adjust(left=0.12, right=0.97, bottom=0.16, top=0.95)
    else:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
        if layout is None:
            fig.subplots_adjust(left=0.08 / n_axes + 0.02, right=0.98, bottom=0.14, top=0.88, wspace=0.22)
    return fig, [fig.add_subplot(1, n_axes, i + 1) for i in range(n_axes)]


def _svg(fig) -> str:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "harness-report", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    return text[text.index("<svg") :]


def _draw_histogram(ax, hist: dict, xlabel: str, limit: float | None = None, limit_label: str = "") -> None:
    """Draw a :func:`histogram` on ``ax``, with ``limit`` (e.g. the model window) as a dashed line."""
    if not hist["counts"]:
        ax.text(0.5, 0.5, "no chunks", ha="center", va="center", transform=ax.transAxes)
    else:
        edges = hist["edges"]
        ax.stairs(hist["counts"], edges, fill=True, alpha=0.8)
        if limit is not None and edges[0] <= limit * 1.5:
            ax.axvline(limit, color="tab:red", linestyle="--", label=limit_label)
            ax.legend(loc="upper right", fontsize="small")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("chunks")


def _draw_curve(ax, metrics: Mapping[str, float], ks: Sequence[int], families: Sequence[str] = CURVE_FAMILIES) -> list[str]:
    """Draw ``family@k`` against ``ks`` for each family with a value at every k; returns those drawn."""
    drawn = []
    for family in families:
        if all(f"{family}@{k}" in metrics for k in ks):
            ax.plot(list(ks), [metrics[f"{family}@{k}"] for k in ks], marker="o", label=f"{family}@k")
            drawn.append(family)
    ax.set_xlabel("k (chunks retrieved)")
    ax.set_ylabel("mean over queries")
    ax.set_xticks(list(ks))
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    return drawn


def chunk_size_figure(
    chars: Sequence[int],
    path: str | Path | IO[bytes],
    tokens: Sequence[int] | None = None,
    max_seq_length: int | None = None,
    title: str = "",
) -> dict:
    """Write a PNG histogram of chunk sizes in characters (and model tokens when given).

    Args:
        chars: source characters per chunk.
        path: PNG file to write (a path or a binary file object).
        tokens: tokens of each chunk's embedded text under the embedding model's tokenizer
            (special tokens included), same order as ``chars``; None draws one panel.
        max_seq_length: the model window, drawn as a dashed line on the token panel.
        title: figure title (e.g. the run name).

    Returns:
        The histogram data: ``{"n_chunks": n, "chars": histogram(chars)[, "tokens": histogram(tokens)]}``
        (see :func:`histogram`).

    Raises:
        ValueError: ``tokens`` given with another length than ``chars``.
    """
    if tokens is not None and len(tokens) != len(chars):
        raise ValueError(f"tokens has {len(tokens)} values but chars has {len(chars)}; they must describe the same chunks")
    data = {"n_chunks": len(chars), "chars": histogram(chars)}
    if tokens is not None:
        data["tokens"] = histogram(tokens)
    fig, axes = _figure(2 if tokens is not None else 1)
    _draw_histogram(axes[0], data["chars"], "characters per chunk")
    if tokens is not None:
        _draw_histogram(axes[1], data["tokens"], "model tokens per chunk", max_seq_length, f"model window ({max_seq_length})")
    fig.suptitle(f"{title}  ({len(chars)} chunks)" if title else f"{len(chars)} chunks")
    fig.savefig(str(path) if isinstance(path, (str, Path)) else path, format="png")
    return data


def rank_curve_figure(metrics: Mapping[str, float], ks: Sequence[int], path: str | Path | IO[bytes], title: str = "") -> list[str]:
    """Write a PNG of mean ``recall@k``, ``precision@k`` and ``iou@k`` against k.

    Args:
        metrics: mean metrics by name (``{"recall@5": 0.71, ...}``); families without a
            value at every k are left out.
        ks: the rank cut-offs, drawn in ascending order.
        path: PNG file to write (a path or a binary file object).
        title: figure title.

    Returns:
        The families drawn.

    Raises:
        ValueError: ``ks`` is empty or ``metrics`` has no ``recall@k`` for some k.
    """
    ks = sorted(set(int(k) for k in ks))
    if not ks:
        raise ValueError("ks must name at least one rank cut-off")
    missing = [k for k in ks if f"recall@{k}" not in metrics]
    if missing:
        raise ValueError(f"metrics has no recall@k for k={missing}")
    fig, (ax,) = _figure(1)
    drawn = _draw_curve(ax, metrics, ks)
    if title:
        ax.set_title(title)
    fig.savefig(str(path) if isinstance(path, (str, Path)) else path, format="png")
    return drawn


def run_figures(
    chars: list[int], tokens: list[int], max_seq_length: int | None, metrics: Mapping[str, float], ks: list[int], title: str
) -> dict[str, bytes | str]:
    """A run's figure artifacts: ``{"chunk_sizes.png": PNG bytes, "recall_at_k.png": PNG bytes,
    "chunk_sizes.json": the histogram data as JSON text}`` (:func:`chunk_size_figure` of
    ``chars`` and model ``tokens`` per chunk with the window ``max_seq_length`` marked;
    :func:`rank_curve_figure` of ``metrics`` such as ``recall@5`` against ``ks``)."""
    sizes_png, curve_png = io.BytesIO(), io.BytesIO()
    sizes = chunk_size_figure(chars, sizes_png, tokens=tokens, max_seq_length=max_seq_length, title=title)
    rank_curve_figure(dict(metrics), ks, curve_png, title=title)
    return {
        "chunk_sizes.png": sizes_png.getvalue(),
        "recall_at_k.png": curve_png.getvalue(),
        "chunk_sizes.json": json.dumps(sizes, indent=2, sort_keys=True, default=float),
    }


def objective_figure(
    labels: Sequence[str],
    values: Sequence[float],
    objective: str,
    path: str | Path | IO[bytes],
    best: int | None = None,
    notes: Sequence[str] | None = None,
    title: str = "",
) -> None:
    """Write a PNG bar chart of one objective per sweep job (a sweep's parent run).

    Args:
        labels: one label per bar (e.g. ``"3 recursive-400-0-faiss"``).
        values: the objective per bar (NaN for a job without a value: no bar).
        objective: metric name, for the axis label.
        path: PNG file to write (a path or a binary file object).
        best: index of the bar to highlight, or None.
        notes: optional text per bar written at its foot (e.g. ``FAILED``), "" for none.
        title: figure title.

    Raises:
        ValueError: ``labels``, ``values`` (and ``notes``) differ in length.
    """
    if len(labels) != len(values) or (notes is not None and len(notes) != len(values)):
        raise ValueError(f"{len(labels)} labels, {len(values)} values and {len(notes or [])} notes must match")
    fig, (ax,) = _figure(1, width=max(6.4, 0.45 * len(labels) + 2), height=4.8, layout="constrained")
    colors = ["tab:orange" if i == best else "tab:blue" for i in range(len(values))]
    ax.bar(range(len(values)), values, color=colors)
    ax.set_xticks(range(len(values)), labels, rotation=60, ha="right", fontsize="small")
    for i, note in enumerate(notes or []):
        if note:
            ax.text(i, 0.01, note, ha="center", va="bottom", rotation=90, fontsize="small", color="tab:red", transform=ax.get_xaxis_transform())
    ax.set_ylabel(objective)
    ax.grid(axis="y", alpha=0.3)
    if not labels:
        ax.text(0.5, 0.5, "no jobs", ha="center", va="center", transform=ax.transAxes)
    if title:
        ax.set_title(title, fontsize="medium")
    fig.savefig(str(path) if isinstance(path, (str, Path)) else path, format="png")


def objective_png(labels: Sequence[str], values: Sequence[float], objective: str, best: int | None, notes: Sequence[str], title: str) -> bytes:
    """:func:`objective_figure` as PNG bytes (a sweep's ``sweep_objective.png``)."""
    buf = io.BytesIO()
    objective_figure(labels, values, objective, buf, best=best, notes=notes, title=title)
    return buf.getvalue()


# ---------------------------------------------------------------------------------- inline SVG


def recall_curve(metrics: Mapping[str, float], ks: Sequence[int], families: Sequence[str] = CURVE_FAMILIES) -> str:
    """``family@k`` against k (one line per family with a value at every k, :func:`_draw_curve`); values in [0, 1]."""
    fig, (ax,) = _figure(width=5.6, height=3.2, svg=True)
    _draw_curve(ax, metrics, sorted(set(int(k) for k in ks)), families)
    return _svg(fig)


def size_histogram(tokens: Sequence[int], max_seq_length: int | None, unit: str = "model tokens") -> str:
    """Histogram of chunk sizes (``tokens``, one value per chunk; the bins of :func:`histogram`)
    with the model window ``max_seq_length`` drawn as a dashed line (:func:`_draw_histogram`)."""
    fig, (ax,) = _figure(width=5.6, height=3.2, svg=True)
    _draw_histogram(ax, histogram(tokens), f"chunk size ({unit})", max_seq_length or None, f"model window ({max_seq_length})")
    return _svg(fig)


def miss_bars(counts: Mapping[str, int], k: int) -> str:
    """Horizontal bars: queries missed at ``k`` per miss reason."""
    fig, (ax,) = _figure(width=5.6, height=2.4, svg=True)
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
    fig, (ax,) = _figure(width=6.0, height=3.4, svg=True)
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
    fig, (ax,) = _figure(width=6.0, height=3.4, svg=True)
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
