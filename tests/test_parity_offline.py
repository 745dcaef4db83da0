"""Golden parity of the offline updates: IQL, TD3+BC, CQL, Cal-QL, AWAC, ReBRAC.

Each tests/golden/<algo>.json holds what the reference implementation computed (CORL's
PyTorch scripts; ReBRAC's JAX one), written by benchmarks/parity/<algo>_reference.py from
initial weights, batches (terminal rows included) and sampling noise drawn by
benchmarks/parity/offline_common.py. Here our agent starts from the same weights, takes
the same batches and, where its update samples, the same noise (torch's draws replaced by
the script, which checks every draw's shape), and must reproduce the reference's losses
at every update and every final parameter, targets included, within ``TOL`` (float32
rounding of differently ordered sums, grown over the updates).

These tests are the contract a redesign must keep: a wrong sign, side, mask or scale in
an update moves these numbers by orders of magnitude more than the tolerances (see
docs/PARITY.md for the mutations checked).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlcore.algos import rebrac
from rlcore.algos.awac import AWAC, AWACConfig
from rlcore.algos.cal_ql import CalQL, CalQLConfig
from rlcore.algos.cql import CQL, CQLConfig
from rlcore.algos.iql import IQL, IQLConfig
from rlcore.algos.rebrac import ReBRAC, ReBRACConfig
from rlcore.algos.riql import RIQL, RIQLConfig
from rlcore.algos.td3_bc import TD3BC, TD3BCConfig
from rlcore.benchmarks.parity.offline_common import (
    ACT_DIM,
    GOLDEN_DIR,
    OBS_DIM,
    Script,
    awac_initial,
    cql_initial,
    cql_noise_shapes,
    inputs_digest,
    iql_initial,
    layers,
    load_golden,
    make_batches,
    noise_draws,
    rebrac_initial,
    riql_initial,
    sparse_shifted_rewards,
    td3_bc_initial,
)
from rlcore.nets import EnsembleMLP
from rlcore.types import Batch

# |ours - reference| <= atol + rtol |reference|, for every loss of every update and every
# parameter element. float32 on both sides (the references ran float32). Measured: at most
# 1.2e-5 on losses of size ~90 (1.3e-7 relative) and 6e-7 on parameters (docs/PARITY.md);
# a mutation moves them by 1e-4 to 1e+1. Holds on every CPU kernel path: worst 45% of the
# bound (ReBRAC, JAX against torch rounding, the same on every path; issue 44).
TOL = {"loss_atol": 2e-6, "param_atol": 2e-6, "rtol": 1e-5}
OBS = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)


def close(ours: np.ndarray, reference: np.ndarray, atol: float, rtol: float) -> float:
    """Largest excess of |ours - reference| over atol + rtol |reference| (<= 0: within)."""
    diff = np.abs(np.asarray(ours, np.float64) - np.asarray(reference, np.float64))
    return float((diff - atol - rtol * np.abs(reference)).max())


def assert_parity(
    case: dict,
    losses: dict[str, list[float | None]],
    params: dict[str, np.ndarray],
    tol: dict[str, float],
) -> None:
    """Every golden loss (per update) and parameter within tolerance; the message names
    the worst offenders."""
    errors = []
    for name, reference in case["losses"].items():
        ours = losses[name]
        assert [v is None for v in ours] == [v is None for v in reference], name
        pairs = [(o, r) for o, r in zip(ours, reference) if r is not None]
        excess = close([o for o, _ in pairs], [r for _, r in pairs], tol["loss_atol"], tol["rtol"])
        if excess > 0:
            errors.append(f"loss {name}: max excess {excess:.3g}")
    assert set(params) == set(case["params"]), set(params) ^ set(case["params"])
    for name, reference in case["params"].items():
        excess = close(params[name], reference, tol["param_atol"], tol["rtol"])
        if excess > 0:
            errors.append(f"param {name}: max excess {excess:.3g}")
    assert not errors, "differs from the reference:\n" + "\n".join(errors)


def max_diffs(
    case: dict, losses: dict[str, list[float | None]], params: dict[str, np.ndarray]
) -> tuple[float, float]:
    """(max |loss difference|, max |parameter difference|) against the golden case."""
    loss = max(
        abs(o - r)
        for name, reference in case["losses"].items()
        for o, r in zip(losses[name], reference)
        if r is not None
    )
    param = max(float(np.abs(params[n] - r).max()) for n, r in case["params"].items())
    return loss, param


def our_batch(batch: dict[str, np.ndarray]) -> Batch:
    t = {name: torch.from_numpy(value) for name, value in batch.items()}
    return Batch(
        obs=t["obs"],
        action=t["action"],
        reward=t["reward"],
        next_obs=t["next_obs"],
        terminated=t["terminated"],
        truncated=torch.zeros_like(t["terminated"]),
        mc_return=t["mc_return"],
        extras={"next_action": t["next_action"], "has_next_action": t["has_next_action"]},
    )


# ---- our modules <-> the golden files' layout (benchmarks/parity/offline_common.py)


def linears(module: nn.Module) -> list[nn.Linear]:
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


@torch.no_grad()
def load_mlp(
    module: nn.Module,
    pairs: list[tuple[np.ndarray, np.ndarray]],
    params: dict[str, np.ndarray] | None = None,
    net: str = "",
) -> None:
    """nn.Linear i <- pairs[i]; with ``params`` / ``net``, nn.LayerNorm i (after Linear i)
    <- ``<net>.<i>.ln_scale`` / ``ln_bias``."""
    found = linears(module)
    assert len(found) == len(pairs)
    for linear, (w, b) in zip(found, pairs):
        linear.weight.copy_(torch.from_numpy(w.T.copy()))
        linear.bias.copy_(torch.from_numpy(b))
    for i, norm in enumerate(norms(module)):
        norm.weight.copy_(torch.from_numpy(params[f"{net}.{i}.ln_scale"]))
        norm.bias.copy_(torch.from_numpy(params[f"{net}.{i}.ln_bias"]))


def norms(module: nn.Module) -> list[nn.LayerNorm]:
    return [m for m in module.modules() if isinstance(m, nn.LayerNorm)]


def read_mlp(module: nn.Module, net: str) -> dict[str, np.ndarray]:
    params = {}
    for i, linear in enumerate(linears(module)):
        params[f"{net}.{i}.w"] = linear.weight.detach().numpy().T.copy()
        params[f"{net}.{i}.b"] = linear.bias.detach().numpy().copy()
    for i, norm in enumerate(norms(module)):
        params[f"{net}.{i}.ln_scale"] = norm.weight.detach().numpy().copy()
        params[f"{net}.{i}.ln_bias"] = norm.bias.detach().numpy().copy()
    return params


def ensemble_layers(net: EnsembleMLP) -> list[nn.Module]:
    return [*net.hidden_layers, net.output_layer]


@torch.no_grad()
def load_ensemble(net: EnsembleMLP, params: dict[str, np.ndarray], names: list[str]) -> None:
    """Member e of ``net`` <- network ``names[e]`` (weights, biases, LayerNorm affines)."""
    for member, name in enumerate(names):
        for i, layer in enumerate(ensemble_layers(net)):
            layer.weight[member].copy_(torch.from_numpy(params[f"{name}.{i}.w"]))
            layer.bias[member, 0].copy_(torch.from_numpy(params[f"{name}.{i}.b"]))
            if net.norms is not None and i < len(net.hidden_layers):
                net.norms[i].weight[member, 0].copy_(
                    torch.from_numpy(params[f"{name}.{i}.ln_scale"])
                )
                net.norms[i].bias[member, 0].copy_(torch.from_numpy(params[f"{name}.{i}.ln_bias"]))


def read_ensemble(net: EnsembleMLP, names: list[str]) -> dict[str, np.ndarray]:
    params = {}
    for member, name in enumerate(names):
        for i, layer in enumerate(ensemble_layers(net)):
            params[f"{name}.{i}.w"] = layer.weight[member].detach().numpy().copy()
            params[f"{name}.{i}.b"] = layer.bias[member, 0].detach().numpy().copy()
            if net.norms is not None and i < len(net.hidden_layers):
                norm = net.norms[i]
                params[f"{name}.{i}.ln_scale"] = norm.weight[member, 0].detach().numpy().copy()
                params[f"{name}.{i}.ln_bias"] = norm.bias[member, 0].detach().numpy().copy()
    return params


@contextlib.contextmanager
def scripted(**scripts: Script) -> Iterator[None]:
    """torch's random draws inside the block come from the scripts: ``randn_like`` and
    ``normal(mean, std)`` (as mean + std * eps) from ``normal``, ``rand`` from ``uniform``."""
    normal, uniform = scripts.get("normal"), scripts.get("uniform")

    def randn_like(x: torch.Tensor, **_: object) -> torch.Tensor:
        return torch.from_numpy(normal.pop(tuple(x.shape))).to(x.dtype)

    def normal_(mean: torch.Tensor, std: torch.Tensor, **_: object) -> torch.Tensor:
        return mean + std * torch.from_numpy(normal.pop(tuple(mean.shape))).to(mean.dtype)

    def rand(*shape: int, **_: object) -> torch.Tensor:
        return torch.from_numpy(uniform.pop(tuple(shape)))

    with pytest.MonkeyPatch.context() as patch:
        if normal is not None:
            patch.setattr(torch, "randn_like", randn_like)
            patch.setattr(torch, "normal", normal_)
        if uniform is not None:
            patch.setattr(torch, "rand", rand)
        yield
    for script in scripts.values():
        assert script.done(), "the update drew less noise than the reference"


def same_inputs(case: dict, params: dict, batches: list[dict], draws: list[dict]) -> list[dict]:
    """``batches``, after checking that this case's inputs are the ones its golden numbers
    were made from (a numpy that draws other streams, or an edited offline_common, reads
    as such rather than as a wrong update)."""
    assert inputs_digest(params, batches, draws) == case["inputs_sha256"], (
        "the numpy-drawn inputs differ from those of the golden file: regenerate it "
        "(benchmarks/parity/<algo>_reference.py) before comparing updates"
    )
    return batches


def run_updates(
    agent, batches: list[dict[str, np.ndarray]], names: dict[str, Callable[[dict], float | None]]
) -> dict[str, list[float | None]]:
    """Update ``agent`` on each batch; per update the golden loss names from its metrics."""
    losses: dict[str, list[float | None]] = {name: [] for name in names}
    for batch in batches:
        metrics = agent.update(our_batch(batch))
        for name, pick in names.items():
            losses[name].append(pick(metrics))
    return losses


# ---- IQL (CORL algorithms/offline/iql.py)


def iql_agent(settings: dict, params: dict[str, np.ndarray]) -> IQL:
    config = IQLConfig(
        gamma=settings["gamma"],
        tau=settings["tau"],
        actor_lr=settings["lr"],
        critic_lr=settings["lr"],
        value_lr=settings["lr"],
        hidden=(16, 16),
        beta=settings["beta"],
        expectile=settings["expectile"],
        deterministic_actor=settings["deterministic_actor"],
        total_steps=settings["updates"],  # the actor's cosine schedule over these updates
    )
    agent = IQL(OBS, ACT, config)
    if config.deterministic_actor:
        load_mlp(agent.actor, layers(params, "actor"))
    else:
        load_mlp(agent.actor.mean, layers(params, "actor"))
        with torch.no_grad():
            agent.actor.log_std.copy_(torch.from_numpy(params["actor.log_std"]))
    load_ensemble(agent.critic.net, params, ["critic0", "critic1"])
    load_ensemble(agent.target_critic.net, params, ["target_critic0", "target_critic1"])
    load_mlp(agent.value, layers(params, "value"))
    return agent


def iql_params(agent: IQL) -> dict[str, np.ndarray]:
    params = {
        **read_ensemble(agent.critic.net, ["critic0", "critic1"]),
        **read_ensemble(agent.target_critic.net, ["target_critic0", "target_critic1"]),
        **read_mlp(agent.value, "value"),
    }
    if agent.config.deterministic_actor:
        return {**params, **read_mlp(agent.actor, "actor")}
    params["actor.log_std"] = agent.actor.log_std.detach().numpy().copy()
    return {**params, **read_mlp(agent.actor.mean, "actor")}


def iql_run(case_name: str) -> tuple[dict, dict, dict]:
    _, cases = load_golden(GOLDEN_DIR / "iql.json")
    case = cases[case_name]
    settings = case["settings"]
    params = iql_initial(settings["deterministic_actor"])
    agent = iql_agent(settings, params)
    batches = make_batches(1, settings["updates"])
    if settings["sparse_reward"]:  # the antmaze case: rewards 0 / 1, shifted by -1
        batches = sparse_shifted_rewards(batches)
    batches = same_inputs(case, params, batches, [])
    names = {n: (lambda m, n=n: m[n]) for n in ("value_loss", "q_loss", "actor_loss")}
    losses = run_updates(agent, batches, names)
    return case, losses, iql_params(agent)


@pytest.mark.parametrize("case_name", ["gaussian", "deterministic", "antmaze"])
def test_iql_matches_corl(case_name):
    case, losses, params = iql_run(case_name)
    assert_parity(case, losses, params, TOL)


def riql_run(case_name: str) -> tuple[dict, dict, dict]:
    """Our RIQL on the golden case's weights and batches (the statistics left at the
    identity: the reference's batches come standardised already)."""
    _, cases = load_golden(GOLDEN_DIR / "riql.json")
    case = cases[case_name]
    settings = case["settings"]
    count = settings["num_critics"]
    params = riql_initial(count)
    config = RIQLConfig(
        gamma=settings["gamma"], tau=settings["tau"], actor_lr=settings["lr"],
        critic_lr=settings["lr"], value_lr=settings["lr"], hidden=(16, 16),
        beta=settings["beta"], expectile=settings["expectile"], num_critics=count,
        quantile=settings["quantile"], huber_sigma=settings["sigma"],
        total_steps=settings["updates"],
    )  # fmt: skip
    agent = RIQL(OBS, ACT, config)
    critics = [f"critic{k}" for k in range(count)]
    load_mlp(agent.actor, layers(params, "actor"))
    load_ensemble(agent.critic.net, params, critics)
    load_ensemble(agent.target_critic.net, params, [f"target_{n}" for n in critics])
    load_mlp(agent.value, layers(params, "value"))
    batches = same_inputs(case, params, make_batches(1, settings["updates"]), [])
    names = {"value_loss": lambda m: m["value_loss"], "q_loss": lambda m: m["critic_loss"],
             "actor_loss": lambda m: m["actor_loss"]}  # fmt: skip
    losses = run_updates(agent, batches, names)
    final = {
        **read_mlp(agent.actor, "actor"), **read_ensemble(agent.critic.net, critics),
        **read_ensemble(agent.target_critic.net, [f"target_{n}" for n in critics]),
        **read_mlp(agent.value, "value"),
    }  # fmt: skip
    return case, losses, final


