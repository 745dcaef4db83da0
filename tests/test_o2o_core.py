"""Offline-to-online core: samplers, named buffer channels, dataset -> buffer, phases."""

import numpy as np
import pytest
import torch

from rlcore.buffers import MixedSampler, ReplayBuffer, draw
from rlcore.offline.datasets import OfflineDataset
from rlcore.types import Batch


class Source:
    """A sampler whose rows all carry its own id (so a batch shows where rows came from)."""

    def __init__(self, ident: float, mc_return: bool = False) -> None:
        self.ident, self.mc_return, self.requests = ident, mc_return, []

    def sample(self, batch_size: int) -> Batch:
        self.requests.append(batch_size)
        full = torch.full((batch_size,), self.ident)
        return Batch(
            obs=full[:, None],
            action=full[:, None],
            reward=full,
            next_obs=full[:, None],
            terminated=torch.zeros(batch_size),
            truncated=torch.zeros(batch_size),
            mc_return=full if self.mc_return else None,
            extras={"tag": full, **({"only_here": full} if self.mc_return else {})},
        )


@pytest.mark.parametrize("batch_size", [1, 2, 3, 7, 10, 256, 257])
def test_mixed_sampler_exact_counts(batch_size):
    a, b, c = Source(0.0), Source(1.0), Source(2.0)
    mixed = MixedSampler([(a, 0.5), (b, 0.3), (c, 0.2)])
    batch = mixed.sample(batch_size)
    assert len(batch) == batch_size
    counts = [int((batch.reward == i).sum()) for i in range(3)]
    # largest remainder: floor of each share, leftovers to the largest fractional parts
    shares = [0.5 * batch_size, 0.3 * batch_size, 0.2 * batch_size]
    assert sum(counts) == batch_size
    assert all(abs(count - share) < 1 for count, share in zip(counts, shares))
    assert counts == mixed.counts(batch_size)
    assert [s.requests[-1] for s, n in zip((a, b, c), counts) if n] == [n for n in counts if n]


def test_mixed_sampler_symmetric_and_hand_cases():
    a, b = Source(0.0), Source(1.0)
    mixed = MixedSampler([(a, 0.5), (b, 0.5)])
    assert mixed.counts(256) == [128, 128]
    assert mixed.counts(5) == [3, 2]  # tie goes to the earlier source
    batch = mixed.sample(256)
    assert batch.reward[:128].eq(0).all() and batch.reward[128:].eq(1).all()
    assert MixedSampler([(a, 1 / 3), (b, 2 / 3)]).counts(10) == [3, 7]
    assert MixedSampler([(a, 0.0), (b, 1.0)]).counts(9) == [0, 9]


def test_mixed_sampler_anneals_and_resumes():
    a, b = Source(0.0), Source(1.0)
    mixed = MixedSampler([(a, 1.0), (b, 0.0)], final_fractions=[0.0, 1.0], anneal_batches=4)
    seen = []
    for _ in range(6):
        seen.append(mixed.counts(8))
        mixed.sample(8)
    assert seen == [[8, 0], [6, 2], [4, 4], [2, 6], [0, 8], [0, 8]]
    restored = MixedSampler([(a, 1.0), (b, 0.0)], final_fractions=[0.0, 1.0], anneal_batches=4)
    mixed.calls = 2
    restored.load_state_dict(mixed.state_dict())
    assert restored.counts(8) == [4, 4]


def test_mixed_sampler_rejects_bad_fractions():
    with pytest.raises(ValueError, match="sum to 1"):
        MixedSampler([(Source(0.0), 0.7), (Source(1.0), 0.7)])
    with pytest.raises(ValueError, match=">= 0"):
        MixedSampler([(Source(0.0), -0.5), (Source(1.0), 1.5)])


