"""The published fp32-vs-bf16 and fp32-vs-int8 tables are the rendering of the committed result JSON (no runs)."""

import importlib.util
import json

from conftest import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "experiments" / "precision_effect.py"
RESULT = PROJECT_ROOT / "experiments" / "precision_effect.json"


def _script():
    spec = importlib.util.spec_from_file_location("precision_effect_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_table_is_the_rendering_of_the_committed_json():
    script = _script()
    data = json.loads(RESULT.read_text(encoding="utf-8"))
    docs = (PROJECT_ROOT / "docs" / "embeddings.md").read_text(encoding="utf-8")
    start, end = script.DOCS_MARKERS
    assert docs.count(start) == 1 and docs.count(end) == 1, "docs/embeddings.md lost its precision-effect table markers"
    block = docs.split(start, 1)[1].split(end, 1)[0].strip("\n")
    assert block == script.render_markdown(data)


def test_committed_json_covers_both_datasets_and_every_metric_consistently():
    script = _script()
    data = json.loads(RESULT.read_text(encoding="utf-8"))
    assert [d["dataset"] for d in data["datasets"]] == list(script.DATASETS)
    for ds in data["datasets"]:
        assert sorted(ds["against_fp32"]) == sorted(script.OTHERS) == ["bf16", "int8"]
        for other, side in ds["against_fp32"].items():
            assert [r["metric"] for r in side["metrics"]] == list(script.METRICS)
            for r in side["metrics"]:
                # invariants of a paired comparison, independent of how it was computed
                assert abs((r[other] - r["fp32"]) - r["diff"]) < 1e-9
                assert r["ci_low"] <= r["diff"] + 1e-12 and r["diff"] <= r["ci_high"] + 1e-12
                assert 0 < r["p"] <= 1
                assert r["changed"] == r["higher"] + r["lower"] <= ds["n_queries"]
                if r["changed"] == 0:
                    assert r["diff"] == 0 and r["p"] == 1
            v = side["vectors"]
            assert (0.999 if other == "bf16" else 0.5) < v["min_cosine"] <= v["mean_cosine"] <= 1 + 1e-9
            assert abs(v["max_abs_cosine_diff"] - (1 - v["min_cosine"])) < 1e-9
            assert v["n_texts"] > ds["n_queries"]
        # the fp32 side is one run, whichever precision it is compared with
        assert [r["fp32"] for r in ds["against_fp32"]["bf16"]["metrics"]] == [r["fp32"] for r in ds["against_fp32"]["int8"]["metrics"]]


def test_committed_speed_is_side_by_side_and_names_the_cpu():
    data = json.loads(RESULT.read_text(encoding="utf-8"))
    speed, env = data["speed"], data["environment"]
    assert env["cpu_model"] and {"fp32", "int8"} <= set(speed["median_s"])
    assert all(len(v) == speed["rounds"] >= 1 for v in speed["seconds"].values())
    for p, median in speed["median_s"].items():
        assert min(speed["seconds"][p]) <= median <= max(speed["seconds"][p])
        assert abs(speed["texts_per_s"][p] - speed["n_texts"] / median) < 0.06
        assert abs(speed["speedup_vs_fp32"][p] - speed["median_s"]["fp32"] / median) < 1e-3
    assert "bf16" in speed["median_s"] or not env["cpu_avx512_bf16"]


def test_rerunning_one_dataset_keeps_the_other_datasets_entries_as_committed():
    """``--datasets kestrel_kb --update`` replaces that dataset's entry only; the rest of the JSON is unchanged."""
    import copy

    import pytest

    script = _script()
    committed = json.loads(RESULT.read_text(encoding="utf-8"))
    fresh = copy.deepcopy(committed)
    fresh["datasets"] = [copy.deepcopy(committed["datasets"][0])]
    fresh["datasets"][0]["n_queries"] = -1  # a marker: the new entry must be the one kept
    merged = script.merge_results(committed, fresh)
    assert [d["dataset"] for d in merged["datasets"]] == [d["dataset"] for d in committed["datasets"]]
    assert merged["datasets"][0]["n_queries"] == -1
    assert merged["datasets"][1:] == committed["datasets"][1:]
    other = copy.deepcopy(fresh)
    other["metrics"] = other["metrics"][:-1]
    with pytest.raises(SystemExit, match="metrics"):
        script.merge_results(committed, other)


def test_auto_follows_the_committed_measurement():
    """auto may pick only a precision that passes the documented rule on the committed runs."""
    from harness import runtime

    script = _script()
    verdict = script.auto_eligible(json.loads(RESULT.read_text(encoding="utf-8")))
    assert verdict["int8"] is runtime.AUTO_MAY_PICK_INT8
    assert verdict["bf16"] and "bf16" in runtime.AUTO_CHOICES
