"""CPO parity: run OmniSafe's ``CPO._update`` (its buffer's advantage standardisation,
``CPO._update_actor``: conjugate gradients on the Fisher-vector product, the dual's case
analysis and step, the backtracking line search; then ``update_iters`` shuffled passes of
V_r and V_c) from rlcore's initial weights on the recorded rollouts, episode costs and
permutations of ``benchmarks/parity/cpo_data.py``, and write tests/golden/cpo.json.

Run (side environment of ``sac_lag_reference.py``'s header: torch 2.13.0 CPU, rich)::

    OMP_NUM_THREADS=1 /work/side/parity-jax/venv/bin/python benchmarks/parity/cpo_reference.py

Built without OmniSafe's trainer as ``ppo_lag_reference.py`` (environment, logger and
vector buffer stubbed). OmniSafe's own ``CPO._update_actor`` / ``_determine_case`` /
``_step_direction`` / ``_cpo_search_step`` / ``_loss_pi_cost``, ``NaturalPG._update`` and
``_fvp``, ``PolicyGradient``'s critic steps and ``_loss_pi``, ``conjugate_gradients``,
``OnPolicyBuffer.get`` and ``ConstraintActorCritic`` run as they are, with ``CPO.yaml``'s
settings except the sizes (hidden 16, 256 rows, minibatch 64, 2 critic passes), target KL
0.02 and CG damping 0.03 (so the line search rejects steps for the KL and the cost bound).

Two runs from the same inputs: ``reference_as_is``, and ``reference_aligned``, where
``_step_direction`` is called with -r in place of r (a wrapper, OmniSafe's file is not
edited): OmniSafe takes g as the ascent gradient of the reward surrogate but keeps the
paper's formulas for the loss gradient, so its nu* = (lambda c - r) / s, its projection
bound r / c and its f_a's - r c / s all carry r with the wrong sign (algos/safe/cpo.py's
docstring). Only cases 1 and 2 read r's sign.
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium.spaces import Box
from jax_refs_harness import Feed, commit, stub_omnisafe_on_policy, write_golden

from rlcore.benchmarks.parity.cpo_data import CPO_SIZES, cpo_inputs

REPO = "PKU-Alignment/omnisafe"
stub_omnisafe_on_policy("second_order")

import omnisafe.algorithms.on_policy.second_order.cpo as cpo_module  # noqa: E402
from omnisafe.algorithms.on_policy.second_order.cpo import CPO  # noqa: E402
from omnisafe.common.buffer.onpolicy_buffer import OnPolicyBuffer  # noqa: E402
from omnisafe.models.actor_critic.constraint_actor_critic import (  # noqa: E402
    ConstraintActorCritic,
)
from omnisafe.utils.config import Config  # noqa: E402

S = CPO_SIZES
PERMS = Feed()


def randperm(n: int, *args: object, **kwargs: object) -> torch.Tensor:
    """The DataLoader's shuffle: the recorded permutation of this pass."""
    return torch.as_tensor(PERMS.next((n,)))


torch.randperm = randperm


class Logger:
    """What CPO reads from its logger (the mean episode cost); stores the rest."""

    def __init__(self) -> None:
        self.stored: dict[str, float] = {}
        self.episode_cost = 0.0
        self.rejections: list[str] = []  # the line search's reason per rejected step

    def store(self, values: dict | None = None, **kwargs: object) -> None:
        for key, value in (values or kwargs).items():
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                value = value.item()
            if isinstance(value, (int, float)):
                self.stored[key] = float(value)

    def log(self, message: str, color: str | None = None) -> None:
        for reason, key in (("violated KL", "kl"), ("no improve", "cost"),
                            ("did not improve", "reward")):  # fmt: skip
            if reason in message:
                self.rejections.append(key)

    def get_stats(self, key: str) -> list[float]:
        assert key == "Metrics/EpCost"
        return [self.episode_cost]


def load_mlp(net: torch.nn.Sequential, arrays: dict, prefix: str) -> None:
    with torch.no_grad():
        for index in (0, 2, 4):
            net[index].weight.copy_(torch.as_tensor(arrays[f"{prefix}{index}.weight"]))
            net[index].bias.copy_(torch.as_tensor(arrays[f"{prefix}{index}.bias"]))


def mlp_arrays(net: torch.nn.Sequential, prefix: str) -> dict:
    return {f"{prefix}{i}.{p}": getattr(net[i], p).detach().numpy().copy()
            for i in (0, 2, 4) for p in ("weight", "bias")}  # fmt: skip


class Recorder:
    """Wraps OmniSafe's conjugate gradients and ``_step_direction`` to keep x, p and the
    dual's direction (``align``: called with -r)."""

    def __init__(self, align: bool) -> None:
        self.align, self.solves, self.direction = align, [], None

    def install(self) -> None:
        solve, step = cpo_module.conjugate_gradients, CPO._step_direction

        def conjugate_gradients(*args: object, **kwargs: object) -> torch.Tensor:
            x = solve(*args, **kwargs)
            self.solves.append(x.detach().clone())
            return x

        def step_direction(algo: CPO, **kwargs: torch.Tensor) -> tuple:
            if self.align:
                kwargs["r"] = -kwargs["r"]
            out = step(algo, **kwargs)
            self.direction = out[0].detach().clone()
            return out

        cpo_module.conjugate_gradients = conjugate_gradients
        CPO._step_direction = step_direction
        self.restore = lambda: (setattr(cpo_module, "conjugate_gradients", solve),
                                setattr(CPO, "_step_direction", step))  # fmt: skip


