"""Speed flags that may change results in the last bits (fused Adam, torch.compile) stay
equal to the plain run within float tolerance; DiagNormal is torch's Normal exactly."""

import copy

import pytest
import torch

from rlcore.algos.ppo import PPO, PPOConfig
from rlcore.algos.sac import SAC, SACConfig
from rlcore.buffers import RolloutBuffer
from rlcore.compiled import cxx_compiler
from rlcore.nets import DiagNormal
from rlcore.speed import ALLOW_EMULATED_BF16
from tests.test_algos_contract import ACT, OBS, random_batch

HAS_CXX = cxx_compiler() is not None


@pytest.fixture(autouse=True)
def emulated_bf16_allowed(monkeypatch):
    """bf16 cases test maths, not speed: run them on every CPU, emulated or not."""
    monkeypatch.setenv(ALLOW_EMULATED_BF16, "1")


def rollout(agent: PPO, seed: int, steps: int = 64, envs: int = 2):
    torch.manual_seed(seed)
    buffer = RolloutBuffer(steps, envs, (5,), (3,))
    zeros = torch.zeros(envs)
    for _ in range(steps):
        obs = torch.randn(envs, 5)
        action, log_prob, value = agent.explore(obs)
        buffer.add(obs, action, log_prob, torch.randn(envs), value, zeros, zeros, zeros)
    return buffer.compute(zeros, 0.99, 0.95)


def compare_ppo(**flags):
    """Two PPO agents from the same init, one with ``flags``, updated on the same rollouts."""
    base = PPOConfig(num_minibatches=4, update_epochs=2)
    torch.manual_seed(0)
    plain = PPO(OBS, ACT, base)
    torch.manual_seed(0)
    fast = PPO(OBS, ACT, PPOConfig(**{**vars(base), **flags}))
    init = [p.detach().clone() for p in plain.parameters]
    for seed in range(2):
        batch = rollout(plain, seed)
        torch.manual_seed(100 + seed)
        m_plain = plain.update(batch)
        torch.manual_seed(100 + seed)
        m_fast = fast.update(copy.deepcopy(batch))
        for key in ("policy_loss", "value_loss", "approx_kl", "clip_fraction"):
            assert m_fast[key] == pytest.approx(m_plain[key], rel=1e-3, abs=1e-5), key
    assert any(not torch.equal(p, q) for p, q in zip(plain.parameters, init))  # it learned
    for p, q in zip(plain.parameters, fast.parameters):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)
    return fast


def test_diag_normal_is_torch_normal_exactly():
    mean, std = torch.randn(7, 3), torch.rand(7, 3) + 0.1
    ours, theirs = DiagNormal(mean, std), torch.distributions.Normal(mean, std)
    value = torch.randn(7, 3)
    assert torch.equal(ours.log_prob(value), theirs.log_prob(value))
    assert torch.equal(ours.entropy(), theirs.entropy())
    torch.manual_seed(3)
    sample = ours.sample()
    torch.manual_seed(3)
    assert torch.equal(sample, theirs.sample()) and torch.equal(ours.mean, theirs.mean)


def test_ppo_fused_adam_matches_foreach_adam():
    compare_ppo(fused_optimizer=True)


