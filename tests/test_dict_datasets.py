"""Offline datasets of dict observations (goal tasks recorded without ``flatten_obs``):
the parts as recorded, laid out as the agent reads them, in replay buffers part by part,
refusals that name the fix, and offline / offline-to-online runs (RLPD + HER) on them."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.config import ConfigError
from rlcore.observations import ObsSpec
from rlcore.offline.collect import main as collect_main
from rlcore.offline.datasets import load_dataset
from tests.conftest import FAST, make_config

REACH = "local/pandareach/expert-v0"
RECORDED = (("achieved_goal", (3,)), ("desired_goal", (3,)), ("observation", (6,)))
AGENT_ORDER = (("observation", (6,)), ("achieved_goal", (3,)), ("desired_goal", (3,)))


@pytest.fixture
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    collect_main(["env=PandaReach", "policy=expert", "steps=150", f"dataset_id={REACH}"])
    return root


def _reach_spaces() -> tuple[gym.Space, gym.Space]:
    with gym.make("PandaReach-v1") as env:
        return env.observation_space, env.action_space


def test_a_dict_dataset_keeps_its_parts_and_is_laid_out_as_the_agent_reads(minari_root):
    dataset = load_dataset(REACH)
    assert dataset.obs_layout == RECORDED  # the recorded space's key order
    with gym.make("PandaReach-v1") as env:  # row 0: the seed-0 reset, parts concatenated
        first, _ = env.reset(seed=0)
        space = env.observation_space
    expected = np.concatenate([first["achieved_goal"], first["desired_goal"], first["observation"]])
    np.testing.assert_array_equal(dataset.obs[0].numpy(), expected.astype(np.float32))
    obs, next_obs = dataset.obs.clone(), dataset.next_obs.clone()

    spec = ObsSpec.from_space(space)
    dataset.arrange_parts(spec)
    assert dataset.obs_layout == AGENT_ORDER
    assert torch.equal(dataset.obs, torch.cat([obs[:, 6:], obs[:, :6]], 1))
    assert torch.equal(dataset.next_obs, torch.cat([next_obs[:, 6:], next_obs[:, :6]], 1))

    buffer = dataset.to_replay_buffer(len(dataset) + 10, "cpu", 0, spec)
    n = len(dataset)
    assert set(buffer.obs) == {"observation", "achieved_goal", "desired_goal"}
    assert torch.equal(buffer.obs["desired_goal"][:n], obs[:, 3:6])
    assert torch.equal(buffer.next_obs["observation"][:n], next_obs[:, 6:])
    assert torch.equal(buffer.obs["achieved_goal"][n:], torch.zeros(10, 3))
    rows = torch.tensor([0, 7, n - 1])  # a buffer batch flattened = the dataset's rows
    assert torch.equal(spec.concat(buffer.batch(rows).obs), dataset.obs[rows])


def test_a_flattened_recording_holds_the_same_numbers(minari_root):
    """flatten_obs=true stores the dict flattened in its key order: the same columns."""
    collect_main(["env=PandaReach", "policy=expert", "steps=150", "flatten_obs=true",
                  "dataset_id=local/pandareach/flat-v0"])  # fmt: skip
    flat, parts = load_dataset("local/pandareach/flat-v0"), load_dataset(REACH)
    assert flat.obs_layout is None
    assert torch.equal(flat.obs, parts.obs) and torch.equal(flat.action, parts.action)


def test_mismatches_are_refused_naming_the_fix(minari_root):
    dict_space, action_space = _reach_spaces()
    collect_main(["env=PandaReach", "policy=expert", "steps=100", "flatten_obs=true",
                  "dataset_id=local/pandareach/flat-v0"])  # fmt: skip
    flat = load_dataset("local/pandareach/flat-v0")
    with pytest.raises(ValueError, match=r"flat observations \(12,\).*env.flatten_obs=true"):
        flat.check_env(dict_space, action_space)
    dataset = load_dataset(REACH)
    other = gym.spaces.Dict({**dict_space.spaces, "observation": gym.spaces.Box(-1, 1, (7,))})
    with pytest.raises(ValueError, match=r"observes the parts .*'observation': \(6,\)"):
        dataset.check_env(other, action_space)
    dataset.check_env(gym.spaces.flatten_space(dict_space), action_space)  # flattened env: ok
    with pytest.raises(ValueError, match="arrange_parts"):
        dataset.to_replay_buffer(None, "cpu", 0, ObsSpec.from_space(dict_space))
    with pytest.raises(ValueError, match="dict observations on both sides"):
        flat.arrange_parts(ObsSpec.from_space(dict_space))


def test_iql_trains_offline_and_online_on_dict_observations(minari_root, tmp_path):
    """algo.offline_data=keep: the dataset's rows in the online buffer, one channel per
    part; the policy acts on the env's dicts."""
    from rlcore.checkpoint import load_checkpoint
    from rlcore.train import train

    result = train(make_config(
        "algo=iql", "env=PandaReach", f"dataset={REACH}", "total_steps=40",
        "algo.online_steps=60", "algo.batch_size=32", "algo.hidden=[32,32]", "eval_every=50",
        *FAST,
    ), tmp_path / "iql")  # fmt: skip
    assert result["run/step"] == 100 and 0.0 <= result["eval/success_rate"] <= 1.0
    buffer = load_checkpoint(tmp_path / "iql")["loop"]["stateful"]["buffer"]
    assert buffer["size"] == 150 + 60 and "obs.desired_goal" in buffer["data"]


