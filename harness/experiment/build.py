"""The one place that turns Hydra config into objects (``hydra.utils.instantiate``).

Components are built in an order that fails fast: chunker and retriever parameters are
validated by their constructors before any dataset is read or model loaded.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from omegaconf import DictConfig, OmegaConf

if TYPE_CHECKING:  # annotations only: the component packages load when a builder runs
    from harness.chunkers.base import Chunker
    from harness.embeddings.base import CachedEncoder
    from harness.retrievers.base import Retriever

#: The project folder (the one holding ``conf/`` and ``datasets/``).
PROJECT_ROOT = Path(__file__).resolve().parents[2]

#: Marks a whole config group left out of :func:`config_hash` in :data:`HASH_NEUTRAL`.
DROP = "<not hashed>"

#: Every hash-neutral setting, by dotted path: it changes no number a run computes, so
#: :func:`config_hash` ignores its value. A top-level group marked :data:`DROP` is left out
#: whole; a setting given a value is hashed as if it held that value, whatever it holds
#: (the value every shipped config holds, so declaring a setting here changes no shipped
#: hash, ``tests/data/config_hashes.json``). Two configurations that differ only here
#: share a hash, and resume reuses either's run. ``tests/experiment/test_config_properties.py``
#: checks that every other leaf setting of every shipped config changes the hash.
#:
#: Not here on purpose: ``embedding.batch_size`` (padding per batch moves MiniLM vectors by
#: about 1e-7, measured, enough to reorder near ties), ``metrics.objective`` (what a run
#: returns to a sweeper and logs as a headline metric), ``stats.*`` (the logged confidence
#: intervals), the settings of :data:`HASH_NEUTRAL_DEFAULTS` (neutral at one value only).
HASH_NEUTRAL: dict[str, Any] = {
    "tracking": DROP,  # where and how a run is recorded: store, names, HTML report, headline metrics
    "hydra": DROP,  # Hydra's output folders, launcher and sweeper
    "paths": DROP,  # machine folders (the dataset path they resolve into is hashed in dataset.path)
    "resume": DROP,  # whether a configuration with a finished run is skipped
    "sweep": DROP,  # how a multirun picks its jobs (sweep.screen, sweep.keep): each job's own config is hashed
    "cache": DROP,  # where embeddings and chunk sets are cached: results are equal with, without or from the cache
    "embedding.show_progress": True,  # progress bars of the encoder and of scoring
    "retriever.show_progress": True,  # progress bar of the cross-encoder (retriever=rerank)
    "embedding.on_truncate": "warn",  # texts over the window are embedded alike; only warns, refuses the run or says nothing
    "retriever.on_truncate": "warn",  # pairs over max_length are scored alike; only warns, refuses the run or says nothing
}

#: Config groups left out of the config hash whole (the :data:`DROP` entries of :data:`HASH_NEUTRAL`).
_NON_RESULT_KEYS = tuple(k for k, v in HASH_NEUTRAL.items() if v == DROP)


def _hashed_as_neutral(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a resolved config as plain data) with the :data:`HASH_NEUTRAL` groups left out
    and every other :data:`HASH_NEUTRAL` setting that is present set to its declared value
    (a new dict; ``data`` unchanged)."""
    out = {k: v for k, v in data.items() if k not in _NON_RESULT_KEYS}
    for path, value in HASH_NEUTRAL.items():
        group, _, key = path.partition(".")
        node = out.get(group)
        if key and isinstance(node, dict) and key in node:
            out[group] = {**node, key: value}
    return out


