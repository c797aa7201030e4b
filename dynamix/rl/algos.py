"""The learning algorithms: stable-baselines3 PPO (default) and the paper's simplified variant.

``ppo``: SB3 PPO (Schulman et al. 2017) with GAE advantages, clipped surrogate and a value baseline,
hyper-parameters from ``params.yaml`` ``rl:``.

``simple``: the paper's simplified policy-gradient update, "the policy is updated directly on the
cumulative reward, without clipping or advantage estimation". Per rollout, one gradient step on

    L(theta) = - mean_t [ G_t * log pi_theta(a_t | s_t) ]  -  c_ent * mean_t H(pi_theta(. | s_t))

where G_t = sum_{j>=0} gamma^j r_{t+j} is the discounted reward-to-go to the end of the episode
(REINFORCE, Williams 1992). It reuses PPO's rollout collection: with ``gae_lambda = 1`` SB3's
``returns`` are exactly G_t, except at a rollout cut inside an episode, where SB3 bootstraps with the
value head; that head is never trained here, so it stays near its initial ~0 output and the tail is
effectively truncated. No value loss, no ratio clipping, no advantage normalisation, one pass.
Same policy network and artifact format as PPO, so inference cannot tell them apart.
"""

from __future__ import annotations

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger

from dynamix.config import RLConfig


class SimplePG(PPO):
    """PPO's machinery with the simplified update (module docstring) in place of :meth:`PPO.train`."""

    def train(self) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        losses, entropies = [], []
        for data in self.rollout_buffer.get(batch_size=None):  # the whole rollout, once
            actions = data.actions.long().flatten()
            _, log_prob, entropy = self.policy.evaluate_actions(data.observations, actions)
            ent = entropy.mean() if entropy is not None else -log_prob.mean()
            loss = -(data.returns.flatten() * log_prob).mean() - self.ent_coef * ent
            self.policy.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()
            losses.append(float(loss.detach()))
            entropies.append(float(ent.detach()))
        self._n_updates += 1
        self.logger.record("train/policy_gradient_loss", sum(losses) / len(losses))
        self.logger.record("train/entropy", sum(entropies) / len(entropies))
        self.logger.record("train/n_updates", self._n_updates)


ALGOS: dict[str, type[PPO]] = {"ppo": PPO, "simple": SimplePG}


def make_algo(rl: RLConfig, env, seed: int) -> PPO:
    """A fresh learner for ``rl.algo`` on ``env`` (a :class:`~dynamix.rl.env.WorkerVecEnv`)."""
    n_rollout = rl.n_steps * env.num_envs
    kwargs = dict(
        learning_rate=rl.learning_rate, n_steps=rl.n_steps, batch_size=min(rl.batch_size, n_rollout),
        n_epochs=rl.n_epochs, gamma=rl.gamma, gae_lambda=rl.gae_lambda, clip_range=rl.clip_range,
        ent_coef=rl.ent_coef, vf_coef=rl.vf_coef,
        policy_kwargs={"net_arch": list(rl.net_arch)}, seed=seed, device="cpu", verbose=0,
    )
    if rl.algo == "simple":
        kwargs.update(gae_lambda=1.0, n_epochs=1, normalize_advantage=False)
    model = ALGOS[rl.algo]("MlpPolicy", env, **kwargs)
    model.set_logger(quiet_logger())
    return model


def quiet_logger() -> Logger:
    """A logger that writes nowhere: SB3's default creates an empty ``/tmp/SB3-<date>`` folder per learn()."""
    return Logger(folder=None, output_formats=[])
