"""Constrained RL on SafetyHopperVelocity-v1 (cost = 1[x-velocity > 0.7402] per step), cost
limit 25: unconstrained SAC, SAC-Lagrangian, PPO-Lagrangian and CPO side by side with
OmniSafe's published numbers (``--part online``), and FISOR against behaviour cloning on a
cost-labelled dataset (``--part offline``).

    python -m rlcore.benchmarks.safe --on-policy-steps 1000000 --off-policy-steps 200000 \\
        --seeds 0 1 --jobs 2
    python -m rlcore.benchmarks.safe --part offline --offline-steps 50000 --seeds 0 1 --jobs 2

Each method and seed is one rlcore run (``algo=<method> env=SafetyHopperVelocity
algo.cost_limit=25``), resumed from its checkpoint when the benchmark was interrupted and
read back when finished. Budgets: ``--on-policy-steps`` for PPO-Lagrangian and CPO,
``--off-policy-steps`` for SAC and SAC-Lagrangian (OmniSafe: 1e7 and 1e6). SAC-Lagrangian's
lambda schedule is OmniSafe's compressed to the budget: lambda starts moving after the same
fraction of the run (OmniSafe: 200k of 1M steps) with its learning rate scaled up by the
same factor (1e-5 x 1M / budget), so lambda can travel as far as in OmniSafe's run; the
JSON records these overrides. PPO-Lagrangian's multiplier gets the same treatment: OmniSafe
takes one step of lr 0.035 per 20k-step rollout, 500 steps in its 1e7; at a smaller budget
the rate is scaled by 1e7 / budget (a 500k run: 25 steps of lr 0.7).

Per method the table gives the last evaluation (deterministic policy, ``--eval-episodes``
episodes) and the training episodes of the run's last 10% of steps (the stochastic policy
the constraint is imposed on; OmniSafe reports training episodes), as mean +- std over
seeds, next to OmniSafe's reward / cost. The claim checked: the Lagrangian methods (and CPO)
end with mean episode cost <= the limit while keeping most of the return. The JSON records
every seed's curves and the CPU (lscpu model and flags).

Offline part: the dataset ``--dataset`` (recorded first when missing, by
``rlcore.offline.safe_recipe`` from ``--sources``: uniform random actions, the committed Hopper SAC
expert and medium policies, whose hopping costs hundreds per episode, and the committed
CPO policy of this benchmark's online part (safe when deterministic, near the limit when
sampled); see ``benchmarks/assets/README.md``). Methods, all
``algo=fisor`` runs of ``--offline-steps`` gradient steps: FISOR, BC (the same diffusion
actor, every weight 1) and BC-Safe (BC on the episodes with cost <= the limit). Reported
as DSRL normalises: reward (R - min) / (max - min) over the dataset's episode returns, cost
C / limit, from the last evaluation (FISOR's own action selection). Claims checked: FISOR
is safe (normalised cost <= 1) and its reward is above BC-Safe's.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from rlcore.benchmarks.runs import (
    cpu_info,
    overrides_by_name,
    run_method,
    worker_pool,
    write_agent_snapshot,
    write_result,
)

RESULTS = Path(__file__).resolve().parent / "results"
ENV = "SafetyHopperVelocity"
METHODS = ("sac", "sac_lag", "ppo_lag", "cpo")
ON_POLICY = ("ppo_lag", "cpo")
# OmniSafe's published (reward, cost) on SafetyHopperVelocity-v1 at cost limit 25 (its
# benchmark tables: PPOLag after 1e7 steps, SACLag and SAC after 1e6); None: not published
OMNISAFE: dict[str, tuple[float, float] | None] = {
    "sac": (3537.70, 975.23),
    "sac_lag": (963.49, 20.23),
    "ppo_lag": (961.92, 13.96),
    "cpo": None,
}
OMNISAFE_SAC_LAG = {"budget": 1_000_000, "delay_updates": 190_000, "lambda_lr": 1e-5}
# PPOLag: one multiplier step per 20k-step rollout, 500 of them in OmniSafe's 1e7 steps
OMNISAFE_PPO_LAG = {"budget": 10_000_000, "lambda_lr": 0.035}


# offline methods: algo=fisor overrides; the BC baselines act with one sample of their
# diffusion actor (no FISOR selection among samples by Q_h), as a behaviour clone does
OFFLINE_METHODS: dict[str, list[str]] = {
    "fisor": [],
    "bc": ["algo.actor_objective=bc", "algo.num_samples=1"],
    "bc_safe": ["algo.actor_objective=bc", "algo.safe_episodes_only=true", "algo.num_samples=1"],
}
ASSETS = Path(__file__).resolve().parent / "assets"
DEFAULT_SOURCES = (
    f"random:50000,{ASSETS / 'hopper_sac_expert.pt'}:50000:0.1,"
    f"{ASSETS / 'hopper_sac_medium.pt'}:50000:0.1,{ASSETS / 'safe_hopper_cpo.pt'}:100000"
)


def method_overrides(method: str, args: argparse.Namespace) -> list[str]:
    """rlcore.train overrides of one run."""
    steps = args.on_policy_steps if method in ON_POLICY else args.off_policy_steps
    out = [f"algo={method}", "env=gym", f"env.id={ENV}-v1", f"total_steps={steps}",
           f"eval_every={max(steps // 10, 1)}", f"eval_episodes={args.eval_episodes}",
           "checkpoint_every_s=120"]  # fmt: skip
    if method != "sac":
        out.append(f"algo.cost_limit={args.cost_limit}")
    if method == "sac":
        out.append("algo.learning_starts=10000")  # as SAC-Lagrangian (OmniSafe)
    if method == "sac_lag":
        scale = OMNISAFE_SAC_LAG["budget"] / steps
        delay = int(OMNISAFE_SAC_LAG["delay_updates"] / scale)
        out += [f"algo.multiplier_delay={delay}",
                f"algo.lambda_lr={OMNISAFE_SAC_LAG['lambda_lr'] * scale:.3g}"]  # fmt: skip
    if method == "ppo_lag":
        scale = OMNISAFE_PPO_LAG["budget"] / steps
        out.append(f"algo.lambda_lr={OMNISAFE_PPO_LAG['lambda_lr'] * scale:.3g}")
    return out


def summary(values: list[float]) -> dict[str, float]:
    array = np.asarray(values, dtype=np.float64)
    return {"mean": float(array.mean()), "std": float(array.std()),
            "min": float(array.min()), "max": float(array.max())}  # fmt: skip


def late_training_episodes(run_dir: Path, total_steps: int) -> dict[str, float]:
    """Mean return and cost of the training episodes that ended in the last 10% of steps."""
    from rlcore.logging import read_csv

    rows = [r for r in read_csv(run_dir / "train.csv") if "train/episode_cost" in r]
    late = [r for r in rows if r["step"] > 0.9 * total_steps] or rows[-10:]
    return {
        "return": float(np.mean([r["train/episode_return"] for r in late])),
        "cost": float(np.mean([r["train/episode_cost"] for r in late])),
        "episodes": len(late),
    }


def _cell(stats: dict[str, float]) -> str:
    return f"{stats['mean']:.0f} +- {stats['std']:.0f}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("online", "offline"), default="online")
    parser.add_argument("--methods", nargs="+", default=None,
                        help=f"online: {list(METHODS)}; offline: {list(OFFLINE_METHODS)}")  # fmt: skip
    parser.add_argument("--dataset", default="local/safetyhoppervelocity/mixed-v0")
    parser.add_argument(
        "--sources", default=DEFAULT_SOURCES, help="rlcore.offline.safe_recipe sources"
    )
    parser.add_argument("--offline-steps", type=int, default=50_000)
    parser.add_argument("--offline-batch", type=int, default=512, help="algo.batch_size")
    parser.add_argument("--on-policy-steps", type=int, default=1_000_000)
    parser.add_argument("--off-policy-steps", type=int, default=200_000)
    parser.add_argument("--cost-limit", type=float, default=25.0)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--set", nargs="*", default=[], metavar="METHOD:KEY=VALUE")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--run-dir", type=Path, default=Path("runs/bench/safe"))
    parser.add_argument(
        "--out", type=Path, default=None, help="default results/safe[_offline].json"
    )
    parser.add_argument(
        "--cpo-asset", type=Path, default=None,
        help="write the first seed's CPO policy here as an agent-only snapshot (the safe "
             "behaviour policy of the offline part's dataset: benchmarks/assets/safe_hopper_cpo.pt)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = RESULTS / ("safe.json" if args.part == "online" else "safe_offline.json")
    if args.part == "offline":
        return offline_main(args)
    args.methods = args.methods or list(METHODS)
    unknown = sorted(set(args.methods) - set(METHODS))
    if unknown:
        raise SystemExit(f"unknown online method(s) {unknown}; choose from {list(METHODS)}")
    if args.cpo_asset is not None and "cpo" not in args.methods:
        raise SystemExit("--cpo-asset needs cpo among --methods")
    extra = overrides_by_name(args.set, list(METHODS), args.methods, "METHOD")
    overrides = {m: [*method_overrides(m, args), *extra[m]] for m in args.methods}
    with worker_pool(args.jobs) as pool:
        futures = {
            (m, s): pool.submit(run_method, m, s, overrides[m], args.run_dir, args.threads)
            for m in args.methods
            for s in args.seeds
        }
        results = {key: future.result() for key, future in futures.items()}
    if args.cpo_asset is not None:
        cpo = results[("cpo", args.seeds[0])]
        source = {"seed": args.seeds[0], "overrides": overrides["cpo"],
                  "eval_return": cpo["rows"][-1]["eval/return"],
                  "eval_cost": cpo["rows"][-1]["eval/cost"]}  # fmt: skip
        path = write_agent_snapshot(
            Path(cpo["run_dir"]), ("nets", "updates"), args.cpo_asset, source
        )
        print(f"wrote {path}")

    table: dict[str, dict[str, Any]] = {}
    for m in args.methods:
        steps = args.on_policy_steps if m in ON_POLICY else args.off_policy_steps
        seeds = []
        for s in args.seeds:
            result = results[(m, s)]
            rows = result["rows"]
            seeds.append({
                "seed": s,
                "eval_return": float(rows[-1]["eval/return"]),
                "eval_cost": float(rows[-1]["eval/cost"]),
                "train": late_training_episodes(Path(result["run_dir"]), steps),
                "curve": [(int(r["step"]), float(r["eval/return"]), float(r["eval/cost"]))
                          for r in rows],
                "seconds": result["seconds"],
            })  # fmt: skip
        table[m] = {
            "steps": steps,
            "eval_return": summary([r["eval_return"] for r in seeds]),
            "eval_cost": summary([r["eval_cost"] for r in seeds]),
            "train_return": summary([r["train"]["return"] for r in seeds]),
            "train_cost": summary([r["train"]["cost"] for r in seeds]),
            "omnisafe": OMNISAFE[m],
            "seeds": seeds,
            "overrides": overrides[m],
        }
    print(f"{ENV}-v1, cost limit {args.cost_limit:g}, {len(args.seeds)} seeds (mean +- std)")
    print("| method | env steps | eval return | eval cost | train return (last 10%) | "
          "train cost (last 10%) | OmniSafe reward / cost |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for m, row in table.items():
        ref = row["omnisafe"]
        ref_text = "-" if ref is None else f"{ref[0]:.0f} / {ref[1]:.1f}"
        print(f"| {m} | {row['steps']:,} | {_cell(row['eval_return'])} | "
              f"{_cell(row['eval_cost'])} | {_cell(row['train_return'])} | "
              f"{_cell(row['train_cost'])} | {ref_text} |")  # fmt: skip
    verdicts = claims(table, args.cost_limit)
    for line in verdicts:
        print(f"- {line}")
    payload = {"env": f"{ENV}-v1", "cost_limit": args.cost_limit, "table": table,
               "claims": verdicts, "cpu": cpu_info()}  # fmt: skip
    write_result(args, payload)
    return payload


def offline_main(args: argparse.Namespace) -> dict:
    """FISOR, BC and BC-Safe on the cost-labelled dataset (recorded when missing)."""
    from rlcore.offline.datasets import DatasetNotAvailableError, load_dataset
    from rlcore.offline.safe_recipe import normalized_cost, normalized_reward, parse_sources, record

    methods = args.methods or list(OFFLINE_METHODS)
    unknown = sorted(set(methods) - set(OFFLINE_METHODS))
    if unknown:
        raise SystemExit(
            f"unknown offline method(s) {unknown}; choose from {list(OFFLINE_METHODS)}"
        )
    try:
        dataset = load_dataset(args.dataset)
    except DatasetNotAvailableError:
        print(f"recording {args.dataset} from {args.sources}", flush=True)
        record(ENV, args.dataset, parse_sources(args.sources), args.cost_limit)
        dataset = load_dataset(args.dataset)
    returns, costs = dataset.episode_returns(), dataset.episode_costs()
    ref_min, ref_max = float(dataset.ref_min_score), float(dataset.ref_max_score)
    safe = costs <= args.cost_limit
    data_row = {
        "episodes": len(returns), "transitions": len(dataset),
        "reward": normalized_reward(float(returns.mean()), ref_min, ref_max),
        "cost": normalized_cost(float(costs.mean()), args.cost_limit),
        "safe_fraction": float(safe.mean()),
        "safe_episodes_reward": normalized_reward(float(returns[safe].mean()), ref_min, ref_max),
    }  # fmt: skip
    extra = overrides_by_name(args.set, list(OFFLINE_METHODS), methods, "METHOD")
    base = ["algo=fisor", "env=gym", f"env.id={ENV}-v1", f"dataset={args.dataset}",
            f"total_steps={args.offline_steps}", f"algo.batch_size={args.offline_batch}",
            f"algo.cost_limit={args.cost_limit}", f"eval_every={max(args.offline_steps // 2, 1)}",
            f"eval_episodes={args.eval_episodes}", "checkpoint_every_s=120"]  # fmt: skip
    overrides = {m: [*base, *OFFLINE_METHODS[m], *extra[m]] for m in methods}
    with worker_pool(args.jobs) as pool:
        futures = {
            (m, s): pool.submit(
                run_method, m, s, overrides[m], args.run_dir / "offline", args.threads
            )
            for m in methods
            for s in args.seeds
        }
        results = {key: future.result() for key, future in futures.items()}
    table: dict[str, dict[str, Any]] = {}
    for m in methods:
        seeds = []
        for s in args.seeds:
            last = results[(m, s)]["rows"][-1]
            seeds.append({"seed": s, "return": float(last["eval/return"]),
                          "cost": float(last["eval/cost"]),
                          "reward": normalized_reward(float(last["eval/return"]), ref_min, ref_max),
                          "normalized_cost": normalized_cost(float(last["eval/cost"]), args.cost_limit),
                          "seconds": results[(m, s)]["seconds"]})  # fmt: skip
        table[m] = {
            "reward": summary([r["reward"] for r in seeds]),
            "normalized_cost": summary([r["normalized_cost"] for r in seeds]),
            "seeds": seeds, "overrides": overrides[m],
        }  # fmt: skip
    print(f"{args.dataset}: {data_row['episodes']} episodes, {data_row['transitions']:,} "
          f"transitions, normalised reward {data_row['reward']:.2f}, cost "
          f"{data_row['cost']:.2f}, safe episodes {data_row['safe_fraction']:.0%} (their "
          f"reward {data_row['safe_episodes_reward']:.2f}); {args.offline_steps:,} gradient "
          f"steps, {len(args.seeds)} seeds (mean +- std)")  # fmt: skip
    print("| method | normalised reward | normalised cost |\n|---|---|---|")
    for m, row in table.items():
        r, c = row["reward"], row["normalized_cost"]
        print(f"| {m} | {r['mean']:.2f} +- {r['std']:.2f} | {c['mean']:.2f} +- {c['std']:.2f} |")
    verdicts = []
    if "fisor" in table:
        cost = table["fisor"]["normalized_cost"]["mean"]
        verdicts.append(f"FISOR normalised cost {cost:.2f} <= 1: "
                        f"{'holds' if cost <= 1 else 'does not hold'}")  # fmt: skip
        if "bc_safe" in table:
            ours, theirs = table["fisor"]["reward"]["mean"], table["bc_safe"]["reward"]["mean"]
            verdicts.append(f"FISOR reward {ours:.2f} > BC-Safe's {theirs:.2f}: "
                            f"{'holds' if ours > theirs else 'does not hold'}")  # fmt: skip
    for line in verdicts:
        print(f"- {line}")
    payload = {"env": f"{ENV}-v1", "cost_limit": args.cost_limit, "dataset": data_row,
               "table": table, "claims": verdicts, "cpu": cpu_info()}  # fmt: skip
    write_result(args, payload)
    return payload


def claims(table: dict[str, dict[str, Any]], cost_limit: float) -> list[str]:
    """Each constrained method: mean training episode cost within the limit, and its
    return as a fraction of unconstrained SAC's (when SAC ran)."""
    out = []
    reference = table.get("sac", {}).get("train_return", {}).get("mean")
    for m in ("sac_lag", "ppo_lag", "cpo"):
        if m not in table:
            continue
        cost, ret = table[m]["train_cost"]["mean"], table[m]["train_return"]["mean"]
        verdict = "holds" if cost <= cost_limit else "does not hold"
        share = (
            f"; return {ret:.0f} = {ret / reference:.0%} of unconstrained SAC's"
            if reference
            else ""
        )
        out.append(f"{m}: mean episode cost {cost:.1f} <= {cost_limit:g}: {verdict}{share}")
    return out


if __name__ == "__main__":
    main()
