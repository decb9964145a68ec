"""HTML reports of runs and sweeps: one self-contained file that opens from disk.

* :mod:`harness.reporting.model`: what a report shows, as plain data (:class:`RunView`),
  built from a run in memory or from its logged artifacts; the compact artifacts
  ``chunks.jsonl.gz`` and ``ranking.jsonl.gz`` it needs (writers and readers).
* :mod:`harness.reporting.charts`: every figure, drawn with matplotlib: the PNG artifacts of
  a run and a sweep, and the inline SVG of the pages.
* :mod:`harness.reporting.html`: the pages, rendered with jinja2: :func:`run_report`,
  :func:`sweep_report`, :func:`side_by_side_report`.

The package makes no MLflow call: :mod:`harness.tracking.runs` reads the runs and
:mod:`harness.experiment.report` puts the pieces together for ``harness report``.
"""
