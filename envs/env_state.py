"""The state of one unwrapped gymnasium env, for checkpoints and exact resume.

A task's state is more than its MuJoCo ``MjData``, and some tasks keep no ``MjData`` of
their own (gymnasium-robotics 1.4.2, measured: restoring the data alone left the next
steps 0.2-14 off):

* the mazes (PointMaze, AntMaze) step an inner MuJoCo env (``point_env`` / ``ant_env``)
  and keep the episode's ``goal`` and ``reset_pos`` in Python; Franka Kitchen steps
  ``robot_env`` and keeps its goal and the tasks still to complete in Python; Fetch keeps
  its ``goal`` in Python;
* Adroit's tasks move bodies and sites of the *model* at each reset (the door's frame,
  the hammer's nail board, the relocation target), and the mazes move their goal site.

So ``capture`` takes, of every MuJoCo simulation the env steps (``simulations``: its own
``model`` / ``data``, and those of the envs it holds), the whole ``MjData`` and the
model's placements (``MODEL_FIELDS``), and of the env and each simulating env the plain
data they hold (and a held env's random generator) (``plain``: numbers, strings, arrays that own their memory, and lists,
tuples and dicts of them; a classic-control task's ``state`` is one). ``restore`` puts it
all back into an env made with the same arguments. What lives in other objects (a Box2D
world) is not seen: such a task resumes with its plain parts only.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import gymnasium as gym
import numpy as np

# the model's placements that tasks change between episodes (Adroit: body_pos, site_pos;
# the mazes: site_pos of the goal), saved with every MjData
MODEL_FIELDS = ("body_pos", "body_quat", "site_pos", "site_quat", "geom_pos", "geom_quat",
                "geom_size")  # fmt: skip
_SCALARS = (bool, int, float, complex, str, bytes, type(None), np.generic)


def _holds_simulation(env: Any) -> bool:
    import mujoco

    owned = vars(env)
    return isinstance(owned.get("model"), mujoco.MjModel) and isinstance(
        owned.get("data"), mujoco.MjData
    )


def simulations(env: gym.Env) -> dict[str, Any]:
    """The envs among ``env`` (an unwrapped env, key ``""``) and the envs it holds as
    attributes (key: the attribute's name) that own a MuJoCo ``model`` and ``data``."""
    found = {"": env} if _holds_simulation(env) else {}
    for name, value in vars(env).items():
        if isinstance(value, gym.Env) and _holds_simulation(value.unwrapped):
            found[name] = value.unwrapped
    return found


def plain(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is plain data a copy restores: a number, string or None, a numeric
    array owning its memory (a view belongs to what it views), or a list, tuple or dict
    of plain values (dict keys plain scalars), at most 4 levels deep."""
    if isinstance(value, _SCALARS):
        return True
    if isinstance(value, np.ndarray):
        return value.base is None and value.dtype != object
    if depth >= 4:
        return False
    if isinstance(value, list | tuple):
        return all(plain(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return all(
            isinstance(key, _SCALARS) and plain(item, depth + 1) for key, item in value.items()
        )
    return False


def _plain_attributes(owner: Any) -> dict[str, Any]:
    # one deep copy of them all keeps two attributes that are one object one object
    return copy.deepcopy({name: value for name, value in vars(owner).items() if plain(value)})


def capture(env: gym.Env) -> dict[str, Any]:
    """``env``'s state (an unwrapped env): its plain attributes and, per simulation, the
    pickled ``MjData``, the model's placements and the simulating env's plain attributes."""
    sims: dict[str, Any] = {}
    seen: list[Any] = []
    for name, sim in simulations(env).items():
        shared = any(sim.data is data for data in seen)  # Kitchen's own are its robot's
        seen.append(sim.data)
        sims[name] = {  # a pickled MjData holds its model too: saved once
            "data": None if shared else pickle.dumps(sim.data),
            "model": {} if shared else {f: getattr(sim.model, f).copy() for f in MODEL_FIELDS},
            "attributes": _plain_attributes(sim) if name else {},
            # a held env draws from its own generator (Kitchen's robot: observation noise)
            "rng": copy.deepcopy(sim.np_random.bit_generator.state) if name else None,
        }
    return {"attributes": _plain_attributes(env), "simulations": sims}


def restore(env: gym.Env, state: dict[str, Any]) -> None:
    """Put ``capture``'s ``state`` back into ``env`` (unwrapped, made with the same
    arguments as the env it was captured from)."""
    import mujoco

    sims = simulations(env)
    if set(sims) != set(state["simulations"]):
        raise ValueError(
            f"the saved env state simulates {sorted(state['simulations'])}, this env "
            f"{sorted(sims)}: not the same task"
        )
    for name, saved in state["simulations"].items():
        sim = sims[name]
        for field, values in saved["model"].items():
            getattr(sim.model, field)[:] = values
        if saved["data"] is not None:
            mujoco.mj_copyData(sim.data, sim.model, pickle.loads(saved["data"]))
        _set_attributes(sim, saved["attributes"])
        if saved["rng"] is not None:
            sim.np_random.bit_generator.state = saved["rng"]
    _set_attributes(env, state["attributes"])


def _set_attributes(owner: Any, attributes: dict[str, Any]) -> None:
    for name, value in copy.deepcopy(attributes).items():
        setattr(owner, name, value)
