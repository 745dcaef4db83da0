"""The build step of a run: from its settled config (rlcore.settings.SettledRun) and its
algorithm's plan (rlcore.plan.RunPlan) to the objects the loop runs, and the checks that
refuse a run before anything is written.

``build`` makes the envs, loads the dataset (or refuses it), makes the agent and checks
it; ``build_phases`` makes the buffers, samplers and phases the plan declares, and
``actors`` the Ray actors that feed them. Nothing here writes to the run directory except
snapshot reset's saved snapshots (rlcore.train writes the run). The root reads typed
settings only: ``settings.env.clip_obs``, never ``cfg["env"]["clip_obs"]``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from rlcore.buffers import MixedSampler, NStepReturns, ReplayBuffer, RolloutBuffer
from rlcore.capabilities import DatasetUser, ModelBased, OnPolicy, StateStatistics, require
from rlcore.catalog import Algorithm
from rlcore.checks import (
    check_distributed,
    check_her,
    check_image_dataset,
    check_inputs,
    check_schedule,
    check_spaces,
    check_task_reports_cost,
    check_task_reports_success,
    check_whole_agent,
    load_init_from,
)
from rlcore.config import ConfigError
from rlcore.distributed import ActorRecipe, RayActors, RayRollouts
from rlcore.envs.make import UnknownEnvError, check_renders, make_vec_env, resolve_env_id
from rlcore.evaluation import EvalVideo
from rlcore.her import HerOptions, HindsightSampler, task_reward_function
from rlcore.logging import Logger
from rlcore.loops import Phase, RunContext, rollout_obs_shape, rollout_phase
from rlcore.model_based import ModelRollouts, load_fitted_dynamics, termination_rule
from rlcore.observations import ObsSpec, frame_stack_of, part_statistics
from rlcore.plan import RunPlan
from rlcore.settings import CorruptionSettings, RunSettings, SettledRun, with_dataset
from rlcore.spaces import action_storage


@dataclass
class Built:
    """What ``build`` made: the envs, the agent, the dataset (None when the run needs
    none), the ``init_from`` checkpoint's state (None without one) and the run, with the
    ``init_from`` run's dataset when it named none."""

    run: SettledRun
    plan: RunPlan
    env: Any
    eval_env: Any
    agent: Any
    dataset: Any = None
    init_state: dict[str, Any] | None = None

    def close(self) -> None:
        self.env.close()
        self.eval_env.close()


def build(
    algorithm: Algorithm,
    run: SettledRun,
    run_dir: Path,
    device: torch.device,
    resuming: bool,
) -> Built:
    """Envs, dataset and agent of ``run``, every check passed (a refusal raises
    ConfigError, a missing input FileNotFoundError); the envs are closed again when a
    check fails."""
    settings, plan = run.settings, run.algo.plan()
    init_from = bool(settings.init_from)
    init_state = None
    if init_from and not resuming:
        init_state, dataset_of_run = load_init_from(settings, algorithm.name)
        if not settings.dataset and dataset_of_run:
            run = with_dataset(run, dataset_of_run)
            settings = run.settings
    check_inputs(algorithm.name, plan, settings, resuming)
    offline_run = plan.phase_lengths(init_from)[1] == 0 and not plan.schedule.on_policy
    env, eval_env = build_envs(algorithm.name, plan, settings, run_dir, offline_run, device)
    try:
        obs_space, action_space = env.single_observation_space, env.single_action_space
        check_her(algorithm.name, plan, settings, obs_space)  # first: names her= as the cause
        check_spaces(algorithm, settings.env.id, obs_space, action_space, plan, settings)
        dataset = load_dataset(plan, settings, obs_space)  # a download, too, before any write
        if dataset is not None:
            if plan.env.cost and dataset.cost is None:  # a cost critic learns from the data
                raise ConfigError(
                    f"dataset={settings.dataset}: algo={algorithm.name} learns costs from the "
                    "data, and this dataset has none: record a cost-labelled one (python -m "
                    "rlcore.offline.safe_recipe) or load a D4RL-format file with a 'costs' key"
                )
            try:
                dataset.check_env(obs_space, action_space)
                if isinstance(obs_space, gym.spaces.Dict):  # as the agent flattens them
                    dataset.arrange_parts(ObsSpec.from_space(obs_space))
            except ValueError as error:
                raise ConfigError(f"dataset={settings.dataset}: {error}") from None
        check_schedule(plan, settings.env.num_envs, init_from)
        if plan.env.cost:
            check_task_reports_cost(algorithm.name, settings.env.id, settings.env.kwargs)
        if settings.stop_at_success is not None:
            check_task_reports_success(
                settings.stop_at_success, settings.env.id, settings.env.kwargs
            )
        agent = algorithm.agent_class(obs_space, action_space, run.algo, device=device)
        if dataset is not None and dataset.image_parts:
            check_image_dataset(str(settings.dataset), plan, bool(settings.init_from))
        elif dataset is not None and dataset.obs_layout is not None and agent.plumbing.obs_parts:
            raise ConfigError(
                f"dataset={settings.dataset}: algo={algorithm.name} reads the observation's "
                "parts apart, and a dataset's dict observations reach it as one vector"
            )
        if plan.schedule.on_policy:
            require(agent, OnPolicy, f"algo={algorithm.name} needs: its plan runs rollouts")
        check_distributed(plan, settings, agent)
        if init_state is not None:
            check_whole_agent(agent.state_dict(), init_state["agent"], str(settings.init_from))
            agent.load_state_dict(init_state["agent"])
    except BaseException:
        env.close()
        eval_env.close()
        raise
    return Built(run, plan, env, eval_env, agent, dataset, init_state)


