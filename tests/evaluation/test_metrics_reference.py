"""docs/metrics.md is the rendering of the metric registry, never a hand-edited copy."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from harness.evaluation import metrics as registry
from harness.evaluation.metrics.reference import REGENERATE, metrics_markdown

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "metrics.md"


def test_committed_reference_matches_the_registry():
    committed = DOC.read_text(encoding="utf-8")
    assert committed == metrics_markdown(), f"docs/metrics.md differs from the metric registry; regenerate it with: {REGENERATE}"


def test_every_registered_family_has_its_own_section():
    text = DOC.read_text(encoding="utf-8")
    headings = re.findall(r"^### `([^`]+)`$", text, flags=re.M)
    assert sorted(headings) == sorted(registry.FAMILIES), "one '### `pattern`' section per registry family"
    for pattern in registry.FAMILIES:
        assert f"| `{pattern}` |" in text, f"{pattern} missing from the summary table"


def test_names_and_mlflow_keys_follow_the_grammar():
    text = metrics_markdown()
    # hand-written expectations of the name grammar: '@' -> '_at_', budgets end in 'tok'
    assert "| `recall@k` | `recall@5` | `recall_at_5` | span | [0, 1] |" in text
    assert "| `recall@Btok` | `recall@512tok` | `recall_at_512tok` | span | [0, 1] |" in text
    assert "| `precision_omega` | `precision_omega` | `precision_omega` | span | [0, 1] |" in text
    assert "| `context_tokens@k` | `context_tokens@5` | `context_tokens_at_5` | context | [0, ∞) |" in text
    # a '|' inside a cell would split it: set sizes |E| are escaped in tables
    assert r"min(\|c\|, \|e\|)" in text


def test_every_field_of_every_family_is_rendered():
    text = metrics_markdown()
    for family in registry.FAMILIES.values():
        section = text.split(f"### `{family.pattern}`\n", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
        for label, value in (("Range", family.range), ("Formula", family.formula), ("Source", family.source)):
            assert f"- {label}: {value}\n" in section, f"{family.pattern}: {label} not rendered"


def test_module_prints_the_same_text():
    out = subprocess.run(
        [sys.executable, "-m", "harness.evaluation.metrics.reference"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=True,
    )
    assert out.stdout == metrics_markdown()


def test_a_family_of_unknown_level_is_refused(monkeypatch):
    odd = replace(registry.FAMILIES["recall@k"], name="odd", level="sentence")
    monkeypatch.setattr("harness.evaluation.metrics.reference.FAMILIES", {**registry.FAMILIES, odd.pattern: odd})
    with pytest.raises(ValueError, match=r"'odd@k': level 'sentence'"):
        metrics_markdown()


def test_only_the_chroma_families_carry_the_chroma_note():
    note = "reported only with metrics.convention=chroma"
    for pattern, family in registry.FAMILIES.items():
        assert (note in family.formula) == (family.convention == "chroma") == family.name.startswith("chroma_"), pattern