@pytest.mark.parametrize("case_name", ["defaults", "per_task"])
def test_riql_matches_the_reference(case_name):
    """RIQL against YangRui2015/RIQL's own ``ImplicitQLearning`` (RIQL.py): 50 updates of
    the quantile value target, the Huber Q ensemble on clipped targets and the actor."""
    case, losses, params = riql_run(case_name)
    assert_parity(case, losses, params, TOL)


def test_iql_antmaze_recipe_is_the_one_compared_with_corl():
    """configs/experiment/iql_antmaze.yaml holds the settings of the golden ``antmaze``
    case (CORL's antmaze iql_tau 0.9, beta 10, Gaussian actor, r - 1, states normalised)."""
    from pathlib import Path

    from omegaconf import OmegaConf

    path = Path(__file__).resolve().parents[1] / "configs" / "experiment" / "iql_antmaze.yaml"
    shipped = OmegaConf.to_container(OmegaConf.load(path))["algo"]
    _, cases = load_golden(GOLDEN_DIR / "iql.json")
    compared = cases["antmaze"]["settings"]
    config = IQLConfig(**{k: v for k, v in shipped.items() if k != "online_steps"})
    assert (config.expectile, config.beta) == (compared["expectile"], compared["beta"])
    assert config.deterministic_actor is compared["deterministic_actor"] is False
    assert config.reward_bias == -1.0 and config.reward_scale == 1.0  # CORL modify_reward
    assert config.normalize_states  # CORL's antmaze configs: normalize: true


