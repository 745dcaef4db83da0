"""Sections ``mjx`` and ``mjx_ppo`` (opt-in, JAX + mujoco-mjx, for a GPU): MJX env
throughput next to the native back end; PPO on MJX to a target return."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlcore.benchmarks.throughput.common import fmt, markdown_table, write_json
from rlcore.benchmarks.throughput.env import env_rate


def _mjx_device(requested: str | None) -> str:
    import torch

    if requested:
        return requested
    return "cuda" if torch.cuda.is_available() else "cpu"


def mjx_rate(env: Any, actions: Any, steps: int) -> float:
    """Env steps/s of an MJX env over ``steps`` steps of pre-drawn device actions (the
    last observation is synchronised before the clock stops)."""
    import torch

    obs = None
    start = time.perf_counter()
    for i in range(steps):
        obs, *_ = env.step(actions[i % len(actions)])
    if obs is not None and obs.is_cuda:
        torch.cuda.synchronize(obs.device)
    return steps * env.num_envs / (time.perf_counter() - start)


def open_mjx(
    env_id: str, num_envs: int, device: str, seed: int, **env_kwargs: Any
) -> tuple[Any, Any, float]:
    """An MJX env, 8 batches of uniform random actions on its device (drawn on the CPU
    from ``seed``, so the native back end can replay them) and the seconds its reset and
    first step took (compilation, or loading it from JAX's cache)."""
    import torch

    from rlcore.envs.mjx import MjxVectorEnv

    generator = torch.Generator(device="cpu").manual_seed(seed)
    env = MjxVectorEnv(env_id, num_envs, device=device, **env_kwargs)
    space = env.single_action_space
    low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
    draws = torch.rand((8, num_envs, low.numel()), generator=generator)
    actions = (low + (high - low) * draws).to(device)
    start = time.perf_counter()
    env.reset(seed=seed)
    env.step(actions[0])[0].cpu()
    return env, actions, time.perf_counter() - start


def section_mjx(args: argparse.Namespace) -> dict[str, Any]:
    """Env steps/s of ``backend="mjx"`` (on ``--mjx-device``: cuda when torch sees a GPU)
    vs the native back end on ``--mjx-native-threads`` C threads (the 2-core machine's
    back end), at ``--mjx-num-envs`` envs; the first MJX step's compile time beside it."""
    import torch

    from rlcore.envs.native import NativeVectorEnv

    device = _mjx_device(args.mjx_device)
    notes: list[str] = [
        f"mjx on {device}"
        + (
            f" ({torch.cuda.get_device_name(device)})"
            if device.startswith("cuda")
            else " (JAX's CPU device: slow, for coverage)"
        ),
        f"native on {args.mjx_native_threads} C threads; steps/s count every env",
        f"MJX implementation: {args.mjx_impl}",
        f"jax {importlib.metadata.version('jax')}, jaxlib {importlib.metadata.version('jaxlib')}, "
        f"mujoco-mjx {importlib.metadata.version('mujoco-mjx')}",
    ]
    rows = []
    for name in args.mjx_envs:
        env_id = f"{name}-v5"
        for num_envs in args.mjx_num_envs:
            steps = max(args.mjx_min_steps, min(args.mjx_max_steps, args.mjx_env_steps // num_envs))
            row: dict[str, Any] = {"env": env_id, "num_envs": num_envs, "steps": steps,
                                   "impl": args.mjx_impl}  # fmt: skip
            mjx_env, actions, row["mjx_compile_s"] = open_mjx(
                env_id, num_envs, device, args.seed, impl=args.mjx_impl
            )
            native = NativeVectorEnv(env_id, num_envs, num_threads=args.mjx_native_threads)
            native.reset(seed=args.seed)
            native_actions = actions.cpu().numpy()
            native_steps = max(3, min(steps, args.mjx_native_env_steps // num_envs))
            samples: dict[str, list[float]] = {"mjx": [], "native": []}
            for _ in range(args.rounds):
                samples["mjx"].append(mjx_rate(mjx_env, actions, steps))
                samples["native"].append(
                    env_rate(native, native_actions[np.arange(native_steps) % 8])
                )
            native.close()
            mjx_env.close()
            del mjx_env
            row["samples"] = samples
            row["mjx"] = statistics.median(samples["mjx"])
            row["native"] = statistics.median(samples["native"])
            row["ratio"] = row["mjx"] / row["native"]
            rows.append(row)
            # a run cut short by a time limit keeps the rows measured so far
            write_json(args.out.with_suffix(".partial.json"), {"device": device, "rows": rows})
            print(
                f"{env_id} {num_envs:>6} envs: mjx {row['mjx']:>12,.0f} steps/s, native "
                f"{row['native']:>10,.0f}, ratio {row['ratio']:.2f} (compile {row['mjx_compile_s']:.0f} s)",
                flush=True,
            )
    table = markdown_table(
        ["env", "envs", "mjx steps/s", f"native ({args.mjx_native_threads} threads)", "mjx / native", "first step (compile) s"],
        [[r["env"], str(r["num_envs"]), fmt(r["mjx"]), fmt(r["native"]), fmt(r["ratio"], True),
          f"{r['mjx_compile_s']:.1f}"] for r in rows],
    )  # fmt: skip
    return {"title": f"MJX env steps/s on {device} vs native", "table": table, "rows": rows,
            "device": device, "notes": notes}  # fmt: skip


def train_to_target(
    overrides: list[str],
    backend: str,
    device: str,
    seconds: float,
    target: float,
    native_threads: int = 2,
) -> dict[str, Any]:
    """One ``python -m rlcore.train`` run (``overrides`` plus the back end, device, target
    and a fresh run_dir) until an evaluation reaches ``target`` or ``seconds`` pass: the
    process's wall time, the evaluation curve and the logged seconds per iteration. A
    ``native`` run gets ``native_threads`` threads on as many cores (``taskset``)."""
    import torch

    from rlcore.logging import read_csv

    run_dir = Path(tempfile.mkdtemp(prefix=f"train_{backend}_"))
    overrides = [*overrides, f"env.backend={backend}", f"device={device}",
                 f"stop_at_return={target}", f"run_dir={run_dir}", "logger.tensorboard=false"]  # fmt: skip
    command = [sys.executable, "-m", "rlcore.train", *overrides]
    cpus = os.cpu_count()
    if backend == "native":  # the envs' and torch's threads on native_threads cores
        command.append(f"threads={native_threads}")
        if shutil.which("taskset") and (os.cpu_count() or 1) > native_threads:
            command = ["taskset", "-c", f"0-{native_threads - 1}", *command]
            cpus = native_threads
    print(" ".join(command), flush=True)
    start = time.perf_counter()
    try:
        result = subprocess.run(command, timeout=seconds, check=False)
        stopped = "finished" if result.returncode == 0 else f"exit code {result.returncode}"
    except subprocess.TimeoutExpired:
        stopped = f"stopped at the {seconds:.0f} s limit"
    wall = time.perf_counter() - start
    evals = read_csv(run_dir / "eval.csv") if (run_dir / "eval.csv").exists() else []
    times = read_csv(run_dir / "time.csv") if (run_dir / "time.csv").exists() else []
    reached = next((r for r in evals if r["eval/return"] >= target), None)
    cuda = device.startswith("cuda")
    return {"backend": backend, "device": device,
            "gpu": torch.cuda.get_device_name(device) if cuda else None,
            "overrides": overrides, "target": target, "cpus": cpus,
            "reached_at_step": None if reached is None else int(reached["step"]),
            "process_wall_s": wall, "stopped": stopped, "run_dir": str(run_dir),
            "best_return": max((r["eval/return"] for r in evals), default=None),
            "curve": [{"step": int(r["step"]), "return": r["eval/return"]} for r in evals],
            "iteration_s": [r["time/iteration_s"] for r in times if "time/iteration_s" in r],
            "last_sps": next((r["time/sps"] for r in reversed(times) if "time/sps" in r), None)}  # fmt: skip


def _ppo_to_target(
    args: argparse.Namespace, backend: str, device: str, minutes: float
) -> dict[str, Any]:
    """One ``+experiment=ppo_hopper_mjx`` run on ``backend`` until an evaluation reaches
    ``--mjx-ppo-target`` or ``minutes`` pass (``train_to_target``)."""
    overrides = ["+experiment=ppo_hopper_mjx", f"seed={args.seed}",
                 f"env.num_envs={args.mjx_ppo_envs}"]  # fmt: skip
    if backend == "mjx":
        overrides.append(f"env.mjx_impl={args.mjx_impl}")
    if args.mjx_ppo_eval_every:
        overrides.append(f"eval_every={args.mjx_ppo_eval_every}")
    row = train_to_target(overrides, backend, device, minutes * 60, args.mjx_ppo_target,
                          args.mjx_native_threads)  # fmt: skip
    return {**row, "num_envs": args.mjx_ppo_envs}


def section_mjx_ppo(args: argparse.Namespace) -> dict[str, Any]:
    """PPO on Hopper with ``+experiment=ppo_hopper_mjx`` (``--mjx-ppo-envs`` MJX envs on
    ``--mjx-device``) to ``--mjx-ppo-target``: wall time (the whole process: start-up,
    compilation and evaluations included; the run stops at the first evaluation that
    reaches it) and evaluation curve. The baseline (``--mjx-ppo-baseline``, on by
    default) is the same experiment on the native back end (``--mjx-native-threads``
    threads for the envs and torch, device cpu), run after it on the same machine."""
    device = _mjx_device(args.mjx_device)
    rows = [_ppo_to_target(args, "mjx", device, args.mjx_ppo_minutes)]
    if args.mjx_ppo_baseline:
        minutes = args.mjx_ppo_baseline_minutes or args.mjx_ppo_minutes
        rows.append(_ppo_to_target(args, "native", "cpu", minutes))
    mjx_row = rows[0]
    for row in rows:
        both = row["reached_at_step"] is not None and mjx_row["reached_at_step"] is not None
        row["wall_vs_mjx"] = row["process_wall_s"] / mjx_row["process_wall_s"] if both else None
    table = markdown_table(
        ["back end", "device", "envs", "target", "reached at env step", "best eval return",
         "process wall s", "wall / mjx's"],
        [[r["backend"], r["device"], str(r["num_envs"]), f"{r['target']:,.0f}",
          "-" if r["reached_at_step"] is None else f"{r['reached_at_step']:,}",
          fmt(r["best_return"]), f"{r['process_wall_s']:.0f}", fmt(r["wall_vs_mjx"], True)]
         for r in rows],
    )  # fmt: skip
    notes = [f"{r['backend']}: run {r['stopped']}" for r in rows]
    notes.append("evaluation curves in the JSON (10 episodes on the sync back end)")
    return {"title": "PPO Hopper on MJX: wall time to the target return", "table": table,
            "rows": rows, "notes": notes}  # fmt: skip
