"""Atari env steps/s with CleanRL's preprocessing: rlcore's back end (ale-py's vector env,
``envs/atari.py``) vs gymnasium's sync vector env of ``ALE/<Game>-v5`` with gymnasium's
``AtariPreprocessing`` and ``FrameStackObservation`` vs envpool, measured alternately in
the same run.

    python -m rlcore.benchmarks.atari_envs [--game Pong] [--num-envs 8] [--steps 2000]
        [--threads 1] [--rounds 3]

Every contender: 84 x 84 grey, 4 stacked frames, frame skip 4 (max-pooled), up to 30
no-op starts, an episode ending at each lost life, rewards clipped, sticky actions off,
same-step autoreset where the library has it; uniform random actions drawn beforehand
(the same for all). Env steps/s count every env (agent steps, not emulator frames).
The ratio is to gymnasium's sync vector env. envpool is optional (``pip install
envpool``; skipped when missing). Writes results/atari_envs.json with lscpu's model and
flags.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rlcore.benchmarks.runs import cpu_info
from rlcore.benchmarks.throughput.common import alternate, median_of, ratio
from rlcore.benchmarks.throughput.env import env_rate

RESULTS = Path(__file__).resolve().parent / "results"


def gymnasium_env(game: str, num_envs: int) -> gym.vector.VectorEnv:
    """gymnasium's own Atari pipeline, one ``ALE/<Game>-v5`` per env (frame skip in the
    wrapper, so the ALE env skips none)."""
    import ale_py

    gym.register_envs(ale_py)

    def make() -> gym.Env:
        env = gym.make(f"ALE/{game}-v5", frameskip=1, repeat_action_probability=0.0)
        env = gym.wrappers.AtariPreprocessing(
            env, noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=True,
            grayscale_obs=True, scale_obs=False,
        )  # fmt: skip
        env = gym.wrappers.TransformReward(env, np.sign)
        return gym.wrappers.FrameStackObservation(env, 4)

    return gym.vector.SyncVectorEnv(
        [make] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )


def envpool_env(game: str, num_envs: int, threads: int, seed: int) -> Any:
    """envpool's ``<Game>-v5`` as CleanRL's ppo_atari_envpool.py makes it."""
    import envpool

    return envpool.make(
        f"{game}-v5", env_type="gymnasium", num_envs=num_envs, episodic_life=True,
        reward_clip=True, seed=seed, num_threads=threads,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    from rlcore.envs.make import make_vec_env

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="Pong")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2000, help="vector steps per measure")
    parser.add_argument("--threads", type=int, default=1, help="C threads (rlcore, envpool)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "atari_envs.json")
    args = parser.parse_args(argv)
    n = args.num_envs
    actions = np.random.default_rng(0).integers(0, 6, (args.steps, n))
    envs: dict[str, Any] = {
        "rlcore (ale-py vector)": make_vec_env(
            f"ALE/{args.game}-v5", n, seed=0, num_threads=args.threads
        ),
        "gymnasium sync": gymnasium_env(args.game, n),
    }
    try:
        envs["envpool"] = envpool_env(args.game, n, args.threads, 0)
    except ImportError:
        envs["envpool"] = None
    for env in envs.values():
        if env is not None:
            env.reset(seed=0)
    measures = {
        name: (None if env is None else (lambda env=env: env_rate(env, actions)))
        for name, env in envs.items()
    }
    results = alternate(measures, args.rounds)
    base = median_of(results["gymnasium sync"])
    print(f"Atari {args.game}, {n} envs, {args.threads} thread(s), {args.steps} vector steps")
    print(f"{'env':26s} {'env steps/s':>12s} {'vs gymnasium':>13s}")
    table = {}
    for name, result in results.items():
        rate = median_of(result)
        table[name] = {"steps_per_s": rate, "ratio_to_gymnasium": ratio(rate, base),
                       "samples": None if result is None else result["samples"]}  # fmt: skip
        shown = (
            "skipped (not installed)"
            if rate is None
            else f"{rate:12,.0f} {ratio(rate, base):13.2f}"
        )
        print(f"{name:26s} {shown}")
    result = {"game": args.game, "num_envs": n, "threads": args.threads, "steps": args.steps,
              "rows": table, "cpu": cpu_info()}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
