"""Env steps/s of a manipulation task: rlcore's PandaPickAndPlace next to gymnasium-robotics'
FetchPickAndPlace and robosuite's Lift, same number of envs, one process, random actions.

    python -m rlcore.benchmarks.robots [--envs 1 16] [--steps 1500]
        [--side-python /path/to/venv/bin/python] [--mjx-device cuda]
        [--out benchmarks/results/robots_speed.json]

Rows (each timed after 20 warm-up vector steps, ``--steps`` env steps in all):

* rlcore ``PandaPickAndPlace-v1`` on the native back end (one ``mujoco.batch`` on 1 thread,
  and on every core), and on gymnasium's sync vector env (one core); with ``--mjx-device``
  also on the MJX back end on that device (envs/robots/mjx.py; the first warm-up step
  compiles it);
* gymnasium-robotics ``FetchPickAndPlace-v4`` on this MuJoCo (4.x, through rlcore's
  adapter, envs/third_party.py) in a sync vector env, when gymnasium-robotics is installed;
* with ``--side-python``, a Python whose environment holds MuJoCo 3.x, gymnasium-robotics
  and robosuite (robosuite 1.5 fails on MuJoCo 4: the same joint-type assertion):
  ``FetchPickAndPlace-v4`` in a sync vector env and robosuite ``Lift`` (Panda, its default
  OSC controller, no rendering, no camera) stepped env by env: robosuite has no vector env.

Control rates differ: PandaPickAndPlace and Fetch act at 25 Hz (20 physics steps of 2 ms),
robosuite at 20 Hz (25 of 2 ms), so the JSON also gives physics steps/s. The ratio that
the robot-task issue sets (>= 5x robosuite per core) is the one-thread native row over
robosuite's. lscpu's model and flags are recorded with the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlcore.benchmarks.runs import cpu_info

WARMUP = 20

# runs in the side Python (MuJoCo 3.x): prints one JSON line per row
SIDE_SCRIPT = r"""
import json, sys, time
import numpy as np
envs, steps, warmup = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
out = {"mujoco": __import__("mujoco").__version__}
try:
    import gymnasium as gym, gymnasium_robotics
    gym.register_envs(gymnasium_robotics)
    env = gym.vector.SyncVectorEnv([lambda: gym.make("FetchPickAndPlace-v4")] * envs)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    low, high = env.single_action_space.low, env.single_action_space.high
    for _ in range(warmup):
        env.step(rng.uniform(low, high, (envs, len(low))).astype(np.float32))
    n = max(1, steps // envs)
    t = time.perf_counter()
    for _ in range(n):
        env.step(rng.uniform(low, high, (envs, len(low))).astype(np.float32))
    out["fetch"] = n * envs / (time.perf_counter() - t)
except Exception as error:
    out["fetch_error"] = repr(error)[:300]
try:
    import robosuite as suite
    made = [suite.make("Lift", robots="Panda", has_renderer=False, has_offscreen_renderer=False,
                       use_camera_obs=False, control_freq=20, horizon=10**6) for _ in range(envs)]
    for env in made:
        env.reset()
    rng = np.random.default_rng(0)
    low, high = made[0].action_spec
    for _ in range(warmup):
        for env in made:
            env.step(rng.uniform(low, high))
    n = max(1, steps // envs)
    t = time.perf_counter()
    for _ in range(n):
        for env in made:
            env.step(rng.uniform(low, high))
    out["robosuite"] = n * envs / (time.perf_counter() - t)
    out["robosuite_version"] = suite.__version__
except Exception as error:
    out["robosuite_error"] = repr(error)[:300]
print(json.dumps(out))
"""


def _timed_vector(env: Any, steps: int, seed: int = 0) -> float:
    """Env steps/s of a vector env under uniform random actions."""
    rng = np.random.default_rng(seed)
    space = env.single_action_space
    shape = (env.num_envs, *space.shape)
    env.reset(seed=seed)
    for _ in range(WARMUP):
        env.step(rng.uniform(space.low, space.high, shape).astype(np.float32))
    n = max(1, steps // env.num_envs)
    start = time.perf_counter()
    for _ in range(n):
        env.step(rng.uniform(space.low, space.high, shape).astype(np.float32))
    return n * env.num_envs / (time.perf_counter() - start)


def measure_here(num_envs: int, steps: int, mjx_device: str | None = None) -> dict[str, float]:
    """The rows this environment can run: rlcore's task (on MJX too, given a device) and,
    if installed, Fetch."""
    from rlcore.envs import third_party
    from rlcore.envs.make import make_vec_env, resolve_env_id
    from rlcore.envs.robots.native import RobotVectorEnv

    rows = {
        "rlcore native, 1 thread": _timed_vector(
            RobotVectorEnv("PandaPickAndPlace", num_envs, num_threads=1), steps
        ),
        f"rlcore native, {os.cpu_count()} threads": _timed_vector(
            RobotVectorEnv("PandaPickAndPlace", num_envs), steps
        ),
        "rlcore sync (gymnasium SyncVectorEnv)": _timed_vector(
            make_vec_env("PandaPickAndPlace-v1", num_envs, backend="sync"), steps
        ),
    }
    if mjx_device is not None:
        from rlcore.envs.robots.mjx import RobotMjxVectorEnv

        env = RobotMjxVectorEnv("PandaPickAndPlace", num_envs, device=mjx_device)
        rows[f"rlcore mjx ({mjx_device})"] = _timed_vector(env, steps)
    if third_party.available():
        fetch = make_vec_env(resolve_env_id("FetchPickAndPlace-v4"), num_envs, backend="sync")
        rows["gymnasium-robotics Fetch, MuJoCo 4 (adapter), sync"] = _timed_vector(fetch, steps)
    return rows


def measure_side(python: str, num_envs: int, steps: int) -> dict[str, Any]:
    """Fetch and robosuite in the side Python (MuJoCo 3.x)."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write(SIDE_SCRIPT)
    done = subprocess.run(
        [python, handle.name, str(num_envs), str(steps), str(WARMUP)],
        capture_output=True, text=True, timeout=3600, env={**os.environ, "MUJOCO_GL": "egl"},
    )  # fmt: skip
    os.unlink(handle.name)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": done.stderr[-500:]}
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--steps", type=int, default=1500, help="env steps per row")
    parser.add_argument("--side-python", default=None,
                        help="a Python with MuJoCo 3.x, gymnasium-robotics and robosuite")  # fmt: skip
    parser.add_argument("--mjx-device", default=None, help="also time the MJX back end here")
    parser.add_argument("--out", default="benchmarks/results/robots_speed.json")
    args = parser.parse_args(argv)
    record: dict[str, Any] = {"lscpu": cpu_info(), "cpu_count": os.cpu_count(),
                              "steps": args.steps, "command": " ".join(sys.argv), "rows": {}}  # fmt: skip
    substeps = {"rlcore": 20, "gymnasium-robotics": 20, "robosuite": 25}
    for num_envs in args.envs:
        rows: dict[str, float] = measure_here(num_envs, args.steps, args.mjx_device)
        if args.side_python:
            side = measure_side(args.side_python, num_envs, args.steps)
            version = side.get("mujoco", "?")
            if "fetch" in side:
                rows[f"gymnasium-robotics Fetch, MuJoCo {version}, sync"] = side["fetch"]
            if "robosuite" in side:
                rows[f"robosuite Lift {side['robosuite_version']}, MuJoCo {version}"] = side[
                    "robosuite"
                ]
            record.setdefault("side_errors", {})[num_envs] = {
                k: v for k, v in side.items() if k.endswith("error")
            }
        base = next((v for k, v in rows.items() if k.startswith("robosuite")), None)
        print(f"\n{num_envs} env(s), {args.steps} env steps per row")
        print(f"{'row':58s} {'env steps/s':>12s} {'physics/s':>11s} {'x robosuite':>12s}")
        for name, rate in rows.items():
            physics = rate * substeps[name.split()[0]]
            ratio = f"{rate / base:.1f}x" if base else "-"
            print(f"{name:58s} {rate:12,.0f} {physics:11,.0f} {ratio:>12s}")
        record["rows"][num_envs] = rows
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