# ---- TD3+BC (CORL algorithms/offline/td3_bc.py)


def td3_bc_run() -> tuple[dict, dict, dict]:
    _, cases = load_golden(GOLDEN_DIR / "td3_bc.json")
    case = cases["default"]
    settings = case["settings"]
    config = TD3BCConfig(
        gamma=settings["gamma"],
        tau=settings["tau"],
        actor_lr=settings["lr"],
        critic_lr=settings["lr"],
        hidden=(16, 16),
        policy_noise=settings["policy_noise"],
        noise_clip=settings["noise_clip"],
        policy_frequency=settings["policy_freq"],
        alpha=settings["alpha"],
    )
    agent = TD3BC(OBS, ACT, config)
    params = td3_bc_initial()
    load_mlp(agent.actor, layers(params, "actor"))
    load_mlp(agent.target_actor, layers(params, "target_actor"))
    load_ensemble(agent.critic.net, params, ["critic0", "critic1"])
    load_ensemble(agent.target_critic.net, params, ["target_critic0", "target_critic1"])
    count = settings["updates"]
    draws = noise_draws(2, count, {"target": (32, ACT_DIM)})
    batches = same_inputs(case, params, make_batches(1, count), draws)
    noise = Script(d["target"] for d in draws)
    names = {"critic_loss": lambda m: m["critic_loss"], "actor_loss": lambda m: m.get("actor_loss")}
    with scripted(normal=noise):
        losses = run_updates(agent, batches, names)
    final = {
        **read_mlp(agent.actor, "actor"),
        **read_mlp(agent.target_actor, "target_actor"),
        **read_ensemble(agent.critic.net, ["critic0", "critic1"]),
        **read_ensemble(agent.target_critic.net, ["target_critic0", "target_critic1"]),
    }
    return case, losses, final