def corpus_name(path: Any, default: str) -> str:
    """Name of the corpus at ``path``: its last path part, a ``.json`` / ``.jsonl`` suffix
    removed (``/data/harbour_docs/`` -> ``harbour_docs``, ``dev-v2.0.json`` -> ``dev-v2.0``);
    ``default`` when ``path`` is None, empty or has no last part (``/``).

    The ``${corpus_name:${.path},<group>}`` resolver of the dataset configs that take a
    ``path`` (beir, excerpts, folder, squad): their ``dataset.name``, and so the MLflow
    experiment (:func:`harness.tracking.runs.experiment_name`), follows the corpus instead
    of being the group's name for every corpus. Purely textual: the file system is not read.
    """
    if path is None or not str(path).strip():
        return str(default)
    name = Path(str(path).rstrip("/")).name
    for suffix in (".jsonl", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return name or str(default)


def register_resolvers() -> None:
    """Register ``${project_root:}`` and ``${corpus_name:PATH,DEFAULT}`` (:func:`corpus_name`) for configs (idempotent)."""
    if not OmegaConf.has_resolver("project_root"):
        OmegaConf.register_new_resolver("project_root", lambda: str(PROJECT_ROOT))
    if not OmegaConf.has_resolver("corpus_name"):
        OmegaConf.register_new_resolver("corpus_name", corpus_name)


def to_container(cfg: DictConfig) -> dict[str, Any]:
    """Resolved plain-dict copy of a config."""
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def config_hash(cfg: DictConfig) -> str:
    """sha256 (first 16 hex chars) of the resolved config without its hash-neutral settings
    (:data:`HASH_NEUTRAL`: the tracking, paths, hydra, resume and cache groups, progress bars,
    truncation reporting).

    Two runs with the same hash compute the same results on the same dataset. The chunker
    part is hashed as the chunker is built, with the escapes in its literal-string settings
    decoded (:func:`chunker_config`, so ``separators=["\\n"]`` typed on the command line
    and a real newline in a YAML file hash alike), and the settings of
    :data:`HASH_NEUTRAL_DEFAULTS` and :data:`GROUP_HASH_NEUTRAL_DEFAULTS` are left out
    while they hold their neutral value (machine-dependent settings resolved first:
    :data:`MACHINE_RESOLVED`). Shipped
    configs hash as they did before either rule existed. A chunker config whose escapes
    cannot be decoded is hashed as typed (building it then fails, naming the setting).
    """
    data = _hashed_as_neutral(to_container(cfg))
    if "chunker" in data:
        from harness.text.escapes import decode_literal_settings

        try:
            data["chunker"] = decode_literal_settings(data["chunker"])
        except ValueError:
            pass  # build_chunker raises the message; the failed run still gets a hash
    data = without_group_neutral_defaults(_without_neutral_defaults(_with_recorded_targets(data)))
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]


#: Settings added after runs were recorded, by ``_target_``: while a setting holds its
#: neutral value (the one that reproduces the behaviour from before it existed) it is left
#: out of :func:`config_hash`, so adding it to a config file changes no hash and resume
#: still finds the earlier runs. Applied to every mapping with that ``_target_`` in the
#: result-relevant config (nested ones too, e.g. an adaptive route). A value counts as
#: neutral only if it equals the entry and has its type (``0`` is not ``False``).
HASH_NEUTRAL_DEFAULTS: dict[str, dict[str, Any]] = {
    "harness.chunkers.semantic.SemanticChunker": {"number_of_chunks": None, "target_chunk_size": None, "compatible": None},
    # compatible=chroma: re-runs of the reference evaluation's chunkers (harness.chunkers.chroma)
    "harness.chunkers.fixed.FixedChunker": {"compatible": None},
    "harness.chunkers.recursive.RecursiveChunker": {"compatible": None},
    "harness.chunkers.cluster_semantic.ClusterSemanticChunker": {"compatible": None},
    # only warns (or refuses a run): never changes a number, so never a new hash; the any-model
    # settings (prompts, window override, remote code) at the values that embed as before they existed
    "harness.embeddings.model.Encoder": {
        "on_truncate": "warn",
        "query_prompt": "",
        "document_prompt": "",
        "prompts": "none",
        "max_seq_length": None,
        "trust_remote_code": False,
        # fp32 embeds as before the setting existed; ``auto`` is hashed as what it resolves
        # to on this machine (MACHINE_RESOLVED), so auto = fp32 keeps every earlier hash
        "precision": "fp32",
        # where the vectors are computed, not what they are (equal to this process's): null = here
        "distributed": None,
        "ray_address": None,
        "ray_workers": None,
        "ray_threads": None,
    },
    # the approximate-index settings: exact search (index=flat) with every other setting at its default
    "harness.retrievers.faiss.FaissRetriever": {
        "index": "flat",
        "hnsw_m": 32,
        "hnsw_ef_construction": 200,
        "hnsw_ef_search": 128,
        "hnsw_build_threads": 1,
        "ivf_nlist": None,
        "ivf_nprobe": 32,
        "ivf_seed": 1234,
        "ann_min_recall": 0.9,
        "on_low_recall": "warn",
    },
}


