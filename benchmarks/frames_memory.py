"""Memory of an Atari replay buffer: rlcore's frame store (each 84 x 84 frame once,
``ReplayBuffer(frames=True)``) against Stable-Baselines3's ``ReplayBuffer`` with
``optimize_memory_usage=True`` (CleanRL's dqn_atari.py buffer: each stack once, the next
observation read from the next row) and rlcore's buffer of whole stacks, measured in the
same run.

    python -m rlcore.benchmarks.frames_memory [--transitions 100000] [--num-envs 1]
        [--kinds "rlcore frames"]   # 1M transitions: SB3's would need 28 GB

Each buffer is built in its own child process; the table gives the resident memory (RSS)
it added once every byte of its storage was written, next to the arithmetic
(``rlcore.frames.bytes_per_transition``), the bytes per transition, the ratio to SB3's,
and the largest buffer that would fit in 24 GiB at that rate (without SB3's buffer in the
run, the ratio is to its arithmetic). Writes
results/frames_memory.json (with lscpu's model and flags).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
from pathlib import Path
from typing import Any

from rlcore.benchmarks.runs import cpu_info, write_result

RESULTS = Path(__file__).resolve().parent / "results"
GIB = 1024**3
KINDS = ("rlcore frames", "sb3 optimize_memory_usage", "rlcore stacks")


def _rss() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * 4096


def _measure(kind: str, transitions: int, num_envs: int, out: Any) -> None:
    import numpy as np
    import torch

    before = _rss()
    if kind == "sb3 optimize_memory_usage":
        import gymnasium as gym
        from stable_baselines3.common.buffers import ReplayBuffer as SB3Buffer

        buffer = SB3Buffer(
            transitions // num_envs, gym.spaces.Box(0, 255, (4, 84, 84), np.uint8),
            gym.spaces.Discrete(6), "cpu", n_envs=num_envs, optimize_memory_usage=True,
            handle_timeout_termination=False,
        )  # fmt: skip
        for name in ("observations", "actions", "rewards", "dones"):
            getattr(buffer, name).fill(1)
    else:
        from rlcore.buffers import ReplayBuffer
        from rlcore.observations import IMAGE, ObsPart, ObsSpec

        spec = ObsSpec((ObsPart("obs", (4, 84, 84), IMAGE, frame_stack=4),))
        frames = kind == "rlcore frames"
        buffer = ReplayBuffer(transitions, spec, (), num_envs, action_dtype=torch.int64,
                              frames=frames)  # fmt: skip
        for tensor in buffer.data.values():
            tensor.fill_(1)
        for store in buffer.frame_stores.values():
            store.frames.fill_(1)
    out.put(_rss() - before)


def measure(kind: str, transitions: int, num_envs: int) -> int:
    """RSS (bytes) a freshly built, fully written buffer of ``kind`` adds, in a child."""
    context = mp.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_measure, args=(kind, transitions, num_envs, queue))
    child.start()
    added = int(queue.get())
    child.join()
    return added


def main(argv: list[str] | None = None) -> dict:
    from rlcore.frames import bytes_per_transition
    from rlcore.observations import IMAGE, ObsPart

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transitions", type=int, default=100_000)
    parser.add_argument("--num-envs", type=int, default=1)
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS,
                        help="the buffers to build (SB3's is the baseline of the ratio)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS / "frames_memory.json")
    args = parser.parse_args(argv)
    part = ObsPart("obs", (4, 84, 84), IMAGE, frame_stack=4)
    arithmetic = {
        "rlcore frames": bytes_per_transition(part) + 8 + 4 + 4 + 4,  # + action, reward, flags
        "sb3 optimize_memory_usage": 4 * 84 * 84 + 8 + 4 + 4,
        "rlcore stacks": 2 * 4 * 84 * 84 + 8 + 4 + 4 + 4,
    }
    rows = {}
    for kind in args.kinds:
        added = measure(kind, args.transitions, args.num_envs)
        per = added / args.transitions
        rows[kind] = {"rss_added_bytes": added, "bytes_per_transition": per,
                      "arithmetic_bytes_per_transition": arithmetic[kind],
                      "fits_in_24_gib": int(24 * GIB / per)}  # fmt: skip
    sb3 = "sb3 optimize_memory_usage"
    base = rows[sb3]["bytes_per_transition"] if sb3 in rows else arithmetic[sb3]
    print(f"Atari replay buffer, {args.transitions:,} transitions, {args.num_envs} env(s)")
    print(f"{'buffer':28s} {'RSS (MiB)':>10s} {'B/transition':>13s} {'arithmetic':>11s} "
          f"{'vs SB3':>7s} {'fits 24 GiB':>12s}")  # fmt: skip
    for kind, row in rows.items():
        row["ratio_to_sb3"] = row["bytes_per_transition"] / base
        print(f"{kind:28s} {row['rss_added_bytes'] / 2**20:10.0f} "
              f"{row['bytes_per_transition']:13,.0f} {row['arithmetic_bytes_per_transition']:11,.0f} "
              f"{row['ratio_to_sb3']:7.2f} {row['fits_in_24_gib']:12,d}")  # fmt: skip
    result = {"transitions": args.transitions, "num_envs": args.num_envs, "rows": rows,
              "cpu": cpu_info()}  # fmt: skip
    write_result(args, result)
    return result


if __name__ == "__main__":
    main()
