"""Offline-to-online ensemble-SAC agents: RLPD (algos/rlpd.py), WSRL (algos/wsrl.py) and
the SAC options they are built from (critic subsets, actor Q, UTD updates, compiled UTD)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from rlcore.algos.iql import IQL, IQLConfig
from rlcore.algos.rlpd import RLPD, RLPDConfig
from rlcore.algos.sac import SAC, SACConfig, subset_min
from rlcore.algos.td3 import TD3, TD3Config
from rlcore.algos.wsrl import WSRL, WSRLConfig
from rlcore.compiled import cxx_compiler
from rlcore.types import Batch
from tests.test_algos_contract import ACT, OBS, random_batch

torch.set_num_threads(1)

B = 16  # minibatch rows in these tests
UTD = 4  # minibatches per update (RLPD and WSRL online use utd_ratio=4 here)


def make_rlpd(seed: int = 0, **changes) -> RLPD:
    torch.manual_seed(seed)
    return RLPD(OBS, ACT, RLPDConfig(**{"hidden": (32, 32), "utd_ratio": UTD, **changes}))


def make_wsrl(seed: int = 0, phase: str = "offline", **changes) -> WSRL:
    torch.manual_seed(seed)
    agent = WSRL(OBS, ACT, WSRLConfig(**{"hidden": (32, 32), "batch_size": B, **changes}))
    agent.set_phase(phase)
    return agent


AGENTS = {
    "rlpd": make_rlpd,
    "wsrl-offline": lambda seed=0: make_wsrl(seed, "offline"),
    "wsrl-warmup": lambda seed=0: make_wsrl(seed, "warmup"),
    "wsrl-online": lambda seed=0: make_wsrl(seed, "online"),
}


def seeded_update(agent, batch: Batch, seed: int) -> dict[str, float]:
    torch.manual_seed(seed)  # the policy noise and critic subsets of this update
    return agent.update(batch)


def parameters(agent) -> list[torch.Tensor]:
    sac = agent.online if isinstance(agent, WSRL) else agent
    modules = (sac.actor, sac.critic, sac.target_critic)
    return [p.detach().clone() for m in modules for p in m.parameters()] + [sac.log_alpha]


# ---------------------------------------------------------------------------- contract


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_act_gives_actions_in_env_units(name):
    agent = AGENTS[name]()
    one = agent.act(np.zeros(5, np.float32))
    many = agent.act(np.random.default_rng(0).normal(size=(7, 5)).astype(np.float32))
    assert one.shape == (3,) and many.shape == (7, 3)
    assert (many >= ACT.low).all() and (many <= ACT.high).all()
    # the box is not [-1, 1]: the third dimension lives in [0, 1], the second in +-0.5
    assert (many[:, 2] >= 0).all() and (np.abs(many[:, 1]) <= 0.5).all()
    obs = np.ones((4, 5), np.float32)
    assert np.array_equal(agent.act(obs, deterministic=True), agent.act(obs, deterministic=True))


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_update_returns_finite_metrics(name):
    agent = AGENTS[name]()
    metrics = agent.update(random_batch(UTD * B))
    assert metrics and all(math.isfinite(v) for v in metrics.values())
    assert {"critic_loss", "actor_loss", "alpha", "entropy"} <= metrics.keys()


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_state_dict_round_trip_gives_identical_next_update(name):
    agent = AGENTS[name](seed=0)
    for step in range(2):
        seeded_update(agent, random_batch(UTD * B, seed=step), seed=step)
    restored = AGENTS[name](seed=1)  # other initial weights, then the checkpoint
    restored.load_state_dict(copy.deepcopy(agent.state_dict()))
    if isinstance(agent, WSRL):
        restored.set_phase(agent.phase)  # the loop calls set_phase after loading
    batch = random_batch(UTD * B, seed=9)
    assert seeded_update(restored, batch, 9) == seeded_update(agent, batch, 9)
    for p, q in zip(parameters(agent), parameters(restored)):
        assert torch.equal(p, q)


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_same_seed_same_numbers(name):
    runs = []
    for seed in (0, 0, 1):
        agent = AGENTS[name](seed=seed)
        runs.append([seeded_update(agent, random_batch(UTD * B, s), s) for s in range(2)])
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_wsrl_resumes_across_the_phase_switch():
    """A checkpoint taken offline continues online exactly as the uninterrupted run."""
    agent = make_wsrl(0)
    seeded_update(agent, random_batch(UTD * B, seed=0), 0)
    restored = make_wsrl(5)
    restored.load_state_dict(copy.deepcopy(agent.state_dict()))
    for run in (agent, restored):
        run.set_phase("online")
    batch = random_batch(UTD * B, seed=3)
    assert seeded_update(restored, batch, 3) == seeded_update(agent, batch, 3)


# ---------------------------------------------------------------------------- ensemble maths


def test_subset_min_is_the_min_over_the_drawn_members():
    q = torch.tensor([[5.0, 1.0], [3.0, 7.0], [4.0, 0.0], [6.0, 2.0]])  # (E=4, B=2)
    assert torch.equal(subset_min(q, None), torch.tensor([3.0, 0.0]))
    assert torch.equal(subset_min(q, 4), torch.tensor([3.0, 0.0]))
    for seed in range(5):
        torch.manual_seed(seed)
        members = torch.randperm(4)[:2]
        torch.manual_seed(seed)
        got = subset_min(q, 2)
        assert torch.equal(got, q[members].min(0).values)
    torch.manual_seed(0)
    # one member: each row is a single member's value (the same member for every row)
    singles = {tuple(subset_min(q, 1).tolist()) for _ in range(50)}
    assert singles == {tuple(row) for row in q.tolist()}


def constant_critics(agent: SAC | TD3, values: list[float]) -> None:
    """Every critic (and target critic) i outputs values[i] for any input."""
    for critic in (agent.critic, agent.target_critic):
        with torch.no_grad():
            critic.net.output_layer.weight.zero_()
            critic.net.output_layer.bias.copy_(torch.tensor(values).view(-1, 1, 1))


def target_agent(subset: int | None) -> SAC:
    config = SACConfig(
        hidden=(8, 8), num_critics=10, critic_subset=subset, backup_entropy=False,
        gamma=1.0, tau=0.0, critic_lr=0.0, policy_frequency=1,
    )  # fmt: skip
    torch.manual_seed(0)
    agent = SAC(OBS, ACT, config)
    constant_critics(agent, [float(i) for i in range(10)])  # critic i says Q = i
    return agent


def zero_reward_batch(n: int = B) -> Batch:
    batch = random_batch(n)
    return Batch(
        obs=batch.obs, action=batch.action, reward=torch.zeros(n), next_obs=batch.next_obs,
        terminated=torch.zeros(n), truncated=torch.zeros(n),
    )  # fmt: skip


def test_target_is_the_min_over_the_drawn_subset_of_target_critics():
    """Target critics with constant outputs 0..9, reward 0, gamma 1: the target is the
    smallest index in the drawn subset. The draw is the update's second use of torch's
    generator (after the next-action noise), so it can be replayed by hand."""
    agent, batch = target_agent(2), zero_reward_batch()
    for seed in range(20):
        torch.manual_seed(seed)
        torch.randn(B, 3)  # the policy's noise for a' ~ pi(s')
        expected = torch.randperm(10)[:2].min().item()
        assert seeded_update(agent, batch, seed)["target_q"] == expected
    seen = [seeded_update(agent, batch, 100 + s)["target_q"] for s in range(300)]
    assert max(seen) <= 8  # min of two distinct members is never the largest one
    # P(min = 0) = 9/45 = 0.2 for 2 of 10 without replacement (0.1 for one member)
    assert 0.13 < seen.count(0.0) / len(seen) < 0.28


def test_target_subset_size_matters():
    batch = zero_reward_batch()
    every = [seeded_update(target_agent(None), batch, s)["target_q"] for s in range(5)]
    assert every == [0.0] * 5  # the min over all 10
    agent = target_agent(1)
    singles = {seeded_update(agent, batch, s)["target_q"] for s in range(200)}
    assert singles == {float(i) for i in range(10)}  # one random member: any of them


def test_backup_entropy_subtracts_alpha_log_pi():
    batch = zero_reward_batch()
    config = dict(hidden=(8, 8), num_critics=2, gamma=1.0, tau=0.0, critic_lr=0.0)
    metrics = {}
    for flag in (True, False):
        torch.manual_seed(0)
        agent = SAC(OBS, ACT, SACConfig(**config, backup_entropy=flag))
        constant_critics(agent, [3.0, 5.0])
        torch.manual_seed(1)
        _, log_prob = agent.actor(batch.next_obs)
        metrics[flag] = seeded_update(agent, batch, 1)["target_q"]
        if flag:  # alpha = 1: target = 3 - log pi(a'|s')
            assert metrics[flag] == pytest.approx(3.0 - log_prob.mean().item(), rel=1e-5)
    assert metrics[False] == 3.0


def clip_batch() -> Batch:
    """Four rows: rewards -2, 0, 1, -1; the last two terminal."""
    batch = random_batch(4)
    return Batch(
        obs=batch.obs, action=batch.action, reward=torch.tensor([-2.0, 0.0, 1.0, -1.0]),
        next_obs=batch.next_obs, terminated=torch.tensor([0.0, 0.0, 1.0, 1.0]),
        truncated=torch.zeros(4),
    )  # fmt: skip


@pytest.mark.parametrize("bounds, expected", [(None, 0.25), ((-1.0, 1.0), 0.125)])
def test_sac_target_clip_clamps_the_td_target(bounds, expected):
    """Target critics 3 and 5, gamma 0.5, no entropy: targets r + 0.5 (1 - d) 3 =
    -0.5, 1.5, 1, -1 (mean 0.25); clipped to [-1, 1]: -0.5, 1, 1, -1 (mean 0.125)."""
    torch.manual_seed(0)
    config = SACConfig(
        hidden=(8, 8), gamma=0.5, backup_entropy=False, critic_lr=0.0, target_clip=bounds
    )
    agent = SAC(OBS, ACT, config)
    constant_critics(agent, [3.0, 5.0])
    assert agent.update(clip_batch())["target_q"] == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(
    "bounds, targets", [(None, [-0.5, 1.5, 1.0, -1.0]), ((-1.0, 1.0), [-0.5, 1.0, 1.0, -1.0])]
)
def test_td3_target_clip_clamps_the_td_target(bounds, targets):
    """TD3's critic loss with critics 3 and 5 (targets: the min, 3) is the sum of the two
    critics' MSEs to the (clipped) targets, as in the SAC case above."""
    torch.manual_seed(0)
    agent = TD3(OBS, ACT, TD3Config(hidden=(8, 8), gamma=0.5, target_clip=bounds))
    constant_critics(agent, [3.0, 5.0])
    target = torch.tensor(targets)
    expected = ((3.0 - target) ** 2).mean() + ((5.0 - target) ** 2).mean()
    assert agent.update(clip_batch())["critic_loss"] == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.parametrize(
    "max_backup, entropy, expected",
    [(False, False, [0.1, 0.5]), (True, False, [0.9, 0.5]), (True, True, [0.3, 0.5])],
)
def test_max_target_backup_takes_the_best_of_the_sampled_next_actions(
    max_backup, entropy, expected
):
    """Two rows, three next actions sampled per row (sample-major: sample k is rows 2k,
    2k + 1), first action coordinates 0.1, 0.5 | 0.3, -0.2 | 0.9, 0.0; target critics
    Q_i = a_0 + i (min: a_0); log pi 0 except 1 on the third sample of row 0; alpha 1,
    reward 0, gamma 1. Max backup: row 0 max(0.1, 0.3, 0.9) = 0.9 (with entropy: 0.9 - 1
    falls below 0.3), row 1 max(0.5, -0.2, 0.0) = 0.5; without it, the first sample."""
    config = SACConfig(
        hidden=(8, 8), gamma=1.0, backup_entropy=entropy, max_target_backup=max_backup,
        backup_actions=3,
    )  # fmt: skip
    agent = SAC(OBS, ACT, config)
    first = torch.tensor([0.1, 0.5, 0.3, -0.2, 0.9, 0.0])
    log_pi = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 0.0])
    seen = []

    def actor(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(obs.clone())
        rows = obs.shape[0]
        action = torch.zeros(rows, ACT.shape[0])
        action[:, 0] = first[:rows]
        return action, log_pi[:rows]

    agent.actor = actor
    agent.target_critic = lambda obs, action: torch.stack([action[:, 0], action[:, 0] + 1])
    batch = random_batch(2)
    _, stats = agent._critic_losses(
        batch.obs, batch.action, torch.zeros(2), batch.next_obs, torch.zeros(2),
        torch.tensor(1.0),
    )  # fmt: skip
    assert stats["target_q"].item() == pytest.approx(sum(expected) / 2, abs=1e-6)
    samples = 3 if max_backup else 1
    assert torch.equal(seen[0], batch.next_obs.repeat(samples, 1))


def test_backup_actions_must_be_positive():
    with pytest.raises(ValueError, match="backup_actions"):
        SACConfig(backup_actions=0)


@pytest.mark.parametrize("bounds", [(0.0, 0.0), (1.0, -1.0), (1.0,)])
def test_target_clip_refuses_bad_bounds(bounds):
    for config in (SACConfig, TD3Config):
        with pytest.raises(ValueError, match="low < high"):
            config(target_clip=bounds)


@pytest.mark.parametrize("actor_q, expected", [("min", 1.0), ("mean", 3.0)])
def test_actor_loss_uses_min_or_mean_q(actor_q, expected):
    """Critics saying 1, 2, 6 everywhere, alpha 1: actor_loss = mean(log pi) - Q."""
    torch.manual_seed(0)
    config = SACConfig(
        hidden=(8, 8), num_critics=3, actor_q=actor_q, critic_lr=0.0, policy_frequency=1
    )
    agent = SAC(OBS, ACT, config)
    constant_critics(agent, [1.0, 2.0, 6.0])
    metrics = agent.update(random_batch(B))
    assert metrics["actor_loss"] + metrics["entropy"] == pytest.approx(-expected, abs=1e-5)


def adam_steps(optimizer: torch.optim.Optimizer) -> set[int]:
    return {int(state["step"].item()) for state in optimizer.state.values()}


@pytest.mark.parametrize("actor_batch, rows", [("last", B), ("full", UTD * B)])
def test_utd_update_takes_utd_critic_steps_and_one_actor_step(actor_batch, rows):
    torch.manual_seed(0)
    config = SACConfig(
        hidden=(8, 8), num_critics=4, utd_ratio=UTD, policy_frequency=1, actor_batch=actor_batch
    )
    agent = SAC(OBS, ACT, config)
    seen = []
    actor_step = agent._actor_and_alpha_step
    agent._actor_and_alpha_step = lambda steps, log_alpha, obs: (
        seen.append(obs) or actor_step(steps, log_alpha, obs)
    )
    polyaks = []
    batch = random_batch(UTD * B)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("rlcore.compiled.polyak_update", lambda *a: polyaks.append(a))
        agent.update(batch)
    assert adam_steps(agent.critic_optimizer) == {UTD}
    assert adam_steps(agent.actor_optimizer) == {1} and adam_steps(agent.alpha_optimizer) == {1}
    assert len(polyaks) == UTD  # one Polyak average per critic step
    assert len(seen) == 1 and torch.equal(seen[0], batch.obs[-rows:])
    agent.update(random_batch(UTD * B, seed=1))
    assert adam_steps(agent.critic_optimizer) == {2 * UTD}
    assert adam_steps(agent.actor_optimizer) == {2}


def test_utd_batch_must_split_into_equal_minibatches():
    agent = SAC(OBS, ACT, SACConfig(hidden=(8, 8), utd_ratio=3))
    with pytest.raises(ValueError, match="utd_ratio=3"):
        agent.update(random_batch(16))


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"critic_subset": 3}, "critic_subset=3"),
        ({"critic_subset": 0}, "critic_subset=0"),
        ({"actor_q": "max"}, "actor_q"),
        ({"actor_batch": "first"}, "actor_batch"),
        ({"utd_ratio": 0}, "utd_ratio"),
    ],
)
def test_bad_ensemble_options_raise(changes, match):
    with pytest.raises(ValueError, match=match):
        SACConfig(**{"num_critics": 2, **changes})


