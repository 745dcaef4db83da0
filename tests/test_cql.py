"""CQL and Cal-QL: the penalty and the calibrated bound against hand computations, the
update contract (finite metrics, every parameter moves, NaN stops before any change),
state-dict round trips, acting on raw observations, initialisation and configs."""

import copy
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from rlcore.algos.cal_ql import CalQL, CalQLConfig
from rlcore.algos.cql import CQL, CQLConfig, cql_gap
from rlcore.offline.datasets import OfflineDataset
from rlcore.types import Batch
from rlcore.utils import NonFiniteLossError
from tests.test_algos_contract import ACT, OBS, random_batch

REPO = Path(__file__).resolve().parents[1]
SMALL = {"hidden": (16, 16), "critic_hidden": (16, 16), "cql_n_actions": 4}


def make(cls=CQL, **overrides):
    config_class = CalQLConfig if cls is CalQL else CQLConfig
    return cls(OBS, ACT, config_class(**{**SMALL, "fused_optimizer": False, **overrides}))


def assert_same(a, b, path="state"):
    """Recursive equality of (nested) state dicts: tensors exactly, other values by ==."""
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            assert_same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def with_field(batch: Batch, **fields) -> Batch:
    return Batch(**{**batch.__dict__, **fields})


# ------------------------------------------------------------------ the penalty by hand


def lse(values):
    return math.log(sum(math.exp(v) for v in values))


GAP_CASE = {  # E = 1 critic, B = 2 states, N = 2 actions per kind
    "q_data": torch.tensor([[1.0, -2.0]]),
    "q_rand": torch.tensor([[[0.5, -1.0], [0.0, 0.0]]]),
    "q_next": torch.tensor([[[2.0, 0.0], [-3.0, 1.0]]]),
    "q_cur": torch.tensor([[[1.5, 3.0], [0.5, -1.5]]]),
    "log_density_rand": -math.log(8.0),
    "log_pi_next": torch.tensor([[0.2, -0.3], [0.0, 1.0]]),
    "log_pi_cur": torch.tensor([[1.0, -2.0], [-1.0, 0.5]]),
}


def test_cql_gap_importance_sampled_hand_computed():
    l8 = math.log(8.0)
    row0 = lse([0.5 + l8, -1.0 + l8, 2.0 - 0.2, 0.0 + 0.3, 1.5 - 1.0, 3.0 + 2.0]) - 1.0
    row1 = lse([0.0 + l8, 0.0 + l8, -3.0 - 0.0, 1.0 - 1.0, 0.5 + 1.0, -1.5 - 0.5]) + 2.0
    diff = cql_gap(**GAP_CASE)
    assert diff.shape == (1,)
    assert diff.item() == pytest.approx((row0 + row1) / 2, rel=1e-6)
    clipped = cql_gap(**GAP_CASE, clip=(-math.inf, 3.0))  # row1 (~7.3) is clipped to 3
    assert clipped.item() == pytest.approx((min(row0, 3.0) + 3.0) / 2, rel=1e-6)


def test_cql_gap_without_importance_sampling_includes_data_q_and_temperature():
    def tlse(values, t):
        return t * lse([v / t for v in values])

    row0 = tlse([0.5, -1.0, 1.0, 2.0, 0.0, 1.5, 3.0], 2.0) - 1.0
    row1 = tlse([0.0, 0.0, -2.0, -3.0, 1.0, 0.5, -1.5], 2.0) + 2.0
    diff = cql_gap(**GAP_CASE, temp=2.0, importance_sample=False)
    assert diff.item() == pytest.approx((row0 + row1) / 2, rel=1e-6)


