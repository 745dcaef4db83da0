"""Golden returns-to-go of CORL's Cal-QL on sparse-reward data (tests/golden/
cal_ql_sparse_returns.json), for tests/test_cql.py.

Run in a side environment with CORL's own dependencies, outside the repository:

    python3 -m venv /work/side/venv && /work/side/venv/bin/pip install torch==2.13.0 numpy pyrallis
    git clone https://github.com/tinkoff-ai/CORL /work/side/CORL   # commit in offline_common
    /work/side/venv/bin/python benchmarks/parity/cal_ql_sparse_returns.py --corl /work/side/CORL

Imports CORL's ``algorithms/finetune/cal_ql.py`` by path and runs its ``modify_reward``
(antmaze: r <- 10 r - 5) and ``get_return_to_go`` on a small D4RL-style dataset of sparse
rewards (0 / 1, AntMaze's): episodes that reach the goal and terminate, ones that time
out without it (all rewards 0), one that succeeds at its last step by timing out, one that
succeeds early and then fails again (its last reward is the failure reward), and a single
step episode. Cases: ``is_sparse_reward`` true (CORL's antmaze configs) and false. The
dataset's rows (raw rewards, terminals, timeouts) are in the file, so the test rebuilds
the same data.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from offline_common import CORL_COMMIT, CORL_REPO, GOLDEN_DIR, load_script

# (length, reward of each step, terminal at the end): the episodes, in row order
EPISODES = [
    (4, [0, 0, 0, 1], True),  # reaches the goal, terminates
    (5, [0, 0, 0, 0, 0], False),  # times out without it
    (3, [0, 0, 1], False),  # at the goal on its last step, times out there
    (6, [0, 1, 1, 0, 0, 0], False),  # at the goal, then leaves it and times out
    (1, [0], False),  # a single step, no success
    (2, [1, 1], True),  # at the goal from the start
]
SCALE, BIAS, GAMMA = 10.0, -5.0, 0.99


def dataset_rows() -> dict[str, np.ndarray]:
    """D4RL ``qlearning_dataset`` arrays: observations continue inside an episode and jump
    between episodes (CORL's episode boundary test), timeouts mark the non-terminal ends."""
    obs, next_obs, rewards, terminals, timeouts = [], [], [], [], []
    position = 0.0
    for length, steps, terminal in EPISODES:
        position += 100.0  # a jump: a new episode
        for t in range(length):
            obs.append([position + t, 0.0])
            next_obs.append([position + t + 1, 0.0])
            rewards.append(steps[t])
            last = t == length - 1
            terminals.append(last and terminal)
            timeouts.append(last and not terminal)
    return {
        "observations": np.asarray(obs, np.float32),
        "next_observations": np.asarray(next_obs, np.float32),
        "actions": np.zeros((len(rewards), 1), np.float32),
        "rewards": np.asarray(rewards, np.float32),
        "terminals": np.asarray(terminals, np.float32),
        "timeouts": np.asarray(timeouts, np.float32),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corl", type=Path, required=True, help="a CORL checkout")
    parser.add_argument("--out", type=Path, default=GOLDEN_DIR / "cal_ql_sparse_returns.json")
    args = parser.parse_args()
    corl = load_script(args.corl, "algorithms/finetune/cal_ql.py", "corl_cal_ql")
    env = SimpleNamespace(_max_episode_steps=1000, ref_min_score=0.0)
    cases = {}
    for sparse in (True, False):
        rows = dataset_rows()
        corl.modify_reward(rows, "antmaze-umaze-v2", reward_scale=SCALE, reward_bias=BIAS)
        config = SimpleNamespace(is_sparse_reward=sparse, reward_scale=SCALE,
                                 reward_bias=BIAS, discount=GAMMA)  # fmt: skip
        returns = corl.get_return_to_go(rows, env, config)
        cases[f"sparse_{str(sparse).lower()}"] = [float(v) for v in returns]
    raw = dataset_rows()
    golden = {
        "meta": {"reference": f"{CORL_REPO}@{CORL_COMMIT}", "script": "algorithms/finetune/cal_ql.py",
                 "functions": ["modify_reward", "get_return_to_go"],
                 "command": " ".join(sys.argv), "reward_scale": SCALE, "reward_bias": BIAS,
                 "gamma": GAMMA, "ref_min_score": 0.0},
        "rows": {k: raw[k].tolist() for k in ("rewards", "terminals", "timeouts")},
        "mc_returns": cases,
    }  # fmt: skip
    args.out.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {args.out}: {len(raw['rewards'])} rows, cases {list(cases)}")


if __name__ == "__main__":
    main()
