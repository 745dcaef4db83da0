"""NeoRL-2's DMSD, Pipeline, RandomFrictionHopper, SafetyHalfCheetah (envs/neorl2.py) and
Simglucose (envs/simglucose.py): the reference envs' trajectories on the same seeds and
actions, the authors' released Simglucose data replayed (tests/golden/neorl2.json, benchmarks/parity/neorl2_reference.py),
dynamics by hand, the command line, normalised scores."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlcore.benchmarks.parity.neorl2_reference import CASES, actions, simglucose_actions
from rlcore.envs.neorl2 import (
    CHEETAH_ID,
    DMSD_ID,
    HOPPER_ID,
    PIPELINE_ID,
    SIMGLUCOSE_ID,
    DMSDEnv,
    PipelineEnv,
    RandomFrictionHopperEnv,
    SafetyHalfCheetahEnv,
)
from rlcore.envs.simglucose import SimglucoseEnv, pump_basal, reward, risk

FILE = json.loads((Path(__file__).parent / "golden" / "neorl2.json").read_text())
GOLDEN, RELEASED = FILE["cases"], FILE["released_simglucose"]


MAKERS = {"dmsd": DMSDEnv, "pipeline": PipelineEnv,
          "randomfrictionhopper": RandomFrictionHopperEnv,
          "safetyhalfcheetah": SafetyHalfCheetahEnv, "simglucose": SimglucoseEnv}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_trajectories_match_the_reference_envs(name: str) -> None:
    seeds, steps, dim = CASES[name]
    env = MAKERS[name]()
    for episode in GOLDEN[name]:
        width = len(episode["obs"][0])
        if name == "pipeline":
            env.target = None  # a first target from the seed on both sides (golden file)
        # the reference draws the hopper's friction from Python's random, Simglucose's
        # patient and start hour from numpy's global state: the file has them
        options = {"friction": episode["friction"]} if "friction" in episode else None
        if name == "simglucose":
            options = {"patient": episode["patient"], "hour": episode["hour"]}
        obs, _ = env.reset(seed=episode["seed"], options=options)
        observations, rewards, ends = [obs[:width]], [], []
        steps_actions = (simglucose_actions(episode["seed"]) if name == "simglucose"
                         else actions(steps, dim, episode["seed"] + 1))  # fmt: skip
        for action in steps_actions:
            obs, reward, terminated, truncated, _ = env.step(action)
            assert not truncated
            observations.append(obs[:width])
            rewards.append(reward)
            ends.append(terminated)
            if terminated:
                break
        np.testing.assert_allclose(np.array(observations), episode["obs"], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(rewards, episode["reward"], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(obs, episode["last_obs"], rtol=1e-6, atol=1e-6)
        assert ends == episode["terminated"]


def test_simglucose_replays_the_authors_released_data() -> None:
    """The first trajectory of polixir/neorl2_dataset's Simglucose training file (a whole
    day of adult#001 from 15:00, its 6 meals; golden file): our env, fed its actions,
    reads its glucose (stored as float32), rewards and end."""
    env = SimglucoseEnv()
    obs, _ = env.reset(options={"patient": RELEASED["patient"], "hour": RELEASED["hour"]})
    assert obs[0] == pytest.approx(RELEASED["first"], rel=1e-6)
    readings, rewards, ends = [], [], []
    for action in np.array(RELEASED["action"], np.float32).reshape(-1, 1):
        obs, value, terminated, _, _ = env.step(action)
        readings.append(obs[0])
        rewards.append(value)
        ends.append(terminated)
    np.testing.assert_allclose(readings, RELEASED["next_reading"], rtol=1e-6)
    np.testing.assert_allclose(rewards, RELEASED["reward"], rtol=1e-6, atol=1e-6)
    assert ends == RELEASED["done"] and len(readings) == 480


def test_simglucose_by_hand() -> None:
    """Kovatchev's risk is 0 at exp(5.381^(1/1.084)) mg/dL; the reward 1 + risk drop / 100,
    -15 at or below 40; the pump rounds to 0.05 pmol; a meal is eaten at 5 g a minute."""
    zero = np.exp(5.381 ** (1 / 1.084))
    assert risk(np.array(zero)) == pytest.approx(0.0, abs=1e-9)
    fall = 10 * (1.509 * (np.log(200.0) ** 1.084 - 5.381)) ** 2 / 100
    assert reward(np.array(200.0), np.array(zero)) == pytest.approx(1 + fall)
    assert reward(np.array(100.0), np.array(40.0)) == -15.0
    assert reward(np.array(500.0), np.array(600.0)) == 0.0
    assert pump_basal(0.01234) == 1481 * 0.05 / 6000 and pump_basal(40.0) == 30.0
    env = SimglucoseEnv()
    obs, info = env.reset(options={"patient": "child#001", "hour": 7})  # 7:00, 45 g
    assert info == {"patient": "child#001", "hour": 7} and obs.shape == (31,)
    env.step(np.array([-1.0], np.float32))  # minutes 0-2: 15 g eaten, 30 g still planned
    patient = env.patient
    assert patient.eating and patient.food_taken == 15.0 and patient.planned == 30.0
    for _ in range(3):
        env.step(np.array([-1.0], np.float32))
    assert not patient.eating and patient.food_taken == 45.0 and patient.planned == 0.0
    with pytest.raises(ValueError, match="unknown patient"):
        env.reset(options={"patient": "adult#011"})
    with pytest.raises(ValueError, match="mode"):
        SimglucoseEnv(mode="test")
    validation = SimglucoseEnv(mode="val")
    names = {validation.reset(seed=seed)[1]["patient"] for seed in range(40)}
    assert names <= {f"{g}#{i:03d}" for g in ("adolescent", "adult", "child") for i in range(6, 11)}


def test_random_friction_hopper_by_hand() -> None:
    """The friction: drawn per reset within [1.5, 2.5] from the seed, rounded to 2 decimals
    in the model only; the reward has no healthy bonus; a fall terminates."""
    env = RandomFrictionHopperEnv()
    frictions = [env.reset(seed=s)[0][-1] for s in (0, 1)]
    assert frictions[0] != frictions[1] and all(1.5 <= f <= 2.5 for f in frictions)
    assert env.reset(seed=0)[0][-1] == frictions[0]
    assert env.model.geom_friction[env.foot, 0] == float(f"{frictions[0]:.2f}")
    assert RandomFrictionHopperEnv(random_friction=False).reset(seed=0)[0][-1] == 2.0
    obs, _ = env.reset(seed=0)
    after, reward, terminated, *_ = env.step(np.zeros(3))
    assert reward == pytest.approx((after[0] - obs[0]) / 0.008, rel=1e-12)
    assert not terminated
    qpos, qvel = env.data.qpos.copy(), env.data.qvel.copy()
    qpos[1] = 0.5  # the torso below 0.7: fallen
    env.set_state(qpos, qvel)
    assert env.step(np.zeros(3))[2]


def test_safety_half_cheetah_penalises_speed() -> None:
    """Over 3.2096 m/s the reward is -100 and info's cost 1; below, v - 0.1 |a|^2."""
    env = SafetyHalfCheetahEnv()
    obs, _ = env.reset(seed=0)
    action = np.full(6, 0.5)
    after, reward, terminated, _, info = env.step(action)
    velocity = (after[0] - obs[0]) / 0.05
    assert velocity < 3.2096 and info["cost"] == 0.0 and not terminated
    assert reward == pytest.approx(velocity - 0.1 * 6 * 0.25, rel=1e-12)
    qvel = env.data.qvel.copy()
    qvel[0] = 8.0  # sliding forward fast
    env.set_state(env.data.qpos.copy(), qvel)
    after, reward, _, _, info = env.step(np.zeros(6))
    assert info["x_velocity"] > 3.2096 and reward == -100.0 and info["cost"] == 1.0


