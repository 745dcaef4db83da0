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

import os
import re
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from omegaconf import DictConfig, OmegaConf

from rlcore import catalog
from rlcore.buffers import MixedSampler, ReplayBuffer, RolloutBuffer
from rlcore.capabilities import (
    DatasetUser,
    OnPolicy,
    PerEnvState,
    Planned,
    StateStatistics,
    require,
)
from rlcore.checkpoint import (
    CHECKPOINT_DIR,
    FORMAT_VERSION,
    LATEST,
    CheckpointWriteError,
    read_checkpoint,
    save_checkpoint,
)
from rlcore.config import ConfigError, coerce
from rlcore.distributed import (
    ActorRecipe,
    DistributedSettings,
    RayActors,
    RayRollouts,
    require_ray,
)
from rlcore.envs.make import (
    BACKENDS,
    SHORT_NAMES,
    UnknownEnvError,
    make_vec_env,
    resolve_env_id,
)
from rlcore.evaluation import EvalVideo
from rlcore.generative import resolve_head
from rlcore.logging import Logger
from rlcore.loops import (
    NO_COST,
    LoopSettings,
    Phase,
    RunContext,
    TrainingInterrupted,
    TrainingStopped,
    rollout_phase,
    run_phases,
)
from rlcore.overrides import check_overrides, train_help
from rlcore.plan import OFFLINE_DATA_MODES, RunPlan, Schedule
from rlcore.run_dir import (
    RunDirExistsError,
    check_new_run_dir,
    clear_uncheckpointed_run,
    has_checkpoint,
    replaced_run_note,
    resume_run_dir,
    write_run_metadata,
)
from rlcore.run_lock import RunLock, RunLockedError
from rlcore.spaces import action_storage, check_action_space, describe_action_space
from rlcore.speed import settle_compile
from rlcore.threads import AUTO, apply_threads
from rlcore.threads import RULE as THREADS_RULE
from rlcore.utils import seed_everything

# Config fields that change tensor shapes or the meaning of saved state: a resumed run
# must match the checkpoint on these.
SHAPE_FIELDS = (
    "algo.name",
    "env.id",
    "env.num_envs",
    "seed",
    "algo.hidden",
    "algo.actor_hidden",
    "algo.critic_hidden",
    "algo.num_critics",
    "algo.num_atoms",
    "algo.layer_norm",
    "algo.activation",
    "algo.buffer_size",
    "algo.rollout_steps",
    "algo.normalize_obs",
    "algo.normalize_reward",
    "algo.normalize_reward_by_returns",
    "algo.normalize_states",
    "algo.deterministic_actor",
    "algo.dueling",
    "algo.offline_data",
    "dataset",
    "init_from",
)


class ResumeMismatchError(ValueError):
    """The resumed checkpoint was trained with a different shape-changing setting."""


def _top_level_keys() -> set[str]:
    """Keys of the packaged configs/config.yaml (the documented top-level options)."""
    text = resources.files("rlcore.configs").joinpath("config.yaml").read_text()
    return set(OmegaConf.create(text).keys()) - {"defaults", "hydra"} | {"algo", "env", "logger"}


# (type, range check) of the top-level options and the env options the loops use
_RUN_SCHEMA: dict[str, tuple[Any, Callable[[Any], bool], str]] = {
    "seed": (int, lambda v: v >= 0, ">= 0"),
    "total_steps": (int, lambda v: v > 0, "> 0"),
    "eval_every": (int, lambda v: v >= 0, ">= 0 (0: evaluate at the end only)"),
    "eval_episodes": (int, lambda v: v >= 1, ">= 1"),
    "eval_envs": (int, lambda v: v >= 1, ">= 1"),
    "eval_video_every": (int, lambda v: v >= 0, ">= 0 (0: no evaluation videos)"),
    "checkpoint_every": (int, lambda v: v >= 0, ">= 0 (0: by time and at the end only)"),
    "checkpoint_every_s": (float, lambda v: v >= 0, ">= 0 (0: by steps only)"),
    "log_every": (int, lambda v: v > 0, "> 0"),
    "threads": (
        int | str | None,
        lambda v: v in (None, AUTO) or isinstance(v, int) and v >= 1,
        THREADS_RULE,
    ),
    "stop_at_return": (float | None, lambda v: True, "a number or null"),
    "stop_after_s": (float | None, lambda v: v is None or v > 0, "> 0 (seconds) or null"),
    "keep_agent_snapshots": (bool, lambda v: True, "true or false"),
    "env.num_envs": (int, lambda v: v >= 1, ">= 1"),
    "env.max_episode_steps": (int | None, lambda v: v is None or v >= 1, ">= 1 or null"),
    "env.flatten_obs": (bool, lambda v: True, "true or false"),
    "env.backend": (str, lambda v: v in BACKENDS, f"one of {', '.join(BACKENDS)}"),
    "device": (str, lambda v: _torch_device(v) is not None, "a torch device: cpu, cuda, cuda:N"),
}


def _torch_device(name: str) -> torch.device | None:
    """``torch.device(name)``, or None for a string torch does not accept (``gpu``)."""
    try:
        return torch.device(name)
    except RuntimeError:
        return None


def check_run_config(cfg_dict: dict[str, Any]) -> None:
    """Refuse, with one message naming the fix, unknown top-level keys and run values of
    the wrong type or out of range. Converts valid values in place (``1e5`` -> int)."""
    unknown = sorted(set(cfg_dict) - _top_level_keys())
    if unknown:
        raise ConfigError(
            f"unknown option(s) {unknown}; top-level options are {sorted(_top_level_keys())}"
        )
    for dotted, (hint, ok, rule) in _RUN_SCHEMA.items():
        group, _, key = dotted.rpartition(".")
        node = cfg_dict[group] if group else cfg_dict
        if key not in node:
            continue
        try:
            value = coerce(node[key], hint)
        except TypeError as error:
            raise ConfigError(f"{dotted}={node[key]!r}: {error}") from None
        if not ok(value) or (isinstance(value, float) and value != value):
            raise ConfigError(f"{dotted}={node[key]!r}: must be {rule}")
        node[key] = value


def warmup_length(schedule: Schedule, num_envs: int) -> int:
    """Env steps of the policy-acting warm-up: ``warmup_steps`` plus ``warmup_vector_steps``
    vector steps of ``num_envs`` sub-envs."""
    return schedule.warmup_steps + schedule.warmup_vector_steps * num_envs


def check_schedule(plan: RunPlan, num_envs: int, init_from: bool, online_option: str) -> None:
    """Refuse schedules that would end before any learning happens. ``online_option`` is the
    option that sets the online phase's length (``total_steps`` for online algorithms,
    ``algo.online_steps`` for offline ones that fine-tune)."""
    schedule = plan.schedule
    online = phase_lengths(plan, init_from)[1]
    on_policy = schedule.rollout_steps > 0
    if online > 0 and not on_policy:
        starts, warmup = schedule.learning_starts, warmup_length(schedule, num_envs)
        name = online_option
        if online <= starts + warmup:
            # the warm-up's option: in vector steps (FastTD3) or in env steps
            warmup_name = (
                "algo.warmup_vector_steps x env.num_envs"
                if schedule.warmup_vector_steps
                else "algo.warmup_steps"
            )
            what = (
                f"algo.learning_starts + {warmup_name} = {starts + warmup:,}"
                if warmup
                else f"algo.learning_starts={starts:,}"
            )
            raise ConfigError(
                f"{name}={online:,} <= {what}: the run would end before the first online "
                f"gradient update. Raise {name} or lower "
                + (f"algo.learning_starts / {warmup_name}." if warmup else "algo.learning_starts.")
            )
    if schedule.offline_data not in OFFLINE_DATA_MODES:
        raise ConfigError(
            f"algo.offline_data={schedule.offline_data!r}: choose one of {OFFLINE_DATA_MODES} "
            "(drop: online buffer only; keep: dataset rows in the online buffer; mix: "
            "MixedSampler)"
        )
    fraction = schedule.offline_fraction
    if schedule.offline_data == "mix" and not 0.0 <= fraction <= 1.0:
        raise ConfigError(f"algo.offline_fraction={fraction} must lie in [0, 1]")
    if on_policy:
        per_rollout = schedule.rollout_steps * num_envs
        if schedule.online_steps < per_rollout:
            raise ConfigError(
                f"total_steps={schedule.online_steps:,} is less than one rollout "
                f"(algo.rollout_steps x env.num_envs = {per_rollout:,}): the run would not "
                "complete one update. Raise total_steps or lower algo.rollout_steps."
            )
        minibatches = schedule.num_minibatches
        if minibatches is not None and minibatches > per_rollout:
            raise ConfigError(
                f"algo.num_minibatches={minibatches} exceeds the rollout's {per_rollout} "
                "samples; lower algo.num_minibatches"
            )