def test_cql_gap_calibrated_bounds_only_policy_actions():
    """Cal-QL: Q of policy actions -> max(Q, mc_return) before the log pi subtraction;
    random and data values untouched."""
    l8 = math.log(8.0)
    bound = torch.tensor([2.5, -10.0])  # active on row 0, never on row 1
    row0 = lse([0.5 + l8, -1.0 + l8, 2.5 - 0.2, 2.5 + 0.3, 2.5 - 1.0, 3.0 + 2.0]) - 1.0
    row1 = lse([0.0 + l8, 0.0 + l8, -3.0 - 0.0, 1.0 - 1.0, 0.5 + 1.0, -1.5 - 0.5]) + 2.0
    diff = cql_gap(**GAP_CASE, lower_bound=bound)
    assert diff.item() == pytest.approx((row0 + row1) / 2, rel=1e-6)
    assert diff.item() > cql_gap(**GAP_CASE).item()


# ------------------------------------------- one update of a hand-built agent, by hand

C, D = (1.0, -0.5), (0.0, 0.3)  # critic e: Q_e(s, a) = C[e] * sum(a) + G . s + D[e]
G = np.array([0.1, -0.2, 0.3, 0.0, 0.5])
W = np.array(  # the policy's pre-tanh mean is W s + MEAN; its log_std is -1
    [[0.1, -0.2, 0.0, 0.3, 0.1], [0.0, 0.2, -0.1, 0.0, 0.2], [-0.3, 0.0, 0.1, 0.1, 0.0]]
)
MEAN = np.array([0.2, -0.4, 0.6])
N = 2


def hand_built(cls, monkeypatch, **overrides):
    """Linear critics and a linear-mean policy with the sampling noise switched off
    (randn -> 0, uniform -> 0.25), so every value of the update is known in closed form."""
    agent = make(cls, hidden=(), critic_hidden=(), cql_n_actions=N, **overrides)
    with torch.no_grad():
        out = agent.critic.net.output_layer
        out.weight[:, :5, 0] = torch.tensor(G, dtype=torch.float32)
        out.weight[:, 5:, 0] = torch.tensor(C)[:, None]
        out.bias[:, 0, 0] = torch.tensor(D)
        agent.target_critic.load_state_dict(agent.critic.state_dict())
        layer = agent.actor.net[-1]
        layer.weight.zero_()
        layer.weight[:3] = torch.tensor(W, dtype=torch.float32)
        layer.bias.copy_(torch.tensor([*MEAN, 0.0, 0.0, 0.0]))
    monkeypatch.setattr(torch, "randn_like", torch.zeros_like)
    monkeypatch.setattr(torch, "rand", lambda *size, **kw: torch.full(size, 0.25))
    return agent


def expected_update(batch, bound=None):
    low, high = ACT.low.astype(np.float64), ACT.high.astype(np.float64)
    scale, center = (high - low) / 2, (high + low) / 2
    obs, next_obs = batch.obs.double().numpy(), batch.next_obs.double().numpy()

    def policy(states):
        squashed = np.tanh(states @ W.T + MEAN)
        log_pi = np.sum(1.0 - 0.5 * math.log(2 * math.pi) - np.log(1 - squashed**2), -1)
        return center + scale * squashed, log_pi - np.log(scale).sum()

    def q(e, states, actions):
        return C[e] * actions.sum(-1) + states @ G + D[e]

    a_cur, log_pi_cur = policy(obs)
    a_next, log_pi_next = policy(next_obs)
    a_rand = np.broadcast_to(low + 0.25 * (high - low), a_cur.shape)
    data = batch.action.double().numpy()
    q_next_target = np.minimum(q(0, next_obs, a_next), q(1, next_obs, a_next))
    target = batch.reward.double().numpy() + 0.99 * (1 - batch.terminated.double().numpy()) * (
        q_next_target
    )
    td, diffs = 0.0, []
    for e in range(2):
        pi_next, pi_cur = q(e, obs, a_next), q(e, obs, a_cur)  # both scored at s
        if bound is not None:
            pi_next, pi_cur = np.maximum(pi_next, bound), np.maximum(pi_cur, bound)
        rand = q(e, obs, a_rand) + math.log(np.prod(high - low))
        ood = [
            lse([rand[b]] * N + [pi_next[b] - log_pi_next[b]] * N + [pi_cur[b] - log_pi_cur[b]] * N)
            for b in range(len(obs))
        ]
        diffs.append(np.mean(np.array(ood) - q(e, obs, data)))
        td += np.mean((q(e, obs, data) - target) ** 2)
    q_pi = np.minimum(q(0, obs, a_cur), q(1, obs, a_cur))
    return {
        "td_loss": td,
        "cql_diff": np.mean(diffs),
        "cql_penalty": 10.0 * sum(diffs),
        "critic_loss": td + 10.0 * sum(diffs),
        "actor_loss": np.mean(log_pi_cur - q_pi),  # alpha = 1
        "entropy": -np.mean(log_pi_cur),
        "target_q": np.mean(target),
    }


