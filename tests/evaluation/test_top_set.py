"""The top set of a sweep: the jobs not significantly worse than the best (paired one-sided
sign-flip test against the best, Holm-corrected), its settings boundary and the tie-breakers.
Synthetic per-query arrays; the expected p-values are worked out by hand in comments."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.evaluation.compare import tie_breakers
from harness.evaluation.stats import TopSetSettings, top_set


def _jobs(arrays: dict[int, list[float]]) -> dict[int, dict[str, float]]:
    return {job: {f"q{i}": float(v) for i, v in enumerate(values)} for job, values in arrays.items()}


# ---------------------------------------------------------------- worked examples


def test_two_tied_top_jobs_are_both_named_and_a_far_worse_one_is_not():
    best = [1.0, 0.5, 1.0, 0.0, 1.0, 1.0, 0.5, 1.0]
    tied = [1.0, 0.5, 1.0, 0.0, 1.0, 1.0, 0.5, 1.0]  # identical: every difference 0 -> p = 1
    worse = [0.0] * 8  # worse on 7 queries (query 3 ties at 0)
    result = top_set(_jobs({1: worse, 2: best, 3: tied}))
    assert result.best == 2  # equal means: the lower job number is the best
    assert result.members == (2, 3)
    # job 1: x = best - job = [1, .5, 1, 0, 1, 1, .5, 1], 2**8 = 256 <= 10000 sign patterns, enumerated;
    # only the patterns flipping nothing reach mean(x): the zero on query 3 gives 2 of them -> p = 2/256
    assert result.p_values[1] == pytest.approx(2 / 256)
    assert result.p_values[3] == 1.0
    # Holm over the two comparisons: 2 * 2/256 = 1/64 for job 1, max(1/64, 1 * 1.0) = 1 for job 3
    assert result.p_holm[1] == pytest.approx(1 / 64) and result.p_holm[3] == 1.0
    assert result.n_queries == 8 and result.means[2] == pytest.approx(6 / 8)


def test_a_job_slightly_worse_on_a_few_queries_stays_with_the_best():
    """recall@5 0.7871 against 0.7863 (the issue's example): a tie, not a loser."""
    rng = np.random.default_rng(4)
    best = rng.uniform(0.4, 1.0, size=200)
    runner_up = best.copy()
    runner_up[:3] -= 0.05  # mean 0.00075 lower
    result = top_set(_jobs({1: runner_up, 2: best}))
    assert result.best == 2 and result.members == (2, 1)
    assert result.p_holm[1] > 0.05


def test_lower_is_better_objectives_pick_the_smallest_mean():
    small = [100.0, 120.0, 90.0, 110.0, 100.0, 95.0, 105.0, 100.0]
    big = [v + 50 for v in small]
    result = top_set(_jobs({1: big, 2: small}), lower=True, objective="context_tokens@5")
    assert result.best == 2 and result.members == (2,)
    assert result.p_values[1] == pytest.approx(1 / 256)  # 8 equal positive excesses: only the all-plus pattern


def test_a_margin_keeps_a_job_worse_by_less_than_it():
    best = [1.0] * 10
    job = [0.98] * 10  # 0.02 worse on every query
    assert top_set(_jobs({1: best, 2: job})).members == (1,)  # margin 0: 10 equal losses, p = 1/1024
    kept = top_set(_jobs({1: best, 2: job}), TopSetSettings(margin=0.05))
    assert kept.members == (1, 2)  # H1 "worse by more than 0.05" is contradicted by every query: p = 1
    assert kept.p_values[2] == 1.0


def test_different_query_sets_are_refused_naming_the_jobs():
    a = {"q1": 1.0, "q2": 0.0}
    b = {"q1": 1.0, "q3": 0.0}
    with pytest.raises(ValueError, match=r"job 4 .*job 7|job 7 .*job 4") as err:
        top_set({4: a, 7: b})
    assert "q2" in str(err.value) and "q3" in str(err.value) and "\n" not in str(err.value)


def test_a_non_finite_value_is_scored_zero_with_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = top_set(_jobs({1: [1.0, float("nan"), 1.0, 1.0], 2: [1.0, 1.0, 1.0, 1.0]}))
    assert result.means[1] == pytest.approx(0.75)  # as the run's own mean: the NaN query counts 0
    assert any("job 1" in str(w.message) and "scored 0" in str(w.message) for w in caught)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"alpha": 0.6}, r"tracking\.top_set\.alpha: .*\(0, 0\.5\)"),
        ({"margin": -0.1}, r"tracking\.top_set\.margin: .*>= 0"),
        ({"margn": 0.1}, r"tracking\.top_set\.margn: unknown setting; did you mean tracking\.top_set\.margin\?"),
        ({"n_resamples": 0}, r"tracking\.top_set\.n_resamples must be an integer >= 1"),
        ({"second_metric": "context_precison@5"}, r"tracking\.top_set\.second_metric: .*name@k"),
    ],
)
def test_bad_settings_are_one_line_errors_naming_the_setting(given, message):
    with pytest.raises(ValueError, match=message) as err:
        TopSetSettings.from_mapping(given)
    assert "\n" not in str(err.value)


