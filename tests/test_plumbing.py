"""The agents' shared plumbing: ``Plumbing`` (spaces, device, parts and counters declared
once, the state dict made from them) and its ``Parts``, ``numpy_act`` (numpy or tensor
in, numpy out) and TD3's critic step (rlcore.td3_step); every registered agent's state
dict entry for entry as recorded before ``Plumbing`` (tests/golden/agent_state_dicts.json),
plus the committed agent snapshots still loading into today's agents, key for key."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlcore import catalog
from rlcore.agent_state import Parts, Plumbing, numpy_act
from rlcore.losses import ensemble_mse
from rlcore.nets import DeterministicActor, QEnsemble
from rlcore.policies import load_agent
from rlcore.td3_step import critic_step, smoothed_target_q, td_target
from tests.conftest import REPO, registered_agent
from tests.test_cql import assert_same

ASSETS = sorted((REPO / "benchmarks" / "assets").glob("*.pt"))
GOLDEN_STATE = REPO / "tests" / "golden" / "agent_state_dicts.json"
ALGOS = sorted(catalog.ALGORITHMS)


# -- Parts ----------------------------------------------------------------------------
def _agent_parts(seed: int) -> tuple[Parts, nn.Linear, torch.Tensor, torch.optim.Adam]:
    torch.manual_seed(seed)
    net = nn.Linear(3, 2)
    log_alpha = torch.zeros((), requires_grad=True)
    optimizer = torch.optim.Adam([*net.parameters(), log_alpha], lr=0.1)
    net(torch.randn(4, 3)).sum().add(log_alpha).backward()
    optimizer.step()
    inner = Parts(first=torch.optim.SGD(net.parameters(), lr=0.1))
    return (
        Parts(net=net, log_alpha=log_alpha, optimizer=optimizer, inner=inner),
        net,
        log_alpha,
        optimizer,
    )


def test_parts_state_dict_layout_is_one_entry_per_part_then_the_counters():
    parts, net, log_alpha, optimizer = _agent_parts(0)
    state = parts.state_dict(updates=3, phase="online")
    assert list(state) == ["net", "log_alpha", "optimizer", "inner", "updates", "phase"]
    assert state["net"].keys() == net.state_dict().keys()
    assert not state["log_alpha"].requires_grad  # detached
    assert state["optimizer"]["state"].keys() == optimizer.state_dict()["state"].keys()
    assert list(state["inner"]) == ["first"]  # nested Parts: a dict of its own parts
    assert state["updates"] == 3 and state["phase"] == "online"


def test_parts_load_restores_in_place_without_sharing_optimiser_state():
    source, *_ = _agent_parts(0)
    target, net, log_alpha, optimizer = _agent_parts(1)
    alpha_object = log_alpha
    target.load_state_dict(source.state_dict(updates=7))
    for got, want in zip(net.state_dict().values(), source.parts["net"].state_dict().values()):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert target.parts["log_alpha"] is alpha_object  # the optimiser still steps this tensor
    torch.testing.assert_close(log_alpha, source.parts["log_alpha"], rtol=0, atol=0)
    loaded = optimizer.state[optimizer.param_groups[0]["params"][0]]["exp_avg"]
    original = source.parts["optimizer"].state_dict()["state"][0]["exp_avg"]
    torch.testing.assert_close(loaded, original, rtol=0, atol=0)
    assert loaded.data_ptr() != original.data_ptr()  # a copy: the agents do not share moments


def test_parts_load_names_a_missing_part():
    parts, *_ = _agent_parts(0)
    state = parts.state_dict()
    del state["optimizer"]
    with pytest.raises(KeyError, match="no entry 'optimizer'"):
        parts.load_state_dict(state)


def test_parts_add_appends_after_the_declared_parts():
    parts, *_ = _agent_parts(0)
    parts.add(extra=nn.Linear(1, 1))
    assert list(parts.state_dict(updates=0)) == [
        "net", "log_alpha", "optimizer", "inner", "extra", "updates"
    ]  # fmt: skip


def test_parts_to_moves_modules_and_nested_parts_in_place():
    net, inner_net = nn.Linear(3, 2), nn.Linear(2, 1)
    parts = Parts(net=net, inner=Parts(inner_net=inner_net))
    assert parts.to("meta") is parts
    assert {p.device.type for p in [*net.parameters(), *inner_net.parameters()]} == {"meta"}
    log_alpha = torch.zeros((), requires_grad=True)  # a tensor part keeps its object
    assert Parts(log_alpha=log_alpha).to("cpu").parts["log_alpha"] is log_alpha


def test_parts_to_refuses_an_optimiser_left_on_the_old_parameters():
    """An optimiser must keep stepping the moved parameters: a move that makes new
    parameter objects (CPU -> meta does; CPU -> CUDA moves them in place) or an optimiser
    that already holds state is refused rather than left stepping stale tensors."""
    net = nn.Linear(3, 2)
    with pytest.raises(ValueError, match="optimiser 'optimizer' holds state or parameters"):
        Parts(net=net, optimizer=torch.optim.Adam(net.parameters())).to("meta")
    parts, *_ = _agent_parts(0)  # its Adam has taken a step
    with pytest.raises(ValueError, match="move the parts before the first step"):
        parts.to("cpu")
    net = nn.Linear(3, 2)
    Parts(net=net, optimizer=torch.optim.Adam(net.parameters())).to("cpu")  # fresh: fine


def test_parts_refuses_a_part_without_state():
    with pytest.raises(TypeError, match="part 'steps' is a int"):
        Parts(net=nn.Linear(1, 1), steps=3)


# -- Plumbing -------------------------------------------------------------------------
class _Counting:
    """An agent's plumbing with one counter of each kind."""

    def __init__(self, seed: int, action_space: gym.Space | None = None) -> None:
        torch.manual_seed(seed)
        obs_space = gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32)
        box = gym.spaces.Box(np.zeros(2, np.float32), np.ones(2, np.float32))
        action_space = action_space or box
        self.plumbing = io = Plumbing(obs_space, action_space, "cpu", "Counting")
        self.net = nn.Linear(io.obs_dim, io.action_dim)
        self.parts = io.declare(
            counters={"updates": int, "phase": str, "on": bool, "sigma": float,
                      "noise": torch.Tensor},
            net=self.net,
        )  # fmt: skip
        self.updates, self.phase, self.on, self.sigma = seed, f"p{seed}", bool(seed), seed / 2
        self.noise = torch.full((2, 1), float(seed))