def test_mixed_batch_keeps_only_common_channels():
    batch = MixedSampler([(Source(0.0, mc_return=True), 0.5), (Source(1.0), 0.5)]).sample(4)
    assert batch.mc_return is None and set(batch.extras) == {"tag"}
    same = MixedSampler([(Source(0.0, True), 0.5), (Source(1.0, True), 0.5)]).sample(4)
    assert same.mc_return.tolist() == [0.0, 0.0, 1.0, 1.0] and "only_here" in same.extras


def test_draw_keeps_fractions_in_every_minibatch():
    mixed = MixedSampler([(Source(0.0), 0.5), (Source(1.0), 0.5)])
    batch = draw(mixed, 4, minibatches=3)
    assert len(batch) == 12
    for chunk in batch.chunks(3):
        assert chunk.reward.tolist() == [0.0, 0.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="does not split"):
        batch.chunks(5)


def _dataset() -> OfflineDataset:
    """Two episodes: rows 0-2 (truncated at 2), rows 3-4 (terminated at 4)."""
    n = 5
    obs = torch.arange(n, dtype=torch.float32)[:, None].repeat(1, 2)
    return OfflineDataset(
        obs=obs,
        action=torch.arange(n, dtype=torch.float32)[:, None] / 10,
        reward=torch.ones(n),
        next_obs=obs + 0.5,
        terminated=torch.tensor([0.0, 0, 0, 0, 1]),
        truncated=torch.tensor([0.0, 0, 1, 0, 0]),
        episode_id=torch.tensor([0, 0, 0, 1, 1]),
        mc_return=torch.tensor([2.9701, 1.99, 1.0, 1.99, 1.0]),
        episode_return=torch.tensor([3.0, 2.0], dtype=torch.float64),
    )


def test_dataset_to_buffer_keeps_every_channel():
    data = _dataset()
    chunks = torch.arange(len(data) * 6, dtype=torch.float32).reshape(len(data), 3, 2)
    data.add_channel("action_chunks", chunks)
    buffer = data.to_replay_buffer(capacity=10, seed=3)
    assert "mc_return" in buffer.extra_channels
    generator = torch.Generator().manual_seed(7)
    state = generator.get_state()
    from_dataset = data.sample(64, generator=generator)
    generator.set_state(state)
    idx = torch.randint(0, len(data), (64,), generator=generator)
    from_buffer = buffer.batch(idx)
    for name in ("obs", "action", "reward", "next_obs", "terminated", "truncated", "mc_return"):
        assert torch.equal(getattr(from_buffer, name), getattr(from_dataset, name)), name
    assert set(from_buffer.extras) == set(from_dataset.extras)
    assert set(from_dataset.extras) == {"next_action", "has_next_action", "action_chunks"}
    for key in from_dataset.extras:
        assert torch.equal(from_buffer.extras[key], from_dataset.extras[key]), key


def test_online_rows_after_dataset_rows_get_next_actions_and_zero_mc_return():
    buffer = _dataset().to_replay_buffer(capacity=8)
    for t in range(3):  # one online episode of 3 steps, terminated at the last
        obs = np.full((1, 2), 10.0 + t, np.float32)
        buffer.add(obs, [[0.5 + t]], [2.0], obs + 1, [float(t == 2)], [0.0])
    batch = buffer.batch(torch.tensor([4, 5, 6, 7]))
    assert batch.mc_return.tolist() == [1.0, 0.0, 0.0, 0.0]  # online rows: channel left out
    assert batch.extras["has_next_action"].tolist() == [0.0, 1.0, 1.0, 0.0]
    assert batch.extras["next_action"][:, 0].tolist() == pytest.approx([0.4, 1.5, 2.5, 2.5])
    # the newest row of an unfinished episode has no successor yet
    buffer.add(np.zeros((1, 2)), [[9.0]], [0.0], np.zeros((1, 2)), [0.0], [0.0])  # wraps: row 0
    assert buffer.batch(torch.tensor([0])).extras["has_next_action"].tolist() == [0.0]


