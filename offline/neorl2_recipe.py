"""NeoRL-2's datasets, recorded the way its authors built them.

    python -m rlcore.offline.neorl2_recipe env=DMSD dataset_id=local/dmsd/high-v0 \\
        [split=train|val] [transitions=100000]
    python -m rlcore.offline.neorl2_recipe env=RandomFrictionHopper run=<SAC run dir> \\
        dataset_id=local/randomfrictionhopper/high-v0 [split=train|val] [level=0.75] \\
        [export=<folder>]
    python -m rlcore.offline.neorl2_recipe env=SafetyHalfCheetah \\
        policies=<p1.pt>,<p2.pt>,<p3.pt>,<p4.pt> dataset_id=local/safetyhalfcheetah/high-v0

NeoRL-2 (Gao et al., 2025; its data code: github.com/polixir/neorl2_dataset @ 2024-05-17,
``scripts/get_data.py``, ``neorl2_dataset/utils/pid.py``) records every task at its
"high" level, 75% of the way from the worst to the best return its authors logged while
making the data policies; trajectory i starts from ``reset(seed=i)`` and trajectories are
recorded until the split holds ``transitions`` (100,000 train, 20,000 validation; the
last trajectory is kept whole). The datasets carry NeoRL-2's reference returns for
normalised scores.

* DMSD: PID controllers. Bayesian optimisation tuned 1,030 gain settings; the two settings
  whose returns are closest to the level drive the data: the closest for the training
  split, the second for the validation split (``GAINS``, exact). A controller acts on the
  error e = target - position of each mass: a = P e + I dt sum(e so far, starting from a
  zero) + D (e - e_prev) / dt, dt = 0.2, clipped to [-1, 1], deterministic. Checked
  against the authors' released training file (read once on the development machine, not
  shipped; docs/offline.md): 1,000 trajectories, mean return 494.45 there and here.
* RandomFrictionHopper, SafetyHalfCheetah, Pipeline, RocketRecovery, Simglucose (any task
  with a SAC run): SAC policies. Of the snapshots of a SAC training run (``run=``: its
  ``checkpoints/agent_step_N.pt`` with
  an evaluation at step N in its eval.csv), the 4 whose evaluation returns are closest to
  ``level`` (0.75) of the way from the run's worst to its best evaluation
  (``get_models``), in return order: the 1st, 3rd and 4th act in the training split
  (trajectory i: policy i mod 3), the 2nd in the validation split. The action is the
  policy's mean before the tanh, clipped to the action box, no noise (the authors' tianshou
  actors' ``mu``). On SafetyHalfCheetah the trajectories with a step over the speed limit
  (reward -100) are dropped afterwards (the authors: 18 of 100 training trajectories
  kept). ``policies=`` takes the 4 snapshots (in return order) instead of a run;
  ``export=<folder>`` writes the 4 chosen ones there as actor-only snapshots (the
  benchmark assets; an agent that standardised its observations keeps its statistics
  beside the actor, and the policy reads through them).

Departures: the SAC runs are rlcore's SAC for a budget this machine affords (100,000
steps), where the authors trained tianshou's SAC (lr 1e-3, temperature 0.2) to
convergence, so the level is 75% of a shorter run's range; RandomFrictionHopper's and
SafetyHalfCheetah's runs used rlcore's defaults (lr 3e-4 / 1e-3, learned temperature),
Pipeline's and RocketRecovery's the authors' lr and fixed temperature (on Pipeline the
learned temperature ran away: 1 -> 255 in 4,000 updates, the policy's return fell from
-13 to -1,595); Simglucose's authors drove their data with G2P2C actor-critics (an LSTM
policy this library does not have), here SAC with observation normalisation and a target
entropy of -4 (``algo.normalize_obs=true algo.target_entropy=-4``: without the
normalisation the glucose reading, std ~100 mg/dL, pinned the actor's log-std at its
bounds and the learned temperature ran from 1 to 160,000 in 5,000 updates; with it and the
default target of -1 the patients kept dying within ~50 steps: evaluation returns 22-60
over 65,000 steps);
the authors' ray workers seed Python / numpy / torch globally per trajectory, here the
env's reset seed draws everything (RandomFrictionHopper's friction included).
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlcore.commands import print_help_if_asked
from rlcore.envs.make import resolve_env_id
from rlcore.envs.neorl2 import CHEETAH_ID, DMSD_ID
from rlcore.evaluation import pinned_reference_scores
from rlcore.offline.cli import UsageError, number_arg, parse_args
from rlcore.offline.recording import Episode, summarize, write_dataset

USAGE = (
    "usage: python -m rlcore.offline.neorl2_recipe env=<DMSD | RandomFrictionHopper | "
    "SafetyHalfCheetah | ...> dataset_id=<namespace/name-vN> [split=train|val] "
    "[transitions=<n>] [run=<SAC run dir> | policies=<4 snapshots, in return order>] "
    "[level=0.75] [export=<folder>]"
)
# (P, I, D) per mass, from the authors' tuning log (scripts/logs/DMSD/DMSD_tune_log.json)
GAINS = {
    "train": ((4.604382269395566, 1.5220966668817475), (0.751080115280055, 0.8102706700902063),
              (4.977205900321884, 2.827865593893193)),
    "val": ((3.6415787495930987, 3.6040737873548996), (0.0, 0.0),
            (4.024895548241978, 3.9211754424390795)),
}  # fmt: skip
SIZES = {"train": 100_000, "val": 20_000}
LEVEL = 0.75  # NeoRL-2's "high" level
SPEED_PENALTY = -99.0  # SafetyHalfCheetah: a reward below it is the speed limit's -100


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


class SACMeanPolicy:
    """A SAC snapshot acting with its mean before the tanh, clipped to the action box and
    mapped to env units, no noise (NeoRL-2's data policies); stateless. The actor reads
    the observation as the agent's ``act`` does: env-side normalisation first, then the
    agent's own statistics (``algo.normalize_obs``)."""

    def __init__(self, path: str | Path) -> None:
        from rlcore.checkpoint import load_checkpoint
        from rlcore.policies import load_agent, obs_transform

        state = load_checkpoint(path)
        if state["algo"] != "sac":
            raise UsageError(f"{path} is a {state['algo']} agent: the data policies are SAC's")
        self.path = Path(path)
        self.agent = load_agent(path)
        self.actor = self.agent.actor
        self.transform = obs_transform(state)

    def reset(self) -> None:
        """Nothing to restart (the PID controllers' counterpart)."""

    @torch.no_grad()
    def __call__(self, obs: np.ndarray) -> np.ndarray:
        seen = self.agent.plumbing.standardize(torch.as_tensor(self.transform(obs))[None])
        mean, _ = self.actor.net(seen).chunk(2, dim=-1)
        return self.actor.to_env(mean.clamp(-1.0, 1.0))[0].numpy()


def record_trajectories(
    env_id: str, policies: Sequence[PIDController | SACMeanPolicy], transitions: int
) -> list[Episode]:
    """Trajectory i from ``reset(seed=i)`` driven by ``policies[i % len(policies)]`` (its
    ``reset`` first), until the trajectories hold ``transitions`` steps (the last whole);
    costs are kept when the env reports them."""
    env = gym.make(env_id)
    low, high = env.action_space.low, env.action_space.high
    episodes: list[Episode] = []
    total, seed = 0, 0
    while total < transitions:
        policy = policies[seed % len(policies)]
        policy.reset()
        obs, _ = env.reset(seed=seed)
        trace: dict[str, list] = {"obs": [obs], "act": [], "rew": [], "term": [], "trunc": [],
                                  "cost": []}  # fmt: skip
        done = False
        while not done:
            action = np.clip(policy(obs), low, high).astype(np.float32)
            obs, reward, terminated, truncated, info = env.step(action)
            for key, value in (("obs", obs), ("act", action), ("rew", float(reward)),
                               ("term", terminated), ("trunc", truncated)):  # fmt: skip
                trace[key].append(value)
            if "cost" in info:
                trace["cost"].append(float(info["cost"]))
            done = terminated or truncated
        episodes.append(Episode(
            np.asarray(trace["obs"], np.float32), np.asarray(trace["act"], np.float32),
            np.asarray(trace["rew"], np.float64), np.asarray(trace["term"]),
            np.asarray(trace["trunc"]),
            np.asarray(trace["cost"], np.float64) if trace["cost"] else None,
        ))  # fmt: skip
        total += len(episodes[-1])
        seed += 1
    env.close()
    return episodes


def record_dmsd(split: str = "train", transitions: int | None = None) -> list[Episode]:
    """The DMSD split's PID trajectories (module docstring)."""
    if split not in GAINS:
        raise UsageError(f"split={split!r}: choose from {sorted(GAINS)}")
    target = SIZES[split] if transitions is None else transitions
    return record_trajectories(DMSD_ID, [PIDController(*GAINS[split])], target)


def select_snapshots(run_dir: str | Path, level: float = LEVEL) -> list[tuple[Path, float]]:
    """The 4 snapshots of a SAC run whose evaluation returns are closest to ``level`` of
    the way from its worst to its best evaluation, as (path, return) in return order."""
    run_dir = Path(run_dir)
    returns: dict[int, float] = {}
    if (run_dir / "eval.csv").is_file():
        with open(run_dir / "eval.csv", newline="") as handle:
            returns = {
                int(row["step"]): float(row["eval/return"]) for row in csv.DictReader(handle)
            }
    found = [(run_dir / "checkpoints" / f"agent_step_{step}.pt", value)
             for step, value in sorted(returns.items())]  # fmt: skip
    found = [(path, value) for path, value in found if path.is_file()]
    if len(found) < 4:
        raise UsageError(
            f"{run_dir} has {len(found)} agent snapshots with an evaluation at their step; "
            "the recipe picks 4 (train SAC with keep_agent_snapshots=true and "
            "checkpoint_every equal to eval_every)"
        )
    values = np.array([value for _, value in found])
    target = values.min() + level * (values.max() - values.min())
    closest = sorted(found, key=lambda item: abs(item[1] - target))[:4]
    return sorted(closest, key=lambda item: item[1])


def export_snapshots(chosen: Sequence[tuple[Path, float]], folder: str | Path) -> list[Path]:
    """The chosen snapshots as actor-only files ``<folder>/sac_<k>.pt`` (k = 1..4, return
    order; the agent's observation statistics kept beside the actor when it has them),
    each saying where it came from and its evaluation return."""
    from rlcore.agent_state import STATISTICS
    from rlcore.checkpoint import load_checkpoint

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for k, (path, value) in enumerate(chosen, start=1):
        state = load_checkpoint(path)
        keep = {key: state[key] for key in ("format", "algo", "config", "spaces", "obs_normalizer")}
        keep["agent"] = {key: state["agent"][key] for key in ("actor", STATISTICS)
                         if key in state["agent"]}  # fmt: skip
        keep["source"] = {"snapshot": str(path), "eval_return": value}
        torch.save(keep, folder / f"sac_{k}.pt")
        out.append(folder / f"sac_{k}.pt")
    return out


def record_sac(
    env_id: str, snapshots: Sequence[str | Path], split: str = "train",
    transitions: int | None = None,
) -> list[Episode]:  # fmt: skip
    """A split of SAC data (module docstring): policies 1, 3, 4 train, 2 validates;
    SafetyHalfCheetah's trajectories over the speed limit dropped."""
    if len(snapshots) != 4:
        raise UsageError(f"the recipe takes 4 SAC snapshots (return order), got {len(snapshots)}")
    if split not in SIZES:
        raise UsageError(f"split={split!r}: choose from {sorted(SIZES)}")
    chosen = [snapshots[0], *snapshots[2:]] if split == "train" else [snapshots[1]]
    policies = [SACMeanPolicy(path) for path in chosen]
    target = SIZES[split] if transitions is None else transitions
    episodes = record_trajectories(env_id, policies, target)
    return within_speed_limit(episodes) if env_id == CHEETAH_ID else episodes


def within_speed_limit(episodes: Sequence[Episode]) -> list[Episode]:
    """SafetyHalfCheetah's data: the trajectories without a step over the speed limit."""
    kept = [ep for ep in episodes if not (ep.rewards < SPEED_PENALTY).any()]
    if not kept:
        raise UsageError("every SafetyHalfCheetah trajectory crossed the speed limit")
    return kept


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)
    if print_help_if_asked(argv, f"{__doc__}\n{USAGE}"):
        return {}
    keys = {"env", "dataset_id", "split", "transitions", "run", "policies", "level", "export"}
    args = parse_args(argv, keys, ("env", "dataset_id"))
    env_id = resolve_env_id(args["env"])
    split = args.get("split", "train")
    transitions = number_arg(args, "transitions", int, SIZES.get(split))
    announce: Callable[[str], None] = print
    level = number_arg(args, "level", float, LEVEL)
    if env_id == DMSD_ID:
        if {"run", "policies", "export"} & set(args):
            raise UsageError(
                f"DMSD's data policies are PID controllers: no run / policies\n{USAGE}"
            )
        episodes, what = record_dmsd(split, transitions), "a PID controller"
    else:
        if ("run" in args) == ("policies" in args):
            raise UsageError(f"env={args['env']}: give run=<SAC run dir> or policies=...\n{USAGE}")
        if "policies" in args and {"level", "export"} & set(args):
            raise UsageError(
                f"level= and export= choose snapshots of a run=: not with policies=\n{USAGE}"
            )
        if "run" in args:
            chosen = select_snapshots(args["run"], level)
            announce("snapshots at the level: " + ", ".join(
                f"{path.name} ({value:.1f})" for path, value in chosen))  # fmt: skip
            snapshots = [path for path, _ in chosen]
            if "export" in args:
                snapshots = export_snapshots(chosen, args["export"])
                announce(f"exported them to {args['export']}")
        else:
            snapshots = [Path(p) for p in args["policies"].split(",")]
        episodes, what = record_sac(env_id, snapshots, split, transitions), "SAC policies"
    env = gym.make(env_id)
    name = env_id.split("/")[-1].split("-")[0]
    path = write_dataset(
        args["dataset_id"], episodes, env, f"NeoRL-2 {name} ({split})",
        f"NeoRL-2's {name} {split} data: {what} at the {level:.0%} level "
        "(rlcore.offline.neorl2_recipe)", *pinned_reference_scores(env_id),
    )  # fmt: skip
    stats = summarize(episodes)
    print(f"wrote {args['dataset_id']}: {len(episodes)} episodes, {stats} -> {path}")
    return stats


if __name__ == "__main__":
    main()
