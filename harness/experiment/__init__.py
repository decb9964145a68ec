"""Experiment layer: one run, from config to logged result.

Owns turning Hydra config into objects (:mod:`.build`, the one place that instantiates),
composing the config in-process (:mod:`.config`), the frozen settings objects built once
from it (:mod:`.settings`), the evaluation pipeline without Hydra and MLflow
(:mod:`.pipeline`: chunk, index, retrieve, score), the stages of one run (:mod:`.run`),
their timing marks (:mod:`.phases`), what a run's or sweep's report is built from
(:mod:`.report`) and the one-line configuration errors (:mod:`.errors`).

What runs *many* runs (the gate, Optuna, benchmarks, reproduction) lives one layer up in
:mod:`harness.studies`. May import every library layer below it (chunkers, datasets,
ingest, embeddings, retrievers, evaluation, reporting, tracking, cache, llm, text, types).
Imported by :mod:`harness.studies`, the commands (:mod:`harness.cli`), the scripts in
``experiments/`` and tests.
"""
