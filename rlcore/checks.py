"""The checks that refuse a run before anything is written, each with one message that
names the fix (a ``ConfigError``, exit code 2): a schedule that would end before learning,
spaces the algorithm cannot take, a missing dataset or pre-trained policy, a constrained
algorithm on a task without costs, distributed options actors cannot run, an
``init_from`` checkpoint of another algorithm or without its optimisers."""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym

from rlcore import catalog
from rlcore.capabilities import PerEnvState
from rlcore.catalog import Algorithm
from rlcore.checkpoint import read_checkpoint
from rlcore.config import ConfigError
from rlcore.distributed import require_ray
from rlcore.loops import NO_COST
from rlcore.observations import ObsSpec
from rlcore.plan import OFFLINE_DATA_MODES, RunPlan
from rlcore.settings import CorruptionSettings, RunSettings, SnapshotOptions
from rlcore.spaces import check_action_space


def check_image_dataset(dataset: str, plan: RunPlan, init_from: bool) -> None:
    """A dataset of camera images is sampled from as it is stored (frames kept once):
    mixed into the batches, not copied into the replay buffer or standardised."""
    schedule = plan.schedule
    online = plan.phase_lengths(init_from)[1] > 0 and not schedule.on_policy
    if online and schedule.offline_data == "keep":
        raise ConfigError(
            f"dataset={dataset} observes images: set algo.offline_data=mix (its rows are "
            "mixed into every batch; copying them into the replay buffer is not supported)"
        )
    if plan.data.normalize_states:
        raise ConfigError(
            f"dataset={dataset} observes images: normalize_states standardises vectors only"
        )


def check_schedule(plan: RunPlan, num_envs: int, init_from: bool) -> None:
    """Refuse schedules that would end before any learning happens. The option that sets
    the online phase's length is ``total_steps`` for online algorithms and
    ``algo.online_steps`` for offline ones that fine-tune (``DataRecipe.required``)."""
    schedule = plan.schedule
    online = plan.phase_lengths(init_from)[1]
    name = "algo.online_steps" if plan.data.required else "total_steps"
    if online > 0 and not schedule.on_policy:
        starts, warmup = schedule.learning_starts, schedule.warmup_length(num_envs)
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
    if schedule.on_policy:
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


def check_spaces(
    algorithm: Algorithm,
    env_id: str,
    obs_space: gym.Space,
    action_space: gym.Space,
    plan: RunPlan | None = None,
    settings: RunSettings | None = None,
) -> None:
    """Refuse, naming what is supported and the fix, action spaces the algorithm cannot
    act in (the agent constructors refuse too, for library users; this names the env) and
    observation spaces the networks cannot take. A flat Box is always taken; a Dict of
    vector Boxes (goal-conditioned tasks; ``plan`` and ``settings`` given): its agent
    reads the parts flattened through the observation seam (rlcore.observations), replay
    and rollout runs alike, except where the run needs what still reads flat observations
    (``dict_obs_blockers``). Anything else needs ``env.flatten_obs=true`` (Dict/Tuple)."""
    agent = algorithm.agent_class.__name__
    try:
        check_action_space(action_space, agent, algorithm.action_spaces, env_id)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1:
        return
    try:
        spec: ObsSpec | None = ObsSpec.from_space(obs_space)
    except ValueError:
        spec = None  # a Tuple, a Dict with a part that is not a Box: flatten_obs
    keyed_vectors = spec is not None and spec.keyed and spec.all_vector
    images = spec is not None and bool(spec.images) and algorithm.images
    if images and (plan is None or settings is None):
        return  # its encoder reads them; the run's blockers are checked where it is known
    if (keyed_vectors or images) and plan is not None and settings is not None:
        blockers = dict_obs_blockers(plan, settings)
        if not blockers:
            return
        if images:
            raise ConfigError(
                f"algo={algorithm.name} reads {env_id}'s images through its encoder; this run "
                f"has {', '.join(blockers)}, which read flat observations"
            )
        raise ConfigError(
            f"algo={algorithm.name} reads dict observations of vectors ({env_id}: parts "
            f"{list(spec.names)}); this run has {', '.join(blockers)}, which read flat "
            "observations. Pass env.flatten_obs=true to flatten them into one vector in the "
            "env."
        )
    hint = (
        " Pass env.flatten_obs=true to flatten it into one vector (goal-conditioned "
        "tasks: observation, achieved_goal, desired_goal)."
        if isinstance(obs_space, gym.spaces.Dict | gym.spaces.Tuple)
        else ""
    )
    if spec is not None and not spec.all_vector:
        readers = [a.name for a in catalog.ALGORITHMS.values() if a.images]
        hint = (
            f" Its image part(s) {[p.name for p in spec.images]} need an image encoder: "
            f"{', '.join(readers)} build one (algo.encoder)." + hint
        )
    raise ConfigError(
        f"algo={algorithm.name} supports flat Box observation spaces (shape (n,)) and "
        f"dicts of them; {env_id} has {obs_space}.{hint}"
    )


