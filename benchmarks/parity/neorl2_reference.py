"""Golden trajectories of NeoRL-2's DMSD, Pipeline, RandomFrictionHopper,
SafetyHalfCheetah and Simglucose (tests/golden/neorl2.json), for tests/test_neorl2.py.

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
SafetyHalfCheetah 2 episodes of 300 (seeds 0, 4), each observation whole; Simglucose
(``SimglucoseEnv(mode="train")``) 2 episodes of 480 steps with basal actions in
[-1, -0.98] (seeds 0, 3) and one with actions in [-1.2, 1.2] until it ends (seed 5), its
patient and start hour drawn from numpy's global state seeded with the seed and recorded
(the test sets them: our env draws them from its own generator), the sensor reading of
every observation and the last observation whole. The vendored simglucose needs two
adaptations to run on numpy 2 / pandas 3, made here at run time: the patient's initial
state as a float array (the reference indexes a pandas row by position) and the action
as a float after the reference's own float32 arithmetic (numpy 2 refuses a 1-element
array in the model's state vector); ``pkg_resources`` (imported, unused) is stubbed.

``--released <Simglucose-high-100000-train.npz>`` (polixir/neorl2_dataset's released
training data, ``scripts/dataset/Simglucose/``) adds one of the authors' trajectories
(``RELEASED``: its patient read from the observation's parameters; the start hour, which
the file does not hold, is the one under which the reference env reproduces its readings:
the day's meals make it unique)
with its actions, readings, rewards and terminal flag.
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
    "simglucose": ((0, 3, 5), 480, 1),
}
WIDTH = {"dmsd": 6, "pipeline": 2, "randomfrictionhopper": 13, "safetyhalfcheetah": 18,
         "simglucose": 1}  # fmt: skip
SMALL_BASAL_SEEDS = (0, 3)  # Simglucose: actions in [-1, -0.98] (basal <= 0.05 U/min)
RELEASED = 0  # the released file's first trajectory: adult#001, a whole day (6 meals)


def rounded(values: np.ndarray) -> list[float]:
    return [float(f"{x:.9g}") for x in np.asarray(values, np.float64).ravel()]


def actions(steps: int, dim: int, seed: int, low: float = -1.2, high: float = 1.2) -> np.ndarray:
    """Actions in [low, high] (some clipped by default), float32: the same for both sides."""
    return np.random.default_rng(seed).uniform(low, high, (steps, dim)).astype(np.float32)


def simglucose_actions(seed: int) -> np.ndarray:
    """Simglucose's actions of the episode of ``seed``."""
    if seed in SMALL_BASAL_SEEDS:
        return actions(CASES["simglucose"][1], 1, seed + 1, -1.0, -0.98)
    return actions(CASES["simglucose"][1], 1, seed + 1)


def adapt_simglucose() -> None:
    """The run-time adaptations of the vendored simglucose (module docstring)."""
    import types  # noqa: PLC0415

    sys.modules.setdefault("pkg_resources", types.ModuleType("pkg_resources"))
    from neorl2.envs import simglucose  # noqa: PLC0415
    from neorl2.envs.data.simglucose.patient.t1dpatient import T1DPatient  # noqa: PLC0415

    init = T1DPatient.__init__

    def with_float_state(self, params, init_state=None, **kw) -> None:  # noqa: ANN001
        state = params.iloc[2:15].to_numpy(dtype=float) if init_state is None else init_state
        init(self, params, init_state=state, **kw)

    T1DPatient.__init__ = with_float_state
    step = simglucose.T1DSimEnvNeoRL._step
    simglucose.T1DSimEnvNeoRL._step = lambda self, action: step(
        self, float(np.asarray(action).reshape(-1)[0])
    )


