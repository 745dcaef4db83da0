"""Sections ``sac_run`` and ``ppo_run``: whole training runs on Hopper, rlcore vs SB3
(same hyper-parameters), env steps/s."""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlcore.benchmarks.throughput.common import (
    add_note,
    alternate,
    fmt,
    has_sb3,
    markdown_table,
    median_of,
    ratio,
    skip_mode,
)


def _rlcore_run(overrides: list[str]) -> tuple[float, Path, tempfile.TemporaryDirectory]:
    """Compose rlcore's config with ``overrides`` and train in a temporary run dir;
    returns (wall seconds including config, env and agent setup, run dir, its holder).

    torch.compile's in-process caches are cleared first, so every run starts like a fresh
    process (a user's run): compiled graphs kept from earlier rounds slowed later rounds'
    compiled steps by 5-15% here. Compilation then reads torch's on-disk cache, as a
    user's second run on a machine does."""
    import torch
    from hydra import compose, initialize_config_module

    from rlcore.overrides import normalize_overrides
    from rlcore.train import train

    torch._dynamo.reset()

    holder = tempfile.TemporaryDirectory(prefix="rlcore_bench_")
    run_dir = Path(holder.name)
    start = time.perf_counter()
    with initialize_config_module(config_module="rlcore.configs", version_base="1.3"):
        cfg = compose("config", overrides=normalize_overrides(list(overrides)))
    train(cfg, run_dir)
    return time.perf_counter() - start, run_dir, holder


def _loop_seconds(run_dir: Path, step: int) -> float | None:
    """Seconds from the loop's start to ``step``, from ``time/sps`` in time.csv."""
    from rlcore.logging import read_csv

    for row in read_csv(run_dir / "time.csv"):
        if int(row["step"]) == step and row.get("time/sps"):
            return step / row["time/sps"]
    return None


def _run_modes(overrides: list[str]) -> list[str]:
    """The speed modes a run's overrides ask for ("bf16", "compile")."""
    modes = {"algo.precision=bf16": "bf16", "algo.compile=true": "compile"}
    return [modes[o] for o in overrides if o in modes]


def _run_table(
    rlcore: dict[str, Callable[[], dict[str, float]] | None],
    sb3: Callable[[], dict[str, float]],
    rounds: int,
    parts: dict[str, str],
    labels: dict[str, str],
) -> tuple[dict[str, Any], dict[str, dict[str, float | None]], str]:
    """Alternate rlcore variants and SB3; ratios ``<variant>/sb3`` per part; the table."""
    result = alternate({**rlcore, "sb3": sb3 if has_sb3() else None}, rounds)
    ratios = {
        f"{name}/sb3": {
            part: ratio(median_of(result[name], part), median_of(result["sb3"], part))
            for part in parts
        }
        for name in rlcore
    }
    table = markdown_table(
        ["part", *labels.values(), "SB3", *(f"{labels[n]} / SB3" for n in rlcore)],
        [
            [
                label,
                *(fmt(median_of(result[name], part)) for name in rlcore),
                fmt(median_of(result["sb3"], part)),
                *(fmt(ratios[f"{name}/sb3"][part], True) for name in rlcore),
            ]
            for part, label in parts.items()
        ],
    )
    return result, ratios, table


_QUIET_RUN = [
    "logger=quiet",
    "eval_episodes=1",  # the loop always evaluates at its end: keep that to one episode
    "eval_envs=1",
    "keep_agent_snapshots=false",
]


