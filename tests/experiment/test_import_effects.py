"""Importing the run core has no side effect on OmegaConf: the config resolvers
(``${project_root:}``, ``${corpus_name:...}``) are registered by the entry points that
compose a config (:func:`harness.experiment.config.compose`, ``harness run``), each in a
fresh interpreter so nothing this test process registered can hide a missing registration."""

from __future__ import annotations

import subprocess
import sys

from conftest import PROJECT_ROOT

RESOLVERS = ("project_root", "corpus_name")


def _python(code: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split()


def _registered() -> str:
    return f"from omegaconf import OmegaConf; print(*[OmegaConf.has_resolver(n) for n in {RESOLVERS!r}])"


def test_importing_the_run_core_registers_no_resolver_and_compose_registers_them():
    out = _python(
        "import harness.experiment.run, harness.experiment.build, harness.experiment.config\n"
        f"{_registered()}\n"
        "from harness.experiment.config import compose\n"
        "cfg = compose(['dataset=folder', 'dataset.path=/data/harbour_docs/'])\n"
        f"{_registered()}\n"
        "print(cfg.paths.root, cfg.dataset.name)\n"
    )
    assert out == ["False", "False", "True", "True", str(PROJECT_ROOT), "harbour_docs"]


def test_the_run_command_registers_them_before_hydra_composes():
    """``harness run`` (and a launcher's worker, which imports the command module to unpickle
    its task function) has them as soon as the command module is imported."""
    assert _python(f"import harness.cli.run\n{_registered()}\n") == ["True", "True"]