def test_dmsd_one_step_by_hand() -> None:
    """From rest at the origin, full force +30 on mass 1 and -30 on mass 2: the Euler step
    moves no position and gives velocities +-0.2 * 30 / 20 = +-0.3; reward from the
    targets."""
    env = DMSDEnv()
    env.reset(seed=0)
    env.state = np.zeros(4)
    env.targets[:] = [0.5, -0.25]
    obs, reward, *_ = env.step(np.array([1.0, -1.0], np.float32))
    np.testing.assert_allclose(obs, [0, 0, 0.3, -0.3, 0.5, -0.25], atol=1e-7)
    assert reward == pytest.approx(-np.log(0.51) - np.log(0.26), rel=1e-6)
    obs, *_ = env.step(np.zeros(2, np.float32))  # positions move by dt * v
    np.testing.assert_allclose(obs[:2], [0.06, -0.06], atol=1e-7)


def test_pipeline_delays_the_gate_by_twenty_steps() -> None:
    env = PipelineEnv()
    obs, _ = env.reset(seed=0)
    start = obs[0]
    outflows = []
    for _ in range(25):
        obs, *_ = env.step(np.array([1.0], np.float32))
        outflows.append(obs[0])
    assert outflows[:19] == [start] * 19  # the channel still holds the start flow
    np.testing.assert_allclose(outflows[19:], start + np.arange(1, 7), rtol=1e-6)
    assert obs[-25:].tolist() == [1.0] * 25  # the latest actions, newest first
    assert obs[2] == outflows[-2]  # the previous outflow heads the history