def test_cql_update_hand_computed(monkeypatch):
    """Penalty: N uniform actions in the env box (log U = -log 4 here), N from pi(s'), N from
    pi(s), all scored at s, importance-weighted, summed over both critics with weight 10;
    plus the TD loss and the policy loss, all from the same hand-built agent."""
    batch = random_batch(8, seed=1)
    agent = hand_built(CQL, monkeypatch)
    metrics = agent.update(batch)
    for key, value in expected_update(batch).items():
        assert metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-5), key


@pytest.mark.parametrize("mc_return", [100.0, -100.0])
def test_cal_ql_bound_hand_computed(monkeypatch, mc_return):
    """mc_return far above Q raises the penalty to the bounded hand value; far below it,
    Cal-QL equals CQL exactly."""
    batch = random_batch(8, seed=1)
    batch = with_field(batch, mc_return=torch.full((8,), mc_return))
    cql_metrics = hand_built(CQL, monkeypatch).update(batch)
    cal_metrics = hand_built(CalQL, monkeypatch).update(batch)
    expected = expected_update(batch, bound=mc_return)
    assert cal_metrics["cql_penalty"] == pytest.approx(expected["cql_penalty"], rel=1e-5)
    if mc_return > 0:
        assert cal_metrics["cql_penalty"] > cql_metrics["cql_penalty"] + 1000
        assert cal_metrics["bound_rate"] == 1.0
    else:
        assert cal_metrics["cql_penalty"] == cql_metrics["cql_penalty"]
        assert cal_metrics["bound_rate"] == 0.0
    assert "bound_rate" not in cql_metrics


def test_cal_ql_calibration_switched_off_is_cql(monkeypatch):
    batch = with_field(random_batch(8, seed=1), mc_return=torch.full((8,), 100.0))
    agent = hand_built(CalQL, monkeypatch)
    agent.calibrate = False
    metrics = agent.update(batch)
    assert metrics["cql_penalty"] == pytest.approx(expected_update(batch)["cql_penalty"], rel=1e-5)
    assert "bound_rate" not in metrics


def test_cql_lagrange_penalty_uses_multiplier_before_its_step(monkeypatch):
    """alpha' = e (log alpha' starts at 1): penalty = e * 10 * sum_i (diff_i - gap), and
    alpha' moves up when diff > gap."""
    batch = random_batch(8, seed=1)
    agent = hand_built(CQL, monkeypatch, cql_lagrange=True, cql_target_action_gap=0.5)
    metrics = agent.update(batch)
    diff_sum = 2 * expected_update(batch)["cql_diff"]
    assert metrics["alpha_prime"] == pytest.approx(math.e, rel=1e-6)
    assert metrics["cql_penalty"] == pytest.approx(math.e * 10 * (diff_sum - 2 * 0.5), rel=1e-5)
    assert agent.log_alpha_prime.item() > 1.0


