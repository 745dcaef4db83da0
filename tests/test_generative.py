"""Diffusion and flow action heads (rlcore/generative.py): schedules, the reverse-step
Gaussian and its log-density against hand-computed values, Euler integration, shapes,
determinism, EMA, and a small behaviour-cloning fit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlcore.generative import (
    EMA,
    DDPMHead,
    FlowHead,
    cosine_betas,
    gaussian_log_prob,
    vp_betas,
)


def test_schedules_against_hand_computed_values():
    # f(t) = cos^2(((t/2) + 0.008) / 1.008 * pi/2); beta = 1 - f(1)/f(0), 1 - f(2)/f(1) -> 0.999
    torch.testing.assert_close(cosine_betas(2), torch.tensor([0.506156, 0.999]), atol=2e-6, rtol=0)
    # 1 - exp(-0.1/2 - 9.9 * (2k - 1) / 8), k = 1, 2
    torch.testing.assert_close(vp_betas(2), torch.tensor([0.724040, 0.976774]), atol=2e-6, rtol=0)
    assert (cosine_betas(20) > 0).all() and (vp_betas(20) < 1).all()


def _zero_output(head: torch.nn.Module) -> None:
    out = head.net.out[-1]
    torch.nn.init.zeros_(out.weight)
    torch.nn.init.zeros_(out.bias)


def test_ddpm_reverse_step_with_zero_epsilon_matches_the_posterior_by_hand():
    """K = 2 cosine, first sampling step (DDPM t = 1), epsilon = 0: x0 = x / sqrt(ab_1),
    clipped to 1, mean = coef_x0 x0 + coef_xt x, std = sqrt(posterior variance)."""
    head = DDPMHead(obs_dim=1, action_dim=1, horizon=1, steps=2, hidden=(8, 8))
    _zero_output(head)
    obs = torch.zeros(2, 1)
    x = torch.tensor([0.02, 0.1]).view(2, 1, 1)  # x0 = 0.9 (inside), 4.5 (clipped to 1)
    mean, std = head.transition(obs, x, 0)
    torch.testing.assert_close(
        mean.flatten(), torch.tensor([0.632452, 0.703970]), atol=3e-5, rtol=0
    )
    torch.testing.assert_close(std.flatten(), torch.full((2,), 0.711286), atol=3e-5, rtol=0)
    # the last step (t = 0) has zero posterior variance; the floor lifts it
    assert head.transition(obs, x, 1)[1].abs().max() == 0
    assert torch.allclose(head.transition(obs, x, 1, std_floor=0.1)[1], torch.tensor(0.1))


def test_gaussian_log_prob_by_hand():
    x, mean, std = torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([[2.0]])
    expected = -1 / 8 - math.log(2) - 0.5 * math.log(2 * math.pi)
    assert gaussian_log_prob(x, mean, std).item() == pytest.approx(expected, abs=1e-6)
    # (B, H, A) -> (B,): a sum over every dim
    x3 = torch.ones(3, 2, 4)
    assert gaussian_log_prob(x3, torch.zeros_like(x3), torch.ones_like(x3)).shape == (3,)


def test_flow_euler_steps_integrate_the_velocity_exactly():
    head = FlowHead(obs_dim=2, action_dim=3, horizon=4, steps=5, hidden=(8, 8))
    head.velocity = lambda obs, x, t: torch.full_like(x, 0.1) + 0 * t.view(-1, 1, 1)
    obs = torch.zeros(6, 2)
    action, chain = head.sample(obs, generator=torch.Generator().manual_seed(0), return_chain=True)
    assert action.shape == (6, 4, 3) and chain.shape == (6, 6, 4, 3)
    torch.testing.assert_close(chain[:, -1], chain[:, 0] + 0.1)  # 5 steps of 0.1 / 5
    torch.testing.assert_close(action, (chain[:, 0] + 0.1).clamp(-1, 1))
    torch.testing.assert_close(head.times(), torch.tensor([0.0, 0.2, 0.4, 0.6, 0.8]))


def test_ddpm_sampling_shapes_clip_and_determinism():
    head = DDPMHead(obs_dim=3, action_dim=2, horizon=4, steps=5, hidden=(16, 16))
    obs = torch.randn(7, 3)
    a1, chain = head.sample(obs, generator=torch.Generator().manual_seed(1), return_chain=True)
    a2 = head.sample(obs, generator=torch.Generator().manual_seed(1))
    assert a1.shape == (7, 4, 2) and chain.shape == (7, 6, 4, 2)
    assert torch.equal(a1, a2) and a1.abs().max() <= 1.0
    torch.testing.assert_close(a1, chain[:, -1].clamp(-1, 1))
    with pytest.raises(ValueError, match="schedule='linear'"):
        DDPMHead(3, 2, schedule="linear")


def test_ema_averages_parameters():
    net = torch.nn.Linear(2, 1)
    ema = EMA(net, decay=0.75)
    before = net.weight.detach().clone()
    with torch.no_grad():
        net.weight.add_(4.0)
    ema.update(net)
    torch.testing.assert_close(ema.shadow.weight, before + 1.0)  # 0.75 * w + 0.25 * (w + 4)
    with pytest.raises(ValueError, match="decay"):
        EMA(net, decay=1.0)


@pytest.mark.parametrize("kind", ["flow", "ddpm"])
def test_behaviour_cloning_fits_an_observation_dependent_chunk(kind):
    """obs = +-1 -> the chunk of +-0.5 (every step and dim): a few hundred Adam steps make
    the sampled chunks land within 0.1 of the target."""
    torch.manual_seed(0)
    if kind == "flow":
        head = FlowHead(1, 2, horizon=3, steps=4, hidden=(64, 64))
    else:
        head = DDPMHead(1, 2, horizon=3, steps=10, hidden=(64, 64))
    optimizer = torch.optim.Adam(head.parameters(), lr=3e-3)
    obs = torch.tensor([[1.0], [-1.0]]).repeat(64, 1)
    target = (0.5 * obs).view(-1, 1, 1).expand(-1, 3, 2)
    for _ in range(600):
        loss = head.loss(obs, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    action = head.sample(obs[:2], generator=torch.Generator().manual_seed(0))
    assert (action - target[:2]).abs().max() < 0.1


# ---------------------------------------------------------------- the BC agent (algos/)


def _bc_agent(head: str = "ddpm"):
    import gymnasium as gym

    from algos.generative_bc import DiffusionBCConfig, FlowBCConfig, GenerativeBC

    obs_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    act_space = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
    cls = DiffusionBCConfig if head == "ddpm" else FlowBCConfig
    config = cls(
        hidden=(16, 16), horizon=3, denoising_steps=4 if head == "ddpm" else 2, total_steps=10
    )
    return GenerativeBC(obs_space, act_space, config)


@pytest.mark.parametrize("head", ["ddpm", "flow"])
def test_bc_agent_contract(head):
    from rlcore.types import Batch

    torch.manual_seed(0)
    agent = _bc_agent(head)
    single = agent.act(np.zeros(3, np.float32))
    batch_chunks = agent.act(np.zeros((5, 3), np.float32))
    assert single.shape == (3, 2) and batch_chunks.shape == (5, 3, 2)
    low, high = np.array([-2.0, 0.0]), np.array([2.0, 1.0])
    assert (batch_chunks >= low - 1e-6).all() and (batch_chunks <= high + 1e-6).all()
    obs = np.zeros((2, 3), np.float32)
    assert np.array_equal(agent.act(obs, deterministic=True), agent.act(obs, deterministic=True))
    b = 8
    batch = Batch(
        obs=torch.randn(b, 3), action=torch.zeros(b, 2), reward=torch.zeros(b),
        next_obs=torch.zeros(b, 3), terminated=torch.zeros(b), truncated=torch.zeros(b),
        extras={"action_chunk": torch.rand(b, 3, 2)},
    )  # fmt: skip
    metrics = agent.update(batch)
    assert set(metrics) == {"bc_loss", "lr"} and metrics["lr"] == pytest.approx(1e-3)
    clone = _bc_agent(head)
    clone.load_state_dict(agent.state_dict())
    for p, q in zip(agent.head.parameters(), clone.head.parameters()):
        assert torch.equal(p, q)
    assert clone.updates == 1
    with pytest.raises(ValueError, match="prepare_dataset"):
        agent.update(Batch(**{**batch.__dict__, "extras": {}}))


def test_bc_learning_rate_is_cosine_annealed_to_its_minimum():
    agent = _bc_agent()
    assert agent.lr_at(0) == pytest.approx(1e-3)
    assert agent.lr_at(5) == pytest.approx(1e-4 + 0.5 * 9e-4)  # halfway of 10
    assert agent.lr_at(10) == pytest.approx(1e-4) and agent.lr_at(99) == pytest.approx(1e-4)


@pytest.mark.parametrize("head", ["ddpm", "flow"])
def test_bc_agent_round_trip_gives_identical_future_and_nan_stops_cleanly(head):
    from rlcore.types import Batch
    from rlcore.utils import NonFiniteLossError

    def batch(seed: int, obs_scale: float = 1.0) -> Batch:
        g = torch.Generator().manual_seed(seed)
        return Batch(
            obs=torch.randn(8, 3, generator=g) * obs_scale, action=torch.zeros(8, 2),
            reward=torch.zeros(8), next_obs=torch.zeros(8, 3), terminated=torch.zeros(8),
            truncated=torch.zeros(8), extras={"action_chunk": torch.rand(8, 3, 2, generator=g)},
        )  # fmt: skip

    torch.manual_seed(0)
    agent = _bc_agent(head)
    agent.update(batch(0))
    clone = _bc_agent(head)
    clone.load_state_dict(agent.state_dict())
    for seed in (1, 2):
        torch.manual_seed(seed)
        a = agent.update(batch(seed))
        torch.manual_seed(seed)
        b = clone.update(batch(seed))
        assert a == b
    before = [p.detach().clone() for p in agent.head.parameters()]
    with pytest.raises(NonFiniteLossError):
        agent.update(batch(3, obs_scale=float("nan")))
    assert all(torch.equal(p, q) for p, q in zip(before, agent.head.parameters()))
