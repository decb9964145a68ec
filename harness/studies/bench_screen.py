"""``harness bench --screen``: a screening sweep (cheap proxy over the grid, the best few
confirmed with the configured model) against the full exact sweep of the same grid.

Per dataset, in one run, side by side: the exact sweep (every grid job with FAISS over
all-MiniLM-L6-v2, the default) and one screening sweep per proxy (``sweep.screen=bm25``,
``sweep.screen=static``, ``sweep.keep=3``), each a fresh ``harness run -m`` process with its own
empty embedding and chunk cache (so confirming pays its own embedding, as a user's first
screening sweep would). The static model is distilled once beforehand (its time is reported
as ``distil_s``, a one-time cost per machine) and copied into each screening sweep's cache.

Reported per proxy: wall-clock seconds of screen + confirm and of the exact sweep, their
ratio; whether the screening sweep's best configuration is the exact sweep's best; whether the
proxy's top 3 over the grid contain the exact best; Kendall's tau and Spearman's rho between
the proxy's and the exact objective over the whole grid (known here only because the exact
sweep ran every job). The result names the CPU that measured it (model and the
instruction-set flags that matter for embedding speed, read at run time).
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from harness.studies.bench import _subprocess_run, cache_overrides, dataset_overrides

#: The grid of the full benchmark: chunker x chunk size (model tokens) x overlap = 12 jobs.
GRID = {"chunker": ["fixed", "recursive"], "chunker.chunk_size": [128, 192, 254], "chunker.chunk_overlap": [0, 32]}
#: The grid of ``--tiny`` (a smoke test, 4 jobs).
TINY_GRID = {"chunker": ["fixed", "recursive"], "chunker.chunk_size": [128, 254]}
#: Proxies compared, in order (keys of :data:`harness.evaluation.screening.PROXIES`).
PROXIES = ("bm25", "static")
#: Grid jobs confirmed (``sweep.keep``; ``--tiny``: 1 of its 4) and the top-N of the proxy checked for the exact best.
KEEP, TINY_KEEP, TOP_N = 3, 1, 3


def cpu_model() -> dict:
    """``{"model": <CPU model name>, "flags": [avx2, avx512f, avx512_bf16, amx_bf16, ...] present}``,
    read from ``/proc/cpuinfo`` at run time (``platform.processor()`` where that file is missing)."""
    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")
    model, flags = platform.processor() or "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model in ("", "unknown", platform.processor()):
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    return {"model": model, "flags": [f for f in wanted if f in flags], "cpus": os.cpu_count()}


def _log(msg: str) -> None:
    print(f"[bench screen {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _parent(uri: str, experiment: str):
    """The one sweep parent run of ``experiment`` (a :class:`harness.tracking.runs.RunRecord`;
    raises RuntimeError when there is not exactly one)."""
    from harness.tracking.runs import search_runs
    from harness.tracking.tracker import SWEEP_TAG

    parents = search_runs(uri, experiment, f"tags.`{SWEEP_TAG}` = 'parent'")
    if len(parents) != 1:
        raise RuntimeError(f"expected one sweep parent in experiment {experiment!r}, found {len(parents)}")
    return parents[0]


def _grid_values(uri: str, parent, key: str) -> dict[int, float]:
    """Job number -> objective of an exact sweep's FINISHED jobs (job numbers are grid positions there)."""
    from harness.tracking.runs import sweep_jobs

    _, jobs = sweep_jobs(uri, parent.run_id)
    return {job: float(run.metrics[key]) for job, status, run in jobs if status == "FINISHED" and key in run.metrics}


def distil_static(base: list[str], folder: Path, work: Path) -> float:
    """Distil the static model into ``folder`` (one single BM25-free run with ``embedding=static``); returns seconds."""
    from harness.experiment.config import compose

    probe = compose(base)
    return _subprocess_run(
        [
            *base,
            "embedding=static",
            "chunker=fixed",
            "chunker.chunk_size=254",
            *cache_overrides(probe, folder),
            "tracking.experiment=bench-screen-distil",
            f"hydra.run.dir={work / 'distil'}",
        ],
        work,
    )


