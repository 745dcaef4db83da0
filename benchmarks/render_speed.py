"""What rendered observations cost: env steps/s of a MuJoCo task observed through its camera
(``env.obs=pixels``, envs/pixels.py) against the same task's state observations, measured
in the same run, per OpenGL back end (``MUJOCO_GL``: egl, osmesa) and with MuJoCo's
shadows and reflections on (mujoco.Renderer's defaults) or off (rlcore's), and on the native
back end (``BatchPixels``, shadows off).

    python -m rlcore.benchmarks.render_speed [--env Hopper-v5] [--size 84] [--steps 300]

One env, one process per GL back end (``MUJOCO_GL`` is read when the context is made),
torch and llvmpipe on one thread each (``LP_NUM_THREADS=1``), uniform random actions.
Writes results/render_speed.json with lscpu's model and flags; a back end that cannot
make a context here is reported with its error.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rlcore.benchmarks.runs import cpu_info, write_result

RESULTS = Path(__file__).resolve().parent / "results"


def measure(env_id: str, size: int, steps: int) -> dict[str, float]:
    """Env steps/s of ``env_id``: state observations; pixels without shadows and
    reflections; pixels with them (this process's MUJOCO_GL)."""
    import mujoco
    import numpy as np

    from rlcore.envs.make import make_vec_env
    from rlcore.envs.pixels import PixelObservation

    def rate(env, shadows: bool | None = None) -> float:
        if shadows is not None:
            layer = env.unwrapped.envs[0]
            while not isinstance(layer, PixelObservation):
                layer = layer.env
            layer.view.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = shadows
            layer.view.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = shadows
        env.reset(seed=0)
        actions = np.random.default_rng(0).uniform(
            -1, 1, (steps, 1, *env.single_action_space.shape)
        )
        start = time.perf_counter()
        for action in actions:
            env.step(action.astype(np.float32))
        return steps / (time.perf_counter() - start)

    state = make_vec_env(env_id, 1, seed=0, backend="sync")
    pixels = make_vec_env(env_id, 1, seed=0, obs="pixels", image_size=size, frame_stack=3)
    native = make_vec_env(env_id, 1, seed=0, obs="pixels", image_size=size, frame_stack=3,
                          backend="native", num_threads=1)  # fmt: skip
    return {"state": rate(state), "pixels": rate(pixels, False),
            "pixels_shadows": rate(pixels, True), "pixels_native": rate(native)}  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--size", type=int, default=84)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--gl", nargs="+", default=["egl", "osmesa"])
    parser.add_argument("--out", type=Path, default=RESULTS / "render_speed.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # one GL back end, in this process
        print(json.dumps(measure(args.env, args.size, args.steps)))
        return {}
    rows: dict[str, dict] = {}
    for gl in args.gl:
        env = {**os.environ, "MUJOCO_GL": gl, "LP_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        command = [sys.executable, "-m", "rlcore.benchmarks.render_speed", "--child",
                   "--env", args.env, "--size", str(args.size), "--steps", str(args.steps)]  # fmt: skip
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            rows[gl] = {"error": done.stderr.strip().splitlines()[-1]}
            continue
        rates = json.loads(done.stdout.strip().splitlines()[-1])
        rates["pixels_vs_state"] = rates["pixels"] / rates["state"]
        rows[gl] = rates
    print(f"{args.env}, {args.size} x {args.size} camera, 1 env, env steps/s")
    print(f"{'MUJOCO_GL':10s} {'state':>8s} {'pixels':>8s} {'+shadows':>9s} {'pixels/state':>13s}"
          f" {'native pixels':>14s}")  # fmt: skip
    for gl, row in rows.items():
        if "error" in row:
            print(f"{gl:10s} failed: {row['error']}")
            continue
        print(f"{gl:10s} {row['state']:8,.0f} {row['pixels']:8,.0f} {row['pixels_shadows']:9,.0f} "
              f"{row['pixels_vs_state']:13.3f} {row['pixels_native']:14,.0f}")  # fmt: skip
    result = {"env": args.env, "size": args.size, "steps": args.steps, "rows": rows,
              "cpu": cpu_info()}  # fmt: skip
    write_result(args, result)
    return result


if __name__ == "__main__":
    main()
