"""Caches never serve damage (issue 13, class 4).

Every test runs the real pipeline (packaged MiniLM, real FAISS, real SQLite and JSON cache
files under ``tmp_path``) on a small synthetic corpus, damages the cache on disk the way a
disk, a copy or a hand edit does, runs again and requires metrics and scores identical to
the clean run, a warning that names the damaged file and the number of discarded entries,
and a cache that is healthy again afterwards (the entries were overwritten).
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import sqlite3
import warnings
from pathlib import Path

import pytest
from conftest import compose

from harness import cache as hc
from harness.embeddings.base import INPUT_KEY_PREFIX

#: Six documents on unrelated topics; each query paraphrases one sentence of one document.
DOCS = {
    "bees.txt": (
        "Honey bees communicate the direction of flowers with a waggle dance. "
        "The angle of the dance relative to the vertical comb gives the angle to the sun.\n\n"
        "A colony keeps its brood nest at about thirty-five degrees by shivering its flight muscles."
    ),
    "volcano.txt": (
        "Basaltic lava is runny because it holds little silica, so it flows far before it cools. "
        "Hawaiian eruptions are mostly of this kind.\n\n"
        "Explosive eruptions come from sticky, gas-rich magma that shatters into ash."
    ),
    "bread.txt": (
        "Sourdough rises because wild yeast and lactic acid bacteria ferment the flour. "
        "The bacteria make the acids that give the loaf its sour taste.\n\n"
        "A baker keeps the starter alive by feeding it flour and water every day."
    ),
    "chess.txt": (
        "Castling moves the king two squares towards a rook and puts the rook on the other side. "
        "It is not allowed while the king is in check.\n\n"
        "En passant lets a pawn capture an enemy pawn that has just advanced two squares past it."
    ),
    "tides.txt": (
        "Spring tides happen when the sun and the moon line up, at new and full moon. "
        "Their pulls add up and the tidal range is largest.\n\n"
        "Neap tides come at the quarter moons, when the two pulls partly cancel."
    ),
    "printing.txt": (
        "Gutenberg's press used movable metal type cast from an alloy of lead, tin and antimony. "
        "Oil-based ink stuck to the metal far better than the water-based inks of woodblocks.\n\n"
        "The first large book he printed was a Latin Bible of about 1,280 pages."
    ),
}
QUERIES = [
    ("q1", "How do bees tell each other where the flowers are?", "bees.txt", "waggle dance"),
    ("q2", "Why does basaltic lava flow so far?", "volcano.txt", "holds little silica"),
    ("q3", "What makes sourdough bread taste sour?", "bread.txt", "give the loaf its sour taste"),
    ("q4", "When is castling forbidden?", "chess.txt", "not allowed while the king is in check"),
    ("q5", "When is the tidal range at its largest?", "tides.txt", "the tidal range is largest"),
    ("q6", "What metal alloy was Gutenberg's type made of?", "printing.txt", "lead, tin and antimony"),
]


def write_corpus(root: Path) -> Path:
    """Write the synthetic corpus in the project's native folder format; returns the folder."""
    (root / "corpus").mkdir(parents=True)
    for name, text in DOCS.items():
        (root / "corpus" / name).write_text(text, encoding="utf-8", newline="")
    with (root / "questions.jsonl").open("w", encoding="utf-8") as f:
        for qid, query, doc, phrase in QUERIES:
            start = DOCS[doc].index(phrase)
            ev = {"doc_id": doc, "start": start, "end": start + len(phrase), "text": phrase}
            f.write(json.dumps({"query_id": qid, "query": query, "evidence": [ev]}) + "\n")
    return root


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from harness.datasets.native import load_native

    return load_native(write_corpus(tmp_path_factory.mktemp("tiny") / "tiny"), name="tiny")


CHUNKER = ["chunker=recursive", "chunker.unit=chars", "chunker.chunk_size=120"]


@functools.lru_cache(maxsize=1)
def _config():
    return compose([*CHUNKER, "retriever=faiss"])


