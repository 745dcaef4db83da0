"""Section ``sac_update``: SAC gradient updates/s, rlcore (fp32, bf16, compiled) vs SB3."""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from rlcore.benchmarks.throughput.common import (
    HOPPER_ACT,
    HOPPER_OBS,
    Measure,
    add_note,
    alternate,
    box_spaces,
    fmt,
    has_sb3,
    markdown_table,
    median_of,
    mode_names,
    ratio,
    skip_mode,
)


def filled_replay_buffer(
    capacity: int, obs_dim: int, act_dim: int, seed: int = 0, device: str = "cpu"
) -> Any:
    """An rlcore ReplayBuffer on ``device`` filled with ``capacity`` random transitions."""
    from rlcore.buffers import ReplayBuffer

    chunk = min(capacity, 10_000)
    buffer = ReplayBuffer(
        capacity, (obs_dim,), (act_dim,), num_envs=chunk, device=device, seed=seed
    )
    rng = np.random.default_rng(seed)
    for _ in range(capacity // chunk):
        buffer.add(
            rng.standard_normal((chunk, obs_dim), np.float32),
            rng.uniform(-1, 1, (chunk, act_dim)).astype(np.float32),
            rng.standard_normal(chunk, np.float32),
            rng.standard_normal((chunk, obs_dim), np.float32),
            rng.random(chunk) < 0.01,
            rng.random(chunk) < 0.001,
        )
    return buffer


def _rlcore_sac_measure(
    precision: str | None, updates: int, buffer: Any, compile: bool = False
) -> Measure:
    import torch

    from rlcore.algos.sac import SAC, SACConfig

    kwargs: dict[str, Any] = dict(
        actor_lr=3e-4,
        critic_lr=3e-4,
        alpha_lr=3e-4,
        policy_frequency=1,
        hidden=(256, 256),
        batch_size=256,
    )
    if precision is not None:
        kwargs["precision"] = precision
    kwargs["compile"] = compile
    torch.manual_seed(0)
    agent = SAC(*box_spaces(HOPPER_OBS, HOPPER_ACT), SACConfig(**kwargs))

    def run(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            agent.update(buffer.sample(256))
        return n / (time.perf_counter() - start)

    run(max(5, updates // 10))  # warm-up (and compilation)
    return lambda: run(updates)


SAC_UPDATE_VARIANTS = {  # name: (precision, compile, label)
    "rlcore_fp32": (None, False, "rlcore fp32"),
    "rlcore_bf16": ("bf16", False, "rlcore bf16"),
    "rlcore_fp32_compile": (None, True, "rlcore fp32 compile"),
    "rlcore_bf16_compile": ("bf16", True, "rlcore bf16 compile"),
}


def _sb3_sac_measure(updates: int, capacity: int, seed: int) -> Measure:
    import gymnasium as gym
    from stable_baselines3.common.logger import Logger

    from rlcore.benchmarks.sac_hopper_vs_sb3 import make_sb3_sac

    model = make_sb3_sac(gym.make("Hopper-v5"), capacity, 0, seed)
    model.set_logger(Logger(folder=None, output_formats=[]))
    rb = model.replay_buffer
    rng = np.random.default_rng(seed)
    rb.observations[:] = rng.standard_normal(rb.observations.shape)
    rb.next_observations[:] = rng.standard_normal(rb.next_observations.shape)
    rb.actions[:] = rng.uniform(-1, 1, rb.actions.shape)
    rb.rewards[:] = rng.standard_normal(rb.rewards.shape)
    rb.dones[:] = rng.random(rb.dones.shape) < 0.01
    rb.timeouts[:] = rng.random(rb.timeouts.shape) < 0.001
    rb.full, rb.pos = True, 0

    def run(n: int) -> float:
        start = time.perf_counter()
        model.train(gradient_steps=n, batch_size=256)
        return n / (time.perf_counter() - start)

    run(max(5, updates // 10))  # warm-up
    return lambda: run(updates)


def section_sac_update(args: argparse.Namespace) -> dict[str, Any]:
    """SAC updates/s at Hopper shapes: rlcore fp32 and bf16 vs SB3."""

    notes: list[str] = []
    buffer = filled_replay_buffer(args.buffer_size, HOPPER_OBS, HOPPER_ACT, args.seed)
    measures: dict[str, Measure | None] = {
        name: None
        if skip_mode(mode_names(precision == "bf16", compile), notes)
        else _rlcore_sac_measure(precision, args.updates, buffer, compile)
        for name, (precision, compile, _) in SAC_UPDATE_VARIANTS.items()
    }
    if has_sb3():
        measures["sb3"] = _sb3_sac_measure(args.updates, args.buffer_size, args.seed)
    else:
        measures["sb3"] = None
        add_note(notes, "stable-baselines3 is not installed: SB3 column skipped")
    result = alternate(measures, args.rounds)
    med = {k: median_of(v) for k, v in result.items()}
    ratios = {f"{name}/sb3": ratio(med[name], med["sb3"]) for name in SAC_UPDATE_VARIANTS}
    labels = [label for _, _, label in SAC_UPDATE_VARIANTS.values()]
    table = markdown_table(
        ["shape", *labels, "SB3", *(f"{label} / SB3" for label in labels)],
        [
            [
                "Hopper obs 11 act 3, batch 256, 256x256",
                *(fmt(med[k]) for k in (*SAC_UPDATE_VARIANTS, "sb3")),
                *(fmt(v, True) for v in ratios.values()),
            ]
        ],
    )
    return {
        "title": f"SAC gradient updates/s ({args.updates} per measurement; actor + critic + "
        f"temperature every update, lr 3e-4; batches sampled from a {args.buffer_size:,}-"
        "transition random buffer on both sides; compile = algo.compile=true, compiled "
        "during the warm-up)",
        "unit": "updates/s",
        "updates_per_s": result,
        "ratios": ratios,
        "notes": notes,
        "table": table,
    }