def run(align: bool) -> dict:
    inputs = cpo_inputs()
    h = S["hidden"]
    model_cfgs = Config.dict2config({
        "weight_initialization_mode": "kaiming_uniform", "actor_type": "gaussian_learning",
        "linear_lr_decay": False,
        "actor": {"hidden_sizes": [h, h], "activation": "tanh", "lr": None},
        "critic": {"hidden_sizes": [h, h], "activation": "tanh", "lr": S["critic_lr"]},
    })  # fmt: skip
    space = lambda n: Box(-1.0, 1.0, (n,), np.float32)  # noqa: E731
    algo = object.__new__(CPO)
    algo._actor_critic = ac = ConstraintActorCritic(
        space(S["obs_dim"]), space(S["act_dim"]), model_cfgs, epochs=10
    )
    algo._cfgs = Config.dict2config({"algo_cfgs": {
        "update_iters": S["epochs"], "batch_size": S["minibatch"], "target_kl": S["target_kl"],
        "entropy_coef": 0.0, "use_max_grad_norm": True, "max_grad_norm": 40.0,
        "use_critic_norm": True, "critic_norm_coef": 0.001, "use_cost": True,
        "cg_damping": S["cg_damping"], "cg_iters": S["cg_iters"], "fvp_sample_freq": 1,
        "cost_limit": S["cost_limit"],
    }})  # fmt: skip
    algo._logger = logger = Logger()
    load_mlp(ac.actor.mean, inputs["actor"], "mean.")
    with torch.no_grad():
        ac.actor.log_std.copy_(torch.as_tensor(inputs["actor"]["log_std"]))
    load_mlp(ac.reward_critic.critic_0, inputs["reward_critic"], "")
    load_mlp(ac.cost_critic.critic_0, inputs["cost_critic"], "")
    names = [n for n, _ in ac.actor.named_parameters()]
    assert names == [
        "log_std",
        *(f"mean.{i}.{p}" for i in (0, 2, 4) for p in ("weight", "bias")),
    ], names  # fmt: skip  (rlcore's flat order too)
    buffer = object.__new__(OnPolicyBuffer)
    buffer._standardized_adv_r = buffer._standardized_adv_c = True
    algo._buf = buffer
    recorder = Recorder(align)
    recorder.install()
    results = []
    try:
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
            for perm in rollout["permutations"]:  # RandomSampler: a second (empty) draw
                PERMS.extend([perm, np.arange(len(perm))])
            logger.episode_cost = rollout["episode_cost"]
            logger.stored.clear()
            logger.rejections = []
            recorder.solves.clear()
            algo._update()
            assert PERMS.empty() and len(recorder.solves) == 2
            st = logger.stored
            results.append({
                "log_prob": log_prob.numpy(),
                "x": recorder.solves[0].numpy(), "p": recorder.solves[1].numpy(),
                "direction": recorder.direction.numpy(),
                "rejections": logger.rejections,
                "case": int(st["Misc/OptimCase"]), "accepted_step": int(st["Misc/AcceptanceStep"]),
                "q": st["Misc/q"], "r": st["Misc/r"], "s": st["Misc/s"], "A": st["Misc/A"],
                "B": st["Misc/B"], "lambda_star": st["Misc/Lambda_star"],
                "nu_star": st["Misc/Nu_star"], "kl": st["Train/KL"],
                "final_step_norm": st["Misc/FinalStepNorm"], "policy_loss": st["Loss/Loss_pi"],
                "value_loss": st["Loss/Loss_reward_critic"],
                "cost_value_loss": st["Loss/Loss_cost_critic"],
            })  # fmt: skip
    finally:
        recorder.restore()
    return {
        "updates": results,
        "actor": {
            **mlp_arrays(ac.actor.mean, "mean."),
            "log_std": ac.actor.log_std.detach().numpy().copy(),
        },
        "reward_critic": mlp_arrays(ac.reward_critic.critic_0, ""),
        "cost_critic": mlp_arrays(ac.cost_critic.critic_0, ""),
    }


def main() -> None:
    runs = {"reference_as_is": run(align=False), "reference_aligned": run(align=True)}
    keys = (
        "case",
        "accepted_step",
        "rejections",
        "q",
        "r",
        "s",
        "B",
        "lambda_star",
        "nu_star",
        "kl",
    )
    for name, result in runs.items():
        print(name)
        for u in result["updates"]:
            print("  ", {k: u[k] for k in keys})
    write_golden("cpo", {
        "reference": {"repo": REPO, "commit": commit(REPO),
                      "code": "omnisafe/algorithms/on_policy/second_order/cpo.py CPO._update "
                              "(NaturalPG._update)",
                      "command": "OMP_NUM_THREADS=1 /work/side/parity-jax/venv/bin/python "
                                 "benchmarks/parity/cpo_reference.py",
                      "torch": torch.__version__},
        "sizes": S,
        "inputs": "benchmarks/parity/cpo_data.py cpo_inputs(seed=0)",
        **runs,
    })  # fmt: skip


if __name__ == "__main__":
    main()