@pytest.mark.parametrize(
    "scale,bias,reward,mc_return",
    [
        # r x 10: rewards [10, 20, 30 | 40, 60], returns-to-go
        # 10 + 0.5 * 20 + 0.25 * 30 = 27.5, 20 + 0.5 * 30 = 35, 30 | 40 + 0.5 * 60 = 70, 60
        (10.0, 0.0, [10.0, 20.0, 30.0, 40.0, 60.0], [27.5, 35.0, 30.0, 70.0, 60.0]),
        # r x 10 - 5 (Cal-QL's antmaze recipe): rewards [5, 15, 25 | 35, 55], returns-to-go
        # 5 + 0.5 * 15 + 0.25 * 25 = 18.75, 15 + 0.5 * 25 = 27.5, 25 | 35 + 0.5 * 55 = 62.5, 55
        (10.0, -5.0, [5.0, 15.0, 25.0, 35.0, 55.0], [18.75, 27.5, 25.0, 62.5, 55.0]),
    ],
)
def test_cal_ql_mc_return_is_the_discounted_sum_of_the_scaled_rewards(
    scale, bias, reward, mc_return
):
    """Cal-QL bounds Q of policy actions below by ``batch.mc_return``, so after the recipe's
    r <- scale r + bias (``reward_scale`` / ``reward_bias``) the dataset's returns-to-go must
    be those of the new rewards. A 3-step episode (truncated) and a 2-step one
    (terminated), rewards [1, 2, 3 | 4, 6], gamma 0.5: returns-to-go before
    [1 + 0.5 * 2 + 0.25 * 3 = 2.75, 3.5, 3 | 7, 6]."""
    data = OfflineDataset(
        obs=torch.zeros(5, 1), action=torch.zeros(5, 1),
        reward=torch.tensor([1.0, 2.0, 3.0, 4.0, 6.0]), next_obs=torch.zeros(5, 1),
        terminated=torch.tensor([0.0, 0, 0, 0, 1]), truncated=torch.tensor([0.0, 0, 1, 0, 0]),
        episode_id=torch.tensor([0, 0, 0, 1, 1]),
        mc_return=torch.tensor([2.75, 3.5, 3.0, 7.0, 6.0]),
        episode_return=torch.tensor([6.0, 10.0], dtype=torch.float64), gamma=0.5,
    )  # fmt: skip
    data.scale_rewards(scale, bias)
    assert data.reward.tolist() == reward
    assert data.mc_return.tolist() == pytest.approx(mc_return, abs=1e-5)
    assert data.episode_return.tolist() == [6.0, 10.0]  # the recorded returns stay raw
    # every row of a batch Cal-QL samples pairs its scaled reward with its own return-to-go
    batch = data.seed(0).sample(32)
    row_of = {r: m for r, m in zip(reward, mc_return)}
    assert batch.mc_return.tolist() == pytest.approx([row_of[r] for r in batch.reward.tolist()])


# --------------------------------------------------------------------- update contract