# ----------------------------------------------------------------------------- envs


def env_recipe(settings: RunSettings, plan: RunPlan) -> dict[str, Any]:
    """The ``make_vec_env`` options that training and evaluation envs share."""
    env = settings.env
    return {
        "normalize_obs": plan.env.normalize_obs,
        "part_statistics": part_statistics,  # a dict observation: standardised part by part
        "gamma": plan.env.reward_gamma,
        "clip_obs": env.clip_obs,
        "max_episode_steps": env.max_episode_steps,
        "env_kwargs": dict(env.kwargs),
        "flatten_obs": env.flatten_obs,
        # rendered observations (envs/pixels.py)
        "obs": env.obs,
        "camera": env.camera,
        "image_size": env.image_size,
        "frame_stack": env.frame_stack,
        # diffusion / flow policies conditioned on the last T observations
        "obs_history": plan.env.obs_history,
    }


def train_env_recipe(settings: RunSettings, plan: RunPlan, num_envs: int) -> dict[str, Any]:
    """The training env's ``make_vec_env`` options (picklable: distributed actors build
    their envs from it), without the seed, the device and snapshot reset's base wrapper."""
    env = settings.env
    return {
        "name": env.id,
        "num_envs": num_envs,
        "backend": env.backend,
        # the env's running-std reward scaling (PPO family); offline recipes scale rewards by
        # the dataset's return range instead (``normalize_reward_by_returns``, applied to
        # dataset and online rewards alike by ``prepare_offline``'s reward transform)
        "normalize_reward": plan.env.normalize_reward,
        "clip_reward": env.clip_reward,
        "action_chunk": plan.env.action_chunk,  # DPPO / ReinFlow act in chunks
        "mjx_impl": env.mjx_impl,
        **env_recipe(settings, plan),
    }


def build_envs(
    name: str,
    plan: RunPlan,
    settings: RunSettings,
    run_dir: Path,
    offline_run: bool,
    device: torch.device,
) -> tuple[Any, Any]:
    """The training vector env (the plan's env recipe, a snapshot-reset base wrapper when
    configured; one env for a run that never steps it) and the evaluation vector env."""
    shared, seed = env_recipe(settings, plan), settings.seed
    base_wrappers = []
    num_envs = 1 if offline_run else settings.env.num_envs
    if settings.snapshot.teacher:
        if offline_run:
            raise ConfigError(
                f"snapshot.teacher: algo={name} does not step the env here; snapshot "
                "reset needs an online phase"
            )
        base_wrappers.append(snapshot_reset(settings, name, shared, run_dir))
    env = make_vec_env(
        seed=seed,
        base_wrappers=base_wrappers,
        device=device,  # where backend=mjx simulates (the other back ends run on the CPU)
        **train_env_recipe(settings, plan, num_envs),
    )
    eval_envs = max(1, min(settings.eval_envs, settings.eval_episodes))
    eval_env = make_vec_env(settings.env.id, eval_envs, seed=seed + 1, evaluation=True, **shared)
    return env, eval_env


