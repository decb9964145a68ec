"""Two-stage retrieval: a first-stage retriever proposes candidates, a cross-encoder re-scores them.

The cross-encoder reads the query and a chunk together (``[CLS] query [SEP] chunk [SEP]``)
and outputs one relevance score per pair (Nogueira & Cho, "Passage Re-ranking with BERT",
2019; sentence-transformers ``CrossEncoder``). Its input limit is counted like the
embedding model's window (:mod:`harness.embeddings.base`): pairs longer than the limit are
cut by the model (the longer side first), and ``on_truncate`` says whether to warn, refuse
or stay silent.
"""

from __future__ import annotations

import functools
import json
import os
import re
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from harness.embeddings.base import ON_TRUNCATE, check_choice, text_key
from harness.params import Param, check_all
from harness.retrievers.base import Retriever, check_chunks, check_k, check_queries
from harness.types import Chunk, Query, Run, rank_order

#: First stages by name (``retriever.first_stage: bm25``); a mapping with ``_target_`` names any retriever.
FIRST_STAGES = {
    "faiss": "harness.retrievers.faiss.FaissRetriever",
    "bm25": "harness.retrievers.bm25.BM25Retriever",
    "hybrid": "harness.retrievers.hybrid.HybridRetriever",
}
#: The shipped default: MS MARCO MiniLM-L6 cross-encoder (must be in the local Hugging Face cache or a folder).
DEFAULT_MODEL = "cross-encoder/ms-marco-MiniLM-L6-v2"
#: Candidates re-scored when ``candidates`` is null: ``max(k, DEFAULT_CANDIDATES)``.
DEFAULT_CANDIDATES = 100
#: The plain settings of :class:`RerankRetriever` (``retriever.<name>``), checked in this order.
PARAMS = (
    Param("candidates", "int", low=1, note="first-stage results re-scored", allow_none=True, none=f"{{}} or null for max(k, {DEFAULT_CANDIDATES})"),
    Param("max_length", "int", low=1, note="word pieces per query-chunk pair", allow_none=True, none="{} or null for the model's limit"),
    Param("batch_size", "int", low=1),
    Param("on_truncate", "choice", choices=ON_TRUNCATE),
    Param("show_progress", "bool"),
)

#: Scores of every reranker in this process: (model key, query sha256, chunk sha256) -> score.
_SCORES: dict[tuple[str, str, str], float] = {}


def clear_score_cache() -> None:
    """Forget every cached cross-encoder score of this process."""
    _SCORES.clear()


