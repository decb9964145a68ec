"""``harness run [overrides]`` (also ``python -m harness.run``): one experiment, or a sweep with ``-m``.

Examples::

    harness run                                   # defaults: kestrel_kb, recursive, faiss
    harness run chunker=semantic chunker.threshold=0.8
    harness run -m chunker=fixed,recursive chunker.chunk_size=200,400 retriever=faiss,bm25
    harness run -m hydra/launcher=ray_local chunker.chunk_size=200,400

The work is :func:`harness.experiment.run.execute`; this module only hands Hydra's config
to it, prints a sweep job's place, and maps a busy configuration to exit code 75
(:data:`harness.tracking.tracker.EXIT_BUSY`) and Ctrl-C to 130.
"""

from __future__ import annotations

import sys
from typing import Sequence

from harness.cli import prepare_process

prepare_process()

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from harness.experiment.build import PROJECT_ROOT  # noqa: E402
from harness.experiment.config import compose_once  # noqa: E402
from harness.experiment.run import execute, sweep_position  # noqa: E402
from harness.tracking.tracker import EXIT_BUSY  # noqa: E402


@hydra.main(version_base="1.3", config_path=str(PROJECT_ROOT / "conf"), config_name="config")
def main(cfg: DictConfig) -> float:
    """Hydra entry point; returns the objective metric value (the logged one for a skipped job).

    A job whose configuration is RUNNING in another live process (``RunBusy``) exits with
    :data:`EXIT_BUSY`; inside a multirun it returns NaN instead, so the sweep goes on (its
    parent run records the job and the sweep exits with that code at the end).
    """
    from harness.tracking.worker import RunBusy

    position = sweep_position()
    if position is not None:
        from harness.experiment import build

        num, total = position
        print(f"job {num}/{total if total else '?'}: {cfg.tracking.run_name or build.run_name(cfg)}")
        sys.stdout.flush()
    try:
        return float(execute(cfg)["objective"])
    except RunBusy:
        if position is not None:
            return float("nan")
        raise SystemExit(EXIT_BUSY) from None


def run_command(argv: Sequence[str]) -> int:
    """``harness run ARGV``: Hydra parses ``argv`` as it would ``python -m harness.run ARGV``."""
    sys.argv = ["harness run", *argv]
    try:
        with compose_once(argv):  # Hydra composes the config once, not twice
            main()
    except KeyboardInterrupt:  # the run, and a sweep's parent, are closed KILLED on the way out
        print("interrupted (Ctrl-C): the current run is closed as KILLED", file=sys.stderr)
        return 130
    return 0
