"""Inputs of the DrQ-v2 parity check (``benchmarks/parity/drqv2_reference.py`` runs
facebookresearch/drqv2's ``DrQV2Agent``; ``tests/test_drqv2.py`` runs rlcore's): the
agent's sizes, its weights in the reference's ``state_dict`` layout, the update batches,
the steps of the std schedule and the torch seeds of each update's draws, all from numpy's
``default_rng``; and the digest both sides make of the weights after the updates, so the
golden file stays small (the trunks alone hold 39,200 x 16 weights each). Numpy only: the
reference's side environment imports this file by path."""

from __future__ import annotations

import zlib

import numpy as np

OBS_SHAPE = (9, 84, 84)  # 3 stacked RGB frames at 84 x 84 (the reference's repr_dim needs 84)
ACTION_DIM = 2
FEATURE_DIM = 16
HIDDEN = 32
BATCH = 8
LR = 1e-3  # larger than the default 1e-4 so that four updates move every weight visibly
TAU = 0.01
STD_CLIP = 0.3
STD_SCHEDULE = (1.0, 0.1, 500_000)  # linear(init, final, duration): cfgs/task/medium.yaml
GAMMA_N = 0.99**3  # the n-step batches' discount (3-step returns at gamma 0.99)
# the global step of each update (the std schedule: ~1.0, 0.82, 0.46, 0.1) and its torch seed
UPDATE_STEPS = (2_000, 100_000, 300_000, 600_000)
UPDATE_SEEDS = (101, 102, 103, 104)
ACT_STEP, ACT_SEED = 250_000, 7  # one sampled act() (std 0.55) after the updates
WEIGHT_SEED, BATCH_SEED, ACT_OBS_SEED = 1, 2, 3
FULL_DIGEST = 1024  # tensors up to this size are kept whole; larger ones as projections
PROJECTIONS = 8


def reference_shapes() -> dict[str, tuple[int, ...]]:
    """Every parameter of the reference's encoder, actor and critic, by its name there."""
    c, f, h, a = OBS_SHAPE[0], FEATURE_DIM, HIDDEN, ACTION_DIM
    shapes: dict[str, tuple[int, ...]] = {}
    for i, cin in zip((0, 2, 4, 6), (c, 32, 32, 32)):
        shapes[f"encoder.convnet.{i}.weight"] = (32, cin, 3, 3)
        shapes[f"encoder.convnet.{i}.bias"] = (32,)
    for net in ("actor", "critic"):
        shapes |= {f"{net}.trunk.0.weight": (f, 32 * 35 * 35), f"{net}.trunk.0.bias": (f,),
                   f"{net}.trunk.1.weight": (f,), f"{net}.trunk.1.bias": (f,)}  # fmt: skip
    heads = {"actor.policy": f, "critic.Q1": f + a, "critic.Q2": f + a}
    for head, width in heads.items():
        out = a if head == "actor.policy" else 1
        for i, (cin, cout) in zip((0, 2, 4), ((width, h), (h, h), (h, out))):
            shapes[f"{head}.{i}.weight"] = (cout, cin)
            shapes[f"{head}.{i}.bias"] = (cout,)
    return shapes


def weights(seed: int = WEIGHT_SEED) -> dict[str, np.ndarray]:
    """Uniform weights in +-1/sqrt(fan in) (LayerNorm scales 1 + that), every one drawn."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in reference_shapes().items():
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
        bound = 1.0 / np.sqrt(fan_in)
        value = rng.uniform(-bound, bound, shape)
        if name.endswith("trunk.1.weight"):
            value = 1.0 + value
        out[name] = value.astype(np.float32)
    return out


def batches(seed: int = BATCH_SEED) -> list[dict[str, np.ndarray]]:
    """One batch per update, in the reference's layout: uint8 observations, actions in
    (-0.9, 0.9), rewards, discount gamma^3 (0 on the two terminal rows), next observations."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in UPDATE_STEPS:
        discount = np.full((BATCH, 1), GAMMA_N, np.float32)
        discount[rng.choice(BATCH, 2, replace=False)] = 0.0
        out.append({
            "obs": rng.integers(0, 256, (BATCH, *OBS_SHAPE), dtype=np.uint8),
            "action": rng.uniform(-0.9, 0.9, (BATCH, ACTION_DIM)).astype(np.float32),
            "reward": rng.uniform(-1.0, 1.0, (BATCH, 1)).astype(np.float32),
            "discount": discount,
            "next_obs": rng.integers(0, 256, (BATCH, *OBS_SHAPE), dtype=np.uint8),
        })  # fmt: skip
    return out