def test_buffer_channels_roundtrip_and_refuse_unknown():
    buffer = ReplayBuffer(4, (2,), (1,), num_envs=2, channels={"cost": ((), torch.float32)})
    buffer.add(
        np.ones((2, 2)), np.ones((2, 1)), [1, 2], np.ones((2, 2)), [0, 0], [0, 0], cost=[3, 4]
    )
    assert buffer.batch(torch.tensor([0, 1])).cost.tolist() == [3.0, 4.0]
    with pytest.raises(ValueError, match="unknown channel"):
        buffer.add(
            np.ones((2, 2)), np.ones((2, 1)), [1, 2], np.ones((2, 2)), [0, 0], [0, 0], x=[1, 1]
        )
    clone = ReplayBuffer(4, (2,), (1,), num_envs=2, channels={"cost": ((), torch.float32)})
    clone.load_state_dict(buffer.state_dict())
    assert torch.equal(clone.cost, buffer.cost)
    plain = ReplayBuffer(4, (2,), (1,), num_envs=2)
    with pytest.raises(ValueError, match="channels"):
        plain.load_state_dict(buffer.state_dict())


def test_dataset_owns_its_generator():
    data = _dataset().seed(5)
    first = data.sample(16).obs
    state = data.state_dict()
    second = data.sample(16).obs
    data.load_state_dict(state)
    assert torch.equal(data.sample(16).obs, second)
    assert torch.equal(_dataset().seed(5).sample(16).obs, first)


