"""CQL, Cal-QL and IQL with ``compile=True`` (the whole update as one torch.compile graph)
equal their eager updates to float tolerance, and checkpoints cross between the paths."""

import pytest
import torch

from rlcore.algos.cal_ql import CalQL, CalQLConfig
from rlcore.algos.cql import CQL, CQLConfig
from rlcore.algos.iql import IQL, IQLConfig
from rlcore.compiled import cxx_compiler
from rlcore.utils import NonFiniteLossError
from tests.test_algos_contract import ACT, OBS, random_batch
from tests.test_cql import with_field

pytestmark = pytest.mark.skipif(
    cxx_compiler() is None, reason="torch.compile on CPU needs a C++ compiler"
)
TINY = (32, 32)  # the maths does not depend on the width; small graphs compile faster

CASES = {  # name: (agent class, config class, config fields)
    "cql": (CQL, CQLConfig, dict(hidden=TINY, cql_n_actions=4)),
    "cql_lagrange_bc": (
        CQL,
        CQLConfig,
        dict(hidden=TINY, cql_n_actions=4, cql_lagrange=True, bc_steps=1, backup_entropy=True),
    ),
    "cal_ql": (CalQL, CalQLConfig, dict(hidden=TINY, critic_hidden=TINY, cql_n_actions=4)),
    "iql": (IQL, IQLConfig, dict(hidden=TINY, total_steps=5)),
    "iql_deterministic": (IQL, IQLConfig, dict(hidden=TINY, deterministic_actor=True)),
}


def make(name: str, compile: bool, **fields):
    cls, config_cls, base = CASES[name]
    torch.manual_seed(0)
    return cls(OBS, ACT, config_cls(**{**base, **fields, "compile": compile}))


def run_updates(agent, seeds) -> list[dict[str, float]]:
    metrics = []
    for seed in seeds:
        torch.manual_seed(100 + seed)  # the same policy / uniform-action noise on both paths
        metrics.append(agent.update(random_batch(32, seed=seed)))
    return metrics


def assert_close_states(fast, plain, path="state"):
    """Every tensor of two state dicts (networks, temperatures, Adam moments and step
    counts, learning rates) equal to float tolerance; everything else exactly."""
    if isinstance(plain, torch.Tensor):
        torch.testing.assert_close(fast, plain, rtol=1e-4, atol=1e-5, msg=path)
    elif isinstance(plain, dict):
        assert fast.keys() == plain.keys(), path
        for key in plain:
            assert_close_states(fast[key], plain[key], f"{path}.{key}")
    elif isinstance(plain, list | tuple):
        assert len(fast) == len(plain), path
        for i, (a, b) in enumerate(zip(fast, plain)):
            assert_close_states(a, b, f"{path}[{i}]")
    elif isinstance(plain, float):
        assert fast == pytest.approx(plain, rel=1e-6), path
    else:
        assert fast == plain, path


def assert_close_metrics(fast, plain):
    for m_fast, m_plain in zip(fast, plain, strict=True):
        assert m_fast.keys() == m_plain.keys()
        for key, value in m_plain.items():
            assert m_fast[key] == pytest.approx(value, rel=1e-3, abs=1e-4), key


# CQL's graphs (the penalty's sampling, two graphs with bc_steps) compile in ~40 s on a
# busy 2-core machine; Cal-QL's (the same code plus the bound) in ~20 s
SLOW = {"cql", "cql_lagrange_bc"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else []) for n in CASES]
)
def test_compiled_update_equals_eager(name):
    plain, fast = make(name, False), make(name, True)
    assert plain._update_graph is None and fast._update_graph is not None
    init = [p.detach().clone() for p in plain.actor.parameters()]
    m_plain, m_fast = run_updates(plain, range(3)), run_updates(fast, range(3))
    assert_close_metrics(m_fast, m_plain)
    assert_close_states(fast.state_dict(), plain.state_dict())
    moved = [not torch.equal(p, q) for p, q in zip(plain.actor.parameters(), init)]
    assert all(moved)  # the comparison is not between two untouched agents


@pytest.mark.parametrize("name", ["cal_ql", "iql"])
def test_compiled_checkpoint_continues_eagerly(name):
    """A compiled agent's state_dict loaded into an eager agent (and the reverse) continues
    as the compiled one does: same optimiser state, step counts, cosine lr."""
    fast = make(name, True)
    assert fast._update_graph is not None
    run_updates(fast, range(2))
    plain = make(name, False)
    plain.load_state_dict(fast.state_dict())
    m_fast, m_plain = run_updates(fast, range(2, 4)), run_updates(plain, range(2, 4))
    assert_close_metrics(m_fast, m_plain)
    assert_close_states(fast.state_dict(), plain.state_dict())
    again = make(name, True)  # eager checkpoint -> compiled agent
    again.load_state_dict(plain.state_dict())
    assert_close_metrics(run_updates(again, [5]), run_updates(plain, [5]))
    assert_close_states(again.state_dict(), plain.state_dict())


@pytest.mark.parametrize("name", ["cal_ql", "iql"])
def test_compiled_update_raises_on_nan(name):
    agent = make(name, True)
    batch = random_batch(32)
    with pytest.raises(NonFiniteLossError):
        agent.update(with_field(batch, reward=torch.full_like(batch.reward, float("nan"))))


def test_compiled_graph_inputs_live_on_the_parameters_device():
    """What a compiled update reads besides parameters and data (Adam's step counts, the
    learning rates) is on the parameters' device: a graph compiled for a GPU cannot read a
    CPU tensor (inductor: "Pointer argument cannot be accessed from Triton"). The meta
    device stands in for a GPU; a step count loaded onto the CPU (an eager run's
    checkpoint) follows its parameter, in place."""
    from rlcore.compiled import adam_state, graph_inputs

    param = torch.nn.Parameter(torch.zeros(3, device="meta"))
    optimizer = torch.optim.Adam([param], lr=1e-3)
    ((steps, exp_avgs, exp_avg_sqs),) = graph_inputs([optimizer], [[param]])[0]
    lrs = graph_inputs([optimizer], [[param]])[1]
    assert {t.device.type for t in (*steps, *exp_avgs, *exp_avg_sqs, lrs)} == {"meta"}
    optimizer.state[param]["step"] = torch.tensor(4.0)  # a CPU step, as loaded
    (step,), _, _ = adam_state(optimizer, [param])
    assert step is optimizer.state[param]["step"] and step.device.type == "meta"
