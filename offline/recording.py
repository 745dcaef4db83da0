"""Recording Minari datasets: roll a policy out (random, a trained rlcore agent, with
optional sampling and noise), export a run's replay buffer, write the dataset.

The library under the ``python -m rlcore.offline.collect`` command line (``offline/collect.py``,
which documents the keys) and the dataset recipes (``offline/recipe.py``,
``offline/safe_recipe.py``).
"""

from __future__ import annotations

import dataclasses
import shutil
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rlcore.envs.make import check_env_kwargs, resolve_env_id
from rlcore.offline.cli import UsageError
from rlcore.offline.datasets import DatasetError


@dataclass
class Episode:
    """One episode: T+1 observations (an array, or ``{part: array}`` for a dict
    observation), T actions / rewards / terminations / truncations;
    on a task that reports ``info["cost"]`` also T costs, on one that reports
    ``info["is_success"]`` (gymnasium-robotics' mazes: ``info["success"]``) T success flags
    (both stored as Minari ``infos``)."""

    observations: np.ndarray | dict[str, np.ndarray]
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    costs: np.ndarray | None = None
    success: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.rewards)


def rollout(
    env: gym.Env,
    policy: Callable[[np.ndarray], np.ndarray] | None,
    steps: int,
    seed: int = 0,
    noise: float = 0.0,
) -> list[Episode]:
    """Run ``policy`` (None: uniform random actions) for exactly ``steps`` env steps.

    Gaussian ``noise`` (std = noise x half the action range) is added to policy actions;
    actions are clipped to the action box and stored as executed. A ``Discrete`` task's
    actions are stored as int64 indices (random: uniform over them; no noise).
    """
    rng = np.random.default_rng(seed)
    space = env.action_space
    discrete = isinstance(space, gym.spaces.Discrete)
    if discrete and noise > 0:
        raise UsageError(f"noise={noise}: Gaussian action noise needs continuous actions, "
                         f"and {env.spec.id if env.spec else 'the task'} has {space}")  # fmt: skip
    if not discrete and not isinstance(space, gym.spaces.Box):
        raise UsageError(f"recording needs Box or Discrete actions, the task has {space}")
    low, high = (None, None) if discrete else (space.low, space.high)
    env.action_space.seed(seed)
    episodes: list[Episode] = []
    obs, _ = env.reset(seed=seed)
    empty = {"act": [], "rew": [], "term": [], "trunc": [], "cost": [], "success": []}
    trace: dict[str, list] = {"obs": [obs], **empty}
    for step in range(steps):
        if discrete:
            index = rng.integers(space.n) if policy is None else np.asarray(policy(obs)).item()
            action = np.int64(space.start + index if policy is None else index)
        else:
            if policy is None:
                action = rng.uniform(low, high)
            else:
                action = np.asarray(policy(obs), dtype=np.float64)
                if noise > 0:
                    action = action + rng.normal(0.0, noise * (high - low) / 2.0)
            action = np.clip(action, low, high).astype(np.float32)
        obs, reward, terminated, truncated, info = env.step(action)
        last = step == steps - 1
        if "cost" in info:
            trace["cost"].append(float(info["cost"]))
        success = info.get("is_success", info.get("success"))  # the mazes: "success"
        if success is not None:
            trace["success"].append(bool(success))
        for key, value in (
            ("obs", obs),
            ("act", action),
            ("rew", float(reward)),
            ("term", bool(terminated)),
            ("trunc", bool(truncated) or (last and not terminated)),
        ):
            trace[key].append(value)
        if terminated or truncated or last:
            episodes.append(
                Episode(
                    _stacked(trace["obs"]),
                    np.asarray(trace["act"], dtype=np.int64 if discrete else np.float32),
                    np.asarray(trace["rew"], dtype=np.float64),
                    np.asarray(trace["term"]),
                    np.asarray(trace["trunc"]),
                    np.asarray(trace["cost"], dtype=np.float64) if trace["cost"] else None,
                    np.asarray(trace["success"], dtype=bool) if trace["success"] else None,
                )
            )
            if not last:
                obs, _ = env.reset()
                trace = {"obs": [obs], **{k: [] for k in empty}}
    return episodes


def _stacked(observations: list[Any]) -> np.ndarray | dict[str, np.ndarray]:
    """T+1 observations as one array, or one per part of a dict observation: float32, but
    images (uint8) stay uint8."""

    def stacked(values: list[Any]) -> np.ndarray:
        array = np.asarray(values)
        return array if array.dtype == np.uint8 else array.astype(np.float32)

    if isinstance(observations[0], dict):
        return {k: stacked([o[k] for o in observations]) for k in observations[0]}
    return stacked(observations)


