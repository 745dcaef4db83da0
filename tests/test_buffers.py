import numpy as np
import pytest
import torch

from rlcore.buffers import ReplayBuffer, RolloutBuffer, compute_gae, next_actions
from rlcore.offline.datasets import OfflineDataset


def _step(buffer: ReplayBuffer, t: int, num_envs: int) -> None:
    # value encodes (step, env) so rows can be identified: 10 * t + env
    ids = np.array([10 * t + i for i in range(num_envs)], dtype=np.float32)
    buffer.add(
        obs=ids[:, None].repeat(3, 1),
        action=ids[:, None].repeat(2, 1),
        reward=ids,
        next_obs=ids[:, None].repeat(3, 1) + 0.5,
        terminated=np.zeros(num_envs),
        truncated=np.zeros(num_envs),
    )


# two episodes: rows 0-2 end terminated (row 2), rows 3-4 end truncated (row 4);
# the action of row i is i, so a next action names the row it came from
NEXT_ACTION = [1.0, 2.0, 2.0, 4.0, 4.0]  # an episode's last row keeps its own action
HAS_NEXT = [1.0, 1.0, 0.0, 1.0, 0.0]
TERMINATED, TRUNCATED = [0.0, 0, 1, 0, 0], [0.0, 0, 0, 0, 1]


def test_next_action_of_two_episodes_by_hand():
    """``next_actions`` and both stores that use it (a replay buffer written step by
    step, an offline dataset with episode ids) give the hand-computed next actions:
    none past a terminal end nor past a truncated one."""
    rows = torch.arange(5)
    action = rows.float()[:, None]
    got = next_actions(action, rows, (rows + 1).clamp(max=4), torch.tensor(HAS_NEXT) > 0)
    assert got["next_action"][:, 0].tolist() == NEXT_ACTION
    assert got["has_next_action"].tolist() == HAS_NEXT
    buffer = ReplayBuffer(8, (1,), (1,), next_action=True)
    for i in range(5):
        buffer.add([[i]], [[i]], [0.0], [[i]], [TERMINATED[i]], [TRUNCATED[i]])
    dataset = OfflineDataset(
        obs=action, action=action, reward=torch.zeros(5), next_obs=action,
        terminated=torch.tensor(TERMINATED), truncated=torch.tensor(TRUNCATED),
        episode_id=torch.tensor([0, 0, 0, 1, 1]), mc_return=torch.zeros(5),
        episode_return=torch.zeros(2, dtype=torch.float64),
    )  # fmt: skip
    for batch in (buffer.batch(rows), dataset.sample(64), dataset.to_replay_buffer().sample(64)):
        row = batch.action[:, 0].long()
        assert batch.extras["next_action"][:, 0].tolist() == [NEXT_ACTION[i] for i in row]
        assert batch.extras["has_next_action"].tolist() == [HAS_NEXT[i] for i in row]


def test_num_envs_layout_and_wraparound():
    buffer = ReplayBuffer(capacity=7, obs_shape=(3,), action_shape=(2,), num_envs=3)
    for t in range(2):
        _step(buffer, t, 3)
    assert len(buffer) == 6 and buffer.pos == 6
    # env i at step t is row t * num_envs + i
    assert buffer.reward[:6].tolist() == [0, 1, 2, 10, 11, 12]
    _step(buffer, 2, 3)  # rows 6, 0, 1 (wraps)
    assert len(buffer) == 7 and buffer.pos == 2
    assert buffer.reward.tolist() == [21, 22, 2, 10, 11, 12, 20]
    assert buffer.obs[0].tolist() == [21, 21, 21]
    assert buffer.next_obs[6].tolist() == [20.5, 20.5, 20.5]
    assert buffer.action[1].tolist() == [22, 22]


