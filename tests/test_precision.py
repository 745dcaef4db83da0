"""Opt-in bfloat16 mixed precision: float32 stays bit-identical, bf16 updates track
float32 closely, parameters and optimiser state stay float32, bad values fail clearly.

These test bf16's maths, not its speed: they run on every CPU, with bf16 emulated where
it is not native (RLCORE_ALLOW_EMULATED_BF16=1), at sizes that stay fast emulated."""

import copy

import pytest
import torch

from rlcore.algos.awac import AWAC, AWACConfig
from rlcore.algos.cql import CQL, CQLConfig
from rlcore.algos.iql import IQL, IQLConfig
from rlcore.algos.rebrac import ReBRAC, ReBRACConfig
from rlcore.algos.sac import SAC, SACConfig
from rlcore.algos.td3_bc import TD3BC, TD3BCConfig
from rlcore.nets import MLP, EnsembleMLP, full_precision
from rlcore.speed import ALLOW_EMULATED_BF16
from rlcore.utils import mixed_precision
from tests.test_algos_contract import ACT, OBS, random_batch
from tests.test_speed_options import HAS_CXX


@pytest.fixture(autouse=True)
def emulated_bf16_allowed(monkeypatch):
    monkeypatch.setenv(ALLOW_EMULATED_BF16, "1")


def paired_updates(fp32: object, bf16: object, updates: int):
    """(seed, float32 metrics, bf16 metrics) per update: same batch, same global RNG."""
    for seed in range(updates):
        batch = random_batch(n=128, seed=seed)
        torch.manual_seed(seed)
        m32 = fp32.update(batch)
        torch.manual_seed(seed)
        yield seed, m32, bf16.update(batch)


def test_network_outputs_are_float32_under_bf16_autocast():
    torch.manual_seed(0)
    mlp, ensemble = MLP(5, 3, (16,)), EnsembleMLP(4, 5, 1, (16,), layer_norm=True)
    x = torch.randn(8, 5)
    with mixed_precision("bf16", torch.device("cpu")):
        assert mlp[0](x).dtype == torch.bfloat16  # the matmul itself runs in bf16
        out, ens = mlp(x), ensemble(x)
    assert out.dtype == ens.dtype == torch.float32
    torch.testing.assert_close(out, mlp(x), rtol=0.05, atol=0.02)
    torch.testing.assert_close(ens, ensemble(x), rtol=0.05, atol=0.05)
    assert full_precision(x.double()).dtype == torch.float64  # other dtypes untouched


def test_output_layers_run_in_float32_under_bf16_autocast():
    """Hidden matmuls in bf16, the output layer in float32 on the bf16 hidden values: a
    Q-value of ~300 is not rounded to bf16's steps of 2."""
    torch.manual_seed(0)
    mlp = MLP(5, 1, (16,), output_activation="tanh")
    ensemble = EnsembleMLP(2, 5, 1, (16,))
    with torch.no_grad():
        mlp[-2].bias.fill_(300.0)
        ensemble.output_layer.bias.fill_(300.0)
    x = torch.randn(64, 5)
    with torch.no_grad(), mixed_precision("bf16", torch.device("cpu")):
        hidden = mlp[1](mlp[0](x))
        ens_hidden = ensemble.act(ensemble.hidden_layers[0](x))
        out, ens = mlp(x), ensemble(x)
    assert hidden.dtype == ens_hidden.dtype == torch.bfloat16
    expected = torch.tanh(torch.nn.functional.linear(hidden.float(), mlp[-2].weight, mlp[-2].bias))
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    layer = ensemble.output_layer
    ens_expected = torch.baddbmm(layer.bias, ens_hidden.float(), layer.weight)
    torch.testing.assert_close(ens, ens_expected, rtol=0, atol=0)
    assert (ens % 2 != 0).any()  # not on bf16's grid of 2 around 300


def test_float32_precision_is_the_unchanged_default():
    torch.manual_seed(0)
    default = SAC(OBS, ACT, SACConfig(policy_frequency=1))
    explicit = copy.deepcopy(default)
    explicit.config = SACConfig(policy_frequency=1, precision="float32")
    for seed in range(3):
        torch.manual_seed(seed)
        a = default.update(random_batch(seed=seed))
        torch.manual_seed(seed)
        b = explicit.update(random_batch(seed=seed))
        assert a == b
    for p, q in zip(default.critic.parameters(), explicit.critic.parameters()):
        assert torch.equal(p, q)