def dict_obs_blockers(plan: RunPlan, settings: RunSettings) -> list[str]:
    """What a run needs that reads flat observations only, so that it cannot take dict
    observations yet (empty: it can): observation history (a Box wrapper), distributed
    actors (not tried).
    Rollouts store dict observations flattened (``rlcore.loops.rollout_input``) and the
    env-side normaliser standardises them part by part; an offline dataset of dict
    observations is checked part by part when it is loaded (``OfflineDataset.check_env``),
    a pre-trained BC policy (DPPO, ReinFlow, ResiP) when its weights are
    (``rlcore.generative.policy_parts``)."""
    found = [
        (plan.env.obs_history > 1, "an observation history"),
        (settings.distributed.actors > 0, "distributed actors"),
    ]
    return [reason for blocked, reason in found if blocked]


def check_her(name: str, plan: RunPlan, settings: RunSettings, obs_space: gym.Space) -> None:
    """Refuse hindsight relabelling where it cannot run: it needs an algorithm that
    learns online from a replay buffer, dict observations with ``achieved_goal`` and
    ``desired_goal`` parts and the task's ``compute_reward`` (checked when the sampler is
    made), and one process (distributed actors are not supported with it yet)."""
    her = settings.her.strategy
    if her == "none":
        return
    online = plan.phase_lengths(bool(settings.init_from))[1] > 0
    if plan.schedule.on_policy or not online:
        raise ConfigError(
            f"her={her}: hindsight relabelling draws from a replay buffer, and algo={name} "
            "has no online replay phase; use an off-policy algorithm (sac, td3, dqn, "
            "fast_td3) or her=none"
        )
    parts = set(obs_space.spaces) if isinstance(obs_space, gym.spaces.Dict) else set()
    if not {"achieved_goal", "desired_goal"} <= parts:
        flat = " (env.flatten_obs=true flattened them: drop it)" if settings.env.flatten_obs else ""
        raise ConfigError(
            f"her={her}: {settings.env.id} must observe a dict with achieved_goal and "
            f"desired_goal parts (a goal-conditioned task, e.g. env=PandaPush){flat}"
        )
    if settings.distributed.actors > 0:
        raise ConfigError(f"her={her} runs in one process: set distributed.actors=0")
    schedule = plan.schedule
    if plan.needs_dataset(bool(settings.init_from)) and schedule.offline_data == "keep":
        raise ConfigError(
            f"her={her}: algo={name} keeps the dataset's rows in its replay buffer "
            "(algo.offline_data=keep), and they carry no episode records to relabel from: set "
            "algo.offline_data=mix (the dataset mixed into every batch, HER on the online "
            "rows) or her=none"
        )
    if schedule.learning_starts + schedule.warmup_length(settings.env.num_envs) == 0:
        raise ConfigError(
            f"her={her}: algo={name} updates from its first online step, before any episode "
            "has ended, and hindsight relabelling draws from complete episodes: set "
            "algo.learning_starts above the episode length (sac, td3, dqn, rlpd; fast_td3: "
            "algo.warmup_vector_steps), or take one of those algorithms, or her=none"
        )
    if plan.env.normalize_obs:
        raise ConfigError(
            f"her={her} recomputes rewards from the stored goals, and algo={name}'s env-side "
            "observation normaliser (algo.normalize_obs=true) stores them standardised: set "
            "algo.normalize_obs=false"
        )


