"""SAC on Hopper-v5: rlcore vs Stable-Baselines3, same hyper-parameters, same process.

    python -m rlcore.benchmarks.sac_hopper_vs_sb3                 # 100k steps, 8 chunks
    python -m rlcore.benchmarks.sac_hopper_vs_sb3 --steps 4000 --chunks 2 --learning-starts 1000

Both learners train for ``--steps`` env steps in ``--chunks`` equal chunks, run
alternately (rlcore chunk 1, SB3 chunk 1, rlcore chunk 2, ...) so that machine drift
hits both alike. rlcore continues each chunk from its own checkpoint (the real
``resume=`` path); SB3 continues with ``learn(reset_num_timesteps=False)``. After each
chunk both are evaluated with the same protocol (10 deterministic episodes, same env
seeds, rlcore.evaluate). Chunk wall time includes that evaluation for both, and for
rlcore also loading and saving its checkpoint (so the comparison is conservative).

Prints a table and writes JSON to benchmarks/results/sac_hopper_vs_sb3.json. Under
``--run-dir``/<time stamp>/, ``rlcore/`` is rlcore's run and ``sb3/`` holds SB3's
evaluations in the same form (config.yaml with ``algo.name: sb3_sac``, eval.csv with
``step`` and ``eval/return``), so ``rlcore.report`` draws both learning curves in one
panel: report.md, report.json and PNG figures go to ``<JSON stem>_report/`` beside the
JSON (``--no-figures``: none).

Hyper-parameters (SB3's SAC defaults where they differ from CleanRL's): lr 3e-4 for
actor, critic and temperature; batch 256; 256x256 ReLU; tau 0.005; gamma 0.99; one
gradient step per env step, actor updated every step; initial temperature 1.0, target
entropy -|A|; 5k uniform-random warm-up steps; float32. Remaining differences (each with
its measured size in algos/sac.py, "Against Stable-Baselines3"): rlcore squashes log-std
into [-5, 2] with tanh, SB3 clips it to [-20, 2]; rlcore's tanh correction of log pi is
exact, SB3 adds 1e-6 inside its log; rlcore's critic loss is the sum of the two MSEs, SB3's
half of it (under Adam: eps 1e-8 vs an effective 2e-8, not a learning-rate change);
rlcore's temperature loss is alpha times the entropy gap, SB3's log alpha times it.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlcore.benchmarks.runs import report_dir, write_figures

RESULTS = Path(__file__).resolve().parent / "results"
SB3_ALGO = "sb3_sac"  # algo.name of the SB3 side's run dir (its group in the report)


def rlcore_sac_overrides(
    total_steps: int, learning_starts: int, buffer_size: int, seed: int
) -> list[str]:
    """Hydra overrides that give rlcore's SAC on Hopper SB3's SAC defaults (module doc)."""
    return [
        "algo=sac",
        "env=hopper",
        f"seed={seed}",
        f"total_steps={total_steps}",
        "algo.actor_lr=3e-4",
        "algo.critic_lr=3e-4",
        "algo.alpha_lr=3e-4",
        "algo.policy_frequency=1",
        "algo.init_alpha=1.0",
        f"algo.learning_starts={learning_starts}",
        f"algo.buffer_size={buffer_size}",
    ]


def make_sb3_sac(
    env: Any, buffer_size: int, learning_starts: int, seed: int, device: str = "cpu"
) -> Any:
    """Stable-Baselines3 SAC with the hyper-parameters rlcore gets from
    ``rlcore_sac_overrides`` (SB3's defaults made explicit), on ``device`` (CPU here)."""
    from stable_baselines3 import SAC

    return SAC(
        "MlpPolicy",
        env,
        learning_rate=3e-4,
        buffer_size=buffer_size,
        learning_starts=learning_starts,
        batch_size=256,
        tau=0.005,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        ent_coef="auto",
        target_entropy="auto",
        policy_kwargs={"net_arch": [256, 256]},
        seed=seed,
        device=device,
        verbose=0,
    )


def _rlcore_chunk(run_dir: Path, total: int, args: argparse.Namespace, first: bool) -> float:
    from hydra import compose, initialize_config_module

    from rlcore.overrides import normalize_overrides
    from rlcore.train import train

    overrides = [
        *rlcore_sac_overrides(total, args.learning_starts, args.steps, args.seed),
        "eval_episodes=10",
        "eval_envs=5",
        f"eval_every={args.steps}",
        f"checkpoint_every={args.steps}",
        "keep_agent_snapshots=false",
        "logger=quiet",
    ]
    if not first:
        overrides.append(f"resume={run_dir}")
    with initialize_config_module(config_module="rlcore.configs", version_base="1.3"):
        cfg = compose("config", overrides=normalize_overrides(list(overrides)))
    result = train(cfg, run_dir)
    return result["eval/return"]


class _SB3:
    """Stable-Baselines3 SAC with the same hyper-parameters, trained in chunks."""

    def __init__(self, args: argparse.Namespace) -> None:
        import gymnasium as gym

        self.model = make_sb3_sac(
            gym.make("Hopper-v5"), args.steps, args.learning_starts, args.seed
        )
        self.seed = args.seed

    def chunk(self, steps: int) -> float:
        from rlcore.envs.make import make_vec_env
        from rlcore.evaluation import evaluate

        self.model.learn(total_timesteps=steps, reset_num_timesteps=False)
        eval_env = make_vec_env("Hopper", 5, seed=self.seed + 1)
        result = evaluate(
            lambda obs: self.model.predict(obs, deterministic=True)[0],
            eval_env,
            10,
            seed=self.seed + 1_000_003,  # the seed rlcore's loop evaluates with
        )
        eval_env.close()
        return result["return"]


def write_sb3_run(
    run_dir: Path, args: argparse.Namespace, version: str, evals: list[tuple[int, float]]
) -> None:
    """SB3's ``(env steps, mean return)`` evaluations as a run dir ``rlcore.report`` reads:
    config.yaml (``algo.name: sb3_sac``, Hopper-v5, the seed and SB3's settings) and
    eval.csv (``step``, ``eval/return``). Rewritten after every chunk."""
    from omegaconf import OmegaConf

    run_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "algo": {
            "name": SB3_ALGO,
            "library": f"stable-baselines3 {version}",
            "learning_starts": args.learning_starts,
            "buffer_size": args.steps,
        },
        "env": {"id": "Hopper-v5"},
        "seed": args.seed,
        "total_steps": args.steps,
    }
    OmegaConf.save(OmegaConf.create(config), run_dir / "config.yaml")
    with (run_dir / "eval.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "eval/return"])
        writer.writerows([step, value] for step, value in evals)


def main(argv: list[str] | None = None) -> None:
    """Train both in alternating chunks, print the table, write the JSON and the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--learning-starts", type=int, default=5_000)
    parser.add_argument("--out", type=Path, default=RESULTS / "sac_hopper_vs_sb3.json")
    parser.add_argument("--run-dir", type=Path, default=Path("runs/bench/sac_hopper_vs_sb3"))
    parser.add_argument(
        "--no-figures", action="store_true", help="skip the rlcore.report report and figures"
    )
    args = parser.parse_args(argv)
    try:
        import stable_baselines3
    except ImportError:
        print("stable-baselines3 is not installed (pip install -e .[bench]): nothing to compare")
        return

    torch.set_num_threads(torch.get_num_threads())
    chunk = args.steps // args.chunks
    run_dir = args.run_dir / time.strftime("%Y-%m-%d_%H-%M-%S") / "rlcore"
    sb3_dir = run_dir.parent / "sb3"
    sb3 = _SB3(args)
    rows = []
    for i in range(args.chunks):
        total = chunk * (i + 1)
        t0 = time.perf_counter()
        ours = _rlcore_chunk(run_dir, total, args, first=i == 0)
        t_ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        theirs = sb3.chunk(chunk)
        t_sb3 = time.perf_counter() - t0
        evals = [(r["env_steps"], r["sb3_return"]) for r in rows] + [(total, theirs)]
        write_sb3_run(sb3_dir, args, stable_baselines3.__version__, evals)
        rows.append(
            {
                "env_steps": total,
                "rlcore_return": ours,
                "sb3_return": theirs,
                "rlcore_sps": chunk / t_ours,
                "sb3_sps": chunk / t_sb3,
                "sps_ratio": t_sb3 / t_ours,
            }
        )
        r = rows[-1]
        print(
            f"  chunk {i + 1}/{args.chunks}: step {total:,} | rlcore {ours:8.1f} ({r['rlcore_sps']:.1f} sps)"
            f" | SB3 {theirs:8.1f} ({r['sb3_sps']:.1f} sps) | ratio {r['sps_ratio']:.2f}x",
            flush=True,
        )

    learning_rows = [r for r in rows if r["env_steps"] > args.learning_starts] or rows
    summary = {
        "median_sps_ratio": statistics.median(r["sps_ratio"] for r in rows),
        "median_sps_ratio_after_warmup": statistics.median(
            r["sps_ratio"] for r in learning_rows[1:] or learning_rows
        ),
        "rlcore_total_sps": args.steps / sum(chunk / r["rlcore_sps"] for r in rows),
        "sb3_total_sps": args.steps / sum(chunk / r["sb3_sps"] for r in rows),
        "final_return_rlcore": rows[-1]["rlcore_return"],
        "final_return_sb3": rows[-1]["sb3_return"],
    }
    print()
    print("| env steps | rlcore return | SB3 return | rlcore steps/s | SB3 steps/s | ratio |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['env_steps']:,} | {r['rlcore_return']:.1f} | {r['sb3_return']:.1f} | "
            f"{r['rlcore_sps']:.1f} | {r['sb3_sps']:.1f} | {r['sps_ratio']:.2f}x |"
        )
    print(
        f"\nwhole run: rlcore {summary['rlcore_total_sps']:.1f} steps/s, SB3 "
        f"{summary['sb3_total_sps']:.1f} steps/s; median chunk ratio {summary['median_sps_ratio']:.2f}x"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "sac_hopper_vs_sb3",
        "args": {k: str(v) for k, v in vars(args).items()},
        "versions": {
            "torch": torch.__version__,
            "stable_baselines3": stable_baselines3.__version__,
            "numpy": np.__version__,
        },
        "threads": torch.get_num_threads(),
        "rows": rows,
        "summary": summary,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    payload["report"] = None if args.no_figures else str(report_dir(args.out))
    args.out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {args.out}")
    if not args.no_figures:  # after the JSON, so a failing report cannot lose the table
        write_figures([run_dir, sb3_dir], report_dir(args.out))


if __name__ == "__main__":
    main()
