"""``embedding=static``: a model2vec static model distilled locally from the packaged MiniLM.

The models here are distilled with a small vocabulary (the most frequent words of
kestrel_kb), which takes seconds instead of the full vocabulary's minute and a half."""

import re
from collections import Counter

import numpy as np
import pytest
from conftest import KESTREL_PATH, compose

from harness.embeddings.static import StaticEncoder, is_static_folder


def _vocabulary(n: int = 200) -> list[str]:
    """The ``n`` most frequent lowercase words of kestrel_kb's documents (ties by word)."""
    counts = Counter(
        w for p in sorted((KESTREL_PATH / "corpus").rglob("*")) if p.is_file() for w in re.findall(r"[a-z]+", p.read_text(encoding="utf-8").lower())
    )
    return [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]


VOCABULARY = _vocabulary()
#: The distillation settings of every encoder here (one distilled folder, shared through the cache).
SMALL = {"vocabulary": VOCABULARY, "pca_dims": 64}
TEXTS = ["The scheduler retries failed jobs.", "Workers send heartbeats to the coordinator.", "zzzz qqqq"]


@pytest.fixture(scope="session")
def distilled(tmp_path_factory):
    """(cache folder, encoder that distilled a small static model into it); session-wide, as
    the suite runs the slow tests of every module first, which would set a module fixture up twice."""
    cache = tmp_path_factory.mktemp("static-cache")
    enc = StaticEncoder(**SMALL, cache_dir=cache, show_progress=False)
    with pytest.warns(UserWarning, match=r"embedding=static: distilled a static model from 'all-MiniLM-L6-v2' \(\d+ tokens, \d+ dimensions\) in [0-9.]+ s"):
        enc.preflight()
    return cache, enc


@pytest.mark.slow
def test_distilled_model_encodes_with_the_right_shapes(distilled):
    cache, enc = distilled
    assert is_static_folder(enc.model_path) and enc.model_path.parent == cache / "static_models"
    assert enc.distill_seconds > 0 and enc.run_metrics()["embedding.distill_s"] == enc.distill_seconds
    dim = enc.declared_dim
    assert dim == 64  # PCA from MiniLM's 384
    vecs = enc.encode(TEXTS)
    assert vecs.shape == (3, dim) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs[:2], axis=1), 1.0, atol=1e-3)  # L2-normalised
    assert not vecs[2].any()  # only unknown tokens: model2vec drops them, a zero vector
    assert enc.encode([]).shape == (0, dim)
    assert enc.max_seq_length == 512 and enc.special_tokens == 0
    assert enc.count_tokens(["the scheduler retries"]) == [len(enc.token_spans("the scheduler retries"))]


@pytest.mark.slow
def test_the_cache_and_the_distilled_model_are_reused(distilled, recwarn):
    cache, first = distilled
    first.encode(TEXTS)
    again = StaticEncoder(**SMALL, cache_dir=cache, show_progress=False)
    again.preflight()
    assert again.model_path == first.model_path and again.distill_seconds is None  # not distilled again
    assert not [w for w in recwarn if "distilled" in str(w.message)]
    assert again.embedding_key == first.embedding_key
    np.testing.assert_array_equal(again.encode(TEXTS), first.encode(TEXTS))
    assert again.n_encoded == 0 and again.n_cache_hits == 3 and again._model is None  # nothing embedded, nothing loaded
    # a ready folder given as embedding.path is used as is: same vectors, no distillation
    ready = StaticEncoder(path=str(first.model_path), show_progress=False)
    np.testing.assert_allclose(ready.encode(TEXTS), first.encode(TEXTS), atol=1e-6)
    assert ready.distill_seconds is None


@pytest.mark.slow
def test_prompts_and_roles(distilled):
    _, enc = distilled
    prompted = StaticEncoder(**SMALL, cache_dir=distilled[0], query_prompt="where is", show_progress=False)
    q = prompted.encode(["the scheduler"], role="query")
    d = prompted.encode(["the scheduler"], role="document")
    np.testing.assert_array_equal(d, enc.encode(["the scheduler"]))
    assert not np.allclose(q, d, atol=1e-3)


@pytest.mark.slow
def test_the_window_is_the_static_tokenizers_first_tokens(distilled, tmp_path):
    cache, enc = distilled
    short = StaticEncoder(**SMALL, cache_dir=cache, max_seq_length=4, show_progress=False)
    text = "the scheduler retries failed jobs and the workers send heartbeats"
    assert short.count_tokens([text])[0] > 4 and short.embedding_key != enc.embedding_key
    spans = short.token_spans(text)
    with pytest.warns(UserWarning, match="4-token window"):
        cut = short.encode([text])
    np.testing.assert_allclose(cut, enc.encode([text[: spans[3][1]]]), atol=1e-6)  # exactly the first four tokens
    assert not np.allclose(cut, enc.encode([text]), atol=1e-3)


def test_missing_path_and_bad_settings_fail_naming_the_setting(tmp_path):
    with pytest.raises(ValueError, match=r"embedding.path '.*nope' does not exist"):
        StaticEncoder(path=str(tmp_path / "nope")).preflight()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"embedding.path '.*empty' is not a model2vec StaticModel folder"):
        StaticEncoder(path=str(tmp_path / "empty")).encode(["x"])
    with pytest.raises(ValueError, match=r"embedding.source_model 'acme/absent' is not a local folder and not in the local Hugging Face cache"):
        StaticEncoder(source_model="acme/absent", cache_dir=tmp_path).preflight()
    for kwargs, setting in (
        ({"pca_dims": 0}, "pca_dims"),
        ({"vocabulary": "the"}, "vocabulary"),
        ({"vocabulary": []}, "vocabulary"),
        ({"sif_coefficient": 1.5}, "sif_coefficient"),
        ({"max_seq_length": 0}, "max_seq_length"),
        ({"source_model": ""}, "source_model"),
        ({"batch_size": 0}, "batch_size"),
    ):
        with pytest.raises(ValueError, match=f"embedding.{setting}"):
            StaticEncoder(**kwargs)


@pytest.mark.slow
def test_a_run_with_the_static_backend_finishes(distilled, tracking_uri):
    from harness.experiment.run import execute

    cache, _ = distilled
    vocab = "[" + ",".join(f"'{w}'" for w in VOCABULARY) + "]"  # quoted: true, false, null are words here
    cfg = compose(
        [
            "embedding=static",
            f"embedding.vocabulary={vocab}",
            "embedding.pca_dims=64",
            "embedding.show_progress=false",
            f"cache.dir={cache}",
            f"tracking.uri={tracking_uri}",
        ]
    )
    result = execute(cfg)
    m = result["metrics"]
    assert 0 < m["recall@5"] <= 1  # a small vocabulary still finds evidence
    import mlflow

    run = mlflow.MlflowClient(tracking_uri).get_run(result["run_id"])
    from harness.tracking.runs import run_metrics

    assert run.info.status == "FINISHED" and run.data.tags["embedding"].startswith("model2vec/")
    values = run_metrics(tracking_uri, result["run_id"])  # embedding.* are in the metrics table
    assert values["embedding.texts_embedded"] > 100 and "embedding.distill_s" not in values  # reused
