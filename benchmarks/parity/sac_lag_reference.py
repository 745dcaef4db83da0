"""SAC-Lagrangian parity: run OmniSafe's ``SACLag._update`` (reward critics with the entropy
backup, the cost critic on the policy's mean next action, the actor on
(alpha log pi - min Q_r + lambda Q_c) / (1 + lambda), the Polyak targets, one projected Adam
step of lambda) from rlcore's initial weights on recorded batches and noise, and write
tests/golden/sac_lag.json.

Run (the side environment of ``rlpd_reference.py``'s header plus torch 2.13 CPU and
gymnasium; github:PKU-Alignment/omnisafe unpacked into /work/side/parity-jax/src)::

    /work/side/parity-jax/venv/bin/pip install torch==2.13.0 gymnasium
    OMP_NUM_THREADS=1 /work/side/parity-jax/venv/bin/python benchmarks/parity/sac_lag_reference.py

The algorithm object is built without OmniSafe's trainer (no environment, buffer or
logger: those modules are stubbed, ``_buf.sample_batch`` returns the recorded batches and
``Metrics/EpCost`` is a fixed 30 > cost limit 25, so lambda moves from the first update).
OmniSafe's own ``SACLag._update``, ``_update_reward_critic``, ``_update_cost_critic``,
``_update_actor``, ``_loss_pi``, ``ConstraintActorQCritic`` and ``Lagrange`` run as they
are. Settings: ``SACLag.yaml`` (alpha 0.2 fixed, lr 3e-4, gamma 0.99, polyak 0.005, grad
norm 40, lambda Adam lr 1e-5) except ``policy_delay=1`` (ours takes 2 actor steps every 2
updates, OmniSafe 1: a documented departure, compared line by line) and lambda's initial
value 0.5 (0.001 makes the lambda Q_c term invisible in a few updates). The Gaussian
samples (``Normal.rsample``) come from the recorded noise.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import torch
from gymnasium.spaces import Box
from jax_refs_harness import SRC, Feed, commit, stub_package, write_golden

from rlcore.benchmarks.parity.jax_refs_data import SACLAG_SIZES, sac_lag_inputs

REPO = "PKU-Alignment/omnisafe"
ROOT = SRC / REPO.replace("/", "+") / "omnisafe"
sys.path.insert(0, str(ROOT.parent))
for name in ("", ".algorithms", ".algorithms.off_policy", ".common", ".models", ".models.actor",
             ".models.critic", ".models.actor_critic", ".utils"):  # fmt: skip
    stub_package("omnisafe" + name, ROOT / name[1:].replace(".", "/"))
stub_package("omnisafe.algorithms.registry", register=lambda cls: cls)
sys.modules["omnisafe.algorithms"].registry = sys.modules["omnisafe.algorithms.registry"]
stub_package("omnisafe.algorithms.base_algo", BaseAlgo=object)
stub_package("omnisafe.adapter", OffPolicyAdapter=object)
stub_package("omnisafe.common.buffer", VectorOffPolicyBuffer=object)
stub_package("omnisafe.common.logger", Logger=object)

from omnisafe.algorithms.off_policy.sac_lag import SACLag  # noqa: E402
from omnisafe.common.lagrange import Lagrange  # noqa: E402
from omnisafe.models.actor_critic.constraint_actor_q_critic import (  # noqa: E402
    ConstraintActorQCritic,
)
from omnisafe.utils.config import Config  # noqa: E402

S = SACLAG_SIZES
NOISE = Feed()


def rsample(self, sample_shape=torch.Size()):  # noqa: ANN001, ANN201, ARG001, B008
    return self.loc + self.scale * torch.as_tensor(NOISE.next(tuple(self.loc.shape)))


torch.distributions.Normal.rsample = rsample


class Logger:
    """What SACLag reads from its logger: the mean episode cost."""

    def store(self, *args: object, **kwargs: object) -> None:
        pass

    def get_stats(self, key: str) -> list[float]:
        assert key == "Metrics/EpCost"
        return [S["episode_cost"]]


def load_ensemble(critic: torch.nn.Module, arrays: dict, members: int) -> None:
    """rlcore QEnsemble arrays (E, in, out) -> OmniSafe's critic_{i}.0.{0,2,4} Linears."""
    names = ("net.hidden_layers.0", "net.hidden_layers.1", "net.output_layer")
    with torch.no_grad():
        for m in range(members):
            for index, name in zip((0, 2, 4), names):
                layer = getattr(critic, f"critic_{m}")[0][index]
                layer.weight.copy_(torch.as_tensor(arrays[f"{name}.weight"][m].T))
                layer.bias.copy_(torch.as_tensor(arrays[f"{name}.bias"][m, 0]))


def ensemble_arrays(critic: torch.nn.Module, members: int) -> dict:
    names = ("net.hidden_layers.0", "net.hidden_layers.1", "net.output_layer")
    out = {}
    for index, name in zip((0, 2, 4), names):
        layers = [getattr(critic, f"critic_{m}")[0][index] for m in range(members)]
        out[f"{name}.weight"] = np.stack([x.weight.detach().numpy().T for x in layers])
        out[f"{name}.bias"] = np.stack([x.bias.detach().numpy()[None] for x in layers])
    return out


