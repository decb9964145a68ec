"""The settings objects read once from the config: values, defaults from the YAML only, and
one-line errors that name the key."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from conftest import PROJECT_ROOT, compose

from harness.evaluation.settings import StatsSettings
from harness.experiment.settings import RunSettings, default_metric_settings, metric_settings, stats_settings

METRICS_YAML = PROJECT_ROOT / "conf" / "metrics" / "default.yaml"


def test_metric_settings_hold_the_yaml_values():
    shipped = yaml.safe_load(METRICS_YAML.read_text(encoding="utf-8"))
    m = metric_settings(compose([]))
    assert dataclasses.asdict(m) == {
        **shipped,
        "ks": tuple(shipped["ks"]),
        "budgets": tuple(shipped["budgets"]),
    }
    # the values the default run depends on, as documented in the YAML comments
    assert (m.ks, m.objective, m.relevance, m.relevance_fraction) == ((1, 3, 5, 10), "recall@5", "overlap_fraction", 0.5)
    assert (m.budgets, m.budget_depth, m.level, m.context_tokenizer) == ((256, 512, 1024, 2048), None, "chunk", "model")


def test_overrides_arrive_in_config_order_and_settings_are_frozen():
    m = metric_settings(compose(["metrics.ks=[10,5]", "metrics.budgets=[]", "metrics.level=document", "metrics.budget_depth=40"]))
    assert (m.ks, m.budgets, m.level, m.budget_depth) == ((10, 5), (), "document", 40)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.ks = (1,)  # type: ignore[misc]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["metrics.ks=[0,5]"], "metrics.ks must be a non-empty list of integers >= 1, got [0, 5]"),
        (["metrics.ks=[]"], "metrics.ks must be a non-empty list of integers >= 1, got []"),
        (["metrics.relevance_fraction=1.5"], "metrics.relevance_fraction must be in [0, 1], got 1.5"),
        (["metrics.relevance=partial"], "metrics.relevance must be one of"),
        (["metrics.budgets=[0]"], "metrics.budgets must be a list of integers >= 1, got [0]"),
        (["metrics.budget_depth=0"], "metrics.budget_depth must be an integer >= 1 or null, got 0"),
        (["metrics.level=passage"], "metrics.level must be 'chunk' or 'document', got 'passage'"),
        (["metrics.objective=recall5"], "metrics.objective: unknown metric 'recall5'"),
        (["metrics.ks=[1,3]"], "metrics.objective='recall@5' needs k=5 in metrics.ks=[1, 3]"),
        (["metrics.objective=recall@300tok"], "metrics.objective='recall@300tok' needs 300 in metrics.budgets=[256, 512, 1024, 2048]"),
        (["metrics.objective=doc_recall@5"], "metrics.objective='doc_recall@5' needs metrics.level=document"),
        (["metrics.context_tokenizer=foo"], "metrics.context_tokenizer must be one of ['model', 'cl100k_base'], got 'foo'"),
        (["+metrics.kss=[1]"], "metrics.kss: unknown setting; did you mean metrics.ks?"),
        (["~metrics.budgets"], "metrics.budgets: missing; conf/metrics/default.yaml sets its default"),
    ],
)
def test_metric_setting_errors_name_the_key(overrides, message):
    with pytest.raises(ValueError) as info:
        metric_settings(compose(overrides))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_library_defaults_come_from_the_yaml_and_optimise_nothing():
    shipped = yaml.safe_load(METRICS_YAML.read_text(encoding="utf-8"))
    d = default_metric_settings()
    assert d.objective is None
    assert (list(d.ks), list(d.budgets), d.relevance_fraction) == (shipped["ks"], shipped["budgets"], shipped["relevance_fraction"])
    changed = default_metric_settings(ks=[1, 4], budgets=[])  # no k=5: fine without an objective
    assert (changed.ks, changed.budgets, changed.relevance) == ((1, 4), (), shipped["relevance"])
    with pytest.raises(ValueError, match=r"metrics\.budget: unknown setting; did you mean metrics\.budgets\?"):
        default_metric_settings(budget=[1])
    with pytest.raises(ValueError, match=r"metrics\.ks must be a non-empty list"):
        default_metric_settings(ks=[True])
    with pytest.raises(ValueError, match=r"metrics.objective='ndcg@7' needs k=7"):
        dataclasses.replace(changed, objective="ndcg@7")  # a copy is validated too


def test_check_metric_explains_what_a_metric_needs():
    m = default_metric_settings(ks=[1, 5], budgets=[512])
    m.check_metric("ndcg@5", "objectives")
    m.check_metric("recall@512tok", "objectives")
    for name, message in [
        ("ndcg@7", "objectives: 'ndcg@7' needs k=7 in metrics.ks=[1, 5]"),
        ("recall@256tok", "objectives: 'recall@256tok' needs 256 in metrics.budgets=[512]"),
        ("doc_ndcg@5", "objectives: 'doc_ndcg@5' needs metrics.level=document"),
        ("ndcg5", "objectives: unknown metric 'ndcg5'"),
    ]:
        with pytest.raises(ValueError) as info:
            m.check_metric(name, "objectives")
        assert str(info.value).startswith(message), str(info.value)


def test_stats_settings_and_their_errors():
    s = stats_settings(compose([]))
    assert (s.bootstrap, s.confidence, s.seed) == (1000, 0.95, 0)
    assert stats_settings(compose(["stats.bootstrap=0", "stats.seed=7"])) == StatsSettings(0, 0.95, 7)
    for overrides, message in [
        (["stats.bootstrap=-1"], "stats.bootstrap must be an integer >= 0 (0 = no confidence intervals), got -1"),
        (["stats.confidence=1"], "stats.confidence must be in (0, 1), got 1.0"),
        (["stats.confidence=0.0"], "stats.confidence must be in (0, 1), got 0.0"),
        (["+stats.seeds=1"], "stats.seeds: unknown setting; did you mean stats.seed?"),
        (["~stats.seed"], "stats.seed: missing"),
    ]:
        with pytest.raises(ValueError) as info:
            stats_settings(compose(overrides))
        assert message in str(info.value), overrides


def test_run_settings(tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    r = RunSettings.from_config(compose([f"tracking.uri={uri}", "chunker=fixed", "retriever=bm25"]))
    assert (r.resume, r.tracking_uri, r.experiment) == (True, uri, "kestrel_kb")
    assert r.run_name.startswith("fixed-") and r.run_name.endswith("-bm25")
    named = RunSettings.from_config(compose([f"tracking.uri={uri}", "tracking.experiment=e1", "tracking.run_name=n1", "resume=false"]))
    assert (named.resume, named.experiment, named.run_name) == (False, "e1", "n1")
    with pytest.raises(ValueError, match="resume must be true or false, got 'maybe'"):
        RunSettings.from_config(compose(["resume=maybe"]))
