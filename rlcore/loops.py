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

from rlcore.buffers import ReplayBuffer, RolloutBuffer, Sampler, draw
from rlcore.checkpoint import CheckpointReadError
from rlcore.envs.make import (
    NormalizeObservation,
    final_next_obs,
    find_wrapper,
    get_vec_env_state,
    set_vec_env_state,
    wrapper_metrics,
)
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
    # minibatches of batch_size per update call (the agent splits them: Batch.chunks)
    utd_ratio: int = 1
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
    make_policy = getattr(agent, "eval_policy", None)  # a stateful policy (ResiP)
    result = evaluate(
        make_policy() if make_policy is not None else lambda o: agent.act(o, deterministic=True),
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
    extra: dict[str, float] | None = None,
) -> dict[str, float]:
    """Evaluate and log ``eval/*`` at ``step`` (plus ``eval/normalized_score`` when a
    ``score`` function is given, and ``extra`` values) with running bests in ``best``;
    returns the evaluation's ``eval/*`` values."""
    result = _evaluate_agent(agent, env, eval_env, settings)
    if score is not None:
        result["eval/normalized_score"] = score(result["eval/return"])
    for key in ("eval/return", "eval/normalized_score"):
        if key in result:
            best[key] = max(best.get(key, -math.inf), result[key])
            result[key.replace("eval/", "eval/best_")] = best[key]
    run.logger.log({**result, **(extra or {})}, step)
    return result


def _log_episodes(
    run: RunContext, info: dict[str, Any], step: int, agent: Agent | None = None
) -> list[float]:
    """Log every episode that ended in this vector step (return, length and, on a task with
    costs, ``train/episode_cost``); returns their returns. An agent with
    ``record_episode_costs`` (a constrained algorithm) is handed the episodes' costs."""
    returns, lengths = info["episode_return"], info["episode_length"]
    if isinstance(returns, torch.Tensor):  # device back end: one small copy per step
        returns, lengths = torch.stack((returns, lengths.to(returns.dtype))).cpu().numpy()
    done = ~np.isnan(returns)
    returns = returns[done]
    costs = info["episode_cost"][done] if "episode_cost" in info else None
    for i, (episode_return, episode_length) in enumerate(zip(returns, lengths[done])):
        metrics = {"train/episode_return": episode_return, "train/episode_length": episode_length}
        if costs is not None:
            metrics["train/episode_cost"] = costs[i]
        run.logger.log(metrics, step)
    record_costs = getattr(agent, "record_episode_costs", None)
    if record_costs is not None and len(returns):
        if costs is None:
            raise ValueError(_NO_COST)
        record_costs([float(c) for c in costs])
    return [float(r) for r in returns]


_NO_COST = (
    "this algorithm optimises under a cost constraint, but the task reports no "
    "info['cost']: use a constrained task (e.g. env=SafetyHopperVelocity, see envs/safety.py) "
    "or any gymnasium env that reports info['cost']"
)


def _step_cost(info: dict[str, Any]) -> np.ndarray | torch.Tensor:
    """This step's per-env cost (``rlcore.envs.make.EpisodeStats`` puts it in ``info["cost"]``)."""
    if "cost" not in info:
        raise ValueError(_NO_COST)
    return info["cost"]


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
        f"{error} at environment step {step}; {where}. Causes, in the order to check them: "
        "non-finite or extreme rewards/observations (or dataset rows), a batch too small for "
        "its statistics, then a learning rate too high; continue with resume=<run dir>."
    ) from error


@dataclass
class Phase:
    """One stretch of a run (see ``run_phases``).

    ``name`` is what the agent is told (``agent.set_phase``): "offline" (gradient steps on
    ``sampler``, no environment), "warmup" (the environment is stepped, no updates: the
    policy acts, or uniform random actions with ``random_actions``) or "online" (env steps
    with ``updates_per_step`` updates each, on batches from ``sampler``). ``steps`` counts
    gradient steps offline and environment steps (summed over sub-envs) otherwise.
    """

    name: str
    steps: int
    sampler: Sampler | None = None
    random_actions: bool = field(default=False, kw_only=True)
    updates_per_step: float = field(default=1.0, kw_only=True)

    def __post_init__(self) -> None:
        if self.name not in ("offline", "warmup", "online"):
            raise ValueError(f"unknown phase '{self.name}': offline, warmup or online")
        if self.name != "warmup" and self.sampler is None:
            raise ValueError(f"the {self.name} phase needs a sampler to draw batches from")

    @property
    def interacts(self) -> bool:
        """True when the phase steps the environment."""
        return self.name != "offline"


