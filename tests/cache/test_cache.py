"""On-disk caches: a second identical run embeds nothing, keys change with the model and the
chunker, dimension mismatches are refused, damaged rows are discarded and overwritten (the
fault suite in tests/faults/test_fault_caches.py covers whole runs), and SIGKILLed writers
leave only valid entries.

Everything is real: the packaged MiniLM model, FAISS, the kestrel_kb dataset, SQLite and
JSON files under ``tmp_path``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import PROJECT_ROOT, compose

from harness import cache as hc
from harness.cli import cache as cli_cache
from harness.types import Chunk, Document


def _vec(i: int, dim: int = 384) -> np.ndarray:
    """Deterministic test vector number ``i`` (also rebuilt inside the writer subprocesses)."""
    return np.random.default_rng(i).standard_normal(dim).astype(np.float32)


# -- embedding cache API ------------------------------------------------------------------
def test_embedding_cache_round_trip_is_exact_and_keyed(tmp_path):
    store = hc.EmbeddingCache(tmp_path / "embeddings")
    assert store.get("m1", ["a"]) == {}  # no file yet: a miss, nothing created
    assert not store.path.exists()
    store.put("m1", {"a": _vec(1), "b": _vec(2)}, {"model": "test"})
    got = store.get("m1", ["a", "b", "c"], dim=384)
    assert set(got) == {"a", "b"}  # "c" was never stored
    assert got["a"].dtype == np.float32 and got["a"].shape == (384,)
    assert np.array_equal(got["a"], _vec(1)) and np.array_equal(got["b"], _vec(2))  # bit-exact
    assert store.get("m2", ["a", "b"]) == {}  # another embedding key never sees them
    assert store.stored_dim("m1") == 384 and store.stored_dim("m2") is None
    store.put("m1", {"a": _vec(99)})  # an existing entry is kept (same key = same vector)
    assert np.array_equal(store.get("m1", ["a"])["a"], _vec(1))
    assert store.count() == 2


def test_a_damaged_row_is_a_warned_miss_and_the_next_put_overwrites_only_it(tmp_path):
    import sqlite3
    import warnings

    store = hc.EmbeddingCache(tmp_path / "embeddings")
    store.put("m1", {"a": _vec(1), "b": _vec(2)})
    con = sqlite3.connect(store.path)
    with con:  # one flipped bit in "a"; SQLite itself sees nothing wrong
        blob = bytearray(con.execute("SELECT vec FROM vectors WHERE text_key = 'a'").fetchone()[0])
        blob[100] ^= 0x10
        con.execute("UPDATE vectors SET vec = ? WHERE text_key = 'a'", (bytes(blob),))
    con.close()
    with pytest.warns(UserWarning, match=rf"{store.path}: discarded 1 stored vector that failed checksum"):
        got = store.get("m1", ["a", "b"], dim=384)
    assert set(got) == {"b"} and store.n_damaged == 1
    store.put("m1", {"a": _vec(1), "b": _vec(99)})  # "a" is rewritten, the healthy "b" is kept
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = store.get("m1", ["a", "b"], dim=384)
    assert np.array_equal(got["a"], _vec(1)) and np.array_equal(got["b"], _vec(2))


def test_dimension_mismatch_raises_naming_both_dimensions(tmp_path):
    store = hc.EmbeddingCache(tmp_path / "embeddings")
    store.put("m1", {"a": _vec(1, 384)})
    with pytest.raises(ValueError, match=r"384-dimensional.*768-dimensional"):
        store.get("m1", ["a"], dim=768)
    with pytest.raises(ValueError, match=r"384-dimensional.*8-dimensional"):
        store.put("m1", {"b": _vec(2, 8)})
    assert store.count() == 1  # the refused put wrote nothing
    with pytest.raises(ValueError, match="share a dimension"):
        store.put("m3", {"x": _vec(1, 4), "y": _vec(2, 5)})


def test_encoder_refuses_cached_vectors_of_another_dimension(tmp_path):
    from harness.embeddings.model import Encoder

    enc = Encoder(show_progress=False, cache_dir=tmp_path)
    assert enc.declared_dim == 384  # read from modules.json + 1_Pooling/config.json
    # an 8-dimensional vector filed under this model's key: never returned as a 384-d one
    hc.EmbeddingCache(tmp_path / "embeddings").put(enc.embedding_key, {hc.text_key("hello"): _vec(1, 8)})
    with pytest.raises(ValueError, match=r"8-dimensional.*384-dimensional"):
        enc.encode(["hello"])
    assert enc._model is None  # refused before any model call


@pytest.mark.slow
def test_changed_model_folder_or_window_changes_the_key_and_is_re_embedded(tmp_path, encoder):
    from harness.embeddings.model import Encoder

    original = encoder.model_path
    changed = tmp_path / "model"
    changed.mkdir()
    for p in original.rglob("*"):  # the same weights, linked; one config file differs
        target = changed / p.relative_to(original)
        if p.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif p.name == "sentence_bert_config.json":
            conf = json.loads(p.read_text())
            conf["max_seq_length"] = 128
            target.write_text(json.dumps(conf))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(p)
    a = Encoder(show_progress=False, cache_dir=tmp_path / "cache")
    b = Encoder(model=str(changed), show_progress=False, cache_dir=tmp_path / "cache")
    assert a.fingerprint != b.fingerprint
    assert b.max_seq_length == 128 and a.embedding_key != b.embedding_key
    # the key also follows normalisation
    assert Encoder(normalize=False).embedding_key != a.embedding_key
    text = "Workers send heartbeats every fifteen seconds. " * 30  # > 128 word pieces
    va = a.encode([text])
    vb = b.encode([text])
    assert a.n_encoded == 1 and b.n_encoded == 1 and b.n_cache_hits == 0  # never the stale vector
    assert not np.allclose(va, vb, atol=1e-4)  # the 128-piece window really gives another vector


# -- the acceptance property ---------------------------------------------------------------
def _run(kestrel, cache_dir, chunker_conf):
    from harness.embeddings.model import Encoder
    from harness.experiment import build
    from harness.experiment.pipeline import EvaluationTools, evaluate
    from harness.experiment.settings import default_metric_settings

    cfg = compose([f"chunker={chunker_conf[0]}", *chunker_conf[1:], "retriever=faiss"])
    encoder = Encoder(show_progress=False, cache_dir=cache_dir)
    chunker = build.build_chunker(cfg, encoder)
    retriever = build.build_retriever(cfg, encoder)
    ev = evaluate(
        kestrel,
        chunker,
        retriever,
        default_metric_settings(ks=[1, 5], budgets=()),
        EvaluationTools(chunk_cache=hc.ChunkCache(cache_dir / "chunks"), chunker_config=build.to_container(cfg.chunker)),
        progress=False,
    )
    return ev, encoder


@pytest.mark.slow
def test_second_identical_run_embeds_nothing_and_a_threshold_sweep_reuses_sentences(kestrel, tmp_path):
    import dataclasses

    # three documents and their questions: every sentence is embedded once, so a smaller corpus keeps the test quick
    docs = kestrel.documents[:3]
    ids = {d.doc_id for d in docs}
    kestrel = dataclasses.replace(kestrel, documents=docs, queries=tuple(q for q in kestrel.queries if all(e.doc_id in ids for e in q.evidence)))
    assert len(kestrel.queries) > 10
    semantic = ("semantic", "chunker.threshold=0.5")
    first, enc1 = _run(kestrel, tmp_path, semantic)
    assert enc1.n_encoded > len(first.chunks) + len(kestrel.queries)  # sentences + chunks + queries
    assert first.cache == {"chunks_cached": 0.0, "chunks_stored": 1.0}

    second, enc2 = _run(kestrel, tmp_path, semantic)  # a new encoder: only the disk cache is shared
    assert enc2.n_encoded == 0  # no model call at all ...
    assert enc2._model is None  # ... the model was not even loaded
    assert second.cache == {"chunks_cached": 1.0}
    assert second.chunks == first.chunks
    assert second.run == first.run  # bit-identical vectors give identical scores
    assert second.metrics == first.metrics

    # another threshold: chunking reruns, but every sentence vector comes from the cache,
    # so the model embeds at most the chunk texts it has not seen before
    third, enc3 = _run(kestrel, tmp_path, ("semantic", "chunker.threshold=0.3"))
    new_chunk_texts = {c.text for c in third.chunks} - {c.text for c in first.chunks}
    assert third.cache["chunks_cached"] == 0.0
    assert 0 < enc3.n_encoded <= len(new_chunk_texts)
    assert enc3.n_cache_hits > 0

    # BM25 and FAISS share the chunk set: a BM25 run of the first config reads it
    from harness.embeddings.model import Encoder
    from harness.experiment import build
    from harness.experiment.pipeline import EvaluationTools, evaluate
    from harness.experiment.settings import default_metric_settings

    cfg = compose(["chunker=semantic", "chunker.threshold=0.5", "retriever=bm25"])
    enc4 = Encoder(show_progress=False, cache_dir=tmp_path)
    bm25 = evaluate(
        kestrel,
        build.build_chunker(cfg, enc4),
        build.build_retriever(cfg, enc4),
        default_metric_settings(ks=[1, 5], budgets=()),
        EvaluationTools(chunk_cache=hc.ChunkCache(tmp_path / "chunks"), chunker_config=build.to_container(cfg.chunker)),
        progress=False,
    )
    assert bm25.cache == {"chunks_cached": 1.0} and bm25.chunks == first.chunks and enc4.n_encoded == 0


# -- chunk-set cache -----------------------------------------------------------------------
def test_chunk_set_cache_round_trip_and_keys(kestrel, tmp_path):
    from harness.chunkers.recursive import RecursiveChunker

    conf = {"_target_": "harness.chunkers.recursive.RecursiveChunker", "chunk_size": 64, "chunk_overlap": 8, "unit": "tokens"}
    chunks = RecursiveChunker(chunk_size=64, chunk_overlap=8).chunk_all(kestrel.documents)
    store = hc.ChunkCache(tmp_path / "chunks")
    key = hc.chunk_set_key(kestrel.documents, conf)
    assert store.get(key) is None
    assert store.put(key, chunks, {"n": len(chunks)})
    assert store.get(key) == chunks  # spans, text, ids, metadata, parent ids, order
    assert store.path(key).parent.name == key[:2]
    # the key follows the chunker config (also key order does not matter) and the corpus
    assert hc.chunk_set_key(kestrel.documents, dict(reversed(list(conf.items())))) == key
    assert hc.chunk_set_key(kestrel.documents, {**conf, "chunk_size": 65}) != key
    assert hc.chunk_set_key(kestrel.documents, conf, embedding="e" * 64) != key
    doc0 = kestrel.documents[0]
    retyped = (replace(doc0, metadata={**doc0.metadata, "type": "python"}), *kestrel.documents[1:])
    assert hc.chunk_set_key(retyped, conf) != key  # document metadata steers chunkers
    with pytest.raises(ValueError, match="_target_"):
        hc.chunk_set_key(kestrel.documents, {"chunk_size": 64})
    # an entry under the wrong file name is refused by its stored key
    other = "f" * 64
    store.path(other).parent.mkdir(parents=True, exist_ok=True)
    store.path(other).write_text(store.path(key).read_text())
    with pytest.warns(UserWarning, match="stored key"):
        assert store.get(other) is None
    # a truncated file is a miss, not a crash
    store.path(other).write_text(store.path(key).read_text()[:100])
    with pytest.warns(UserWarning, match="unreadable"):
        assert store.get(other) is None


def test_chunk_sets_json_would_alter_are_not_cached(tmp_path):
    doc = Document("d", "alpha beta")
    tuple_meta = [Chunk.from_spans(doc, [(0, 5)], metadata={"path": ("a", "b")})]  # JSON makes it a list
    store = hc.ChunkCache(tmp_path)
    assert store.put("a" * 64, tuple_meta) is False and store.count() == 0
    plain = [Chunk.from_spans(doc, [(0, 5)], metadata={"path": ["a", "b"]}, parent_id="d#0-10")]
    assert store.put("b" * 64, plain) is True and store.get("b" * 64) == plain


# -- crash safety: SIGKILL a writer mid-way ------------------------------------------------
_WRITER = textwrap.dedent(
    """
    import sys, numpy as np
    from harness.cache import EmbeddingCache, ChunkCache
    from harness.types import Chunk, Document
    kind, folder = sys.argv[1], sys.argv[2]
    if kind == "embeddings":
        store = EmbeddingCache(folder)
        for b in range(10**6):
            batch = {f"t{i}": np.random.default_rng(i).standard_normal(384).astype(np.float32) for i in range(b * 50, b * 50 + 50)}
            print("begin", b, flush=True)
            store.put("m", batch)
            print("done", b, flush=True)
    else:
        store = ChunkCache(folder)
        doc = Document("d", "x" * 400_000)
        for b in range(10**6):
            chunks = [Chunk.from_spans(doc, [(i * 1000, i * 1000 + 1000)], metadata={"b": b}) for i in range(400)]
            print("begin", b, flush=True)
            store.put(f"{b:064x}", chunks)
            print("done", b, flush=True)
    """
)


def _kill_writer_midway(kind: str, folder: Path, torn, min_rounds: int = 3, max_rounds: int = 40) -> int:
    """Start the writer again and again and SIGKILL it at a seeded random moment after its
    first completed write, until at least ``min_rounds`` rounds ran and one kill was caught
    mid-write (``torn()`` true right after the kill: a temporary file or a hot SQLite
    journal left behind). Each round resumes on what the previous ones left.

    Returns:
        The number of rounds whose kill was caught mid-write (0 only after ``max_rounds``).
    """
    rng = np.random.default_rng(0)
    caught = 0
    for r in range(max_rounds):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, kind, str(folder)], stdout=subprocess.PIPE, text=True, cwd=str(PROJECT_ROOT))
        try:
            while not (line := proc.stdout.readline()).startswith("done"):  # imports are over
                assert line, "writer died early"
            time.sleep(float(rng.uniform(0.0, 0.15)))
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            proc.stdout.close()
        assert proc.returncode == -signal.SIGKILL
        caught += bool(torn())
        if caught and r + 1 >= min_rounds:
            break
    return caught


def test_killed_embedding_writer_leaves_only_whole_valid_batches(tmp_path):
    folder = tmp_path / "embeddings"
    hot_journal = lambda: (folder / "embeddings.sqlite-journal").exists()  # noqa: E731
    assert _kill_writer_midway("embeddings", folder, hot_journal) >= 1  # a kill inside a transaction
    store = hc.EmbeddingCache(folder)
    got = store.get("m", [f"t{i}" for i in range(200_000)], dim=384)
    assert len(got) >= 50 and len(got) % 50 == 0  # whole transactions only
    n = len(got)
    assert set(got) == {f"t{i}" for i in range(n)}
    for i in range(n):
        assert np.array_equal(got[f"t{i}"], _vec(i)), i
    store.put("m", {"after": _vec(7)})  # the store is still writable
    assert store.count() == n + 1


@pytest.mark.slow
def test_killed_chunk_writer_leaves_no_half_written_entry(tmp_path):
    folder = tmp_path / "chunks"
    temp_file = lambda: any(folder.rglob("*.tmp"))  # noqa: E731
    assert _kill_writer_midway("chunks", folder, temp_file) >= 1  # a kill between write and rename
    store = hc.ChunkCache(folder)
    entries = sorted(folder.glob("*/*.json"))
    assert len(entries) >= 1
    doc = Document("d", "x" * 400_000)
    for path in entries:  # every visible entry is complete and equal to what was written
        b = int(path.stem, 16)
        expected = [Chunk.from_spans(doc, [(i * 1000, i * 1000 + 1000)], metadata={"b": b}) for i in range(400)]
        assert store.get(path.stem) == expected
    info = hc.Cache(tmp_path).info()  # leftover temporary files do not break info/clear
    assert info["chunks"]["entries"] == len(entries)
    hc.Cache(tmp_path).clear("chunks")
    assert not folder.exists()


def test_two_processes_write_the_same_embedding_cache_at_once(tmp_path):
    """Parallel sweep jobs (joblib launcher) share one cache folder: SQLite locking serialises them."""
    script = textwrap.dedent(
        """
        import sys, numpy as np
        from harness.cache import EmbeddingCache
        store, who = EmbeddingCache(sys.argv[1]), sys.argv[2]
        for b in range(20):
            store.put("m", {f"{who}{i}": np.random.default_rng(i).standard_normal(384).astype(np.float32) for i in range(b * 50, b * 50 + 50)})
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), who], cwd=str(PROJECT_ROOT)) for who in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    store = hc.EmbeddingCache(tmp_path)
    assert store.count() == 2 * 20 * 50
    got = store.get("m", [f"{who}{i}" for who in "ab" for i in range(1000)], dim=384)
    assert all(np.array_equal(got[f"{who}{i}"], _vec(i)) for who in "ab" for i in range(1000))


