"""Actor-learner runs (rlcore.distributed): the transition-source seam of the replay
loop without Ray (an in-process source over EnvWorker), the missing-Ray message, and,
with Ray installed, local Ray on the loopback interface, a 2-actor run that learns, a
killed actor replaced, and an interrupted run resumed."""

from __future__ import annotations

import importlib.util
import signal
import sys
import time
from itertools import cycle
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from rlcore import catalog, distributed
from rlcore.build import train_env_recipe
from rlcore.checkpoint import load_checkpoint
from rlcore.config import ConfigError
from rlcore.distributed import (
    ActorRecipe,
    DistributedSettings,
    EnvWorker,
    RolloutWorker,
    Transitions,
    gather_rows,
    import_ray,
    load_policy_weights,
    merge_stats,
    normalizer_stats,
    policy_weights,
    publish_due,
)
from rlcore.logging import read_csv
from rlcore.loops import TrainingInterrupted, _PhaseRun
from rlcore.train import train
from tests.conftest import FAST, make_config

HAVE_RAY = importlib.util.find_spec("ray") is not None
SAC_IP = ["algo=sac", "env=InvertedPendulum", *FAST, "checkpoint_every=1000000"]
SMALL = ["algo.hidden=[64,64]"]  # faster updates: the Ray tests stay short


class InProcessActors:
    """A TransitionSource over EnvWorkers in this process (round robin): the seam as
    ``RayActors`` drives it, without Ray."""

    def __init__(self, recipe: ActorRecipe, actors: int, batch_steps: int, every: int) -> None:
        self.workers = [EnvWorker(recipe, i, 0) for i in range(actors)]
        self.turn = cycle(range(actors))
        self.batch_steps, self.every = batch_steps, every
        self.weights, self.version, self.published = None, -1, []
        self.queue: list[Transitions] = []
        self.rows = 0
        self.closed = False

    def next_step(self) -> Transitions:
        if not self.queue:
            batch = self.workers[next(self.turn)].collect(
                self.weights, self.version, self.batch_steps
            )
            self.queue = [Transitions(*step) for step in batch["steps"]]
        self.rows += 1
        return self.queue.pop(0)

    def policy_changed(self, agent, updates: int) -> None:
        if publish_due(self.version, updates, self.every):
            self.weights, self.version = policy_weights(agent), updates
            self.published.append(updates)

    def metrics(self) -> dict[str, float]:
        return {"dist/published": float(len(self.published))}

    def close(self) -> None:
        self.closed = True


def test_publish_due_every_k_updates_and_first_at_once():
    assert publish_due(-1, 0, 5)  # nothing published yet: now
    assert not publish_due(0, 4, 5)
    assert publish_due(0, 5, 5)
    assert publish_due(3, 4, 1)


def test_replay_loop_counts_rows_received_and_keeps_the_update_to_data_ratio(tmp_path, monkeypatch):
    sources = []

    def in_process(algorithm, built, phases, run, logger):
        settings, env = built.run.settings, built.env
        recipe = ActorRecipe(algorithm.agent_class, built.run.algo,
                             {"name": settings.env.id, "num_envs": env.num_envs}, 0)  # fmt: skip
        sources.append(
            InProcessActors(recipe, actors=settings.distributed.actors, batch_steps=8, every=10)
        )
        return sources[-1], None

    monkeypatch.setattr("rlcore.run.actors", in_process)
    args = [*SAC_IP, *SMALL, "total_steps=300", "algo.learning_starts=100",
            "algo.updates_per_step=0.5",
            "log_every=100", "eval_every=0"]  # fmt: skip
    train(make_config(*args, "distributed.actors=2"), tmp_path)
    source = sources[0]
    state = load_checkpoint(tmp_path)["loop"]
    counters = state["counters"]
    assert source.rows == counters["env_steps"] == 300  # every row from the actors
    assert counters["updates"] == 100  # updates_per_step x rows of the online phase
    assert len(state["stateful"]["buffer"]["data"]["obs"]) == 300
    assert source.published[0] == 0 and source.published[-1] >= 90  # every 10 updates
    assert all(b - a >= 10 for a, b in zip(source.published, source.published[1:]))
    assert not counters["env_started"]  # the learner's own env never stepped
    assert source.closed
    logged = read_csv(tmp_path / "dist.csv")  # the source's metrics, every log_every steps
    assert [row["step"] for row in logged] == [200, 300]
    assert logged[-1]["dist/published"] == len(source.published)


def _recipe(name: str, algo: dict, env: dict) -> ActorRecipe:
    """The recipe the root hands actors: the catalog's agent class and the typed config."""
    spec = catalog.get(name)
    return ActorRecipe(spec.agent_class, spec.config_from_dict(algo), env, 0)


