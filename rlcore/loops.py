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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import VectorEnv

from rlcore.buffers import ReplayBuffer, RolloutBuffer, Sampler, draw
from rlcore.capabilities import (
    Agent,
    CostCritic,
    CostRecorder,
    EvalPolicy,
    OnPolicy,
    PerEnvState,
    Phased,
    require,
)
from rlcore.checkpoint import CheckpointReadError
from rlcore.envs.make import (
    NormalizeObservation,
    final_next_obs,
    find_wrapper,
    get_vec_env_state,
    set_vec_env_state,
    wrapper_metrics,
)
from rlcore.evaluation import evaluate
from rlcore.logging import Logger, format_duration
from rlcore.observations import ObsSpec
from rlcore.plan import Returns
from rlcore.spaces import random_actions, to_env_action
from rlcore.utils import NonFiniteLossError, get_rng_state, set_rng_state, tensors_finite

# The first checkpoint of a process comes after at most this many seconds (then every
# ``checkpoint_every_s``): a kill in a run's first minutes loses at most this much, and a
# run killed before even that has nothing to continue (rlcore.run_dir starts it again).
FIRST_CHECKPOINT_S = 60.0


@dataclass
class LoopSettings:
    """The run's cadences and stops. What the phases do (their lengths, batches, update
    rates, returns) is the algorithm's plan (rlcore.plan.RunPlan), built into ``Phase``s
    by the composition root: the schedule is declared once."""

    seed: int = 0
    eval_every: int = 10_000  # steps between evaluations (0: at the end of phases only)
    eval_episodes: int = 10
    checkpoint_every: int = 50_000
    # also checkpoint when this many seconds passed since the last one (0: steps only)
    checkpoint_every_s: float = 0.0
    log_every: int = 1_000
    # stop early once an evaluation's mean return reaches this (None: never)
    stop_at_return: float | None = None
    # stop early once an evaluation's success rate reaches this (None: never)
    stop_at_success: float | None = None
    # stop (with an evaluation and a checkpoint) once the training time, the seconds spent
    # in env steps, updates and rollouts (evaluations, checkpoints and a compiled update's
    # compilation left out, summed over resumes), reaches this (None: never);
    # equal-wall-time comparisons
    stop_after_s: float | None = None
    # the agent's update is torch.compile'd: its first call (the compilation, tens of
    # seconds on a CPU) is announced with its duration and left out of the progress ETA
    compiled: bool = False

    def reached_target(self, eval_return: float, eval_success: float = math.nan) -> bool:
        """Whether the last evaluation reached ``stop_at_return`` or ``stop_at_success``."""
        by_return = self.stop_at_return is not None and eval_return >= self.stop_at_return
        by_success = self.stop_at_success is not None and eval_success >= self.stop_at_success
        return by_return or by_success

    def out_of_time(self, train_seconds: float) -> bool:
        return self.stop_after_s is not None and train_seconds >= self.stop_after_s


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
    saves: int = 0  # checkpoints this process wrote
    # rlcore.evaluation.EvalVideo: called after each evaluation with a function that
    # evaluates the agent on a given env, and the step (it records when due)
    eval_video: Callable[[Callable[[VectorEnv], dict[str, float]], int], Any] | None = None

    def checkpoint(self, state: dict[str, Any]) -> Path:
        """Write ``state`` through ``save`` and remember when (time-based cadence)."""
        path = self.save(state)
        self.last_save_time = time.monotonic()
        self.saves += 1
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
    ``checkpoint_every_s`` seconds (the process's first after at most
    ``FIRST_CHECKPOINT_S``) and on a stop request (then raise TrainingInterrupted).
    Call it only where the loop's state is complete (between steps / iterations)."""
    every_s = settings.checkpoint_every_s
    if run.saves == 0:
        every_s = min(every_s, FIRST_CHECKPOINT_S)
    overdue = every_s > 0 and time.monotonic() - run.last_save_time >= every_s
    stop = run.stop_request
    if done or stop or overdue or _crossed(step, prev, settings.checkpoint_every):
        path = run.checkpoint(snapshot())
        if stop and not done:
            raise TrainingInterrupted(stop, step, path)


def _cost_text(cost: float) -> str:
    """`` (cost 4.0)`` on a task with costs, else nothing."""
    return f" (cost {cost:.1f})" if math.isfinite(cost) else ""


def _success_text(rate: float) -> str:
    """`` (success 0.85)`` on a task that reports success, else nothing."""
    return f" (success {rate:.2f})" if math.isfinite(rate) else ""


def _number(value: float) -> str:
    """``12.3`` for a number, ``-`` before the first episode or evaluation."""
    return f"{value:.1f}" if math.isfinite(value) else "-"