def _resolved_encoder(node: dict[str, Any]) -> dict[str, Any]:
    from harness.runtime import PRECISIONS, resolve_precision

    precision = node.get("precision")
    if precision in PRECISIONS:  # anything else fails when the encoder is built, naming the setting
        return {**node, "precision": resolve_precision(precision, str(node.get("device", "cpu")))}
    return node


#: Settings whose effect depends on the machine, by ``_target_``: resolved before
#: :func:`config_hash` (``embedding.precision=auto`` is hashed as ``fp32`` or ``bf16``, the
#: precision the model runs at here), so a hash says what was computed, and a sweep
#: resumed on a machine that resolves differently runs again instead of reusing results.
MACHINE_RESOLVED: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "harness.embeddings.model.Encoder": _resolved_encoder,
}


#: The same rule for settings of top-level config groups that have no ``_target_``, by
#: group name: ``{"metrics": {"convention": "harness"}}`` leaves ``metrics.convention``
#: out of :func:`config_hash` while it is ``harness`` (the value that adds no metric).
GROUP_HASH_NEUTRAL_DEFAULTS: dict[str, dict[str, Any]] = {
    # convention=chroma only adds the chroma_* metrics; ours are the same in both conventions
    "metrics": {"convention": "harness"},
}


def without_group_neutral_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a resolved config as plain data) without the settings of
    :data:`GROUP_HASH_NEUTRAL_DEFAULTS` that hold their neutral value (same value and type);
    every other key, and ``data`` itself, unchanged (a new dict is returned)."""
    out = dict(data)
    for group, neutral in GROUP_HASH_NEUTRAL_DEFAULTS.items():
        node = out.get(group)
        if isinstance(node, dict):
            out[group] = {k: v for k, v in node.items() if not (k in neutral and v == neutral[k] and type(v) is type(neutral[k]))}
    return out


#: Classes that moved to another module, by their current ``_target_``: the config hash is
#: taken over the path the class had when runs were first recorded, so moving code changes
#: no hash and resume still finds earlier runs (``tests/experiment/test_config_hashes.py``
#: checks every shipped config against hashes recorded before the move).
MOVED_TARGETS: dict[str, str] = {
    "harness.evaluation.compression.Compressor": "harness.compression.Compressor",
}


def _with_recorded_targets(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: (MOVED_TARGETS.get(v, v) if k == "_target_" and isinstance(v, str) else _with_recorded_targets(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_with_recorded_targets(v) for v in node]
    return node


def _without_neutral_defaults(node: Any) -> Any:
    if isinstance(node, dict):
        target = node.get("_target_")
        if isinstance(target, str) and target in MACHINE_RESOLVED:
            node = MACHINE_RESOLVED[target](node)
        neutral = HASH_NEUTRAL_DEFAULTS.get(target, {}) if isinstance(target, str) else {}
        return {k: _without_neutral_defaults(v) for k, v in node.items() if not (k in neutral and v == neutral[k] and type(v) is type(neutral[k]))}
    if isinstance(node, list):
        return [_without_neutral_defaults(v) for v in node]
    return node


def chunker_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved ``chunker`` config as plain data, as the chunker is built from it.

    Escape sequences typed in its literal-string settings (separators, delimiters; never
    regexes) are decoded: ``\\n`` -> newline, ``\\r``, ``\\t``, ``\\\\`` -> backslash
    (:func:`harness.text.escapes.decode_literal_settings`). Use this, not the raw config, for
    anything keyed by what the chunker does (the chunk-cache key).

    Raises:
        ValueError: an unknown escape (e.g. ``\\s``) in a literal-string setting, naming it.
    """
    from harness.text.escapes import decode_literal_settings

    return decode_literal_settings(to_container(cfg.chunker))


#: Settings of :data:`HASH_NEUTRAL_DEFAULTS` that were already part of the chunk-set keys
#: recorded in ``tests/data/config_hashes.json`` (they stay in the key, as then).
_KEYED_BEFORE: frozenset[tuple[str, str]] = frozenset({("harness.chunkers.semantic.SemanticChunker", "number_of_chunks")})


