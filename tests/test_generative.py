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
    DenoisingMLP,
    FlowHead,
    cosine_betas,
    ema_event,
    gaussian_log_prob,
    standard_normal,
    vp_betas,
    warmup_cosine_lr,
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


def _bc_agent(head: str = "ddpm", epoch_steps: int | None = 2, **kw):
    import gymnasium as gym

    from rlcore.algos.generative_bc import DiffusionBCConfig, FlowBCConfig, GenerativeBC

    obs_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    act_space = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
    cls = DiffusionBCConfig if head == "ddpm" else FlowBCConfig
    config = cls(
        hidden=(16, 16, 16), horizon=3, denoising_steps=4 if head == "ddpm" else 2,
        total_steps=10, **kw,
    )  # fmt: skip
    agent = GenerativeBC(obs_space, act_space, config)
    agent.epoch_steps = epoch_steps  # what prepare_dataset sets (test_bc_prepare_dataset...)
    return agent


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
    torch.manual_seed(3)
    first = agent.act(obs, deterministic=True)
    torch.manual_seed(3)
    assert np.array_equal(first, agent.act(obs, deterministic=True))  # given the seed
    b = 8
    batch = Batch(
        obs=torch.randn(b, 3), action=torch.zeros(b, 2), reward=torch.zeros(b),
        next_obs=torch.zeros(b, 3), terminated=torch.zeros(b), truncated=torch.zeros(b),
        extras={"action_chunk": torch.rand(b, 3, 2)},
    )  # fmt: skip
    metrics = agent.update(batch)
    assert set(metrics) == {"bc_loss", "lr"} and metrics["lr"] == pytest.approx(1e-4)
    clone = _bc_agent(head)
    clone.load_state_dict(agent.state_dict())
    for p, q in zip(agent.head.parameters(), clone.head.parameters()):
        assert torch.equal(p, q)
    assert clone.updates == 1
    with pytest.raises(ValueError, match="prepare_dataset"):
        agent.update(Batch(**{**batch.__dict__, "extras": {}}))


def test_bc_learning_rate_follows_the_references_per_epoch_schedule():
    """2 steps per epoch, 10 steps = 5 epochs: epoch 0 at lr_min (the warm-up epoch),
    then a cosine from lr over the 4 remaining epochs (DPPO's first_cycle_steps = n_epochs,
    warmup 1), constant within an epoch; the optimiser is AdamW with weight decay 1e-6."""
    agent = _bc_agent()
    cos = [1e-4 + 0.5 * 9e-4 * (1 + math.cos(math.pi * j / 4)) for j in range(4)]
    expected = [1e-4, 1e-4, cos[0], cos[0], cos[1], cos[1], cos[2], cos[2], cos[3], cos[3]]
    assert [agent.lr_at(u) for u in range(10)] == pytest.approx(expected)
    assert cos[0] == pytest.approx(1e-3)
    assert isinstance(agent.optimizer, torch.optim.AdamW)
    assert agent.optimizer.param_groups[0]["weight_decay"] == 1e-6
    flow = _bc_agent("flow")  # ReinFlow: a 3000-epoch cosine (its runs last 40 epochs)
    assert flow.lr_at(2) == pytest.approx(1e-3) and flow.lr_at(80) == pytest.approx(
        1e-4 + 0.5 * 9e-4 * (1 + math.cos(math.pi * 39 / 2999))
    )
    with pytest.raises(ValueError, match="prepare_dataset"):
        _bc_agent(epoch_steps=None).lr_at(0)


def test_warmup_cosine_lr_by_hand():
    """ReinFlow's Hopper actor schedule (2e-5 -> 4.5e-5, 100-iteration cycles, 10 warm-up):
    starts at the minimum, linear warm-up, cosine, restart."""
    lr = [warmup_cosine_lr(i, 4.5e-5, 2e-5, 100, 10) for i in (0, 5, 10, 55, 99, 100, 105, 110)]
    mid = 2e-5 + 2.5e-5 * 0.5
    last = 2e-5 + 2.5e-5 * (1 + math.cos(math.pi * 89 / 90)) / 2
    assert lr == pytest.approx([2e-5, mid, 4.5e-5, mid, last, 2e-5, mid, 4.5e-5])