VARIANTS = {
    "cql": lambda: make(),
    "cal_ql": lambda: make(CalQL),
    "lagrange_max_backup": lambda: make(
        cql_lagrange=True, cql_max_target_backup=True, backup_entropy=True
    ),
    "no_is_bc": lambda: make(cql_importance_sample=False, bc_steps=5, network_init="default"),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_update_finite_metrics_and_every_parameter_moves(name):
    torch.manual_seed(0)
    agent = VARIANTS[name]()
    before = copy.deepcopy(agent.state_dict())
    metrics = agent.update(random_batch(32))
    assert metrics and all(math.isfinite(v) for v in metrics.values()), metrics
    after = agent.state_dict()
    for part in ["actor", "critic", "target_critic"]:
        for key, value in before[part].items():
            if key.startswith("to_env"):
                continue
            assert not torch.equal(value, after[part][key]), f"{part}.{key} did not move"
    assert not torch.equal(before["log_alpha"], after["log_alpha"])
    moved_prime = not torch.equal(before["log_alpha_prime"], after["log_alpha_prime"])
    assert moved_prime == agent.config.cql_lagrange
    assert agent.updates == 1


@pytest.mark.parametrize("name", ["cal_ql", "lagrange_max_backup"])
def test_state_dict_round_trip_gives_identical_next_update(name):
    torch.manual_seed(0)
    agent = VARIANTS[name]()
    agent.update(random_batch(32, seed=1))
    agent.calibrate = name != "cal_ql"  # the flag travels (Cal-QL switched off, CQL on)
    clone = VARIANTS[name]()
    clone.load_state_dict(copy.deepcopy(agent.state_dict()))
    assert clone.calibrate == agent.calibrate and clone.updates == 1
    torch.manual_seed(5)
    m1 = agent.update(random_batch(32, seed=3))
    torch.manual_seed(5)
    m2 = clone.update(random_batch(32, seed=3))
    assert m1 == m2
    assert_same(agent.state_dict(), clone.state_dict())


@pytest.mark.parametrize("field", ["reward", "mc_return"])
def test_nan_raises_before_any_parameter_changes(field):
    torch.manual_seed(0)
    agent = make(CalQL, cql_lagrange=True)
    agent.update(random_batch(32))  # optimiser states exist, so they are compared too
    batch = random_batch(32, seed=1)
    bad = with_field(batch, **{field: getattr(batch, field).clone().fill_(float("nan"))})
    before = copy.deepcopy(agent.state_dict())
    with pytest.raises(NonFiniteLossError, match="critic_loss"):
        agent.update(bad)
    assert_same(before, agent.state_dict())


def test_cal_ql_without_mc_return_is_a_clear_error():
    agent = make(CalQL)
    with pytest.raises(ValueError, match="mc_return"):
        agent.update(with_field(random_batch(8), mc_return=None))
    make().update(with_field(random_batch(8), mc_return=None))  # plain CQL does not need it


@pytest.mark.parametrize("cls", [CQL, CalQL])
def test_act_on_raw_observations_inside_the_box(cls):
    torch.manual_seed(0)
    agent = make(cls)
    raw = np.full(5, 50.0, np.float32)
    before = agent.act(raw, deterministic=True)
    agent.obs_normalizer.fit(torch.full((10, 5), 50.0) + torch.randn(10, 5))
    assert not np.allclose(before, agent.act(raw, deterministic=True))  # sees normalised inputs
    many = np.random.default_rng(0).normal(50.0, 100.0, size=(7, 5)).astype(np.float32)
    for deterministic in (True, False):
        single = agent.act(raw, deterministic=deterministic)
        batched = agent.act(many, deterministic=deterministic)
        assert single.shape == (3,) and batched.shape == (7, 3)
        assert batched.dtype == np.float32
        for action in (single, batched):
            assert (action >= ACT.low).all() and (action <= ACT.high).all()
    # the default samples (as in every agent); deterministic=True gives the mode
    assert not np.allclose(agent.act(raw), agent.act(raw))
    np.testing.assert_array_equal(agent.act(raw, deterministic=True), agent.act(raw, True))


# ------------------------------------------------------------------ networks and configs


def test_network_init_schemes():
    cql, cal = CQL(OBS, ACT), CalQL(OBS, ACT)
    hidden = cql.critic.net.hidden_layers[1].weight[1]  # (in, out) of member 1
    assert torch.allclose(hidden.T @ hidden, 2.0 * torch.eye(256), atol=1e-4)
    assert len(cql.critic.net.hidden_layers) == 3 and len(cal.critic.net.hidden_layers) == 2
    assert len(cql.actor.net) == len(cal.actor.net) == 7  # 3 hidden layers of 256
    out = cql.critic.net.output_layer.weight  # orthogonal gain 1e-2: unit-norm * 1e-2
    assert torch.allclose(out.norm(dim=1), torch.full_like(out.norm(dim=1), 1e-2))
    actor_out = cql.actor.net[-1]  # Xavier-uniform gain 1e-2, bias 0
    assert actor_out.weight.abs().max() <= 1e-2 * math.sqrt(6 / (256 + 6))
    assert not actor_out.bias.any()
    first = cql.actor.net[0].weight  # default nn.Linear init
    assert first.abs().max() <= 1 / math.sqrt(5) and first.abs().max() > 0.3
    cal_out = cal.actor.net[-1].weight  # Cal-QL: orthogonal gain sqrt(2) everywhere
    assert torch.allclose(cal_out @ cal_out.T, 2.0 * torch.eye(6), atol=1e-4)
    assert cql.actor.log_std_multiplier.item() == 1.0 and cql.actor.log_std_offset.item() == -1.0
    with pytest.raises(ValueError, match="network_init"):
        CQL(OBS, ACT, CQLConfig(network_init="he"))


def write_sparse_rows(path, rows: dict):
    """A D4RL hdf5 file of a golden file's rows (rewards, terminals, timeouts), with
    observations that continue inside an episode."""
    import h5py

    n = len(rows["rewards"])
    with h5py.File(path, "w") as f:
        f.create_dataset("observations", data=np.stack([np.arange(n), np.zeros(n)], 1)
                         .astype(np.float32))  # fmt: skip
        f.create_dataset("next_observations", data=np.stack([np.arange(n) + 1, np.zeros(n)], 1)
                         .astype(np.float32))  # fmt: skip
        f.create_dataset("actions", data=np.zeros((n, 1), np.float32))
        for key in ("rewards", "terminals", "timeouts"):
            f.create_dataset(key, data=np.asarray(rows[key], np.float32))
    return path


@pytest.mark.parametrize("sparse", [True, False])
def test_cal_ql_sparse_reward_returns_match_corl(tmp_path, sparse):
    """CORL's get_return_to_go on AntMaze-style rewards (0 / 1, scaled to -5 / 5): with
    is_sparse_reward every row of an episode that ends on the failure reward gets
    -5 / (1 - 0.99) = -500, otherwise the discounted sums; ours on the same rows through the
    D4RL loader, the plan's reward transform and ``fail_sparse_episodes``."""
    import json

    from rlcore.offline.datasets import load_dataset
    from tests.conftest import REPO

    golden = json.loads((REPO / "tests/golden/cal_ql_sparse_returns.json").read_text())
    rows = golden["rows"]
    path = write_sparse_rows(tmp_path / "sparse.hdf5", rows)
    config = CalQLConfig(sparse_reward=sparse, reward_scale=10.0, reward_bias=-5.0)
    data = config.plan().data
    assert data.sparse_failure_reward == (-5.0 if sparse else None)
    dataset = load_dataset(path, gamma=golden["meta"]["gamma"])
    dataset.scale_rewards(data.reward_scale, data.reward_bias)
    if sparse:
        assert dataset.fail_sparse_episodes(data.sparse_failure_reward) == 3
    expected = golden["mc_returns"][f"sparse_{str(sparse).lower()}"]
    np.testing.assert_allclose(dataset.mc_return.numpy(), expected, rtol=2e-6, atol=1e-5)


@pytest.mark.parametrize("rule, marked, expected", [
    ("last", 2, [-10.0, -10.0, -10.0, -10.0, -10.0]),
    ("all", 1, [-3.75, 2.5, -5.0, -10.0, -10.0]),
])  # fmt: skip
def test_sparse_failure_rules_by_hand(tmp_path, rule, marked, expected):
    """Rewards -5 / 5 (after the transform), gamma 0.5; episode A = -5, 5, -5 (the goal
    reached on the way, left again), episode B = -5, -5. CORL's rule ("last": the last
    reward is the failure) marks both: every row -5 / (1 - 0.5) = -10. WSRL's ("all": every
    reward is) spares A, whose discounted sums are -5, 5 - 2.5 = 2.5, -5 + 1.25 = -3.75."""

    import h5py

    from rlcore.offline.datasets import load_dataset

    path = tmp_path / "rules.hdf5"
    with h5py.File(path, "w") as f:
        f.create_dataset("observations", data=np.arange(10, dtype=np.float32).reshape(5, 2))
        f.create_dataset("next_observations", data=np.ones((5, 2), np.float32))
        f.create_dataset("actions", data=np.zeros((5, 1), np.float32))
        f.create_dataset("rewards", data=np.array([-5, 5, -5, -5, -5], np.float32))
        f.create_dataset("terminals", data=np.zeros(5, np.float32))
        f.create_dataset("timeouts", data=np.array([0, 0, 1, 0, 1], np.float32))
    dataset = load_dataset(path, gamma=0.5)
    assert dataset.fail_sparse_episodes(-5.0, rule) == marked
    np.testing.assert_allclose(dataset.mc_return.numpy(), expected, atol=1e-6)
    with pytest.raises(ValueError, match="rule"):
        dataset.fail_sparse_episodes(-5.0, "first")


def test_wsrl_sparse_reward_returns_match_the_reference(tmp_path):
    """zhouzypaul/wsrl's calc_return_to_go (tests/golden/wsrl_sparse_returns.json) on the
    AntMaze-style rows of the CORL case: an episode counts as failed only when every reward
    is the failure reward, so the one that reaches the goal and leaves it keeps its
    discounted sums (CORL: -500 on every row). Ours through the D4RL loader, WSRL's plan
    (10 r - 5, rule "all") and ``fail_sparse_episodes``."""
    import json

    from rlcore.algos.wsrl import WSRLConfig
    from rlcore.offline.datasets import load_dataset
    from tests.conftest import REPO

    golden = json.loads((REPO / "tests/golden/wsrl_sparse_returns.json").read_text())
    rows = golden["rows"]
    path = write_sparse_rows(tmp_path / "sparse.hdf5", rows)
    config = WSRLConfig(calibrate=True, sparse_reward=True, reward_scale=10.0, reward_bias=-5.0)
    data = config.plan().data
    dataset = load_dataset(path, gamma=golden["meta"]["gamma"])
    dataset.scale_rewards(data.reward_scale, data.reward_bias)
    assert dataset.fail_sparse_episodes(data.sparse_failure_reward, data.sparse_rule) == 2
    np.testing.assert_allclose(dataset.mc_return.numpy(), golden["mc_returns"], rtol=2e-6, atol=1e-5)


@pytest.mark.parametrize("form", ["corl", "wsrl"])
def test_lagrange_forms_by_hand(form):
    """The Lagrange penalty at the start: CORL's alpha' = e times cql_alpha 5, wsrl's
    softplus multiplier = 1 with no cql_alpha factor; penalty = weight x sum over the 2
    critics of (diff_i - gap), so weight x 2 (mean diff - gap). One Adam step moves the
    multiplier's parameter by lr against the sign of -(mean diff - gap)."""
    torch.manual_seed(0)
    config = CQLConfig(
        hidden=(16, 16), cql_lagrange=True, cql_target_action_gap=0.3, cql_alpha=5.0,
        cql_lagrange_form=form, normalize_states=False,
    )  # fmt: skip
    agent = CQL(OBS, ACT, config)
    start = agent.log_alpha_prime.item()
    metrics = agent.update(random_batch(32))
    weight = math.e * 5.0 if form == "corl" else 1.0
    assert metrics["alpha_prime"] == pytest.approx(math.e if form == "corl" else 1.0, rel=1e-6)
    expected = weight * 2 * (metrics["cql_diff"] - 0.3)
    assert metrics["cql_penalty"] == pytest.approx(expected, rel=1e-5, abs=1e-5)
    step = agent.log_alpha_prime.item() - start
    sign = 1.0 if metrics["cql_diff"] > 0.3 else -1.0
    assert step == pytest.approx(sign * config.critic_lr, rel=1e-3)
    with pytest.raises(ValueError, match="cql_lagrange_form"):
        CQLConfig(cql_lagrange_form="softplus")
