"""The config hash and the results agree: a setting either changes the hash or is declared
hash-neutral (:data:`harness.experiment.build.HASH_NEUTRAL`), and a setting that changes
the hash changes the chunks or the results on some generated corpus (:mod:`corpora`).

Values are changed on the composed config (``conf/config.yaml`` plus each option of the
``chunker``, ``retriever``, ``embedding``, ``dataset``, ``metrics`` and ``compression``
groups); the hash is a function of the data, so no component is built for that direction.
The results direction runs the pipeline (BM25, no model) on generated corpora.
"""

from __future__ import annotations

import warnings

import pytest
from conftest import PROJECT_ROOT
from corpora import datasets
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis.errors import NoSuchExample
from omegaconf import OmegaConf

from harness.experiment.build import DROP, HASH_NEUTRAL, build_chunker, build_retriever, config_hash
from harness.experiment.config import compose
from harness.experiment.pipeline import evaluate
from harness.experiment.settings import metric_settings

BASE = ["paths.root=/project"]  # every checkout hashes alike


def _hash(overrides) -> str:
    return config_hash(compose([*BASE, *overrides]))


def _results(cfg, dataset):
    """Chunk ids, every per-query number and every mean of one BM25 evaluation of ``cfg``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ev = evaluate(dataset, build_chunker(cfg), build_retriever(cfg), metric_settings(cfg), progress=bool(cfg.embedding.show_progress))
    numeric = ev.per_query.select_dtypes("number").round(12)
    return (
        tuple(c.chunk_id for c in ev.chunks),
        tuple(ev.per_query["retrieved"]),
        numeric.to_csv(),
        tuple(sorted((k, round(v, 12)) for k, v in ev.metrics.items())),
    )


#: Settings of the BM25 path with another valid value: each changes the hash, so each must
#: change the chunks or the results on some generated corpus.
RESULT_SETTINGS = {
    "chunker.chunk_size": ("chunker=fixed chunker.unit=chars chunker.chunk_size=40", "chunker.chunk_size=25"),
    "chunker.chunk_overlap": ("chunker=fixed chunker.unit=chars chunker.chunk_size=40", "chunker.chunk_overlap=10"),
    "chunker.unit": ("chunker=fixed chunker.unit=chars chunker.chunk_size=40", "chunker.unit=words"),
    "chunker.strip_whitespace": ("chunker=recursive chunker.unit=chars chunker.chunk_size=30", "chunker.strip_whitespace=false"),
    "chunker.separators": ("chunker=recursive chunker.unit=chars chunker.chunk_size=30", "chunker.separators=[' ','']"),
    "retriever.k1": ("chunker=fixed chunker.unit=words chunker.chunk_size=6", "retriever.k1=0.1"),
    "retriever.b": ("chunker=fixed chunker.unit=words chunker.chunk_size=6", "retriever.b=0.0"),
    "metrics.relevance_fraction": ("chunker=fixed chunker.unit=words chunker.chunk_size=6", "metrics.relevance_fraction=0.9"),
    "metrics.relevance": ("chunker=fixed chunker.unit=words chunker.chunk_size=6", "metrics.relevance=any_overlap"),
    "metrics.ks": ("chunker=fixed chunker.unit=words chunker.chunk_size=6", "metrics.ks=[1,2]"),
    "metrics.convention": ("chunker=fixed chunker.unit=words chunker.chunk_size=6", "metrics.convention=chroma"),
    "metrics.level": ("chunker=fixed chunker.unit=words chunker.chunk_size=6", "metrics.level=document"),
}
#: Settings that change no result on the BM25 path: each must then be hash-neutral.
NEUTRAL_SETTINGS = {
    "embedding.show_progress": ("chunker=fixed chunker.unit=words chunker.chunk_size=6", "embedding.show_progress=false"),
}
#: A search over generated corpora that stops at the first corpus telling two configs apart
#: (no shrinking: the corpus itself does not matter, only that one exists).
SEARCH = settings(max_examples=30, deadline=None, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))


def _pair(base: str, change: str):
    common = [*BASE, "retriever=bm25", "metrics.budgets=[]", "metrics.objective=recall@1", *base.split()]
    return compose(common), compose([*common, change])


def _corpus_telling_apart(before, after, max_examples: int):
    try:
        return find(datasets(), lambda d: _results(before, d) != _results(after, d), settings=settings(SEARCH, max_examples=max_examples))
    except NoSuchExample:
        return None


@pytest.mark.parametrize("setting", sorted(RESULT_SETTINGS))
def test_a_setting_that_changes_the_hash_changes_results_on_some_corpus(setting):
    before, after = _pair(*RESULT_SETTINGS[setting])
    assert config_hash(before) != config_hash(after), setting
    assert _corpus_telling_apart(before, after, 30) is not None, f"{setting}: changes the config hash but no chunk and no result on 30 generated corpora"


@pytest.mark.parametrize("setting", sorted(NEUTRAL_SETTINGS))
def test_a_setting_that_changes_no_result_keeps_the_hash(setting):
    before, after = _pair(*NEUTRAL_SETTINGS[setting])
    assert _corpus_telling_apart(before, after, 10) is None, setting  # no corpus tells the two apart ...
    assert config_hash(before) == config_hash(after), f"{setting} changes no result but changes the config hash"  # ... so neither may the hash


def _group_options() -> list[str]:
    """The composed config with each option of each component group (one override each)."""
    out = [""]
    for group in ("chunker", "retriever", "embedding", "dataset", "metrics", "compression"):
        out += [f"{group}={p.stem}" for p in sorted((PROJECT_ROOT / "conf" / group).glob("*.yaml"))]
    return out


def _leaves(node, path=()):
    """``(path, value)`` of every leaf setting (lists are leaves; ``_target_`` and Hydra's
    ``_recursive_`` / ``_convert_`` are class paths and instantiation flags, not settings)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if not (isinstance(key, str) and key.startswith("_") and key.endswith("_")):
                yield from _leaves(value, (*path, key))
    else:
        yield path, node


