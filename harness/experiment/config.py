"""The project's config composed in-process: ``conf/config.yaml`` plus Hydra overrides.

:func:`compose` is used by every caller that needs a config without a Hydra command line
(the gate, Optuna, benchmarks, tests). It changes no working folder and writes no output
folder. :func:`compose_once` saves ``harness run`` one of the two compositions Hydra's
command line makes.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Iterator, Sequence

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


#: Hydra command-line flags that point it at other config files than ``conf/``.
_CONFIG_FLAGS = ("-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir")
_MODE_KEY = re.compile(r"^\s*mode\s*:", re.M)


def may_set_hydra_mode(argv: Sequence[str], conf_dir: str | Path = PROJECT_ROOT / "conf") -> bool:
    """False only when nothing can set ``hydra.mode``: no argument mentions ``hydra.mode`` or
    points Hydra at other config files, and no YAML file under ``conf_dir`` both mentions
    ``hydra`` and has a ``mode:`` key (a conservative text test: it may say True needlessly,
    never False wrongly)."""
    if any(a.split("=", 1)[0] in _CONFIG_FLAGS or "hydra.mode" in a for a in argv):
        return True
    for path in Path(conf_dir).rglob("*.yaml"):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "hydra" in text and _MODE_KEY.search(text):
            return True
    return False


@contextlib.contextmanager
def compose_once(argv: Sequence[str]) -> Iterator[None]:
    """Run a Hydra command line (``@hydra.main``) inside this block with one composition of
    the config instead of two.

    Hydra 1.3 (``hydra._internal.utils._run_hydra``) first composes the whole config only to
    read ``hydra.mode`` (``Hydra.get_mode``), then composes it again for the run: 0.3-0.4 s
    per process on the benchmark machine. ``hydra.mode`` is None unless a config file or an
    override sets it, and then Hydra takes the mode from the command line (``-m``: MULTIRUN,
    else RUN). When :func:`may_set_hydra_mode` is False, ``get_mode`` answers None at once
    inside the block, which is the value its composition would have read; otherwise (or
    with another Hydra whose ``Hydra`` class has no ``get_mode``) nothing is changed.
    """
    try:
        from hydra._internal.hydra import Hydra
    except ImportError:  # pragma: no cover - another Hydra layout: compose twice as before
        Hydra = None  # noqa: N806
    original = getattr(Hydra, "get_mode", None)
    if original is None or may_set_hydra_mode(argv):
        yield
        return
    Hydra.get_mode = lambda self, config_name, overrides: None
    try:
        yield
    finally:
        Hydra.get_mode = original