def chunk_key_config(cfg: DictConfig, encoder=None) -> dict[str, Any]:
    """The chunker config that keys the chunk cache: :func:`chunker_config` without the
    chunker settings added since the keys were recorded while they hold their neutral value
    (:data:`HASH_NEUTRAL_DEFAULTS`, e.g. ``compatible: null``), so a new option leaves every
    cached chunk set of the configurations that do not use it valid.

    Raises:
        ValueError: as :func:`chunker_config`.
    """
    data = resolve_window_sizes(chunker_config(cfg), encoder)  # keyed by the sizes the chunker gets
    target = data.get("_target_")
    neutral = {k: v for k, v in HASH_NEUTRAL_DEFAULTS.get(target, {}).items() if (target, k) not in _KEYED_BEFORE} if isinstance(target, str) else {}
    return {k: v for k, v in data.items() if not (k in neutral and v == neutral[k] and type(v) is type(neutral[k]))}


#: Chunker size settings that may be written relative to the embedding model's window.
WINDOW_SIZE_KEYS = ("chunk_size", "max_chunk_size", "parent_size", "child_size", "piece_size", "target_chunk_size")
_WINDOW = re.compile(r"^\s*window\s*(?:([*/])\s*([0-9]*\.?[0-9]+)\s*)?$")


def embedding_window(encoder) -> tuple[int, str | None]:
    """``(tokens, chunker tokenizer)``: the text tokens the embedding model reads per input
    (its window minus its special tokens, e.g. 256 - 2 = 254 for all-MiniLM-L6-v2) and the
    ``chunker.tokenizer`` value that counts those tokens (None when no chunker tokenizer does).

    Raises:
        ValueError: the backend knows no window.
    """
    window = encoder.max_seq_length
    if window is None:
        raise ValueError(f"embedding.model {encoder.model_name!r} declares no input window: give chunk sizes as numbers")
    return int(window) - int(encoder.special_tokens), encoder.chunk_tokenizer


def resolve_window_sizes(data: Any, encoder=None, path: str = "chunker") -> Any:
    """A chunker config (plain data) with its window-relative sizes replaced by token counts.

    A size setting (:data:`WINDOW_SIZE_KEYS`, in any nested chunker config) may be written
    ``window`` (the whole window), ``window*F`` (``0 < F <= 1``) or ``window/N`` (``N >= 1``):
    it becomes ``floor(W * F)`` / ``floor(W / N)`` tokens, ``W`` the text tokens of the
    embedding model's window (:func:`embedding_window`), so one sweep over models compares
    like with like (``chunker.chunk_size=window`` is 254 tokens with all-MiniLM-L6-v2). Such
    a size needs ``unit: tokens`` and the tokenizer that counts the model's tokens.

    Raises:
        ValueError: a malformed ``window`` expression, a fraction outside (0, 1], a result
            below 1, another unit or tokenizer, or no encoder (the message names the setting).
    """
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            where = f"{path}.{key}"
            if key in WINDOW_SIZE_KEYS and isinstance(value, str) and value.strip().lower().startswith("window"):
                out[key] = _window_size(where, value, data, encoder)
            else:
                out[key] = resolve_window_sizes(value, encoder, where)
        return out
    if isinstance(data, list):
        return [resolve_window_sizes(v, encoder, f"{path}[{i}]") for i, v in enumerate(data)]
    return data


def _window_size(where: str, value: str, node: dict, encoder) -> int:
    m = _WINDOW.match(value.lower())
    if not m:
        raise ValueError(f"{where}={value!r}: expected a number, 'window', 'window*F' (0 < F <= 1) or 'window/N' (N >= 1)")
    if encoder is None:
        raise ValueError(f"{where}={value!r} is relative to the embedding model's window: build the chunker with the run's encoder")
    tokens, tokenizer = embedding_window(encoder)
    unit, wanted = node.get("unit", "tokens"), node.get("tokenizer", "model")
    model = encoder.model_name
    if unit != "tokens":
        raise ValueError(f"{where}={value!r} is in the model's tokens: needs {where.rsplit('.', 1)[0]}.unit=tokens, got {unit!r}")
    if tokenizer is None or wanted != tokenizer:
        need = f"{where.rsplit('.', 1)[0]}.tokenizer={tokenizer}" if tokenizer else "a size in chars or words (no chunker tokenizer counts its tokens)"
        raise ValueError(
            f"{where}={value!r}: the window of embedding.model {model!r} is {tokens} tokens of its own tokenizer; needs {need}, got tokenizer={wanted!r}"
        )
    op, num = m.group(1), m.group(2)
    size = tokens
    if op == "*":
        f = float(num)
        if not 0 < f <= 1:
            raise ValueError(f"{where}={value!r}: the fraction must be in (0, 1], got {f}")
        size = int(tokens * f)
    elif op == "/":
        n = float(num)
        if n < 1:
            raise ValueError(f"{where}={value!r}: the divisor must be >= 1, got {n}")
        size = int(tokens / n)
    if size < 1:
        raise ValueError(f"{where}={value!r} gives {size} tokens (window {tokens}): too small")
    return size


