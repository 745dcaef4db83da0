"""Deterministic evaluation on a vector env, the episode recorder (returns, costs,
videos) and the score helpers: the D4RL normalised score and its pinned reference table,
read by the datasets and by the report alike. The command line that evaluates a saved
run is rlcore.evaluate.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv, VectorWrapper

from rlcore.capabilities import PerEnvState
from rlcore.envs.chunks import ChunkQueue
from rlcore.spaces import to_env_action


def evaluate(
    policy: Callable[[np.ndarray], np.ndarray],
    env: VectorEnv,
    num_episodes: int,
    seed: int,
) -> dict[str, float]:
    """Run ``num_episodes`` full episodes and return mean/std/min/max return and length
    (and mean/std episode cost on a task that reports costs; ``success_rate`` on a task that
    reports ``info["is_success"]``).

    Episodes are split evenly across the sub-envs up front (env i runs its quota, then
    idles), so short episodes are not over-represented. The env is reset with ``seed``
    each call, so every evaluation starts from the same initial states.

    A policy may return action CHUNKS, (B, H, *action_shape): each sub-env then executes
    its chunk open loop for H steps and asks for a new one when it is used up or its
    episode ended (the policy is called on every env's observation; only the rows of the
    envs that need a chunk are taken). A policy with an ``episodes_started(mask)`` method
    keeps per-env state (a residual policy's open-loop base chunk): it is told which envs
    start a new episode (all after the reset, then those that just ended).
    """
    n = env.num_envs
    quota = np.full(n, num_episodes // n)
    quota[: num_episodes % n] += 1
    returns: list[float] = []
    lengths: list[float] = []
    costs: list[float] = []
    successes: list[float] = []
    done_count = np.zeros(n, dtype=np.int64)
    obs, _ = env.reset(seed=seed)
    episodes_started = policy.episodes_started if isinstance(policy, PerEnvState) else None
    if episodes_started is not None:
        episodes_started(np.ones(n, bool))
    chunked = len(env.single_action_space.shape) + 2  # ndim of a batch of chunks
    queue = ChunkQueue()
    while (done_count < quota).any():
        # a dict observation (one array per part): its first part counts the envs
        need = queue.needs(next(iter(obs.values())) if isinstance(obs, dict) else obs)
        if need.any():  # the policy sees every env; the envs that need a chunk take theirs
            out = np.asarray(policy(obs))
            queue.fill((out if out.ndim == chunked else out[:, None])[need], need)
        action = to_env_action(queue.pop(), env.single_action_space)
        obs, _, _, _, info = env.step(action)
        finished = ~np.isnan(info["episode_return"])
        if episodes_started is not None:
            episodes_started(finished)
        queue.restart(finished)  # a new chunk from the reset observation
        for i in np.flatnonzero(finished):
            if done_count[i] < quota[i]:
                returns.append(float(info["episode_return"][i]))
                lengths.append(float(info["episode_length"][i]))
                if "episode_cost" in info:
                    costs.append(float(info["episode_cost"][i]))
                if "episode_success" in info:
                    successes.append(float(info["episode_success"][i]))
                done_count[i] += 1
    r = np.asarray(returns)
    result = {
        "return": float(r.mean()),
        "return_std": float(r.std()),
        "return_min": float(r.min()),
        "return_max": float(r.max()),
        "length": float(np.mean(lengths)),
    }
    if costs:  # a task with costs: the episodes' summed cost
        result |= {"cost": float(np.mean(costs)), "cost_std": float(np.std(costs))}
    if successes:  # a task that reports is_success: the share of episodes ending in one
        result["success_rate"] = float(np.mean(successes))
    return result


def normalized_score(value: float, random_score: float, expert_score: float) -> float:
    """D4RL normalised score on the 0-100 scale."""
    return 100.0 * (value - random_score) / (expert_score - random_score)


# D4RL's reference returns (``d4rl/infos.py``, the -random-v0 / expert values that the
# -v1/-v2 datasets reuse), copied from there: env family -> (random return, expert return)
D4RL_REF_SCORES: dict[str, tuple[float, float]] = {
    "hopper": (-20.272305, 3234.3),
    "halfcheetah": (-280.178953, 12135.0),
    "walker2d": (1.629008, 4592.3),
    "ant": (-325.6, 3879.7),
    "antmaze": (0.0, 1.0),  # every antmaze-* dataset
    # NeoRL-2's (random, expert) returns (its neorl2/info.py): envs/neorl2.py's tasks
    "dmsd": (30.60, 849.51),
    "pipeline": (-296.0, 751.0),
    "randomfrictionhopper": (-3.0, 503.0),
    "safetyhalfcheetah": (-283.0, 2507.0),
    "simglucose": (9.75, 475.0),  # envs/simglucose.py
    "rocketrecovery": (-176.0, 208.0),  # envs/rocketrecovery.py
}


class ScoreReferenceError(ValueError):
    """No reference scores (random, expert) for an env or dataset."""


def env_family(env_or_dataset_id: str) -> str | None:
    """The table's family name inside an env or dataset id, or None.

    ``Hopper-v5``, ``mujoco/hopper/medium-v0`` and ``hopper-medium-v2`` all give
    ``hopper``; ``antmaze-umaze-v2`` and ``D4RL/antmaze/umaze-v1`` give ``antmaze``.
    Tokens are matched whole, so ``Ant-v5`` is ``ant`` and ``antmaze`` never is.
    """
    for token in re.split(r"[/\-_\s.:]+", env_or_dataset_id.lower()):
        if token in D4RL_REF_SCORES:
            return token
    return None


def pinned_reference_scores(env_or_dataset_id: str) -> tuple[float, float] | None:
    """(random, expert) returns of ``D4RL_REF_SCORES`` for an env or dataset id, or None
    when the table does not pin its family."""
    family = env_family(env_or_dataset_id)
    return None if family is None else D4RL_REF_SCORES[family]


# Aggregates over seeds and tasks (IQM, stratified bootstrap confidence intervals,
# performance profiles, rliable's definitions) live in rlcore.report.


# --------------------------------------------------------------------------- CLI


class EvaluateError(ValueError):
    """A bad option of ``python -m rlcore.evaluate`` (the message names the fix)."""


class EpisodeRecorder(VectorWrapper):
    """Records each finished episode of sub-env 0 (return, length, cost) and, with
    ``video_path(i)`` (i = 0, 1, ...), streams episode i's rendered frames to that MP4:
    the reset frame, then one per step (same-step autoreset: the step that ends an episode
    shows the next one's first frame). Frames of episodes past ``videos`` are not kept."""

    def __init__(
        self,
        env: VectorEnv,
        video_path: Callable[[int], Path] | None = None,
        videos: int = 0,
        fps: float = 30.0,
        thumbnail_every: int = 0,
    ) -> None:
        super().__init__(env)
        self.video_path, self.videos, self.fps = video_path, videos, fps
        # every k-th frame of the first episode at half size (a TensorBoard preview); 0: none
        self.thumbnail_every = thumbnail_every
        self.thumbnails: list[np.ndarray] = []
        self.frame_count = 0
        self.episodes: list[dict[str, Any]] = []
        self.written: list[Path] = []
        self._writer: Any = None

    def _frame(self) -> None:
        index = len(self.episodes)
        if self.video_path is None or index >= self.videos:
            return
        if self._writer is None:
            self._writer = video_writer(self.video_path(index), self.fps)
            self.written.append(self.video_path(index))
        frame = np.asarray(self.env.render()[0])
        self._writer.append_data(frame)
        if self.thumbnail_every and index == 0 and self.frame_count % self.thumbnail_every == 0:
            self.thumbnails.append(frame[::2, ::2].copy())
        self.frame_count += 1

    def _end_video(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._end_video()
        self._frame()
        return obs, info

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        returns = np.asarray(info["episode_return"])
        if not np.isnan(returns[0]):
            episode = {"return": float(returns[0]), "length": int(info["episode_length"][0])}
            if "episode_cost" in info:
                episode["cost"] = float(info["episode_cost"][0])
            if "episode_success" in info:
                episode["success"] = bool(info["episode_success"][0])
            self.episodes.append(episode)
            self._end_video()
        self._frame()
        return obs, reward, terminated, truncated, info

    def close(self, **kwargs: Any) -> None:
        self._end_video()
        super().close(**kwargs)


class EvalVideo:
    """Training's evaluation video (``eval_video_every=K``): at every K-th evaluation (by
    step, ``step // eval_every``, so a resumed run keeps the cadence) one deterministic
    evaluation episode on ``make_env()`` (the eval env's recipe with ``render_mode``
    ``rgb_array``, one sub-env) becomes ``<folder>/eval_step_<step>.mp4``, and ``publish``
    gets its path and a preview (every 4th frame at half size) for TensorBoard."""

    def __init__(
        self,
        make_env: Callable[[], VectorEnv],
        every: int,
        eval_every: int,
        folder: Path,
        publish: Callable[[Path, list[np.ndarray], float, int], None],
    ) -> None:
        self.make_env, self.every, self.eval_every = make_env, every, eval_every
        self.folder, self.publish = folder, publish

    def due(self, step: int) -> bool:
        index = step // self.eval_every if self.eval_every > 0 else 0
        return self.every > 0 and index % self.every == 0

    def __call__(self, evaluate_on: Callable[[VectorEnv], Any], step: int) -> Path | None:
        """Record (when due) one episode evaluated by ``evaluate_on(env)``."""
        if not self.due(step):
            return None
        env = self.make_env()
        fps = float(env.metadata.get("render_fps", 30))
        path = self.folder / f"eval_step_{step}.mp4"
        recorder = EpisodeRecorder(env, lambda _: path, 1, fps, thumbnail_every=4)
        try:
            evaluate_on(recorder)
        finally:
            recorder.close()
        self.publish(path, recorder.thumbnails, fps / 4, step)
        return path


def video_writer(path: Path, fps: float) -> Any:
    """An MP4 writer (``append_data(frame)``, ``close()``) through imageio's ffmpeg."""
    try:
        import imageio.v2 as imageio
    except ImportError as error:
        raise EvaluateError("videos need imageio: pip install 'rlcore[video]'") from error
    path.parent.mkdir(parents=True, exist_ok=True)
    return imageio.get_writer(path, fps=fps, macro_block_size=1)