def test_hindsight_relabelling_refuses_what_it_cannot_relabel(minari_root, tmp_path):
    from rlcore.train import train

    with pytest.raises(ConfigError, match=r"algo.offline_data=keep.*algo.offline_data=mix"):
        train(make_config("algo=iql", "env=PandaReach", f"dataset={REACH}", "her=future",
                          "algo.online_steps=60", *FAST),
              tmp_path / "keep")  # fmt: skip
    with pytest.raises(ConfigError, match=r"before any episode has ended.*learning_starts"):
        train(make_config("algo=sac", "env=PandaReach", "her=future", "algo.learning_starts=0",
                          "total_steps=100", *FAST), tmp_path / "sac")  # fmt: skip


def test_rlpd_mixes_dict_demonstrations_with_relabelled_online_rows(minari_root, tmp_path):
    from rlcore.train import train

    result = train(make_config(
        "algo=rlpd", "env=PandaReach", f"dataset={REACH}", "her=future", "total_steps=200",
        "algo.learning_starts=100", "algo.utd_ratio=2", "algo.batch_size=32",
        "algo.hidden=[32,32]", "eval_every=200", *FAST,
    ), tmp_path / "rlpd")  # fmt: skip
    assert result["run/step"] == 200 and 0.0 <= result["eval/success_rate"] <= 1.0


def test_a_policy_cloned_from_dict_demonstrations_is_fine_tuned_on_them(minari_root, tmp_path):
    """diffusion_bc on a goal task's dict demonstrations, then DPPO on the env's dicts: the
    fine-tuner checks the parts it was cloned from (a flattened clone is refused:
    tests/test_observations.py) and flattens the env's dicts in the same order."""
    from rlcore.checkpoint import load_checkpoint
    from rlcore.train import train

    collect_main(["env=PandaPegInsertion", "policy=expert", "steps=200",
                  "dataset_id=local/peg/parts-v0"])  # fmt: skip
    head = ["algo.hidden=[32,32,32]", "algo.time_dim=8", "algo.denoising_steps=5"]
    train(make_config("algo=diffusion_bc", "env=PandaPegInsertion", "dataset=local/peg/parts-v0",
                      "total_steps=30", *head, "eval_every=30", *FAST), tmp_path / "bc")  # fmt: skip
    spaces = load_checkpoint(tmp_path / "bc")["spaces"]
    assert spaces["obs"]["keyed"] and [p["name"] for p in spaces["obs"]["parts"]] == [
        "observation", "achieved_goal", "desired_goal"]  # fmt: skip
    result = train(make_config(
        "algo=dppo", f"algo.pretrained={tmp_path / 'bc'}", "env=PandaPegInsertion",
        "env.num_envs=2", "algo.rollout_steps=10", "algo.finetune_steps=3",
        "algo.minibatch_size=20", "algo.critic_hidden=[32,32]", "total_steps=320",
        "eval_every=320", *FAST,
    ), tmp_path / "dppo")  # fmt: skip
    assert result["run/step"] == 320 and 0.0 <= result["eval/success_rate"] <= 1.0


def test_a_corrupted_dict_dataset_is_attacked_in_the_agents_column_order(minari_root, monkeypatch):
    """The recorded layout is alphabetical; the critic an adversarial corruption attacks
    reads the agent's order, so the parts are arranged before the corruption."""
    from omegaconf import OmegaConf

    import rlcore.build as build
    from rlcore.algos.iql import IQLConfig
    from rlcore.settings import settle

    seen = []
    monkeypatch.setattr(build, "corrupt_dataset", lambda data, _: seen.append(data.obs_layout))
    cfg = make_config("algo=iql", "env=PandaReach", f"dataset={REACH}", "corruption.kind=obs",
                      "corruption.mode=adversarial", "corruption.critic=a_run")  # fmt: skip
    run = settle(OmegaConf.to_container(cfg, resolve=True), IQLConfig)
    dataset = build.load_dataset(run.algo.plan(), run.settings, _reach_spaces()[0])
    assert seen == [AGENT_ORDER] and dataset.obs_layout == AGENT_ORDER
