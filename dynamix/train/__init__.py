"""The trainer: one optimisation step on any batch size (:mod:`.core`), the single-process training
loop (:mod:`.loop`), optimisers and schedules (:mod:`.optim`) and atomic checkpoints (:mod:`.checkpoint`)."""
