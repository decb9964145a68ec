"""Screening sweeps (``sweep.screen``) and the project's grid sweeper.

* Exact mode (no ``sweep.screen``, the default): over generated override lists and batch
  sizes the sweeper launches exactly the batches, jobs, order and job numbers of Hydra's own
  basic sweeper (both driven by Hydra's real config loader over ``conf/``; the launcher
  records what it is handed).
* The selection rule and the rank correlations over generated objective lists (against
  scipy), the settings' one-line errors.
* Real multiruns through the command line on a kestrel_kb subset: BM25 proxy, FAISS over
  the packaged MiniLM confirming; the parent's stages and agreement; resume; a misspelt proxy.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
from conftest import _SESSION_CACHE, KESTREL_PATH, PROJECT_ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from harness.evaluation.screening import PROXIES, ScreenError, ScreenSettings, kendall_tau, select, spearman_rho
from harness.studies.screen import GridSweeper, proxy_job
from harness.tracking.callbacks import GRID_SWEEPER, SCREEN_FILE, STAGE_TAG, SweepPlanError, plan_sweep
from harness.tracking.tracker import JOB_TAG, SWEEP_TAG

CONF = PROJECT_ROOT / "conf"


# ------------------------------------------------------------------ exact mode = Hydra's basic sweeper


class _RecordingLauncher:
    """Stands in for Hydra's launcher (not what is tested): records each batch and its first
    job number, and returns completed jobs with objective 0.5."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[list[str]], int]] = []

    def launch(self, job_overrides, initial_job_idx):
        from hydra.core.utils import JobReturn, JobStatus

        self.calls.append(([list(j) for j in job_overrides], initial_job_idx))
        out = []
        for job in job_overrides:
            r = JobReturn(overrides=list(job), status=JobStatus.COMPLETED)
            r.return_value = 0.5
            out.append(r)
        return out


@pytest.fixture(scope="module")
def hydra_env(tmp_path_factory):
    """``(config loader, master config of a multirun)`` over ``conf/``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from harness.experiment.build import register_resolvers

    register_resolvers()
    folder = tmp_path_factory.mktemp("sweep")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        config = compose(config_name="config", overrides=[f"hydra.sweep.dir={folder}", f"cache.dir={_SESSION_CACHE}"], return_hydra_config=True)
    return loader, config


def _drive(sweeper, loader, config, args):
    from hydra.types import HydraContext

    sweeper.hydra_context = HydraContext(config_loader=loader, callbacks=None)
    sweeper.config = config
    sweeper.launcher = _RecordingLauncher()
    sweeper.sweep(list(args))
    return sweeper.launcher.calls


_CHOICES = {"retriever": ("bm25", "faiss", "hybrid"), "chunker": ("fixed", "recursive")}


@st.composite
def _grid(draw):
    """``(command-line overrides, sweeper params, max_batch_size)``: lists, choice, range, glob; no key twice."""
    keys = draw(
        st.lists(st.sampled_from(("chunker.chunk_size", "chunker.chunk_overlap", "stats.seed", "retriever", "chunker")), min_size=1, max_size=2, unique=True)
    )
    task = []
    for key in keys:
        if key in _CHOICES:
            form = draw(st.sampled_from(("one", "list", "glob")))
            if form == "glob":
                task.append(f"{key}=glob({draw(st.sampled_from(('f*', 'b*', 'fi*', 're*')))})")
                continue
            values = draw(st.lists(st.sampled_from(_CHOICES[key]), min_size=1, max_size=3, unique=True))
        else:
            form = draw(st.sampled_from(("one", "list", "choice", "range")))
            if form == "range":
                a = draw(st.integers(0, 20))
                task.append(f"{key}=range({a},{a + draw(st.integers(1, 12))},{draw(st.integers(4, 12))})")  # 1 to 3 values
                continue
            values = [str(v) for v in draw(st.lists(st.integers(0, 600), min_size=1, max_size=3, unique=True))]
        values = values[:1] if form == "one" else values
        task.append(f"{key}={values[0]}" if form == "one" else f"{key}={','.join(values)}" if form == "list" else f"{key}=choice({','.join(values)})")
    params = {}
    if draw(st.booleans()):
        params["stats.bootstrap"] = ",".join(str(v) for v in draw(st.lists(st.integers(0, 50), min_size=1, max_size=2, unique=True)))
    batch = draw(st.sampled_from((None, -1, 1, 2, 5)))
    return task, params, batch


@pytest.mark.slow
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=_grid())
def test_exact_mode_launches_the_basic_sweepers_batches_jobs_and_numbers(case, hydra_env):
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    loader, config = hydra_env
    task, params, batch = case
    basic = _outcome(BasicSweeper(max_batch_size=None if batch == -1 else batch, params=params), loader, config, task)
    ours = _outcome(GridSweeper(max_batch_size=batch, params=params), loader, config, task)
    try:
        plan_sweep(task, params, GRID_SWEEPER, loader)
    except SweepPlanError as exc:  # refused by the sweep callback before any sweeper runs, today as before
        assert ours == ("SweepPlanError", str(exc))
        return
    assert ours == basic
    if isinstance(ours, list):
        assert sum(len(jobs) for jobs, _ in ours) == math.prod(len(v) for v in _axes_sizes(ours))


def _outcome(sweeper, loader, config, args):
    """The launched ``(batch, first job number)`` list, or the error's type and message (a job that does not compose)."""
    try:
        return _drive(sweeper, loader, config, args)
    except Exception as exc:  # noqa: BLE001 - compared between the two sweepers
        return type(exc).__name__, str(exc)


