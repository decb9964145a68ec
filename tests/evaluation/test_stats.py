"""Statistics: bootstrap CIs, paired sign-flip tests, Holm, and ``harness.evaluation.compare`` against
real runs in a real MLflow SQLite store. Expected values are worked out by hand in comments."""

from __future__ import annotations

import json
import shutil

import mlflow
import numpy as np
import pandas as pd
import pytest
from conftest import KESTREL_PATH, compose
from scipy import stats as sps

from harness.cli import compare as cli_compare
from harness.evaluation import compare
from harness.evaluation.stats import bootstrap_ci, holm, metric_cis, non_inferiority, paired_comparison, sign_flip_p_value

# ---------------------------------------------------------------- bootstrap CI


def test_bootstrap_ci_contains_mean_and_narrows_with_more_data():
    rng = np.random.default_rng(123)
    small = rng.uniform(0, 1, size=30)
    large = rng.uniform(0, 1, size=3000)
    m_s, lo_s, hi_s = bootstrap_ci(small, n_resamples=2000, seed=0)
    m_l, lo_l, hi_l = bootstrap_ci(large, n_resamples=2000, seed=0)
    assert m_s == pytest.approx(small.mean()) and m_l == pytest.approx(large.mean())
    assert lo_s < m_s < hi_s and lo_l < m_l < hi_l
    # Width of a 95% interval for the mean of U(0,1) is about 2*1.96*sqrt(1/12)/sqrt(n):
    # n=30 -> 0.206, n=3000 -> 0.0206; 100x more data -> 10x narrower.
    assert hi_s - lo_s == pytest.approx(0.206, rel=0.2)
    assert hi_l - lo_l == pytest.approx(0.0206, rel=0.2)
    assert (hi_l - lo_l) < (hi_s - lo_s) / 5


def test_bootstrap_ci_is_seeded_and_degenerate_cases_are_exact():
    vals = np.random.default_rng(9).uniform(size=50)
    assert bootstrap_ci(vals, seed=7) == bootstrap_ci(vals, seed=7)
    assert bootstrap_ci(vals, seed=7) != bootstrap_ci(vals, seed=8)  # other resamples, other bounds
    assert bootstrap_ci([0.4], seed=0) == (0.4, 0.4, 0.4)
    assert bootstrap_ci([0.5, 0.5, 0.5]) == (0.5, 0.5, 0.5)
    # Binary values: every resample mean is a multiple of 1/n, so bounds lie in [0, 1].
    m, lo, hi = bootstrap_ci([1, 0, 1, 1, 0, 1, 0, 1, 1, 1])
    assert m == 0.7 and 0.0 <= lo < 0.7 < hi <= 1.0


def test_bootstrap_ci_agrees_with_scipy_percentile_bootstrap():
    x = np.random.default_rng(5).beta(2, 5, size=200)
    _, lo, hi = bootstrap_ci(x, n_resamples=4000, seed=1)
    ref = sps.bootstrap((x,), np.mean, n_resamples=4000, method="percentile", rng=np.random.default_rng(2), confidence_level=0.95)
    # Different random draws: the two intervals agree to Monte Carlo error (~0.003 here).
    assert lo == pytest.approx(ref.confidence_interval.low, abs=0.006)
    assert hi == pytest.approx(ref.confidence_interval.high, abs=0.006)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"values": []}, "values is empty"),
        ({"values": [0.1, float("nan")]}, "non-finite"),
        ({"values": [0.1, 0.2], "n_resamples": 0}, "n_resamples must be an integer >= 1"),
        ({"values": [0.1, 0.2], "confidence": 1.0}, r"confidence must be in the open interval \(0, 1\)"),
    ],
)
def test_bootstrap_ci_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        bootstrap_ci(**kwargs)


# ---------------------------------------------------------------- sign-flip test