def test_plumbing_reads_the_sizes_off_the_spaces():
    agent = _Counting(0)
    io = agent.plumbing
    assert (io.obs_dim, io.action_dim, io.step_action_dim) == (6, 2, 2)
    assert io.device == torch.device("cpu") and agent.net.in_features == 6
    low, high = io.bounds()
    assert low.dtype == torch.float32 and high.tolist() == [1.0, 1.0]
    chunked = gym.spaces.Box(-np.ones((4, 2), np.float32), np.ones((4, 2), np.float32))
    io = _Counting(0, chunked).plumbing  # an action-chunk env's (H, A) box
    assert (io.action_dim, io.step_action_dim) == (8, 2)
    discrete = Plumbing(
        gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(5), "cpu", "D", ("discrete",)
    )
    assert discrete.action_dim == 5 and discrete.low is None
    with pytest.raises(ValueError, match="Counting needs a continuous"):
        _Counting(0, gym.spaces.Discrete(2))


def test_plumbing_state_dict_is_the_parts_then_the_counters_and_loads_back():
    source, target = _Counting(1), _Counting(0)
    state = source.plumbing.state_dict(source)
    assert list(state) == ["net", "updates", "phase", "on", "sigma", "noise"]
    assert state["noise"] is not source.noise  # a copy: the agent keeps stepping its own
    state["sigma"] = 3  # an int where a float is declared (a YAML value): loaded as float
    target.plumbing.load_state_dict(target, state)
    assert (target.updates, target.phase, target.on) == (1, "p1", True)
    assert isinstance(target.sigma, float) and target.sigma == 3.0
    torch.testing.assert_close(target.noise, source.noise, rtol=0, atol=0)
    assert target.noise is not state["noise"]
    torch.testing.assert_close(target.net.weight, source.net.weight, rtol=0, atol=0)
    del state["phase"]
    with pytest.raises(KeyError, match="no counter 'phase'"):
        target.plumbing.load_state_dict(target, state)