def _instantiate(node: DictConfig, **kwargs):
    """``hydra.utils.instantiate`` that re-raises a constructor's ValueError/TypeError as itself.

    Hydra wraps constructor errors in ``InstantiationException``; the original message
    (which names the parameter and its allowed range) is what a user needs to see.
    """
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(node, **kwargs)
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, (ValueError, TypeError)):
            raise cause from None
        raise


def cache_dir(cfg: DictConfig) -> str | None:
    """The on-disk cache folder (``cache.dir``, default ``paths.cache_dir``), or None when ``cache.enabled=false``."""
    node = cfg.get("cache")
    if node is not None and not node.get("enabled", True):
        return None
    return str(node.get("dir") if node is not None and node.get("dir") else cfg.paths.cache_dir)


def build_encoder(cfg: DictConfig) -> CachedEncoder:
    """The run's shared :class:`~harness.embeddings.model.Encoder` (model loads lazily; on-disk cache per ``cache``).

    Raises:
        TypeError: ``embedding._target_`` does not name a subclass of
            :class:`harness.embeddings.base.CachedEncoder` (whose declared contract, e.g.
            ``run_tags`` and ``special_tokens``, the run calls without probing).
    """
    from harness.embeddings.base import CachedEncoder

    _contract_class(cfg.embedding, CachedEncoder, "embedding", "an embedding backend (harness.embeddings.base.CachedEncoder)")
    return _instantiate(cfg.embedding, cache_dir=cache_dir(cfg))


def build_chunker(cfg: DictConfig, encoder: CachedEncoder | None = None) -> Chunker:
    """Instantiate ``cfg.chunker``; strategies that embed get ``encoder=``, strategies with
    ``needs_cache_dir`` get ``cache_dir=`` (the run's cache folder or None).

    The constructor receives :func:`chunker_config`'s values: ``\\n``, ``\\r``, ``\\t`` and
    ``\\\\`` typed in a literal-string setting (``separators``, ``separator``, ``delim``,
    ``delimiters``, at any depth) arrive decoded; regex settings arrive as typed.

    Size settings written relative to the embedding window (``chunk_size: window*0.5``) are
    resolved against ``encoder`` first (:func:`resolve_window_sizes`).

    Raises:
        ValueError: invalid chunker parameters (raised by the constructor, naming them), an
            unknown escape in a literal-string setting, or a window size that cannot be resolved.
        TypeError: ``chunker._target_`` does not name a :class:`harness.chunkers.base.Chunker`.
    """
    from harness.chunkers.base import Chunker

    cls = _contract_class(cfg.chunker, Chunker, "chunker", "a harness Chunker")
    kwargs = {"encoder": encoder} if cls.needs_encoder else {}
    if cls.needs_builder:  # adaptive's routes, modality's text stream: built here, on first use
        kwargs["builder"] = build_sub_chunker
    if cls.needs_cache_dir:  # e.g. LLM reply caches; kept out of the config hash
        kwargs["cache_dir"] = cache_dir(cfg)
    node = cfg.chunker
    decoded = resolve_window_sizes(chunker_config(cfg), encoder)
    if decoded != to_container(node):  # an escape was decoded or a window size resolved: build from the decoded copy
        node = OmegaConf.create(decoded)
    chunker = _instantiate(node, **kwargs)
    if not isinstance(chunker, Chunker):
        raise TypeError(f"chunker._target_ {cfg.chunker._target_!r} does not build a harness Chunker")
    return chunker


