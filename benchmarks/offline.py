"""Offline RL on D4RL-like Hopper datasets built by the recipe: behaviour policy vs
IQL, TD3+BC, CQL and ReBRAC (last and best D4RL-normalised scores).

    python -m offline.collect recipe env=Hopper            # builds local/hopper/*-v0 first
    python -m benchmarks.offline --steps 1000000 --seeds 0
    python -m benchmarks.offline --steps 20000 --algos iql td3_bc   # a quick look

Each (algorithm, dataset) pair runs with CORL's per-dataset settings
(``configs/experiment/<algo>_hopper_<dataset>.yaml``) for ``--steps`` gradient steps,
evaluating every ``--eval-every`` steps (10 episodes). The behaviour score is the mean
return of the dataset's episodes, normalised with the same D4RL reference table.
Prints a table and writes JSON to benchmarks/results/offline.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
DATASETS = {"medium": "local/hopper/medium-v0", "medium_replay": "local/hopper/medium-replay-v0"}


def run_one(algo: str, dataset_key: str, dataset_id: str, args, seed: int) -> dict:
    from hydra import compose, initialize_config_module

    from rlcore.logging import read_csv
    from rlcore.train import train

    overrides = [
        f"+experiment={algo}_hopper_{dataset_key}",
        f"dataset={dataset_id}",
        f"total_steps={args.steps}",
        f"eval_every={args.eval_every}",
        f"seed={seed}",
        f"checkpoint_every={args.steps}",
        "keep_agent_snapshots=false",
        "logger=quiet",
    ]
    with initialize_config_module(config_module="configs", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    run_dir = args.run_dir / f"{algo}_{dataset_key}_seed{seed}"
    start = time.perf_counter()
    train(cfg, run_dir)
    evals = read_csv(run_dir / "eval.csv")
    return {
        "last": evals[-1]["eval/normalized_score"],
        "best": max(r["eval/normalized_score"] for r in evals),
        "seconds": time.perf_counter() - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--eval-every", type=int, default=10_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--algos", nargs="+", default=["iql", "td3_bc", "cql", "rebrac"])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--run-dir", type=Path, default=Path("runs/bench/offline"))
    parser.add_argument("--out", type=Path, default=RESULTS / "offline.json")
    args = parser.parse_args()

    from offline.datasets import load_dataset
    from offline.scores import normalized_score

    rows = []
    for key in args.datasets:
        dataset = load_dataset(DATASETS[key])
        behaviour = float(normalized_score(float(dataset.episode_returns().mean()), "Hopper-v5"))
        row = {"dataset": key, "behaviour": behaviour, "steps": args.steps}
        for algo in args.algos:
            results = [run_one(algo, key, DATASETS[key], args, seed) for seed in args.seeds]
            row[algo] = {
                "last": float(np.mean([r["last"] for r in results])),
                "best": float(np.mean([r["best"] for r in results])),
                "seeds": args.seeds,
                "seconds": float(np.sum([r["seconds"] for r in results])),
            }
            print(
                f"  {key} {algo}: last {row[algo]['last']:.1f} best {row[algo]['best']:.1f}",
                flush=True,
            )
        rows.append(row)

    header = "| dataset | behaviour | " + " | ".join(f"{a} last / best" for a in args.algos) + " |"
    print(header)
    print("|" + "---|" * (2 + len(args.algos)))
    for row in rows:
        cells = " | ".join(f"{row[a]['last']:.1f} / {row[a]['best']:.1f}" for a in args.algos)
        print(f"| hopper-{row['dataset']} | {row['behaviour']:.1f} | {cells} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "rows": rows,
                "args": vars(args) | {"run_dir": str(args.run_dir), "out": str(args.out)},
            },
            indent=2,
        )
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