def replay_episodes(state: dict[str, Any], first_steps: int | None = None) -> list[Episode]:
    """Episodes stored in a checkpoint's replay buffer (``load_checkpoint(run)``).

    ``first_steps``: keep only the transitions of the run's first ``first_steps`` env steps
    (the buffer must still hold them: nothing overwritten). A deterministic run's buffer
    cut at step n equals the buffer of the same run stopped at n, which is how the recipe
    gets medium-replay from the expert run without training twice.

    The transition of env i at vector step t was the write number g = t * num_envs + i,
    at row g % capacity; the buffer holds the last ``size`` writes in ring order. Each
    env's stream is split at terminated | truncated; an episode cut by the buffer's end
    is stored as truncated (and the oldest one may start mid-episode once the ring wrapped).
    """
    loop = state.get("loop", {})
    buffer = loop.get("buffer") or (loop.get("stateful") or {}).get("buffer")  # older layout first
    if buffer is None:
        raise DatasetError(
            "this checkpoint holds no replay buffer (agent-only snapshot or on-policy run); "
            "pass the run directory of an off-policy run (its checkpoints/latest.pt)"
        )
    if state.get("obs_normalizer") is not None:
        raise DatasetError(
            "the run normalised observations, so its buffer holds normalised (drifting) "
            "observations that cannot be exported as raw data"
        )
    algo = state["config"].get("algo", {})
    if (
        algo.get("normalize_reward")  # the env's running-std scaling
        or algo.get("normalize_reward_by_returns")  # the dataset's return-range factor
        or algo.get("reward_scale", 1.0) != 1.0
        or algo.get("reward_bias", 0.0) != 0.0
    ):
        raise DatasetError("the run scaled its rewards; its buffer holds scaled rewards")
    if "obs" not in buffer["data"]:
        raise DatasetError(
            "the run observed dicts (its buffer stores one channel per part), which replay: "
            "does not export yet; record from its policy instead (policy=<run dir>)"
        )
    size, pos, capacity = int(buffer["size"]), int(buffer["pos"]), int(buffer["capacity"])
    if size < capacity and pos != size:
        raise DatasetError(f"inconsistent replay buffer: size {size}, pos {pos}, cap {capacity}")
    num_envs = int(state["config"]["env"]["num_envs"])
    written = int(loop["counters"]["step"])
    data = {k: v.cpu().numpy() for k, v in buffer["data"].items()}
    order = np.arange(size) if size < capacity else np.r_[pos:capacity, 0:pos]
    if first_steps is not None:
        if not 1 <= first_steps <= written:
            raise DatasetError(
                f"the run has {written} env steps; cannot export the first {first_steps}"
            )
        if written > size:
            raise DatasetError(
                f"the replay buffer no longer holds the run's first steps (capacity {capacity} < "
                f"{written} steps written); export the whole buffer or use a shorter run"
            )
        order, size, written = order[:first_steps], first_steps, first_steps
    env_of_row = (written - size + np.arange(size)) % num_envs
    episodes: list[Episode] = []
    for env_index in range(num_envs):
        rows = order[env_of_row == env_index]
        done = (data["terminated"][rows] > 0) | (data["truncated"][rows] > 0)
        cuts = np.flatnonzero(done) + 1
        for chunk in np.split(rows, cuts):
            if len(chunk) == 0:
                continue
            obs, next_obs = data["obs"][chunk], data["next_obs"][chunk]
            if not np.array_equal(next_obs[:-1], obs[1:]):
                raise DatasetError(
                    "replay buffer rows do not chain (next_obs != following obs) for env "
                    f"{env_index}: the buffer layout is not the one rlcore writes"
                )
            terminated = data["terminated"][chunk] > 0
            truncated = data["truncated"][chunk] > 0
            truncated[-1] |= not (terminated[-1] or truncated[-1])
            episodes.append(
                Episode(
                    np.concatenate([obs, next_obs[-1:]]).astype(np.float32),
                    data["action"][chunk].astype(np.float32),
                    data["reward"][chunk].astype(np.float64),
                    terminated,
                    truncated,
                )
            )
    return episodes