def run_once(dataset, cache_dir: Path):
    """One real evaluation (recursive chunks of <= 120 chars, FAISS) with both caches in
    ``cache_dir``; a new encoder each time, so only the disk caches carry over."""
    from harness.embeddings.model import Encoder
    from harness.experiment import build
    from harness.experiment.pipeline import EvaluationTools, evaluate
    from harness.experiment.settings import default_metric_settings

    cfg = _config()
    encoder = Encoder(show_progress=False, cache_dir=cache_dir)
    ev = evaluate(
        dataset,
        build.build_chunker(cfg, encoder),
        build.build_retriever(cfg, encoder),
        default_metric_settings(ks=[1, 3], budgets=()),
        EvaluationTools(chunk_cache=hc.Cache(cache_dir).chunks, chunker_config=build.to_container(cfg.chunker)),
        progress=False,
    )
    return ev, encoder


def discarded_count(message: str) -> int:
    """The number of discarded entries a cache warning states ("discarded 3 stored vectors")."""
    m = re.search(r"discarded (\d+) stored vectors?\b", message)
    assert m, message
    return int(m.group(1))


def cache_warnings(record) -> list[str]:
    return [str(w.message) for w in record if "cache" in str(w.message)]


@pytest.fixture(scope="module")
def clean_cache(tiny, tmp_path_factory):
    """The reference: a cold run into an empty cache; returns (evaluation, cache folder)."""
    folder = tmp_path_factory.mktemp("clean") / "cache"
    ev, enc = run_once(tiny, folder)
    assert enc.n_encoded == len({c.text for c in ev.chunks}) + len(tiny.queries)
    assert ev.metrics["hit_rate@1"] == 1.0  # every query finds its document's chunk first on a clean cache
    return ev, folder


@pytest.fixture(scope="module")
def clean(clean_cache):
    return clean_cache[0]


@pytest.fixture()
def cache_dir(clean_cache, tmp_path):
    """A copy of the cache folder the clean run filled."""
    target = tmp_path / "cache"
    shutil.copytree(clean_cache[1], target)
    return target


def assert_same_results(ev, clean):
    """Same chunks, same rankings, same metrics; scores equal up to float rounding: a vector
    embedded again in a smaller batch can differ from the first one in its last bits (the
    BLAS kernels depend on the batch shape on some CPUs), never by a damaged row's error."""
    assert ev.chunks == clean.chunks
    assert {q: list(hits) for q, hits in ev.run.items()} == {q: list(hits) for q, hits in clean.run.items()}  # same chunks in the same order
    for q, hits in clean.run.items():
        assert ev.run[q] == pytest.approx(hits, abs=1e-5), q
    assert ev.metrics == pytest.approx(clean.metrics, abs=1e-9)


@pytest.mark.slow
def test_altered_vector_bytes_are_discarded_recomputed_and_overwritten(tiny, clean, cache_dir):
    db = cache_dir / "embeddings" / "embeddings.sqlite"
    con = sqlite3.connect(db)
    with con:  # the rows by model input go: a cache by text only, as written before input keys, so each damaged text must be embedded again
        con.execute("DELETE FROM vectors WHERE text_key LIKE 'ids:%'")
    rows = con.execute("SELECT text_key, vec FROM vectors ORDER BY text_key").fetchall()
    assert len(rows) == len(clean.chunks) + len(tiny.queries)
    altered = rows[:3] + rows[-2:]  # five rows: bytes changed in place, same length
    with con:
        for i, (tk, vec) in enumerate(altered):
            b = bytearray(vec)
            if i == 0:
                b[5] ^= 0x01  # one bit of one mantissa: the vector barely changes
            else:
                for j in range(3, 64, 4):  # top byte (sign + exponent) of the first 16 floats
                    b[j] ^= 0xFF
            con.execute("UPDATE vectors SET vec = ? WHERE text_key = ?", (bytes(b), tk))
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"  # SQLite sees nothing wrong
    con.close()

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        second, enc2 = run_once(tiny, cache_dir)
    assert_same_results(second, clean)
    assert enc2.n_encoded == 5  # exactly the discarded rows were embedded again
    # one warning per read (chunk vectors, query vectors), each naming the file; counts add up to 5
    messages = cache_warnings(record)
    assert messages and all(str(db) in m for m in messages), messages
    assert sum(discarded_count(m) for m in messages) == 5, messages

    with warnings.catch_warnings(record=True) as record:  # overwritten: the next run is clean and warm
        warnings.simplefilter("always")
        third, enc3 = run_once(tiny, cache_dir)
    assert cache_warnings(record) == []
    assert enc3.n_encoded == 0 and enc3._model is None
    assert_same_results(third, clean)


