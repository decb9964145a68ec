"""Settings built once from the config and passed down as plain values.

The ``metrics`` and ``stats`` config groups are read here and nowhere else: the
orchestrator (:mod:`harness.experiment.run`), the release gate and the Optuna search call
:func:`metric_settings` / :func:`stats_settings` and hand the frozen objects
(:class:`harness.evaluation.settings.MetricSettings`, :class:`~harness.evaluation.settings.StatsSettings`,
which check every range) to the layers below. Defaults live only in the YAML files
(``conf/metrics/default.yaml``, the ``stats`` block of ``conf/config.yaml``); a config
without one of the keys is an error that names it, and an unknown key is an error that
names the closest known one.

Adding a metrics setting: one key in ``conf/metrics/default.yaml``, one field (with its
check) in :class:`~harness.evaluation.settings.MetricSettings`, and its use where it acts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from harness.evaluation.settings import METRIC_FIELDS, STATS_FIELDS, MetricSettings, StatsSettings, reject_unknown
from harness.experiment.build import PROJECT_ROOT

#: The file that holds every ``metrics`` setting and its default.
METRICS_DEFAULTS = PROJECT_ROOT / "conf" / "metrics" / "default.yaml"


def _group(cfg: Any, name: str, keys: tuple[str, ...], source: str) -> dict[str, Any]:
    """The config group ``name`` of ``cfg`` as a plain dict holding exactly ``keys``.

    Raises:
        ValueError: the group is absent, a key is missing (naming ``source``, where its
            default is set) or unknown (with the closest known key, when there is one).
    """
    from omegaconf import DictConfig, ListConfig, OmegaConf

    node = cfg.get(name) if isinstance(cfg, (Mapping, DictConfig)) else None
    if node is None:
        raise ValueError(f"{name}: config group missing; expected the keys {list(keys)} ({source} sets them)")
    data = OmegaConf.to_container(node, resolve=True) if isinstance(node, (DictConfig, ListConfig)) else node
    data = dict(data) if isinstance(data, Mapping) else data
    if not isinstance(data, dict):
        raise ValueError(f"{name}: expected a mapping of settings, got {data!r}")
    reject_unknown(name, data, keys)
    for key in keys:
        if key not in data:
            raise ValueError(f"{name}.{key}: missing; {source} sets its default")
    return data


def metric_settings(cfg) -> MetricSettings:
    """The settings of ``cfg.metrics`` (a composed config, or a mapping holding ``metrics``).

    Raises:
        ValueError: the group or one of its keys is missing, a key is unknown (with the
            closest known key), or a value is out of range (see
            :class:`~harness.evaluation.settings.MetricSettings`).
    """
    data = _group(cfg, "metrics", METRIC_FIELDS, str(METRICS_DEFAULTS.relative_to(PROJECT_ROOT)))
    data["objective"] = str(data["objective"])  # null is no metric name: "metrics.objective: unknown metric"
    return MetricSettings.from_mapping(data)


def default_metric_settings(**changes: Any) -> MetricSettings:
    """The settings of ``conf/metrics/default.yaml`` with ``changes`` applied, for library
    calls (tests, notebooks): e.g. ``default_metric_settings(ks=[1, 5], budgets=[])``.

    ``objective`` is None unless given: a library call optimises nothing, so changing
    ``ks`` never trips over the configured objective.

    Raises:
        ValueError: an unknown setting name in ``changes`` or a value out of range.
    """
    from omegaconf import OmegaConf

    data = _group({"metrics": OmegaConf.load(METRICS_DEFAULTS)}, "metrics", METRIC_FIELDS, str(METRICS_DEFAULTS))
    data["objective"] = None
    reject_unknown("metrics", changes, METRIC_FIELDS)
    return MetricSettings.from_mapping({**data, **changes})


def stats_settings(cfg) -> StatsSettings:
    """The settings of ``cfg.stats``.

    Raises:
        ValueError: the group or a key is missing, a key is unknown, or a value is out of range
            (see :class:`~harness.evaluation.settings.StatsSettings`).
    """
    return StatsSettings.from_mapping(_group(cfg, "stats", STATS_FIELDS, "conf/config.yaml"))


@dataclass(frozen=True)
class RunSettings:
    """Where and how one run is recorded: ``resume`` and the ``tracking`` group.

    Attributes:
        resume: skip a job whose config hash already has a FINISHED run (``resume``).
        tracking_uri: the MLflow tracking URI (``tracking.uri``, else
            ``$MLFLOW_TRACKING_URI``, else the project's ``mlruns/mlflow.db``).
        experiment: MLflow experiment name (``tracking.experiment``, else the dataset name).
        run_name: MLflow run name (``tracking.run_name``, else e.g. ``recursive-254-0-faiss``).
        report: log ``report.html`` and the artifacts it reads (``tracking.report``, default true).
        metrics_mode: ``tracking.metrics``: ``headline`` logs the headline metrics as MLflow
            metrics and every value in the ``metrics.json`` table, ``all`` logs every value
            as an MLflow metric too (:mod:`harness.tracking.headline`).
        purpose: ``tracking.purpose``: None for an ordinary run, else the ``harness.purpose``
            tag (``gate``, ``bench``) that keeps the run out of ``harness compare``'s listing.

    Raises:
        ValueError: ``resume`` or ``tracking.report`` is not a boolean; ``metrics_mode`` is not
            ``headline`` or ``all``; ``purpose`` is neither None nor a non-empty string.
    """

    resume: bool
    tracking_uri: str
    experiment: str
    run_name: str
    report: bool = True
    metrics_mode: str = "headline"
    purpose: str | None = None

    def __post_init__(self) -> None:
        from harness.tracking.headline import check_mode

        if not isinstance(self.resume, bool):
            raise ValueError(f"resume must be true or false, got {self.resume!r}")
        if not isinstance(self.report, bool):
            raise ValueError(f"tracking.report must be true or false, got {self.report!r}")
        check_mode(self.metrics_mode)
        if self.purpose is not None and (not isinstance(self.purpose, str) or not self.purpose.strip()):
            raise ValueError(f"tracking.purpose must be null or a non-empty word such as gate or bench, got {self.purpose!r}")

    @classmethod
    def from_config(cls, cfg) -> RunSettings:
        """The settings of ``cfg`` (a composed config).

        Raises:
            ValueError: ``resume`` missing or not a boolean; ``tracking.metrics`` or ``tracking.purpose`` invalid.
        """
        from harness.experiment import build
        from harness.tracking.runs import experiment_name
        from harness.tracking.tracker import resolve_tracking_uri

        if "resume" not in cfg:
            raise ValueError("resume: missing; conf/config.yaml sets its default")
        return cls(
            resume=cfg.resume,
            tracking_uri=resolve_tracking_uri(cfg.tracking.uri, build.PROJECT_ROOT),
            experiment=experiment_name(cfg),
            run_name=cfg.tracking.run_name or build.run_name(cfg),
            report=cfg.tracking.get("report", True),
            metrics_mode=cfg.tracking.get("metrics", "headline"),
            purpose=cfg.tracking.get("purpose"),
        )
