"""The MJX back end on JAX's CPU device (small N): agreement with the native back end,
autoreset and episode statistics on device, DLPack zero-copy hand-off, state capture, and
PPO through ``make_vec_env(backend="mjx")``.

Compiling a task's step takes tens of seconds on CPU, so every task builds one MJX env
(``pair`` fixture, 3 envs) that all its checks share; JAX's compiled functions are cached
on disk (``rlcore.envs.mjx.enable_compilation_cache``) and PPO reuses Hopper's.
"""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("jax")
pytest.importorskip("mujoco.mjx")

from rlcore.checkpoint import load_checkpoint  # noqa: E402
from rlcore.envs.make import RunningMeanStd, final_next_obs, make_vec_env  # noqa: E402
from rlcore.envs.mjx import (  # noqa: E402
    MjxVectorEnv,
    cpu_lapack_may_deadlock,
    host_cpu_tag,
    to_torch,
)
from rlcore.envs.native import TASKS, NativeVectorEnv  # noqa: E402
from rlcore.train import train  # noqa: E402
from tests.conftest import FAST, make_config  # noqa: E402

N = 3
# In the air, so no ground contact during the rollout (see test_rollout_matches_native):
# (qpos index of the height, lifted height, healthy range that allows it)
LIFT = {"Ant-v5": (2, 3.0, (0.2, 10.0)), "Humanoid-v5": (2, 4.0, (1.0, 10.0))}


def _tolerance(env_id: str) -> float:
    # Humanoid runs MJX's Newton solver where MuJoCo's XML asks for PGS (envs/mjx.py):
    # the same constraint solution to solver tolerance, not to float32 rounding
    return 2e-3 if env_id == "Humanoid-v5" else 2e-4


