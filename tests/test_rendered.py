"""Rendered observations of MuJoCo tasks (envs/pixels.py): camera images, frame stacks,
state + pixels dicts, the frame-storing buffer on them, exact resume and refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlcore.buffers import ReplayBuffer
from rlcore.envs.make import (
    final_next_obs,
    get_vec_env_state,
    make_vec_env,
    set_states,
    set_vec_env_state,
)
from rlcore.envs.native import batch_available
from rlcore.observations import ObsSpec, frame_stack_of


def roll(env, steps: int, seed: int) -> list[tuple]:
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    out = []
    for _ in range(steps):
        action = rng.uniform(-1, 1, env.action_space.shape).astype(np.float32)
        next_obs, reward, terminated, truncated, info = env.step(action)
        out.append((obs, action, reward, final_next_obs(next_obs, info), terminated, truncated))
        obs = next_obs
    return out


def roll_on(env, steps: int, seed: int) -> list[tuple]:
    """``steps`` seeded random steps from where ``env`` is."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        action = rng.uniform(-1, 1, env.action_space.shape).astype(np.float32)
        next_obs, reward, terminated, truncated, info = env.step(action)
        out.append((next_obs, reward, final_next_obs(next_obs, info), terminated, truncated,
                    truncated))  # fmt: skip
    return out


def assert_same(ours: list[tuple], theirs: list[tuple]) -> None:
    assert len(ours) == len(theirs)
    for ours_step, theirs_step in zip(ours, theirs):
        for mine, want in zip(ours_step, theirs_step):
            if isinstance(want, dict):
                assert set(mine) == set(want)
                for name in want:
                    np.testing.assert_array_equal(mine[name], want[name])
            else:
                np.testing.assert_array_equal(mine, want)


def test_pixels_are_stacked_camera_images() -> None:
    env = make_vec_env("Hopper-v5", 2, seed=0, obs="pixels", frame_stack=3, image_size=48)
    assert env.single_observation_space.shape == (9, 48, 48)
    assert env.single_observation_space.dtype == np.uint8 and frame_stack_of(env) == 3
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs[:, 0:3], obs[:, 6:9])  # a new episode repeats its image
    assert obs.std() > 10  # a picture, not a blank
    trace = roll(env, 4, 0)
    for before, _, _, after, *_ in trace:
        np.testing.assert_array_equal(after[:, :6], before[:, 3:])  # one new image a step
    assert not np.array_equal(trace[-1][3][:, 6:], trace[0][0][:, 6:])  # the body moved
    again = make_vec_env("Hopper-v5", 2, seed=0, obs="pixels", frame_stack=3, image_size=48)
    np.testing.assert_array_equal(roll(again, 4, 0)[-1][3], trace[-1][3])  # deterministic


def test_state_and_pixels_is_a_dict_of_the_task_state_and_the_image() -> None:
    env = make_vec_env("Hopper-v5", 1, seed=3, obs="state+pixels", frame_stack=2, image_size=32)
    plain = make_vec_env("Hopper-v5", 1, seed=3, backend="sync")
    spec = ObsSpec.from_space(env.single_observation_space, frame_stack_of(env))
    assert spec.names == ("pixels", "state") and spec.part("pixels").frame_stack == 2
    for (parts, *_), (state, *_) in zip(roll(env, 5, 3), roll(plain, 5, 3)):
        np.testing.assert_allclose(parts["state"], state, rtol=1e-6)
        assert parts["pixels"].shape == (1, 6, 32, 32)


def test_robot_tasks_render_and_a_goal_task_keeps_its_parts() -> None:
    """PandaLift through MuJoCo's free camera (its model has no track camera); PandaPush
    with state+pixels keeps its goal dict and gains the image (what HER relabels stays)."""
    lift = make_vec_env("PandaLift", 1, seed=0, obs="pixels", frame_stack=2, image_size=32)
    obs, _ = lift.reset(seed=0)
    assert obs.shape == (1, 6, 32, 32) and obs.std() > 10
    push = make_vec_env("PandaPush", 1, seed=0, obs="state+pixels", image_size=32)
    plain = make_vec_env("PandaPush", 1, seed=0, backend="sync")
    parts, _ = push.reset(seed=0)
    goals, _ = plain.reset(seed=0)
    spec = ObsSpec.from_space(push.single_observation_space, frame_stack_of(push))
    assert spec.names == ("observation", "achieved_goal", "desired_goal", "pixels")
    for name in ("observation", "achieved_goal", "desired_goal"):
        np.testing.assert_array_equal(parts[name], goals[name])