def test_td3_bc_matches_corl():
    case, losses, params = td3_bc_run()
    assert_parity(case, losses, params, TOL)


# ---- AWAC (CORL algorithms/offline/awac.py)


def awac_run() -> tuple[dict, dict, dict]:
    _, cases = load_golden(GOLDEN_DIR / "awac.json")
    case = cases["default"]
    settings = case["settings"]
    config = AWACConfig(
        gamma=settings["gamma"],
        tau=settings["tau"],
        actor_lr=settings["lr"],
        critic_lr=settings["lr"],
        hidden=(16, 16, 16),
        awac_lambda=settings["awac_lambda"],
        exp_adv_max=settings["exp_adv_max"],
    )
    agent = AWAC(OBS, ACT, config)
    params = awac_initial()
    load_mlp(agent.actor.mean, layers(params, "actor"))
    with torch.no_grad():
        agent.actor.log_std.copy_(torch.from_numpy(params["actor.log_std"]))
    load_ensemble(agent.critic.net, params, ["critic0", "critic1"])
    load_ensemble(agent.target_critic.net, params, ["target_critic0", "target_critic1"])
    count = settings["updates"]
    shapes = {"next": (32, ACT_DIM), "current": (32, ACT_DIM)}  # a' ~ pi(s'), then a ~ pi(s)
    draws = noise_draws(2, count, shapes)
    batches = same_inputs(case, params, make_batches(1, count), draws)
    noise = Script(d[name] for d in draws for name in shapes)
    names = {n: (lambda m, n=n: m[n]) for n in ("critic_loss", "actor_loss")}
    with scripted(normal=noise):
        losses = run_updates(agent, batches, names)
    final = {
        **read_mlp(agent.actor.mean, "actor"),
        "actor.log_std": agent.actor.log_std.detach().numpy().copy(),
        **read_ensemble(agent.critic.net, ["critic0", "critic1"]),
        **read_ensemble(agent.target_critic.net, ["target_critic0", "target_critic1"]),
    }
    return case, losses, final