def resolve_cross_encoder(model: str) -> Path:
    """Map ``retriever.model`` to a local folder.

    An existing folder is used as it is; anything else is taken as a Hugging Face hub id
    and looked up in the local hub cache the way sentence-transformers looks it up
    (``SENTENCE_TRANSFORMERS_HOME`` if set, else ``HF_HUB_CACHE`` / ``HF_HOME``; the
    snapshot of the ``main`` revision); when it is not there and ``HF_HUB_OFFLINE`` is not
    set, it is downloaded into that cache (like the sentence-transformers embedding backend).

    Raises:
        ValueError: ``model`` is not a non-empty string, or is neither a folder nor a hub id
            whose snapshot is in the cache (the message names ``retriever.model``).
    """
    if not isinstance(model, str) or not model.strip():
        raise ValueError(f"retriever.model must be a local model folder or a hub id, got {model!r}")
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    cache = os.environ.get("SENTENCE_TRANSFORMERS_HOME") or None
    try:
        return Path(snapshot_download(model, local_files_only=True, cache_dir=cache))
    except Exception as exc:  # noqa: BLE001 - LocalEntryNotFoundError, HFValidationError, OSError
        local_error = exc
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    if not offline:  # online: fetched once into the hub cache, as sentence-transformers would
        try:
            return Path(snapshot_download(model, cache_dir=cache))
        except Exception as exc:  # noqa: BLE001 - no network, unknown id
            local_error = exc
    where = cache or "the Hugging Face hub cache"
    why = "HF_HUB_OFFLINE=1 is set" if offline else "it could not be downloaded"
    raise ValueError(
        f"retriever.model {model!r} is neither a local folder nor a hub id in {where}, and {why} ({type(local_error).__name__}): "
        f"download it once with network access (e.g. `hf download {model}`) or give a cross-encoder folder"
    ) from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def cross_encoder_limit(folder: Path, model: str) -> int | None:
    """Word pieces a cross-encoder folder accepts per pair (special tokens included), read
    without loading weights: the tokenizer's ``model_max_length`` when it is a real limit,
    else ``max_position_embeddings``; None when the folder states neither.

    Raises:
        ValueError: the folder holds no ``config.json``, or its model is not a
            sequence-classification model with one output (a bi-encoder folder would get an
            untrained scoring head; an NLI model scores three labels).
    """
    config = _read_json(folder / "config.json")
    if not config:
        raise ValueError(f"retriever.model {model!r}: {str(folder)!r} holds no readable config.json, so it is not a transformers model folder")
    arch = config.get("architectures") or []
    if not any(str(a).endswith("ForSequenceClassification") for a in arch):
        raise ValueError(
            f"retriever.model {model!r} is not a cross-encoder: its config.json declares architectures {arch}, "
            f"expected a *ForSequenceClassification model (e.g. {DEFAULT_MODEL!r}); a bi-encoder belongs in embedding.model"
        )
    labels = config.get("num_labels") or len(config.get("id2label") or {}) or 1
    if labels != 1:
        raise ValueError(f"retriever.model {model!r} outputs {labels} labels per pair; a reranker needs one relevance score")
    tok_limit = _read_json(folder / "tokenizer_config.json").get("model_max_length")
    if isinstance(tok_limit, int) and 0 < tok_limit <= 100_000:  # transformers writes ~1e30 for "no limit"
        return tok_limit
    positions = config.get("max_position_embeddings")
    return int(positions) if isinstance(positions, int) and positions > 0 else None


