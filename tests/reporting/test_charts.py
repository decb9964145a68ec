"""The one figure module: a run's PNG artifacts and the report's SVG from the same drawing."""

import io
import json

from harness.reporting import charts

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_run_figures_are_the_three_artifacts_a_run_logs():
    out = charts.run_figures([10, 20, 30], [4, 6, 9], 256, {"recall@1": 0.5, "recall@5": 1.0}, [5, 1], "t")
    assert list(out) == ["chunk_sizes.png", "recall_at_k.png", "chunk_sizes.json"]
    assert out["chunk_sizes.png"].startswith(PNG_SIGNATURE) and out["recall_at_k.png"].startswith(PNG_SIGNATURE)
    sizes = json.loads(out["chunk_sizes.json"])
    assert sizes["n_chunks"] == 3 and sum(sizes["chars"]["counts"]) == 3 and sum(sizes["tokens"]["counts"]) == 3


def test_the_png_and_the_svg_histogram_draw_the_same_bins(monkeypatch):
    drawn = []
    real = charts._draw_histogram
    monkeypatch.setattr(charts, "_draw_histogram", lambda ax, hist, *a, **k: (drawn.append(hist), real(ax, hist, *a, **k)))
    tokens = [3, 5, 5, 8, 13, 21]
    charts.chunk_size_figure([1] * len(tokens), io.BytesIO(), tokens=tokens, max_seq_length=16)
    svg = charts.size_histogram(tokens, 16)
    assert svg.startswith("<svg") and "model window (16)" in svg
    assert drawn[1] == drawn[2] and drawn[1]["n"] == 6  # the PNG's token panel and the SVG: one set of bins


def test_the_objective_png_is_a_png_with_a_bar_per_job():
    assert charts.objective_png(["1 a", "2 b"], [0.5, float("nan")], "recall@5", 0, ["", "FAILED"], "sweep").startswith(PNG_SIGNATURE)