def test_awac_matches_corl():
    case, losses, params = awac_run()
    assert_parity(case, losses, params, TOL)


# ---- CQL and Cal-QL (CORL algorithms/offline/cql.py, algorithms/finetune/cal_ql.py)

CQL_LOSSES = ("actor_loss", "alpha_loss", "td_loss", "cql_penalty", "critic_loss", "cql_diff")


def cql_noise(settings: dict, draws: list[dict]) -> tuple[Script, Script]:
    """The golden draws in our order: a ~ pi(s); then ONE actor call on N copies of each s
    followed by N + n_backup copies of each s' (N for the penalty, then the TD target's);
    then the uniform actions."""
    backup = settings["cql_max_target_backup"]
    normal, uniform = [], []
    for d in draws:
        after_next = d["backup"] if backup else d["backup"][:, None]
        next_rows = np.concatenate([d["next"], after_next], axis=1).reshape(-1, ACT_DIM)
        normal += [d["pi"], np.concatenate([d["current"].reshape(-1, ACT_DIM), next_rows])]
        uniform.append(d["uniform"])
    return Script(normal), Script(uniform)


def cql_run(golden: str, case_name: str) -> tuple[dict, dict, dict]:
    _, cases = load_golden(GOLDEN_DIR / f"{golden}.json")
    case = cases[case_name]
    settings = case["settings"]
    calibrated = golden == "cal_ql"
    config_class = CalQLConfig if calibrated else CQLConfig
    critic_layers = settings["critic_hidden_layers"]
    config = config_class(
        gamma=settings["gamma"],
        tau=settings["tau"],
        actor_lr=settings["policy_lr"],
        alpha_lr=settings["policy_lr"],
        critic_lr=settings["qf_lr"],
        hidden=(16, 16, 16),
        critic_hidden=(16,) * critic_layers,
        backup_entropy=settings["backup_entropy"],
        cql_alpha=settings["cql_alpha"],
        cql_n_actions=settings["cql_n_actions"],
        cql_importance_sample=settings["cql_importance_sample"],
        cql_lagrange=settings["cql_lagrange"],
        cql_target_action_gap=settings["cql_target_action_gap"],
        cql_temp=settings["cql_temp"],
        cql_max_target_backup=settings["cql_max_target_backup"],
        cql_clip_diff_min=float(settings["cql_clip_diff_min"]),
        cql_clip_diff_max=float(settings["cql_clip_diff_max"]),
    )
    agent = CalQL(OBS, ACT, config) if calibrated else CQL(OBS, ACT, config)
    params = cql_initial(critic_layers)
    load_mlp(agent.actor.net, layers(params, "actor"))
    load_ensemble(agent.critic.net, params, ["critic0", "critic1"])
    load_ensemble(agent.target_critic.net, params, ["target_critic0", "target_critic1"])
    with torch.no_grad():
        for name in ("log_std_multiplier", "log_std_offset"):
            getattr(agent.actor, name).copy_(torch.from_numpy(params[f"actor.{name}"]))
        agent.log_alpha.copy_(torch.from_numpy(params["log_alpha"]))
        agent.log_alpha_prime.copy_(torch.from_numpy(params["log_alpha_prime"]))
    names = CQL_LOSSES + (("alpha_prime_loss",) if config.cql_lagrange else ())
    pick = {n: (lambda m, n=n: m[n]) for n in names}
    count, n = settings["updates"], settings["cql_n_actions"]
    draws = noise_draws(2, count, cql_noise_shapes(n, settings["cql_max_target_backup"]))
    batches = same_inputs(case, params, make_batches(1, count), draws)
    normal, uniform = cql_noise(settings, draws)
    with scripted(normal=normal, uniform=uniform):
        losses = run_updates(agent, batches, pick)
    final = {
        **read_mlp(agent.actor.net, "actor"),
        "actor.log_std_multiplier": agent.actor.log_std_multiplier.detach().numpy().copy(),
        "actor.log_std_offset": agent.actor.log_std_offset.detach().numpy().copy(),
        **read_ensemble(agent.critic.net, ["critic0", "critic1"]),
        **read_ensemble(agent.target_critic.net, ["target_critic0", "target_critic1"]),
        "log_alpha": agent.log_alpha.detach().numpy().copy(),
        "log_alpha_prime": agent.log_alpha_prime.detach().numpy().copy(),
    }
    return case, losses, final