class SpyAgent:
    """Records what the loop asks of it: phases, actions taken, updates and their batches."""

    def __init__(self, action_dim: int) -> None:
        self.action_dim, self.phase, self.events = action_dim, None, []
        self.weight = torch.zeros(1)

    def set_phase(self, name: str) -> None:
        self.phase = name
        self.events.append(("phase", name))

    def act(self, obs, deterministic: bool = False):
        if not deterministic:
            self.events.append(("act", self.phase))
        return np.zeros((*np.shape(obs)[:-1], self.action_dim), np.float32)

    def update(self, batch: Batch) -> dict[str, float]:
        self.weight += 1
        self.events.append(("update", self.phase, len(batch), float(batch.reward.mean())))
        return {"loss": 0.0}

    def state_dict(self) -> dict:
        return {"weight": self.weight.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.weight = state["weight"].clone()


class CountingDataset:
    """Wraps a dataset and remembers the phase each sample was drawn in."""

    def __init__(self, data: OfflineDataset, agent: SpyAgent) -> None:
        self.data, self.agent, self.phases = data, agent, []

    def sample(self, batch_size: int) -> Batch:
        self.phases.append(self.agent.phase)
        return self.data.sample(batch_size)

    def state_dict(self) -> dict:
        return self.data.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.data.load_state_dict(state)


def _phased_run(tmp_path, offline_data: str, online_steps: int = 10):
    from rlcore.envs.make import make_vec_env
    from rlcore.logging import Logger, read_csv
    from rlcore.loops import LoopSettings, Phase, RunContext, run_phases

    env = make_vec_env("InvertedPendulum-v5", 1, seed=0)
    eval_env = make_vec_env("InvertedPendulum-v5", 1, seed=1)
    obs_dim = env.single_observation_space.shape[0]
    n = 50
    data = OfflineDataset(
        obs=torch.zeros(n, obs_dim),
        action=torch.zeros(n, 1),
        reward=torch.full((n,), -7.0),  # online rewards of InvertedPendulum are 0 or 1
        next_obs=torch.zeros(n, obs_dim),
        terminated=torch.zeros(n),
        truncated=torch.eye(n)[-1],
        episode_id=torch.zeros(n, dtype=torch.int64),
        mc_return=torch.zeros(n),
        episode_return=torch.tensor([-7.0 * n], dtype=torch.float64),
    ).seed(0)
    agent = SpyAgent(1)
    dataset = CountingDataset(data, agent)
    buffer = (
        data.to_replay_buffer(n + 40)
        if offline_data == "keep"
        else ReplayBuffer(40, (obs_dim,), (1,))
    )
    sampler = buffer
    if offline_data == "mix":
        sampler = MixedSampler([(dataset, 0.25), (buffer, 0.75)])
    phases = [
        Phase("offline", 5, dataset, batch_size=8),
        Phase("warmup", 6),
        Phase("warmup", 4, random_actions=True),
        Phase("online", online_steps, sampler, batch_size=8, minibatches=2),
    ]
    logger = Logger(tmp_path, tensorboard=False, console=False)
    run = RunContext("spy", logger, save=lambda state: tmp_path)
    settings = LoopSettings(eval_every=1000, eval_episodes=1, checkpoint_every=0)
    run_phases(agent, phases, env, eval_env, settings, run, buffer, {"dataset": dataset})
    logger.close()
    eval_steps = [row["step"] for row in read_csv(tmp_path / "eval.csv")]
    return agent.events, dataset.phases, eval_steps


@pytest.mark.parametrize("offline_data", ["drop", "keep", "mix"])
def test_phases_warmup_makes_no_update_and_dropped_data_is_never_sampled(tmp_path, offline_data):
    events, dataset_draws, eval_steps = _phased_run(tmp_path, offline_data)
    phases = [e[1] for e in events if e[0] == "phase"]
    assert phases == ["offline", "warmup", "warmup", "online"]
    updates = [e for e in events if e[0] == "update"]
    assert [u[1] for u in updates] == ["offline"] * 5 + ["online"] * 10  # none in warm-up
    assert [u[2] for u in updates] == [8] * 5 + [16] * 10  # online: utd_ratio 2 x batch 8
    # the pre-trained policy acts in the first warm-up, random actions in the second
    assert [e[1] for e in events if e[0] == "act"].count("warmup") == 6
    online_rewards = [u[3] for u in updates if u[1] == "online"]
    if offline_data == "drop":
        assert dataset_draws == ["offline"] * 5  # never sampled again after the switch
        assert all(0.0 <= r <= 1.0 for r in online_rewards)
    elif offline_data == "mix":  # per minibatch of 8: 2 dataset rows (-7), 6 online (0/1)
        assert dataset_draws == ["offline"] * 5 + ["online"] * 20
        online_sums = [16 * r + 4 * 7 for r in online_rewards]  # sum of the 12 online rewards
        assert all(0 <= s <= 12 and s == pytest.approx(round(s)) for s in online_sums)
    else:  # keep: uniform over dataset rows and online rows in one buffer
        assert dataset_draws == ["offline"] * 5
        assert any(r < 0.0 for r in online_rewards)
    # evaluations at the end of offline training, the end of the policy warm-up, right
    # after the first online update, and at the end
    assert eval_steps == [5, 11, 16, 25]


def test_a_step_is_evaluated_once(tmp_path):
    """A one-step online phase: its first update is also the run's end; one evaluation."""
    _, _, eval_steps = _phased_run(tmp_path, "drop", online_steps=1)
    assert eval_steps == [5, 11, 16]


def test_dropped_offline_data_leaves_the_online_buffer_to_online_rows(tmp_path):
    """``offline_data=drop`` at the switch to online: the replay buffer of a run's online
    phase holds the online transitions and nothing else. The dataset has 10 + 30 = 40 rows
    (tests/test_reward_transform.py), the online phase 40 env steps: 40 rows in a buffer of
    capacity 40, the six transition fields only (no dataset channel: ``mc_return``). Were
    the dataset kept, its 40 rows would come first: 80 rows, capacity 80."""
    from rlcore.checkpoint import load_checkpoint
    from rlcore.train import train
    from tests.conftest import FAST, make_config
    from tests.test_reward_transform import EPISODES, _write_pendulum_d4rl

    dataset = _write_pendulum_d4rl(tmp_path / "pendulum.hdf5")
    assert sum(EPISODES) == 40
    train(
        make_config(
            "algo=iql", "env=InvertedPendulum", f"dataset={dataset}", "algo.offline_data=drop",
            "total_steps=4", "algo.online_steps=40", "algo.batch_size=8", "algo.hidden=[16,16]",
            "algo.compile=false", "eval_every=1000", *FAST,
        ),
        tmp_path / "run",
    )  # fmt: skip
    buffer = load_checkpoint(tmp_path / "run")["loop"]["stateful"]["buffer"]
    assert (buffer["size"], buffer["capacity"]) == (40, 40)
    assert set(buffer["data"]) == set(ReplayBuffer.FIELDS)


@pytest.mark.parametrize("algo", ["cal_ql", "rebrac"])
def test_cal_ql_and_rebrac_continue_online_from_a_dataset_buffer(algo):
    """A buffer built from a dataset, with online rows appended, feeds the offline
    critics: Cal-QL's bound reads ``mc_return``, ReBRAC's penalty ``next_action``."""
    import gymnasium as gym

    from rlcore import catalog

    spec = catalog.get(algo)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    cfg = spec.config_class(hidden=(16, 16), batch_size=8)
    if algo == "cal_ql":
        cfg.critic_hidden = (16, 16)
    agent = spec.agent_class(obs_space, action_space, cfg)
    buffer = _dataset().to_replay_buffer(capacity=12, seed=0)
    batch = buffer.sample(8)
    assert batch.mc_return is not None and "next_action" in batch.extras
    metrics = agent.update(batch)
    assert all(np.isfinite(v) for v in metrics.values())
    if algo == "cal_ql":
        assert "bound_rate" in metrics  # the calibrated bound ran on the buffer's returns
    for t in range(4):  # online rows: no return-to-go, next actions from the ring
        obs = np.full((1, 2), float(t), np.float32)
        buffer.add(obs, [[0.1 * t]], [1.0], obs + 1, [0.0], [float(t == 3)])
    if algo == "cal_ql":
        agent.set_phase("online")  # calibration off after the switch (CORL)
        assert not agent.calibrate
        mixed = MixedSampler([(_dataset().seed(1), 0.5), (buffer, 0.5)]).sample(8)
        metrics = agent.update(mixed)
    else:
        metrics = agent.update(buffer.batch(torch.arange(5, 9)))
    assert all(np.isfinite(v) for v in metrics.values())


def test_init_from_a_finished_offline_run(tmp_path, monkeypatch):
    """init_from= loads the agent and the dataset setting of an offline run, skips
    pre-training, evaluates the loaded policy at step 0 and runs the online phase."""
    from rlcore.checkpoint import load_checkpoint
    from rlcore.config import ConfigError
    from rlcore.logging import read_csv
    from rlcore.offline.recording import collect
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    collect("Hopper", "random", "local/hopper/random-v0", steps=600, seed=0)
    small = ["env=Hopper", "algo.hidden=[32,32]", "algo.batch_size=32", "eval_every=100",
             "algo.compile=false",
             "env.max_episode_steps=50", *FAST]  # fmt: skip
    train(make_config("algo=iql", "dataset=local/hopper/random-v0", "total_steps=200", *small),
          tmp_path / "offline")  # fmt: skip
    offline_eval = read_csv(tmp_path / "offline" / "eval.csv")[-1]["eval/return"]

    args = ["algo=iql", f"init_from={tmp_path / 'offline'}", "algo.online_steps=300", *small]
    train(make_config(*args), tmp_path / "online")  # no dataset= given: the run's is used
    rows = read_csv(tmp_path / "online" / "eval.csv")
    assert rows[0]["step"] == 0 and rows[0]["eval/return"] == offline_eval
    counters = load_checkpoint(tmp_path / "online")["loop"]["counters"]
    assert counters["step"] == counters["env_steps"] == 300 and counters["updates"] == 300
    with pytest.raises(ConfigError, match="holds a iql agent"):
        train(make_config("algo=cal_ql", f"init_from={tmp_path / 'offline'}",
                          "algo.online_steps=300", *small), tmp_path / "wrong")  # fmt: skip