def test_sample_is_consistent_rows_and_seeded():
    a = ReplayBuffer(100, (3,), (2,), num_envs=2, seed=5)
    b = ReplayBuffer(100, (3,), (2,), num_envs=2, seed=5)
    for t in range(10):
        _step(a, t, 2)
        _step(b, t, 2)
    batch_a, batch_b = a.sample(32), b.sample(32)
    assert torch.equal(batch_a.reward, batch_b.reward)
    assert batch_a.obs.shape == (32, 3) and batch_a.action.shape == (32, 2)
    assert batch_a.reward.shape == (32,) and batch_a.terminated.shape == (32,)
    # every field of a sampled row comes from the same transition
    assert torch.equal(batch_a.obs[:, 0], batch_a.reward)
    assert torch.equal(batch_a.next_obs[:, 0], batch_a.reward + 0.5)
    assert set(batch_a.reward.tolist()) <= {10 * t + i for t in range(10) for i in range(2)}


def test_state_dict_round_trip_continues_identically():
    a = ReplayBuffer(8, (3,), (2,), num_envs=2, seed=1)
    for t in range(3):
        _step(a, t, 2)
    a.sample(4)
    b = ReplayBuffer(8, (3,), (2,), num_envs=2, seed=99)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.sample(16).reward, b.sample(16).reward)
    _step(a, 3, 2)
    _step(b, 3, 2)
    _step(a, 4, 2)
    _step(b, 4, 2)
    assert torch.equal(a.reward, b.reward) and a.pos == b.pos == 2


def test_bad_input_raises():
    buffer = ReplayBuffer(8, (3,), (2,), num_envs=2)
    with pytest.raises(ValueError, match="num_envs"):
        buffer.add(
            np.zeros((3, 3)),
            np.zeros((3, 2)),
            np.zeros(3),
            np.zeros((3, 3)),
            np.zeros(3),
            np.zeros(3),
        )
    with pytest.raises(RuntimeError, match="empty"):
        buffer.sample(2)
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(1, (3,), (2,), num_envs=2)


def test_gae_hand_computed_truncation_bootstraps_termination_does_not():
    gamma, lam = 0.9, 0.5
    # one env, 4 steps: step 1 ends by truncation (bootstrap 10), step 3 by termination
    rewards = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
    values = torch.tensor([[0.5], [1.0], [2.0], [3.0]])
    terminated = torch.tensor([[0.0], [0.0], [0.0], [1.0]])
    truncated = torch.tensor([[0.0], [1.0], [0.0], [0.0]])
    bootstrap = torch.tensor([[0.0], [10.0], [0.0], [0.0]])
    last = torch.tensor([7.0])
    adv, ret = compute_gae(rewards, values, terminated, truncated, bootstrap, last, gamma, lam)
    # by hand, backwards:
    d3 = 4.0 + 0.0 - 3.0  # terminal: no bootstrap
    a3 = d3
    d2 = 3.0 + 0.9 * 3.0 - 2.0
    a2 = d2 + 0.9 * 0.5 * a3
    d1 = 2.0 + 0.9 * 10.0 - 1.0  # truncated: bootstrap from V(final obs) = 10
    a1 = d1  # episode ends: no carry-over from the next episode
    d0 = 1.0 + 0.9 * 1.0 - 0.5
    a0 = d0 + 0.9 * 0.5 * a1
    expected = torch.tensor([[a0], [a1], [a2], [a3]])
    assert torch.allclose(adv, expected)
    assert torch.allclose(ret, expected + values)


def test_gae_uses_last_value_when_rollout_ends_mid_episode():
    adv, _ = compute_gae(
        torch.tensor([[1.0]]),
        torch.tensor([[2.0]]),
        torch.zeros(1, 1),
        torch.zeros(1, 1),
        torch.zeros(1, 1),
        torch.tensor([5.0]),
        0.99,
        0.95,
    )
    assert adv.item() == pytest.approx(1.0 + 0.99 * 5.0 - 2.0)


