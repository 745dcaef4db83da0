"""Actor-learner runs on Ray: actors step their own envs with a policy-only copy of the
agent and stream transitions; the learner (``rlcore.loops``' replay phases) owns the
replay buffer and the updates and publishes weights every ``publish_every`` updates.

The seam is ``TransitionSource``: where a replay phase's vector steps come from. Without
one the loop steps its own env (``_PhaseRun.step_env``); with ``RayActors`` the steps come
from N actors, one vector step (``num_envs`` rows, the buffer's layout) per loop tick, so
the counters, the updates due (``updates_per_step`` x rows received), evaluation,
checkpoints and resume are the single-process loop's.

Actors act with uniform random actions until the first weights arrive (the learner
publishes them when a phase where the policy acts starts), then with the newest weights
they hold: each batch of ``batch_steps`` vector steps is collected with the weights the
learner had published when the batch was asked for, and carries their version (the
learner's update count), so the learner logs the policy lag. Local Ray binds to
127.0.0.1 with the dashboard and usage reporting off; ``address=auto`` joins the cluster
this node belongs to.

PPO runs synchronous rollout workers instead (``RayRollouts``, the loop's
``RolloutSource``): each iteration every worker collects a rollout with the learner's
current weights, and the rollouts are gathered along the env axis into one. With
``outbox`` > 0 an actor acts continuously at its env's own rate (a robot,
examples/remote_robot), keeping its steps for the learner in a bounded outbox.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rlcore.agent_state import agent_modules
from rlcore.config import ConfigError
from rlcore.loops import RolloutRow, Transitions, explore_step

RAY_MISSING = 'distributed.actors needs Ray, which is not installed: pip install "rlcore[ray]"'
LOOPBACK = "127.0.0.1"
LOCAL_ONLY_FLAG = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@dataclass(frozen=True)
class DistributedSettings:
    """The ``distributed.*`` options (configs/config.yaml)."""

    actors: int = 0  # actor workers; 0: the single-process run
    publish_every: int = 1  # learner updates between published weights
    batch_steps: int = 16  # vector steps an actor collects per batch it sends
    address: str | None = None  # None: local Ray on 127.0.0.1; "auto": the node's cluster
    resources: dict[str, float] = field(default_factory=dict)  # custom Ray resources per actor
    outbox: int = 0  # 0: lockstep actors; N: act continuously, keep up to N vector steps

    @classmethod
    def from_config(cls, node: dict[str, Any] | None) -> DistributedSettings:
        """From the config's ``distributed`` node (absent: single process); the defaults
        are this class's."""
        node = dict(node or {})
        known = {option.name for option in dataclasses.fields(cls)}
        unknown = sorted(set(node) - known)
        if unknown:
            raise ConfigError(f"unknown distributed option(s) {unknown}; known: {sorted(known)}")
        settings = cls(**node)
        if settings.publish_every < 1 or settings.batch_steps < 1:
            raise ConfigError("distributed.publish_every and distributed.batch_steps must be >= 1")
        if settings.outbox < 0:
            raise ConfigError("distributed.outbox must be >= 0 (0: lockstep actors)")
        if settings.actors < 0:
            raise ConfigError("distributed.actors must be >= 0 (0: one process)")
        return settings


def require_ray() -> None:
    """Raise a one-line ConfigError that says how to install Ray when it is missing
    (without importing it: ``start_ray`` sets Ray's environment first)."""
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(RAY_MISSING)


def import_ray() -> Any:
    """The ``ray`` module, or the one-line ConfigError of ``require_ray``."""
    require_ray()
    import ray

    return ray