def test_plumbing_refuses_a_name_both_part_and_counter():
    io = Plumbing(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,)), "cpu")
    with pytest.raises(ValueError, match=r"\['updates'\] named both a part and a counter"):
        io.declare(counters={"updates": int}, updates=nn.Linear(1, 1))


# -- every registered agent's state dict ----------------------------------------------------
def state_layout(state: dict, prefix: str = "") -> dict[str, str]:
    """Every entry of a (nested) state dict by its path: a tensor's dtype and shape, a
    list's length, another value's type."""
    layout = {}
    for key, value in state.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            layout[path] = "dict"
            layout.update(state_layout(value, path + "/"))
        elif isinstance(value, torch.Tensor):
            layout[path] = f"tensor {str(value.dtype).removeprefix('torch.')} {list(value.shape)}"
        elif isinstance(value, list | tuple):
            layout[path] = f"{type(value).__name__} of {len(value)}"
        else:
            layout[path] = type(value).__name__
    return layout


def test_the_recorded_layouts_cover_every_registered_algorithm():
    assert sorted(json.loads(GOLDEN_STATE.read_text())) == ALGOS


@pytest.mark.parametrize("name", ALGOS)
def test_state_dict_layout_is_the_recorded_one(name):
    """The checkpoint format, entry for entry and in order: what each agent's state_dict
    held before its plumbing moved to ``Plumbing`` (recorded from that code with
    ``state_layout``). A change here is a change of format: old checkpoints stop resuming."""
    recorded = json.loads(GOLDEN_STATE.read_text())[name]
    layout = state_layout(registered_agent(name).state_dict())
    missing = [path for path in recorded if path not in layout]
    added = [path for path in layout if path not in recorded]
    assert (missing, added) == ([], []), f"{name}: entries missing {missing}, new {added}"
    assert list(layout.items()) == list(recorded.items())


@pytest.mark.parametrize("name", ALGOS)
def test_state_dict_loads_into_a_fresh_agent_entry_for_entry(name):
    source, target = registered_agent(name, seed=0), registered_agent(name, seed=1)
    state = source.state_dict()
    target.load_state_dict(state)
    loaded = target.state_dict()
    assert list(state_layout(loaded).items()) == list(state_layout(state).items())
    assert_same(loaded, state)  # every tensor and counter


# -- numpy_act --------------------------------------------------------------------------
class _Chunker:
    """A policy returning (B, H, A) chunks, recording what it was given."""

    device = torch.device("cpu")

    def __init__(self) -> None:
        self.seen: list[tuple[torch.Tensor, bool, bool]] = []

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        self.seen.append((obs, deterministic, torch.is_grad_enabled()))
        return obs[:, None, :2].repeat(1, 4, 1) * (1.0 if deterministic else 2.0)


