"""The grid sweeper of ``harness run -m``: exact by default, two-stage with ``sweep.screen``.

``conf/config.yaml`` selects it (``override hydra/sweeper: harness``, the option
``conf/hydra/sweeper/harness.yaml``); Hydra loads sweepers from its ``hydra_plugins``
namespace only, so the class Hydra instantiates is
``hydra_plugins.harness_sweeper.HarnessSweeper``, a subclass of :class:`GridSweeper` with no
code of its own. Built on Hydra's public API only (:class:`hydra.plugins.sweeper.Sweeper`,
the launcher from :class:`hydra.core.plugins.Plugins`, the override parser through
:func:`harness.tracking.callbacks.plan_sweep`).

**Exact sweep** (``sweep.screen`` null, the default): the jobs of
:func:`~harness.tracking.callbacks.plan_sweep` (the Cartesian product Hydra's basic sweeper
launches, in its order, checked against it by a test), launched in batches of
``hydra.sweeper.max_batch_size`` (null: one batch), numbered from 0 as Hydra numbers them,
with ``multirun.yaml`` saved in the sweep folder; a failed job's error is raised once its
batch is done. Job for job what the basic sweeper does.

**Screening sweep** (``sweep.screen=static`` or ``bm25``, :data:`harness.evaluation.screening.PROXIES`):

1. *screen*: every grid job with the proxy's overrides (``embedding=static`` or
   ``retriever=bm25``; the job's own settings of the replaced group are dropped). Grid jobs
   whose proxy configurations are the same (the same config hash,
   :func:`harness.experiment.build.config_hash`) run once. A failed proxy job stops the sweep
   after this stage, as a failed job stops an exact sweep after its batch.
2. *select*: the ``sweep.keep`` best grid jobs by the proxy's objective
   (:func:`harness.evaluation.screening.select`: best first, ties to the earlier grid job;
   a job without a value is never kept).
3. *confirm*: those grid jobs, unchanged, in grid order.

Job numbers run on from stage 1 into stage 2. The stages, the proxy's and the confirmed
objective of every job are written to ``<hydra.sweep.dir>/sweep_screen.json``
(:data:`harness.tracking.callbacks.SCREEN_FILE`); the sweep callback records them on the
parent run (:func:`harness.tracking.callbacks.record_screening`) and takes the sweep's best
job from the confirmed jobs only. Resume works per job as always: a configuration with a
FINISHED run is skipped and returns its logged objective (so a confirmed job equal to its
proxy job, e.g. a BM25 grid job under ``bm25``, costs nothing).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Sequence

from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf, open_dict

from harness.evaluation.screening import ScreenSettings, select
from harness.params import Param
from harness.tracking.callbacks import PARENT_FILE, SCREEN_FILE, lower_is_better, plan_sweep

#: ``hydra.sweeper.max_batch_size``: jobs per launch (-1 is accepted as null, as Hydra's basic sweeper does).
BATCH = Param("max_batch_size", "int", low=1, allow_none=True, none="null (all jobs in one launch), -1 or {}")

#: Stage names, as the parent run and the job table record them.
SCREEN_STAGE, CONFIRM_STAGE = "screen", "confirm"


def settings_of(config: DictConfig) -> ScreenSettings:
    """:class:`~harness.evaluation.screening.ScreenSettings` of a config's ``sweep`` node
    (absent: the defaults). Raises :class:`~harness.evaluation.screening.ScreenError`."""
    node = config.get("sweep")
    data = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    return ScreenSettings.from_mapping(data)


def proxy_job(job: Sequence[str], proxy: Sequence[str]) -> tuple[str, ...]:
    """A grid job's overrides with the proxy's applied: each proxy override replaces the job's
    override of the same key in place (or is appended), and the job's overrides of settings
    inside a replaced group (``embedding.batch_size=64`` under ``embedding=static``) are dropped.

    Args:
        job: one job's overrides (``("chunker=fixed", "retriever=faiss")``), plain ``key=value``.
        proxy: the proxy's group overrides (``("embedding=static",)``).
    """
    replaced = {p.split("=", 1)[0]: p for p in proxy}
    out: list[str] = []
    for override in job:
        key = override.split("=", 1)[0].lstrip("+~")
        if key in replaced:
            out.append(replaced.pop(key))
        elif any(key.startswith(group + ".") for group in (p.split("=", 1)[0] for p in proxy)):
            continue
        else:
            out.append(override)
    return (*out, *replaced.values())


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, default=float), encoding="utf-8")
    os.replace(tmp, path)


def _objective(result) -> float:
    """A job's returned objective as a float (NaN for a job without one: invalid, busy)."""
    try:
        value = float(result.return_value)
    except (TypeError, ValueError):
        return math.nan
    return value