def start_ray(address: str | None, num_cpus: int | None = None) -> Any:
    """Connect to Ray: ``address`` None starts a local instance bound to 127.0.0.1 (node
    IP, no dashboard, no usage reporting); ``"auto"`` or ``ray://...`` joins a cluster.
    Returns the ``ray`` module. A Ray already initialised in this process is kept."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if address is None:
        # Ray (2.60) turns a node IP of 127.0.0.1 into the host's routable address unless
        # this flag (read when ray is imported) says the host runs no cluster
        os.environ.setdefault(LOCAL_ONLY_FLAG, "0")
    ray = import_ray()
    if ray.is_initialized():
        return ray
    # ray.init replaces the SIGTERM handler (with an exit): the run's own (save, then
    # stop: rlcore.train.stop_signals) is put back
    main = threading.current_thread() is threading.main_thread()
    sigterm = signal.getsignal(signal.SIGTERM) if main else None
    try:
        if address is not None:
            ray.init(address=address, log_to_driver=False)
            return ray
        ray.init(
            address="local",
            _node_ip_address=LOOPBACK,
            include_dashboard=False,
            num_cpus=num_cpus,
            log_to_driver=False,
        )
    finally:
        if main:
            signal.signal(signal.SIGTERM, sigterm)
    outside = [a for a in node_addresses(ray) if not a.startswith("127.")]
    if outside:
        ray.shutdown()
        raise RuntimeError(
            f"local Ray reports non-loopback addresses {sorted(set(outside))}: ray was "
            f"imported before rlcore could set {LOCAL_ONLY_FLAG}=0; set it in the environment"
        )
    return ray


def node_addresses(ray: Any) -> list[str]:
    """Every address the connected Ray reports for its nodes (node IPs and the GCS)."""
    addresses = [str(ray.get_runtime_context().gcs_address).rsplit(":", 1)[0]]
    for node in ray.nodes():
        addresses += [node["NodeManagerAddress"], node.get("NodeName", LOOPBACK)]
    return addresses


def policy_weights(agent: Any) -> list[dict[str, torch.Tensor]]:
    """The state of the agent's modules (``agent.parts``, in declaration order; no
    optimiser states): what an actor's copy needs to act, as CPU tensors."""

    return [
        {k: v.detach().cpu() for k, v in module.state_dict().items()}
        for module in agent_modules(agent)
    ]


def load_policy_weights(agent: Any, weights: list[dict[str, torch.Tensor]]) -> None:
    """Load ``policy_weights`` of a learner into an actor's agent of the same algorithm."""

    modules = agent_modules(agent)
    if len(modules) != len(weights):
        raise ValueError(f"{len(weights)} module states for an agent of {len(modules)} modules")
    for module, state in zip(modules, weights):
        module.load_state_dict(state)


@dataclass(frozen=True)
class ActorRecipe:
    """What an actor process builds (picklable): the agent class and its typed config
    (the root hands them over: the core looks no algorithm up), and the
    ``rlcore.envs.make.make_vec_env`` keyword arguments of its env (seed excluded)."""

    agent_class: type
    config: Any
    env: dict[str, Any]
    seed: int

    def actor_seed(self, index: int, incarnation: int) -> int:
        """A seed of its own for each actor and each restart / resume of it."""
        return int(np.random.SeedSequence([self.seed, index, incarnation]).generate_state(1)[0])

    def build(self, index: int, incarnation: int) -> tuple[Any, Any, int]:
        """(the actor's vector env, its CPU agent, its seed), torch on one thread."""
        from rlcore.envs.make import make_vec_env

        torch.set_num_threads(1)
        seed = self.actor_seed(index, incarnation)
        torch.manual_seed(seed)
        env = make_vec_env(seed=seed, **self.env)
        agent = self.agent_class(
            env.single_observation_space, env.single_action_space, self.config, device="cpu"
        )
        return env, agent, seed


def publish_due(published: int, updates: int, every: int) -> bool:
    """True when weights are due: none published yet (``published`` -1) or ``every``
    updates since the version ``published``."""
    return published < 0 or updates - published >= every


