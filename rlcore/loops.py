"""Training loops. They step environments, fill buffers, call ``agent.update``, log,
evaluate and checkpoint; they never look inside an algorithm.

Every loop can continue from a checkpoint it wrote itself (``run.resume``) and then
produces exactly the numbers an uninterrupted run would (CPU): the checkpoint holds the
agent, buffer, simulator states, observations, counters and every RNG state.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from gymnasium.vector import VectorEnv

from envs.make import (
    NormalizeObservation,
    final_next_obs,
    find_wrapper,
    get_vec_env_state,
    set_vec_env_state,
)
from rlcore.buffers import ReplayBuffer, RolloutBuffer
from rlcore.evaluate import evaluate
from rlcore.logging import Logger, format_duration
from rlcore.spaces import random_actions, to_env_action
from rlcore.utils import NonFiniteLossError, get_rng_state, set_rng_state, tensors_finite


class Agent(Protocol):
    """What the loops need from an algorithm."""

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray: ...
    def update(self, batch: Any) -> dict[str, float]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass
class LoopSettings:
    """Schedule of a run. Steps are environment steps summed over all sub-envs."""

    total_steps: int
    seed: int = 0
    eval_every: int = 10_000
    eval_episodes: int = 10
    checkpoint_every: int = 50_000
    # also checkpoint when this many seconds passed since the last one (0: steps only)
    checkpoint_every_s: float = 0.0
    log_every: int = 1_000
    # off-policy only
    learning_starts: int = 5_000
    batch_size: int = 256
    updates_per_step: float = 1.0
    # on-policy only
    rollout_steps: int = 2048
    # stop early once an evaluation's mean return reaches this (None: never)
    stop_at_return: float | None = None

    def reached_target(self, eval_return: float) -> bool:
        return self.stop_at_return is not None and eval_return >= self.stop_at_return


@dataclass
class RunContext:
    """Where a loop reports to: logger, checkpoint writer, and an optional resume state.

    ``stop_request`` is set (to a signal's name) by whoever wants the run to end early
    and cleanly, e.g. rlcore.train's SIGINT/SIGTERM handler: the loop then writes a
    checkpoint at the next point where its state is complete and raises
    ``TrainingInterrupted``.
    """

    name: str
    logger: Logger
    save: Callable[[dict[str, Any]], Path]
    resume: dict[str, Any] | None = None
    summary: dict[str, float] = field(default_factory=dict)
    stop_request: str | None = None
    last_save_time: float = field(default_factory=time.monotonic)

    def checkpoint(self, state: dict[str, Any]) -> Path:
        """Write ``state`` through ``save`` and remember when (time-based cadence)."""
        path = self.save(state)
        self.last_save_time = time.monotonic()
        return path


class TrainingStopped(RuntimeError):
    """The run stopped early for a reason the user must see (e.g. a NaN loss)."""


class TrainingInterrupted(TrainingStopped):
    """The run was asked to stop (Ctrl-C, SIGTERM) and saved a checkpoint first."""

    def __init__(self, signal_name: str, step: int, path: Path) -> None:
        super().__init__(f"stopped by {signal_name} at step {step:,}; checkpoint saved to {path}")
        self.signal_name, self.step, self.path = signal_name, step, path


def _crossed(step: int, prev: int, every: int) -> bool:
    """True when a multiple of ``every`` lies in (prev, step]."""
    return every > 0 and step // every > prev // every


def _checkpoint_if_due(
    run: RunContext,
    settings: LoopSettings,
    step: int,
    prev: int,
    done: bool,
    snapshot: Callable[[], dict[str, Any]],
) -> None:
    """Checkpoint at the end, every ``checkpoint_every`` steps, every
    ``checkpoint_every_s`` seconds and on a stop request (then raise TrainingInterrupted).
    Call it only where the loop's state is complete (between steps / iterations)."""
    overdue = (
        settings.checkpoint_every_s > 0
        and time.monotonic() - run.last_save_time >= settings.checkpoint_every_s
    )
    stop = run.stop_request
    if done or stop or overdue or _crossed(step, prev, settings.checkpoint_every):
        path = run.checkpoint(snapshot())
        if stop and not done:
            raise TrainingInterrupted(stop, step, path)


def _number(value: float) -> str:
    """``12.3`` for a number, ``-`` before the first episode or evaluation."""
    return f"{value:.1f}" if math.isfinite(value) else "-"


class _Progress:
    """Console progress line: steps, steps/s, last episode return, eval, ETA.

    Speed and ETA come from the last ``window_s`` seconds, not the whole run: a fast
    random warm-up or a slow compilation at the start must not skew the estimate."""

    def __init__(self, run: RunContext, total: int, start: int, window_s: float = 60.0) -> None:
        self.run, self.total, self.window_s = run, total, window_s
        self.t0, self.s0 = time.monotonic(), start
        self._samples: deque[tuple[float, int]] = deque([(self.t0, start)])

    def sps(self, step: int) -> float:
        """Mean steps/s since this process started (logged as ``time/sps``)."""
        return (step - self.s0) / max(time.monotonic() - self.t0, 1e-9)

    def recent_sps(self, step: int) -> float:
        """Steps/s over the last ``window_s`` seconds."""
        now = time.monotonic()
        if now - self._samples[-1][0] >= 1.0:
            self._samples.append((now, step))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        t_old, s_old = self._samples[0]
        return (step - s_old) / max(now - t_old, 1e-9)

    def show(self, step: int, last_return: float, last_eval: float, force: bool = False) -> None:
        sps = self.recent_sps(step)
        eta = (self.total - step) / sps if sps > 0 else float("inf")
        text = (
            f"[{self.run.name}] step {step:,}/{self.total:,} ({100 * step / self.total:.1f}%)"
            f" | {sps:,.0f} steps/s | episode return {_number(last_return)}"
            f" | eval {_number(last_eval)} | ETA {format_duration(eta) if math.isfinite(eta) else '?'}"
        )
        self.run.logger.progress(text, force=force)


def _evaluate_agent(
    agent: Agent, env: VectorEnv | None, eval_env: VectorEnv, settings: LoopSettings
) -> dict[str, float]:
    train_norm = None if env is None else find_wrapper(env, NormalizeObservation)
    eval_norm = find_wrapper(eval_env, NormalizeObservation)
    if train_norm is not None and eval_norm is not None:
        eval_norm.load_state_dict(train_norm.state_dict())
        eval_norm.training = False
    result = evaluate(
        lambda o: agent.act(o, deterministic=True),
        eval_env,
        settings.eval_episodes,
        seed=settings.seed + 1_000_003,
    )
    return {f"eval/{k}": v for k, v in result.items()}


def _evaluate_and_log(
    agent: Agent,
    env: VectorEnv | None,
    eval_env: VectorEnv,
    settings: LoopSettings,
    run: RunContext,
    step: int,
    best: dict[str, float],
    score: Callable[[float], float] | None = None,
) -> float:
    """Evaluate and log ``eval/*`` at ``step`` (plus ``eval/normalized_score`` when a
    ``score`` function is given) with running bests in ``best``; returns the mean return."""
    result = _evaluate_agent(agent, env, eval_env, settings)
    if score is not None:
        result["eval/normalized_score"] = score(result["eval/return"])
    for key in ("eval/return", "eval/normalized_score"):
        if key in result:
            best[key] = max(best.get(key, -math.inf), result[key])
            result[key.replace("eval/", "eval/best_")] = best[key]
    run.logger.log(result, step)
    return result["eval/return"]


def _log_episodes(run: RunContext, info: dict[str, Any], step: int) -> list[float]:
    """Log every episode that ended in this vector step; returns their returns."""
    done = ~np.isnan(info["episode_return"])
    returns = info["episode_return"][done]
    for episode_return, episode_length in zip(returns, info["episode_length"][done]):
        run.logger.log(
            {"train/episode_return": episode_return, "train/episode_length": episode_length}, step
        )
    return [float(r) for r in returns]


def _stop_on_nan(
    run: RunContext, error: NonFiniteLossError, step: int, state: Callable[[], dict[str, Any]]
) -> None:
    """Save the last good state (if it is finite) and stop with a clear message."""
    snapshot = state()
    if tensors_finite(snapshot["agent"]):
        path = run.checkpoint(snapshot)
        where = f"saved the last good checkpoint to {path}"
    else:
        where = "parameters were already non-finite; kept the previous checkpoint"
    raise TrainingStopped(
        f"{error} at environment step {step}; {where}. Lower the learning rate or check the "
        "rewards/observations, then continue with resume=<run dir>."
    ) from error


def off_policy(
    agent: Agent,
    env: VectorEnv,
    eval_env: VectorEnv,
    buffer: ReplayBuffer,
    settings: LoopSettings,
    run: RunContext,
) -> dict[str, float]:
    """Off-policy training (SAC, TD3, ...): uniform random warm-up, then
    ``updates_per_step`` gradient updates per environment step (fractions carry over)."""
    num_envs = env.num_envs
    action_space = env.single_action_space
    warmup_rng = np.random.default_rng(settings.seed)
    counters = {"step": 0, "updates": 0, "update_debt": 0.0, "episodes": 0}
    last_return, last_eval, best = float("nan"), float("nan"), {}
    metrics: dict[str, float] = {}

    if run.resume is None:
        obs, _ = env.reset(seed=settings.seed)
    else:
        state = run.resume
        agent.load_state_dict(state["agent"])
        buffer.load_state_dict(state["buffer"])
        env.reset(seed=settings.seed)
        set_vec_env_state(env, state["env"])
        obs = state["obs"]
        counters = dict(state["counters"])
        warmup_rng.bit_generator.state = state["warmup_rng"]
        last_return, last_eval, best = state["returns"]
        metrics = dict(state["metrics"])
        set_rng_state(state["rng"])

    def snapshot() -> dict[str, Any]:
        return {
            "agent": agent.state_dict(),
            "buffer": buffer.state_dict(),
            "env": get_vec_env_state(env),
            "obs": obs,
            "counters": dict(counters),
            "warmup_rng": warmup_rng.bit_generator.state,
            "returns": (last_return, last_eval, dict(best)),
            "metrics": dict(metrics),
            "rng": get_rng_state(),
        }

    progress = _Progress(run, settings.total_steps, counters["step"])
    while counters["step"] < settings.total_steps:
        prev = counters["step"]
        if prev < settings.learning_starts:
            action = random_actions(action_space, warmup_rng, num_envs)
        else:
            action = agent.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(
            to_env_action(action, action_space)
        )
        buffer.add(obs, action, reward, final_next_obs(next_obs, info), terminated, truncated)
        obs = next_obs
        step = counters["step"] = prev + num_envs
        if finished := _log_episodes(run, info, step):
            counters["episodes"] += len(finished)
            last_return = finished[-1]

        if step >= settings.learning_starts:
            counters["update_debt"] += settings.updates_per_step * num_envs
            try:
                while counters["update_debt"] >= 1.0:
                    metrics.update(agent.update(buffer.sample(settings.batch_size)))
                    counters["update_debt"] -= 1.0
                    counters["updates"] += 1
            except NonFiniteLossError as error:
                _stop_on_nan(run, error, step, snapshot)

        if _crossed(step, prev, settings.log_every) and metrics:
            run.logger.log(
                {
                    **{f"train/{k}": v for k, v in metrics.items()},
                    "time/sps": progress.sps(step),
                    "time/updates": counters["updates"],
                },
                step,
            )
        if _crossed(step, prev, settings.eval_every) or step >= settings.total_steps:
            last_eval = _evaluate_and_log(agent, env, eval_env, settings, run, step, best)
            progress.show(step, last_return, last_eval, force=True)
        else:
            progress.show(step, last_return, last_eval)
        done = step >= settings.total_steps or settings.reached_target(last_eval)
        _checkpoint_if_due(run, settings, step, prev, done, snapshot)
        if done:
            break

    run.logger.flush()
    return {
        "eval/return": last_eval,
        "eval/best_return": best.get("eval/return", math.nan),
        "train/episode_return": last_return,
    }


def on_policy(
    agent: Agent,
    env: VectorEnv,
    eval_env: VectorEnv,
    rollout: RolloutBuffer,
    settings: LoopSettings,
    run: RunContext,
) -> dict[str, float]:
    """On-policy training (PPO): collect ``rollout_steps`` x num_envs, then ``agent.update``.

    The agent provides ``explore(obs) -> (action, log_prob, value)`` and ``value(obs)``;
    actions are clipped to the action box for the env but stored unclipped (discrete
    actions are stored as the int64 indices the agent drew).
    """
    num_envs = env.num_envs
    action_space = env.single_action_space
    batch = settings.rollout_steps * num_envs
    iterations = max(1, settings.total_steps // batch)
    counters = {"step": 0, "iteration": 0, "episodes": 0}
    last_return, last_eval, best = float("nan"), float("nan"), {}
    device = rollout.device

    if run.resume is None:
        obs, _ = env.reset(seed=settings.seed)
    else:
        state = run.resume
        agent.load_state_dict(state["agent"])
        env.reset(seed=settings.seed)
        set_vec_env_state(env, state["env"])
        obs = state["obs"]
        counters = dict(state["counters"])
        last_return, last_eval, best = state["returns"]
        set_rng_state(state["rng"])

    def snapshot() -> dict[str, Any]:
        return {
            "agent": agent.state_dict(),
            "env": get_vec_env_state(env),
            "obs": obs,
            "counters": dict(counters),
            "returns": (last_return, last_eval, dict(best)),
            "rng": get_rng_state(),
        }

    progress = _Progress(run, iterations * batch, counters["step"])
    while counters["iteration"] < iterations:
        prev = counters["step"]
        rollout.reset()
        for _ in range(settings.rollout_steps):
            obs_t = torch.as_tensor(obs, dtype=torch.float32, device=device)
            action, log_prob, value = agent.explore(obs_t)
            action_np = action.cpu().numpy()
            next_obs, reward, terminated, truncated, info = env.step(
                to_env_action(action_np, action_space)
            )
            bootstrap = np.zeros(num_envs, np.float32)
            if truncated.any():
                final = final_next_obs(next_obs, info)[truncated]
                bootstrap[truncated] = (
                    agent.value(torch.as_tensor(final, device=device)).cpu().numpy()
                )
            rollout.add(obs_t, action, log_prob, reward, value, terminated, truncated, bootstrap)
            obs = next_obs
            counters["step"] += num_envs
            if finished := _log_episodes(run, info, counters["step"]):
                counters["episodes"] += len(finished)
                last_return = finished[-1]
            progress.show(counters["step"], last_return, last_eval)
        last_value = agent.value(torch.as_tensor(obs, dtype=torch.float32, device=device))
        samples = rollout.compute(last_value, agent.config.gamma, agent.config.gae_lambda)
        try:
            metrics = agent.update(samples, progress=counters["iteration"] / iterations)
        except NonFiniteLossError as error:
            _stop_on_nan(run, error, counters["step"], snapshot)
        counters["iteration"] += 1
        step = counters["step"]
        run.logger.log(
            {**{f"train/{k}": v for k, v in metrics.items()}, "time/sps": progress.sps(step)}, step
        )
        last_iteration = counters["iteration"] >= iterations
        if _crossed(step, prev, settings.eval_every) or last_iteration:
            last_eval = _evaluate_and_log(agent, env, eval_env, settings, run, step, best)
            progress.show(step, last_return, last_eval, force=True)
        done = last_iteration or settings.reached_target(last_eval)
        _checkpoint_if_due(run, settings, step, prev, done, snapshot)
        if done:
            break

    run.logger.flush()
    return {
        "eval/return": last_eval,
        "eval/best_return": best.get("eval/return", math.nan),
        "train/episode_return": last_return,
    }


class Dataset(Protocol):
    """What the offline loop needs from a dataset (see offline.datasets)."""

    def sample(self, batch_size: int, generator: torch.Generator) -> Any: ...


def offline(
    agent: Agent,
    dataset: Dataset,
    eval_env: VectorEnv,
    settings: LoopSettings,
    run: RunContext,
    score: Callable[[float], float] | None = None,
) -> dict[str, float]:
    """Pure offline training: ``total_steps`` gradient steps on batches sampled from a
    fixed dataset. The canonical step is the gradient step; evaluations log the return
    and, with ``score``, the normalised score (last and best)."""
    generator = torch.Generator().manual_seed(settings.seed)
    counters = {"step": 0}
    last_eval, best = float("nan"), {}
    metrics: dict[str, float] = {}
    if run.resume is not None:
        state = run.resume
        agent.load_state_dict(state["agent"])
        counters = dict(state["counters"])
        generator.set_state(state["generator"])
        last_eval, best = state["returns"]
        metrics = dict(state["metrics"])
        set_rng_state(state["rng"])

    def snapshot() -> dict[str, Any]:
        return {
            "agent": agent.state_dict(),
            "counters": dict(counters),
            "generator": generator.get_state(),
            "returns": (last_eval, dict(best)),
            "metrics": dict(metrics),
            "rng": get_rng_state(),
        }

    progress = _Progress(run, settings.total_steps, counters["step"])
    while counters["step"] < settings.total_steps:
        prev = counters["step"]
        try:
            metrics.update(agent.update(dataset.sample(settings.batch_size, generator)))
        except NonFiniteLossError as error:
            _stop_on_nan(run, error, prev, snapshot)
        step = counters["step"] = prev + 1
        if _crossed(step, prev, settings.log_every):
            metrics_out = {f"train/{k}": v for k, v in metrics.items()}
            run.logger.log({**metrics_out, "time/updates_per_s": progress.sps(step)}, step)
        if _crossed(step, prev, settings.eval_every) or step >= settings.total_steps:
            last_eval = _evaluate_and_log(agent, None, eval_env, settings, run, step, best, score)
            progress.show(step, math.nan, last_eval, force=True)
        else:
            progress.show(step, math.nan, last_eval)
        done = step >= settings.total_steps or settings.reached_target(last_eval)
        _checkpoint_if_due(run, settings, step, prev, done, snapshot)
        if done:
            break

    run.logger.flush()
    return {
        "eval/return": last_eval,
        "eval/best_return": best.get("eval/return", math.nan),
        "eval/normalized_score": score(last_eval) if score is not None else math.nan,
        "eval/best_normalized_score": best.get("eval/normalized_score", math.nan),
    }
