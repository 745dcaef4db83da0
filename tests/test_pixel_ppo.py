"""PPO on pixels: CleanRL's ppo_atari_envpool.py agent (one Nature CNN shared by actor and
critic, orthogonal init) from ``algo.encoder``, updates on uint8 rollouts that train the
shared encoder, refusals, and a command-line run on Breakout."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlcore.algos.ppo import PPO, PPOConfig
from rlcore.nets import NatureCNN
from rlcore.types import RolloutBatch

ATARI = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)


def singular_values(weight: torch.Tensor) -> torch.Tensor:
    return torch.linalg.svdvals(weight.detach().reshape(weight.shape[0], -1))


def test_the_agent_is_cleanrls_atari_agent() -> None:
    """Nature CNN (32/64/64 convolutions, 512 units) shared by a Linear(512, n) actor and a
    Linear(512, 1) critic; every weight orthogonal (CleanRL's layer_init: gain sqrt(2),
    the actor 0.01, the critic 1), biases 0."""
    torch.manual_seed(0)
    config = PPOConfig(encoder="nature", hidden=(), normalize_obs=False)
    agent = PPO(ATARI, gym.spaces.Discrete(4), config)
    cnn = agent.encoder.images["obs"]
    assert isinstance(cnn, NatureCNN) and cnn.out_dim == 512
    (actor_layer,) = [m for m in agent.actor.modules() if isinstance(m, nn.Linear)]
    (critic_layer,) = [m for m in agent.critic.modules() if isinstance(m, nn.Linear)]
    assert (actor_layer.in_features, actor_layer.out_features) == (512, 4)
    assert (critic_layer.in_features, critic_layer.out_features) == (512, 1)
    layers = [m for m in cnn.modules() if isinstance(m, nn.Conv2d | nn.Linear)]
    for layer in layers:
        torch.testing.assert_close(singular_values(layer.weight).max(), torch.tensor(2**0.5))
        assert not layer.bias.any()
    torch.testing.assert_close(singular_values(actor_layer.weight).max(), torch.tensor(0.01))
    torch.testing.assert_close(singular_values(critic_layer.weight).max(), torch.tensor(1.0))
    # the optimiser holds each parameter once (the encoder is shared, not duplicated)
    assert len(agent.parameters) == len({id(p) for p in agent.parameters}) == 12
    state = agent.state_dict()
    assert "encoder" in state and "actor" in state and "critic" in state


def test_an_update_on_uint8_rollouts_trains_the_shared_encoder() -> None:
    torch.manual_seed(1)
    space = gym.spaces.Box(0, 255, (2, 36, 36), np.uint8)
    agent = PPO(space, gym.spaces.Discrete(3),
                PPOConfig(encoder="drq", hidden=(), normalize_obs=False, num_minibatches=2,
                          update_epochs=1))  # fmt: skip
    obs = torch.randint(0, 256, (16, 2, 36, 36), dtype=torch.uint8)
    action, log_prob, value = agent.explore(obs)
    assert action.shape == (16,) and value.shape == (16,)
    torch.testing.assert_close(agent.value(obs), value)
    batch = RolloutBatch(obs=obs, action=action, log_prob=log_prob, value=value,
                         advantage=torch.randn(16), returns=torch.randn(16))  # fmt: skip
    before = [p.detach().clone() for p in agent.encoder.parameters()]
    metrics = agent.update(batch)
    assert np.isfinite(metrics["policy_loss"]) and np.isfinite(metrics["value_loss"])
    assert all(not torch.equal(a, b) for a, b in zip(before, agent.encoder.parameters()))
    assert np.shape(agent.act(obs[0].numpy(), deterministic=True)) == ()


def test_images_are_never_standardised() -> None:
    with pytest.raises(ValueError, match="set algo.normalize_obs=false"):  # an image alone
        PPO(ATARI, gym.spaces.Discrete(4), PPOConfig(encoder="nature"))
    with pytest.raises(ValueError, match="set algo.encoder to one of"):
        PPO(ATARI, gym.spaces.Discrete(4), PPOConfig(normalize_obs=False))


def test_a_pixel_ppo_run_from_the_command_line(tmp_path) -> None:
    """algo=ppo env=ALE/Breakout-v5 (configs/algo_env/ppo_atari.yaml, one short rollout):
    it trains on uint8 rollouts of 8 envs and its policy loads for deployment."""
    pytest.importorskip("ale_py")
    import rlcore
    from rlcore.checkpoint import load_checkpoint
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    config = make_config(
        "algo=ppo", "env=ALE/Breakout-v5", *FAST, "algo.rollout_steps=16", "total_steps=128",
        "eval_every=128", "eval_episodes=1", "eval_envs=1", "env.max_episode_steps=40",
    )  # fmt: skip
    assert config.algo.encoder == "nature" and config.env.num_envs == 8
    assert not config.algo.normalize_obs and config.algo.clip_coef == 0.1
    train(config, tmp_path / "run")
    state = load_checkpoint(tmp_path / "run")
    assert state["loop"]["counters"]["step"] == 128
    assert "encoder" in state["agent"]
    action = rlcore.load_policy(tmp_path / "run")(np.zeros((4, 84, 84), np.uint8))
    assert 0 <= int(action) < 4


def test_ppo_beside_proprioception_standardises_the_vectors_only(tmp_path) -> None:
    """PPO on PandaReach's state + camera (a dict with an image part) with its default
    env-side standardisation: the statistics cover the vector parts (the goals share
    achieved_goal's), the image passes as uint8; the value of a dict rollout bootstraps
    (it raised before); the exported graph standardises as load_policy does."""
    from rlcore.checkpoint import load_checkpoint
    from rlcore.export import export_policy, policy_from_checkpoint
    from rlcore.policies import load_policy
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    config = make_config(
        "algo=ppo", "env=PandaReach", "env.obs=state+pixels", "env.image_size=16",
        "algo.encoder=drq", "env.num_envs=2", "algo.rollout_steps=16", "algo.num_minibatches=2",
        "algo.hidden=[16]", "total_steps=64", "eval_every=64", "eval_episodes=1", *FAST,
    )  # fmt: skip
    assert config.algo.normalize_obs
    train(config, tmp_path / "run")
    state = load_checkpoint(tmp_path / "run")
    assert set(state["obs_normalizer"]["parts"]) == {"observation", "achieved_goal"}
    assert state["loop"]["counters"]["step"] == 64
    rng = np.random.default_rng(0)
    obs = {"observation": rng.normal(size=(3, 6)).astype(np.float32),
           "achieved_goal": rng.normal(size=(3, 3)).astype(np.float32),
           "desired_goal": rng.normal(size=(3, 3)).astype(np.float32),
           "pixels": rng.integers(0, 256, (3, 3, 16, 16)).astype(np.uint8)}  # fmt: skip
    expected = load_policy(tmp_path / "run")(obs)
    policy, info = policy_from_checkpoint(tmp_path / "run")
    export_policy(policy, tmp_path / "policy.ts", "torchscript", info["obs_shape"], info=info)
    graph = torch.jit.load(str(tmp_path / "policy.ts"))
    got = graph(*(torch.as_tensor(obs[name]) for name in policy.input_names)).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-6)
    from rlcore.policies import load_agent

    raw = load_agent(tmp_path / "run").act(obs, deterministic=True)  # the statistics matter
    assert np.abs(np.asarray(raw) - expected).max() > 1e-3