class EnvWorker:
    """One actor: its own vector env and a policy-only agent copy (uniform random actions
    until it holds weights). A plain class (tested without Ray); ``RayActors`` runs it as
    a Ray actor.

    Lockstep (the default): ``collect`` steps the env ``steps`` vector steps and returns
    them. Continuous (``start(outbox)``, a robot's control loop): a thread acts at the
    env's own rate whether or not the learner asks, with the last weights it received;
    the steps wait in a bounded outbox (when it is full the oldest is dropped, and
    counted) and ``collect`` hands over what is there. A link to the learner that drops
    is a pause between ``collect`` calls: the robot keeps acting and buffering."""

    def __init__(self, recipe: ActorRecipe, index: int, incarnation: int) -> None:
        self.env, self.agent, seed = recipe.build(index, incarnation)
        self.rng = np.random.default_rng(seed)
        self.obs, _ = self.env.reset(seed=seed)
        self.version = -1  # no weights yet: uniform random actions
        self.policy_lock = threading.Lock()  # the control thread acts, collect loads weights
        self.outbox: deque[tuple[Any, ...]] | None = None
        self.dropped = 0  # env steps dropped from a full outbox since the last collect
        self.stepped = 0  # vector steps since the last collect
        self.since = time.perf_counter()
        self.running = False

    def step(self) -> tuple[Any, ...]:
        """One vector step with the current policy: (obs, action, reward, final next obs,
        terminated, truncated, episode info)."""
        from rlcore.envs.make import final_next_obs
        from rlcore.spaces import random_actions, to_env_action

        env = self.env
        with self.policy_lock:
            if self.version < 0:
                action = random_actions(env.single_action_space, self.rng, env.num_envs)
            else:
                action = self.agent.act(self.obs)
        next_obs, reward, terminated, truncated, info = env.step(
            to_env_action(action, env.single_action_space)
        )
        extra = {"cost": info["cost"]} if "cost" in info else {}
        row = (self.obs, action, reward, final_next_obs(next_obs, info), terminated, truncated,
               {"episode_return": info["episode_return"],
                "episode_length": info["episode_length"], **extra})  # fmt: skip
        self.obs = next_obs
        self.stepped += 1
        return row

    def start(self, outbox: int) -> None:
        """Act continuously in a thread, keeping up to ``outbox`` vector steps."""
        self.outbox = deque(maxlen=outbox)
        self.running = True
        threading.Thread(target=self._control_loop, daemon=True).start()

    def _control_loop(self) -> None:
        while self.running:
            row = self.step()
            with self.policy_lock:
                if len(self.outbox) == self.outbox.maxlen:
                    self.dropped += self.env.num_envs
                self.outbox.append(row)

    def stop(self) -> None:
        """End the control loop (after its current step)."""
        self.running = False

    def collect(self, weights: Any, version: int, steps: int) -> dict[str, Any]:
        """Load the weights of ``version`` when newer, then ``steps`` new vector steps
        (lockstep) or up to ``steps`` from the outbox, waiting for at least one
        (continuous); with the weights' version, env steps/s since the last call and the
        env steps dropped meanwhile."""
        with self.policy_lock:
            if version > self.version:
                load_policy_weights(self.agent, weights)
                self.version = version
        if self.outbox is None:  # speed while collecting (not while the learner works)
            self.stepped, self.since = 0, time.perf_counter()
            rows = [self.step() for _ in range(steps)]
        else:
            while not self.outbox:
                time.sleep(0.001)
            with self.policy_lock:
                rows = [self.outbox.popleft() for _ in range(min(steps, len(self.outbox)))]
        with self.policy_lock:
            now, dropped = time.perf_counter(), self.dropped
            sps = self.stepped * self.env.num_envs / max(now - self.since, 1e-9)
            self.dropped, self.stepped, self.since = 0, 0, now
        return {"steps": rows, "version": self.version, "sps": sps, "dropped": dropped}