def _actions(env: MjxVectorEnv, steps: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    space = env.single_action_space
    return (0.5 * rng.uniform(space.low, space.high, (steps, N, *space.shape))).astype(np.float32)


def _close(mjx_value: torch.Tensor, native_value: np.ndarray, tol: float) -> None:
    scale = 1.0 + np.abs(native_value)
    err = np.abs(mjx_value.numpy().astype(np.float64) - native_value) / scale
    assert err.max() <= tol, f"max relative error {err.max():.2e} > {tol:.0e}"


@pytest.fixture(scope="module", params=list(TASKS))
def pair(request):
    """(mjx env, native env) of one task, for the rollout: lifted tasks fly."""
    env_id = request.param
    kwargs = {"healthy_z_range": LIFT[env_id][2]} if env_id in LIFT else {}
    mjx_env = MjxVectorEnv(env_id, N, **kwargs)
    native = NativeVectorEnv(env_id, N, num_threads=1, **kwargs)
    yield env_id, mjx_env, native
    native.close()
    mjx_env.close()


def _start_together(
    env_id: str, mjx_env: MjxVectorEnv, native: NativeVectorEnv, lift: bool
) -> None:
    """Both envs in the native env's reset states (lifted into the air with ``lift``)."""
    native.reset(seed=0)
    mjx_env.reset(seed=0)
    states = native.get_states()
    if lift:
        index, height, _ = LIFT[env_id]
        for state in states:
            state["native_state"] = state["native_state"].copy()
            state["native_state"][1 + index] = height  # [time, qpos...]
        native.set_states(states)
        native.batch.forward(np.arange(N))
        states = native.get_states()
    mjx_env.set_states(states)


def test_first_step_matches_native(pair):
    """From the same reset states, one step gives the same observation, reward and flags
    (float32 tolerance) on every task, contacts included."""
    env_id, mjx_env, native = pair
    _start_together(env_id, mjx_env, native, lift=False)
    action = _actions(mjx_env, 1)[0]
    obs, reward, terminated, truncated, info = mjx_env.step(torch.as_tensor(action))
    n_obs, n_reward, n_terminated, n_truncated, _ = native.step(action)
    assert obs.dtype == torch.float32 and obs.shape == (N, native.single_observation_space.shape[0])
    _close(obs, n_obs, _tolerance(env_id))
    _close(reward, n_reward, _tolerance(env_id))
    assert terminated.numpy().tolist() == n_terminated.tolist()
    assert truncated.numpy().tolist() == n_truncated.tolist()


def test_rollout_matches_native(pair):
    """Ten steps of random actions stay together. Ant and Humanoid fly (lifted, so their
    legs never touch the ground): MJX 3.17's pyramidal-cone contact forces differ from
    MuJoCo 4.0's at a new contact (measured: qacc off by ~50 where elliptic cones agree
    to 1e-3), after which the trajectories separate."""
    env_id, mjx_env, native = pair
    _start_together(env_id, mjx_env, native, lift=env_id in LIFT)
    running = np.ones(N, bool)  # after an episode end the starts differ (JAX's reset noise)
    for action in _actions(mjx_env, 10, seed=1):
        obs, reward, terminated, truncated, info = mjx_env.step(torch.as_tensor(action))
        n_obs, n_reward, n_terminated, n_truncated, n_info = native.step(action)
        rows = np.flatnonzero(running)
        tol = 10 * _tolerance(env_id)
        _close(final_next_obs(obs, info)[rows], _native_next(n_obs, n_info)[rows], tol)
        _close(reward[rows], n_reward[rows], tol)
        assert terminated.numpy()[rows].tolist() == n_terminated[rows].tolist()
        running &= ~(n_terminated | n_truncated)
    assert running.any() or env_id == "InvertedPendulum-v5"


def _native_next(obs: np.ndarray, info: dict) -> np.ndarray:
    out = obs.copy()
    if "final_obs" in info:
        for i in np.flatnonzero(info["_final_obs"]):
            out[i] = info["final_obs"][i]
    return out


@pytest.fixture(scope="module")
def hopper():
    env = MjxVectorEnv("Hopper-v5", N)
    yield env
    env.close()


def test_autoreset_and_episode_statistics_on_device(hopper):
    """A terminated env (hopper fallen) and a truncated one (time limit) restart in the
    same step; final observations, done mask and episode statistics come as tensors."""
    obs, _ = hopper.reset(seed=3)
    states = hopper.get_states()
    states[0]["integration"] = states[0]["integration"].copy()
    states[0]["integration"][1 + 1] = 0.3  # z below the healthy 0.7
    states[1]["elapsed_steps"] = hopper.max_episode_steps - 1
    states[1]["episode_return"], states[1]["episode_length"] = 10.0, hopper.max_episode_steps - 1
    hopper.set_states(states)
    action = torch.zeros((N, 3))
    obs, reward, terminated, truncated, info = hopper.step(action)
    assert terminated.tolist() == [True, False, False]
    assert truncated.tolist() == [False, True, False]
    assert info["_final_obs"].tolist() == [True, True, False]
    # the final observation of env 0 is the fallen one; the returned one is a fresh start
    assert float(info["final_obs"][0, 0]) < 0.7  # unhealthy height
    assert abs(float(obs[0, 0]) - 1.25) < 0.01 and abs(float(obs[1, 0]) - 1.25) < 0.01
    ep_return, ep_length = info["episode_return"], info["episode_length"]
    assert ep_length[0] == 1 and ep_length[1] == hopper.max_episode_steps
    assert torch.isclose(ep_return[1], torch.tensor(10.0) + reward[1])
    assert torch.isnan(ep_return[2]) and torch.isnan(ep_length[2])
    assert [s["elapsed_steps"] for s in hopper.get_states()][:2] == [0, 0]


def test_dlpack_hand_off_is_zero_copy(hopper):
    """Step outputs are the JAX buffers themselves; torch actions reach JAX uncopied."""
    import jax
    import jax.numpy as jnp

    hopper.reset(seed=0)
    obs, reward, *_ = hopper.step(torch.zeros((N, 3)))
    assert obs.data_ptr() == hopper.last_outputs[0].unsafe_buffer_pointer()
    assert reward.data_ptr() == hopper.last_outputs[1].unsafe_buffer_pointer()
    array = jnp.arange(12.0, dtype=jnp.float32)
    assert to_torch(array).data_ptr() == array.unsafe_buffer_pointer()
    tensor = torch.zeros((N, 3))
    assert hopper._jax_actions(tensor).unsafe_buffer_pointer() == tensor.data_ptr()
    assert isinstance(hopper._jax_actions(tensor), jax.Array)


def test_states_restore_exactly_and_partial_reset(hopper):
    """set_states(get_states()) continues bit for bit; reset_mask restarts only its envs."""
    hopper.reset(seed=1)
    actions = torch.as_tensor(_actions(hopper, 6, seed=2))
    for action in actions[:3]:
        hopper.step(action)
    saved = hopper.get_states()
    first = [hopper.step(a)[0].clone() for a in actions[3:]]
    hopper.set_states(saved)
    again = [hopper.step(a)[0].clone() for a in actions[3:]]
    for a, b in zip(first, again):
        assert torch.equal(a, b)
    before = hopper.step(actions[0])[0].clone()
    obs, _ = hopper.reset(options={"reset_mask": np.array([False, True, False])})
    assert torch.equal(obs[0], before[0]) and torch.equal(obs[2], before[2])
    assert abs(float(obs[1, 0]) - 1.25) < 0.01
    with pytest.raises(ValueError, match="reset_mask"):
        hopper.reset(options={"reset_mask": np.zeros(N, bool)})
    with pytest.raises(ValueError, match="another model"):
        hopper.set_states([{"integration": np.zeros(3), "elapsed_steps": 0}], [0])


def test_jaxlib_releases_whose_cpu_lapack_deadlocks_are_warned_about(monkeypatch):
    deadlocking = ["0.10.0", "0.10.2", "0.11.0", "0.11.0.dev20260101"]
    fine = ["0.4.30", "0.9.2", "0.11.1", "0.11.2", "1.0", "unknown"]
    assert all(cpu_lapack_may_deadlock(version) for version in deadlocking)
    assert not any(cpu_lapack_may_deadlock(version) for version in fine)
    import rlcore.envs.mjx

    installed = rlcore.envs.mjx.importlib.metadata.version
    for version, warns in (("0.10.2", True), ("0.9.2", False)):
        monkeypatch.setattr(
            rlcore.envs.mjx.importlib.metadata,
            "version",
            lambda name, v=version: v if name == "jaxlib" else installed(name),
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            MjxVectorEnv("Hopper-v5", 1).close()
        deadlock_warnings = [w for w in caught if "deadlock" in str(w.message)]
        assert bool(deadlock_warnings) == warns, version


def test_compilation_cache_folder_is_per_cpu_model_and_flags():
    two_cores = (
        "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: avx2 avx512f\n\n"
        "processor\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: avx2 avx512f\n"
    )
    tag = host_cpu_tag(two_cores)
    assert len(tag) == 12 and tag == host_cpu_tag("model name: AMD EPYC\nflags: avx512f avx2")
    assert tag != host_cpu_tag("model name: AMD EPYC\nflags: avx2")
    assert tag != host_cpu_tag("model name: Intel Xeon\nflags: avx2 avx512f")
    assert host_cpu_tag() == host_cpu_tag()  # this host's, from /proc/cpuinfo


def test_running_statistics_of_tensors_equal_numpy():
    rng = np.random.default_rng(0)
    batches = [rng.normal(size=(5, 3)) for _ in range(3)]
    as_numpy, as_torch = RunningMeanStd((3,)), RunningMeanStd((3,))
    for batch in batches:
        as_numpy.update(batch)
        as_torch.update(torch.as_tensor(batch, dtype=torch.float32))
    np.testing.assert_allclose(as_torch.state_dict()["mean"], as_numpy.mean, rtol=1e-6)
    np.testing.assert_allclose(as_torch.state_dict()["var"], as_numpy.var, rtol=1e-5)


def test_make_vec_env_mjx_normalises_on_device_and_refuses_what_it_lacks():
    env = make_vec_env(
        "hopper", N, seed=0, backend="mjx", normalize_obs=True, normalize_reward=True
    )
    obs, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(torch.zeros((N, 3)))
    assert isinstance(obs, torch.Tensor) and isinstance(reward, torch.Tensor)
    assert obs.abs().max() <= 10.0 and "episode_return" in info
    with pytest.raises(ValueError, match="mjx"):
        make_vec_env("hopper", N, backend="mjx", flatten_obs=True)
    with pytest.raises(ValueError, match="does not support"):
        make_vec_env("Pusher-v5", N, backend="mjx")


def test_action_chunks_and_observation_history_run_on_mjx(hopper):
    """A chunk of 2 is its two env steps, and observations stack, on the device."""
    env = make_vec_env("hopper", N, backend="mjx", action_chunk=2, obs_history=2)
    obs, _ = env.reset(seed=7)
    plain, _ = hopper.reset(seed=7)
    assert torch.equal(obs, torch.cat([plain, plain], 1))
    chunks = torch.as_tensor(_actions(hopper, 2, seed=3)).transpose(0, 1).contiguous()
    obs, reward, terminated, truncated, info = env.step(chunks)
    first, first_reward, *_ = (x.clone() for x in hopper.step(chunks[:, 0])[:2])
    second, second_reward, *_ = hopper.step(chunks[:, 1])
    assert isinstance(obs, torch.Tensor) and isinstance(info["chunk_steps"], torch.Tensor)
    assert torch.equal(obs, torch.cat([first, second], 1))
    torch.testing.assert_close(reward, first_reward + second_reward)
    assert info["chunk_steps"].tolist() == [2] * N and not (terminated | truncated).any()
    env.close()


def test_ppo_trains_on_mjx(tmp_path):
    """A few PPO updates on 3 MJX envs, end to end through the command-line config."""
    cfg = make_config(
        "algo=ppo", "env=Hopper", "env.backend=mjx", f"env.num_envs={N}", "total_steps=96",
        "algo.rollout_steps=16", "algo.num_minibatches=2", "algo.update_epochs=2",
        "eval_every=96", *FAST,
    )  # fmt: skip
    summary = train(cfg, tmp_path)
    assert np.isfinite(summary["eval/return"])
    rows = (tmp_path / "train.csv").read_text().splitlines()
    assert len(rows) >= 2 and "train/policy_loss" in rows[0]


def test_dppo_fine_tunes_action_chunks_on_mjx(tmp_path):
    """DPPO steps chunks of 2 on 3 MJX envs (rollouts, updates and evaluation on device
    tensors), from a behaviour-cloning checkpoint of the same head."""
    from dataclasses import asdict

    import gymnasium as gym

    from rlcore.algos.generative_bc import DiffusionBCConfig, GenerativeBC
    from rlcore.checkpoint import FORMAT_VERSION, save_checkpoint
    from rlcore.spaces import describe_action_space

    task = gym.make("Hopper-v5")
    head = {"horizon": 2, "hidden": (32, 32, 32), "time_dim": 8, "denoising_steps": 5}
    bc = GenerativeBC(task.observation_space, task.action_space, DiffusionBCConfig(**head))
    state = {"format": FORMAT_VERSION, "algo": "diffusion_bc",
             "config": {"algo": {**asdict(bc.config), "name": "diffusion_bc"}},
             "spaces": {"obs_shape": [11], **describe_action_space(task.action_space)},
             "agent": bc.state_dict()}  # fmt: skip
    pretrained = save_checkpoint(state, tmp_path / "bc" / "checkpoints" / "latest.pt")
    cfg = make_config(
        "algo=dppo", f"algo.pretrained={pretrained}", "algo.horizon=2", "algo.hidden=[32,32,32]",
        "algo.time_dim=8", "algo.denoising_steps=5", "algo.finetune_steps=3",
        "algo.minibatch_size=12", "algo.critic_hidden=[32,32]", "env=Hopper", "env.backend=mjx",
        f"env.num_envs={N}", "algo.rollout_steps=8", "total_steps=48", "eval_every=48", *FAST,
    )  # fmt: skip
    summary = train(cfg, tmp_path / "dppo")
    assert np.isfinite(summary["eval/return"])
    assert "train/policy_loss" in (tmp_path / "dppo" / "train.csv").read_text()


def test_sac_trains_on_mjx(tmp_path):
    """The off-policy loop takes the device env too (its agent acts on host arrays)."""
    cfg = make_config(
        "algo=sac", "env=Hopper", "env.backend=mjx", f"env.num_envs={N}", "total_steps=90",
        "algo.learning_starts=45", "algo.batch_size=32", "algo.hidden=[32,32]",
        "eval_every=90", "log_every=30", *FAST,
    )  # fmt: skip
    summary = train(cfg, tmp_path)
    assert np.isfinite(summary["eval/return"])
    assert "critic_loss" in (tmp_path / "train.csv").read_text()


@pytest.mark.slow
def test_fast_td3_trains_on_mjx(tmp_path):
    """FastTD3 through the same off-policy loop on the device env: per-env noise told of
    episode ends by device (tensor) masks, 2 updates per vector step."""
    cfg = make_config(
        "algo=fast_td3", "env=Hopper", "env.backend=mjx", f"env.num_envs={N}",
        "total_steps=90", "algo.warmup_vector_steps=15", "algo.batch_size=32",
        "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]", "eval_every=90",
        "log_every=30", "env.max_episode_steps=10", *FAST,
    )  # fmt: skip
    summary = train(cfg, tmp_path)
    assert np.isfinite(summary["eval/return"])
    assert "critic_loss" in (tmp_path / "train.csv").read_text()
    assert load_checkpoint(tmp_path)["loop"]["counters"]["updates"] == 2 * (30 - 15)


def _teacher_snapshots(episodes: int = 2):
    """Snapshots of a fixed linear teacher on gymnasium's (float64) Hopper, labelled with
    the observation's height (short episodes; the student's time limit is its own)."""
    from rlcore.envs.snapshot import collect_snapshots

    weights = np.random.default_rng(0).normal(0, 0.3, (11, 3))
    return collect_snapshots("Hopper", lambda obs: np.tanh(obs @ weights), episodes=episodes,
                             every=5, max_episode_steps=60, value_fn=lambda obs: obs[:, 0])  # fmt: skip


def _near_a_snapshot(obs: torch.Tensor, snaps) -> bool:
    """The observation row is a snapshot's observation (float32 rounding)."""
    return bool(np.abs(snaps.obs - obs.numpy()).max(1).min() < 1e-5)


def test_snapshot_resets_on_mjx_stay_on_device_and_resume_exactly(hopper):
    """S3RL on MJX: every start is a teacher snapshot, episodes started from one are cut
    (truncated) ``truncate_after`` steps in with their own episode statistics, resets are
    ordinary after the switch, and the wrapper's device state resumes exactly."""
    from rlcore.envs.make import get_vec_env_state, set_vec_env_state
    from rlcore.envs.snapshot import SnapshotReset, SnapshotSettings

    snaps = _teacher_snapshots()
    settings = SnapshotSettings(selection="uniform", truncate_after=4, switch_after=6 * N)
    env = make_vec_env("hopper", N, backend="mjx", base_wrappers=[
        lambda e: SnapshotReset(e, snaps, settings)])  # fmt: skip
    wrapper = env  # no statistics wrapper on mjx: the snapshot wrapper is on top
    assert isinstance(wrapper, SnapshotReset) and wrapper.on_device
    obs, info = env.reset(seed=0)
    assert isinstance(info["snapshot_start"], torch.Tensor) and info["snapshot_start"].all()
    assert all(_near_a_snapshot(row, snaps) for row in obs)
    actions = torch.as_tensor(_actions(hopper, 12, seed=4))
    running = torch.zeros(N)  # each env's return since its episode started
    lengths, ends, cuts = torch.zeros(N), 0, 0
    for step, action in enumerate(actions, 1):
        obs, reward, terminated, truncated, info = env.step(action)
        running, lengths = running + reward, lengths + 1
        done = terminated | truncated
        cut = truncated & ~terminated
        assert torch.equal(info["_final_obs"], done)
        torch.testing.assert_close(info["episode_return"][done], running[done])
        assert torch.equal(info["episode_length"][done], lengths[done])
        assert torch.isnan(info["episode_return"][~done]).all()
        if step <= 6:  # before the switch: every new episode starts from a snapshot
            assert torch.equal(info["snapshot_start"], done)
            assert all(_near_a_snapshot(obs[i], snaps) for i in torch.nonzero(done).flatten())
            ends += int(done.sum())
        else:
            assert not info["snapshot_start"].any()
            assert all(abs(float(obs[i, 0]) - 1.25) < 0.01 for i in torch.nonzero(done).flatten())
        if step == 4:  # the first snapshot episodes reach truncate_after
            assert cut.any(), "an episode started from a snapshot must be cut 4 steps in"
        assert torch.equal(lengths[cut], torch.full_like(lengths[cut], 4.0))
        cuts += int(cut.sum())
        running, lengths = running.masked_fill(done, 0.0), lengths.masked_fill(done, 0.0)
    assert cuts >= N and wrapper.metrics()["snapshot/resets"] == N + ends
    assert wrapper.metrics()["snapshot/steps_to_switch"] == 0

    # resume: the state taken mid-run (before the switch) replays the same starts
    again = make_vec_env("hopper", N, backend="mjx", base_wrappers=[
        lambda e: SnapshotReset(e, snaps, settings)])  # fmt: skip
    again.reset(seed=1)
    for action in actions[:2]:
        again.step(action)
    saved = get_vec_env_state(again)
    first = [tuple(x.clone() for x in again.step(a)[:4]) for a in actions[2:8]]
    set_vec_env_state(again, saved)
    second = [tuple(x.clone() for x in again.step(a)[:4]) for a in actions[2:8]]
    for a, b in zip(first, second):
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert any(bool((f[2] | f[3]).any()) for f in first), "no restart was replayed"
    env.close()
    again.close()


def test_s3rl_trains_on_mjx_through_the_config(tmp_path):
    """``snapshot.teacher=`` on an MJX run: PPO starts from the committed expert's
    snapshots and logs the snapshot counters."""
    from tests.test_snapshot import TEACHER

    cfg = make_config(
        "algo=ppo", "env=Hopper", "env.backend=mjx", f"env.num_envs={N}", "total_steps=96",
        "algo.rollout_steps=16", "algo.num_minibatches=2", "algo.update_epochs=1",
        "eval_every=96", f"snapshot.teacher={TEACHER}", "snapshot.episodes=1",
        "snapshot.truncate_after=10", *FAST,
    )  # fmt: skip
    summary = train(cfg, tmp_path)
    assert np.isfinite(summary["eval/return"])
    rows = (tmp_path / "snapshot.csv").read_text().splitlines()
    assert "snapshot/resets" in rows[0] and len(rows) >= 2


needs_warp = pytest.mark.skipif(
    importlib.util.find_spec("warp") is None, reason="env.mjx_impl=warp needs warp-lang"
)


@needs_warp
@pytest.mark.parametrize("env_id", ["Hopper-v5", "Humanoid-v5"])
def test_warp_implementation_matches_native(env_id):
    """MJX's MuJoCo Warp implementation: the first step agrees with the native back end
    (Humanoid's observation holds cfrc_ext, which Warp's forward passes compute); on
    Hopper ten steps agree, a fallen env restarts in the same step and ``restart``
    continues saved states."""
    warp_env = MjxVectorEnv(env_id, N, impl="warp")
    native = NativeVectorEnv(env_id, N, num_threads=1)
    _start_together(env_id, warp_env, native, lift=False)
    steps = 1 if env_id == "Humanoid-v5" else 10
    for action in _actions(warp_env, steps, seed=5):
        obs, reward, terminated, truncated, info = warp_env.step(torch.as_tensor(action))
        n_obs, n_reward, n_terminated, *_ = native.step(action)
        _close(obs, n_obs, 10 * _tolerance(env_id))
        _close(reward, n_reward, 10 * _tolerance(env_id))
        assert terminated.numpy().tolist() == n_terminated.tolist()
    if env_id == "Hopper-v5":
        saved = native.get_states()
        fallen = warp_env.get_states()
        fallen[0]["integration"] = fallen[0]["integration"].copy()
        fallen[0]["integration"][1 + 1] = 0.3  # z below the healthy 0.7
        warp_env.set_states(fallen)
        obs, _, terminated, *_ = warp_env.step(torch.zeros((N, 3)))
        assert terminated.tolist() == [True, False, False] and abs(float(obs[0, 0]) - 1.25) < 0.01
        mask = torch.tensor([True, False, True])
        table, rows = warp_env.state_table(saved), torch.arange(N)
        restored, _ = warp_env.restart(mask, None, table, rows)
        _close(restored[mask], native._obs()[mask.numpy()], 1e-5)  # the native obs of saved
    warp_env.close()
    native.close()