def test_ema_events_follow_each_references_pretraining_schedule():
    # DPPO: at the end of every 5th epoch (3 steps each); a copy before epoch 10
    dppo = {u: ema_event(u, 3, 10, 5, "epoch") for u in range(1, 46)}
    assert {u: e for u, e in dppo.items() if e} == {15: "copy", 30: "average", 45: "average"}
    # ReinFlow: every 10th gradient step from the first; a copy before epoch 20 (4 steps each)
    steps = {u: ema_event(u, 4, 20, 10, "step") for u in range(1, 92)}
    assert {u for u, e in steps.items() if e} == {1, 11, 21, 31, 41, 51, 61, 71, 81, 91}
    assert steps[71] == "copy" and steps[81] == "average"  # step 80 is in epoch 20
    with pytest.raises(ValueError, match="unit"):
        ema_event(1, 1, 1, 1, "batch")


@pytest.mark.parametrize("head", ["ddpm", "flow"])
def test_bc_agent_applies_the_ema_schedule(head):
    """EMA decay 0.75, 2 steps per epoch, start at epoch 2, every epoch: after step 2 the
    EMA holds the weights (a copy), step 3 leaves it, after step 4 it is 0.75 x (weights
    at step 2) + 0.25 x (weights at step 4)."""
    from rlcore.types import Batch

    torch.manual_seed(0)
    agent = _bc_agent(head, ema_decay=0.75, ema_start_epoch=2, ema_every=1, ema_unit="epoch")
    batch = Batch(
        obs=torch.randn(8, 3), action=torch.zeros(8, 2), reward=torch.zeros(8),
        next_obs=torch.zeros(8, 3), terminated=torch.zeros(8), truncated=torch.zeros(8),
        extras={"action_chunk": torch.rand(8, 3, 2)},
    )  # fmt: skip

    def weights(module: torch.nn.Module) -> torch.Tensor:
        return torch.cat([p.detach().flatten() for p in module.parameters()])

    start = weights(agent.head)
    agent.update(batch)
    assert torch.equal(weights(agent.ema.shadow), start)  # step 1: nothing yet
    agent.update(batch)
    at_2 = weights(agent.head)
    assert not torch.equal(at_2, start) and torch.equal(weights(agent.ema.shadow), at_2)
    agent.update(batch)
    assert torch.equal(weights(agent.ema.shadow), at_2)
    agent.update(batch)
    torch.testing.assert_close(weights(agent.ema.shadow), 0.75 * at_2 + 0.25 * weights(agent.head))


def test_bc_prepare_dataset_sizes_an_epoch():
    from rlcore.offline.datasets import OfflineDataset

    n = 300
    dataset = OfflineDataset(
        obs=torch.randn(n, 3), action=torch.rand(n, 2), reward=torch.zeros(n),
        next_obs=torch.randn(n, 3), terminated=torch.zeros(n),
        truncated=(torch.arange(n) % 100 == 99).float(), episode_id=torch.arange(n) // 100,
        mc_return=torch.zeros(n), episode_return=torch.zeros(3, dtype=torch.float64),
    )  # fmt: skip
    agent = _bc_agent(epoch_steps=None)  # batch 128: ceil(300 / 128) = 3 steps per epoch
    agent.prepare_dataset(dataset)
    assert agent.epoch_steps == 3 and dataset.channels["action_chunk"].shape == (n, 3, 2)


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


# ---------------------------------------------------------------- the references' network


def test_dppo_layout_is_the_references_residual_mlp_by_hand():
    """DPPO's ResidualMLP([in, 8, 8, 8, out]) with ReLU: Linear(in, 8), ONE pre-activation
    block h + L2(relu(L1(relu(h)))), Linear(8, out) with nothing before it."""
    torch.manual_seed(0)
    net = DenoisingMLP(2, 1, 3, hidden=(8, 8, 8), time_dim=4, layout="dppo", activation="relu")
    assert len(net.blocks) == 1 and len(net.out) == 1 and isinstance(net.out[0], torch.nn.Linear)
    obs, x, t = torch.randn(5, 2), torch.randn(5, 1, 3), torch.tensor([0.0, 1, 2, 3, 4])
    h = net.inp(torch.cat([obs, x.flatten(1), net.time(t)], -1))
    l1, l2 = net.blocks[0][1], net.blocks[0][3]
    h = h + l2(torch.relu(l1(torch.relu(h))))
    torch.testing.assert_close(net(obs, x, t), net.out[0](h).view(5, 1, 3))
    # the earlier layout: Mish, len(hidden) - 1 = 2 blocks, Mish before the output layer
    old = DenoisingMLP(2, 1, 3, hidden=(8, 8, 8), time_dim=4)
    assert len(old.blocks) == 2 and isinstance(old.out[0], torch.nn.Mish)
    with pytest.raises(ValueError, match="odd number of widths"):
        DenoisingMLP(2, 1, 3, hidden=(8, 8), layout="dppo")
    with pytest.raises(ValueError, match="denoiser='unet'"):
        DenoisingMLP(2, 1, 3, layout="unet")