@pytest.mark.parametrize("case_name", ["default", "lagrange"])
def test_cql_matches_corl(case_name):
    case, losses, params = cql_run("cql", case_name)
    assert_parity(case, losses, params, TOL)


@pytest.mark.parametrize("case_name", ["default", "antmaze"])
def test_cal_ql_matches_corl(case_name):
    case, losses, params = cql_run("cal_ql", case_name)
    assert_parity(case, losses, params, TOL)


# ---- ReBRAC (CORL algorithms/offline/rebrac.py, JAX)


@contextlib.contextmanager
def pre_step_target_actor(agent: ReBRAC) -> Iterator[None]:
    """CORL's ReBRAC averages the target actor toward the actor from BEFORE the actor's
    step (a departure listed in algos/rebrac.py; ours averages toward the stepped actor).
    Inside the block ours does CORL's, so the rest of the update is compared alone."""
    snapshot = copy.deepcopy(agent.actor)
    real_step, real_polyak = agent.actor_optimizer.step, rebrac.polyak_update

    def step(*args, **kwargs):
        snapshot.load_state_dict(agent.actor.state_dict())
        return real_step(*args, **kwargs)

    def polyak(target: nn.Module, source: nn.Module, tau: float) -> None:
        real_polyak(target, snapshot if source is agent.actor else source, tau)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(agent.actor_optimizer, "step", step)
        patch.setattr(rebrac, "polyak_update", polyak)
        yield