DEFAULT_CORRUPTION = dataclasses.asdict(CorruptionSettings())
DEFAULT_SNAPSHOT = dataclasses.asdict(SnapshotOptions())


def check_inputs(name: str, plan: RunPlan, settings: RunSettings, resuming: bool) -> None:
    """Refuse a run that lacks the dataset or the pre-trained policy its plan needs, or
    (model-based) a termination rule for its task's model rollouts; and options that would
    change nothing (a dataset an online run would not read, ``corruption.*`` /
    ``snapshot.*`` without what they act on)."""
    init_from = bool(settings.init_from)
    if settings.dataset:
        from rlcore.offline.datasets import check_dataset_source

        check_dataset_source(settings.dataset)  # a missing file: before anything is written
    if settings.dataset and not init_from and not plan.needs_dataset(False):
        raise ConfigError(
            f"dataset={settings.dataset}: algo={name}, as configured, trains online only and "
            "would not read it; an offline algorithm (iql, cql, td3_bc ...) trains on it, an "
            "offline-to-online one (rlpd, wsrl, cal_ql, iql with algo.online_steps) mixes it in"
        )
    if plan.needs_dataset(init_from) and not settings.dataset:
        raise ConfigError(
            f"algo={name} trains on offline data: pass dataset=<Minari id | D4RL .hdf5 "
            "file | Minari dataset folder> (python -m rlcore.offline.collect records one)"
        )
    check_corruption(name, plan, settings, init_from)
    check_snapshot_options(settings)
    if plan.model is not None:  # model rollouts end where the task's own rule says
        from rlcore.model_based import termination_rule

        try:
            termination_rule(settings.env.id)
        except ValueError as error:
            raise ConfigError(str(error)) from None
    if plan.needs_pretrained and not plan.pretrained and not resuming and not init_from:
        raise ConfigError(
            f"algo={name} fine-tunes a pre-trained policy: pass algo.pretrained=<run dir "
            "or .pt of a diffusion_bc / flow_bc run> (python -m rlcore.train algo=diffusion_bc "
            "dataset=... trains one)"
        )


def check_snapshot_options(settings: RunSettings) -> None:
    """Refuse ``snapshot.*`` options set without ``snapshot.teacher`` (they reset nothing)."""
    snapshot = dataclasses.asdict(settings.snapshot)
    if settings.snapshot.teacher is None and snapshot != DEFAULT_SNAPSHOT:
        listed = " ".join(f"snapshot.{key}={value}" for key, value in snapshot.items()
                          if value != DEFAULT_SNAPSHOT[key])  # fmt: skip
        raise ConfigError(
            f"{listed} without snapshot.teacher resets nothing: set snapshot.teacher=<run dir, "
            "checkpoint or snapshots .npz> (S3RL snapshot resets), or drop the option"
        )


def check_corruption(name: str, plan: RunPlan, settings: RunSettings, init_from: bool) -> None:
    """Refuse ``corruption.*`` options that would change nothing: set without a kind, on a
    run that reads no offline dataset, or a critic no random corruption attacks."""
    options = settings.corruption
    chosen = {key: value for key, value in dataclasses.asdict(options).items()
              if value != DEFAULT_CORRUPTION[key]}  # fmt: skip
    if options.kind is None:
        if chosen:
            listed = " ".join(f"corruption.{key}={value}" for key, value in chosen.items())
            raise ConfigError(
                f"{listed} without corruption.kind corrupts nothing: set corruption.kind="
                "obs|action|reward|dynamics (or drop the option)"
            )
        return
    if plan.schedule.on_policy or not plan.needs_dataset(init_from):
        raise ConfigError(
            f"corruption.kind={options.kind}: corrupts an offline dataset, and algo={name} "
            "reads none in this run (an offline or offline-to-online algorithm with "
            "dataset=... does)"
        )
    if options.critic is not None and (options.mode == "random" or options.kind == "reward"):
        raise ConfigError(
            f"corruption.critic={options.critic}: only adversarial obs / action / dynamics "
            f"corruptions attack a critic, and this one is {options.mode} {options.kind}"
        )