def test_sign_flip_exact_hand_worked():
    # d = [1, 2, 3]; the 8 sign patterns give sums 6, 4, 2, 0, 0, -2, -4, -6;
    # |sum| >= 6 for 2 of them -> p = 2/8.
    assert sign_flip_p_value([1.0, 2.0, 3.0], n_resamples=8) == 0.25
    # d = [1, -1, 2], observed sum 2; the 8 patterns give |sums| 2, 0, 4, 2, 2, 4, 0, 2:
    # 6 of 8 reach 2 -> p = 0.75.
    assert sign_flip_p_value([1.0, -1.0, 2.0], n_resamples=1000) == 0.75
    # all zero -> every pattern ties the observed 0 -> p = 1
    assert sign_flip_p_value([0.0] * 12, n_resamples=100) == 1.0


def test_sign_flip_matches_scipy_permutation_test():
    rng = np.random.default_rng(11)
    d = rng.normal(0.05, 0.2, size=14)  # 2**14 = 16384 patterns: both enumerate exactly
    ours = sign_flip_p_value(d, n_resamples=20000)
    ref = sps.permutation_test((d,), lambda x, axis: np.mean(x, axis=axis), permutation_type="samples", n_resamples=20000, alternative="two-sided")
    assert ours == pytest.approx(ref.pvalue, abs=1e-12)


def test_sign_flip_monte_carlo_is_never_zero_and_is_seeded():
    d = np.full(40, 0.1)  # exact p would be 2 / 2**40; Monte Carlo with R=999 -> 1 / 1000
    assert sign_flip_p_value(d, n_resamples=999, seed=3) == pytest.approx(1 / 1000)
    noisy = np.random.default_rng(0).normal(0.0, 1.0, size=50)
    assert sign_flip_p_value(noisy, 500, seed=1) == sign_flip_p_value(noisy, 500, seed=1)


# ---------------------------------------------------------------- paired comparison


def test_identical_runs_give_zero_difference_p_one_all_ties():
    a = [0.0, 0.5, 1.0, 0.25, 0.75, 1.0]
    r = paired_comparison(a, list(a), n_resamples=1000, seed=0)
    assert (r.diff, r.ci_low, r.ci_high) == (0.0, 0.0, 0.0)
    assert r.p_value == 1.0
    assert (r.wins, r.ties, r.losses) == (0, 6, 0)
    assert r.mean_a == r.mean_b == pytest.approx(3.5 / 6)


def test_run_better_on_every_query_wins_everywhere_with_small_p():
    a = [0.0, 0.2, 0.4, 0.1, 0.3, 0.5, 0.0, 0.6, 0.2, 0.1]
    b = [x + 0.1 for x in a]
    r = paired_comparison(a, b, n_resamples=1024, seed=0)
    # every d_i = 0.1: only the all-plus and all-minus patterns reach |mean| = 0.1 -> p = 2 / 2**10
    assert r.p_value == pytest.approx(2 / 1024)
    assert (r.wins, r.ties, r.losses) == (10, 0, 0)
    assert r.diff == pytest.approx(0.1)
    assert r.ci_low == pytest.approx(0.1) and r.ci_high == pytest.approx(0.1)  # d constant (up to rounding)


def test_paired_comparison_mixed_hand_worked():
    a = [1.0, 0.0, 0.5, 0.5]
    b = [0.0, 1.0, 1.0, 0.5]
    # d = [-1, 1, 0.5, 0]: diff = 0.5/4 = 0.125; W/T/L = 2/1/1.
    # Exact over 16 patterns (the 0 does not matter): ±1 ±1 is -2, 0 or 2, so ±1 ±1 ±0.5
    # has |sum| >= 0.5 for every pattern; observed |sum| = 0.5 -> p = 1.
    r = paired_comparison(a, b, n_resamples=1000)
    assert r.diff == pytest.approx(0.125)
    assert (r.wins, r.ties, r.losses) == (2, 1, 1)
    assert r.p_value == 1.0
    assert r.ci_low <= 0.125 <= r.ci_high