def test_registered_with_short_names_episode_lengths_and_scores() -> None:
    from rlcore.envs.make import resolve_env_id
    from rlcore.evaluation import pinned_reference_scores

    assert resolve_env_id("DMSD") == DMSD_ID and resolve_env_id("pipeline") == PIPELINE_ID
    assert gym.spec(DMSD_ID).max_episode_steps == 100
    assert gym.spec(PIPELINE_ID).max_episode_steps == 1000
    assert pinned_reference_scores("local/dmsd/medium-v0") == (30.60, 849.51)
    assert pinned_reference_scores(PIPELINE_ID) == (-296.0, 751.0)
    assert resolve_env_id("RandomFrictionHopper") == HOPPER_ID
    assert resolve_env_id("safetyhalfcheetah") == CHEETAH_ID
    assert gym.spec(HOPPER_ID).max_episode_steps == gym.spec(CHEETAH_ID).max_episode_steps == 1000
    assert pinned_reference_scores(HOPPER_ID) == (-3.0, 503.0)
    assert pinned_reference_scores("local/safetyhalfcheetah/high-v0") == (-283.0, 2507.0)
    assert resolve_env_id("Simglucose") == SIMGLUCOSE_ID
    assert gym.spec(SIMGLUCOSE_ID).max_episode_steps == 480
    assert pinned_reference_scores("local/simglucose/high-v0") == (9.75, 475.0)


def test_an_offline_run_on_a_recorded_dmsd_dataset(tmp_path) -> None:
    """Record random DMSD data, train IQL on it from the command line: normalised scores."""
    from rlcore.offline.recording import collect
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
        collect("DMSD", "random", "local/dmsd/random-v0", steps=300, seed=0)
        result = train(make_config("algo=iql", "env=DMSD", "dataset=local/dmsd/random-v0", *FAST,
                                   "total_steps=40", "algo.batch_size=16", "eval_every=40",
                                   "eval_episodes=1", "eval_envs=1"), tmp_path / "run")  # fmt: skip
    assert np.isfinite(result["eval/return"])
    assert "normalised" in (tmp_path / "run" / "train.log").read_text()


def test_the_pid_data_policy_by_hand() -> None:
    """P e + I dt (0 + e) + D (e - 0) / dt on the first step, clipped; the history
    restarts with ``reset``."""
    from rlcore.offline.neorl2_recipe import PIDController

    pid = PIDController(p=(1.0, 2.0), i=(0.5, 0.0), d=(0.1, 0.0))
    obs = np.array([0.0, 0.0, 0, 0, 0.1, -0.2])  # errors 0.1, -0.2
    np.testing.assert_allclose(pid(obs), [0.1 + 0.5 * 0.2 * 0.1 + 0.1 * 0.1 / 0.2, -0.4])
    np.testing.assert_allclose(pid(obs), [0.1 + 0.5 * 0.2 * 0.2, -0.4])  # e unchanged: D 0
    pid.reset()
    np.testing.assert_allclose(pid(obs * 20), [1.0, -1.0])  # clipped


