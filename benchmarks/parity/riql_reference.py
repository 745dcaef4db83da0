"""Golden numbers of RIQL's update (tests/golden/riql.json), for tests/test_parity_offline.py.

Run in a side environment with torch and numpy, outside the repository, on a snapshot of
YangRui2015/RIQL (``RIQL_COMMIT``)::

    /work/side/parity-online/venv/bin/python benchmarks/parity/riql_reference.py \\
        --riql <RIQL checkout>

Imports the reference's ``RIQL.py`` by path (d4rl, gym, wandb, tqdm, pyrallis stubbed; its
``attack.py`` and ``RIQL_config.py`` beside it), builds its networks at width 16
(``VectorizedQ``, ``ValueFunction``, ``DeterministicPolicy``: the reference's ``train``
always uses the deterministic policy), copies in the initial weights of
``offline_common.riql_initial``, sets ``TrainConfig.quantile`` / ``sigma`` and runs
``ImplicitQLearning.train`` on 50 numpy batches (terminal rows included; no row marked
attacked), the actor's cosine over those 50 steps. Cases: the defaults (5 critics, quantile
0.25, sigma 1) and a per-task setting of ``RIQL_config.py`` (3 critics, quantile 0.5,
sigma 2, i.e. a Huber threshold of 0.25). Writes per-update value / Q / actor losses and
every final parameter (actor, critics, target critics, V).
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import numpy as np
import torch
from corl_harness import corl_batch, get_layers, set_layers
from offline_common import (
    ACT_DIM,
    GOLDEN_DIR,
    HIDDEN,
    OBS_DIM,
    encode_case,
    inputs_digest,
    layers,
    load_script,
    make_batches,
    riql_initial,
    save_golden,
)

RIQL_REPO = "github.com/YangRui2015/RIQL"
RIQL_COMMIT = "cc07d81201e4cd44415560523fcd719f57bbf12c"
UPDATES = 50
CASES = {
    "defaults": {"num_critics": 5, "quantile": 0.25, "sigma": 1.0},
    "per_task": {"num_critics": 3, "quantile": 0.5, "sigma": 2.0},
}
SETTINGS = {"beta": 3.0, "expectile": 0.7, "tau": 0.005, "gamma": 0.99, "lr": 3e-4}


@torch.no_grad()
def set_ensemble(q_network: torch.nn.Module, params: dict, names: list[str]) -> None:
    """VectorizedQ's layers (weight (E, in, out), bias (E, 1, out)) <- critics ``names``."""
    linears = list(q_network.critic)[::2]
    for i, layer in enumerate(linears):
        layer.weight.copy_(torch.from_numpy(np.stack([params[f"{n}.{i}.w"] for n in names])))
        layer.bias.copy_(torch.from_numpy(np.stack([params[f"{n}.{i}.b"] for n in names]))[:, None])


def get_ensemble(q_network: torch.nn.Module, prefix: str, count: int) -> dict[str, np.ndarray]:
    params = {}
    for i, layer in enumerate(list(q_network.critic)[::2]):
        for k in range(count):
            params[f"{prefix}{k}.{i}.w"] = layer.weight[k].detach().numpy().copy()
            params[f"{prefix}{k}.{i}.b"] = layer.bias[k, 0].detach().numpy().copy()
    return params


def run_case(riql: types.ModuleType, case: dict) -> dict:
    count = case["num_critics"]
    riql.TrainConfig.quantile, riql.TrainConfig.sigma = case["quantile"], case["sigma"]
    params = riql_initial(count)
    actor = riql.DeterministicPolicy(OBS_DIM, ACT_DIM, max_action=1.0, hidden_dim=HIDDEN)
    q_network = riql.VectorizedQ(OBS_DIM, ACT_DIM, hidden_dim=HIDDEN, num_critics=count)
    v_network = riql.ValueFunction(OBS_DIM, hidden_dim=HIDDEN)
    set_layers(actor, layers(params, "actor"))
    set_ensemble(q_network, params, [f"critic{k}" for k in range(count)])
    set_layers(v_network, layers(params, "value"))
    lr = SETTINGS["lr"]
    trainer = riql.ImplicitQLearning(  # its target critics: a deep copy made here
        max_action=1.0, actor=actor,
        actor_optimizer=torch.optim.Adam(actor.parameters(), lr=lr), q_network=q_network,
        q_optimizer=torch.optim.Adam(q_network.parameters(), lr=lr), v_network=v_network,
        v_optimizer=torch.optim.Adam(v_network.parameters(), lr=lr),
        iql_tau=SETTINGS["expectile"], beta=SETTINGS["beta"], max_steps=UPDATES,
        discount=SETTINGS["gamma"], soft_target_update_rate=SETTINGS["tau"],
    )  # fmt: skip
    losses: dict[str, list[float]] = {"value_loss": [], "q_loss": [], "actor_loss": []}
    batches = make_batches(1, UPDATES)
    for batch in batches:
        tensors = corl_batch(batch)
        log = trainer.train([*tensors, torch.zeros(len(tensors[0]))])  # no row attacked
        for name in losses:
            losses[name].append(log[name])
    final = {
        **get_layers(trainer.actor, "actor"),
        **get_ensemble(trainer.qf, "critic", count),
        **get_ensemble(trainer.q_target, "target_critic", count),
        **get_layers(trainer.vf, "value"),
    }
    settings = {**SETTINGS, **case, "updates": UPDATES}
    return encode_case(settings, inputs_digest(params, batches, []), losses, final)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--riql", type=Path, required=True, help="a RIQL checkout")
    parser.add_argument("--out", type=Path, default=GOLDEN_DIR / "riql.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sys.modules.setdefault("pyrallis", types.ModuleType("pyrallis"))
    sys.path.insert(0, str(args.riql.resolve()))  # its attack.py and RIQL_config.py
    riql = load_script(args.riql, "RIQL.py", "riql_reference")
    cases = {name: run_case(riql, case) for name, case in CASES.items()}
    meta = {
        "reference": f"{RIQL_REPO}@{RIQL_COMMIT} RIQL.py",
        "command": "python " + " ".join(["benchmarks/parity/riql_reference.py", *sys.argv[1:]]),
        "torch": torch.__version__,
        "data": "offline_common: riql_initial seed 0, make_batches seed 1",
    }
    save_golden(args.out, meta, cases)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
