"""MOPO (algos/mopo.py) and its data path (rlcore/model_based.py): parity with OfflineRL-Kit
(tests/golden/mopo.json, benchmarks/parity/mopo_reference.py), rollouts and batches by
hand, the termination rules, the imagined-row buffer, the command line and resume."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.algos.mopo import MOPO, MOPOConfig
from rlcore.benchmarks.parity.mopo_reference import (
    ACT,
    BATCH,
    DONE_ABOVE,
    DYN_HIDDEN,
    ELITES,
    EPOCH_STEPS,
    HIDDEN,
    LR,
    MEMBERS,
    OBS,
    PENALTY,
    ROLLOUT_LENGTH,
    UPDATES,
    batches,
    initial,
    normal_draws,
    rollout_starts,
)
from rlcore.benchmarks.parity.offline_common import Script
from rlcore.buffers import ReplayBuffer
from rlcore.model_based import ModelRollouts, termination_rule
from rlcore.offline.datasets import OfflineDataset
from rlcore.plan import ModelRecipe
from rlcore.types import Batch

GOLDEN = json.loads((Path(__file__).parent / "golden" / "mopo.json").read_text())["cases"]
SPACES = (
    gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32),
    gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32),
)


def golden_agent(target_entropy: float) -> MOPO:
    """Our MOPO with the golden file's weights and settings."""
    config = MOPOConfig(
        hidden=(HIDDEN, HIDDEN), actor_lr=LR["actor"], critic_lr=LR["critic"],
        alpha_lr=LR["alpha"], total_steps=UPDATES, steps_per_epoch=EPOCH_STEPS,
        target_entropy=target_entropy, members=MEMBERS, elites=ELITES,
        dynamics_hidden=DYN_HIDDEN, dynamics_decays=(0.0,) * (len(DYN_HIDDEN) + 1),
        fused_optimizer=False,
    )  # fmt: skip
    agent = MOPO(*SPACES, config)
    params = {k: torch.from_numpy(np.asarray(v)) for k, v in initial().items()}
    with torch.no_grad():
        actor_layers = [m for m in agent.sac.actor.modules() if isinstance(m, torch.nn.Linear)]
        for i, layer in enumerate(actor_layers):
            layer.weight.copy_(params[f"actor.{i}.w"].T)
            layer.bias.copy_(params[f"actor.{i}.b"])
        for net in (agent.sac.critic, agent.sac.target_critic):
            layers = [*net.net.hidden_layers, net.net.output_layer]
            for member in range(2):
                for i, layer in enumerate(layers):
                    layer.weight[member].copy_(params[f"critic{member}.{i}.w"])
                    layer.bias[member, 0].copy_(params[f"critic{member}.{i}.b"])
        model = agent.dynamics
        for i, layer in enumerate(model.layers()):
            layer.weight.copy_(params[f"dyn.{i}.w"])
            layer.bias.copy_(params[f"dyn.{i}.b"])
        model.max_logvar.copy_(params["dyn.max_logvar"])
        model.min_logvar.copy_(params["dyn.min_logvar"])
        model.elites.copy_(params["dyn.elites"])
        model.input_mean.copy_(params["dyn.mean"])
        model.input_std.copy_(params["dyn.std"])
        model.fitted.fill_(True)
    return agent


def our_params(agent: MOPO) -> dict[str, torch.Tensor]:
    """Our parameters in the reference's names and layouts."""
    hidden = [m for m in agent.sac.actor.modules() if isinstance(m, torch.nn.Linear)]
    out = {}
    for i, name in enumerate(("backbone.model.0", "backbone.model.2")):
        out[f"actor.{name}.weight"], out[f"actor.{name}.bias"] = hidden[i].weight, hidden[i].bias
    w, b = hidden[2].weight, hidden[2].bias
    out["actor.dist_net.mu.weight"], out["actor.dist_net.mu.bias"] = w[:ACT], b[:ACT]
    out["actor.dist_net.sigma.weight"], out["actor.dist_net.sigma.bias"] = w[ACT:], b[ACT:]
    names = ("backbone.model.0", "backbone.model.2", "last")
    for prefix, net in (("critic", agent.sac.critic), ("target_critic", agent.sac.target_critic)):
        layers = [*net.net.hidden_layers, net.net.output_layer]
        for member in range(2):
            for name, layer in zip(names, layers):
                out[f"{prefix}{member}.{name}.weight"] = layer.weight[member].T
                out[f"{prefix}{member}.{name}.bias"] = layer.bias[member, 0]
    return out


