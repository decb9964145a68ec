"""Metrics: span metrics and rank metrics per query, their means, and MLflow-safe names.

Metric names follow the ``name@k`` convention (``recall@5``); :func:`mlflow_key` maps them
to MLflow-safe keys (``recall_at_5``) because MLflow rejects ``@``.
"""

from __future__ import annotations

import re

#: Registered metric families: name -> (range, one-line definition). See
#: :mod:`harness.metrics.ranking` for the formulas.
METRICS: dict[str, tuple[str, str]] = {
    "recall": ("[0, 1]", "evidence characters covered by the union of the top-k chunk spans / evidence characters"),
    "precision": ("[0, 1]", "evidence characters in the top-k union / characters in the top-k union"),
    "iou": ("[0, 1]", "|evidence ∩ top-k union| / |evidence ∪ top-k union| in characters"),
    "context_precision": ("[0, 1]", "Ragas rank-weighted precision: Σ P@i·v_i / #relevant in top k"),
    "mrr": ("[0, 1]", "1 / rank of the first relevant chunk within the top k, else 0"),
    "context_tokens": ("[0, ∞)", "tokens in the top-k chunks' texts (what a generator reads)"),
}

_NAME = re.compile(r"^(?P<name>[a-z_]+)@(?P<k>\d+)$")


def parse_metric(name: str) -> tuple[str, int]:
    """Split ``"recall@5"`` into ``("recall", 5)``.

    Raises:
        ValueError: not of the form ``<family>@<k>`` with a registered family and k >= 1.
    """
    m = _NAME.match(name)
    if not m or m["name"] not in METRICS or int(m["k"]) < 1:
        raise ValueError(f"unknown metric {name!r}; expected <family>@<k> with family in {sorted(METRICS)} and k >= 1")
    return m["name"], int(m["k"])


def mlflow_key(name: str) -> str:
    """MLflow-safe metric key: ``"recall@5"`` -> ``"recall_at_5"``; other names pass through
    with characters outside ``[A-Za-z0-9_./ -]`` replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9_./ -]", "_", name.replace("@", "_at_"))