def _resume_state(run: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """The checkpoint ``run.resume`` after checking it has what this loop writes: a
    checkpoint from another loop or an older rlcore layout raises a clear error instead
    of a ``KeyError`` deep inside the restore."""
    state = run.resume
    missing = [key for key in keys if key not in state]
    if missing:
        raise CheckpointReadError(
            f"the checkpoint of run {run.name} lacks {', '.join(missing)}: it was written by a "
            "different training loop or an older rlcore version, so this run cannot resume "
            "from it; start a new run directory (or resume with the rlcore version that "
            "wrote it)"
        )
    return state


@dataclass
class _Record:
    """What every loop reports and checkpoints besides the agent: counters, last episode
    and evaluation returns, running bests and the last training metrics."""

    counters: dict[str, Any]
    last_return: float = math.nan
    last_eval: float = math.nan
    last_eval_cost: float = math.nan  # a task with costs: the last evaluation's episode cost
    best: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)

    def evaluated(self, result: dict[str, float]) -> None:
        """Remember an evaluation's mean return (and cost)."""
        self.last_eval = result["eval/return"]
        self.last_eval_cost = result.get("eval/cost", math.nan)

    def state(self) -> dict[str, Any]:
        return {
            "counters": dict(self.counters),
            "eval_cost": self.last_eval_cost,
            "returns": (self.last_return, self.last_eval, dict(self.best)),
            "metrics": dict(self.metrics),
            "rng": get_rng_state(),
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Counters, returns and metrics; the global RNG states are set by the loop last,
        after everything that may draw from them (env resets)."""
        self.counters = dict(state["counters"])
        self.last_return, self.last_eval, best = state["returns"]
        self.last_eval_cost = state.get("eval_cost", math.nan)
        self.best = dict(best)
        self.metrics = dict(state.get("metrics", {}))

    def summary(self, score: Callable[[float], float] | None = None) -> dict[str, float]:
        out = {
            "eval/return": self.last_eval,
            "eval/best_return": self.best.get("eval/return", math.nan),
            "train/episode_return": self.last_return,
        }
        if math.isfinite(self.last_eval_cost):  # a task with costs
            out["eval/cost"] = self.last_eval_cost
        if score is not None:
            out["eval/normalized_score"] = score(self.last_eval)
            out["eval/best_normalized_score"] = self.best.get("eval/normalized_score", math.nan)
        return out


def run_phases(
    agent: Agent,
    phases: list[Phase],
    env: VectorEnv | None,
    eval_env: VectorEnv,
    settings: LoopSettings,
    run: RunContext,
    buffer: ReplayBuffer | None = None,
    stateful: dict[str, Any] | None = None,
    score: Callable[[float], float] | None = None,
    reward_transform: Callable[[np.ndarray], np.ndarray] | None = None,
    evaluate_first: bool = False,
) -> dict[str, float]:
    """Off-policy training as a sequence of phases, e.g. ``offline`` -> ``warmup`` ->
    ``online`` (offline-to-online), ``warmup`` (random) -> ``online`` (SAC), ``offline``.

    Environment steps write into ``buffer`` (after ``reward_transform``, e.g. the
    dataset's reward normalisation); each online update draws ``settings.utd_ratio``
    minibatches of ``settings.batch_size`` from the phase's sampler (offline: one). One global step counter runs
    through the phases (gradient steps offline, then env steps) and is the x-axis of
    every log. The agent is told each phase (``agent.set_phase(name)``, if it has one)
    when it starts and after a resume. Every phase ends with an evaluation, and the
    online phase evaluates again after its first update: the returns right before and
    right after the switch are always logged. ``stateful`` names the objects besides the
    agent and the buffer whose ``state_dict`` a checkpoint must hold (dataset and
    MixedSampler generators); resuming gives the uninterrupted run's numbers (CPU).
    ``evaluate_first`` evaluates at step 0 (an agent loaded from a finished run: its
    return before any online step).
    """
    if not phases:
        raise ValueError("run_phases needs at least one phase")
    if any(p.interacts for p in phases) and (env is None or buffer is None):
        raise ValueError("phases that step the environment need an env and a buffer")
    stateful = {**({"buffer": buffer} if buffer is not None else {}), **(stateful or {})}
    warmup_rng = np.random.default_rng(settings.seed)
    record = _Record(
        {
            "step": 0,
            "phase": 0,
            "phase_step": 0,
            "env_steps": 0,
            "updates": 0,
            "update_debt": 0.0,
            "episodes": 0,
            "env_started": False,
        }  # fmt: skip
    )
    obs: np.ndarray | None = None
    if run.resume is not None:
        state = _resume_state(run, ("agent", "stateful", "counters", "returns", "warmup_rng"))
        agent.load_state_dict(state["agent"])
        for name, obj in stateful.items():
            obj.load_state_dict(state["stateful"][name])
        record.restore(state)
        warmup_rng.bit_generator.state = state["warmup_rng"]
        if record.counters["env_started"]:
            env.reset(seed=settings.seed)
            set_vec_env_state(env, state["env"])
            obs = state["obs"]
        set_rng_state(state["rng"])
    counters = record.counters

    def snapshot() -> dict[str, Any]:
        return {
            "agent": agent.state_dict(),
            "stateful": {name: obj.state_dict() for name, obj in stateful.items()},
            "env": get_vec_env_state(env) if counters["env_started"] else None,
            "obs": obs,
            "warmup_rng": warmup_rng.bit_generator.state,
            **record.state(),
        }

    evaluated_at = [-1]  # the step of the last evaluation: one evaluation per step

    def evaluate_now(step: int) -> None:
        if evaluated_at[0] == step:
            return
        evaluated_at[0] = step
        record.evaluated(_evaluate_and_log(
            agent, env, eval_env, settings, run, step, record.best, score,
            extra={"eval/env_steps": counters["env_steps"], "eval/phase": counters["phase"]},
        ))  # fmt: skip
        progress.show(step, record.last_return, record.last_eval, force=True)

    def update(phase: Phase, step: int) -> None:
        # utd_ratio minibatches per online update (RLPD, WSRL); pre-training takes one
        minibatches = settings.utd_ratio if phase.name == "online" else 1
        try:
            batch = draw(phase.sampler, settings.batch_size, minibatches)
            record.metrics.update(agent.update(batch))
        except NonFiniteLossError as error:
            _stop_on_nan(run, error, step, snapshot)
        counters["updates"] += 1

    total = sum(p.steps for p in phases)
    progress = _Progress(run, total, counters["step"])
    set_phase = getattr(agent, "set_phase", None)
    if set_phase is not None and counters["phase"] < len(phases):
        set_phase(phases[counters["phase"]].name)
    if evaluate_first and counters["step"] == 0:
        evaluate_now(0)
    while counters["phase"] < len(phases):
        phase = phases[counters["phase"]]
        if counters["phase_step"] >= phase.steps:  # empty phase
            counters["phase"] += 1
            counters["phase_step"] = 0
            continue
        if counters["phase_step"] == 0 and len(phases) > 1:
            run.logger.note(
                f"phase {phase.name} ({phase.steps:,} steps) from step {counters['step']:,}"
            )
        prev = step = counters["step"]
        if phase.interacts:
            if not counters["env_started"]:
                obs, _ = env.reset(seed=settings.seed)
                counters["env_started"] = True
            if phase.random_actions:
                action = random_actions(env.single_action_space, warmup_rng, env.num_envs)
            else:
                action = agent.act(obs)
            next_obs, reward, terminated, truncated, info = env.step(
                to_env_action(action, env.single_action_space)
            )
            stored = reward if reward_transform is None else reward_transform(reward)
            channels = {"cost": _step_cost(info)} if "cost" in buffer.specs else {}
            buffer.add(
                obs, action, stored, final_next_obs(next_obs, info), terminated, truncated,
                **channels,
            )  # fmt: skip
            obs = next_obs
            step = prev + env.num_envs
            counters["env_steps"] += env.num_envs
            counters["phase_step"] += env.num_envs
            counters["step"] = step
            if finished := _log_episodes(run, info, step, agent):
                counters["episodes"] += len(finished)
                record.last_return = finished[-1]
            if phase.name == "online":
                counters["update_debt"] += phase.updates_per_step * env.num_envs
                first = counters["phase_step"] == env.num_envs
                while counters["update_debt"] >= 1.0:
                    update(phase, step)
                    counters["update_debt"] -= 1.0
                if first and any(p.name == "offline" for p in phases[: counters["phase"]]):
                    evaluate_now(step)  # right after the switch to online updates
        else:
            update(phase, prev)
            step = counters["step"] = prev + 1
            counters["phase_step"] += 1
        phase_done = counters["phase_step"] >= phase.steps
        last = phase_done and counters["phase"] == len(phases) - 1
        if _crossed(step, prev, settings.log_every) and record.metrics:
            speed = {"time/sps": progress.sps(step)} if phase.interacts else {
                "time/updates_per_s": progress.sps(step)}  # fmt: skip
            env_counters = wrapper_metrics(env) if phase.interacts else {}
            run.logger.log(
                {**{f"train/{k}": v for k, v in record.metrics.items()}, **speed,
                 "time/updates": counters["updates"], **env_counters},
                step,
            )  # fmt: skip
        # a phase's end is evaluated (not a random-action warm-up: no policy was involved)
        if _crossed(step, prev, settings.eval_every) or (
            phase_done and (last or not phase.random_actions)
        ):
            evaluate_now(step)
        else:
            progress.show(step, record.last_return, record.last_eval)
        if phase_done and not last:
            counters["phase"] += 1
            counters["phase_step"] = 0
            counters["update_debt"] = 0.0
            record.metrics = {}  # a warm-up logs no stale training metrics
            if set_phase is not None:
                set_phase(phases[counters["phase"]].name)
        done = last or settings.reached_target(record.last_eval)
        _checkpoint_if_due(run, settings, step, prev, done, snapshot)
        if done:
            break

    run.logger.flush()
    return record.summary(score)


def off_policy(
    agent: Agent,
    env: VectorEnv,
    eval_env: VectorEnv,
    buffer: ReplayBuffer,
    settings: LoopSettings,
    run: RunContext,
) -> dict[str, float]:
    """Off-policy training from scratch (SAC, TD3, ...): ``learning_starts`` steps of
    uniform random actions, then ``updates_per_step`` updates per env step (fractions
    carry over) on batches from ``buffer``."""
    random_steps = min(settings.learning_starts, settings.total_steps)
    phases = [
        Phase("warmup", random_steps, random_actions=True),
        Phase(
            "online",
            settings.total_steps - random_steps,
            buffer,
            updates_per_step=settings.updates_per_step,
        ),
    ]
    return run_phases(agent, phases, env, eval_env, settings, run, buffer)


def on_policy(
    agent: Agent,
    env: VectorEnv,
    eval_env: VectorEnv,
    rollout: RolloutBuffer,
    settings: LoopSettings,
    run: RunContext,
) -> dict[str, float]:
    """On-policy training (PPO): collect ``rollout_steps`` x num_envs, then ``agent.update``.

    The agent provides ``explore(obs) -> (action, log_prob, value[, channels])`` and
    ``value(obs)``; actions are clipped to the action box for the env but stored unclipped
    (discrete actions are stored as the int64 indices the agent drew). ``channels`` (a
    dict of (num_envs, ...) tensors: a denoising chain, a base action) are stored as
    rollout channels and reach ``update`` as ``RolloutBatch.extras``. On an env built
    with action chunks (``rlcore.envs.make.ActionChunks``) a step is one chunk. An agent that
    keeps per-env state across steps (a residual policy's open-loop base chunk) defines
    ``episodes_started(mask)``: called with all True at the start and with the envs
    whose episode just ended after every step (evaluation does the same).
    """
    num_envs = env.num_envs
    action_space = env.single_action_space
    batch = settings.rollout_steps * num_envs
    iterations = max(1, settings.total_steps // batch)
    record = _Record({"step": 0, "iteration": 0, "episodes": 0})
    device = rollout.device
    # a constrained agent (cost critic): costs, V_c and the cost's GAE in the rollout
    cost_value = getattr(agent, "cost_value", None)

    env_reset = env.reset(seed=settings.seed)
    obs = env_reset[0]
    on_device = isinstance(obs, torch.Tensor)  # mjx: tensors on the device end to end
    episodes_started = getattr(agent, "episodes_started", None)
    if episodes_started is not None:
        episodes_started(np.ones(num_envs, bool))
    if run.resume is not None:
        state = _resume_state(run, ("agent", "env", "obs", "counters", "returns", "rng"))
        agent.load_state_dict(state["agent"])
        set_vec_env_state(env, state["env"])
        obs = state["obs"]
        record.restore(state)
        set_rng_state(state["rng"])
    counters = record.counters

    def snapshot() -> dict[str, Any]:
        return {"agent": agent.state_dict(), "env": get_vec_env_state(env), "obs": obs,
                **record.state()}  # fmt: skip

    progress = _Progress(run, iterations * batch, counters["step"])
    while counters["iteration"] < iterations:
        prev = counters["step"]
        iteration_start = time.perf_counter()
        rollout.reset()
        for _ in range(settings.rollout_steps):
            obs_t = torch.as_tensor(obs, dtype=torch.float32, device=device)
            action, log_prob, value, *channels = agent.explore(obs_t)
            env_action = action if on_device else action.cpu().numpy()
            next_obs, reward, terminated, truncated, info = env.step(
                to_env_action(env_action, action_space)
            )
            bootstrap = _bootstrap_values(agent.value, next_obs, info, truncated, device)
            costs = None
            if cost_value is not None:
                costs = (_step_cost(info), cost_value(obs_t),
                         _bootstrap_values(cost_value, next_obs, info, truncated, device))  # fmt: skip
            rollout.add(
                obs_t, action, log_prob, reward, value, terminated, truncated, bootstrap,
                channels[0] if channels else None, costs,
            )  # fmt: skip
            if episodes_started is not None:
                episodes_started(terminated | truncated)
            obs = next_obs
            counters["step"] += num_envs
            if finished := _log_episodes(run, info, counters["step"], agent):
                counters["episodes"] += len(finished)
                record.last_return = finished[-1]
            progress.show(counters["step"], record.last_return, record.last_eval)
        obs_t = torch.as_tensor(obs, dtype=torch.float32, device=device)
        cfg = agent.config
        samples = rollout.compute(
            agent.value(obs_t), cfg.gamma, cfg.gae_lambda,
            None if cost_value is None else cost_value(obs_t),
            getattr(cfg, "cost_gamma", None), getattr(cfg, "cost_gae_lambda", None),
        )  # fmt: skip
        try:
            record.metrics = agent.update(samples, progress=counters["iteration"] / iterations)
        except NonFiniteLossError as error:
            _stop_on_nan(run, error, counters["step"], snapshot)
        counters["iteration"] += 1
        step = counters["step"]
        run.logger.log(
            {**{f"train/{k}": v for k, v in record.metrics.items()},
             "time/sps": progress.sps(step), **wrapper_metrics(env),
             "time/iteration_s": time.perf_counter() - iteration_start},  # rollout + update
            step,
        )  # fmt: skip
        last_iteration = counters["iteration"] >= iterations
        if _crossed(step, prev, settings.eval_every) or last_iteration:
            record.evaluated(
                _evaluate_and_log(agent, env, eval_env, settings, run, step, record.best)
            )
            progress.show(step, record.last_return, record.last_eval, force=True)
        done = last_iteration or settings.reached_target(record.last_eval)
        _checkpoint_if_due(run, settings, step, prev, done, snapshot)
        if done:
            break

    run.logger.flush()
    return record.summary()


def _bootstrap_values(
    value: Callable[[torch.Tensor], torch.Tensor],
    next_obs: np.ndarray | torch.Tensor,
    info: dict[str, Any],
    truncated: np.ndarray | torch.Tensor,
    device: torch.device,
) -> np.ndarray | torch.Tensor:
    """``value``(final observation) where an episode was truncated, else 0 (the agent's V,
    or its V_c). With a device back end every env's final observation is valued and masked
    on the device (no host sync to ask which envs were truncated)."""
    if isinstance(truncated, torch.Tensor):
        final = final_next_obs(next_obs, info).to(device, torch.float32)
        return torch.where(truncated.to(device), value(final), 0.0)
    bootstrap = np.zeros(len(truncated), np.float32)
    if truncated.any():
        final = final_next_obs(next_obs, info)[truncated]
        bootstrap[truncated] = value(torch.as_tensor(final, device=device)).cpu().numpy()
    return bootstrap


def offline(
    agent: Agent,
    dataset: Sampler,
    eval_env: VectorEnv,
    settings: LoopSettings,
    run: RunContext,
    score: Callable[[float], float] | None = None,
) -> dict[str, float]:
    """Pure offline training: ``total_steps`` gradient steps on batches sampled from a
    fixed dataset (its own seeded generator). Evaluations log the return and, with
    ``score``, the normalised score (last and best)."""
    phases = [Phase("offline", settings.total_steps, dataset)]
    return run_phases(
        agent, phases, None, eval_env, settings, run, stateful={"dataset": dataset}, score=score
    )
