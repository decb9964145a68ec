"""One-line configuration errors (:mod:`harness.experiment.errors`): a top-level key that is
a setting of a config group names the group's setting, not the group."""

from __future__ import annotations

import pytest
from conftest import PROJECT_ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from harness.experiment.config import compose
from harness.experiment.errors import hydra_error_line


def _line(overrides: list[str]) -> str:
    with pytest.raises(Exception) as info:
        compose(overrides)
    line = hydra_error_line(info.value)
    assert line is not None and "\n" not in line
    return line


@pytest.mark.parametrize(
    "overrides, meant",
    [
        (["chunk_size=200"], "chunker.chunk_size"),
        (["chunker=semantic", "threshold=0.7"], "chunker.threshold"),
        (["bootstrap=0"], "stats.bootstrap"),
        (["ks=[1,5]"], "metrics.ks"),
        (["chunk_sise=200"], "chunker.chunk_size"),  # misspelt as well: the closest group setting
    ],
)
def test_a_top_level_key_that_is_a_group_setting_suggests_the_setting(overrides, meant):
    line = _line(overrides)
    assert line.startswith(f"{overrides[-1].split('=')[0]}: unknown setting; did you mean {meant}?"), line


def test_a_misspelt_group_still_suggests_the_group():
    assert "did you mean chunker?" in _line(["chunkr=200"])


# the settings of the default config's groups, read from the composed config (not from the code under test)
_CFG = OmegaConf.to_container(compose([]), resolve=False)
_SETTINGS = sorted(
    {
        (group, key)
        for group, node in _CFG.items()
        if isinstance(node, dict) and group != "hydra"
        for key in node
        if key != "_target_" and key not in _CFG and not (PROJECT_ROOT / "conf" / key).is_dir()
    }  # a group such as experiment: its own error
)


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(_SETTINGS))
def test_property_every_group_setting_typed_at_top_level_names_its_group(pair):
    group, key = pair
    owners = sorted(g for g, node in _CFG.items() if isinstance(node, dict) and g != "hydra" and key in node)
    line = _line([f"{key}=1"])
    assert line.startswith(f"{key}: unknown setting; did you mean "), line
    assert all(f"{g}.{key}" in line for g in owners) and f"{group}.{key}" in line