def test_critic_last_layer_scale_shrinks_the_initial_q():
    torch.manual_seed(0)
    plain = SAC(OBS, ACT, SACConfig(hidden=(32, 32)))
    torch.manual_seed(0)
    small = SAC(OBS, ACT, SACConfig(hidden=(32, 32), critic_last_layer_scale=1e-2))
    weight = small.critic.net.output_layer.weight  # (E, 32, 1): orthogonal, gain 1e-2
    assert torch.allclose(weight.norm(dim=1), torch.full((2, 1), 1e-2), rtol=1e-5)
    assert torch.equal(small.critic.net.output_layer.bias, torch.zeros(2, 1, 1))
    assert torch.equal(small.target_critic.net.output_layer.weight, weight)
    batch = random_batch(64)
    q_small = small.critic(batch.obs, batch.action).abs().max()
    assert q_small < 0.05 < plain.critic(batch.obs, batch.action).abs().max()


# ---------------------------------------------------------------------------- RLPD / WSRL


def test_rlpd_defaults():
    config, agent = RLPDConfig(), RLPD(OBS, ACT)
    assert (config.num_critics, config.critic_subset, config.utd_ratio) == (10, 2, 20)
    assert config.layer_norm and config.backup_entropy and config.actor_q == "mean"
    assert (config.actor_lr, config.critic_lr, config.alpha_lr) == (3e-4, 3e-4, 3e-4)
    assert (config.offline_data, config.offline_fraction, config.offline_steps) == ("mix", 0.5, 0)
    assert (config.batch_size, config.learning_starts, config.policy_frequency) == (256, 5000, 1)
    assert agent.target_entropy == -1.5  # -|A| / 2
    assert RLPD(OBS, ACT, RLPDConfig(target_entropy=-7.0)).target_entropy == -7.0
    assert agent.critic.net.norms is not None  # LayerNorm critics


