"""The state of one unwrapped gymnasium env, for checkpoints and exact resume.

A task's state is more than its MuJoCo ``MjData``, and some tasks keep no ``MjData`` of
their own (gymnasium-robotics 1.4.2, measured: restoring the data alone left the next
steps 0.2-14 off):

* the mazes (PointMaze, AntMaze) step an inner MuJoCo env (``point_env`` / ``ant_env``)
  and keep the episode's ``goal`` and ``reset_pos`` in Python; Franka Kitchen steps
  ``robot_env`` and keeps its goal and the tasks still to complete in Python, and its
  robot draws observation noise from its own generator; Fetch keeps its ``goal`` in
  Python;
* tasks change their *model* between episodes: Adroit moves bodies and sites (the door's
  frame, the hammer's nail board, the relocation target), the mazes their goal site,
  NeoRL2's RandomFrictionHopper the friction.

So ``capture`` takes, of every MuJoCo simulation the env steps (``simulations``: its own
``model`` / ``data``, and those of the envs it holds), the whole ``MjData`` (``data_state``:
without the model a pickled one carries, compressed), the model's
arrays of up to ``MODEL_FIELD_BYTES`` each (every parameter a task randomises: 9 KB for
Hopper, 124 KB for Fetch; meshes and textures are larger and left out) and its options
(``opt``: gravity, timestep ...); and of the env and each simulating env the plain data
they hold (``plain``: numbers, strings, dates, numpy arrays and random generators, and
lists, tuples and dicts of them; a classic-control task's ``state`` is one), the held
envs' gymnasium generators too. ``restore`` puts it all back into an env made with the
same arguments. What lives in other objects is not seen (a Box2D world, an ODE solver's
work arrays: NeoRL2's RocketRecovery and Simglucose): rlcore's own such tasks declare it
(``UnsavedState``), and a resumed run starts new episodes for them; another such task
continues from its plain parts only.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import pickle
import zlib
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

MODEL_FIELD_BYTES = 65_536  # model arrays up to this size are saved with every MjData
_SCALARS = (bool, int, float, complex, str, bytes, type(None), np.generic, datetime.date,
            datetime.time, datetime.timedelta)  # fmt: skip
_GENERATORS = (np.random.Generator, np.random.RandomState)


@runtime_checkable
class UnsavedState(Protocol):
    """A task whose state lives in objects rlcore cannot copy (NeoRL2's RocketRecovery: a
    Box2D world; Simglucose: scipy's ODE solver). Its envs' checkpointed states say so
    (``{"restorable": False, "why": unsaved_state}``), and a resumed run starts new
    episodes and notes why, instead of continuing from half a state."""

    unsaved_state: str  # why, for the resumed run's note


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


def _numpy_memory(array: np.ndarray) -> bool:
    """Whether ``array``'s memory is numpy's (its own, or another array's it views), not
    MuJoCo's (``data.qpos`` is a view of the MjData, which restores it)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array.base is None


def plain(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is plain data a copy restores: a number, string, date or None, a
    numeric array in numpy's memory, a numpy random generator, or a list, tuple or dict
    of plain values (dict keys plain scalars), at most 4 levels deep."""
    if isinstance(value, _SCALARS + _GENERATORS):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype != object and _numpy_memory(value)
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


def _model_arrays(model: Any) -> dict[str, np.ndarray]:
    """The model's writable arrays (views of its memory) of up to MODEL_FIELD_BYTES."""
    arrays = {}
    for name in dir(model):
        if name.startswith("_"):
            continue
        value = getattr(model, name)
        if (isinstance(value, np.ndarray) and value.base is not None and value.flags.writeable
                and value.nbytes <= MODEL_FIELD_BYTES):  # fmt: skip
            arrays[name] = value
    return arrays


def _options(model: Any) -> dict[str, Any]:
    """The model options' numbers and arrays (gravity, timestep ...), as they are."""
    values = {name: getattr(model.opt, name) for name in dir(model.opt) if not name.startswith("_")}
    return {name: value for name, value in values.items() if isinstance(value, int | float | np.ndarray)}


def model_fields(model: Any) -> dict[str, Any]:
    """Copies of ``model``'s arrays of up to MODEL_FIELD_BYTES and of its options' values."""
    return {"arrays": {name: array.copy() for name, array in _model_arrays(model).items()},
            "opt": {name: copy.copy(value) for name, value in _options(model).items()}}  # fmt: skip


def set_model_fields(model: Any, fields: dict[str, Any]) -> None:
    """Write ``model_fields``' copies back into ``model`` (one made as theirs was)."""
    arrays = _model_arrays(model)
    for name, values in fields.get("arrays", {}).items():
        arrays[name][...] = values
    for name, value in fields.get("opt", {}).items():
        if isinstance(value, np.ndarray):
            getattr(model.opt, name)[...] = value
        else:
            setattr(model.opt, name, value)


def model_digest(env: gym.Env) -> str:
    """A digest of the ``model_fields`` of every simulation ``env`` steps: equal digests,
    equal models (S3RL snapshots check that their task keeps one model)."""
    digest = hashlib.sha1()
    for name, sim in sorted(simulations(env).items()):  # the arrays as they are, no copies
        digest.update(name.encode())
        for field, values in sorted(_model_arrays(sim.model).items()):
            digest.update(field.encode() + np.ascontiguousarray(values).tobytes())
        options = sorted((key, np.asarray(value).tolist()) for key, value in _options(sim.model).items())
        digest.update(repr(options).encode())
    return digest.hexdigest()


def data_state(data: Any, model: Any) -> dict[str, bytes]:
    """Everything ``data`` holds (integration state, derived quantities, contacts, solver
    arena), for ``load_data``. A pickled ``MjData`` carries a copy of its model (58 MB for
    Franka Kitchen, whose meshes are most of it, against 0.5 MB of data); the env that
    restores has that model, so the model's bytes are cut out of the pickle (``"before"``:
    what precedes them, ``"after"``: the data, zlib-compressed: 33 KB for Kitchen, 5 KB for
    Hopper). Where the pickle does not hold the model's own pickled bytes (another MuJoCo's
    layout), the whole pickle is kept (``"pickle"``)."""
    whole, own = data.__getstate__(), model.__getstate__()
    start = whole.find(own[:64])
    if start < 0 or whole[start : start + len(own)] != own:
        return {"pickle": pickle.dumps(data)}
    return {"before": whole[:start], "after": zlib.compress(whole[start + len(own) :], 1)}


def load_data(saved: dict[str, bytes] | bytes, model: Any) -> Any:
    """The ``MjData`` ``data_state`` saved (``saved``), rebuilt around ``model``'s pickled
    bytes (the restoring env's model: the same task's, its small arrays already restored);
    ``bytes``: a whole pickled ``MjData`` (checkpoints made before ``data_state``)."""
    import mujoco

    if isinstance(saved, bytes):
        return pickle.loads(saved)
    if "pickle" in saved:
        return pickle.loads(saved["pickle"])
    data = mujoco.MjData.__new__(mujoco.MjData)
    data.__setstate__(saved["before"] + model.__getstate__() + zlib.decompress(saved["after"]))
    return data


def capture(env: gym.Env) -> dict[str, Any]:
    """``env``'s state (an unwrapped env): its plain attributes and, per simulation, the
    ``MjData`` (``data_state``), the model's parameters (``model_fields``) and the simulating env's
    plain attributes."""
    sims: dict[str, Any] = {}
    seen: list[Any] = []
    for name, sim in simulations(env).items():
        shared = any(sim.data is data for data in seen)  # Kitchen's own are its robot's
        seen.append(sim.data)
        sims[name] = {
            "data": None if shared else data_state(sim.data, sim.model),
            "model": {} if shared else model_fields(sim.model),
            # a held env's own (its generator too: Kitchen's robot draws observation noise)
            "attributes": _plain_attributes(sim) if name else {},
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
        set_model_fields(sim.model, saved["model"])
        if saved["data"] is not None:
            mujoco.mj_copyData(sim.data, sim.model, load_data(saved["data"], sim.model))
        _set_attributes(sim, saved["attributes"])
    _set_attributes(env, state["attributes"])


def _set_attributes(owner: Any, attributes: dict[str, Any]) -> None:
    for name, value in copy.deepcopy(attributes).items():
        setattr(owner, name, value)
