"""embedding.precision=int8: PyTorch's dynamic quantisation of the packaged MiniLM's linear
layers, vectors near fp32's and keyed apart, refused where it cannot run, never chosen by
auto, and passed to Ray workers as resolved."""

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from harness import runtime
from harness.cache import embedding_key
from harness.embeddings.distributed import EmbeddingWorker
from harness.embeddings.model import Encoder

#: sha256 key of the default MiniLM encoder, recorded before embedding.precision existed
FP32_KEY = "eb5d3a37793935b7ac542258cea94c753c9fec00562712d7a7b1450f5070e838"
TEXTS = [
    "Workers send heartbeats to the coordinator every fifteen seconds.",
    "The tide tables for Saltmere harbour are published each spring. " * 12,
    "Ein Satz auf Deutsch, mit Umlauten: Größe, Übung, Ärger.",
    "Retries back off exponentially, starting at two hundred milliseconds.",
]
#: Flags that could plausibly matter to a precision choice, and some that do not.
FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8", "neon", "sse4_2")
ENGINES = ("x86", "fbgemm", "onednn", "qnnpack", "none")
DEVICES = ("cpu", "cuda", "cuda:1", "mps")


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture()
def no_amx(monkeypatch):
    monkeypatch.delenv("HARNESS_AUTO_PRECISION", raising=False)
    monkeypatch.setattr(runtime, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))


def test_int8_quantises_every_linear_layer_and_stays_near_fp32(tmp_path, no_amx):
    fp32 = Encoder(show_progress=False, precision="fp32", cache_dir=tmp_path).encode(TEXTS)
    enc = Encoder(show_progress=False, precision="int8", cache_dir=tmp_path)
    int8 = enc.encode(TEXTS)
    layers = list(enc.model.modules())
    assert not any(type(m) is torch.nn.Linear for m in layers)  # every float linear layer was replaced
    assert sum(isinstance(m, torch.ao.nn.quantized.dynamic.Linear) for m in layers) == 6 * 6 + 1  # 6 BERT layers x (q, k, v, out, up, down) + the pooler
    assert torch.backends.quantized.engine == enc.quantized_engine in runtime.quantized_engines()
    assert int8.dtype == np.float32 and int8.shape == fp32.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(int8, axis=1), 1.0, atol=1e-5)  # still normalised
    cosine = _cosine(int8, fp32)
    assert cosine.min() > 0.9 and not np.array_equal(int8, fp32)  # near, not equal: it is quantised
    assert enc.run_tags() == {"embedding.precision": "int8", "embedding.quantized_engine": enc.quantized_engine}