@contextlib.contextmanager
def scripted_torch(**scripts: Script) -> Iterator[None]:
    """``randn_like`` (the policy's noise), ``randn`` (the model's) and ``randint`` (the
    elite each row takes) from the scripts; each must be used up."""
    with pytest.MonkeyPatch.context() as patch:
        for name, script in scripts.items():
            if name == "randn_like":
                patch.setattr(
                    torch, name, lambda x, s=script, **_: torch.from_numpy(s.pop(tuple(x.shape)))
                )
            elif name == "randn":
                patch.setattr(
                    torch, name, lambda shape, s=script, **_: torch.from_numpy(s.pop(tuple(shape)))
                )
            else:
                patch.setattr(
                    torch,
                    name,
                    lambda high, shape, s=script, **_: torch.from_numpy(s.pop(tuple(shape))),
                )
        yield
    for script in scripts.values():
        assert script.done(), "fewer draws than the reference made"


@pytest.mark.parametrize("case_name", ["learn", "falling"])
def test_updates_match_offlinerl_kit(case_name: str) -> None:
    """30 updates on the golden batches (actor lr annealed per epoch of 10, the temperature
    capped at 1 in ``learn``, falling in ``falling``): every loss and parameter."""
    case = GOLDEN[case_name]
    agent = golden_agent(case["target_entropy"])
    noise = Script(normal_draws(2 * UPDATES, (BATCH, ACT), seed=2))
    metrics = []
    with scripted_torch(randn_like=noise):
        for batch in batches():
            tensors = {k: torch.from_numpy(v) for k, v in batch.items()}
            metrics.append(agent.update(Batch(**tensors, truncated=torch.zeros(BATCH))))
    losses = case["losses"]
    ours = {
        "loss/actor": [m["actor_loss"] for m in metrics],
        "loss/alpha": [m["alpha_loss"] for m in metrics],
        "alpha": [m["alpha"] for m in metrics],
        "critic": [m["critic_loss"] for m in metrics],
    }
    theirs = {**{k: losses[k] for k in ("loss/actor", "loss/alpha", "alpha")},
              "critic": [a + b for a, b in zip(losses["loss/critic1"], losses["loss/critic2"])]}  # fmt: skip
    for name, values in theirs.items():
        torch.testing.assert_close(torch.tensor(ours[name]), torch.tensor(values), rtol=1e-5,
                                   atol=2e-6, msg=lambda m, n=name: f"{n}: {m}")  # fmt: skip
    for name, value in our_params(agent).items():
        torch.testing.assert_close(value.detach(), torch.tensor(case["params"][name]),
                                   rtol=1e-5, atol=2e-6, msg=lambda m, n=name: f"{n}: {m}")  # fmt: skip
    assert agent.sac.actor_optimizer.param_groups[0]["lr"] == pytest.approx(LR["actor"] * 0.25)