class _Progress:
    """Console progress line: steps, steps/s, last episode return, eval, ETA.

    Speed and ETA come from measured rates only: the rate of the current phase over its
    last ``window_s`` seconds, sampled at tick boundaries from the end of the phase's
    first tick (a JIT compilation of the env, a reset, a first update are not its pace),
    restarted after a compilation stall. Until a phase has ``MIN_MEASURED_S`` of samples
    the ETA says ``estimating``; a phase that is followed by others, whose pace is not
    known yet, shows its own time left beside it (``ETA estimating (offline phase: 4m10s
    left)``). A ``stop_after_s`` budget caps the ETA at the training time it leaves."""

    MIN_MEASURED_S = 2.0

    def __init__(
        self,
        run: RunContext,
        total: int,
        start: int,
        window_s: float = 60.0,
        seconds_left: Callable[[], float] | None = None,
    ) -> None:
        # seconds_left: the training time a stop_after_s budget leaves (the ETA is the
        # sooner of the steps' and the budget's end)
        self.run, self.total, self.window_s = run, total, window_s
        self.seconds_left = seconds_left
        self.t0, self.s0 = time.monotonic(), start
        # the current phase (start_phase): its name, the step it ends at, whether it is last
        self.phase_name, self.phase_end, self.final_phase = "", total, True
        self._samples: deque[tuple[float, int]] = deque([(self.t0, start)])

    def sps(self, step: int) -> float:
        """Mean steps/s since this process started (logged as ``time/sps``)."""
        return (step - self.s0) / max(time.monotonic() - self.t0, 1e-9)

    def start_phase(self, name: str, step: int, end: int, final: bool) -> None:
        """A phase starts at ``step`` (or continues after a resume) and ends at step
        ``end``: its rate is measured from the end of its first tick."""
        self.phase_name, self.phase_end, self.final_phase = name, end, final
        self._samples = deque()

    def mark(self, step: int) -> None:
        """A tick ended at ``step``: a rate sample (at most one a second)."""
        now = time.monotonic()
        if not self._samples or now - self._samples[-1][0] >= 1.0:
            self._samples.append((now, step))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()

    def recent_sps(self, step: int) -> float:
        """Steps/s over the last ``window_s`` seconds up to ``step`` (a tick boundary)."""
        self.mark(step)
        t_old, s_old = self._samples[0]
        return (step - s_old) / max(time.monotonic() - t_old, 1e-9)

    def measured_rate(self) -> float | None:
        """The current phase's steps/s between its samples, None until they span
        ``MIN_MEASURED_S``."""
        if len(self._samples) < 2:
            return None
        (t_old, s_old), (t_new, s_new) = self._samples[0], self._samples[-1]
        if t_new - t_old < self.MIN_MEASURED_S:
            return None
        return (s_new - s_old) / (t_new - t_old)

    def restart(self, step: int) -> None:
        """Measure the recent speed from now on: a stall that just ended (a compilation)
        and what ran before it (a random warm-up) do not tell how fast the rest will go,
        so the ETA stays honest through it (``sps``, the logged mean, keeps them)."""
        self._samples = deque([(time.monotonic(), step)])

    def eta_text(self, step: int) -> str:
        """``4m10s``, or ``estimating`` (with the current phase's time left when known)."""
        rate = self.measured_rate()
        budget = None if self.seconds_left is None else max(self.seconds_left(), 0.0)
        if rate is None or rate <= 0:
            return "estimating" if budget is None else f"<= {format_duration(budget)} (budget)"
        phase_left = max(self.phase_end - step, 0) / rate
        if not self.final_phase:
            if budget is not None and budget <= phase_left:
                return format_duration(budget)
            return f"estimating ({self.phase_name} phase: {format_duration(phase_left)} left)"
        return format_duration(phase_left if budget is None else min(phase_left, budget))

    def show(
        self,
        step: int,
        last_return: float,
        last_eval: float,
        force: bool = False,
        last_cost: float = math.nan,
        last_eval_cost: float = math.nan,
        last_eval_success: float = math.nan,
    ) -> None:
        """Print the line (at most every ``progress_interval_s`` unless ``force``); on a
        task with costs the last episode's and evaluation's costs beside their returns, on
        one that reports success the evaluation's success rate."""
        rate = self.measured_rate()
        text = (
            f"[{self.run.name}] step {step:,}/{self.total:,} ({100 * step / self.total:.1f}%)"
            f" | {'-' if rate is None else f'{rate:,.0f}'} steps/s"
            f" | episode return {_number(last_return)}{_cost_text(last_cost)}"
            f" | eval {_number(last_eval)}{_cost_text(last_eval_cost)}"
            f"{_success_text(last_eval_success)}"
            f" | ETA {self.eta_text(step)}"
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
        # an agent that evaluates with its own policy object (ResiP's stateful one)
        agent.eval_policy()
        if isinstance(agent, EvalPolicy)
        else lambda o: agent.act(o, deterministic=True),
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
    run: RunContext,
    info: dict[str, Any],
    step: int,
    record_costs: Callable[[list[float]], None] | None = None,
) -> tuple[list[float], list[float]]:
    """Log every episode that ended in this vector step (return, length, on a task with
    costs ``train/episode_cost``, on one that reports success ``train/episode_success``,
    on Atari, where a game ended, its raw score ``train/game_return``);
    returns their returns and costs (none on a task
    without). ``record_costs`` (a constrained agent's ``record_episode_costs``) is handed
    the episodes' costs."""
    returns, lengths = info["episode_return"], info["episode_length"]
    if isinstance(returns, torch.Tensor):  # device back end: one small copy per step
        returns, lengths = torch.stack((returns, lengths.to(returns.dtype))).cpu().numpy()
    done = ~np.isnan(returns)
    returns = returns[done]
    costs = info["episode_cost"][done] if "episode_cost" in info else None
    successes = info["episode_success"][done] if "episode_success" in info else None
    games = info["game_return"][done] if "game_return" in info else None
    for i, (episode_return, episode_length) in enumerate(zip(returns, lengths[done])):
        metrics = {"train/episode_return": episode_return, "train/episode_length": episode_length}
        if costs is not None:
            metrics["train/episode_cost"] = costs[i]
        if successes is not None:
            metrics["train/episode_success"] = successes[i]
        if games is not None and not np.isnan(games[i]):  # an Atari game ended (whole, raw)
            metrics["train/game_return"] = games[i]
        run.logger.log(metrics, step)
    if record_costs is not None and len(returns):
        if costs is None:
            raise ValueError(NO_COST)
        record_costs([float(c) for c in costs])
    return [float(r) for r in returns], [] if costs is None else [float(c) for c in costs]


NO_COST = (
    "this algorithm optimises under a cost constraint, but the task reports no "
    "info['cost']: use a constrained task (e.g. env=SafetyHopperVelocity, see envs/safety.py) "
    "or any gymnasium env that reports info['cost']"
)