@pytest.mark.parametrize(
    "compile",
    [
        False,
        pytest.param(
            True, marks=pytest.mark.skipif(not HAS_CXX, reason="torch.compile needs a compiler")
        ),
    ],
)
def test_bf16_sac_updates_track_float32(compile: bool):
    torch.manual_seed(0)
    fp32 = SAC(OBS, ACT, SACConfig(policy_frequency=1))
    init = copy.deepcopy(fp32)
    bf16 = SAC(OBS, ACT, SACConfig(policy_frequency=1, precision="bf16", compile=compile))
    bf16.load_state_dict(copy.deepcopy(fp32.state_dict()))
    for seed, m32, m16 in paired_updates(fp32, bf16, 20):
        for key in ("critic_loss", "actor_loss", "alpha"):
            assert m16[key] == pytest.approx(m32[key], rel=0.05, abs=0.05), (seed, key)
    state = bf16.state_dict()
    floats = [state["critic"], state["actor"], state["critic_optimizer"]["state"][0]]
    for part in floats:
        assert all(t.dtype == torch.float32 for t in part.values() if torch.is_tensor(t))
    for name in ("critic", "actor"):
        flat = {
            key: torch.cat([p.flatten() for p in getattr(agent, name).parameters()])
            for key, agent in (("init", init), ("fp32", fp32), ("bf16", bf16))
        }
        moved = (flat["fp32"] - flat["init"]).abs().mean()
        apart = (flat["bf16"] - flat["fp32"]).abs().mean()
        assert 0 < apart < 0.05 * moved, (name, apart, moved)  # bf16 ran, and stays close


def test_unknown_precision_is_a_clear_error():
    with pytest.raises(ValueError, match="choose from \\['float32', 'bf16'\\]"):
        SAC(OBS, ACT, SACConfig(precision="fp8"))


def test_an_unknown_precision_stops_the_config_before_any_agent(tmp_path):
    """Settling the config names the choices: a benchmark grid checks its runs' configs
    this way before it trains any (benchmarks/runs.py check_configs)."""
    from rlcore.config import ConfigError
    from rlcore.train import train
    from tests.conftest import make_config

    with pytest.raises(ConfigError, match="algo.precision='bf17': choose from float32, bf16"):
        train(make_config("algo=cql", "env=Hopper", "algo.precision=bf17"), tmp_path / "run")
    assert not (tmp_path / "run").exists()


OFFLINE_BF16 = [
    ("iql", IQL, IQLConfig),
    ("td3_bc", TD3BC, TD3BCConfig),
    ("rebrac", ReBRAC, ReBRACConfig),
    ("cql", CQL, CQLConfig),
    ("awac", AWAC, AWACConfig),
]


@pytest.mark.parametrize("name, agent_cls, config_cls", OFFLINE_BF16)
def test_bf16_offline_updates_track_float32(name, agent_cls, config_cls):
    """Same start, same batches, same noise: bf16 losses within a few percent of float32,
    parameters and optimiser state stay float32, and the bf16 run really differs."""
    small = {"hidden": (64, 64), "batch_size": 128}
    torch.manual_seed(0)
    fp32 = agent_cls(OBS, ACT, config_cls(**small))
    init = copy.deepcopy(fp32)
    bf16 = agent_cls(OBS, ACT, config_cls(**small, precision="bf16"))
    bf16.load_state_dict(copy.deepcopy(fp32.state_dict()))
    for seed, m32, m16 in paired_updates(fp32, bf16, 8):
        assert m16.keys() == m32.keys()
        for key in m32:
            if "loss" in key:
                assert m16[key] == pytest.approx(m32[key], rel=0.05, abs=0.05), (seed, key)
    critic_state = bf16.state_dict()["critic_optimizer"]["state"][0]
    assert all(t.dtype == torch.float32 for t in critic_state.values())
    for part in ("critic", "actor"):
        flat = {
            key: torch.cat([p.flatten() for p in getattr(agent, part).parameters()])
            for key, agent in (("init", init), ("fp32", fp32), ("bf16", bf16))
        }
        assert all(p.dtype == torch.float32 for p in getattr(bf16, part).parameters())
        moved = (flat["fp32"] - flat["init"]).abs().mean()
        apart = (flat["bf16"] - flat["fp32"]).abs().mean()
        assert 0 < apart < 0.1 * moved, (name, part, apart, moved)


@pytest.mark.parametrize("name, agent_cls, config_cls", OFFLINE_BF16)
def test_offline_agents_reject_unknown_precision(name, agent_cls, config_cls):
    with pytest.raises(ValueError, match="unknown precision 'fp16'"):
        agent_cls(OBS, ACT, config_cls(precision="fp16"))