def snapshot_reset(
    settings: RunSettings, algo_name: str, shared: dict[str, Any], run_dir: Path
) -> Callable[[Any], Any]:
    """The ``SnapshotReset`` wrapper of the ``snapshot`` options (S3RL). The snapshots
    are rolled out from the teacher once and kept in the run directory
    (``snapshots.npz``), which a resumed run reads back."""
    from rlcore.envs.snapshot import PAPER_CLUSTERS, SnapshotReset, Snapshots, SnapshotSettings
    from rlcore.teacher import load_or_collect

    snap, env_id = settings.snapshot, settings.env.id
    saved = Path(run_dir) / "snapshots.npz"
    env_kwargs, max_steps = shared["env_kwargs"], shared["max_episode_steps"]
    if saved.is_file():
        snapshots = Snapshots.load(saved)
        snapshots.check_env(env_id, env_kwargs, max_steps)
    else:
        snapshots = load_or_collect(
            str(snap.teacher), env_id, env_kwargs, max_steps, snap.episodes, snap.every,
            settings.seed,
        )  # fmt: skip
        saved.parent.mkdir(parents=True, exist_ok=True)
        snapshots.save(saved)
    clusters = snap.clusters or PAPER_CLUSTERS.get(algo_name, 4)
    try:
        chosen = SnapshotSettings(
            selection=snap.selection, clusters=clusters, truncate_after=snap.truncate_after,
            switch_after=snap.switch_after, keep_best=snap.keep_best, seed=settings.seed,
        )  # fmt: skip
    except ValueError as error:
        raise ConfigError(f"snapshot: {error}") from None
    returns = snapshots.episode_returns
    print(
        f"snapshot reset: {len(snapshots)} snapshots from {len(returns)} teacher episodes "
        f"(return mean {returns.mean():.1f}, min {returns.min():.1f}); {chosen.selection}"
        f"{f' k={clusters}' if chosen.selection == 'kmeans' else ''}, truncate after "
        f"{chosen.truncate_after}, ordinary resets after {chosen.switch_after:,} env steps",
        flush=True,
    )
    return lambda env: SnapshotReset(env, snapshots, chosen)


def eval_video(
    settings: RunSettings, plan: RunPlan, run_dir: Path, logger: Logger
) -> EvalVideo | None:
    """``eval_video_every=K``: every K-th evaluation also records one episode on a
    rendering copy of the eval env (MP4 in ``<run dir>/videos``, GIF in TensorBoard)."""
    if settings.eval_video_every == 0:
        return None
    check_renders(settings.env.id)
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering; read at the first render
    shared = env_recipe(settings, plan)
    shared["env_kwargs"] = {**shared["env_kwargs"], "render_mode": "rgb_array"}
    del shared["gamma"]  # no reward scaling: the recording reads no rewards

    def make_env() -> Any:
        return make_vec_env(settings.env.id, 1, seed=settings.seed + 1, evaluation=True, **shared)

    def publish(path: Path, frames: list[Any], fps: float, step: int) -> None:
        logger.video("eval/video", path, frames, fps, step)

    every = settings.eval_video_every
    return EvalVideo(make_env, every, settings.eval_every, run_dir / "videos", publish)


# ----------------------------------------------------------------------------- data


def load_dataset(plan: RunPlan, settings: RunSettings, obs_space: gym.Space | None = None) -> Any:
    """The offline dataset the run trains on or mixes in (None when it needs none), its
    observations stacked as the env shows them; loaded (downloaded, for a Minari id not
    on disk) before the run writes anything. One not available here raises
    FileNotFoundError (a missing input), a malformed one ConfigError. A corrupted dataset
    of dict observations is laid out in ``obs_space``'s part order first: the attacked
    critic reads its columns in that order."""
    from rlcore.offline.datasets import DatasetError, DatasetNotAvailableError
    from rlcore.offline.datasets import load_dataset as load

    if plan.schedule.on_policy or not plan.needs_dataset(bool(settings.init_from)):
        return None
    source = str(settings.dataset)
    try:
        dataset = load(source, gamma=plan.gamma, env_id=settings.env.id)
        if settings.corruption.kind is not None:  # RIQL's protocol, before any stacking
            if isinstance(obs_space, gym.spaces.Dict) and dataset.obs_layout is not None:
                try:
                    dataset.arrange_parts(ObsSpec.from_space(obs_space))
                except ValueError as error:
                    raise ConfigError(f"dataset={source}: {error}") from None
            corrupt_dataset(dataset, settings.corruption)
        dataset.stack_observations(plan.env.obs_history)  # as the env shows
    except DatasetNotAvailableError as error:
        raise FileNotFoundError(f"{str(error).rstrip('.')}{_recipe_hint(source)}") from None
    except DatasetError as error:
        raise ConfigError(f"dataset={source}: {error}") from None
    return dataset


