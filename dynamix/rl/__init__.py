"""The DYNAMIX agent: state spec, reward, gymnasium environment, PPO training, policy artifacts."""
