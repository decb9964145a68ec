"""Moving code changes no result identity: the config hash (resume) and the config part of
the chunk-set key of every shipped config equal the values recorded before the package
was re-laid out (``tests/data/config_hashes.json``, written by the code of that time)."""

import json
from pathlib import Path

import pytest

from harness import cache
from harness.experiment.build import chunk_key_config, config_hash
from harness.experiment.config import compose
from harness.types import Document

PROJECT_ROOT = Path(__file__).resolve().parents[2]
RECORDED = json.loads((PROJECT_ROOT / "tests" / "data" / "config_hashes.json").read_text(encoding="utf-8"))
DOCS = [Document(doc_id="d1", text="Alpha beta.\n\nGamma delta."), Document(doc_id="d2", text="x y z")]


def _shipped_overrides() -> list[str]:
    names = ["(defaults)", "compression.enabled=true", "retriever=bm25 chunker=fixed chunker.chunk_size=100"]
    for group in ("chunker", "retriever", "dataset", "embedding", "metrics", "compression", "experiment", "cache", "tracking"):
        names += [f"{group}={f.stem}" for f in sorted((PROJECT_ROOT / "conf" / group).glob("*.yaml"))]
    return names


def test_every_shipped_config_is_recorded():
    assert sorted(_shipped_overrides()) == sorted(RECORDED), "a shipped config was added or removed: record its hash"


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_config_hash_and_chunk_key_unchanged(name, monkeypatch):
    monkeypatch.setattr(cache, "chunker_code_fingerprint", lambda: "fixed")  # the code part changes with every edit
    monkeypatch.setattr(cache, "_package_versions", lambda names: {})
    overrides = [] if name == "(defaults)" else name.split()
    cfg = compose([*overrides, "paths.root=/project"])  # paths resolve into dataset paths: one root for every checkout
    assert config_hash(cfg) == RECORDED[name]["config_hash"]
    assert cache.chunk_set_key(DOCS, chunk_key_config(cfg)) == RECORDED[name]["chunk_set_key"]


def test_code_fingerprint_covers_every_module_chunks_depend_on(tmp_path, monkeypatch):
    """Editing a text helper (moved out of chunkers/) or the core types changes the key."""
    pkg = Path(cache.__file__).resolve().parents[1]
    before = cache.chunker_code_fingerprint()
    for rel in ("text/units.py", "text/align.py", "text/escapes.py", "chunkers/recursive.py", "types.py"):
        original = (pkg / rel).read_bytes()
        copy = tmp_path / "harness"
        # fingerprint a copy of the package with one file edited (never edit the checkout)
        import shutil

        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(pkg, copy, ignore=shutil.ignore_patterns("__pycache__"))
        (copy / rel).write_bytes(original + b"\n# edited\n")
        monkeypatch.setattr(cache, "__file__", str(copy / "cache" / "__init__.py"))
        assert cache.chunker_code_fingerprint() != before, rel
        monkeypatch.setattr(cache, "__file__", str(pkg / "cache" / "__init__.py"))
    assert cache.chunker_code_fingerprint() == before