def test_numpy_act_batches_single_observations_and_unbatches_the_result():
    agent = _Chunker()
    single = agent.act(np.array([1.0, 2.0, 3.0]), deterministic=True)  # float64 in
    batch = agent.act(torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    assert isinstance(single, np.ndarray) and single.shape == (4, 2)
    np.testing.assert_array_equal(single[0], [1.0, 2.0])
    assert batch.shape == (2, 4, 2)
    np.testing.assert_array_equal(batch[1, 0], [8.0, 10.0])  # not deterministic: x2
    (obs_single, det_single, grad_single), (obs_batch, det_batch, _) = agent.seen
    assert obs_single.shape == (1, 3) and obs_single.dtype == torch.float32
    assert det_single and not det_batch and obs_batch.shape == (2, 3)
    assert not grad_single  # no autograd while acting


# -- TD3's critic step ------------------------------------------------------------------
def _td3_nets() -> tuple[DeterministicActor, QEnsemble]:
    torch.manual_seed(0)
    actor = DeterministicActor(3, 2, np.array([-2.0, 0.0]), np.array([2.0, 1.0]), (8,))
    return actor, QEnsemble(3, 2, 2, (8,))


def test_smoothed_target_q_is_the_min_over_critics_at_the_clipped_target_action():
    actor, critic = _td3_nets()
    next_obs = torch.randn(16, 3)
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
    # noise clip 0: the smoothing noise vanishes whatever its std
    action, next_q = smoothed_target_q(actor, critic, next_obs, low, high, 10.0, 0.0)
    torch.testing.assert_close(action, actor(next_obs).detach())
    torch.testing.assert_close(next_q, critic(next_obs, action).min(0).values.detach())
    assert not next_q.requires_grad
    # a large clip: the noise moves the action, which stays in the box
    noisy, _ = smoothed_target_q(actor, critic, next_obs, low, high, 10.0, 100.0)
    assert not torch.allclose(noisy, action)
    assert bool(((noisy >= low) & (noisy <= high)).all())


def test_td_target_stops_bootstrapping_at_terminations_only():
    target = td_target(
        torch.tensor([1.0, 1.0]), torch.tensor([0.0, 1.0]), 0.5, torch.tensor([4.0, 4.0])
    )
    torch.testing.assert_close(target, torch.tensor([3.0, 1.0]))


def test_critic_step_takes_one_step_on_the_ensemble_mse():
    _, critic = _td3_nets()
    obs, action, target = torch.randn(16, 3), torch.rand(16, 2), torch.randn(16)
    before = [p.detach().clone() for p in critic.parameters()]
    expected = ensemble_mse(critic(obs, action), target)
    expected.backward()
    grads = [p.grad.clone() for p in critic.parameters()]
    optimizer = torch.optim.SGD(critic.parameters(), lr=0.1)
    loss, q = critic_step(critic, optimizer, obs, action, target)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6) and q.shape == (2, 16)
    for p, b, g in zip(critic.parameters(), before, grads):
        torch.testing.assert_close(p.detach(), b - 0.1 * g)  # zeroed first: one clean step


# -- committed snapshots ----------------------------------------------------------------
@pytest.mark.parametrize("asset", ASSETS, ids=[a.stem for a in ASSETS])
def test_committed_snapshots_load_key_for_key_and_act(asset):
    """Every entry a committed snapshot holds is a part of today's agent and is what the
    agent holds after ``load_agent`` (a renamed part would be silently filled with fresh
    weights by the snapshot path of ``load_agent``), and the agent acts."""
    saved = torch.load(asset, weights_only=False)
    agent = load_agent(asset)
    current = agent.state_dict()
    for name, value in saved["agent"].items():
        assert name in current, f"{asset.name}: '{name}' is no longer a part of the agent"
        if isinstance(value, dict):
            for key, tensor in value.items():
                torch.testing.assert_close(current[name][key], tensor, rtol=0, atol=0)
        else:
            assert current[name] == value
    obs = np.zeros(saved["spaces"]["obs_shape"], np.float32)
    action = agent.act(obs, deterministic=True)
    assert action.shape[-1] == len(saved["spaces"]["action_low"])
    assert np.isfinite(action).all()


def record(names: list[str]) -> None:
    """Write the layouts of ``names`` (a new algorithm) into the recorded ones."""
    recorded = json.loads(GOLDEN_STATE.read_text())
    for name in names:
        recorded[name] = state_layout(registered_agent(name).state_dict())
    GOLDEN_STATE.write_text(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n")


if __name__ == "__main__":  # python -m tests.test_plumbing record NAME [NAME ...]
    import sys

    if sys.argv[1:2] != ["record"] or not sys.argv[2:]:
        raise SystemExit("usage: python -m tests.test_plumbing record NAME [NAME ...]")
    record(sys.argv[2:])
