"""The inputs of the DQN-Atari golden run, made from seeds on both sides (numpy only):
the harness (benchmarks/parity/cleanrl_reference.py, ``--algo dqn_atari``, in CleanRL's
side environment) and tests/test_parity_online.py build the same uint8 image batches and
the same initial weights from them, so the golden file holds seeds, not 84 x 84 images.

The network is CleanRL's dqn_atari.py ``QNetwork`` narrowed (``NARROW``): convolutions of
4, 4, 4 channels instead of 32, 64, 64 and 16 units instead of 512, the same layers,
strides and 84 x 84 input (7 x 7 x 4 = 196 features after the convolutions).
"""

from __future__ import annotations

import numpy as np

BATCH = 32
FRAMES = 4  # stacked grey 84 x 84 frames
NUM_ACTIONS = 4
CONV_WIDTHS = (4, 4, 4)  # CleanRL: 32, 64, 64
FEATURES = 16  # CleanRL: 512
CONV_OUT = CONV_WIDTHS[2] * 7 * 7
# CleanRL's widths -> ours: Conv2d output channels, Linear features
NARROW = {
    "conv": {32: CONV_WIDTHS[0], 64: CONV_WIDTHS[1]},
    "linear": {3136: CONV_OUT, 512: FEATURES},
}
# CleanRL's QNetwork.network layer -> (shape); indices as in its nn.Sequential
LAYERS = {
    "network.0.weight": (CONV_WIDTHS[0], FRAMES, 8, 8),
    "network.0.bias": (CONV_WIDTHS[0],),
    "network.2.weight": (CONV_WIDTHS[1], CONV_WIDTHS[0], 4, 4),
    "network.2.bias": (CONV_WIDTHS[1],),
    "network.4.weight": (CONV_WIDTHS[2], CONV_WIDTHS[1], 3, 3),
    "network.4.bias": (CONV_WIDTHS[2],),
    "network.7.weight": (FEATURES, CONV_OUT),
    "network.7.bias": (FEATURES,),
    "network.9.weight": (NUM_ACTIONS, FEATURES),
    "network.9.bias": (NUM_ACTIONS,),
}


def init_weights(seed: int) -> dict[str, np.ndarray]:
    """float32 weights of every layer, uniform in +-1/sqrt(fan in) (PyTorch's default
    range), drawn from ``default_rng(seed)`` in ``LAYERS`` order."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in LAYERS.items():
        weight = LAYERS[name.replace("bias", "weight")]
        fan_in = int(np.prod(weight[1:]))
        bound = 1.0 / np.sqrt(fan_in)
        out[name] = rng.uniform(-bound, bound, shape).astype(np.float32)
    return out


def atari_batches(seed: int, count: int) -> list[dict[str, np.ndarray]]:
    """``count`` batches of ``BATCH`` rows: uint8 (B, 4, 84, 84) observations with
    ``next_obs`` the stack shifted by one new frame (as an Atari buffer holds them),
    actions, rewards in {-1, 0, 1} (clipped), terminated and truncated rows (rows 0 and 1
    one of each)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        frames = rng.integers(0, 256, (BATCH, FRAMES + 1, 84, 84), dtype=np.uint8)
        terminated = rng.random(BATCH) < 0.25
        truncated = ~terminated & (rng.random(BATCH) < 0.25)
        terminated[0], truncated[0] = True, False
        terminated[1], truncated[1] = False, True
        out.append(
            {
                "obs": frames[:, :FRAMES].copy(),
                "action": rng.integers(0, NUM_ACTIONS, BATCH),
                "reward": rng.integers(-1, 2, BATCH).astype(np.float32),
                "next_obs": frames[:, 1:].copy(),
                "terminated": terminated.astype(np.float32),
                "truncated": truncated.astype(np.float32),
            }
        )
    return out


def unpack_uint8(packed: dict) -> np.ndarray:
    """A uint8 array the harness stored with ``packed_uint8`` (zlib, base64)."""
    import base64
    import zlib

    raw = zlib.decompress(base64.b64decode(packed["zlib_b64"]))
    return np.frombuffer(raw, np.uint8).reshape(packed["shape"]).copy()