def rebrac_run(case_name: str, corl_target_actor: bool) -> tuple[dict, dict, dict]:
    _, cases = load_golden(GOLDEN_DIR / "rebrac.json")
    case = cases[case_name]
    settings = case["settings"]
    config = ReBRACConfig(
        gamma=settings["gamma"],
        tau=settings["tau"],
        actor_lr=settings["actor_lr"],
        critic_lr=settings["critic_lr"],
        hidden=(16, 16, 16),
        actor_layer_norm=settings["actor_ln"],
        critic_layer_norm=settings["critic_ln"],
        policy_noise=settings["policy_noise"],
        noise_clip=settings["noise_clip"],
        policy_frequency=settings["policy_freq"],
        actor_bc_coef=settings["actor_bc_coef"],
        critic_bc_coef=settings["critic_bc_coef"],
        normalize_q=settings["normalize_q"],
    )
    agent = ReBRAC(OBS, ACT, config)
    params = rebrac_initial(config.actor_layer_norm)
    load_mlp(agent.actor, layers(params, "actor"), params, "actor")
    load_mlp(agent.target_actor, layers(params, "target_actor"), params, "target_actor")
    load_ensemble(agent.critic.net, params, ["critic0", "critic1"])
    load_ensemble(agent.target_critic.net, params, ["target_critic0", "target_critic1"])
    count = settings["updates"]
    draws = noise_draws(2, count, {"target": (32, ACT_DIM)})
    batches = same_inputs(case, params, make_batches(1, count), draws)
    noise = Script(d["target"] for d in draws)
    names = {"critic_loss": lambda m: m["critic_loss"], "actor_loss": lambda m: m.get("actor_loss")}
    target_actor = pre_step_target_actor(agent) if corl_target_actor else contextlib.nullcontext()
    with scripted(normal=noise), target_actor:
        losses = run_updates(agent, batches, names)
    final = {
        **read_mlp(agent.actor, "actor"),
        **read_mlp(agent.target_actor, "target_actor"),
        **read_ensemble(agent.critic.net, ["critic0", "critic1"]),
        **read_ensemble(agent.target_critic.net, ["target_critic0", "target_critic1"]),
    }
    return case, losses, final


@pytest.mark.parametrize("case_name", ["default_ln_eps", "actor_ln_ln_eps"])
def test_rebrac_matches_corl_apart_from_listed_departures(case_name):
    case, losses, params = rebrac_run(case_name, corl_target_actor=True)
    assert_parity(case, losses, params, TOL)


# the two listed departures (target actor toward the stepped actor; LayerNorm epsilon
# 1e-5 against Flax's 1e-6) move 20 updates by 7e-4 in the losses and 5e-5 in the
# parameters (docs/PARITY.md); the bound keeps that measured size
REBRAC_AS_IS_TOL = {"loss_atol": 2e-3, "param_atol": 2e-4, "rtol": 0.0}


def test_rebrac_listed_departures_move_little():
    case, losses, params = rebrac_run("default", corl_target_actor=False)
    assert_parity(case, losses, params, REBRAC_AS_IS_TOL)
