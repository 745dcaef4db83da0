"""FastTD3 (algos/fast_td3.py): its clipped double-Q target and actor loss recomputed from
the agent's networks, per-env exploration noise drawn again when an env's episode starts
(its stds by hand from the seeded draws), the update cadence per vector step through the
shared loop, clear errors for bad configs,
(slow) learning InvertedPendulum with 8 native envs, the sizes a CPU run takes where none
are set (explicit ones win, resumes keep them), and gamma / support per task family. The projection and the loss are
hand-checked in tests/test_update_maths.py, the parity with the reference in
tests/test_parity_fast_td3.py, exact resume in tests/test_resume.py."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.algos.fast_td3 import FastTD3, FastTD3Config
from rlcore.capabilities import PerEnvState
from rlcore.checkpoint import load_checkpoint
from rlcore.logging import read_csv
from rlcore.losses import categorical_projection
from rlcore.train import train
from rlcore.types import Batch
from rlcore.utils import NonFiniteLossError
from tests.conftest import FAST, make_config

OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACT = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
SMALL = FastTD3Config(
    actor_hidden=(16, 16), critic_hidden=(16, 16), num_atoms=11, v_min=-5.0, v_max=5.0
)


def agent(**changes) -> FastTD3:
    torch.manual_seed(0)
    return FastTD3(OBS, ACT, FastTD3Config(**{**SMALL.__dict__, **changes}))


def batch(rows: int = 8, seed: int = 1) -> Batch:
    g = torch.Generator().manual_seed(seed)
    terminated = (torch.arange(rows) % 3 == 0).float()
    return Batch(
        obs=torch.randn(rows, 3, generator=g),
        action=torch.rand(rows, 2, generator=g) * 4 - 2,
        reward=torch.randn(rows, generator=g),
        next_obs=torch.randn(rows, 3, generator=g),
        terminated=terminated,
        truncated=1.0 - terminated,
    )


def test_target_is_the_lower_valued_projection_for_both_critics():
    """Recomputed by hand from the agent's networks with the same smoothing noise: each
    target critic's distribution at (s', a') projected, then per row the one with the
    lower expected value (the second on a tie), shared by both critics."""
    ftd3, data = agent(), batch()
    torch.manual_seed(5)
    target, _ = ftd3.target_distribution(data)
    torch.manual_seed(5)
    noise = (torch.randn(8, 2) * ftd3.config.policy_noise).clamp(-0.5, 0.5)
    with torch.no_grad():
        next_action = (ftd3.actor(data.next_obs) + noise * 2.0).clamp(-2.0, 2.0)
        probs = torch.softmax(ftd3.target_critic(data.next_obs, next_action), -1)
    discount = 0.97 * (1 - data.terminated)
    p1 = categorical_projection(probs[0], data.reward, discount, ftd3.critic.support)
    p2 = categorical_projection(probs[1], data.reward, discount, ftd3.critic.support)
    v1, v2 = (p1 * ftd3.critic.support).sum(-1), (p2 * ftd3.critic.support).sum(-1)
    expected = torch.where((v1 < v2).unsqueeze(-1), p1, p2)
    assert target.shape == (1, 8, 11)
    torch.testing.assert_close(target[0], expected)
    assert (v1 < v2).any() and (v2 < v1).any(), "the batch should exercise both picks"
    # terminal rows: all mass at the reward's atoms, whatever the next state
    for row in torch.nonzero(data.terminated).flatten():
        assert (target[0, row] > 0).sum() <= 2


def test_without_cdq_each_critic_keeps_its_own_target_and_the_actor_the_mean():
    ftd3, data = agent(use_cdq=False), batch()
    target, _ = ftd3.target_distribution(data)
    assert target.shape == (2, 8, 11)
    assert not torch.allclose(target[0], target[1])
    with torch.no_grad():
        probs = torch.softmax(ftd3.critic(data.obs, ftd3.actor(data.obs)), -1)
        q = (probs * ftd3.critic.support).sum(-1)
        assert ftd3.actor_loss(data.obs).item() == pytest.approx(-q.mean(0).mean().item())


def test_actor_loss_is_minus_the_mean_of_the_lower_expected_q():
    ftd3, data = agent(), batch()
    with torch.no_grad():
        probs = torch.softmax(ftd3.critic(data.obs, ftd3.actor(data.obs)), -1)
        q = (probs * ftd3.critic.support).sum(-1)
        assert ftd3.actor_loss(data.obs).item() == pytest.approx(-q.min(0).values.mean().item())


def test_update_steps_actor_every_second_update_and_targets_every_update():
    ftd3, data = agent(), batch()
    actor_before = [p.clone() for p in ftd3.actor.parameters()]
    target_before = [p.clone() for p in ftd3.target_critic.parameters()]
    first = ftd3.update(data)
    assert "actor_loss" not in first and np.isfinite(first["critic_loss"])
    assert all(torch.equal(a, b) for a, b in zip(actor_before, ftd3.actor.parameters()))
    assert not all(
        torch.equal(a, b) for a, b in zip(target_before, ftd3.target_critic.parameters())
    )
    assert "actor_loss" in ftd3.update(data)
    assert not all(torch.equal(a, b) for a, b in zip(actor_before, ftd3.actor.parameters()))


def test_noise_scale_per_env_is_drawn_again_when_its_episode_starts():
    ftd3 = agent(std_min=0.1, std_max=0.3)
    assert isinstance(ftd3, PerEnvState)
    ftd3.episodes_started(np.ones(4, bool))
    first = ftd3.noise_scales.clone()
    assert first.shape == (4, 1) and ((first >= 0.1) & (first <= 0.3)).all()
    assert len(set(first.flatten().tolist())) == 4  # one std per env
    ftd3.episodes_started(np.array([False, True, False, False]))
    second = ftd3.noise_scales
    assert torch.equal(second[[0, 2, 3]], first[[0, 2, 3]])
    assert second[1] != first[1] and 0.1 <= second[1].item() <= 0.3
    ftd3.episodes_started(torch.zeros(4, dtype=torch.bool))  # a tensor mask (mjx), none ended
    assert torch.equal(ftd3.noise_scales, second)
    # the noise of each env has its own std: env 0 quiet, env 1 loud
    ftd3.noise_scales = torch.tensor([[0.0], [0.5], [0.0], [0.0]])
    obs = np.zeros((4, 3), np.float32)
    explored = ftd3.act(obs) - ftd3.act(obs, deterministic=True)
    assert np.all(explored[[0, 2, 3]] == 0) and np.all(explored[1] != 0)
    with pytest.raises(ValueError, match="all True"):
        ftd3.episodes_started(np.array([True, False]))
    with pytest.raises(ValueError, match="episodes_started"):
        ftd3.act(np.zeros((2, 3), np.float32))


def test_noise_scales_hand_computed_from_the_seeded_draws():
    """sigma_i = std_min + u_i (std_max - std_min), u_i ~ U[0, 1) from torch's global
    generator. After torch.manual_seed(0) the first four draws are u = 0.49626, 0.76822,
    0.08848, 0.13203, so with [std_min, std_max] = [0.25, 0.75]: sigma = 0.25 + 0.5 u =
    0.49813, 0.63411, 0.29424, 0.31602, each inside the range and one per env. Env 1's
    episode starting again takes index 1 of the next four draws, u = 0.63408: 0.56704."""
    ftd3 = agent(std_min=0.25, std_max=0.75)
    torch.manual_seed(0)
    ftd3.episodes_started(np.ones(4, bool))
    expected = [0.49813, 0.63411, 0.29424, 0.31602]
    assert ftd3.noise_scales.flatten().tolist() == pytest.approx(expected, abs=1e-5)
    torch.manual_seed(0)
    u = torch.rand(4, 1)
    assert torch.equal(ftd3.noise_scales, u * 0.5 + 0.25)  # the same draws, bit for bit
    ftd3.episodes_started(np.array([False, True, False, False]))
    expected[1] = 0.56704
    assert ftd3.noise_scales.flatten().tolist() == pytest.approx(expected, abs=1e-5)


def test_act_shapes_and_bounds():
    """The agent contract of tests/test_algos_contract.py, with the noise table sized by
    the loop's first ``episodes_started`` (exploring acts need one row per training env)."""
    ftd3 = agent(std_min=0.4)
    ftd3.episodes_started(np.ones(7, bool))
    explored = ftd3.act(np.random.default_rng(0).normal(size=(7, 3)).astype(np.float32) * 100)
    assert explored.shape == (7, 2) and explored.dtype == np.float32
    assert (explored >= ACT.low).all() and (explored <= ACT.high).all()
    single = ftd3.act(np.zeros(3, np.float32), deterministic=True)  # evaluation: any batch
    assert single.shape == (2,)
    np.testing.assert_array_equal(single, ftd3.act(np.zeros(3, np.float32), deterministic=True))


