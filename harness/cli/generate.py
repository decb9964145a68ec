"""``harness generate`` (also ``python -m harness.generate``): labelled queries for a corpus from an LLM.

Hydra config ``conf/generate.yaml``. The library is :mod:`harness.datasets.generate`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

import hydra
from omegaconf import DictConfig

from harness.datasets.generate import _SYSTEM, GENERATE_PARAMS, PROMPT_VERSION, Generation, generate, report, write_dataset
from harness.experiment.build import PROJECT_ROOT


def run(cfg: DictConfig) -> tuple[Generation, Path]:
    """Compose-level entry: build the client and dataset from ``cfg``, generate, write.

    Returns:
        ``(generation, output folder)``.
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


@hydra.main(version_base="1.3", config_path=str(PROJECT_ROOT / "conf"), config_name="generate")
def main(cfg: DictConfig) -> int:
    """Hydra entry point: generate, write, print counts; exit 1 when nothing was accepted, 2 when it cannot run."""
    from harness.llm import LLMError

    try:
        generation, out = run(cfg)
    except (ValueError, TypeError, FileExistsError, LLMError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    print(report(generation, out))
    sys.stdout.flush()
    if not generation.counts["accepted"]:
        sys.exit(1)
    return 0


def run_command(argv: Sequence[str]) -> int:
    """``harness generate ARGV``: Hydra parses ``argv`` as it would ``python -m harness.generate ARGV``."""
    sys.argv = ["harness generate", *argv]
    code = main()
    return int(code or 0)