def test_wsrl_defaults_and_shared_networks():
    config, agent = WSRLConfig(), WSRL(OBS, ACT)
    sac = agent.online.config
    assert (sac.num_critics, sac.critic_subset, sac.utd_ratio, sac.batch_size) == (10, 2, 4, 256)
    assert not sac.backup_entropy and sac.actor_q == "min" and sac.actor_batch == "full"
    assert (sac.actor_lr, sac.critic_lr, sac.alpha_lr, sac.init_alpha) == (1e-4, 3e-4, 1e-4, 1.0)
    assert (config.cql_alpha, config.cql_n_actions, config.offline_steps) == (5.0, 10, 250_000)
    assert config.cql_importance_sample and config.cql_max_target_backup
    assert (config.warmup_steps, config.offline_data, config.buffer_size) == (5000, "drop", 2e6)
    assert not config.normalize_states and agent.online.target_entropy == -3.0
    for part in ("actor", "critic", "target_critic"):  # the same modules, not copies
        assert getattr(agent.online, part) is getattr(agent.offline, part)
    assert agent.offline.critic.net.norms is not None


def test_wsrl_antmaze_recipe_pretrains_cal_ql_and_backs_up_the_max_online():
    """configs/experiment/wsrl_antmaze.yaml: Cal-QL pre-training (the bound on), the
    reference's sparse rule for the return-to-go (failure -5 after 10 r - 5, every reward),
    online max over 10 sampled next actions."""
    from pathlib import Path

    from omegaconf import OmegaConf

    path = Path(__file__).resolve().parents[1] / "configs" / "experiment" / "wsrl_antmaze.yaml"
    shipped = OmegaConf.to_container(OmegaConf.load(path))["algo"]
    config = WSRLConfig(**{**shipped, "hidden": (32, 32), "critic_hidden": (32,) * 4})
    data = config.plan().data
    assert (data.sparse_failure_reward, data.sparse_rule) == (-5.0, "all")
    assert (data.reward_scale, data.reward_bias) == (10.0, -5.0)
    torch.manual_seed(0)
    agent = WSRL(OBS, ACT, config)
    assert agent.offline.calibrate and agent.offline.config.cql_lagrange_form == "wsrl"
    assert agent.offline.config.cql_lagrange and agent.offline.config.cql_target_action_gap == 0.8
    assert agent.online.config.max_target_backup and agent.online.config.backup_actions == 10
    metrics = agent.update(random_batch(UTD * B))
    assert 0.0 <= metrics["bound_rate"] <= 1.0  # Cal-QL's bound is in the penalty
    no_returns = random_batch(UTD * B)
    with pytest.raises(ValueError, match="mc_return"):
        agent.update(Batch(**{**no_returns.__dict__, "mc_return": None}))
    agent.set_phase("online")
    assert "target_q" in agent.update(random_batch(UTD * B))
    assert WSRLConfig().plan().data.sparse_failure_reward is None
    with pytest.raises(ValueError, match="calibrate"):
        WSRLConfig(sparse_reward=True)