def test_state_dict_round_trip_gives_identical_future():
    ftd3 = agent()
    ftd3.episodes_started(np.ones(3, bool))
    ftd3.update(batch())
    other = agent()
    other.load_state_dict(ftd3.state_dict())
    assert torch.equal(other.noise_scales, ftd3.noise_scales) and other.updates == 1
    torch.manual_seed(5)
    first = (ftd3.update(batch(seed=3)), ftd3.act(np.ones((3, 3), np.float32)))
    torch.manual_seed(5)
    second = (other.update(batch(seed=3)), other.act(np.ones((3, 3), np.float32)))
    assert first[0] == second[0] and np.array_equal(first[1], second[1])
    for a, b in zip(ftd3.parts.state_dict().values(), other.parts.state_dict().values()):
        if isinstance(a, dict) and "state" not in a:  # modules (optimisers checked by the loss)
            assert all(torch.equal(a[k], b[k]) for k in a)


def test_nan_loss_raises_before_touching_parameters():
    ftd3, bad = agent(), batch()
    bad = Batch(**{**bad.__dict__, "reward": bad.reward.clone().fill_(float("nan"))})
    before = {k: v.clone() for k, v in ftd3.critic.state_dict().items()}
    with pytest.raises(NonFiniteLossError, match="critic_loss"):
        ftd3.update(bad)
    assert all(torch.equal(before[k], v) for k, v in ftd3.critic.state_dict().items())


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"v_min": 5.0, "v_max": -5.0}, "v_min=5.0 must be below v_max=-5.0"),
        ({"v_min": 1.0, "v_max": 1.0}, "v_min=1.0 must be below"),
        ({"num_atoms": 1}, "num_atoms=1"),
        ({"std_min": 0.5, "std_max": 0.1}, "std_min"),
    ],
)
def test_bad_config_raises_a_clear_error(changes, match):
    with pytest.raises(ValueError, match=match):
        FastTD3Config(**changes)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (("algo.v_min=10", "algo.v_max=-10"), "v_min=10.0 must be below v_max=-10.0"),
        (("algo.updates_per_vector_step=0",), "algo.updates_per_vector_step=0.*must be > 0"),
        (("algo.warmup_vector_steps=-1",), "algo.warmup_vector_steps=-1.*must be >= 0"),
    ],
)
def test_bad_config_from_the_command_line_names_the_option(overrides, match, tmp_path):
    with pytest.raises(Exception, match=match):
        train(make_config("algo=fast_td3", *overrides, *FAST), tmp_path)


