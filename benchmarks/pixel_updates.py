"""DrQ-v2 updates per second: rlcore's ``algos/drqv2.py`` next to facebookresearch/drqv2's own
``DrQV2Agent`` (imported by path, unchanged) on the same device, sizes and batches, the
two alternating round by round.

    python -m rlcore.benchmarks.pixel_updates --drqv2 <drqv2@c0c650b> [--device cpu|cuda]
        [--image-size 84] [--batch 256] [--hidden 1024] [--updates 10] [--rounds 3]

Defaults are the reference's (84 x 84 x 9 stacks, batch 256, 1,024-unit layers, features
50, lr 1e-4). Each side updates on a batch already in memory on the device (uint8
stacks, 3-step rewards and discounts): the rate is the update's, not the replay's (the
reference's loader runs in worker processes). One torch thread on a CPU (``--threads``).
The reference needs hydra-core and omegaconf importable (rlcore's environment has both).
Writes results/pixel_updates_<device>.json with lscpu's model and flags (and the GPU's
name on CUDA).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlcore.algos.drqv2 import DrQV2, DrQV2Config
from rlcore.benchmarks.runs import cpu_info, write_result
from rlcore.types import Batch

RESULTS = Path(__file__).resolve().parent / "results"
ACTION_DIM = 6  # a DMC walker's actions


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(update: Any, updates: int, device: torch.device) -> float:
    """Updates/s of ``update()`` over ``updates`` calls, after one warm-up call."""
    update()
    _sync(device)
    start = time.perf_counter()
    for _ in range(updates):
        update()
    _sync(device)
    return updates / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drqv2", type=Path, required=True, help="unpacked drqv2@c0c650b")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--image-size", type=int, default=84)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(args.drqv2.resolve()))
    import drqv2  # noqa: PLC0415 (the fetched reference, by path)

    size, n = args.image_size, args.batch
    if size != 84:  # the reference hard-codes its encoder's output for 84 x 84
        raise SystemExit("--image-size: the reference's Encoder.repr_dim assumes 84")
    shape = (9, size, size)
    reference = drqv2.DrQV2Agent(
        obs_shape=shape, action_shape=(ACTION_DIM,), device=str(device), lr=1e-4,
        feature_dim=50, hidden_dim=args.hidden, critic_target_tau=0.01, num_expl_steps=0,
        update_every_steps=1, stddev_schedule="linear(1.0,0.1,500000)", stddev_clip=0.3,
        use_tb=False,
    )  # fmt: skip
    ours = DrQV2(
        gym.spaces.Box(0, 255, shape, np.uint8),
        gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32),
        DrQV2Config(hidden=(args.hidden, args.hidden)),
        device=device,
    )
    g = torch.Generator().manual_seed(0)
    obs = torch.randint(0, 256, (n, *shape), generator=g, dtype=torch.uint8).to(device)
    next_obs = torch.randint(0, 256, (n, *shape), generator=g, dtype=torch.uint8).to(device)
    action = (torch.rand(n, ACTION_DIM, generator=g) * 2 - 1).to(device)
    reward = torch.rand(n, 1, generator=g).to(device)
    discount = torch.full((n, 1), 0.99**3, device=device)
    batch = Batch(obs=obs, action=action, reward=reward[:, 0], next_obs=next_obs,
                  terminated=torch.zeros(n, device=device), truncated=torch.zeros(n, device=device),
                  discount=discount[:, 0])  # fmt: skip
    fields = (obs, action, reward, discount, next_obs)

    def reference_update() -> None:  # its loader yields these tensors; to_torch keeps them
        reference.update(iter([fields]), 0)

    rates: dict[str, list[float]] = {"drqv2 (reference)": [], "rlcore": []}
    for _ in range(args.rounds):
        rates["drqv2 (reference)"].append(timed(reference_update, args.updates, device))
        rates["rlcore"].append(timed(lambda: ours.update(batch), args.updates, device))
        print({k: round(v[-1], 3) for k, v in rates.items()}, flush=True)
    base, mine = median(rates["drqv2 (reference)"]), median(rates["rlcore"])
    print("\n| implementation | updates/s | vs reference |\n|---|---|---|")
    print(
        f"| drqv2 DrQV2Agent | {base:.2f} | 1.00 |\n| rlcore DrQV2 | {mine:.2f} | {mine / base:.2f} |"
    )
    result = {"rates": rates, "reference": base, "rlcore": mine, "ratio": mine / base,
              "device": str(device), "cpu": cpu_info(), "torch": torch.__version__}  # fmt: skip
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(device)
    args.out = args.out or RESULTS / f"pixel_updates_{device.type}.json"
    write_result(args, result)
    return result


if __name__ == "__main__":
    main()