class RayActors:
    """N ``EnvWorker`` Ray actors feeding the learner: one outstanding ``collect`` per
    actor; ``next_step`` hands out the received vector steps one at a time and asks the
    actor that delivered for its next batch with the newest published weights. An actor
    that dies is replaced (its unsent batch is lost, said in the log) and the run goes on."""

    def __init__(
        self,
        recipe: ActorRecipe,
        settings: DistributedSettings,
        note: Any = print,
        incarnation_base: int = 0,
    ) -> None:
        self.ray = ray = start_ray(settings.address, num_cpus=max(os.cpu_count() or 1,
                                                                  settings.actors))  # fmt: skip
        self.recipe, self.settings, self.note = recipe, settings, note
        options: dict[str, Any] = {"num_cpus": 1, "max_restarts": 0}
        if settings.resources:
            options["resources"] = dict(settings.resources)
        self.remote = ray.remote(**options)(EnvWorker)
        self.base = incarnation_base
        self.incarnations = [0] * settings.actors
        self.actors = [self.spawn(i) for i in range(settings.actors)]
        self.weights: Any = None  # object ref of the newest published weights
        self.version = -1
        self.pending: dict[Any, int] = {}
        self.queue: deque[Transitions] = deque()
        self.restarts = 0
        self.lost_steps = 0  # env steps (rows) of the batches lost with dead actors
        self.dropped_steps = 0  # env steps continuous actors dropped from a full outbox
        self.updates = 0
        self.lags: list[int] = []
        self.sps: dict[int, float] = {}
        for i in range(settings.actors):
            self.request(i)

    def spawn(self, index: int) -> Any:
        incarnation = self.base + self.incarnations[index]
        actor = self.remote.remote(self.recipe, index, incarnation)
        if self.settings.outbox:
            actor.start.remote(self.settings.outbox)
        return actor

    def request(self, index: int) -> None:
        ref = self.actors[index].collect.remote(
            self.weights, self.version, self.settings.batch_steps
        )
        self.pending[ref] = index

    def policy_changed(self, agent: Any, updates: int) -> None:
        self.updates = updates
        if publish_due(self.version, updates, self.settings.publish_every):
            self.weights = self.ray.put(policy_weights(agent))
            self.version = updates

    def next_step(self) -> Transitions:
        while not self.queue:
            self.receive()
        return self.queue.popleft()

    def receive(self) -> None:
        """Wait for one actor's batch, queue its vector steps and ask it for the next."""
        ready, _ = self.ray.wait(list(self.pending), num_returns=1)
        index = self.pending.pop(ready[0])
        try:
            batch = self.ray.get(ready[0])
        except self.ray.exceptions.RayActorError as error:
            self.replace(index, error)
            return
        for *arrays, info in batch["steps"]:  # Ray's zero-copy arrays are read-only: copies
            self.queue.append(Transitions(*(np.array(array) for array in arrays), info))
        if batch["version"] >= 0:
            self.lags.append(self.updates - batch["version"])
        self.sps[index] = batch["sps"]
        self.dropped_steps += batch["dropped"]
        self.request(index)

    def replace(self, index: int, error: BaseException) -> None:
        """A dead actor: start a new one (a fresh env seed) and ask it for a batch."""
        # its pending batch, and what waited in its outbox (continuous actors)
        lost = (self.settings.batch_steps + self.settings.outbox) * int(
            self.recipe.env.get("num_envs", 1)
        )
        self.restarts += 1
        self.lost_steps += lost
        self.incarnations[index] += 1
        self.note(
            f"actor {index} died ({type(error).__name__}); restarted it; lost its unsent "
            f"transitions (up to {lost} env steps)"
        )
        self.actors[index] = self.spawn(index)
        self.request(index)

    def kill(self, index: int) -> None:
        """End actor ``index`` now (a fault, or the run stopping)."""
        self.ray.kill(self.actors[index], no_restart=True)

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {
            "dist/restarts": float(self.restarts),
            "dist/lost_steps": float(self.lost_steps),
            "dist/dropped_steps": float(self.dropped_steps),
        }
        if self.lags:
            out["dist/policy_lag"] = float(np.mean(self.lags))
            out["dist/policy_lag_max"] = float(max(self.lags))
            self.lags = []
        for index, sps in sorted(self.sps.items()):
            out[f"dist/actor{index}_sps"] = sps
        return out

    def close(self) -> None:
        """Stop every actor (a finished, failed or interrupted run)."""
        for index in range(len(self.actors)):
            with contextlib.suppress(Exception):  # an actor already gone
                self.kill(index)
        self.pending.clear()


# --- synchronous rollout workers (PPO) ---------------------------------------------------

EPISODE_KEYS = (
    "episode_return",
    "episode_length",
    "episode_cost",
    "episode_success",
    "game_return",
)


