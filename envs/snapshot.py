"""S3RL snapshot reset: student episodes start from states along a teacher's trajectories.

SnapshotRL (Zhao et al., "Snapshot Reinforcement Learning: Leveraging Prior Trajectories
for Efficiency", 2024) changes the environment, not the algorithm, so it is a vector-env
wrapper that any online rlcore algorithm trains through by configuration alone:

1. ``collect_snapshots``: the teacher (a policy callable; ``rlcore.teacher`` builds it
   from a trained agent, above this layer) acts for ``episodes`` episodes on gymnasium's
   env, as the reference rolls its teachers out: SAC and PPO teachers (any stochastic
   policy) SAMPLE their actions, TD3 (a deterministic policy: td3, td3_bc, rebrac, IQL's
   ``deterministic_actor``) acts with pi(s) and no exploration noise
   (``rlcore.teacher.teacher_samples``). Every ``every`` steps the simulator state is saved
   (``rlcore.envs.make.portable_state``: MuJoCo's integration state, the derived positions the
   reward reads as "before" values, the time limit's elapsed steps) with the observation
   and the teacher's value label: Q(s, a) at an action chosen the same way (a fresh sample
   for a sampling teacher, as the reference), the min over its critics, for SAC / TD3
   teachers; V(s) for PPO (and agents with a state value, e.g. IQL). Labels are computed
   on the observation exactly as the agent sees it: the env-side normalisation it trained
   with, then its own ``obs_normalizer`` (offline agents' dataset statistics). Sampling
   draws from torch's generator seeded with the collection's seed (the run's global RNG
   is left as it was), so the same seed gives the same snapshots.
2. Status classification (``cluster_labels``): 1-D k-means on the value labels, ``k`` by
   student algorithm as in the paper (SAC 4, TD3 and PPO 6); ``keep_best`` first keeps
   the snapshots of the best episodes by return. ``selection="uniform"`` is the ablation
   without clusters.
3. ``SnapshotReset``: every reset picks a cluster uniformly, then a snapshot uniformly in
   it, and restarts that sub-env from it through the back-end interface
   (``rlcore.envs.backend.SimulatorBackend.restart``: every back end, each sub-env its
   own snapshot, exact). On rendered observations (``env.obs=pixels``; the reference is
   state-only) the restarted env's new frame stack is the camera's view of the restored
   state, beside the teacher's state observation (``envs/pixels.py``).
4. An episode started from a snapshot is truncated (not terminated) ``truncate_after``
   steps later; ``None`` switches truncation off (ablation). The time limit counts from
   the restore (the snapshot is restored with 0 elapsed steps), so a snapshot taken 950
   steps into a 1000-step episode still runs its 100 steps, as in the reference, which
   sets the TimeLimit to elapsed + truncate_step (its no-truncation ablation,
   truncate_step 1000, equals ours with ``None``: the env's limit from the restore).
5. After ``switch_after`` env steps (summed over sub-envs) resets are ordinary again; the
   replay buffer is the loop's and is kept.

On a device back end (``rlcore.envs.mjx.MjxVectorEnv``: torch tensors) the same code
runs on the device without a host round trip: the back end's ``state_table`` keeps the
snapshots there, the choice draws from a torch generator on the device for every env
each step, and ``restart`` continues the chosen states where an episode ended (an
all-False mask changes nothing, so no step asks the host whether any episode ended). The
observation of a restored env is the back end's own, from the restored float32 state.

Reference: sdpkjc/snapshotrl (``src/snapshot_{sac,td3,ppo_fix}_mujoco.py``). Departures
from it: snapshots are stored in a portable ``.npz`` file with the env id, task settings
and MuJoCo version (a file from another env or version is refused) instead of deep copies
of live envs; the first snapshot of every episode is its reset state and then every
``every`` steps of that episode (the reference saves after every ``every``-th step counted
over all episodes); a Q label is the min over the teacher's critics (the reference's
CleanRL checkpoints hold only qf1, whose value it uses); k-means is our deterministic 1-D
Lloyd (``kmeans_1d``, quantile starts) instead of scikit-learn's k-means++ with
``random_state=0``. Episodes started from snapshots are ordinary episodes for the loop's
statistics (their training returns are partial), evaluations always start from ordinary
resets.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium.vector import VectorEnv, VectorWrapper

from rlcore.envs.backend import backend_of
from rlcore.envs.make import make_vec_env, resolve_env_id

FORMAT = "rlcore-snapshots-1"
SELECTIONS = ("kmeans", "uniform")
# clusters of the status classification, per student algorithm (S3RL paper)
PAPER_CLUSTERS = {"sac": 4, "td3": 6, "ppo": 6}


class SnapshotMismatchError(ValueError):
    """A snapshot file recorded on another env, task setting or MuJoCo version."""


@dataclass
class Snapshots:
    """Teacher snapshots, one row per saved state (arrays share the first axis)."""

    env_id: str
    env_kwargs: dict[str, Any]
    max_episode_steps: int | None
    mujoco_version: str
    integration: np.ndarray  # (N, S) mjSTATE_INTEGRATION vectors
    xpos: np.ndarray  # (N, nbody, 3) derived body positions at the snapshot
    xipos: np.ndarray  # (N, nbody, 3) derived body centres of mass
    elapsed: np.ndarray  # (N,) time-limit steps elapsed in the teacher's episode
    # the observation at the snapshot (raw): (N, obs_dim), or {part: (N, ...)} for a dict
    obs: np.ndarray | dict[str, np.ndarray]
    labels: np.ndarray  # (N,) teacher value labels (NaN: none)
    episode: np.ndarray  # (N,) teacher episode index of each snapshot
    episode_returns: np.ndarray  # (K,) return of every teacher episode
    every: int = 10
    teacher: str = ""

    def __len__(self) -> int:
        return len(self.integration)

    def state(self, k: int) -> dict[str, Any]:
        """Snapshot ``k`` as the portable state ``rlcore.envs.make.set_states`` restores."""
        return {
            "integration": self.integration[k],
            "xpos": self.xpos[k],
            "xipos": self.xipos[k],
            "elapsed_steps": int(self.elapsed[k]),
        }

    def obs_at(self, k: int) -> np.ndarray | dict[str, np.ndarray]:
        """The observation of snapshot ``k`` (a dict of parts for a dict observation)."""
        if isinstance(self.obs, dict):
            return {name: part[k] for name, part in self.obs.items()}
        return self.obs[k]

    def subset(self, rows: np.ndarray) -> Snapshots:
        """The snapshots ``rows`` (episode returns and metadata kept)."""
        per_row = {"integration", "xpos", "xipos", "elapsed", "labels", "episode"}
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        out = {k: v[rows] if k in per_row else v for k, v in values.items()}
        out["obs"] = (
            {name: part[rows] for name, part in self.obs.items()}
            if isinstance(self.obs, dict)
            else self.obs[rows]
        )
        return Snapshots(**out)

    def keep_best(self, episodes: int) -> Snapshots:
        """Only the snapshots of the ``episodes`` best teacher episodes by return (ties:
        the earlier episode)."""
        if episodes < 1:
            raise ValueError(f"keep_best={episodes} must be >= 1 (or None: keep every episode)")
        best = np.argsort(-self.episode_returns, kind="stable")[:episodes]
        return self.subset(np.flatnonzero(np.isin(self.episode, best)))

    def save(self, path: str | Path) -> Path:
        """Write a portable ``.npz`` (arrays + JSON metadata); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "format": FORMAT,
            "env_id": self.env_id,
            "env_kwargs": self.env_kwargs,
            "max_episode_steps": self.max_episode_steps,
            "mujoco_version": self.mujoco_version,
            "every": self.every,
            "teacher": self.teacher,
        }
        arrays = {
            name: getattr(self, name)
            for name in ("integration", "xpos", "xipos", "elapsed", "labels", "episode",
                         "episode_returns")
        }  # fmt: skip
        if isinstance(self.obs, dict):  # one array per part: obs.<part>
            arrays.update({f"obs.{name}": part for name, part in self.obs.items()})
        else:
            arrays["obs"] = self.obs
        with open(path, "wb") as file:
            np.savez_compressed(file, meta=np.array(json.dumps(meta)), **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Snapshots:
        """Read a file written by ``save``; a clear error for anything else."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"snapshot file {path} does not exist")
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(str(data["meta"]))
                arrays = {k: data[k] for k in data.files if k != "meta"}
        except (OSError, ValueError, KeyError) as error:
            raise ValueError(f"{path} is not an rlcore snapshot file ({error})") from None
        if meta.get("format") != FORMAT:
            raise ValueError(f"{path} is not an rlcore snapshot file (format {meta.get('format')})")
        meta.pop("format")
        parts = {k.removeprefix("obs."): arrays.pop(k) for k in list(arrays) if k.startswith("obs.")}
        if parts:
            arrays["obs"] = parts
        return cls(**meta, **arrays)

    def check_env(
        self, env_id: str, env_kwargs: dict[str, Any], max_episode_steps: int | None
    ) -> None:
        """Refuse a student env these snapshots were not recorded on."""
        import mujoco

        problems = []
        if resolve_env_id(env_id) != self.env_id:
            problems.append(f"env {resolve_env_id(env_id)} (snapshots: {self.env_id})")
        if dict(env_kwargs) != self.env_kwargs:
            problems.append(f"env_kwargs {dict(env_kwargs)} (snapshots: {self.env_kwargs})")
        if max_episode_steps != self.max_episode_steps:
            problems.append(
                f"max_episode_steps {max_episode_steps} (snapshots: {self.max_episode_steps})"
            )
        if mujoco.__version__ != self.mujoco_version:
            problems.append(f"MuJoCo {mujoco.__version__} (snapshots: {self.mujoco_version})")
        if problems:
            raise SnapshotMismatchError(
                "the snapshots were recorded on another task: this run has "
                + "; ".join(problems)
                + ". Record snapshots on this env (snapshot.teacher=<run or checkpoint>) or "
                "run with the settings they were recorded with."
            )


def collect_snapshots(
    env_name: str,
    policy: Callable[[np.ndarray], np.ndarray],
    *,
    episodes: int = 10,
    every: int = 10,
    seed: int = 0,
    value_fn: Callable[[np.ndarray], np.ndarray] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    max_episode_steps: int | None = None,
    teacher: str = "callable",
) -> Snapshots:
    """Roll ``policy`` (raw observations (B, obs_dim) -> actions (B, act_dim), called with
    B = 1) for ``episodes`` episodes on gymnasium's env and save a snapshot every
    ``every`` steps of each episode (its first state included); ``value_fn`` labels the
    snapshots' observations (batched), otherwise labels are NaN (uniform selection only)."""
    import mujoco

    if episodes < 1 or every < 1:
        raise ValueError(f"episodes={episodes} and every={every} must be >= 1")
    env_kwargs = dict(env_kwargs or {})
    env = make_vec_env(env_name, 1, seed, "sync", max_episode_steps=max_episode_steps,
                       env_kwargs=env_kwargs)  # fmt: skip
    rows: dict[str, list] = {k: [] for k in ("state", "obs", "episode", "model")}
    returns = []
    obs, _ = env.reset(seed=seed)
    try:  # gymnasium's sync env (public ``call``): sub-env 0's MuJoCo state
        env.unwrapped.call("rlcore_portable_state")
    except ValueError:
        env.close()
        raise ValueError(f"snapshot reset needs a MuJoCo task; {env_name} is not one") from None
    for episode in range(episodes):
        step, total = 0, 0.0
        while True:
            if step % every == 0:
                rows["state"].append(env.unwrapped.call("rlcore_portable_state")[0])
                rows["model"].append(env.unwrapped.call("rlcore_model_digest")[0])
                rows["obs"].append(
                    {name: part[0].copy() for name, part in obs.items()}
                    if isinstance(obs, dict)
                    else obs[0].copy()
                )
                rows["episode"].append(episode)
            action = np.asarray(policy(obs), dtype=np.float64).reshape(env.action_space.shape)
            obs, reward, terminated, truncated, _ = env.step(action)
            step, total = step + 1, total + float(reward[0])
            if terminated[0] or truncated[0]:
                returns.append(total)
                break
    env.close()
    if len(set(rows["model"])) > 1:
        raise ValueError(
            f"{env_name} changes its MuJoCo model between episodes (Adroit moves its door, "
            "a randomised friction ...): a snapshot keeps the simulation's state, not the "
            "model, and would restore into another one; snapshot resets are refused for it"
        )
    observations: np.ndarray | dict[str, np.ndarray]
    if isinstance(rows["obs"][0], dict):
        observations = {name: np.stack([o[name] for o in rows["obs"]]) for name in rows["obs"][0]}
    else:
        observations = np.stack(rows["obs"])
    labels = (
        np.full(len(rows["obs"]), np.nan)
        if value_fn is None
        else np.asarray(value_fn(observations), dtype=np.float64).reshape(-1)
    )
    states = rows["state"]
    return Snapshots(
        env_id=resolve_env_id(env_name),
        env_kwargs=env_kwargs,
        max_episode_steps=max_episode_steps,
        mujoco_version=mujoco.__version__,
        integration=np.stack([s["integration"] for s in states]),
        xpos=np.stack([s["xpos"] for s in states]),
        xipos=np.stack([s["xipos"] for s in states]),
        elapsed=np.array([s["elapsed_steps"] for s in states], np.int64),
        obs=observations,
        labels=labels,
        episode=np.array(rows["episode"], np.int64),
        episode_returns=np.array(returns),
        every=every,
        teacher=teacher,
    )


def kmeans_1d(values: np.ndarray, k: int, iterations: int = 100) -> np.ndarray:
    """Cluster index of each value: Lloyd's k-means on scalars, centres started at the
    values' quantiles (deterministic), clusters renumbered by ascending centre. Fewer
    distinct values than ``k`` gives one cluster per distinct value."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or not len(values):
        raise ValueError("kmeans_1d needs a non-empty 1-D array of labels")
    if not np.isfinite(values).all():
        raise ValueError("value labels must be finite for k-means (use selection=uniform)")
    if k < 1:
        raise ValueError(f"k={k} clusters must be >= 1")
    distinct = np.unique(values)
    k = min(k, len(distinct))
    centres = np.quantile(values, (np.arange(k) + 0.5) / k)
    assign = np.zeros(len(values), np.int64)
    for _ in range(iterations):
        assign = np.abs(values[:, None] - centres[None, :]).argmin(1)
        new = np.array(
            [values[assign == c].mean() if (assign == c).any() else centres[c] for c in range(k)]
        )
        if np.array_equal(new, centres):
            break
        centres = new
    order = np.argsort(centres, kind="stable")
    rank = np.empty(k, np.int64)
    rank[order] = np.arange(k)
    used = np.unique(rank[assign])  # drop clusters left empty
    return np.searchsorted(used, rank[assign])


@dataclass
class SnapshotSettings:
    """How ``SnapshotReset`` uses its snapshots (the config's ``snapshot`` block)."""

    selection: str = "kmeans"  # "kmeans": cluster uniformly, then a snapshot in it | "uniform"
    clusters: int = 4  # k of the status classification (paper: SAC 4, TD3 / PPO 6)
    truncate_after: int | None = 100  # a snapshot episode is truncated this many steps in
    switch_after: int = 100_000  # env steps (all sub-envs) with snapshot resets
    keep_best: int | None = None  # only the snapshots of the best episodes by return
    seed: int = 0  # the snapshot choice's generator

    def __post_init__(self) -> None:
        if self.selection not in SELECTIONS:
            raise ValueError(f"snapshot selection={self.selection!r}: choose from {SELECTIONS}")
        if self.truncate_after is not None and self.truncate_after < 1:
            raise ValueError(f"truncate_after={self.truncate_after} must be >= 1 (or None)")
        if self.switch_after < 0 or self.clusters < 1:
            raise ValueError("switch_after must be >= 0 and clusters >= 1")


class SnapshotReset(VectorWrapper):
    """Resets sub-envs from teacher snapshots for the first ``switch_after`` env steps.

    Sits directly on the back end (below episode statistics and normalisation, which see
    its episodes as ordinary ones) and drives it through ``SimulatorBackend`` alone: the
    snapshots are the back end's ``state_table``, every new episode a ``restart``. Adds
    ``info["snapshot_start"]`` (bool per env: this row's observation starts an episode
    from a snapshot). ``metrics()`` reports resets from snapshots, cluster usage and the
    steps left until the switch back; the state (generator, counters, which episodes
    started from snapshots) is checkpointed with the env, so resume stays exact.

    Host and device back ends run the same code on their own arrays (numpy, or torch
    tensors on the back end's device, with no host round trip); only the draw of the
    snapshots differs: numpy's generator for the envs that restart (host), a torch
    generator on the device for every env each time (device).
    """

    def __init__(self, env: VectorEnv, snapshots: Snapshots, settings: SnapshotSettings) -> None:
        super().__init__(env)
        if settings.keep_best is not None:
            snapshots = snapshots.keep_best(settings.keep_best)
        if not len(snapshots):
            raise ValueError("no snapshots to reset from")
        self.snapshots, self.settings = snapshots, settings
        if settings.selection == "kmeans":
            self.cluster = kmeans_1d(snapshots.labels, settings.clusters)
        else:
            self.cluster = np.zeros(len(snapshots), np.int64)
        self.members = [np.flatnonzero(self.cluster == c) for c in range(self.cluster.max() + 1)]
        self.backend = backend_of(env)
        self.device = self.backend.device  # None: numpy arrays on the host
        self.table = self.backend.state_table([self.start_state(k) for k in range(len(snapshots))])
        self.rng = np.random.default_rng(settings.seed)
        self.env_steps = 0
        self.vector_steps = 0
        self.last_snapshot_step = -1  # vector step of the last restore from snapshots
        self.since_snapshot = np.full(self.num_envs, -1, np.int64)  # -1: ordinary episode
        self.resets_from_snapshots: Any = 0
        self.cluster_counts = np.zeros(len(self.members), np.int64)
        self.generator: torch.Generator | None = None
        if self.device is not None:
            self._to_device()

    @property
    def on_device(self) -> bool:
        """The back end's arrays are torch tensors on a device (mjx)."""
        return self.device is not None

    def _to_device(self) -> None:
        """Cluster members (padded), generator and counters on the back end's device."""
        sizes = [len(m) for m in self.members]
        members = np.zeros((len(self.members), max(sizes)), np.int64)
        for c, rows in enumerate(self.members):
            members[c, : len(rows)] = rows
        self.member_table = torch.as_tensor(members, device=self.device)
        self.member_sizes = torch.as_tensor(sizes, device=self.device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(self.settings.seed)
        self.since_snapshot = torch.as_tensor(self.since_snapshot, device=self.device)
        self.resets_from_snapshots = torch.zeros((), dtype=torch.int64, device=self.device)
        self.cluster_counts = torch.as_tensor(self.cluster_counts, device=self.device)

    def start_state(self, k: int) -> dict[str, Any]:
        """Snapshot ``k`` as restored: the time limit counts from the restore (0 elapsed
        steps), so the episode runs ``truncate_after`` steps even past the teacher's limit
        (the reference's TimeLimit = elapsed + truncate_step); with the teacher's
        observation there, which host back ends hand out."""
        return {**self.snapshots.state(k), "elapsed_steps": 0, "obs": self.snapshots.obs_at(k)}

    @property
    def active(self) -> bool:
        """Resets come from snapshots (before the switch back)."""
        return self.env_steps < self.settings.switch_after

    def _choose(self, mask: Any) -> tuple[Any, Any]:
        """Table rows and clusters for the envs where ``mask`` (other rows: anything): a
        cluster uniformly, then a member uniformly."""
        if self.device is None:  # numpy's generator, drawn for the restarting envs only
            ids = np.flatnonzero(mask)
            rows, clusters = np.zeros(self.num_envs, np.int64), np.zeros(self.num_envs, np.int64)
            if ids.size:
                clusters[ids] = self.rng.integers(len(self.members), size=len(ids))
                rows[ids] = [int(self.rng.choice(self.members[c])) for c in clusters[ids]]
            return rows, clusters
        n, generator = self.num_envs, self.generator  # every env: no host round trip
        clusters = torch.randint(len(self.members), (n,), generator=generator, device=self.device)
        sizes = self.member_sizes[clusters]
        uniform = torch.rand(n, generator=generator, device=self.device)
        member = torch.minimum((uniform * sizes).long(), sizes - 1)
        return self.member_table[clusters, member], clusters

    def _restart(self, mask: Any, obs: Any, from_snapshots: bool) -> tuple[Any, dict[str, Any]]:
        """New episodes where ``mask``: from freshly chosen snapshots or ordinary resets.
        Returns the observations and the back end's restart info."""
        if not from_snapshots:
            return self.backend.restart(mask, obs)
        rows, clusters = self._choose(mask)
        obs, reached = self.backend.restart(mask, obs, self.table, rows)
        self.since_snapshot = _where(mask, 0, self.since_snapshot)
        self.resets_from_snapshots = self.resets_from_snapshots + mask.sum()
        if self.device is None:
            np.add.at(self.cluster_counts, clusters, mask.astype(np.int64))
        else:
            self.cluster_counts.scatter_add_(0, clusters, mask.long())
        self.last_snapshot_step = self.vector_steps
        return obs, reached

    def reset(self, *, seed: Any = None, options: dict | None = None):
        mask = (options or {}).get("reset_mask")  # read first: gymnasium pops it
        obs, info = self.env.reset(seed=seed, options=options)
        if mask is None:
            mask = np.ones(self.num_envs, bool)
        mask = _as_array(mask, torch.bool if self.device is not None else bool, self.device)
        self.since_snapshot = _where(mask, -1, self.since_snapshot)
        if self.active:
            obs = self._restart(mask, obs, from_snapshots=True)[0]
        info["snapshot_start"] = mask & self.active
        return obs, info

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        self.env_steps += self.num_envs
        self.vector_steps += 1
        started = self.since_snapshot >= 0
        since = _where(started, self.since_snapshot + 1, self.since_snapshot)
        limit = self.settings.truncate_after
        cut = started & ~(terminated | truncated)
        cut &= since >= (limit if limit is not None else np.iinfo(np.int64).max)
        truncated = truncated | cut
        done = terminated | truncated
        info = self._final_obs_of_cut(info, obs, cut, done)
        self.since_snapshot = _where(done, -1, since)
        # a snapshot episode may still be cut `limit` steps after the last restore
        may_cut = limit is not None and self.vector_steps - self.last_snapshot_step <= limit
        if self.active or may_cut:
            restart = done if self.active else cut
            obs, reached = self._restart(restart, obs, self.active)
            for key in ("episode_return", "episode_length"):
                if key in info and key in reached:  # the back end did not see the cut end
                    info[key] = _where(cut, reached[key], info[key])
        info["snapshot_start"] = done & self.active
        return obs, reward, terminated, truncated, info

    def _final_obs_of_cut(self, info: dict[str, Any], obs: Any, cut: Any, done: Any) -> dict:
        """``info`` with the cut episodes' final observations: gymnasium's sparse form on
        the host (only when some episode was cut), the flags only on a device back end
        (its ``final_obs`` has every row already)."""
        if self.device is not None:
            return {**info, "_final_obs": done}
        if not cut.any():
            return info
        final_obs = info.get("final_obs", np.full(self.num_envs, None, dtype=object)).copy()
        for i in np.flatnonzero(cut):  # a dict observation (goal task): one dict per env
            final_obs[i] = (
                {name: part[i].copy() for name, part in obs.items()}
                if isinstance(obs, dict)
                else obs[i].copy()
            )
        info["final_obs"] = final_obs
        info["_final_obs"] = info.get("_final_obs", np.zeros(self.num_envs, bool)) | cut
        return info

    def metrics(self) -> dict[str, float]:
        """Counters for the training log."""
        out = {
            "snapshot/resets": float(self.resets_from_snapshots),
            "snapshot/steps_to_switch": float(max(0, self.settings.switch_after - self.env_steps)),
        }
        for c, count in enumerate(self.cluster_counts.tolist()):
            out[f"snapshot/cluster_{c}"] = float(count)
        return out

    def state_dict(self) -> dict[str, Any]:
        """Counters and generators as plain numbers and numpy arrays (either back end)."""
        state = {
            "rng": self.rng.bit_generator.state,
            "env_steps": self.env_steps,
            "since_snapshot": _numpy(self.since_snapshot),
            "resets": int(self.resets_from_snapshots),
            "cluster_counts": _numpy(self.cluster_counts),
            "vector_steps": self.vector_steps,
            "last_snapshot_step": self.last_snapshot_step,
        }
        if self.generator is not None:
            state["device_rng"] = self.generator.get_state().numpy()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.env_steps = int(state["env_steps"])
        self.since_snapshot = state["since_snapshot"].copy()
        self.resets_from_snapshots = int(state["resets"])
        self.cluster_counts = state["cluster_counts"].copy()
        # a host state saved before these counters were kept: any running snapshot
        # episode may still be cut within `truncate_after` steps of the resume
        self.vector_steps = int(state.get("vector_steps", 0))
        self.last_snapshot_step = int(state.get("last_snapshot_step", 0))
        if self.generator is not None:
            if "device_rng" not in state:
                raise ValueError("this env state was saved on a CPU back end, not on mjx")
            self.generator.set_state(torch.as_tensor(state["device_rng"]))
            self.since_snapshot = torch.as_tensor(self.since_snapshot, device=self.device)
            self.resets_from_snapshots = torch.tensor(
                self.resets_from_snapshots, device=self.device
            )
            self.cluster_counts = torch.as_tensor(self.cluster_counts, device=self.device)


def _where(condition: Any, value: Any, other: Any) -> Any:
    """``np.where`` or ``torch.where``, by the array type of ``condition``."""
    if isinstance(condition, torch.Tensor):
        return torch.where(condition, value, other)
    return np.where(condition, value, other)


def _as_array(values: Any, dtype: Any, device: torch.device | None) -> Any:
    """``values`` as a numpy array (``device`` None) or a tensor on ``device``."""
    if device is None:
        return np.asarray(values.cpu() if isinstance(values, torch.Tensor) else values, dtype)
    return torch.as_tensor(values, dtype=dtype, device=device)


def _numpy(values: np.ndarray | torch.Tensor) -> np.ndarray:
    """A host copy of a counter array."""
    if isinstance(values, torch.Tensor):
        return values.cpu().numpy().copy()
    return values.copy()