@dataclass(frozen=True)
class Rendering:
    """What the recorded observation is (``rlcore.envs.pixels``): the task's own
    (``state``), a camera image (``pixels``) or both (``state+pixels``), at ``image_size``
    square, the last ``frame_stack`` images stacked, from ``camera`` (None: the model's
    ``track`` camera, else the free camera), as ``env.obs`` and friends make it in a run."""

    obs: str = "state"
    image_size: int = 84
    frame_stack: int = 1
    camera: str | None = None


def _made(
    env_id: str, kwargs: dict[str, Any], flatten_obs: bool, rendering: Rendering = Rendering()
) -> gym.Env:
    from rlcore.envs.pixels import pixel_env

    env = gym.make(env_id, **kwargs)
    env = gym.wrappers.FlattenObservation(env) if flatten_obs else env
    return pixel_env(
        env, rendering.obs, rendering.camera, rendering.image_size, rendering.frame_stack
    )


def _reading_the_task(policy: Callable[[Any], np.ndarray]) -> Callable[[Any], np.ndarray]:
    """A scripted expert fed a ``state+pixels`` observation: it reads the task's own part(s)
    (``state`` of a vector task, the goal task's parts), not the image."""
    from rlcore.envs.pixels import PIXELS, STATE

    def act(obs: dict[str, Any]) -> np.ndarray:
        task = {k: v for k, v in obs.items() if k != PIXELS}
        return policy(task[STATE] if set(task) == {STATE} else task)

    return act


def _expert_task(env_id: str) -> str:
    """The robot task of ``env_id`` that has a scripted expert, or a UsageError naming them."""
    from rlcore.envs.robots import native_task
    from rlcore.envs.robots.experts import EXPERTS

    task = native_task(env_id)
    if task not in EXPERTS:
        raise UsageError(
            f"policy=expert: no scripted expert for {env_id}; experts: "
            f"{', '.join(f'{name}-v1' for name in EXPERTS)}"
        )
    return task


def _expert(
    env_id: str, space: gym.Space | None, slowness: float
) -> Callable[[np.ndarray], np.ndarray]:
    """The scripted expert of robot task ``env_id`` as a policy of the recorded observation
    (``space``: the dict space a flattened recording unflattens with; None: dicts as they are)."""
    from rlcore.envs.robots.experts import expert_policy

    dict_space = space if isinstance(space, gym.spaces.Dict) else None
    return expert_policy(_expert_task(env_id), dict_space, slowness)


def check_new_dataset_id(dataset_id: str) -> Path:
    """Fail before any work when the id is malformed or already taken; returns its path."""
    from minari.dataset.minari_dataset import parse_dataset_id
    from minari.storage.datasets_root_dir import get_dataset_path

    try:
        parse_dataset_id(dataset_id)
    except ValueError as error:
        raise UsageError(
            f"dataset_id '{dataset_id}' is not of the form namespace/name-vN "
            "(e.g. local/hopper/medium-v0)"
        ) from error
    path = get_dataset_path(dataset_id)
    if path.exists():
        raise UsageError(
            f"dataset {dataset_id} already exists at {path}: pick another name or version, "
            f"or delete it (minari delete {dataset_id})"
        )
    return path


def write_dataset(
    dataset_id: str,
    episodes: Sequence[Episode],
    env: gym.Env,
    algorithm_name: str,
    description: str,
    ref_min_score: float | None = None,
    ref_max_score: float | None = None,
) -> Path:
    """Store ``episodes`` as a Minari dataset (HDF5); reference scores only when given.
    Costs and success flags go to the episodes' ``infos["cost"]`` / ``infos["success"]``
    (T + 1 values, as Minari records infos: the reset's, 0 / False, then one per step)."""
    import minari
    from minari.data_collector import EpisodeBuffer

    if (ref_min_score is None) != (ref_max_score is None):
        raise UsageError("give ref_min_score and ref_max_score together (or neither)")
    buffers = [
        EpisodeBuffer(
            id=index,
            observations=ep.observations,
            actions=ep.actions,
            rewards=ep.rewards,
            terminations=ep.terminations,
            truncations=ep.truncations,
            infos=_infos(ep),
        )
        for index, ep in enumerate(episodes)
    ]
    refs = {}
    if ref_min_score is not None:
        refs = {"ref_min_score": float(ref_min_score), "ref_max_score": float(ref_max_score)}
    target = check_new_dataset_id(dataset_id)
    _name_the_entry_point(env)
    try:
        with warnings.catch_warnings():  # minari warns about every optional metadata field
            warnings.simplefilter("ignore", UserWarning)
            dataset = minari.create_dataset_from_buffers(
                dataset_id,
                buffers,
                env=env,
                algorithm_name=algorithm_name,
                author="rlcore.offline.collect",
                description=description,
                **refs,
            )
    except BaseException as error:
        # a half-written dataset must not look like a finished one: remove it
        shutil.rmtree(target, ignore_errors=True)
        if not isinstance(error, OSError):
            raise
        raise DatasetError(
            f"could not write dataset {dataset_id} to {target}: {error.strerror or error}; "
            "removed the partial dataset (other datasets are untouched). Free disk space "
            "and record it again."
        ) from error
    return Path(dataset.storage.data_path).parent


