"""Where a trained FISOR agent's actor weights go on its dataset: the weights' effective
sample size and each data source's share of the total weight.

    python -m rlcore.benchmarks.fisor_weights runs/bench/safe/offline/fisor_seed0 \\
        --dataset local/safetyhoppervelocity/mixed-v0

FISOR's actor is a weighted denoising regression (``algos/safe/fisor.py``, step 4): the
rows it imitates are those with large weights. This script samples ``--rows`` dataset rows,
computes their weights with the agent's critics exactly as an update does, and groups
them by the source of their episode, told apart by episode return and cost
(``--random-below``: episodes under this return are the uniform-random ones;
``--unsafe-above``: episodes over this cost the unsafe policies'; the rest are the safe
policy's). Per source it also gives the fraction of rows whose weight sits at its clip
(``cost_max_weight`` on infeasible states, ``reward_max_weight`` on feasible ones): rows
there are imitated equally however far past the clip their advantage lies. It prints one
table per run and writes JSON next to the benchmark results.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from rlcore.algos.safe.fisor import FISORConfig, effective_sample_fraction
from rlcore.benchmarks.runs import cpu_info, write_result

RESULTS = Path(__file__).resolve().parent / "results"


def weight_report(
    run: Path, dataset_id: str, rows: int, random_below: float, unsafe_above: float, seed: int
) -> dict:
    """The weight statistics of one FISOR run (see the module docstring)."""
    from rlcore.offline.datasets import load_dataset
    from rlcore.policies import load_agent

    dataset = load_dataset(dataset_id)
    agent = load_agent(run)
    picked = torch.randint(len(dataset), (rows,), generator=torch.Generator().manual_seed(seed))
    episode = dataset.episode_id[picked]
    returns = dataset.episode_return[episode].numpy()
    costs = dataset.episode_cost[episode].numpy()
    source = np.where(
        returns < random_below, "random", np.where(costs > unsafe_above, "unsafe", "safe")
    )
    obs, action = agent.obs_normalizer(dataset.obs[picked]), dataset.action[picked]
    with torch.no_grad():
        q = agent.target_critic(obs, action).min(0).values
        v = agent.value(obs).squeeze(-1)
        q_h = agent.target_cost_critic(obs, action).max(0).values
        v_h = agent.cost_value(obs).squeeze(-1)
        weights = agent.actor_weights(q, v, q_h, v_h)
    w, feasible = weights.numpy(), (v_h <= 0).numpy()
    clipped = at_weight_clip(w, feasible, (q_h <= 0).numpy(), agent.config)
    report = {
        "effective_sample_fraction": effective_sample_fraction(weights),
        "zero_weight_fraction": float((w == 0).mean()),
        "at_clip_fraction": float((clipped["cost"] | clipped["reward"]).mean()),
        "feasible_state_fraction": float(feasible.mean()),
        "sources": {},
    }
    for name in ("random", "safe", "unsafe"):
        mask = source == name
        if mask.any():
            report["sources"][name] = {
                "row_share": float(mask.mean()),
                "weight_share": float(w[mask].sum() / w.sum()),
                "mean_weight": float(w[mask].mean()),
                "feasible_states": float(feasible[mask].mean()),
                "at_cost_clip": float(clipped["cost"][mask].mean()),
                "at_reward_clip": float(clipped["reward"][mask].mean()),
            }
    return report


def at_weight_clip(
    weights: np.ndarray,
    feasible_state: np.ndarray,
    feasible_action: np.ndarray,
    config: FISORConfig,
) -> dict[str, np.ndarray]:
    """Rows whose actor weight is at its clip: "cost" (infeasible state, weight =
    ``cost_max_weight``) and "reward" (feasible state and action, ``reward_max_weight``)."""
    reward_rows = feasible_state & feasible_action
    return {
        "cost": ~feasible_state & (weights >= config.cost_max_weight),
        "reward": reward_rows & (weights >= config.reward_max_weight),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="FISOR run dirs or checkpoints")
    parser.add_argument("--dataset", default="local/safetyhoppervelocity/mixed-v0")
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--random-below", type=float, default=150.0)
    parser.add_argument("--unsafe-above", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "fisor_weights.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    reports = {}
    for run in args.runs:
        report = weight_report(
            run, args.dataset, args.rows, args.random_below, args.unsafe_above, args.seed
        )
        reports[str(run)] = report
        print(f"{run}: effective sample size {report['effective_sample_fraction']:.1%} of the "
              f"rows, feasible states {report['feasible_state_fraction']:.1%}, rows at a "
              f"weight clip {report['at_clip_fraction']:.1%}")  # fmt: skip
        print("| source | rows | weight share | mean weight | feasible states "
              "| at cost clip | at reward clip |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        for name, row in report["sources"].items():
            print(f"| {name} | {row['row_share']:.1%} | {row['weight_share']:.1%} | "
                  f"{row['mean_weight']:.2f} | {row['feasible_states']:.1%} | "
                  f"{row['at_cost_clip']:.1%} | {row['at_reward_clip']:.1%} |")  # fmt: skip
    payload = {"dataset": args.dataset, "runs": reports, "cpu": cpu_info()}
    write_result(args, payload)
    return payload


if __name__ == "__main__":
    main()