def test_rollout_buffer_flattens_and_checks_completeness():
    buffer = RolloutBuffer(num_steps=3, num_envs=2, obs_shape=(4,), action_shape=(1,))
    with pytest.raises(RuntimeError, match="incomplete"):
        buffer.compute(np.zeros(2), 0.99, 0.95)
    for t in range(3):
        buffer.add(
            np.full((2, 4), t),
            np.full((2, 1), t),
            np.zeros(2),
            np.ones(2),
            np.zeros(2),
            np.zeros(2),
            np.zeros(2),
            np.zeros(2),
        )
    with pytest.raises(RuntimeError, match="full"):
        buffer.add(
            np.zeros((2, 4)),
            np.zeros((2, 1)),
            np.zeros(2),
            np.ones(2),
            np.zeros(2),
            np.zeros(2),
            np.zeros(2),
            np.zeros(2),
        )
    batch = buffer.compute(np.zeros(2), 0.99, 0.95)
    assert batch.obs.shape == (6, 4) and batch.advantage.shape == (6,)
    assert batch.obs[:, 0].tolist() == [0, 0, 1, 1, 2, 2]


def test_rollout_buffer_add_converts_numpy_torch_and_bools():
    """What the on-policy loop hands in: torch tensors from the policy, float64 rewards and
    bool flags from the env; all stored as float32 in place."""
    buffer = RolloutBuffer(num_steps=1, num_envs=2, obs_shape=(3,), action_shape=(2,))
    buffer.add(
        torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
        torch.tensor([[0.5, -0.5], [0.25, -0.25]]),
        torch.tensor([-1.0, -2.0]),
        np.array([1.5, -2.5], dtype=np.float64),
        [0.1, 0.2],
        np.array([True, False]),
        np.array([False, True]),
        np.array([0.0, 7.0], dtype=np.float32),
    )
    assert buffer.obs[0].tolist() == [[1, 2, 3], [4, 5, 6]]
    assert buffer.action[0].tolist() == [[0.5, -0.5], [0.25, -0.25]]
    assert buffer.reward[0].tolist() == [1.5, -2.5] and buffer.reward.dtype == torch.float32
    assert buffer.value[0].tolist() == pytest.approx([0.1, 0.2])
    assert buffer.terminated[0].tolist() == [1.0, 0.0]
    assert buffer.truncated[0].tolist() == [0.0, 1.0]
    assert buffer.bootstrap_value[0].tolist() == [0.0, 7.0]
    with pytest.raises(RuntimeError, match="shape"):  # a wrong number of envs is refused
        RolloutBuffer(1, 2, (3,), (2,)).add(*(np.zeros((3, 3)),) * 8)


def test_load_into_larger_buffer_keeps_chronological_order():
    small = ReplayBuffer(4, (3,), (2,), num_envs=1)
    for t in range(6):  # wraps: holds steps 2, 3, 4, 5 with pos = 2
        _step(small, t, 1)
    big = ReplayBuffer(10, (3,), (2,), num_envs=1)
    big.load_state_dict(small.state_dict())
    assert len(big) == 4 and big.pos == 4
    assert big.reward[:4].tolist() == [20, 30, 40, 50]
    _step(big, 6, 1)
    assert big.reward[4].item() == 60
    with pytest.raises(ValueError, match="buffer_size"):
        ReplayBuffer(3, (3,), (2,)).load_state_dict(small.state_dict())


def test_minibatch_indices_cover_every_row_once_and_never_leave_one_row_alone():
    from rlcore.buffers import minibatch_indices

    torch.manual_seed(0)
    pieces = minibatch_indices(100, 33)  # 33 + 33 + 33 + 1: the lone row joins the third
    assert [len(p) for p in pieces] == [33, 33, 34]
    assert sorted(torch.cat(pieces).tolist()) == list(range(100))
    assert [len(p) for p in minibatch_indices(96, 32)] == [32, 32, 32]
    assert [len(p) for p in minibatch_indices(1, 32)] == [1]  # nothing to merge with
    # one randperm per epoch, as the loops drew before
    torch.manual_seed(1)
    expected = torch.randperm(10)
    torch.manual_seed(1)
    assert torch.equal(torch.cat(minibatch_indices(10, 4)), expected)
    with pytest.raises(ValueError, match="rows >= 1"):
        minibatch_indices(0, 4)
