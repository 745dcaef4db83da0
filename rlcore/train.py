"""Command-line entry point and the one composition root of rlcore.

    python -m rlcore.train algo=sac env=Hopper
    python -m rlcore.train algo=ppo env=Walker2d env.num_envs=8 total_steps=200000 seed=3
    python -m rlcore.train -m algo=sac env=Hopper seed=0,1,2        # a sweep
    python -m rlcore.train algo=sac env=Hopper resume=runs/sac/hopper/2026-11-22_10-00-00

It turns the Hydra config into typed dataclasses, looks the algorithm up in the
registry, builds the envs, agent, buffer, logger and checkpoint writer, and runs the
algorithm's loop. ``train(cfg, run_dir)`` does the same from Python.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from envs.make import SHORT_NAMES, UnknownEnvError, make_vec_env, resolve_env_id
from rlcore import registry
from rlcore.buffers import ReplayBuffer, RolloutBuffer
from rlcore.checkpoint import (
    CHECKPOINT_DIR,
    FORMAT_VERSION,
    LATEST,
    load_checkpoint,
    save_checkpoint,
)
from rlcore.logging import Logger
from rlcore.loops import (
    LoopSettings,
    RunContext,
    TrainingStopped,
    off_policy,
    offline,
    on_policy,
)
from rlcore.utils import seed_everything

# Config fields that change tensor shapes or the meaning of saved state: a resumed run
# must match the checkpoint on these.
SHAPE_FIELDS = (
    "algo.name",
    "env.id",
    "env.num_envs",
    "seed",
    "algo.hidden",
    "algo.num_critics",
    "algo.layer_norm",
    "algo.activation",
    "algo.buffer_size",
    "algo.rollout_steps",
    "algo.normalize_obs",
    "algo.normalize_reward",
    "algo.normalize_states",
    "algo.deterministic_actor",
    "dataset",
)
PACKAGES = ("torch", "numpy", "mujoco", "gymnasium", "minari", "hydra-core", "rlcore")


class ResumeMismatchError(ValueError):
    """The resumed checkpoint was trained with a different shape-changing setting."""


def _run_dir_resolver(resume: str | None, default: str) -> str:
    return str(resume) if resume not in (None, "", "None", "null") else default


if not OmegaConf.has_resolver("rlcore_run_dir"):
    OmegaConf.register_new_resolver("rlcore_run_dir", _run_dir_resolver)


def _select(cfg: dict[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def check_resume_compatible(saved: dict[str, Any], current: dict[str, Any]) -> None:
    """Raise ResumeMismatchError naming the first shape-changing field that differs."""
    for field in SHAPE_FIELDS:
        old, new = _select(saved, field), _select(current, field)
        if isinstance(old, tuple | list) and isinstance(new, tuple | list):
            old, new = list(old), list(new)
        if old != new:
            raise ResumeMismatchError(
                f"cannot resume: '{field}' is {new!r} now but the checkpoint was trained with "
                f"{old!r}. Pass {field}={old!r} (or start a new run without resume=)."
            )


def _package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        commit = out.stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return (commit + ("-dirty" if dirty else "")) if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def _write_run_metadata(run_dir: Path, cfg_dict: dict[str, Any], resumed: bool) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    name = "config_resumed.yaml" if resumed else "config.yaml"
    (run_dir / name).write_text(OmegaConf.to_yaml(OmegaConf.create(cfg_dict)))
    meta = {
        "git_commit": _git_commit(),
        "versions": _package_versions(),
        "command": sys.argv,
        "host": platform.node(),
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    (run_dir / ("meta_resumed.json" if resumed else "meta.json")).write_text(
        json.dumps(meta, indent=2)
    )


def train(cfg: DictConfig, run_dir: str | Path) -> dict[str, float]:
    """Run one training job described by a composed config; returns final metrics."""
    cfg_dict: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    run_dir = Path(run_dir)
    spec = registry.get(cfg_dict["algo"]["name"])
    if "total_steps" in cfg_dict["algo"]:
        # the run's length is the one budget: a top-level ``total_steps=`` override also
        # sets the algorithm's (IQL anneals its actor lr to 0 over it)
        cfg_dict["algo"]["total_steps"] = int(cfg_dict["total_steps"])
    algo_cfg = spec.config_from_dict(cfg_dict["algo"])
    env_cfg = cfg_dict["env"]
    env_id = resolve_env_id(env_cfg["id"])
    cfg_dict["env"]["id"] = env_id

    resume_state = None
    if cfg_dict.get("resume"):
        resume_state = load_checkpoint(cfg_dict["resume"])
        check_resume_compatible(resume_state["config"], cfg_dict)
    if cfg_dict.get("threads"):
        torch.set_num_threads(int(cfg_dict["threads"]))
    seed = int(cfg_dict["seed"])
    seed_everything(seed)
    device = torch.device(cfg_dict["device"])
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device=cuda was requested but CUDA is not available: use device=cpu")

    normalize = {
        "normalize_obs": bool(getattr(algo_cfg, "normalize_obs", False)),
        "gamma": float(getattr(algo_cfg, "gamma", 0.99)),
        "clip_obs": float(env_cfg.get("clip_obs", 10.0)),
        "max_episode_steps": env_cfg.get("max_episode_steps"),
        "env_kwargs": env_cfg.get("kwargs") or {},
    }
    offline_run = spec.loop == "offline"
    if offline_run and not cfg_dict.get("dataset"):
        raise ValueError(
            f"algo={spec.name} trains offline: pass dataset=<Minari id | D4RL .hdf5 file | "
            "Minari dataset folder> (python -m offline.collect records one)"
        )
    env = make_vec_env(
        env_id,
        1 if offline_run else int(env_cfg["num_envs"]),
        seed=seed,
        backend=env_cfg.get("backend", "sync"),
        normalize_reward=bool(getattr(algo_cfg, "normalize_reward", False)),
        clip_reward=float(env_cfg.get("clip_reward", 10.0)),
        **normalize,
    )
    eval_episodes = int(cfg_dict["eval_episodes"])
    eval_env = make_vec_env(
        env_id, max(1, min(int(cfg_dict["eval_envs"]), eval_episodes)), seed=seed + 1, **normalize
    )
    obs_space, action_space = env.single_observation_space, env.single_action_space
    agent = spec.agent_class(obs_space, action_space, algo_cfg, device=device)

    resume_step = resume_state["loop"]["counters"]["step"] if resume_state else None
    log_cfg = cfg_dict.get("logger", {})
    logger = Logger(
        run_dir,
        tensorboard=log_cfg.get("tensorboard", True),
        csv_files=log_cfg.get("csv", True),
        console=log_cfg.get("console", True),
        resume_step=resume_step,
        progress_interval_s=float(log_cfg.get("progress_interval_s", 10.0)),
    )
    _write_run_metadata(run_dir, cfg_dict, resumed=resume_state is not None)
    spaces = {
        "obs_shape": list(obs_space.shape),
        "action_low": action_space.low,
        "action_high": action_space.high,
    }

    def save(loop_state: dict[str, Any]) -> Path:
        step = loop_state["counters"]["step"]
        base = {
            "format": FORMAT_VERSION,
            "algo": spec.name,
            "config": cfg_dict,
            "spaces": spaces,
            # deployment needs the observation statistics the policy was trained with
            "obs_normalizer": loop_state.get("env", {})
            .get("wrappers", {})
            .get("NormalizeObservation"),
        }
        path = save_checkpoint(
            {**base, "loop": loop_state, "agent": loop_state["agent"]},
            run_dir / CHECKPOINT_DIR / LATEST,
        )
        if cfg_dict.get("keep_agent_snapshots", True):
            save_checkpoint(
                {
                    **base,
                    "agent": loop_state["agent"],
                    "loop": {"counters": loop_state["counters"]},
                },
                run_dir / CHECKPOINT_DIR / f"agent_step_{step}.pt",
            )
        return path

    run = RunContext(
        name=f"{spec.name} {env_id}",
        logger=logger,
        save=save,
        resume=resume_state["loop"] if resume_state else None,
    )
    settings = LoopSettings(
        total_steps=int(cfg_dict["total_steps"]),
        seed=seed,
        eval_every=int(cfg_dict["eval_every"]),
        eval_episodes=eval_episodes,
        checkpoint_every=int(cfg_dict["checkpoint_every"]),
        log_every=int(cfg_dict["log_every"]),
        learning_starts=int(getattr(algo_cfg, "learning_starts", 0)),
        batch_size=int(getattr(algo_cfg, "batch_size", 256)),
        updates_per_step=float(getattr(algo_cfg, "updates_per_step", 1.0)),
        rollout_steps=int(getattr(algo_cfg, "rollout_steps", 2048)),
        stop_at_return=cfg_dict.get("stop_at_return"),
    )
    logger.progress(f"[{run.name}] run dir {run_dir}", force=True)
    try:
        if offline_run:
            dataset, score = _prepare_offline(cfg_dict, algo_cfg, agent, env, logger)
            settings.learning_starts = 0
            return offline(agent, dataset, eval_env, settings, run, score)
        if spec.loop == "off_policy":
            buffer = ReplayBuffer(
                min(algo_cfg.buffer_size, max(settings.total_steps, env.num_envs)),
                obs_space.shape,
                action_space.shape,
                env.num_envs,
                device=device,
                seed=seed,
            )
            return off_policy(agent, env, eval_env, buffer, settings, run)
        rollout = RolloutBuffer(
            settings.rollout_steps, env.num_envs, obs_space.shape, action_space.shape, device
        )
        return on_policy(agent, env, eval_env, rollout, settings, run)
    finally:
        logger.close()
        env.close()
        eval_env.close()


def _prepare_offline(
    cfg_dict: dict[str, Any], algo_cfg: Any, agent: Any, env: Any, logger: Logger
) -> tuple[Any, Any]:
    """Load and check the dataset, apply the recipe's reward/state normalisation, and
    build the normalised-score function (None, with a note, when no reference exists)."""
    from offline.datasets import load_dataset
    from offline.scores import ScoreReferenceError, normalized_score

    env_id = cfg_dict["env"]["id"]
    dataset = load_dataset(cfg_dict["dataset"], gamma=float(algo_cfg.gamma), env_id=env_id)
    dataset.check_env(env.single_observation_space, env.single_action_space)
    if getattr(algo_cfg, "normalize_reward", False):
        dataset.normalize_rewards_by_return_range()
    scale, bias = getattr(algo_cfg, "reward_scale", 1.0), getattr(algo_cfg, "reward_bias", 0.0)
    if (scale, bias) != (1.0, 0.0):
        dataset.scale_rewards(scale, bias)
    if getattr(algo_cfg, "normalize_states", False):
        agent.obs_normalizer.fit(dataset.obs.to(agent.device))
    try:
        normalized_score(0.0, env_id, dataset)

        def score(value: float) -> float:
            return float(normalized_score(value, env_id, dataset))
    except ScoreReferenceError as error:
        logger.progress(f"note: no normalised score for this run ({error})", force=True)
        score = None
    returns = dataset.episode_returns()
    logger.progress(
        f"dataset {dataset.source}: {len(dataset):,} transitions, {len(returns)} episodes, "
        f"behaviour return {returns.mean():.1f}"
        + (f" (normalised {score(float(returns.mean())):.1f})" if score else ""),
        force=True,
    )
    return dataset.to(agent.device), score


def _fail(message: str, code: int = 2) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def _env_config_name(value: str) -> list[str]:
    """Override tokens for ``env=<value>``: a config file name, or the generic gym config."""
    key = value.lower().replace("-", "").replace("_", "")
    if key in SHORT_NAMES:
        return [f"env={key}"]
    env_id = resolve_env_id(value)  # raises UnknownEnvError
    for short, full in SHORT_NAMES.items():
        if full == env_id:
            return [f"env={short}"]
    return ["env=gym", f"env.id={env_id}"]


def normalize_overrides(args: list[str]) -> list[str]:
    """Map friendly names (``env=Hopper``, ``env=Pusher-v5``, ``algo=SAC``) onto config
    files and fail early, with one clear message, on unknown algorithms or envs."""
    out: list[str] = []
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep and key == "algo":
            names = value.split(",")
            for name in names:
                registry.get(name)  # raises UnknownAlgorithmError
            out.append("algo=" + ",".join(n.lower() for n in names))
        elif sep and key == "env":
            tokens = [_env_config_name(v) for v in value.split(",")]
            if len(tokens) == 1:
                out.extend(tokens[0])
            elif all(len(t) == 1 for t in tokens):
                out.append("env=" + ",".join(t[0].split("=", 1)[1] for t in tokens))
            else:
                _fail("sweeps over gymnasium ids go through env=gym env.id=A,B")
        else:
            out.append(arg)
    return out


def _hydra_main(cfg: DictConfig) -> float:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    # in a sweep, say which job failed (launchers run the jobs in other processes)
    job = f"job {hydra_cfg.job.num} ({run_dir}): " if hydra_cfg.mode == RunMode.MULTIRUN else ""
    try:
        result = train(cfg, run_dir)
    except (ResumeMismatchError, TrainingStopped, FileNotFoundError, ValueError) as error:
        _fail(f"{job}{error}", 1)
    except KeyboardInterrupt:
        _fail(f"interrupted; continue with resume={run_dir} (from its last checkpoint)", 130)
    return float(result.get("eval/return", float("nan")))


def cli(argv: list[str] | None = None) -> None:
    """``python -m rlcore.train`` / ``rlcore-train``: Hydra CLI with friendly names."""
    import hydra

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        args = normalize_overrides(args)
    except (registry.UnknownAlgorithmError, UnknownEnvError) as error:
        _fail(str(error))
    sys.argv = [sys.argv[0], *args]
    main = hydra.main(version_base="1.3", config_path="pkg://configs", config_name="config")(
        _hydra_main
    )
    main()


if __name__ == "__main__":
    cli()
