"""Diffusion / flow behaviour cloning from camera images (``algo.encoder``, DPPO's image
recipe): the encoder in front of the denoiser learns from the BC loss, its EMA copy acts,
and the policy tells images apart."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.algos.generative_bc import DiffusionBCConfig, FlowBCConfig, GenerativeBC
from rlcore.types import Batch

IMAGES = gym.spaces.Dict({
    "pixels": gym.spaces.Box(0, 255, (3, 16, 16), np.uint8),
    "state": gym.spaces.Box(-1, 1, (2,), np.float32),
})  # fmt: skip
ACTIONS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


def _agent(head: str, **overrides) -> GenerativeBC:
    config_class = DiffusionBCConfig if head == "ddpm" else FlowBCConfig
    config = config_class(
        encoder="drq", image_features=8, hidden=(32, 32, 32), horizon=2,
        denoising_steps=4 if head == "ddpm" else 2, total_steps=300, lr=3e-3, lr_min=3e-3,
        shift_pad=1, **{"ema_start_epoch": 10_000, "ema_every": 1, **overrides},
    )  # fmt: skip
    agent = GenerativeBC(IMAGES, ACTIONS, config)
    agent.epoch_steps = 1  # what prepare_dataset sets
    return agent


def _batch(n: int) -> Batch:
    """Bright images ask for the chunk +0.5, dark ones for -0.5; the state is noise."""
    bright = torch.arange(n) % 2 == 0
    pixels = torch.where(bright, 200, 30).to(torch.uint8).view(n, 1, 1, 1).expand(n, 3, 16, 16)
    sign = bright.float() * 2 - 1
    obs = {"pixels": pixels.contiguous(), "state": torch.rand(n, 2) * 2 - 1}
    return Batch(
        obs=obs, action=torch.zeros(n, 2), reward=torch.zeros(n), next_obs=obs,
        terminated=torch.zeros(n), truncated=torch.zeros(n),
        extras={"action_chunk": (0.5 * sign).view(n, 1, 1).expand(n, 2, 2)},
    )  # fmt: skip


@pytest.mark.parametrize("head", ["ddpm", "flow"])
def test_bc_from_images_tells_bright_from_dark(head: str) -> None:
    torch.manual_seed(0)
    agent = _agent(head)
    before = [p.clone() for p in agent.encoder.parameters()]
    for _ in range(300):
        agent.update(_batch(32))
    assert all(not torch.equal(a, b) for a, b in zip(before, agent.encoder.parameters()))
    # the EMA copies the weights before ema_start_epoch: encoder included
    for ours, averaged in zip(agent.encoder.parameters(), agent.ema_encoder.shadow.parameters()):
        assert torch.equal(ours, averaged)
    probe = _batch(2).obs  # one bright, one dark
    chunks = agent.act({k: v.numpy() for k, v in probe.items()}, deterministic=True)
    assert chunks.shape == (2, 2, 2)
    np.testing.assert_allclose(chunks[0], 0.5, atol=0.15)
    np.testing.assert_allclose(chunks[1], -0.5, atol=0.15)


def test_the_encoder_is_saved_and_averaged_with_the_head() -> None:
    torch.manual_seed(0)
    agent = _agent("ddpm", ema_start_epoch=0, ema_every=1, ema_decay=0.5)
    agent.update(_batch(8))
    encoder = dict(agent.encoder.named_parameters())
    state = agent.state_dict()
    assert {"encoder", "ema_encoder"} <= set(state)
    clone = _agent("ddpm")
    clone.load_state_dict(state)
    for name, value in clone.ema_encoder.shadow.named_parameters():
        assert torch.equal(value, dict(agent.ema_encoder.shadow.named_parameters())[name])
    # one average at decay 0.5: the EMA encoder sits halfway between its start and now
    torch.manual_seed(0)
    fresh = _agent("ddpm", ema_start_epoch=0, ema_every=1, ema_decay=0.5)
    for name, start in fresh.encoder.named_parameters():
        halfway = 0.5 * (start + encoder[name])
        torch.testing.assert_close(dict(agent.ema_encoder.shadow.named_parameters())[name], halfway)


def test_refusals_name_the_fix() -> None:
    with pytest.raises(ValueError, match="algo.encoder"):
        GenerativeBC(IMAGES, ACTIONS, DiffusionBCConfig(hidden=(8, 8, 8)))
    with pytest.raises(ValueError, match="obs_history"):
        GenerativeBC(IMAGES, ACTIONS, DiffusionBCConfig(encoder="drq", obs_history=2))
    assert not DiffusionBCConfig(encoder="drq").plan().data.normalize_states
    from rlcore.algos.dppo import DPPOConfig
    from rlcore.generative import policy_parts

    with pytest.raises(ValueError, match=r"observes images \(pixels\)"):
        policy_parts("ddpm", IMAGES, ACTIONS, DPPOConfig(), torch.device("cpu"))