def test_wsrl_set_phase_switches_from_cql_to_sac_maths():
    agent = make_wsrl(0)
    batch = random_batch(UTD * B)
    offline = agent.update(batch)
    assert {"cql_penalty", "cql_diff", "q_rand"} <= offline.keys()
    assert agent.offline.updates == 1 and agent.online.updates == 0
    # one CQL step on the first batch_size rows
    assert adam_steps(agent.offline.critic_optimizer) == {1}
    weights = [p.detach().clone() for p in agent.offline.actor.parameters()]
    agent.set_phase("online")  # no copy, no reset: the pre-trained networks go on
    assert all(torch.equal(p, q) for p, q in zip(weights, agent.online.actor.parameters()))
    online = agent.update(batch)
    assert not any(key.startswith("cql") for key in online) and "target_q" in online
    assert agent.offline.updates == 1 and agent.online.updates == 1
    # Adam's step counts go on from pre-training's 1: 4 critic steps and one actor step
    assert adam_steps(agent.online.critic_optimizer) == {1 + UTD}
    assert adam_steps(agent.online.actor_optimizer) == {2}
    assert not all(torch.equal(p, q) for p, q in zip(weights, agent.offline.actor.parameters()))
    agent.set_phase("offline")
    assert "cql_penalty" in agent.update(batch)


