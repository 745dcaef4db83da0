"""Offline datasets of camera images (``collect obs=state+pixels``): each episode's frames
stored once and read back at the right rows, dict observations sampled as a replay buffer
of the rendered env gives them (so RLPD mixes both, SERL's recipe), refusals that name the
fix, and the pixel RLPD + demonstrations run from the command line."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.buffers import MixedSampler, ReplayBuffer
from rlcore.config import ConfigError
from rlcore.observations import ObsSpec
from rlcore.offline.collect import main as collect_main
from rlcore.offline.datasets import DatasetError, load_dataset
from tests.conftest import FAST, make_config

CAMERA = "local/pandalift/camera-v0"
STATE = "local/pandalift/state-v0"
IMAGE_OPTIONS = ("obs=state+pixels", "image_size=16", "frame_stack=2")


@pytest.fixture(scope="module")
def minari_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("minari")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(root))
        for dataset_id, options in ((CAMERA, IMAGE_OPTIONS), (STATE, ())):
            collect_main(["policy=expert", "env=PandaLift", "steps=150",
                          f"dataset_id={dataset_id}", *options])  # fmt: skip
    return root


@pytest.fixture
def datasets(minari_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(minari_root))
    return minari_root


def _episodes(dataset_id: str) -> list:
    import minari

    return list(minari.load_dataset(dataset_id).iterate_episodes())


def _camera_space() -> gym.spaces.Dict:
    from rlcore.envs.make import make_vec_env

    env = make_vec_env("PandaLift", 1, obs="state+pixels", image_size=16, frame_stack=2)
    try:
        return env.single_observation_space
    finally:
        env.close()


def test_frames_are_stored_once_and_read_back_at_their_rows(datasets: Path) -> None:
    """150 steps of 100-step episodes: 2 episodes (100 + 50 rows), 101 + 51 frames. Row
    t of an episode observes its frame t and next observes frame t + 1; the state columns
    equal a state recording's (the expert reads the state)."""
    dataset, plain = load_dataset(CAMERA), load_dataset(STATE)
    episodes = _episodes(CAMERA)
    assert dataset.image_parts == ("pixels",)
    assert dict(dataset.obs_layout) == {"pixels": (6, 16, 16), "state": (plain.obs_dim,)}
    assert len(dataset) == 150 and dataset.frames["pixels"].shape == (152, 6, 16, 16)
    assert dataset.frames["pixels"].dtype == torch.uint8
    assert torch.equal(dataset.obs, plain.obs) and torch.equal(dataset.action, plain.action)
    assert dataset.frame_index.tolist() == [*range(100), *range(101, 151)]

    rows = torch.tensor([0, 99, 100, 149])
    obs, next_obs = dataset.observations(rows), dataset.observations(rows, next_obs=True)
    assert list(obs) == [name for name, _ in dataset.obs_layout]
    for i, (episode, t) in enumerate([(0, 0), (0, 99), (1, 0), (1, 49)]):
        pixels = episodes[episode].observations["pixels"]
        np.testing.assert_array_equal(obs["pixels"][i].numpy(), pixels[t])
        np.testing.assert_array_equal(next_obs["pixels"][i].numpy(), pixels[t + 1])
        np.testing.assert_array_equal(
            obs["state"][i].numpy(), episodes[episode].observations["state"][t].astype(np.float32)
        )
    batch = dataset.seed(3).sample(32)
    assert batch.obs["pixels"].dtype == torch.uint8 and batch.obs["pixels"].shape == (32, 6, 16, 16)
    assert batch.next_obs["state"].shape == (32, plain.obs_dim)


def test_an_image_only_dataset_samples_one_uint8_tensor(datasets: Path) -> None:
    """``obs=pixels``: a Box of images, part ``"obs"``; no vector columns."""
    collect_main(["policy=random", "env=PandaLift", "steps=30", "obs=pixels", "image_size=16",
                  "dataset_id=local/pandalift/pixels-v0"])  # fmt: skip
    dataset = load_dataset("local/pandalift/pixels-v0")
    episode = _episodes("local/pandalift/pixels-v0")[0]
    assert dataset.image_parts == ("obs",) and dataset.obs.shape == (30, 0)
    assert dataset.obs_layout is None and dataset.frames["obs"].shape == (31, 3, 16, 16)
    batch = dataset.sample(4)
    assert batch.obs.dtype == torch.uint8 and batch.obs.shape == (4, 3, 16, 16)
    rows = torch.tensor([0, 29])
    np.testing.assert_array_equal(dataset.observations(rows, next_obs=True).numpy(),
                                  episode.observations[[1, 30]])  # fmt: skip
    image = gym.spaces.Box(0, 255, (3, 16, 16), np.uint8)
    dataset.check_env(image, gym.spaces.Box(-1, 1, (4,)))
    with pytest.raises(ValueError, match="image_size"):
        dataset.check_env(
            gym.spaces.Box(0, 255, (6, 16, 16), np.uint8), gym.spaces.Box(-1, 1, (4,))
        )


