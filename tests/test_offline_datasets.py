"""offline/: D4RL HDF5 and Minari loading, returns-to-go, validation errors, collection
(random, trained policy, replay buffer), the D4RL-like recipe, scores, offline failure."""

from __future__ import annotations

import importlib
import socket
import sys
import threading

import gymnasium as gym
import h5py
import minari
import numpy as np
import pytest
import torch
from minari.data_collector import EpisodeBuffer

import rlcore.offline.datasets as datasets_module
from rlcore.buffers import ReplayBuffer
from rlcore.checkpoint import load_checkpoint
from rlcore.offline.collect import main as collect_main
from rlcore.offline.datasets import (
    DatasetError,
    DatasetNotAvailableError,
    load_dataset,
    returns_to_go,
)
from rlcore.offline.recipe import build_d4rl_like, pick_expert_and_medium
from rlcore.offline.recording import replay_episodes, rollout
from rlcore.offline.scores import ScoreReferenceError, env_family, normalized_score
from rlcore.policies import load_policy
from rlcore.train import train
from tests.conftest import HANG_GUARD_S, make_config

TINY_SAC = [
    "algo=sac",
    "env=InvertedPendulum",
    "total_steps=300",
    "algo.learning_starts=100",
    "algo.batch_size=32",
    "algo.hidden=[32,32]",
    "logger=quiet",
    "eval_episodes=1",
    "eval_envs=1",
    "eval_every=100",
    "checkpoint_every=100",
    "threads=1",
]


@pytest.fixture(autouse=True)
def minari_root(tmp_path, monkeypatch):
    """Every test gets its own empty Minari dataset folder."""
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


@pytest.fixture(scope="module")
def sac_run(tmp_path_factory):
    """A tiny SAC run on InvertedPendulum (checkpoint with its replay buffer)."""
    run_dir = tmp_path_factory.mktemp("sac_run")
    train(make_config(*TINY_SAC), run_dir)
    return run_dir


# ----------------------------------------------------------------------------- D4RL HDF5

# 9 rows: episode 0 = rows 0-2 (terminal at 2), episode 1 = rows 3-4 (timeout at 4),
# episode 2 = rows 5-6 (terminal AND timeout at 6), episode 3 = rows 7-8 (cut by file end)
TERMINALS = [0, 0, 1, 0, 0, 0, 1, 0, 0]
TIMEOUTS = [0, 0, 0, 0, 1, 0, 1, 0, 0]
REWARDS = np.arange(1.0, 10.0)  # row i earns i + 1
# gamma = 0.5, by hand: row2 = 3, row1 = 2 + 3/2, row0 = 1 + 3.5/2; row4 = 5, row3 = 4 + 5/2 ...
MC_ALL_ROWS = [2.75, 3.5, 3.0, 6.5, 5.0, 9.5, 7.0, 12.5, 9.0]


def write_d4rl(path, next_observations=False, **replace):
    n = len(REWARDS)
    obs = np.stack([np.arange(n), -np.arange(n)], axis=1).astype(np.float32)  # row i -> (i, -i)
    arrays = {
        "observations": obs,
        "actions": np.linspace(-1, 1, n, dtype=np.float32)[:, None],
        "rewards": REWARDS.astype(np.float32),
        "terminals": np.array(TERMINALS, dtype=bool),
        "timeouts": np.array(TIMEOUTS, dtype=bool),
    }
    if next_observations:
        arrays["next_observations"] = obs + 0.5
    arrays.update(replace)
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            if value is not None:
                f.create_dataset(key, data=value)
    return path


def test_d4rl_without_next_observations_drops_rows_like_qlearning_dataset(tmp_path):
    data = load_dataset(write_d4rl(tmp_path / "d4rl.hdf5"), gamma=0.5, env_id="Hopper-v5")
    kept = [0, 1, 2, 3, 5, 6, 7]  # row 4 (timeout) and row 8 (last row) have no successor
    assert data.obs[:, 0].tolist() == kept
    # next_obs is the following row, also after a terminal (D4RL; never bootstrapped)
    assert data.next_obs[:, 0].tolist() == [1, 2, 3, 4, 6, 7, 8]
    assert data.terminated.tolist() == [0, 0, 1, 0, 0, 1, 0]
    # truncated: end of each stored non-terminal episode, plus the terminal+timeout row
    assert data.truncated.tolist() == [0, 0, 0, 1, 0, 1, 1]
    assert data.episode_id.tolist() == [0, 0, 0, 1, 2, 2, 3]
    assert data.episode_starts.tolist() == [True, False, False, True, True, False, True]
    # returns-to-go on the full episodes, before dropping (exact by hand)
    assert data.mc_return.tolist() == [MC_ALL_ROWS[i] for i in kept]
    assert data.episode_returns().tolist() == [6.0, 9.0, 13.0, 17.0]
    assert data.reward.tolist() == [REWARDS[i] for i in kept]
    assert data.env_id == "Hopper-v5" and data.source.endswith("d4rl.hdf5")
    assert data.obs.dtype == torch.float32 and data.episode_id.dtype == torch.int64