def _axes_sizes(calls):
    """The distinct values of each key over all launched jobs (the grid is their product)."""
    jobs = [job for batch, _ in calls for job in batch]
    keys = [o.split("=", 1)[0] for o in jobs[0]]
    return [{job[i] for job in jobs} for i in range(len(keys))]


def test_a_screening_sweep_launches_every_proxy_once_then_the_kept_jobs(hydra_env):
    loader, config = hydra_env
    from omegaconf import open_dict

    cfg = config.copy()
    with open_dict(cfg):
        cfg.sweep.screen = "bm25"
        cfg.sweep.keep = 2
    calls = _drive(GridSweeper(), loader, cfg, ["retriever=faiss,hybrid", "chunker.chunk_size=100,200"])
    (stage1, first), (stage2, second) = calls
    # faiss and hybrid become bm25: 4 grid jobs, 2 distinct proxy configurations, run once each
    assert stage1 == [["retriever=bm25", "chunker.chunk_size=100"], ["retriever=bm25", "chunker.chunk_size=200"]]
    assert (first, second) == (0, 2)
    # every proxy value is 0.5: a tie, broken by grid order, keeps grid jobs 1 and 2
    assert stage2 == [["retriever=faiss", "chunker.chunk_size=100"], ["retriever=faiss", "chunker.chunk_size=200"]]
    record = json.loads((Path(str(cfg.hydra.sweep.dir)) / SCREEN_FILE).read_text(encoding="utf-8"))
    assert [e["job"] for e in record["screen"]] == [1, 2] and [e["job"] for e in record["confirm"]] == [3, 4]
    assert [e["screen_job"] for e in record["grid"]] == [1, 2, 1, 2]


def test_proxy_job_replaces_the_group_and_drops_its_settings():
    assert proxy_job(["chunker=fixed", "embedding=minilm", "embedding.batch_size=64"], PROXIES["static"]) == ("chunker=fixed", "embedding=static")
    assert proxy_job(["chunker=fixed"], PROXIES["bm25"]) == ("chunker=fixed", "retriever=bm25")
    assert proxy_job(["retriever=faiss", "retriever.index=hnsw", "x=1"], PROXIES["bm25"]) == ("retriever=bm25", "x=1")


# ------------------------------------------------------------------ the selection rule and the correlations

_VALUE = st.one_of(st.floats(0, 1, allow_nan=False), st.sampled_from((0.25, 0.5, math.nan)))


@settings(max_examples=300, deadline=None)
@given(values=st.lists(_VALUE, max_size=12), keep=st.integers(1, 15), lower=st.booleans())
def test_select_keeps_min_of_keep_and_valued_jobs_best_first_ties_by_grid_order(values, keep, lower):
    kept = select(values, keep, lower)
    valued = [i for i, v in enumerate(values) if not math.isnan(v)]
    assert len(kept) == min(keep, len(valued)) and len(set(kept)) == len(kept)
    assert all(i in valued for i in kept)
    sign = 1 if lower else -1
    if valued:
        best = min(sign * values[i] for i in valued)
        assert sign * values[kept[0]] == best  # always the proxy's best
        assert kept[0] == min(i for i in valued if sign * values[i] == best)  # the earliest of tied bests
    for a, b in zip(kept, kept[1:]):  # best first; equal values in grid order
        assert sign * values[a] < sign * values[b] or (values[a] == values[b] and a < b)
    left = [i for i in valued if i not in kept]
    assert all(sign * values[i] >= sign * values[kept[-1]] for i in left)  # nothing left out beats a kept job
    assert select(list(values), keep, lower) == kept  # deterministic


