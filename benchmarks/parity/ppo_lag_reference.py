"""PPO-Lagrangian parity: run OmniSafe's ``PPOLag._update`` (one projected Adam step of
lambda, the buffer's advantage standardisation, ``update_iters`` shuffled passes of V_r,
V_c and clipped-surrogate actor steps on (A_r - lambda A_c) / (1 + lambda), KL early stop)
from rlcore's initial weights on recorded rollouts and permutations, and write
tests/golden/ppo_lag.json.

Run (side environment of ``sac_lag_reference.py``'s header; rich installed)::

    OMP_NUM_THREADS=1 /work/side/parity-jax/venv/bin/python benchmarks/parity/ppo_lag_reference.py

Built without OmniSafe's trainer (environment, logger and vector buffer stubbed; its
``OnPolicyBuffer.get`` standardises the recorded raw advantages). OmniSafe's own
``PPOLag._update``, ``PolicyGradient._update`` and its critic / actor steps, ``PPO._loss_pi``,
``ConstraintActorCritic`` (gaussian_learning actor) and ``Lagrange`` run as they are, with
``PPOLag.yaml``'s settings (clip 0.2, target KL 0.02, grad norm 40, critic norm 0.001,
lambda init 0.001, lambda Adam lr 0.035, lr 3e-4, tanh) except the sizes (hidden 16,
256 rows, minibatch 64, at most 8 passes) and target KL 0.001 (so the early stop happens). ``Metrics/EpCost`` is 30 (> limit 25). The
DataLoader's shuffles (``torch.randperm``) return the recorded permutations.
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium.spaces import Box
from jax_refs_harness import Feed, commit, stub_omnisafe_on_policy, write_golden

from rlcore.benchmarks.parity.jax_refs_data import PPOLAG_SIZES, ppo_lag_inputs

REPO = "PKU-Alignment/omnisafe"
stub_omnisafe_on_policy("naive_lagrange")

from omnisafe.algorithms.on_policy.naive_lagrange.ppo_lag import PPOLag  # noqa: E402
from omnisafe.common.buffer.onpolicy_buffer import OnPolicyBuffer  # noqa: E402
from omnisafe.common.lagrange import Lagrange  # noqa: E402
from omnisafe.models.actor_critic.constraint_actor_critic import (  # noqa: E402
    ConstraintActorCritic,
)
from omnisafe.utils.config import Config  # noqa: E402

S = PPOLAG_SIZES
PERMS = Feed()
_randperm = torch.randperm


def randperm(n: int, *args: object, **kwargs: object) -> torch.Tensor:
    """The DataLoader's shuffle: the recorded permutation of this pass."""
    return torch.as_tensor(PERMS.next((n,)))


torch.randperm = randperm


class Logger:
    """What PPOLag reads from its logger (the mean episode cost); stores the rest."""

    def __init__(self) -> None:
        self.stored: dict[str, float] = {}

    def store(self, values: dict | None = None, **kwargs: object) -> None:
        for key, value in (values or kwargs).items():
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                value = value.item()
            if isinstance(value, (int, float)):
                self.stored[key] = float(value)

    def log(self, message: str) -> None:
        print(message)

    def get_stats(self, key: str) -> list[float]:
        assert key == "Metrics/EpCost"
        return [S["episode_cost"]]


def load_mlp(net: torch.nn.Sequential, arrays: dict, prefix: str) -> None:
    with torch.no_grad():
        for index in (0, 2, 4):
            net[index].weight.copy_(torch.as_tensor(arrays[f"{prefix}{index}.weight"]))
            net[index].bias.copy_(torch.as_tensor(arrays[f"{prefix}{index}.bias"]))


def mlp_arrays(net: torch.nn.Sequential, prefix: str) -> dict:
    return {f"{prefix}{i}.{p}": getattr(net[i], p).detach().numpy().copy()
            for i in (0, 2, 4) for p in ("weight", "bias")}  # fmt: skip


