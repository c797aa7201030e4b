"""The DYNAMIX agent: state spec, reward, gymnasium environment, PPO training, policy artifacts.

It sits on the simulator (:mod:`dynamix.sim`: the real-math virtual cluster or the fitted surrogate),
the policies and the cluster spec; ``dynamix train-policy``, the evaluation (a trained agent as
``dynamix:PATH``) and the experiments use it. The agent's manual: ``docs/rl.md``.

Modules, in data-flow order (training clusters in, a trained policy and its decisions out):

- ``domain``     domain randomisation: the distribution of training (and validation) clusters;
- ``state``      the versioned state spec: each worker's observation at a window's end;
- ``actions``    what a decision moves (``rl.action``): each worker's batch, or the global one;
- ``reward``     the per-worker, per-window reward and how windows sum into a return;
- ``env``        one episode = one simulated training run (learning as ``sim.backend`` models it):
                 the gymnasium environment and the per-worker ``VecEnv`` PPO trains on;
- ``learner``    stable-baselines3 PPO, built from a recipe of plain numbers (what an artifact records);
- ``warmstart``  imitation of an LB-BSP teacher before PPO (``rl.warm_start``);
- ``learn``      the agent's training run (``dynamix train-policy``): resumable checkpoints,
                 progress, the artifact (the model's own training loop is :mod:`dynamix.train`);
- ``artifact``   policy artifacts (``.zip`` tensors + ``.json`` metadata), saved and checked;
- ``policy``     ``dynamix:PATH``: a trained agent as a deterministic ``BatchSizePolicy``.
"""