def compare(
    base: list[str], grid: dict[str, list], proxies: Sequence[str], work: Path, uri: str, label: str, static_cache: Path | None, keep: int = KEEP
) -> dict:
    """The exact sweep of ``grid`` and one screening sweep per proxy; see the module docstring."""
    from harness.evaluation.metrics import mlflow_key
    from harness.evaluation.screening import kendall_tau, select, spearman_rho
    from harness.experiment.config import compose
    from harness.tracking.callbacks import SCREEN_FILE, lower_is_better

    probe = compose(base)
    objective = str(probe.metrics.objective)
    key, lower = mlflow_key(objective), lower_is_better(objective)
    grid_args = [f"{k}={','.join(str(v) for v in values)}" for k, values in grid.items()]
    n_jobs = math.prod(len(v) for v in grid.values())

    def sweep(name: str, extra: list[str], seed_static: bool) -> float:
        folder = work / f"{label}-{name}"
        cache = folder / "cache"
        if seed_static and static_cache is not None:
            shutil.copytree(static_cache / "static_models", cache / "static_models")
        _log(f"{label}: {name} sweep of {n_jobs} grid jobs")
        return _subprocess_run(
            ["-m", *base, *grid_args, *extra, *cache_overrides(probe, cache), f"tracking.experiment={label}-{name}", f"hydra.sweep.dir={folder / 'multirun'}"],
            work,
        )

    exact_s = sweep("exact", [], False)
    exact_parent = _parent(uri, f"{label}-exact")
    exact = _grid_values(uri, exact_parent, key)
    true_best = select([exact.get(j, math.nan) for j in range(1, n_jobs + 1)], 1, lower)[0] + 1
    result: dict = {
        "n_jobs": n_jobs,
        "grid": grid,
        "objective": objective,
        "exact_s": exact_s,
        "exact_best": exact_parent.tags.get("sweep.best_run_name"),
        "proxies": {},
    }
    for proxy in proxies:
        wall = sweep(f"screen-{proxy}", [f"sweep.screen={proxy}", f"sweep.keep={keep}"], proxy == "static")
        parent = _parent(uri, f"{label}-screen-{proxy}")
        record = json.loads((work / f"{label}-screen-{proxy}" / "multirun" / SCREEN_FILE).read_text(encoding="utf-8"))
        proxy_values = [float(e["proxy_objective"]) for e in record["grid"]]
        top = [g + 1 for g in select(proxy_values, TOP_N, lower)]
        both = [(p, exact[g]) for g, p in enumerate(proxy_values, 1) if g in exact and math.isfinite(p) and math.isfinite(exact[g])]
        screen_best = parent.tags.get("sweep.best_run_name")
        result["proxies"][proxy] = {
            "screen_confirm_s": wall,
            "ratio_vs_exact": wall / exact_s,
            "n_screen_jobs": len(record["screen"]),
            "n_confirm_jobs": len(record["confirm"]),
            "best": screen_best,
            "same_best": screen_best == result["exact_best"],
            f"top{TOP_N}_contains_true_best": true_best in top,
            "true_best_proxy_rank": select(proxy_values, len(proxy_values), lower).index(true_best - 1) + 1
            if math.isfinite(proxy_values[true_best - 1])
            else None,
            "kendall_tau_grid": kendall_tau([a for a, _ in both], [b for _, b in both]),
            "spearman_rho_grid": spearman_rho([a for a, _ in both], [b for _, b in both]),
            "kendall_tau_confirmed": float(parent.metrics.get("sweep.screen.kendall_tau", math.nan)),
        }
        _log(f"{label}: {proxy}: {wall:.0f} s vs exact {exact_s:.0f} s; same best: {screen_best == result['exact_best']}")
    return result


def run_screen_bench(datasets: Sequence[str], tiny: bool = False, proxies: Sequence[str] = PROXIES, static_dir: Path | None = None) -> dict:
    """The screening benchmark on each of ``datasets`` (``kestrel_kb``, ``chroma_general`` or a
    folder, :func:`harness.studies.bench.dataset_overrides`) in a temporary folder and MLflow
    store (deleted afterwards); returns the JSON-ready result.

    Args:
        static_dir: a folder keeping the distilled static model between benchmark runs
            (distilled into it when it holds none; ``distil_s`` is then reported); None: a
            temporary one.

    Raises:
        ValueError: an unknown dataset or proxy (before anything runs).
    """
    from harness.evaluation.screening import PROXIES as KNOWN
    from harness.tracking.runs import prepare_store

    for p in proxies:
        if p not in KNOWN:
            raise ValueError(f"--screen-proxies: unknown proxy {p!r}; expected a comma-separated subset of {', '.join(KNOWN)}")
    selections = {d: dataset_overrides(d) for d in datasets}
    keep = TINY_KEEP if tiny else KEEP
    result: dict = {"mode": "tiny" if tiny else "full", "cpu": cpu_model(), "python": platform.python_version(), "keep": keep, "datasets": {}}
    with tempfile.TemporaryDirectory(prefix="harness-bench-screen-") as tmp:
        work = Path(tmp)
        uri = f"sqlite:///{work / 'mlflow.db'}"
        prepare_store(uri)
        common = [f"tracking.uri={uri}", "tracking.purpose=bench", "tracking.report=false", "embedding.show_progress=false", "resume=false"]
        static_cache = None
        if "static" in proxies:
            static_cache = Path(static_dir) if static_dir is not None else work / "static-cache"
            if not (static_cache / "static_models").is_dir():
                _log("distilling the static model once")
                result["distil_s"] = distil_static([*selections[datasets[0]], *common], static_cache, work)
        for dataset, selection in selections.items():
            label = f"bench-screen-{Path(dataset).name}"
            result["datasets"][Path(dataset).name] = compare([*selection, *common], TINY_GRID if tiny else GRID, proxies, work, uri, label, static_cache, keep)
    return result


def tables(result: dict) -> str:
    """The result as the Markdown table of docs/benchmark.md."""
    cpu = result["cpu"]
    lines = [
        f"CPU: {cpu['model']} ({cpu['cpus']} logical CPUs; flags: {', '.join(cpu['flags']) or 'none of avx2/avx512/amx'}); "
        f"sweep.keep={result['keep']}; {result['mode']} grid"
        + (f"; static model distilled once in {result['distil_s']:.0f} s" if "distil_s" in result else ""),
        "",
        "| dataset | grid jobs | exact sweep (s) | proxy | screen + confirm (s) | ratio | same best | proxy top 3 has the true best | true best's proxy rank | Kendall tau (grid) | Spearman rho (grid) |",
        "|---|---:|---:|---|---:|---:|---|---|---:|---:|---:|",
    ]
    for name, d in result["datasets"].items():
        for proxy, p in d["proxies"].items():
            lines.append(
                f"| {name} | {d['n_jobs']} | {d['exact_s']:.0f} | {proxy} | {p['screen_confirm_s']:.0f} | {p['ratio_vs_exact']:.2f} | "
                f"{'yes' if p['same_best'] else 'no'} | {'yes' if p[f'top{TOP_N}_contains_true_best'] else 'no'} | {p['true_best_proxy_rank']} | "
                f"{p['kendall_tau_grid']:.2f} | {p['spearman_rho_grid']:.2f} |"
            )
    return "\n".join(lines)
