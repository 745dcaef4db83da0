"""Golden returns-to-go of WSRL's Cal-QL pre-training on sparse-reward data (tests/golden/
wsrl_sparse_returns.json), for tests/test_cql.py.

    git -C <fetched github:zhouzypaul/wsrl> archive HEAD wsrl/envs/env_common.py \\
        | tar -x -C /work/side/wsrl
    python benchmarks/parity/wsrl_sparse_returns.py --wsrl /work/side/wsrl

Imports the reference's ``wsrl/envs/env_common.py`` by path (its imports of d4rl, gym,
mj_envs, absl and the env wrappers stubbed: ``calc_return_to_go`` uses none of them) and
runs ``calc_return_to_go`` episode by episode, as ``wsrl/envs/d4rl_dataset.py`` does
(rewards already 10 r - 5, masks 1 - terminal, ``reward_scale`` / ``reward_bias`` naming
the failure reward), on the rows of benchmarks/parity/cal_ql_sparse_returns.py (AntMaze's
0 / 1 rewards: episodes that reach the goal, time out without it, reach it and leave).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
from cal_ql_sparse_returns import BIAS, GAMMA, SCALE, dataset_rows
from offline_common import GOLDEN_DIR

REPO, COMMIT = "zhouzypaul/wsrl", "891ee353afe5303835da421c60d4ac35f6e2ef10"
ENV_NAME = "antmaze-umaze-v2"


def load_env_common(root: Path) -> types.ModuleType:
    """The reference's env_common module, its unused imports stubbed."""
    for name in ("d4rl", "gym", "mj_envs", "absl", "wsrl", "wsrl.envs"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["absl"].flags = types.SimpleNamespace(FLAGS=None)
    wrappers = types.ModuleType("wsrl.envs.wrappers")
    for name in ("AdroitTerminalWrapper", "KitchenTerminalWrapper", "ScaledRewardWrapper",
                 "TruncationWrapper"):  # fmt: skip
        setattr(wrappers, name, object)
    sys.modules["wsrl.envs.wrappers"] = wrappers
    path = root / "wsrl" / "envs" / "env_common.py"
    spec = importlib.util.spec_from_file_location("wsrl_env_common", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wsrl", type=Path, required=True, help="a wsrl checkout (or its file)")
    parser.add_argument("--out", type=Path, default=GOLDEN_DIR / "wsrl_sparse_returns.json")
    args = parser.parse_args()
    env_common = load_env_common(args.wsrl)
    rows = dataset_rows()
    rewards = rows["rewards"].astype(np.float64) * SCALE + BIAS
    ends = np.flatnonzero((rows["terminals"] > 0) | (rows["timeouts"] > 0))
    returns, start = [], 0
    for end in ends:
        episode = slice(start, end + 1)
        returns += env_common.calc_return_to_go(
            ENV_NAME, rewards[episode], 1.0 - rows["terminals"][episode], GAMMA, SCALE, BIAS
        ).tolist()
        start = end + 1
    golden = {
        "meta": {"reference": f"github.com/{REPO}@{COMMIT}", "script": "wsrl/envs/env_common.py",
                 "functions": ["calc_return_to_go"], "env_name": ENV_NAME,
                 "command": " ".join(sys.argv), "reward_scale": SCALE, "reward_bias": BIAS,
                 "gamma": GAMMA},
        "rows": {k: rows[k].tolist() for k in ("rewards", "terminals", "timeouts")},
        "mc_returns": [float(v) for v in returns],
    }  # fmt: skip
    args.out.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {args.out}: {len(returns)} rows")


if __name__ == "__main__":
    main()