def run() -> dict:
    inputs = ppo_lag_inputs()
    h = S["hidden"]
    model_cfgs = Config.dict2config({
        "weight_initialization_mode": "kaiming_uniform", "actor_type": "gaussian_learning",
        "linear_lr_decay": True,
        "actor": {"hidden_sizes": [h, h], "activation": "tanh", "lr": 3e-4},
        "critic": {"hidden_sizes": [h, h], "activation": "tanh", "lr": 3e-4},
    })  # fmt: skip
    space = lambda n: Box(-1.0, 1.0, (n,), np.float32)  # noqa: E731
    algo = object.__new__(PPOLag)
    algo._actor_critic = ac = ConstraintActorCritic(
        space(S["obs_dim"]), space(S["act_dim"]), model_cfgs, epochs=10
    )
    algo._cfgs = Config.dict2config({"algo_cfgs": {
        "update_iters": S["epochs"], "batch_size": S["minibatch"], "clip": 0.2,
        "entropy_coef": 0.0, "kl_early_stop": True, "target_kl": S["target_kl"],
        "use_max_grad_norm": True, "max_grad_norm": 40.0, "use_critic_norm": True,
        "critic_norm_coef": 0.001, "use_cost": True,
    }})  # fmt: skip
    algo._logger = logger = Logger()
    algo._lagrange = Lagrange(
        cost_limit=S["cost_limit"], lagrangian_multiplier_init=0.001, lambda_lr=0.035,
        lambda_optimizer="Adam",
    )  # fmt: skip
    load_mlp(ac.actor.mean, inputs["actor"], "mean.")
    with torch.no_grad():
        ac.actor.log_std.copy_(torch.as_tensor(inputs["actor"]["log_std"]))
    load_mlp(ac.reward_critic.critic_0, inputs["reward_critic"], "")
    load_mlp(ac.cost_critic.critic_0, inputs["cost_critic"], "")
    buffer = object.__new__(OnPolicyBuffer)
    buffer._standardized_adv_r = buffer._standardized_adv_c = True
    algo._buf = buffer
    results = []
    for rollout in inputs["rollouts"]:
        obs, act = torch.as_tensor(rollout["obs"]), torch.as_tensor(rollout["action"])
        with torch.no_grad():
            ac.actor(obs)
            log_prob = ac.actor.log_prob(act) + torch.as_tensor(rollout["log_prob_offset"])
        buffer.data = {
            "obs": obs, "act": act, "logp": log_prob,
            "adv_r": torch.as_tensor(rollout["advantage"]),
            "adv_c": torch.as_tensor(rollout["cost_advantage"]),
            "target_value_r": torch.as_tensor(rollout["returns"]),
            "target_value_c": torch.as_tensor(rollout["cost_returns"]),
            "discounted_ret": torch.zeros(len(obs)),
        }  # fmt: skip
        for perm in rollout["permutations"]:  # RandomSampler draws a second permutation
            PERMS.extend([perm, np.arange(len(perm))])  # per pass for its remainder (none)
        logger.stored.clear()
        algo._update()
        epochs = int(logger.stored["Train/StopIter"])
        PERMS.items.clear()  # passes after a KL stop are not run
        results.append({
            "log_prob": log_prob.numpy(), "epochs": epochs, "kl": logger.stored["Train/KL"],
            "value_loss": logger.stored["Loss/Loss_reward_critic"],
            "cost_value_loss": logger.stored["Loss/Loss_cost_critic"],
            "policy_loss": logger.stored["Loss/Loss_pi"],
            "lagrange_multiplier": float(algo._lagrange.lagrangian_multiplier.detach()),
        })  # fmt: skip
    return {
        "updates": results,
        "actor": {
            **mlp_arrays(ac.actor.mean, "mean."),
            "log_std": ac.actor.log_std.detach().numpy(),
        },
        "reward_critic": mlp_arrays(ac.reward_critic.critic_0, ""),
        "cost_critic": mlp_arrays(ac.cost_critic.critic_0, ""),
    }


def main() -> None:
    result = run()
    print([{k: v for k, v in u.items() if k != "log_prob"} for u in result["updates"]])
    write_golden("ppo_lag", {
        "reference": {"repo": REPO, "commit": commit(REPO),
                      "code": "omnisafe/algorithms/on_policy/naive_lagrange/ppo_lag.py "
                              "PPOLag._update",
                      "command": "OMP_NUM_THREADS=1 /work/side/parity-jax/venv/bin/python "
                                 "benchmarks/parity/ppo_lag_reference.py",
                      "torch": torch.__version__},
        "sizes": S,
        "inputs": "benchmarks/parity/jax_refs_data.py ppo_lag_inputs(seed=0)",
        "reference_as_is": result,
    })  # fmt: skip


if __name__ == "__main__":
    main()
