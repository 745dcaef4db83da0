"""One-command recipe for D4RL-like datasets (random / medium / medium-replay / expert /
medium-expert) recorded with rlcore's SAC, as D4RL built its MuJoCo datasets.

    python -m rlcore.offline.collect recipe env=Hopper            # same as python -m rlcore.offline.recipe
    python -m rlcore.offline.recipe env=HalfCheetah expert_steps=1000000 dataset_steps=1000000 \\
        eval_every=10000 seed=0 namespace=local version=0 runs_dir=runs/recipe sample=true \\
        noise=0.0 medium_fraction=0.3333 \\
        train.algo.batch_size=256 ...                       # train.* = rlcore.train overrides

Steps (datasets are ``<namespace>/<env>/<kind>-v<version>``, e.g. ``local/hopper/medium-v0``):

1. "expert" run: SAC for ``expert_steps``, evaluated and snapshotted every ``eval_every``
   steps (``checkpoints/agent_step_<n>.pt``). The expert policy is the snapshot with the
   best evaluation return.
2. "medium" policy: the snapshot whose evaluation return is closest to
   ``medium_fraction`` (default one third) of the expert's (D4RL's medium = a policy
   early-stopped at about a third of expert return). On Hopper a third of the expert is
   what a policy that stands still until the time limit earns (~1 per step for 1000
   steps); D4RL's hopper-medium policy hops (its episodes average ~1,400, about 0.44 of
   its expert), and offline learners behave differently on the two. ``medium_fraction=0.45``
   picks a hopping Hopper policy.
3. medium-replay: every transition the training saw until medium level, i.e. the expert
   run's replay buffer cut at the medium step (rlcore runs are deterministic on CPU, so this
   equals the buffer of the run stopped there). Only when the buffer is smaller than
   ``expert_steps`` (its ring overwrote the start) is a second "medium" run trained.
4. random / medium / expert: ``dataset_steps`` steps each of uniform actions / actions
   sampled from the medium / expert SAC policy (its tanh-Gaussian, as D4RL sampled from
   its SAC policies; ``sample=false`` records the deterministic mean action instead, which
   gives datasets with almost no action diversity), plus optional Gaussian ``noise``.
5. medium-expert: medium and expert concatenated (``minari.combine_datasets``).

Every dataset stores ref_min_score (mean return of the random dataset's episodes) and
ref_max_score (the expert's evaluation return). Cost: one SAC training plus 3 x
``dataset_steps`` policy steps; about a day per env on a 2-core CPU with the 1M-step
defaults. ``recipe.json`` in ``runs_dir`` records what was chosen. Re-running the command
after an interruption resumes the training from its last checkpoint (datasets already
written stop it with "already exists": delete them or pick another ``version``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rlcore.commands import print_help_if_asked
from rlcore.envs.make import resolve_env_id
from rlcore.offline.cli import UsageError, bool_arg, number_arg, parse_args, seed_arg
from rlcore.offline.datasets import KINDS, dataset_ids  # noqa: F401 - re-exported
from rlcore.offline.recording import (
    check_new_dataset_id,
    collect,
    rollout,
    summarize,
    write_dataset,
)

KEYS = {
    "env",
    "expert_steps",
    "dataset_steps",
    "eval_every",
    "seed",
    "namespace",
    "version",
    "runs_dir",
    "sample",
    "noise",
    "medium_fraction",
}
USAGE = (
    "usage: python -m rlcore.offline.collect recipe env=<Hopper|HalfCheetah|Walker2d|...> "
    "[expert_steps=1000000] [dataset_steps=1000000] [eval_every=10000] [seed=0] "
    "[namespace=local] [version=0] [runs_dir=runs/recipe/<env>] [sample=true] [noise=0.0] "
    "[medium_fraction=0.3333] "
    "[train.<rlcore.train override>=<value> ...]"
)


def compose_config(overrides: Sequence[str]) -> Any:
    """The composed rlcore run config for command-line style overrides."""
    from hydra import compose, initialize_config_module

    from rlcore.overrides import normalize_overrides

    with initialize_config_module(config_module="rlcore.configs", version_base="1.3"):
        return compose("config", overrides=normalize_overrides(list(overrides)))


def eval_returns(run_dir: str | Path) -> dict[int, float]:
    """Evaluation return at every step that also has an agent snapshot."""
    from rlcore.checkpoint import CHECKPOINT_DIR
    from rlcore.logging import read_csv

    run_dir = Path(run_dir)
    snapshots = {
        int(p.stem.rsplit("_", 1)[1]) for p in (run_dir / CHECKPOINT_DIR).glob("agent_step_*.pt")
    }
    returns = {
        int(row["step"]): row["eval/return"]
        for row in read_csv(run_dir / "eval.csv")
        if "eval/return" in row
    }
    common = {step: value for step, value in returns.items() if step in snapshots}
    if not common:
        raise ValueError(f"{run_dir} has no evaluated agent snapshot (eval.csv + agent_step_*.pt)")
    return common


def snapshot_path(run_dir: str | Path, step: int) -> Path:
    from rlcore.checkpoint import CHECKPOINT_DIR

    return Path(run_dir) / CHECKPOINT_DIR / f"agent_step_{step}.pt"


def pick_expert_and_medium(
    returns: dict[int, float], fraction: float = 1.0 / 3.0
) -> tuple[int, int]:
    """(expert step, medium step): best evaluation (latest on ties), and the evaluation
    closest to ``fraction`` of the expert's return (earliest on ties)."""
    expert = max(returns, key=lambda s: (returns[s], s))
    target = fraction * returns[expert]
    medium = min(returns, key=lambda s: (abs(returns[s] - target), s))
    return expert, medium