def _step_cost(info: dict[str, Any]) -> np.ndarray | torch.Tensor:
    """This step's per-env cost (``rlcore.envs.make.EpisodeStats`` puts it in ``info["cost"]``)."""
    if "cost" not in info:
        raise ValueError(NO_COST)
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
class Transitions:
    """One vector step as the replay buffer stores it: ``num_envs`` rows; ``next_obs`` is
    the final observation where an episode ended; ``info`` holds what the loop logs and
    stores besides (``episode_return`` / ``episode_length``, NaN where no episode ended;
    ``cost`` on a task with costs)."""

    obs: Any
    action: Any
    reward: Any
    next_obs: Any
    terminated: Any
    truncated: Any
    info: dict[str, Any]

    def __len__(self) -> int:
        return len(self.reward)


class TransitionSource(Protocol):
    """Where a replay phase's vector steps come from when the loop does not step its own
    env (``rlcore.loops.run_phases(source=...)``)."""

    def next_step(self) -> Transitions:
        """The next vector step (blocks until one arrives)."""
        ...

    def policy_changed(self, agent: Any, updates: int) -> None:
        """The learner's policy after ``updates`` updates (called before every vector
        step of a phase where the policy acts): publish it when due."""
        ...

    def metrics(self) -> dict[str, float]:
        """``dist/*`` values to log with the training metrics (since the last call)."""
        ...

    def close(self) -> None: ...


@dataclass
class RolloutRow:
    """One vector step of a rollout, as ``RolloutBuffer.add`` stores it, with the
    episode info the loop logs (``explore_step`` makes it)."""

    obs: Any
    action: Any
    log_prob: Any
    reward: Any
    value: Any
    terminated: Any
    truncated: Any
    bootstrap: Any
    extras: dict[str, torch.Tensor] | None
    costs: tuple[Any, Any, Any] | None
    info: dict[str, Any]

    def add_to(self, rollout: RolloutBuffer) -> None:
        rollout.add(
            self.obs, self.action, self.log_prob, self.reward, self.value, self.terminated,
            self.truncated, bootstrap_value=self.bootstrap, extras=self.extras, costs=self.costs,
        )  # fmt: skip


class RolloutSource(Protocol):
    """Where a rollout phase's iterations come from when the loop does not step its own
    env (``run_phases(rollouts=...)``): synchronous rollout workers."""

    num_envs: int  # envs over all workers: the rollout buffer's env axis

    def rollout(self, agent: Any, num_steps: int) -> tuple[list[RolloutRow], Any]:
        """``num_steps`` vector steps of every worker with ``agent``'s current policy,
        concatenated along the env axis, and the observation after the last step."""
        ...

    def metrics(self) -> dict[str, float]: ...
    def close(self) -> None: ...


def explore_step(
    learner: OnPolicy,
    cost_value: Callable[[torch.Tensor], torch.Tensor] | None,
    env: VectorEnv,
    obs: np.ndarray | torch.Tensor,
    device: torch.device,
) -> tuple[RolloutRow, Any]:
    """One on-policy vector step of ``env`` from ``obs``: the rollout's row and the next
    observation. Actions are clipped to the action box for the env but stored unclipped
    (discrete ones as the int64 indices the agent drew); the agent's rollout channels (a
    denoising chain, a base action) are stored by name. ``cost_value`` (a constrained
    agent's V_c): the step's cost, V_c(obs) and V_c(final obs) where truncated. Dict
    observations of vectors are stored, explored and valued flattened (``rollout_input``)."""
    space = env.single_observation_space
    obs_t = rollout_input(obs, space, device)
    action, log_prob, value, *channels = learner.explore(obs_t)
    # a device back end (mjx) takes the device tensor, the others numpy
    env_action = action if isinstance(obs, torch.Tensor) else action.cpu().numpy()
    next_obs, reward, terminated, truncated, info = env.step(
        to_env_action(env_action, env.single_action_space)
    )
    bootstrap = _bootstrap_values(learner.value, next_obs, info, truncated, device, space)
    costs = None
    if cost_value is not None:
        costs = (_step_cost(info), cost_value(obs_t),
                 _bootstrap_values(cost_value, next_obs, info, truncated, device, space))  # fmt: skip
    row = RolloutRow(obs_t, action, log_prob, reward, value, terminated, truncated, bootstrap,
                     channels[0] if channels else None, costs, info)  # fmt: skip
    return row, next_obs


def rollout_input(obs: Any, space: gym.Space, device: torch.device) -> Any:
    """What an on-policy agent explores, values and stores: the observations as one
    float32 tensor; a dict of vector parts flattened in its ``ObsSpec``'s order (what the
    agent's ``act`` does to a dict through its plumbing, so a rollout and a deployed policy
    read the same vector); a dict with image parts as ``{part: tensor}`` in each part's
    dtype (images uint8), as its encoder reads them."""
    if isinstance(obs, dict):
        spec = ObsSpec.from_space(space)
        if spec.images:
            return spec.tensors(obs, device)[0]
        return spec.flat_batch(obs, device)[0]
    return torch.as_tensor(obs, dtype=torch.float32, device=device)


def rollout_obs_shape(space: gym.Space) -> ObsSpec | tuple[int]:
    """The rollout buffer's observation storage for ``space``: its spec, or the flat
    vector ``rollout_input`` makes of a dict of vectors."""
    spec = ObsSpec.from_space(space)
    return (spec.flat_dim,) if spec.keyed and spec.all_vector else spec


PHASE_KINDS = ("offline", "warmup", "online", "rollout")