def act_observations(seed: int = ACT_OBS_SEED) -> np.ndarray:
    """Three single observations for ``act``: dark, mid-grey and bright images with noise
    (uniform noise alone gives every image nearly the same features)."""
    noise = np.random.default_rng(seed).integers(0, 56, (3, *OBS_SHAPE))
    return (noise + np.array([0, 100, 200])[:, None, None, None]).astype(np.uint8)


def digest(state: dict[str, np.ndarray]) -> dict[str, list[float]]:
    """What the updates did to each weight (reference layout): its change from ``initial``,
    whole, or, when larger than ``FULL_DIGEST``, as its sum, its absolute sum and
    ``PROJECTIONS`` projections on fixed Gaussian directions (seeded by the name), in
    float64: a change of any one weight moves the projections."""
    start = weights()
    out = {}
    for name in sorted(state):
        before = start[name.replace("critic_target.", "critic.")]
        change = (np.asarray(state[name], np.float64) - before).reshape(-1)
        if change.size <= FULL_DIGEST:
            out[name] = change.tolist()
            continue
        directions = np.random.default_rng(zlib.crc32(name.encode())).standard_normal(
            (PROJECTIONS, change.size)
        )
        out[name] = [float(change.sum()), float(np.abs(change).sum()), *(directions @ change)]
    return out


_ENSEMBLE_LAYERS = {"hidden_layers.0": "0", "hidden_layers.1": "2", "output_layer": "4"}


def to_rlcore(reference: dict[str, np.ndarray], net: str) -> dict[str, np.ndarray]:
    """The reference's ``encoder`` / ``actor`` / ``critic`` weights (``net``) in rlcore's
    layout: the encoder inside ``rlcore.nets.ObsEncoder`` (part ``obs``), the two critic
    heads Q1 / Q2 as the members of one ``QEnsemble`` (weights transposed, (E, in, out))."""
    mine = {k[len(net) + 1 :]: v for k, v in reference.items() if k.startswith(net + ".")}
    if net == "encoder":
        return {k.replace("convnet", "images.obs.convs"): v for k, v in mine.items()}
    if net == "actor":
        return mine
    out = {k: v for k, v in mine.items() if k.startswith("trunk.")}
    for ours, index in _ENSEMBLE_LAYERS.items():
        heads = (f"Q1.{index}", f"Q2.{index}")
        out[f"heads.net.{ours}.weight"] = np.stack([mine[f"{h}.weight"].T for h in heads])
        out[f"heads.net.{ours}.bias"] = np.stack([mine[f"{h}.bias"][None] for h in heads])
    return out


def to_reference(ours: dict[str, np.ndarray], net: str) -> dict[str, np.ndarray]:
    """rlcore's weights of ``net`` (``encoder`` / ``actor`` / ``critic`` / ``critic_target``)
    in the reference's layout and names (``to_rlcore``'s inverse), prefixed ``net.``."""
    if net == "encoder":
        return {f"encoder.{k.replace('images.obs.convs', 'convnet')}": v for k, v in ours.items()}
    if net == "actor":
        return {f"actor.{k}": v for k, v in ours.items()}
    out = {f"{net}.{k}": v for k, v in ours.items() if k.startswith("trunk.")}
    for mine, index in _ENSEMBLE_LAYERS.items():
        weight, bias = ours[f"heads.net.{mine}.weight"], ours[f"heads.net.{mine}.bias"]
        for member in range(weight.shape[0]):
            out[f"{net}.Q{member + 1}.{index}.weight"] = weight[member].T
            out[f"{net}.Q{member + 1}.{index}.bias"] = bias[member, 0]
    return out