@pytest.mark.parametrize("backend", ["sync", "native"])
def test_goal_markers_show_in_an_image_alone_not_beside_the_goal_vector(backend: str) -> None:
    """PandaReach's reset draws only the goal, so two envs reset from seeds 0 and 1 differ
    by their goal alone: beside the goal vector (state+pixels) their images are equal (the
    markers are left out; HER's relabelled desired_goal is then the only goal the
    observation holds), alone (pixels) they differ by the marker, and so do the
    evaluation videos (``render``)."""
    if backend == "native" and not batch_available():
        pytest.skip("mujoco.batch is not available")
    options = {"image_size": 48, "frame_stack": 1, "backend": backend}
    beside, _ = make_vec_env("PandaReach", 2, obs="state+pixels", **options).reset(seed=0)
    alone, _ = make_vec_env("PandaReach", 2, obs="pixels", **options).reset(seed=0)
    assert not np.array_equal(*beside["desired_goal"])
    np.testing.assert_array_equal(beside["pixels"][0], beside["pixels"][1])
    for i in range(2):  # each alone image is the beside one but for its marker's pixels
        differs = (alone[i] != beside["pixels"][i]).any(axis=0)
        assert 0 < differs.sum() < 0.01 * differs.size
    assert not np.array_equal(alone[0], alone[1])
    from rlcore.envs.robots.env import PandaEnv

    frames = []
    for seed in range(2):
        video = PandaEnv("PandaReach", render_mode="rgb_array", width=96, height=96)
        video.reset(seed=seed)
        frames.append(video.render())
        video.close()
    assert not np.array_equal(*frames)


@pytest.mark.parametrize("ending", ["close", "drop"])
def test_ending_one_pixel_env_leaves_the_others_images(ending: str) -> None:
    """Two rendering envs in one process (training and evaluation): closing or dropping
    one must not free the other's framebuffers (they rendered black before the fix)."""
    import gc

    first = make_vec_env("PandaReach", 1, seed=0, obs="pixels", image_size=32)
    before, _ = first.reset(seed=0)
    kept = make_vec_env("PandaReach", 1, seed=0, obs="pixels", image_size=32)
    if ending == "close":
        first.close()
    del first
    gc.collect()
    after, _ = kept.reset(seed=0)
    assert before.std() > 10
    np.testing.assert_array_equal(after, before)


def test_the_frame_buffer_stores_rendered_stacks_once() -> None:
    """Episodes of 12 steps through resets: the frame store (its shift checks pass) gives
    the batches a buffer of whole stacks gives."""
    env = make_vec_env("Hopper-v5", 2, seed=1, obs="pixels", frame_stack=3, image_size=32,
                       max_episode_steps=12)  # fmt: skip
    spec = ObsSpec.from_space(env.single_observation_space, frame_stack_of(env))
    plain = ReplayBuffer(64, spec, (3,), 2, seed=2)
    frames = ReplayBuffer(64, spec, (3,), 2, seed=2, frames=True, frame_margin=0.5)
    for step in roll(env, 40, 1):
        for buffer in (plain, frames):
            buffer.add(*step)
    a, b = frames.sample(32), plain.sample(32)
    torch.testing.assert_close(a.obs, b.obs, rtol=0, atol=0)
    torch.testing.assert_close(a.next_obs, b.next_obs, rtol=0, atol=0)


def test_a_restored_env_continues_with_the_same_images() -> None:
    env = make_vec_env("Hopper-v5", 1, seed=4, obs="pixels", frame_stack=3, image_size=32)
    roll(env, 3, 4)
    state = get_vec_env_state(env)
    action = np.full((1, 3), 0.5, np.float32)
    expected = [env.step(action)[0] for _ in range(3)]
    other = make_vec_env("Hopper-v5", 1, seed=9, obs="pixels", frame_stack=3, image_size=32)
    other.reset(seed=9)
    set_vec_env_state(other, state)
    for want in expected:
        np.testing.assert_array_equal(other.step(action)[0], want)


@pytest.mark.parametrize(("task", "mode"), [("Hopper-v5", "state+pixels"),
                                            ("PandaPush", "state+pixels"), ("PandaLift", "pixels")])
