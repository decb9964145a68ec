"""embedding.precision: auto's choice is detected from the CPU's flags, bf16 vectors stay
close to fp32's and are keyed apart from them, fp32 keys and hashes as before the setting
existed, and a run says which precision it used."""

import warnings
from pathlib import Path

import mlflow
import numpy as np
import pytest
from conftest import compose, fresh_store
from sentence_transformers import SentenceTransformer

from harness import runtime
from harness.embeddings.model import Encoder, default_model_path
from harness.experiment.build import config_hash
from harness.studies.gate import Baseline, precision_line

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SQUAD = PROJECT_ROOT / "tests" / "data" / "squad_saltmere" / "saltmere_squad.json"
#: sha256 key of the default MiniLM encoder, recorded before embedding.precision existed
FP32_KEY = "eb5d3a37793935b7ac542258cea94c753c9fec00562712d7a7b1450f5070e838"
TEXTS = [
    "Workers send heartbeats to the coordinator every fifteen seconds.",
    "The tide tables for Saltmere harbour are published each spring. " * 12,
    "short",
    "Ein Satz auf Deutsch, mit Umlauten: Größe, Übung, Ärger.",
]


@pytest.fixture()
def machine(monkeypatch):
    """Pretend to be a machine with the given CPU flags (auto's choice is not pinned)."""
    monkeypatch.delenv("HARNESS_AUTO_PRECISION", raising=False)

    def pretend(flags: set[str]) -> None:
        monkeypatch.setattr(runtime, "cpu_flags", lambda: frozenset(flags))

    return pretend


AMX = {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8"}


def test_auto_is_bf16_only_with_amx(machine):
    machine(AMX)
    assert runtime.resolve_precision("auto") == "bf16"
    assert runtime.resolve_precision("auto", "cuda") == "fp32"  # GPUs: only when asked for
    machine({"avx512f", "avx512_bf16"})  # bf16 instructions without AMX: measured slower than fp32
    assert runtime.resolve_precision("auto") == "fp32"
    machine(set())  # no /proc/cpuinfo (macOS, Windows): never guessed
    assert runtime.resolve_precision("auto") == "fp32"
    for explicit in ("fp32", "bf16"):
        assert runtime.resolve_precision(explicit) == explicit


def test_auto_can_be_fixed_by_the_environment(machine, monkeypatch):
    machine(AMX)
    monkeypatch.setenv("HARNESS_AUTO_PRECISION", "fp32")
    assert runtime.resolve_precision("auto") == "fp32"
    assert runtime.resolve_precision("bf16") == "bf16"  # an explicit value wins
    monkeypatch.setenv("HARNESS_AUTO_PRECISION", "fp16")
    with pytest.raises(ValueError, match="HARNESS_AUTO_PRECISION must be 'fp32' or 'bf16'"):
        runtime.resolve_precision("auto")


def test_cpu_flags_come_from_the_kernel():
    flags = runtime.cpu_flags()
    if Path("/proc/cpuinfo").is_file():
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        first = next(line for line in text.splitlines() if line.startswith("flags"))
        assert flags == frozenset(first.split(":", 1)[1].split())
    else:
        assert flags == frozenset()


def test_a_misspelt_precision_is_refused_naming_the_setting():
    with pytest.raises(ValueError, match=r"embedding.precision must be one of .*got 'bf61' \(did you mean 'bf16'\?\)"):
        Encoder(precision="bf61")
    with pytest.raises(ValueError, match="embedding.precision"):
        Encoder(precision="fp16")


@pytest.mark.slow
def test_bf16_vectors_are_close_to_fp32_and_keyed_apart(tmp_path, machine):
    machine(set())
    plain = SentenceTransformer(str(default_model_path()), device="cpu")
    reference = plain.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    fp32 = Encoder(show_progress=False, precision="fp32", cache_dir=tmp_path)
    with pytest.warns(UserWarning, match="bf16 on a CPU without AMX"):
        bf16 = Encoder(show_progress=False, precision="bf16", cache_dir=tmp_path).encode(TEXTS)
    got32 = fp32.encode(TEXTS)
    assert np.allclose(got32, reference, atol=1e-6)  # fp32 is the plain model's output
    assert bf16.dtype == np.float32 and bf16.shape == reference.shape
    cosine = (bf16 * reference).sum(axis=1) / np.linalg.norm(bf16, axis=1) / np.linalg.norm(reference, axis=1)
    assert cosine.min() > 0.999 and not np.array_equal(bf16, got32)
    # the same cache folder holds both; neither is read for the other
    assert fp32.embedding_key == FP32_KEY == Encoder(precision="auto").embedding_key
    again = Encoder(show_progress=False, precision="bf16", cache_dir=tmp_path)
    assert again.embedding_key != FP32_KEY
    assert np.array_equal(again.encode(TEXTS), bf16) and again.n_encoded == 0 and again.n_cache_hits == len(TEXTS)


def test_auto_hashes_as_what_it_resolves_to(machine):
    machine(set())
    default = config_hash(compose(["paths.root=/project"]))
    assert default == config_hash(compose(["embedding.precision=fp32", "paths.root=/project"]))
    bf16 = config_hash(compose(["embedding.precision=bf16", "paths.root=/project"]))
    assert bf16 != default
    machine(AMX)  # the same config on a machine with AMX runs bf16: another result, another hash
    assert config_hash(compose(["paths.root=/project"])) == bf16
    assert Encoder().precision_used == "bf16" and Encoder().embedding_key != FP32_KEY
    assert config_hash(compose(["embedding.precision=fp32", "paths.root=/project"])) == default


@pytest.mark.slow
def test_a_run_tags_the_precision_it_used(tmp_path, machine):
    from harness.experiment.run import execute

    machine(set())
    uri = fresh_store(tmp_path / "m.db")
    base = ["dataset=squad", f"dataset.path={SQUAD}", "dataset.name=saltmere_squad", "chunker=fixed", "chunker.chunk_size=24"]
    base += ["retriever=faiss", f"tracking.uri={uri}", "embedding.show_progress=false", f"cache.dir={tmp_path / 'cache'}"]
    results = {}
    for precision in ("auto", "bf16"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # bf16 without AMX warns that it is slow
            results[precision] = execute(compose([*base, f"embedding.precision={precision}"]))
    client = mlflow.MlflowClient(uri)
    tags = {p: client.get_run(r["run_id"]).data.tags for p, r in results.items()}
    assert tags["auto"]["embedding.precision"] == "fp32" and tags["bf16"]["embedding.precision"] == "bf16"
    assert client.get_run(results["auto"]["run_id"]).data.params["embedding.precision"] == "auto"
    assert results["auto"]["run_id"] != results["bf16"]["run_id"]  # a different hash: not resumed as the same run
    for k in (1, 5, 10):  # tiny corpus: bf16 ranks within noise of fp32
        assert abs(results["auto"]["metrics"][f"recall@{k}"] - results["bf16"]["metrics"][f"recall@{k}"]) <= 0.25


def test_the_gate_report_states_both_precisions():
    import pandas as pd

    old = Baseline(Path("b.json"), {"config": {"embedding": {"_target_": "harness.embeddings.model.Encoder"}}}, pd.DataFrame())  # before the setting
    assert precision_line(old, "fp32") == "embedding precision: baseline fp32, candidate fp32"
    assert "differs" in precision_line(old, "bf16") and "pin embedding.precision" in precision_line(old, "bf16")
    old = Baseline(Path("b.json"), {"embedding_precision": "bf16"}, pd.DataFrame())
    assert precision_line(old, "bf16") == "embedding precision: baseline bf16, candidate bf16"
