"""SAC and RLPD on images (``algo.encoder``): one encoder for actor and critics, trained by
the critic loss only, random shifts of the update batches, dict observations, the
command line, and the refusals."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.algos.rlpd import RLPD, RLPDConfig
from rlcore.algos.sac import SAC, SACConfig
from rlcore.types import Batch

IMAGE = gym.spaces.Box(0, 255, (6, 16, 16), np.uint8)
DICT = gym.spaces.Dict(
    {"pixels": IMAGE, "state": gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)}
)
BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


def batch(n: int, keyed: bool, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)

    def observation() -> torch.Tensor | dict[str, torch.Tensor]:
        image = torch.randint(0, 256, (n, 6, 16, 16), generator=g, dtype=torch.uint8)
        return {"pixels": image, "state": torch.randn(n, 3, generator=g)} if keyed else image

    return Batch(
        obs=observation(), action=torch.rand(n, 2, generator=g) * 2 - 1,
        reward=torch.randn(n, generator=g), next_obs=observation(),
        terminated=torch.zeros(n), truncated=torch.zeros(n),
    )  # fmt: skip


def test_the_critic_trains_the_shared_encoder_and_the_actor_reads_it() -> None:
    """An update moves the encoder (the critic's optimiser holds it); the actor acts on its
    features: changing the encoder changes the greedy action."""
    torch.manual_seed(0)
    agent = SAC(IMAGE, BOX, SACConfig(encoder="drq", hidden=(16,), shift_pad=2,
                                      policy_frequency=1))  # fmt: skip
    params = {id(p) for group in agent.critic_optimizer.param_groups for p in group["params"]}
    assert all(id(p) in params for p in agent.encoder.parameters())
    actor = {id(p) for group in agent.actor_optimizer.param_groups for p in group["params"]}
    assert not any(id(p) in actor for p in agent.encoder.parameters())
    before = [p.clone() for p in agent.encoder.parameters()]
    metrics = agent.update(batch(8, keyed=False))
    assert np.isfinite(metrics["critic_loss"]) and np.isfinite(metrics["actor_loss"])
    assert all(not torch.equal(a, b) for a, b in zip(before, agent.encoder.parameters()))
    obs = batch(4, keyed=False).obs.numpy()
    greedy = agent.act(obs, deterministic=True)
    with torch.no_grad():
        for p in agent.encoder.parameters():
            p.mul_(3.0)
    assert not np.allclose(agent.act(obs, deterministic=True), greedy)
    assert "encoder" in agent.state_dict()


def test_rlpd_on_state_and_pixels_at_utd_two() -> None:
    """RLPD's ensemble and UTD on dict observations: two minibatches split part by part,
    the state part concatenated to the image features; a saved agent continues exactly."""
    torch.manual_seed(1)
    config = RLPDConfig(encoder="drq", hidden=(16,), num_critics=4, utd_ratio=2, shift_pad=1)
    agent = RLPD(DICT, BOX, config)
    assert agent.encoder.out_dim == agent.encoder.images["pixels"].out_dim + 3
    twin = RLPD(DICT, BOX, config)
    twin.load_state_dict(agent.state_dict())
    torch.manual_seed(5)
    first = agent.update(batch(8, keyed=True))
    torch.manual_seed(5)
    assert twin.update(batch(8, keyed=True)) == first
    single = {"pixels": batch(1, True).obs["pixels"][0].numpy(), "state": np.zeros(3, np.float32)}
    assert agent.act(single).shape == (2,)


def test_refusals_name_the_fix() -> None:
    with pytest.raises(ValueError, match="algo.encoder"):
        SAC(IMAGE, BOX, SACConfig())  # images without an encoder
    with pytest.raises(ValueError, match="algo.compile=false"):
        SAC(IMAGE, BOX, SACConfig(encoder="drq", compile=True))
    with pytest.raises(ValueError, match="normalize_obs"):
        SAC(IMAGE, BOX, SACConfig(encoder="drq", normalize_obs=True))
    with pytest.raises(ValueError, match="shift_pad"):
        SACConfig(shift_pad=-1)
    assert SACConfig(encoder="drq", compile="auto").compile is False  # the command line's


def test_a_pixel_sac_run_from_the_command_line(tmp_path) -> None:
    """``algo=sac env=InvertedPendulum env.obs=state+pixels algo.encoder=drq``: a short
    run on the rendered task (frames stored once), evaluated from its checkpoint."""
    from rlcore.evaluate import main as evaluate
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    train(make_config("algo=sac", "env=InvertedPendulum", *FAST, "env.obs=state+pixels",
                      "env.image_size=32", "algo.encoder=drq", "algo.shift_pad=2",
                      "algo.compile=false", "total_steps=120", "algo.learning_starts=40",
                      "algo.batch_size=8", "algo.hidden=[16]", "eval_every=120",
                      "eval_episodes=1", "eval_envs=1", "env.max_episode_steps=20"),
          tmp_path / "run")  # fmt: skip
    assert evaluate([str(tmp_path / "run"), "episodes=1"]) == 0
