"""How close the greedy policies of the 40-bit runs get to their goals (benchmarks/README.md,
"DQN + HER on the HER paper's bit flipping"): 30 episodes each, the Hamming distance at the
start, the closest reached and at the end.

    python benchmarks/results/her_bitflip/distance.py /work/runs/bitflip40/bitflipping
"""

import sys
from pathlib import Path

import numpy as np

import rlcore
from rlcore.envs.bitflip import BitFlippingEnv

for run in sorted(Path(sys.argv[1]).iterdir()):
    policy = rlcore.load_policy(run)
    env = BitFlippingEnv(40)
    starts, closest, reached = [], [], 0
    for episode in range(30):
        obs, _ = env.reset(seed=1000 + episode)
        distance = start = int((obs["achieved_goal"] != obs["desired_goal"]).sum())
        best = start
        for _ in range(40):
            action = int(np.asarray(policy({k: v[None] for k, v in obs.items()})).reshape(-1)[0])
            obs, _, terminated, truncated, _ = env.step(action)
            distance = int((obs["achieved_goal"] != obs["desired_goal"]).sum())
            best = min(best, distance)
            if terminated or truncated:
                break
        starts.append(start)
        closest.append(best)
        reached += best == 0
    print(f"{run.name}: start {np.mean(starts):.1f}, closest {np.mean(closest):.1f}, "
          f"reached {reached} of 30")