def normalizer_stats(env: Any) -> dict[str, dict[str, Any] | None]:
    """The running statistics of ``env``'s observation and reward normalisers (None where
    it has none)."""
    from rlcore.envs.make import NormalizeObservation, NormalizeReward, find_wrapper

    obs, reward = find_wrapper(env, NormalizeObservation), find_wrapper(env, NormalizeReward)
    return {
        "obs": None if obs is None else obs.rms.state_dict(),
        "reward": None if reward is None else reward.rms.state_dict(),
    }


def load_normalizer_stats(env: Any, stats: dict[str, dict[str, Any] | None]) -> None:
    """Set ``env``'s normalisers' running statistics (a reward normaliser keeps its
    per-env discounted returns)."""
    from rlcore.envs.make import NormalizeObservation, NormalizeReward, find_wrapper

    for key, kind in (("obs", NormalizeObservation), ("reward", NormalizeReward)):
        wrapper = find_wrapper(env, kind)
        if wrapper is not None and stats[key] is not None:
            wrapper.rms.load_state_dict(stats[key])


def rms_combine(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The statistics of two disjoint sets of samples together (Chan et al.)."""
    count = a["count"] + b["count"]
    delta = b["mean"] - a["mean"]
    m2 = a["var"] * a["count"] + b["var"] * b["count"] + delta**2 * a["count"] * b["count"] / count
    return {"mean": a["mean"] + delta * b["count"] / count, "var": m2 / count, "count": count}


def rms_since(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any] | None:
    """The statistics of the samples added to ``before`` to give ``after`` (the inverse
    of ``rms_combine``; None when none were added)."""
    count = after["count"] - before["count"]
    if count <= 0:
        return None
    mean = (after["mean"] * after["count"] - before["mean"] * before["count"]) / count
    delta = mean - before["mean"]
    m2 = (after["var"] * after["count"] - before["var"] * before["count"]
          - delta**2 * before["count"] * count / after["count"])  # fmt: skip
    return {"mean": mean, "var": np.maximum(m2 / count, 0.0), "count": count}


def merge_stats(
    start: dict[str, dict[str, Any] | None], ends: list[dict[str, dict[str, Any] | None]]
) -> dict[str, dict[str, Any] | None]:
    """The statistics after every worker's samples: ``start`` plus what each of ``ends``
    (a worker's statistics after its rollout from ``start``) added."""
    merged = dict(start)
    for key, base in start.items():
        if base is None:
            continue
        for end in ends:
            added = rms_since(end[key], base)
            if added is not None:
                merged[key] = rms_combine(merged[key], added)
    return merged


class RolloutWorker:
    """A synchronous rollout worker (PPO): its own vector env and an agent copy. Each
    ``rollout`` loads the learner's weights and normaliser statistics, collects
    ``num_steps`` vector steps with ``rlcore.loops.explore_step`` (the loop's own step)
    and returns them with the statistics after them."""

    def __init__(self, recipe: ActorRecipe, index: int, incarnation: int) -> None:
        from rlcore.capabilities import CostCritic

        self.env, self.agent, seed = recipe.build(index, incarnation)
        self.cost_value = self.agent.cost_value if isinstance(self.agent, CostCritic) else None
        self.obs, _ = self.env.reset(seed=seed)

    def rollout(self, weights: Any, stats: dict[str, Any], num_steps: int) -> dict[str, Any]:
        load_policy_weights(self.agent, weights)
        load_normalizer_stats(self.env, stats)
        rows, started = [], time.perf_counter()
        for _ in range(num_steps):
            row, self.obs = explore_step(self.agent, self.cost_value, self.env, self.obs,
                                         torch.device("cpu"))  # fmt: skip
            row.info = {k: row.info[k] for k in EPISODE_KEYS if k in row.info}
            rows.append(row)
        seconds = time.perf_counter() - started
        return {"rows": rows, "obs": self.obs, "stats": normalizer_stats(self.env),
                "sps": num_steps * self.env.num_envs / max(seconds, 1e-9)}  # fmt: skip


def _cat(parts: list[Any]) -> Any:
    """Concatenate along the env axis (tensors, arrays, dicts and tuples of them)."""
    first = parts[0]
    if first is None:
        return None
    if isinstance(first, dict):
        return {key: _cat([part[key] for part in parts]) for key in first}
    if isinstance(first, tuple):
        return tuple(_cat([part[i] for part in parts]) for i in range(len(first)))
    if isinstance(first, torch.Tensor):
        return torch.cat(parts)
    return np.concatenate([np.asarray(part) for part in parts])


def gather_rows(rollouts: list[list[RolloutRow]]) -> list[RolloutRow]:
    """Workers' rollouts (each a list of vector steps) as one rollout over all their envs."""
    fields = [f.name for f in dataclasses.fields(RolloutRow)]
    return [
        RolloutRow(**{name: _cat([getattr(row, name) for row in step]) for name in fields})
        for step in zip(*rollouts)
    ]


class RayRollouts:
    """N ``RolloutWorker`` Ray actors collecting each PPO iteration together with the
    learner's current weights (no policy lag); the rollouts are gathered along the env
    axis, and the normalisers' statistics merged and handed to every worker and to the
    learner's env (evaluation, checkpoints). A worker that dies is replaced and its
    part collected again."""

    def __init__(
        self,
        recipe: ActorRecipe,
        settings: DistributedSettings,
        env: Any,
        note: Any = print,
        incarnation_base: int = 0,
    ) -> None:
        self.ray = ray = start_ray(settings.address, num_cpus=max(os.cpu_count() or 1,
                                                                  settings.actors))  # fmt: skip
        self.recipe, self.settings, self.env, self.note = recipe, settings, env, note
        options: dict[str, Any] = {"num_cpus": 1, "max_restarts": 0}
        if settings.resources:
            options["resources"] = dict(settings.resources)
        self.remote = ray.remote(**options)(RolloutWorker)
        self.base = incarnation_base
        self.incarnations = [0] * settings.actors
        self.workers = [self.spawn(i) for i in range(settings.actors)]
        self.num_envs = settings.actors * int(recipe.env.get("num_envs", 1))
        self.stats = normalizer_stats(env)
        self.restarts = 0
        self.sps: dict[int, float] = {}

    def spawn(self, index: int) -> Any:
        return self.remote.remote(self.recipe, index, self.base + self.incarnations[index])

    def rollout(self, agent: Any, num_steps: int) -> tuple[list[RolloutRow], Any]:
        weights = self.ray.put(policy_weights(agent))
        pending = {w.rollout.remote(weights, self.stats, num_steps): i
                   for i, w in enumerate(self.workers)}  # fmt: skip
        results: dict[int, dict[str, Any]] = {}
        while pending:
            ready, _ = self.ray.wait(list(pending), num_returns=1)
            index = pending.pop(ready[0])
            try:
                results[index] = self.ray.get(ready[0])
            except self.ray.exceptions.RayActorError as error:
                self.restarts += 1
                self.incarnations[index] += 1
                self.note(f"rollout worker {index} died ({type(error).__name__}); restarted "
                          "it; collecting its part of the rollout again")  # fmt: skip
                self.workers[index] = self.spawn(index)
                pending[self.workers[index].rollout.remote(weights, self.stats, num_steps)] = index
        order = [results[i] for i in range(len(self.workers))]
        self.stats = merge_stats(self.stats, [result["stats"] for result in order])
        load_normalizer_stats(self.env, self.stats)
        self.sps = {i: result["sps"] for i, result in enumerate(order)}
        rows = gather_rows([result["rows"] for result in order])
        return rows, _cat([result["obs"] for result in order])

    def metrics(self) -> dict[str, float]:
        out = {"dist/restarts": float(self.restarts), "dist/policy_lag": 0.0}
        out.update({f"dist/actor{i}_sps": sps for i, sps in sorted(self.sps.items())})
        return out

    def state_dict(self) -> dict[str, Any]:
        """The merged normaliser statistics (the learner's env never steps)."""
        return {"stats": self.stats}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stats = state["stats"]
        load_normalizer_stats(self.env, self.stats)

    def close(self) -> None:
        for worker in self.workers:
            with contextlib.suppress(Exception):  # a worker already gone
                self.ray.kill(worker, no_restart=True)
