"""The back-end interface: what rlcore asks of a vector env's simulator.

Every back end ``make_vec_env`` builds satisfies ``SimulatorBackend``: the native and
mjx vector envs natively, gymnasium's sync and async vector envs through ``SyncBackend``
and ``AsyncBackend``, thin subclasses that use only gymnasium's public API (``call`` and
``set_attr`` reach every sub-env's ``rlcore.envs.make.SimulatorState``). Checkpoints
(``get_vec_env_state``), S3RL snapshot resets (``rlcore.envs.snapshot``) and anything
else that moves simulator states goes through these methods, never a back end's class.

States are dicts. A back end restores its own states and the portable MuJoCo states of
``rlcore.envs.make.portable_state`` (S3RL snapshots); an ``"obs"`` entry is the
observation at that state, which a host back end hands out when it restarts an env from
it (a gymnasium env cannot recompute its observation through its public API).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
import torch

State = dict[str, Any]


@runtime_checkable
class SimulatorBackend(Protocol):
    """A vector env's simulator: states of chosen envs, and restarts of chosen envs.

    ``device`` is where the back end's arrays live: None for numpy arrays on the host, a
    torch device for tensors (mjx); masks, rows and observations passed to ``restart``
    are of that kind.
    """

    num_envs: int
    device: torch.device | None

    def get_states(self, env_ids: Sequence[int] | None = None) -> list[State]:
        """The states of envs ``env_ids`` (default: every env), in that order."""
        ...

    def set_states(self, states: Sequence[State], env_ids: Sequence[int] | None = None) -> None:
        """Restore ``states[k]`` into env ``env_ids[k]`` (default: every env, in order);
        the other envs are untouched."""
        ...

    def state_table(self, states: Sequence[State]) -> Any:
        """``states`` in the form ``restart`` reads them by row (on the device for mjx)."""
        ...

    def restart(
        self, mask: Any, obs: Any, table: Any = None, rows: Any = None
    ) -> tuple[Any, dict[str, Any]]:
        """New episodes in the envs where ``mask``: continued from ``table`` row
        ``rows[i]`` for env ``i``, or fresh resets (partial reset) without a table. Returns
        ``obs`` (this step's observations) with the restarted envs' rows replaced, and an
        info dict (mjx: ``episode_return`` / ``episode_length`` each env had reached)."""
        ...


def checked_ids(num_envs: int, states: Sequence[State], env_ids: Sequence[int] | None) -> list[int]:
    """``env_ids`` (default: every env) as ints, checked against ``states`` and ``num_envs``."""
    if env_ids is None:
        if len(states) != num_envs:
            raise ValueError(f"saved state has {len(states)} envs, this env has {num_envs}")
        return list(range(num_envs))
    ids = [int(i) for i in env_ids]
    if len(states) != len(ids):
        raise ValueError(f"got {len(states)} states for {len(ids)} env ids")
    bad = [i for i in ids if not 0 <= i < num_envs]
    if bad:
        raise ValueError(f"env ids {bad} out of range for {num_envs} envs")
    return ids


def restart_on_host(
    backend: SimulatorBackend,
    mask: np.ndarray,
    obs: np.ndarray,
    table: Sequence[State] | None = None,
    rows: np.ndarray | None = None,
    restored_obs: Callable[[np.ndarray], list[Any]] | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """``SimulatorBackend.restart`` for a numpy back end: ``set_states`` of the chosen
    rows (their observations from the states' ``"obs"``, or, given ``restored_obs``, what
    it returns for the restarted env ids) or a masked gymnasium reset. Dict observations
    are replaced part by part."""
    mask = np.asarray(mask, bool)
    ids = np.flatnonzero(mask)
    if not ids.size:
        return obs, {}
    keyed = isinstance(obs, dict)
    obs = {name: part.copy() for name, part in obs.items()} if keyed else obs.copy()
    if table is None:
        fresh, _ = backend.reset(options={"reset_mask": mask})
        for name in obs if keyed else [None]:
            target, source = (obs[name], fresh[name]) if keyed else (obs, fresh)
            target[ids] = source[ids]
        return obs, {}
    states = [table[int(rows[i])] for i in ids]
    if any("obs" not in state for state in states):
        raise ValueError("restart from states needs each state's observation ('obs')")
    backend.set_states(states, ids)
    restored = [state["obs"] for state in states] if restored_obs is None else restored_obs(ids)
    for name in obs if keyed else [None]:
        target = obs[name] if keyed else obs
        values = [value[name] if keyed else value for value in restored]
        target[ids] = np.stack([np.asarray(value) for value in values]).astype(target.dtype)
    return obs, {}


def _gymnasium_restored_obs(env: gym.vector.VectorEnv, ids: np.ndarray) -> list[Any]:
    """The observations sub-envs ``ids`` hold after a restore (``SimulatorState.last_obs``:
    the state's own, or with the camera's view of it where the env renders)."""
    held = env.get_attr("last_obs")
    return [held[int(i)] for i in ids]


def _gymnasium_get_states(env: gym.vector.VectorEnv, env_ids: Sequence[int] | None) -> list[State]:
    states = list(env.call("rlcore_get_state"))
    return states if env_ids is None else [states[int(i)] for i in env_ids]


def _gymnasium_set_states(
    env: gym.vector.VectorEnv, states: Sequence[State], env_ids: Sequence[int] | None
) -> None:
    """One ``set_attr`` call: env ``i`` gets its state or None (untouched)."""
    values: list[State | None] = [None] * env.num_envs
    for i, state in zip(checked_ids(env.num_envs, states, env_ids), states):
        values[i] = state
    env.set_attr("rlcore_restore", values)


class SyncBackend(gym.vector.SyncVectorEnv):
    """gymnasium's ``SyncVectorEnv`` as a ``SimulatorBackend`` (sub-envs wrapped in
    ``rlcore.envs.make.SimulatorState``)."""

    device = None

    def get_states(self, env_ids: Sequence[int] | None = None) -> list[State]:
        return _gymnasium_get_states(self, env_ids)

    def set_states(self, states: Sequence[State], env_ids: Sequence[int] | None = None) -> None:
        _gymnasium_set_states(self, states, env_ids)

    def state_table(self, states: Sequence[State]) -> list[State]:
        return list(states)

    def restart(
        self, mask: Any, obs: Any, table: Any = None, rows: Any = None
    ) -> tuple[Any, dict[str, Any]]:
        return restart_on_host(self, mask, obs, table, rows,
                               partial(_gymnasium_restored_obs, self))  # fmt: skip


# What the async back end's fork server imports once, before it forks any worker: the
# module of make_vec_env's env factory (torch, gymnasium, MuJoCo) and gymnasium's MuJoCo
# env base. A worker forked from it then starts in ~0.05 s instead of importing them again
# (~1 s each; 2-3 s with torch).
WORKER_PRELOAD = ("rlcore.envs.make", "gymnasium.envs.mujoco")


def worker_start_method() -> str:
    """How the async back end starts its workers: ``forkserver`` where the platform has
    it (its imports preloaded, ``WORKER_PRELOAD``), else ``spawn``.

    Never a plain ``fork``: forking a process whose JAX (mjx back end) or torch threads
    run copies locks those threads hold into the child, which may then deadlock (JAX
    warns "os.fork() was called ... will likely lead to a deadlock"). The fork server
    is a fresh single-purpose process, started once, that runs none of them.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(WORKER_PRELOAD))
    return "forkserver"


