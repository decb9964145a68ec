"""Tracking layer: every MLflow call of the project goes through this package.

Owns the run client (:mod:`.tracker`: params, metrics, tags, artifacts, run claims and
resume lookups, signal-safe closing), the worker process a run talks to MLflow through
(:mod:`.worker`), the Hydra callback that gives a sweep its parent run (:mod:`.callbacks`),
the local tracking server (:mod:`.server`), which values of a run are MLflow metrics and
the ``metrics.json`` table holding all of them (:mod:`.headline`) and reading logged runs
back (:mod:`.runs`: the experiment name of a config, searching an experiment's runs, every
value of a run with ``run_metrics``, loading a run's per-query results, adding tags and
metrics to a finished run).

May import: :mod:`harness.evaluation` (metric keys, statistics), :mod:`harness.types` and
MLflow. Never imports the experiment layer or a command, and renders nothing: figures and
pages come from :mod:`harness.reporting` through the caller (bytes, or a rendering step
for :meth:`.tracker.Tracker.log_rendered`; the sweep callback's renderers are configured).
"""
