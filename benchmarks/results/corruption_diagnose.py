"""Why RIQL loses most under random observation corruption in the short corruption table
(benchmarks/README.md): where its actor's advantage weights go.

    python benchmarks/results/corruption_diagnose.py <corruption run dir>

On 8,192 rows of the dataset (clean, or corrupted as the run's random-observation setting
corrupts it: rate 0.3, scale 1, corruption seed 0), each final agent's actor weights
exp(beta A) (clamped at 100) with its own advantage (RIQL: the target critics' quantile
minus V; IQL: the target critics' minimum minus V), then: the weights' effective sample
size as a fraction of the rows, the share of the weight on the corrupted rows, the rows at
the clamp; and the actor's squared distance to the dataset actions on clean rows.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from rlcore.offline.corruption import Corruption, corrupt
from rlcore.offline.datasets import load_dataset
from rlcore.policies import load_agent

DATASET = "local/hopper/medium-mb-v0"


def weights(agent, algo: str, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
    """The actor's advantage weights of one agent (RIQL or IQL) on raw rows."""
    o = agent.obs_normalizer(obs)
    if algo == "iql":
        _, advantage, _ = agent._value_loss(o, action, o)
    else:  # RIQL
        q = torch.quantile(agent.target_critic(o, action), agent.config.quantile, dim=0)
        advantage = q - agent.value(o).squeeze(-1)
    return torch.exp(agent.config.beta * advantage).clamp(max=agent.config.max_weight)


@torch.no_grad()
def main() -> None:
    root = Path(sys.argv[1])
    torch.set_num_threads(1)
    clean = load_dataset(DATASET)
    noisy = load_dataset(DATASET)
    rows = corrupt(noisy, Corruption("obs", "random", 0.3, 1.0, 0))
    corrupted = torch.zeros(len(noisy), dtype=torch.bool)
    corrupted[rows] = True
    pick = torch.randperm(len(clean), generator=torch.Generator().manual_seed(0))[:8192]
    print(
        "| run | weights' ESS / rows | weight on corrupted rows (29% of rows) | rows at the "
        "clamp | actor's squared distance to the data actions |"
    )
    print("|---|---|---|---|---|")
    for algo in ("riql", "iql"):
        for setting in ("clean", "random_obs"):
            for seed in (0, 1, 2):
                run = root / f"{algo}_{setting}_seed{seed}"
                agent = load_agent(run / "checkpoints" / "latest.pt")
                data = noisy if setting == "random_obs" else clean
                w = weights(agent, algo, data.obs[pick], data.action[pick])
                ess = float(w.sum() ** 2 / (w**2).sum() / len(w))
                share = float(w[corrupted[pick]].sum() / w.sum())
                action = agent.act(clean.obs[pick].numpy(), deterministic=True)
                distance = float(((torch.as_tensor(action) - clean.action[pick]) ** 2).mean())
                print(f"| {run.name} | {ess:.3f} | {share:.3f} | {float((w >= 100).float().mean()):.3f} "
                      f"| {distance:.4f} |")  # fmt: skip


if __name__ == "__main__":
    main()
