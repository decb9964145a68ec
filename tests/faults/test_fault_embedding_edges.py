"""Embedding inputs at the edges (issue 13, class 6): texts over the model window, cached
vectors of another dimension, FAISS dimension mismatches.

Real packaged MiniLM, real FAISS, real SQLite cache under ``tmp_path``. Word-piece counts are
hand-worked ("hello" is one WordPiece of the uncased vocabulary, plus [CLS] and [SEP]) and
checked against the ``transformers`` tokenizer loaded independently of the harness."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import compose

from harness import cache as hc

WINDOW = 256  # all-MiniLM-L6-v2 max_seq_length, special tokens included


def hello(n: int) -> str:
    """``n`` words that are one word piece each: ``n + 2`` model tokens with [CLS]/[SEP]."""
    return " ".join(["hello"] * n)


#: 12, 302, 256, 257 and 302 model tokens: three texts (positions 1, 3, 4) exceed 256.
TEXTS = [hello(10), hello(300), hello(254), hello(255), hello(300)]


def truncation_warnings(record) -> list[str]:
    return [str(w.message) for w in record if "window" in str(w.message)]


def test_hand_worked_counts_agree_with_an_independent_tokenizer(encoder):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(encoder.model_path))
    assert [len(ids) for ids in tok(TEXTS, add_special_tokens=True, truncation=False)["input_ids"]] == [12, 302, 256, 257, 302]


def test_texts_over_the_window_warn_once_with_the_count_also_from_a_warm_cache(tmp_path):
    from harness.embeddings.model import Encoder

    enc = Encoder(show_progress=False, cache_dir=tmp_path)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        vecs = enc.encode(TEXTS, desc="embed chunks")
    messages = truncation_warnings(record)
    assert len(messages) == 1, messages
    assert "3 of 5 texts" in messages[0] and "256-word-piece" in messages[0] and "longest 302" in messages[0]
    assert "embedding.on_truncate" in messages[0] and "embed chunks" in messages[0]
    # the warning is true: the model really cut them, to the vector of the 256-token text
    assert np.allclose(vecs[1], vecs[2], atol=1e-5) and np.allclose(vecs[3], vecs[2], atol=1e-5)
    assert not np.allclose(vecs[0], vecs[2], atol=1e-3)
    with warnings.catch_warnings(record=True) as record:  # the same texts again: already reported
        warnings.simplefilter("always")
        enc.encode(TEXTS[1:3], desc="embed chunks")
    assert truncation_warnings(record) == []

    warm = Encoder(show_progress=False, cache_dir=tmp_path)  # vectors come from the disk cache ...
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        again = warm.encode(TEXTS, desc="embed chunks")
    assert warm.n_encoded == 0 and warm._model is None  # ... without loading the model
    assert np.array_equal(again, vecs)
    assert [m for m in truncation_warnings(record) if "3 of 5 texts" in m]  # and the run still says so


def test_on_truncate_error_refuses_before_embedding_and_ignore_is_silent():
    from harness.embeddings.model import Encoder

    strict = Encoder(show_progress=False, on_truncate="error")
    with pytest.raises(ValueError, match=r"embedding\.on_truncate=error: 3 of 5 texts .*256-word-piece.*longest 302"):
        strict.encode(TEXTS)
    assert strict.n_encoded == 0  # nothing was embedded
    assert strict.encode([hello(254)]).shape == (1, 384)  # a text that fits is fine

    quiet = Encoder(show_progress=False, on_truncate="ignore")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        quiet.encode(TEXTS[:2])
    assert truncation_warnings(record) == []


def test_strict_window_error_names_the_longest_chunk_its_document_its_tokens_and_the_window():
    """Issue 24, class 7: with on_truncate=error the refusal names the chunk to fix."""
    from harness.embeddings.model import Encoder
    from harness.retrievers.faiss import FaissRetriever
    from harness.types import Chunk, Document

    # hello(300) is 302 model tokens, hello(280) 282 (hand-worked above: one word piece each + 2)
    docs = [Document("guide.md", hello(10)), Document("notes/run#3.md", hello(280) + " " + hello(300)), Document("faq.md", hello(280))]
    short = Chunk.from_spans(docs[0], [(0, len(docs[0].text))])
    start = len(hello(280)) + 1
    longest = Chunk.from_spans(docs[1], [(start, len(docs[1].text))])
    other = Chunk.from_spans(docs[2], [(0, len(docs[2].text))])
    retr = FaissRetriever(encoder=Encoder(show_progress=False, on_truncate="error"))
    with pytest.raises(ValueError) as info:
        retr.index([short, longest, other])
    message = str(info.value)
    assert "\n" not in message and message.startswith("embedding.on_truncate=error: 2 of 3 texts (embed chunks)")
    assert "longest 302 word pieces" in message and f": chunk {longest.chunk_id!r} of document 'notes/run#3.md')" in message
    assert "256-word-piece window" in message
    assert retr.encoder.n_encoded == 0  # refused before anything was embedded


def test_bad_on_truncate_is_a_one_line_config_error_before_any_work(tracking_uri):
    import mlflow

    from harness.experiment import build
    from harness.experiment.run import execute

    with pytest.raises(ValueError, match="embedding.on_truncate must be one of 'warn', 'error', 'ignore', got 'raise'$"):
        build.build_encoder(compose(["embedding.on_truncate=raise"]))
    cfg = compose(["embedding.on_truncate=wran", f"tracking.uri={tracking_uri}"])
    with pytest.raises(ValueError, match="embedding.on_truncate must be one of 'warn', 'error', 'ignore'") as info:
        execute(cfg)
    assert "did you mean 'warn'" in str(info.value) and "\n" not in str(info.value)
    client = mlflow.MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name("kestrel_kb")
    assert exp is None or client.search_runs([exp.experiment_id]) == []  # refused before any run was opened


def test_a_run_with_chunks_over_the_window_warns_once_with_the_chunk_count(tmp_path):
    from transformers import AutoTokenizer

    from harness.embeddings.model import Encoder
    from harness.experiment import build
    from harness.experiment.pipeline import EvaluationTools, evaluate
    from harness.experiment.settings import default_metric_settings
    from harness.types import Dataset, Document, Evidence, Query

    docs = (
        Document("long1.txt", "The broker keeps leases. " + hello(400)),
        Document("long2.txt", "Workers send heartbeats. " + hello(260)),
        Document("short1.txt", "The scheduler runs jobs at midnight."),
        Document("short2.txt", "Backups are copied to the archive every week."),
    )
    q = Query("q1", "When does the scheduler run jobs?", (Evidence("short1.txt", 0, 36, docs[2].text[:36]),))
    dataset = Dataset("windows", docs, (q,))
    tok = AutoTokenizer.from_pretrained(str(Encoder().model_path))
    expected = sum(len(ids) > WINDOW for ids in tok([d.text for d in docs], add_special_tokens=True)["input_ids"])
    assert expected == 2  # the two long documents, each one chunk

    cfg = compose(["chunker=recursive", "chunker.unit=chars", "chunker.chunk_size=4000", "retriever=faiss"])
    enc = Encoder(show_progress=False)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ev = evaluate(
            dataset,
            build.build_chunker(cfg, enc),
            build.build_retriever(cfg, enc),
            default_metric_settings(ks=[1], budgets=()),
            EvaluationTools(chunk_token_counter=enc.count_tokens, max_seq_length=enc.max_seq_length),
            progress=False,
        )
    assert len(ev.chunks) == 4
    messages = truncation_warnings(record)
    assert len(messages) == 1, messages
    assert "2 of 4 texts (embed chunks)" in messages[0]
    assert ev.chunk_stats["n_truncated"] == expected


def test_cached_vectors_of_another_dimension_name_both_models_and_dimensions(tmp_path):
    from harness.embeddings.model import Encoder

    enc = Encoder(show_progress=False, cache_dir=tmp_path)
    rng = np.random.default_rng(0)
    # a 768-dimensional vector filed under this model's key by another model
    hc.EmbeddingCache(tmp_path / "embeddings").put(
        enc.embedding_key, {hc.text_key("hello"): rng.standard_normal(768).astype(np.float32)}, {"model": "mpnet-base-768"}
    )
    with pytest.raises(ValueError) as info:
        enc.encode(["hello"])
    message = str(info.value)
    for part in ("mpnet-base-768", "all-MiniLM-L6-v2", "768-dimensional", "384-dimensional", "embeddings.sqlite"):
        assert part in message, message
    assert enc._model is None  # refused before any model call


class FirstDims:
    """A real embedding function of another dimension: MiniLM's first ``d`` coordinates."""

    def __init__(self, encoder, d: int) -> None:
        self.encoder, self.d, self.model_name = encoder, d, f"first-{d}-dims-of-MiniLM"

    def encode(self, texts, desc: str = "embed", role: str = "document"):
        return self.encoder.encode(texts, desc, role)[:, : self.d]


def test_faiss_query_of_another_dimension_is_a_value_error_not_an_assertion(encoder):
    from harness.retrievers.faiss import FaissRetriever
    from harness.types import Chunk, Document, Query

    doc = Document("d", "The broker listens on port 8450. Workers poll it for jobs.")
    retriever = FaissRetriever(encoder=encoder)
    retriever.index([Chunk.from_spans(doc, [(0, 32)]), Chunk.from_spans(doc, [(33, 58)])])
    retriever.encoder = FirstDims(encoder, 128)  # queries embedded by another function
    with pytest.raises(ValueError, match=r"384-dimensional.*\(1, 384\).*first-128-dims-of-MiniLM.*\(1, 128\)"):
        retriever.search([Query("q", "Which port?", ())], 2)
