"""Golden numbers of CORL's IQL update (tests/golden/iql.json), for tests/test_parity_offline.py.

Run in a side environment with CORL's own dependencies, outside the repository:

    python3 -m venv /work/side/venv && /work/side/venv/bin/pip install torch==2.13.0 numpy pyrallis
    git clone https://github.com/tinkoff-ai/CORL /work/side/CORL   # commit in offline_common
    /work/side/venv/bin/python benchmarks/parity/iql_reference.py --corl /work/side/CORL

Imports CORL's ``algorithms/offline/iql.py`` by path (d4rl, gym, wandb stubbed), builds its
networks at width 16, copies in the initial weights of ``offline_common``, and runs
``ImplicitQLearning.train`` on 50 numpy batches (terminal rows included), with the actor's
cosine schedule over those 50 steps. Cases: the Gaussian actor (CORL's default) and the
deterministic one (``iql_deterministic``, CORL's hopper-medium recipe), and the antmaze
recipe (iql_tau 0.9, beta 10, Gaussian actor, sparse rewards minus 1). Writes per-update
value / Q / actor losses and every final parameter (actor, both critics, both target
critics, V).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from corl_harness import corl_batch, get_layers, load_corl, set_layers
from offline_common import (
    ACT_DIM,
    CORL_COMMIT,
    CORL_REPO,
    GOLDEN_DIR,
    HIDDEN,
    OBS_DIM,
    encode_case,
    inputs_digest,
    iql_initial,
    layers,
    make_batches,
    save_golden,
    sparse_shifted_rewards,
)

UPDATES = 50
SETTINGS = {"beta": 3.0, "expectile": 0.7, "tau": 0.005, "gamma": 0.99, "lr": 3e-4}


ANTMAZE = {"beta": 10.0, "expectile": 0.9}  # CORL configs/*/iql/antmaze/*.yaml


def run_case(iql, deterministic: bool, antmaze: bool = False) -> dict:
    """One case; ``antmaze``: CORL's antmaze IQL settings (iql_tau 0.9, beta 10, Gaussian
    actor) on sparse rewards shifted by -1 (``modify_reward``), as our recipe trains."""
    settings = {**SETTINGS, **(ANTMAZE if antmaze else {})}
    params = iql_initial(deterministic)
    policy = iql.DeterministicPolicy if deterministic else iql.GaussianPolicy
    actor = policy(OBS_DIM, ACT_DIM, max_action=1.0, hidden_dim=HIDDEN)
    q_network = iql.TwinQ(OBS_DIM, ACT_DIM, hidden_dim=HIDDEN)
    v_network = iql.ValueFunction(OBS_DIM, hidden_dim=HIDDEN)
    set_layers(actor, layers(params, "actor"))
    if not deterministic:
        with torch.no_grad():
            actor.log_std.copy_(torch.from_numpy(params["actor.log_std"]))
    set_layers(q_network.q1, layers(params, "critic0"))
    set_layers(q_network.q2, layers(params, "critic1"))
    set_layers(v_network, layers(params, "value"))
    trainer = iql.ImplicitQLearning(  # the target critics are deep copies made here
        max_action=1.0,
        actor=actor,
        actor_optimizer=torch.optim.Adam(actor.parameters(), lr=settings["lr"]),
        q_network=q_network,
        q_optimizer=torch.optim.Adam(q_network.parameters(), lr=settings["lr"]),
        v_network=v_network,
        v_optimizer=torch.optim.Adam(v_network.parameters(), lr=settings["lr"]),
        iql_tau=settings["expectile"],
        beta=settings["beta"],
        max_steps=UPDATES,
        discount=settings["gamma"],
        tau=settings["tau"],
    )
    losses: dict[str, list[float]] = {"value_loss": [], "q_loss": [], "actor_loss": []}
    batches = make_batches(1, UPDATES)
    if antmaze:
        batches = sparse_shifted_rewards(batches)
    for batch in batches:
        log = trainer.train(corl_batch(batch))
        for name in losses:
            losses[name].append(log[name])
    final = {
        **get_layers(trainer.actor, "actor"),
        **get_layers(trainer.qf.q1, "critic0"),
        **get_layers(trainer.qf.q2, "critic1"),
        **get_layers(trainer.q_target.q1, "target_critic0"),
        **get_layers(trainer.q_target.q2, "target_critic1"),
        **get_layers(trainer.vf, "value"),
    }
    if not deterministic:
        final["actor.log_std"] = trainer.actor.log_std.detach().numpy().copy()
    settings = {**settings, "deterministic_actor": deterministic, "updates": UPDATES,
                "sparse_reward": antmaze}  # fmt: skip
    return encode_case(settings, inputs_digest(params, batches, []), losses, final)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corl", type=Path, required=True, help="a CORL checkout")
    parser.add_argument("--out", type=Path, default=GOLDEN_DIR / "iql.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    iql = load_corl(args.corl, "algorithms/offline/iql.py", "corl_iql")
    cases = {name: run_case(iql, name == "deterministic") for name in ("gaussian", "deterministic")}
    cases["antmaze"] = run_case(iql, deterministic=False, antmaze=True)
    meta = {
        "reference": f"{CORL_REPO}@{CORL_COMMIT} algorithms/offline/iql.py",
        "command": "python " + " ".join(["benchmarks/parity/iql_reference.py", *sys.argv[1:]]),
        "torch": torch.__version__,
        "data": "offline_common: initial_params seed 0, make_batches seed 1",
    }
    save_golden(args.out, meta, cases)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
