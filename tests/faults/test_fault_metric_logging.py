"""Issue 24, classes 3 and 4: what reaches MLflow is finite and every name keeps its own key.

``recall@5`` and ``recall_at_5`` both become the MLflow key ``recall_at_5``: logged together,
one value silently won. A NaN metric was stored as NaN. Both are refused at the tracking
boundary (:func:`harness.tracking.keys.metric_keys`, called by every tracker's metric
logging and by the metrics table) with one line naming the metric(s); the name map (harness
name -> MLflow key) is the ``metric``/``key`` pair of every row of ``metrics.json``.

Real MLflow SQLite stores under ``tmp_path``, through the in-process tracker and through
the tracking worker.
"""

from __future__ import annotations

import math

import mlflow
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.evaluation.metrics import mlflow_key
from harness.tracking.keys import MetricNameCollision, metric_keys
from harness.tracking.tracker import Tracker
from harness.types import NonFiniteError


def _logged(uri: str, run_id: str) -> dict[str, float]:
    return mlflow.MlflowClient(uri).get_run(run_id).data.metrics


def test_two_names_for_one_mlflow_key_are_refused_naming_both(tracking_uri):
    """Was: both landed in ``recall_at_5``, the later value silently winning."""
    tracker = Tracker(tracking_uri, "names")
    with tracker.run("collide"):
        with pytest.raises(MetricNameCollision) as info:
            tracker.log_metric_groups([({"recall@5": 0.5}, 0), ({"recall_at_5": 0.75}, 0)])
        tracker.log_metrics({"recall@5": 0.5})
    message = str(info.value)
    assert "'recall@5'" in message and "'recall_at_5'" in message and "\n" not in message
    assert _logged(tracking_uri, tracker.run_id) == {"recall_at_5": 0.5}  # nothing of the refused call was stored


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_metric_is_refused_naming_it(tracking_uri, value):
    """Was: MLflow stored the NaN as the run's value."""
    tracker = Tracker(tracking_uri, "finite")
    with tracker.run("nan"):
        with pytest.raises(NonFiniteError, match=r"metric 'iou@5' \(MLflow key 'iou_at_5'\) is (nan|inf|-inf)"):
            tracker.log_metrics({"recall@5": 0.5, "iou@5": value})
    assert _logged(tracking_uri, tracker.run_id) == {}


def test_the_worker_tracker_refuses_before_sending(tracking_uri):
    from harness.tracking import worker as tracking_worker

    w = tracking_worker.worker()
    tracker = tracking_worker.WorkerTracker(w, "not-a-run")  # a bad call would fail only in the worker, later
    with pytest.raises(MetricNameCollision, match=r"'a\.b@1'.*'a\.b_at_1'"):
        tracker.log_metrics({"a.b@1": 1.0, "a.b_at_1": 2.0})
    with pytest.raises(NonFiniteError, match="metric 'x'"):
        tracker.log_metric_groups([({"x": math.nan}, 0)])
    assert tracker._worker.drain() == []  # nothing was sent


def test_the_metrics_table_refuses_collisions_and_keeps_the_name_map():
    from harness.tracking.headline import metrics_table

    table = metrics_table({"recall@5": 0.5, "chunks.n_chunks": 12.0}, {"recall@5"})
    assert dict(zip(table["metric"], table["key"])) == {"recall@5": "recall_at_5", "chunks.n_chunks": "chunks.n_chunks"}
    with pytest.raises(MetricNameCollision):
        metrics_table({"recall@5": 0.5, "recall_at_5": 0.5})
    with pytest.raises(NonFiniteError):
        metrics_table({"recall@5": math.nan})


NAME = st.text(st.sampled_from("ab_@.5-"), min_size=1, max_size=6)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(NAME, st.floats(0, 1), min_size=1, max_size=8))
def test_metric_keys_refuses_exactly_the_dictionaries_with_two_names_for_one_key(values):
    by_key: dict[str, set[str]] = {}
    for name in values:
        by_key.setdefault(mlflow_key(name), set()).add(name)
    clash = [names for names in by_key.values() if len(names) > 1]
    if clash:
        with pytest.raises(MetricNameCollision):
            metric_keys(values)
    else:
        assert metric_keys(values) == {name: mlflow_key(name) for name in values}