def test_d4rl_terminal_last_row_without_successor_is_dropped(tmp_path):
    terminals = np.array([0, 1, 0, 0, 0, 0, 0, 0, 1], dtype=bool)
    data = load_dataset(write_d4rl(tmp_path / "d4rl.hdf5", terminals=terminals), gamma=0.5)
    assert data.obs[:, 0].tolist() == [0, 1, 2, 3, 5, 7]  # rows 4, 6 (timeouts), 8 dropped
    assert data.terminated.tolist() == [0, 1, 0, 0, 0, 0]
    assert data.truncated.tolist() == [0, 0, 0, 1, 1, 1]
    assert data.episode_returns().tolist() == [3.0, 12.0, 13.0, 17.0]


def test_d4rl_with_next_observations_keeps_every_row(tmp_path):
    data = load_dataset(write_d4rl(tmp_path / "d4rl.hdf5", next_observations=True), gamma=0.5)
    assert len(data) == 9
    assert torch.equal(data.next_obs, data.obs + 0.5)
    assert data.terminated.tolist() == TERMINALS
    assert data.truncated.tolist() == [0, 0, 0, 0, 1, 0, 1, 0, 1]  # last episode cut by the file
    assert data.episode_id.tolist() == [0, 0, 0, 1, 1, 2, 2, 3, 3]
    assert data.mc_return.tolist() == MC_ALL_ROWS
    assert data.ref_min_score is None and data.env_id is None


def test_returns_to_go_hand_computed():
    rewards = np.array([1.0, 2.0, 3.0, 10.0, -1.0])
    ends = np.array([False, False, True, False, True])
    expected = [1 + 0.99 * (2 + 0.99 * 3), 2 + 0.99 * 3, 3.0, 10 + 0.99 * -1, -1.0]
    np.testing.assert_allclose(returns_to_go(rewards, ends, 0.99), expected, rtol=0, atol=1e-12)
    assert returns_to_go(rewards, ends, 0.0).tolist() == rewards.tolist()


@pytest.mark.parametrize(
    ("replace", "words"),
    [
        ({"timeouts": None}, ["missing key", "'timeouts'", "d4rl.hdf5"]),
        ({"rewards": np.ones(8, np.float32)}, ["differ in length", "rewards=8", "observations=9"]),
        ({"observations": np.zeros(9, np.float32)}, ["'observations'", "(9,)", "(N, dim)"]),
    ],
    ids=["missing-key", "length-mismatch", "dimensionality"],
)
def test_d4rl_validation_errors(tmp_path, replace, words):
    path = write_d4rl(tmp_path / "d4rl.hdf5", **replace)
    with pytest.raises(DatasetError) as error:
        load_dataset(path)
    for word in words:
        assert word in str(error.value)


@pytest.mark.parametrize(("key", "row"), [("observations", 5), ("rewards", 7)])
def test_non_finite_values_name_array_and_first_row(tmp_path, key, row):
    arrays = {
        "observations": np.zeros((9, 2), np.float32),
        "rewards": REWARDS.astype(np.float32),
    }
    arrays[key][row] = np.nan
    arrays[key][row + 1] = np.inf  # a later bad row is not the one reported
    with pytest.raises(DatasetError, match=rf"'{key}' .* non-finite .* at row {row};"):
        load_dataset(write_d4rl(tmp_path / "d4rl.hdf5", **{key: arrays[key]}))


def test_bad_specs_give_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_dataset(tmp_path / "missing.hdf5")
    with pytest.raises(DatasetError, match="neither an existing file or folder nor a Minari"):
        load_dataset("not a dataset")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="not a Minari dataset folder"):
        load_dataset(tmp_path / "empty")


# ----------------------------------------------------------------------------- Minari

OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT_SPACE = gym.spaces.Box(-3.0, 3.0, (1,), np.float32)


def make_minari(dataset_id, lengths, ends, ref=None, env="InvertedPendulum-v5", nan_at=None):
    """Episodes whose observations count up (row k of the whole dataset holds k)."""
    buffers, start = [], 0
    for index, (length, end) in enumerate(zip(lengths, ends)):
        obs = np.repeat(np.arange(start, start + length + 1, dtype=np.float32)[:, None], 4, 1)
        terminations = np.zeros(length, bool)
        truncations = np.zeros(length, bool)
        (terminations if end == "term" else truncations)[-1] = True
        rewards = np.arange(start, start + length, dtype=np.float64)
        if nan_at == index:
            rewards[1] = np.nan
        buffers.append(
            EpisodeBuffer(
                observations=obs,
                actions=np.full((length, 1), 0.5, np.float32),
                rewards=rewards,
                terminations=terminations,
                truncations=truncations,
            )
        )
        start += length
    refs = {} if ref is None else {"ref_min_score": ref[0], "ref_max_score": ref[1]}
    with pytest.warns(UserWarning):  # minari warns about missing optional metadata
        minari.create_dataset_from_buffers(
            dataset_id,
            buffers,
            env=env,
            observation_space=OBS_SPACE,
            action_space=ACT_SPACE,
            **refs,
        )