@settings(max_examples=300, deadline=None)
@given(pairs=st.lists(st.tuples(st.sampled_from((0.1, 0.2, 0.3, 0.7)) | st.floats(0, 1), st.sampled_from((0.4, 0.5)) | st.floats(0, 1)), max_size=10))
def test_rank_correlations_agree_with_scipy(pairs):
    x, y = [p for p, _ in pairs], [q for _, q in pairs]
    tau, rho = kendall_tau(x, y), spearman_rho(x, y)
    if len(pairs) < 2 or len(set(x)) < 2 or len(set(y)) < 2:
        assert math.isnan(tau) and math.isnan(rho)
        return
    assert tau == pytest.approx(sps.kendalltau(x, y).statistic, abs=1e-12)
    assert rho == pytest.approx(sps.spearmanr(x, y).statistic, abs=1e-12)
    assert -1 <= tau <= 1 and -1 <= rho <= 1


def test_settings_refuse_a_misspelt_proxy_key_or_keep_in_one_line():
    assert ScreenSettings.from_mapping(None) == ScreenSettings(None, 3)
    assert ScreenSettings.from_mapping({"screen": "bm25", "keep": 1}).proxy_overrides == ("retriever=bm25",)
    cases = {
        "statc": ({"screen": "statc"}, "sweep.screen must be null (no screening) or one of", "(did you mean 'static'?)"),
        "keep": ({"screen": "bm25", "keep": 0}, "sweep.keep must be an integer >= 1, got 0", ""),
        "float": ({"keep": 2.5}, "sweep.keep must be an integer >= 1, got 2.5", ""),
        "key": ({"kepp": 2}, "sweep.kepp: unknown setting; did you mean sweep.keep?", ""),
    }
    for node, start, end in cases.values():
        with pytest.raises(ScreenError) as info:
            ScreenSettings.from_mapping(node)
        text = str(info.value)
        assert "\n" not in text and text.startswith(start) and text.endswith(end), text


def test_a_swept_sweep_setting_and_another_sweeper_are_refused():
    from omegaconf import OmegaConf

    from harness.tracking.callbacks import screen_settings

    config = OmegaConf.create({"sweep": {"screen": "bm25", "keep": 3}})
    with pytest.raises(SweepPlanError, match=r"^sweep.keep: is a setting of the whole sweep"):
        screen_settings(config, plan_sweep(["sweep.keep=1,2"], None, GRID_SWEEPER))
    with pytest.raises(SweepPlanError, match=r"^sweep.screen=bm25: screening needs the project's grid sweeper"):
        screen_settings(config, plan_sweep(["a=1,2"], None, "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"))
    assert screen_settings(config, plan_sweep(["a=1,2"], None, GRID_SWEEPER)).keep == 3


# ------------------------------------------------------------------ real multiruns

SUBSET_DOCS = ("faq.md", "release_notes.md")