def section_sac_run(args: argparse.Namespace) -> dict[str, Any]:
    """SAC on Hopper, UTD 1, whole-run env-steps/s: rlcore (rlcore.train) vs SB3 learn."""
    notes: list[str] = []
    total, starts = args.sac_steps, args.sac_learning_starts
    log_every = math.gcd(total, starts) if starts else total

    from rlcore.benchmarks.sac_hopper_vs_sb3 import make_sb3_sac, rlcore_sac_overrides

    overrides = [
        *rlcore_sac_overrides(total, starts, total, args.seed),
        *_QUIET_RUN,
        f"eval_every={10 * total}",
        f"checkpoint_every={10 * total}",
        f"log_every={log_every}",
    ]

    def rlcore_measure(extra: list[str]) -> Callable[[], dict[str, float]]:
        def measure() -> dict[str, float]:
            wall, run_dir, holder = _rlcore_run([*overrides, *extra])
            t_total, t_start = _loop_seconds(run_dir, total), _loop_seconds(run_dir, starts)
            holder.cleanup()
            post = (
                (total - starts) / (t_total - t_start)
                if t_total is not None and t_start is not None and total > starts
                else float("nan")
            )
            return {"whole": total / wall, "post_warmup": post}

        return measure

    def sb3_measure() -> dict[str, float]:
        import gymnasium as gym
        from stable_baselines3.common.callbacks import BaseCallback

        class WarmupClock(BaseCallback):
            t_start = float("nan")

            def _on_step(self) -> bool:
                if self.num_timesteps == starts:
                    self.t_start = time.perf_counter()
                return True

        start = time.perf_counter()
        model = make_sb3_sac(gym.make("Hopper-v5"), total, starts, args.seed)
        clock = WarmupClock()
        model.learn(total_timesteps=total, callback=clock)
        end = time.perf_counter()
        post = (total - starts) / (end - clock.t_start) if total > starts else float("nan")
        return {"whole": total / (end - start), "post_warmup": post}

    if not has_sb3():
        add_note(notes, "stable-baselines3 is not installed: SB3 column skipped")
    variants = {  # compile named explicitly: the default "auto" depends on the run length
        "rlcore": ["algo.compile=false"],
        "rlcore_compile": ["algo.compile=true"],
        "rlcore_bf16_compile": ["algo.precision=bf16", "algo.compile=true"],
    }
    result, ratios, table = _run_table(
        {
            name: None if skip_mode(_run_modes(extra), notes) else rlcore_measure(extra)
            for name, extra in variants.items()
        },
        sb3_measure,
        args.rounds,
        {"whole": "whole run", "post_warmup": "after warm-up"},
        {
            "rlcore": "rlcore fp32",
            "rlcore_compile": "rlcore fp32 compile",
            "rlcore_bf16_compile": "rlcore bf16 compile",
        },
    )
    return {
        "title": f"SAC Hopper-v5 training env-steps/s ({total:,} steps, {starts:,} random "
        "warm-up, UTD 1; rlcore on its default native env back end, SB3 on gym.make; "
        "bf16 = algo.precision=bf16, compile = algo.compile=true, compilation counted in the "
        "whole run)",
        "unit": "env steps/s",
        "steps_per_s": result,
        "ratios": ratios,
        "notes": notes,
        "table": table,
    }


# SB3 PPO defaults (stable_baselines3.PPO): lr 3e-4 constant, n_steps 2048 per env,
# batch 64, 10 epochs, gamma 0.99, GAE 0.95, clip 0.2, no value clipping, advantages
# normalised, ent 0, vf 0.5, grad norm 0.5, 64x64 tanh actor and critic, log-std 0,
# Adam eps 1e-5, no observation / reward normalisation.
def rlcore_ppo_overrides(total: int, rollout: int, num_envs: int, seed: int) -> list[str]:
    """rlcore PPO on Hopper configured to SB3's PPO defaults (comment above)."""
    return [
        "algo=ppo",
        "env=hopper",
        f"env.num_envs={num_envs}",
        f"seed={seed}",
        f"total_steps={total}",
        f"algo.rollout_steps={rollout}",
        f"algo.num_minibatches={max(1, rollout * num_envs // 64)}",
        "algo.update_epochs=10",
        "algo.hidden=[64,64]",
        "algo.activation=tanh",
        "algo.lr=3e-4",
        "algo.anneal_lr=false",
        "algo.gamma=0.99",
        "algo.gae_lambda=0.95",
        "algo.clip_coef=0.2",
        "algo.clip_value_loss=false",
        "algo.ent_coef=0.0",
        "algo.vf_coef=0.5",
        "algo.max_grad_norm=0.5",
        "algo.norm_adv=true",
        "algo.init_log_std=0.0",
        "algo.normalize_obs=false",
        "algo.normalize_reward=false",
    ]