class RerankRetriever(Retriever):
    """A first-stage retriever followed by a cross-encoder over its top ``candidates``.

    :meth:`search` asks the first stage for ``n = candidates`` (null: ``max(k, 100)``)
    results per query, scores every (query text, chunk text) pair with the cross-encoder,
    and returns the ``k`` best by that score (descending, ties in document order). The
    returned scores are the model's outputs (``CrossEncoder.predict`` with the model's
    activation, e.g. a sigmoid in (0, 1)), not comparable across models. Chunks the first
    stage did not return are never returned.

    Scores are cached in memory for the whole process per (model folder fingerprint,
    input limit, query text, chunk text), so a pair is scored once across queries,
    retriever instances and the jobs of a sweep in one process.

    The model folder is resolved and checked in the constructor (a missing model or a
    non-cross-encoder folder fails before any data is read or chunked); the weights are
    loaded on the first search that has something to score.

    ``needs_encoder`` is True on the class, so the builder always passes the run's encoder,
    and on an instance it is the first stage's (``bm25``: False; the encoder is then never used).
    ``needs_builder`` is True: the first stage is a config, built by ``builder``.

    Args:
        first_stage: a name from :data:`FIRST_STAGES` (``faiss``, ``bm25``, ``hybrid``, built
            with their defaults) or a retriever config mapping with ``_target_`` and that
            class's settings (e.g. ``{"_target_": "harness.retrievers.bm25.BM25Retriever", "k1": 1.2}``),
            built by ``builder``.
        model: a local cross-encoder folder or a hub id in the local cache (see
            :func:`resolve_cross_encoder`).
        candidates: first-stage results re-scored per query, an integer >= 1, or None for
            ``max(k, 100)``; a search for more than ``candidates`` results is refused.
        max_length: input limit in word pieces per (query, chunk) pair, special tokens
            included, an integer >= 1 up to the model's own limit; None: the model's limit
            (512 for MiniLM cross-encoders).
        batch_size: pairs per forward pass, >= 1.
        device: torch device: ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        on_truncate: pairs over the input limit: ``warn`` (one warning per search with the
            count and the longest pair), ``error`` (refuse before scoring anything) or ``ignore``.
        show_progress: a progress bar while scoring more than one batch.
        encoder: the run's shared encoder (passed by the builder), for a first stage that embeds.
        builder: ``builder(where, config, encoder) -> Retriever`` builds the first stage
            (``where`` is ``retriever.first_stage``, named in its errors);
            :func:`harness.experiment.build.build_retriever` passes
            :func:`~harness.experiment.build.build_sub_retriever` (``needs_builder``).
            Without one the constructor raises ValueError.

    Attributes:
        n_scored: pairs scored by the model; n_cache_hits: pairs read from the score cache;
        n_over_limit: distinct pairs found over the input limit (see :meth:`stats`).

    Raises:
        ValueError: a parameter out of range (one line naming ``retriever.<param>``, with a
            did-you-mean for choices), an unavailable model or one that is not a
            single-output cross-encoder (naming ``retriever.model``), a first stage that
            does not build (``retriever.first_stage: ...``) or no ``builder``; at search, ``k < 1``, ``k >
            candidates``, search before :meth:`index`, pairs over the limit with
            ``on_truncate="error"``, or a device that is not available.
        TypeError: chunks or queries of the wrong type (e.g. plain strings).
    """

    name = "rerank"
    needs_encoder = True  # the builder passes the encoder; instances say whether their first stage uses it
    #: The builder passes ``builder=`` (its nested-retriever factory): the first stage is built with it.
    needs_builder = True

    def __init__(
        self,
        first_stage: str | Mapping[str, Any] = "hybrid",
        model: str = DEFAULT_MODEL,
        candidates: int | None = None,
        max_length: int | None = None,
        batch_size: int = 32,
        device: str = "cpu",
        on_truncate: str = "warn",
        show_progress: bool = True,
        encoder=None,
        builder: Callable[[str, Mapping[str, Any], Any], Retriever] | None = None,
    ) -> None:
        check_all(PARAMS[:3], {"candidates": candidates, "max_length": max_length, "batch_size": batch_size}, "retriever")
        if not isinstance(device, str) or not re.fullmatch(r"cpu|mps|cuda(:\d+)?", device):
            raise ValueError(f"retriever.device must be 'cpu', 'cuda', 'cuda:N' or 'mps', got {device!r}")
        check_all(PARAMS[3:], {"on_truncate": on_truncate, "show_progress": show_progress}, "retriever")
        self.first_stage = _build_first_stage(first_stage, encoder, builder)
        self.needs_encoder = bool(self.first_stage.needs_encoder)
        self.model_name = model
        self.candidates = candidates
        self.batch_size = batch_size
        self.device = device
        self.on_truncate = on_truncate
        self.show_progress = show_progress
        self.model_path = resolve_cross_encoder(model)
        model_limit = cross_encoder_limit(self.model_path, model)
        if max_length is not None and model_limit is not None and max_length > model_limit:
            raise ValueError(f"retriever.max_length={max_length} exceeds the {model_limit}-word-piece input limit of retriever.model {model!r}")
        #: The input limit in word pieces per pair (None: the folder states none; nothing is counted).
        self.max_length = max_length if max_length is not None else model_limit
        self._model = None
        self._texts: dict[str, tuple[str, str]] = {}  # chunk id -> (text, sha256)
        self._indexed = False
        self._n_tokens: dict[tuple[str, str], int] = {}
        self._limit_checked: set[tuple[str, str]] = set()
        self.n_scored = 0
        self.n_cache_hits = 0
        self.n_over_limit = 0

    # -- the model -------------------------------------------------------------------------
    @functools.cached_property
    def model_key(self) -> str:
        """sha256 hex of the model folder's fingerprint and the input limit: equal keys give equal scores."""
        from harness.cache import model_folder_fingerprint

        return text_key(f"{model_folder_fingerprint(self.model_path)}\0{self.max_length}")

    @property
    def model(self):
        """The loaded ``sentence_transformers.CrossEncoder`` (loaded on first access, offline).

        Raises:
            ValueError: ``device`` is not available in this torch build.
        """
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from harness.runtime import check_torch_device, long_lived

            with long_lived("torch"):  # torch, transformers and the weights stay for the whole process
                from sentence_transformers import CrossEncoder

                check_torch_device("retriever.device", self.device)
                self._model = CrossEncoder(str(self.model_path), device=self.device, max_length=self.max_length, local_files_only=True)
        return self._model

    @functools.cached_property
    def _tokenizer(self):
        """The folder's fast tokenizer without truncation or padding (None: no tokenizer.json)."""
        from harness.text.units import raw_tokenizer

        path = self.model_path / "tokenizer.json"
        return raw_tokenizer(path) if path.is_file() else None

    def count_pair_tokens(self, pairs: Sequence[tuple[str, str]]) -> list[int]:
        """Word pieces of each (query, chunk) pair as the cross-encoder reads it, special tokens
        included (``[CLS] query [SEP] chunk [SEP]``), before truncation."""
        pairs = list(pairs)
        if not pairs:
            return []
        if self._tokenizer is not None:
            return [len(e.ids) for e in self._tokenizer.encode_batch(pairs, add_special_tokens=True)]
        tok = self.model.tokenizer
        enc = tok([q for q, _ in pairs], [c for _, c in pairs], add_special_tokens=True, truncation=False, verbose=False)
        return [len(ids) for ids in enc["input_ids"]]

    # -- retrieval ---------------------------------------------------------------------------
    def index(self, chunks: Sequence[Chunk]) -> None:
        """Index ``chunks`` in the first stage and keep their texts for the cross-encoder.

        Raises:
            TypeError: ``chunks`` is not a sequence of :class:`harness.types.Chunk`.
            ValueError: two chunks share a ``chunk_id``; the first stage's own errors.
        """
        items = check_chunks(chunks)
        self.first_stage.index(items)
        self._texts = {c.chunk_id: (c.text, text_key(c.text)) for c in items}
        self._indexed = True

    def candidate_count(self, k: int) -> int:
        """First-stage results re-scored per query for a search of ``k`` results.

        Raises:
            ValueError: ``k`` exceeds a configured ``candidates``.
        """
        if self.candidates is None:
            return max(k, DEFAULT_CANDIDATES)
        if k > self.candidates:
            raise ValueError(
                f"retriever.candidates={self.candidates} is below the {k} results asked for (k); the reranker returns only "
                f"re-scored candidates: raise retriever.candidates or set it to null (max(k, {DEFAULT_CANDIDATES}))"
            )
        return self.candidates

    def search(self, queries: Sequence[Query], k: int) -> Run:
        """Top-k per query by cross-encoder score among the first stage's candidates.

        Returns:
            ``{query_id: {chunk_id: score}}``, at most ``k`` entries per query, in ranking
            order (score descending, ties in document order, :func:`harness.types.rank_order`);
            every query id is present (empty when the first stage returned nothing for it).

        Raises:
            TypeError: ``queries`` is not a sequence of :class:`harness.types.Query`.
            ValueError: ``k < 1``, ``k > candidates``, search before :meth:`index`, or pairs
                over the input limit with ``on_truncate="error"`` (nothing is scored then).
        """
        check_k(k)
        items = check_queries(queries)
        if not self._indexed:
            raise ValueError("retriever.rerank: search() called before index()")
        n = self.candidate_count(k)
        first = self.first_stage.search(items, n)
        # every (query, chunk) pair of this search, by (query sha256, chunk sha256)
        per_query: list[tuple[Query, list[tuple[str, tuple[str, str]]]]] = []
        todo: dict[tuple[str, str], tuple[str, str]] = {}
        for q in items:
            qkey = text_key(q.text)
            scores = first.get(q.query_id, {})
            cands = rank_order(scores)[:n]
            keyed = [(cid, (qkey, self._texts[cid][1])) for cid in cands]
            per_query.append((q, keyed))
            for cid, key in keyed:
                todo.setdefault(key, (q.text, self._texts[cid][0]))
        self._check_limit(todo)
        self._score(todo)
        mk = self.model_key if todo else ""
        run: Run = {}
        for q, keyed in per_query:
            scores = {cid: _SCORES[(mk, *key)] for cid, key in keyed}
            run[q.query_id] = self.keep_top(q.query_id, scores, k)
        return run

    def _check_limit(self, pairs: Mapping[tuple[str, str], tuple[str, str]]) -> None:
        """Count the pairs over :attr:`max_length` (each pair once per retriever) and warn or
        raise per ``on_truncate``."""
        limit = self.max_length
        if self.on_truncate == "ignore" or limit is None:
            return
        new = [key for key in pairs if key not in self._limit_checked]
        if not new:
            return
        missing = [key for key in new if key not in self._n_tokens]
        self._n_tokens.update(zip(missing, self.count_pair_tokens([pairs[key] for key in missing])))
        over = [self._n_tokens[key] for key in new if self._n_tokens[key] > limit]
        if over and self.on_truncate == "error":
            raise ValueError(
                f"retriever.on_truncate=error: {len(over)} of {len(new)} (query, chunk) pairs (rerank) exceed the {limit}-word-piece "
                f"input limit of retriever.model {self.model_name!r} (longest {max(over)} word pieces, special tokens included) and would be "
                f"truncated; shorten the chunks (a smaller chunk size), raise retriever.max_length up to the model's limit, or set retriever.on_truncate=warn"
            )
        self._limit_checked.update(new)
        self.n_over_limit += len(over)
        if over:
            warnings.warn(
                f"retriever.model {self.model_name!r} truncates {len(over)} of {len(new)} (query, chunk) pairs (rerank) to its "
                f"{limit}-word-piece input limit (longest {max(over)} word pieces, special tokens included): only the first {limit} "
                f"of each pair are scored, the longer side cut first. Set retriever.on_truncate=error to refuse, or ignore to silence this",
                stacklevel=3,
            )

    def _score(self, pairs: Mapping[tuple[str, str], tuple[str, str]]) -> None:
        """Score the pairs missing from the cache in one ``predict`` call and store them."""
        if not pairs:
            return
        mk = self.model_key
        todo = [key for key in pairs if (mk, *key) not in _SCORES]
        self.n_cache_hits += len(pairs) - len(todo)
        if not todo:
            return
        import numpy as np

        texts = [pairs[key] for key in todo]
        show = self.show_progress and len(texts) > self.batch_size
        out = np.asarray(self.model.predict(texts, batch_size=self.batch_size, show_progress_bar=show, convert_to_numpy=True), dtype=np.float64)
        if out.ndim == 2 and out.shape[1] == 1:
            out = out[:, 0]
        if out.shape != (len(todo),):
            raise ValueError(
                f"retriever.model {self.model_name!r} returned scores of shape {tuple(out.shape)} for {len(todo)} pairs; a reranker needs one score per pair"
            )
        _SCORES.update({(mk, *key): float(s) for key, s in zip(todo, out)})
        self.n_scored += len(todo)

    def stats(self) -> dict[str, float]:
        """Counters of this retriever's reranking (``rerank.*`` metrics): pairs scored by the
        model, pairs read from the score cache, distinct pairs over the input limit; then the
        first stage's own (``retriever.ann_*`` of a FAISS first stage with an approximate index)."""
        first = self.first_stage.stats()
        return {
            "rerank.pairs_scored": float(self.n_scored),
            "rerank.cache_hits": float(self.n_cache_hits),
            "rerank.pairs_over_limit": float(self.n_over_limit),
            **first,
        }


