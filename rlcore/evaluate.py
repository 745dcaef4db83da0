"""The command line that evaluates a saved run:

    python -m rlcore.evaluate <run dir or checkpoint> [episodes=10] [seed=0]
        [deterministic=true] [video=false] [video_dir=<run dir>/videos] [threads=auto]

It prints the return (and the cost, on a task that reports costs) of every episode and
their mean, on the run's env recipe (its env id, kwargs, time limit and observation
history; the observation normalisation comes with ``load_policy``). ``video=true`` writes
one MP4 per episode (``pip install 'rlcore[video]'``); MuJoCo renders headless with
``MUJOCO_GL=egl`` (set when unset; ``MUJOCO_GL=osmesa`` where there is no EGL).
``threads`` is the torch thread count, as in ``rlcore.train`` (``rlcore/threads.py``).
The evaluation itself is rlcore.evaluation's.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlcore.evaluation import EpisodeRecorder, EvaluateError, evaluate
from rlcore.threads import AUTO, apply_threads, check_threads

EVALUATE_OPTIONS = {"episodes": 10, "seed": 0, "deterministic": True, "video": False,
                    "video_dir": "", "threads": AUTO}  # fmt: skip


USAGE = """usage: python -m rlcore.evaluate <run dir or checkpoint> [episodes=10] [seed=0]
           [deterministic=true] [video=false] [video_dir=<run dir>/videos] [threads=auto]

Evaluates a saved run's policy on the run's env recipe (env id, kwargs, time limit,
observation history and normalisation): the return (and the cost, on a task that reports
costs) of every episode and their mean. video=true writes one MP4 per episode (pip install
'rlcore[video]'; MuJoCo renders headless with MUJOCO_GL=egl). threads: torch threads, as in
rlcore.train (auto = 1). Exit codes: 0 done, 1 missing or unreadable checkpoint, 2 bad
option."""


def parse_options(args: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """(path, options) from ``<path> key=value ...``; unknown keys and bad values raise
    ``EvaluateError`` naming the choices."""
    paths = [a for a in args if "=" not in a]
    if len(paths) != 1:
        raise EvaluateError(
            "usage: python -m rlcore.evaluate <run dir or checkpoint> [episodes=N] "
            "[seed=S] [deterministic=true|false] [video=true|false] [video_dir=DIR] "
            "[threads=auto|N|null] (--help for more)"
        )
    options = dict(EVALUATE_OPTIONS)
    for arg in args:
        if "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        if key not in options:
            raise EvaluateError(f"unknown option '{key}', choose from {sorted(options)}")
        default = EVALUATE_OPTIONS[key]
        if isinstance(default, bool):
            if value.lower() not in ("true", "false"):
                raise EvaluateError(f"{key}={value}: use {key}=true or {key}=false")
            options[key] = value.lower() == "true"
        elif isinstance(default, int):
            if not value.lstrip("-").isdigit():
                raise EvaluateError(f"{key}={value}: an integer is needed")
            options[key] = int(value)
        elif key == "threads":
            try:
                options[key] = check_threads(value)
            except ValueError as error:
                raise EvaluateError(str(error)) from None
        else:
            options[key] = value
    if options["episodes"] < 1:
        raise EvaluateError(f"episodes={options['episodes']}: evaluate at least 1 episode")
    if options["seed"] < 0:
        raise EvaluateError(f"seed={options['seed']}: must be >= 0")
    return paths[0], options


def evaluate_saved_run(path: str | Path, options: dict[str, Any]) -> dict[str, Any]:
    """Evaluate the policy of a run directory or checkpoint on its env: per-episode
    results (``episodes``), ``evaluate``'s summary (``summary``) and the videos written."""
    import torch

    from rlcore import catalog
    from rlcore.checkpoint import load_checkpoint
    from rlcore.envs.make import check_renders, make_vec_env
    from rlcore.policies import load_policy
    from rlcore.settings import recorded_env

    apply_threads(options["threads"])  # one torch thread by default (rlcore/threads.py)
    path = Path(path)
    state = load_checkpoint(path)
    env_settings = recorded_env(state["config"])
    config = catalog.get(state["algo"]).config_from_dict(state["config"]["algo"])
    video = bool(options["video"])
    if video:
        try:
            check_renders(env_settings.id or env_settings.name)
        except ValueError as error:
            raise EvaluateError(f"video=true: {error}") from error
        os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering; read at first render
    kwargs = dict(env_settings.kwargs) | ({"render_mode": "rgb_array"} if video else {})
    # the run's CPU back end; rendering, and MJX runs (torch tensors), step the task on sync
    backend = "sync" if video or env_settings.backend == "mjx" else env_settings.backend
    env = make_vec_env(
        env_settings.id or env_settings.name,
        1,
        seed=int(options["seed"]),
        backend=backend,
        max_episode_steps=env_settings.max_episode_steps,
        env_kwargs=kwargs,
        flatten_obs=env_settings.flatten_obs,
        obs_history=int(config.plan().env.obs_history),
        evaluation=True,  # the task's evaluation form (Atari: whole games, raw scores)
        obs=env_settings.obs,
        camera=env_settings.camera,
        image_size=env_settings.image_size,
        frame_stack=env_settings.frame_stack,
    )
    run_dir = path if path.is_dir() else path.parent
    folder = Path(options["video_dir"]) if options["video_dir"] else run_dir / "videos"
    recorder = EpisodeRecorder(
        env,
        (lambda i: folder / f"episode_{i + 1}_seed{options['seed']}.mp4") if video else None,
        int(options["episodes"]),
        float(env.metadata.get("render_fps", 30)),
    )
    torch.manual_seed(int(options["seed"]))  # a sampling policy's draws
    policy = load_policy(path, deterministic=bool(options["deterministic"]))
    summary = evaluate(policy, recorder, int(options["episodes"]), int(options["seed"]))
    recorder.close()
    return {"episodes": recorder.episodes, "summary": summary, "videos": recorder.written}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rlcore.evaluate <run dir or checkpoint> [key=value ...]``: 0 when done,
    1 for a missing or unreadable checkpoint, 2 for a bad option."""
    from rlcore.checkpoint import CheckpointReadError
    from rlcore.commands import print_help_if_asked

    args = list(sys.argv[1:] if argv is None else argv)
    if print_help_if_asked(args, USAGE):
        return 0
    try:
        path, options = parse_options(args)
        result = evaluate_saved_run(path, options)
    except (FileNotFoundError, CheckpointReadError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except EvaluateError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for i, episode in enumerate(result["episodes"]):
        cost = f"  cost {episode['cost']:.2f}" if "cost" in episode else ""
        success = f"  success {episode['success']}" if "success" in episode else ""
        print(f"episode {i + 1}: return {episode['return']:.2f}{cost}  "
              f"length {episode['length']}{success}")  # fmt: skip
    summary = result["summary"]
    cost = f", cost {summary['cost']:.2f} +- {summary['cost_std']:.2f}" if "cost" in summary else ""
    rate = f", success rate {summary['success_rate']:.2f}" if "success_rate" in summary else ""
    print(f"mean over {len(result['episodes'])} episodes: return {summary['return']:.2f} +- "
          f"{summary['return_std']:.2f}{cost}{rate}")  # fmt: skip
    for video in result["videos"]:
        print(f"wrote {video}")
    return 0


def cli() -> None:
    """Console-script entry (``rlcore-evaluate``)."""
    raise SystemExit(main())


if __name__ == "__main__":
    cli()