def resume_args(run_dir: Path) -> list[str]:
    """``resume=<run_dir>`` when an earlier (interrupted) recipe left a checkpoint there."""
    from rlcore.checkpoint import CHECKPOINT_DIR

    return [f"resume={run_dir}"] if (run_dir / CHECKPOINT_DIR / "latest.pt").is_file() else []


def buffer_holds_start(run_dir: Path) -> bool:
    """Whether the run's checkpointed replay buffer still holds its first env step."""
    from rlcore.checkpoint import load_checkpoint

    loop = load_checkpoint(run_dir)["loop"]
    buffer = loop.get("buffer") or loop["stateful"]["buffer"]  # older checkpoint layout first
    return int(buffer["size"]) >= int(loop["counters"]["step"])


def build_d4rl_like(
    env: str,
    expert_steps: int = 1_000_000,
    dataset_steps: int = 1_000_000,
    eval_every: int = 10_000,
    seed: int = 0,
    namespace: str = "local",
    version: int = 0,
    runs_dir: str | Path | None = None,
    noise: float = 0.0,
    sample: bool = True,
    medium_fraction: float = 1.0 / 3.0,
    train_overrides: Sequence[str] = (),
) -> dict[str, Any]:
    """Train SAC and record the five D4RL-like datasets (see the module docstring)."""
    import minari

    if not 0.0 < medium_fraction <= 1.0:
        raise UsageError(f"medium_fraction must be in (0, 1], got {medium_fraction}")

    from rlcore.train import train

    env_id = resolve_env_id(env)
    ids = dataset_ids(env_id, namespace, version)
    for dataset_id in ids.values():  # fail before hours of training
        check_new_dataset_id(dataset_id)
    runs = Path(runs_dir or f"runs/recipe/{ids['random'].split('/')[-2]}")
    base = [
        "algo=sac",
        f"env={env_id}",
        f"seed={seed}",
        f"eval_every={eval_every}",
        f"checkpoint_every={eval_every}",
        "keep_agent_snapshots=true",
        *train_overrides,
    ]
    expert_dir = runs / "expert"
    train(
        compose_config([*base, f"total_steps={expert_steps}", *resume_args(expert_dir)]), expert_dir
    )
    returns = eval_returns(expert_dir)
    expert_step, medium_step = pick_expert_and_medium(returns, medium_fraction)
    if buffer_holds_start(expert_dir):
        medium_replay = (f"replay:{expert_dir}", medium_step)
    else:  # the ring overwrote the first steps: repeat the training up to medium level
        medium_dir = runs / "medium"
        config = compose_config([*base, f"total_steps={medium_step}", *resume_args(medium_dir)])
        train(config, medium_dir)
        medium_replay = (f"replay:{medium_dir}", None)

    with gym.make(env_id) as rollout_env:
        random_episodes = rollout(rollout_env, None, dataset_steps, seed=seed)
    complete = random_episodes[:-1] or random_episodes  # the last one is cut by the budget
    refs = {
        "ref_min_score": float(np.mean([ep.rewards.sum() for ep in complete])),
        "ref_max_score": float(returns[expert_step]),
    }
    with gym.make(env_id) as spec_env:
        write_dataset(
            ids["random"],
            random_episodes,
            spec_env,
            "uniform random",
            f"uniform random actions on {env_id}, seed {seed} (rlcore recipe)",
            **refs,
        )
    summaries = {"random": {"dataset_id": ids["random"], **summarize(random_episodes)}}
    sources = {
        "medium": (str(snapshot_path(expert_dir, medium_step)), dataset_steps),
        "expert": (str(snapshot_path(expert_dir, expert_step)), dataset_steps),
        "medium-replay": medium_replay,
    }
    for offset, (kind, (policy, steps)) in enumerate(sources.items(), start=1):
        summaries[kind] = collect(
            env_id,
            policy,
            ids[kind],
            steps=steps,
            seed=seed + offset,
            noise=0.0 if kind == "medium-replay" else noise,
            sample=sample and kind != "medium-replay",
            **refs,
        )
    combined = minari.combine_datasets(
        [minari.load_dataset(ids["medium"]), minari.load_dataset(ids["expert"])],
        ids["medium-expert"],
    )
    combined.storage.update_metadata(refs)
    summaries["medium-expert"] = {
        "dataset_id": ids["medium-expert"],
        "episodes": combined.total_episodes,
        "steps": combined.total_steps,
    }
    report = {
        "env_id": env_id,
        "expert_step": expert_step,
        "expert_return": returns[expert_step],
        "medium_step": medium_step,
        "medium_return": returns[medium_step],
        "medium_fraction": medium_fraction,
        "sample": sample,
        "noise": noise,
        "eval_returns": returns,
        **refs,
        "datasets": summaries,
    }
    runs.mkdir(parents=True, exist_ok=True)
    (runs / "recipe.json").write_text(json.dumps(report, indent=2, default=str))
    return report


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command line for ``build_d4rl_like``; ``train.<key>=<value>`` goes to rlcore.train."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if print_help_if_asked(argv, f"{__doc__}\n{USAGE}"):
        return {}
    train_overrides = [a.removeprefix("train.") for a in argv if a.startswith("train.")]
    try:
        args = parse_args([a for a in argv if not a.startswith("train.")], KEYS, ("env",))
        report = build_d4rl_like(
            env=args["env"],
            expert_steps=number_arg(args, "expert_steps", int, 1_000_000),
            dataset_steps=number_arg(args, "dataset_steps", int, 1_000_000),
            eval_every=number_arg(args, "eval_every", int, 10_000),
            seed=seed_arg(args),
            namespace=args.get("namespace", "local"),
            version=number_arg(args, "version", int, 0),
            runs_dir=args.get("runs_dir"),
            noise=number_arg(args, "noise", float, 0.0),
            sample=bool_arg(args, "sample", True),
            medium_fraction=number_arg(args, "medium_fraction", float, 1.0 / 3.0),
            train_overrides=train_overrides,
        )
    except UsageError as error:
        print(f"error: {error}\n{USAGE}", file=sys.stderr)
        raise SystemExit(2) from None
    except (FileNotFoundError, ValueError) as error:  # unknown env, bad override, dataset
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    for kind, summary in report["datasets"].items():
        print(f"{kind:>14}: {summary}")
    print(
        f"expert return {report['expert_return']:.1f} (step {report['expert_step']}), "
        f"medium return {report['medium_return']:.1f} (step {report['medium_step']})"
    )
    return report


if __name__ == "__main__":
    main()
