"""ReBRAC and AWAC: contract (finite metrics, moving parameters, round trips, NaN guard,
actions in the box) and hand-computed losses; the ReBRAC network options in rlcore.nets."""

import copy

import numpy as np
import pytest
import torch
from torch import nn

from rlcore.algos.awac import AWAC, AWACConfig
from rlcore.algos.rebrac import ReBRAC, ReBRACConfig
from rlcore.nets import MLP, DeterministicActor, EnsembleMLP, QEnsemble, edac_init
from rlcore.types import Batch
from rlcore.utils import NonFiniteLossError
from tests.test_algos_contract import ACT, OBS, random_batch

SMALL = {"hidden": (16, 16), "fused_optimizer": False}
AGENTS = {
    "rebrac": lambda **kw: ReBRAC(OBS, ACT, ReBRACConfig(**{**SMALL, **kw})),
    "awac": lambda **kw: AWAC(OBS, ACT, AWACConfig(**{**SMALL, **kw})),
}


def params(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


def moved(before: dict[str, torch.Tensor], module: nn.Module) -> bool:
    return any(not torch.equal(before[k], v) for k, v in module.state_dict().items())


def replace(batch: Batch, **fields) -> Batch:
    return Batch(**{**batch.__dict__, **fields})


@pytest.mark.parametrize("name", list(AGENTS))
def test_update_finite_metrics_and_parameters_move(name):
    torch.manual_seed(0)
    agent = AGENTS[name]()
    modules = {"actor": agent.actor, "critic": agent.critic, "target": agent.target_critic}
    if name == "rebrac":
        modules["target_actor"] = agent.target_actor
    before = {k: params(m) for k, m in modules.items()}
    metrics = agent.update(random_batch())
    assert "actor_loss" in metrics and "critic_loss" in metrics
    assert all(np.isfinite(v) for v in metrics.values()), metrics
    for key, module in modules.items():
        assert moved(before[key], module), key


@pytest.mark.parametrize("name", list(AGENTS))
def test_state_dict_round_trip_gives_identical_future(name):
    torch.manual_seed(0)
    agent = AGENTS[name]()
    agent.update(random_batch(seed=1))
    clone = AGENTS[name]()
    clone.load_state_dict(agent.state_dict())
    results = []
    for a in (agent, clone):
        torch.manual_seed(5)
        results.append([a.update(random_batch(seed=s)) for s in (2, 3)])
    assert results[0] == results[1]
    assert "actor_loss" in results[0][1]  # ReBRAC: the counter came along (update 2 = actor)
    for key, value in agent.state_dict().items():
        if isinstance(value, dict) and key != "actor_optimizer" and key != "critic_optimizer":
            for k, t in value.items():
                assert torch.equal(t, clone.state_dict()[key][k]), (key, k)


@pytest.mark.parametrize("name", list(AGENTS))
def test_nan_reward_raises_before_parameters_change(name):
    torch.manual_seed(0)
    agent = AGENTS[name]()
    bad = random_batch()
    bad = replace(bad, reward=bad.reward.clone().fill_(float("nan")))
    before = {k: params(m) for k, m in (("actor", agent.actor), ("critic", agent.critic))}
    with pytest.raises(NonFiniteLossError, match="critic_loss"):
        agent.update(bad)
    assert not moved(before["actor"], agent.actor) and not moved(before["critic"], agent.critic)
    assert agent.updates == 0


@pytest.mark.parametrize("name", list(AGENTS))
@pytest.mark.parametrize("deterministic", [True, False])
def test_act_on_raw_observations_stays_in_the_box(name, deterministic):
    torch.manual_seed(0)
    agent = AGENTS[name]()
    with torch.no_grad():  # push the pre-squash / mean output far outside the box
        last = agent.actor.net[-1] if name == "rebrac" else agent.actor.mean[-1]
        last.bias.copy_(torch.tensor([10.0, -10.0, 10.0]))
    agent.obs_normalizer.fit(torch.randn(20, 5) * 100 + 50)
    raw = np.random.default_rng(0).normal(50, 100, size=(7, 5)).astype(np.float32)
    single = agent.act(raw[0], deterministic=deterministic)
    batch = agent.act(raw, deterministic=deterministic)
    assert single.shape == (3,) and batch.shape == (7, 3) and batch.dtype == np.float32
    for a in (single[None], batch):
        assert (a >= ACT.low).all() and (a <= ACT.high).all()
    np.testing.assert_allclose(batch[:, 0], ACT.high[0])  # clipped, not wrapped or squashed
    if deterministic:
        np.testing.assert_allclose(single, batch[0], atol=1e-6)


# ---------------------------------------------------------------- ReBRAC, hand-computed


def _constant_heads(agent: ReBRAC, target_q: list[float], q: list[float]) -> None:
    """Target actor outputs the box centre; target critics output ``target_q`` and
    critics output ``q`` (one constant per member), whatever the input."""
    with torch.no_grad():
        agent.target_actor.net[-1].weight.zero_()
        agent.target_actor.net[-1].bias.zero_()
        for net, values in ((agent.target_critic.net, target_q), (agent.critic.net, q)):
            net.output_layer.weight.zero_()
            net.output_layer.bias.copy_(torch.tensor(values).view(2, 1, 1))


@pytest.mark.parametrize(("has_next", "expected"), [(1.0, 17.29065), (0.0, 21.470925)])
def test_rebrac_critic_target_with_bc_penalty_hand_computed(has_next, expected):
    """No noise, so the next action is the box centre (0, 0, 0.5). Row 0: next data action
    (1, 0.5, 0.5), penalty 1 + 0.25 + 0 = 1.25; row 1: (0, 0, 0), penalty 0.25, or none
    when has_next_action = 0. critic_bc_coef 2, min target Q = min(3, 5), gamma 0.99:
      y0 = 1 + 0.99 (3 - 2 * 1.25) = 1.495
      y1 = 2 + 0.99 (3 - 2 * 0.25) = 4.475  (has_next 1)  or  2 + 0.99 * 3 = 4.97  (0)
    The critics output 0 and 1: loss = mean((0 - y)^2) + mean((1 - y)^2)
      has_next 1: (2.235025 + 20.025625) / 2 + (0.245025 + 12.075625) / 2 = 17.29065
      has_next 0: (2.235025 + 24.7009) / 2 + (0.245025 + 15.7609) / 2 = 21.470925
    """
    torch.manual_seed(0)
    agent = ReBRAC(OBS, ACT, ReBRACConfig(hidden=(8,), policy_noise=0.0, critic_bc_coef=2.0))
    _constant_heads(agent, target_q=[3.0, 5.0], q=[0.0, 1.0])
    batch = Batch(
        obs=torch.randn(2, 5),
        action=torch.zeros(2, 3),
        reward=torch.tensor([1.0, 2.0]),
        next_obs=torch.randn(2, 5),
        terminated=torch.zeros(2),
        truncated=torch.zeros(2),
        extras={
            "next_action": torch.tensor([[1.0, 0.5, 0.5], [0.0, 0.0, 0.0]]),
            "has_next_action": torch.tensor([1.0, has_next]),
        },
    )
    metrics = agent.update(batch)
    assert metrics["critic_loss"] == pytest.approx(expected, rel=1e-5)
    assert metrics["critic_bc"] == pytest.approx((1.25 + 0.25 * has_next) / 2, rel=1e-5)


def test_rebrac_terminated_rows_do_not_bootstrap():
    torch.manual_seed(0)
    agent = ReBRAC(OBS, ACT, ReBRACConfig(hidden=(8,), policy_noise=0.0))
    _constant_heads(agent, target_q=[3.0, 5.0], q=[0.0, 0.0])
    batch = replace(random_batch(4), terminated=torch.ones(4))
    metrics = agent.update(batch)
    assert metrics["critic_loss"] == pytest.approx(2 * batch.reward.pow(2).mean().item(), rel=1e-5)


def test_rebrac_no_next_action_removes_critic_penalty():
    """With has_next_action = 0 everywhere the loss equals the one with critic_bc_coef 0."""
    batch = random_batch(32)
    batch = replace(batch, terminated=torch.zeros(32))
    losses = {}
    for key, coef, has in (("off", 0.0, 1.0), ("masked", 5.0, 0.0), ("on", 5.0, 1.0)):
        torch.manual_seed(0)
        agent = ReBRAC(OBS, ACT, ReBRACConfig(hidden=(8,), critic_bc_coef=coef))
        extras = {**batch.extras, "has_next_action": torch.full((32,), has)}
        torch.manual_seed(1)
        losses[key] = agent.update(replace(batch, extras=extras))["critic_loss"]
    assert losses["masked"] == pytest.approx(losses["off"], rel=1e-6)
    assert losses["on"] != pytest.approx(losses["off"], rel=1e-3)


@pytest.mark.parametrize("normalize_q", [True, False])
def test_rebrac_actor_loss_hand_computed(normalize_q):
    """mean(beta ||pi(s) - a||^2 - lambda min_i Q_i(s, pi(s))), lambda = 1 / mean|min Q|,
    with the critic after its step and the actor before its step."""
    torch.manual_seed(0)
    cfg = ReBRACConfig(hidden=(8,), actor_bc_coef=0.3, normalize_q=normalize_q)
    agent = ReBRAC(OBS, ACT, cfg)
    batch = random_batch(16)
    actor_before = copy.deepcopy(agent.actor)
    metrics = agent.update(batch)
    with torch.no_grad():
        action = actor_before(batch.obs)
        q = agent.critic(batch.obs, action)
        q_min = torch.minimum(q[0], q[1])
        lam = 1.0 / q_min.abs().mean() if normalize_q else 1.0
        bc = ((action - batch.action) ** 2).sum(-1)
        expected = (0.3 * bc - lam * q_min).mean()
    assert metrics["bc_loss"] == pytest.approx(bc.mean().item(), rel=1e-5)
    assert metrics["actor_loss"] == pytest.approx(expected.item(), rel=1e-5)


def test_rebrac_actor_and_targets_update_on_steps_0_2_4():
    torch.manual_seed(0)
    agent = AGENTS["rebrac"](policy_frequency=2)
    for step in range(5):
        before = {k: params(m) for k, m in (("actor", agent.actor), ("t", agent.target_critic))}
        metrics = agent.update(random_batch(seed=step))
        actor_step = step % 2 == 0
        assert ("actor_loss" in metrics) == actor_step, step
        assert moved(before["actor"], agent.actor) == actor_step, step
        assert moved(before["t"], agent.target_critic) == actor_step, step


def test_rebrac_networks_follow_corl():
    torch.manual_seed(0)
    agent = ReBRAC(OBS, ACT)
    layers = list(agent.actor.net)
    assert [type(m) for m in layers] == [nn.Linear, nn.ReLU] * 3 + [nn.Linear]
    assert agent.critic.net.norms is not None and agent.critic.net.norm_after_activation
    assert len(agent.critic.net.hidden_layers) == 3 and agent.critic.net.num_members == 2
    assert torch.all(layers[0].bias == 0.1) and layers[-1].weight.abs().max() <= 1e-3
    assert agent.critic.net.output_layer.bias.abs().max() <= 3e-3
    assert torch.all(agent.critic.net.hidden_layers[1].bias == 0.1)
    assert torch.equal(agent.target_actor.net[0].weight, layers[0].weight)


# ------------------------------------------------------------------ AWAC, hand-computed


@pytest.mark.parametrize("awac_lambda", [1.0, 0.01])
def test_awac_losses_and_weights_hand_computed(awac_lambda):
    """Critic: y = r + gamma (1-d) min Q_target(s', clamp(a' ~ pi)); actor with the updated
    critic and the actor before its step: w = min(exp((min Q(s,a) - min Q(s, a~pi)) /
    lambda), 100), loss = -mean(w log pi(a|s)). Samples replayed from the same seed."""
    torch.manual_seed(0)
    agent = AWAC(OBS, ACT, AWACConfig(hidden=(8,), awac_lambda=awac_lambda))
    with torch.no_grad():
        agent.actor.log_std.fill_(-1.0)
    batch = random_batch(16)
    actor_before, critic_before = copy.deepcopy(agent.actor), copy.deepcopy(agent.critic)
    target_before = copy.deepcopy(agent.target_critic)
    torch.manual_seed(1)
    metrics = agent.update(batch)

    low, high = torch.as_tensor(ACT.low), torch.as_tensor(ACT.high)
    torch.manual_seed(1)
    with torch.no_grad():
        mean_next = actor_before.mean(batch.next_obs)
        next_a = (mean_next + np.exp(-1.0) * torch.randn_like(mean_next)).clamp(low, high)
        mean = actor_before.mean(batch.obs)
        pi_a = (mean + np.exp(-1.0) * torch.randn_like(mean)).clamp(low, high)
        tq = target_before(batch.next_obs, next_a)
        y = batch.reward + 0.99 * (1 - batch.terminated) * torch.minimum(tq[0], tq[1])
        q = critic_before(batch.obs, batch.action)
        critic_loss = ((q[0] - y) ** 2).mean() + ((q[1] - y) ** 2).mean()
        q_data, q_pi = agent.critic(batch.obs, batch.action), agent.critic(batch.obs, pi_a)
        adv = torch.minimum(q_data[0], q_data[1]) - torch.minimum(q_pi[0], q_pi[1])
        weight = torch.clamp(torch.exp(adv / awac_lambda), max=100.0)
        var = np.exp(-2.0)
        log_prob = -((batch.action - mean) ** 2) / (2 * var) - 0.5 * np.log(2 * np.pi * var)
        actor_loss = -(weight * log_prob.sum(-1)).mean()
    if awac_lambda < 1:
        assert (weight == 100.0).any() and (weight < 100.0).any()  # the clamp matters
    assert metrics["critic_loss"] == pytest.approx(critic_loss.item(), rel=1e-5)
    assert metrics["weight"] == pytest.approx(weight.mean().item(), rel=1e-5)
    assert metrics["weight_clamped"] == pytest.approx((weight == 100.0).float().mean().item())
    assert metrics["advantage"] == pytest.approx(adv.mean().item(), rel=1e-5, abs=1e-6)
    assert metrics["actor_loss"] == pytest.approx(actor_loss.item(), rel=1e-5)


def test_awac_log_std_is_clamped_and_mean_unbounded():
    torch.manual_seed(0)
    agent = AWAC(OBS, ACT, AWACConfig(hidden=(8,)))
    with torch.no_grad():
        agent.actor.log_std.fill_(5.0)
        agent.actor.mean[-1].bias.fill_(7.0)
    dist = agent.actor.distribution(torch.zeros(1, 5))
    assert torch.allclose(dist.stddev, torch.tensor(np.exp(2.0), dtype=torch.float32))
    assert torch.all(dist.mean > ACT.high.max())  # no tanh on the mean


# ------------------------------------------------------- rlcore.nets options for ReBRAC


def test_norm_after_activation_order():
    net = MLP(5, 3, (8, 8), "relu", layer_norm=True, norm_after_activation=True)
    assert [type(m) for m in net] == [nn.Linear, nn.ReLU, nn.LayerNorm] * 2 + [nn.Linear]
    default = MLP(5, 3, (8,), "relu", layer_norm=True)
    assert [type(m) for m in default] == [nn.Linear, nn.LayerNorm, nn.ReLU, nn.Linear]
    actor = DeterministicActor(5, 3, hidden=(8,), layer_norm=True, norm_after_activation=True)
    assert [type(m) for m in actor.net] == [nn.Linear, nn.ReLU, nn.LayerNorm, nn.Linear]


@pytest.mark.parametrize("after", [False, True])
def test_ensemble_norm_order_equals_separate_mlps(after):
    torch.manual_seed(0)
    ensemble = EnsembleMLP(3, 6, 2, (8, 8), "relu", layer_norm=True, norm_after_activation=after)
    with torch.no_grad():
        for p in ensemble.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(9, 6)
    out = ensemble(x)
    for e in range(3):
        mlp = MLP(6, 2, (8, 8), "relu", layer_norm=True, norm_after_activation=after)
        linears = [m for m in mlp if isinstance(m, nn.Linear)]
        norms = [m for m in mlp if isinstance(m, nn.LayerNorm)]
        with torch.no_grad():
            for lin, ens in zip(linears, [*ensemble.hidden_layers, ensemble.output_layer]):
                lin.weight.copy_(ens.weight[e].T)
                lin.bias.copy_(ens.bias[e, 0])
            for norm, ens_norm in zip(norms, ensemble.norms):
                norm.weight.copy_(ens_norm.weight[e, 0])
                norm.bias.copy_(ens_norm.bias[e, 0])
        assert torch.allclose(out[e], mlp(x), atol=1e-5)
    q = QEnsemble(5, 1, 2, (8,), layer_norm=True, norm_after_activation=after)
    assert q.net.norm_after_activation == after


@pytest.mark.parametrize("ensemble", [False, True])
def test_edac_init(ensemble):
    torch.manual_seed(0)
    net = EnsembleMLP(2, 400, 1, (400, 4)) if ensemble else MLP(400, 1, (400, 4))
    edac_init(net, output_bound=3e-3, hidden_bias=0.1)
    if ensemble:
        hidden = [(m.weight, m.bias) for m in net.hidden_layers]
        out = (net.output_layer.weight, net.output_layer.bias)
    else:
        linears = [m for m in net if isinstance(m, nn.Linear)]
        hidden = [(m.weight, m.bias) for m in linears[:-1]]
        out = (linears[-1].weight, linears[-1].bias)
    for weight, bias in hidden:
        assert torch.all(bias == 0.1)
        bound = 1 / np.sqrt(400)
        assert weight.abs().max() <= bound and weight.abs().max() > 0.9 * bound
    assert out[0].abs().max() <= 3e-3 and out[1].abs().max() <= 3e-3
    assert out[0].abs().max() > 0
