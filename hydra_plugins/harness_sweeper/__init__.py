"""The harness grid sweeper as Hydra loads it: Hydra instantiates sweepers only from its
``hydra_plugins`` namespace package, so this module names the class
(``hydra.sweeper._target_: hydra_plugins.harness_sweeper.HarnessSweeper``,
``conf/hydra/sweeper/harness.yaml``); the code is :mod:`harness.studies.screen`."""

from harness.studies import screen


class HarnessSweeper(screen.GridSweeper):
    """:class:`harness.studies.screen.GridSweeper`: the exact grid (default) or a screening sweep (``sweep.screen``)."""