def test_settings_from_a_mapping_round_trip():
    s = TopSetSettings.from_mapping({"alpha": 0.1, "margin": 0.01, "second_metric": "iou@5"})
    assert TopSetSettings.from_mapping(s.to_dict()) == s
    assert TopSetSettings.from_mapping(None) == TopSetSettings()


# ---------------------------------------------------------------- tie-breakers


def test_tie_breakers_name_the_member_each_rule_would_choose():
    values = {
        3: {"context_tokens@5": 800.0, "chunks.n_chunks": 40.0, "context_precision@5": 0.61},
        7: {"context_tokens@5": 650.0, "chunks.n_chunks": 55.0, "context_precision@5": 0.58},
        9: {"context_tokens@5": 900.0, "chunks.n_chunks": 30.0, "context_precision@5": 0.66},
    }
    rules = tie_breakers([3, 7, 9], values, "recall@5")
    assert [(r.metric, r.choice) for r in rules] == [("context_tokens@5", 7), ("chunks.n_chunks", 9), ("context_precision@5", 9)]
    assert rules[0].values == {3: 800.0, 7: 650.0, 9: 900.0}
    # a second metric that is the objective itself would choose nothing new: recall's partner then
    again = tie_breakers([3, 7], {3: {"recall@5": 0.5}, 7: {"recall@5": 0.6}}, "context_precision@5")
    assert [(r.metric, r.choice) for r in again] == [("context_tokens@5", None), ("chunks.n_chunks", None), ("recall@5", 7)]


# ---------------------------------------------------------------- properties


@st.composite
def _sweeps(draw):
    n = draw(st.integers(10, 20))
    m = draw(st.integers(1, 5))
    arrays = {job: draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]), min_size=n, max_size=n)) for job in draw(st.permutations(range(1, m + 1)))}
    return arrays


@settings(max_examples=40, deadline=None)
@given(_sweeps(), st.floats(0.0, 0.2), st.sampled_from([0.01, 0.05, 0.2]))
def test_properties_of_the_top_set(arrays, margin, alpha):
    cfg = TopSetSettings(alpha=alpha, margin=margin, n_resamples=2000)
    result = top_set(_jobs(arrays), cfg)
    means = {j: float(np.mean(v)) for j, v in arrays.items()}
    top = max(means.values())
    # the best has the highest mean (ties: the lowest job number) and is always a member
    assert result.best == min(j for j, v in means.items() if v == pytest.approx(top, abs=1e-12))
    assert result.best in result.members and result.members[0] == result.best
    # a job is a member exactly when its Holm-adjusted p exceeds alpha
    assert set(result.members) == {result.best} | {j for j, p in result.p_holm.items() if p > alpha}
    # the job order of the input changes nothing
    reordered = top_set(_jobs(dict(reversed(list(arrays.items())))), cfg)
    assert reordered.members == result.members and reordered.p_holm == result.p_holm
    # a larger alpha never adds a member
    stricter = top_set(_jobs(arrays), TopSetSettings(alpha=min(0.49, alpha * 2), margin=margin, n_resamples=2000))
    assert set(stricter.members) <= set(result.members)


@settings(max_examples=30, deadline=None)
@given(_sweeps())
def test_an_identical_copy_of_the_best_is_always_in_and_a_job_far_below_never(arrays):
    with_copy = dict(arrays)
    best = top_set(_jobs(arrays)).best
    with_copy[100] = list(arrays[best])
    # far below: 0.5 lower than the best on every query (values may go negative; only differences matter)
    with_copy[101] = [v - 0.5 for v in arrays[best]]
    cfg = TopSetSettings(n_resamples=2000)  # n <= 10: exact, p = 1/2**n; else Monte Carlo, floor 1/2001; times <= 7 jobs < 0.05
    result = top_set(_jobs(with_copy), cfg)
    assert 100 in result.members
    assert 101 not in result.members
    # adding the job far below changes no other job's membership (its p is the smallest, and
    # Holm then gives every other job the multiplier it had before)
    without = dict(with_copy)
    del without[101]
    assert set(top_set(_jobs(without), cfg).members) == set(result.members) - {101}


def test_a_sweep_with_a_bad_top_set_setting_is_refused_before_any_job():
    from omegaconf import OmegaConf

    from harness.tracking.callbacks import SweepPlan, SweepPlanError, sweep_settings

    plan = SweepPlan(
        "BasicSweeper", (), (("chunker.chunk_size", ("1", "2")),), ("chunker.chunk_size=1,2",), (("chunker.chunk_size=1",), ("chunker.chunk_size=2",))
    )
    with pytest.raises(SweepPlanError, match=r"^tracking\.top_set\.alpah: unknown setting; did you mean tracking\.top_set\.alpha\?"):
        sweep_settings(OmegaConf.create({"tracking": {"top_set": {"alpah": 0.1}}}), plan)
    with pytest.raises(SweepPlanError, match=r"^tracking\.sweep_baseline: job 3 does not exist; this sweep has jobs 1 to 2"):
        sweep_settings(OmegaConf.create({"tracking": {"sweep_baseline": 3}}), plan)
    settings, baseline = sweep_settings(OmegaConf.create({"tracking": {"top_set": {"margin": 0.01}, "sweep_baseline": 2}}), plan)
    assert settings == TopSetSettings(margin=0.01) and baseline == 2
