"""Cost-labelled offline data for safe RL: one Minari dataset recorded on a constrained task
from a mix of policies, some safe and some not (as DSRL's datasets mix behaviour policies
of different cost levels).

    python -m rlcore.offline.safe_recipe env=SafetyHopperVelocity \\
        dataset_id=local/safetyhoppervelocity/mixed-v0 \\
        sources=random:20000,benchmarks/assets/hopper_sac_expert.pt:100000:0.1,... \\
        [cost_limit=25] [seed=0] [sample=true]

``sources`` is a comma-separated list of ``policy:steps[:noise]``: ``policy`` is ``random``
or a run directory / checkpoint (``rlcore.checkpoint.load_policy``; its actions sampled
from the agent's own stochastic policy with ``sample=true``, the default), ``steps`` the
env steps recorded from it, ``noise`` an optional Gaussian action noise (std as a fraction
of the half-range). Every step's ``info["cost"]`` is stored (Minari ``infos["cost"]``;
``rlcore.offline.datasets`` loads it as the dataset's cost); a task without costs is refused.

DSRL-style normalisation (Liu et al., "Datasets and Benchmarks for Offline Safe
Reinforcement Learning", DMLR 2024): the dataset stores ``ref_min_score`` /
``ref_max_score`` = the minimum and maximum episode return in it, so an evaluation's
normalised reward is (R - min) / (max - min) (rlcore's ``eval/normalized_score`` is 100
times it), and the normalised cost is C / ``cost_limit`` (``normalized_cost``); "safe"
means a normalised cost <= 1. The per-source table printed (and returned) gives each
source's episodes, mean return and cost, and the fraction of safe episodes.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from rlcore.commands import print_help_if_asked
from rlcore.envs.make import resolve_env_id
from rlcore.offline.cli import UsageError, bool_arg, number_arg, parse_args, seed_arg
from rlcore.offline.datasets import DatasetError
from rlcore.offline.recording import (
    Episode,
    check_new_dataset_id,
    rollout,
    summarize,
    write_dataset,
)

USAGE = (
    "usage: python -m rlcore.offline.safe_recipe env=<constrained env> dataset_id=<namespace/name-vN> "
    "sources=<policy:steps[:noise],...> [cost_limit=25] [seed=0] [sample=true]"
)
KEYS = {"env", "dataset_id", "sources", "cost_limit", "seed", "sample"}


def normalized_cost(episode_cost: float, cost_limit: float) -> float:
    """DSRL's normalised cost: C / cost_limit (<= 1 is safe)."""
    if cost_limit <= 0:
        raise ValueError(f"cost_limit={cost_limit} must be > 0 to normalise costs")
    return float(episode_cost) / float(cost_limit)


def normalized_reward(episode_return: float, ref_min: float, ref_max: float) -> float:
    """DSRL's normalised reward: (R - min) / (max - min) over the dataset's episode returns."""
    return (float(episode_return) - ref_min) / (ref_max - ref_min)


def parse_sources(text: str) -> list[tuple[str, int, float]]:
    """``policy:steps[:noise],...`` -> [(policy, steps, noise), ...]."""
    sources = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        fields = item.rsplit(":", 2)
        try:
            if len(fields) == 3 and _is_number(fields[1]):
                policy, steps, noise = fields[0], int(fields[1]), float(fields[2])
            else:
                policy, steps_text = item.rsplit(":", 1)
                steps, noise = int(steps_text), 0.0
        except ValueError:
            raise UsageError(f"source '{item}' is not policy:steps[:noise]") from None
        if steps < 1 or noise < 0:
            raise UsageError(f"source '{item}': steps must be >= 1 and noise >= 0")
        sources.append((policy, steps, noise))
    if not sources:
        raise UsageError("sources=<policy:steps[:noise],...> names no source")
    return sources


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def record(
    env: str,
    dataset_id: str,
    sources: Sequence[tuple[str, int, float]],
    cost_limit: float = 25.0,
    seed: int = 0,
    sample: bool = True,
) -> dict[str, Any]:
    """Record every source, write one dataset; returns the per-source and overall summary."""
    import torch

    from rlcore.policies import load_policy

    check_new_dataset_id(dataset_id)
    env_id = resolve_env_id(env)
    episodes: list[Episode] = []
    table = []
    for index, (policy, steps, noise) in enumerate(sources):
        actor = None if policy == "random" else load_policy(policy, deterministic=not sample)
        with gym.make(env_id) as rollout_env, torch.random.fork_rng():
            torch.manual_seed(seed + index)
            recorded = rollout(rollout_env, actor, steps, seed=seed + index, noise=noise)
        if any(ep.costs is None for ep in recorded):
            raise DatasetError(
                f"{env_id} reports no info['cost']: record safe-RL data on a constrained task "
                "(e.g. env=SafetyHopperVelocity)"
            )
        costs = np.array([ep.costs.sum() for ep in recorded])
        table.append({"source": policy, "noise": noise, **summarize(recorded),
                      "safe_fraction": float(np.mean(costs <= cost_limit))})  # fmt: skip
        episodes += recorded
    returns = np.array([ep.rewards.sum() for ep in episodes])
    with gym.make(env_id) as env_for_spec:
        path = write_dataset(
            dataset_id, episodes, env_for_spec,
            algorithm_name="mixture: " + ", ".join(f"{p} ({s} steps)" for p, s, _ in sources),
            description=f"cost-labelled mixture on {env_id}, seed {seed} (rlcore.offline.safe_recipe)",
            ref_min_score=float(returns.min()), ref_max_score=float(returns.max()),
        )  # fmt: skip
    costs = np.array([ep.costs.sum() for ep in episodes])
    overall = {**summarize(episodes), "safe_fraction": float(np.mean(costs <= cost_limit))}
    return {"dataset_id": dataset_id, "env_id": env_id, "path": str(path),
            "cost_limit": cost_limit, "sources": table, "overall": overall}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    """Command line: see the module docstring; exit code 2 on a usage error."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if print_help_if_asked(argv, f"{__doc__}\n{USAGE}"):
        return None
    try:
        args = parse_args(argv, KEYS, required=("env", "dataset_id", "sources"))
        summary = record(
            env=args["env"],
            dataset_id=args["dataset_id"],
            sources=parse_sources(args["sources"]),
            cost_limit=number_arg(args, "cost_limit", float, 25.0),
            seed=seed_arg(args),
            sample=bool_arg(args, "sample", True),
        )
    except UsageError as error:
        print(f"error: {error}\n{USAGE}", file=sys.stderr)
        raise SystemExit(2) from None
    except (DatasetError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    print(f"| source | noise | episodes | mean return | mean cost | safe (cost <= "
          f"{summary['cost_limit']:g}) |\n|---|---|---|---|---|---|")  # fmt: skip
    for row in [*summary["sources"], {**summary["overall"], "source": "all", "noise": ""}]:
        print(f"| {row['source']} | {row['noise']} | {row['episodes']} | "
              f"{row['mean_return']:.1f} | {row['mean_cost']:.1f} | {row['safe_fraction']:.0%} |")  # fmt: skip
    print(f"wrote {summary['dataset_id']} -> {summary['path']}")
    return summary


if __name__ == "__main__":
    main()
