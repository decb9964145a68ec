"""Evaluation layer: every number a run reports about retrieved chunks.

Owns the metric registry and the span, rank and budget metrics (:mod:`.metrics`; a new
metric is one :class:`~harness.evaluation.metrics.MetricFamily` entry there with its
docstring and its provider), the scoring of one run over the registry's providers, the
per-query table and the diagnostics call (:mod:`.scoring`), the frozen
``MetricSettings``/``StatsSettings`` (:mod:`.settings`), bootstrap confidence intervals
and paired tests (:mod:`.stats`), chunk and failure diagnostics (:mod:`.diagnostics`), contextual compression scoring
(:mod:`.compression`), the paired comparison of logged runs (:mod:`.compare`), the
selection rule and rank agreement of screening sweeps (:mod:`.screening`) and the figures
(:mod:`.plots`).

May import: :mod:`harness.text`, :mod:`harness.types` and third-party libraries; reading
logged runs goes through :mod:`harness.tracking`. Never imports chunkers, retrievers or
the experiment layer: a metric is a function of spans and ranked lists.
"""
