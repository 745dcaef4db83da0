import numpy as np
import pytest

from envs.make import make_vec_env
from rlcore.evaluate import evaluate, normalized_score


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
