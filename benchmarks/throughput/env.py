"""Section ``env``: vector env steps/s of the native back end vs gymnasium's Sync and
Async, envpool and the raw MuJoCo ceiling."""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from rlcore.benchmarks.throughput.common import (
    Measure,
    add_note,
    alternate,
    fmt,
    markdown_table,
    median_of,
    ratio,
)

ENV_CONTENDERS = ("native", "sync", "async", "envpool", "ceiling")
ENV_LABELS = {
    "native": "rlcore native",
    "sync": "gym Sync",
    "async": "gym Async",
    "envpool": "envpool",
    "ceiling": "MuJoCo ceiling",
}


def env_rate(env: Any, actions: np.ndarray) -> float:
    """Env steps/s (all envs counted) over a pre-drawn action sequence (resets included)."""
    start = time.perf_counter()
    for action in actions:
        env.step(action)
    return actions.shape[0] * actions.shape[1] / (time.perf_counter() - start)


def envpool_env(env_id: str, num_envs: int, seed: int, threads: int) -> tuple[Any, str]:
    """An envpool gymnasium env for ``env_id`` (its own v5 task if it has one, else v4)
    with ``min(threads, num_envs)`` C threads; returns (env, task id used).
    Raises ImportError when envpool is not installed."""
    import envpool

    available = set(envpool.list_all_envs())
    task = env_id if env_id in available else env_id.replace("-v5", "-v4")
    if task not in available:
        raise ValueError(f"envpool has no {env_id} (nor {task})")
    env = envpool.make_gymnasium(
        task, num_envs=num_envs, seed=seed, num_threads=max(1, min(threads, num_envs))
    )
    return env, task


class Ceiling:
    """Raw MuJoCo: ``num_envs`` simulations of gymnasium's model for ``env_id`` stepped by
    ``mujoco.batch.Batch`` (``frame_skip`` substeps, ``threads`` C threads), ctrl written
    from the pre-drawn actions, no task code (no observations, rewards or resets)."""

    def __init__(self, env_id: str, num_envs: int, threads: int) -> None:
        import gymnasium as gym
        from mujoco.batch import Batch

        base = gym.make(env_id).unwrapped
        self.frame_skip = int(base.frame_skip)
        self.batch = Batch(base.model, nsim=num_envs, nthread=threads)
        self.ctrl = self.batch.bind("ctrl")
        self.num_envs = num_envs
        base.close()

    def reset(self, seed: int | None = None) -> None:
        self.batch.reset()

    def step(self, action: np.ndarray) -> None:
        self.ctrl[:] = action
        self.batch.step(nstep=self.frame_skip)

    def close(self) -> None:
        self.batch = None


def section_env(args: argparse.Namespace) -> dict[str, Any]:
    """Env steps/s per (task, num_envs): native, Sync, Async, envpool, MuJoCo ceiling."""
    from rlcore.envs.make import make_vec_env, resolve_env_id

    notes: list[str] = []
    rows = []
    skipped: set[tuple[str, str]] = set()
    try:
        import envpool  # noqa: F401

        has_envpool = True
    except ImportError:
        has_envpool = False
        add_note(notes, "envpool is not installed (pip install envpool): envpool column skipped")
    for name in args.envs:
        env_id = resolve_env_id(name)
        for num_envs in args.num_envs:
            steps = max(10, args.env_steps // num_envs)
            envs: dict[str, Any] = {}
            labels: dict[str, str] = {}
            for backend in ("native", "sync", "async"):
                try:
                    envs[backend] = make_vec_env(
                        env_id, num_envs, seed=args.seed, backend=backend, num_threads=args.threads
                    )
                except ValueError as error:  # e.g. a task the native back end lacks
                    if (env_id, backend) not in skipped:
                        skipped.add((env_id, backend))
                        add_note(notes, f"{env_id} {backend} skipped: {error}")
            if has_envpool:
                try:
                    envs["envpool"], labels["envpool"] = envpool_env(
                        env_id, num_envs, args.seed, args.threads
                    )
                except Exception as error:  # envpool version without this task, ...
                    if (env_id, "envpool") not in skipped:
                        skipped.add((env_id, "envpool"))
                        add_note(notes, f"{env_id} envpool skipped: {error}")
            envs["ceiling"] = Ceiling(env_id, num_envs, args.threads)
            space = envs["sync"].single_action_space
            rng = np.random.default_rng(args.seed)
            actions = rng.uniform(space.low, space.high, (steps, num_envs, *space.shape))
            actions = actions.astype(np.float32)
            measures: dict[str, Measure | None] = {}
            for key in ENV_CONTENDERS:
                env = envs.get(key)
                if env is None:
                    measures[key] = None
                    continue
                if key == "envpool":
                    env.reset()  # envpool is seeded at construction
                else:
                    env.reset(seed=args.seed)
                env_rate(env, actions[: max(1, steps // 10)])  # warm-up
                measures[key] = lambda env=env, actions=actions: env_rate(env, actions)
            try:
                result = alternate(measures, args.rounds)
            finally:  # async workers and thread pools go, whatever happened
                for env in envs.values():
                    env.close()
            med = {k: median_of(result[k]) for k in ENV_CONTENDERS}
            row = {
                "env": env_id,
                "num_envs": num_envs,
                "vector_steps": steps,
                "envpool_task": labels.get("envpool"),
                "steps_per_s": result,
                "ratios": {f"native/{k}": ratio(med["native"], med[k]) for k in ENV_CONTENDERS[1:]},
            }
            rows.append(row)
            print(
                f"  {env_id} x{num_envs}: "
                + ", ".join(f"{k} {fmt(v)}" for k, v in med.items() if v is not None),
                flush=True,
            )
    envpool_tasks = sorted({r["envpool_task"] for r in rows if r["envpool_task"]})
    headers = [
        "env",
        "envs",
        *(ENV_LABELS[k] for k in ENV_CONTENDERS[:3]),
        "envpool" + (f" ({', '.join(envpool_tasks)})" if envpool_tasks else ""),
        ENV_LABELS["ceiling"],
        *(f"native/{ENV_LABELS[k]}" for k in ENV_CONTENDERS[1:]),
    ]
    table = [
        [
            r["env"],
            str(r["num_envs"]),
            *(fmt(median_of(r["steps_per_s"][k])) for k in ENV_CONTENDERS),
            *(fmt(r["ratios"][f"native/{k}"], True) for k in ENV_CONTENDERS[1:]),
        ]
        for r in rows
    ]
    return {
        "title": "env steps/s (all envs counted; median of rounds; random actions, resets "
        f"included; native and ceiling on {args.threads} C threads)",
        "unit": "env steps/s",
        "rows": rows,
        "notes": notes,
        "table": markdown_table(headers, table),
    }
