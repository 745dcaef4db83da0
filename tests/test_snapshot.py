"""S3RL snapshot reset (envs/snapshot.py): exact restore on every back end, per sub-env
restore, truncation, clustering, the switch back, file checks, the CLI and resume."""

from __future__ import annotations

import numpy as np
import pytest

from rlcore.envs.make import make_vec_env, set_states
from rlcore.envs.native import batch_available
from rlcore.envs.snapshot import (
    SnapshotMismatchError,
    SnapshotReset,
    Snapshots,
    SnapshotSettings,
    collect_snapshots,
    kmeans_1d,
)
from tests.conftest import FAST, REPO, make_config

BACKENDS = ["sync", "async", *(["native"] if batch_available() else [])]
SHORT = 60  # time limit of the test tasks (short episodes, quick rollouts)


class LinearTeacher:
    """A deterministic policy (tanh of a fixed linear map) that records what it saw."""

    def __init__(self, obs_dim: int, act_dim: int, seed: int = 0) -> None:
        self.weights = np.random.default_rng(seed).normal(0, 0.3, (obs_dim, act_dim))
        self.calls: list[tuple[np.ndarray, np.ndarray]] = []

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        action = np.tanh(obs @ self.weights)
        self.calls.append((obs[0].copy(), action[0].copy()))
        return action


def teacher_trajectory(env_name: str, episodes: int, every: int, seed: int = 0):
    """Snapshots plus the teacher's per-step (obs, action, reward) of every episode."""
    probe = make_vec_env(env_name, 1, max_episode_steps=SHORT)
    obs_dim, act_dim = probe.single_observation_space.shape[0], probe.single_action_space.shape[0]
    probe.close()
    teacher = LinearTeacher(obs_dim, act_dim)
    snaps = collect_snapshots(
        env_name, teacher, episodes=episodes, every=every, seed=seed, max_episode_steps=SHORT,
        value_fn=lambda obs: obs[:, 0],
    )  # fmt: skip
    # replay the same deterministic rollout for the rewards, step by step
    env = make_vec_env(env_name, 1, max_episode_steps=SHORT)
    obs, _ = env.reset(seed=seed)
    steps = []
    for _, action in teacher.calls:
        next_obs, reward, terminated, truncated, info = env.step(action[None])
        final = info["final_obs"][0] if terminated[0] or truncated[0] else next_obs[0]
        steps.append(
            (obs[0].copy(), action, float(reward[0]), final.copy(), terminated[0] or truncated[0])
        )
        obs = next_obs
    env.close()
    return snaps, steps


def episode_starts(steps) -> list[int]:
    starts, fresh = [], True
    for i, step in enumerate(steps):
        if fresh:
            starts.append(i)
        fresh = step[4]
    return starts


