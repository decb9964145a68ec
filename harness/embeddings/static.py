"""Static embeddings distilled from a sentence-transformers model (``embedding=static``).

A fast proxy for very large sweeps: a model2vec ``StaticModel`` (Tulkens & van Dongen,
"Model2Vec: Distill a Small Fast Model from any Sentence Transformer", 2024; the
``model2vec`` library) keeps one vector per token of a vocabulary and embeds a text as the
mean of its tokens' vectors, L2-normalised. Distillation runs the source model once over
every token of the vocabulary, reduces the vectors with PCA and weights them by an
estimated token frequency (SIF, from the token's rank in the vocabulary). Embedding is then
a table look-up: two to three orders of magnitude faster than the transformer on a CPU, for
a lower retrieval quality (docs/embeddings.md has the numbers on kestrel_kb and
chroma_general).

**Where the model comes from.** Never from a hub at run time:

* ``path``: a ready StaticModel folder (``config.json``, ``model.safetensors``,
  ``tokenizer.json``, as ``StaticModel.save_pretrained`` writes it) is used as is; the
  distillation settings are then ignored.
* otherwise it is distilled locally from ``source_model`` (default: the packaged
  all-MiniLM-L6-v2; a local folder or a hub id already in the local Hugging Face cache, as
  :func:`harness.embeddings.model.resolve_model_path` resolves ``embedding.model``) into
  ``<cache_dir>/static_models/<key>/``, where the key is the sha256 of the source model's
  folder fingerprint, the distillation settings and the model2vec and skeletoken versions.
  The first run distils (about 90 s for MiniLM's 30,522 word pieces on 2 CPU threads; a
  warning reports the time and the folder, and the run logs ``embedding.distill_s``); every
  later run, process or sweep job reuses the folder. Concurrent jobs distil once: a file lock
  guards the folder, which is written to a temporary name and renamed when complete. With
  the cache disabled (``cache.enabled=false``) the model is distilled into a temporary
  folder removed at exit, i.e. once per process.

Distillation needs ``model2vec.distill``, which imports ``transformers`` (installed) and
``skeletoken`` (pinned in pyproject.toml); the ``model2vec[distill]`` extra itself is not
installed because it would downgrade transformers.

**The window.** A static model has no attention window, but model2vec truncates every input
to ``max_length`` tokens of its tokenizer (512 unless the folder's ``config.json`` says
otherwise; ``null`` there means no limit) and, before tokenising, to ``max_length`` times
the median token length in characters. The encoder uses :attr:`StaticEncoder.max_seq_length`
(``embedding.max_seq_length``, else the folder's ``max_length``) as the window, counts tokens
with the static model's own tokenizer (no special tokens: a static model adds none; unknown
tokens count, as they take positions before model2vec drops them) and cuts each text itself
after its ``max_seq_length``-th token (character offsets from the tokenizer) before calling
``StaticModel.encode(max_length=None)``, so the cut is exactly the counted window and
model2vec's character pre-cut never applies. ``on_truncate`` reports texts over it as for
every backend.

**The cache key** (:attr:`StaticEncoder.embedding_key`) is the sha256 of the static model
folder's fingerprint (:func:`harness.cache.model_folder_fingerprint`), its identity, the
window and ``normalize``; prompts are part of every text's own key.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import re
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from harness.embeddings.base import CachedEncoder
from harness.params import Param, is_int

logger = logging.getLogger(__name__)

#: Default source of the distillation: the packaged all-MiniLM-L6-v2.
DEFAULT_SOURCE = "all-MiniLM-L6-v2"
#: model2vec's default ``max_length`` of a StaticModel, in tokens (``model2vec.model.DEFAULT_MAX_LENGTH``).
MODEL2VEC_MAX_LENGTH = 512
#: Files of a complete StaticModel folder.
STATIC_FILES = ("config.json", "model.safetensors", "tokenizer.json")
#: Bumped when the distillation recipe here changes (old folders are then not reused).
DISTILL_FORMAT = 1


def is_static_folder(folder: str | os.PathLike) -> bool:
    """True when ``folder`` holds every file of :data:`STATIC_FILES`."""
    root = Path(folder)
    return root.is_dir() and all((root / name).is_file() for name in STATIC_FILES)


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("model2vec", "skeletoken"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "missing"
    return out


def _removal_pattern(source: Path, vocabulary: Sequence[str]) -> tuple[str, list[str]]:
    """For a restricted ``vocabulary``: a regex that matches every token of the source
    tokenizer to drop (all but the listed ones and the special tokens), and the listed
    words the source vocabulary lacks (added as new tokens)."""
    data = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = (data.get("model") or {}).get("vocab") or {}
    own = set(vocab) if isinstance(vocab, dict) else {entry[0] for entry in vocab}  # WordPiece/BPE: a dict; Unigram: [token, score] pairs
    special = {t["content"] for t in data.get("added_tokens", []) if t.get("special")}
    unk = (data.get("model") or {}).get("unk_token")
    keep = sorted(special | ({unk} if unk else set()) | set(vocabulary))  # added words must survive the pattern too
    pattern = "(?!(?:" + "|".join(re.escape(k) for k in keep) + ")$)"  # matches every token not kept
    return pattern, [w for w in dict.fromkeys(vocabulary) if w not in own]


class StaticEncoder(CachedEncoder):
    """model2vec backend: a static model distilled once from a local sentence-transformers model.

    Construction only validates the settings; :meth:`preflight` (called by a run before it
    reads the dataset) or the first use resolves the static model, distilling it when needed.
    Caches, prompts, the window check, counters and :attr:`checkpoint` are those of
    :class:`harness.embeddings.base.CachedEncoder`.

    Args:
        source_model: the model to distil from: ``all-MiniLM-L6-v2`` (packaged), a local
            sentence-transformers or transformers folder, or a hub id already in the local
            Hugging Face cache (never downloaded).
        path: a ready StaticModel folder to use as is (the distillation settings are then
            ignored); None distils.
        pca_dims: dimensions kept by PCA, an integer >= 1 (model2vec's default 256; values
            over the source dimension keep it, 384 for MiniLM; PCA is skipped when the
            vocabulary has no more tokens than this); None: no PCA.
        vocabulary: None: every token of the source tokenizer (30,522 word pieces for
            MiniLM, minus its ``[unused*]`` entries). A list restricts the vocabulary: listed
            entries of the source vocabulary are kept, listed words it lacks are added as new
            tokens (model2vec's ``vocabulary``), every other token is dropped (texts made of
            them embed to zero). A short list distils in seconds (tests, toy proxies).
        sif_coefficient: SIF weight ``a / (a + p(token))`` with ``p`` from the token's rank
            (Zipf), in (0, 1); model2vec's default 1e-4; None: no weighting.
        normalize: L2-normalise the vectors (inner product = cosine).
        max_seq_length: the window in the static model's tokens; None: the folder's
            ``max_length`` (512 for models distilled here); an integer >= 1 overrides it.
        batch_size: texts per ``StaticModel.encode`` call, >= 1 (embedding runs in blocks of
            ``4 * batch_size``).
        show_progress: a tqdm bar while embedding more than one batch.
        cache_dir: the run's cache folder: vectors in ``<cache_dir>/embeddings``, distilled
            models in ``<cache_dir>/static_models``; None: memory only, and the model is
            distilled into a temporary folder.
        on_truncate: ``warn`` | ``error`` | ``ignore`` for texts over the window.
        query_prompt, document_prompt: text put before every query / chunk (``""``: none).

    Raises:
        ValueError: a setting out of range (the message names ``embedding.<setting>``); from
            :meth:`preflight` or first use: ``path`` that is not a StaticModel folder (names
            ``embedding.path``), a source model that cannot be resolved offline (names
            ``embedding.source_model``).
    """

    backend = "model2vec"
    window_unit = "tokens"
    window_adjective = "token"
    count_note = " (the static model's tokenizer)"
    special_tokens = 0  # a static model adds no [CLS] / [SEP]

    def __init__(
        self,
        source_model: str = DEFAULT_SOURCE,
        path: str | os.PathLike | None = None,
        pca_dims: int | None = 256,
        vocabulary: Sequence[str] | None = None,
        sif_coefficient: float | None = 1e-4,
        normalize: bool = True,
        max_seq_length: int | None = None,
        batch_size: int = 1024,
        show_progress: bool = True,
        cache_dir: str | os.PathLike | None = None,
        on_truncate: str = "warn",
        query_prompt: str | None = "",
        document_prompt: str | None = "",
    ) -> None:
        if not isinstance(source_model, str) or not source_model.strip():
            raise ValueError(f"embedding.source_model must be 'all-MiniLM-L6-v2', a local model folder or a cached hub id, got {source_model!r}")
        if path is not None and (not isinstance(path, (str, os.PathLike)) or not str(path).strip()):
            raise ValueError(f"embedding.path must be null or a StaticModel folder, got {path!r}")
        Param("pca_dims", "int", low=1, allow_none=True, none="null (no PCA) or {}").check(pca_dims, "embedding")
        if vocabulary is not None:
            if isinstance(vocabulary, (str, bytes)) or not all(isinstance(w, str) and w.strip() for w in vocabulary):
                raise ValueError(f"embedding.vocabulary must be null (the source model's) or a list of non-empty strings, got {vocabulary!r}")
            vocabulary = list(vocabulary)
            if not vocabulary:
                raise ValueError("embedding.vocabulary must be null (the source model's) or a non-empty list of strings, got []")
        Param("sif_coefficient", "number", low=0, high=1, low_open=True, high_open=True, allow_none=True, none="null (no weighting) or {}").check(
            sif_coefficient, "embedding"
        )
        Param("normalize", "bool").check(normalize, "embedding")
        Param("max_seq_length", "int", low=1, allow_none=True, none="null (the static model's max_length) or {}").check(max_seq_length, "embedding")
        name = f"static:{path}" if path is not None else f"static:{source_model}"
        super().__init__(name, batch_size, show_progress, cache_dir, on_truncate, query_prompt, document_prompt)
        self.source_model = source_model
        self.path = Path(path).expanduser() if path is not None else None
        self.pca_dims = pca_dims
        self.vocabulary = vocabulary
        self.sif_coefficient = float(sif_coefficient) if sif_coefficient is not None else None
        self.normalize = normalize
        self.max_seq_length_override = max_seq_length
        self.distill_seconds: float | None = None  # set when this encoder distilled its model
        self._model_path: Path | None = None
        self._model = None

    # -- where the static model is -----------------------------------------------------------
    def preflight(self) -> None:
        """Resolve the static model before any chunking, distilling it when it is not there yet.

        Raises:
            ValueError: as :attr:`model_path`.
        """
        self.model_path  # noqa: B018 - resolves (and distils) now

    @property
    def model_path(self) -> Path:
        """The StaticModel folder: ``path``, or the distilled folder (distilled on first access).

        Raises:
            ValueError: ``path`` is missing or not a StaticModel folder (names
                ``embedding.path``); the source model cannot be resolved offline (names
                ``embedding.source_model``).
        """
        if self._model_path is None:
            if self.path is not None:
                if not is_static_folder(self.path):
                    what = "does not exist" if not self.path.exists() else f"is not a model2vec StaticModel folder (expected {', '.join(STATIC_FILES)})"
                    raise ValueError(
                        f"embedding.path {str(self.path)!r} {what}; set it to a folder written by StaticModel.save_pretrained, or null to distil one"
                    )
                self._model_path = self.path
            else:
                self._model_path = self._distilled()
        return self._model_path

    @functools.cached_property
    def source_path(self) -> Path:
        """The local folder of ``source_model`` (never downloaded).

        Raises:
            ValueError: it is not the packaged model, a folder, or a hub id in the local cache.
        """
        from harness.embeddings.model import resolve_model_path

        return resolve_model_path(self.source_model, setting="embedding.source_model")

    @functools.cached_property
    def distill_key(self) -> str:
        """sha256 hex of what a distilled folder depends on: the source model's folder
        fingerprint, the distillation settings and the library versions."""
        from harness.cache import canonical_json, model_folder_fingerprint, sha256_hex

        return sha256_hex(
            canonical_json(
                {
                    "format": DISTILL_FORMAT,
                    "source_fingerprint": model_folder_fingerprint(self.source_path),
                    "pca_dims": self.pca_dims,
                    "vocabulary": self.vocabulary,
                    "sif_coefficient": self.sif_coefficient,
                    "token_remove_pattern": r"\[unused\d+\]" if self.vocabulary is None else "vocabulary",
                    "quantize_to": "float16",
                    "versions": _versions(),
                }
            )
        )

    def _static_root(self) -> Path:
        """``<cache_dir>/static_models``, or a temporary folder removed at exit without a cache."""
        if self.cache_dir is not None:
            return self.cache_dir / "static_models"
        root = Path(tempfile.mkdtemp(prefix="harness-static-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        return root

    def _distilled(self) -> Path:
        """The distilled folder for these settings: reused when complete, else distilled
        under a file lock, written to a temporary name and renamed when complete."""
        from filelock import FileLock

        root = self._static_root()
        folder = root / self.distill_key[:32]
        if is_static_folder(folder):
            return folder
        root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(root / f"{folder.name}.lock")):
            if is_static_folder(folder):  # another process distilled it while we waited
                return folder
            if folder.exists():  # an incomplete leftover (never a complete model)
                shutil.rmtree(folder)
            building = root / f"{folder.name}.building-{os.getpid()}"
            shutil.rmtree(building, ignore_errors=True)
            try:
                seconds, n_tokens, dim = self._distil_into(building)
                os.rename(building, folder)
            finally:
                shutil.rmtree(building, ignore_errors=True)
        self.distill_seconds = seconds
        message = (
            f"embedding=static: distilled a static model from {self.source_model!r} ({n_tokens} tokens, {dim} dimensions) "
            f"in {seconds:.1f} s into {folder}; runs with the same settings and cache reuse it"
        )
        logger.warning(message)
        warnings.warn(message, stacklevel=4)
        return folder

    def _distil_into(self, target: Path) -> tuple[float, int, int]:
        """Distil with ``model2vec.distill.distill`` and save into ``target``; returns
        (seconds, tokens, dimensions)."""
        source = self.source_path
        from harness.runtime import long_lived

        try:
            with long_lived("torch"):  # torch and transformers (~10 s to import) stay for the process
                from model2vec.distill import distill
        except ImportError as exc:  # model2vec's own message suggests the [distill] extra, which downgrades transformers
            raise ImportError(
                f"embedding=static distils with model2vec.distill, which could not be imported ({exc}); install the pins of "
                f"pyproject.toml (model2vec==0.10.0, skeletoken==0.6.1), not the model2vec[distill] extra (it pins transformers<5.4)"
            ) from None

        t0 = time.perf_counter()

        kwargs: dict[str, Any] = {"pca_dims": self.pca_dims, "sif_coefficient": self.sif_coefficient}
        if self.vocabulary is not None:
            kwargs["token_remove_pattern"], added = _removal_pattern(source, self.vocabulary)
            kwargs["vocabulary"] = added or None
        model = distill(str(source), **kwargs)
        model.save_pretrained(str(target))
        return time.perf_counter() - t0, len(model.tokens), int(model.dim)

    # -- identity ----------------------------------------------------------------------------
    @functools.cached_property
    def fingerprint(self) -> str:
        """:func:`harness.cache.model_folder_fingerprint` of the static model folder."""
        from harness.cache import model_folder_fingerprint

        return model_folder_fingerprint(self.model_path)

    @functools.cached_property
    def _config(self) -> dict[str, Any]:
        try:
            data = json.loads((self.model_path / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    @functools.cached_property
    def embedding_key(self) -> str:
        """sha256 hex of (backend, identity, static folder fingerprint, window, normalize);
        the folder's content covers the source model and every distillation setting."""
        from harness.cache import FORMAT_VERSION, canonical_json, sha256_hex

        return sha256_hex(
            canonical_json(
                {
                    "format": FORMAT_VERSION,
                    "backend": self.backend,
                    "model": self.model_name if self.path is None else self.path.name,
                    "fingerprint": self.fingerprint,
                    "max_seq_length": self.max_seq_length,
                    "normalize": self.normalize,
                }
            )
        )

    @property
    def max_seq_length(self) -> int | None:
        """The window in the static model's tokens: ``embedding.max_seq_length``, else the
        folder's ``max_length`` (512 when its config has none; None when it sets null: no limit)."""
        if self.max_seq_length_override is not None:
            return self.max_seq_length_override
        value = self._config.get("max_length", MODEL2VEC_MAX_LENGTH)
        return int(value) if is_int(value) and value > 0 else None

    @functools.cached_property
    def declared_dim(self) -> int | None:
        """The vector dimension the folder's ``config.json`` declares (``hidden_dim``)."""
        value = self._config.get("hidden_dim")
        return int(value) if is_int(value) and value > 0 else None

    @property
    def chunk_tokenizer(self) -> str | None:
        """``"model"`` for a model distilled here from the packaged MiniLM with its whole
        vocabulary: its tokenizer is MiniLM's WordPiece without ``[unused*]`` entries and
        without special tokens, so ``chunker.tokenizer=model`` counts the same tokens (equal
        on every document window and query of kestrel_kb); None otherwise."""
        from harness.embeddings.model import is_packaged

        return "model" if self.path is None and self.vocabulary is None and is_packaged(self.source_model) else None

    # -- the model ---------------------------------------------------------------------------
    @property
    def model(self):
        """The loaded ``model2vec.StaticModel`` (no truncation of its own: the encoder cuts)."""
        if self._model is None:
            from model2vec import StaticModel

            quiet = logging.getLogger("model2vec")
            level = quiet.level
            quiet.setLevel(logging.ERROR)  # "Set max_length to None, which does not match config value": intended
            try:
                self._model = StaticModel.from_pretrained(str(self.model_path), normalize=self.normalize, max_length=None)
            finally:
                quiet.setLevel(level)
        return self._model

    @functools.cached_property
    def _tokenizer(self):
        """The static model's tokenizer (``tokenizers``), without padding or truncation."""
        from harness.text.units import raw_tokenizer

        return raw_tokenizer(self.model_path / "tokenizer.json")

    def _prepare(self) -> None:
        self.model  # noqa: B018 - loads the vectors before the first checkpoint

    def _count_raw(self, texts: Sequence[str]) -> list[int]:
        return [len(e.ids) for e in self._tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)]

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Code-point spans of the static model's tokens of ``text``."""
        return [(int(s), int(e)) for s, e in self._tokenizer.encode(text, add_special_tokens=False).offsets]

    def _cut(self, texts: list[str]) -> list[str]:
        """Each text cut after its ``max_seq_length``-th token (unchanged when it fits; the
        counts are the memoised ones of the window check, so only long texts are tokenised again)."""
        limit = self.max_seq_length
        if limit is None:
            return texts
        over = [i for i, n in enumerate(self.count_tokens(texts)) if n > limit]
        if not over:
            return texts
        out = list(texts)
        for i, enc in zip(over, self._tokenizer.encode_batch([texts[i] for i in over], add_special_tokens=False)):
            out[i] = texts[i][: enc.offsets[limit - 1][1]]
        return out

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        vecs = self.model.encode(
            self._cut(list(texts)),
            max_length=None,
            normalize=self.normalize,
            batch_size=self.batch_size,
            use_multiprocessing=False,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32).reshape(len(texts), -1)

    def _describe(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "model": self.model_name,
            "path": str(self.model_path),
            "max_seq_length": self.max_seq_length,
            "normalize": self.normalize,
        }

    def run_metrics(self) -> dict[str, float]:
        """The base counters plus ``embedding.distill_s`` (seconds) when this encoder distilled its model."""
        out = super().run_metrics()
        if self.distill_seconds is not None:
            out["embedding.distill_s"] = float(self.distill_seconds)
        return out
