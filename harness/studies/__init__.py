"""Studies layer: what runs many runs over the single-run core of :mod:`harness.experiment`.

The release gate (:mod:`.gate`), Optuna search (:mod:`.tune`), the speed benchmarks
(:mod:`.bench`; :mod:`.bench_reference` against the plain script :mod:`.reference_style`,
which imports nothing from the harness; :mod:`.bench_scale` over scaled corpora), the
reproduction of published configurations (:mod:`.reproduce`) and the dataset label audit
(:mod:`.audit`); the grid sweeper of ``harness run -m``, exact or screened by a cheap proxy
(:mod:`.screen`, loaded by Hydra through ``hydra_plugins/harness_sweeper``), and its
benchmark (:mod:`.bench_screen`).

Rule: ``cli → studies → experiment → components → text → types``. Imported only by the
commands (:mod:`harness.cli`), the scripts in ``experiments/`` and tests.
"""