def test_worker_acts_randomly_until_weights_then_with_them():
    algo = OmegaConf.to_container(make_config("algo=sac").algo, resolve=True)
    recipe = _recipe("sac", algo, {"name": "InvertedPendulum-v5"})
    worker = EnvWorker(recipe, 0, 0)
    batch = worker.collect(None, -1, 5)
    assert batch["version"] == -1 and len(batch["steps"]) == 5
    learner = EnvWorker(recipe, 1, 0).agent
    weights = policy_weights(learner)
    batch = worker.collect(weights, 7, 3)
    assert batch["version"] == 7 and batch["sps"] > 0
    for ours, theirs in zip(policy_weights(worker.agent), weights):
        assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    load_policy_weights(worker.agent, weights)  # the same shapes load again


def test_missing_ray_says_how_to_install_it_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(ConfigError) as error:
        import_ray()
    assert str(error.value).count("\n") == 0
    assert 'pip install "rlcore[ray]"' in str(error.value)
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match="rlcore\\[ray\\]"):
        train(make_config(*SAC_IP, "distributed.actors=2"), run_dir)
    assert not run_dir.exists()  # refused before anything was written


def test_actors_refuse_what_they_cannot_run_yet(tmp_path):
    with pytest.raises(ConfigError, match="continuous actors"):
        train(make_config("algo=ppo", "env=InvertedPendulum", *FAST, "distributed.actors=2",
                          "distributed.outbox=10"),
              tmp_path / "run")  # fmt: skip
    assert not (tmp_path / "run").exists()


needs_ray = pytest.mark.skipif(
    not HAVE_RAY, reason='Ray is not installed: pip install "rlcore[ray]"'
)


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for this module's tests (started as a run starts it)."""
    import os

    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    previous = signal.signal(signal.SIGTERM, _sigterm_sentinel)
    ray = distributed.start_ray(None, num_cpus=2)
    started = SimpleNamespace(ray=ray, sigterm=signal.getsignal(signal.SIGTERM))
    signal.signal(signal.SIGTERM, previous)
    yield started
    ray.shutdown()


def _sigterm_sentinel(signum, frame):
    """A SIGTERM handler that must survive ray.init (rlcore.train's saves the run)."""


@needs_ray
@pytest.mark.slow
def test_two_actors_learn_inverted_pendulum_on_loopback_ray(tmp_path, local_ray):
    addresses = distributed.node_addresses(local_ray.ray)
    assert addresses and all(address.startswith("127.") for address in addresses), addresses
    assert local_ray.sigterm is _sigterm_sentinel  # the run's handler was kept
    # a random policy holds the pole ~5-13 steps; measured with 2 actors: 75 and 77 at 1k
    # steps (88 and 119 later)
    args = [*SAC_IP, *SMALL, "total_steps=1000", "algo.learning_starts=300", "eval_every=500",
            "eval_episodes=5", "log_every=500", "distributed.actors=2"]  # fmt: skip
    train(make_config(*args), tmp_path)
    best = max(row["eval/return"] for row in read_csv(tmp_path / "eval.csv"))
    assert best >= 40, best
    logged = read_csv(tmp_path / "dist.csv")[-1]
    assert logged["dist/actor0_sps"] > 0 and logged["dist/actor1_sps"] > 0
    assert 0 <= logged["dist/policy_lag"] <= logged["dist/policy_lag_max"]
    assert logged["dist/restarts"] == 0


@needs_ray
@pytest.mark.slow
def test_killed_actor_is_replaced_then_ctrl_c_saves_and_the_run_resumes(
    tmp_path, local_ray, monkeypatch
):
    receive, replay_step, close = (distributed.RayActors.receive, _PhaseRun.replay_step,
                                   distributed.RayActors.close)  # fmt: skip
    calls, closed = [], []

    def kill_actor_0_once(self):
        calls.append(1)
        if len(calls) == 3:
            self.kill(0)  # its pending batch is lost
        receive(self)

    def ctrl_c_at_320(self, phase):
        replay_step(self, phase)
        if self.counters["step"] == 320 and self.run.resume is None:
            self.run.stop_request = "SIGINT"  # what rlcore.train's Ctrl-C handler sets

    def counted_close(self):
        closed.append(len(self.actors))
        close(self)

    monkeypatch.setattr(distributed.RayActors, "receive", kill_actor_0_once)
    monkeypatch.setattr(_PhaseRun, "replay_step", ctrl_c_at_320)
    monkeypatch.setattr(distributed.RayActors, "close", counted_close)
    args = [*SAC_IP, *SMALL, "total_steps=400", "algo.learning_starts=300", "log_every=10",
            "eval_every=0", "distributed.actors=2"]  # fmt: skip
    with pytest.raises(TrainingInterrupted):
        train(make_config(*args), tmp_path)
    assert closed == [2]  # every actor stopped
    log = (tmp_path / "train.log").read_text()
    assert "actor 0 died (ActorDiedError); restarted it; lost its unsent transitions" in log
    logged = read_csv(tmp_path / "dist.csv")[-1]
    assert logged["dist/restarts"] == 1 and logged["dist/lost_steps"] == 16
    assert load_checkpoint(tmp_path)["loop"]["counters"]["step"] == 320
    train(make_config(*args, f"resume={tmp_path}"), tmp_path)
    state = load_checkpoint(tmp_path)["loop"]
    assert state["counters"]["step"] == 400 and state["counters"]["updates"] == 100
    assert len(state["stateful"]["buffer"]["data"]["obs"]) == 400  # the buffer resumed whole