def test_the_dmsd_recipe_records_seeded_pid_trajectories(tmp_path) -> None:
    from rlcore.offline.datasets import load_dataset
    from rlcore.offline.neorl2_recipe import GAINS, main, record_dmsd

    episodes = record_dmsd("val", transitions=250)
    assert [len(e) for e in episodes] == [100, 100, 100]  # whole trajectories past 250
    for seed, episode in enumerate(episodes):
        np.testing.assert_array_equal(episode.observations[0], DMSDEnv().reset(seed=seed)[0])
    assert not np.allclose(GAINS["train"][0], GAINS["val"][0])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
        stats = main(["env=DMSD", "dataset_id=local/dmsd/high-v0", "transitions=200"])
        dataset = load_dataset("local/dmsd/high-v0")
    assert stats["episodes"] == 2 and len(dataset) == 200
    assert (dataset.ref_min_score, dataset.ref_max_score) == (30.60, 849.51)


def test_model_rollouts_terminate_as_the_reference_envs() -> None:
    """rlcore.model_based's rules, read from the observations, against the reference
    envs' own terminated flags on the golden trajectories."""
    import torch

    from rlcore.model_based import termination_rule

    for name, env_id in (("randomfrictionhopper", HOPPER_ID), ("safetyhalfcheetah", CHEETAH_ID)):
        rule = termination_rule(env_id)
        for episode in GOLDEN[name]:
            obs = torch.tensor(episode["obs"], dtype=torch.float64)
            ends = rule(obs[:-1], torch.zeros(len(obs) - 1, 1), obs[1:]).tolist()
            assert ends == episode["terminated"]
    assert any(e["terminated"][-1] for e in GOLDEN["randomfrictionhopper"])
    # Simglucose: the env ends on the blood glucose of the step's minutes, the reference's
    # terminated module (our rule) on the sensor reading, which lags it: the golden
    # episode ended by a glucose below 40 still reads 41.9
    (ended,) = [e for e in GOLDEN["simglucose"] if e["terminated"][-1]]
    assert 41 < ended["obs"][-1][0] < 42
    readings = torch.tensor([[100.0], [39.9], [40.0], [600.0], [600.1], [float("nan")]])
    ends = termination_rule(SIMGLUCOSE_ID)(readings, torch.zeros(6, 1), readings).tolist()
    assert ends == [False, True, False, False, True, True]
    rows = torch.zeros(5, 13, dtype=torch.float64)
    rows[:, 1], rows[:, 12] = 1.25, 2.0  # standing, friction 2
    rows[1, 1] = 0.6  # fallen
    rows[2, 2] = 0.25  # tilted
    rows[3, 8] = 150.0  # a joint velocity out of range
    rows[4, 12] = 150.0  # the friction column is not a state entry
    rule = termination_rule(HOPPER_ID)
    assert rule(rows, torch.zeros(5, 3), rows).tolist() == [False, True, True, True, False]


def test_the_sac_recipe_picks_the_snapshots_at_the_level(tmp_path) -> None:
    """Evaluations 0, 10, 60, 72, 81, 100, 30: the level is 75, the 4 closest are 72, 81,
    60, 100 (distances 3, 6, 15, 25), returned in return order; a missing file drops a
    step."""
    from rlcore.offline.neorl2_recipe import select_snapshots

    (tmp_path / "checkpoints").mkdir()
    rows = ["step,eval/return"]
    for step, value in enumerate((0, 10, 60, 72, 81, 100, 30)):
        rows.append(f"{step * 10},{value}")
        (tmp_path / "checkpoints" / f"agent_step_{step * 10}.pt").write_bytes(b"")
    (tmp_path / "eval.csv").write_text("\n".join(rows) + "\n")
    chosen = select_snapshots(tmp_path)
    assert [value for _, value in chosen] == [60, 72, 81, 100]
    assert [path.name for path, _ in chosen][0] == "agent_step_20.pt"
    assert [value for _, value in select_snapshots(tmp_path, level=0.1)] == [0, 10, 30, 60]
    (tmp_path / "checkpoints" / "agent_step_40.pt").unlink()  # 81: gone
    assert [value for _, value in select_snapshots(tmp_path)] == [30, 60, 72, 100]
    for step in (0, 10, 20, 30):
        (tmp_path / "checkpoints" / f"agent_step_{step}.pt").unlink()
    with pytest.raises(ValueError, match="has 2 agent snapshots"):
        select_snapshots(tmp_path)


