"""Shared fixtures. Everything is real: the packaged MiniLM model, FAISS, rank-bm25, and an
MLflow SQLite store under a temporary folder. Nothing touches the network."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

PROJECT_ROOT = Path(__file__).resolve().parents[1]
KESTREL_PATH = PROJECT_ROOT / "datasets" / "kestrel_kb"
CHROMA_PATH = (PROJECT_ROOT / ".." / "shared" / "datasets" / "chroma_general").resolve()


@pytest.fixture(scope="session")
def kestrel():
    from harness.datasets.native import load_native

    return load_native(KESTREL_PATH)


@pytest.fixture(scope="session")
def chroma():
    from harness.datasets.chroma import load_chroma_general

    if not (CHROMA_PATH / "questions.csv").is_file():
        pytest.skip(f"shared chroma_general copy not found at {CHROMA_PATH}")
    return load_chroma_general(CHROMA_PATH)


@pytest.fixture(scope="session")
def encoder():
    from harness.embeddings.model import Encoder

    return Encoder(show_progress=False)


@pytest.fixture()
def tracking_uri(tmp_path):
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


_SESSION_CACHE = tempfile.mkdtemp(prefix="harness-test-cache-")


def compose(overrides: list[str]):
    """Compose the project's Hydra config with overrides (no run directory, no chdir).

    Unless an override sets ``cache.*``, the on-disk cache goes to one temporary folder per
    test session, so tests never read or write the project's ``.cache``.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from harness.experiment.build import register_resolvers

    register_resolvers()
    if not any(o.startswith(("cache.", "cache=", "+cache")) for o in overrides):
        overrides = [*overrides, f"cache.dir={_SESSION_CACHE}"]
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides)