def test_bc_configs_default_to_the_references_network():
    agent = _bc_agent()
    assert agent.config.denoiser == "dppo" and agent.config.activation == "relu"
    assert len(agent.head.net.blocks) == 1  # hidden (16, 16, 16): one block
    assert isinstance(agent.head.net.blocks[0][0], torch.nn.ReLU)


# ---------------------------------------------------------------- evaluation samplers


def test_ddpm_evaluation_sampler_is_dppos_deterministic_path():
    """x_K ~ N(0, I) (not 0); intermediate std floored at 1e-3 (posterior variances set
    tiny here so the floor shows: x_{i+1} - mean_i = 1e-3 z_i); the last step adds no
    noise; noise clipped at +-noise_clip."""
    torch.manual_seed(0)
    head = DDPMHead(obs_dim=2, action_dim=2, horizon=3, steps=4, hidden=(8, 8))
    head.posterior_var[:] = 1e-12
    obs = torch.randn(64, 2)
    _, chain = head.sample(obs, generator=torch.Generator().manual_seed(7), return_chain=True,
                           noise_clip=2.0, evaluation=True)  # fmt: skip
    g = torch.Generator().manual_seed(7)
    z = [torch.randn(64, 3, 2, generator=g) for _ in range(5)]
    torch.testing.assert_close(chain[:, 0], z[0])  # the start: the generator's N(0, I)
    for i in range(4):
        mean, _ = head.transition(obs, chain[:, i], i)
        step = 1e-3 * z[i + 1].clamp(-2, 2) if i < 3 else torch.zeros_like(mean)
        torch.testing.assert_close(chain[:, i + 1] - mean, step, atol=2e-5, rtol=0)
    assert head.step_floor(2, 0.1, evaluation=False) == 0.1
    assert (head.step_floor(2, 0.1, True), head.step_floor(3, 0.1, True)) == (1e-3, 0.0)


def test_standard_normal_clip():
    z = standard_normal((20000,), 3.0, torch.Generator().manual_seed(0))
    assert z.abs().max() == 3.0 and (z.abs() == 3.0).sum() > 20  # ~0.27% of draws clipped
    assert standard_normal((20000,), None, torch.Generator().manual_seed(0)).abs().max() > 3.0


def test_flow_sampler_clips_every_euler_step_when_asked():
    head = FlowHead(obs_dim=1, action_dim=1, horizon=1, steps=2, hidden=(8, 8))
    head.velocity = lambda obs, x, t: torch.full_like(x, 3.0)  # +1.5 per step
    obs = torch.zeros(1, 1)
    g = torch.Generator().manual_seed(0)
    _, chain = head.sample(obs, generator=g, return_chain=True, clip_intermediate=True)
    x0 = torch.randn(1, 1, 1, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(chain[:, 1], (x0 + 1.5).clamp(-1, 1))
    torch.testing.assert_close(chain[:, 2], (chain[:, 1] + 1.5).clamp(-1, 1))


@pytest.mark.parametrize("head", ["ddpm", "flow"])
def test_bc_deterministic_acting_starts_from_random_noise(head):
    """Evaluation draws its start from the global RNG: two seeds, two chunks; one seed,
    one chunk (the earlier x_K = 0 path gave every seed the same chunk)."""
    torch.manual_seed(0)
    agent = _bc_agent(head)
    obs = np.zeros((1, 3), np.float32)
    chunks = []
    for seed in (1, 2, 1):
        torch.manual_seed(seed)
        chunks.append(agent.act(obs, deterministic=True))
    assert np.array_equal(chunks[0], chunks[2]) and not np.array_equal(chunks[0], chunks[1])