ROBOT = "examples.remote_robot.robot:SimulatedRobot-v0"


def test_robot_actor_keeps_its_control_rate_and_last_weights_while_the_link_is_down():
    algo = OmegaConf.to_container(make_config("algo=sac", *SMALL).algo, resolve=True)
    env = {"name": ROBOT, "env_kwargs": {"control_hz": 200.0}}
    robot = EnvWorker(_recipe("sac", algo, env), 0, 0)
    weights = policy_weights(robot.agent)
    robot.start(outbox=40)
    try:
        first = robot.collect(weights, 3, 10)  # link up: the learner's weights arrive
        assert 1 <= len(first["steps"]) <= 10 and first["version"] == 3
        time.sleep(0.6)  # link down: ~120 control steps, the outbox keeps the last 40
        later = robot.collect(None, -1, 1000)  # the link is back (no newer weights)
    finally:
        robot.stop()
    assert len(later["steps"]) == 40
    assert later["dropped"] >= 50  # counted, not silently lost
    assert later["version"] == 3  # it kept acting with the last weights it had
    assert 120 <= later["sps"] <= 210  # the robot's control rate, not the learner's


def test_merged_normaliser_statistics_equal_those_of_all_samples():
    rng = np.random.default_rng(0)
    start_samples = rng.normal(size=(50, 3))
    worker_samples = [rng.normal(2.0, 3.0, size=(n, 3)) for n in (30, 70)]
    start = stats_of(start_samples)
    ends = [{"obs": stats_of(np.concatenate([start_samples, s]))} for s in worker_samples]
    merged = merge_stats({"obs": start, "reward": None}, ends)
    everything = stats_of(np.concatenate([start_samples, *worker_samples]))
    assert merged["reward"] is None and merged["obs"]["count"] == 150
    np.testing.assert_allclose(merged["obs"]["mean"], everything["mean"], rtol=1e-12)
    np.testing.assert_allclose(merged["obs"]["var"], everything["var"], rtol=1e-12)


def stats_of(samples: np.ndarray) -> dict:
    return {"mean": samples.mean(0), "var": samples.var(0), "count": len(samples)}


class InProcessRollouts:
    """A RolloutSource over RolloutWorkers in this process: the seam without Ray."""

    def __init__(self, recipe: ActorRecipe, workers: int, env) -> None:
        self.workers = [RolloutWorker(recipe, i, 0) for i in range(workers)]
        self.num_envs = workers * recipe.env["num_envs"]
        self.stats = normalizer_stats(env)
        self.calls = 0

    def rollout(self, agent, num_steps: int):
        self.calls += 1
        weights = policy_weights(agent)
        results = [w.rollout(weights, self.stats, num_steps) for w in self.workers]
        self.stats = merge_stats(self.stats, [r["stats"] for r in results])
        rows = gather_rows([r["rows"] for r in results])
        return rows, np.concatenate([r["obs"] for r in results])

    def metrics(self) -> dict[str, float]:
        return {"dist/rollouts": float(self.calls)}

    def close(self) -> None:
        pass


def test_rollout_workers_fill_one_rollout_along_the_env_axis(tmp_path, monkeypatch):
    made = []

    def in_process(algorithm, built, phases, run, logger):
        settings = built.run.settings
        recipe = ActorRecipe(algorithm.agent_class, built.run.algo,
                             train_env_recipe(settings, built.plan, 1), 0)  # fmt: skip
        made.append(InProcessRollouts(recipe, settings.distributed.actors, built.env))
        return None, made[-1]

    monkeypatch.setattr("rlcore.run.actors", in_process)
    args = ["algo=ppo", "env=InvertedPendulum", *FAST, "total_steps=256", "algo.rollout_steps=64",
            "algo.hidden=[16,16]", "eval_every=0", "distributed.actors=2"]  # fmt: skip
    train(make_config(*args), tmp_path)
    counters = load_checkpoint(tmp_path)["loop"]["counters"]
    # two workers x 64 steps = one 128-step rollout per update: 2 iterations for 256 steps
    assert made[0].calls == counters["updates"] == 2 and counters["env_steps"] == 256
    assert made[0].stats["obs"]["count"] > 256  # both workers' observations merged
    assert [row["step"] for row in read_csv(tmp_path / "dist.csv")] == [128, 256]


