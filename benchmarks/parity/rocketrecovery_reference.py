"""Golden trajectories of NeoRL-2's RocketRecovery (tests/golden/rocketrecovery.json), for
tests/test_neorl2.py.

Run in a side environment with gymnasium 0.29.1, box2d 2.3.10 and numpy 1.26 (the
reference's float32 engine impulses are refused by Box2D under numpy 2), outside the
repository, on a snapshot of polixir/NeoRL2 (``COMMIT``)::

    python -m venv side && side/bin/pip install "numpy<2" gymnasium==0.29.1 box2d==2.3.10
    side/bin/python benchmarks/parity/rocketrecovery_reference.py \\
        --neorl2 <folder holding the neorl2 package of the snapshot> \\
        [--released <RocketRecovery-high-20000-val.npz>]

Steps ``RocketRecoveryEnv(render_mode=None, mode=...)`` (no TimeLimit) from seeded resets
with its wind offset set before each reset (``CASES``: the test passes it as
``options={"wind": k}``) and float32 actions drawn from numpy seed ``seed + 1`` in
[-1.2, 1.2] (clipped by the env; both engines on and off), until the rocket is down or
500 steps; two episodes of a case share one env (the reference reuses its Box2D world;
ours builds a new one). Writes every observation, reward and terminal flag. The reward
module imports torch and uses it only for tensors: a stub stands in for it.

``--released`` (polixir/neorl2_dataset's released validation data,
``scripts/dataset/RocketRecovery/``; its training file is not in the repository) adds
its first two trajectories: trajectory i was recorded from ``reset(seed=i)`` (the data
code's rule), with the wind offset that reproduces its first two wind readings (unique in
-9999..9998); the script checks that the reference replays them exactly from their
actions before writing them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import types
from pathlib import Path

import numpy as np

COMMIT = "b50d91d"
OUT = Path(__file__).resolve().parents[2] / "tests" / "golden" / "rocketrecovery.json"
CASES = (  # mode, seeds (one env, in order), wind offsets
    ("train", (0, 4), (123, -4567)),
    ("val", (9,), (9000,)),
)
RELEASED = (0, 1)  # the validation file's first two trajectories


def actions(seed: int, steps: int = 500) -> np.ndarray:
    return np.random.default_rng(seed + 1).uniform(-1.2, 1.2, (steps, 2)).astype(np.float32)


def episode(env, seed: int, wind: int, moves: np.ndarray) -> dict:  # noqa: ANN001
    env.wind_idx, env.torque_idx = wind, 0
    obs, _ = env.reset(seed=seed)
    record = {"seed": seed, "wind": wind, "obs": [obs.tolist()], "reward": [], "terminated": []}
    for action in moves:
        obs, reward, terminated, _, _ = env.step(action)
        record["obs"].append(obs.tolist())
        record["reward"].append(float(reward))
        record["terminated"].append(bool(terminated))
        if terminated:
            break
    record["actions"] = moves[: len(record["reward"])].tolist()
    return record


def wind_offset(first: float, second: float) -> int:
    def wind(k: int) -> np.float32:
        return np.float32(math.tanh(math.sin(0.02 * k) + math.sin(math.pi * 0.01 * k)) * 10.0)

    found = [k for k in range(-9999, 9999) if wind(k) == first and wind(k + 1) == second]
    assert len(found) == 1, found
    return found[0]


def released(path: Path, make) -> list[dict]:  # noqa: ANN001
    data = np.load(path)
    ends = np.flatnonzero(np.logical_or(data["done"], data["truncated"]))
    out = []
    for index in RELEASED:
        start, end = (0 if index == 0 else ends[index - 1] + 1), ends[index] + 1
        obs = data["obs"][start:end]
        wind = wind_offset(obs[0, 6], obs[1, 6])
        record = episode(make("train"), index, wind, data["action"][start:end])
        assert np.array_equal(np.asarray(record["obs"][:-1], np.float32), obs)
        assert np.array_equal(
            np.asarray(record["obs"][1:], np.float32), data["next_obs"][start:end]
        )
        assert np.array_equal(np.float32(record["reward"]), data["reward"][start:end])
        out.append(record)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--neorl2", type=Path, required=True)
    parser.add_argument("--released", type=Path)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    sys.modules.setdefault("torch", types.ModuleType("torch"))  # imported, used for tensors
    sys.path.insert(0, str(args.neorl2))
    from neorl2.envs.rocketrecovery import RocketRecoveryEnv  # noqa: PLC0415

    def make(mode: str):  # noqa: ANN202
        return RocketRecoveryEnv(render_mode=None, mode=mode)

    golden = {"commit": COMMIT, "numpy": np.__version__, "cases": []}
    for mode, seeds, winds in CASES:
        env = make(mode)
        for seed, wind in zip(seeds, winds, strict=True):
            golden["cases"].append({"mode": mode, **episode(env, seed, wind, actions(seed))})
    if args.released:
        golden["released"] = released(args.released, make)
    args.out.write_text(json.dumps(golden, separators=(",", ":")))
    lengths = [len(case["reward"]) for case in golden["cases"] + golden.get("released", [])]
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes): episodes of {lengths} steps")


if __name__ == "__main__":
    main()