def test_rollouts_match_offlinerl_kit() -> None:
    """``ModelRollouts.rollout`` of 3 steps from the golden states, replaying the
    reference's draws: every imagined transition (penalised reward, termination) in its
    order."""
    case = GOLDEN["rollout"]
    agent = golden_agent(-float(ACT))
    recipe = ModelRecipe(rollout_batch=8, rollout_length=ROLLOUT_LENGTH, retain_epochs=1,
                         penalty_coef=PENALTY)  # fmt: skip

    def terminated(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor):
        return next_obs[:, 0] > DONE_ABOVE

    rollouts = ModelRollouts(None, agent.dynamics, agent.imagine_action, terminated, recipe)
    draws = {k: [np.asarray(v, np.float32) for v in values] for k, values in case["draws"].items()}
    draws["elites"] = [np.asarray(v, np.int64) for v in case["draws"]["elites"]]
    with scripted_torch(randn_like=Script(draws["policy"]), randn=Script(draws["model"]),
                        randint=Script(draws["elites"])):  # fmt: skip
        stats = rollouts.rollout(torch.from_numpy(rollout_starts()))
    expected = {k: torch.tensor(v) for k, v in case["transitions"].items()}
    rows = rollouts.imagined.batch(torch.arange(len(rollouts.imagined)))
    assert stats["rollout_transitions"] == len(expected["obss"]) == 14
    torch.testing.assert_close(rows.obs, expected["obss"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rows.action, expected["actions"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rows.next_obs, expected["next_obss"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rows.reward, expected["rewards"][:, 0], rtol=1e-5, atol=1e-6)
    assert rows.terminated.tolist() == expected["terminals"][:, 0].tolist()


# ---- the data path by hand


class LineModel(torch.nn.Module):
    """A stand-in ensemble: next obs = obs + action, reward = obs[0], penalty 0.5."""

    obs_dim, action_dim = 1, 1

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("fitted", torch.tensor(True))
        self.register_buffer("input_mean", torch.zeros(2))
        self.steps = 0

    def step(self, obs, action, generator=None):
        self.steps += 1
        return obs + action, obs[:, 0], torch.full((len(obs),), 0.5)


def line_dataset(n: int = 4) -> OfflineDataset:
    obs = torch.arange(n, dtype=torch.float32)[:, None]  # states 0, 1, 2, 3
    return OfflineDataset(
        obs=obs, action=torch.zeros(n, 1), reward=torch.full((n,), 7.0), next_obs=obs,
        terminated=torch.zeros(n), truncated=torch.zeros(n),
        episode_id=torch.zeros(n, dtype=torch.int64), mc_return=torch.zeros(n),
        episode_return=torch.tensor([28.0], dtype=torch.float64), source="hand",
    )  # fmt: skip


def test_a_rollout_by_hand_penalises_stops_and_continues_the_survivors() -> None:
    """From states 0 and 2 with action +1, penalty 0.5 x 2 and termination above 2.5:
    step 1 (0 -> 1, 2 -> 3: the second ends), step 2 from 1 only (1 -> 2), step 3 (2 -> 3,
    ends); rewards are obs - 1."""
    model = LineModel()
    recipe = ModelRecipe(rollout_batch=2, rollout_length=4, retain_epochs=2, penalty_coef=2.0)
    rollouts = ModelRollouts(line_dataset(), model, lambda obs: torch.ones(len(obs), 1),
                             lambda o, a, n: n[:, 0] > 2.5, recipe)  # fmt: skip
    stats = rollouts.rollout(torch.tensor([[0.0], [2.0]]))
    rows = rollouts.imagined.batch(torch.arange(len(rollouts.imagined)))
    assert rows.obs[:, 0].tolist() == [0.0, 2.0, 1.0, 2.0]
    assert rows.next_obs[:, 0].tolist() == [1.0, 3.0, 2.0, 3.0]
    assert rows.reward.tolist() == [-1.0, 1.0, 0.0, 1.0]
    assert rows.terminated.tolist() == [0.0, 1.0, 0.0, 1.0]
    assert model.steps == 3  # the last rollout ended: no fourth step
    assert stats == {"rollout_transitions": 4.0, "rollout_reward": 0.25, "rollout_penalty": 0.5}


def test_batches_mix_dataset_and_imagined_rows_and_rollouts_come_every_freq_batches() -> None:
    """real_ratio 0.25 of 8 rows: 2 dataset rows (reward 7) then 6 imagined; a rollout
    round before batches 0 and 3 (rollout_freq 3), none in between."""
    model = LineModel()
    recipe = ModelRecipe(rollout_freq=3, rollout_batch=5, rollout_length=1, retain_epochs=2,
                         real_ratio=0.25, penalty_coef=0.0)  # fmt: skip
    rollouts = ModelRollouts(line_dataset(), model, lambda obs: torch.ones(len(obs), 1),
                             lambda o, a, n: torch.zeros(len(n), dtype=torch.bool), recipe)  # fmt: skip
    steps = []
    for _ in range(4):
        batch = rollouts.sample(8)
        steps.append(model.steps)
    assert steps == [1, 1, 1, 2] and len(rollouts.imagined) == 10
    assert batch.reward[:2].tolist() == [7.0, 7.0]
    assert all(r in (0.0, 1.0, 2.0, 3.0) for r in batch.reward[2:].tolist())  # obs rewards
    assert (batch.next_obs[2:] - batch.obs[2:]).eq(1.0).all()  # imagined: obs + 1


def test_the_sampler_fits_an_unfitted_model_once_and_resumes_exactly() -> None:
    """A fresh ensemble is fitted at the first batch (not again); a sampler restored from
    ``state_dict`` draws the batches the first one draws next."""
    from rlcore.dynamics import ProbabilisticEnsemble

    torch.manual_seed(0)
    model = ProbabilisticEnsemble(1, 1, members=2, elites=1, hidden=(8,), decays=(0.0, 0.0))
    recipe = ModelRecipe(rollout_freq=2, rollout_batch=4, rollout_length=2, retain_epochs=2,
                         max_fit_epochs=2)  # fmt: skip
    lines: list[str] = []
    dataset = line_dataset(8)
    dataset.seed(0)
    rollouts = ModelRollouts(dataset, model, lambda obs: torch.ones(len(obs), 1),
                             lambda o, a, n: n[:, 0] > 5, recipe, seed=3, log=lines.append)  # fmt: skip
    rollouts.sample(4)
    assert bool(model.fitted) and sum("dynamics fitted" in line for line in lines) == 1
    state, dataset_state = rollouts.state_dict(), dataset.state_dict()
    first = [rollouts.sample(4) for _ in range(3)]
    rollouts.load_state_dict(state)
    dataset.load_state_dict(dataset_state)
    again = [rollouts.sample(4) for _ in range(3)]
    assert sum("dynamics fitted" in line for line in lines) == 1
    for a, b in zip(first, again):
        torch.testing.assert_close(a.obs, b.obs, rtol=0, atol=0)
        torch.testing.assert_close(a.reward, b.reward, rtol=0, atol=0)


def test_termination_rules_are_gymnasiums_read_from_the_observation() -> None:
    nan = float("nan")
    hopper = termination_rule("Hopper-v5")
    rows = torch.tensor([[1.0, 0.0, 0.0], [0.69, 0.0, 0.0], [1.0, 0.21, 0.0],
                         [1.0, 0.0, -100.0], [1.0, 0.0, nan]])  # fmt: skip
    assert hopper(rows, rows, rows).tolist() == [False, True, True, True, True]
    walker = termination_rule("Walker2d")
    rows = torch.tensor([[1.0, 0.5], [2.0, 0.0], [0.81, -1.0], [1.5, 0.99]])
    assert walker(rows, rows, rows).tolist() == [False, True, True, False]
    cheetah = termination_rule("HalfCheetah-v5")
    rows = torch.tensor([[500.0, -500.0], [math.inf, 0.0]])
    assert cheetah(rows, rows, rows).tolist() == [False, True]
    ant = termination_rule("Ant-v5")
    rows = torch.tensor([[0.2, 0.0], [1.0, 0.0], [1.01, 0.0], [0.19, 0.0]])
    assert ant(rows, rows, rows).tolist() == [False, False, True, True]
    pendulum = termination_rule("InvertedDoublePendulum-v5")
    angles = torch.tensor([[0.0, 0.0], [0.8, 0.0], [0.3, -0.3], [nan, 0.0]])
    rows = torch.cat([torch.zeros(4, 1), angles.sin(), angles.cos()], 1)  # tip 1.2, 0.84, 1.17
    assert pendulum(rows, rows, rows).tolist() == [False, True, False, True]
    reacher = termination_rule("Reacher-v5")
    assert reacher(rows, rows, rows).tolist() == [False, False, False, True]
    with pytest.raises(ValueError, match="no termination rule for env 'PandaPush'"):
        termination_rule("PandaPush")
    pendulum = termination_rule("Pendulum-v1")  # gymnasium's Pendulum never terminates
    assert pendulum(rows, rows, rows).tolist() == [False, False, False, True]


@pytest.mark.parametrize("algo", ["mopo", "morec"])
def test_a_task_without_a_termination_rule_is_refused_before_the_run_writes(tmp_path, algo):
    from rlcore.config import ConfigError
    from rlcore.train import train
    from tests.conftest import make_config

    data = tmp_path / "d.hdf5"
    data.touch()  # never read: the refusal comes first
    config = make_config(f"algo={algo}", "env=MountainCarContinuous-v0", f"dataset={data}")
    with pytest.raises(ConfigError, match="no termination rule for env 'MountainCarContinuous"):
        train(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_add_rows_writes_any_count_and_wraps() -> None:
    buffer = ReplayBuffer(5, (1,), (1,))
    for start, count in ((0, 3), (3, 4)):
        obs = torch.arange(start, start + count, dtype=torch.float32)[:, None]
        buffer.add_rows(obs, -obs, obs[:, 0], obs + 1, torch.zeros(count))
    assert len(buffer) == 5 and buffer.pos == 2
    assert buffer.data["obs"][:, 0].tolist() == [5.0, 6.0, 2.0, 3.0, 4.0]
    assert buffer.data["truncated"].sum() == 0
    with pytest.raises(ValueError, match="do not fit"):
        buffer.add_rows(torch.zeros(6, 1), torch.zeros(6, 1), torch.zeros(6), torch.zeros(6, 1),
                        torch.zeros(6))  # fmt: skip


def test_the_actor_lr_anneals_once_per_epoch() -> None:
    agent = MOPO(*SPACES, MOPOConfig(hidden=(8,), total_steps=4000, steps_per_epoch=1000))
    values = []
    for updates in (0, 999, 1000, 2000, 3999):
        agent.sac.updates = updates
        values.append(agent.actor_lr())
    base = agent.config.actor_lr
    assert values == pytest.approx([base, base, base * 0.5 * (1 + math.cos(math.pi / 4)),
                                    base * 0.5, base * 0.5 * (1 + math.cos(3 * math.pi / 4))])  # fmt: skip


def test_refusals() -> None:
    with pytest.raises(ValueError, match="real_ratio"):
        ModelRecipe(real_ratio=1.5)
    with pytest.raises(ValueError, match="select"):
        MOPOConfig(select="best")
    with pytest.raises(ValueError, match="dynamics reward"):
        ModelRollouts(None, LineModel(), lambda o: o, lambda o, a, n: n[:, 0] > 0,
                      ModelRecipe(candidate_draws=2))  # fmt: skip


def resume_equals_uninterrupted(tmp_path, algo_args: list[str], parts: tuple[str, ...]) -> str:
    """Record a random Hopper dataset; train 80 steps, and 40 then resumed to 80: the
    resumed run ends with the uninterrupted run's ``parts`` (bit-equal). Returns the
    resumed run's train.log."""
    from rlcore.offline.recording import collect
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
        collect("Hopper", "random", "local/hopper/random-v0", steps=300, seed=0)
        common = [*algo_args, "env=Hopper", "dataset=local/hopper/random-v0", *FAST,
                  "algo.batch_size=16", "algo.hidden=[16,16]", "algo.dynamics_hidden=[16,16]",
                  "algo.dynamics_decays=[0.0,0.0,0.0]", "algo.max_dynamics_epochs=2",
                  "algo.rollout_batch=20", "algo.rollout_freq=25", "eval_every=40",
                  "eval_episodes=1", "eval_envs=1", "env.max_episode_steps=20"]  # fmt: skip
        train(make_config(*common, "total_steps=80"), tmp_path / "whole")
        train(make_config(*common, "total_steps=40"), tmp_path / "part")
        train(make_config(*common, f"resume={tmp_path / 'part'}", "total_steps=80"),
              tmp_path / "part")  # fmt: skip
    whole = torch.load(tmp_path / "whole" / "checkpoints" / "latest.pt", weights_only=False)
    part = torch.load(tmp_path / "part" / "checkpoints" / "latest.pt", weights_only=False)
    for name in parts:
        for key, value in whole["agent"][name].items():
            torch.testing.assert_close(part["agent"][name][key], value, rtol=0, atol=0)
    return (tmp_path / "part" / "train.log").read_text()


def test_mopo_trains_and_resumes_from_the_command_line(tmp_path) -> None:
    """A Hopper run: the ensemble is fitted once and saved with the agent; a run stopped
    at 40 steps and resumed to 80 ends with the uninterrupted run's parameters."""
    log = resume_equals_uninterrupted(tmp_path, ["algo=mopo", "algo.rollout_length=3"],
                                      ("actor", "critic", "dynamics"))  # fmt: skip
    assert log.count("dynamics fitted") == 1 and "model rollout at batch 75" in log