def other_task_note(recorded: str | None, env_id: str) -> str | None:
    """Words for a dataset recorded on another task than the run's (same shapes, or the
    run would have been refused): deliberate for an evaluation variant of the task (D4RL's
    AntMaze goals), a mistake otherwise, so the run says it. None when they agree."""
    if not recorded:
        return None
    try:
        same = resolve_env_id(recorded) == resolve_env_id(env_id)
    except UnknownEnvError:  # a task this install cannot build: compare the names
        same = recorded == env_id
    if same:
        return None
    return f"was recorded on {recorded}; this run trains and evaluates on {env_id}"


def corrupt_dataset(dataset: Any, options: CorruptionSettings) -> None:
    """``corruption.*``: corrupt the loaded dataset in place (rlcore.offline.corruption);
    an adversarial attack loads ``corruption.critic``'s agent and attacks its critic."""
    from rlcore.offline.corruption import Corruption, corrupt
    from rlcore.policies import load_agent

    corruption = Corruption(options.kind, options.mode, options.rate, options.scale,
                            options.seed)  # fmt: skip
    critic = None
    if corruption.needs_critic:
        if not options.critic:
            raise ConfigError(
                f"corruption.mode=adversarial corruption.kind={options.kind} attacks a critic "
                "trained on the clean data: set corruption.critic=<run dir> (e.g. algo=iql)"
            )
        critic = load_agent(options.critic)
    try:
        corrupt(dataset, corruption, critic)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"corruption: {error}") from None


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


def prepare_offline(
    env_id: str, plan: RunPlan, agent: Any, dataset: Any, logger: Logger
) -> tuple[Any, Any, Callable[[Any], Any] | None]:
    """Apply the recipe's reward/state normalisation to the loaded dataset, and build the
    normalised-score function (None, with a note, when no reference exists) and the
    reward transform online rewards need to match (None when rewards are unchanged)."""
    from rlcore.offline.scores import ScoreReferenceError, normalized_score

    factor = 1.0
    if plan.data.normalize_reward_by_returns:
        factor = dataset.normalize_rewards_by_return_range()
    scale, bias = plan.data.reward_scale, plan.data.reward_bias
    if (scale, bias) != (1.0, 0.0):
        dataset.scale_rewards(scale, bias)
    if plan.data.sparse_failure_reward is not None:  # Cal-QL's sparse-reward return-to-go
        failed = dataset.fail_sparse_episodes(
            plan.data.sparse_failure_reward, plan.data.sparse_rule
        )
        logger.progress(
            f"sparse rewards: {failed} of {dataset.num_episodes} episodes failed ("
            f"{'their last reward' if plan.data.sparse_rule == 'last' else 'every reward'} "
            f"is {plan.data.sparse_failure_reward:g}); their return-to-go is "
            f"{plan.data.sparse_failure_reward / (1 - dataset.gamma):g} on every row",
            force=True,
        )

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
    if note := other_task_note(dataset.recorded_env_id, env_id):
        logger.progress(f"note: dataset {dataset.source} {note}", force=True)
    if plan.env.cost and dataset.cost is not None and not bool((dataset.cost > 0).any()):
        logger.progress(f"note: dataset {dataset.source} holds no step with a cost: its cost "
                        "critic learns that every state is safe", force=True)  # fmt: skip
    returns = dataset.episode_returns()
    logger.progress(
        f"dataset {dataset.source}: {len(dataset):,} transitions, {len(returns)} episodes, "
        f"behaviour return {returns.mean():.1f}"
        + (f" (normalised {score(float(returns.mean())):.1f})" if score else ""),
        force=True,
    )
    transform = None if (factor, scale, bias) == (1.0, 1.0, 0.0) else reward_transform
    return dataset.to(agent.device), score, transform


# ----------------------------------------------------------------------------- phases


@dataclass
class Phases:
    """What ``run_phases`` runs: the phases and what they draw from, fill and score with."""

    phases: list[Phase]
    buffer: ReplayBuffer | None = None
    stateful: dict[str, Any] = field(default_factory=dict)
    score: Callable[[float], float] | None = None
    reward_transform: Callable[[Any], Any] | None = None
    evaluate_first: bool = False  # an agent loaded with init_from: its return at step 0

    def describe(self, offline_data: str) -> str | None:
        """``phases: warmup (random actions) 5,000 -> online 15,000; ...`` when there
        are several."""
        if len(self.phases) < 2:
            return None
        steps = " -> ".join(
            f"{p.name}{' (random actions)' if p.random_actions else ''} {p.steps:,}"
            for p in self.phases
        )
        return f"phases: {steps}; offline data online: {offline_data}"


