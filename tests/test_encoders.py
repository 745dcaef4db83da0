"""Image encoders and DrQ's random shift (rlcore.nets): hand-computed shifts, the encoders
against the references' own networks (tests/golden/encoders.json, written by
benchmarks/parity/encoders_reference.py from CleanRL's and DrQ-v2's code on the same
weights and images), and their use as an ObsEncoder's image encoder."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from rlcore.benchmarks.parity.encoders_data import (
    ENCODER_INPUTS,
    SHIFT_INPUT,
    SHIFT_PAD,
    encoder_with_weights,
    images,
    shifts,
)
from rlcore.nets import (
    DrQEncoder,
    ImpalaCNN,
    NatureCNN,
    ObsEncoder,
    image_encoder,
    random_shift,
)
from rlcore.observations import IMAGE, ObsPart, ObsSpec

GOLDEN = json.loads((Path(__file__).parent / "golden" / "encoders.json").read_text())
SEEDS = {"nature": (1, 11), "impala": (2, 12), "drq": (3, 13)}  # (weights, images)


def encoder_with_golden_weights(name: str) -> nn.Module:
    return encoder_with_weights(name, SEEDS[name][0])[0]


def features(name: str) -> np.ndarray:
    encoder = encoder_with_golden_weights(name)
    pixels = torch.as_tensor(images(ENCODER_INPUTS[name][0], SEEDS[name][1]))
    with torch.no_grad():
        return encoder(pixels).numpy()


def test_random_shift_by_hand():
    """Pad 1 repeats the border; (dx, dy) = (0, 2) takes columns -1, 0, 1 and rows 1, 2,
    3 of the image, each clamped into it; (1, 1) is the identity."""
    image = torch.arange(9, dtype=torch.uint8).reshape(1, 1, 3, 3)  # rows 0 1 2 / 3 4 5 / 6 7 8
    shifted = random_shift(image, pad=1, shifts=torch.tensor([[0, 2]]))
    assert shifted.dtype == torch.uint8
    assert shifted[0, 0].tolist() == [[3, 3, 4], [6, 6, 7], [6, 6, 7]]
    assert torch.equal(random_shift(image, pad=1, shifts=torch.tensor([[1, 1]])), image)
    # non-square, two images, two channels moved alike
    wide = torch.arange(2 * 2 * 2 * 4, dtype=torch.float32).reshape(2, 2, 2, 4)
    out = random_shift(wide, pad=2, shifts=torch.tensor([[4, 0], [0, 4]]))
    assert out[0, 1].tolist() == [[10.0, 11.0, 11.0, 11.0], [10.0, 11.0, 11.0, 11.0]]
    assert out[1, 0].tolist() == [[20.0, 20.0, 20.0, 21.0], [20.0, 20.0, 20.0, 21.0]]


def test_random_shift_draws_every_offset_in_range():
    """Drawn shifts cover 0..2 pad in x and y alike (81 pairs at pad 4), from torch's RNG."""
    torch.manual_seed(0)
    image = torch.arange(81, dtype=torch.float32).reshape(1, 1, 9, 9).expand(2000, 1, 9, 9)
    out = random_shift(image, pad=4)
    # the centre pixel's new value names the offset: 9 * (4 + dy - 4) + (4 + dx - 4) clamped
    centre = out[:, 0, 4, 4].long()
    assert set(centre.tolist()) == set(range(81))
    torch.manual_seed(0)
    assert torch.equal(random_shift(image, pad=4), out)  # reproducible under the seed


def test_random_shift_matches_drqv2():
    """DrQ-v2's RandomShiftsAug (grid_sample at whole-pixel offsets) on the same images and
    shifts: equal up to its bilinear weights' float rounding."""
    pixels = torch.as_tensor(images(SHIFT_INPUT, 14)).float()
    ours = random_shift(pixels, SHIFT_PAD, torch.as_tensor(shifts()))
    np.testing.assert_allclose(ours.numpy(), np.asarray(GOLDEN["shift"]), atol=1e-3, rtol=0)


@pytest.mark.parametrize("name", ["nature", "impala", "drq"])
def test_encoders_match_the_references(name: str):
    """CleanRL's Nature-DQN torso (dqn_atari.py) and IMPALA ResNet (ppo_procgen.py) and
    DrQ-v2's encoder on the same weights and uint8 images."""
    np.testing.assert_allclose(features(name), np.asarray(GOLDEN[name]), rtol=1e-5, atol=1e-5)


def _no_scaling(encoder: nn.Module) -> Callable:
    return lambda pixels: encoder.head(encoder.convs(pixels.float()))


@pytest.mark.parametrize(
    ("name", "mutate"),
    [
        ("nature", _no_scaling),
        ("impala", _no_scaling),
        ("drq", lambda encoder: lambda pixels: encoder.convs(pixels.float() / 255.0)),
    ],
    ids=["nature_unscaled", "impala_unscaled", "drq_not_centred"],
)
def test_encoder_parity_catches_a_changed_input_scaling(name: str, mutate: Callable):
    encoder = encoder_with_golden_weights(name)
    pixels = torch.as_tensor(images(ENCODER_INPUTS[name][0], SEEDS[name][1]))
    with torch.no_grad():
        changed = mutate(encoder)(pixels).numpy()
    assert not np.allclose(changed, np.asarray(GOLDEN[name]), rtol=1e-5, atol=1e-5)


def test_atari_sizes():
    """At 84x84: Nature 3,136 conv features into 512 (CleanRL's 64 * 7 * 7); DrQ 32 x 35 x 35
    (drqv2's repr_dim); IMPALA 32 x 11 x 11 (84 -> 42 -> 21 -> 11) into 256."""
    assert NatureCNN((4, 84, 84)).conv_dim == 3136
    assert DrQEncoder((9, 84, 84)).out_dim == 32 * 35 * 35
    assert ImpalaCNN((4, 84, 84)).conv_dim == 32 * 11 * 11 and ImpalaCNN((4, 84, 84)).out_dim == 256


def test_image_encoder_in_an_obs_encoder():
    """A dict observation with proprioception and a stacked camera: the vector part as it
    is, the image through the named encoder, one feature vector."""
    spec = ObsSpec(
        (ObsPart("observation", (5,)), ObsPart("pixels", (6, 36, 36), IMAGE, frame_stack=2)),
        keyed=True,
    )
    encoder = ObsEncoder(spec, image_encoder=image_encoder("nature"))
    assert encoder.out_dim == 5 + 512
    obs = {"observation": torch.ones(3, 5), "pixels": torch.zeros(3, 6, 36, 36, dtype=torch.uint8)}
    out = encoder(obs)
    assert out.shape == (3, 517) and torch.equal(out[:, :5], torch.ones(3, 5))
    with pytest.raises(ValueError, match="unknown image encoder 'resnet', choose from"):
        image_encoder("resnet")