def test_the_sac_recipe_records_mean_actions_of_policies_1_3_4(tmp_path) -> None:
    """A short SAC run on RandomFrictionHopper (observations standardised inside the agent),
    then the recipe from the command line: trajectory i starts at reset(seed=i) and acts
    with the pre-tanh mean (clipped) of the policies 1, 3, 4 in turn on the observation
    standardised by hand with the snapshot's statistics, clipped at 5; the exported
    snapshots hold the actor and those statistics alone, and a snapshot without them is
    refused."""
    import torch

    from rlcore.offline.datasets import load_dataset
    from rlcore.offline.neorl2_recipe import SACMeanPolicy, main, record_sac, within_speed_limit
    from rlcore.offline.recording import Episode
    from rlcore.train import train
    from tests.conftest import FAST, make_config

    run = tmp_path / "sac"
    train(make_config("algo=sac", "env=RandomFrictionHopper", *FAST, "total_steps=300",
                      "algo.learning_starts=100", "algo.hidden=[16,16]", "eval_every=60",
                      "checkpoint_every=60", "eval_episodes=1", "eval_envs=1",
                      "algo.normalize_obs=true"), run)  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
        main(["env=RandomFrictionHopper", f"run={run}", "dataset_id=local/rfh/high-v0",
              "transitions=40", f"export={tmp_path / 'assets'}"])  # fmt: skip
        dataset = load_dataset("local/rfh/high-v0")
    assert (dataset.ref_min_score, dataset.ref_max_score) == (-3.0, 503.0)
    assert len(dataset) >= 40
    with pytest.raises(ValueError, match="not with policies="):
        main(["env=RandomFrictionHopper", "policies=a.pt,b.pt,c.pt,d.pt", "level=0.5",
              "dataset_id=local/rfh/high-v1"])  # fmt: skip
    with pytest.raises(ValueError, match="give run=<SAC run dir> or policies="):
        main(["env=RandomFrictionHopper", "dataset_id=local/rfh/high-v1"])
    exported = [tmp_path / "assets" / f"sac_{k}.pt" for k in (1, 2, 3, 4)]
    snapshots = [torch.load(p, weights_only=False) for p in exported]
    assert all(list(s["agent"]) == ["actor", "obs_statistics"] for s in snapshots)
    returns = [torch.load(p, weights_only=False)["source"]["eval_return"] for p in exported]
    assert returns == sorted(returns)
    env = gym.make(HOPPER_ID)
    for split, order in (("train", (0, 2, 3)), ("val", (1,))):
        episodes = record_sac(HOPPER_ID, exported, split, transitions=150)
        assert len(episodes) >= 2
        for i, episode in enumerate(episodes):
            np.testing.assert_array_equal(episode.observations[0],
                                          env.reset(seed=i)[0].astype(np.float32))  # fmt: skip
            k = order[i % len(order)]
            actor = SACMeanPolicy(exported[k]).actor
            stats = snapshots[k]["agent"]["obs_statistics"]["obs"]
            std = (np.asarray(stats["var"], np.float64) + 1e-8) ** 0.5
            seen = np.clip((episode.observations[:-1] - np.asarray(stats["mean"])) / std, -5, 5)
            obs = torch.as_tensor(seen, dtype=torch.float32)
            mean = actor.net(obs).chunk(2, -1)[0].clamp(-1, 1).detach().numpy()
            np.testing.assert_allclose(episode.actions, mean, atol=1e-6)
    del snapshots[0]["agent"]["obs_statistics"]
    torch.save(snapshots[0], tmp_path / "no_stats.pt")
    with pytest.raises(ValueError, match="holds no 'obs_statistics'"):
        SACMeanPolicy(tmp_path / "no_stats.pt")
    fast = Episode(np.zeros((3, 1)), np.zeros((2, 1)), np.array([1.0, -100.0]),
                   np.zeros(2, bool), np.array([False, True]))  # fmt: skip
    slow = Episode(np.zeros((3, 1)), np.zeros((2, 1)), np.array([1.0, 3.0]),
                   np.zeros(2, bool), np.array([False, True]))  # fmt: skip
    assert within_speed_limit([fast, slow, fast]) == [slow]
    with pytest.raises(ValueError, match="crossed the speed limit"):
        within_speed_limit([fast])
