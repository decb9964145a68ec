"""The declared component contracts: what a plain subclass of Chunker, Retriever and the
encoder base gets, that the run's stages call those declarations (no probing), and that
no getattr/hasattr probe of a contract name is left in harness/."""

import ast
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
from conftest import PROJECT_ROOT, compose

from harness.chunkers.base import Chunker
from harness.embeddings.base import CachedEncoder
from harness.experiment import build
from harness.experiment.pipeline import Evaluation, evaluate, retrieve
from harness.experiment.run import Components, check_retriever_depth, component_tags, encoder_tags, metric_groups, prepare
from harness.experiment.settings import default_metric_settings
from harness.retrievers.base import Retriever
from harness.retrievers.bm25 import BM25Retriever
from harness.types import Chunk, Dataset, Document, Evidence, Query

#: The capabilities the bases declare; a probe of one of these by name would hide a
#: component that does not honour its base (or a base that lost the declaration).
CONTRACT_NAMES = (
    "fetch_multiplier",
    "needs_encoder",
    "needs_builder",
    "needs_cache_dir",
    "stats",
    "depth",
    "candidates",
    "backend",
    "run_tags",
    "run_metrics",
    "special_tokens",
)

TEXT = "alpha beta gamma delta epsilon zeta eta theta iota kappa"


class Words(Chunker):
    """One chunk per word: ten chunks of the document above."""

    name = "words"

    def chunk(self, doc):
        out, pos = [], 0
        for word in doc.text.split():
            start = doc.text.index(word, pos)
            pos = start + len(word)
            out.append(Chunk.from_spans(doc, [(start, pos)]))
        return out


class Plain(Retriever):
    """Returns nothing; only the base's declarations."""

    def index(self, chunks):
        pass

    def search(self, queries, k):
        return {q.query_id: {} for q in queries}


class Table(CachedEncoder):
    """A backend with only the four abstract parts (no model)."""

    @property
    def embedding_key(self):
        return "0" * 64

    @property
    def max_seq_length(self):
        return 16

    def _count_raw(self, texts):
        return [len(t.split()) for t in texts]

    def _embed_batch(self, texts):
        raise AssertionError("nothing is embedded in these tests")


def _dataset():
    doc = Document("d", TEXT)
    return Dataset(name="words", documents=(doc,), queries=(Query("q", "gamma", (Evidence("d", 11, 16),)),))


def test_a_plain_subclass_gets_the_declared_defaults():
    ch, r, enc = Words(), Plain(), Table("m")
    assert (ch.fetch_multiplier, ch.needs_cache_dir, ch.needs_encoder, ch.needs_builder, ch.stats()) == (1, False, False, False, {})
    assert (r.depth, r.candidates, r.needs_encoder, r.needs_builder, r.stats()) == (None, None, False, False, {})
    assert (enc.backend, enc.special_tokens, enc.run_tags()) == ("base", 0, {})


class Recording(BM25Retriever):
    """BM25 that remembers the k of every search."""

    def search(self, queries, k):
        self.asked = getattr(self, "asked", []) + [k]
        return super().search(queries, k)


@pytest.mark.parametrize(("multiplier", "n_chunks", "fetched"), [(1, 10, 2), (3, 10, 6), (3, 4, 4)])
def test_the_pipeline_fetches_fetch_multiplier_times_the_depth(multiplier, n_chunks, fetched):
    # by hand: depth 2 (max ks, no budgets); the fetch is multiplier * 2, at most the chunk count
    ch = type("Wide", (Words,), {"fetch_multiplier": multiplier})()
    r = Recording()
    ds = _dataset()
    chunks = ch.chunk_all(ds.documents)[:n_chunks]
    r.index(chunks)
    retrieve(ds, ch, r, n_chunks, depth=2)
    assert r.asked == [fetched]


def test_a_run_searches_with_the_chunkers_multiplier():
    ch = type("Wide", (Words,), {"fetch_multiplier": 3})()
    r = Recording()
    evaluate(_dataset(), ch, r, default_metric_settings(ks=(1, 2), budgets=()), progress=False)
    assert r.asked == [6]  # 3 * max(ks) = 6 of the 10 word chunks


def test_the_builder_passes_cache_dir_only_to_a_chunker_that_declares_it(monkeypatch, tmp_path):
    class Keeps(Words):
        needs_cache_dir = True

        def __init__(self, cache_dir=None):
            self.cache_dir = cache_dir

    class Reads(Words):
        def __init__(self, **kwargs):
            self.kwargs = kwargs

    doubles = types.ModuleType("contract_doubles")
    doubles.Keeps, doubles.Reads, doubles.NotAChunker = Keeps, Reads, dict
    monkeypatch.setitem(sys.modules, "contract_doubles", doubles)
    cfg = compose([f"cache.dir={tmp_path}"])
    cfg.chunker = {"_target_": "contract_doubles.Keeps"}
    assert build.build_chunker(cfg).cache_dir == str(tmp_path)
    cfg.chunker = {"_target_": "contract_doubles.Reads"}
    assert build.build_chunker(cfg).kwargs == {}
    cfg.chunker = {"_target_": "contract_doubles.NotAChunker"}
    with pytest.raises(TypeError, match=r"^chunker._target_ 'contract_doubles.NotAChunker' does not build a harness Chunker$"):
        build.build_chunker(cfg)
    cfg.retriever = {"_target_": "contract_doubles.NotAChunker"}
    with pytest.raises(TypeError, match=r"^retriever._target_ 'contract_doubles.NotAChunker' does not build a harness Retriever$"):
        build.build_retriever(cfg)
    cfg.embedding = {"_target_": "contract_doubles.NotAChunker"}
    with pytest.raises(TypeError, match=r"^embedding._target_ 'contract_doubles.NotAChunker' does not build an embedding backend"):
        build.build_encoder(cfg)


