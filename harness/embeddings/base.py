"""What every embedding backend shares: caches, the input-window check, prompts, counters.

A backend (``conf/embedding/<name>.yaml``, one ``_target_`` each) subclasses
:class:`CachedEncoder` and supplies four things: :attr:`~CachedEncoder.embedding_key`
(everything that changes a vector), :attr:`~CachedEncoder.max_seq_length` (the input
window in the backend's own tokens, or None), :meth:`~CachedEncoder._count_raw` (tokens per
text in that unit, as the backend counts them) and :meth:`~CachedEncoder._embed_batch` (the
vectors of a list of texts). Everything else is here and behaves alike for every backend:

* **prompts**: ``encode(texts, role="query")`` embeds ``query_prompt + text``,
  ``role="document"`` ``document_prompt + text`` (e5's ``"query: "`` / ``"passage: "``, a bge
  instruction); the prompt is part of the text that is counted against the window and that
  keys the caches, so a vector is never reused across prompts.
* **caches**: identical texts are embedded once per process (memory) and, with
  ``cache_dir``, once per cache folder (:class:`harness.cache.EmbeddingCache`, keyed by
  :attr:`~CachedEncoder.embedding_key` and the text's sha256); texts are embedded in blocks
  of ``4 * batch_size`` (longest first) and each block is stored as soon as it is embedded.
* **one vector per model input** (:meth:`~CachedEncoder._input_keys`): a backend that can
  tell what its model receives (the token ids after truncation, special tokens included)
  lets texts with equal inputs share one vector: a 400- and an 800-token window from the
  same start under a 256-token window, a chunk and its longer sibling. A text missing both
  caches under its own key is looked up by its input key (memory, then disk: rows
  ``ids:<sha256 of the ids>`` next to the text rows, under the same embedding key); of the
  texts still missing, one per distinct input is embedded and the others get its vector.
  Every vector is stored under both keys, so a later run finds it by text (without
  tokenising or loading the model) and another text with the same input finds it by ids.
* **the window**: texts longer than :attr:`~CachedEncoder.max_seq_length` are cut by the
  model (or would be refused by an API); :attr:`~CachedEncoder.on_truncate` says what to do
  (``warn``: one warning per call with the count and the longest length; ``error``: refuse
  before anything is embedded; ``ignore``).
* **finite vectors** (:func:`check_vectors`): every block the backend returns (locally, from
  an API, from Ray actors) and every vector read from the disk cache is checked before it
  is cached or used: NaN or infinity is refused in one line (the model or cache file, the
  count, the first text); a zero vector (norm <= :data:`ZERO_NORM`) is kept, warned about
  once per text and counted (``embedding.zero_vectors``).
* **counters** for the run's metrics (:meth:`~CachedEncoder.run_metrics`): texts embedded,
  cache hits, texts shared by input, texts over the window, zero vectors. Each distinct
  text an encoder is asked for counts once, in exactly one of the first three:
  ``n_encoded + n_cache_hits + n_shared == distinct texts asked``.
* :attr:`~CachedEncoder.checkpoint`: a callable run once the caches have been read, before
  each block the model embeds; a run uses it to learn from its tracking store whether to go
  on before paying for any embedding. :attr:`~CachedEncoder.poll` is run instead when
  nothing is left to embed: it must return at once unless the job is to stop (a run
  passes a non-blocking check, so a run whose vectors are all cached goes on while its
  tracking store is still being opened).
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from harness.params import Param

#: Accepted values of ``embedding.on_truncate``.
ON_TRUNCATE = ("warn", "error", "ignore")
#: What a text is embedded as: a chunk or piece of a document, or a question.
ROLES = ("document", "query")
#: L2 norms at or below this count as a zero vector (:func:`check_vectors`): its cosine
#: with anything is undefined; FAISS scores it 0 against every query.
ZERO_NORM = 1e-12


def text_key(text: str) -> str:
    """sha256 hex of a text (UTF-8): the per-text key of both caches."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


#: Prefix of an input key (:func:`input_key`); a text key is plain hex, so the two never meet.
INPUT_KEY_PREFIX = "ids:"


