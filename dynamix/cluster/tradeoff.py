"""How much a cluster rewards larger batches: the trade-off index.

    index = throughput(every worker at b_large) / throughput(every worker at b_small)

throughput being samples per second of the whole cluster, N b / T(b, ..., b), with T the cost model's
iteration time (:mod:`dynamix.cluster.costmodel`). An index near 1 means hardware efficiency does not
depend on the batch (compute linear in b, communication negligible): the smallest batch split by speed
is then optimal and there is nothing for a policy to trade. An index of 2 or more means a larger batch
buys hardware efficiency (a device's fixed cost per iteration, or communication paid once per
iteration) at the price of statistical efficiency, which is the regime the paper's claims are about.

:func:`nominal_index` reads the spec's nominal speeds and bandwidths (no events, stragglers or jitter);
the published index of a held-out cluster is measured from its static sweep instead
(:func:`dynamix.experiments.inference.cluster_table`).
"""

from __future__ import annotations

import numpy as np

from dynamix.cluster.costmodel import CostModel
from dynamix.cluster.spec import ClusterSpec


def nominal_throughput(spec: ClusterSpec, cost: CostModel, batch: int) -> float:
    """Samples per second with every worker at ``batch``, at nominal speeds and bandwidths."""
    n = spec.n_workers
    b = np.full(n, float(batch))
    speeds = np.array(spec.speeds, float)
    bw = np.array([w.bandwidth_gbps for w in spec.workers], float)
    lat = np.array([w.latency_ms for w in spec.workers], float)
    fixed = np.array([w.device.fixed_ms for w in spec.workers], float)
    t = cost.iteration(b, speeds, bw, lat, spec.architecture, fixed)
    return n * batch / (t.iter_ms / 1e3)


def nominal_index(spec: ClusterSpec, cost: CostModel, small: int, large: int) -> float:
    """The trade-off index of ``spec`` between per-worker batches ``small`` and ``large``."""
    if not 0 < small < large:
        raise ValueError(f"trade-off index needs 0 < small < large: got small = {small}, large = {large}")
    return nominal_throughput(spec, cost, large) / nominal_throughput(spec, cost, small)
