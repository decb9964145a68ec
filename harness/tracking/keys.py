"""The one check every metric passes on its way to MLflow: finite values, one name per key.

MLflow metric keys cannot hold ``@``, so a harness name is stored under
:func:`harness.evaluation.metrics.mlflow_key` (``recall@5`` -> ``recall_at_5``). Two names
that map to one key (``recall@5`` and ``recall_at_5``) would land in the same MLflow metric
and one value would silently win; a NaN or infinite value would be stored as the run's
number. :func:`metric_keys` refuses both. It is called by
:meth:`harness.tracking.tracker.Tracker.log_metric_groups` (every metric the tracker logs),
by :class:`harness.tracking.worker.WorkerTracker` before a call is sent to the tracking
worker, and by :func:`harness.tracking.headline.metrics_table`, whose ``metric`` and ``key``
columns are the stored name map (harness name -> MLflow key) of every value of a run.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from harness.evaluation.metrics import mlflow_key
from harness.params import is_number
from harness.types import NonFiniteError, OneLineError


class MetricNameCollision(ValueError, OneLineError):
    """Two different metric names map to one MLflow key (the message names both and the key)."""


def metric_keys(values: Mapping[str, Any] | Iterable[tuple[Mapping[str, Any], int]]) -> dict[str, str]:
    """The MLflow key of every metric name, once every value is checked.

    Args:
        values: ``{name: value}``, or ``(metrics, step)`` groups as
            :meth:`~harness.tracking.tracker.Tracker.log_metric_groups` takes them (a name
            may repeat across steps: that is one series, not a collision).

    Returns:
        ``{name: MLflow key}`` in first-seen order.

    Raises:
        NonFiniteError: a value is NaN, infinite or not a real number: ``metric 'iou@5'
            (MLflow key 'iou_at_5') is nan``.
        MetricNameCollision: two names map to one key: ``metrics 'recall@5' and
            'recall_at_5' would both be logged as MLflow metric 'recall_at_5'``.
    """
    groups = [(values, 0)] if isinstance(values, Mapping) else list(values)
    keys: dict[str, str] = {}
    owner: dict[str, str] = {}
    for metrics, _step in groups:
        for name, value in metrics.items():
            key = keys.get(name)
            if key is None:
                key = keys[name] = mlflow_key(str(name))
                other = owner.setdefault(key, name)
                if other != name:
                    raise MetricNameCollision(
                        f"metrics {other!r} and {name!r} would both be logged as MLflow metric {key!r} (one value would silently win); rename one of them"
                    )
            if not is_number(value, finite=True):
                raise NonFiniteError(f"metric {name!r} (MLflow key {key!r}) is {value!r}, not a finite number; nothing of this logging call was stored")
    return keys