#: Other values for strings where appending to the text would be a no-op for the hash's
#: own rules (``embedding.precision``: ``auto`` is hashed as what it resolves to here).
OTHER_STRINGS = {"precision": "bf16"}


def _other(key: str, value):
    """Another value of a setting's type: a flipped bool, a different number, a longer
    string or list, a value for null."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2 if value else 0.5
    if isinstance(value, str):
        return OTHER_STRINGS.get(key, value + "x") if value != OTHER_STRINGS.get(key) else "fp32"
    if isinstance(value, list):
        return [*value, value[-1] if value else "x"]
    if value is None:
        return 1
    raise TypeError(f"no other value for {key}={value!r}")


def _neutral(path: tuple[str, ...]) -> bool:
    return any(".".join(path[: i + 1]) in HASH_NEUTRAL for i in range(len(path)))


def _set(data: dict, path: tuple[str, ...], value) -> dict:
    if len(path) == 1:
        return {**data, path[0]: value}
    return {**data, path[0]: _set(data[path[0]], path[1:], value)}


@pytest.mark.slow
@pytest.mark.parametrize("option", _group_options())
def test_every_setting_changes_the_hash_or_is_declared_hash_neutral(option):
    cfg = compose([*BASE, *option.split()])
    data = OmegaConf.to_container(cfg, resolve=True)
    before = config_hash(OmegaConf.create(data))
    assert before == config_hash(cfg)
    silent = []
    for path, value in _leaves(data):
        changed = config_hash(OmegaConf.create(_set(data, path, _other(path[-1], value))))
        if _neutral(path):
            assert changed == before, f"{'.'.join(path)} is declared hash-neutral but changes the hash"
        elif changed == before:
            silent.append(f"{'.'.join(path)}={value!r}")
    assert not silent, f"{option or '(defaults)'}: settings that change nothing in the config hash and are not in HASH_NEUTRAL: {silent}"


@pytest.mark.slow
def test_hash_neutral_declares_existing_settings_with_their_shipped_values():
    """Every HASH_NEUTRAL path names a group or a setting of a shipped config, and a setting's
    declared value is the one every shipped config holds (so no shipped hash moved)."""
    seen: dict[str, set] = {}
    for option in _group_options():
        data = OmegaConf.to_container(compose([*BASE, *option.split()]), resolve=True)
        for path, value in _leaves(data):
            for i in range(len(path)):
                seen.setdefault(".".join(path[: i + 1]), set()).add(repr(value) if i == len(path) - 1 else "group")
    for path, value in HASH_NEUTRAL.items():
        if path == "hydra":  # Hydra adds its own group to a run's config (absent from a composed one)
            continue
        assert path in seen, f"HASH_NEUTRAL names {path!r}, which no shipped config has"
        if value != DROP:
            assert seen[path] == {repr(value)}, f"{path}: shipped values {seen[path]} differ from the declared {value!r}"
