"""RIQL's claim on corrupted data: RIQL vs IQL, TD3+BC (and CQL) trained on one locomotion
dataset, clean and under each of RIQL's eight corruptions (random and adversarial;
observations, actions, rewards, dynamics), several seeds: the final D4RL-normalised score
of every (algorithm, corruption) and its drop from the algorithm's clean score.

    python -m rlcore.offline.collect env=Hopper policy=benchmarks/assets/hopper_sac_medium.pt \
        steps=100000 sample=true dataset_id=local/hopper/medium-mb-v0     # the dataset first
    python -m rlcore.benchmarks.corruption --steps 10000 --seeds 0 1 2 --jobs 2
    python -m rlcore.benchmarks.corruption --settings clean random_reward --algos riql iql
    python -m rlcore.benchmarks.corruption --algos cql --merge benchmarks/results/corruption.json

The corruptions follow RIQL's protocol (``rlcore.offline.corruption``): a ``--rate``
fraction of the rows (0.3), ``--scale`` 1 (the paper's defaults), drawn from
``--corruption-seed`` (the same corrupted dataset for every training seed, as the
reference's fixed corruption seed). An adversarial attack on observations, actions or
dynamics needs a critic trained on the clean data: ``--critic <run dir>``, or by default
this grid's clean IQL run of the first seed, trained before any adversarial run starts.
The grid trains on Hopper (``--dataset`` must be a Hopper dataset): RIQL with the
reference's Hopper settings (``RIQL_config.py``: Huber sigma, quantile, number of critics
per corruption; ``RIQL_SETTINGS`` keeps its table for its three bodies), the baselines with
CORL's Hopper settings (``configs/experiment/<algo>_hopper_medium.yaml``); ``--set
ALGO:KEY=VALUE`` adds an override to one algorithm's runs (e.g. ``cql:algo.compile=true``),
recorded in each cell of the JSON.

Every run is a run directory under ``--run-dir`` (``<algo>_<setting>_seed<seed>``;
resumed when interrupted, read back when finished). Prints the table, writes JSON
(``--out``), then the report of the runs (``rlcore.report``) beside it. ``--merge FILE``
adds this grid's cells to FILE's table (a grid of the same data, budget and corruptions
run apart, e.g. another algorithm's column on another machine) and writes the merged
table to ``--out``, the drops recomputed from the merged clean row.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from rlcore.benchmarks.runs import (
    NORMALIZED,
    add_grid_arguments,
    check_configs,
    cpu_info,
    overrides_by_name,
    report_dir,
    run_method,
    worker_pool,
    write_figures,
    write_result,
)

KINDS = ("obs", "action", "reward", "dynamics")
SETTINGS = ("clean", *(f"{mode}_{kind}" for mode in ("random", "adversarial") for kind in KINDS))
# the settings whose corruption attacks a critic trained on the clean data
ADVERSARIAL_ATTACKS = ("adversarial_obs", "adversarial_action", "adversarial_dynamics")
ALGOS = ("riql", "iql", "td3_bc", "cql")
BASELINE_EXPERIMENT = {"iql": "iql_hopper_medium", "td3_bc": "td3_bc_hopper_medium",
                       "cql": "cql_hopper_medium"}  # fmt: skip
# RIQL_config.py (the reference's per-task settings): (huber sigma, quantile, critics) per
# mode_kind and body; clean data runs the reference's defaults (1.0, 0.25, 5).
RIQL_SETTINGS: dict[str, dict[str, tuple[float, float, int]]] = {
    "random_obs": {"halfcheetah": (0.1, 0.1, 5), "walker2d": (0.1, 0.25, 5),
                   "hopper": (0.1, 0.25, 3)},
    "random_action": {"halfcheetah": (0.5, 0.25, 3), "walker2d": (0.5, 0.1, 5),
                      "hopper": (0.1, 0.25, 5)},
    "random_reward": {"halfcheetah": (3.0, 0.25, 5), "walker2d": (3.0, 0.1, 5),
                      "hopper": (1.0, 0.25, 3)},
    "random_dynamics": {"halfcheetah": (3.0, 0.25, 5), "walker2d": (1.0, 0.25, 3),
                        "hopper": (1.0, 0.5, 5)},
    "adversarial_obs": {"halfcheetah": (0.1, 0.1, 5), "walker2d": (1.0, 0.25, 5),
                        "hopper": (1.0, 0.25, 5)},
    "adversarial_action": {"halfcheetah": (1.0, 0.1, 5), "walker2d": (1.0, 0.1, 5),
                           "hopper": (1.0, 0.25, 5)},
    "adversarial_reward": {"halfcheetah": (1.0, 0.1, 5), "walker2d": (3.0, 0.1, 5),
                           "hopper": (0.1, 0.25, 5)},
    "adversarial_dynamics": {"halfcheetah": (1.0, 0.1, 5), "walker2d": (1.0, 0.25, 5),
                             "hopper": (1.0, 0.5, 5)},
}  # fmt: skip
COST = {"riql": 1.3, "iql": 1.0, "td3_bc": 0.7, "cql": 20.0}  # per gradient step, 1 thread


def riql_overrides(setting: str, body: str) -> list[str]:
    """The reference's RIQL settings for ``setting`` on ``body`` (its defaults on clean
    data or an untabled body)."""
    sigma, quantile, critics = RIQL_SETTINGS.get(setting, {}).get(body, (1.0, 0.25, 5))
    return [f"algo.huber_sigma={sigma}", f"algo.quantile={quantile}",
            f"algo.num_critics={critics}"]  # fmt: skip


def corruption_overrides(
    setting: str, rate: float, scale: float, seed: int, critic: Path | None
) -> list[str]:
    """``corruption.*`` for one setting ("clean": none)."""
    if setting == "clean":
        return []
    mode, _, kind = setting.partition("_")
    out = [f"corruption.kind={kind}", f"corruption.mode={mode}", f"corruption.rate={rate}",
           f"corruption.scale={scale}", f"corruption.seed={seed}"]  # fmt: skip
    if mode == "adversarial" and kind != "reward":
        if critic is None:
            raise ValueError(f"{setting} needs a critic trained on the clean data")
        out.append(f"corruption.critic={critic}")
    return out


def job_overrides(
    algo: str, setting: str, args: argparse.Namespace, critic: Path | None, extra: list[str]
) -> list[str]:
    """Every override of one (algorithm, setting) run, seed excluded; ``extra`` (the
    algorithm's ``--set`` items) last."""
    if algo == "riql":
        base = ["algo=riql", "env=hopper", *riql_overrides(setting, "hopper")]
    else:
        base = [f"+experiment={BASELINE_EXPERIMENT[algo]}"]  # Hopper
    return [
        *base,
        f"dataset={args.dataset}",
        f"total_steps={args.steps}",
        f"eval_every={min(args.eval_every, args.steps)}",
        f"checkpoint_every={min(args.checkpoint_every, args.steps)}",
        *corruption_overrides(setting, args.rate, args.scale, args.corruption_seed, critic),
        *extra,
    ]


def final_score(result: dict[str, Any]) -> float:
    """The normalised score of a run's last evaluation."""
    return float(result["rows"][-1][NORMALIZED])


def table_rows(
    results: dict[tuple[str, str, int], dict[str, Any]],
    algos: list[str],
    settings: list[str],
    seeds: list[int],
) -> list[dict[str, Any]]:
    """One row per setting: each algorithm's seeds' final scores, their mean and std, and
    the mean's drop from the algorithm's clean mean (when clean ran)."""
    clean = {
        algo: float(np.mean([final_score(results[(algo, "clean", s)]) for s in seeds]))
        for algo in algos
        if "clean" in settings
    }
    rows = []
    for setting in settings:
        row: dict[str, Any] = {"setting": setting}
        for algo in algos:
            scores = [final_score(results[(algo, setting, s)]) for s in seeds]
            mean = float(np.mean(scores))
            row[algo] = {
                "scores": scores,
                "mean": mean,
                "std": float(np.std(scores)),
                "drop": None if algo not in clean else clean[algo] - mean,
                "seconds": float(sum(results[(algo, setting, s)]["seconds"] for s in seeds)),
            }
        rows.append(row)
    return rows


def mean_drops(rows: list[dict[str, Any]], algos: list[str]) -> dict[str, float]:
    """Each algorithm's drop from clean averaged over the corrupted settings it ran (RIQL's
    claim: the smallest)."""
    drops = {
        algo: [row[algo]["drop"] for row in rows if row["setting"] != "clean"
               and algo in row and row[algo]["drop"] is not None]
        for algo in algos
    }  # fmt: skip
    return {algo: float(np.mean(values)) for algo, values in drops.items() if values}


MERGE_MATCH = ("dataset", "steps", "eval_every", "seeds", "rate", "scale", "corruption_seed")


def check_mergeable(path: Path, old: dict[str, Any], args: argparse.Namespace) -> None:
    """Stop, before any training, unless this grid and ``old`` (the result JSON at
    ``path``) agree on the data, the budget and the corruptions (``MERGE_MATCH``; the
    critic, when this grid attacks one)."""
    differ = [k for k in MERGE_MATCH if old["args"].get(k) != getattr(args, k)]
    critic = str(args.critic or args.run_dir / f"iql_clean_seed{args.seeds[0]}")
    attacks = any(setting in ADVERSARIAL_ATTACKS for setting in args.settings)
    if attacks and old.get("critic") != critic:
        differ.append(f"critic ({old.get('critic')} there, {critic} here)")
    if differ:
        raise SystemExit(f"--merge {path}: the grids differ in {', '.join(differ)}")


def merge_rows(
    old: dict[str, Any], rows: list[dict[str, Any]], args: argparse.Namespace
) -> tuple[list[dict[str, Any]], list[str]]:
    """This grid's cells added to ``old``'s table (``check_mergeable`` passed) setting by
    setting, the drops recomputed from the merged clean row; the rows and algorithms."""
    merged = {row["setting"]: dict(row) for row in old["rows"]}
    for row in rows:
        merged.setdefault(row["setting"], {"setting": row["setting"]}).update(row)
    # every algorithm of either table (a merged file's args name only its last grid's)
    algos = [algo for algo in ALGOS if any(algo in row for row in merged.values())]
    clean = merged.get("clean", {})
    for row in merged.values():
        for algo in algos:
            if algo in row:
                base = clean.get(algo)
                row[algo]["drop"] = None if base is None else base["mean"] - row[algo]["mean"]
    order = [s for s in SETTINGS if s in merged]
    return [merged[s] for s in order], algos


def print_table(
    rows: list[dict[str, Any]], algos: list[str], drops: dict[str, float],
    common: dict[str, float] | None = None,
) -> None:  # fmt: skip
    """The markdown table: mean +- std (drop from clean) per cell; the mean drops, and
    (a merged table) the mean drops over the settings every algorithm ran."""
    print("| setting | " + " | ".join(algos) + " |")
    print("|---|" + "---|" * len(algos))
    for row in rows:
        cells = []
        for algo in algos:
            if algo not in row:  # a merged table: not run on this setting
                cells.append("-")
                continue
            cell = row[algo]
            drop = "" if cell["drop"] is None or row["setting"] == "clean" else (
                f" ({-cell['drop']:+.1f})")  # fmt: skip
            cells.append(f"{cell['mean']:.1f} +- {cell['std']:.1f}{drop}")
        print(f"| {row['setting']} | " + " | ".join(cells) + " |")
    lines = [("mean drop from clean", drops), ("mean drop, settings all ran", common or {})]
    for label, values in lines:
        if values:
            print(f"| {label} | " + " | ".join(
                f"{values[a]:.1f}" if a in values else "-" for a in algos) + " |")  # fmt: skip


def check_inputs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What would fail a run hours into the grid fails the command line instead: the
    corruption's numbers, the dataset, the named critic."""
    from rlcore.checkpoint import load_checkpoint
    from rlcore.offline.corruption import Corruption
    from rlcore.offline.datasets import DatasetError, load_dataset

    try:
        Corruption("obs", rate=args.rate, scale=args.scale, seed=args.corruption_seed)
    except ValueError as error:
        parser.error(str(error))
    try:
        load_dataset(args.dataset)
    except (FileNotFoundError, DatasetError) as error:
        parser.error(f"--dataset {args.dataset}: {error}")
    if args.critic is not None and any(s in ADVERSARIAL_ATTACKS for s in args.settings):
        try:
            load_checkpoint(args.critic)
        except (FileNotFoundError, ValueError) as error:
            parser.error(f"--critic {args.critic}: {error}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the grid, print the table, write the JSON and the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_grid_arguments(parser, "corruption", steps=10_000)
    parser.add_argument("--checkpoint-every", type=int, default=5_000)
    parser.add_argument("--algos", nargs="+", default=["riql", "iql", "td3_bc"], choices=ALGOS)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    parser.add_argument("--dataset", default="local/hopper/medium-mb-v0")
    parser.add_argument("--rate", type=float, default=0.3, help="fraction of rows corrupted")
    parser.add_argument("--scale", type=float, default=1.0, help="RIQL's corruption range")
    parser.add_argument("--corruption-seed", type=int, default=0)
    parser.add_argument(
        "--critic", type=Path, default=None, help="the clean-data run whose critic the "
        "adversarial attacks use (default: this grid's clean IQL run of the first seed)",
    )  # fmt: skip
    parser.add_argument(
        "--merge", type=Path, default=None, help="a result JSON of this benchmark (same "
        "dataset, budget and corruptions) whose table this grid's cells join; the merged "
        "table goes to --out, this grid's report to <out stem>_<algos>_report",
    )  # fmt: skip
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="ALGO:KEY=VALUE",
        help="an override for one algorithm's runs (the JSON records it)",
    )
    args = parser.parse_args(argv)
    check_inputs(parser, args)
    # "iql" too: the attacked critic is an IQL run even when IQL is not tabled
    extra = overrides_by_name(args.set, ALGOS, [*args.algos, "iql"], "ALGO")

    if args.merge is not None:  # read before anything is written (--out may be that file)
        old = json.loads(args.merge.read_text())
        check_mergeable(args.merge, old, args)
    adversarial = [s for s in args.settings if s in ADVERSARIAL_ATTACKS]
    critic_job = ("iql", "clean", args.seeds[0])
    critic = args.critic or (args.run_dir / f"iql_clean_seed{args.seeds[0]}")
    jobs = [(a, s, seed) for s in args.settings for a in args.algos for seed in args.seeds]
    check_configs(parser, {f"{algo}_{setting}": job_overrides(algo, setting, args, critic,
                                                               extra[algo])
                           for algo, setting, _ in [*jobs, critic_job]})  # fmt: skip
    first = [job for job in jobs if job[1] not in adversarial]
    later = [job for job in jobs if job[1] in adversarial]
    if adversarial and args.critic is None and critic_job not in first:
        first.append(critic_job)  # trained as the attacked critic, not tabled
    first.sort(key=lambda job: (job != critic_job, -COST[job[0]]))  # the critic first
    later.sort(key=lambda job: -COST[job[0]])

    def submit(pool: Any, job: tuple[str, str, int]) -> Any:
        algo, setting, seed = job
        overrides = job_overrides(algo, setting, args, critic, extra[algo])
        return pool.submit(run_method, f"{algo}_{setting}", seed, overrides, args.run_dir,
                           args.threads)  # fmt: skip

    with worker_pool(args.jobs) as pool:
        futures = {job: submit(pool, job) for job in first}
        if later:
            if args.critic is None:
                futures[critic_job].result()  # the attacked critic exists before the attacks
            futures.update({job: submit(pool, job) for job in later})
        results = {job: future.result() for job, future in futures.items()}

    rows = table_rows(results, args.algos, args.settings, args.seeds)
    for row in rows:
        for algo in args.algos:
            row[algo]["overrides"] = extra[algo]
    algos, merged_from = args.algos, None
    if args.merge is not None:
        rows, algos = merge_rows(old, rows, args)
        merged_from = {"file": str(args.merge), "args": old["args"], "report": old.get("report")}
    drops = mean_drops(rows, algos)
    common = None
    if args.merge is not None:
        common = mean_drops([row for row in rows if all(a in row for a in algos)], algos)
    print_table(rows, algos, drops, common)
    report = None if args.no_figures else report_dir(args.out)
    if report is not None and args.merge is not None:  # the merged file's report stays
        report = report.with_name(f"{args.out.stem}_{'_'.join(args.algos)}_report")
    write_result(args, {"rows": rows, "mean_drop": drops, "critic": str(critic),
                        "cpu": cpu_info(), "report": None if report is None else str(report),
                        "mean_drop_common": common, "merged_from": merged_from})  # fmt: skip
    if report is not None:
        write_figures(sorted(Path(results[job]["run_dir"]) for job in jobs), report)
    return {"rows": rows, "mean_drop": drops, "mean_drop_common": common}


if __name__ == "__main__":
    main()