@dataclass
class Phase:
    """One stretch of a run (see ``run_phases``).

    ``name`` is the phase's kind, and what the agent is told (``agent.set_phase``):
    "offline" (gradient steps on ``sampler``, no environment), "warmup" (the environment
    is stepped into the replay buffer, no updates: the policy acts, or uniform random
    actions with ``random_actions``), "online" (env steps with ``updates_per_step``
    updates each, or ``updates_per_vector_step`` per vector step when set, on batches
    from ``sampler``) or "rollout" (on-policy iterations:
    ``rollout.num_steps`` vector steps into ``rollout``, the returns' GAE, one
    ``agent.update``). ``steps`` counts gradient steps offline and environment steps
    (summed over sub-envs) otherwise; a rollout phase's is a whole number of rollouts.
    An update draws ``minibatches`` batches of ``batch_size`` rows (online: the
    algorithm's update-to-data ratio, e.g. RLPD's 20); a rollout's advantages discount
    with ``returns``.
    """

    name: str
    steps: int
    sampler: Sampler | None = None
    random_actions: bool = field(default=False, kw_only=True)
    updates_per_step: float = field(default=1.0, kw_only=True)
    updates_per_vector_step: float | None = field(default=None, kw_only=True)
    batch_size: int = field(default=256, kw_only=True)
    minibatches: int = field(default=1, kw_only=True)
    rollout: RolloutBuffer | None = field(default=None, kw_only=True)
    returns: Returns = field(default_factory=Returns, kw_only=True)

    def __post_init__(self) -> None:
        if self.name not in PHASE_KINDS:
            raise ValueError(f"unknown phase '{self.name}': {', '.join(PHASE_KINDS)}")
        if self.name in ("offline", "online") and self.sampler is None:
            raise ValueError(f"the {self.name} phase needs a sampler to draw batches from")
        if (self.name == "rollout") != (self.rollout is not None):
            raise ValueError("a rollout buffer is what a rollout phase, and only one, needs")

    @property
    def interacts(self) -> bool:
        """True when the phase steps the environment."""
        return self.name != "offline"

    @property
    def replays(self) -> bool:
        """True when the phase's environment steps go into the replay buffer."""
        return self.name in ("warmup", "online")


_clock = time.perf_counter  # the training time's clock (a test's fake clock replaces it)

# the counters of a run_phases checkpoint (the run's position)
_COUNTERS = {
    "step": 0,  # the log's x-axis: gradient steps offline, then env steps
    "phase": 0,
    "phase_step": 0,
    "env_steps": 0,
    "updates": 0,
    "update_debt": 0.0,  # fractional online updates carried to the next env step
    "episodes": 0,
    "env_started": False,
}