def test_the_native_back_end_renders_what_gymnasiums_does(task: str, mode: str) -> None:
    """Images, stacks, state parts, rewards and the final observations of ended episodes
    (4-step episodes: two ends in 9 steps) equal the sync back end's bit for bit."""
    options = {"obs": mode, "image_size": 24, "frame_stack": 2, "max_episode_steps": 4}
    native = make_vec_env(task, 2, seed=5, backend="native", **options)
    sync = make_vec_env(task, 2, seed=5, backend="sync", **options)
    assert native.single_observation_space == sync.single_observation_space
    assert frame_stack_of(native) == 2
    ours, theirs = roll(native, 9, 5), roll(sync, 9, 5)
    assert_same(ours, theirs)
    assert sum(int(step[5].sum()) for step in ours) == 4
    pixels = ours[-1][0] if mode == "pixels" else ours[-1][0]["pixels"]
    assert pixels.std() > 10 and not np.array_equal(pixels, ours[0][0] if mode == "pixels"
                                                    else ours[0][0]["pixels"])  # fmt: skip


def test_a_restored_native_env_continues_with_the_same_images() -> None:
    """The stacks travel with the simulators (the wrapper's state_dict)."""
    options = {"obs": "pixels", "image_size": 24, "frame_stack": 3, "backend": "native"}
    env = make_vec_env("Hopper-v5", 2, seed=4, **options)
    roll(env, 3, 4)
    state = get_vec_env_state(env)
    action = np.full((2, 3), 0.5, np.float32)
    expected = [env.step(action)[0] for _ in range(3)]
    other = make_vec_env("Hopper-v5", 2, seed=9, **options)
    other.reset(seed=9)
    set_vec_env_state(other, state)
    for want in expected:
        np.testing.assert_array_equal(other.step(action)[0], want)


def random_snapshots(task: str, every: int, episodes: int = 2):
    """S3RL snapshots of a seeded random teacher (state observations, as teachers act)."""
    from rlcore.envs.snapshot import collect_snapshots

    probe = make_vec_env(task, 1)
    space = probe.single_action_space
    probe.close()
    rng = np.random.default_rng(0)
    return collect_snapshots(task, lambda obs: rng.uniform(space.low, space.high, (1, *space.shape)),
                             episodes=episodes, every=every, seed=0, max_episode_steps=30)  # fmt: skip


def snapshot_env(task: str, backend: str, snaps, mode: str, truncate_after: int = 3):
    from rlcore.envs.snapshot import SnapshotReset, SnapshotSettings

    settings = SnapshotSettings(selection="uniform", truncate_after=truncate_after,
                                switch_after=10_000, seed=3)  # fmt: skip
    return make_vec_env(task, 2, seed=5, backend=backend, obs=mode, image_size=24,
                        frame_stack=2, max_episode_steps=30,
                        base_wrappers=[lambda env: SnapshotReset(env, snaps, settings)])  # fmt: skip


def image_of(obs, mode: str) -> np.ndarray:
    return obs if mode == "pixels" else obs["pixels"]


@pytest.mark.parametrize("backend", ["sync", "async", "native"])
@pytest.mark.parametrize(("task", "mode"), [("Hopper-v5", "state+pixels"), ("PandaPush", "pixels")])
def test_a_snapshot_restart_renders_the_restored_state(task: str, mode: str, backend: str) -> None:
    """An S3RL restart on rendered observations hands out a new stack of the camera's view
    of the restored state beside the teacher's state observation: from the teacher's
    first reset state (seed 0), the very images a fresh pixel env shows after reset(seed=0)
    (not the envs' own seed-5 resets), again after each cut 3 steps later; the cut
    episode's final observation keeps its own last images."""
    snaps = random_snapshots(task, every=1000).subset(np.array([0]))  # the reset state
    reference = make_vec_env(task, 1, obs=mode, image_size=24, frame_stack=2, max_episode_steps=30)
    want, _ = reference.reset(seed=0)
    own = make_vec_env(task, 1, obs=mode, image_size=24, frame_stack=2, max_episode_steps=30)
    seed5, _ = own.reset(seed=5)
    assert not np.array_equal(image_of(seed5, mode)[0], image_of(want, mode)[0])
    env = snapshot_env(task, backend, snaps, mode)
    obs, info = env.reset(seed=5)
    assert info["snapshot_start"].all()
    for i in range(2):
        np.testing.assert_array_equal(image_of(obs, mode)[i], image_of(want, mode)[0])
        if mode == "state+pixels":
            np.testing.assert_array_equal(obs["state"][i], snaps.obs[0].astype(np.float32))
    action = np.full((2, *env.single_action_space.shape), 0.5, np.float32)
    for _ in range(2):
        last = image_of(env.step(action)[0], mode).copy()
    obs, _, terminated, truncated, info = env.step(action)
    assert (truncated & ~terminated).all() and info["snapshot_start"].all()
    for i in range(2):
        np.testing.assert_array_equal(image_of(obs, mode)[i], image_of(want, mode)[0])
        final = image_of(info["final_obs"][i], mode)
        np.testing.assert_array_equal(final[:3], last[i][3:])  # its stack moved on a frame
        assert not np.array_equal(final, image_of(want, mode)[0])
    for made in (env, reference, own):
        made.close()


