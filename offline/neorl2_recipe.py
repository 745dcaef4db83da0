"""NeoRL-2's DMSD datasets, recorded the way its authors built them.

    python -m rlcore.offline.neorl2_recipe env=DMSD dataset_id=local/dmsd/high-v0 \\
        [split=train|val] [transitions=100000]

NeoRL-2 (Gao et al., 2025; its data code: github.com/polixir/neorl2_dataset @ 2024-05-17,
``scripts/get_data.py``, ``neorl2_dataset/utils/pid.py``) records DMSD with PID
controllers. Bayesian optimisation tuned 1,030 gain settings; the "high" level is the
return at 75% of the way from the worst to the best of them, and the two settings whose
returns are closest to it drive the data: the closest for the training split, the second
for the validation split (``GAINS``, exact). A controller acts on the error e = target -
position of each mass: a = P e + I dt sum(e so far, starting from a zero) + D (e - e_prev)
/ dt, dt = 0.2, clipped to [-1, 1], deterministic. Trajectory i starts from
``reset(seed=i)``; trajectories are recorded until the split holds ``transitions`` (100,000
train, 20,000 validation: 1,000 and 200 trajectories of 100 steps). The datasets carry
NeoRL-2's reference returns (random 30.60, expert 849.51) for normalised scores.

Checked against the authors' released training file (read once on the development
machine, not shipped; docs/offline.md): 1,000 trajectories, mean return 494.45 there and
here.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import gymnasium as gym
import numpy as np

from rlcore.commands import print_help_if_asked
from rlcore.envs.make import resolve_env_id
from rlcore.envs.neorl2 import DMSD_ID
from rlcore.offline.cli import UsageError, number_arg, parse_args
from rlcore.offline.recording import Episode, summarize, write_dataset

USAGE = (
    "usage: python -m rlcore.offline.neorl2_recipe env=DMSD dataset_id=<namespace/name-vN> "
    "[split=train|val] [transitions=<n>]"
)
# (P, I, D) per mass, from the authors' tuning log (scripts/logs/DMSD/DMSD_tune_log.json)
GAINS = {
    "train": ((4.604382269395566, 1.5220966668817475), (0.751080115280055, 0.8102706700902063),
              (4.977205900321884, 2.827865593893193)),
    "val": ((3.6415787495930987, 3.6040737873548996), (0.0, 0.0),
            (4.024895548241978, 3.9211754424390795)),
}  # fmt: skip
SIZES = {"train": 100_000, "val": 20_000}
REFERENCE_RETURNS = (30.60, 849.51)  # NeoRL-2's random / expert returns on DMSD


class PIDController:
    """NeoRL-2's DMSD data policy: one PID controller per mass on the error target -
    position (the observation's [4:6] - [0:2]), its history restarted by ``reset``."""

    DT = 0.2

    def __init__(self, p: Sequence[float], i: Sequence[float], d: Sequence[float]) -> None:
        self.gains = np.array([p, i, d], dtype=np.float64)
        self.errors: list[np.ndarray] = []
        self.reset()

    def reset(self) -> None:
        self.errors = [np.zeros(2)]

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        error = np.asarray(obs[4:6], np.float64) - np.asarray(obs[0:2], np.float64)
        self.errors.append(error)
        integral = np.sum(np.stack(self.errors), axis=0) * self.DT
        derivative = (self.errors[-1] - self.errors[-2]) / self.DT
        terms = np.stack([error, integral, derivative])
        return np.clip(np.sum(self.gains * terms, axis=0), -1.0, 1.0)


def record_dmsd(split: str = "train", transitions: int | None = None) -> list[Episode]:
    """The split's trajectories (module docstring): seeds 0, 1, ... until ``transitions``."""
    if split not in GAINS:
        raise UsageError(f"split={split!r}: choose from {sorted(GAINS)}")
    target = SIZES[split] if transitions is None else transitions
    env = gym.make(DMSD_ID)
    controller = PIDController(*GAINS[split])
    episodes: list[Episode] = []
    total, seed = 0, 0
    while total < target:
        controller.reset()
        obs, _ = env.reset(seed=seed)
        trace = {"obs": [obs], "act": [], "rew": [], "term": [], "trunc": []}
        done = False
        while not done:
            action = controller(obs).astype(np.float32)
            obs, reward, terminated, truncated, _ = env.step(action)
            for key, value in (("obs", obs), ("act", action), ("rew", float(reward)),
                               ("term", terminated), ("trunc", truncated)):  # fmt: skip
                trace[key].append(value)
            done = terminated or truncated
        episodes.append(Episode(
            np.asarray(trace["obs"], np.float32), np.asarray(trace["act"], np.float32),
            np.asarray(trace["rew"], np.float64), np.asarray(trace["term"]),
            np.asarray(trace["trunc"]),
        ))  # fmt: skip
        total += len(episodes[-1])
        seed += 1
    env.close()
    return episodes


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    argv = list(sys.argv[1:] if argv is None else argv)
    if print_help_if_asked(argv, f"{__doc__}\n{USAGE}"):
        return {}
    args = parse_args(argv, {"env", "dataset_id", "split", "transitions"}, ("env", "dataset_id"))
    if resolve_env_id(args["env"]) != DMSD_ID:
        raise UsageError(f"only NeoRL-2's DMSD has its data recipe here (env=DMSD)\n{USAGE}")
    split = args.get("split", "train")
    transitions = number_arg(args, "transitions", int, SIZES.get(split))
    episodes = record_dmsd(split, transitions)
    env = gym.make(DMSD_ID)
    path = write_dataset(
        args["dataset_id"], episodes, env, f"NeoRL-2 DMSD PID ({split})",
        f"NeoRL-2's DMSD {split} data: a PID controller at the 75% level "
        "(rlcore.offline.neorl2_recipe)", *REFERENCE_RETURNS,
    )  # fmt: skip
    stats = summarize(episodes)
    print(f"wrote {args['dataset_id']}: {len(episodes)} episodes, {stats} -> {path}")
    return stats


if __name__ == "__main__":
    main()
