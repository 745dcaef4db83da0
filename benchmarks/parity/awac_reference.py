"""Golden numbers of CORL's AWAC update (tests/golden/awac.json), for tests/test_parity_offline.py.

Run in a side environment with CORL's own dependencies, outside the repository:

    python3 -m venv /work/side/venv && /work/side/venv/bin/pip install torch==2.13.0 numpy pyrallis
    git clone https://github.com/tinkoff-ai/CORL /work/side/CORL   # commit in offline_common
    /work/side/venv/bin/python benchmarks/parity/awac_reference.py --corl /work/side/CORL

Imports CORL's ``algorithms/offline/awac.py`` by path (d4rl, gym, wandb, tqdm stubbed),
builds its actor and critics at width 16, copies in the initial weights of
``offline_common``, and runs ``AdvantageWeightedActorCritic.update`` on 30 numpy batches
(terminal rows included) with CORL's defaults (lambda 1, weights clamped at 100, lr 3e-4,
tau 5e-3). The policy samples (a' ~ pi(s') for the target, a ~ pi(s) for V(s); CORL's
``Normal.rsample``) take their standard-normal draws from ``offline_common.noise_draws``.
Writes per-update critic / actor losses and every final parameter.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from corl_harness import corl_batch, get_layers, load_corl, scripted_noise, set_layers
from offline_common import (
    ACT_DIM,
    BATCH,
    CORL_COMMIT,
    CORL_REPO,
    GOLDEN_DIR,
    HIDDEN,
    OBS_DIM,
    Script,
    awac_initial,
    encode_case,
    inputs_digest,
    layers,
    make_batches,
    noise_draws,
    save_golden,
)

UPDATES = 30
SETTINGS = {"awac_lambda": 1.0, "exp_adv_max": 100.0, "gamma": 0.99, "tau": 0.005, "lr": 3e-4}
NOISE = {"next": (BATCH, ACT_DIM), "current": (BATCH, ACT_DIM)}  # in CORL's draw order


def run_case(awac) -> dict:
    params = awac_initial()
    actor = awac.Actor(OBS_DIM, ACT_DIM, HIDDEN)
    critic_1, critic_2 = (
        awac.Critic(OBS_DIM, ACT_DIM, HIDDEN),
        awac.Critic(OBS_DIM, ACT_DIM, HIDDEN),
    )
    set_layers(actor, layers(params, "actor"))
    with torch.no_grad():
        actor._log_std.copy_(torch.from_numpy(params["actor.log_std"]))
    set_layers(critic_1, layers(params, "critic0"))
    set_layers(critic_2, layers(params, "critic1"))
    lr = SETTINGS["lr"]
    trainer = awac.AdvantageWeightedActorCritic(  # the target critics are copies made here
        actor=actor,
        actor_optimizer=torch.optim.Adam(actor.parameters(), lr=lr),
        critic_1=critic_1,
        critic_1_optimizer=torch.optim.Adam(critic_1.parameters(), lr=lr),
        critic_2=critic_2,
        critic_2_optimizer=torch.optim.Adam(critic_2.parameters(), lr=lr),
        gamma=SETTINGS["gamma"],
        tau=SETTINGS["tau"],
        awac_lambda=SETTINGS["awac_lambda"],
        exp_adv_max=SETTINGS["exp_adv_max"],
    )
    draws = noise_draws(2, UPDATES, NOISE)
    noise = Script(d[name] for d in draws for name in NOISE)
    losses: dict[str, list] = {"critic_loss": [], "actor_loss": []}
    with scripted_noise(noise):
        for batch in (batches := make_batches(1, UPDATES)):
            log = trainer.update(corl_batch(batch))
            for name in losses:
                losses[name].append(log[name])
    assert noise.done()
    final = {
        **get_layers(trainer._actor, "actor"),
        "actor.log_std": trainer._actor._log_std.detach().numpy().copy(),
        **get_layers(trainer._critic_1, "critic0"),
        **get_layers(trainer._critic_2, "critic1"),
        **get_layers(trainer._target_critic_1, "target_critic0"),
        **get_layers(trainer._target_critic_2, "target_critic1"),
    }
    inputs = inputs_digest(params, batches, draws)
    return encode_case({**SETTINGS, "updates": UPDATES}, inputs, losses, final)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corl", type=Path, required=True, help="a CORL checkout")
    parser.add_argument("--out", type=Path, default=GOLDEN_DIR / "awac.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    awac = load_corl(args.corl, "algorithms/offline/awac.py", "corl_awac")
    meta = {
        "reference": f"{CORL_REPO}@{CORL_COMMIT} algorithms/offline/awac.py",
        "command": "python " + " ".join(["benchmarks/parity/awac_reference.py", *sys.argv[1:]]),
        "torch": torch.__version__,
        "data": "offline_common: awac_initial, make_batches seed 1, noise_draws seed 2",
    }
    save_golden(args.out, meta, {"default": run_case(awac)})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