def test_edited_chunk_set_file_is_discarded_rechunked_and_overwritten(tiny, clean, cache_dir):
    [entry] = sorted((cache_dir / "chunks").glob("*/*.json"))
    data = json.loads(entry.read_text(encoding="utf-8"))
    chunks = data["chunks"]
    # still valid JSON and valid chunks: one span moved, one text swapped for another chunk's
    first, second = chunks[0], chunks[1]
    first["spans"] = [[second["spans"][0][0], second["spans"][0][1]]]
    chunks[2]["text"] = chunks[3]["text"]
    entry.write_text(json.dumps(data), encoding="utf-8")

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ev, _ = run_once(tiny, cache_dir)
    assert_same_results(ev, clean)
    assert ev.cache["chunks_cached"] == 0.0 and ev.cache["chunks_stored"] == 1.0  # rechunked, rewritten
    messages = cache_warnings(record)
    assert len(messages) == 1, messages
    assert str(entry) in messages[0] and re.search(r"\b1 damaged entry\b", messages[0]), messages[0]

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        again, _ = run_once(tiny, cache_dir)
    assert cache_warnings(record) == [] and again.cache == {"chunks_cached": 1.0}
    assert_same_results(again, clean)


def _truncate(db: Path) -> None:
    data = db.read_bytes()
    assert len(data) >= 3 * 4096  # several pages, so half of the file is really missing
    db.write_bytes(data[: len(data) // 2])


def _zero_header(db: Path) -> None:
    data = bytearray(db.read_bytes())
    data[:100] = bytes(100)
    db.write_bytes(bytes(data))


def _not_a_database(db: Path) -> None:
    db.write_text("this is not an SQLite file\n" * 200, encoding="utf-8")


@pytest.mark.slow
@pytest.mark.parametrize("damage", [_truncate, _zero_header, _not_a_database], ids=["truncated", "zeroed-header", "not-a-database"])
def test_unreadable_embedding_database_is_moved_aside_and_the_run_continues(tiny, clean, cache_dir, damage):
    db = cache_dir / "embeddings" / "embeddings.sqlite"
    damage(db)
    damaged_bytes = db.read_bytes()

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ev, enc = run_once(tiny, cache_dir)
    messages = cache_warnings(record)
    [aside] = sorted(db.parent.glob("embeddings.sqlite.corrupt-*"))
    assert len(messages) == 1, messages
    assert str(db) in messages[0] and str(aside) in messages[0], messages[0]
    assert aside.read_bytes() == damaged_bytes  # kept for inspection, not deleted
    assert_same_results(ev, clean)
    assert enc.n_encoded == len({c.text for c in clean.chunks}) + len(tiny.queries)  # all recomputed

    con = sqlite3.connect(db)  # a fresh, healthy database took its place
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        again, enc_again = run_once(tiny, cache_dir)
    assert cache_warnings(record) == [] and enc_again.n_encoded == 0
    assert_same_results(again, clean)


@pytest.mark.slow
def test_a_whole_run_survives_a_zeroed_cache_database(clean, cache_dir, tmp_path, tracking_uri):
    """Through ``harness.experiment.run.execute``: the job finishes (MLflow FINISHED) instead of failing
    with "file is not a database", and its metrics equal the clean run's (the rank and span
    metrics at k = 1 and 3 that both compute)."""
    import mlflow

    from harness.experiment.run import execute

    folder = write_corpus(tmp_path / "data")
    db = cache_dir / "embeddings" / "embeddings.sqlite"
    _zero_header(db)
    cfg = compose(
        [
            "dataset.path=" + str(folder),
            "dataset.name=tiny",
            *CHUNKER,
            "retriever=faiss",
            f"cache.dir={cache_dir}",
            f"tracking.uri={tracking_uri}",
            "embedding.show_progress=false",
            "stats.bootstrap=0",
        ]
    )
    with pytest.warns(UserWarning, match=re.escape(str(db)) + ".*moved it aside"):
        result = execute(cfg)
    shared = [k for k in clean.metrics if k in result["metrics"]]
    assert len(shared) >= 20 and "hit_rate@1" in shared
    assert {k: result["metrics"][k] for k in shared} == {k: clean.metrics[k] for k in shared}
    client = mlflow.MlflowClient(tracking_uri)
    [run] = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert run.info.status == "FINISHED"


_OLD_SCHEMA = (  # the embedding cache layout before checksums (no checksum column)
    "CREATE TABLE models (model_key TEXT PRIMARY KEY, dim INTEGER NOT NULL, description TEXT NOT NULL)",
    "CREATE TABLE vectors (model_key TEXT NOT NULL, text_key TEXT NOT NULL, dim INTEGER NOT NULL,"
    " vec BLOB NOT NULL, PRIMARY KEY (model_key, text_key)) WITHOUT ROWID",
)


def test_an_old_format_cache_without_checksums_is_recomputed_not_trusted(tiny, clean, cache_dir, tmp_path):
    """Rows written before checksums existed cannot be verified: they are recomputed once
    (and then carry a checksum), never served as they are, and the old file does not crash."""
    db = cache_dir / "embeddings" / "embeddings.sqlite"
    old_db = tmp_path / "old.sqlite"
    src = sqlite3.connect(db)
    models = src.execute("SELECT model_key, dim, description FROM models").fetchall()
    vectors = src.execute("SELECT model_key, text_key, dim, vec FROM vectors").fetchall()
    src.close()
    con = sqlite3.connect(old_db)
    with con:
        for stmt in _OLD_SCHEMA:
            con.execute(stmt)
        con.executemany("INSERT INTO models VALUES (?, ?, ?)", models)
        damaged = bytearray(vectors[0][3])
        damaged[3] ^= 0xFF
        vectors[0] = (*vectors[0][:3], bytes(damaged))  # one altered row, undetectable without a checksum
        con.executemany("INSERT INTO vectors VALUES (?, ?, ?, ?)", vectors)
    con.close()
    db.unlink()
    (cache_dir / "chunks").rename(tmp_path / "chunks-aside")  # the chunk set is re-made too: both caches old-format
    old_db.rename(db)

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ev, enc = run_once(tiny, cache_dir)
    messages = cache_warnings(record)
    assert messages and all(str(db) in m for m in messages), messages
    assert sum(discarded_count(m) for m in messages) == len(vectors), messages  # every row without a checksum
    text_rows = sum(1 for _, key, _, _ in vectors if not key.startswith(INPUT_KEY_PREFIX))  # the rest: the same vectors by model input
    assert enc.n_cache_hits == 0 and enc.n_encoded + enc.n_shared == text_rows  # none of the unverifiable rows was served
    assert_same_results(ev, clean)
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM vectors WHERE checksum IS NULL").fetchone()[0] == 0
    con.close()
    _, enc_again = run_once(tiny, cache_dir)
    assert enc_again.n_encoded == 0


def test_legacy_chunk_set_without_checksum_is_rechunked(tiny, clean, cache_dir):
    """A chunk-set file without a payload checksum (or with one that is not a string) is
    treated like a damaged one: re-made and overwritten, never used unverified."""
    [entry] = sorted((cache_dir / "chunks").glob("*/*.json"))
    data = json.loads(entry.read_text(encoding="utf-8"))
    sums = [k for k in data if "sha256" in k or "checksum" in k]
    assert sums, f"chunk-set entry has no checksum field: {sorted(data)}"
    for k in sums:
        del data[k]
    data["chunks"][0]["spans"] = [[0, 3]]  # and an edit the missing checksum would hide
    entry.write_text(json.dumps(data), encoding="utf-8")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ev, _ = run_once(tiny, cache_dir)
    assert any(str(entry) in m for m in cache_warnings(record))
    assert ev.cache["chunks_cached"] == 0.0
    assert_same_results(ev, clean)
