import numpy as np
import pytest

from rlcore.envs.make import make_vec_env
from rlcore.evaluation import evaluate, normalized_score


def test_normalized_score():
    assert normalized_score(3234.3, -20.272305, 3234.3) == pytest.approx(100.0)
    assert normalized_score(-20.272305, -20.272305, 3234.3) == pytest.approx(0.0)


def test_evaluate_runs_exact_episode_count_and_is_reproducible():
    env = make_vec_env("InvertedPendulum", num_envs=3)
    policy = lambda obs: np.zeros((obs.shape[0], 1), np.float32)  # noqa: E731
    first = evaluate(policy, env, num_episodes=7, seed=4)
    second = evaluate(policy, env, num_episodes=7, seed=4)
    assert first == second and first["length"] > 1
    # v5: reward 1 per step while upright, 0 on the step that terminates
    assert first["return"] == pytest.approx(first["length"] - 1)


def test_chunked_policy_runs_each_chunk_open_loop_and_replans_after_an_episode_end():
    env = make_vec_env("InvertedPendulum", num_envs=2)
    calls, sent = [], []
    step = env.step

    def recording_step(action):
        sent.append(np.asarray(action)[:, 0].copy())
        return step(action)

    env.step = recording_step

    def chunk_policy(obs):  # (B, H=3, 1): actions 0, 0.5, -0.5 of every chunk
        calls.append(len(obs))
        return np.tile(np.array([0.0, 0.5, -0.5], np.float32)[None, :, None], (len(obs), 1, 1))

    result = evaluate(chunk_policy, env, num_episodes=2, seed=0)
    assert [list(a) for a in sent[:3]] == [[0.0, 0.0], [0.5, 0.5], [-0.5, -0.5]]
    assert len(calls) < len(sent)  # one call per chunk, not per step
    # zero chunks act exactly like the per-step zero policy
    zeros = lambda obs: np.zeros((len(obs), 4, 1), np.float32)  # noqa: E731
    per_step = lambda obs: np.zeros((len(obs), 1), np.float32)  # noqa: E731
    env.step = step
    assert evaluate(zeros, env, 5, seed=1) == evaluate(per_step, env, 5, seed=1)
    assert result["length"] >= 1


def test_an_env_whose_episode_ended_starts_a_new_chunk():
    env = make_vec_env("InvertedPendulum", num_envs=2)
    sent, ended = [], []
    step = env.step

    def recording_step(action):
        sent.append(np.asarray(action)[:, 0].copy())
        out = step(action)
        ended.append(out[2] | out[3])
        return out

    env.step = recording_step
    first = np.array([0.7, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], np.float32)  # H = 8
    evaluate(lambda obs: np.tile(first[None, :, None], (len(obs), 1, 1)), env, 4, seed=0)
    checked = 0
    for t in range(len(sent) - 1):
        for i in np.flatnonzero(ended[t]):
            assert sent[t + 1][i] == np.float32(0.7)  # the chunk restarts at the reset
            checked += 1
    assert checked >= 2
