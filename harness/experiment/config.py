"""The project's config composed in-process: ``conf/config.yaml`` plus Hydra overrides.

:func:`compose` is used by every caller that needs a config without a Hydra command line
(the gate, Optuna, benchmarks, tests). It changes no working folder and writes no output
folder. Only Hydra's public API is used (``hydra.initialize_config_dir``, ``hydra.compose``).
"""

from __future__ import annotations

from typing import Sequence

from harness.experiment.build import PROJECT_ROOT


def compose(overrides: Sequence[str]):
    """The project's config (``conf/config.yaml``) composed with Hydra overrides (no chdir,
    no output folder)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from harness.experiment.build import register_resolvers

    register_resolvers()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))