@pytest.mark.skipif(not HAS_CXX, reason="torch.compile on CPU needs a C++ compiler")
def test_ppo_compiled_step_matches_eager():
    fast = compare_ppo(compile=True, fused_optimizer=True)
    assert fast._compiled_step is not None  # the compiled path really ran
    state = fast.optimizer.state[fast.parameters[0]]
    assert state["step"].item() == 2 * 2 * 4  # Adam's own state advanced: 2 updates x 2 x 4
    from torch._dynamo.utils import counters

    batches = [rollout(fast, seed=seed) for seed in (5, 6)]  # compiled explore runs too
    graphs = counters["stats"]["unique_graphs"]
    for progress, batch in zip((0.25, 0.5), batches):  # lr annealing must not recompile
        fast.update(batch, progress=progress)
    assert counters["stats"]["unique_graphs"] == graphs

    # the compiled rollout step draws the same action noise as the eager one
    eager = PPO(OBS, ACT, PPOConfig(num_minibatches=4, update_epochs=2))
    eager.load_state_dict(fast.state_dict())
    obs = torch.randn(2, 5)
    torch.manual_seed(7)
    expected, rng_after_eager = eager.explore(obs), torch.get_rng_state()
    torch.manual_seed(7)
    got, rng_after_compiled = fast.explore(obs), torch.get_rng_state()
    assert fast._explore_graph is not None
    for name, a, b in zip(("action", "log_prob", "value"), got, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    assert torch.equal(rng_after_compiled, rng_after_eager)  # same number of draws


def test_sac_fused_adam_matches_foreach_adam():
    torch.manual_seed(0)
    plain = SAC(OBS, ACT, SACConfig(policy_frequency=1, fused_optimizer=False))
    torch.manual_seed(0)
    fused = SAC(OBS, ACT, SACConfig(policy_frequency=1, fused_optimizer=True))
    for seed in range(10):
        batch = random_batch(seed=seed)
        torch.manual_seed(seed)
        m_plain = plain.update(batch)
        torch.manual_seed(seed)
        m_fused = fused.update(batch)
        assert m_fused["critic_loss"] == pytest.approx(m_plain["critic_loss"], rel=1e-4, abs=1e-6)
    for p, q in zip(plain.critic.parameters(), fused.critic.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not HAS_CXX, reason="torch.compile on CPU needs a C++ compiler")
def test_ppo_compiled_and_eager_checkpoints_are_interchangeable():
    """The compiled step keeps torch Adam's state layout: either path resumes the other."""
    config = PPOConfig(num_minibatches=4, update_epochs=2)
    torch.manual_seed(0)
    compiled = PPO(OBS, ACT, PPOConfig(**{**vars(config), "compile": True}))
    compiled.update(rollout(compiled, seed=0))
    eager = PPO(OBS, ACT, config)
    eager.load_state_dict(copy.deepcopy(compiled.state_dict()))
    batch = rollout(compiled, seed=1)
    for agent in (compiled, eager):
        torch.manual_seed(7)
        agent.update(copy.deepcopy(batch))
    for p, q in zip(eager.parameters, compiled.parameters):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)
    back = PPO(OBS, ACT, PPOConfig(**{**vars(config), "compile": True}))
    back.load_state_dict(eager.state_dict())  # eager state -> compiled path
    assert back.update(rollout(back, seed=2))["policy_loss"] == pytest.approx(
        eager.update(rollout(eager, seed=2))["policy_loss"], rel=1e-3, abs=1e-5
    )


def compare_sac(updates: int = 6, **flags) -> SAC:
    """Two SACs from the same init and RNG, one with ``flags``, on the same batches.

    In bf16, eager autocast rounds every matmul's output to bfloat16 (8-bit mantissa)
    where a fused kernel may keep float32, and Adam's normalised step turns a tiny
    gradient difference into a full lr-sized one; so there the losses get bf16's
    tolerance and each parameter tensor's difference between the two runs must be small
    next to how far training moved it."""
    bf16 = flags.get("precision") == "bf16"
    torch.manual_seed(0)
    plain = SAC(OBS, ACT, SACConfig(**{k: v for k, v in flags.items() if k != "compile"}))
    torch.manual_seed(0)
    fast = SAC(OBS, ACT, SACConfig(**flags))
    parts = ("actor", "critic", "target_critic")
    initial = {name: copy.deepcopy(list(getattr(plain, name).parameters())) for name in parts}
    for seed in range(updates):
        batch = random_batch(seed=seed)
        torch.manual_seed(seed)  # the policy's noise: the same draws on both paths
        m_plain = plain.update(batch)
        torch.manual_seed(seed)
        m_fast = fast.update(batch)
        for key in m_plain:
            assert m_fast[key] == pytest.approx(
                m_plain[key], rel=2e-2 if bf16 else 1e-3, abs=1e-5
            ), key
    assert m_plain.keys() == m_fast.keys() and "actor_loss" in m_plain
    for name in parts:
        pairs = zip(getattr(plain, name).parameters(), getattr(fast, name).parameters())
        for p, q, p0 in zip(*zip(*pairs), initial[name]):
            if bf16:
                moved = torch.linalg.vector_norm(p - p0)
                assert moved > 0 and torch.linalg.vector_norm(q - p) < 0.1 * moved
            else:
                torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(
        fast.log_alpha, plain.log_alpha, rtol=1e-3 if bf16 else 1e-4, atol=1e-6
    )
    return fast


