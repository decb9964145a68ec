"""``harness bench --vs-reference``: the harness against a plain reference-style pipeline and
the encoding floor, side by side.

::

    harness bench --vs-reference [--rounds 3] [--dataset chroma_general|FOLDER] [--out FILE] [--update-docs]
    harness bench --from-json experiments/bench/reference.json [--update-docs]

Every measurement is the wall-clock time of one fresh process (interpreter start, imports,
model load and everything else included), started by the benchmark one after another in
rounds ``A B C [C'] W`` (interleaved, so all see the same background load):

* **A, cold harness run**: ``python -m harness.run`` with fixed 400/0 cl100k_base token
  windows (``chunker=fixed chunker.compatible=chroma``: the reference's windows, exact
  spans), all-MiniLM-L6-v2 (``embedding.precision=auto``), FAISS exact search, on every
  corpus and question of the dataset; an empty cache folder and a new tracking store
  (SQLite) in a new folder each round, as on first use.
* **B, reference-style pipeline**: :mod:`harness.studies.reference_style` ``pipeline``,
  a script importing nothing from the harness that does what Chroma's ``chunking_evaluation``
  does for a ``FixedTokenChunker`` (tiktoken windows, chunks located by text search,
  sentence-transformers vectors, FAISS ``IndexFlatIP``, top k, recall over evidence
  characters). Its recall is reported next to the harness's ``recall@k`` as a check that both
  evaluate the same thing.
* **C, encoding floor**: :mod:`harness.studies.reference_style` ``floor``: load the model
  and encode the same unique chunk texts and questions, nothing else; at fp32 and, when
  ``embedding.precision=auto`` resolves to bf16 on this machine
  (:func:`harness.runtime.resolve_precision`: a CPU with AMX), also at bf16 (C'). Where auto
  is fp32 (no AMX) the floor at auto *is* the fp32 floor and the output says so.
* **W, warm rerun**: A's configuration again in a new process, with A's cache folder and
  tracking store: every chunk set and vector is in the on-disk caches (nothing is chunked or
  embedded), and ``resume=false`` makes it a real run that is logged as a new MLflow run,
  not the ``skip: finished`` path.

Per round the ratios A/B, A/C(auto), W/A (and A/C(fp32), B/C(fp32)) are taken; reported are
their medians over rounds with the per-round values. Targets: A/B <= 0.5, A/C(auto) <= 1.1
(issue 17), W/A <= 0.15 (issue 27); verdict PASS when the median is within the target. Absolute
seconds are context only: they depend on the machine and its load.

The result (JSON-ready dict, :func:`run_vs_reference`) renders as Markdown with
:func:`tables`; the tables of ``docs/benchmark.md`` (:func:`docs_tables`) are written between
markers by :func:`update_docs` from the committed JSON, and a test checks they are its rendering.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Sequence

from harness.experiment.build import PROJECT_ROOT
from harness.params import Param
from harness.studies.bench import _log, _subprocess, machine, replace_marked

#: The script run for B and C (a plain file, run with ``python -P`` so that no harness module is importable by accident).
SCRIPT = Path(__file__).with_name("reference_style.py")
#: The harness configuration of A and W (besides dataset, cache and tracking settings).
HARNESS_CONFIG = (
    "chunker=fixed",
    "chunker.compatible=chroma",
    "chunker.tokenizer=cl100k_base",
    "chunker.chunk_size=400",
    "chunker.chunk_overlap=0",
    "embedding=minilm",
    "embedding.precision=auto",
    "embedding.show_progress=false",
    "retriever=faiss",
)
#: Token window of the comparison (cl100k_base tokens) and the cut-off k of its recall.
WINDOW = (400, 0)
K = 5
#: Ratio -> (what it compares, limit). The limits are the issue's targets.
TARGETS = {
    "cold_vs_reference": ("cold harness run / reference-style pipeline", 0.5),
    "cold_vs_floor": ("cold harness run / encoding floor at the auto precision", 1.1),
    "warm_vs_cold": ("warm rerun / cold harness run", 0.15),
}
#: Ratios reported without a target.
CONTEXT_RATIOS = {
    "cold_vs_floor_fp32": "cold harness run / encoding floor at fp32",
    "reference_vs_floor": "reference-style pipeline / encoding floor at the auto precision",
}
#: Markers of the generated block in docs/benchmark.md.
MARKERS = (
    "<!-- bench-reference:start (written by harness bench --from-json experiments/bench/reference.json --update-docs) -->",
    "<!-- bench-reference:end -->",
)
#: Where the committed result lives (relative to the project root).
COMMITTED_JSON = Path("experiments") / "bench" / "reference.json"


def dataset_folder(dataset: str) -> Path:
    """The chroma-format folder of ``dataset``: ``chroma_general`` is ``../shared/datasets/chroma_general``
    beside the project; anything else must be a folder with ``questions.csv`` and ``corpora/``.

    Raises:
        ValueError: not such a folder (names ``--dataset`` and what was expected).
    """
    path = PROJECT_ROOT.parent / "shared" / "datasets" / "chroma_general" if dataset == "chroma_general" else Path(dataset).expanduser()
    path = path.resolve()
    if not (path / "questions.csv").is_file() or not (path / "corpora").is_dir():
        raise ValueError(f"--dataset {dataset!r}: --vs-reference needs a chroma-format folder (questions.csv and corpora/*.md), {path} is not one")
    return path


def auto_precision() -> dict:
    """What ``embedding.precision=auto`` resolves to here: ``{"precision", "why"}``."""
    from harness.runtime import fast_bf16_cpu, resolve_precision

    used = resolve_precision("auto", "cpu")
    if os.environ.get("HARNESS_AUTO_PRECISION"):
        why = f"HARNESS_AUTO_PRECISION={os.environ['HARNESS_AUTO_PRECISION']} fixes it"
    elif fast_bf16_cpu():
        why = "this CPU has AMX (amx_bf16, amx_tile)"
    else:
        why = "this CPU has no AMX (no amx_bf16/amx_tile flags), so auto is fp32 and the floor at auto is the fp32 floor"
    return {"precision": used, "why": why}


def harness_args(folder: Path, round_dir: Path, run_name: str) -> list[str]:
    """``harness run`` arguments of A (``run_name="cold"``) and W (``"warm"``) in ``round_dir``."""
    return [
        "dataset=chroma_general",
        f"dataset.path={folder}",
        f"dataset.name={folder.name}",
        "dataset.download=false",
        *HARNESS_CONFIG,
        f"tracking.uri=sqlite:///{round_dir / 'mlflow.db'}",
        "tracking.experiment=bench-reference",
        f"tracking.run_name={run_name}",
        f"paths.cache_dir={round_dir / 'cache'}",
        f"cache.dir={round_dir / 'cache'}",
        f"hydra.run.dir={round_dir / ('out-' + run_name)}",
        *(["resume=false"] if run_name == "warm" else []),
    ]


def _logged(round_dir: Path, run_name: str) -> dict:
    """recall@k, the ``time.*`` phases and the embedding counters the run ``run_name`` logged."""
    from harness.tracking.runs import find_run_by_name

    run = find_run_by_name(f"sqlite:///{round_dir / 'mlflow.db'}", "bench-reference", run_name)
    if run is None:
        raise RuntimeError(f"the {run_name} harness run logged no run in {round_dir / 'mlflow.db'}")
    m = run.metrics
    keep = {k: v for k, v in m.items() if k.startswith("time.") or k in ("embedding.texts_embedded", "embedding.cache_hits")}
    return {"run_id": run.run_id, "status": run.status, f"recall@{K}": m.get(f"recall_at_{K}"), **keep}


def _script(args: list[str], work: Path) -> tuple[float, dict]:
    """Wall-clock seconds of ``python -P reference_style.py ARGS`` and the JSON it printed."""
    seconds, stdout = _subprocess(["-P", str(SCRIPT), *args], work)
    return seconds, json.loads(stdout.strip().splitlines()[-1])


def one_round(folder: Path, texts: Path, work: Path, index: int, precisions: Sequence[str]) -> dict:
    """One round ``A B C.. W`` (see the module docstring); seconds of each process plus what each reported.

    Raises:
        RuntimeError: a process failed (its output is saved under ``work``), or the warm
            rerun was not warm (it embedded texts, or was skipped).
    """
    round_dir = work / f"round-{index}"
    round_dir.mkdir(parents=True)
    out: dict = {}
    _log(f"round {index}: A cold harness run")
    out["cold_s"] = _subprocess(["-m", "harness.run", *harness_args(folder, round_dir, "cold")], work)[0]
    out["cold_run"] = _logged(round_dir, "cold")
    _log(f"round {index}: B reference-style pipeline")
    out["reference_s"], out["reference"] = _script(["pipeline", str(folder), "--k", str(K), "--size", str(WINDOW[0]), "--overlap", str(WINDOW[1])], work)
    for p in precisions:
        _log(f"round {index}: C encoding floor at {p}")
        out[f"floor_{p}_s"], out[f"floor_{p}"] = _script(["floor", str(texts), "--precision", p], work)
    _log(f"round {index}: W warm rerun")
    out["warm_s"] = _subprocess(["-m", "harness.run", *harness_args(folder, round_dir, "warm")], work)[0]
    out["warm_run"] = _logged(round_dir, "warm")
    if out["warm_run"].get("embedding.texts_embedded", 0) > 0:
        raise RuntimeError(f"round {index}: the warm rerun embedded {out['warm_run']['embedding.texts_embedded']:.0f} texts: its caches were not warm")
    return out


def ratios(rnd: dict, auto: str) -> dict[str, float]:
    """The ratios of one round (keys of :data:`TARGETS` and :data:`CONTEXT_RATIOS`)."""
    floor_auto = rnd[f"floor_{auto}_s"]
    return {
        "cold_vs_reference": rnd["cold_s"] / rnd["reference_s"],
        "cold_vs_floor": rnd["cold_s"] / floor_auto,
        "warm_vs_cold": rnd["warm_s"] / rnd["cold_s"],
        "cold_vs_floor_fp32": rnd["cold_s"] / rnd["floor_fp32_s"],
        "reference_vs_floor": rnd["reference_s"] / floor_auto,
    }


def summarize(result: dict) -> dict:
    """Add ``ratios`` (per round), ``medians`` and ``verdicts`` (PASS/FAIL per target) to ``result``; returns it."""
    auto = result["auto_precision"]["precision"]
    per_round = [ratios(r, auto) for r in result["rounds"]]
    result["ratios"] = per_round
    result["medians"] = {key: statistics.median(r[key] for r in per_round) for key in per_round[0]}
    result["verdicts"] = {key: "PASS" if result["medians"][key] <= limit else "FAIL" for key, (_, limit) in TARGETS.items()}
    return result


def run_vs_reference(dataset: str = "chroma_general", rounds: int = 3, work: str | os.PathLike | None = None) -> dict:
    """Run ``rounds`` interleaved rounds on ``dataset`` (see the module docstring) and return the summarised result.

    Args:
        dataset: ``chroma_general`` or a chroma-format folder (:func:`dataset_folder`).
        rounds: rounds, >= 1 (the issue asks for at least 3 for a published number).
        work: folder for stores, caches and texts (default: a temporary folder, deleted afterwards).

    Raises:
        ValueError: ``rounds < 1`` or a folder that is not chroma-format (before anything runs).
        RuntimeError: a process failed.
    """
    Param("--rounds", "int", low=1).check(rounds)
    folder = dataset_folder(dataset)
    from harness.studies import reference_style

    auto = auto_precision()
    precisions = ["fp32"] + (["bf16"] if auto["precision"] == "bf16" else [])
    if work is not None:
        Path(work).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="harness-bench-ref-") if work is None else contextlib.nullcontext(str(work)) as tmp:
        work_dir = Path(tmp)
        texts = reference_style.texts_of(folder, *WINDOW)
        texts_file = work_dir / "texts.json"
        texts_file.write_text(json.dumps(texts), encoding="utf-8")
        result: dict = {
            "dataset": folder.name,
            "mb": sum(p.stat().st_size for p in (folder / "corpora").glob("*.md")) / 1e6,
            "n_unique_chunks": len(texts["chunks"]),
            "n_unique_questions": len(texts["questions"]),
            "window": f"{WINDOW[0]}/{WINDOW[1]} cl100k_base tokens",
            "k": K,
            "harness_config": list(HARNESS_CONFIG),
            "auto_precision": auto,
            "machine": machine(),
            "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "rounds": [],
        }
        for i in range(rounds):
            result["rounds"].append(one_round(folder, texts_file, work_dir, i + 1, precisions))
    return summarize(result)


def _fmt_rounds(values: Sequence[float], digits: int) -> str:
    return ", ".join(f"{v:.{digits}f}" for v in values)


def _machine_note(machine: dict) -> str:
    """`` (CPU model, load average L at the start)`` for the JSON of a run that recorded them, else ``""``."""
    parts = [machine["cpu"]] if machine.get("cpu") else []
    if machine.get("load_average") is not None:
        parts.append(f"load average {machine['load_average']:g} at the start")
    return f" ({', '.join(parts)})" if parts else ""


def docs_tables(result: dict) -> str:
    """The full Markdown of ``docs/benchmark.md``: ratios per round, seconds as context, the recall check."""
    auto = result["auto_precision"]
    n = len(result["rounds"])
    lines = [
        f"{result['dataset']} ({result['mb']:.3f} MB of corpora; {result['n_unique_chunks']} unique chunks, {result['n_unique_questions']} questions), "
        f"{result['window']}, recall@{result['k']}; {n} round(s) started {result['started']} on {result['machine']['cpus']} CPUs{_machine_note(result['machine'])}; "
        f"`embedding.precision=auto` resolves to **{auto['precision']}** here: {auto['why']}.",
        *(["", f"*{result['note']}*"] if result.get("note") else []),
        "",
        "| ratio | median | per round | target | verdict |",
        "|---|---:|---|---:|---|",
    ]
    for key, (what, limit) in TARGETS.items():
        lines.append(
            f"| {what} | {result['medians'][key]:.3f} | {_fmt_rounds([r[key] for r in result['ratios']], 3)} | ≤ {limit:g} | {result['verdicts'][key]} |"
        )
    for key, what in CONTEXT_RATIOS.items():
        lines.append(f"| {what} | {result['medians'][key]:.3f} | {_fmt_rounds([r[key] for r in result['ratios']], 3)} | — | — |")
    rows = [("cold harness run (A)", "cold_s"), ("reference-style pipeline (B)", "reference_s"), ("encoding floor, fp32 (C)", "floor_fp32_s")]
    if "floor_bf16_s" in result["rounds"][0]:
        rows.append(("encoding floor, bf16 (C')", "floor_bf16_s"))
    rows.append(("warm rerun (W)", "warm_s"))
    lines += ["", "| process (wall-clock s, context only) | median | per round |", "|---|---:|---|"]
    for label, key in rows:
        values = [r[key] for r in result["rounds"]]
        lines.append(f"| {label} | {statistics.median(values):.1f} | {_fmt_rounds(values, 1)} |")
    floor_encode = [r["floor_fp32"]["encode_chunks_s"] + r["floor_fp32"]["encode_queries_s"] for r in result["rounds"]]
    k = result["k"]
    harness_recall = [r["cold_run"][f"recall@{k}"] for r in result["rounds"]]
    reference_recall = [r["reference"]["recall"] for r in result["rounds"]]
    lines += [
        "",
        f"Of the fp32 floor, encoding itself took {statistics.median(floor_encode):.1f} s (median). "
        f"recall@{k}: harness {harness_recall[0]:.4f}, reference-style {reference_recall[0]:.4f} "
        f"({result['rounds'][0]['reference']['n_chunks']} chunks, {result['rounds'][0]['reference']['n_unlocated']} not found by text search).",
    ]
    return "\n".join(lines)


def tables(result: dict) -> str:
    """Everything printed for a result: the full tables (:func:`docs_tables`)."""
    return docs_tables(result)


def _replace_block(text: str, body: str, where: str) -> str:
    return replace_marked(text, MARKERS, body, where)


def generated_block(text: str) -> str | None:
    """The text between the markers of ``text`` (without the newlines next to them), or None."""
    start, end = MARKERS
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        return None
    return text[i + len(start) : j].strip("\n")


def update_docs(result: dict, root: str | os.PathLike = PROJECT_ROOT) -> list[Path]:
    """Write :func:`docs_tables` into ``docs/benchmark.md`` under ``root`` between :data:`MARKERS`;
    returns the files written (that one).

    Raises:
        ValueError: the file has no marker block.
    """
    path = Path(root) / "docs" / "benchmark.md"
    text = path.read_text(encoding="utf-8")
    path.write_text(_replace_block(text, docs_tables(result), str(path)), encoding="utf-8")
    return [path]


def load(path: str | os.PathLike) -> dict:
    """A result written by ``harness bench --vs-reference --out FILE`` (summarised again, so a
    hand-edited ratio cannot survive).

    Raises:
        ValueError: the file is not such a result (names the file and the missing key).
    """
    try:
        result = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"--from-json {path}: cannot read a benchmark JSON ({exc})") from None
    for key in ("rounds", "auto_precision", "dataset", "k"):
        if key not in result:
            raise ValueError(f"--from-json {path}: no {key!r}; expected the output of harness bench --vs-reference --out FILE")
    if not result["rounds"]:
        raise ValueError(f"--from-json {path}: no rounds")
    return summarize(result)