def test_minari_dataset_with_truncations_by_id_and_folder(minari_root, monkeypatch):
    make_minari("local/pendulum/mixed-v0", [3, 2, 4], ["term", "trunc", "trunc"])

    def no_download(*args, **kwargs):
        raise AssertionError("a local dataset must not be downloaded")

    monkeypatch.setattr(minari, "download_dataset", no_download)
    by_id = load_dataset("local/pendulum/mixed-v0", gamma=0.5)
    by_folder = load_dataset(minari_root / "local/pendulum/mixed-v0", gamma=0.5)
    by_file = load_dataset(minari_root / "local/pendulum/mixed-v0/data/main_data.hdf5", gamma=0.5)
    for data in (by_id, by_folder, by_file):
        assert len(data) == 9 and data.num_episodes == 3
        assert data.obs[:, 0].tolist() == list(range(9))
        # next_obs is observations[1:] of the episode (the true final obs at its end)
        assert data.next_obs[:, 0].tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9]
        assert data.terminated.tolist() == [0, 0, 1, 0, 0, 0, 0, 0, 0]
        assert data.truncated.tolist() == [0, 0, 0, 0, 1, 0, 0, 0, 1]
        assert data.episode_id.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2]
        assert data.episode_returns().tolist() == [3.0, 7.0, 26.0]
        assert data.mc_return[:5].tolist() == [0 + 0.5 * (1 + 0.5 * 2), 2.0, 2.0, 3 + 0.5 * 4, 4]
        assert data.env_id == "InvertedPendulum-v5"
    assert by_id.source == "local/pendulum/mixed-v0"


def test_minari_folder_without_minari_installed_reads_hdf5(minari_root, monkeypatch):
    make_minari("local/pendulum/mixed-v0", [3, 2], ["term", "trunc"], ref=(0.0, 10.0))
    reference = load_dataset(minari_root / "local/pendulum/mixed-v0")
    monkeypatch.setitem(sys.modules, "minari", None)  # `import minari` raises ImportError
    direct = load_dataset(minari_root / "local/pendulum/mixed-v0")
    for name in ("obs", "action", "reward", "next_obs", "terminated", "truncated", "mc_return"):
        assert torch.equal(getattr(direct, name), getattr(reference, name)), name
    assert (direct.env_id, direct.ref_min_score, direct.ref_max_score) == (
        "InvertedPendulum-v5",
        0.0,
        10.0,
    )


def test_minari_nan_names_episode_and_row(minari_root):
    make_minari("local/pendulum/bad-v0", [3, 4], ["term", "trunc"], nan_at=1)
    with pytest.raises(DatasetError, match=r"'rewards \(episode 1\)'.* at row 4;"):
        load_dataset("local/pendulum/bad-v0")


def test_minari_dict_observations_are_flattened_in_space_order(minari_root):
    space = gym.spaces.Dict(
        {"b": gym.spaces.Box(-1, 1, (2,), np.float32), "a": gym.spaces.Box(-1, 1, (1,))}
    )
    obs = {"a": np.full((3, 1), 7.0, np.float32), "b": np.array([[1, 2], [3, 4], [5, 6]], "f4")}
    episode = EpisodeBuffer(
        observations=obs,
        actions=np.zeros((2, 1), np.float32),
        rewards=np.ones(2),
        terminations=np.array([False, True]),
        truncations=np.zeros(2, bool),
    )
    with pytest.warns(UserWarning):
        minari.create_dataset_from_buffers(
            "local/dict/obs-v0", [episode], observation_space=space, action_space=ACT_SPACE
        )
    data = load_dataset("local/dict/obs-v0")
    expected = gym.spaces.flatten(space, {"a": obs["a"][0], "b": obs["b"][0]})
    assert data.obs[0].tolist() == expected.tolist()
    assert (
        data.next_obs[1].tolist()
        == gym.spaces.flatten(space, {"a": obs["a"][2], "b": obs["b"][2]}).tolist()
    )
    data.check_env(space, ACT_SPACE)  # flat dims agree: no error


# ----------------------------------------------------------------------------- dataset API


def test_sample_replay_buffer_and_env_check(tmp_path):
    data = load_dataset(write_d4rl(tmp_path / "d4rl.hdf5", next_observations=True), gamma=0.5)
    batch = data.sample(16, torch.Generator().manual_seed(3))
    idx = torch.randint(0, len(data), (16,), generator=torch.Generator().manual_seed(3))
    assert torch.equal(batch.obs, data.obs[idx]) and torch.equal(batch.next_obs, data.next_obs[idx])
    assert torch.equal(batch.mc_return, data.mc_return[idx])
    assert torch.equal(batch.terminated, data.terminated[idx])
    assert torch.equal(batch.truncated, data.truncated[idx])

    buffer = data.to_replay_buffer(capacity=20)
    assert isinstance(buffer, ReplayBuffer) and (buffer.size, buffer.pos) == (9, 9)
    for name in ReplayBuffer.FIELDS:
        assert torch.equal(getattr(buffer, name)[:9], getattr(data, name)), name
    assert len(buffer.sample(4)) == 4
    assert data.to_replay_buffer().pos == 0  # exactly full
    with pytest.raises(ValueError, match="capacity 5 is smaller than the dataset"):
        data.to_replay_buffer(capacity=5)

    data.check_env(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Box(-1, 1, (1,)))
    hopper = gym.make("Hopper-v5")
    with pytest.raises(ValueError) as error:
        data.check_env(hopper.observation_space, hopper.action_space)
    hopper.close()
    for text in ("does not match", "(2,)", "(1,)", "(11,)", "(3,)"):
        assert text in str(error.value)