def phase_lengths(plan: RunPlan, init_from: bool) -> tuple[int, int]:
    """(offline gradient steps, online env steps) of the algorithm's plan; ``init_from=``
    skips pre-training."""
    return (0 if init_from else plan.schedule.offline_steps), plan.schedule.online_steps


def snapshot_reset(
    cfg_dict: dict[str, Any],
    algo_name: str,
    env_id: str,
    env_settings: dict[str, Any],
    run_dir: Path,
) -> Callable[[Any], Any]:
    """The ``SnapshotReset`` wrapper of the config's ``snapshot`` block (S3RL). The
    snapshots are rolled out from the teacher once and kept in the run directory
    (``snapshots.npz``), which a resumed run reads back."""
    from rlcore.envs.snapshot import PAPER_CLUSTERS, SnapshotReset, Snapshots, SnapshotSettings
    from rlcore.teacher import load_or_collect

    snap = cfg_dict["snapshot"]
    saved = Path(run_dir) / "snapshots.npz"
    env_kwargs, max_steps = env_settings["env_kwargs"], env_settings["max_episode_steps"]
    if saved.is_file():
        snapshots = Snapshots.load(saved)
        snapshots.check_env(env_id, env_kwargs, max_steps)
    else:
        snapshots = load_or_collect(
            snap["teacher"], env_id, env_kwargs, max_steps,
            int(snap["episodes"]), int(snap["every"]), int(cfg_dict["seed"]),
        )  # fmt: skip
        saved.parent.mkdir(parents=True, exist_ok=True)
        snapshots.save(saved)
    clusters = snap.get("clusters") or PAPER_CLUSTERS.get(algo_name, 4)
    try:
        settings = SnapshotSettings(
            selection=str(snap["selection"]),
            clusters=int(clusters),
            truncate_after=None if snap["truncate_after"] is None else int(snap["truncate_after"]),
            switch_after=int(snap["switch_after"]),
            keep_best=None if snap["keep_best"] is None else int(snap["keep_best"]),
            seed=int(cfg_dict["seed"]),
        )
    except ValueError as error:
        raise ConfigError(f"snapshot: {error}") from None
    returns = snapshots.episode_returns
    print(
        f"snapshot reset: {len(snapshots)} snapshots from {len(returns)} teacher episodes "
        f"(return mean {returns.mean():.1f}, min {returns.min():.1f}); {settings.selection}"
        f"{f' k={clusters}' if settings.selection == 'kmeans' else ''}, truncate after "
        f"{settings.truncate_after}, ordinary resets after {settings.switch_after:,} env steps",
        flush=True,
    )
    return lambda env: SnapshotReset(env, snapshots, settings)


def needs_dataset(plan: RunPlan, init_from: bool) -> bool:
    """True when the run trains on, or mixes in, an offline dataset (an offline
    algorithm's plan always does: ``DataRecipe.required``)."""
    offline, online = phase_lengths(plan, init_from)
    mixes = online > 0 and plan.schedule.offline_data in ("keep", "mix")
    return plan.data.required or offline > 0 or mixes


def check_spaces(
    spec: catalog.Algorithm, env_id: str, obs_space: gym.Space, action_space: gym.Space
) -> None:
    """Refuse, naming what is supported and the fix, action spaces the algorithm cannot
    act in (the agent constructors refuse too, for library users; this names the env) and
    observation spaces the networks cannot take (Dict/Tuple need ``env.flatten_obs=true``)."""
    try:
        check_action_space(action_space, spec.agent_class.__name__, spec.action_spaces, env_id)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1:
        return
    hint = (
        " Pass env.flatten_obs=true to flatten it into one vector (goal-conditioned "
        "tasks: observation, achieved_goal, desired_goal)."
        if isinstance(obs_space, gym.spaces.Dict | gym.spaces.Tuple)
        else ""
    )
    raise ConfigError(
        f"algo={spec.name} supports flat Box observation spaces (shape (n,)); {env_id} has "
        f"{obs_space}.{hint}"
    )


def _resuming(resume: str | None) -> bool:
    return resume not in (None, "", "None", "null")