def native_run(*extra: str) -> list[str]:
    return [
        "algo=fast_td3", "env=InvertedPendulum", "env.backend=native", "algo.batch_size=64",
        "algo.critic_hidden=[32,32]", "algo.actor_hidden=[32,32]", "algo.v_min=-10",
        "algo.v_max=40", "checkpoint_every=1000000", "eval_every=1000000", *FAST, *extra,
    ]  # fmt: skip


@pytest.mark.parametrize("num_envs", [2, 6])
def test_updates_per_vector_step_whatever_the_number_of_envs(num_envs, tmp_path):
    """2 updates after every vector step past the warm-up of 3 vector steps."""
    total = 10 * num_envs
    train(make_config(*native_run(f"env.num_envs={num_envs}", f"total_steps={total}",
                                  "algo.warmup_vector_steps=3")), tmp_path)  # fmt: skip
    counters = load_checkpoint(tmp_path)["loop"]["counters"]
    assert counters["env_steps"] == total
    assert counters["updates"] == 2 * (10 - 3)


@pytest.mark.slow
def test_learns_inverted_pendulum_with_8_native_envs(tmp_path):
    """Mean eval return >= 900 within 8,000 env steps (1,000 vector steps of 8 envs; reached
    at 4,000 on seed 0 in ~25 s on a 2-core machine)."""
    train(make_config(
        "algo=fast_td3", "env=InvertedPendulum", "env.backend=native", "env.num_envs=8",
        "total_steps=8000", "algo.batch_size=256", "algo.critic_hidden=[128,128]",
        "algo.actor_hidden=[64,64]", "algo.updates_per_vector_step=4", "algo.v_min=-10",
        "algo.v_max=40", "algo.warmup_vector_steps=32", "eval_every=1000",
        "stop_at_return=900", "eval_episodes=5", "eval_envs=5", "logger=quiet", "threads=1",
        "checkpoint_every=1000000",
    ), tmp_path)  # fmt: skip
    best = max(row["eval/return"] for row in read_csv(tmp_path / "eval.csv"))
    assert best >= 900


