"""Demonstrations of the robot tasks (``rlcore.offline.collect policy=expert``): success
flags in the Minari episodes, byte-identical regeneration from a seed, flattened goal
observations, refusals, and an offline run that trains on them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rlcore.offline.collect import main as collect_main


@pytest.fixture
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def _record(*args: str) -> dict:
    return collect_main(["policy=expert", *args])


def test_expert_demonstrations_carry_success_flags(minari_root: Path) -> None:
    import minari

    summary = _record("env=PandaLift", "steps=300", "dataset_id=local/pandalift/proficient-v0")
    assert summary["episodes"] == 3 and summary["success_rate"] == 1.0
    episodes = list(minari.load_dataset("local/pandalift/proficient-v0").iterate_episodes())
    for episode in episodes:
        success = np.asarray(episode.infos["success"])
        assert success.shape == (101,) and not success[0]  # the reset's flag, then each step's
        assert success[-1]
        # the sparse reward is the success flag of the step it follows
        np.testing.assert_array_equal(episode.rewards, success[1:].astype(float))


def test_the_same_seed_regenerates_the_same_bytes(tmp_path: Path, monkeypatch) -> None:
    files = []
    for name in ("a", "b"):
        monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / name))
        _record("env=PandaLift", "steps=200", "dataset_id=local/pandalift/mixed-v0", "seed=3",
                "noise=0.3", "slowness=0.7")  # fmt: skip
        data = tmp_path / name / "local" / "pandalift" / "mixed-v0" / "data"
        files.append([(data / f).read_bytes() for f in ("main_data.hdf5", "metadata.json")])
    assert files[0] == files[1]
    meta = json.loads(files[0][1])
    assert (
        "scripted expert of PandaLift-v1 at 0.7 of its speed + Gaussian noise 0.3"
        in (meta["algorithm_name"])
    )


def test_goal_tasks_are_recorded_flattened_or_by_part(minari_root: Path) -> None:
    by_part = _record("env=PandaPegInsertion", "steps=100", "dataset_id=local/peg/parts-v0")
    assert by_part["success_rate"] == 1.0  # dict observations kept (tests/test_dict_datasets.py)
    summary = _record("env=PandaPegInsertion", "steps=200", "flatten_obs=true",
                      "dataset_id=local/peg/proficient-v0")  # fmt: skip
    assert summary["success_rate"] == 1.0
    from rlcore.offline.datasets import load_dataset

    dataset = load_dataset("local/peg/proficient-v0", gamma=0.99)
    assert dataset.obs.shape[1] == 6 + 3 + 3  # achieved_goal, desired_goal, observation


def test_tasks_without_an_expert_are_named(minari_root: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        _record("env=PandaSlide", "steps=100", "dataset_id=local/slide/x-v0")
    assert "no scripted expert for PandaSlide-v1" in capsys.readouterr().err


def test_an_offline_run_trains_on_demonstrations_and_reports_success(
    minari_root: Path, tmp_path: Path
) -> None:
    from rlcore.train import train
    from tests.conftest import make_config

    _record("env=PandaLift", "steps=400", "dataset_id=local/pandalift/proficient-v0")
    result = train(make_config(
        "algo=iql", "env=PandaLift", "dataset=local/pandalift/proficient-v0", "total_steps=60",
        "algo.batch_size=32", "algo.hidden=[32,32]", "eval_every=60", "eval_episodes=2",
        "eval_envs=1", "logger=quiet", "threads=1",
    ), tmp_path / "run")  # fmt: skip
    assert result["run/step"] == 60 and 0.0 <= result["eval/success_rate"] <= 1.0


def test_camera_demonstrations_keep_uint8_images_and_the_states(minari_root: Path) -> None:
    """``obs=state+pixels``: the expert reads the state part, so the states equal a state
    recording's with the same seed, and the images are stored as uint8 stacks (2 frames of
    16 x 16 RGB; a new episode repeats its first image), and load as a dataset of images;
    an expert cannot act on pixels alone."""
    import minari

    from rlcore.offline.datasets import load_dataset

    _record("env=PandaLift", "steps=120", "dataset_id=local/pandalift/state-v0")
    summary = _record("env=PandaLift", "steps=120", "dataset_id=local/pandalift/camera-v0",
                      "obs=state+pixels", "image_size=16", "frame_stack=2")  # fmt: skip
    assert summary["success_rate"] == 1.0
    plain = list(minari.load_dataset("local/pandalift/state-v0").iterate_episodes())
    camera = list(minari.load_dataset("local/pandalift/camera-v0").iterate_episodes())
    assert len(camera) == len(plain) == 2
    for with_images, states in zip(camera, plain):
        pixels = with_images.observations["pixels"]
        assert pixels.dtype == np.uint8 and pixels.shape == (len(states.observations), 6, 16, 16)
        np.testing.assert_array_equal(pixels[0, :3], pixels[0, 3:])
        assert pixels.std() > 1  # a picture, not a blank
        np.testing.assert_array_equal(with_images.observations["state"], states.observations)
        np.testing.assert_array_equal(with_images.actions, states.actions)
    loaded = load_dataset("local/pandalift/camera-v0")  # (tests/test_image_datasets.py)
    assert loaded.image_parts == ("pixels",) and loaded.frames["pixels"].dtype == torch.uint8
    with pytest.raises(SystemExit):
        _record("env=PandaLift", "steps=10", "dataset_id=local/pandalift/pix-v0", "obs=pixels")
