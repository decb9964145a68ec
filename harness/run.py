"""Entry point: ``python -m harness.run [overrides]`` runs one experiment and logs it to MLflow.

Examples::

    python -m harness.run                                   # defaults: kestrel_kb, recursive, faiss
    python -m harness.run chunker=semantic chunker.threshold=0.8
    python -m harness.run -m chunker=fixed,recursive chunker.chunk_size=200,400 retriever=faiss,bm25

Returns the objective metric (``metrics.objective``, default ``recall@5``) so Hydra
sweepers can optimise it. A run that raises is recorded in MLflow as FAILED with its error;
in a multirun the remaining jobs still run.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import hydra  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from harness.build import register_resolvers  # noqa: E402

register_resolvers()

#: Packages whose versions are recorded as tags on every run.
TRACKED_PACKAGES = (
    "harness",
    "torch",
    "sentence-transformers",
    "transformers",
    "faiss-cpu",
    "rank-bm25",
    "langchain-text-splitters",
    "hydra-core",
    "mlflow",
    "numpy",
    "pandas",
    "tiktoken",
    "blingfire",
)


def package_versions() -> dict[str, str]:
    """Installed versions of :data:`TRACKED_PACKAGES` (``"missing"`` when absent)."""
    from importlib import metadata

    out = {}
    for name in TRACKED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "missing"
    return out


def check_metrics_config(ks, relevance_fraction: float, objective: str, context_tokenizer: str) -> None:
    """Validate the ``metrics`` config group before any work.

    Raises:
        ValueError: ``metrics.ks`` empty or with a value < 1; ``metrics.relevance_fraction``
            outside [0, 1]; ``metrics.objective`` not a registered ``<family>@<k>`` or its k
            not in ``metrics.ks``; ``metrics.context_tokenizer`` unknown.
    """
    from harness.chunkers.units import TIKTOKEN_OFFLINE
    from harness.metrics import parse_metric

    if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
        raise ValueError(f"metrics.ks must be a non-empty list of integers >= 1, got {list(ks)!r}")
    if not 0.0 <= relevance_fraction <= 1.0:
        raise ValueError(f"metrics.relevance_fraction must be in [0, 1], got {relevance_fraction!r}")
    try:
        _, k = parse_metric(objective)
    except ValueError as exc:
        raise ValueError(f"metrics.objective: {exc}") from exc
    if k not in ks:
        raise ValueError(f"metrics.objective={objective!r} needs k={k} in metrics.ks={list(ks)}")
    allowed = ["model", *TIKTOKEN_OFFLINE]
    if context_tokenizer not in allowed:
        raise ValueError(f"metrics.context_tokenizer must be one of {allowed}, got {context_tokenizer!r}")


def execute(cfg: DictConfig) -> dict:
    """Run one configured experiment and log it; returns ``{"run_id", "metrics", "evaluation"}``.

    Order: open the MLflow run, validate and build the chunker and retriever (cheap; bad
    parameters fail here, before any model or dataset is loaded), load and verify the
    dataset, then chunk, embed, index, search, score and log. Any exception marks the
    MLflow run FAILED with the error and is re-raised.
    """
    from harness import build
    from harness.chunkers.units import get_counter
    from harness.pipeline import evaluate
    from harness.tracking import Tracker, artifact_root_for, flatten, resolve_tracking_uri

    t_start = time.perf_counter()
    resolved = build.to_container(cfg)
    ks = list(cfg.metrics.ks)
    objective = str(cfg.metrics.objective)

    uri = resolve_tracking_uri(cfg.tracking.uri, build.PROJECT_ROOT)
    experiment = cfg.tracking.experiment or cfg.dataset.name
    tracker = Tracker(uri, experiment, artifact_root_for(uri, build.PROJECT_ROOT))
    name = cfg.tracking.run_name or build.run_name(cfg)
    tags = {"config_hash": build.config_hash(cfg)}
    tags.update({f"version.{k}": v for k, v in package_versions().items()})
    with tracker.run(name, tags=tags):
        # Fail fast on bad parameters, before any model or dataset is loaded; the error
        # is still recorded on this (FAILED) run.
        check_metrics_config(ks, float(cfg.metrics.relevance_fraction), objective, str(cfg.metrics.context_tokenizer))
        encoder = build.build_encoder(cfg)
        chunker = build.build_chunker(cfg, encoder)
        retriever = build.build_retriever(cfg, encoder)
        context_counter = get_counter("tokens", str(cfg.metrics.context_tokenizer))
        tracker.set_tags({"chunker": chunker.name, "retriever": retriever.name})
        tracker.log_params(flatten({k: v for k, v in resolved.items() if k != "paths"}))
        tracker.log_text(OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")
        timings = {}
        t0 = time.perf_counter()
        dataset = build.build_dataset(cfg)
        timings["load"] = time.perf_counter() - t0
        tracker.set_tags(
            {
                "dataset": dataset.name,
                "dataset_fingerprint": dataset.fingerprint(),
                "dataset_source": dataset.source,
                "n_documents": len(dataset.documents),
                "n_queries": len(dataset.queries),
            }
        )
        ev = evaluate(
            dataset,
            chunker,
            retriever,
            ks=ks,
            relevance_fraction=float(cfg.metrics.relevance_fraction),
            context_token_counter=context_counter.count,
            chunk_token_counter=encoder.count_tokens,
            max_seq_length=encoder.max_seq_length if retriever.needs_encoder or chunker.needs_encoder else None,
            progress=bool(cfg.embedding.show_progress),
        )
        timings.update(ev.timings)
        t0 = time.perf_counter()
        tracker.log_metrics(ev.metrics)
        tracker.log_metrics({f"chunks.{k}": v for k, v in ev.chunk_stats.items()})
        for k in ks:  # the recall@k curve: one series drawn against step=k
            tracker.log_metrics({"recall_curve": ev.metrics[f"recall@{k}"]}, step=k)
        tracker.log_dataframe_csv(ev.per_query, "per_query.csv")
        tracker.log_text(_json(ev.chunk_stats), "chunk_stats.json")
        tracker.log_text(ev.table().to_string(float_format=lambda v: f"{v:.4f}"), "results.txt")
        timings["log"] = time.perf_counter() - t0
        timings["total"] = time.perf_counter() - t_start
        tracker.log_metrics({f"time.{k}_s": v for k, v in timings.items()})
        run_id = tracker.run_id
    _print_summary(name, experiment, uri, run_id, ev)
    return {"run_id": run_id, "metrics": ev.metrics, "evaluation": ev, "objective": ev.metrics[objective]}


def _json(obj) -> str:
    import json

    return json.dumps(obj, indent=2, sort_keys=True, default=float)


def _print_summary(name, experiment, uri, run_id, ev) -> None:
    table = ev.table().to_string(float_format=lambda v: f"{v:.4f}")
    stats = ev.chunk_stats
    print(f"\nrun {name}  (experiment {experiment!r})")
    print(
        f"chunks: {int(stats['n_chunks'])}, mean {stats['chars_mean']:.0f} chars"
        + (f" / {stats['tokens_mean']:.0f} model tokens" if "tokens_mean" in stats else "")
        + (f"; {int(stats['n_truncated'])} exceed the model's {int(stats['max_seq_length'])}-token window" if "n_truncated" in stats else "")
    )
    print(table)
    print(f"MLflow run id: {run_id}")
    print(f"tracking URI:  {uri}\n")
    sys.stdout.flush()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    """Hydra entry point; returns the objective metric value."""
    return float(execute(cfg)["objective"])


if __name__ == "__main__":
    main()
