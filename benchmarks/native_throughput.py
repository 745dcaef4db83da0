"""Env steps/s of the native batched back end vs gymnasium's SyncVectorEnv (default Hopper).

    python -m benchmarks.native_throughput                      # 1, 16, 64 envs
    python -m benchmarks.native_throughput --steps 200 --rounds 2
    python -m benchmarks.native_throughput --env Ant --num-envs 1 16

Both back ends come from ``make_vec_env`` (so both carry EpisodeStats) and step the same
pre-drawn random actions, with episode resets included. Measurements alternate
(native, sync, native, sync, ...) for ``--rounds`` rounds so machine drift hits both
alike; the table reports the median per back end. Writes
``benchmarks/results/native_throughput_<env>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from envs.make import make_vec_env

RESULTS = Path(__file__).resolve().parent / "results"
BACKENDS = ("native", "sync")


def steps_per_second(env, actions: np.ndarray) -> float:
    """Env steps/s (all envs counted) over the given action sequence."""
    start = time.perf_counter()
    for action in actions:
        env.step(action)
    return actions.shape[0] * env.num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Hopper")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--steps", type=int, default=1000, help="vector steps per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="native threads (all CPUs)")
    args = parser.parse_args()

    rows = []
    for num_envs in args.num_envs:
        envs = {
            b: make_vec_env(args.env, num_envs, backend=b, num_threads=args.threads)
            for b in BACKENDS
        }
        space = envs["sync"].action_space
        actions = (
            np.random.default_rng(0)
            .uniform(space.low, space.high, (args.steps, *space.shape))
            .astype(np.float32)
        )
        for env in envs.values():
            env.reset(seed=0)
            steps_per_second(env, actions[: max(1, args.steps // 10)])  # warm-up
        samples: dict[str, list[float]] = {b: [] for b in BACKENDS}
        for _ in range(args.rounds):
            for b in BACKENDS:  # A B A B ...
                samples[b].append(steps_per_second(envs[b], actions))
        med = {b: statistics.median(v) for b, v in samples.items()}
        rows.append({"num_envs": num_envs, "samples": samples, "median": med})

    print(f"{args.env}: env steps/s (median of {args.rounds}, {args.steps} vector steps each)")
    print(f"{'envs':>5} {'native':>10} {'sync':>10} {'ratio':>7}")
    for row in rows:
        med = row["median"]
        ratio = med["native"] / med["sync"]
        print(f"{row['num_envs']:>5} {med['native']:>10.0f} {med['sync']:>10.0f} {ratio:>7.2f}")

    RESULTS.mkdir(exist_ok=True)
    result = {
        "env": args.env,
        "steps": args.steps,
        "rounds": args.rounds,
        "threads": args.threads or os.cpu_count(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "rows": rows,
    }
    out = RESULTS / f"native_throughput_{args.env.lower().replace('-', '_')}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