def build_sub_chunker(where: str, node: Any, encoder=None):
    """Build a chunker nested in another chunker's config (an adaptive route, the modality
    text stream): the builder those strategies call on first use (``needs_builder``; they
    receive this function as ``builder=``).

    Args:
        where: dotted path of the nested config, named in errors (``chunker.routes.prose``,
            ``chunker.text_chunker``).
        node: the nested config as plain data: ``_target_`` (dotted class path of a
            :class:`~harness.chunkers.base.Chunker`) and its constructor arguments; nested
            mappings arrive as plain dicts (``_convert_: all``).
        encoder: passed as ``encoder=`` when the class has ``needs_encoder``; a class with
            ``needs_builder`` gets this function as ``builder=`` (a modality route of adaptive).

    Returns:
        the chunker (a :class:`~harness.chunkers.base.Chunker`).

    Raises:
        ValueError: ``{where}._target_ '<path>' cannot be imported: ...`` or ``... does not
            build a harness Chunker``; a constructor's own ValueError (wrapped by Hydra, as
            when the strategies built their inner chunkers themselves).
    """
    from hydra.utils import get_class, instantiate

    from harness.chunkers.base import Chunker

    target = node["_target_"]
    try:
        cls = get_class(target)
    except Exception as exc:  # hydra wraps ImportError / AttributeError
        raise ValueError(f"{where}._target_ {target!r} cannot be imported: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Chunker)):
        raise ValueError(f"{where}._target_ {target!r} does not build a harness Chunker")
    extra: dict[str, Any] = {"encoder": encoder} if cls.needs_encoder else {}
    if cls.needs_builder:
        extra["builder"] = build_sub_chunker
    built = instantiate({"_convert_": "all", **node}, **extra)  # nested args as plain values
    if not isinstance(built, Chunker):
        raise ValueError(f"{where}._target_ {target!r} does not build a harness Chunker")
    return built


def build_retriever(cfg: DictConfig, encoder: CachedEncoder | None = None) -> Retriever:
    """Instantiate ``cfg.retriever``; dense retrievers get ``encoder=``.

    Raises:
        TypeError: ``retriever._target_`` does not name a :class:`harness.retrievers.base.Retriever`.
    """
    from harness.retrievers.base import Retriever

    cls = _contract_class(cfg.retriever, Retriever, "retriever", "a harness Retriever")
    kwargs = {"encoder": encoder} if cls.needs_encoder else {}
    if cls.needs_builder:  # rerank's first stage: built here, by build_sub_retriever
        kwargs["builder"] = build_sub_retriever
    return _instantiate(cfg.retriever, **kwargs)


def build_sub_retriever(where: str, node: Mapping[str, Any], encoder=None) -> Retriever:
    """Build a retriever nested in another retriever's config (rerank's first stage): the
    builder such retrievers call (``needs_builder``; they receive this function as ``builder=``).

    Args:
        where: dotted path of the nested config, named in errors (``retriever.first_stage``).
        node: the nested config as plain data: ``_target_`` (dotted class path of a
            :class:`~harness.retrievers.base.Retriever`) and its constructor arguments.
        encoder: passed as ``encoder=`` when the class has ``needs_encoder``; a class with
            ``needs_builder`` gets this function as ``builder=``.

    Returns:
        the retriever (a :class:`~harness.retrievers.base.Retriever`).

    Raises:
        ValueError: ``{where}._target_ '<path>' cannot be imported: ...``, ``... is not a
            harness Retriever``, ``{where}.<key> is not a setting of <path> (its settings:
            ...)`` (with a did-you-mean; ``encoder`` and ``builder`` are passed here, never
            set), or the class's own ValueError prefixed ``{where}: ``.
    """
    import difflib
    import importlib
    import inspect

    from harness.retrievers.base import Retriever

    target = str(node["_target_"])
    params = {str(key): value for key, value in node.items() if key != "_target_"}
    module, _, cls_name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), cls_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"{where}._target_ {target!r} cannot be imported: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Retriever)):
        raise ValueError(f"{where}._target_ {target!r} is not a harness Retriever")
    accepted = [p for p in inspect.signature(cls).parameters if p not in ("self", "encoder", "builder")]
    unknown = [key for key in params if key not in accepted or key.startswith("_")]
    if unknown:
        close = difflib.get_close_matches(unknown[0], accepted, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"{where}.{unknown[0]} is not a setting of {target} (its settings: {', '.join(accepted) or 'none'}){hint}")
    if cls.needs_encoder:
        params["encoder"] = encoder
    if cls.needs_builder:
        params["builder"] = build_sub_retriever
    try:
        return cls(**params)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def build_dataset(cfg: DictConfig):
    """Load and verify the dataset described by ``cfg.dataset``."""
    return _instantiate(cfg.dataset)


def _target_class(node: DictConfig):
    from hydra.utils import get_class

    target = node.get("_target_")
    if not target:
        raise ValueError("config group is missing its _target_")
    return get_class(target)


