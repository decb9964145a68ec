"""PNG figures logged with every run: chunk-size histograms, the recall@k curve, and a
sweep's objective per job.

Drawn with matplotlib's object-oriented API on the Agg canvas (no pyplot, no display, no
global backend switch); matplotlib is imported only when a figure is drawn (~0.5-1 s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from harness.evaluation.metrics import families as metric_families

#: Most bins a histogram gets (numpy's "auto" rule, capped so small plots stay legible).
MAX_BINS = 40

#: Metric families drawn against k in :func:`rank_curve_figure`, when present: the registry's
#: ``curve`` families (:func:`harness.evaluation.metrics.families`).
CURVE_FAMILIES = metric_families("curve")


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
    """Import matplotlib's figure and Agg canvas modules now (about 0.5 s the first time in a
    process, nothing later), e.g. in the tracking worker while the job embeds, so that the
    first figure does not pay for them. The modules stay for the process
    (:func:`harness.runtime.long_lived`)."""
    from harness.runtime import long_lived

    with long_lived("matplotlib"):
        import matplotlib.backends.backend_agg  # noqa: F401
        import matplotlib.figure  # noqa: F401


def _figure(n_axes: int, width: float = 6.4, height: float = 3.6, layout: str | None = None):
    """A figure with ``n_axes`` side-by-side axes on an Agg canvas. Fixed margins by default:
    matplotlib's automatic layouts double the drawing time."""
    preload()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * n_axes, height), dpi=100, layout=layout)
    FigureCanvasAgg(fig)
    if layout is None:
        fig.subplots_adjust(left=0.08 / n_axes + 0.02, right=0.98, bottom=0.14, top=0.88, wspace=0.22)
    return fig, [fig.add_subplot(1, n_axes, i + 1) for i in range(n_axes)]


def _draw_histogram(ax, hist: dict, xlabel: str, limit: float | None = None, limit_label: str = "") -> None:
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


def chunk_size_figure(
    chars: Sequence[int],
    path: str | Path,
    tokens: Sequence[int] | None = None,
    max_seq_length: int | None = None,
    title: str = "",
) -> dict:
    """Write a PNG histogram of chunk sizes in characters (and model tokens when given).

    Args:
        chars: source characters per chunk.
        path: PNG file to write.
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
    fig.savefig(str(path), format="png")
    return data


def rank_curve_figure(metrics: Mapping[str, float], ks: Sequence[int], path: str | Path, title: str = "") -> list[str]:
    """Write a PNG of mean ``recall@k``, ``precision@k`` and ``iou@k`` against k.

    Args:
        metrics: mean metrics by name (``{"recall@5": 0.71, ...}``); families without a
            value at every k are left out.
        ks: the rank cut-offs, drawn in ascending order.
        path: PNG file to write.
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
    drawn = []
    for family in CURVE_FAMILIES:
        if all(f"{family}@{k}" in metrics for k in ks):
            ax.plot(ks, [metrics[f"{family}@{k}"] for k in ks], marker="o", label=f"{family}@k")
            drawn.append(family)
    ax.set_xlabel("k (chunks retrieved)")
    ax.set_ylabel("mean over queries")
    ax.set_xticks(ks)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    if title:
        ax.set_title(title)
    fig.savefig(str(path), format="png")
    return drawn


def objective_figure(
    labels: Sequence[str],
    values: Sequence[float],
    objective: str,
    path: str | Path,
    best: int | None = None,
    notes: Sequence[str] | None = None,
    title: str = "",
) -> None:
    """Write a PNG bar chart of one objective per sweep job (a sweep's parent run).

    Args:
        labels: one label per bar (e.g. ``"3 recursive-400-0-faiss"``).
        values: the objective per bar (NaN for a job without a value: no bar).
        objective: metric name, for the axis label.
        path: PNG file to write.
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
    fig.savefig(str(path), format="png")