def _build_first_stage(first_stage: str | Mapping[str, Any], encoder, builder) -> Retriever:
    """The first-stage retriever of a name or a ``_target_`` mapping, built by ``builder``
    (given ``retriever.first_stage``, the config as a plain dict and ``encoder``).

    Raises:
        ValueError: an unknown name (with a did-you-mean), a mapping without ``_target_``, no
            ``builder``, or the builder's own error (a class that cannot be imported or is not
            a Retriever, unknown settings, the class's parameter errors; see
            :func:`harness.experiment.build.build_sub_retriever`).
    """
    if isinstance(first_stage, str):
        check_choice("retriever.first_stage", first_stage, tuple(FIRST_STAGES))
        node: dict[str, Any] = {"_target_": FIRST_STAGES[first_stage]}
    elif isinstance(first_stage, Mapping) and isinstance(first_stage.get("_target_"), str):
        node = {str(key): value for key, value in first_stage.items()}
    else:
        raise ValueError(
            f"retriever.first_stage must be one of {', '.join(map(repr, FIRST_STAGES))} or a retriever config with a _target_, got {first_stage!r}"
        )
    if builder is None:
        raise ValueError(
            "retriever.first_stage: no builder for nested retriever configs; build this retriever with harness.experiment.build.build_retriever, "
            "or pass builder=harness.experiment.build.build_sub_retriever"
        )
    return builder("retriever.first_stage", node, encoder)
