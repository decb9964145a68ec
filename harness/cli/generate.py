"""``harness generate``: labelled queries for a corpus from an LLM.

Hydra config ``conf/generate.yaml``. The config side is :mod:`harness.studies.generate`,
the library :mod:`harness.datasets.generate`.
"""

from __future__ import annotations

import sys
from typing import Sequence

import hydra
from omegaconf import DictConfig

from harness.datasets.generate import report
from harness.experiment.build import PROJECT_ROOT


@hydra.main(version_base="1.3", config_path=str(PROJECT_ROOT / "conf"), config_name="generate")
def main(cfg: DictConfig) -> int:
    """Hydra entry point: generate, write, print counts; exit 1 when nothing was accepted, 2 when it cannot run."""
    from harness.llm import LLMError
    from harness.studies.generate import run

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
    """``harness generate ARGV``: Hydra parses ``argv`` (overrides of ``conf/generate.yaml``;
    ``--help`` is Hydra's). The config resolvers are registered first."""
    from harness.experiment.build import register_resolvers

    register_resolvers()
    sys.argv = ["harness generate", *argv]
    code = main()
    return int(code or 0)
