"""The extracted weights acting (sampled) with CleanRL's own ``Agent`` on envpool's Breakout-v5,
made and wrapped as ``ppo_atari_envpool.py`` makes it; prints the mean whole-game score.
Run with the side venv: ``PYTHONPATH=<cleanrl@fe8d8a0> python cleanrl_side.py s1.pt 60 100``."""

import sys

import envpool
import numpy as np
import torch
from cleanrl.ppo_atari_envpool import Agent, RecordEpisodeStatistics  # its __main__ is guarded

weights, games, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(seed)
torch.set_num_threads(1)
envs = envpool.make(
    "Breakout-v5", env_type="gym", num_envs=8, episodic_life=True, reward_clip=True, seed=seed
)
envs.num_envs = 8
envs.single_action_space = envs.action_space
envs.single_observation_space = envs.observation_space
envs = RecordEpisodeStatistics(envs)
agent = Agent(envs)
agent.load_state_dict(torch.load(weights))
obs = torch.Tensor(envs.reset())
scores, steps = [], 0
while len(scores) < games:
    with torch.no_grad():
        action, _, _, _ = agent.get_action_and_value(obs)
    obs, _, done, info = envs.step(action.numpy())
    obs = torch.Tensor(obs)
    steps += 8
    scores += [float(info["r"][i]) for i, d in enumerate(done) if d and info["lives"][i] == 0]
scores = np.array(scores[:games])
se = scores.std(ddof=1) / np.sqrt(games)
print(f"cleanrl-envpool games={games} mean={scores.mean():.2f} se={se:.2f} steps={steps}")
