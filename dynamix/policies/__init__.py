"""Batch-size policies behind one interface; importing this registers the built-in ones."""

from dynamix.policies import gns, lbbsp, ramp, static  # noqa: F401
from dynamix.policies.base import (  # noqa: F401
    BatchSizePolicy,
    Bounds,
    Decision,
    PolicyContext,
    known_policies,
    make_policy,
    register,
)
