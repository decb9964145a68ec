"""``harness run`` composes its config once: Hydra's mode lookup (a second, full composition)
is answered without composing only when nothing can set ``hydra.mode``."""

from __future__ import annotations

import pytest
from conftest import PROJECT_ROOT
from hydra._internal.hydra import Hydra

from harness.experiment.config import compose_once, may_set_hydra_mode


def test_the_shipped_configs_set_no_hydra_mode():
    assert may_set_hydra_mode([], PROJECT_ROOT / "conf") is False
    assert may_set_hydra_mode(["chunker=fixed", "chunker.mode=x"], PROJECT_ROOT / "conf") is False


@pytest.mark.parametrize("argv", [["hydra.mode=MULTIRUN"], ["+hydra.mode=RUN"], ["-cd", "/elsewhere"], ["--config-dir=/elsewhere"], ["-cn", "other"]])
def test_an_argument_that_may_set_the_mode_keeps_hydras_lookup(argv):
    assert may_set_hydra_mode(argv, PROJECT_ROOT / "conf") is True
    original = Hydra.get_mode
    with compose_once(argv):
        assert Hydra.get_mode is original


def test_a_config_file_that_sets_the_mode_keeps_hydras_lookup(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "chunker.yaml").write_text("mode: window\n", encoding="utf-8")  # a chunker's own mode is no hydra.mode
    assert may_set_hydra_mode([], tmp_path) is False
    (tmp_path / "experiment" / "sweep.yaml").write_text("# @package _global_\nhydra:\n  mode: MULTIRUN\n", encoding="utf-8")
    assert may_set_hydra_mode([], tmp_path) is True


def test_inside_the_block_the_lookup_answers_none_and_is_restored_after():
    original = Hydra.get_mode
    with compose_once(["chunker=fixed"]):
        assert Hydra.get_mode is not original
        assert Hydra.get_mode(None, config_name="config", overrides=[]) is None
    assert Hydra.get_mode is original
    with pytest.raises(RuntimeError), compose_once([]):
        raise RuntimeError("a failing run")
    assert Hydra.get_mode is original


def test_hydras_own_lookup_finds_no_mode_in_the_shipped_config():
    """What the shortcut answers (None) is what Hydra's composition reads from the shipped config."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from harness.experiment.build import register_resolvers

    register_resolvers()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        hydra = GlobalHydra.instance().hydra
        assert hydra.get_mode(config_name="config", overrides=[]) is None
        assert hydra.get_mode(config_name="config", overrides=["hydra.mode=MULTIRUN"]) is not None