def test_paired_comparison_rejects_unequal_lengths():
    with pytest.raises(ValueError, match="got 3 and 2 values"):
        paired_comparison([0.1, 0.2, 0.3], [0.1, 0.2])


# ---------------------------------------------------------------- Holm


def test_holm_hand_worked():
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> running max 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # capped at 1; a single p-value is unchanged
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert holm([0.2]) == [0.2]
    assert holm([]) == []
    with pytest.raises(ValueError, match=r"p_values must all be in \[0, 1\]"):
        holm([0.1, 1.2])


def test_metric_cis_keys_and_values():
    table = pd.DataFrame({"recall@5": [0.0, 1.0, 1.0, 0.5], "iou@5": [0.2, 0.2, 0.2, 0.2]})
    out = metric_cis(table, ["recall@5", "iou@5"], n_resamples=200, seed=0)
    assert set(out) == {"recall@5_ci_low", "recall@5_ci_high", "iou@5_ci_low", "iou@5_ci_high"}
    assert out["iou@5_ci_low"] == out["iou@5_ci_high"] == 0.2
    assert 0.0 <= out["recall@5_ci_low"] <= 0.625 <= out["recall@5_ci_high"] <= 1.0
    with pytest.raises(ValueError, match="metric 'ndcg@5' is not a per-query column"):
        metric_cis(table, ["ndcg@5"])


# ---------------------------------------------------------------- compare on constructed tables


def _logged(name, fingerprint, ids, values):
    return compare.LoggedRun(name * 8, name, fingerprint, pd.DataFrame({"query_id": ids, "recall@5": values}))


def test_check_comparable_refuses_different_datasets_and_query_sets():
    base = _logged("a", "fp1", ["q1", "q2", "q3"], [0.1, 0.2, 0.3])
    with pytest.raises(compare.CompareError, match="different datasets.*fp1.*fp2"):
        compare.check_comparable([base, _logged("b", "fp2", ["q1", "q2", "q3"], [0.1, 0.2, 0.3])])
    with pytest.raises(compare.CompareError, match=r"different query sets.*1 only in the baseline \['q3'\]"):
        compare.check_comparable([base, _logged("b", "fp1", ["q1", "q2"], [0.1, 0.2])])
    with pytest.raises(compare.CompareError, match="no dataset_fingerprint tag"):
        compare.check_comparable([base, _logged("b", None, ["q1", "q2", "q3"], [0.1, 0.2, 0.3])])
    compare.check_comparable([base, _logged("b", "fp1", ["q3", "q1", "q2"], [0.3, 0.1, 0.2])])  # order is free


def test_compare_runs_aligns_queries_and_applies_holm():
    base = _logged("a", "fp", ["q1", "q2", "q3", "q4"], [0.0, 0.0, 0.0, 0.0])
    same = _logged("b", "fp", ["q4", "q3", "q2", "q1"], [0.0, 0.0, 0.0, 0.0])
    # listed in another order; aligned by id: d = [1, 1, 1, 1] -> exact p = 2/16 = 0.125
    better = _logged("c", "fp", ["q2", "q1", "q4", "q3"], [1.0, 1.0, 1.0, 1.0])
    t = compare.compare_runs([base, same, better], ["recall@5"], n_resamples=1000, alpha=0.05)["recall@5"]
    assert t["p"].tolist() == pytest.approx([1.0, 0.125])
    # Holm, m = 2: sorted 0.125*2 = 0.25, then max(0.25, 1.0*1) = 1.0
    assert t["p_holm"].tolist() == pytest.approx([1.0, 0.25])
    assert t[["W", "T", "L"]].values.tolist() == [[0, 4, 0], [4, 0, 0]]
    assert t["diff"].tolist() == pytest.approx([0.0, 1.0])
    assert t["sig"].tolist() == ["", ""]


# ---------------------------------------------------------------- end to end with real runs