# ------------------------------------------------ sizes by device, support per task family
CPU_RECIPE = {"batch_size": 1024, "actor_hidden": [256, 256], "critic_hidden": [256, 256],
              "buffer_size": 1_000_000}  # fmt: skip
REFERENCE = {"batch_size": 32_768, "actor_hidden": [512, 256, 128],
             "critic_hidden": [1024, 512, 256], "buffer_size": 10_485_760}  # fmt: skip
SHORT_RUN = ["algo=fast_td3", "env=Hopper", "env.backend=native", "env.num_envs=2",
             "total_steps=16", "algo.warmup_vector_steps=5", "checkpoint_every=1000000",
             "eval_every=1000000", *FAST]  # fmt: skip


def _algo(cfg) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)["algo"]


def _recorded(run_dir) -> dict:
    import yaml

    return yaml.safe_load((run_dir / "config.yaml").read_text())["algo"]


def test_a_cpu_run_takes_the_cpu_sizes_says_so_and_records_them(tmp_path):
    """device=cpu with no size set: batch 1,024, 256x256 actor and critics, 1M buffer
    (benchmarks/walltime.py's CPU table), one note naming them and the defaults, the
    run's config.yaml holding what ran, and networks of those widths."""
    train(make_config(*SHORT_RUN), tmp_path)
    recorded = _recorded(tmp_path)
    assert {k: recorded[k] for k in CPU_RECIPE} == CPU_RECIPE
    notes = [line for line in (tmp_path / "train.log").read_text().splitlines()
             if "fast_td3 on device=cpu:" in line]  # fmt: skip
    assert len(notes) == 1
    assert ("algo.batch_size=1024 algo.actor_hidden=[256,256] algo.critic_hidden=[256,256] "
            "algo.buffer_size=1000000") in notes[0]  # fmt: skip
    assert "algo.batch_size=32768" in notes[0] and "to override" in notes[0]
    agent = load_checkpoint(tmp_path)["agent"]
    actor, critic = agent["actor"], agent["critic"]
    assert [actor[f"net.{i}.weight"].shape[0] for i in (0, 2)] == [256, 256]
    assert [critic[f"net.hidden_layers.{i}.weight"].shape[-1] for i in (0, 1)] == [256, 256]
    assert "net.hidden_layers.2.weight" not in critic


def test_sizes_set_explicitly_win_on_a_cpu(tmp_path):
    """Only the sizes left unset take the CPU's, and the note names only those."""
    train(make_config(*SHORT_RUN, "algo.batch_size=64", "algo.critic_hidden=[32,32]"), tmp_path)
    recorded = _recorded(tmp_path)
    assert recorded["batch_size"] == 64 and recorded["critic_hidden"] == [32, 32]
    assert recorded["actor_hidden"] == [256, 256] and recorded["buffer_size"] == 1_000_000
    note = next(line for line in (tmp_path / "train.log").read_text().splitlines()
                if "fast_td3 on device=cpu:" in line)  # fmt: skip
    assert "batch_size" not in note.split("(")[0] and "critic_hidden" not in note.split("(")[0]


def test_every_size_set_means_no_note_and_the_reference_sizes_run_when_asked():
    from rlcore import catalog

    spec = catalog.get("fast_td3")
    sizes = [f"algo.{k}={str(v).replace(' ', '')}" for k, v in REFERENCE.items()]
    values = _algo(make_config("algo=fast_td3", "env=hopper", *sizes))
    assert spec.sized_for(values, "cpu") == (values, [])


