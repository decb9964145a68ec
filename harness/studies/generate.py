"""Labelled queries for a corpus from a composed ``conf/generate.yaml`` config.

The config side of ``harness generate``: builds the LLM client (``llm.*``) and the source
dataset (``dataset=...``) from the config, runs :func:`harness.datasets.generate.generate`
(the library: sampling, prompting, verification of every excerpt as an exact span) and
writes the dataset with :func:`harness.datasets.generate.write_dataset`. The command
:mod:`harness.cli.generate` only parses, prints and picks the exit code.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from harness.datasets.generate import _SYSTEM, GENERATE_PARAMS, PROMPT_VERSION, Generation, generate, write_dataset


def run(cfg: DictConfig) -> tuple[Generation, Path]:
    """Build the client and dataset from ``cfg`` (a composed ``conf/generate.yaml``), generate, write.

    The sampling settings (``n`` >= 1, ``passage_chars`` >= 1, ``min_passage_chars`` >= 0,
    ``min_excerpt_chars`` >= 1, integers) are checked before any dataset is read. The
    written ``generation.json`` records the generator (model, endpoint, temperature,
    max_tokens, seed), the prompt and its version, the sampling settings, the source dataset
    (name, fingerprint, source) and the client's counters.

    Returns:
        ``(generation, output folder)``.

    Raises:
        ValueError: a setting outside its range (named), or the dataset cannot be loaded.
        FileExistsError: ``output`` exists and ``overwrite`` is false (or it is not a folder
            this command wrote).
        harness.llm.LLMError: the LLM server does not answer or refuses requests.
    """
    from harness.experiment import build
    from harness.llm import LLMClient, check_settings

    settings = check_settings(dict(build.to_container(cfg.llm)), "llm")
    client = LLMClient(**settings, cache_dir=build.cache_dir(cfg), config_path="llm")
    # validate the sampling settings before any dataset is read
    declared = {p.name: p for p in GENERATE_PARAMS}
    for name in ("n", "passage_chars", "min_passage_chars", "min_excerpt_chars"):
        declared[name].check(cfg[name])
    dataset = build.build_dataset(cfg)
    with client:
        generation = generate(
            dataset.documents,
            client,
            n=int(cfg.n),
            seed=cfg.seed,
            passage_chars=cfg.passage_chars,
            min_passage_chars=cfg.min_passage_chars,
            min_excerpt_chars=cfg.min_excerpt_chars,
            dedup_threshold=cfg.dedup_threshold,
        )
    info = {
        "generator": {
            "model": client.model,
            "base_url": client.base_url,
            "temperature": client.temperature,
            "max_tokens": client.max_tokens,
            "seed": client.seed,
        },
        "prompt_version": PROMPT_VERSION,
        "prompt": _SYSTEM,
        "sampling": {
            "n": int(cfg.n),
            "seed": cfg.seed,
            "passage_chars": cfg.passage_chars,
            "min_passage_chars": cfg.min_passage_chars,
            "min_excerpt_chars": cfg.min_excerpt_chars,
            "dedup_threshold": cfg.dedup_threshold,
            "dedup": "Jaccard similarity of casefolded \\w+ token sets",
        },
        "source": {"dataset": dataset.name, "fingerprint": dataset.fingerprint(), "source": dataset.source},
        "llm_counters": client.stats(),
    }
    out = write_dataset(Path(str(cfg.output)), dataset.documents, generation, info, overwrite=bool(cfg.overwrite))
    return generation, out