def test_keeping_episodes_keeps_their_frames(datasets: Path) -> None:
    dataset = load_dataset(CAMERA)
    second = dataset.observations(torch.arange(100, 150))
    second_next = dataset.observations(torch.arange(100, 150), next_obs=True)
    dataset.keep_episodes(torch.tensor([False, True]))
    assert len(dataset) == 50 and dataset.frames["pixels"].shape[0] == 51
    assert dataset.frame_index.tolist() == list(range(50))
    rows = torch.arange(50)
    assert torch.equal(dataset.observations(rows)["pixels"], second["pixels"])
    assert torch.equal(dataset.observations(rows, next_obs=True)["pixels"], second_next["pixels"])


def test_dataset_and_replay_batches_mix_part_by_part(datasets: Path) -> None:
    """RLPD's symmetric sampling over a dataset of images and an online frame store: one
    batch of dict observations, the dataset's rows first."""
    space = _camera_space()
    dataset = load_dataset(CAMERA)
    dataset.check_env(space, gym.spaces.Box(-1, 1, (4,)))
    spec = ObsSpec.from_space(space, frame_stack=2)
    dataset.arrange_parts(spec)
    assert list(dataset.observations(torch.tensor([0]))) == list(spec.names)
    buffer = ReplayBuffer(20, spec, (4,), num_envs=1, seed=0, frames=True)
    obs = {"state": space["state"].sample()[None], "pixels": np.full((1, 6, 16, 16), 7, np.uint8)}
    for _ in range(5):
        buffer.add(obs, np.zeros((1, 4)), np.zeros(1), obs, np.zeros(1), np.zeros(1))
    batch = MixedSampler([(dataset.seed(0), 0.5), (buffer, 0.5)]).sample(8)
    assert batch.obs["pixels"].shape == (8, 6, 16, 16) and batch.obs["pixels"].dtype == torch.uint8
    assert torch.equal(
        batch.obs["pixels"][4:], torch.as_tensor(obs["pixels"]).expand(4, -1, -1, -1)
    )


def test_mismatches_and_unsupported_uses_are_refused(datasets: Path) -> None:
    space, actions = _camera_space(), gym.spaces.Box(-1, 1, (4,))
    camera, plain = load_dataset(CAMERA), load_dataset(STATE)
    with pytest.raises(ValueError, match="images: none"):  # an image env, a state dataset
        plain.check_env(space, actions)
    state_only = gym.spaces.Box(-np.inf, np.inf, (plain.obs_dim,))
    with pytest.raises(ValueError, match=r"images: \['pixels'\]"):
        camera.check_env(state_only, actions)
    bigger = gym.spaces.Dict(
        {**space.spaces, "pixels": gym.spaces.Box(0, 255, (6, 32, 32), np.uint8)}
    )
    with pytest.raises(ValueError, match="image_size"):
        camera.check_env(bigger, actions)
    with pytest.raises(DatasetError, match="offline_data=mix"):
        camera.to_replay_buffer()
    with pytest.raises(DatasetError, match="observation history"):
        camera.stack_observations(2)


