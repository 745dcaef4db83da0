"""Golden trajectories of NeoRL-2's DMSD, Pipeline, RandomFrictionHopper and
SafetyHalfCheetah (tests/golden/neorl2.json), for tests/test_neorl2.py.

Run in a side environment with gymnasium 0.29, mujoco, numpy, torch and matplotlib, outside the
repository, on a snapshot of polixir/NeoRL2 (``COMMIT``; its reward modules, which the
``neorl2`` 0.0.1 wheel lacks, are in the repository)::

    /work/side/neorl2/venv/bin/python benchmarks/parity/neorl2_reference.py \\
        --neorl2 <folder holding the neorl2 package of the snapshot>

Steps the reference envs (``DoubleMassSpringDamperEnv(mode="train")``, ``PipelineEnv``,
no TimeLimit) from seeded resets with float32 actions drawn from numpy seed 1, and writes
every observation (Pipeline: its first two entries, and the last observation whole) and
reward: DMSD 2 episodes of 100 steps (seeds 0 and 7), Pipeline 2
episodes of 300 (seeds 0 and 3; its target is set to None before each reset so the first
target follows the seed: our departure, listed in envs/neorl2.py), RandomFrictionHopper 3
episodes until they end (seeds 0, 5, 9; its friction drawn from Python's ``random`` seeded
with the seed, recorded so the test sets it: our env draws it from its own generator),
SafetyHalfCheetah 2 episodes of 300 (seeds 0, 4), each observation whole.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

COMMIT = "b50d91d"
OUT = Path(__file__).resolve().parents[2] / "tests" / "golden" / "neorl2.json"
CASES = {
    "dmsd": ((0, 7), 100, 2),
    "pipeline": ((0, 3), 300, 1),  # seeds, steps, action dim
    "randomfrictionhopper": ((0, 5, 9), 300, 3),
    "safetyhalfcheetah": ((0, 4), 300, 6),
}
WIDTH = {"dmsd": 6, "pipeline": 2, "randomfrictionhopper": 13, "safetyhalfcheetah": 18}


def rounded(values: np.ndarray) -> list[float]:
    return [float(f"{x:.9g}") for x in np.asarray(values, np.float64).ravel()]


def actions(steps: int, dim: int, seed: int) -> np.ndarray:
    """Actions in [-1.2, 1.2] (some clipped), float32: the same for both sides."""
    return np.random.default_rng(seed).uniform(-1.2, 1.2, (steps, dim)).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--neorl2", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    sys.path.insert(0, str(args.neorl2.resolve()))
    import random  # noqa: PLC0415

    from neorl2.envs.dmsd import DoubleMassSpringDamperEnv  # noqa: PLC0415
    from neorl2.envs.pipline import PipelineEnv  # noqa: PLC0415
    from neorl2.envs.randomfrictionhopper import RandomFrictionHopperEnv  # noqa: PLC0415
    from neorl2.envs.safetyhalfcheetah import SafetyHalfCheetahEnv  # noqa: PLC0415

    golden: dict = {"reference": f"github.com/polixir/NeoRL2@{COMMIT}", "cases": {}}
    makers = {"dmsd": lambda: DoubleMassSpringDamperEnv(mode="train"), "pipeline": PipelineEnv,
              "randomfrictionhopper": lambda: RandomFrictionHopperEnv(random_friction=True),
              "safetyhalfcheetah": SafetyHalfCheetahEnv}  # fmt: skip
    for name, (seeds, steps, dim) in CASES.items():
        env = makers[name]()
        episodes = []
        for seed in seeds:
            if name == "pipeline":
                env.target_flow_rate = None
            random.seed(seed)  # RandomFrictionHopper's friction
            obs, info = env.reset(seed=seed)
            # Pipeline: its flows and target each step (the rest of an observation is
            # their history), and the last observation whole
            width = WIDTH[name]
            observations, rewards, ends = [rounded(obs[:width])], [], []
            for action in actions(steps, dim, seed + 1):
                obs, reward, terminated, truncated, _ = env.step(action)
                assert not truncated and (not terminated or name == "randomfrictionhopper")
                observations.append(rounded(obs[:width]))
                rewards.append(float(f"{float(reward):.9g}"))
                ends.append(bool(terminated))
                if terminated:
                    break
            episode = {"seed": seed, "obs": observations, "reward": rewards,
                       "last_obs": rounded(obs), "terminated": ends}  # fmt: skip
            if name == "randomfrictionhopper":
                episode["friction"] = float(info["friction"])
            episodes.append(episode)
        golden["cases"][name] = episodes
    args.out.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e3:.0f} KB)")


if __name__ == "__main__":
    main()
