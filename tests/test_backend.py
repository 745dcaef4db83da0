"""The back-end interface (``rlcore.envs.backend.SimulatorBackend``): every back end
``make_vec_env`` builds here satisfies it, and its states and restarts of chosen envs
continue those envs exactly while the others run on untouched."""

import ast
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.envs import native
from rlcore.envs.backend import SimulatorBackend, backend_of
from rlcore.envs.make import get_vec_env_state, make_vec_env, set_vec_env_state
from rlcore.envs.mjx import mjx_available

ENVS_DIR = Path(__file__).resolve().parents[1] / "envs"
N = 3
CHOSEN = [0, 2]  # the envs whose states are saved and restored; env 1 runs on

BACKENDS = [
    "sync",
    "async",
    pytest.param(
        "native",
        marks=pytest.mark.skipif(not native.batch_available(), reason="needs mujoco.batch"),
    ),
    pytest.param(
        "mjx", marks=pytest.mark.skipif(not mjx_available(), reason="needs JAX and MuJoCo MJX")
    ),
]


def _host(values) -> np.ndarray:
    return values.cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)


def _actions(seed: int, steps: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, (N, 3)).astype(np.float32) for _ in range(steps)]


def _run(env, actions) -> list[tuple[np.ndarray, np.ndarray]]:
    """(observation, reward) of every step, on the host."""
    out = []
    for action in actions:
        obs, reward, *_ = env.step(action)
        out.append((_host(obs).copy(), _host(reward).copy()))
    return out


def _pair(backend: str):
    """Two identical envs, reset with the same seed and stepped with the same actions."""
    envs = [make_vec_env("hopper", N, seed=0, backend=backend) for _ in range(2)]
    for env in envs:
        env.reset(seed=0)
        _run(env, _actions(1, 3))
    return envs


def _check_set_states(backend: str) -> None:
    """set_states on chosen envs replays their trajectory; the other env runs on."""
    env, control = _pair(backend)
    base = backend_of(env)
    assert isinstance(base, SimulatorBackend)
    saved = base.get_states(CHOSEN)
    assert len(saved) == len(CHOSEN)
    replay = _actions(2, 4)
    original = _run(env, replay)
    assert [o[0].tolist() for o in _run(control, replay)] == [o[0].tolist() for o in original]
    detour = _actions(3, 3)  # both envs leave the saved states behind
    _run(env, detour)
    _run(control, detour)
    base.set_states(saved, CHOSEN)
    again, untouched = _run(env, replay), _run(control, replay)
    for (obs, reward), (obs0, reward0), (obs1, reward1) in zip(again, original, untouched):
        np.testing.assert_array_equal(obs[CHOSEN], obs0[CHOSEN])
        np.testing.assert_array_equal(reward[CHOSEN], reward0[CHOSEN])
        np.testing.assert_array_equal(obs[1], obs1[1])  # env 1 did not notice
        np.testing.assert_array_equal(reward[1], reward1[1])
    assert not np.array_equal(again[0][0][CHOSEN], untouched[0][0][CHOSEN])  # it mattered
    env.close()
    control.close()


def _check_restart(backend: str) -> None:
    """restart from chosen states replays them; a partial reset restarts only its envs."""
    env, control = _pair(backend)
    base = backend_of(env)
    saved = base.get_states(CHOSEN)
    saved_obs = _host(saved[0].get("obs", np.zeros(0)))  # mjx keeps none: its own obs
    replay = _actions(2, 4)
    original = _run(env, replay)
    _run(control, replay)
    obs, *_ = env.step(_actions(3, 1)[0])
    control.step(_actions(3, 1)[0])
    mask = np.array([True, False, True])
    rows = np.array([0, 0, 1])
    if base.device is not None:
        mask, rows = (
            torch.as_tensor(mask, device=base.device),
            torch.as_tensor(rows, device=base.device),
        )
    restarted, _ = base.restart(mask, obs, base.state_table(saved), rows)
    np.testing.assert_array_equal(_host(restarted)[1], _host(obs)[1])
    if saved_obs.size:  # a host back end hands out the state's observation
        np.testing.assert_array_equal(_host(restarted)[0], saved_obs)
    again, untouched = _run(env, replay), _run(control, replay)
    for (obs_a, reward), (obs0, reward0), (obs1, _) in zip(again, original, untouched):
        np.testing.assert_array_equal(obs_a[CHOSEN], obs0[CHOSEN])
        np.testing.assert_array_equal(reward[CHOSEN], reward0[CHOSEN])
        np.testing.assert_array_equal(obs_a[1], obs1[1])

    # partial reset: the masked envs start new episodes, the others keep theirs
    obs, *_ = env.step(_actions(4, 1)[0])
    before = [s["elapsed_steps"] for s in base.get_states()]
    assert min(before) > 0
    fresh, _ = base.restart(mask, obs)
    after = [s["elapsed_steps"] for s in base.get_states()]
    assert after == [0, before[1], 0]
    np.testing.assert_array_equal(_host(fresh)[1], _host(obs)[1])
    assert not np.array_equal(_host(fresh)[0], _host(obs)[0])
    env.close()
    control.close()