def input_key(ids: Sequence[int]) -> str:
    """Key of one model input: ``"ids:"`` + sha256 hex of the token ids as little-endian int64.

    Args:
        ids: the token ids the model receives for one text (after truncation, special
            tokens included, padding excluded), in order.

    Returns:
        A string that is equal for two texts exactly when their ids are equal (up to sha256
        collisions); it never equals a :func:`text_key`.
    """
    return INPUT_KEY_PREFIX + hashlib.sha256(np.asarray(ids, dtype="<i8").tobytes()).hexdigest()


def _quote(text: str, width: int = 60) -> str:
    """``repr`` of the first ``width`` characters of ``text`` on one line (``...`` when cut)."""
    flat = " ".join(str(text).split())
    return repr(flat if len(flat) <= width else flat[: width - 3] + "...")


def check_vectors(
    vectors: np.ndarray, labels: Sequence[str], source: str, desc: str = "embed", hint: str = "nothing of them was cached or indexed"
) -> np.ndarray:
    """The one check every embedding passes before it is cached, indexed or searched.

    Args:
        vectors: float array of shape ``(n, dim)``, one row per text.
        labels: n strings naming the rows in messages (the texts, or chunk ids).
        source: who produced the vectors, for the message (``embedding.model 'all-MiniLM-L6-v2'
            (sentence_transformers)``, ``embedding cache <path>``).
        desc: what the texts are (``embed chunks``, ``embed queries``).
        hint: the end of the refusal message (what happened, what to do).

    Returns:
        Boolean mask of shape ``(n,)``: True for a zero vector (L2 norm <= :data:`ZERO_NORM`).
        A zero vector is not refused (a static model gives one to a text made only of
        tokens outside its vocabulary, the API backend to an empty text); the caller flags it.

    Raises:
        NonFiniteError: a row holds NaN or infinity; one line naming ``source``, how many
            rows of how many, ``desc`` and the first such row's label.
    """
    from harness.types import NonFiniteError

    arr = np.asarray(vectors)
    if arr.ndim != 2:
        raise ValueError(f"{source}: expected vectors of shape (n, dim), got shape {tuple(arr.shape)} ({desc})")
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise NonFiniteError(
            f"{source} returned vectors with NaN or infinity for {len(bad)} of {len(arr)} texts ({desc}), first {_quote(labels[int(bad[0])])}; {hint}"
        )
    return np.linalg.norm(arr.astype(np.float64), axis=1) <= ZERO_NORM


def check_choice(setting: str, value: Any, allowed: Sequence[str]) -> None:
    """Raise ``ValueError("<setting> must be one of ..., got ... (did you mean ...?)")`` unless ``value`` is in ``allowed``."""
    Param(setting, "choice", choices=tuple(allowed)).check(value)


#: Texts per tokenizer call when counting tokens (:meth:`CachedEncoder.count_tokens` and the
#: window check): bounds the memory of the encodings a batch call holds, the counts are per text.
COUNT_BLOCK = 4096


