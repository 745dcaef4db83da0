"""Golden numbers of OfflineRL-Kit's MOPO (tests/golden/mopo.json), for tests/test_mopo.py.

Run in a side environment with torch and numpy, outside the repository, on the
``offlinerlkit`` package of a snapshot of yihaosun1124/OfflineRL-Kit (``COMMIT``)::

    /work/side/parity-online/venv/bin/python benchmarks/parity/mopo_reference.py \\
        --kit <folder holding offlinerlkit/>

Builds ``MOPOPolicy`` as ``run_example/run_mopo.py`` does (``ActorProb`` on an ``MLP`` with
``TanhDiagGaussian(unbounded=True, conditioned_sigma=True)``, two ``Critic``s, Adam, the
actor's ``CosineAnnealingLR`` stepped once per epoch, automatic temperature), with
hidden 16 x 16 and the initial weights of ``initial`` below, and an ``EnsembleDynamics``
(4 members, 2 elites, hidden 16 x 16, a set input scaler) for the rollouts. Two cases:

* ``learn``: 30 ``MOPOPolicy.learn`` calls on batches of 32 rows (4 "real" then 28
  "fake"), epochs of 10 updates (the lr schedule steps after each), the policy's Normal
  draws scripted (the narrow action 0 keeps the entropy under -|A|: the temperature
  rises, capped at 1); ``falling`` the same with target entropy -20, so it falls. Every
  loss and the final parameters are written.
* ``rollout``: ``MOPOPolicy.rollout`` of 3 steps from 8 states with penalty 0.7 and a
  termination rule (next_obs[0] > 0.6), every draw (the policy's Normal, the model's
  ``np.random.normal``, ``random_elite_idxs``) recorded so our side replays them.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import numpy as np
import torch

COMMIT = "e3ce697"
OUT = Path(__file__).resolve().parents[2] / "tests" / "golden" / "mopo.json"
OBS, ACT, HIDDEN, BATCH, REAL = 3, 2, 16, 32, 4
MEMBERS, ELITES, DYN_HIDDEN = 4, 2, (16, 16)
UPDATES, EPOCH_STEPS, LR = 30, 10, {"actor": 1e-3, "critic": 3e-3, "alpha": 1e-2}
ROLLOUT_STARTS, ROLLOUT_LENGTH, PENALTY, DONE_ABOVE = 8, 3, 0.7, 0.6


def initial() -> dict[str, np.ndarray]:
    """Actor (hidden, then mu | log-std heads side by side, the log-std bias of action 0
    at -5.5 so the clamp at -5 acts), two critics, the dynamics ensemble and its scaler."""
    rng = np.random.default_rng(0)
    params: dict[str, np.ndarray] = {}

    def mlp(net: str, dims: list[int]) -> None:
        for i, (a, b) in enumerate(zip(dims, dims[1:])):
            bound = 1 / np.sqrt(a)
            params[f"{net}.{i}.w"] = rng.uniform(-bound, bound, (a, b)).astype(np.float32)
            params[f"{net}.{i}.b"] = rng.uniform(-bound, bound, b).astype(np.float32)

    mlp("actor", [OBS, HIDDEN, HIDDEN, 2 * ACT])
    params["actor.2.b"][ACT] = -5.5
    mlp("critic0", [OBS + ACT, HIDDEN, HIDDEN, 1])
    mlp("critic1", [OBS + ACT, HIDDEN, HIDDEN, 1])
    dims = [OBS + ACT, *DYN_HIDDEN, 2 * (OBS + 1)]
    for i, (a, b) in enumerate(zip(dims, dims[1:])):
        bound = 1 / np.sqrt(a)
        params[f"dyn.{i}.w"] = rng.uniform(-bound, bound, (MEMBERS, a, b)).astype(np.float32)
        params[f"dyn.{i}.b"] = rng.uniform(-0.1, 0.1, (MEMBERS, 1, b)).astype(np.float32)
    params["dyn.max_logvar"] = (0.5 + 0.1 * rng.standard_normal(OBS + 1)).astype(np.float32)
    params["dyn.min_logvar"] = (-10 + 0.1 * rng.standard_normal(OBS + 1)).astype(np.float32)
    params["dyn.elites"] = np.array([2, 0])
    params["dyn.mean"] = rng.standard_normal(OBS + ACT).astype(np.float32)
    params["dyn.std"] = rng.uniform(0.5, 2.0, OBS + ACT).astype(np.float32)
    return params


def batches() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    out = []
    for _ in range(UPDATES):
        terminated = (rng.random(BATCH) < 0.25).astype(np.float32)
        terminated[0] = 1.0
        out.append({
            "obs": rng.standard_normal((BATCH, OBS)).astype(np.float32),
            "action": rng.uniform(-0.9, 0.9, (BATCH, ACT)).astype(np.float32),
            "reward": rng.standard_normal(BATCH).astype(np.float32),
            "next_obs": rng.standard_normal((BATCH, OBS)).astype(np.float32),
            "terminated": terminated,
        })  # fmt: skip
    return out


def normal_draws(count: int, shape: tuple[int, ...], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(count)]


def rollout_starts() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((ROLLOUT_STARTS, OBS)).astype(np.float32)


def build(kit_modules: dict, params: dict[str, np.ndarray], target_entropy: float):
    """MOPOPolicy with ``params``, its optimisers and the actor's lr schedule."""
    MLP, Critic = kit_modules["MLP"], kit_modules["Critic"]  # noqa: N806
    actor = kit_actor(kit_modules, params)
    critics = [Critic(MLP(OBS + ACT, [HIDDEN, HIDDEN])) for _ in range(2)]
    with torch.no_grad():
        for c, critic in enumerate(critics):
            layers = [m for m in critic.modules() if isinstance(m, torch.nn.Linear)]
            for i, layer in enumerate(layers):
                layer.weight.copy_(torch.from_numpy(params[f"critic{c}.{i}.w"].T.copy()))
                layer.bias.copy_(torch.from_numpy(params[f"critic{c}.{i}.b"]))
    actor_optim = torch.optim.Adam(actor.parameters(), lr=LR["actor"])
    critic_optims = [torch.optim.Adam(c.parameters(), lr=LR["critic"]) for c in critics]
    log_alpha = torch.zeros(1, requires_grad=True)
    alpha_optim = torch.optim.Adam([log_alpha], lr=LR["alpha"])
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(actor_optim, UPDATES // EPOCH_STEPS)
    dynamics = build_dynamics(kit_modules, params)
    policy = kit_modules["MOPOPolicy"](
        dynamics, actor, critics[0], critics[1], actor_optim, *critic_optims,
        tau=0.005, gamma=0.99, alpha=(target_entropy, log_alpha, alpha_optim),
    )  # fmt: skip
    return policy, schedule


def kit_actor(kit_modules: dict, params: dict[str, np.ndarray]):
    """The reference's ``ActorProb`` (MLP + ``TanhDiagGaussian``) with the golden weights."""
    backbone = kit_modules["MLP"](OBS, [HIDDEN, HIDDEN])
    dist = kit_modules["TanhDiagGaussian"](HIDDEN, ACT, unbounded=True, conditioned_sigma=True,
                                           max_mu=1.0)  # fmt: skip
    actor = kit_modules["ActorProb"](backbone, dist)
    with torch.no_grad():
        hidden = [m for m in backbone.modules() if isinstance(m, torch.nn.Linear)]
        for i, layer in enumerate(hidden):
            layer.weight.copy_(torch.from_numpy(params[f"actor.{i}.w"].T.copy()))
            layer.bias.copy_(torch.from_numpy(params[f"actor.{i}.b"]))
        w, b = params["actor.2.w"], params["actor.2.b"]
        dist.mu.weight.copy_(torch.from_numpy(w[:, :ACT].T.copy()))
        dist.mu.bias.copy_(torch.from_numpy(b[:ACT]))
        dist.sigma.weight.copy_(torch.from_numpy(w[:, ACT:].T.copy()))
        dist.sigma.bias.copy_(torch.from_numpy(b[ACT:]))
    return actor


def kit_model(kit_modules: dict, params: dict[str, np.ndarray]):
    """The reference's ``EnsembleDynamicsModel`` with the golden weights and elites, and
    its input ``StandardScaler``."""
    model = kit_modules["EnsembleDynamicsModel"](
        OBS, ACT, DYN_HIDDEN, MEMBERS, ELITES, weight_decays=[0.0] * (len(DYN_HIDDEN) + 1)
    )
    with torch.no_grad():
        for i, layer in enumerate([*model.backbones, model.output_layer]):
            layer.weight.copy_(torch.from_numpy(params[f"dyn.{i}.w"]))
            layer.bias.copy_(torch.from_numpy(params[f"dyn.{i}.b"]))
        model.max_logvar.copy_(torch.from_numpy(params["dyn.max_logvar"]))
        model.min_logvar.copy_(torch.from_numpy(params["dyn.min_logvar"]))
    model.set_elites([int(i) for i in params["dyn.elites"]])
    return model, kit_modules["StandardScaler"](params["dyn.mean"][None], params["dyn.std"][None])


def terminal_fn(obs: np.ndarray, act: np.ndarray, next_obs: np.ndarray) -> np.ndarray:
    """The golden rule: a rollout ends where next_obs[0] > ``DONE_ABOVE``."""
    return (next_obs[:, 0] > DONE_ABOVE)[:, None]


def build_dynamics(kit_modules: dict, params: dict[str, np.ndarray]):
    model, scaler = kit_model(kit_modules, params)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    return kit_modules["EnsembleDynamics"](model, optim, scaler, terminal_fn, penalty_coef=PENALTY)


def recorded_normals(rng: np.random.Generator, record: dict[str, list]):
    """Stand-ins for the policy's ``Normal`` draws and the model's ``np.random.normal``
    that draw from ``rng`` and append each draw to ``record["policy"]`` / ``["model"]``."""

    def standard_normal(shape, dtype, device) -> torch.Tensor:
        value = rng.standard_normal(tuple(shape)).astype(np.float32)
        record["policy"].append(value)
        return torch.from_numpy(value).to(dtype)

    def model_normal(size: tuple[int, ...]) -> np.ndarray:
        value = rng.standard_normal(size).astype(np.float32)
        record["model"].append(value)
        return value

    return standard_normal, model_normal


def final_params(policy) -> dict[str, list]:
    out = {}
    for name, module in (("actor", policy.actor), ("critic0", policy.critic1),
                         ("critic1", policy.critic2), ("target_critic0", policy.critic1_old),
                         ("target_critic1", policy.critic2_old)):  # fmt: skip
        for key, value in module.state_dict().items():
            out[f"{name}.{key}"] = value.numpy().round(9).tolist()
    return out


def learn_case(kit_modules: dict, target_entropy: float) -> dict:
    params = initial()
    policy, schedule = build(kit_modules, params, target_entropy)
    draws = normal_draws(2 * UPDATES, (BATCH, ACT), seed=2)
    script = iter(draws)
    from torch.distributions import normal as normal_module  # noqa: PLC0415

    normal_module._standard_normal = lambda shape, dtype, device: torch.from_numpy(next(script)).to(
        dtype
    )
    losses: dict[str, list[float]] = {}
    for step, batch in enumerate(batches()):
        tensors = {
            "observations": batch["obs"], "actions": batch["action"],
            "rewards": batch["reward"][:, None], "next_observations": batch["next_obs"],
            "terminals": batch["terminated"][:, None],
        }  # fmt: skip
        tensors = {k: torch.from_numpy(v) for k, v in tensors.items()}
        real = {k: v[:REAL] for k, v in tensors.items()}
        fake = {k: v[REAL:] for k, v in tensors.items()}
        for key, value in policy.learn({"real": real, "fake": fake}).items():
            losses.setdefault(key, []).append(float(value))
        if (step + 1) % EPOCH_STEPS == 0:
            schedule.step()
    return {"target_entropy": target_entropy, "losses": losses, "params": final_params(policy)}


def rollout_case(kit_modules: dict) -> dict:
    params = initial()
    policy, _ = build(kit_modules, params, -float(ACT))
    rng = np.random.default_rng(4)
    record: dict[str, list] = {"policy": [], "model": [], "elites": []}
    from torch.distributions import normal as normal_module  # noqa: PLC0415

    standard_normal, model_normal = recorded_normals(rng, record)

    elites = policy.dynamics.model.elites.data.numpy()

    def random_elite_idxs(batch_size: int) -> np.ndarray:
        position = rng.integers(len(elites), size=batch_size)
        record["elites"].append(position)
        return elites[position]

    normal_module._standard_normal = standard_normal
    np.random.normal = model_normal
    policy.dynamics.model.random_elite_idxs = random_elite_idxs
    transitions, _ = policy.rollout(rollout_starts(), ROLLOUT_LENGTH)
    return {
        "draws": {k: [v.tolist() for v in values] for k, values in record.items()},
        "transitions": {
            k: np.asarray(v, dtype=np.float64).round(9).tolist() for k, v in transitions.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kit", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    for name in ("gym", "gym.envs", "gym.envs.mujoco", "d4rl", "mujoco_py"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["gym.envs.mujoco"].mujoco_env = types.SimpleNamespace(MujocoEnv=object)
    sys.modules["gym"].Env = object
    sys.modules["gym"].spaces = types.SimpleNamespace(Space=object, Box=object)
    sys.path.insert(0, str(args.kit.resolve()))
    from offlinerlkit.dynamics.ensemble_dynamics import EnsembleDynamics  # noqa: PLC0415
    from offlinerlkit.modules import ActorProb, Critic, TanhDiagGaussian  # noqa: PLC0415
    from offlinerlkit.modules.dynamics_module import EnsembleDynamicsModel  # noqa: PLC0415
    from offlinerlkit.nets import MLP  # noqa: PLC0415
    from offlinerlkit.policy.model_based.mopo import MOPOPolicy  # noqa: PLC0415
    from offlinerlkit.utils.scaler import StandardScaler  # noqa: PLC0415

    kit = dict(MLP=MLP, ActorProb=ActorProb, Critic=Critic, TanhDiagGaussian=TanhDiagGaussian,
               EnsembleDynamicsModel=EnsembleDynamicsModel, EnsembleDynamics=EnsembleDynamics,
               StandardScaler=StandardScaler, MOPOPolicy=MOPOPolicy)  # fmt: skip
    torch.set_num_threads(1)
    golden = {
        "reference": f"github.com/yihaosun1124/OfflineRL-Kit@{COMMIT} MOPOPolicy",
        "torch": torch.__version__,
        "cases": {
            "learn": learn_case(kit, -float(ACT)),
            "falling": learn_case(kit, -20.0),
            "rollout": rollout_case(kit),
        },
    }
    args.out.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e3:.0f} KB)")


if __name__ == "__main__":
    main()