def adam_moments(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [
        state[key].clone()
        for state in optimizer.state.values()
        for key in ("exp_avg", "exp_avg_sq")
    ]


@pytest.mark.parametrize("first_online_phase", ["warmup", "online"])
def test_wsrl_switch_carries_the_pretrained_temperature_and_adam_states(first_online_phase):
    """The reference's SAC restores the whole CQL train state: alpha and Adam moments."""
    agent = make_wsrl(0, alpha_lr=0.05)  # a temperature that visibly moves off 1
    for step in range(3):
        seeded_update(agent, random_batch(UTD * B, seed=step), step)
    offline, online = agent.offline, agent.online
    assert online.alpha.item() == 1.0 and offline.alpha.item() != pytest.approx(1.0, abs=0.05)
    assert online.actor_optimizer.state == {}  # the SAC agent has not stepped yet
    agent.set_phase(first_online_phase)
    assert online.log_alpha.item() == offline.log_alpha.item()
    assert online.log_alpha is not offline.log_alpha  # a copy: the agents stay separate
    pairs = [
        (offline.actor_optimizer, online.actor_optimizer),
        (offline.critic_optimizer, online.critic_optimizer),
        (offline.alpha_optimizer, online.alpha_optimizer),
    ]
    for source, target in pairs:
        assert adam_steps(target) == {3}
        for p, q in zip(adam_moments(source), adam_moments(target)):
            assert torch.equal(p, q) and p.abs().sum() > 0
    first_moments = adam_moments(online.critic_optimizer)
    agent.set_phase("online")  # warmup -> online carries nothing again
    assert all(
        torch.equal(p, q) for p, q in zip(first_moments, adam_moments(online.critic_optimizer))
    )
    # the online temperature step starts from the carried moments: not fresh Adam's step
    seeded_update(agent, random_batch(UTD * B, seed=7), 7)
    assert adam_steps(online.alpha_optimizer) == {4}


def test_wsrl_resume_online_does_not_carry_the_cql_state_again():
    """set_phase after loading an online checkpoint keeps the saved online state."""
    agent = make_wsrl(0, alpha_lr=0.05)
    seeded_update(agent, random_batch(UTD * B, seed=0), 0)
    agent.set_phase("online")
    for step in range(1, 3):
        seeded_update(agent, random_batch(UTD * B, seed=step), step)
    saved = copy.deepcopy(agent.state_dict())
    assert saved["phase"] == "online"
    restored = make_wsrl(4)  # a fresh agent: phase "offline" until the checkpoint says so
    restored.load_state_dict(saved)
    restored.set_phase("online")  # what the loop does after a resume
    assert restored.online.log_alpha.item() == agent.online.log_alpha.item()
    assert restored.online.log_alpha.item() != restored.offline.log_alpha.item()
    batch = random_batch(UTD * B, seed=9)
    assert seeded_update(restored, batch, 9) == seeded_update(agent, batch, 9)


def cql_target_agent(subset: int | None) -> WSRL:
    """WSRL pre-training whose 10 target critics say 0, 1, ..., 9 everywhere; reward 0 and
    gamma 1, so the CQL TD target is the min over the target critics it looks at."""
    agent = make_wsrl(0, hidden=(8, 8), critic_subset=subset, gamma=1.0, tau=0.0, critic_lr=0.0)
    constant_critics(agent.offline, [float(i) for i in range(10)])
    return agent


def test_wsrl_pretraining_target_is_the_min_over_a_random_two_of_ten():
    batch = zero_reward_batch()
    assert WSRLConfig().critic_subset == 2
    every = [seeded_update(cql_target_agent(None), batch, s)["target_q"] for s in range(3)]
    assert every == [0.0] * 3  # the min over all 10 critics
    agent = cql_target_agent(2)
    seen = [seeded_update(agent, batch, s)["target_q"] for s in range(300)]
    assert set(seen) <= {float(i) for i in range(9)}  # min of 2 distinct: never 9
    assert len(set(seen)) >= 5  # the subset changes from update to update
    # P(min = 0) = 9/45 = 0.2 for 2 of 10 drawn without replacement
    assert 0.13 < seen.count(0.0) / len(seen) < 0.28
    again = cql_target_agent(2)  # same seeds, same draws
    assert [seeded_update(again, batch, s)["target_q"] for s in range(300)] == seen
    with pytest.raises(ValueError, match="critic_subset=11"):
        make_wsrl(0, critic_subset=11)


def test_wsrl_refuses_bad_phase_and_normalised_states():
    agent = make_wsrl(0)
    with pytest.raises(ValueError, match="unknown phase 'finetune'"):
        agent.set_phase("finetune")
    with pytest.raises(ValueError, match="normalize_states=false"):
        WSRL(OBS, ACT, WSRLConfig(normalize_states=True))
    with pytest.raises(ValueError, match="compile_steps=3 must be >= 1 and divide"):
        RLPDConfig(utd_ratio=4, compile_steps=3)


# ---------------------------------------------------------------------------- compiled UTD


# The compiled-UTD test's size: inductor's compile time grows with the graph (the unrolled
# critic steps, and each LayerNorm critic's own layer_norm), not with what is checked; 2
# critic steps in one graph and 4 critics (6 possible target pairs) still tell a graph
# that draws other subsets or noise, or recompiles, from the eager update.
COMPILED_UTD, COMPILED_CRITICS = 2, 4


@pytest.mark.slow
@pytest.mark.skipif(cxx_compiler() is None, reason="torch.compile on CPU needs a C++ compiler")
@pytest.mark.parametrize("compile_steps", [1, None])
def test_compiled_utd_update_equals_eager_and_compiles_once(compile_steps):
    """UTD 2, 4 LayerNorm critics, subset 2, mean-Q actor: the compiled update (both
    critic steps in one graph, or one per graph call) draws the same subsets and noise
    as the eager one (fallback_random) and is compiled once, not per call."""
    config = RLPDConfig(
        hidden=(32, 32),
        num_critics=COMPILED_CRITICS,
        utd_ratio=COMPILED_UTD,
        compile_steps=compile_steps,
    )
    torch.manual_seed(0)
    eager = RLPD(OBS, ACT, config)
    torch.manual_seed(0)
    fast = RLPD(OBS, ACT, RLPDConfig(**{**vars(config), "compile": True}))
    assert fast._update_graph is not None
    initial = parameters(eager)
    graphs = None
    for step in range(4):
        if step == 1:  # compiled by the first call: later calls must not compile again
            graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        batch = random_batch(COMPILED_UTD * B, seed=step)
        m_eager, m_fast = seeded_update(eager, batch, step), seeded_update(fast, batch, step)
        assert m_eager.keys() == m_fast.keys()
        for key in m_eager:
            assert m_fast[key] == pytest.approx(m_eager[key], rel=1e-3, abs=1e-5), key
    for p, q in zip(parameters(eager), parameters(fast)):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)
    assert any(not torch.equal(p0, p) for p0, p in zip(initial, parameters(eager)))
    assert adam_steps(fast.critic_optimizer) == {4 * COMPILED_UTD}
    assert adam_steps(fast.actor_optimizer) == {4}
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # no recompile