def build_phases(built: Built, logger: Logger) -> Phases:
    """The phases the plan declares: one rollout phase (on-policy), or offline
    pre-training on the dataset, warm-ups and the online phase on a replay buffer (or on
    the dataset mixed in, as ``offline_data`` says)."""
    plan, settings, agent, env = built.plan, built.run.settings, built.agent, built.env
    schedule = plan.schedule
    if schedule.on_policy:
        action_shape, action_dtype = action_storage(env.single_action_space)
        # rollout workers: each worker's envs side by side in one rollout
        rollout_envs = env.num_envs * max(settings.distributed.actors, 1)
        rollout = RolloutBuffer(
            schedule.rollout_steps, rollout_envs, rollout_obs_shape(env.single_observation_space),
            action_shape, agent.device, action_dtype,
        )  # fmt: skip
        return Phases([rollout_phase(rollout, schedule.online_steps, plan.returns)])
    init_from = bool(settings.init_from)
    offline_steps, online_steps = plan.phase_lengths(init_from)
    phases = Phases([], evaluate_first=init_from)
    dataset = built.dataset
    if dataset is not None:
        dataset, phases.score, phases.reward_transform = prepare_offline(
            settings.env.id, plan, agent, dataset, logger
        )
        dataset.seed(settings.seed)
        phases.stateful["dataset"] = dataset
    if offline_steps > 0:
        offline_sampler = dataset
        if plan.model is not None:  # model-based: the dataset mixed with imagined rollouts
            offline_sampler = phases.stateful["model_rollouts"] = model_rollouts(
                built, dataset, logger
            )
        phases.phases.append(
            Phase("offline", offline_steps, offline_sampler, batch_size=schedule.batch_size)
        )
    if online_steps > 0:
        her = settings.her
        phases.buffer = buffer = replay_buffer(
            plan, agent, env, settings.seed, dataset, track_episodes=her.strategy != "none"
        )
        sampler: Any = buffer
        if schedule.n_step > 1:  # n-step returns (DrQ-v2)
            refusal = n_step_refusal(her.strategy, schedule.offline_data, plan.env.cost)
            if refusal:
                raise ConfigError(f"n-step returns (n_step={schedule.n_step}) {refusal}")
            sampler = NStepReturns(buffer, schedule.n_step, plan.gamma)
        if her.strategy != "none":  # hindsight relabelling (rlcore/her.py)
            try:
                reward = task_reward_function(settings.env.id, dict(settings.env.kwargs))
            except ValueError as error:
                raise ConfigError(f"her={her.strategy}: {error}") from None
            sampler = phases.stateful["her"] = HindsightSampler(
                buffer, reward, HerOptions(her.strategy, her.k), seed=settings.seed
            )
        if buffer.obs_spec.keyed:  # dict observations: flattened for networks of one vector
            sampler = agent.plumbing.batches(sampler)  # (a dataset's are, by arrange_parts)
        if dataset is not None and schedule.offline_data == "mix":
            fraction = schedule.offline_fraction
            sampler = phases.stateful["mixed"] = MixedSampler(
                [(dataset, fraction), (sampler, 1 - fraction)]
            )
        warmup = min(schedule.warmup_length(env.num_envs), online_steps)
        random_steps = min(schedule.learning_starts, online_steps - warmup)
        phases.phases += [
            Phase("warmup", warmup),
            Phase("warmup", random_steps, random_actions=True),
            Phase(
                "online", online_steps - warmup - random_steps, sampler,
                updates_per_step=schedule.updates_per_step,
                updates_per_vector_step=schedule.updates_per_vector_step,
                batch_size=schedule.batch_size, minibatches=schedule.utd_ratio,
            ),
        ]  # fmt: skip
    phases.phases = [phase for phase in phases.phases if phase.steps > 0]
    return phases