def _name_the_entry_point(env: gym.Env) -> None:
    """Minari stores the task's spec as JSON, which holds no callable: a task registered with
    a class or function (``gym.register(id, entry_point=MyEnv)``) gets the ``module:name``
    string that loads the same object (Minari's ``recover_environment`` imports it)."""
    spec = env.unwrapped.spec
    if spec is None or isinstance(spec.entry_point, str) or spec.entry_point is None:
        return
    creator = spec.entry_point
    name = f"{creator.__module__}:{creator.__qualname__}"
    try:
        same = gym.envs.registration.load_env_creator(name) is creator
    except (ImportError, AttributeError):
        same = False
    if not same:
        raise DatasetError(
            f"{spec.id} was registered with entry point {creator!r}, which Minari cannot store "
            "and no module:name loads; register it with a 'module:Class' string"
        )
    env.unwrapped.spec = dataclasses.replace(spec, entry_point=name)


def _infos(episode: Episode) -> dict[str, np.ndarray] | None:
    """An episode's Minari ``infos`` (None when it has neither costs nor success flags)."""
    infos = {}
    if episode.costs is not None:
        infos["cost"] = np.concatenate([[0.0], episode.costs])
    if episode.success is not None:
        infos["success"] = np.concatenate([[False], episode.success])
    return infos or None


def summarize(episodes: Sequence[Episode]) -> dict[str, float]:
    """Episodes, steps and mean / min / max undiscounted return (and mean episode cost on a
    task with costs)."""
    returns = np.array([float(ep.rewards.sum()) for ep in episodes])
    out = {
        "episodes": len(episodes),
        "steps": int(sum(len(ep) for ep in episodes)),
        "mean_return": float(returns.mean()),
        "min_return": float(returns.min()),
        "max_return": float(returns.max()),
    }
    if all(ep.costs is not None for ep in episodes):
        out["mean_cost"] = float(np.mean([ep.costs.sum() for ep in episodes]))
    if all(ep.success is not None for ep in episodes):  # an episode succeeds at its last step
        out["success_rate"] = float(np.mean([ep.success[-1] for ep in episodes]))
    return out


