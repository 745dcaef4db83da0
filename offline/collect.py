"""Record a Minari dataset from a policy, or export a training run's replay buffer.

    python -m rlcore.offline.collect env=Hopper policy=random steps=10000 dataset_id=local/hopper/random-v0
    python -m rlcore.offline.collect env=Hopper policy=runs/sac/hopper/<time> steps=1000000 \\
        dataset_id=local/hopper/medium-v0 [seed=0] [sample=true] [noise=0.1]
    python -m rlcore.offline.collect policy=replay:runs/sac/hopper/<time> dataset_id=local/hopper/medium-replay-v0
    python -m rlcore.offline.collect policy=replay:runs/sac/hopper/<time> steps=60000 dataset_id=...
    python -m rlcore.offline.collect recipe env=Hopper ...      # D4RL-like datasets, see offline/recipe.py

``policy`` is ``random`` (uniform actions), ``expert`` (a robot task's scripted expert,
rlcore.envs.robots.experts; ``slowness`` < 1 slows it down: with ``noise``, the mixed
demonstrations), a run directory or checkpoint file (its
deterministic policy via ``rlcore.checkpoint.load_policy``; with ``sample=true`` actions are
sampled from the agent's own stochastic policy, as D4RL recorded its datasets; plus optional
Gaussian ``noise``), or ``replay:<run dir>`` (the transitions in that run's checkpointed
replay buffer; with ``steps=n`` only those of its first n env steps). Optional keys:
``seed`` (env resets, noise and policy sampling), ``sample``, ``noise`` (std as a fraction
of the action half-range), ``slowness``, ``flatten_obs`` (a dict observation recorded as
one vector; without it the parts are kept), ``obs`` (``state``; ``pixels`` or
``state+pixels``: camera images, uint8, as ``env.obs`` makes them, with ``image_size``,
``frame_stack`` and ``camera``; a scripted expert reads the state part), ``max_episode_steps``, ``ref_min_score`` and ``ref_max_score`` (stored only when given,
both together), ``threads`` (torch threads, as in ``rlcore.train``: ``auto`` = 1, N, or
``null``), ``kwargs.<name>=<value>`` (the task's constructor arguments, as a run's
``env.kwargs.<name>``; a run's policy recorded on its own task uses the run's by default).
The dataset is written with ``minari.create_dataset_from_buffers`` under
``$MINARI_DATASETS_PATH`` (default ``~/.minari/datasets``); the last episode, cut by the
step budget, is stored as truncated. The recording itself is ``offline/recording.py``; this
module is the command line, on top of it and of the recipes it dispatches to.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import yaml

from rlcore.commands import print_help_if_asked
from rlcore.offline.cli import UsageError, bool_arg, number_arg, parse_args, seed_arg
from rlcore.offline.datasets import DatasetError
from rlcore.offline.recording import Rendering, collect
from rlcore.threads import AUTO, apply_threads

USAGE = (
    "usage: python -m rlcore.offline.collect env=<env> "
    "policy=<run dir | random | expert | replay:<run dir>> "
    "steps=<n> dataset_id=<namespace/name-vN> [seed=0] [sample=false] [noise=0.0] "
    "[slowness=1.0] [flatten_obs=false] [obs=state|pixels|state+pixels image_size=84 "
    "frame_stack=1 camera=<name>] [max_episode_steps=<n>] "
    "[ref_min_score=<x> ref_max_score=<y>] [kwargs.<name>=<value> ...] [threads=auto]\n"
    "       python -m rlcore.offline.collect recipe env=<env> [...]   (see offline/recipe.py)"
)
KEYS = {
    "env",
    "policy",
    "steps",
    "dataset_id",
    "seed",
    "sample",
    "noise",
    "max_episode_steps",
    "ref_min_score",
    "ref_max_score",
    "threads",
    "slowness",
    "flatten_obs",
    "obs",
    "image_size",
    "frame_stack",
    "camera",
}


def rendering_arg(args: dict[str, str]) -> Rendering:
    """The recorded observation's kind and image options (``rlcore.envs.pixels``)."""
    from rlcore.envs.pixels import OBS_MODES

    obs = args.get("obs", "state")
    if obs not in OBS_MODES:
        raise UsageError(f"obs={obs}: choose from {', '.join(OBS_MODES)}")
    return Rendering(
        obs, number_arg(args, "image_size", int, 84), number_arg(args, "frame_stack", int, 1),
        args.get("camera"),
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    """Command line: see the module docstring; exit code 2 on a usage error."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not (argv and argv[0] == "recipe") and print_help_if_asked(argv, f"{__doc__}\n{USAGE}"):
        return None
    if argv and argv[0] == "recipe":
        from rlcore.offline.recipe import main as recipe_main

        return recipe_main(argv[1:])
    try:
        env_kwargs = {}  # kwargs.<name>=<value>: the task's constructor arguments
        for token in [t for t in argv if t.startswith("kwargs.")]:
            name, sep, value = token.removeprefix("kwargs.").partition("=")
            if not (sep and name.isidentifier()):
                raise UsageError(f"expected kwargs.<name>=<value>, got '{token}'")
            env_kwargs[name] = yaml.safe_load(value)  # as Hydra reads env.kwargs.<name>
        argv = [t for t in argv if not t.startswith("kwargs.")]
        args = parse_args(argv, KEYS, required=("policy", "dataset_id"))
        try:
            apply_threads(args.get("threads", AUTO))
        except ValueError as error:
            raise UsageError(str(error)) from None
        summary = collect(
            env=args.get("env"),
            policy=args["policy"],
            dataset_id=args["dataset_id"],
            steps=number_arg(args, "steps", int),
            seed=seed_arg(args),
            noise=number_arg(args, "noise", float, 0.0),
            sample=bool_arg(args, "sample", False),
            max_episode_steps=number_arg(args, "max_episode_steps", int),
            ref_min_score=number_arg(args, "ref_min_score", float),
            ref_max_score=number_arg(args, "ref_max_score", float),
            slowness=number_arg(args, "slowness", float, 1.0),
            flatten_obs=bool_arg(args, "flatten_obs", False),
            rendering=rendering_arg(args),
            env_kwargs=env_kwargs,
        )
    except UsageError as error:
        print(f"error: {error}\n{USAGE}", file=sys.stderr)
        raise SystemExit(2) from None
    except (DatasetError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    success = f", success rate {summary['success_rate']:.2f}" if "success_rate" in summary else ""
    print(
        f"wrote {summary['dataset_id']} ({summary['env_id']}): {summary['episodes']} episodes, "
        f"{summary['steps']} steps, mean return {summary['mean_return']:.2f} "
        f"(min {summary['min_return']:.2f}, max {summary['max_return']:.2f}){success} "
        f"-> {summary['path']}"
    )
    return summary


if __name__ == "__main__":
    main()
