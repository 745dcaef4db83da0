"""The same checkpoint acting (sampled) through ``rlcore.load_policy`` on rlcore's
training-form Breakout env (ale-py's vector env); prints the mean whole-game score.
Run with rlcore's venv: ``python rlcore_side.py <run dir> 60 100``."""

import sys

import numpy as np
import torch

from rlcore import load_policy
from rlcore.envs.make import make_vec_env

run, games, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(seed)
torch.set_num_threads(1)
policy = load_policy(run, deterministic=False)
env = make_vec_env("ALE/Breakout-v5", 8, seed=seed)
obs, _ = env.reset(seed=seed)
scores, steps = [], 0
while len(scores) < games:
    obs, _, _, _, info = env.step(policy(obs))
    steps += 8
    ended = np.asarray(info.get("game_return", np.full(8, np.nan)), dtype=float)
    scores += [float(x) for x in ended[~np.isnan(ended)]]
scores = np.array(scores[:games])
se = scores.std(ddof=1) / np.sqrt(games)
print(f"rlcore-ale games={games} mean={scores.mean():.2f} se={se:.2f} steps={steps}")
