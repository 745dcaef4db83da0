"""The suite's command line: ``python -m rlcore.benchmarks.throughput [--sections ...]`` runs
the sections, prints their tables and the targets, writes the JSON after every section."""

from __future__ import annotations

import argparse
import os
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlcore.benchmarks import throughput as suite
from rlcore.benchmarks.throughput.common import (
    OPT_IN,
    RESULTS,
    SECTIONS,
    fmt,
    machine_info,
    markdown_table,
    write_json,
)
from rlcore.benchmarks.throughput.ensemble import section_ensemble
from rlcore.benchmarks.throughput.env import section_env
from rlcore.benchmarks.throughput.memory import section_memory
from rlcore.benchmarks.throughput.mjx import section_mjx, section_mjx_ppo
from rlcore.benchmarks.throughput.o2o import section_compile, section_o2o
from rlcore.benchmarks.throughput.sac_update import section_sac_update
from rlcore.benchmarks.throughput.targets import targets
from rlcore.benchmarks.throughput.training_runs import section_ppo_run, section_sac_run


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, with the full or the quick (``--quick``) defaults filled in."""
    parser = argparse.ArgumentParser(
        prog="python -m rlcore.benchmarks.throughput",
        description=suite.__doc__.split("\n\n")[0],
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument(
        "--sections", nargs="+", choices=SECTIONS,
        default=[s for s in SECTIONS if s not in OPT_IN],
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="smoke run: everything shrunk")
    parser.add_argument("--rounds", type=int, default=None, help="A B rounds (3; quick 1)")
    parser.add_argument("--out", type=Path, default=None, help="JSON path")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--envs", nargs="+", default=["Hopper", "HalfCheetah", "Ant"])
    parser.add_argument("--num-envs", type=int, nargs="+", default=None, help="1 16 64")
    parser.add_argument(
        "--env-steps", type=int, default=None, help="env steps per measurement (20000)"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="native/ceiling C threads (all CPUs)"
    )
    parser.add_argument(
        "--torch-threads", type=int, default=None, help="torch intra-op threads (torch default)"
    )
    parser.add_argument(
        "--updates", type=int, default=None, help="gradient updates per measurement (500)"
    )
    parser.add_argument("--buffer-size", type=int, default=100_000, help="sac_update buffer")
    parser.add_argument("--sac-steps", type=int, default=None, help="sac_run env steps (20000)")
    parser.add_argument("--sac-learning-starts", type=int, default=None, help="(5000)")
    parser.add_argument("--ppo-steps", type=int, default=None, help="ppo_run env steps (131072)")
    parser.add_argument(
        "--ppo-rollout", type=int, default=None, help="PPO steps per env per rollout (2048)"
    )
    parser.add_argument("--memory-capacity", type=int, default=1_000_000)
    parser.add_argument("--mjx-device", default=None, help="mjx: cuda if available, else cpu")
    parser.add_argument("--mjx-envs", nargs="+", default=["Hopper", "Ant"])
    parser.add_argument("--mjx-impl", default="jax", choices=["jax", "warp"],
                        help="MJX implementation (warp: needs warp-lang)")  # fmt: skip
    parser.add_argument("--mjx-num-envs", type=int, nargs="+", default=None,
                        help="mjx: 1 1024 4096 16384 (quick: 1 16)")  # fmt: skip
    parser.add_argument("--mjx-native-threads", type=int, default=2)
    parser.add_argument("--mjx-env-steps", type=int, default=None, help="mjx steps x envs (2M)")
    parser.add_argument("--mjx-native-env-steps", type=int, default=None, help="(100k)")
    parser.add_argument("--mjx-min-steps", type=int, default=None, help="(10)")
    parser.add_argument("--mjx-max-steps", type=int, default=None, help="(200)")
    parser.add_argument("--mjx-ppo-envs", type=int, default=1024)
    parser.add_argument("--mjx-ppo-target", type=float, default=2500.0)
    parser.add_argument("--mjx-ppo-minutes", type=float, default=10.0)
    parser.add_argument("--mjx-ppo-eval-every", type=int, default=None,
                        help="env steps between evaluations (the experiment's: 1M)")  # fmt: skip
    parser.add_argument("--mjx-ppo-baseline", action=argparse.BooleanOptionalAction,
                        default=True, help="also run the experiment on the native back end")  # fmt: skip
    parser.add_argument("--mjx-ppo-baseline-minutes", type=float, default=None,
                        help="time limit of the native run (default: --mjx-ppo-minutes)")  # fmt: skip
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "rounds": (3, 1),
        "num_envs": ([1, 16, 64], [1, 16]),
        "env_steps": (20_000, 2_000),
        "updates": (500, 50),
        "sac_steps": (20_000, 2_000),
        "sac_learning_starts": (5_000, 1_000),
        "ppo_steps": (131_072, 4_096),
        "ppo_rollout": (2_048, 256),
        "mjx_num_envs": ([1, 1024, 4096, 16384], [1, 16]),
        "mjx_env_steps": (2_000_000, 2_000),
        "mjx_native_env_steps": (100_000, 2_000),
        "mjx_min_steps": (10, 3),
        "mjx_max_steps": (200, 20),
    }
    for key, (full, small) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, small if quick else full)
    if args.threads is None:
        args.threads = os.cpu_count() or 1
    if args.out is None:
        args.out = RESULTS / ("throughput_quick.json" if quick else "throughput.json")
    args.sections = [s for s in SECTIONS if s in args.sections]  # canonical order
    return args


SECTION_FUNCS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "env": section_env,
    "sac_update": section_sac_update,
    "ensemble": section_ensemble,
    "o2o": section_o2o,
    "compile": section_compile,
    "sac_run": section_sac_run,
    "ppo_run": section_ppo_run,
    "memory": section_memory,
    "mjx": section_mjx,
    "mjx_ppo": section_mjx_ppo,
}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the selected sections, print their tables and the targets, write the JSON."""
    args = parse_args(argv)
    started = time.perf_counter()
    if args.torch_threads is not None:
        import torch

        torch.set_num_threads(args.torch_threads)
    payload: dict[str, Any] = {
        "benchmark": "throughput",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "quick": args.quick,
        "args": vars(args),
        "machine": machine_info(args.threads),
        "sections": {},
        "targets": [],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    modes = payload["machine"]["speed_modes"]
    print(
        f"{payload['machine'].get('cpu_model')}: CPU capability {modes['cpu_capability']}, "
        f"bf16 native {modes['bf16_native']} ({modes['bf16_reason']}), C++ compiler "
        f"{modes['cxx_compiler']}",
        flush=True,
    )
    for name in args.sections:
        print(f"\n## {name}", flush=True)
        t0 = time.perf_counter()
        try:
            section = SECTION_FUNCS[name](args)
        except Exception as error:  # one failing section must not lose the others
            traceback.print_exc()
            section = {"error": f"{type(error).__name__}: {error}", "notes": [], "table": ""}
        section["seconds"] = time.perf_counter() - t0
        payload["sections"][name] = section
        if "error" in section:
            print(f"section {name} failed: {section['error']}")
        else:
            print(f"\n{section['title']}\n\n{section['table']}")
            for note in section["notes"]:
                print(f"\n* {note}")
        payload["targets"] = targets(payload["sections"])
        write_json(args.out, payload)

    payload["machine"]["load_avg_end"] = (
        list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    )
    payload["seconds"] = time.perf_counter() - started
    rows = [
        [
            t["name"],
            fmt(t["value"], True),
            t["goal"],
            {True: "yes", False: "NO", None: "not measured"}[t["met"]],
        ]
        for t in payload["targets"]
    ]
    print("\n## targets\n")
    print(markdown_table(["target", "measured", "goal", "met"], rows))
    write_json(args.out, payload)
    print(f"\nwrote {args.out} ({payload['seconds']:.0f} s)")
    return payload