def _bm25_cfg(uri, *overrides):
    return compose(["retriever=bm25", "chunker=recursive", f"tracking.uri={uri}", "embedding.show_progress=false", *overrides])


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A real MLflow SQLite store with three BM25 runs on the embedded dataset:
    chunk size 128 twice (reproducibility) and chunk size 400."""
    from harness.experiment.run import execute

    root = tmp_path_factory.mktemp("stats_store")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    first = execute(_bm25_cfg(uri, "chunker.chunk_size=128"))
    again = execute(_bm25_cfg(uri, "chunker.chunk_size=128", "resume=false"))  # run it again, not skip
    large = execute(_bm25_cfg(uri, "chunker.chunk_size=400"))
    return {"uri": uri, "root": root, "first": first, "again": again, "large": large}


@pytest.mark.slow
def test_same_config_twice_gives_identical_metrics(store):
    a, b = store["first"], store["again"]
    assert a["run_id"] != b["run_id"]
    assert a["metrics"] == b["metrics"]  # exact equality, every metric
    pa = a["evaluation"].per_query
    pb = b["evaluation"].per_query
    pd.testing.assert_frame_equal(pa, pb)
    from harness.tracking.runs import run_metrics

    ma, mb = run_metrics(store["uri"], a["run_id"]), run_metrics(store["uri"], b["run_id"])  # every value, tables included
    quality = {k for k in ma if not k.startswith(("time.", "cache."))}  # timings and cache bookkeeping differ by nature
    assert {k: ma[k] for k in quality} == {k: mb[k] for k in quality}


@pytest.mark.slow
def test_compare_cli_end_to_end(store, capsys, tmp_path):
    out_json = tmp_path / "cmp.json"
    ids = [store["first"]["run_id"], store["again"]["run_id"], store["large"]["run_id"]]
    code = cli_compare.main(["runs", *ids, "--tracking-uri", store["uri"], "--metrics", "recall@5", "iou@5", "--resamples", "500", "--json", str(out_json)])
    assert code == 0
    out = capsys.readouterr().out
    assert "recall@5" in out and "iou@5" in out and "p_holm" in out and "W" in out
    assert "recursive-128-0-bm25" in out and "recursive-400-0-bm25" in out

    report = json.loads(out_json.read_text())
    n = len(store["first"]["evaluation"].per_query)
    assert report["n_queries"] == n and report["baseline"]["run_id"] == ids[0]
    same, large = report["metrics"]["recall@5"]
    # the repeated run: nothing differs
    assert (same["diff"], same["p"], same["W"], same["T"], same["L"]) == (0.0, 1.0, 0, n, 0)
    # the 400-token run, checked against the per-query tables directly
    pa = store["first"]["evaluation"].per_query.set_index("query_id")["recall@5"]
    pb = store["large"]["evaluation"].per_query.set_index("query_id")["recall@5"].loc[pa.index]
    d = (pb - pa).to_numpy()
    assert large["baseline"] == pytest.approx(pa.mean()) and large["mean"] == pytest.approx(pb.mean())
    assert large["diff"] == pytest.approx(d.mean())
    assert (large["W"], large["T"], large["L"]) == (int((d > 0).sum()), int((d == 0).sum()), int((d < 0).sum()))
    assert large["W"] + large["L"] > 0  # 128- vs 400-token chunks do change some queries
    assert large["ci_low"] <= large["diff"] <= large["ci_high"]
    # Holm with m = 2: the larger raw p (1.0) stays 1; the other is min(1, 2 p)
    assert same["p_holm"] == 1.0
    assert large["p_holm"] == pytest.approx(min(1.0, 2 * large["p"]))
    assert large["sig"] == ("*" if large["p_holm"] <= 0.05 else "")


@pytest.mark.slow
def test_compare_refuses_a_run_on_a_different_dataset(store, tmp_path, capsys):
    from harness.experiment.run import execute

    copy = tmp_path / "kestrel_minus_one"
    shutil.copytree(KESTREL_PATH, copy)
    lines = (copy / "questions.jsonl").read_text().splitlines()
    (copy / "questions.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # drop the last query
    other = execute(_bm25_cfg(store["uri"], "chunker.chunk_size=128", f"dataset.path={copy}"))
    code = cli_compare.main(["runs", store["first"]["run_id"], other["run_id"], "--tracking-uri", store["uri"]])
    assert code == 2
    err = capsys.readouterr().err
    assert "different datasets" in err and "dataset_fingerprint" in err


@pytest.mark.slow
def test_compare_refuses_same_dataset_tag_with_different_query_set(store, tmp_path, capsys):
    """A logged run whose per-query table lacks one query but claims the same dataset."""
    from harness.tracking.tracker import Tracker

    client = mlflow.MlflowClient(store["uri"])
    base_id = store["first"]["run_id"]
    fingerprint = client.get_run(base_id).data.tags["dataset_fingerprint"]
    table = store["first"]["evaluation"].per_query
    dropped = table["query_id"].iloc[3]
    tracker = Tracker(store["uri"], "kestrel_kb")
    with tracker.run("truncated-table", tags={"dataset_fingerprint": fingerprint}):
        tracker.log_dataframe_csv(table.drop(index=3), "per_query.csv")
    code = cli_compare.main(["runs", base_id, tracker.run_id, "--tracking-uri", store["uri"]])
    assert code == 2
    err = capsys.readouterr().err
    assert "different query sets" in err and f"1 only in the baseline ['{dropped}']" in err


def test_compare_refuses_unknown_run_and_missing_metric(tracking_uri, capsys):
    from harness.tracking.tracker import Tracker

    tracker = Tracker(tracking_uri, "t")
    ids = []
    for name in ("x", "y"):
        with tracker.run(name, tags={"dataset_fingerprint": "fp"}):
            tracker.log_dataframe_csv(pd.DataFrame({"query_id": ["q1", "q2"], "recall@5": [0.5, 1.0]}), "per_query.csv")
        ids.append(tracker.run_id)
    assert cli_compare.main(["runs", ids[0], "0" * 32, "--tracking-uri", tracking_uri]) == 2
    assert "not found in the tracking store" in capsys.readouterr().err
    assert cli_compare.main(["runs", *ids, "--tracking-uri", tracking_uri, "--metrics", "ndcg@10"]) == 2
    assert "metric(s) ['ndcg@10'] not in per_query.csv" in capsys.readouterr().err
    assert cli_compare.main(["runs", *ids, "--tracking-uri", tracking_uri]) == 0  # default set falls back to recall@5
    assert "recall@5" in capsys.readouterr().out


def test_results_as_dict_keep_the_declared_field_order():
    paired = paired_comparison([0.0, 0.5, 1.0], [0.5, 0.5, 1.0], n_resamples=10)
    assert list(paired.as_dict()) == ["n", "mean_a", "mean_b", "diff", "ci_low", "ci_high", "p_value", "wins", "ties", "losses"]
    assert (paired.as_dict()["n"], paired.as_dict()["wins"], paired.as_dict()["ties"]) == (3, 1, 2)
    result = non_inferiority([0.0, 0.5, 1.0], [0.5, 0.5, 1.0], margin=0.1, n_resamples=10)
    assert list(result.as_dict()) == [
        "n",
        "mean_baseline",
        "mean_candidate",
        "diff",
        "ci_low",
        "ci_high",
        "p_value",
        "margin",
        "alpha",
        "passed",
        "wins",
        "ties",
        "losses",
    ]
    assert result.as_dict()["margin"] == 0.1


def test_query_set_difference_counts_and_names_both_sides():
    text = compare.query_set_difference({"q1", "q2", "q3"}, {"q1", "q4"}, "the candidate")
    assert text == "2 only in the baseline ['q2', 'q3'], 1 only in the candidate ['q4']"
    many = compare.query_set_difference({f"q{i}" for i in range(10)}, set(), "run b")
    assert many == "10 only in the baseline ['q0', 'q1', 'q2', 'q3', 'q4'], 0 only in run b []"