@pytest.fixture(scope="module")
def subset(tmp_path_factory) -> Path:
    """kestrel_kb cut to two documents and the questions whose evidence lies in them only."""
    folder = tmp_path_factory.mktemp("kestrel_subset")
    (folder / "corpus").mkdir()
    for name in SUBSET_DOCS:
        (folder / "corpus" / name).write_bytes((KESTREL_PATH / "corpus" / name).read_bytes())
    lines = []
    for line in (KESTREL_PATH / "questions.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            q = json.loads(line)
            if q["evidence"] and all(e["doc_id"] in SUBSET_DOCS for e in q["evidence"]):
                lines.append(line)
    assert len(lines) >= 10
    (folder / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _multirun(folder: Path, store: Path, args: list[str], name: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "harness.run",
        "-m",
        f"dataset.path={folder}",
        "dataset.name=kestrel_subset",
        "chunker=fixed",
        "stats.bootstrap=0",
        "embedding.show_progress=false",
        "tracking.report=false",
        f"tracking.uri=sqlite:///{store}",
        f"cache.dir={_SESSION_CACHE}",
        f"hydra.sweep.dir={store.parent / name}",
        *args,
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(cmd, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_bm25_screen_then_faiss_confirm_records_both_stages_and_resumes(subset, tmp_path):
    store = tmp_path / "mlflow.db"
    args = ["chunker.chunk_size=64,128,254", "sweep.screen=bm25", "sweep.keep=2"]
    proc = _multirun(subset, store, args, "first")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "job 5/5" in proc.stdout and "job 6/" not in proc.stdout
    client = mlflow.MlflowClient(f"sqlite:///{store}")
    exp = client.get_experiment_by_name("kestrel_subset")
    runs = client.search_runs([exp.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get(SWEEP_TAG) == "parent"]
    children = {int(r.data.tags[JOB_TAG]): r for r in runs if r.data.tags.get(SWEEP_TAG) != "parent"}
    assert sorted(children) == [1, 2, 3, 4, 5]
    stages = {j: r.data.tags[STAGE_TAG] for j, r in children.items()}
    assert stages == {1: "screen", 2: "screen", 3: "screen", 4: "confirm", 5: "confirm"}
    assert [children[j].data.tags["retriever"] for j in sorted(children)] == ["bm25", "bm25", "bm25", "faiss", "faiss"]
    # the kept jobs are the proxy's two best grid jobs, confirmed in grid order
    proxy = {j: children[j].data.metrics["recall_at_5"] for j in (1, 2, 3)}
    kept = sorted(sorted(proxy, key=lambda j: (-proxy[j], j))[:2])
    sizes = {j: children[j].data.params["chunker.chunk_size"] for j in children}
    assert [sizes[j] for j in (4, 5)] == [sizes[j] for j in kept]
    # the sweep's best is the best confirmed job, never a proxy run
    confirmed = {j: children[j].data.metrics["recall_at_5"] for j in (4, 5)}
    best = max(confirmed, key=lambda j: (confirmed[j], -j))
    tags = parent.data.tags
    assert int(tags["sweep.best_job"]) == best and tags["sweep.screen"] == "bm25" and tags["sweep.screen.jobs_confirm"] == "4,5"
    x = [proxy[kept[0]], proxy[kept[1]]]
    y = [confirmed[4], confirmed[5]]
    if len(set(x)) == 2 and len(set(y)) == 2:
        assert parent.data.metrics["sweep.screen.kendall_tau"] == pytest.approx(sps.kendalltau(x, y).statistic)
        assert parent.data.metrics["sweep.screen.spearman_rho"] == pytest.approx(sps.spearmanr(x, y).statistic)
    record = json.loads(Path(client.download_artifacts(parent.info.run_id, SCREEN_FILE, str(tmp_path))).read_text(encoding="utf-8"))
    assert record["summary"]["best_job"] == best and [e["job"] for e in record["confirm"]] == [4, 5]
    assert "screening by bm25 (retriever=bm25): 3 proxy job(s), 2 confirmed" in proc.stdout

    # resume: the same sweep again runs nothing new, keeps the same jobs and the same best
    again = _multirun(subset, store, args, "second")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert again.stdout.count("skip: finished as run") == 5
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get(SWEEP_TAG) == "parent"]
    assert len(runs) == len(parents) + 5
    second = next(r for r in parents if r.info.run_id != parent.info.run_id)
    assert second.data.tags["sweep.best_run_id"] == tags["sweep.best_run_id"] and second.data.tags["sweep.jobs_skipped"] == "5"


def _run_count(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as con:
        try:
            return con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        except sqlite3.OperationalError:
            return 0


@pytest.mark.slow
def test_a_misspelt_proxy_exits_2_in_one_line_before_any_run(subset, tmp_path):
    store = tmp_path / "mlflow.db"
    proc = _multirun(subset, store, ["chunker.chunk_size=64,128", "sweep.screen=statc"], "bad")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert line.startswith("harness run: sweep.screen must be null (no screening) or one of") and line.endswith("(did you mean 'static'?)"), line
    assert "job 1/" not in proc.stdout and _run_count(store) == 0


# ------------------------------------------------------------------ the benchmark's own checks


def test_the_screening_benchmark_refuses_an_unknown_proxy_before_running():
    from harness.studies.bench_screen import run_screen_bench

    with pytest.raises(ValueError, match=r"^--screen-proxies: unknown proxy 'bm52'; expected a comma-separated subset of static, bm25$"):
        run_screen_bench(["kestrel_kb"], tiny=True, proxies=["bm52"])


def test_the_screening_table_names_the_cpu_and_each_proxy():
    from harness.studies.bench_screen import cpu_model, tables

    cpu = cpu_model()
    assert cpu["model"] and cpu["cpus"] == os.cpu_count() and set(cpu["flags"]) <= {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile"}
    proxy = {
        "screen_confirm_s": 30.0,
        "ratio_vs_exact": 0.25,
        "same_best": True,
        "top3_contains_true_best": False,
        "true_best_proxy_rank": 4,
        "kendall_tau_grid": 0.5,
        "spearman_rho_grid": 0.6,
    }
    result = {"cpu": cpu, "keep": 3, "mode": "full", "distil_s": 91.0, "datasets": {"kestrel_kb": {"n_jobs": 12, "exact_s": 120.0, "proxies": {"bm25": proxy}}}}
    text = tables(result)
    assert text.splitlines()[0].startswith(f"CPU: {cpu['model']}") and "distilled once in 91 s" in text
    assert text.splitlines()[-1] == "| kestrel_kb | 12 | 120 | bm25 | 30 | 0.25 | yes | no | 4 | 0.50 | 0.60 |"


def test_a_batch_size_below_one_is_refused_naming_the_setting():
    for bad in (0, -2, 1.5, "2"):
        with pytest.raises(ValueError, match=r"^hydra.sweeper.max_batch_size must be null \(all jobs in one launch\), -1 or an integer >= 1, got "):
            GridSweeper(max_batch_size=bad)
    assert GridSweeper(max_batch_size=-1).max_batch_size == -1 and GridSweeper(max_batch_size=None).max_batch_size is None