def run() -> dict:
    inputs = sac_lag_inputs()
    h = S["hidden"]
    torch.manual_seed(0)
    model_cfgs = Config.dict2config({
        "weight_initialization_mode": "kaiming_uniform", "actor_type": "gaussian_sac",
        "linear_lr_decay": False,
        "actor": {"hidden_sizes": [h, h], "activation": "relu", "lr": 3e-4},
        "critic": {"hidden_sizes": [h, h], "activation": "relu", "lr": 3e-4, "num_critics": 2},
    })  # fmt: skip
    space = lambda n: Box(-1.0, 1.0, (n,), np.float32)  # noqa: E731
    algo = object.__new__(SACLag)
    algo._actor_critic = ac = ConstraintActorQCritic(
        space(S["obs_dim"]), space(S["act_dim"]), model_cfgs, epochs=1
    )
    algo._cfgs = Config.dict2config({"algo_cfgs": {
        "update_iters": 1, "gamma": 0.99, "use_critic_norm": False, "critic_norm_coeff": 0.001,
        "max_grad_norm": 40, "polyak": 0.005, "policy_delay": 1, "use_cost": True,
        "alpha": 0.2, "auto_alpha": False, "warmup_epochs": 0,
    }})  # fmt: skip
    algo._log_alpha = torch.log(torch.tensor(0.2))  # SAC._init with auto_alpha False
    algo._logger = Logger()
    algo._update_count = 0
    algo._epoch = 1  # > warmup_epochs: lambda steps every update
    algo._lagrange = Lagrange(
        cost_limit=S["cost_limit"], lagrangian_multiplier_init=S["lagrangian_init"],
        lambda_lr=1e-5, lambda_optimizer="Adam",
    )  # fmt: skip
    with torch.no_grad():
        for index in (0, 2, 4):
            ac.actor.net[index].weight.copy_(
                torch.as_tensor(inputs["actor"][f"net.{index}.weight"])
            )
            ac.actor.net[index].bias.copy_(torch.as_tensor(inputs["actor"][f"net.{index}.bias"]))
    for net, key, members in ((ac.reward_critic, "critic", 2), (ac.target_reward_critic, "critic", 2),
                              (ac.cost_critic, "cost_critic", 1), (ac.target_cost_critic, "cost_critic", 1)):  # fmt: skip
        load_ensemble(net, inputs[key], members)
    batches = iter(inputs["batches"])

    def sample_batch() -> dict:
        b = {k: torch.as_tensor(v) for k, v in next(batches).items()}
        return {"obs": b["obs"], "act": b["action"], "reward": b["reward"], "cost": b["cost"],
                "done": b["terminated"], "next_obs": b["next_obs"]}  # fmt: skip

    algo._buf = types.SimpleNamespace(sample_batch=sample_batch)
    stored: list[dict] = []
    algo._logger.store = lambda values=None, **kw: stored.append(values or kw)
    losses = []
    for noise in inputs["noise"]:
        NOISE.extend([noise["critic"], noise["actor"]])
        stored.clear()
        algo._update()
        assert NOISE.empty()
        merged = {k: float(v) for d in stored for k, v in d.items()}
        losses.append({
            "reward_critic_loss": merged["Loss/Loss_reward_critic"],
            "cost_critic_loss": merged["Loss/Loss_cost_critic"],
            "actor_loss": merged["Loss/Loss_pi"],
            "lagrange_multiplier": merged["Metrics/LagrangeMultiplier"],
        })  # fmt: skip
    actor = {f"net.{i}.{p}": getattr(ac.actor.net[i], p).detach().numpy()
             for i in (0, 2, 4) for p in ("weight", "bias")}  # fmt: skip
    return {
        "losses": losses,
        "actor": actor,
        "critic": ensemble_arrays(ac.reward_critic, 2),
        "target_critic": ensemble_arrays(ac.target_reward_critic, 2),
        "cost_critic": ensemble_arrays(ac.cost_critic, 1),
        "target_cost_critic": ensemble_arrays(ac.target_cost_critic, 1),
        "lagrange_multiplier": float(algo._lagrange.lagrangian_multiplier.detach()),
    }


def main() -> None:
    result = run()
    print(result["losses"][-1])
    write_golden("sac_lag", {
        "reference": {"repo": REPO, "commit": commit(REPO),
                      "code": "omnisafe/algorithms/off_policy/sac_lag.py SACLag._update",
                      "command": "OMP_NUM_THREADS=1 /work/side/parity-jax/venv/bin/python "
                                 "benchmarks/parity/sac_lag_reference.py",
                      "torch": torch.__version__},
        "sizes": S,
        "inputs": "benchmarks/parity/jax_refs_data.py sac_lag_inputs(seed=0)",
        "reference_as_is": result,
    })  # fmt: skip


if __name__ == "__main__":
    main()