@pytest.mark.parametrize("backend", BACKENDS[:3])
def test_env_states_of_older_checkpoints_still_load(backend):
    """Checkpoints written before states carried their observation restore exactly; one
    of another env count is refused clearly."""
    env, control = _pair(backend)
    control.close()
    state = get_vec_env_state(env)
    older = {**state, "envs": [{k: v for k, v in s.items() if k != "obs"} for s in state["envs"]]}
    replay = _actions(2, 4)
    original = _run(env, replay)
    set_vec_env_state(env, older)
    for (obs, reward), (obs0, reward0) in zip(_run(env, replay), original):
        np.testing.assert_array_equal(obs, obs0)
        np.testing.assert_array_equal(reward, reward0)
    fewer = make_vec_env("hopper", N - 1, backend=backend)
    fewer.reset(seed=0)
    with pytest.raises(ValueError, match=f"saved state has {N} envs, this env has {N - 1}"):
        set_vec_env_state(fewer, older)
    env.close()
    fewer.close()


def test_set_states_checks_lengths_and_ids():
    env = make_vec_env("hopper", 2, backend="sync")
    env.reset(seed=0)
    base = backend_of(env)
    with pytest.raises(ValueError, match="saved state has 1 envs"):
        base.set_states(base.get_states([0]))
    with pytest.raises(ValueError, match="out of range"):
        base.set_states(base.get_states([0]), [2])
    env.close()


def test_a_plain_gymnasium_vector_env_is_not_a_back_end():
    plain = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")])
    assert not isinstance(plain, SimulatorBackend)
    with pytest.raises(TypeError, match="not an rlcore simulator back end"):
        backend_of(plain)
    plain.close()


# the names back ends used to be told apart by, and gymnasium's private async members
BACKEND_NAMES = {
    "rlcore_get_states", "rlcore_set_states", "restart", "device_states", "envs", "model",
    "data", "get_states", "set_states", "state_table", "device", "parent_pipes",
}  # fmt: skip
PRIVATE_GYMNASIUM = {"parent_pipes", "_assert_is_running", "_raise_if_errors", "_state"}


def test_envs_have_no_backend_dispatch_by_name_or_private_gymnasium_members():
    problems = []
    for path in sorted(ENVS_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.name}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE_GYMNASIUM:
                problems.append(f"{where} uses gymnasium's private {node.attr}")
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id in ("hasattr", "getattr") and len(node.args) >= 2:
                name = node.args[1]
                if isinstance(name, ast.Constant) and name.value in BACKEND_NAMES:
                    problems.append(f"{where} {node.func.id}(..., {name.value!r})")
            if node.func.id == "isinstance" and len(node.args) == 2:
                text = ast.unparse(node.args[1])
                if "SyncVectorEnv" in text or "AsyncVectorEnv" in text:
                    problems.append(f"{where} dispatches on {text}")
    assert not problems, problems


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_round_trips(backend):
    """States and restarts of chosen envs, on every back end ``make_vec_env`` builds."""
    _check_set_states(backend)
    _check_restart(backend)


def test_async_workers_start_without_fork_once_jax_runs():
    """JAX's threads are running (as after an mjx run in the same process): the async back
    end starts, resets and steps its workers without any warning about ``os.fork``, whose
    child of a multi-threaded process may deadlock."""
    jnp = pytest.importorskip("jax.numpy")
    jnp.ones(3).sum().block_until_ready()  # JAX's back end and its threads are up
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = make_vec_env("hopper", 2, seed=0, backend="async")
        try:
            obs, _ = env.reset(seed=0)
            for action in _actions(1, 3):
                obs, *_ = env.step(action[:2])
        finally:
            env.close()
    assert obs.shape == (2, 11) and np.isfinite(obs).all()
    forks = [str(w.message) for w in caught if "fork" in str(w.message)]
    assert not forks, forks