def _contract_class(node: DictConfig, base: type, group: str, what: str) -> type:
    """The class ``node._target_`` names, verified once to subclass ``base``: the boundary
    where a configured component enters a run, so that every later stage calls the contract
    ``base`` declares (``needs_encoder``, ``stats()``, ...) instead of probing for it.

    Raises:
        ValueError: the node has no ``_target_``.
        TypeError: ``<group>._target_ '<path>' does not build <what>``.
    """
    cls = _target_class(node)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise TypeError(f"{group}._target_ {node.get('_target_')!r} does not build {what}")
    return cls


def run_name(cfg: DictConfig) -> str:
    """Readable run name from the strategy name and its main sizes, ending in the retriever.

    Examples: ``recursive-400-0-faiss`` (size, overlap), ``fixed-chars-200-20-bm25``,
    ``fixed-400-0-cl100k_base-faiss``, ``semantic-threshold-0.8-faiss``,
    ``semantic-percentile-5chunks-faiss`` (``number_of_chunks=5``),
    ``fixed-400-0-cl100k_base-chroma-faiss`` (``compatible=chroma``), ``semantic-percentile-target300-cl100k_base-chroma-faiss``,
    ``hierarchical-headings-1024-128-faiss`` (parent, child sizes), ``sentence-254-faiss``,
    ``recursive-254-0-faiss-hnsw`` (``retriever.index=hnsw``).
    """
    ch = cfg.chunker
    try:
        name = str(_target_class(ch).name or "")
    except Exception:  # noqa: BLE001 - naming must never fail a run
        name = ""
    name = name or str(ch.get("_target_", "chunker")).rsplit(".", 1)[-1].replace("Chunker", "").lower()
    parts = [name]
    unit = ch.get("unit")
    if unit and unit != "tokens":
        parts.append(str(unit))
    if "chunk_size" in ch:
        parts += [str(ch.chunk_size), str(ch.get("chunk_overlap", 0))]
    elif "child_size" in ch:
        parts += [str(ch.get("mode", "")), str(ch.get("parent_size", "")), str(ch.child_size)]
    elif "breakpoint" in ch:
        parts.append(str(ch.breakpoint))
        if ch.get("target_chunk_size") is not None:
            parts.append(f"target{ch.target_chunk_size}")
        elif ch.get("number_of_chunks") is not None:
            parts.append(f"{ch.number_of_chunks}chunks")
        elif ch.breakpoint == "threshold":
            parts.append(str(ch.threshold))
        elif ch.breakpoint == "percentile" and "percentile" in ch:
            parts.append(str(ch.percentile))
        elif ch.get("breakpoint_amount") is not None:
            parts.append(str(ch.breakpoint_amount))
    elif "max_chunk_size" in ch:
        parts.append(str(ch.max_chunk_size))
    if ch.get("tokenizer", "model") not in ("model", None):
        parts.append(str(ch.tokenizer))
    if ch.get("compatible"):
        parts.append(str(ch.compatible))  # fixed-400-0-cl100k_base-chroma-faiss
    retr = str(cfg.retriever.get("_target_", "retriever")).rsplit(".", 1)[-1].replace("Retriever", "").lower()
    parts.append(retr)
    if cfg.retriever.get("index") in ("hnsw", "ivf"):  # an approximate FAISS index: ...-faiss-hnsw
        parts.append(str(cfg.retriever.index))
    label = embedding_label(cfg)
    if label:  # another embedding than the packaged MiniLM: fixed-254-0-faiss-static, ...-faiss-text-embedding-3-small
        parts.append(label)
    return "-".join(p for p in parts if p)


def embedding_label(cfg: DictConfig) -> str:
    """Short name of the run's embedding for run names: empty for the default (the packaged
    all-MiniLM-L6-v2 through sentence-transformers), else the model's last path part
    (sentence-transformers, openai) or ``static`` (model2vec)."""
    emb = cfg.get("embedding") if hasattr(cfg, "get") else None
    if emb is None:
        return ""
    target = str(emb.get("_target_", ""))
    model = str(emb.get("model", "") or "")
    if target.endswith("embeddings.model.Encoder"):
        return "" if model in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "") else model.rstrip("/").rsplit("/", 1)[-1]
    if target.endswith("embeddings.static.StaticEncoder"):
        return "static"
    return model.rstrip("/").rsplit("/", 1)[-1] or target.rsplit(".", 1)[-1].replace("Encoder", "").lower()