def released_trajectory(path: Path, maker) -> dict:  # noqa: ANN001
    """The authors' trajectory ``RELEASED`` of their released Simglucose data, with the
    start hour under which the reference env (``maker``) reproduces its readings."""
    data = np.load(path)
    ends = np.flatnonzero(data["done"].astype(bool) | data["truncated"].astype(bool))
    rows = slice(([-1, *ends][RELEASED]) + 1, ends[RELEASED] + 1)
    obs, next_obs = data["obs"][rows], data["next_obs"][rows]
    env = maker()
    best: tuple[float, int, str] | None = None
    for seed in range(5000):  # global seeds until one draws the patient and a start hour
        np.random.seed(seed)  # under which the readings replay (one does: the day's meals
        first, _ = env.reset(seed=seed)  # fix the hour)
        if not np.allclose(first[1:], obs[0, 1:]):
            continue
        readings = [env.step(action)[0][0] for action in data["action"][rows]]
        error = float(np.max(np.abs(np.array(readings) - next_obs[:, 0])))
        if error < 1e-3:
            best = (error, env.env.env.scenario.start_time.hour, env.env.patient_name)
            break
    assert best is not None, "no start hour replays the released readings"
    return {"patient": best[2], "hour": best[1], "first": float(obs[0, 0]),
            "action": rounded(data["action"][rows]), "next_reading": rounded(next_obs[:, 0]),
            "reward": rounded(data["reward"][rows]),
            "done": [bool(x) for x in data["done"][rows]], "reference_error": best[0]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--neorl2", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--released", type=Path, help="Simglucose-high-100000-train.npz")
    args = parser.parse_args()
    sys.path.insert(0, str(args.neorl2.resolve()))
    import random  # noqa: PLC0415

    from neorl2.envs.dmsd import DoubleMassSpringDamperEnv  # noqa: PLC0415
    from neorl2.envs.pipline import PipelineEnv  # noqa: PLC0415
    from neorl2.envs.randomfrictionhopper import RandomFrictionHopperEnv  # noqa: PLC0415
    from neorl2.envs.safetyhalfcheetah import SafetyHalfCheetahEnv  # noqa: PLC0415

    adapt_simglucose()
    from neorl2.envs.simglucose import SimglucoseEnv  # noqa: PLC0415

    golden: dict = {"reference": f"github.com/polixir/NeoRL2@{COMMIT}", "cases": {}}
    makers = {"dmsd": lambda: DoubleMassSpringDamperEnv(mode="train"), "pipeline": PipelineEnv,
              "randomfrictionhopper": lambda: RandomFrictionHopperEnv(random_friction=True),
              "safetyhalfcheetah": SafetyHalfCheetahEnv,
              "simglucose": lambda: SimglucoseEnv(mode="train")}  # fmt: skip
    for name, (seeds, steps, dim) in CASES.items():
        env = makers[name]()
        episodes = []
        for seed in seeds:
            if name == "pipeline":
                env.target_flow_rate = None
            random.seed(seed)  # RandomFrictionHopper's friction
            np.random.seed(seed)  # Simglucose's patient and start hour
            obs, info = env.reset(seed=seed)
            # Pipeline: its flows and target each step (the rest of an observation is
            # their history), and the last observation whole
            width = WIDTH[name]
            observations, rewards, ends = [rounded(obs[:width])], [], []
            steps_actions = (simglucose_actions(seed) if name == "simglucose"
                             else actions(steps, dim, seed + 1))  # fmt: skip
            for action in steps_actions:
                obs, reward, terminated, truncated, _ = env.step(action)
                ends_early = name in ("randomfrictionhopper", "simglucose")
                assert not truncated and (not terminated or ends_early)
                observations.append(rounded(obs[:width]))
                rewards.append(float(f"{float(reward):.9g}"))
                ends.append(bool(terminated))
                if terminated:
                    break
            episode = {"seed": seed, "obs": observations, "reward": rewards,
                       "last_obs": rounded(obs), "terminated": ends}  # fmt: skip
            if name == "randomfrictionhopper":
                episode["friction"] = float(info["friction"])
            if name == "simglucose":
                episode["patient"] = env.env.patient_name
                episode["hour"] = env.env.env.scenario.start_time.hour
            episodes.append(episode)
        golden["cases"][name] = episodes
    if args.released is not None:
        golden["released_simglucose"] = released_trajectory(args.released, makers["simglucose"])
    args.out.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e3:.0f} KB)")


if __name__ == "__main__":
    main()