def test_the_builder_passes_builder_only_to_a_retriever_that_declares_it(monkeypatch):
    class Nests(Plain):
        needs_builder = True

        def __init__(self, inner=None, builder=None):
            self.inner = builder("retriever.inner", inner, None)

    class Reads(Plain):
        def __init__(self, **kwargs):
            self.kwargs = kwargs

    doubles = types.ModuleType("retriever_doubles")
    doubles.Nests, doubles.Reads = Nests, Reads
    monkeypatch.setitem(sys.modules, "retriever_doubles", doubles)
    cfg = compose([])
    cfg.retriever = {"_target_": "retriever_doubles.Reads"}
    assert build.build_retriever(cfg).kwargs == {}
    cfg.retriever = {"_target_": "retriever_doubles.Nests", "_recursive_": False, "_convert_": "all", "inner": {"_target_": "retriever_doubles.Reads"}}
    built = build.build_retriever(cfg)
    assert isinstance(built.inner, Reads) and built.inner.kwargs == {}
    cfg.retriever.inner = {"_target_": "retriever_doubles.Reads", "builder": "x"}  # passed by the builder, never a setting
    with pytest.raises(ValueError, match=r"^retriever\.inner\.builder is not a setting of retriever_doubles\.Reads"):
        build.build_retriever(cfg)
    cfg.retriever.inner = {"_target_": "harness.types.Query"}
    with pytest.raises(ValueError, match=r"^retriever\.inner\._target_ 'harness\.types\.Query' is not a harness Retriever$"):
        build.build_retriever(cfg)


def _logged(parts, settings):
    ev = Evaluation(metrics={f"recall@{k}": 0.5 for k in settings.metrics.ks}, per_query=pd.DataFrame(), chunks=[], run={})
    return {name: v for values, step in metric_groups(ev, parts, None, settings) for name, v in values.items() if step == 0}


def test_the_run_logs_the_declared_stats_of_chunker_and_retriever():
    settings = prepare(compose(["stats.bootstrap=0"]))
    plain = _logged(Components(Table("m"), Words(), Plain(), None, None), settings)
    counting = _logged(
        Components(
            Table("m"),
            type("Counting", (Words,), {"stats": lambda self: {"words.calls": 7.0}})(),
            type("Scoring", (Plain,), {"stats": lambda self: {"plain.pairs": 3.0}})(),
            None,
            None,
        ),
        settings,
    )
    assert counting == {**plain, "words.calls": 7.0, "plain.pairs": 3.0}
    # the encoder's run_metrics are logged too: a fresh backend has embedded nothing
    assert plain["embedding.texts_embedded"] == 0.0 and plain["embedding.window_tokens"] == 16.0


def test_the_run_tags_name_the_backend_and_add_the_encoders_run_tags():
    bf16 = type("Half", (Table,), {"backend": "tables", "run_tags": lambda self: {"embedding.precision": "bf16"}})("m")
    dense = Components(bf16, Words(), type("Dense", (Plain,), {"needs_encoder": True})(), None, None)
    assert component_tags(dense) == {"chunker": "words", "retriever": "base", "embedding": "tables/m"}
    assert encoder_tags(dense) == {"embedding.precision": "bf16"}
    lexical = Components(bf16, Words(), Plain(), None, None)  # nothing embeds: no model named, no encoder tags
    assert component_tags(lexical)["embedding"] == "none" and encoder_tags(lexical) == {}
    assert encoder_tags(Components(Table("m"), Words(), dense.retriever, None, None)) == {}  # the base: none


@pytest.mark.parametrize("setting", ["depth", "candidates"])
def test_a_declared_candidate_count_below_the_deepest_cut_is_refused(setting):
    metrics = default_metric_settings(ks=(1, 5), budgets=())
    check_retriever_depth(Plain(), metrics)  # the base declares None: nothing to check
    check_retriever_depth(type("Deep", (Plain,), {setting: 5})(), metrics)
    with pytest.raises(ValueError, match=rf"^retriever.{setting}=4 is below the deepest cut-off max\(metrics.ks\)=5"):
        check_retriever_depth(type("Shallow", (Plain,), {setting: 4})(), metrics)


def _probes(root: Path):
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2:
                name = node.args[1]
                if isinstance(name, ast.Constant) and name.value in CONTRACT_NAMES:
                    yield f"{path.relative_to(root.parent)}:{node.lineno}: {node.func.id}(..., {name.value!r})"


def test_no_contract_is_probed_by_name():
    assert list(_probes(PROJECT_ROOT / "harness")) == []


def test_the_probe_finder_finds_a_probe(tmp_path):
    pkg = tmp_path / "harness"
    pkg.mkdir()
    (pkg / "m.py").write_text('x = getattr(c, "fetch_multiplier", 1)\ny = hasattr(r, "stats")\nz = getattr(c, "name", "")\n', encoding="utf-8")
    assert list(_probes(pkg)) == ["harness/m.py:1: getattr(..., 'fetch_multiplier')", "harness/m.py:2: hasattr(..., 'stats')"]