def test_an_image_dataset_takes_reward_and_random_action_corruptions(datasets: Path) -> None:
    """Rewards and random actions are vectors on any dataset; observations, next
    observations and gradient attacks (a vector critic) are refused on images, untouched."""
    from rlcore.offline.corruption import Corruption, corrupt

    camera = load_dataset(CAMERA)
    reward, action, frames = camera.reward.clone(), camera.action.clone(), camera.frames["pixels"]
    rows = corrupt(camera, Corruption("reward", "adversarial", rate=0.5, scale=2.0))
    assert 0 < len(rows) < len(camera)
    torch.testing.assert_close(camera.reward[rows], reward[rows] * -2.0)
    rows = corrupt(camera, Corruption("action", rate=0.5, seed=1))
    assert not torch.equal(camera.action[rows], action[rows])
    assert [r["kind"] for r in camera.corruption] == ["reward", "action"]
    for kind, mode in (("obs", "random"), ("dynamics", "random"), ("action", "adversarial")):
        with pytest.raises(ValueError, match=f"observes images .pixels.: a {mode} {kind} corr"):
            corrupt(camera, Corruption(kind, mode))
    assert len(camera.corruption) == 2 and camera.frames["pixels"] is frames


def _pixel_rlpd(tmp_path: Path, *extra: str) -> dict:
    from rlcore.train import train

    return train(make_config(
        "algo=rlpd", "env=PandaLift", *FAST, f"dataset={CAMERA}", "env.obs=state+pixels",
        "env.image_size=16", "env.frame_stack=2", "algo.encoder=drq", "algo.shift_pad=1",
        "algo.hidden=[16]", "algo.num_critics=2", "algo.utd_ratio=2", "algo.batch_size=8",
        "algo.learning_starts=20", "total_steps=60", "eval_every=60", "eval_episodes=1",
        "eval_envs=1", "env.max_episode_steps=30", *extra,
    ), tmp_path / "run")  # fmt: skip


def test_pixel_rlpd_with_demonstrations_from_the_command_line(datasets: Path, tmp_path: Path):
    """SERL's recipe: RLPD with an image encoder, the camera demonstrations mixed 50/50 into
    every batch; trains, evaluates (success rate) and refuses copying images into the
    replay buffer."""
    result = _pixel_rlpd(tmp_path)
    assert result["run/step"] == 60 and 0.0 <= result["eval/success_rate"] <= 1.0
    with pytest.raises(ConfigError, match="algo.offline_data=mix"):
        _pixel_rlpd(tmp_path / "keep", "algo.offline_data=keep")


def test_diffusion_bc_then_dppo_from_camera_demonstrations(datasets: Path, tmp_path: Path):
    """DPPO's image recipe from the command line: ``algo=diffusion_bc algo.encoder=drq`` on
    the camera demonstrations, then ``algo=dppo`` fine-tunes it (the BC run's encoder with
    the actor, a new one for the critic) on the rendered task; both evaluate by success."""
    from rlcore.train import train

    image_env = ("env=PandaLift", "env.obs=state+pixels", "env.image_size=16",
                 "env.frame_stack=2", "env.max_episode_steps=12", *FAST, "eval_episodes=1",
                 "eval_envs=1")  # fmt: skip
    result = train(make_config(
        "algo=diffusion_bc", *image_env, f"dataset={CAMERA}", "algo.encoder=drq",
        "algo.image_features=8", "algo.hidden=[16,16,16]", "algo.denoising_steps=4",
        "algo.batch_size=8", "total_steps=20", "eval_every=20",
    ), tmp_path / "bc")  # fmt: skip
    assert result["run/step"] == 20 and 0.0 <= result["eval/success_rate"] <= 1.0
    result = train(make_config(
        "algo=dppo", *image_env, f"algo.pretrained={tmp_path / 'bc'}", "algo.finetune_steps=2",
        "env.num_envs=2", "algo.rollout_steps=6", "total_steps=24", "algo.minibatch_size=8",
        "algo.update_epochs=1", "algo.critic_hidden=[16]", "eval_every=24",
    ), tmp_path / "dppo")  # fmt: skip
    assert result["run/step"] == 24 and 0.0 <= result["eval/success_rate"] <= 1.0
    from rlcore.checkpoint import load_checkpoint

    bc = load_checkpoint(tmp_path / "bc")["agent"]
    dppo = load_checkpoint(tmp_path / "dppo")["agent"]
    for name, value in bc["ema_encoder"].items():  # the frozen base keeps the BC encoder
        assert torch.equal(dppo["base_encoder"][name], value)
    moved = [not torch.equal(dppo["actor_encoder"][k], v) for k, v in bc["ema_encoder"].items()]
    assert any(moved)  # fine-tuned with the actor
    assert set(dppo["critic_encoder"]) == set(bc["ema_encoder"])  # its own, same kind
