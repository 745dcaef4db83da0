"""DrQ-v2 (algos/drqv2.py) against facebookresearch/drqv2's own agent: the golden file
tests/golden/drqv2.json was written by benchmarks/parity/drqv2_reference.py from the
inputs of benchmarks/parity/drqv2_data.py."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.algos.drqv2 import DrQV2, DrQV2Config
from rlcore.benchmarks.parity import drqv2_data as data
from rlcore.types import Batch

GOLDEN = json.loads((Path(__file__).parent / "golden" / "drqv2.json").read_text())
NETS = ("encoder", "actor", "critic")


def parity_agent() -> DrQV2:
    """rlcore's DrQ-v2 at the harness's sizes with its weights (learning_starts 0: the std
    schedule's step is acted_steps, set per update)."""
    init, final, duration = data.STD_SCHEDULE
    config = DrQV2Config(
        lr=data.LR, feature_dim=data.FEATURE_DIM, hidden=(data.HIDDEN, data.HIDDEN),
        tau=data.TAU, std_init=init, std_final=final, std_steps=duration,
        std_clip=data.STD_CLIP, learning_starts=0, fused_optimizer=True,
    )  # fmt: skip
    agent = DrQV2(
        gym.spaces.Box(0, 255, data.OBS_SHAPE, np.uint8),
        gym.spaces.Box(-1.0, 1.0, (data.ACTION_DIM,), np.float32),
        config,
    )
    weights = data.weights()
    for net in NETS:
        state = {k: torch.as_tensor(v) for k, v in data.to_rlcore(weights, net).items()}
        getattr(agent, net).load_state_dict(state)
    agent.critic_target.load_state_dict(agent.critic.state_dict())
    return agent


def as_batch(batch: dict[str, np.ndarray]) -> Batch:
    """The reference's batch as rlcore's: its discount (0 at terminal rows) as gamma^3
    and a termination flag."""
    discount = torch.as_tensor(batch["discount"][:, 0])
    return Batch(
        obs=torch.as_tensor(batch["obs"]), action=torch.as_tensor(batch["action"]),
        reward=torch.as_tensor(batch["reward"][:, 0]), next_obs=torch.as_tensor(batch["next_obs"]),
        terminated=(discount == 0).float(), truncated=torch.zeros_like(discount),
        discount=torch.full_like(discount, data.GAMMA_N),
    )  # fmt: skip


def run_updates(agent: DrQV2) -> list[dict[str, float]]:
    metrics = []
    for batch, step, seed in zip(data.batches(), data.UPDATE_STEPS, data.UPDATE_SEEDS):
        agent.acted_steps = step
        torch.manual_seed(seed)
        metrics.append(agent.update(as_batch(batch)))
    return metrics


def weights_digest(agent: DrQV2) -> dict[str, list[float]]:
    state = {}
    for net in (*NETS, "critic_target"):
        ours = {k: v.numpy() for k, v in getattr(agent, net).state_dict().items()}
        state |= data.to_reference(ours, net)
    return data.digest(state)


def test_updates_match_the_reference() -> None:
    """Four updates (std 1.0 -> 0.1 along the schedule, 2 of 8 rows terminal): losses,
    Q-values, targets and every weight after them as drqv2's DrQV2Agent computes them."""
    agent = parity_agent()
    for ours, theirs in zip(run_updates(agent), GOLDEN["updates"], strict=True):
        q_value = (theirs["critic_q1"] + theirs["critic_q2"]) / 2
        np.testing.assert_allclose(ours["critic_loss"], theirs["critic_loss"], rtol=1e-5)
        np.testing.assert_allclose(ours["actor_loss"], theirs["actor_loss"], rtol=1e-5)
        np.testing.assert_allclose(ours["target_q"], theirs["critic_target_q"], rtol=1e-5)
        np.testing.assert_allclose(ours["q_value"], q_value, rtol=1e-5)
    ours = weights_digest(agent)
    assert set(ours) == set(GOLDEN["weights"])
    for name, change in GOLDEN["weights"].items():  # each weight's change, or its projections
        scale = np.abs(change).max()
        assert scale > 0, f"{name} did not move in the reference"
        error = np.abs(np.asarray(ours[name]) - change).max() / scale
        # measured: median 3.8e-6, worst 1.4e-3 (a conv bias: Adam's step divides gradients
        # summed over every pixel, with cancellation, by their own size; a target weight
        # near 1 whose change of 4e-5 is a few float32 steps)
        assert error < 5e-3, f"{name}: off by {error:.2e} of its largest change"


def test_acting_matches_the_reference() -> None:
    """Greedy actions (the mean) and sampled ones (std at ACT_STEP, unclipped noise) after
    the updates, one observation at a time as the reference acts."""
    agent = parity_agent()
    run_updates(agent)
    agent.acted_steps = data.ACT_STEP
    observations = data.act_observations()
    greedy = [agent.act(o, deterministic=True) for o in observations]
    np.testing.assert_allclose(greedy, GOLDEN["greedy"], rtol=1e-5, atol=1e-6)
    agent.acted_steps = data.ACT_STEP
    torch.manual_seed(data.ACT_SEED)
    sampled = []
    for o in observations:
        sampled.append(agent.act(o))
        agent.acted_steps -= 1  # the reference acts at one step; act() counts its steps
    np.testing.assert_allclose(sampled, GOLDEN["sampled"], rtol=1e-5, atol=1e-6)


def test_state_and_pixels_shifts_only_the_image() -> None:
    """A dict observation: the image part is shifted (pad 2, a drawn offset), the state
    part passes through; the encoder's features are the image's then the state."""
    space = gym.spaces.Dict({
        "pixels": gym.spaces.Box(0, 255, (3, 16, 16), np.uint8),
        "state": gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
    })  # fmt: skip
    agent = DrQV2(space, gym.spaces.Box(-2.0, 2.0, (2,), np.float32),
                  DrQV2Config(hidden=(8,), feature_dim=4, shift_pad=2))  # fmt: skip
    image = torch.arange(16.0).repeat(16, 1).expand(1, 3, 16, 16).to(torch.uint8)
    obs = {"pixels": image, "state": torch.arange(4.0)[None]}
    torch.manual_seed(0)
    shifted = agent.augment(obs)
    assert torch.equal(shifted["state"], obs["state"])
    torch.manual_seed(0)
    dx = int(torch.randint(0, 5, (1, 2))[0, 0]) - 2
    assert shifted["pixels"][0, 0, 0].tolist() == [min(max(c + dx, 0), 15) for c in range(16)]
    assert agent.encoder(obs).shape == (1, agent.encoder.images["pixels"].out_dim + 4)
    action = agent.act({k: v[0].numpy() for k, v in obs.items()}, deterministic=True)
    assert action.shape == (2,) and np.all(np.abs(action) <= 2.0)


def test_refuses_a_task_without_images() -> None:
    box = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    with pytest.raises(ValueError, match="env.obs=pixels"):
        DrQV2(gym.spaces.Box(-np.inf, np.inf, (5,), np.float32), box)


def test_a_rendered_run_from_the_command_line_evaluates_and_exports(tmp_path) -> None:
    """``algo=drqv2 env=InvertedPendulum env.obs=pixels``: a short run, its policy
    evaluated on the rendered task, exported with uint8 input giving the agent's actions."""
    from rlcore.evaluate import main as evaluate
    from rlcore.export import export_policy, policy_from_checkpoint
    from rlcore.policies import load_agent
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    train(make_config("algo=drqv2", "env=InvertedPendulum", *FAST, "env.obs=pixels",
                      "env.image_size=32", "total_steps=120", "algo.learning_starts=40",
                      "algo.batch_size=8", "algo.hidden=[16]", "algo.feature_dim=8",
                      "eval_every=120", "eval_episodes=1", "eval_envs=1",
                      "env.max_episode_steps=20"), tmp_path / "run")  # fmt: skip
    assert evaluate([str(tmp_path / "run"), "episodes=1"]) == 0
    policy, info = policy_from_checkpoint(tmp_path / "run")
    out = tmp_path / "policy.pt"
    export_policy(policy, out, "torchscript", info["obs_shape"], info=info)
    obs = np.random.default_rng(1).integers(0, 256, (4, *info["obs_shape"]), dtype=np.uint8)
    expected = load_agent(tmp_path / "run").act(obs, deterministic=True)
    got = torch.jit.load(str(out))(torch.as_tensor(obs)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def small_image_agent() -> tuple[DrQV2, Batch]:
    """A DrQ-v2 agent on 2-frame 16 x 16 RGB images with an uneven box, and a batch."""
    torch.manual_seed(0)
    space = gym.spaces.Box(0, 255, (6, 16, 16), np.uint8)
    box = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
    agent = DrQV2(space, box, DrQV2Config(hidden=(16,), feature_dim=8, shift_pad=2))
    g = torch.Generator().manual_seed(1)
    n = 12
    batch = Batch(
        obs=torch.randint(0, 256, (n, 6, 16, 16), generator=g, dtype=torch.uint8),
        action=torch.rand(n, 2, generator=g) * torch.tensor([4.0, 1.0]) - torch.tensor([2.0, 0.0]),
        reward=torch.randn(n, generator=g),
        next_obs=torch.randint(0, 256, (n, 6, 16, 16), generator=g, dtype=torch.uint8),
        terminated=(torch.rand(n, generator=g) < 0.2).float(), truncated=torch.zeros(n),
        discount=torch.full((n,), 0.99**3),
    )  # fmt: skip
    return agent, batch


def test_contract_act_update_state_dict_and_non_finite_losses() -> None:
    """The contract of tests/test_algos_contract.py on images: actions inside the box
    (sampled and greedy, the greedy one repeatable), every network but the target moving
    on an update and the target by Polyak, a state_dict that round-trips exactly, and a NaN
    reward refused before any weight changes."""
    from rlcore.utils import NonFiniteLossError

    agent, batch = small_image_agent()
    obs = batch.obs.numpy()[:5]
    for deterministic in (False, True):
        action = agent.act(obs, deterministic=deterministic)
        assert action.shape == (5, 2)
        assert np.all(action >= [-2.0, 0.0]) and np.all(action <= [2.0, 1.0])
    np.testing.assert_array_equal(agent.act(obs, True), agent.act(obs, True))
    assert agent.acted_steps == 5  # only exploring counts
    nets = {net: [p.clone() for p in getattr(agent, net).parameters()]
            for net in ("encoder", "actor", "critic", "critic_target")}  # fmt: skip
    metrics = agent.update(batch)
    assert all(np.isfinite(v) for v in metrics.values()) and agent.updates == 1
    for net, old in nets.items():
        new = list(getattr(agent, net).parameters())
        assert all(not torch.equal(a, b) for a, b in zip(old, new)), f"{net} did not move"
    state = agent.state_dict()
    twin, _ = small_image_agent()
    twin.load_state_dict(state)
    torch.manual_seed(9)
    first = agent.update(batch)
    torch.manual_seed(9)
    assert twin.update(batch) == first
    bad = Batch(**{**batch.__dict__, "reward": batch.reward.clone().fill_(float("nan"))})
    critic = {k: v.clone() for k, v in agent.critic.state_dict().items()}
    with pytest.raises(NonFiniteLossError, match="critic_loss"):
        agent.update(bad)
    assert all(torch.equal(critic[k], v) for k, v in agent.critic.state_dict().items())