@needs_ray
@pytest.mark.slow
def test_ray_rollout_worker_that_died_is_replaced_and_its_part_collected(local_ray):
    algo = OmegaConf.to_container(make_config("algo=ppo", "algo.hidden=[16,16]").algo,
                                  resolve=True)  # fmt: skip
    env_recipe = {"name": "InvertedPendulum-v5", "num_envs": 1, "normalize_obs": True}
    recipe = _recipe("ppo", algo, env_recipe)
    env, agent, _ = recipe.build(0, 0)  # the learner's
    notes = []
    # one worker (two would spawn a third process: the gathering is tested in-process)
    workers = distributed.RayRollouts(recipe, DistributedSettings(actors=1), env, notes.append)
    try:
        local_ray.ray.kill(workers.workers[0], no_restart=True)
        rows, last_obs = workers.rollout(agent, 8)
    finally:
        workers.close()
    assert len(rows) == 8 and rows[0].obs.shape == (1, 4) and last_obs.shape == (1, 4)
    assert workers.restarts == 1 and "rollout worker 0 died" in notes[0]
    assert workers.stats["obs"]["count"] > 8  # the new worker's observations merged


def test_distributed_options_are_checked_with_the_fix_named():
    assert DistributedSettings.from_config(None) == DistributedSettings()  # one process
    with pytest.raises(ConfigError, match=r"unknown distributed option\(s\) \['actor'\]"):
        DistributedSettings.from_config({"actor": 2})
    with pytest.raises(ConfigError, match="publish_every"):
        DistributedSettings.from_config({"actors": 2, "publish_every": 0})


def test_actor_rows_keep_the_final_observation_of_a_truncated_episode():
    """An actor's rows, as the loop's own (tests/test_loops.py): env 1 (base 0) is
    truncated after 2 steps and reset at once; its row's next_obs is the episode's last
    observation 2, not the next episode's first 100."""
    from tests.test_envs import ScriptedEnv, scripted_vec_env

    class ScriptedRecipe:
        def build(self, index: int, incarnation: int) -> tuple:
            env = scripted_vec_env(ScriptedEnv(base=1000.0), ScriptedEnv(base=0.0, limit=2))
            return env, None, 0

    worker = EnvWorker(ScriptedRecipe(), 0, 0)  # type: ignore[arg-type]
    rows = [worker.step() for _ in range(3)]
    obs = [row[0][:, 0].tolist() for row in rows]
    next_obs = [row[3][:, 0].tolist() for row in rows]
    truncated = [row[5].tolist() for row in rows]
    assert obs == [[1000.0, 0.0], [1001.0, 1.0], [1002.0, 100.0]]
    assert next_obs == [[1001.0, 1.0], [1002.0, 2.0], [1003.0, 101.0]]
    assert truncated == [[False, False], [False, True], [False, False]]


def test_rollout_workers_hand_the_episodes_success_to_the_log(tmp_path, monkeypatch):
    """Worker rows keep every per-episode value the loop logs: on a robot task the
    learner's train.csv holds ``train/episode_success`` for the workers' episodes."""

    def in_process(algorithm, built, phases, run, logger):
        settings = built.run.settings
        recipe = ActorRecipe(algorithm.agent_class, built.run.algo,
                             train_env_recipe(settings, built.plan, 1), 0)  # fmt: skip
        return None, InProcessRollouts(recipe, settings.distributed.actors, built.env)

    monkeypatch.setattr("rlcore.run.actors", in_process)
    args = ["algo=ppo", "env=PandaReach", "env.flatten_obs=true", "env.backend=sync", *FAST,
            "total_steps=256", "algo.rollout_steps=64", "algo.hidden=[16,16]", "eval_every=0",
            "distributed.actors=2"]  # fmt: skip
    train(make_config(*args), tmp_path)
    rows = read_csv(tmp_path / "train.csv")
    episodes = [row for row in rows if "train/episode_return" in row]
    assert len(episodes) == 4  # 2 workers x 128 steps, 50-step episodes: 2 each
    assert all(row["train/episode_success"] in (0.0, 1.0) for row in episodes)
