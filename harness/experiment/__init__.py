"""Experiment layer: one run from config to logged result, and what runs many of them.

Owns turning Hydra config into objects (:mod:`.build`), composing the config in-process
(:mod:`.config`), the frozen settings objects built once from it (:mod:`.settings`), the
evaluation pipeline (:mod:`.pipeline`: chunk, index, retrieve, score), the stages of one
run (:mod:`.run`), the release gate (:mod:`.gate`), Optuna search (:mod:`.tune`), the
speed benchmarks (:mod:`.bench`; :mod:`.bench_reference` against the plain script
:mod:`.reference_style`, which imports nothing from the harness) and the reproduction of published configurations
(:mod:`.reproduce`).

May import every library layer below it (chunkers, datasets, ingest, embeddings,
retrievers, evaluation, tracking, cache, llm, text, types). Imported only by commands
(:mod:`harness.cli`), the scripts in ``experiments/`` and tests.
"""