def _select(cfg: dict[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def check_resume_compatible(saved: dict[str, Any], current: dict[str, Any]) -> None:
    """Raise ResumeMismatchError naming the first shape-changing field that differs."""
    for name in SHAPE_FIELDS:
        old, new = _select(saved, name), _select(current, name)
        if isinstance(old, tuple | list) and isinstance(new, tuple | list):
            old, new = list(old), list(new)
        if old != new:
            raise ResumeMismatchError(
                f"cannot resume: '{name}' is {new!r} now but the checkpoint was trained with "
                f"{old!r}. Pass {name}={old!r} (or start a new run without resume=)."
            )


def train(
    cfg: DictConfig,
    run_dir: str | Path,
    on_valid: Callable[[], None] | None = None,
    label: str = "",
) -> dict[str, float]:
    """Run one training job described by a composed config; returns final metrics.

    Nothing is written to ``run_dir`` until the config, the inputs and the env are checked
    (``on_valid`` is called then, before the first write: the CLI writes Hydra's record).
    ``run_dir/run.lock`` keeps a second process from writing the same run. ``label``
    follows the algorithm and env in the progress lines' prefix (a sweep job's values)."""
    cfg_dict: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    run_dir = Path(run_dir)
    spec = catalog.get(cfg_dict["algo"]["name"])
    check_run_config(cfg_dict)
    if "total_steps" in cfg_dict["algo"]:
        # the run's length is the one budget: a top-level ``total_steps=`` override also
        # sets the algorithm's (IQL anneals its actor lr to 0 over it)
        cfg_dict["algo"]["total_steps"] = cfg_dict["total_steps"]
    if spec.pretrained_head is not None:  # the head the run records is the checkpoint's
        cfg_dict["algo"] = resolve_head(spec.pretrained_head, spec.config_class, cfg_dict["algo"])
    # sizes left null: the device's (FastTD3 on a CPU), recorded as the run's
    cfg_dict["algo"], sizing_notes = spec.sized_for(cfg_dict["algo"], cfg_dict["device"])
    algo_cfg = spec.config_from_dict(
        cfg_dict["algo"], defaults=lambda: config_file_defaults(cfg_dict)
    )
    require(algo_cfg, Planned, "the composition root reads a run's schedule from")
    plan: RunPlan = algo_cfg.plan()
    init_from = bool(cfg_dict.get("init_from"))
    # compile=auto decides on the steps this run really takes (init_from skips pre-training)
    algo_cfg = settle_compile(algo_cfg, sum(phase_lengths(plan, init_from)))
    env_cfg = cfg_dict["env"]
    env_id = resolve_env_id(env_cfg["id"])
    cfg_dict["env"]["id"] = env_id

    resume_state, resume_notes, replaces = _resume_state_or_new_run(cfg_dict, run_dir)
    apply_threads(cfg_dict["threads"])  # auto: one thread (rlcore/threads.py says why)
    seed = int(cfg_dict["seed"])
    seed_everything(seed)
    device = torch.device(cfg_dict["device"])
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda was requested but CUDA is not available: use device=cpu")

    init_state = None
    if init_from and resume_state is None:
        init_state = load_init_from(cfg_dict, spec)
    offline_run = phase_lengths(plan, init_from)[1] == 0 and not plan.schedule.on_policy
    _check_inputs(spec, plan, cfg_dict, resuming=resume_state is not None)
    env, eval_env = _build_envs(spec, plan, cfg_dict, run_dir, offline_run, device)
    try:
        obs_space, action_space = env.single_observation_space, env.single_action_space
        check_spaces(spec, env_id, obs_space, action_space)
        dataset = _load_dataset(spec, plan, cfg_dict)  # a download, too, before any write
        if dataset is not None:
            try:
                dataset.check_env(obs_space, action_space)
            except ValueError as error:
                raise ConfigError(f"dataset={cfg_dict['dataset']}: {error}") from None
        online_option = "algo.online_steps" if plan.data.required else "total_steps"
        check_schedule(plan, int(env_cfg["num_envs"]), init_from, online_option)
        if plan.env.cost:
            check_task_reports_cost(spec.name, env_id, env_cfg.get("kwargs") or {})
        agent = spec.agent_class(obs_space, action_space, algo_cfg, device=device)
        if plan.schedule.on_policy:
            require(agent, OnPolicy, f"algo={spec.name} needs: its plan runs rollouts")
        check_distributed(spec, plan, cfg_dict, agent)
        if init_state is not None:
            check_whole_agent(agent.state_dict(), init_state["agent"], cfg_dict["init_from"])
            agent.load_state_dict(init_state["agent"])
        lock = RunLock(run_dir)
        lock.acquire()  # the first write: the run is valid
        try:
            if replaces:  # a run without a checkpoint: nothing in it to continue
                clear_uncheckpointed_run(run_dir)
            if on_valid is not None:
                on_valid()
            return _train_valid(
                spec, cfg_dict, plan, agent, env, eval_env, dataset, run_dir, resume_state,
                sizing_notes + resume_notes, label,
            )  # fmt: skip
        finally:
            lock.release()
    finally:
        env.close()
        eval_env.close()


def config_file_defaults(cfg_dict: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The ``algo`` values this run's config files give (the algorithm's file, its
    ``algo_env`` file for this env, an ``+experiment=``), command-line overrides left
    out, and the words naming them (``"for dqn on CartPole-v1"``): what a bad value's
    message offers as its default (DQN's ``lr`` is 2.5e-4, but 2.3e-3 on CartPole)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    algo, env_id = cfg_dict["algo"]["name"], resolve_env_id(cfg_dict["env"]["id"])
    groups, where = [f"algo={algo}", *_env_config_name(env_id)], f"for {algo} on {env_id}"
    if HydraConfig.initialized():  # the CLI: the groups it chose, experiments included
        choices = HydraConfig.get().runtime.choices
        groups = [f"algo={choices['algo']}", f"env={choices['env']}"]
        groups += [f"env.id={env_id}"] if choices["env"] == "gym" else []
        if choices.get("experiment"):
            groups.append(f"+experiment={choices['experiment']}")
            where += f" (+experiment={choices['experiment']})"
    if GlobalHydra.instance().is_initialized():  # inside the CLI's hydra.main
        cfg = compose("config", overrides=groups)
    else:
        with initialize_config_module(config_module="rlcore.configs", version_base="1.3"):
            cfg = compose("config", overrides=groups)
    return where, OmegaConf.to_container(cfg.algo, resolve=True)  # type: ignore[return-value]


def _train_valid(
    spec: catalog.Algorithm,
    cfg_dict: dict[str, Any],
    plan: RunPlan,
    agent: Any,
    env: Any,
    eval_env: Any,
    dataset: Any,
    run_dir: Path,
    resume_state: dict[str, Any] | None,
    resume_notes: list[str],
    label: str,
) -> dict[str, float]:
    """The run once it is known to be valid and its lock is held: logger, metadata,
    checkpoint writer, the loop, and the closing summary."""
    env_id = cfg_dict["env"]["id"]
    obs_space, action_space = env.single_observation_space, env.single_action_space
    resume_step = resume_state["loop"]["counters"]["step"] if resume_state else None
    logger = _make_logger(cfg_dict, run_dir, resume_step)
    # the speed modes the agent resolved (compile=auto, bf16 on a CPU without it)
    resolved = agent.config.plan()
    effective = {
        "env_backend": type(env.unwrapped).__name__,
        "precision": resolved.precision,
        "compile": resolved.compile,
        # the phases' lengths: init_from skips the pre-training that algo.total_steps
        # (an offline algorithm's gradient steps) counts
        "offline_steps": phase_lengths(plan, bool(cfg_dict.get("init_from")))[0],
        "online_steps": phase_lengths(plan, bool(cfg_dict.get("init_from")))[1],
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
    }
    write_run_metadata(run_dir, cfg_dict, resume_state is not None, effective)
    for note in resume_notes:
        logger.note(note)
    spaces = {"obs_shape": list(obs_space.shape), **describe_action_space(action_space)}
    save = _checkpoint_writer(spec.name, cfg_dict, spaces, run_dir)
    run = RunContext(
        name=f"{spec.name} {env_id}{f' {label}' if label else ''}",
        logger=logger,
        save=save,
        resume=resume_state["loop"] if resume_state else None,
        eval_video=_eval_video(cfg_dict, plan, run_dir, logger),
    )
    settings = _loop_settings(cfg_dict, plan, compiled=bool(resolved.compile))
    logger.progress(f"[{run.name}] run dir {run_dir}", force=True)
    with stop_signals(run, logger), log_warnings(logger):
        try:
            result = _run_loop(
                spec, cfg_dict, plan, agent, env, eval_env, dataset, settings, run, logger
            )
            for line in closing_summary(result, settings, run_dir):
                logger.progress(line, force=True)
            return result
        finally:
            logger.close()


def closing_summary(result: dict[str, float], settings: LoopSettings, run_dir: Path) -> list[str]:
    """The lines that end a run: why it stopped, the final and best evaluation, where the
    run and its checkpoint are, and the commands that continue or evaluate it."""
    step = int(result["run/step"])
    if result["run/reached_stop_at_return"]:
        why = f"stop_at_return={settings.stop_at_return:g} reached at step {step:,}"
    elif result.get("run/out_of_time"):
        why = (
            f"stop_after_s={settings.stop_after_s:g} reached at step {step:,} "
            f"({result['run/train_seconds']:,.0f} s of training)"
        )
    else:
        why = f"all {step:,} steps done"
    final, best = result["eval/return"], result["eval/best_return"]
    cost = f" (cost {result['eval/cost']:.1f})" if "eval/cost" in result else ""
    evaluation = f"final evaluation return {final:.1f}{cost}, best {best:.1f}"
    if "eval/normalized_score" in result:
        evaluation += (
            f" (normalised score {result['eval/normalized_score']:.1f}, "
            f"best {result['eval/best_normalized_score']:.1f})"
        )
    checkpoint = run_dir / CHECKPOINT_DIR / LATEST
    return [
        f"finished: {why}; {evaluation}",
        f"run dir {run_dir}; checkpoint {checkpoint}",
        f"continue: python -m rlcore.train resume={run_dir} total_steps=<more>",
        f"evaluate: python -m rlcore.evaluate {run_dir} [episodes=N] [video=true]; "
        f"in Python: rlcore.load_policy('{run_dir}')(obs)",
    ]


def _resume_state_or_new_run(
    cfg_dict: dict[str, Any], run_dir: Path
) -> tuple[dict[str, Any] | None, list[str], bool]:
    """(the checkpoint ``resume=`` names, checked against this config; the notes to log;
    whether the run replaces one without a checkpoint in ``run_dir``). Without
    ``resume=``, ``run_dir`` must hold no checkpointed run; a ``resume=`` of a run that
    has no checkpoint starts it again (``rlcore.run_dir``). A run dir a live process
    writes is refused first (RunLockedError), whatever it holds."""
    resume = cfg_dict.get("resume")
    if not resume:
        replaces = check_new_run_dir(run_dir)
        return None, [replaced_run_note(run_dir, resumed=False)] if replaces else [], replaces
    RunLock(run_dir).check_free()
    if Path(resume).is_dir() and not has_checkpoint(resume):
        return None, [replaced_run_note(run_dir, resumed=True)], True
    state, resume_file, problems = read_checkpoint(resume)
    check_resume_compatible(state["config"], cfg_dict)
    step = state["loop"]["counters"]["step"]
    notes = [f"note: {problem}" for problem in problems]
    notes.append(f"resuming from {resume_file} (step {step:,})")
    return state, notes, False


def _check_inputs(
    spec: catalog.Algorithm, plan: RunPlan, cfg_dict: dict[str, Any], resuming: bool
) -> None:
    """Refuse a run that lacks the dataset or the pre-trained policy its plan needs."""
    init_from = bool(cfg_dict.get("init_from"))
    if cfg_dict.get("dataset"):
        from rlcore.offline.datasets import check_dataset_source

        check_dataset_source(cfg_dict["dataset"])  # a missing file: before anything is written
    if needs_dataset(plan, init_from) and not cfg_dict.get("dataset"):
        raise ConfigError(
            f"algo={spec.name} trains on offline data: pass dataset=<Minari id | D4RL .hdf5 "
            "file | Minari dataset folder> (python -m rlcore.offline.collect records one)"
        )
    if plan.needs_pretrained and not plan.pretrained and not resuming and not init_from:
        raise ConfigError(
            f"algo={spec.name} fine-tunes a pre-trained policy: pass algo.pretrained=<run dir "
            "or .pt of a diffusion_bc / flow_bc run> (python -m rlcore.train algo=diffusion_bc "
            "dataset=... trains one)"
        )


def check_task_reports_cost(algo: str, env_id: str, env_kwargs: dict[str, Any]) -> None:
    """Refuse, before the run writes anything, a constrained algorithm on a task whose
    steps report no ``info["cost"]`` (one step of a separate env, seeded: the run's envs
    and RNGs are not touched). A task that cannot be made alone here is left to the loop."""
    try:
        probe = gym.make(env_id, **env_kwargs)
    except Exception:  # noqa: BLE001 - e.g. a device-only task: the loop checks at its first step
        return
    try:
        probe.reset(seed=0)
        probe.action_space.seed(0)
        info = probe.step(probe.action_space.sample())[4]
    finally:
        probe.close()
    if "cost" not in info:
        raise ConfigError(f"algo={algo}: {NO_COST}")


def _build_envs(
    spec: catalog.Algorithm,
    plan: RunPlan,
    cfg_dict: dict[str, Any],
    run_dir: Path,
    offline_run: bool,
    device: torch.device,
) -> tuple[Any, Any]:
    """The training vector env (the plan's env recipe, a snapshot-reset base wrapper when
    configured; one env for a run that never steps it) and the evaluation vector env."""
    env_cfg, env_id, seed = cfg_dict["env"], cfg_dict["env"]["id"], int(cfg_dict["seed"])
    normalize = _env_recipe(cfg_dict, plan)
    base_wrappers = []
    num_envs = 1 if offline_run else int(env_cfg["num_envs"])
    if (cfg_dict.get("snapshot") or {}).get("teacher"):
        if offline_run:
            raise ConfigError(
                f"snapshot.teacher: algo={spec.name} does not step the env here; snapshot "
                "reset needs an online phase"
            )
        base_wrappers.append(snapshot_reset(cfg_dict, spec.name, env_id, normalize, run_dir))
    env = make_vec_env(
        seed=seed,
        base_wrappers=base_wrappers,
        device=device,  # where backend=mjx simulates (the other back ends run on the CPU)
        **train_env_recipe(cfg_dict, plan, num_envs),
    )
    eval_envs = max(1, min(int(cfg_dict["eval_envs"]), int(cfg_dict["eval_episodes"])))
    eval_env = make_vec_env(env_id, eval_envs, seed=seed + 1, **normalize)
    return env, eval_env


def _env_recipe(cfg_dict: dict[str, Any], plan: RunPlan) -> dict[str, Any]:
    """The ``make_vec_env`` options that training and evaluation envs share."""
    env_cfg = cfg_dict["env"]
    return {
        "normalize_obs": plan.env.normalize_obs,
        "gamma": plan.env.reward_gamma,
        "clip_obs": float(env_cfg.get("clip_obs", 10.0)),
        "max_episode_steps": env_cfg.get("max_episode_steps"),
        "env_kwargs": env_cfg.get("kwargs") or {},
        "flatten_obs": bool(env_cfg.get("flatten_obs", False)),
        # diffusion / flow policies conditioned on the last T observations
        "obs_history": plan.env.obs_history,
    }


def train_env_recipe(cfg_dict: dict[str, Any], plan: RunPlan, num_envs: int) -> dict[str, Any]:
    """The training env's ``make_vec_env`` options (picklable: distributed actors build
    their envs from it), without the seed, the device and snapshot reset's base wrapper."""
    env_cfg = cfg_dict["env"]
    return {
        "name": env_cfg["id"],
        "num_envs": num_envs,
        "backend": env_cfg.get("backend", "sync"),
        # the env's running-std reward scaling (PPO family); offline recipes scale rewards by
        # the dataset's return range instead (``normalize_reward_by_returns``, applied to
        # dataset and online rewards alike by ``_prepare_offline``'s reward transform)
        "normalize_reward": plan.env.normalize_reward,
        "clip_reward": float(env_cfg.get("clip_reward", 10.0)),
        "action_chunk": plan.env.action_chunk,  # DPPO / ReinFlow act in chunks
        "mjx_impl": str(env_cfg.get("mjx_impl", "jax")),
        **_env_recipe(cfg_dict, plan),
    }


def _eval_video(
    cfg_dict: dict[str, Any], plan: RunPlan, run_dir: Path, logger: Logger
) -> EvalVideo | None:
    """``eval_video_every=K``: every K-th evaluation also records one episode on a
    rendering copy of the eval env (MP4 in ``<run dir>/videos``, GIF in TensorBoard)."""
    every = int(cfg_dict.get("eval_video_every") or 0)
    if every == 0:
        return None
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering; read at the first render
    env_cfg = cfg_dict["env"]

    def make_env() -> Any:
        return make_vec_env(
            env_cfg["id"], 1, seed=int(cfg_dict["seed"]) + 1,
            normalize_obs=plan.env.normalize_obs, clip_obs=float(env_cfg.get("clip_obs", 10.0)),
            max_episode_steps=env_cfg.get("max_episode_steps"),
            env_kwargs={**(env_cfg.get("kwargs") or {}), "render_mode": "rgb_array"},
            flatten_obs=bool(env_cfg.get("flatten_obs", False)), obs_history=plan.env.obs_history,
        )  # fmt: skip

    def publish(path: Path, frames: list[Any], fps: float, step: int) -> None:
        logger.video("eval/video", path, frames, fps, step)

    return EvalVideo(make_env, every, int(cfg_dict["eval_every"]), run_dir / "videos", publish)


def _make_logger(cfg_dict: dict[str, Any], run_dir: Path, resume_step: int | None) -> Logger:
    """The run's logger, as the ``logger`` config group asks."""
    log_cfg = cfg_dict.get("logger", {})
    return Logger(
        run_dir,
        tensorboard=log_cfg.get("tensorboard", True),
        csv_files=log_cfg.get("csv", True),
        console=log_cfg.get("console", True),
        resume_step=resume_step,
        progress_interval_s=float(log_cfg.get("progress_interval_s", 10.0)),
    )


def _checkpoint_writer(
    algo: str, cfg_dict: dict[str, Any], spaces: dict[str, Any], run_dir: Path
) -> Callable[[dict[str, Any]], Path]:
    """``save(loop_state)``: the run's latest checkpoint (the previous one kept) and, with
    ``keep_agent_snapshots``, an agent-only file per checkpoint."""

    def save(loop_state: dict[str, Any]) -> Path:
        step = loop_state["counters"]["step"]
        base = {
            "format": FORMAT_VERSION,
            "algo": algo,
            "config": cfg_dict,
            "spaces": spaces,
            # deployment needs the observation statistics the policy was trained with
            "obs_normalizer": (loop_state.get("env") or {})
            .get("wrappers", {})
            .get("NormalizeObservation"),
        }
        path = save_checkpoint(
            {**base, "loop": loop_state, "agent": loop_state["agent"]},
            run_dir / CHECKPOINT_DIR / LATEST,
            keep_previous=True,
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

    return save


def _loop_settings(cfg_dict: dict[str, Any], plan: RunPlan, compiled: bool) -> LoopSettings:
    """The loops' settings: the run-level cadences plus the plan's schedule (``compiled``:
    the agent resolved ``compile`` on, its first update compiles)."""
    return LoopSettings(
        total_steps=int(cfg_dict["total_steps"]),
        seed=int(cfg_dict["seed"]),
        eval_every=int(cfg_dict["eval_every"]),
        eval_episodes=int(cfg_dict["eval_episodes"]),
        checkpoint_every=int(cfg_dict["checkpoint_every"]),
        checkpoint_every_s=float(cfg_dict.get("checkpoint_every_s") or 0.0),
        log_every=int(cfg_dict["log_every"]),
        learning_starts=plan.schedule.learning_starts,
        batch_size=plan.schedule.batch_size,
        updates_per_step=plan.schedule.updates_per_step,
        updates_per_vector_step=plan.schedule.updates_per_vector_step,
        utd_ratio=plan.schedule.utd_ratio,
        rollout_steps=plan.schedule.rollout_steps,
        returns=plan.returns,
        stop_at_return=cfg_dict.get("stop_at_return"),
        stop_after_s=cfg_dict.get("stop_after_s"),
        compiled=compiled,
    )


@dataclass
class _Phases:
    """What ``run_phases`` runs: the phases and what they draw from, fill and score with."""

    phases: list[Phase]
    buffer: ReplayBuffer | None = None
    stateful: dict[str, Any] = field(default_factory=dict)
    score: Callable[[float], float] | None = None
    reward_transform: Callable[[Any], Any] | None = None
    evaluate_first: bool = False  # an agent loaded with init_from: its return at step 0


def _run_loop(
    spec: catalog.Algorithm,
    cfg_dict: dict[str, Any],
    plan: RunPlan,
    agent: Any,
    env: Any,
    eval_env: Any,
    dataset: Any,
    settings: LoopSettings,
    run: RunContext,
    logger: Logger,
) -> dict[str, float]:
    """Build the phases the algorithm's plan declares and run them in the one loop
    skeleton (``rlcore.loops.run_phases``)."""
    dist = DistributedSettings.from_config(cfg_dict.get("distributed"))
    if plan.schedule.on_policy:
        obs_shape = env.single_observation_space.shape
        action_shape, action_dtype = action_storage(env.single_action_space)
        # rollout workers: each worker's envs side by side in one rollout
        rollout_envs = env.num_envs * max(dist.actors, 1)
        rollout = RolloutBuffer(
            settings.rollout_steps, rollout_envs, obs_shape, action_shape, agent.device,
            action_dtype,
        )  # fmt: skip
        built = _Phases([rollout_phase(rollout, settings.total_steps)])
    else:
        built = _replay_phases(cfg_dict, plan, agent, env, dataset, settings, logger)
    if len(built.phases) > 1:
        steps = " -> ".join(
            f"{p.name}{' (random actions)' if p.random_actions else ''} {p.steps:,}"
            for p in built.phases
        )
        logger.progress(
            f"[{run.name}] phases: {steps}; offline data online: {plan.schedule.offline_data}",
            force=True,
        )
    source, rollouts = _actors(spec, cfg_dict, dist, plan, agent, env, built, run, logger)
    try:
        return run_phases(
            agent,
            built.phases,
            env,
            eval_env,
            settings,
            run,
            buffer=built.buffer,
            stateful=built.stateful,
            score=built.score,
            reward_transform=built.reward_transform,
            evaluate_first=built.evaluate_first,
            source=source,
            rollouts=rollouts,
        )
    finally:  # a finished, failed or interrupted (Ctrl-C) run stops every actor
        for remote in (source, rollouts):
            if remote is not None:
                remote.close()


def check_distributed(
    spec: catalog.Algorithm, plan: RunPlan, cfg_dict: dict[str, Any], agent: Any
) -> None:
    """Refuse ``distributed.*`` options that are invalid, or that actors cannot run yet,
    with one message naming the fix (before anything is written); without Ray installed,
    say how to install it."""
    dist = DistributedSettings.from_config(cfg_dict.get("distributed"))
    if dist.actors == 0:
        return
    init_from = bool(cfg_dict.get("init_from"))
    unsupported = [
        (plan.schedule.on_policy and dist.outbox > 0, "continuous actors (outbox) of a "
         "rollout algorithm"),
        (not plan.schedule.on_policy and (plan.env.normalize_obs or plan.env.normalize_reward),
         "env normalisation of replay runs (per-actor statistics)"),
        (bool((cfg_dict.get("snapshot") or {}).get("teacher")), "snapshot reset"),
        (isinstance(agent, PerEnvState), "agents with per-env state"),
        (needs_dataset(plan, init_from), "online phases next to a "
         "dataset (their buffer's next actions assume one env stream)"),
    ]  # fmt: skip
    reasons = [reason for bad, reason in unsupported if bad]
    if reasons:
        raise ConfigError(
            f"distributed.actors={dist.actors}: not supported yet for {', '.join(reasons)}; "
            "use distributed.actors=0"
        )
    require_ray()


def _actors(
    spec: catalog.Algorithm,
    cfg_dict: dict[str, Any],
    dist: DistributedSettings,
    plan: RunPlan,
    agent: Any,
    env: Any,
    built: _Phases,
    run: RunContext,
    logger: Logger,
) -> tuple[RayActors | None, RayRollouts | None]:
    """When ``distributed.actors`` > 0, the Ray actors that feed the replay phases, or
    the rollout workers of a rollout phase (None: the loop steps its own env;
    ``check_distributed`` refused what they cannot run)."""
    if dist.actors == 0:
        return None, None
    recipe = ActorRecipe(
        spec.agent_class, spec.config_from_dict(cfg_dict["algo"]),
        train_env_recipe(cfg_dict, plan, env.num_envs), int(cfg_dict["seed"]),
    )  # fmt: skip
    resumed = run.resume["counters"]["step"] if run.resume is not None else 0
    if plan.schedule.on_policy:
        workers = RayRollouts(recipe, dist, env, note=logger.note, incarnation_base=resumed)
        built.stateful["rollout_workers"] = workers  # the merged normaliser statistics
        logger.note(f"{dist.actors} Ray rollout workers ({env.num_envs} env(s) each)")
        return None, workers
    if not any(phase.replays for phase in built.phases):
        return None, None
    actors = RayActors(recipe, dist, note=logger.note, incarnation_base=resumed)
    logger.note(
        f"{dist.actors} Ray actors ({env.num_envs} env(s) each, batches of {dist.batch_steps} "
        f"vector steps; weights published every {dist.publish_every} update(s))"
    )
    return actors, None


def _replay_phases(
    cfg_dict: dict[str, Any],
    plan: RunPlan,
    agent: Any,
    env: Any,
    dataset: Any,
    settings: LoopSettings,
    logger: Logger,
) -> _Phases:
    """Offline pre-training on the dataset (``_load_dataset``'s, None when the run needs
    none), warm-up and online phases on a replay buffer (or on the dataset mixed in, as
    ``offline_data`` says), as the plan's schedule asks."""
    init_from = bool(cfg_dict.get("init_from"))
    offline_steps, online_steps = phase_lengths(plan, init_from)
    built = _Phases([], evaluate_first=init_from)
    if dataset is not None:
        dataset, built.score, built.reward_transform = _prepare_offline(
            cfg_dict, plan, agent, dataset, logger
        )
        dataset.seed(settings.seed)
        built.stateful["dataset"] = dataset
    if offline_steps > 0:
        built.phases.append(Phase("offline", offline_steps, dataset))
    if online_steps > 0:
        built.buffer = buffer = _replay_buffer(plan, agent, env, settings, online_steps, dataset)
        sampler: Any = buffer
        if dataset is not None and plan.schedule.offline_data == "mix":
            fraction = plan.schedule.offline_fraction
            sampler = built.stateful["mixed"] = MixedSampler(
                [(dataset, fraction), (buffer, 1 - fraction)]
            )
        warmup = min(warmup_length(plan.schedule, env.num_envs), online_steps)
        random_steps = min(plan.schedule.learning_starts, online_steps - warmup)
        built.phases += [
            Phase("warmup", warmup),
            Phase("warmup", random_steps, random_actions=True),
            Phase(
                "online",
                online_steps - warmup - random_steps,
                sampler,
                updates_per_step=settings.updates_per_step,
                updates_per_vector_step=settings.updates_per_vector_step,
            ),
        ]
    built.phases = [phase for phase in built.phases if phase.steps > 0]
    return built


def _replay_buffer(
    plan: RunPlan,
    agent: Any,
    env: Any,
    settings: LoopSettings,
    online_steps: int,
    dataset: Any,
) -> ReplayBuffer:
    """The online phases' replay buffer: every online transition is kept unless the
    algorithm caps its capacity; with ``offline_data=keep`` the dataset's rows first."""
    capacity = max(online_steps, env.num_envs)
    if plan.schedule.buffer_size is not None:
        capacity = min(plan.schedule.buffer_size, capacity)
    if dataset is not None and plan.schedule.offline_data == "keep":
        return dataset.to_replay_buffer(len(dataset) + capacity, agent.device, settings.seed)
    action_shape, action_dtype = action_storage(env.single_action_space)
    return ReplayBuffer(
        capacity,
        env.single_observation_space.shape,
        action_shape,
        env.num_envs,
        device=agent.device,
        seed=settings.seed,
        action_dtype=action_dtype,
        next_action=dataset is not None,  # offline-style critics (ReBRAC) read it
        # constrained algorithms learn a cost critic from the task's info["cost"]
        channels={"cost": ((), torch.float32)} if plan.env.cost else None,
    )


def load_init_from(cfg_dict: dict[str, Any], spec: catalog.Algorithm) -> dict[str, Any]:
    """The checkpoint ``init_from=`` names (a run directory or a .pt file), checked to hold
    an agent of this algorithm; its dataset becomes the run's when none is given."""
    try:
        state, path, _ = read_checkpoint(cfg_dict["init_from"])
    except FileNotFoundError as error:
        raise ConfigError(f"init_from={cfg_dict['init_from']}: {error}") from None
    if state.get("algo") != spec.name:
        raise ConfigError(
            f"init_from={path} holds a {state.get('algo')} agent; algo={spec.name} can only start "
            f"from a {spec.name} run (pass algo={state.get('algo')} or another run)"
        )
    if not cfg_dict.get("dataset"):
        cfg_dict["dataset"] = state.get("config", {}).get("dataset")
    return state


def check_whole_agent(ours: dict[str, Any], saved: dict[str, Any], init_from: str) -> None:
    """``init_from=`` continues training an agent: its checkpoint must hold every part
    (``ours``), not an agent-only snapshot without optimisers or target networks (those
    are for acting: ``rlcore.evaluate``, ``load_policy``, ``snapshot.teacher``)."""
    missing = sorted(set(ours) - set(saved))
    if missing:
        raise ConfigError(
            f"init_from={init_from} is an agent-only snapshot (it lacks {missing}): start from "
            "the run directory it was taken from, or from a checkpoint of a whole run"
        )


@contextmanager
def stop_signals(run: RunContext, logger: Logger) -> Iterator[None]:
    """While the block runs, SIGINT (Ctrl-C) and SIGTERM ask the loop to save a checkpoint
    and stop (``run.stop_request``); a second Ctrl-C aborts at once without saving.
    Only in the main thread (signal handlers cannot be set elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if run.stop_request is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        run.stop_request = name
        logger.note(
            f"received {name}: saving a checkpoint at the next step boundary, then stopping"
            + (" (Ctrl-C again aborts without saving)" if signum == signal.SIGINT else "")
        )

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@contextmanager
def log_warnings(logger: Logger) -> Iterator[None]:
    """Warnings raised during the run are shown as usual and also written to train.log."""
    original = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        # gymnasium colours its warnings with terminal escape codes: plain text here
        message = ANSI_ESCAPE.sub("", str(message))
        original(message, category, filename, lineno, file, line)
        logger.write_log(f"{category.__name__}: {message}")

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = original


def _load_dataset(spec: catalog.Algorithm, plan: RunPlan, cfg_dict: dict[str, Any]) -> Any:
    """The offline dataset the run trains on or mixes in (None when it needs none), its
    observations stacked as the env shows them; loaded (downloaded, for a Minari id not
    on disk) before the run writes anything. One not available here raises
    FileNotFoundError (a missing input), a malformed one ConfigError."""
    from rlcore.offline.datasets import DatasetError, DatasetNotAvailableError, load_dataset

    init_from = bool(cfg_dict.get("init_from"))
    if plan.schedule.on_policy or not needs_dataset(plan, init_from):
        return None
    source = cfg_dict["dataset"]
    try:
        dataset = load_dataset(source, gamma=plan.gamma, env_id=cfg_dict["env"]["id"])
        dataset.stack_observations(plan.env.obs_history)  # as the env shows
    except DatasetNotAvailableError as error:
        raise FileNotFoundError(f"{str(error).rstrip('.')}{_recipe_hint(source)}") from None
    except DatasetError as error:
        raise ConfigError(f"dataset={source}: {error}") from None
    return dataset


def _recipe_hint(dataset_id: str) -> str:
    """For an id the D4RL-like recipe records (``local/hopper/medium-v0``), the command
    that records it; empty otherwise."""
    from rlcore.offline.datasets import dataset_ids

    parts = str(dataset_id).split("/")
    match = re.fullmatch(r"(.+)-v(\d+)", parts[-1]) if len(parts) == 3 else None
    if match is None:
        return ""
    try:
        ids = dataset_ids(parts[1], namespace=parts[0], version=int(match.group(2)))
    except UnknownEnvError:
        return ""
    if dataset_id not in ids.values():
        return ""
    env = resolve_env_id(parts[1]).split("-v")[0]
    return (
        f". It is one of the D4RL-like levels `python -m rlcore.offline.collect recipe "
        f"env={env} namespace={parts[0]} version={match.group(2)}` records (docs/datasets.md)"
    )


def _prepare_offline(
    cfg_dict: dict[str, Any], plan: RunPlan, agent: Any, dataset: Any, logger: Logger
) -> tuple[Any, Any, Callable[[Any], Any] | None]:
    """Apply the recipe's reward/state normalisation to the loaded dataset, and build the
    normalised-score function (None, with a note, when no reference exists) and the
    reward transform online rewards need to match (None when rewards are unchanged)."""
    from rlcore.offline.scores import ScoreReferenceError, normalized_score

    env_id = cfg_dict["env"]["id"]
    factor = 1.0
    if plan.data.normalize_reward_by_returns:
        factor = dataset.normalize_rewards_by_return_range()
    scale, bias = plan.data.reward_scale, plan.data.reward_bias
    if (scale, bias) != (1.0, 0.0):
        dataset.scale_rewards(scale, bias)

    def reward_transform(reward: Any) -> Any:
        """The dataset's reward transform, applied to online rewards too."""
        return reward * (factor * scale) + bias

    if plan.data.normalize_states:
        require(agent, StateStatistics, "normalize_states needs (observation statistics)")
        agent.obs_normalizer.fit(dataset.obs.to(agent.device))
    if isinstance(agent, DatasetUser):  # channels the agent samples (action chunks, ...)
        agent.prepare_dataset(dataset)
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
    transform = None if (factor, scale, bias) == (1.0, 1.0, 0.0) else reward_transform
    return dataset.to(agent.device), score, transform


def _fail(message: str, code: int = 2, run_dir: Path | None = None) -> None:
    """Print one ``error:`` line (also into the run's train.log) and exit with ``code``.
    Called while handling an exception with ``HYDRA_FULL_ERROR=1`` set, it re-raises that
    exception instead, so its traceback is shown."""
    print(f"error: {message}", file=sys.stderr)
    if run_dir is not None and run_dir.is_dir():
        with (run_dir / "train.log").open("a") as log:
            log.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] error: {message}\n")
    if os.environ.get("HYDRA_FULL_ERROR") == "1" and sys.exc_info()[1] is not None:
        raise  # noqa: PLE0704 - re-raise the exception being handled by the caller
    raise SystemExit(code)


def _env_config_name(value: str) -> list[str]:
    """Override tokens for ``env=<value>``: a config file name, or the generic gym config."""
    key = value.lower().replace("-", "").replace("_", "")
    if key in SHORT_NAMES or key == "gym":  # gym: the generic config, with env.id=<id>
        return [f"env={key}"]
    env_id = resolve_env_id(value)  # raises UnknownEnvError
    for short, full in SHORT_NAMES.items():
        if full == env_id:
            return [f"env={short}"]
    return ["env=gym", f"env.id={env_id}"]


def normalize_overrides(args: list[str]) -> list[str]:
    """Map friendly names (``env=Hopper``, ``env=Pusher-v5``, ``algo=SAC``) onto config
    files and fail early, with one clear message, on unknown algorithms or envs."""
    from rlcore.configs import register_algorithm_defaults

    out: list[str] = []
    algorithms = [default_algorithm()]
    seen: set[str] = set()
    for arg in args:
        key, sep, value = arg.partition("=")
        seen.add(key)
        if sep and key == "algo":
            names = value.split(",")
            algorithms = [catalog.get(name).name for name in names]  # UnknownAlgorithmError
            out.append("algo=" + ",".join(n.lower() for n in names))
        elif sep and key.lstrip("+") == "experiment":  # a recipe's own algorithm
            recipes = [a for v in value.split(",") if (a := experiment_algorithm(v))]
            algorithms = recipes + (algorithms if "algo" in seen else [])
            out.append(arg)
        elif sep and key == "hydra.run.dir":  # rlcore places the run dir itself
            out.append(f"run_dir={value}")
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
    register_algorithm_defaults(algorithms)  # only these: a run imports one algorithm
    return out


def experiment_algorithm(name: str) -> str | None:
    """The algorithm a packaged ``configs/experiment/<name>.yaml`` selects, if any."""
    path = resources.files("rlcore.configs").joinpath("experiment", f"{name}.yaml")
    if not path.is_file():
        return None
    for entry in OmegaConf.create(path.read_text()).get("defaults", []):
        if isinstance(entry, DictConfig) and "override /algo" in entry:
            return str(entry["override /algo"])
    return None


def default_algorithm() -> str:
    """The algorithm the packaged config.yaml trains when ``algo=`` is not given."""
    text = resources.files("rlcore.configs").joinpath("config.yaml").read_text()
    for entry in OmegaConf.create(text).defaults:
        if isinstance(entry, DictConfig) and "algo" in entry:
            return str(entry.algo)
    raise ConfigError("configs/config.yaml names no default algo")


def _remove_if_never_started(run_dir: Path) -> None:
    """Delete a sweep job's directory that Hydra created and the refused run left empty
    (single runs write nothing before the run is known to be valid)."""
    if not run_dir.is_dir():
        return
    entries = {p.name for p in run_dir.iterdir()}
    log = run_dir / "train.log"
    if entries <= {".hydra", "train.log"} and (not log.exists() or log.stat().st_size == 0):
        shutil.rmtree(run_dir, ignore_errors=True)
        # and the runs/<algo>/<env>/ folders it may have created, while they are empty
        for parent in list(run_dir.parents)[:3]:
            if parent == Path.cwd() or not parent.is_dir() or any(parent.iterdir()):
                break
            parent.rmdir()


# Exit codes of ``python -m rlcore.train`` (docs/cli.md, "Exit codes")
EXIT_FAILED = 1  # the run started and failed: a NaN loss, a full disk, an unexpected error
EXIT_CONFIG = 2  # refused before anything was written: the command or its config is wrong
EXIT_MISSING = 3  # refused before anything was written: an input file or directory is missing
EXIT_SIGINT, EXIT_SIGTERM = 130, 143  # stopped on request (checkpoint saved): not an error

_CONFIG_GROUPS = ("algo", "env", "logger")


def _saved_config(resume: str | Path) -> dict[str, Any]:
    """The composed config the resumed run last ran with: its ``config_resumed.yaml``
    (written by its latest resume) or ``config.yaml``, else the checkpoint's own."""
    run_dir = resume_run_dir(resume)
    for name in ("config_resumed.yaml", "config.yaml"):
        if (run_dir / name).is_file():
            return OmegaConf.to_container(OmegaConf.load(run_dir / name))  # type: ignore[return-value]
    if Path(resume).is_dir() and not has_checkpoint(resume):
        raise FileNotFoundError(
            f"resume={resume}: {run_dir} holds no run (no config.yaml, no checkpoint); pass "
            "the directory of an earlier run, or start a new one with run_dir="
        )
    return read_checkpoint(resume)[0]["config"]


def resumed_config(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """The config of a ``resume=`` run: the run's own composed config (algorithm, env and
    every override it ran with), with only the keys the command line names (``overrides``,
    Hydra's task overrides) taken from ``cfg``, the config Hydra composed for them. A
    group override (``algo=``, ``env=``) must name the run's own algorithm / env."""
    saved = _saved_config(cfg.resume)
    out = OmegaConf.create(saved)
    for item in overrides:
        key = item.split("=", 1)[0].lstrip("+")
        if key.startswith("~"):
            raise ConfigError(f"{item}: removing a key is not possible with resume=")
        if key in ("resume", "algo_env"):
            continue
        if key == "algo" and cfg.algo.name != saved["algo"]["name"]:
            raise ResumeMismatchError(
                f"cannot resume: {resume_run_dir(cfg.resume)} is a {saved['algo']['name']} run; "
                f"drop algo= (resume= restores the run's own config), or start a new run"
            )
        if key == "env" and resolve_env_id(cfg.env.id) != saved["env"]["id"]:
            raise ResumeMismatchError(
                f"cannot resume: {resume_run_dir(cfg.resume)} trained on {saved['env']['id']}; "
                f"drop env= (resume= restores the run's own config), or start a new run"
            )
        if key in _CONFIG_GROUPS:
            if key == "logger":
                out.logger = cfg.logger
            continue
        OmegaConf.update(out, key, OmegaConf.select(cfg, key), force_add=True)
    out.resume = cfg.resume
    return out


def _hydra_record(hydra_cfg: Any, cfg: DictConfig, run_dir: Path, resumed: bool) -> None:
    """Hydra's record of the run (what ``hydra.output_subdir`` would write), written once
    the run is valid: ``.hydra/`` (``.hydra_resumed/`` beside it on resume)."""
    out = run_dir / (".hydra_resumed" if resumed else ".hydra")
    out.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, out / "config.yaml")
    OmegaConf.save(OmegaConf.create({"hydra": hydra_cfg}), out / "hydra.yaml")
    OmegaConf.save(hydra_cfg.overrides.task, out / "overrides.yaml")


# the keys a sweep varies, from the command line (cli) to every job, whichever process
# (joblib, SLURM, Ray) the launcher runs it in: the environment is inherited
SWEPT_KEYS_ENV = "RLCORE_SWEPT_KEYS"


def swept_keys(args: list[str]) -> list[str]:
    """The override keys a ``-m`` command line sweeps (``seed=0,1,2``, ``range(3)``...)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides([a for a in args if not a.startswith("-")])
    return [o.key_or_group for o in parsed if o.is_sweep_override()]


def sweep_label(job_overrides: list[str]) -> str:
    """A sweep job's values of the swept keys (``seed=1 algo.tau=0.01``) for its progress
    lines, algorithm and env left out (the prefix names them); the seed when the sweep
    keys are unknown (a launcher that drops the environment)."""
    swept = os.environ.get(SWEPT_KEYS_ENV)
    keys = set(swept.split(",")) if swept is not None else {"seed"}
    values = [o for o in job_overrides if o.split("=", 1)[0] in keys - {"algo", "env"}]
    return " ".join(values)


def _continue_command(run_dir: Path) -> str:
    return f"python -m rlcore.train resume={run_dir}"


def _hydra_main(cfg: DictConfig) -> float:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    resuming = _resuming(cfg.get("resume"))
    if multirun:  # Hydra made the job's directory under the sweep dir
        run_dir = Path(hydra_cfg.runtime.output_dir)
    else:
        run_dir = resume_run_dir(cfg.resume) if resuming else Path(cfg.run_dir)
    # in a sweep, say which job failed (launchers run the jobs in other processes)
    job = f"job {hydra_cfg.job.num} ({run_dir}): " if multirun else ""
    label = sweep_label(list(hydra_cfg.overrides.task)) if multirun else ""
    try:
        if resuming:
            cfg = resumed_config(cfg, list(hydra_cfg.overrides.task))
        result = train(
            cfg,
            run_dir,
            on_valid=lambda: _hydra_record(hydra_cfg, cfg, run_dir, resuming),
            label=label,
        )
    except (ConfigError, RunDirExistsError, ResumeMismatchError, RunLockedError) as error:
        if multirun and not resuming:
            _remove_if_never_started(run_dir)
        _fail(f"{job}{error}", EXIT_CONFIG)
    except FileNotFoundError as error:
        if multirun and not resuming:
            _remove_if_never_started(run_dir)
        _fail(f"{job}{error}", EXIT_MISSING)
    except TrainingInterrupted as error:
        code = EXIT_SIGINT if error.signal_name == "SIGINT" else EXIT_SIGTERM
        _stopped(f"{job}{error}", code, run_dir)
    except CheckpointWriteError as error:
        _fail(
            f"{job}{error}. The run stopped; free disk space, then continue with "
            f"{_continue_command(run_dir)} (from its last good checkpoint)",
            EXIT_FAILED,
            run_dir,
        )
    except (TrainingStopped, ValueError) as error:
        _fail(f"{job}{error}", EXIT_FAILED, run_dir)
    except KeyboardInterrupt:
        _stopped(
            f"aborted without saving; {_continue_command(run_dir)} continues from the last "
            "checkpoint written before (if any)",
            EXIT_SIGINT,
            run_dir,
        )
    return float(result.get("eval/return", float("nan")))


def _stopped(message: str, code: int, run_dir: Path) -> None:
    """A run stopped on the user's request: one ``interrupted:`` line (not an error), the
    command that continues it, and ``code``."""
    line = f"interrupted: {message}"
    if "resume=" not in message:
        line += f". Continue with: {_continue_command(run_dir)}"
    print(line, file=sys.stderr)
    if run_dir.is_dir():
        with (run_dir / "train.log").open("a") as log:
            log.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {line}\n")
    raise SystemExit(code)


def check_run_dir_overrides(args: list[str]) -> None:
    """Before Hydra composes the config: ``resume=`` must exist, and ``run_dir=`` must not
    already hold a run unless it is being resumed."""
    if "-m" in args or "--multirun" in args:
        return
    values = dict(arg.split("=", 1) for arg in args if "=" in arg and not arg.startswith("-"))
    resume = values.get("resume")
    if resume not in (None, "", "null", "None"):
        if not Path(resume).exists():
            _fail(
                f"resume={resume}: no such run directory or checkpoint file (nothing was "
                "created); pass the directory of an earlier run",
                EXIT_MISSING,
            )
        return
    if "run_dir" in values:  # hydra.run.dir= was mapped onto it (normalize_overrides)
        try:
            check_new_run_dir(values["run_dir"])  # one without a checkpoint is reused
        except (RunDirExistsError, RunLockedError) as error:
            _fail(str(error), EXIT_CONFIG)


def cli(argv: list[str] | None = None) -> None:
    """``python -m rlcore.train`` / ``rlcore-train``: Hydra CLI with friendly names."""
    import hydra

    args = list(sys.argv[1:] if argv is None else argv)
    if "--help" in args or "-h" in args:
        print(train_help())
        raise SystemExit(0)
    multirun = "-m" in args or "--multirun" in args
    try:
        args = normalize_overrides(args)
        check_overrides(args, multirun)
    except (catalog.UnknownAlgorithmError, UnknownEnvError, ConfigError) as error:
        _fail(str(error))
    check_run_dir_overrides(args)
    if multirun:
        os.environ[SWEPT_KEYS_ENV] = ",".join(swept_keys(args))
    sys.argv = [sys.argv[0], *args]
    main = hydra.main(version_base="1.3", config_path="pkg://rlcore.configs", config_name="config")(
        _hydra_main
    )
    main()


if __name__ == "__main__":
    cli()