@pytest.mark.slow
def test_int8_is_keyed_apart_from_fp32_and_bf16_and_fp32_keys_as_before(tmp_path, no_amx):
    int8 = Encoder(show_progress=False, precision="int8", cache_dir=tmp_path)
    first = int8.encode(TEXTS)
    keys = {p: Encoder(precision=p).embedding_key for p in ("fp32", "auto", "bf16")}
    assert keys["fp32"] == keys["auto"] == FP32_KEY
    assert len({int8.embedding_key, keys["fp32"], keys["bf16"]}) == 3
    # the engine is part of an int8 key: another engine's kernels round differently
    args = ("all-MiniLM-L6-v2", int8.fingerprint, 256, True)
    assert embedding_key(*args, precision="int8", engine="x86") != embedding_key(*args, precision="int8", engine="qnnpack")
    assert embedding_key(*args) == FP32_KEY == embedding_key(*args, precision="fp32", engine=None)
    # read back from the cache, warning that int8 vectors depend on their batch
    again = Encoder(show_progress=False, precision="int8", cache_dir=tmp_path)
    with pytest.warns(UserWarning, match="int8: 4 vectors were read from the embedding cache"):
        cached = again.encode(TEXTS)
    assert np.array_equal(cached, first) and again.n_encoded == 0
    fp32 = Encoder(show_progress=False, precision="fp32", cache_dir=tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # fp32 never warns about cache hits
        fp32.encode(TEXTS[:1])
    assert fp32.n_encoded == 1 and fp32.n_cache_hits == 0  # int8 vectors are never read for fp32


@pytest.mark.slow
def test_a_ray_worker_builds_the_int8_encoder_the_driver_resolved(no_amx):
    """The actor class run in this process (Ray only transports it): same key, same vectors."""
    driver = Encoder(show_progress=False, precision="int8", batch_size=2)
    recipe = driver.worker_recipe()
    assert recipe["precision"] == "int8"
    worker = EmbeddingWorker(recipe, torch.get_num_threads())
    assert worker.describe()["embedding_key"] == driver.embedding_key
    assert np.array_equal(worker.embed(TEXTS), driver._embed_block(TEXTS))


def test_int8_is_refused_in_one_line_where_it_cannot_run(monkeypatch):
    with pytest.raises(ValueError, match=r"^embedding.precision=int8 runs on the CPU only .*embedding.device='cuda'"):
        Encoder(precision="int8", device="cuda")
    monkeypatch.setattr(runtime, "quantized_engines", lambda: ())  # a torch build without quantized kernels
    with pytest.raises(ValueError, match=r"^embedding.precision=int8 needs a PyTorch quantized engine .*use embedding.precision=fp32$"):
        Encoder(precision="int8")
    with pytest.raises(ValueError, match=r"embedding.precision must be one of 'auto', 'fp32', 'bf16', 'int8', got 'int6' \(did you mean 'int8'\?\)"):
        Encoder(precision="int6")


def test_auto_never_picks_int8_under_the_rule():
    assert runtime.AUTO_MAY_PICK_INT8 is False  # int8 changed metrics significantly (docs/embeddings.md)
    assert "int8" not in runtime.AUTO_CHOICES


@given(
    precision=st.one_of(st.sampled_from(runtime.PRECISIONS), st.text(max_size=6)),
    device=st.sampled_from(DEVICES),
    flags=st.frozensets(st.sampled_from(FLAGS)),
    engines=st.lists(st.sampled_from(ENGINES), unique=True),
    forced=st.sampled_from(("", "fp32", "bf16", "int8", "fp16")),
)
def test_choose_precision_over_generated_machines_and_requests(precision, device, flags, engines, forced):
    """Explicit requests are honoured or refused with a message naming the setting; auto is
    bf16 exactly on a CPU device with AMX (unless the environment fixes it) and never int8."""
    try:
        got = runtime.choose_precision(precision, device, flags, engines, forced)
    except ValueError as exc:
        message = str(exc)
        assert "\n" not in message
        if precision not in ("auto", "fp32", "bf16", "int8"):
            assert message.startswith(f"embedding.precision must be one of 'auto', 'fp32', 'bf16', 'int8', got {precision!r}")
        elif precision == "int8":
            usable = {"x86", "fbgemm", "onednn", "qnnpack"} & set(engines)
            assert device != "cpu" or not usable
            assert message.startswith("embedding.precision=int8")
        else:
            assert precision == "auto" and forced not in ("", "fp32", "bf16")
            assert "HARNESS_AUTO_PRECISION" in message
        return
    if precision in ("fp32", "bf16", "int8"):
        assert got == precision
        if precision == "int8":
            assert device == "cpu" and {"x86", "fbgemm", "onednn", "qnnpack"} & set(engines)
    else:
        assert precision == "auto" and got != "int8"
        if forced:
            assert got == forced
        else:
            assert got == ("bf16" if device == "cpu" and {"amx_bf16", "amx_tile"} <= flags else "fp32")


@given(current=st.sampled_from(ENGINES), engines=st.lists(st.sampled_from(ENGINES), unique=True))
def test_the_quantized_engine_is_a_supported_one(current, engines):
    chosen = runtime.choose_quantized_engine(engines, current)
    usable = [e for e in ("x86", "fbgemm", "onednn", "qnnpack") if e in engines]
    if not usable:
        assert chosen is None
    else:
        assert chosen == (current if current in usable else usable[0])