class AsyncBackend(gym.vector.AsyncVectorEnv):
    """gymnasium's ``AsyncVectorEnv`` as a ``SimulatorBackend``: states travel through
    the public ``call`` / ``set_attr`` (each worker gets its own value).

    Workers start through ``worker_start_method`` (never a plain fork), so the env
    factories are pickled (gymnasium uses cloudpickle: closures are fine) and, as with
    any ``multiprocessing`` program, a script that builds async envs at its top level
    needs the ``if __name__ == "__main__":`` guard.
    """

    device = None

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], **kwargs: Any) -> None:
        super().__init__(env_fns, context=worker_start_method(), **kwargs)

    def get_states(self, env_ids: Sequence[int] | None = None) -> list[State]:
        return _gymnasium_get_states(self, env_ids)

    def set_states(self, states: Sequence[State], env_ids: Sequence[int] | None = None) -> None:
        _gymnasium_set_states(self, states, env_ids)

    def state_table(self, states: Sequence[State]) -> list[State]:
        return list(states)

    def restart(
        self, mask: Any, obs: Any, table: Any = None, rows: Any = None
    ) -> tuple[Any, dict[str, Any]]:
        return restart_on_host(self, mask, obs, table, rows,
                               partial(_gymnasium_restored_obs, self))  # fmt: skip


def backend_of(env: gym.vector.VectorEnv) -> SimulatorBackend:
    """The back end under ``env``'s wrappers: the outermost layer that implements the
    interface (a wrapper that changes what a restart observes does: the native back
    ends' ``envs.pixels.BatchPixels``), else the unwrapped env, checked."""
    layer = env
    while isinstance(layer, gym.vector.VectorWrapper):
        if isinstance(layer, SimulatorBackend):
            return layer
        layer = layer.env
    base = env.unwrapped
    if not isinstance(base, SimulatorBackend):
        raise TypeError(
            f"{type(base).__name__} is not an rlcore simulator back end (build envs with "
            "rlcore.envs.make.make_vec_env)"
        )
    return base
