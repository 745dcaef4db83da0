"""Inputs of the image-encoder parity checks (``benchmarks/parity/encoders_reference.py``
against CleanRL's and DrQ-v2's networks; ``tests/test_encoders.py``): each encoder's
weights in rlcore's ``state_dict`` layout, the images it reads and DrQ's shifts, all drawn
from numpy's ``default_rng``, so the golden file holds only the references' outputs."""

from __future__ import annotations

import numpy as np

# encoder -> (its input: (batch, channels, height, width), the reference it is checked on)
ENCODER_INPUTS = {
    "nature": ((2, 4, 84, 84), "CleanRL dqn_atari.py QNetwork.network (all but the Q layer)"),
    "impala": ((2, 3, 64, 64), "CleanRL ppo_procgen.py Agent.network (Procgen's 64x64 RGB)"),
    "drq": ((2, 9, 20, 20), "drqv2 drqv2.py Encoder (3 stacked RGB frames, small images)"),
}
SHIFT_INPUT = (4, 3, 12, 12)  # images of DrQ's random shift (RandomShiftsAug, pad 4)
SHIFT_PAD = 4


def weights(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    """Uniform weights in +-1/sqrt(fan in) for every parameter named in ``shapes`` (an
    encoder's ``state_dict`` shapes): large enough that every layer matters."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
        bound = 1.0 / np.sqrt(fan_in)
        out[name] = rng.uniform(-bound, bound, shape).astype(np.float32)
    return out


def images(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """uint8 pixels, uniform over 0..255."""
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def shifts(seed: int = 7) -> np.ndarray:
    """(B, 2) offsets (dx, dy) in 0..2 pad for the shift check, corners included."""
    draws = np.random.default_rng(seed).integers(0, 2 * SHIFT_PAD + 1, (SHIFT_INPUT[0], 2))
    draws[0], draws[1] = (0, 2 * SHIFT_PAD), (2 * SHIFT_PAD, 0)
    return draws


def encoder_with_weights(name: str, seed: int) -> tuple[object, dict[str, np.ndarray]]:
    """rlcore's encoder ``name`` for its ``ENCODER_INPUTS`` shape with ``weights(seed)``
    loaded, and those arrays (the harness maps them into the reference's modules)."""
    import torch  # noqa: PLC0415 (the rest of this module is numpy only)

    from rlcore.nets import IMAGE_ENCODERS  # noqa: PLC0415

    encoder = IMAGE_ENCODERS[name](ENCODER_INPUTS[name][0][1:])
    state = weights({k: tuple(v.shape) for k, v in encoder.state_dict().items()}, seed)
    encoder.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()})
    return encoder, state
