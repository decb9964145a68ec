"""The sweep report's baseline: the one given, else the configured one, else the job running the
shipped default configuration, else the runner-up; never job 1 because it is job 1."""

from __future__ import annotations

import pytest

from harness.reporting.sweep import build_sweep_view, choose_baseline
from harness.tracking.runs import RunRecord


def _jobs(recalls: dict[int, float]):
    return [(j, "FINISHED", RunRecord(f"id{j}", f"run-{j}", "0", "FINISHED", 0, {}, {"recall@5": v}, {})) for j, v in recalls.items()]


def _view(recalls, **tags):
    parent = RunRecord("parent", "sweep", "0", "FINISHED", 0, {}, {}, {"sweep.objective": "recall@5", **tags})
    return build_sweep_view(parent, _jobs(recalls), lambda r: dict(r.metrics))


def test_job_one_is_never_the_baseline_by_position():
    view = _view({1: 0.10, 2: 0.79, 3: 0.78, 4: 0.50})  # job 1 is the worst
    assert view.best == "id2" and view.baseline == "id3"  # the runner-up
    assert "runner-up" in view.baseline_rule and "job 3" in view.baseline_rule


def test_the_configured_baseline_then_the_default_job_then_the_runner_up():
    recalls = {1: 0.10, 2: 0.79, 3: 0.78, 4: 0.50}
    assert _view(recalls, **{"sweep.baseline": "4", "sweep.default_job": "1"}).baseline == "id4"
    assert _view(recalls, **{"sweep.baseline": "run-4"}).baseline == "id4"  # a run name
    default = _view(recalls, **{"sweep.default_job": "1"})
    assert default.baseline == "id1" and "shipped default configuration" in default.baseline_rule
    best_is_default = _view(recalls, **{"sweep.default_job": "2"})
    assert best_is_default.baseline == "id3" and "is the best job itself" in best_is_default.baseline_rule


def test_a_baseline_naming_no_finished_job_is_one_line_naming_the_setting():
    done = [{"job": 1, "run_id": "a", "name": "x", "metrics": {"recall@5": 0.5}}, {"job": 2, "run_id": "b", "name": "y", "metrics": {"recall@5": 0.6}}]
    with pytest.raises(ValueError, match=r"tracking.sweep_baseline '7' is not a finished job of this sweep; .*job 1 x, job 2 y") as err:
        choose_baseline(done, "b", "recall@5", configured="7")
    assert "\n" not in str(err.value)
    # lower is better: the runner-up is the second smallest
    low = [{"job": j, "run_id": str(j), "name": str(j), "metrics": {"context_tokens@5": v}} for j, v in ((1, 900.0), (2, 100.0), (3, 200.0))]
    assert choose_baseline(low, "2", "context_tokens@5")[0] == "3"
