"""The critic of a SAC (+ HER) run on a sparse goal task, read from its final checkpoint:
Q estimates on stored transitions against the return's bounds [-1/(1-gamma), 0], the
temperature, how often the policy saturates, and how many stored transitions move the
object (``achieved_goal`` changes by > 1 mm).

    python -m rlcore.benchmarks.her_diagnostics <run dir> [--rows 20000]

The numbers behind the PandaPush diagnosis in benchmarks/README.md ("SAC + HER next to
Stable-Baselines3"); results/her_push_long/her_push_long.json keeps them.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from rlcore.checkpoint import load_checkpoint
from rlcore.policies import load_agent


def diagnose(run: str, rows: int = 20_000, seed: int = 0) -> dict[str, float]:
    """The diagnostics of the module docstring for the run at ``run``."""
    state = load_checkpoint(run)
    agent = load_agent(run)
    buffer = state["loop"]["stateful"]["buffer"]
    data, size = buffer["data"], int(buffer["size"])
    bound = -1.0 / (1.0 - state["config"]["algo"]["gamma"])
    idx = torch.as_tensor(np.random.default_rng(seed).integers(0, size, rows))
    spec = agent.plumbing.obs
    obs = spec.concat({part.name: data[f"obs.{part.name}"][idx] for part in spec.parts})
    with torch.no_grad():
        q = agent.critic(agent.plumbing.standardize(obs), data["action"][idx])
        action = torch.as_tensor(agent.act(obs.numpy(), deterministic=True))
    goal = data["obs.achieved_goal"][:size]
    moved = (data["next_obs.achieved_goal"][:size] - goal).norm(dim=-1) > 1e-3
    return {
        "alpha": float(agent.log_alpha.detach().exp()),
        "q_min": float(q.min()), "q_mean": float(q.mean()), "q_max": float(q.max()),
        "return_bound": bound,
        "share_q_below_bound": float((q < bound).float().mean()),
        "share_q_above_0": float((q > 0).float().mean()),
        "policy_saturated_share": float((action.abs() > 0.99).float().mean()),
        "stored_transitions_moving_object": float(moved.float().mean()),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run")
    parser.add_argument("--rows", type=int, default=20_000)
    args = parser.parse_args(argv)
    print(json.dumps(diagnose(args.run, args.rows), indent=1))


if __name__ == "__main__":
    main()
