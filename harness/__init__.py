"""harness: an end-to-end RAG experimentation harness for chunking.

Layers, top to bottom (a layer imports only layers below it; see docs/architecture.md):

- :mod:`harness.cli` -- thin commands (``harness run|compare|check|tune|bench|generate|
  server|cache|datasets``); a command never imports another command.
- :mod:`harness.experiment` -- config to objects, the stages of one run, the release gate,
  Optuna search, benchmarks.
- library layers -- :mod:`harness.evaluation` (metrics, statistics, diagnostics),
  :mod:`harness.tracking` (every MLflow call), :mod:`harness.chunkers`,
  :mod:`harness.retrievers`, :mod:`harness.embeddings`, :mod:`harness.datasets`,
  :mod:`harness.ingest`, :mod:`harness.cache`, :mod:`harness.llm`.
- :mod:`harness.text` -- units, sentences, blocks, packing, alignment: character spans.
- :mod:`harness.types` -- Document, Chunk, Query, Span and the other core types.

Importing the package has no side effects (no environment variables set, no model loaded).
"""