def test_a_gpu_run_takes_the_reference_sizes_without_a_note():
    from rlcore import catalog

    values, notes = catalog.get("fast_td3").sized_for(
        _algo(make_config("algo=fast_td3", "env=hopper")), "cuda:0"
    )
    assert {k: values[k] for k in REFERENCE} == REFERENCE and notes == []


def test_a_recorded_run_keeps_its_sizes_on_any_device(tmp_path):
    """A resumed run composes the run's own config.yaml: its sizes are set, so no device
    changes them; and a resume that asks for other network widths is refused by name."""
    from rlcore import catalog
    from rlcore.cli import resumed_config
    from rlcore.settings import ResumeMismatchError

    train(make_config(*SHORT_RUN), tmp_path / "run")
    saved = _recorded(tmp_path / "run")
    for device in ("cpu", "cuda"):
        assert catalog.get("fast_td3").sized_for(saved, device) == (saved, [])
    with pytest.raises(ResumeMismatchError, match="'algo.critic_hidden' is \\[64, 64\\] now"):
        overrides = [f"resume={tmp_path / 'run'}", "algo.critic_hidden=[64,64]",
                     "total_steps=32"]  # fmt: skip
        cfg = resumed_config(make_config(*SHORT_RUN, *overrides), overrides)
        train(cfg, tmp_path / "run")


@pytest.mark.parametrize(
    ("env", "gamma", "bound"),
    [("env=Hopper", 0.99, 500.0), ("env=Walker2d", 0.99, 750.0),
     ("env=HalfCheetah", 0.99, 2000.0),
     # the MJX back end steps the same Gymnasium task (reward included)
     ("env=Hopper env.backend=mjx", 0.99, 500.0),
     # a task with no algo_env file: the reference's MuJoCo Playground defaults
     ("env=gym env.id=Pendulum-v1", 0.97, 10.0)],
)  # fmt: skip
def test_support_and_discount_per_task_family(env, gamma, bound):
    algo = _algo(make_config("algo=fast_td3", *env.split()))
    assert (algo["gamma"], algo["v_min"], algo["v_max"]) == (gamma, -bound, bound)


def test_an_explicit_support_wins_over_the_task_family():
    algo = _algo(make_config("algo=fast_td3", "env=Walker2d", "algo.v_min=-100",
                             "algo.v_max=100", "algo.gamma=0.97"))  # fmt: skip
    assert (algo["gamma"], algo["v_min"], algo["v_max"]) == (0.97, -100, 100)


def test_every_gymnasium_mujoco_task_has_a_support_of_its_own():
    """Each Gymnasium MuJoCo env config ships a fast_td3 file: gamma 0.99 and a symmetric
    support of +-100 max |r| (its comment gives the reward bound). The robot tasks
    (configs/env/panda*.yaml) keep fast_td3's defaults: their rewards lie in [-1, 1]; so do
    the AntMaze configs (antgoal: the AntMaze data's skill; antmaze*eval: 0 / 1 rewards)
    and NeoRL-2's tasks (envs/neorl2.py, not Gymnasium's);
    Atari (configs/env/atari.yaml) and BitFlipping (configs/env/bitflipping.yaml) have
    discrete actions, which fast_td3 does not act in."""
    from tests.conftest import REPO

    envs = sorted(p.stem for p in (REPO / "configs" / "env").glob("*.yaml"))
    box = [
        e for e in envs
        if e not in ("gym", "cartpole", "atari", "bitflipping", "dmsd", "pipeline", "randomfrictionhopper",
                     "safetyhalfcheetah", "simglucose", "rocketrecovery")  # NeoRL-2's: defaults
        and not e.startswith(("panda", "antgoal", "antmaze"))
    ]  # fmt: skip
    assert len(box) == 11
    for env in box:
        path = REPO / "configs" / "algo_env" / f"fast_td3_{env}.yaml"
        assert path.is_file(), path
        assert "max |r|" in path.read_text()
        algo = _algo(make_config("algo=fast_td3", f"env={env}"))
        assert algo["gamma"] == 0.99 and algo["v_min"] == -algo["v_max"] >= -50_000
        assert algo["v_max"] >= 50
