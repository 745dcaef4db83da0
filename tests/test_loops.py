"""The one loop skeleton: a rollout phase runs beside replay phases (told its phase,
evaluated at its end, logged every iteration) and is refused when it cannot run; replay
phases store an ended episode's true final observation as ``next_obs``."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from rlcore.buffers import ReplayBuffer, RolloutBuffer
from rlcore.capabilities import MissingCapabilityError, OnPolicy, Phased
from rlcore.logging import Logger, read_csv
from rlcore.loops import LoopSettings, Phase, RunContext, rollout_phase, run_phases
from tests.test_envs import ScriptedEnv, scripted_vec_env
from tests.test_o2o_core import Source, SpyAgent


class SpyLearner(SpyAgent, OnPolicy, Phased):
    """An on-policy spy: zero actions, values and log-probs; records rollout updates."""

    def explore(self, obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        self.events.append(("explore", self.phase))
        n = len(obs)
        return torch.zeros(n, self.action_dim), torch.zeros(n), torch.zeros(n)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.zeros(len(obs))

    def update(self, batch, progress: float | None = None) -> dict[str, float]:
        if progress is None:  # a replay batch
            return super().update(batch)
        self.events.append(("rollout_update", self.phase, len(batch.obs), progress))
        return {"loss": progress}


def _envs(num_envs: int = 2):
    from rlcore.envs.make import make_vec_env

    return make_vec_env("InvertedPendulum-v5", num_envs, seed=0), make_vec_env(
        "InvertedPendulum-v5", 1, seed=1
    )


def _rollout(env, num_steps: int = 4) -> RolloutBuffer:
    return RolloutBuffer(num_steps, env.num_envs, env.single_observation_space.shape, (1,), "cpu")


def _run(tmp_path, agent, phases, env, eval_env):
    logger = Logger(tmp_path, tensorboard=False, console=False)
    saved = []
    run = RunContext("spy", logger, save=lambda state: saved.append(state) or tmp_path)
    settings = LoopSettings(eval_every=1000, eval_episodes=1, checkpoint_every=0)
    phases = [replace(phase, batch_size=4) for phase in phases]
    run_phases(agent, phases, env, eval_env, settings, run)
    logger.close()
    return saved


def test_rollout_phase_after_an_offline_phase_in_one_skeleton(tmp_path):
    env, eval_env = _envs()
    agent = SpyLearner(1)
    # 3 gradient steps on a dataset, then 2 iterations of 4 vector steps x 2 envs
    phases = [Phase("offline", 3, Source(0.0)), Phase("rollout", 16, rollout=_rollout(env))]
    saved = _run(tmp_path, agent, phases, env, eval_env)
    assert [e[1] for e in agent.events if e[0] == "phase"] == ["offline", "rollout"]
    assert [e[0] for e in agent.events if e[0] != "phase"] == (
        ["update"] * 3 + (["explore"] * 4 + ["rollout_update"]) * 2
    )
    rollout_updates = [e for e in agent.events if e[0] == "rollout_update"]
    # each update: the full rollout (8 rows), progress = the phase's fraction done
    assert rollout_updates == [("rollout_update", "rollout", 8, 0.0),
                               ("rollout_update", "rollout", 8, 0.5)]  # fmt: skip
    # the end of each phase evaluated, with where it lies (env steps, phase)
    evals = read_csv(tmp_path / "eval.csv")
    assert [(r["step"], r["eval/env_steps"], r["eval/phase"]) for r in evals] == [
        (3, 0, "offline"),
        (19, 16, "rollout"),
    ]
    # a rollout phase logs every iteration's metrics (progress is the spy's "loss")
    rows = [(r["step"], r["train/loss"]) for r in read_csv(tmp_path / "train.csv")
            if "train/loss" in r]  # fmt: skip
    assert rows == [(11, 0.0), (19, 0.5)]
    final = saved[-1]["counters"]
    assert (final["step"], final["env_steps"], final["updates"], final["phase"]) == (19, 16, 5, 1)


def test_rollout_phase_of_a_run_is_whole_rollouts():
    env, _ = _envs()
    rollout = _rollout(env, num_steps=4)
    assert rollout_phase(rollout, 20).steps == 16  # rounded down to whole rollouts
    assert rollout_phase(rollout, 3).steps == 8  # at least one
    with pytest.raises(ValueError, match="rollout buffer"):
        Phase("rollout", 8)
    with pytest.raises(ValueError, match="rollout buffer"):
        Phase("online", 8, Source(0.0), rollout=rollout)


def test_rollout_phase_refuses_what_it_cannot_run(tmp_path):
    env, eval_env = _envs()
    with pytest.raises(ValueError, match=r"multiple of rollout steps x num_envs \(8\)"):
        _run(tmp_path, SpyLearner(1), [Phase("rollout", 12, rollout=_rollout(env))], env,
             eval_env)  # fmt: skip
    with pytest.raises(MissingCapabilityError, match="does not implement OnPolicy"):
        _run(tmp_path, SpyAgent(1), [Phase("rollout", 8, rollout=_rollout(env))], env, eval_env)
    one_env, _ = _envs(1)
    with pytest.raises(ValueError, match="holds 1 envs, the env has 2"):
        _run(tmp_path, SpyLearner(1), [Phase("rollout", 8, rollout=_rollout(one_env))], env,
             eval_env)  # fmt: skip
    assert not list(tmp_path.glob("*.csv"))  # refused before a step was logged


def test_stop_after_s_ends_on_training_time_and_adds_up_over_a_resume(tmp_path, monkeypatch):
    """Every tick takes 1 s of the (fake) clock and nothing else does: a budget of 5.5 s
    stops after the 6th gradient step, evaluated and checkpointed there; the resumed run
    counts from 6 s, and ``eval/train_seconds`` is the x-axis for wall-time curves."""
    from rlcore import loops

    now = [0.0]

    def clock() -> float:  # 1 s between two readings: a tick's start and its end
        now[0] += 1.0
        return now[0]

    monkeypatch.setattr(loops, "_clock", clock)
    env, eval_env = _envs()

    def run(out, budget, resume=None):
        logger = Logger(out, tensorboard=False, console=False)
        saved = []
        ctx = RunContext("spy", logger, save=lambda s: saved.append(s) or out, resume=resume)
        settings = LoopSettings(eval_every=4, eval_episodes=1, checkpoint_every=0,
                                stop_after_s=budget)  # fmt: skip
        phases = [Phase("offline", 20, Source(0.0), batch_size=4)]
        result = run_phases(SpyAgent(1), phases, env, eval_env, settings, ctx)
        logger.close()
        return result, saved, read_csv(out / "eval.csv")

    result, saved, evals = run(tmp_path / "a", 5.5)
    assert result["run/step"] == 6 and result["run/out_of_time"] == 1.0
    assert result["run/train_seconds"] == 6.0
    assert [(r["step"], r["eval/train_seconds"]) for r in evals] == [(4, 4.0), (6, 6.0)]
    assert saved[-1]["counters"]["step"] == 6 and saved[-1]["train_seconds"] == 6.0
    # resumed with the budget spent: nothing runs, nothing is evaluated again
    result, _, evals = run(tmp_path / "spent", 5.5, resume=saved[-1])
    assert result["run/step"] == 6 and result["run/out_of_time"] == 1.0 and evals == []
    # a larger budget on resume: the time already spent counts
    result, _, evals = run(tmp_path / "b", 9.0, resume=saved[-1])
    assert result["run/step"] == 9 and result["run/train_seconds"] == 9.0
    assert [(r["step"], r["eval/train_seconds"]) for r in evals] == [(8, 8.0), (9, 9.0)]
    # no budget: all 20 steps, and the last evaluation is the phase's end
    result, _, evals = run(tmp_path / "c", None)
    assert result["run/step"] == 20 and result["run/out_of_time"] == 0.0
    assert evals[-1]["step"] == 20 and evals[-1]["eval/train_seconds"] == 20.0


def test_replay_rows_keep_the_final_observation_of_a_truncated_episode(tmp_path):
    """Two envs, observation base + 100 * episode + t: env 0 (base 1000) runs on, env 1
    (base 0) is truncated after 2 steps and reset at once (same-step autoreset). Three
    vector steps of a warm-up write rows t * 2 + i; the truncated row's ``next_obs`` is
    the episode's last observation 2, not the next episode's first 100."""
    env = scripted_vec_env(ScriptedEnv(base=1000.0), ScriptedEnv(base=0.0, limit=2))
    eval_env = scripted_vec_env(ScriptedEnv(limit=2))
    buffer = ReplayBuffer(8, (1,), (1,), num_envs=2)
    logger = Logger(tmp_path, tensorboard=False, console=False)
    run = RunContext("spy", logger, save=lambda state: tmp_path)
    settings = LoopSettings(eval_every=1000, eval_episodes=1, checkpoint_every=0)
    run_phases(SpyAgent(1), [Phase("warmup", 6)], env, eval_env, settings, run, buffer)
    logger.close()
    assert len(buffer) == 6
    rows = buffer.batch(torch.arange(6))
    # env 0:  1000 -> 1001, 1001 -> 1002, 1002 -> 1003
    # env 1:  0 -> 1, 1 -> 2 (truncated; reset to 100), 100 -> 101
    assert rows.obs[:, 0].tolist() == [1000.0, 0.0, 1001.0, 1.0, 1002.0, 100.0]
    assert rows.next_obs[:, 0].tolist() == [1001.0, 1.0, 1002.0, 2.0, 1003.0, 101.0]
    assert rows.truncated.tolist() == [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    assert rows.terminated.tolist() == [0.0] * 6
    # a sampled row carries the same pair
    sampled = buffer.sample(64)
    truncated = sampled.truncated > 0
    assert truncated.any() and (sampled.next_obs[truncated, 0] == 2.0).all()
    np.testing.assert_array_equal(sampled.next_obs[~truncated, 0], sampled.obs[~truncated, 0] + 1)
