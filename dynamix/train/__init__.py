"""The trainer: one optimisation step on any batch size (:mod:`.core`), the single-process training
loop (:mod:`.loop`), optimisers and schedules (:mod:`.optim`) and atomic checkpoints
(:mod:`.checkpoint`).

It sits on the data, the models and the gradient statistics (:mod:`dynamix.metrics.gradstats`); the
simulator and its calibration, the engine, the policies (the learning-rate rule), the agent and
``dynamix train`` use it.

Modules, in data-flow order (settings and batches in, a step, a run and its checkpoint out):

- ``device``      where the model math runs: ``train.device``, ``train.amp`` and
                  ``train.channels_last`` resolved once;
- ``optim``       optimisers and the learning-rate rule, evaluated every iteration;
- ``core``        the model math the engine and the simulator share: the weighted global gradient of
                  per-worker batches, then exactly one optimiser step;
- ``loop``        single-process training with a static batch size (``dynamix train``), the ground
                  truth the engine and the simulator are tested against;
- ``checkpoint``  atomic checkpoint writes and the check that a checkpoint belongs to this run.
"""