class GridSweeper(Sweeper):
    """Hydra sweeper running a grid exactly (default) or screened (``sweep.screen``); see the module docstring.

    Args:
        max_batch_size: jobs per launch (null or -1: all in one), as Hydra's basic sweeper.
        params: ``hydra.sweeper.params`` (key -> sweep), placed before the command line's overrides.

    Raises:
        ValueError: ``max_batch_size`` is neither null, -1 nor an int >= 1.
    """

    def __init__(self, max_batch_size: int | None = None, params: dict[str, str] | None = None) -> None:
        super().__init__()
        if max_batch_size != -1:
            BATCH.check(max_batch_size, "hydra.sweeper")
        self.max_batch_size = max_batch_size
        self.params = dict(params or {})
        self.hydra_context = None
        self.config: DictConfig | None = None
        self.launcher = None
        self._next = 0

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        """Keep Hydra's context and config; instantiate the configured launcher."""
        from hydra.core.plugins import Plugins

        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context, task_function=task_function, config=config)

    # ------------------------------------------------------------------ the sweep

    def sweep(self, arguments: list[str]) -> Any:
        """Run the sweep of ``arguments`` (the command line's overrides); returns the
        :class:`hydra.core.utils.JobReturn` batches, as Hydra's basic sweeper does.

        Raises:
            ScreenError: a bad ``sweep.*`` setting (the sweep callback refuses it earlier, exit 2).
            SweepPlanError: a sweep whose jobs would not be the ones typed (likewise).
            the first failed job's error, once its batch (exact) or its stage (screening) is done.
        """
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        settings = settings_of(self.config)
        loader = self.hydra_context.config_loader
        plan = plan_sweep(arguments, self.params, config_loader=loader)
        jobs = [list(j) for j in plan.jobs or ()]
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        self._next = 0
        if settings.screen is None:
            size = len(jobs) if self.max_batch_size in (None, -1) else int(self.max_batch_size)
            return [self._launch(jobs[i : i + size]) for i in range(0, len(jobs), max(size, 1))]
        return self._screen(jobs, settings, sweep_dir)

    def _launch(self, batch: list[list[str]], raise_failed: bool = True) -> list:
        """Validate and launch one batch, numbered on from the jobs launched before."""
        if not batch:
            return []
        self.validate_batch_is_legal(batch)
        results = list(self.launcher.launch(batch, initial_job_idx=self._next))
        self._next += len(batch)
        if raise_failed:
            for r in results:
                _ = r.return_value  # a failed job's error is raised here, as Hydra's basic sweeper does
        return results

    def _proxy_key(self, job: tuple[str, ...]) -> str:
        """The config hash of a proxy job (its overrides as text when it does not compose:
        such a job is never merged with another; it is refused when it runs)."""
        from harness.experiment.build import config_hash

        try:
            cfg = self.hydra_context.config_loader.load_sweep_config(master_config=self.config, sweep_overrides=list(job))
            with open_dict(cfg):
                del cfg["hydra"]
            return config_hash(cfg)
        except Exception:  # noqa: BLE001 - composition errors are reported by the job itself
            return "overrides:" + "\n".join(job)

    def _screen(self, jobs: list[list[str]], settings: ScreenSettings, sweep_dir: Path) -> list:
        """Stage 1 (every grid job with the proxy, equal proxy configurations once), select, stage 2."""
        objective = str(self.config.metrics.objective)
        lower = lower_is_better(objective)
        proxies: list[tuple[str, ...]] = []
        index_of: dict[str, int] = {}
        grid_to_proxy: list[int] = []
        for job in jobs:
            proxied = proxy_job(job, settings.proxy_overrides)
            key = self._proxy_key(proxied)
            if key not in index_of:
                index_of[key] = len(proxies)
                proxies.append(proxied)
            grid_to_proxy.append(index_of[key])
        planned_confirm = min(settings.keep, len(jobs))
        state: dict[str, Any] = {
            "proxy": settings.screen,
            "proxy_overrides": list(settings.proxy_overrides),
            "keep": settings.keep,
            "objective": objective,
            "lower_is_better": lower,
            "grid": [{"grid_job": g + 1, "overrides": job, "screen_job": grid_to_proxy[g] + 1} for g, job in enumerate(jobs)],
            "screen": [
                {"job": i + 1, "overrides": list(p), "grid_jobs": [g + 1 for g, s in enumerate(grid_to_proxy) if s == i]} for i, p in enumerate(proxies)
            ],
            "confirm": [],
            "stage": SCREEN_STAGE,
        }
        path = sweep_dir / SCREEN_FILE
        _write_json(path, state)
        self._set_job_count(sweep_dir, len(proxies) + planned_confirm)
        first = self._launch([list(p) for p in proxies], raise_failed=False)
        values = [_objective(r) if r.status.name == "COMPLETED" else math.nan for r in first]
        for entry, value in zip(state["screen"], values):
            entry["objective"] = value
        for entry in state["grid"]:
            entry["proxy_objective"] = values[entry["screen_job"] - 1]
        _write_json(path, state)
        for r in first:
            _ = r.return_value  # a failed proxy job stops the sweep here (exit 1), before any confirmation
        kept = select([values[s] for s in grid_to_proxy], settings.keep, lower)
        for rank, g in enumerate(kept, 1):
            state["grid"][g]["proxy_rank"] = rank
        confirm = sorted(kept)  # launched in grid order
        self._set_job_count(sweep_dir, len(proxies) + len(confirm))
        state["confirm"] = [
            {
                "job": len(proxies) + n + 1,
                "grid_job": g + 1,
                "overrides": jobs[g],
                "proxy_objective": values[grid_to_proxy[g]],
                "proxy_rank": kept.index(g) + 1,
            }
            for n, g in enumerate(confirm)
        ]
        state["stage"] = CONFIRM_STAGE
        _write_json(path, state)
        second = self._launch([jobs[g] for g in confirm], raise_failed=False)
        for entry, r in zip(state["confirm"], second):
            entry["objective"] = _objective(r) if r.status.name == "COMPLETED" else math.nan
        state["stage"] = "done"
        _write_json(path, state)
        for r in second:
            _ = r.return_value
        return [first, second]

    @staticmethod
    def _set_job_count(sweep_dir: Path, n: int) -> None:
        """Update the job count the jobs print (``job i/N``) in the parent's record of the sweep folder."""
        path = sweep_dir / PARENT_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        data["jobs"] = n
        _write_json(path, data)
