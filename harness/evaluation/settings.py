"""What is scored and how: the frozen settings objects of the evaluation layer.

:class:`MetricSettings` (the ``metrics`` config group) and :class:`StatsSettings` (the
``stats`` block) are plain frozen values that check their ranges on construction. They are
built from a composed config in one place, :mod:`harness.experiment.settings`
(``metric_settings(cfg)``, ``default_metric_settings(**changes)``, ``stats_settings(cfg)``),
which holds the defaults' file; this module sees no config object.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, fields
from typing import Any, Mapping

from harness.params import Param, check_all, is_int


def reject_unknown(name: str, given, keys: tuple[str, ...]) -> None:
    """Raise ``ValueError("<name>.<key>: unknown setting; did you mean <name>.<close>? (known: ...)")``
    for the first key of ``given`` not in ``keys``."""
    for key in given:
        if key not in keys:
            close = difflib.get_close_matches(str(key), keys, n=1)
            hint = f"; did you mean {name}.{close[0]}?" if close else ""
            raise ValueError(f"{name}.{key}: unknown setting{hint} (known: {', '.join(keys)})")


def _once(setting: str, values: tuple, what: str) -> None:
    """Refuse a list setting that holds a value twice: it would be logged as typed but run
    once (and change the config hash of what is the same run).

    Raises:
        ValueError: ``"metrics.ks lists 5 twice: [5, 1, 5]; list each cut-off once (the order is free)"``.
    """
    seen: set = set()
    for v in values:
        if v in seen:
            raise ValueError(f"{setting} lists {v!r} twice: {list(values)!r}; list each {what} once (the order is free)")
        seen.add(v)


#: The ``stats`` group's settings, as :class:`StatsSettings` checks them.
STATS_PARAMS = (
    Param("bootstrap", "int", low=0, note="0 = no confidence intervals", message="{name} must be {need}, got {value}"),
    Param("confidence", "number", low=0, high=1, low_open=True, high_open=True, noun="", message="{name} must be {need}, got {value}"),
    Param("seed", "int"),
)


@dataclass(frozen=True)
class MetricSettings:
    """What is scored and how: the ``metrics`` config group (``conf/metrics/default.yaml``).

    Attributes:
        ks: rank cut-offs for every ``<family>@k`` metric, each an integer >= 1, each listed
            once, in config order (retrieval fetches at least ``max(ks)`` chunks per query).
        relevance: chunk relevance rule of the chunk-qrels metrics, one of
            :data:`harness.evaluation.metrics.ranking.RELEVANCE_RULES`.
        relevance_fraction: ``f`` of the ``overlap_fraction`` rule, in [0, 1]: a chunk is
            relevant when its overlap with an evidence span is at least
            ``f * min(|chunk|, |span|)`` characters.
        budgets: context-token budgets ``B`` of ``recall@<B>tok`` (tokens of
            ``context_tokenizer``), each an integer >= 1 listed once; empty disables them.
        budget_depth: ranked chunks fetched for the budget metrics, an integer >= 1, or
            None for ``min(1000, 2 * ceil(max(budgets) / median chunk tokens))``.
        level: ``"chunk"``, or ``"document"`` to add ``doc_recall@k`` and ``doc_ndcg@k``.
        context_tokenizer: tokenizer of ``context_tokens@k`` and of the budgets:
            ``"model"`` (the embedding model's WordPiece) or a tiktoken encoding with an
            offline copy (:data:`harness.text.units.TIKTOKEN_OFFLINE`, e.g. ``cl100k_base``).
        objective: the metric a run returns to Hydra sweepers (e.g. ``recall@5``); its k
            must be in ``ks``, its budget in ``budgets``, a ``doc_*`` metric needs
            ``level="document"`` and a ``chroma_*`` one ``convention="chroma"``. None when
            nothing is optimised (library calls).
        convention: ``"harness"`` (our metrics only) or ``"chroma"`` (adds the
            ``chroma_recall@k``, ``chroma_precision@k``, ``chroma_iou@k`` and
            ``chroma_precision_omega`` of :mod:`harness.evaluation.metrics.chroma` beside
            ours, which never change).

    Raises:
        ValueError: on construction, a value outside the ranges above; the message names
            the ``metrics.<key>`` setting and the value received.
    """

    ks: tuple[int, ...]
    relevance: str
    relevance_fraction: float
    budgets: tuple[int, ...]
    budget_depth: int | None
    level: str
    context_tokenizer: str
    objective: str | None
    convention: str

    def __post_init__(self) -> None:
        from harness.evaluation.metrics.chroma import check_convention
        from harness.evaluation.metrics.ranking import check_relevance
        from harness.text.units import TIKTOKEN_OFFLINE

        ks, budgets, depth, fraction = self.ks, self.budgets, self.budget_depth, self.relevance_fraction
        if not ks or any(not is_int(k) or k < 1 for k in ks):
            raise ValueError(f"metrics.ks must be a non-empty list of integers >= 1, got {list(ks)!r}")
        _once("metrics.ks", ks, "cut-off")
        Param("relevance_fraction", "number", low=0, high=1, noun="").check(fraction, "metrics")
        check_relevance(self.relevance, fraction)
        if any(not is_int(b) or b < 1 for b in budgets):
            raise ValueError(f"metrics.budgets must be a list of integers >= 1, got {list(budgets)!r}")
        _once("metrics.budgets", budgets, "budget")
        Param("budget_depth", "int", low=1, allow_none=True).check(depth, "metrics")
        if self.level not in ("chunk", "document"):
            raise ValueError(f"metrics.level must be 'chunk' or 'document', got {self.level!r}")
        check_convention(self.convention)
        if self.objective is not None:
            unmet = self._unmet(self.objective, "metrics.objective: ")
            if unmet:
                raise ValueError(f"metrics.objective={self.objective!r} {unmet}")
        allowed = ["model", *TIKTOKEN_OFFLINE]
        if self.context_tokenizer not in allowed:
            raise ValueError(f"metrics.context_tokenizer must be one of {allowed}, got {self.context_tokenizer!r}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> MetricSettings:
        """The settings of a plain mapping holding every field (lists become tuples, an
        integer ``relevance_fraction`` a float); the builder from a composed config is
        :func:`harness.experiment.settings.metric_settings`.

        Raises:
            KeyError: a field is missing from ``data``.
            ValueError: a value out of range (see the class).
        """

        def seq(key: str) -> Any:
            value = data[key]
            return tuple(value) if isinstance(value, (list, tuple)) else value

        fraction, objective = data["relevance_fraction"], data["objective"]
        return cls(
            ks=seq("ks"),
            relevance=str(data["relevance"]),
            relevance_fraction=float(fraction) if is_int(fraction) else fraction,
            budgets=seq("budgets"),
            budget_depth=data["budget_depth"],
            level=str(data["level"]),
            context_tokenizer=str(data["context_tokenizer"]),
            objective=None if objective is None else str(objective),
            convention=str(data["convention"]),
        )

    def _unmet(self, name: str, prefix: str) -> str | None:
        """What ``name`` needs that these settings lack (``"needs k=7 in metrics.ks=[1, 5]"``), or None.

        Raises:
            ValueError: ``name`` is not a registered metric name (message starts with ``prefix``).
        """
        from harness.evaluation.metrics import parse_name

        try:
            parsed = parse_name(name)
        except ValueError as exc:
            raise ValueError(f"{prefix}{exc}") from exc
        if parsed.k is not None and parsed.k not in self.ks:
            return f"needs k={parsed.k} in metrics.ks={list(self.ks)}"
        if parsed.budget is not None and parsed.budget not in self.budgets:
            return f"needs {parsed.budget} in metrics.budgets={list(self.budgets)}"
        if parsed.family.level == "document" and self.level != "document":
            return "needs metrics.level=document"
        if parsed.family.convention != "harness" and parsed.family.convention != self.convention:
            return f"needs metrics.convention={parsed.family.convention}"
        return None

    def check_metric(self, name: str, field: str) -> None:
        """Raise when metric ``name`` (e.g. an objective of a search) cannot be produced
        with these settings; ``field`` starts the message (``"objectives"``).

        Raises:
            ValueError: ``"<field>: <why name is unknown>"`` or ``"<field>: 'recall@7' needs
                k=7 in metrics.ks=[1, 5]"`` (likewise for budgets, document metrics and
                ``chroma_*`` metrics, which need ``metrics.convention=chroma``).
        """
        unmet = self._unmet(name, f"{field}: ")
        if unmet:
            raise ValueError(f"{field}: {name!r} {unmet}")


#: The fields of :class:`MetricSettings`, in order: the keys of the ``metrics`` config group.
METRIC_FIELDS = tuple(f.name for f in fields(MetricSettings))


@dataclass(frozen=True)
class StatsSettings:
    """Confidence intervals of the mean metrics: the ``stats`` block of ``conf/config.yaml``.

    Attributes:
        bootstrap: bootstrap resamples per mean metric, an integer >= 0 (0: no
            ``<metric>_ci_low`` / ``_ci_high``).
        confidence: coverage of the intervals, in (0, 1) (0.95: a 95 % interval).
        seed: seed of the resampling and of the ``chunks_sample.jsonl`` draw (any integer).

    Raises:
        ValueError: on construction, a value outside the ranges above, naming ``stats.<key>``.
    """

    bootstrap: int
    confidence: float
    seed: int

    def __post_init__(self) -> None:
        check_all(STATS_PARAMS, {"bootstrap": self.bootstrap, "confidence": self.confidence, "seed": self.seed}, "stats")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> StatsSettings:
        """The settings of a plain mapping holding ``bootstrap``, ``confidence`` and ``seed``
        (an integer ``confidence`` becomes a float); the builder from a composed config is
        :func:`harness.experiment.settings.stats_settings`.

        Raises:
            KeyError: a field is missing from ``data``.
            ValueError: a value out of range (see the class).
        """
        c = data["confidence"]
        return cls(bootstrap=data["bootstrap"], confidence=float(c) if is_int(c) else c, seed=data["seed"])


#: The fields of :class:`StatsSettings`, in order: the keys of the ``stats`` config block.
STATS_FIELDS = tuple(f.name for f in fields(StatsSettings))
