"""Golden numbers of CORL's TD3+BC update (tests/golden/td3_bc.json), for
tests/test_parity_offline.py.

Run in a side environment with CORL's own dependencies, outside the repository:

    python3 -m venv /work/side/venv && /work/side/venv/bin/pip install torch==2.13.0 numpy pyrallis
    git clone https://github.com/tinkoff-ai/CORL /work/side/CORL   # commit in offline_common
    /work/side/venv/bin/python benchmarks/parity/td3_bc_reference.py --corl /work/side/CORL

Imports CORL's ``algorithms/offline/td3_bc.py`` by path (d4rl, gym, wandb stubbed), builds
its actor and critics at width 16 (its hard-coded 256 narrowed, ``corl_harness.narrow``),
copies in the initial weights of ``offline_common``, and runs ``TD3_BC.train`` on 30 numpy
batches (terminal rows included) with CORL's defaults (alpha 2.5, noise 0.2 clipped 0.5,
policy delay 2, lr 3e-4, tau 5e-3). The target-smoothing noise (``torch.randn_like``)
comes from ``offline_common.noise_draws``. Writes per-update critic / actor losses and
every final parameter (actor, critics and their targets).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from corl_harness import corl_batch, get_layers, load_corl, narrow, scripted_noise, set_layers
from offline_common import (
    ACT_DIM,
    BATCH,
    CORL_COMMIT,
    CORL_REPO,
    GOLDEN_DIR,
    HIDDEN,
    OBS_DIM,
    Script,
    encode_case,
    inputs_digest,
    layers,
    make_batches,
    noise_draws,
    save_golden,
    td3_bc_initial,
)

UPDATES = 30
SETTINGS = {
    "alpha": 2.5,
    "policy_noise": 0.2,
    "noise_clip": 0.5,
    "policy_freq": 2,
    "gamma": 0.99,
    "tau": 0.005,
    "lr": 3e-4,
    "updates": UPDATES,
}
NOISE = {"target": (BATCH, ACT_DIM)}  # per update: the target-smoothing draw


def run_case(td3_bc) -> dict:
    params = td3_bc_initial()
    actor = td3_bc.Actor(OBS_DIM, ACT_DIM, max_action=1.0)
    critic_1, critic_2 = td3_bc.Critic(OBS_DIM, ACT_DIM), td3_bc.Critic(OBS_DIM, ACT_DIM)
    set_layers(actor, layers(params, "actor"))
    set_layers(critic_1, layers(params, "critic0"))
    set_layers(critic_2, layers(params, "critic1"))
    lr = SETTINGS["lr"]
    trainer = td3_bc.TD3_BC(  # the targets are deep copies made here
        max_action=1.0,
        actor=actor,
        actor_optimizer=torch.optim.Adam(actor.parameters(), lr=lr),
        critic_1=critic_1,
        critic_1_optimizer=torch.optim.Adam(critic_1.parameters(), lr=lr),
        critic_2=critic_2,
        critic_2_optimizer=torch.optim.Adam(critic_2.parameters(), lr=lr),
        discount=SETTINGS["gamma"],
        tau=SETTINGS["tau"],
        policy_noise=SETTINGS["policy_noise"],
        noise_clip=SETTINGS["noise_clip"],
        policy_freq=SETTINGS["policy_freq"],
        alpha=SETTINGS["alpha"],
    )
    draws = noise_draws(2, UPDATES, NOISE)
    noise = Script(d["target"] for d in draws)
    losses: dict[str, list] = {"critic_loss": [], "actor_loss": []}
    with scripted_noise(noise):
        for batch in (batches := make_batches(1, UPDATES)):
            log = trainer.train(corl_batch(batch))
            for name in losses:
                losses[name].append(log.get(name))
    assert noise.done()
    final = {
        **get_layers(trainer.actor, "actor"),
        **get_layers(trainer.critic_1, "critic0"),
        **get_layers(trainer.critic_2, "critic1"),
        **get_layers(trainer.actor_target, "target_actor"),
        **get_layers(trainer.critic_1_target, "target_critic0"),
        **get_layers(trainer.critic_2_target, "target_critic1"),
    }
    return encode_case(SETTINGS, inputs_digest(params, batches, draws), losses, final)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corl", type=Path, required=True, help="a CORL checkout")
    parser.add_argument("--out", type=Path, default=GOLDEN_DIR / "td3_bc.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    td3_bc = load_corl(args.corl, "algorithms/offline/td3_bc.py", "corl_td3_bc")
    narrow(td3_bc, HIDDEN)
    meta = {
        "reference": f"{CORL_REPO}@{CORL_COMMIT} algorithms/offline/td3_bc.py",
        "command": "python " + " ".join(["benchmarks/parity/td3_bc_reference.py", *sys.argv[1:]]),
        "torch": torch.__version__,
        "data": "offline_common: td3_bc_initial, make_batches seed 1, noise_draws seed 2",
    }
    save_golden(args.out, meta, {"default": run_case(td3_bc)})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