def _first_step_info(env_id: str, env_kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The info of one seeded step of a separate env (the run's envs and RNGs are not
    touched), or None for a task that cannot be made alone here (the loop checks then)."""
    try:
        probe = gym.make(env_id, **env_kwargs)
    except Exception:  # noqa: BLE001 - e.g. a device-only task: the loop checks at its first step
        return None
    try:
        probe.reset(seed=0)
        probe.action_space.seed(0)
        return probe.step(probe.action_space.sample())[4]
    finally:
        probe.close()


def check_task_reports_cost(algo: str, env_id: str, env_kwargs: dict[str, Any]) -> None:
    """Refuse, before the run writes anything, a constrained algorithm on a task whose
    steps report no ``info["cost"]``."""
    info = _first_step_info(env_id, env_kwargs)
    if info is not None and "cost" not in info:
        raise ConfigError(f"algo={algo}: {NO_COST}")


def check_task_reports_success(stop_at_success: float, env_id: str, env_kwargs: dict) -> None:
    """Refuse ``stop_at_success`` on a task whose steps report no ``info["is_success"]``
    (its evaluations have no success rate, so the run would never stop by it)."""
    info = _first_step_info(env_id, env_kwargs)
    if info is not None and "is_success" not in info:
        raise ConfigError(
            f"stop_at_success={stop_at_success:g}: {env_id} reports no info['is_success'], "
            "so its evaluations have no success rate; use stop_at_return, or a task that "
            "reports success (e.g. env=PandaPush)"
        )


def check_distributed(plan: RunPlan, settings: RunSettings, agent: Any) -> None:
    """Refuse ``distributed.*`` options that actors cannot run yet, with one message
    naming the fix (before anything is written); without Ray installed, say how to
    install it."""
    dist = settings.distributed
    if dist.actors == 0:
        return
    unsupported = [
        (plan.schedule.on_policy and dist.outbox > 0, "continuous actors (outbox) of a "
         "rollout algorithm"),
        (not plan.schedule.on_policy and (plan.env.normalize_obs or plan.env.normalize_reward),
         "env normalisation of replay runs (per-actor statistics)"),
        (bool(settings.snapshot.teacher), "snapshot reset"),
        (isinstance(agent, PerEnvState), "agents with per-env state"),
        (plan.needs_dataset(bool(settings.init_from)), "online phases next to a "
         "dataset (their buffer's next actions assume one env stream)"),
    ]  # fmt: skip
    reasons = [reason for bad, reason in unsupported if bad]
    if reasons:
        raise ConfigError(
            f"distributed.actors={dist.actors}: not supported yet for {', '.join(reasons)}; "
            "use distributed.actors=0"
        )
    require_ray()


def load_init_from(settings: RunSettings, name: str) -> tuple[dict[str, Any], str | None]:
    """(the checkpoint ``init_from=`` names (a run directory or a .pt file), checked to hold
    an agent of algorithm ``name``; the dataset that run trained on)."""
    try:
        state, path, _ = read_checkpoint(str(settings.init_from))
    except FileNotFoundError as error:
        raise ConfigError(f"init_from={settings.init_from}: {error}") from None
    if state.get("algo") != name:
        raise ConfigError(
            f"init_from={path} holds a {state.get('algo')} agent; algo={name} can only start "
            f"from a {name} run (pass algo={state.get('algo')} or another run)"
        )
    return state, state.get("config", {}).get("dataset")


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
