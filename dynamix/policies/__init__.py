"""Batch-size policies behind one interface; importing this registers the built-in ones.

They sit on the window state (:mod:`dynamix.metrics.schema`), the config and the learning-rate rule
(:mod:`dynamix.train.optim`); the simulator, the engine, the gRPC arbitrator and the agent drive
them through :class:`BatchSizePolicy` alone.

Modules, in data-flow order (a window's state in, the next window's batch sizes out):

- ``base``        the interface (context, bounds, decision and its checks, foresight) and the
                  spec-string registry;
- ``timing``      per-worker affine iteration-time models fitted online from the observed windows;
- ``allocation``  equal-finish split of a global batch across workers (pure functions);
- ``static``      every worker at b for the whole run;
- ``ramp``        multiply b every N iterations or epochs instead of decaying the learning rate;
- ``lbbsp``       keep B, split it by fitted speed, behind a dead band;
- ``gns``         Pollux goodput from the gradient noise scale, the AdaScale learning-rate gain;
- ``oracle``      simulator only: split B by the true future speeds, the bound.

Spec strings (CLI ``--policy``, ``params.yaml`` ``policy.spec``, the arbitrator), arguments
optional, parsed by :meth:`~dynamix.policies.base.PolicySpec.parse`:

- ``static`` or ``static:64``: every worker at b (:mod:`.static`);
- ``lbbsp:deadband=0.05,history=8,decay=0.7``: keep B, split it by fitted speed (:mod:`.lbbsp`);
- ``gns:refit=50,gain=0.05,smoothing=0.98``: Pollux goodput with the AdaScale LR gain (:mod:`.gns`);
- ``ramp:factor=2,every=200`` or ``ramp:epochs=1``: multiply b every N iterations/epochs
  (:mod:`.ramp`);
- ``oracle:batch=256``: simulator only, splits B by the true future speeds (:mod:`.oracle`), the
  bound;
- ``dynamix:PATH``: the trained RL arbitrator (:mod:`dynamix.rl.policy`, registered lazily: the RL
  layer sits above this one).
"""

from dynamix.policies import gns, lbbsp, oracle, ramp, static  # noqa: F401
from dynamix.policies.base import (  # noqa: F401
    TRAINED,
    BatchSizePolicy,
    Bounds,
    Decision,
    PolicyContext,
    PolicySpec,
    check_live,
    known_policies,
    make_live_policy,
    make_policy,
    register,
    register_lazy,
)

register_lazy(TRAINED, "dynamix.rl.policy:DynamixPolicy")
