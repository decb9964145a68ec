"""``harness tune``: an Optuna search over chunk settings.

The library is :mod:`harness.studies.tune`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from harness.cli import prepare_process
from harness.studies.tune import DEFAULT_SPACE, DEFAULT_STORAGE, load_space, run_study, summary


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="harness tune",
        description="Optuna search over chunking configurations; each trial is one MLflow run.",
        epilog="--trials is the total number of COMPLETE trials in the study: rerunning resumes, it does not add N more.",
    )
    parser.add_argument("--space", default=str(DEFAULT_SPACE), help="search-space YAML (default: %(default)s)")
    parser.add_argument("--trials", type=int, default=20, help="COMPLETE trials the study should hold in total (default: %(default)s)")
    parser.add_argument("--storage", default=DEFAULT_STORAGE, help="Optuna storage URL, or 'memory' (default: %(default)s)")
    parser.add_argument("--study", default=None, help="study name (default: the space file's 'study')")
    parser.add_argument("--seed", type=int, default=None, help="TPE sampler seed")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every trial, e.g. dataset=chroma_general")
    args = parser.parse_args(argv)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    prepare_process()
    try:
        space = load_space(args.space)
        study = run_study(space, args.trials, args.storage, args.study, args.overrides, args.seed)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n" + summary(study, space))
    return 0


def run_command(argv: Sequence[str]) -> int:
    """``harness tune ARGV``: the exit code of :func:`main`."""
    return main(list(argv))