# ----------------------------------------------------------------------------- collect


def test_collect_random_round_trip(capsys):
    argv = ["env=InvertedPendulum", "policy=random", "steps=300", "dataset_id=local/ip/random-v0"]
    summary = collect_main(argv)
    assert "wrote local/ip/random-v0" in capsys.readouterr().out
    data = load_dataset("local/ip/random-v0")
    with gym.make("InvertedPendulum-v5") as env:
        episodes = rollout(env, None, 300, seed=0)  # same seed: the same episodes
    assert len(data) == summary["steps"] == 300
    assert data.num_episodes == summary["episodes"] == len(episodes) > 1
    np.testing.assert_allclose(data.episode_returns(), [ep.rewards.sum() for ep in episodes])
    assert data.obs[0].tolist() == episodes[0].observations[0].tolist()
    assert data.truncated[-1] == 1  # the step budget cut the last episode
    assert data.terminated.sum() == sum(int(ep.terminations[-1]) for ep in episodes)
    low, high = data.action.min(), data.action.max()
    assert -3.0 <= low < -2.0 and 2.0 < high <= 3.0  # uniform over the whole box


def test_collect_from_policy_run(sac_run):
    collect_main([f"policy={sac_run}", "env=InvertedPendulum", "steps=200", "dataset_id=l/p/a-v0"])
    data = load_dataset("l/p/a-v0")
    policy = load_policy(sac_run)
    assert len(data) == 200
    np.testing.assert_allclose(data.action.numpy(), policy(data.obs.numpy()), atol=1e-6)
    collect_main(
        [f"policy={sac_run}", "env=InvertedPendulum", "steps=200", "dataset_id=l/p/b-v0"]
        + ["noise=0.5", "seed=1"]
    )
    noisy = load_dataset("l/p/b-v0")
    gap = (noisy.action - torch.as_tensor(policy(noisy.obs.numpy()))).abs()
    assert gap.max() > 0.05 and noisy.action.abs().max() <= 3.0