def collect(
    env: str | None,
    policy: str,
    dataset_id: str,
    steps: int | None = None,
    seed: int = 0,
    noise: float = 0.0,
    sample: bool = False,
    max_episode_steps: int | None = None,
    ref_min_score: float | None = None,
    ref_max_score: float | None = None,
    slowness: float = 1.0,
    flatten_obs: bool = False,
    rendering: Rendering = Rendering(),
    env_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Record (or export) one Minari dataset; returns the summary it prints.
    ``env_kwargs``: the task's constructor arguments (a run's policy on its own task
    records with the run's ``env.kwargs`` unless given);
    ``policy="expert"``: a robot task's scripted expert (rlcore.envs.robots.experts), moving
    at ``slowness`` of its speed; ``flatten_obs`` records a dict observation flattened into
    one vector (for runs with ``env.flatten_obs=true``; without it the dataset keeps the
    parts, for runs on the dict observations, and loads into flattened runs too);
    ``rendering`` records camera images (uint8) instead of, or beside, the task's state."""
    import torch

    from rlcore.checkpoint import load_checkpoint
    from rlcore.policies import load_policy

    check_new_dataset_id(dataset_id)
    if (ref_min_score is None) != (ref_max_score is None):
        raise UsageError("give ref_min_score and ref_max_score together (or neither)")
    if seed < 0:
        raise UsageError(f"seed={seed}: must be >= 0")
    make_kwargs: dict[str, Any] = {}
    if policy.startswith("replay:"):
        run = policy.removeprefix("replay:")
        if sample or noise:
            raise UsageError("sample / noise do not apply to replay: (it exports stored actions)")
        if rendering != Rendering():
            raise UsageError(
                "obs= / image_size= ... do not apply to replay: (it exports the run's)"
            )
        if steps is not None and steps < 1:
            raise UsageError("steps=<n> (n >= 1) for replay: exports the run's first n env steps")
        if env_kwargs:
            raise UsageError("kwargs.<name>= does not apply to replay: (it exports the run's task)")
        state = load_checkpoint(run)
        run_env = resolve_env_id(state["config"]["env"]["id"])
        if env is not None and resolve_env_id(env) != run_env:
            raise UsageError(f"env={env} but the run {run} was trained on {run_env}")
        env_id = run_env
        make_kwargs = dict(state["config"]["env"].get("kwargs") or {})
        if state["config"]["env"].get("max_episode_steps") is not None:
            make_kwargs["max_episode_steps"] = state["config"]["env"]["max_episode_steps"]
        episodes = replay_episodes(state, first_steps=steps)
        algorithm = f"replay buffer of {state['algo']} run {run}"
        if steps is not None:
            algorithm += f" (first {steps} env steps)"
    else:
        if env is None:
            raise UsageError("env=<env> is required unless policy=replay:<run dir>")
        if steps is None or steps < 1:
            raise UsageError("steps=<n> (n >= 1) is required to record from a policy")
        if noise < 0:
            raise UsageError("noise must be >= 0")
        env_id = resolve_env_id(env)
        if policy not in ("random", "expert"):  # a run: its task's arguments by default
            run_env = load_checkpoint(policy)["config"]["env"]
            if resolve_env_id(run_env["id"]) == env_id:
                make_kwargs.update(run_env.get("kwargs") or {})
        make_kwargs.update(env_kwargs or {})
        try:
            check_env_kwargs(env_id, make_kwargs)
        except ValueError as error:  # collect's spelling of the option
            raise UsageError(str(error).replace("env.kwargs:", "kwargs.<name>:", 1)) from None
        if max_episode_steps is not None:
            make_kwargs["max_episode_steps"] = max_episode_steps
        if policy in ("random", "expert") and sample:
            raise UsageError(f"sample=true needs a trained policy, not policy={policy} (the "
                             "scripted expert has no distribution to sample; noise= adds one)")
        if not 0 < slowness <= 1:
            raise UsageError(f"slowness={slowness}: in (0, 1] (1: the expert's own speed)")
        if slowness != 1 and policy != "expert":
            raise UsageError(f"slowness={slowness} slows the scripted expert (policy=expert), "
                             f"not policy={policy}")
        if rendering.obs != "state" and flatten_obs:
            raise UsageError(f"obs={rendering.obs}: images are not flattened (flatten_obs=false)")
        if policy == "expert":
            _expert_task(env_id)  # before the observation check: names the missing expert
            if rendering.obs == "pixels":
                raise UsageError(
                    "policy=expert reads the task's state: record obs=state+pixels (a pixel "
                    "run reads its image part)"
                )
        with gym.make(env_id, **make_kwargs) as probe:
            dict_space = probe.observation_space
        if policy == "expert":
            recorded = dict_space if flatten_obs else None  # the expert reads dicts
            actor, algorithm = _expert(env_id, recorded, slowness), f"scripted expert of {env_id}"
            if rendering.obs != "state":
                actor = _reading_the_task(actor)
            if slowness < 1:
                algorithm += f" at {slowness:g} of its speed"
        else:
            actor = None if policy == "random" else load_policy(policy, deterministic=not sample)
            kind = "actions sampled from the policy" if sample else "deterministic policy"
            algorithm = "uniform random" if actor is None else f"{kind} of {policy}"
        if actor is not None and noise > 0:
            algorithm += f" + Gaussian noise {noise}"
        with (
            _made(env_id, make_kwargs, flatten_obs, rendering) as rollout_env,
            torch.random.fork_rng(),
        ):
            torch.manual_seed(seed)  # the policy's own sampling: same seed, same dataset
            episodes = rollout(rollout_env, actor, steps, seed=seed, noise=noise)
    with _made(env_id, make_kwargs, flatten_obs, rendering) as env_for_spec:
        path = write_dataset(
            dataset_id,
            episodes,
            env_for_spec,
            algorithm_name=algorithm,
            description=f"{algorithm} on {env_id}, seed {seed} (rlcore.offline.collect)",
            ref_min_score=ref_min_score,
            ref_max_score=ref_max_score,
        )
    summary = {"dataset_id": dataset_id, "env_id": env_id, "path": str(path)}
    summary.update(summarize(episodes))
    return summary
