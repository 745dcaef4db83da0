"""Golden numbers of CORL's CQL update (tests/golden/cql.json), for tests/test_parity_offline.py.

Run in a side environment with CORL's own dependencies, outside the repository:

    python3 -m venv /work/side/venv && /work/side/venv/bin/pip install torch==2.13.0 numpy pyrallis
    git clone https://github.com/tinkoff-ai/CORL /work/side/CORL   # commit in offline_common
    /work/side/venv/bin/python benchmarks/parity/cql_reference.py --corl /work/side/CORL

Imports CORL's ``algorithms/offline/cql.py`` by path (d4rl, gym, wandb stubbed), builds its
policy and critics at width 16 (its hard-coded 256 narrowed, ``corl_harness.narrow``),
copies in the initial weights of ``offline_common``, and runs ``ContinuousCQL.train`` on
20 numpy batches (terminal rows included). Every random draw of an update -- the policy
samples (``Normal.rsample``) for the policy loss, the TD target and the penalty, and the
uniform actions (``Tensor.uniform_``) -- comes from ``offline_common.noise_draws``.
Cases: "default" (CORL's D4RL-locomotion settings: cql_alpha 10, 10 actions, importance
sampling, automatic entropy, no Lagrange) and "lagrange" (the other branches: Lagrange
multiplier with action gap 0.8, max-target backup with the entropy term, no importance
sampling, temperature 0.5, larger policy lr). Writes per-update losses and every final
parameter (policy incl. its log-std scale and offset, critics, targets, log alpha, log
alpha').
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import numpy as np
import torch
from corl_harness import corl_batch, get_layers, load_corl, narrow, scripted_noise, set_layers
from offline_common import (
    ACT_DIM,
    CORL_COMMIT,
    CORL_REPO,
    GOLDEN_DIR,
    HIDDEN,
    OBS_DIM,
    Script,
    cql_initial,
    cql_noise_shapes,
    encode_case,
    inputs_digest,
    layers,
    make_batches,
    noise_draws,
    save_golden,
)

UPDATES = 20
COMMON = {
    "gamma": 0.99,
    "tau": 5e-3,
    "qf_lr": 3e-4,
    "cql_n_actions": 10,
    "cql_clip_diff_min": -np.inf,
    "cql_clip_diff_max": np.inf,
    "updates": UPDATES,
    "critic_hidden_layers": 3,
}
CASES = {
    "default": {
        **COMMON,
        "policy_lr": 3e-5,
        "cql_alpha": 10.0,
        "cql_importance_sample": True,
        "cql_lagrange": False,
        "cql_target_action_gap": -1.0,
        "cql_temp": 1.0,
        "cql_max_target_backup": False,
        "backup_entropy": False,
    },
    "lagrange": {
        **COMMON,
        "policy_lr": 3e-4,
        "cql_alpha": 5.0,
        "cql_importance_sample": False,
        "cql_lagrange": True,
        "cql_target_action_gap": 0.8,
        "cql_temp": 0.5,
        "cql_max_target_backup": True,
        "backup_entropy": True,
    },
}
# CORL's log -> the golden loss names (the critic loss it optimises is the sum of four)
LOSSES = {
    "actor_loss": lambda log: log["policy_loss"],
    "alpha_loss": lambda log: log["alpha_loss"],
    "td_loss": lambda log: log["qf1_loss"] + log["qf2_loss"],
    "cql_penalty": lambda log: log["cql_min_qf1_loss"] + log["cql_min_qf2_loss"],
    "critic_loss": lambda log: (
        log["qf1_loss"] + log["qf2_loss"] + log["cql_min_qf1_loss"] + log["cql_min_qf2_loss"]
    ),
    "cql_diff": lambda log: (log["cql_qf1_diff"] + log["cql_qf2_diff"]) / 2,
    "alpha_prime_loss": lambda log: log["alpha_prime_loss"],
}


def run_case(
    module: types.ModuleType,
    trainer_class: type,
    settings: dict,
    calibrated: bool,
) -> dict:
    """One case of CORL's CQL (or Cal-QL, ``calibrated``: batches carry mc_returns)."""
    critic_hidden_layers = settings["critic_hidden_layers"]
    params = cql_initial(critic_hidden_layers)
    actor = module.TanhGaussianPolicy(OBS_DIM, ACT_DIM, max_action=1.0)
    critics = [
        module.FullyConnectedQFunction(OBS_DIM, ACT_DIM, n_hidden_layers=critic_hidden_layers)
        for _ in range(2)
    ]
    set_layers(actor, layers(params, "actor"))
    for i, critic in enumerate(critics):
        set_layers(critic, layers(params, f"critic{i}"))
    qf_lr, policy_lr = settings["qf_lr"], settings["policy_lr"]
    trainer = trainer_class(  # the target critics are deep copies made here
        critic_1=critics[0],
        critic_1_optimizer=torch.optim.Adam(critics[0].parameters(), qf_lr),
        critic_2=critics[1],
        critic_2_optimizer=torch.optim.Adam(critics[1].parameters(), qf_lr),
        actor=actor,
        actor_optimizer=torch.optim.Adam(actor.parameters(), policy_lr),
        target_entropy=-float(ACT_DIM),
        discount=settings["gamma"],
        soft_target_update_rate=settings["tau"],
        policy_lr=policy_lr,
        qf_lr=qf_lr,
        bc_steps=0,  # CORL's TrainConfig value (the class default is 100000)
        **{k: settings[k] for k in settings if k.startswith("cql_") or k == "backup_entropy"},
    )
    shapes = cql_noise_shapes(settings["cql_n_actions"], settings["cql_max_target_backup"])
    draws = noise_draws(2, UPDATES, shapes)
    normal = Script(d[n] for d in draws for n in ("pi", "backup", "current", "next"))
    uniform = Script(d["uniform"] for d in draws)
    names = [n for n in LOSSES if settings["cql_lagrange"] or n != "alpha_prime_loss"]
    losses: dict[str, list] = {name: [] for name in names}
    with scripted_noise(normal, uniform):
        for batch in (batches := make_batches(1, UPDATES)):
            log = trainer.train(corl_batch(batch, mc_return=calibrated))
            for name in names:
                losses[name].append(LOSSES[name](log))
    assert normal.done() and uniform.done()
    final = {
        **get_layers(trainer.actor, "actor"),
        "actor.log_std_multiplier": trainer.actor.log_std_multiplier().detach().numpy().copy(),
        "actor.log_std_offset": trainer.actor.log_std_offset().detach().numpy().copy(),
        **get_layers(trainer.critic_1, "critic0"),
        **get_layers(trainer.critic_2, "critic1"),
        **get_layers(trainer.target_critic_1, "target_critic0"),
        **get_layers(trainer.target_critic_2, "target_critic1"),
        "log_alpha": trainer.log_alpha().detach().numpy().copy(),
        "log_alpha_prime": trainer.log_alpha_prime().detach().numpy().copy(),
    }
    settings = {
        k: (str(v) if isinstance(v, float) and np.isinf(v) else v) for k, v in settings.items()
    }
    return encode_case(settings, inputs_digest(params, batches, draws), losses, final)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corl", type=Path, required=True, help="a CORL checkout")
    parser.add_argument("--out", type=Path, default=GOLDEN_DIR / "cql.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cql = load_corl(args.corl, "algorithms/offline/cql.py", "corl_cql")
    narrow(cql, HIDDEN)
    cases = {
        name: run_case(cql, cql.ContinuousCQL, settings, calibrated=False)
        for name, settings in CASES.items()
    }
    meta = {
        "reference": f"{CORL_REPO}@{CORL_COMMIT} algorithms/offline/cql.py",
        "command": "python " + " ".join(["benchmarks/parity/cql_reference.py", *sys.argv[1:]]),
        "torch": torch.__version__,
        "data": "offline_common: cql_initial, make_batches seed 1, noise_draws seed 2",
    }
    save_golden(args.out, meta, cases)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
