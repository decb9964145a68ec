"""A cut-off or budget listed twice (red-team class: list settings).

``metrics.ks=[5,1,5]`` ran and logged the param ``[5, 1, 5]`` while scoring ``k`` = 1 and 5
once each: the setting as recorded was not the setting that ran, and two runs that score
the same thing got different config hashes (so ``resume`` could not find the other). A
value listed twice is now refused in one line naming the setting and the value, before any
work; the order of a list stays free (it is sorted where it is used).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import PROJECT_ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.experiment.settings import default_metric_settings


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"ks": [5, 1, 5]}, r"metrics\.ks lists 5 twice: \[5, 1, 5\]"),
        ({"budgets": [512, 256, 512]}, r"metrics\.budgets lists 512 twice: \[512, 256, 512\]"),
    ],
)
def test_a_value_listed_twice_is_refused_naming_the_setting(changes, message):
    with pytest.raises(ValueError, match=message):
        default_metric_settings(**changes)


def test_the_run_refuses_it_in_one_line_before_any_work(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.run",
            "metrics.ks=[5,1,5]",
            "retriever=bm25",
            f"tracking.uri=sqlite:///{tmp_path / 'm.db'}",
            f"hydra.run.dir={tmp_path / 'out'}",
            f"cache.dir={tmp_path / 'cache'}",
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines[-1] == "harness run: metrics.ks lists 5 twice: [5, 1, 5]; list each cut-off once (the order is free)", out.stderr
    assert not (tmp_path / "cache").exists()  # refused before chunking


@settings(max_examples=40, deadline=None)
@given(ks=st.lists(st.integers(1, 12), min_size=1, max_size=6))
def test_a_list_of_cut_offs_is_accepted_exactly_when_its_values_are_distinct(ks):
    distinct = len(set(ks)) == len(ks)
    try:
        got = default_metric_settings(ks=ks, budgets=[])
    except ValueError as exc:
        assert not distinct
        assert "metrics.ks lists" in str(exc)
        return
    assert distinct
    assert got.ks == tuple(ks)