class CachedEncoder(ABC):
    """Base of every embedding backend (see the module docstring for what it provides).

    Args:
        model_name: the model as configured (``embedding.model``): a name, hub id or folder.
        batch_size: texts per model call, >= 1.
        show_progress: a tqdm bar while embedding more than one batch.
        cache_dir: folder of the on-disk cache (vectors in ``<cache_dir>/embeddings``); None
            keeps vectors in memory only.
        on_truncate: ``warn`` | ``error`` | ``ignore`` for texts over the window.
        query_prompt: text put before every query (``role="query"``), ``""`` for none.
        document_prompt: text put before every chunk or piece (``role="document"``).

    Attributes:
        backend: the backend's name (``sentence_transformers``, ``openai``, ``model2vec``).
        window_unit: what :attr:`max_seq_length` counts, for messages (``word pieces``).
        n_encoded: texts embedded by the model so far; n_cache_hits: texts read from the
            disk cache under their own text key; n_shared: texts given the vector computed
            for another text with the same model input (in this process, or read from disk
            under that input's key); n_truncated: distinct texts found over the window.

    Raises:
        ValueError: ``batch_size < 1``, an unknown ``on_truncate``, a prompt that is not a string.
    """

    backend: str = "base"
    window_unit: str = "tokens"
    #: The window's unit as an adjective (``256-word-piece window``) and what the counts include.
    window_adjective: str = "token"
    count_note: str = ""

    def __init__(
        self,
        model_name: str,
        batch_size: int = 64,
        show_progress: bool = True,
        cache_dir: str | os.PathLike | None = None,
        on_truncate: str = "warn",
        query_prompt: str | None = "",
        document_prompt: str | None = "",
    ) -> None:
        Param("batch_size", "int", low=1).check(batch_size, "embedding")
        check_choice("embedding.on_truncate", on_truncate, ON_TRUNCATE)
        for name, value in (("query_prompt", query_prompt), ("document_prompt", document_prompt)):
            if value is not None and not isinstance(value, str):
                raise ValueError(f"embedding.{name} must be a string (\"\" for none), got {value!r}")
        self.model_name = model_name
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.on_truncate = on_truncate
        self.query_prompt = query_prompt or ""
        self.document_prompt = document_prompt or ""
        self._n_tokens: dict[str, int] = {}  # text sha256 -> tokens (count_tokens memo)
        self._window_checked: set[str] = set()
        self.n_truncated = 0
        self.checkpoint: Callable[[], None] | None = None
        self.poll: Callable[[], None] | None = None
        self._cache: dict[str, np.ndarray] = {}
        self.n_encoded = 0
        self.n_cache_hits = 0
        self.n_shared = 0
        self._input_of: dict[str, str] = {}  # text key -> input key, for texts whose input was asked
        self._by_input: dict[str, np.ndarray] = {}  # input key -> vector (memory)
        self.n_zero = 0
        self._zero_checked: set[str] = set()
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir not in (None, "") else None
        self._store = None
        if self.cache_dir is not None:
            from harness.cache import EmbeddingCache

            self._store = EmbeddingCache(self.cache_dir / "embeddings")

    # -- what a backend supplies ------------------------------------------------------------
    @property
    @abstractmethod
    def embedding_key(self) -> str:
        """sha256 hex of everything that changes a vector (model identity, weights or
        endpoint, window, dimensions, normalisation); equal keys give equal vectors."""

    @property
    @abstractmethod
    def max_seq_length(self) -> int | None:
        """The input window in :attr:`window_unit` (special tokens included), or None when unknown."""

    @abstractmethod
    def _count_raw(self, texts: Sequence[str]) -> list[int]:
        """Tokens per text as the backend counts them against :attr:`max_seq_length` (no truncation)."""

    @abstractmethod
    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        """Vectors of ``texts`` (already prompted), float32 of shape ``(len(texts), dim)``."""

    @property
    def declared_dim(self) -> int | None:
        """The dimension the backend promises before embedding anything (None: unknown)."""
        return None

    def _input_keys(self, texts: list[str]) -> list[str] | None:
        """:func:`input_key` of what the model receives for each text (already prompted),
        or None when the backend cannot tell: then texts share a vector only when they are
        equal. A backend that answers must answer exactly (two texts get one key only when
        the model would receive the same ids); it may load its model or tokenizer for it.
        Default: None."""
        return None

    def _prepare(self) -> None:
        """Load the model or open the client before the first block (default: nothing)."""

    def _cache_hits(self, hits: int) -> None:
        """Called after ``hits`` vectors of one :meth:`encode` call were read from the disk
        cache (a backend may warn when reused vectors could differ from fresh ones). Default: nothing."""

    def _describe(self) -> dict[str, Any]:
        """What the disk cache records about the model next to its vectors."""
        return {"backend": self.backend, "model": self.model_name, "max_seq_length": self.max_seq_length}

    #: Positions of the window the backend's own tokens take (``[CLS]`` and ``[SEP]``: 2).
    special_tokens: int = 0

    @property
    def chunk_tokenizer(self) -> str | None:
        """The ``chunker.tokenizer`` value that counts this model's tokens (``model``,
        ``cl100k_base``), or None when no chunker tokenizer does: window-relative chunk
        sizes (``chunker.chunk_size=window``) need it."""
        return None

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Code-point spans of the tokens of ``text`` in the window's unit, without special
        tokens (for the ``truncated`` miss reason: what of a chunk the model reads).

        Raises:
            NotImplementedError: the backend cannot give token offsets.
        """
        raise NotImplementedError(f"embedding backend {self.backend!r} gives no token offsets")

    def preflight(self) -> None:
        """Check that the backend can embed (model available, endpoint reachable, key set)
        before any chunking; raises ``ValueError`` naming the setting. Default: nothing."""

    # -- shared behaviour ------------------------------------------------------------------
    def prompted(self, texts: Sequence[str], role: str = "document") -> list[str]:
        """``texts`` with the prompt of ``role`` put before each.

        Raises:
            ValueError: ``role`` not in :data:`ROLES`.
        """
        check_choice("role", role, ROLES)
        prompt = self.query_prompt if role == "query" else self.document_prompt
        return [prompt + t for t in texts] if prompt else list(texts)

    def encode(self, texts: Sequence[str], desc: str = "embed", role: str = "document", labels: Sequence[str] | None = None) -> np.ndarray:
        """Embed texts (prompted for ``role``), reading the memory and disk caches first.

        Args:
            texts: n strings.
            desc: progress-bar and message label.
            role: ``"document"`` (chunks, pieces) or ``"query"``.
            labels: n names of the texts for messages (e.g. ``"chunk 'a.md#0-120' of
                document 'a.md'"``); the window error and warning name the longest text
                over the window by its label. None: texts are named by position.

        Returns:
            float32 array of shape ``(n, dim)``.

        Raises:
            ValueError: the backend's vectors differ in dimension from the declared or
                cached one; texts over the window with ``on_truncate="error"`` (nothing of
                this call is embedded then); an unknown ``role``.
            NonFiniteError: a vector, fresh from the backend (any backend, Ray actors
                included) or read from the disk cache, holds NaN or infinity (one line naming
                the model or the cache file, the count and the first text; nothing of the
                block is cached). A zero vector is not refused: it is warned about once per
                text and counted (:attr:`n_zero`, ``embedding.zero_vectors``).
        """
        texts = self.prompted(texts, role)
        keys = [text_key(t) for t in texts]
        self._check_window(texts, keys, desc, labels)
        todo: dict[str, str] = {}
        for k, t in zip(keys, texts):
            if k not in self._cache and k not in todo:
                todo[k] = t
        if todo and self._store is not None:
            hits = self._store.get(self.embedding_key, list(todo), dim=self.declared_dim, model_name=self.model_name)
            if hits:
                where = f"embedding cache {self._store.path} (embedding.model {self.model_name!r})"
                hint = "clear it with `harness cache clear --kind embeddings`"
                check_vectors(np.stack(list(hits.values())), [todo[k] for k in hits], where, desc, hint)
            for k, v in hits.items():
                self._cache[k] = v
                del todo[k]
            self.n_cache_hits += len(hits)
            self._cache_hits(len(hits))
        if todo:
            waiting = self._share_inputs(todo, desc)
            if todo:
                self._embed(todo, desc)
            self._serve_waiting(waiting)
        elif self.poll is not None:
            self.poll()
        if not keys:
            return np.zeros((0, self.declared_dim or self.dim), dtype=np.float32)
        vectors = np.stack([self._cache[k] for k in keys])
        self._flag_zero(vectors, texts, keys, desc)
        return vectors

    def _share_inputs(self, todo: dict[str, str], desc: str) -> dict[str, str]:
        """Resolve what of ``todo`` (``{text key: text}``, missing both caches by text) has
        an input already embedded (memory, then disk by input key) and keep one text per
        distinct input in ``todo``; the others are returned as ``{text key: input key}``
        to be served by :meth:`_serve_waiting` once their input is embedded.

        ``todo`` is changed in place. Texts served here count as shared (their vector was
        computed for another text with the same input, by this encoder or by one that stored
        it on disk) and are stored under their text key, so a later lookup by text finds them. No input keys (the backend cannot tell):
        nothing changes.
        """
        keys = self._input_keys(list(todo.values()))
        if keys is None:
            return {}
        if len(keys) != len(todo):
            raise ValueError(f"{self.source}: {len(keys)} input keys for {len(todo)} texts ({desc})")
        pairs = dict(zip(todo, keys))
        self._input_of.update(pairs)
        wanted = [k for k in dict.fromkeys(keys) if k not in self._by_input]
        if wanted and self._store is not None:
            hits = self._store.get(self.embedding_key, wanted, dim=self.declared_dim, model_name=self.model_name)
            if hits:
                where = f"embedding cache {self._store.path} (embedding.model {self.model_name!r})"
                hint = "clear it with `harness cache clear --kind embeddings`"
                text_of = {ik: todo[tk] for tk, ik in pairs.items()}
                check_vectors(np.stack(list(hits.values())), [text_of[k] for k in hits], where, desc, hint)
                self._by_input.update(hits)
        served: dict[str, np.ndarray] = {}
        waiting: dict[str, str] = {}
        first: set[str] = set()
        for tk, ik in pairs.items():
            if ik in self._by_input:
                served[tk] = self._by_input[ik]
                self.n_shared += 1
            elif ik in first:
                waiting[tk] = ik
            else:
                first.add(ik)
        for tk in [*served, *waiting]:
            del todo[tk]
        if served:
            self._cache.update(served)
            if self._store is not None:
                self._store.put(self.embedding_key, served, self._describe())
        return waiting

    def _serve_waiting(self, waiting: dict[str, str]) -> None:
        """Give each text of ``waiting`` (``{text key: input key}``) the vector just embedded
        for its input; count it as shared and store it under its text key."""
        if not waiting:
            return
        served = {tk: self._by_input[ik] for tk, ik in waiting.items()}
        self._cache.update(served)
        self.n_shared += len(served)
        if self._store is not None:
            self._store.put(self.embedding_key, served, self._describe())

    def forget(self) -> None:
        """Drop every vector held in memory (by text and by model input), so that the next
        :meth:`encode` reads the disk cache or embeds again (a timing round starts cold)."""
        self._cache.clear()
        self._by_input.clear()
        self._input_of.clear()

    @property
    def source(self) -> str:
        """Who embeds, for messages: ``embedding.model 'all-MiniLM-L6-v2' (sentence_transformers)``."""
        return f"embedding.model {self.model_name!r} ({self.backend})"

    def _flag_zero(self, vectors: np.ndarray, texts: Sequence[str], keys: Sequence[str], desc: str) -> None:
        """Count and warn (once per text and encoder) about zero vectors among ``vectors``."""
        new = [i for i, k in enumerate(keys) if k not in self._zero_checked]
        if not new:
            return
        zero = np.linalg.norm(vectors[new].astype(np.float64), axis=1) <= ZERO_NORM
        flagged = list(dict.fromkeys(keys[i] for i, z in zip(new, zero) if z))
        self._zero_checked.update(keys[i] for i in new)
        if flagged:
            import warnings

            first = texts[new[int(np.argmax(zero))]]
            self.n_zero += len(flagged)
            warnings.warn(
                f"{self.source} gave {len(flagged)} of {len(new)} texts ({desc}) a zero vector (first {_quote(first)}): such a "
                f"chunk scores 0 against every query and a query 0 against every chunk; counted in embedding.zero_vectors",
                stacklevel=3,
            )

    @property
    def dim(self) -> int:
        """Embedding dimension (embeds one text when the backend declares none)."""
        if self.declared_dim is not None:
            return int(self.declared_dim)
        self._prepare()
        return int(self._embed_batch(["dimension probe"]).shape[1])

    def _check_window(self, texts: Sequence[str], keys: Sequence[str], desc: str, labels: Sequence[str] | None = None) -> None:
        """Count the texts of one call over :attr:`max_seq_length` (each text once per
        encoder) and warn or raise per ``on_truncate``; the message names the longest text
        over the window by its label (``labels[i]`` for ``texts[i]``), its length in the
        model's units and the window."""
        if self.on_truncate == "ignore":
            return
        new = [(k, t, i) for i, (k, t) in enumerate(zip(keys, texts)) if k not in self._window_checked]  # (key, text, position)
        limit = self.max_seq_length
        if not new or limit is None:
            return
        counts = self._counts([t for _, t, _ in new], [k for k, _, _ in new])
        over = [n for n in counts if n > limit]
        unit = self.window_unit
        longest = ""
        if over:
            worst = max(range(len(new)), key=lambda j: counts[j])
            named = labels is not None and len(labels) == len(texts)
            longest = f"longest {counts[worst]} {unit}{self.count_note}" + (f": {labels[new[worst][2]]}" if named else "")
        if over and self.on_truncate == "error":
            raise ValueError(
                f"embedding.on_truncate=error: {len(over)} of {len(new)} texts ({desc}) exceed the {limit}-{self.window_adjective} "
                f"window of embedding.model {self.model_name!r} ({longest}) and would be truncated; "
                f"shorten them (for chunks e.g. a chunk size within the window) or set embedding.on_truncate=warn"
            )
        self._window_checked.update(k for k, _, _ in new)
        self.n_truncated += len(over)
        if over:
            import warnings

            warnings.warn(
                f"embedding.model {self.model_name!r} truncates {len(over)} of {len(new)} texts ({desc}) to its "
                f"{limit}-{self.window_adjective} window ({longest}): only the first "
                f"{limit} of each are embedded. Set embedding.on_truncate=error to refuse, or ignore to silence this",
                stacklevel=4,
            )

    def _counts(self, texts: Sequence[str], keys: Sequence[str]) -> list[int]:
        """Memoised token counts of texts whose sha256 keys are given."""
        missing = {k: t for k, t in zip(keys, texts) if k not in self._n_tokens}
        if missing:
            todo = list(missing.values())
            # in blocks: a tokenizer's batch call holds every text's encoding at once (gigabytes at a million texts)
            counted = [n for i in range(0, len(todo), COUNT_BLOCK) for n in self._count_raw(todo[i : i + COUNT_BLOCK])]
            self._n_tokens.update(zip(missing, counted))
        return [self._n_tokens[k] for k in keys]

    def _embed(self, todo: dict[str, str], desc: str) -> None:
        """Embed ``{text key: text}`` block by block (longest first; a block is ``4 * batch_size``
        texts, stored as one), the progress bar advancing per batch (:meth:`_embed_block`)."""
        from tqdm.auto import tqdm

        items = sorted(todo.items(), key=lambda kv: len(kv[1]), reverse=True)  # similar lengths pad less
        block = 4 * self.batch_size
        show = self.show_progress and len(items) > self.batch_size
        blocks = [items[i : i + block] for i in range(0, len(items), block)]
        with tqdm(total=len(items), desc=desc, unit="text", disable=not show) as bar:
            for part, vecs in self._embed_blocks(blocks, bar):
                vecs = np.asarray(vecs, dtype=np.float32)
                declared = self.declared_dim
                if vecs.ndim != 2 or vecs.shape[0] != len(part):
                    raise ValueError(f"embedding.model {self.model_name!r} returned vectors of shape {tuple(vecs.shape)} for {len(part)} texts")
                if declared is not None and vecs.shape[1] != declared:
                    raise ValueError(
                        f"embedding.model {self.model_name!r} produced {vecs.shape[1]}-dimensional vectors but {declared} dimensions were declared"
                    )
                check_vectors(vecs, [t for _, t in part], self.source, desc)  # before anything is cached
                block_vecs = {k: v for (k, _), v in zip(part, vecs)}
                by_input = {self._input_of[k]: v for k, v in block_vecs.items() if k in self._input_of}
                if self._store is not None:
                    self._store.put(self.embedding_key, {**block_vecs, **by_input}, self._describe())
                self._cache.update(block_vecs)
                self._by_input.update(by_input)
                self.n_encoded += len(part)

    def _embed_block(self, texts: list[str], bar=None) -> np.ndarray:
        """Vectors of one block (``(len(texts), dim)`` float32, in the order of ``texts``),
        embedded ``batch_size`` texts per :meth:`_embed_batch` call so that the progress ``bar``
        (a tqdm bar or None) advances per batch.

        The batches are the ones sentence-transformers' ``encode`` forms from the whole block
        (texts ordered by ``numpy.argsort`` of minus their length in characters, then cut
        every ``batch_size``), so the vectors equal those of one call over the block, bit for
        bit; a Ray actor embeds its blocks here too. When a call fails, the vectors of the
        batches before it are kept in the caches (they were computed, or paid for), then the
        error propagates."""
        order = np.argsort([-len(t) for t in texts])
        ordered = [texts[i] for i in order]
        pieces: list[np.ndarray] = []
        done = 0
        try:
            for j in range(0, len(ordered), self.batch_size):
                batch = ordered[j : j + self.batch_size]
                pieces.append(np.asarray(self._embed_batch(batch), dtype=np.float32))
                done += len(batch)
                if bar is not None:
                    bar.update(len(batch))
        except BaseException:
            declared = self.declared_dim
            if done and all(p.ndim == 2 and (declared is None or p.shape[1] == declared) for p in pieces) and len({p.shape[1] for p in pieces}) == 1:
                kept = {text_key(t): v for t, v in zip(ordered[:done], np.concatenate(pieces)) if np.isfinite(v).all()}
                if self._store is not None:
                    self._store.put(self.embedding_key, kept, self._describe())
                self._cache.update(kept)
                self.n_encoded += len(kept)
            raise
        if not pieces:
            return np.asarray(self._embed_batch([]), dtype=np.float32)
        vectors = np.concatenate(pieces)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            return vectors  # the caller refuses the shape, naming the model
        out = np.empty_like(vectors)
        out[order] = vectors
        return out

    def _embed_blocks(self, blocks: list[list[tuple[str, str]]], bar=None) -> Iterator[tuple[list[tuple[str, str]], np.ndarray]]:
        """``(block, vectors)`` for each block of ``(text key, text)`` pairs, in any order; the
        progress ``bar`` (tqdm or None) advances as texts are embedded.

        Default: in this process, in order, the model loaded before the first checkpoint and
        :attr:`checkpoint` run before each block. A backend may send the blocks elsewhere
        (``embedding.distributed=ray``: :mod:`harness.embeddings.distributed`); each block is
        embedded by :meth:`_embed_block` (``batch_size`` texts per :meth:`_embed_batch` call),
        so its batches are the same wherever it runs.
        """
        self._prepare()  # loaded before the first checkpoint
        for part in blocks:
            if self.checkpoint is not None:
                self.checkpoint()
            yield part, self._embed_block([t for _, t in part], bar)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens per text as the backend counts them against its window (memoised)."""
        texts = list(texts)
        return self._counts(texts, [text_key(t) for t in texts])

    def count_truncated(self, texts: Sequence[str]) -> int:
        """How many texts exceed :attr:`max_seq_length` (0 when the window is unknown)."""
        limit = self.max_seq_length
        return 0 if limit is None else sum(1 for n in self.count_tokens(texts) if n > limit)

    def run_tags(self) -> dict[str, str]:
        """Tags a run sets about this encoder as resolved at run time (``{tag: value}``, e.g.
        ``embedding.precision``). Default: none (``{}``)."""
        return {}

    def run_metrics(self) -> dict[str, float]:
        """What a run logs about its embedding work (``embedding.*`` metrics)."""
        out = {
            "embedding.texts_embedded": float(self.n_encoded),
            "embedding.cache_hits": float(self.n_cache_hits),
            "embedding.texts_shared": float(self.n_shared),
            "embedding.texts_over_window": float(self.n_truncated),
            "embedding.zero_vectors": float(self.n_zero),
        }
        window = self.max_seq_length
        if window is not None:  # the model window, next to the chunk statistics (chunks.tokens_*)
            out["embedding.window_tokens"] = float(window)
            out["embedding.window_text_tokens"] = float(window - self.special_tokens)
        return out