# -- CLI and config ------------------------------------------------------------------------
def test_cli_info_and_clear(tmp_path, capsys):
    root = hc.Cache(tmp_path)
    root.embeddings.put("m", {"a": _vec(1), "b": _vec(2)})
    doc = Document("d", "alpha beta")
    root.chunks.put("c" * 64, [Chunk.from_spans(doc, [(0, 5)])])
    assert cli_cache.main(["info", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "embeddings          2 vectors" in out and "chunks              1 chunk sets" in out
    assert cli_cache.main(["clear", "--dir", str(tmp_path), "--kind", "chunks"]) == 0
    assert "cleared chunks: 1 entries" in capsys.readouterr().out
    assert root.info()["chunks"] == {"bytes": 0, "entries": 0}
    assert root.info()["embeddings"]["entries"] == 2  # the other kind is untouched
    cli_cache.main(["clear", "--dir", str(tmp_path)])
    assert root.info()["embeddings"] == {"bytes": 0, "entries": 0}
    with pytest.raises(SystemExit):
        cli_cache.main(["clear", "--kind", "indexes", "--dir", str(tmp_path)])


def test_module_runs_as_a_command(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "harness", "cache", "info", "--dir", str(tmp_path)], capture_output=True, text=True, cwd=str(PROJECT_ROOT), check=True
    ).stdout
    assert f"cache folder {tmp_path}" in out and "0 vectors" in out


def test_cache_config_group_defaults():
    cfg = compose(["cache.enabled=true"])  # any cache.* override keeps the configured default dir
    assert cfg.cache.enabled is True
    assert Path(cfg.cache.dir) == PROJECT_ROOT / ".cache" == hc.DEFAULT_CACHE_DIR