# ---------------------------------------------------------------------------- IQL fine-tuning


def test_iql_deterministic_actor_explores_with_clipped_noise_and_evaluates_without():
    """CORL's fine-tuning acts with pi(s) + clip(N(0, 0.03), +-0.5) in [-1, 1] units."""
    assert (IQLConfig().expl_noise, IQLConfig().noise_clip) == (0.03, 0.5)
    obs = np.random.default_rng(0).normal(size=(4000, 5)).astype(np.float32)
    half_width = (ACT.high - ACT.low) / 2  # 2, 0.5, 0.5
    torch.manual_seed(0)
    agent = IQL(OBS, ACT, IQLConfig(hidden=(8, 8), deterministic_actor=True))
    mean = agent.act(obs, deterministic=True)
    assert np.array_equal(mean, agent.act(obs, deterministic=True))  # evaluation: no noise
    noise = (agent.act(obs) - mean) / half_width  # back in [-1, 1] units
    assert np.abs(noise.std(0) - 0.03).max() < 0.002 and np.abs(noise.mean(0)).max() < 0.002
    torch.manual_seed(3)
    first = agent.act(obs)
    torch.manual_seed(3)
    assert np.array_equal(first, agent.act(obs))  # torch's generator: same seed, same noise
    wide = IQL(OBS, ACT, IQLConfig(hidden=(8, 8), deterministic_actor=True, expl_noise=1.0))
    wide.load_state_dict(agent.state_dict())
    explore = wide.act(obs)
    noise = (explore - mean) / half_width
    assert (explore >= ACT.low).all() and (explore <= ACT.high).all()
    inside = (explore > ACT.low + 1e-6) & (explore < ACT.high - 1e-6)  # not cut by the box
    assert np.abs(noise[inside]).max() == pytest.approx(0.5, abs=1e-5)  # the noise clip
    assert (np.abs(noise[inside]) > 0.5 - 1e-5).mean() > 0.5  # |N(0, 1)| > 0.5: 62%
