"""dynamix: RL-based adaptive batch sizes for distributed machine learning (see README.md)."""

from dynamix import isa

isa.pin()  # before torch computes anything: one instruction set for its CPU kernels (dynamix.isa)
