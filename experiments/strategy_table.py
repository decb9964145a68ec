"""Print a markdown table of the latest FINISHED run per run name in an MLflow experiment.

Usage (after e.g. ``experiments/all_strategies.sh``)::

    python experiments/strategy_table.py --experiment chroma_general --metrics recall_at_5 iou_at_5 chunks.n_chunks
"""

from __future__ import annotations

import argparse

import mlflow

from harness.experiment.build import PROJECT_ROOT
from harness.tracking.tracker import resolve_tracking_uri


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--experiment", default="chroma_general")
    parser.add_argument("--tracking-uri", default=None)
    parser.add_argument("--metrics", nargs="+", default=["recall_at_5", "iou_at_5", "precision_at_5", "chunks.n_chunks"])
    parser.add_argument("--retriever", default=None, help="keep runs whose 'retriever' tag equals this")
    args = parser.parse_args()
    client = mlflow.MlflowClient(resolve_tracking_uri(args.tracking_uri, PROJECT_ROOT))
    exp = client.get_experiment_by_name(args.experiment)
    if exp is None:
        raise SystemExit(f"no experiment named {args.experiment!r}")
    runs = client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'", order_by=["attributes.start_time DESC"], max_results=5000)
    latest = {}
    for r in runs:
        if args.retriever and r.data.tags.get("retriever") != args.retriever:
            continue
        latest.setdefault(r.info.run_name, r)
    print("| run | " + " | ".join(args.metrics) + " |")
    print("|---|" + "---:|" * len(args.metrics))
    for name in sorted(latest):
        m = latest[name].data.metrics
        cells = [f"{m[k]:.4f}" if k in m and not k.startswith("chunks.n_") else (f"{int(m[k])}" if k in m else "") for k in args.metrics]
        print(f"| `{name}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
