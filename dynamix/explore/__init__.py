"""Interactive exploration: the playground notebook's code (``notebooks/explore.ipynb``).

- :mod:`~dynamix.explore.session`: a cluster, policies and a workload -> simulated runs, through the
  evaluation runner (same budget, cache and time to target as every experiment);
- :mod:`~dynamix.explore.results`: a finished run folder (``runs.csv`` + ``summary.csv``) as a
  :class:`~dynamix.explore.results.RunSet`, the one thing every view reads;
- :mod:`~dynamix.explore.views`: the figures (cluster, accuracy against time, batch sizes, iteration
  time split) and the time-to-target table;
- :mod:`~dynamix.explore.widgets`: the ipywidgets controls around them.

Layer: the top, beside :mod:`dynamix.cli`; it may import any other part of dynamix, nothing imports it.
"""