@pytest.mark.parametrize("env_name", ["Hopper", "Ant"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_restored_snapshot_replays_the_teacher_exactly(env_name, backend):
    """Restore snapshots into sub-env 1 of 3 and replay the teacher's actions: the
    observations and rewards equal the teacher's bit for bit, and the other sub-envs run
    exactly as in an env where nothing was restored."""
    snaps, steps = teacher_trajectory(env_name, episodes=2, every=10)
    starts = episode_starts(steps)
    env = make_vec_env(env_name, 3, backend=backend, max_episode_steps=SHORT)
    control = make_vec_env(env_name, 3, backend=backend, max_episode_steps=SHORT)
    env.reset(seed=5)
    control.reset(seed=5)
    rng = np.random.default_rng(0)
    for k in (1, len(snaps) // 2, len(snaps) - 1):
        t = starts[snaps.episode[k]] + snaps.elapsed[k]  # the teacher step of snapshot k
        assert np.array_equal(steps[t][0], snaps.obs[k])
        set_states(env, [snaps.state(k)], [1])
        for _, action, reward, next_obs, done in steps[t : t + 15]:
            actions = rng.uniform(-1, 1, (3, *env.single_action_space.shape))
            actions[1] = action
            obs, rewards, terminated, truncated, info = env.step(actions)
            ref, ref_rewards, *_ = control.step(actions)
            got = info["final_obs"][1] if terminated[1] or truncated[1] else obs[1]
            assert np.array_equal(got, next_obs)
            assert rewards[1] == reward
            assert np.array_equal(obs[[0, 2]], ref[[0, 2]])
            assert np.array_equal(rewards[[0, 2]], ref_rewards[[0, 2]])
            if done:
                break
        for i in (0, 2):  # restore into several sub-envs of both: an identical next round
            set_states(control, [snaps.state(0)], [i])
            set_states(env, [snaps.state(0)], [i])
    env.close()
    control.close()


def test_kmeans_on_hand_made_labels():
    labels = np.array([10.0, 0.0, 20.0, 0.2, 10.2, 0.1, 19.0])
    assert kmeans_1d(labels, 3).tolist() == [1, 0, 2, 0, 1, 0, 2]
    assert kmeans_1d(labels, 1).tolist() == [0] * 7
    assert kmeans_1d(np.array([1.0, 1.0, 3.0]), 4).tolist() == [0, 0, 1]  # 2 distinct values
    with pytest.raises(ValueError, match="finite"):
        kmeans_1d(np.array([1.0, np.nan]), 2)


def _snapshots(env_name: str = "Hopper", episodes: int = 3) -> Snapshots:
    probe = make_vec_env(env_name, 1, max_episode_steps=SHORT)
    shape = probe.single_observation_space.shape[0], probe.single_action_space.shape[0]
    probe.close()
    return collect_snapshots(
        env_name, LinearTeacher(*shape), episodes=episodes, every=5, max_episode_steps=SHORT,
        value_fn=lambda obs: obs[:, 1],
    )  # fmt: skip


def test_truncation_after_a_snapshot_start_is_not_termination():
    snaps = _snapshots()
    settings = SnapshotSettings(selection="uniform", truncate_after=4, switch_after=10_000)
    env = make_vec_env("Hopper", 2, max_episode_steps=SHORT, base_wrappers=[
        lambda e: SnapshotReset(e, snaps, settings)])  # fmt: skip
    obs, info = env.reset(seed=0)
    assert info["snapshot_start"].all()
    assert any(np.array_equal(obs[0], row) for row in snaps.obs)
    zeros, ends = np.zeros((2, 3)), 0
    for step in range(1, 5):
        obs, _, terminated, truncated, info = env.step(zeros)
        if terminated.any():  # the task itself ended an episode: a fresh snapshot start
            assert info["snapshot_start"][terminated].all()
        if step < 4:
            assert not truncated.any()
        ends += int((terminated | truncated).sum())
    cut = truncated & ~terminated
    assert cut.any(), "an episode started from a snapshot must be truncated 4 steps later"
    assert info["_final_obs"][cut].all() and info["snapshot_start"][cut].all()
    assert all(any(np.array_equal(obs[i], row) for row in snaps.obs) for i in np.flatnonzero(cut))
    wrapper = env.env  # EpisodeStats -> SnapshotReset
    assert wrapper.metrics()["snapshot/resets"] == 2 + ends


def test_no_truncation_ablation_and_switch_back_to_ordinary_resets():
    snaps = _snapshots()
    settings = SnapshotSettings(selection="uniform", truncate_after=None, switch_after=6)
    env = make_vec_env("Hopper", 2, max_episode_steps=SHORT, base_wrappers=[
        lambda e: SnapshotReset(e, snaps, settings)])  # fmt: skip
    reference = make_vec_env("Hopper", 2, max_episode_steps=SHORT)
    env.reset(seed=0)
    reference.reset(seed=0)
    wrapper = env.env
    assert wrapper.metrics()["snapshot/steps_to_switch"] == 6
    env.step(np.zeros((2, 3)))  # 2 env steps
    env.step(np.zeros((2, 3)))
    assert wrapper.active and wrapper.metrics()["snapshot/steps_to_switch"] == 2
    env.step(np.zeros((2, 3)))
    assert not wrapper.active  # 6 env steps: resets are ordinary from here on
    before, ended = wrapper.metrics()["snapshot/resets"], 0
    assert before >= 2
    for _ in range(SHORT):
        _, _, terminated, truncated, info = env.step(np.zeros((2, 3)))
        assert not info["snapshot_start"].any()
        ended += int((terminated | truncated).sum())
    assert ended >= 2 and wrapper.metrics()["snapshot/resets"] == before


def test_keep_best_and_file_round_trip_and_mismatch(tmp_path):
    snaps = _snapshots(episodes=3)
    best = snaps.keep_best(1)
    top = int(np.argmax(snaps.episode_returns))
    assert set(best.episode.tolist()) == {top} and len(best) == (snaps.episode == top).sum()
    path = snaps.save(tmp_path / "s.npz")
    loaded = Snapshots.load(path)
    assert loaded.env_id == "Hopper-v5" and loaded.max_episode_steps == SHORT
    assert np.array_equal(loaded.integration, snaps.integration)
    assert np.array_equal(loaded.labels, snaps.labels)
    loaded.check_env("Hopper", {}, SHORT)
    with pytest.raises(SnapshotMismatchError, match="env Walker2d-v5 .snapshots: Hopper-v5"):
        loaded.check_env("Walker2d", {}, SHORT)
    with pytest.raises(SnapshotMismatchError, match="max_episode_steps 1000"):
        loaded.check_env("Hopper", {}, 1000)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not an rlcore snapshot file"):
        Snapshots.load(tmp_path / "bad.npz")


def test_set_states_checks_ids():
    env = make_vec_env("Hopper", 2)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="out of range"):
        set_states(env, [{}], [2])
    with pytest.raises(ValueError, match="1 states for 2 env ids"):
        set_states(env, [{}], [0, 1])


TEACHER = REPO / "benchmarks" / "assets" / "hopper_sac_expert.pt"


def test_teacher_checkpoint_labels_are_its_critics_min_q():
    """Snapshots rolled out deterministically from an rlcore SAC checkpoint carry
    min_i Q_i(s, pi(s))."""
    import torch

    from rlcore.policies import load_agent
    from rlcore.teacher import teacher_from_checkpoint

    policy, value_fn, teacher_env = teacher_from_checkpoint(TEACHER, sample=False)
    assert teacher_env["name"].lower() == "hopper"
    snaps = collect_snapshots("Hopper", policy, episodes=1, every=20, value_fn=value_fn,
                              max_episode_steps=100)  # fmt: skip
    agent = load_agent(TEACHER)
    with torch.no_grad():
        obs = torch.as_tensor(snaps.obs, dtype=torch.float32)
        action, _ = agent.actor(obs, deterministic=True, with_log_prob=False)
        q = agent.critic(obs, action).min(0).values.numpy()
    np.testing.assert_allclose(snaps.labels, q, rtol=1e-5)
    assert snaps.episode_returns[0] > 150  # the expert hops (random actions: ~20, falls)


def test_cli_refuses_bad_snapshot_settings(tmp_path):
    from rlcore.config import ConfigError
    from rlcore.train import train

    base = ["algo=sac", "total_steps=600", "algo.learning_starts=100", "snapshot.episodes=1",
            "env.max_episode_steps=50", *FAST]  # fmt: skip
    with pytest.raises(SnapshotMismatchError, match="trained on Hopper-v5"):
        train(make_config(*base, "env=Walker2d", f"snapshot.teacher={TEACHER}"), tmp_path / "a")
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        train(make_config(*base, "env=Hopper", f"snapshot.teacher={tmp_path / 'missing.pt'}"),
              tmp_path / "b")  # fmt: skip
    with pytest.raises(ConfigError, match="selection='best'"):
        train(make_config(*base, "env=Hopper", f"snapshot.teacher={TEACHER}",
                          "snapshot.selection=best"), tmp_path / "c")  # fmt: skip
    with pytest.raises(ConfigError, match="snapshot reset needs an online phase"):
        train(make_config("algo=iql", "env=Hopper", "total_steps=10", "dataset=x",
                          f"snapshot.teacher={TEACHER}", *FAST), tmp_path / "d")  # fmt: skip


@pytest.mark.parametrize(("selection", "share"), [("kmeans", 0.5), ("uniform", 1 / 20)])
def test_a_cluster_uniformly_then_a_snapshot_in_it(selection, share):
    """Labels make one singleton cluster and one of 19: k-means selection starts from the
    singleton half of the time, uniform selection 1 time in 20."""
    snaps = _snapshots(episodes=2)
    snaps = snaps.subset(np.r_[0, 1 + np.arange(19) % (len(snaps) - 1)])  # row 0 once
    snaps.labels = np.r_[100.0, np.zeros(19)]
    settings = SnapshotSettings(selection=selection, clusters=2, switch_after=10**9)
    env = make_vec_env("Hopper", 4, max_episode_steps=SHORT, base_wrappers=[
        lambda e: SnapshotReset(e, snaps, settings)])  # fmt: skip
    hits = 0
    for _ in range(250):
        obs, _ = env.reset()
        hits += sum(np.array_equal(row, snaps.obs[0]) for row in obs)
    assert hits / 1000 == pytest.approx(share, abs=0.05)
    counts = env.env.metrics()
    if selection == "kmeans":  # cluster 1 is the singleton (clusters ascend by label)
        assert counts["snapshot/cluster_1"] == hits


def test_ppo_teacher_labels_are_its_value_of_the_normalised_state(tmp_path):
    """A PPO teacher labels snapshots with V(s) of its own observation normalisation."""
    import torch

    from rlcore.checkpoint import load_checkpoint
    from rlcore.policies import load_agent, obs_transform
    from rlcore.teacher import teacher_from_checkpoint
    from rlcore.train import train

    train(make_config("algo=ppo", "env=Hopper", "total_steps=256", "algo.rollout_steps=128",
                      "algo.normalize_obs=true", "eval_every=256", *FAST), tmp_path)  # fmt: skip
    policy, value_fn, _ = teacher_from_checkpoint(tmp_path)
    snaps = collect_snapshots("Hopper", policy, episodes=1, every=3, value_fn=value_fn,
                              max_episode_steps=30)  # fmt: skip
    state = load_checkpoint(tmp_path)
    assert state["obs_normalizer"] is not None
    agent, transform = load_agent(tmp_path), obs_transform(state)
    with torch.no_grad():
        expected = agent.value(torch.as_tensor(transform(snaps.obs))).numpy()
    np.testing.assert_allclose(snaps.labels, expected, rtol=1e-6)
    assert not np.allclose(snaps.labels, agent.value(torch.as_tensor(snaps.obs).float()).numpy())


def test_fast_td3_teacher_labels_are_the_lower_expected_return(tmp_path):
    """A FastTD3 teacher acts with pi(s) and labels with min_i E[Z_i(s, pi(s))] of its C51
    critics, on the observations as it saw them (its env-side normalisation)."""
    import torch

    from rlcore.checkpoint import load_checkpoint
    from rlcore.policies import load_agent, obs_transform
    from rlcore.teacher import teacher_from_checkpoint
    from rlcore.train import train

    train(make_config("algo=fast_td3", "env=Hopper", "env.num_envs=2", "total_steps=60",
                      "algo.warmup_vector_steps=10", "algo.batch_size=16",
                      "algo.actor_hidden=[16,16]", "algo.critic_hidden=[16,16]",
                      "eval_every=60", *FAST), tmp_path)  # fmt: skip
    policy, value_fn, _ = teacher_from_checkpoint(tmp_path)
    snaps = collect_snapshots("Hopper", policy, episodes=1, every=3, value_fn=value_fn,
                              max_episode_steps=30)  # fmt: skip
    agent, transform = load_agent(tmp_path), obs_transform(load_checkpoint(tmp_path))
    with torch.no_grad():
        obs = torch.as_tensor(transform(snaps.obs)).float()
        probs = torch.softmax(agent.critic(obs, agent.actor(obs)), -1)
        expected = agent.critic.value(probs).min(0).values.numpy()
    assert snaps.labels.shape == expected.shape
    np.testing.assert_allclose(snaps.labels, expected, rtol=1e-5, atol=1e-6)


def test_which_teachers_sample_their_actions():
    """As the reference: SAC and PPO teachers sample, TD3 acts deterministically."""
    from rlcore.teacher import teacher_samples

    assert teacher_samples("sac", {}) and teacher_samples("ppo", {}) and teacher_samples("iql", {})
    assert not teacher_samples("td3", {}) and not teacher_samples("TD3_BC", {})
    assert not teacher_samples("rebrac", {}) and not teacher_samples("fast_td3", {})
    assert not teacher_samples("iql", {"deterministic_actor": True})


def test_sac_teacher_samples_seeded_and_labels_at_a_fresh_sample():
    import torch

    from rlcore.policies import load_agent
    from rlcore.teacher import load_or_collect, teacher_from_checkpoint

    def collect(seed: int) -> Snapshots:
        return load_or_collect(TEACHER, "Hopper", {}, 40, episodes=1, every=10, seed=seed)

    before = torch.get_rng_state()
    first, again, other = collect(0), collect(0), collect(1)
    assert torch.equal(torch.get_rng_state(), before)  # the run's generator is left alone
    np.testing.assert_array_equal(first.obs, again.obs)  # same seed: same snapshots
    np.testing.assert_array_equal(first.labels, again.labels)
    assert not np.array_equal(first.obs[1:], other.obs[1:])  # sampled actions: seed matters
    # the label of a sampling teacher: min_i Q_i(s, a), a a fresh sample of its policy
    _, value_fn, _ = teacher_from_checkpoint(TEACHER)
    agent = load_agent(TEACHER)
    obs = torch.as_tensor(first.obs, dtype=torch.float32)
    torch.manual_seed(7)
    labels = value_fn(first.obs)
    torch.manual_seed(7)
    with torch.no_grad():
        action, _ = agent.actor(obs, with_log_prob=False)
        expected = agent.critic(obs, action).min(0).values.numpy()
        mode, _ = agent.actor(obs, deterministic=True, with_log_prob=False)
        at_mode = agent.critic(obs, mode).min(0).values.numpy()
    np.testing.assert_allclose(labels, expected, rtol=1e-6)
    assert not np.allclose(labels, at_mode, rtol=1e-6)


def test_offline_teacher_labels_see_its_own_obs_normaliser(tmp_path, monkeypatch):
    """An IQL teacher standardises states with its dataset statistics inside ``act`` and
    ``update``: its V(s) labels must be taken on those standardised states."""
    import torch

    from rlcore.offline.recording import collect
    from rlcore.policies import load_agent
    from rlcore.teacher import teacher_from_checkpoint
    from rlcore.train import train

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    collect("Hopper", "random", "local/Hopper/random-v0", steps=120, seed=0, max_episode_steps=40)
    train(make_config("algo=iql", "env=Hopper", "dataset=local/Hopper/random-v0",
                      "total_steps=20", "algo.batch_size=16", *FAST), tmp_path / "run")  # fmt: skip
    agent = load_agent(tmp_path / "run")
    assert not torch.equal(agent.obs_normalizer.std, torch.ones_like(agent.obs_normalizer.std))
    policy, value_fn, _ = teacher_from_checkpoint(tmp_path / "run")
    snaps = collect_snapshots("Hopper", policy, episodes=1, every=3, value_fn=value_fn,
                              max_episode_steps=30)  # fmt: skip
    obs = torch.as_tensor(snaps.obs, dtype=torch.float32)
    with torch.no_grad():
        expected = agent.value(agent.obs_normalizer(obs)).reshape(-1).numpy()
        raw = agent.value(obs).reshape(-1).numpy()
    np.testing.assert_allclose(snaps.labels, expected, rtol=1e-6)
    assert not np.allclose(snaps.labels, raw, rtol=1e-3)


def test_a_snapshot_episode_runs_truncate_after_steps_even_past_the_time_limit():
    """The reference sets the TimeLimit to elapsed + truncate_step: a snapshot taken 2
    steps before the limit still runs its truncate_after = 10 steps."""
    snaps = _snapshots().subset(np.array([0]))  # the teacher's reset state: stands a while
    snaps.elapsed = np.array([SHORT - 2])  # as if taken 2 steps before the time limit
    settings = SnapshotSettings(selection="uniform", truncate_after=10, switch_after=10**9)
    env = make_vec_env("Hopper", 1, max_episode_steps=SHORT, base_wrappers=[
        lambda e: SnapshotReset(e, snaps, settings)])  # fmt: skip
    env.reset(seed=0)
    for step in range(1, 11):
        _, _, terminated, truncated, _ = env.step(np.zeros((1, 3)))
        assert not terminated[0]
        assert truncated[0] == (step == 10), step


def test_a_snapshot_state_saved_before_the_one_path_resumes_exactly():
    """An env checkpoint of the earlier host SnapshotReset (no vector step counters)
    resumes exactly: a snapshot episode still running after the switch back is cut and
    its env reset, as without the interruption."""
    from rlcore.envs.make import get_vec_env_state, set_vec_env_state

    snaps = _snapshots()
    settings = SnapshotSettings(selection="uniform", truncate_after=6, switch_after=8)

    def build():
        env = make_vec_env("Hopper", 2, max_episode_steps=SHORT, base_wrappers=[
            lambda e: SnapshotReset(e, snaps, settings)])  # fmt: skip
        env.reset(seed=0)
        return env

    def run(env) -> list:
        out = []
        for _ in range(10):
            obs, reward, terminated, truncated, info = env.step(np.zeros((2, 3)))
            out.append((obs, reward, terminated, truncated, info["snapshot_start"]))
        return out

    env = build()
    for _ in range(4):  # past the switch (env step 8), before the snapshot episodes' cuts
        env.step(np.zeros((2, 3)))
    assert not env.env.active and (env.env.since_snapshot >= 0).any()
    state = get_vec_env_state(env)
    expected = run(env)
    older = {  # the earlier layout: sub-env states without their observation, too
        "envs": [{k: v for k, v in sub.items() if k != "obs"} for sub in state["envs"]],
        "wrappers": {**state["wrappers"]},
    }
    older["wrappers"]["SnapshotReset"] = {
        k: v for k, v in state["wrappers"]["SnapshotReset"].items()
        if k not in ("vector_steps", "last_snapshot_step")
    }  # fmt: skip
    again = build()
    set_vec_env_state(again, older)
    resumed = run(again)
    assert any((t & ~d).any() for _, _, d, t, _ in expected), "no snapshot episode was cut"
    for got, want in zip(resumed, expected):
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


def test_dict_observation_snapshots_label_as_the_agent_sees_them_and_restart(tmp_path):
    """On a goal task (dict observations) snapshots keep one array per part (a file round
    trip too), a TD3 teacher with the in-agent normaliser labels them with
    min_i Q_i(s, pi(s)) of the flattened parts standardised as its act does (computed here
    by hand), and a restart hands out the snapshot's dict observation."""
    import torch

    from rlcore.checkpoint import load_checkpoint
    from rlcore.envs.backend import backend_of
    from rlcore.observations import GOAL_PARTS
    from rlcore.policies import load_agent
    from rlcore.teacher import teacher_from_checkpoint
    from rlcore.train import train

    train(make_config("algo=td3", "env=PandaReach", "env.backend=sync", "total_steps=200",
                      "algo.learning_starts=100", "algo.batch_size=16", "algo.hidden=[16,16]",
                      "algo.normalize_obs=true", "eval_every=200", *FAST), tmp_path / "t")  # fmt: skip
    policy, value_fn, _ = teacher_from_checkpoint(tmp_path / "t")
    snaps = collect_snapshots("PandaReach", policy, episodes=1, every=10, value_fn=value_fn)
    assert set(snaps.obs) == set(GOAL_PARTS) and len(snaps) == 5  # 50 steps, every 10
    assert snaps.obs["observation"].shape == (5, 6) and snaps.obs["desired_goal"].shape == (5, 3)
    stats = load_checkpoint(tmp_path / "t")["agent"]["obs_statistics"]
    moments = [stats["observation"], stats["achieved_goal"], stats["achieved_goal"]]
    mean = np.concatenate([m["mean"] for m in moments])
    std = np.sqrt(np.concatenate([m["var"] for m in moments]) + 1e-8)
    flat = np.concatenate([snaps.obs[name] for name in GOAL_PARTS], axis=1).astype(np.float64)
    seen = torch.as_tensor(np.clip((flat - mean) / std, -5, 5), dtype=torch.float32)
    agent = load_agent(tmp_path / "t")
    with torch.no_grad():
        expected = agent.critic(seen, agent.actor(seen)).min(0).values.numpy()
    np.testing.assert_allclose(snaps.labels, expected, rtol=1e-5)
    raw = torch.as_tensor(flat, dtype=torch.float32)
    with torch.no_grad():
        unstandardised = agent.critic(raw, agent.actor(raw)).min(0).values.numpy()
    assert not np.allclose(snaps.labels, unstandardised)
    again = Snapshots.load(snaps.save(tmp_path / "s.npz"))
    for name in GOAL_PARTS:
        np.testing.assert_array_equal(again.obs[name], snaps.obs[name])
    env = make_vec_env("PandaReach", 2, seed=0, backend="sync")
    obs, _ = env.reset(seed=0)
    backend = backend_of(env)
    table = backend.state_table([{**snaps.state(k), "obs": snaps.obs_at(k)} for k in range(5)])
    restarted, _ = backend.restart(np.array([False, True]), obs, table, np.array([0, 3]))
    for name in GOAL_PARTS:
        np.testing.assert_array_equal(restarted[name][0], obs[name][0])  # not restarted
        np.testing.assert_array_equal(restarted[name][1], snaps.obs[name][3])
    env.close()


@pytest.mark.parametrize("backend", ["sync", "native"])
def test_a_cut_goal_episode_hands_over_its_final_dict_observation(backend):
    """A snapshot episode of a goal task cut ``truncate_after`` steps in: its final
    observation is one dict per env (as the back ends' own episode ends), holding the goal
    it started from, and the env restarts from a snapshot (a KeyError before)."""
    from rlcore.observations import GOAL_PARTS

    if backend == "native" and not batch_available():
        pytest.skip("MuJoCo without mujoco.batch")
    snaps = collect_snapshots("PandaReach", lambda obs: np.zeros((len(obs["observation"]), 3)),
                              episodes=1, every=10, value_fn=lambda obs: np.zeros(5))  # fmt: skip
    settings = SnapshotSettings(selection="uniform", truncate_after=4, switch_after=10_000)
    env = make_vec_env("PandaReach", 2, seed=0, backend=backend,
                       base_wrappers=[lambda e: SnapshotReset(e, snaps, settings)])  # fmt: skip
    obs, info = env.reset(seed=0)
    goals = obs["desired_goal"].copy()
    assert info["snapshot_start"].all()
    for _ in range(4):
        obs, _, terminated, truncated, info = env.step(np.zeros((2, 3), np.float32))
    cut = truncated & ~terminated
    assert cut.all(), "both episodes began at a snapshot 4 steps ago"
    for i in range(2):
        final = info["final_obs"][i]
        assert set(final) == set(GOAL_PARTS)
        np.testing.assert_array_equal(final["desired_goal"], goals[i])
        assert any(np.array_equal(obs["desired_goal"][i], row) for row in snaps.obs["desired_goal"])
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_restored_robot_task_snapshot_replays_the_teacher_exactly(backend):
    """A robot task's next action reads derived quantities (the end effector's sensor): a
    restored snapshot continues as the teacher did, observation and reward bit for bit, on
    every back end (gymnasium's envs ran from stale sensors before: 3.2 off in a step)."""
    teacher = make_vec_env("PandaPush", 1, backend="sync")
    obs, _ = teacher.reset(seed=0)
    rng = np.random.default_rng(0)
    act_dim = teacher.single_action_space.shape[0]
    states, steps = [], []
    for t in range(20):
        if t % 5 == 0:
            states.append(teacher.unwrapped.call("rlcore_portable_state")[0])
        action = rng.uniform(-1, 1, (1, act_dim)).astype(np.float32)
        obs, reward, *_ = teacher.step(action)
        steps.append((action[0], {name: part[0].copy() for name, part in obs.items()}, reward[0]))
    teacher.close()
    env = make_vec_env("PandaPush", 2, backend=backend)
    env.reset(seed=3)
    for k in (1, 2):
        set_states(env, [states[k]], [1])
        for action, want, reward in steps[5 * k : 5 * k + 5]:
            actions = np.stack([rng.uniform(-1, 1, act_dim).astype(np.float32), action])
            obs, rewards, *_ = env.step(actions)
            for name, part in want.items():
                np.testing.assert_array_equal(obs[name][1], part)
            assert rewards[1] == reward
    env.close()