@pytest.mark.skipif(not HAS_CXX, reason="torch.compile on CPU needs a C++ compiler")
def test_sac_compiled_steps_match_eager():
    fast = compare_sac(compile=True)
    assert fast._update_graph is not None
    assert fast.actor_optimizer.state[next(fast.actor.parameters())]["step"].item() == 6
    eager = SAC(OBS, ACT, SACConfig())  # the compiled run's checkpoint continues eagerly
    eager.load_state_dict(copy.deepcopy(fast.state_dict()))
    batch = random_batch(seed=99)
    torch.manual_seed(99)
    m_eager = eager.update(batch)
    torch.manual_seed(99)
    assert fast.update(batch)["critic_loss"] == pytest.approx(m_eager["critic_loss"], rel=1e-4)


@pytest.mark.skipif(not HAS_CXX, reason="torch.compile on CPU needs a C++ compiler")
@pytest.mark.parametrize(
    "flags",
    [
        {"policy_frequency": 1, "target_frequency": 2, "autotune_alpha": False},
        {"policy_frequency": 3, "num_critics": 3, "layer_norm": True},
        {"precision": "bf16"},
    ],
    ids=["no-autotune-target-every-2", "burst-3-layernorm", "bf16"],
)
def test_sac_compiled_update_matches_eager_across_settings(flags):
    """Every branch of the one-graph update (burst length, Polyak cadence, fixed
    temperature, wider ensembles, bf16 autocast) equals the eager update."""
    fast = compare_sac(updates=6, compile=True, **flags)
    assert fast.updates == 6


@pytest.mark.skipif(not HAS_CXX, reason="torch.compile on CPU needs a C++ compiler")
def test_many_compiled_sacs_in_one_process(monkeypatch):
    """Agents of different shapes each compile their own graph of the same method: more
    graphs than dynamo's per-code-object limit must not become a recompile-limit error.
    The limit starts at 2 here (8 by default) so that 3 one-graph SACs exceed it: the
    check is the same, at the cost of 3 compiles instead of 9."""
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 2)
    for width in range(8, 11):
        torch.manual_seed(width)
        config = SACConfig(hidden=(width, width), compile=True, policy_frequency=1)
        agent = SAC(OBS, ACT, config)  # policy_frequency 1: one graph, the burst every update
        agent.update(random_batch(seed=width))
        assert agent.updates == 1
    assert torch._dynamo.config.recompile_limit > 3


def test_compile_without_a_cxx_compiler_is_the_eager_update(monkeypatch):
    """No C++ compiler: compile=true warns once (tests/test_speed_modes.py) and runs the
    eager update itself, bit for bit."""
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr("rlcore.compiled.shutil.which", lambda name: None)
    with pytest.warns(UserWarning, match="needs a C\\+\\+ compiler"):
        asked = SAC(OBS, ACT, SACConfig(compile=True, policy_frequency=1))
    plain = SAC(OBS, ACT, SACConfig(policy_frequency=1))
    plain.load_state_dict(copy.deepcopy(asked.state_dict()))
    for seed in range(2):
        torch.manual_seed(seed)
        m_asked = asked.update(random_batch(seed=seed))
        torch.manual_seed(seed)
        assert plain.update(random_batch(seed=seed)) == m_asked
    for p, q in zip(plain.critic.parameters(), asked.critic.parameters()):
        assert torch.equal(p, q)
