"""Issue 13, class 7: escape sequences in command-line overrides.

A shell passes ``chunker.separators='["\\n\\n","\\n"," ",""]'`` to Hydra with the two
characters backslash + ``n``, and Hydra's override grammar keeps them as they are, so the
recursive chunker used to split on the literal text ``\\n`` (never found) and fell back to
spaces: different chunks, different metrics, no warning. Now ``\\n``, ``\\r``, ``\\t`` and
``\\\\`` are decoded in the literal-string settings of a chunker config before the config
is hashed or instantiated (:mod:`harness.text.escapes`), any other backslash sequence there is
refused, and regex settings are left alone.

Test corpus (hand-worked): ten paragraphs of 34 to 40 characters separated by blank lines.
With ``chunk_size=50`` characters no two paragraphs fit one chunk (34 + 2 + 36 > 50) and
every paragraph fits, so the recursive chunker with real ``"\\n\\n"`` separators returns
exactly the ten paragraphs: 10 chunks, and each query (a colour word that occurs in one
paragraph only) finds its paragraph first with IoU 1.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
from conftest import ADDED_EMBEDDING_SETTINGS, ADDED_FAISS_SETTINGS, PROJECT_ROOT, compose

from harness.experiment import build
from harness.types import Document

WORDS = ["amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "harbor", "indigo", "juniper"]
PARAGRAPHS = [f"The {w} ledger lists {w} crates." for w in WORDS]
TEXT = "\n\n".join(PARAGRAPHS)

# What a user types after `python -m harness.run` in a shell with single quotes: the
# argument holds backslash + n, exactly as in this raw string.
OVERRIDE = r'chunker.separators=["\n\n","\n"," ",""]'
YAML_CHUNKER = """\
_target_: harness.chunkers.recursive.RecursiveChunker
chunk_size: 50
chunk_overlap: 0
unit: chars
tokenizer: model
separators: ["\\n\\n", "\\n", " ", ""]
strip_whitespace: true
"""


def _write_dataset(root: Path) -> Path:
    (root / "corpus").mkdir(parents=True)
    (root / "corpus" / "notes.txt").write_text(TEXT, encoding="utf-8", newline="")
    lines = []
    for i, (word, para) in enumerate(zip(WORDS, PARAGRAPHS)):
        start = TEXT.index(para)
        evidence = [{"doc_id": "notes.txt", "start": start, "end": start + len(para), "text": para}]
        lines.append(json.dumps({"query_id": f"q{i}", "query": f"Where are the {word} crates?", "evidence": evidence}))
    (root / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def _cli(tmp_path: Path, tag: str, dataset: Path, extra: list[str]) -> subprocess.Popen:
    """Start ``python -m harness.run`` with its own MLflow store and cache under tmp_path."""
    args = [
        sys.executable,
        "-m",
        "harness.run",
        *extra,
        f"dataset.path={dataset}",
        "dataset.name=escapes",
        "retriever=bm25",
        f"tracking.uri=sqlite:///{tmp_path / tag / 'mlflow.db'}",
        f"cache.dir={tmp_path / tag / 'cache'}",
        f"hydra.run.dir={tmp_path / tag / 'out'}",
        "stats.bootstrap=0",
        "embedding.show_progress=false",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen(args, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _only_run(uri: str):
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("escapes")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1
    return runs[0]


@pytest.mark.slow
def test_cli_override_with_backslash_n_chunks_like_the_yaml_file(tmp_path):
    """The override spelling and a YAML file with real newlines give the same run: 10 chunks,
    IoU@1 = 1 for every query, and one config hash."""
    dataset = _write_dataset(tmp_path / "ds")
    conf = tmp_path / "conf" / "chunker"
    conf.mkdir(parents=True)
    (conf / "paragraphs.yaml").write_text(YAML_CHUNKER, encoding="utf-8")
    jobs = {
        "override": _cli(tmp_path, "override", dataset, ["chunker.unit=chars", "chunker.chunk_size=50", OVERRIDE]),
        "yaml": _cli(tmp_path, "yaml", dataset, ["--config-dir", str(tmp_path / "conf"), "chunker=paragraphs"]),
    }
    outputs = {tag: job.communicate(timeout=300)[0] for tag, job in jobs.items()}
    for tag, job in jobs.items():
        assert job.returncode == 0, f"{tag} run failed:\n{outputs[tag][-3000:]}"
    runs = {tag: _only_run(f"sqlite:///{tmp_path / tag / 'mlflow.db'}") for tag in jobs}
    for tag, run in runs.items():
        m = run.data.metrics
        assert m["chunks.n_chunks"] == 10, f"{tag}: {m['chunks.n_chunks']} chunks"
        assert m["iou_at_1"] == 1.0, tag
        assert m["recall_at_1"] == 1.0, tag
    assert runs["override"].data.tags["config_hash"] == runs["yaml"].data.tags["config_hash"]
    shared = [k for k in runs["yaml"].data.metrics if not k.startswith(("time.", "cache."))]
    assert {k: runs["override"].data.metrics[k] for k in shared} == {k: runs["yaml"].data.metrics[k] for k in shared}


def _chunk_texts(cfg) -> list[str]:
    chunker = build.build_chunker(cfg)
    return [c.text for c in chunker.chunk(Document("notes.txt", TEXT))]


def test_both_spellings_build_the_same_chunker_and_hash(tmp_path):
    base = ["chunker.unit=chars", "chunker.chunk_size=50"]
    typed = compose([*base, OVERRIDE])
    real = compose(base)  # conf/chunker/recursive.yaml: real newlines
    assert _chunk_texts(typed) == _chunk_texts(real) == PARAGRAPHS
    assert build.config_hash(typed) == build.config_hash(real)
    assert build.chunker_config(typed) == build.chunker_config(real)
    assert build.chunker_config(typed)["separators"] == ["\n\n", "\n", " ", ""]


@pytest.mark.parametrize(
    "typed, decoded",
    [
        (r'["\t", "\r\n", "\n"]', ["\t", "\r\n", "\n"]),
        # Hydra keeps a doubled backslash: \\n is a literal backslash followed by n
        (r'["\\n", "a\\b"]', ["\\n", "a\\b"]),
    ],
)
def test_recursive_escape_table(typed, decoded):
    chunker = build.build_chunker(compose([f"chunker.separators={typed}"]))
    assert chunker.separators == decoded


def test_unknown_escape_is_refused_naming_the_setting():
    cfg = compose([r'chunker.separators=["\s+", " "]'])
    with pytest.raises(ValueError, match=r"chunker\.separators\[0\].*\\s") as err:
        build.build_chunker(cfg)
    message = str(err.value)
    assert "\n" not in message  # one line
    assert r"\\" in message  # shows how to write a real backslash


def test_langchain_and_chonkie_kwargs_are_decoded():
    lc = build.build_chunker(
        compose(
            [
                "chunker=langchain",
                "chunker.splitter=langchain_text_splitters.CharacterTextSplitter",
                r"+chunker.kwargs.separator=\n\n",
                "chunker.kwargs.chunk_size=50",
                "chunker.kwargs.chunk_overlap=0",
            ]
        )
    )
    assert lc.kwargs["separator"] == "\n\n"
    assert [c.text for c in lc.chunk(Document("notes.txt", TEXT))] == PARAGRAPHS
    rec = build.build_chunker(compose(["chunker=langchain", r'+chunker.kwargs.separators=["\n\n","\n"," ",""]']))
    assert rec.kwargs["separators"] == ["\n\n", "\n", " ", ""]
    ch = build.build_chunker(compose(["chunker=chonkie", "chunker.chunker=chonkie.SentenceChunker", r'+chunker.kwargs.delim=[". ","\n"]']))
    assert ch.kwargs["delim"] == [". ", "\n"]


def test_nested_chunker_configs_are_decoded():
    """A text chunker inside modality (and adaptive's routes) is a config instantiated later."""
    mod = build.build_chunker(compose(["chunker=modality", r'+chunker.text_chunker.separators=["\n\n"," ",""]']))
    assert mod.text_chunker["separators"] == ["\n\n", " ", ""]
    ada = build.build_chunker(compose(["chunker=adaptive", r'+chunker.routes.prose.separators=["\n\n"," ",""]']))
    assert ada.routes["prose"]["separators"] == ["\n\n", " ", ""]


def test_regex_settings_are_not_decoded():
    """Regexes read \\n, \\t and \\d themselves; decoding \\\\ there would change the pattern."""
    ts = build.build_chunker(compose(["chunker=timestamp"]))
    assert r"\d{4}" in ts.timestamp_regex and r"[ \t]" in ts.timestamp_regex
    hier = build.build_chunker(compose(["chunker=hierarchical", "chunker.mode=markers", r'chunker.markers=["^\\section\{", "^\d+\.\n"]']))
    assert hier.markers == [r"^\\section\{", r"^\d+\.\n"]
    lc = build.build_chunker(compose(["chunker=langchain", "+chunker.kwargs.is_separator_regex=true", r'+chunker.kwargs.separators=["\n\s*\n", "\\.", " "]']))
    assert lc.kwargs["separators"] == [r"\n\s*\n", r"\\.", " "]


def _old_hash(cfg) -> str:
    """The config hash recipe before this change, written out: sha256 of the sorted JSON of
    the resolved config without tracking/hydra/paths/resume/cache."""
    from omegaconf import OmegaConf

    data = {k: v for k, v in OmegaConf.to_container(cfg, resolve=True).items() if k not in ("tracking", "hydra", "paths", "resume", "cache")}
    # settings added since, at their defaults, were not in the config then
    if data.get("sweep") == {"screen": None, "keep": 3}:  # added with screening sweeps
        del data["sweep"]
    if data.get("embedding", {}).get("on_truncate") == "warn":
        del data["embedding"]["on_truncate"]
    # added with the embedding backends, at their neutral values
    for key, neutral in ADDED_EMBEDDING_SETTINGS:
        if key in data.get("embedding", {}) and data["embedding"][key] == neutral and type(data["embedding"][key]) is type(neutral):
            del data["embedding"][key]
    if data.get("retriever", {}).get("_target_") == "harness.retrievers.faiss.FaissRetriever":  # added with the approximate indexes
        for key, neutral in ADDED_FAISS_SETTINGS:
            if key in data["retriever"] and data["retriever"][key] == neutral and type(data["retriever"][key]) is type(neutral):
                del data["retriever"][key]
    if data.get("chunker", {}).get("number_of_chunks", 0) is None:
        del data["chunker"]["number_of_chunks"]
    for key in ("compatible", "target_chunk_size"):  # added with the Chroma-compatible options
        if data.get("chunker", {}).get(key, 0) is None:
            del data["chunker"][key]
    if data.get("metrics", {}).get("convention") == "harness":  # added with metrics.convention=chroma
        del data["metrics"]["convention"]
    # the compression settings' class had this path when those runs were recorded
    if data.get("compression", {}).get("_target_") == "harness.evaluation.compression.Compressor":
        data["compression"]["_target_"] = "harness.compression.Compressor"
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(p.stem for p in (PROJECT_ROOT / "conf" / "chunker").glob("*.yaml")))
def test_shipped_configs_keep_their_hash(name):
    """Decoding is the identity on shipped values (real newlines), so no recorded run loses its hash."""
    cfg = compose([f"chunker={name}"])
    if name == "semantic":  # number_of_chunks: null is left out of the hash (see test_fault_semantic_chunks)
        from omegaconf import open_dict

        with open_dict(cfg):
            cfg.chunker.pop("number_of_chunks", None)
    assert build.config_hash(compose([f"chunker={name}"])) == _old_hash(cfg)