def _resume_state(state: dict[str, Any], run_name: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """The checkpoint ``state`` of run ``run_name`` after checking it has what this loop
    writes: a checkpoint from another loop or an older rlcore layout raises a clear error
    instead of a ``KeyError`` deep inside the restore."""
    missing = [key for key in keys if key not in state]
    if missing:
        raise CheckpointReadError(
            f"the checkpoint of run {run_name} lacks {', '.join(missing)}: it was written by a "
            "different training loop or an older rlcore version, so this run cannot resume "
            "from it; start a new run directory (or resume with the rlcore version that "
            "wrote it)"
        )
    return state


def upgrade_rollout_state(state: dict[str, Any], seed: int) -> dict[str, Any]:
    """A checkpoint of the former ``on_policy`` loop (counters ``step``, ``iteration``,
    ``episodes``; no ``stateful``) in ``run_phases``' layout: one rollout phase that ran
    ``step`` env steps and ``iteration`` updates. Other states are returned unchanged."""
    counters = state.get("counters", {})
    if "iteration" not in counters or "phase" in counters:
        return state
    step = counters["step"]
    position = {"step": step, "phase_step": step, "env_steps": step,
                "updates": counters["iteration"], "episodes": counters["episodes"],
                "env_started": True}  # fmt: skip
    return {
        **state,
        "counters": {**_COUNTERS, **position},
        "stateful": {},  # a rollout is collected afresh after every checkpoint
        "warmup_rng": np.random.default_rng(seed).bit_generator.state,  # drawn by no rollout
    }


@dataclass
class _Record:
    """What every loop reports and checkpoints besides the agent: counters, last episode
    and evaluation returns, running bests and the last training metrics."""

    counters: dict[str, Any]
    last_return: float = math.nan
    last_cost: float = math.nan  # a task with costs: the last training episode's cost
    last_eval: float = math.nan
    last_eval_cost: float = math.nan  # a task with costs: the last evaluation's episode cost
    last_eval_success: float = math.nan  # a task reporting success: the last success rate
    best: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    # wall seconds spent training (ticks less compilation; not evaluations or
    # checkpoints): kept out of ``counters``, which equal runs share exactly, since no
    # two runs take the same time
    train_seconds: float = 0.0

    def evaluated(self, result: dict[str, float]) -> None:
        """Remember an evaluation's mean return (and cost)."""
        self.last_eval = result["eval/return"]
        self.last_eval_cost = result.get("eval/cost", math.nan)
        self.last_eval_success = result.get("eval/success_rate", math.nan)

    def state(self) -> dict[str, Any]:
        return {
            "counters": dict(self.counters),
            "eval_cost": self.last_eval_cost,
            "eval_success": self.last_eval_success,
            "returns": (self.last_return, self.last_eval, dict(self.best)),
            "metrics": dict(self.metrics),
            "train_seconds": self.train_seconds,
            "rng": get_rng_state(),
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Counters, returns and metrics; the global RNG states are set by the loop last,
        after everything that may draw from them (env resets)."""
        self.counters = dict(state["counters"])
        self.last_return, self.last_eval, best = state["returns"]
        self.last_eval_cost = state.get("eval_cost", math.nan)
        self.last_eval_success = state.get("eval_success", math.nan)  # older checkpoints: none
        self.best = dict(best)
        self.metrics = dict(state.get("metrics", {}))
        self.train_seconds = float(state.get("train_seconds", 0.0))  # older checkpoints: 0

    def summary(self, score: Callable[[float], float] | None = None) -> dict[str, float]:
        out = {
            "eval/return": self.last_eval,
            "eval/best_return": self.best.get("eval/return", math.nan),
            "train/episode_return": self.last_return,
        }
        if math.isfinite(self.last_eval_cost):  # a task with costs
            out["eval/cost"] = self.last_eval_cost
        if math.isfinite(self.last_eval_success):  # a task that reports success
            out["eval/success_rate"] = self.last_eval_success
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
    source: TransitionSource | None = None,
    rollouts: RolloutSource | None = None,
) -> dict[str, float]:
    """Training as a sequence of phases, e.g. ``offline`` -> ``warmup`` -> ``online``
    (offline-to-online), ``warmup`` (random) -> ``online`` (SAC), ``offline`` (IQL) or
    ``rollout`` (PPO): the one skeleton of every run, with one place for evaluation,
    checkpoint cadence, stop requests, logging, ``stop_at_return`` / ``stop_at_success``, ``stop_after_s``
    and resume.

    Replay phases' environment steps write into ``buffer`` (after ``reward_transform``,
    e.g. the dataset's reward normalisation); each online update draws
    ``phase.minibatches`` minibatches of ``phase.batch_size`` from the phase's sampler
    (offline: one). A rollout phase collects into its own ``RolloutBuffer`` and logs
    every iteration. One global step counter runs through the phases (gradient steps
    offline, then env steps) and is the x-axis of every log. The agent is told each phase
    (``agent.set_phase(name)``, if it has one) when it starts and after a resume. Every
    phase ends with an evaluation (not a random-action warm-up), and the online phase
    evaluates again after its first update: the returns right before and right after the
    switch are always logged. Every evaluation also logs ``eval/train_seconds``, the
    run's training time so far (ticks only, less a compiled update's compilation,
    summed over resumes: curves against wall time); a run that reaches
    ``settings.stop_after_s`` of it is evaluated, checkpointed and ends there.
    ``stateful`` names the objects besides the agent and the buffer whose ``state_dict``
    a checkpoint must hold (dataset and MixedSampler generators); resuming gives the
    uninterrupted run's numbers (CPU). ``evaluate_first``
    evaluates at step 0 (an agent loaded from a finished run: its return before any
    online step). ``source`` (``rlcore.distributed.RayActors``) gives the replay phases'
    vector steps instead of ``env`` (which then only evaluates and names the spaces):
    the counters and the updates due advance by the rows received, and the source is
    told the policy before every vector step (it publishes weights when due).
    ``rollouts`` (``rlcore.distributed.RayRollouts``) collects a rollout phase's
    iterations on synchronous workers, gathered along the env axis into the phase's
    rollout buffer (the same GAE and update follow).
    """
    loop = _PhaseRun(agent, phases, env, eval_env, settings, run, buffer, stateful, score,
                     reward_transform, source, rollouts)  # fmt: skip
    return loop.execute(evaluate_first)


class _PhaseRun:
    """One execution of ``run_phases``: the run's state (what a checkpoint holds) and the
    skeleton's steps. The agent's capabilities are resolved once, here."""

    def __init__(
        self,
        agent: Agent,
        phases: list[Phase],
        env: VectorEnv | None,
        eval_env: VectorEnv,
        settings: LoopSettings,
        run: RunContext,
        buffer: ReplayBuffer | None,
        stateful: dict[str, Any] | None,
        score: Callable[[float], float] | None,
        reward_transform: Callable[[np.ndarray], np.ndarray] | None,
        source: TransitionSource | None = None,
        rollouts: RolloutSource | None = None,
    ) -> None:
        _check_phases(phases, env, buffer, None if rollouts is None else rollouts.num_envs)
        if source is not None and any(phase.name == "rollout" for phase in phases):
            raise ValueError("a transition source feeds replay phases, not rollouts")
        self.source, self.rollouts = source, rollouts
        self.agent, self.phases, self.env, self.eval_env = agent, phases, env, eval_env
        self.settings, self.run, self.buffer, self.score = settings, run, buffer, score
        self.reward_transform = reward_transform
        self.stateful = {**({"buffer": buffer} if buffer is not None else {}), **(stateful or {})}
        self.warmup_rng = np.random.default_rng(settings.seed)
        self.record = _Record(dict(_COUNTERS))
        self.obs: np.ndarray | torch.Tensor | None = None
        self.evaluated_at = -1  # the step of the last evaluation: one evaluation per step
        # a run with replay phases logs where each evaluation lies; a rollout run's step
        # is its env step (and its phase 0)
        self.eval_extra = any(phase.name != "rollout" for phase in phases)
        self.set_phase = agent.set_phase if isinstance(agent, Phased) else None
        self.record_costs = agent.record_episode_costs if isinstance(agent, CostRecorder) else None
        self.compile_pending = settings.compiled  # the first update compiles
        self.compile_s = 0.0  # seconds the current tick spent compiling
        # an agent that keeps state per sub-env (a residual policy's open-loop base chunk)
        self.episodes_started = agent.episodes_started if isinstance(agent, PerEnvState) else None
        self.learner: OnPolicy | None = None
        # a constrained on-policy agent (cost critic): costs, V_c and the cost's GAE
        self.cost_value = None
        if any(phase.name == "rollout" for phase in phases):
            require(agent, OnPolicy, "a rollout phase needs (explore, value)")
            self.learner = agent
            self.cost_value = agent.cost_value if isinstance(agent, CostCritic) else None
        if run.resume is not None:
            self.restore()
        budget = settings.stop_after_s
        self.progress_phase = -1  # the phase the progress line measures
        self.progress = _Progress(
            run, sum(p.steps for p in phases), self.counters["step"],
            seconds_left=None if budget is None else lambda: budget - self.record.train_seconds,
        )  # fmt: skip

    @property
    def counters(self) -> dict[str, Any]:
        return self.record.counters

    def restore(self) -> None:
        """Continue from ``run.resume``: agent, stateful objects, counters, environment and
        RNG states (the global ones last, after everything that may draw from them)."""
        state = _resume_state(
            upgrade_rollout_state(self.run.resume, self.settings.seed),
            self.run.name,
            ("agent", "stateful", "counters", "returns", "warmup_rng"),
        )
        self.agent.load_state_dict(state["agent"])
        for name, obj in self.stateful.items():
            obj.load_state_dict(state["stateful"][name])
        self.record.restore(state)
        self.warmup_rng.bit_generator.state = state["warmup_rng"]
        if self.counters["env_started"]:
            self.env.reset(seed=self.settings.seed)
            if set_vec_env_state(self.env, state["env"]):
                self.obs = state["obs"]
            else:  # no simulator states (Atari): new episodes from a seed of this step
                step = int(self.counters["step"])
                self.obs, _ = self.env.reset(seed=self.settings.seed + step)
                if self.buffer is not None:
                    self.buffer.cut_episodes()
                why = sorted({sub["why"] for sub in state["env"]["envs"] if "why" in sub})
                self.run.logger.note(
                    f"resumed at step {step:,} with new episodes: "
                    f"{'; '.join(why) or 'no simulator states were saved'} (the interrupted "
                    "episodes end there, cut as truncated; agent, replay buffer, optimisers "
                    "and counters continue)"
                )
        set_rng_state(state["rng"])

    def snapshot(self) -> dict[str, Any]:
        """Everything a resume needs (the checkpoint's ``loop``)."""
        return {
            "agent": self.agent.state_dict(),
            "stateful": {name: obj.state_dict() for name, obj in self.stateful.items()},
            "env": get_vec_env_state(self.env) if self.counters["env_started"] else None,
            "obs": self.obs,
            "warmup_rng": self.warmup_rng.bit_generator.state,
            **self.record.state(),
        }

    def execute(self, evaluate_first: bool) -> dict[str, float]:
        """The skeleton: a tick of the current phase (a gradient step, a vector step or a
        rollout iteration), then logging, evaluation, the phase switch and checkpoints."""
        counters, phases, record = self.counters, self.phases, self.record
        if self.set_phase is not None and counters["phase"] < len(phases):
            self.set_phase(phases[counters["phase"]].name)
        if evaluate_first and counters["step"] == 0:
            self.evaluate(0)
        reached = out_of_time = False
        # resumed after its last evaluation met stop_at_return / stop_at_success: no step
        if counters["step"] > 0 and self.settings.reached_target(
            record.last_eval, record.last_eval_success
        ):
            reached = counters["phase"] < len(phases)
        while counters["phase"] < len(phases) and not reached:
            if self.settings.out_of_time(record.train_seconds):  # resumed with no time left
                out_of_time = True
                break
            phase = phases[counters["phase"]]
            if counters["phase_step"] >= phase.steps:  # empty phase
                counters["phase"] += 1
                counters["phase_step"] = 0
                continue
            if counters["phase_step"] == 0 and len(phases) > 1:
                self.run.logger.note(
                    f"phase {phase.name} ({phase.steps:,} steps) from step {counters['step']:,}"
                )
            if self.progress_phase != counters["phase"]:  # its pace is measured anew
                self.progress_phase = counters["phase"]
                self.progress.start_phase(
                    "random warm-up" if phase.random_actions else phase.name,
                    counters["step"], counters["step"] + phase.steps - counters["phase_step"],
                    final=counters["phase"] == len(phases) - 1,
                )  # fmt: skip
            prev, started, self.compile_s = counters["step"], _clock(), 0.0
            self.tick(phase)
            tick_s = _clock() - started
            self.progress.mark(counters["step"])
            record.train_seconds += tick_s - self.compile_s  # a compilation is not training
            step = counters["step"]
            phase_done = counters["phase_step"] >= phase.steps
            last = phase_done and counters["phase"] == len(phases) - 1
            out_of_time = not last and self.settings.out_of_time(record.train_seconds)
            self.log_training(phase, step, prev, tick_s)
            # a phase's end is evaluated (not a random-action warm-up: no policy was
            # involved), and so is the step where the time budget ran out
            if (
                _crossed(step, prev, self.settings.eval_every)
                or (phase_done and (last or not phase.random_actions))
                or out_of_time
            ):
                self.evaluate(step)
            else:
                self.show_progress()
            if phase_done and not last:
                self.next_phase()
            reached = not last and self.settings.reached_target(
                record.last_eval, record.last_eval_success
            )
            done = last or reached or out_of_time
            _checkpoint_if_due(self.run, self.settings, step, prev, done, self.snapshot)
            if done:
                break
        self.run.logger.flush()
        # where and why the run ended, for the closing summary
        end = {
            "run/step": counters["step"],
            "run/reached_stop_at_return": float(reached),
            "run/out_of_time": float(out_of_time and not reached),
            "run/train_seconds": record.train_seconds,
        }
        return {**record.summary(self.score), **end}

    def tick(self, phase: Phase) -> None:
        """One unit of ``phase``'s work, advancing the counters."""
        if phase.name == "offline":
            self.update(phase, self.counters["step"])
            self.counters["step"] += 1
            self.counters["phase_step"] += 1
        elif phase.name == "rollout":
            self.rollout_iteration(phase)
        else:
            self.replay_step(phase)

    def next_phase(self) -> None:
        """Switch to the next phase; a warm-up logs no stale training metrics."""
        counters = self.counters
        counters["phase"] += 1
        counters["phase_step"] = 0
        counters["update_debt"] = 0.0
        self.record.metrics = {}
        if self.set_phase is not None:
            self.set_phase(self.phases[counters["phase"]].name)

    def evaluate(self, step: int) -> None:
        """Evaluate and log at ``step`` (once per step)."""
        if self.evaluated_at == step:
            return
        self.evaluated_at = step
        counters, record = self.counters, self.record
        extra: dict[str, Any] = {"eval/train_seconds": record.train_seconds}
        if self.eval_extra:
            extra["eval/env_steps"] = counters["env_steps"]
            extra["eval/phase"] = self.phases[min(counters["phase"], len(self.phases) - 1)].name
        record.evaluated(_evaluate_and_log(
            self.agent, self.env, self.eval_env, self.settings, self.run, step, record.best,
            self.score, extra=extra,
        ))  # fmt: skip
        if self.run.eval_video is not None:
            one = replace(self.settings, eval_episodes=1)
            with torch.random.fork_rng(devices=[]):  # the run's random stream is untouched
                self.run.eval_video(
                    lambda env: _evaluate_agent(self.agent, self.env, env, one), step
                )
        self.show_progress(force=True)

    def show_progress(self, force: bool = False) -> None:
        """The progress line at the current step."""
        record = self.record
        self.progress.show(self.counters["step"], record.last_return, record.last_eval, force,
                           record.last_cost, record.last_eval_cost,
                           record.last_eval_success)  # fmt: skip

    def log_training(self, phase: Phase, step: int, prev: int, tick_s: float) -> None:
        """The training metrics and speeds: every rollout iteration (with its duration:
        rollout + update), otherwise when ``log_every`` steps were crossed."""
        counters, sps = self.counters, self.progress.sps
        if phase.name == "rollout":
            timing = {"time/sps": sps(step), "time/iteration_s": tick_s}
        elif _crossed(step, prev, self.settings.log_every) and self.record.metrics:
            speed = "time/sps" if phase.interacts else "time/updates_per_s"
            timing = {speed: sps(step), "time/updates": counters["updates"]}
        else:
            return
        env_counters = wrapper_metrics(self.env) if phase.interacts else {}
        remote = self.source if phase.name != "rollout" else self.rollouts
        if remote is not None and phase.interacts:
            env_counters = remote.metrics()
        metrics = {f"train/{k}": v for k, v in self.record.metrics.items()}
        self.run.logger.log({**metrics, **timing, **env_counters}, step)

    def start_env(self) -> None:
        """Reset the training env (the first step of the first phase that steps it)."""
        if self.counters["env_started"]:
            return
        self.obs, _ = self.env.reset(seed=self.settings.seed)
        self.counters["env_started"] = True
        if self.episodes_started is not None:
            self.episodes_started(np.ones(self.env.num_envs, bool))

    def env_stepped(
        self, next_obs: Any, info: dict[str, Any], terminated: Any, truncated: Any
    ) -> int:
        """The bookkeeping after every vector step: per-env state, observation, counters
        and the episodes that ended; returns the new step."""
        if self.episodes_started is not None:
            self.episodes_started(terminated | truncated)
        self.obs = next_obs
        return self.count_rows(self.env.num_envs, info)

    def count_rows(self, rows: int, info: dict[str, Any]) -> int:
        """Advance the counters by ``rows`` env steps and log the episodes that ended in
        them; returns the new step."""
        counters = self.counters
        counters["step"] += rows
        counters["env_steps"] += rows
        counters["phase_step"] += rows
        finished, costs = _log_episodes(self.run, info, counters["step"], self.record_costs)
        if finished:
            counters["episodes"] += len(finished)
            self.record.last_return = finished[-1]
            self.record.last_cost = costs[-1] if costs else math.nan
        return counters["step"]

    def step_env(self, phase: Phase) -> tuple[Transitions, int]:
        """One vector step of the loop's own env (the local transition source): the
        policy's actions, or uniform random ones in a random warm-up; returns the step's
        transitions and the new step."""
        env = self.env
        self.start_env()
        if phase.random_actions:
            action = random_actions(env.single_action_space, self.warmup_rng, env.num_envs)
        else:
            action = self.agent.act(self.obs)
        next_obs, reward, terminated, truncated, info = env.step(
            to_env_action(action, env.single_action_space)
        )
        rows = Transitions(self.obs, action, reward, final_next_obs(next_obs, info), terminated,
                           truncated, info)  # fmt: skip
        return rows, self.env_stepped(next_obs, info, terminated, truncated)

    def replay_step(self, phase: Phase) -> None:
        """One vector step into the replay buffer (warm-up, online), from the loop's env
        or from the transition source; online, then the updates due
        (``updates_per_step`` per env step received, fractions carried over)."""
        counters, source = self.counters, self.source
        if source is None:
            rows, step = self.step_env(phase)
        else:
            if not phase.random_actions:  # the actors act with the policy (when published)
                source.policy_changed(self.agent, counters["updates"])
            rows = source.next_step()
            step = self.count_rows(len(rows), rows.info)
        reward = rows.reward
        stored = reward if self.reward_transform is None else self.reward_transform(reward)
        channels = {"cost": _step_cost(rows.info)} if "cost" in self.buffer.specs else {}
        self.buffer.add(
            rows.obs, rows.action, stored, rows.next_obs, rows.terminated, rows.truncated,
            **channels,
        )  # fmt: skip
        if phase.name != "online":
            return
        per_vector_step = phase.updates_per_vector_step
        if per_vector_step is None:
            per_vector_step = phase.updates_per_step * len(rows)
        counters["update_debt"] += per_vector_step
        first = counters["phase_step"] == len(rows)
        while counters["update_debt"] >= 1.0:
            self.update(phase, step)
            counters["update_debt"] -= 1.0
        if first and any(p.name == "offline" for p in self.phases[: counters["phase"]]):
            self.evaluate(step)  # right after the switch to online updates

    def update(self, phase: Phase, step: int) -> None:
        """One ``agent.update`` on a batch from ``phase``'s sampler: ``utd_ratio``
        minibatches per online update (RLPD, WSRL); pre-training takes one."""
        try:
            batch = draw(phase.sampler, phase.batch_size, phase.minibatches)
            with self.compilation():
                self.record.metrics.update(self.agent.update(batch))
        except NonFiniteLossError as error:
            _stop_on_nan(self.run, error, step, self.snapshot)
        self.counters["updates"] += 1

    @contextmanager
    def compilation(self) -> Iterator[None]:
        """Around an update call: the first one of a compiled agent compiles its graph
        (tens of seconds on a CPU, again in every resumed process). Say when it starts and
        how long it took, and leave that stall out of the progress line's ETA."""
        if not self.compile_pending:
            yield
            return
        self.compile_pending = False
        self.run.logger.note("compiling the update (compile on): the first update waits for it")
        started = time.monotonic()
        yield
        took = time.monotonic() - started
        self.compile_s = took  # left out of the training time (stop_after_s)
        self.run.logger.note(f"compiled in {took:.1f} s; speed and ETA are measured from now on")
        self.progress.restart(self.counters["step"])

    def rollout_iteration(self, phase: Phase) -> None:
        """One on-policy iteration: ``rollout.num_steps`` vector steps, the returns' GAE
        and ``agent.update(samples, progress)``, progress being the phase's fraction done."""
        rollout, counters, record = phase.rollout, self.counters, self.record
        per_iteration = rollout.num_steps * rollout.num_envs
        progress = (counters["phase_step"] // per_iteration) / (phase.steps // per_iteration)
        rollout.reset()
        if self.rollouts is None:
            self.start_env()
            for _ in range(rollout.num_steps):
                self.collect(rollout)
                self.show_progress()
        else:  # the workers' rollouts side by side, then the same GAE and update
            rows, self.obs = self.rollouts.rollout(self.agent, rollout.num_steps)
            for row in rows:
                row.add_to(rollout)
                self.count_rows(rollout.num_envs, row.info)
        samples = self.returns(phase)
        try:
            with self.compilation():
                record.metrics = self.agent.update(samples, progress=progress)
        except NonFiniteLossError as error:
            _stop_on_nan(self.run, error, counters["step"], self.snapshot)
        counters["updates"] += 1

    def collect(self, rollout: RolloutBuffer) -> None:
        """One vector step into ``rollout`` (``explore_step``). On an env built with
        action chunks (``rlcore.envs.make.ActionChunks``) a step is one chunk."""
        row, next_obs = explore_step(self.learner, self.cost_value, self.env, self.obs,
                                     rollout.device)  # fmt: skip
        row.add_to(rollout)
        self.env_stepped(next_obs, row.info, row.terminated, row.truncated)

    def returns(self, phase: Phase) -> Any:
        """The collected rollout with its GAE (and the cost's), bootstrapped from the value
        of the observation after the last step."""
        rollout, returns = phase.rollout, phase.returns
        obs = rollout_input(self.obs, self.env.single_observation_space, rollout.device)
        return rollout.compute(
            self.learner.value(obs), returns.gamma, returns.gae_lambda,
            None if self.cost_value is None else self.cost_value(obs),
            returns.cost_gamma, returns.cost_gae_lambda,
        )  # fmt: skip


def _check_phases(
    phases: list[Phase],
    env: VectorEnv | None,
    buffer: ReplayBuffer | None,
    rollout_envs: int | None = None,
) -> None:
    """Refuse phases that lack what they step or fill (``rollout_envs``: the envs of
    rollout workers, when they collect instead of ``env``)."""
    if not phases:
        raise ValueError("run_phases needs at least one phase")
    if any(p.interacts for p in phases) and env is None:
        raise ValueError("phases that step the environment need an env")
    if any(p.replays for p in phases) and buffer is None:
        raise ValueError("warm-up and online phases need a replay buffer")
    num_envs = env.num_envs if rollout_envs is None and env is not None else rollout_envs
    for phase in phases:
        if phase.name != "rollout":
            continue
        if phase.rollout.num_envs != num_envs:
            raise ValueError(
                f"the rollout buffer holds {phase.rollout.num_envs} envs, the env has {num_envs}"
            )
        if phase.steps % (phase.rollout.num_steps * num_envs):
            raise ValueError(
                f"a rollout phase's steps ({phase.steps:,}) must be a multiple of "
                f"rollout steps x num_envs ({phase.rollout.num_steps * num_envs:,})"
            )


def rollout_phase(
    rollout: RolloutBuffer, total_steps: int, returns: Returns | None = None
) -> Phase:
    """The rollout phase of an on-policy run: ``total_steps`` rounded down to whole
    rollouts of ``rollout.num_steps`` x num_envs steps (at least one), its advantages
    discounted with ``returns``."""
    per_iteration = rollout.num_steps * rollout.num_envs
    steps = max(1, total_steps // per_iteration) * per_iteration
    return Phase("rollout", steps, rollout=rollout, returns=returns or Returns())


def _bootstrap_values(
    value: Callable[[torch.Tensor], torch.Tensor],
    next_obs: np.ndarray | torch.Tensor,
    info: dict[str, Any],
    truncated: np.ndarray | torch.Tensor,
    device: torch.device,
    space: gym.Space,
) -> np.ndarray | torch.Tensor:
    """``value``(final observation) where an episode was truncated, else 0 (the agent's V,
    or its V_c). With a device back end every env's final observation is valued and masked
    on the device (no host sync to ask which envs were truncated)."""
    if isinstance(truncated, torch.Tensor):
        final = final_next_obs(next_obs, info).to(device, torch.float32)
        return torch.where(truncated.to(device), value(final), 0.0)
    bootstrap = np.zeros(len(truncated), np.float32)
    if truncated.any():
        final = final_next_obs(next_obs, info)
        if isinstance(final, dict):
            final = {name: part[truncated] for name, part in final.items()}
        else:
            final = final[truncated]
        bootstrap[truncated] = value(rollout_input(final, space, device)).cpu().numpy()
    return bootstrap