def section_ppo_run(args: argparse.Namespace) -> dict[str, Any]:
    """PPO on Hopper with 8 envs, whole-run env-steps/s: rlcore vs SB3 (SB3 defaults)."""
    notes: list[str] = []
    num_envs, rollout = 8, args.ppo_rollout
    per_rollout = num_envs * rollout
    total = max(1, args.ppo_steps // per_rollout) * per_rollout
    overrides = [
        *rlcore_ppo_overrides(total, rollout, num_envs, args.seed),
        *_QUIET_RUN,
        f"eval_every={10 * total}",
        f"checkpoint_every={10 * total}",
    ]

    def rlcore_measure(extra: list[str]) -> Callable[[], dict[str, float]]:
        def measure() -> dict[str, float]:
            wall, run_dir, holder = _rlcore_run([*overrides, *extra])
            loop, first = _loop_seconds(run_dir, total), _loop_seconds(run_dir, per_rollout)
            holder.cleanup()
            steady = (
                (total - per_rollout) / (loop - first)
                if loop is not None and first is not None and total > per_rollout
                else float("nan")
            )
            return {
                "whole": total / wall,
                "loop": total / loop if loop else float("nan"),
                "steady": steady,
            }

        return measure

    def sb3_measure() -> dict[str, float]:
        from stable_baselines3 import PPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env

        class RolloutClock(BaseCallback):
            def __init__(self) -> None:
                super().__init__()
                self.starts: list[float] = []

            def _on_rollout_start(self) -> None:
                self.starts.append(time.perf_counter())

            def _on_step(self) -> bool:
                return True

        start = time.perf_counter()
        env = sb3_make_vec_env("Hopper-v5", n_envs=num_envs, seed=args.seed)
        model = PPO("MlpPolicy", env, n_steps=rollout, batch_size=64, seed=args.seed, device="cpu")
        learn_start = time.perf_counter()
        clock = RolloutClock()
        model.learn(total_timesteps=total, callback=clock)
        end = time.perf_counter()
        env.close()
        steady = (
            (total - per_rollout) / (end - clock.starts[1])
            if len(clock.starts) > 1
            else float("nan")
        )
        return {
            "whole": total / (end - start),
            "loop": total / (end - learn_start),
            "steady": steady,
        }

    if not has_sb3():
        add_note(notes, "stable-baselines3 is not installed: SB3 column skipped")
    variants = {  # compile named explicitly: the default "auto" depends on the run length
        "rlcore": ["algo.compile=false"],
        "rlcore_fast": ["algo.fused_optimizer=true", "algo.compile=true"],
    }
    result, ratios, table = _run_table(
        {
            name: None if skip_mode(_run_modes(extra), notes) else rlcore_measure(extra)
            for name, extra in variants.items()
        },
        sb3_measure,
        args.rounds,
        {
            "whole": "whole run",
            "loop": "training loop only",
            "steady": "after the first update",
        },
        {"rlcore": "rlcore", "rlcore_fast": "rlcore fused+compile"},
    )
    return {
        "title": f"PPO Hopper-v5 training env-steps/s ({total:,} steps = "
        f"{total // per_rollout} rollouts of {num_envs} envs x {rollout}; batch 64, 10 epochs, "
        "64x64; rlcore on its default native env back end, SB3 on DummyVecEnv; fused+compile "
        "= algo.fused_optimizer=true algo.compile=true, compilation time included except in "
        "'after the first update' (rollouts 2.. with their updates, both sides))",
        "unit": "env steps/s",
        "steps_per_s": result,
        "ratios": ratios,
        "notes": notes,
        "table": table,
    }