def test_collect_sampling_from_the_policy_is_seeded(sac_run):
    """sample=true records the SAC policy's own tanh-Gaussian draws: actions spread around the
    deterministic action, inside the box, the same for the same seed and not for another."""
    base = [f"policy={sac_run}", "env=InvertedPendulum", "steps=200", "sample=true"]
    summary = collect_main([*base, "dataset_id=l/s/a-v0", "seed=3"])
    collect_main([*base, "dataset_id=l/s/b-v0", "seed=3"])
    collect_main([*base, "dataset_id=l/s/c-v0", "seed=4"])
    first, again, other = (load_dataset(f"l/s/{name}-v0") for name in "abc")
    assert torch.equal(first.action, again.action) and torch.equal(first.obs, again.obs)
    assert not torch.equal(first.action[:50], other.action[:50])
    mean_action = torch.as_tensor(load_policy(sac_run)(first.obs.numpy()))
    gap = (first.action - mean_action).abs()
    assert gap.mean() > 1e-3 and first.action.abs().max() <= 3.0
    name = minari.load_dataset("l/s/a-v0").storage.metadata["algorithm_name"]
    assert name == f"actions sampled from the policy of {sac_run}"
    assert summary["steps"] == 200
    random_sample = ["policy=random", "env=InvertedPendulum", "steps=10", "sample=true"]
    for bad in (
        [*random_sample, "dataset_id=l/s/d-v0"],
        [*base, "dataset_id=l/s/e-v0", "sample=maybe"],
        [f"policy=replay:{sac_run}", "sample=true", "dataset_id=l/s/f-v0"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            collect_main(bad)
        assert exit_info.value.code == 2


def test_collect_from_replay_buffer(sac_run):
    summary = collect_main([f"policy=replay:{sac_run}", "dataset_id=local/ip/replay-v0"])
    buffer = load_checkpoint(sac_run)["loop"]["stateful"]["buffer"]
    data = load_dataset("local/ip/replay-v0")
    assert len(data) == summary["steps"] == buffer["size"] == 300
    assert torch.equal(data.obs, buffer["data"]["obs"])  # one env, no wrap: same order
    assert torch.equal(data.next_obs, buffer["data"]["next_obs"])
    assert torch.equal(data.reward, buffer["data"]["reward"])
    assert torch.equal(data.terminated, buffer["data"]["terminated"])
    assert data.truncated[-1] == 1 and data.env_id == "InvertedPendulum-v5"


def test_replay_first_steps_equal_the_shorter_runs_buffer(sac_run, tmp_path):
    """Cutting a deterministic run's buffer at step n gives the run stopped at n (recipe)."""
    short = tmp_path / "short"
    train(make_config(*TINY_SAC[:2], "total_steps=200", *TINY_SAC[3:]), short)
    cut = replay_episodes(load_checkpoint(sac_run), first_steps=200)
    whole = replay_episodes(load_checkpoint(short))
    assert sum(len(ep.actions) for ep in cut) == 200
    assert len(cut) == len(whole)
    for a, b in zip(cut, whole):
        for field in ("observations", "actions", "rewards", "terminations", "truncations"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    summary = collect_main([f"policy=replay:{sac_run}", "steps=200", "dataset_id=ns/cut-v0"])
    assert summary["steps"] == 200
    assert (
        "first 200 env steps" in minari.load_dataset("ns/cut-v0").storage.metadata["algorithm_name"]
    )
    with pytest.raises(DatasetError, match="has 300 env steps"):
        replay_episodes(load_checkpoint(sac_run), first_steps=301)
    state = load_checkpoint(sac_run)
    state["loop"]["counters"]["step"] = 400  # as if 100 rows had been overwritten
    state["loop"]["stateful"]["buffer"]["pos"] = 0
    with pytest.raises(DatasetError, match="no longer holds"):
        replay_episodes(state, first_steps=50)


def test_replay_export_splits_envs_and_unwraps_the_ring():
    """2 envs, capacity 7 (not a multiple of 2), 10 writes: the ring wrapped mid-step."""
    buffer = ReplayBuffer(7, (1,), (1,), num_envs=2)
    current = [0.0, 100.0]
    ends = {(2, 0): "term", (1, 1): "trunc", (3, 1): "trunc"}  # (vector step, env)
    for t in range(5):
        obs, next_obs = np.array(current), np.array(current) + 1
        flags = [ends.get((t, i)) for i in range(2)]
        term = np.array([f == "term" for f in flags])
        trunc = np.array([f == "trunc" for f in flags])
        buffer.add(obs[:, None], np.zeros((2, 1)), obs, next_obs[:, None], term, trunc)
        current = [n + (1000 if f else 0) for n, f in zip(next_obs, flags)]
    state = {
        "loop": {"buffer": buffer.state_dict(), "counters": {"step": 10}},
        "config": {"env": {"num_envs": 2}, "algo": {}},
        "obs_normalizer": None,
    }
    got = [
        (ep.observations[:, 0].tolist(), ep.terminations.tolist(), ep.truncations.tolist())
        for ep in replay_episodes(state)
    ]
    assert got == [
        ([2, 3], [True], [False]),  # env 0: the oldest kept row, mid-episode
        ([1003, 1004, 1005], [False, False], [False, True]),  # cut by the buffer end
        ([101, 102], [False], [True]),  # env 1
        ([1102, 1103, 1104], [False, False], [False, True]),
        ([2104, 2105], [False], [True]),
    ]
    state["obs_normalizer"] = {"mean": 0.0}
    with pytest.raises(DatasetError, match="normalised"):
        replay_episodes(state)


def test_collect_records_discrete_actions_and_the_tasks_arguments(tmp_path, capsys):
    """A Discrete task (bit flipping, 4 bits through ``kwargs.n_bits=4``): random indices as
    int64, drawn from the seed's generator; a DQN run's policy is recorded on its own task's
    arguments (the run's ``env.kwargs``) without repeating them; Gaussian noise is refused."""
    collect_main(["env=BitFlipping", "kwargs.n_bits=4", "policy=random", "steps=12",
                  "dataset_id=local/bits/random-v0"])  # fmt: skip
    episodes = list(minari.load_dataset("local/bits/random-v0").iterate_episodes())
    actions = np.concatenate([ep.actions for ep in episodes])
    assert actions.dtype == np.int64
    assert actions.tolist() == np.random.default_rng(0).integers(4, size=12).tolist()
    assert episodes[0].observations["observation"].shape[1] == 4

    run = tmp_path / "dqn"
    train(make_config(
        "algo=dqn", "env=BitFlipping", "env.kwargs.n_bits=4", "algo.learning_starts=20",
        "algo.batch_size=8", "algo.hidden=[8]", "total_steps=40", "eval_every=40",
        "eval_episodes=1", "logger=quiet", "threads=1",
    ), run)  # fmt: skip
    collect_main([f"policy={run}", "env=BitFlipping", "steps=20", "dataset_id=local/bits/dqn-v0"])
    policy = load_policy(run)
    for ep in minari.load_dataset("local/bits/dqn-v0").iterate_episodes():
        obs = {name: part[:-1] for name, part in ep.observations.items()}
        assert obs["observation"].shape[1] == 4  # the run's n_bits, not the task's default
        assert ep.actions.tolist() == np.asarray(policy(obs)).tolist()
    capsys.readouterr()
    for argv, message in [
        ([f"policy={run}", "noise=0.1"], "Gaussian action noise needs continuous actions"),
        (["policy=random", "kwargs.n bits=4"], "expected kwargs.<name>=<value>"),
        (["policy=random", "kwargs.bits=4"], "BitFlipping-v0 takes no 'bits'; its options: n_bits"),
        ([f"policy=replay:{run}", "kwargs.n_bits=4"], "does not apply to replay"),
    ]:
        with pytest.raises(SystemExit) as stop:
            collect_main(["env=BitFlipping", "steps=5", "dataset_id=local/bits/x-v0", *argv])
        assert stop.value.code == 2 and message in capsys.readouterr().err, argv


def test_collect_records_a_task_registered_with_a_class(capsys, monkeypatch):
    """A user's task registered with a class entry point (tests.goal_env): Minari stores
    specs as JSON, so the dataset names the class as ``module:name`` and recovers the task
    from it; a failure while Minari writes removes the partial dataset."""
    collect_main(["env=tests.goal_env:RlcoreGoalPoint-v0", "policy=random", "steps=30",
                  "dataset_id=local/goal/random-v0"])  # fmt: skip
    dataset = minari.load_dataset("local/goal/random-v0")
    assert dataset.spec.env_spec.entry_point == "tests.goal_env:GoalPointEnv"
    env = dataset.recover_environment()
    assert set(env.reset(seed=0)[0]) == {"observation", "achieved_goal", "desired_goal"}
    assert gym.spec("RlcoreGoalPoint-v0").entry_point.__name__ == "GoalPointEnv"  # unchanged

    def half_written(dataset_id, *args, **kwargs):
        (minari.storage.get_dataset_path(dataset_id) / "data").mkdir(parents=True)
        raise RuntimeError("interrupted")

    monkeypatch.setattr(minari, "create_dataset_from_buffers", half_written)
    with pytest.raises(RuntimeError, match="interrupted"):
        collect_main(["env=InvertedPendulum", "policy=random", "steps=5",
                      "dataset_id=local/ip/cut-v0"])  # fmt: skip
    assert not minari.storage.get_dataset_path("local/ip/cut-v0").exists()


def test_collect_usage_errors(capsys, sac_run):
    cases = [
        (["policy=random", "dataset_id=local/x/y-v0"], "env=<env> is required"),
        (["env=Hopper", "policy=random", "dataset_id=local/x/y-v0"], "steps=<n>"),
        (["env=Hopper", "policy=random"], "missing dataset_id"),
        (["env=Hopper", "colour=red", "policy=random", "dataset_id=ns/b-v0"], "unknown key"),
        (["env=Hopper", "policy=random", "steps=x", "dataset_id=ns/b-v0"], "steps must be"),
        (["env=Hopper", "policy=random", "steps=5", "dataset_id=no version"], "not of the form"),
        (["env=Hopper", "policy=random", "steps=5", "seed=-1", "dataset_id=ns/b-v0"], "seed=-1"),
        (["env=PandaReach", "policy=expert", "steps=5", "sample=true", "dataset_id=ns/b-v0"],
         "not policy=expert"),
        (["env=Hopper", "policy=random", "steps=5", "slowness=0.5", "dataset_id=ns/b-v0"],
         "slows the scripted expert"),
        (
            ["env=Hopper", "policy=random", "steps=5", "dataset_id=ns/b-v0", "ref_min_score=1"],
            "together",
        ),
        ([f"policy=replay:{sac_run}", "env=Hopper", "dataset_id=ns/b-v0"], "trained on"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as stop:
            collect_main(argv)
        assert stop.value.code == 2, argv
        err = capsys.readouterr().err
        assert message in err and "usage:" in err, (argv, err)
    collect_main(["env=InvertedPendulum", "policy=random", "steps=5", "dataset_id=ns/b-v0"])
    with pytest.raises(SystemExit):
        collect_main(["env=InvertedPendulum", "policy=random", "steps=5", "dataset_id=ns/b-v0"])
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("antmaze", ["variant=umaze", "policy=x.pt", "steps=10", "dataset_id=ns/a-v0"]),
        ("recipe", ["env=InvertedPendulum"]),
        ("safe_recipe", ["env=x", "dataset_id=ns/s-v0", "sources=random:10"]),
    ],
)
def test_dataset_commands_refuse_a_negative_seed_before_any_work(module, argv, tmp_path, capsys):
    """numpy's and gymnasium's seeding take seeds >= 0: one line, before anything runs."""
    main = importlib.import_module(f"rlcore.offline.{module}").main
    with pytest.raises(SystemExit) as stop:
        main([*argv, "seed=-1"])
    assert stop.value.code == 2
    assert "seed=-1: must be >= 0" in capsys.readouterr().err


# ----------------------------------------------------------------------------- recipe


def test_pick_expert_and_medium():
    returns = {100: 10.0, 200: 31.0, 300: 95.0, 400: 40.0, 500: 120.0, 600: 120.0}
    assert pick_expert_and_medium(returns) == (600, 400)  # target 40; ties: latest expert
    assert pick_expert_and_medium(returns, 0.25) == (600, 200)  # target 30


def test_recipe_rejects_a_medium_fraction_outside_0_1(tmp_path, capsys):
    from rlcore.offline.recipe import main

    for bad in ("0", "1.5", "-0.2"):
        with pytest.raises(SystemExit) as stop:
            main(["env=InvertedPendulum", f"medium_fraction={bad}", f"runs_dir={tmp_path}"])
        assert stop.value.code == 2
        assert "medium_fraction must be in (0, 1]" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing trained or written


def test_recipe_builds_five_datasets_on_tiny_settings(tmp_path):
    report = build_d4rl_like(
        "InvertedPendulum",
        expert_steps=300,
        dataset_steps=150,
        eval_every=100,
        runs_dir=tmp_path / "runs",
        train_overrides=[o for o in TINY_SAC[3:] if not o.startswith(("eval_every", "check"))],
    )
    assert (tmp_path / "runs/recipe.json").is_file()
    assert report["expert_step"] in (100, 200, 300) and report["medium_step"] in (100, 200, 300)
    data = {kind: load_dataset(f"local/invertedpendulum/{kind}-v0") for kind in report["datasets"]}
    assert len(data["random"]) == len(data["medium"]) == len(data["expert"]) == 150
    assert len(data["medium-replay"]) == report["medium_step"]
    assert len(data["medium-expert"]) == 300
    assert torch.equal(data["medium-expert"].obs[:150], data["medium"].obs)
    assert torch.equal(data["medium-expert"].obs[150:], data["expert"].obs)
    for kind, dataset in data.items():
        assert dataset.ref_max_score == report["expert_return"], kind
        assert dataset.ref_min_score == report["ref_min_score"], kind
    assert not (tmp_path / "runs/medium").exists()  # medium-replay came from the expert run
    names = {
        kind: minari.load_dataset(f"local/invertedpendulum/{kind}-v0").storage.metadata[
            "algorithm_name"
        ]
        for kind in ("medium", "expert", "medium-replay")
    }
    assert "sampled from the policy" in names["medium"] and "sampled" in names["expert"]
    assert "replay buffer" in names["medium-replay"]
    # re-running after an interruption resumes the finished training instead of retraining
    for kind in report["datasets"]:
        minari.delete_dataset(f"local/invertedpendulum/{kind}-v0")
    again = build_d4rl_like(
        "InvertedPendulum",
        expert_steps=300,
        dataset_steps=150,
        eval_every=100,
        runs_dir=tmp_path / "runs",
        train_overrides=[o for o in TINY_SAC[3:] if not o.startswith(("eval_every", "check"))],
    )
    assert again["eval_returns"] == report["eval_returns"]
    assert (
        again["datasets"]["medium-replay"]["steps"] == report["datasets"]["medium-replay"]["steps"]
    )
    assert (tmp_path / "runs/expert/config_resumed.yaml").is_file()


# ----------------------------------------------------------------------------- scores


def test_normalized_score_table_hits():
    for name in ("Hopper-v5", "mujoco/hopper/medium-v0", "hopper-medium-v2", "hopper"):
        assert env_family(name) == "hopper"
        assert normalized_score(3234.3, name) == pytest.approx(100.0)
        assert normalized_score(-20.272305, name) == pytest.approx(0.0)
    assert normalized_score(12135.0, "HalfCheetah-v5") == pytest.approx(100.0)
    assert normalized_score(4592.3, "walker2d-medium-replay-v2") == pytest.approx(100.0)
    assert env_family("Ant-v5") == "ant" and env_family("antmaze-umaze-v2") == "antmaze"
    assert normalized_score(0.5, "D4RL/antmaze/umaze-v1") == pytest.approx(50.0)
    assert normalized_score(3879.7, "ant-medium-v2") == pytest.approx(100.0)
    np.testing.assert_allclose(normalized_score(np.array([-20.272305, 3234.3]), "hopper"), [0, 100])


def test_normalized_score_minari_reference_fallback_and_clear_error(minari_root):
    make_minari("local/pendulum/ref-v0", [3], ["term"], ref=(10.0, 1010.0))
    data = load_dataset("local/pendulum/ref-v0")
    assert normalized_score(510.0, data.env_id, data) == pytest.approx(50.0)
    assert normalized_score(510.0, dataset=data) == pytest.approx(50.0)
    # the pinned table wins over metadata when the env is in it
    hopper = load_dataset("local/pendulum/ref-v0", env_id="Hopper-v5")
    assert normalized_score(3234.3, dataset=hopper) == pytest.approx(100.0)
    make_minari("local/pendulum/noref-v0", [3], ["term"])
    bare = load_dataset("local/pendulum/noref-v0")
    with pytest.raises(ScoreReferenceError, match="no reference scores for 'InvertedPendulum-v5'"):
        normalized_score(1.0, bare.env_id, bare)
    with pytest.raises(ScoreReferenceError, match="not in the pinned D4RL table"):
        normalized_score(1.0, "Reacher-v5")


def test_a_dataset_of_another_task_is_named_in_the_run(minari_root):
    from rlcore.build import other_task_note

    make_minari("local/pendulum/task-v0", [3], ["term"])
    data = load_dataset("local/pendulum/task-v0", env_id="Hopper-v5")
    assert (data.env_id, data.recorded_env_id) == ("Hopper-v5", "InvertedPendulum-v5")
    assert other_task_note(data.recorded_env_id, "Hopper-v5") == (
        "was recorded on InvertedPendulum-v5; this run trains and evaluates on Hopper-v5"
    )
    assert other_task_note("InvertedPendulum-v5", "InvertedPendulum") is None  # short name
    assert other_task_note(None, "Hopper-v5") is None  # a D4RL file names no task
    assert other_task_note("my.tasks:Arm", "my.tasks:Arm") is None  # not buildable here
    assert "recorded on my.tasks:Arm;" in other_task_note("my.tasks:Arm", "my.tasks:Hand")
    assert load_dataset(write_d4rl(minari_root / "d.hdf5")).recorded_env_id is None


# ----------------------------------------------------------------------------- remote ids

HELP = ("is not available offline", "python -m rlcore.offline.collect", "MINARI_DATASETS_PATH")


def test_remote_id_offline_mode_fails_fast_through_minari_download(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    calls = []
    real_download = minari.download_dataset

    def spy(dataset_id, *args, **kwargs):
        calls.append(dataset_id)
        return real_download(dataset_id, *args, **kwargs)

    connections = []

    def no_network(*args, **kwargs):
        connections.append(args)
        raise OSError("no network in this test")

    # fast = no connection is even attempted (a timer would judge the machine, not the code)
    monkeypatch.setattr(minari, "download_dataset", spy)
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    with pytest.raises(DatasetNotAvailableError) as error:
        load_dataset("mujoco/hopper/medium-v0")
    assert connections == []
    assert calls == ["mujoco/hopper/medium-v0"]  # the real download path was taken
    assert "dataset mujoco/hopper/medium-v0 is not available offline" in str(error.value)
    assert "python -m rlcore.offline.collect env=Hopper-v5 policy=" in str(error.value)
    for text in HELP:
        assert text in str(error.value)


def test_remote_id_with_hanging_network_fails_within_seconds(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for name in ("HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)

    answer = threading.Event()  # set only after load_dataset has returned
    waited_for_the_network = []

    def hang(*args, **kwargs):
        # a network that answers only once the caller has given up on it (the probe runs
        # in a daemon thread); a caller that waits for the answer hangs until the guard
        if not answer.wait(HANG_GUARD_S):
            waited_for_the_network.append(True)
        raise OSError("timed out")

    def no_download(*args, **kwargs):
        raise AssertionError("the download must not start without a network")

    monkeypatch.setattr(socket, "create_connection", hang)
    monkeypatch.setattr(minari, "download_dataset", no_download)
    assert datasets_module.NETWORK_PROBE_TIMEOUT_S <= 10  # "within seconds": the probe's bound
    monkeypatch.setattr(datasets_module, "NETWORK_PROBE_TIMEOUT_S", 0.2)
    try:
        with pytest.raises(DatasetNotAvailableError, match="cannot be reached") as error:
            load_dataset("mujoco/walker2d/expert-v0")
    finally:
        answer.set()
    assert not waited_for_the_network
    for text in HELP:
        assert text in str(error.value)


def test_chunk_rows_never_cross_an_episode_end():
    from rlcore.offline.datasets import chunk_rows

    episode_id = torch.tensor([0, 0, 0, 1, 1])
    rows, valid = chunk_rows(episode_id, 3)
    assert rows.tolist() == [[0, 1, 2], [1, 2, 2], [2, 2, 2], [3, 4, 4], [4, 4, 4]]
    assert valid.tolist() == [[True, True, True], [True, True, False], [True, False, False],
                              [True, True, False], [True, False, False]]  # fmt: skip
    rows, valid = chunk_rows(episode_id, 2, backward=True)
    assert rows.tolist() == [[0, 0], [0, 1], [1, 2], [3, 3], [3, 4]]
    assert valid.tolist() == [[False, True], [True, True], [True, True], [False, True],
                              [True, True]]  # fmt: skip
    assert chunk_rows(episode_id, 1)[0].tolist() == [[0], [1], [2], [3], [4]]
    with pytest.raises(ValueError, match="chunk length 0"):
        chunk_rows(episode_id, 0)


def test_dataset_action_chunks_and_obs_history():
    """Two episodes (3 and 2 rows): chunks repeat an episode's last action past its end,
    histories repeat its first observation before its start."""
    from rlcore.offline.datasets import _assemble

    n = 5
    rows = {
        "obs": np.arange(n, dtype=np.float32)[:, None],
        "action": (10 + np.arange(n, dtype=np.float32))[:, None],
        "reward": np.ones(n, np.float32),
        "next_obs": np.arange(1, n + 1, dtype=np.float32)[:, None],
        "terminated": np.array([0, 0, 1, 0, 0], np.float32),
        "truncated": np.array([0, 0, 0, 0, 1], np.float32),
    }
    ends = np.array([0, 0, 1, 0, 1], bool)
    data = _assemble(rows, ends, None, 0.99, "toy", None, None, None)
    chunks, valid = data.action_chunks(2)
    assert chunks[..., 0].tolist() == [[10, 11], [11, 12], [12, 12], [13, 14], [14, 14]]
    assert valid[:, 1].tolist() == [True, True, False, True, False]
    history, _ = data.obs_history(2)
    assert history[..., 0].tolist() == [[0, 0], [0, 1], [1, 2], [3, 3], [3, 4]]