@pytest.mark.parametrize(("task", "mode"), [("Hopper-v5", "state+pixels"), ("PandaPush", "pixels")])
def test_native_snapshot_resets_render_as_gymnasiums_and_resume_exactly(task: str, mode: str) -> None:
    """Through snapshot restarts from states along a teacher's episodes (every 5 steps),
    cuts and a snapshot set by hand (``set_states``), the native back end's images, state
    parts, rewards and ends equal the sync back end's bit for bit; a state saved mid-run
    continues with the same images."""
    if not batch_available():
        pytest.skip("MuJoCo without mujoco.batch")
    snaps = random_snapshots(task, every=5)
    runs = {}
    for backend in ("sync", "native"):
        env = snapshot_env(task, backend, snaps, mode, truncate_after=4)
        steps = roll(env, 14, 1)
        saved = get_vec_env_state(env)
        after = roll_on(env, 6, 2)
        set_states(env, [snaps.state(3)], [1])  # a snapshot set by hand: a new stack too
        after += roll_on(env, 2, 4)
        again = snapshot_env(task, backend, snaps, mode, truncate_after=4)
        again.reset(seed=9)
        set_vec_env_state(again, saved)
        assert_same(roll_on(again, 6, 2), after[:6])
        runs[backend] = steps + after
        assert sum(int(step[5].sum()) for step in runs[backend]) >= 6  # cut and restarted
        env.close()
        again.close()
    assert_same(runs["native"], runs["sync"])


def test_a_teacher_that_observed_pixels_is_refused(monkeypatch) -> None:
    """Snapshots are rolled out on state observations: a teacher trained on images is
    refused before its rollouts (its policy cannot read them)."""
    from rlcore import teacher
    from rlcore.envs.snapshot import SnapshotMismatchError

    monkeypatch.setattr(teacher, "teacher_from_checkpoint",
                        lambda path: (None, None, {"name": "Hopper", "obs": "pixels"}))  # fmt: skip
    with pytest.raises(SnapshotMismatchError, match="observed env.obs=pixels: snapshots are"):
        teacher.load_or_collect("run", "Hopper", {}, None, 1, 10, 0)


def test_rendering_refusals_name_the_fix() -> None:
    with pytest.raises(ValueError, match="set env.backend=sync or native"):
        make_vec_env("Hopper-v5", 1, obs="pixels", backend="mjx")
    with pytest.raises(ValueError, match="camera 'top' is not in the model"):
        make_vec_env("Hopper-v5", 1, obs="pixels", camera="top")
    with pytest.raises(ValueError, match="renders MuJoCo tasks; CartPoleEnv is not one"):
        make_vec_env("CartPole-v1", 1, obs="pixels")
    with pytest.raises(ValueError, match="env.obs=depth: one of state, pixels"):
        make_vec_env("Hopper-v5", 1, obs="depth")
    for obs in ("pixels", "state+pixels"):  # an image flattened into an MLP's float input
        with pytest.raises(ValueError, match="would flatten the images .* drop env.flatten_obs"):
            make_vec_env("PandaReach-v1", 1, obs=obs, flatten_obs=True)


def test_ppo_learns_from_rendered_hopper_from_the_command_line(tmp_path) -> None:
    """``algo=ppo env=Hopper env.obs=pixels algo.encoder=drq``: a short run, resumed, its
    policy evaluated on the rendered task."""
    from rlcore.evaluate import main as evaluate
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    args = ["algo=ppo", "env=Hopper", *FAST, "env.obs=pixels", "env.frame_stack=3",
            "env.image_size=32", "algo.encoder=drq", "algo.normalize_obs=false",
            "algo.hidden=[32]", "env.num_envs=2", "algo.rollout_steps=16",
            "algo.num_minibatches=2", "eval_every=64", "eval_episodes=1", "eval_envs=1",
            "env.max_episode_steps=20"]  # fmt: skip
    from rlcore.checkpoint import load_checkpoint
    from rlcore.cli import resumed_config

    train(make_config(*args, "total_steps=64"), tmp_path / "run")
    overrides = [f"resume={tmp_path / 'run'}", "total_steps=96"]
    train(resumed_config(make_config(*args, *overrides), overrides), tmp_path / "run")
    assert load_checkpoint(tmp_path / "run")["loop"]["counters"]["step"] == 96
    assert evaluate([str(tmp_path / "run"), "episodes=1"]) == 0