def model_rollouts(built: Built, dataset: Any, logger: Logger) -> ModelRollouts:
    """The offline sampler of a model-based agent (``RunPlan.model``): its dynamics fitted
    on ``dataset`` on first use, rollouts of its policy under the task's termination rule."""
    agent, settings = built.agent, built.run.settings
    require(agent, ModelBased, "a model-based plan (RunPlan.model) rolls out in its model")
    assert built.plan.model is not None
    try:
        terminated = termination_rule(settings.env.id)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    recipe = built.plan.model
    if recipe.dynamics_from is not None and settings.resume is None:  # resumed: its own
        try:
            line = load_fitted_dynamics(agent.dynamics, recipe.dynamics_from,
                                        built.run.record["dataset"],
                                        built.run.record["corruption"])  # fmt: skip
        except (ValueError, FileNotFoundError) as error:
            raise ConfigError(str(error)) from None
        logger.progress(line, force=True)
    return ModelRollouts(
        dataset, agent.dynamics, agent.imagine_action, terminated, recipe,
        seed=settings.seed, log=lambda message: logger.progress(message, force=True),
        dynamics_reward=agent.dynamics_reward if recipe.candidate_draws > 0 else None,
    )  # fmt: skip


def n_step_refusal(her: str, offline_data: str, cost: bool) -> str | None:
    """Why n-step returns cannot run with these settings (None: they can): hindsight
    relabelling recomputes one step's reward, a dataset mixed into batches has 1-step rows,
    a cost critic would need its costs summed too."""
    if her != "none":
        return f"are not combined with her={her} (relabelled rewards are one step's)"
    if offline_data == "mix":
        return "are not combined with offline_data=mix (the dataset's rows are 1-step)"
    if cost:
        return "are not combined with a cost critic (its costs are one step's)"
    return None


def replay_buffer(
    plan: RunPlan, agent: Any, env: Any, seed: int, dataset: Any, track_episodes: bool = False
) -> ReplayBuffer:
    """The online phases' replay buffer: every online transition is kept unless the
    algorithm caps its capacity; with ``offline_data=keep`` the dataset's rows first;
    ``track_episodes`` for hindsight relabelling."""
    schedule = plan.schedule
    capacity = max(schedule.online_steps, env.num_envs)
    if schedule.buffer_size is not None:
        capacity = min(schedule.buffer_size, capacity)
    # one channel per part; image parts one frame per step (rlcore.frames)
    obs_spec = ObsSpec.from_space(env.single_observation_space, frame_stack_of(env))
    if dataset is not None and schedule.offline_data == "keep":
        return dataset.to_replay_buffer(len(dataset) + capacity, agent.device, seed, obs_spec)
    action_shape, action_dtype = action_storage(env.single_action_space)
    return ReplayBuffer(
        capacity,
        obs_spec,
        action_shape,
        env.num_envs,
        device=agent.device,
        seed=seed,
        action_dtype=action_dtype,
        next_action=dataset is not None,  # offline-style critics (ReBRAC) read it
        # constrained algorithms learn a cost critic from the task's info["cost"]
        channels={"cost": ((), torch.float32)} if plan.env.cost else None,
        track_episodes=track_episodes,
        frames=bool(obs_spec.images),
    )


def actors(
    algorithm: Algorithm, built: Built, phases: Phases, run: RunContext, logger: Logger
) -> tuple[RayActors | None, RayRollouts | None]:
    """When ``distributed.actors`` > 0, the Ray actors that feed the replay phases, or
    the rollout workers of a rollout phase (None: the loop steps its own env;
    ``check_distributed`` refused what they cannot run)."""
    settings, env, plan = built.run.settings, built.env, built.plan
    dist = settings.distributed
    if dist.actors == 0:
        return None, None
    recipe = ActorRecipe(
        algorithm.agent_class, algorithm.config_from_dict(settings.algo),
        train_env_recipe(settings, plan, env.num_envs), settings.seed,
    )  # fmt: skip
    resumed = run.resume["counters"]["step"] if run.resume is not None else 0
    if plan.schedule.on_policy:
        workers = RayRollouts(recipe, dist, env, note=logger.note, incarnation_base=resumed)
        phases.stateful["rollout_workers"] = workers  # the merged normaliser statistics
        logger.note(f"{dist.actors} Ray rollout workers ({env.num_envs} env(s) each)")
        return None, workers
    if not any(phase.replays for phase in phases.phases):
        return None, None
    source = RayActors(recipe, dist, note=logger.note, incarnation_base=resumed)
    logger.note(
        f"{dist.actors} Ray actors ({env.num_envs} env(s) each, batches of {dist.batch_steps} "
        f"vector steps; weights published every {dist.publish_every} update(s))"
    )
    return source, None
