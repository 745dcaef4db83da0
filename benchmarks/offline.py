"""Offline RL on D4RL-like Hopper datasets built by the recipe: behaviour policy vs
IQL, TD3+BC, CQL and ReBRAC (last and best D4RL-normalised scores).

    python -m rlcore.offline.collect recipe env=Hopper            # builds local/hopper/*-v0 first
    python -m rlcore.benchmarks.offline --steps 1000000 --seeds 0
    python -m rlcore.benchmarks.offline --steps 20000 --algos iql td3_bc   # a quick look
    python -m rlcore.benchmarks.offline --steps 50000 --steps-for cql=12000 --jobs 2  # 2 cores

``--steps-for algo=n`` gives one algorithm its own gradient-step budget (CQL costs ~20x an
IQL step on CPU); ``--bf16 cql rebrac`` trains those with ``precision=bf16`` (~2-2.5x
faster per step on CPUs with AMX; the table marks them); ``--set iql:algo.beta=1.0`` adds
an override for one algorithm (its run directory and JSON row say so); ``--jobs n`` runs n
trainings at a time in worker processes with one torch thread each (longest first); the
table states every run's steps.

Each (algorithm, dataset) pair runs with CORL's per-dataset settings
(``configs/experiment/<algo>_hopper_<dataset>.yaml``) for ``--steps`` gradient steps,
evaluating every ``--eval-every`` steps (10 episodes). The behaviour score is the mean
return of the dataset's episodes, normalised with the same D4RL reference table.
Prints a table and writes JSON to benchmarks/results/offline.json, then the report of
this invocation's runs (``rlcore.report``: report.md, report.json and PNG figures of the
normalised scores) to ``<JSON stem>_report/`` beside it (``--no-figures``: none).
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import numpy as np

from rlcore.benchmarks.runs import report_dir, train_run, worker_pool, write_figures, write_result

RESULTS = Path(__file__).resolve().parent / "results"
DATASETS = {"medium": "local/hopper/medium-v0", "medium_replay": "local/hopper/medium-replay-v0"}
# relative cost of one gradient step on CPU (measured, 1 thread): orders the job queue
COST = {"iql": 1.0, "td3_bc": 0.7, "awac": 1.0, "rebrac": 5.0, "cql": 20.0, "cal_ql": 20.0}
BF16_SPEEDUP = 2.0  # roughly, per step, for the big-matmul algorithms on AMX CPUs
CHECKPOINT_EVERY = 10_000


def run_one(
    algo: str,
    dataset_key: str,
    dataset_id: str,
    steps: int,
    eval_every: int,
    run_dir: Path,
    seed: int,
    threads: int,
    precision: str = "float32",
    extra: tuple[str, ...] = (),
) -> dict:
    """Train one (algorithm, dataset, seed) with its experiment config plus ``extra``
    overrides; last/best scores. Checkpoints every 10k steps, so an interrupted benchmark
    resumes where it stopped (the run directory's name includes ``extra``)."""
    overrides = [
        f"+experiment={algo}_hopper_{dataset_key}",
        f"dataset={dataset_id}",
        f"total_steps={steps}",
        f"eval_every={min(eval_every, steps)}",
        f"seed={seed}",
        f"checkpoint_every={min(CHECKPOINT_EVERY, steps)}",
        f"algo.precision={precision}",
        *extra,
    ]
    suffix = "" if precision == "float32" else f"_{precision}"
    suffix += "".join(f"_{override_tag(item)}" for item in extra)
    name = f"{algo}_{dataset_key}_seed{seed}{suffix}"
    evals, seconds = train_run(run_dir / name, overrides, threads)
    result = {
        "run_dir": str(run_dir / name),
        "last": evals[-1]["eval/normalized_score"],
        "best": max(r["eval/normalized_score"] for r in evals),
        "mean_last10": float(np.mean([r["eval/normalized_score"] for r in evals[-10:]])),
        "curve": [[int(r["step"]), round(r["eval/normalized_score"], 2)] for r in evals],
        "steps": steps,
        "precision": precision,
        "seconds": seconds,
    }
    print(
        f"  {dataset_key} {algo} seed {seed} ({steps} steps, {precision}, "
        f"{result['seconds']:.0f} s): "
        f"last {result['last']:.1f} best {result['best']:.1f}",
        flush=True,
    )
    return result


def override_tag(override: str) -> str:
    """``"algo.beta=1.0"`` -> ``"beta1.0"``, ``"env.clip_obs=5"`` -> ``"env.clip_obs5"``: a
    run-directory-safe name for an override (only the common ``algo.`` prefix is dropped,
    so keys with the same leaf in different groups name different runs)."""
    key, _, value = override.partition("=")
    return re.sub(r"[^A-Za-z0-9._\-]", "", key.removeprefix("algo.") + value)


def parse_set(items: list[str], algos: list[str]) -> dict[str, tuple[str, ...]]:
    """``["iql:algo.beta=1.0", ...]`` -> {"iql": ("algo.beta=1.0",)}: extra Hydra
    overrides for one algorithm (tuned variants beside the CORL configs)."""
    out: dict[str, tuple[str, ...]] = {}
    for item in items:
        algo, _, override = item.partition(":")
        if algo not in algos or "=" not in override:
            raise SystemExit(f"--set expects <algo>:<key>=<value> with algo in {algos}: {item!r}")
        out[algo] = (*out.get(algo, ()), override)
    return out


def parse_steps_for(items: list[str], algos: list[str]) -> dict[str, int]:
    """``["cql=12000", ...]`` -> {"cql": 12000}; unknown algorithms are an error."""
    out = {}
    for item in items:
        algo, _, value = item.partition("=")
        if algo not in algos or not value.isdigit():
            raise SystemExit(f"--steps-for expects <algo>=<int> with algo in {algos}: {item!r}")
        out[algo] = int(value)
    return out


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark, print the table, write the JSON; returns the JSON payload."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--eval-every", type=int, default=10_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--algos", nargs="+", default=["iql", "td3_bc", "cql", "rebrac"])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--steps-for", nargs="*", default=[], metavar="ALGO=STEPS")
    parser.add_argument("--jobs", type=int, default=1, help="trainings run at a time")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads per training (default: 1 "
        "with --jobs > 1, else torch's default); 1 when other work shares the cores",
    )  # fmt: skip
    parser.add_argument(
        "--bf16", nargs="*", default=[], metavar="ALGO", help="algorithms run with precision=bf16"
    )
    parser.add_argument(
        "--set", nargs="*", default=[], metavar="ALGO:KEY=VALUE",
        help="extra override for one algorithm, e.g. iql:algo.beta=1.0 (recorded in the JSON)",
    )  # fmt: skip
    parser.add_argument(
        "--dataset-id", nargs="*", default=[], metavar="KEY=ID", help="e.g. medium=ns/hopper/m-v1"
    )
    parser.add_argument("--run-dir", type=Path, default=Path("runs/bench/offline"))
    parser.add_argument("--out", type=Path, default=RESULTS / "offline.json")
    parser.add_argument(
        "--no-figures", action="store_true", help="skip the rlcore.report report and figures"
    )
    args = parser.parse_args(argv)

    from rlcore.offline.datasets import load_dataset
    from rlcore.offline.scores import normalized_score

    steps_for = parse_steps_for(args.steps_for, args.algos)
    extra = parse_set(args.set, args.algos)
    unknown = sorted(set(args.bf16) - set(args.algos))
    if unknown:
        raise SystemExit(f"--bf16 names algorithms not in --algos: {unknown}")
    if args.bf16:
        from rlcore.speed import ALLOW_EMULATED_BF16, bf16_native

        native, reason = bf16_native("cpu")
        if not native and os.environ.get(ALLOW_EMULATED_BF16) != "1":
            print(f"note: --bf16 ignored, every algorithm runs float32 ({reason})")
            args.bf16 = []
    precision = {algo: "bf16" if algo in args.bf16 else "float32" for algo in args.algos}
    dataset_ids = dict(DATASETS)
    for item in args.dataset_id:
        key, _, dataset_id = item.partition("=")
        if key not in DATASETS or not dataset_id:
            raise SystemExit(f"--dataset-id expects KEY=ID with KEY in {list(DATASETS)}: {item!r}")
        dataset_ids[key] = dataset_id
    jobs = [
        (algo, key, steps_for.get(algo, args.steps), seed)
        for key in args.datasets
        for algo in args.algos
        for seed in args.seeds
    ]

    def cost(job: tuple[str, str, int, int]) -> float:
        speedup = BF16_SPEEDUP if precision[job[0]] == "bf16" else 1.0
        return job[2] * COST.get(job[0], 1.0) / speedup

    jobs.sort(key=lambda job: -cost(job))  # longest first
    threads = args.threads if args.threads is not None else (1 if args.jobs > 1 else 0)
    with worker_pool(args.jobs) as pool:
        futures = {
            job: pool.submit(
                run_one,
                job[0],
                job[1],
                dataset_ids[job[1]],
                job[2],
                args.eval_every,
                args.run_dir,
                job[3],
                threads,
                precision[job[0]],
                extra.get(job[0], ()),
            )
            for job in jobs
        }
        results = {job: future.result() for job, future in futures.items()}

    rows = []
    for key in args.datasets:
        dataset = load_dataset(dataset_ids[key])
        behaviour = float(normalized_score(float(dataset.episode_returns().mean()), "Hopper-v5"))
        row = {
            "dataset": key,
            "dataset_id": dataset_ids[key],
            "behaviour": behaviour,
            "transitions": len(dataset),
        }
        for algo in args.algos:
            runs = [results[(algo, key, steps_for.get(algo, args.steps), s)] for s in args.seeds]
            row[algo] = {
                "last": float(np.mean([r["last"] for r in runs])),
                "best": float(np.mean([r["best"] for r in runs])),
                "mean_last10": float(np.mean([r["mean_last10"] for r in runs])),
                "steps": runs[0]["steps"],
                "precision": precision[algo],
                "overrides": list(extra.get(algo, ())),
                "seeds": args.seeds,
                "seconds": float(np.sum([r["seconds"] for r in runs])),
                "curves": [r["curve"] for r in runs],  # (step, score) per seed
            }
        rows.append(row)

    header = (
        "| dataset | behaviour | "
        + " | ".join(
            f"{a}{' bf16' if precision[a] == 'bf16' else ''}"
            f"{''.join(f' {item}' for item in extra.get(a, ()))} last / best / mean last 10 "
            f"({steps_for.get(a, args.steps):,} steps)"
            for a in args.algos
        )
        + " |"
    )
    print(header)
    print("|" + "---|" * (2 + len(args.algos)))
    for row in rows:
        cells = " | ".join(
            f"{row[a]['last']:.1f} / {row[a]['best']:.1f} / {row[a]['mean_last10']:.1f}"
            for a in args.algos
        )
        print(f"| hopper-{row['dataset']} | {row['behaviour']:.1f} | {cells} |")
    report = None if args.no_figures else report_dir(args.out)
    write_result(args, {"rows": rows, "report": None if report is None else str(report)})
    if report is not None:  # after the JSON, so a failing report cannot lose the table
        write_figures(sorted(Path(results[job]["run_dir"]) for job in jobs), report)
    return {"rows": rows, "report": report}


if __name__ == "__main__":
    main()
