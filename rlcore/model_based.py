"""Model-based offline RL's data path: imagined rollouts of a learned dynamics ensemble,
mixed with the dataset into every training batch.

``ModelRollouts`` is the offline phase's sampler for an agent that trains in a model
(``rlcore.capabilities.ModelBased``; ``RunPlan.model``, a ``rlcore.plan.ModelRecipe``).
It follows OfflineRL-Kit's ``MBPolicyTrainer`` with ``MOPOPolicy.rollout``
(github.com/yihaosun1124/OfflineRL-Kit @ e3ce697):

1. Before the first batch, the agent's ensemble is fitted on every dataset transition
   (``rlcore.dynamics.fit_dynamics``), unless it already is (a resumed run, an agent
   loaded with a fitted model).
2. Every ``rollout_freq`` batches (the first included), ``rollout_batch`` dataset
   states, drawn uniformly, start a rollout of ``rollout_length`` steps: the policy's
   stochastic action (``imagine_action``), one ``ProbabilisticEnsemble.step`` (a random
   elite's Gaussian sample), the reward minus ``penalty_coef`` times MOPO's uncertainty,
   and the task's termination rule on (obs, action, next_obs); terminated rollouts stop,
   the others go on from their imagined states. Every imagined transition goes into a
   ring buffer of ``rollout_batch * rollout_length * retain_epochs`` rows.
3. Every batch: ``round(real_ratio * batch)`` dataset rows then the rest drawn from the
   ring buffer (``rlcore.buffers.MixedSampler``, rows in that order).

With a dynamics reward (MOREC, ``candidate_draws`` > 0; polixir/morec @ be8a641's
``EnsembleDynamics.step``) it is learned after the fit (``rlcore.dynamics_reward``), and a
model step draws ``candidate_draws`` samples of every elite (clipped to +-``state_clip``),
keeps the one of highest dynamics reward (or draws one by softmax(10 r)), and ends the
rollout where the kept one scores below ``terminal_reward`` (the transition is stored,
flagged terminal, as the reference does).

``load_fitted_dynamics`` starts a run from another run's fitted ensemble (``dynamics_from``:
MOREC's reference loads the ensembles of its MOPO runs; a MOPO and a MOREC run then roll
out in the same model), refusing one fitted on other data or of another shape.

``termination_rule(env_id)`` gives the termination of the gymnasium MuJoCo tasks
(``rlcore.envs.native.TASKS``' health rules and InvertedDoublePendulum's tip height, read
from the observation: the v5 layout without x / y) plus a non-finite prediction; tasks
that never terminate (HalfCheetah, Swimmer, Reacher, Pusher, HumanoidStandup) end a
rollout only on a non-finite prediction.

Departures from OfflineRL-Kit: the real rows of a batch are the real_ratio share rounded
(largest remainder: 13 of 256 at 0.05) where the reference truncates (12); draws come
from one torch generator seeded by the run (the reference: numpy's and torch's global
state); the termination rules are gymnasium's: the reference's Hopper rule bounds
obs[1:] from above only (``np.abs`` of a boolean), and its HalfCheetah / Walker2d rules
also end a rollout where any |obs| >= 100 -- here only a non-finite prediction does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rlcore.buffers import MixedSampler, ReplayBuffer
from rlcore.checkpoint import load_checkpoint
from rlcore.dynamics import FitResult, ProbabilisticEnsemble, fit_dynamics
from rlcore.dynamics_reward import DynamicsReward, RewardLearning, learn_dynamics_reward
from rlcore.plan import ModelRecipe
from rlcore.types import Batch

Termination = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def load_fitted_dynamics(
    dynamics: ProbabilisticEnsemble, source: str, dataset: str | None, corruption: Any
) -> str:
    """Load the fitted ensemble of the MOPO / MOREC run ``source`` (a run directory or a
    .pt) into ``dynamics``. Refuses a run without one, one fitted on another dataset or
    corruption than ``dataset`` / ``corruption`` (this run's recorded values), and one of
    another shape. Returns the line the run logs."""
    state = load_checkpoint(source)
    weights = (state.get("agent") or {}).get("dynamics")
    if weights is None:
        raise ValueError(f"dynamics_from={source}: its {state.get('algo')} agent has no "
                         "dynamics ensemble (a MOPO / MOREC run's has)")  # fmt: skip
    record = state.get("config") or {}
    theirs = (record.get("dataset"), record.get("corruption"))
    if theirs != (dataset, corruption):
        raise ValueError(f"dynamics_from={source} was fitted on dataset={theirs[0]} "
                         f"(corruption {theirs[1]}); this run trains on dataset={dataset} "
                         f"(corruption {corruption}): fit on the data you train on")  # fmt: skip
    if not bool(weights["fitted"]):
        raise ValueError(f"dynamics_from={source}: its ensemble is not fitted yet")
    try:
        dynamics.load_state_dict(weights)
    except RuntimeError as error:
        first = str(error).strip().splitlines()[-1].strip()
        raise ValueError(f"dynamics_from={source}: its ensemble has another shape than this "
                         f"run's (members / elites / dynamics_hidden): {first}") from None
    return f"dynamics ensemble loaded from {source} (fitted on {dataset}): not refitted"


def termination_rule(env_id: str) -> Termination:
    """``terminated(obs, action, next_obs) -> (B,) bool`` of a gymnasium MuJoCo task,
    read from the next observation (``rlcore.envs.native.TASKS``' health rules; the
    observation's first entries are qpos without x, or x and y); a non-finite next
    observation always terminates. Raises for tasks it has no rule for."""
    from rlcore.envs.native import TASKS  # noqa: PLC0415 (MuJoCo only when asked)

    name = env_id.split(":")[-1].split("/")[-1].split("-")[0].lower()
    specs = {key.split("-")[0].lower(): spec for key, spec in TASKS.items()}
    if name in _NEVER_TERMINATE:
        return lambda obs, action, next_obs: ~torch.isfinite(next_obs).all(-1)
    if name == "inverteddoublependulum":
        return _double_pendulum_fell
    if name == "randomfrictionhopper":
        return _random_friction_hopper_fell
    if name == "simglucose":
        return _glucose_out_of_range
    if name == "rocketrecovery":
        return _rocket_down
    if name not in specs:
        known = sorted(
            [*TASKS, *_NEVER_TERMINATE.values(), "InvertedDoublePendulum", "RandomFrictionHopper",
             "RocketRecovery", "Simglucose"],
            key=str.lower,
        )
        raise ValueError(
            f"no termination rule for env '{env_id}' in model rollouts: known tasks are "
            f"{', '.join(known)} (library code can pass its own to ModelRollouts)"
        )
    spec = specs[name]

    def inside(x: torch.Tensor, bounds: tuple[float, float]) -> torch.Tensor:
        return (bounds[0] < x) & (x < bounds[1])

    def terminated(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor):
        finite = torch.isfinite(next_obs).all(-1)
        if not spec.terminate_when_unhealthy or spec.health == "none":
            return ~finite
        if spec.health in ("hopper", "walker2d"):  # z, angle = qpos[1], qpos[2]
            healthy = inside(next_obs[:, 0], spec.healthy_z_range)
            healthy &= inside(next_obs[:, 1], spec.healthy_angle_range)
            if spec.health == "hopper":  # state_vector()[2:] = obs[1:]
                healthy &= inside(next_obs[:, 1:], spec.healthy_state_range).all(-1)
        elif spec.health == "pendulum":  # |qpos[1]| <= 0.2
            healthy = next_obs[:, 1].abs() <= 0.2
        elif spec.health == "ant":  # z = qpos[2], closed bounds
            low, high = spec.healthy_z_range
            healthy = (low <= next_obs[:, 0]) & (next_obs[:, 0] <= high)
        else:  # humanoid: z = qpos[2]
            healthy = inside(next_obs[:, 0], spec.healthy_z_range)
        return ~(finite & healthy)

    return terminated


# gymnasium MuJoCo tasks outside rlcore.envs.native that never terminate (time limit only)
_NEVER_TERMINATE = {
    "reacher": "Reacher",
    "pusher": "Pusher",
    "humanoidstandup": "HumanoidStandup",
    "pendulum": "Pendulum",  # gymnasium's classic-control Pendulum-v1: never terminated
    "dmsd": "DMSD",
    "pipeline": "Pipeline",
    "safetyhalfcheetah": "SafetyHalfCheetah",
}  # fmt: skip (NeoRL-2's: envs/neorl2.py)


def _glucose_out_of_range(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor):
    """NeoRL-2's Simglucose (its terminated module): the sensor reading o'[0] below 40 or
    above 600 mg/dL."""
    reading = next_obs[:, 0]
    return ~torch.isfinite(next_obs).all(-1) | (reading < 40) | (reading > 600)


def _rocket_down(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor):
    """NeoRL-2's RocketRecovery (its terminated module): down when |o'[1]| <= 0.05."""
    return ~torch.isfinite(next_obs).all(-1) | (next_obs[:, 1].abs() <= 0.05)


def _double_pendulum_fell(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor):
    """InvertedDoublePendulum-v5: the tip's height 0.6 cos(a) + 0.6 cos(a + b) <= 1, from
    the observation's sin / cos of the two hinge angles (obs[1:3], obs[3:5])."""
    sin_a, sin_b, cos_a, cos_b = next_obs[:, 1], next_obs[:, 2], next_obs[:, 3], next_obs[:, 4]
    height = 0.6 * cos_a + 0.6 * (cos_a * cos_b - sin_a * sin_b)
    return ~torch.isfinite(next_obs).all(-1) | (height <= 1.0)


def _random_friction_hopper_fell(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor):
    """NeoRL-2's RandomFrictionHopper (its terminated module): the observation is [x, z,
    angle, ...]: z <= 0.7, |angle| >= 0.2 or an entry of next_obs[3:12] outside (-100, 100)."""
    state = next_obs[:, 3:12]
    healthy = (next_obs[:, 1] > 0.7) & (next_obs[:, 2] > -0.2) & (next_obs[:, 2] < 0.2)
    healthy &= ((state > -100) & (state < 100)).all(-1)
    return ~(torch.isfinite(next_obs).all(-1) & healthy)


class ModelRollouts:
    """The offline phase's sampler of a model-based agent (module docstring): fits the
    ensemble on first use, rolls the policy out in it every ``rollout_freq`` batches,
    mixes dataset and imagined rows. ``state_dict`` holds the imagined rows, the batch
    count and the generator (the ensemble is the agent's, saved with it)."""

    def __init__(
        self,
        dataset,  # noqa: ANN001 (rlcore.offline.datasets.OfflineDataset)
        dynamics: ProbabilisticEnsemble,
        policy: Callable[[torch.Tensor], torch.Tensor],
        terminated: Termination,
        recipe: ModelRecipe,
        seed: int = 0,
        log: Callable[[str], None] = print,
        dynamics_reward: DynamicsReward | None = None,
    ) -> None:
        if (recipe.candidate_draws > 0) != (dynamics_reward is not None):
            raise ValueError("a transition filter (candidate_draws > 0) needs a dynamics reward, "
                             "and a dynamics reward is only read by one")  # fmt: skip
        self.dynamics_reward = dynamics_reward
        self.dataset, self.dynamics, self.policy = dataset, dynamics, policy
        self.terminated, self.recipe, self.log = terminated, recipe, log
        self.generator = torch.Generator().manual_seed(seed)
        capacity = recipe.rollout_batch * recipe.rollout_length * recipe.retain_epochs
        device = dynamics.input_mean.device
        self.imagined = ReplayBuffer(capacity, (dynamics.obs_dim,), (dynamics.action_dim,),
                                     device=device, seed=seed + 1)  # fmt: skip
        self.mixed = MixedSampler(
            [(dataset, recipe.real_ratio), (self.imagined, 1 - recipe.real_ratio)]
        )
        self.calls = 0
        self.fit_result: FitResult | None = None
        self.last_rollout: dict[str, float] = {}

    def fit(self) -> FitResult:
        """Fit the ensemble on every dataset transition (``rlcore.dynamics.fit_dynamics``)."""
        data, recipe = self.dataset, self.recipe
        rows = torch.arange(len(data))
        obs, next_obs = data.observations(rows), data.observations(rows, next_obs=True)
        self.log(f"fitting the dynamics ensemble on {len(data):,} transitions")
        result = fit_dynamics(
            self.dynamics, obs, data.action, data.reward, next_obs, self.generator,
            lr=recipe.fit_lr, batch_size=recipe.fit_batch_size,
            holdout_ratio=recipe.holdout_ratio, max_holdout=recipe.max_holdout,
            patience=recipe.patience, max_epochs=recipe.max_fit_epochs, log=self.log,
        )  # fmt: skip
        errors = ", ".join(f"{result.holdout_errors[i]:.4g}" for i in result.elites)
        self.log(f"dynamics fitted in {result.epochs} epochs; elites {result.elites} "
                 f"(holdout MSE {errors})")  # fmt: skip
        self.fit_result = result
        return result

    @torch.no_grad()
    def rollout(self, obs: torch.Tensor) -> dict[str, float]:
        """One round of imagined rollouts from the states ``obs`` into the ring buffer;
        returns their count and mean penalised reward and penalty."""
        recipe = self.recipe
        rewards, penalties, scores = [], [], []
        for _ in range(recipe.rollout_length):
            action = self.policy(obs)
            if self.dynamics_reward is None:
                next_obs, reward, penalty = self.dynamics.step(obs, action, self.generator)
                if recipe.state_clip is not None:
                    next_obs = next_obs.clamp(-recipe.state_clip, recipe.state_clip)
                    reward = reward.clamp(-recipe.state_clip, recipe.state_clip)
                done = self.terminated(obs, action, next_obs)
            else:
                next_obs, reward, penalty, score = self.filtered_step(obs, action)
                done = self.terminated(obs, action, next_obs) | (score < recipe.terminal_reward)
                scores.append(score)
            reward = reward - recipe.penalty_coef * penalty
            self.imagined.add_rows(obs, action, reward, next_obs, done.float())
            rewards.append(reward)
            penalties.append(penalty)
            if done.all():
                break
            obs = next_obs[~done]
        reward, penalty = torch.cat(rewards), torch.cat(penalties)
        stats = {
            "rollout_transitions": float(len(reward)),
            "rollout_reward": reward.mean().item(),
            "rollout_penalty": penalty.mean().item(),
        }
        if scores:
            stats["rollout_dynamics_reward"] = torch.cat(scores).mean().item()
        return stats

    def filtered_step(self, obs: torch.Tensor, action: torch.Tensor):  # noqa: ANN201
        """MOREC's step: ``candidate_draws`` samples of every elite (clipped to
        +-``state_clip``), scored by the dynamics reward; the best ("max") or one drawn
        with probabilities softmax(10 r) ("softmax") answers each row. Returns (next_obs,
        reward, penalty, its dynamics reward)."""
        recipe = self.recipe
        samples, penalty = self.dynamics.candidates(
            obs, action, recipe.candidate_draws, recipe.state_clip, self.generator
        )
        count = len(samples)
        score = self.dynamics_reward(
            obs.expand(count, *obs.shape).reshape(-1, obs.shape[-1]),
            action.expand(count, *action.shape).reshape(-1, action.shape[-1]),
            samples[..., :-1].reshape(-1, obs.shape[-1]),
        ).view(count, len(obs))
        if recipe.select == "max":
            pick = score.argmax(0)
        else:  # the reference's Categorical(softmax(10 r)) per row
            probs = torch.softmax(10.0 * score, dim=0).T
            pick = torch.multinomial(probs, 1, generator=self.generator)[:, 0]
        rows = torch.arange(len(obs), device=samples.device)
        chosen = samples[pick, rows]
        return chosen[:, :-1], chosen[:, -1], penalty, score[pick, rows]

    def learn_reward(self) -> dict[str, float]:
        """Learn the dynamics reward on every dataset transition (MOREC;
        ``rlcore.dynamics_reward.learn_dynamics_reward``)."""
        assert self.dynamics_reward is not None
        data, recipe = self.dataset, self.recipe
        rows = torch.arange(len(data))
        settings = RewardLearning(iterations=recipe.reward_iterations,
                                  batch_size=recipe.reward_batch_size,
                                  snapshot_every=recipe.reward_snapshot_every)  # fmt: skip
        self.log(f"learning the dynamics reward ({settings.iterations:,} iterations)")
        return learn_dynamics_reward(
            self.dynamics_reward, data.observations(rows), data.action,
            data.observations(rows, next_obs=True), settings, self.generator, log=self.log,
        )  # fmt: skip

    def sample(self, batch_size: int) -> Batch:
        if not bool(self.dynamics.fitted):
            self.fit()
        if self.dynamics_reward is not None and not self.dynamics_reward.learned:
            self.learn_reward()
        if self.calls % self.recipe.rollout_freq == 0:
            rows = torch.randint(
                len(self.dataset), (self.recipe.rollout_batch,), generator=self.generator
            )
            self.last_rollout = stats = self.rollout(self.dataset.observations(rows))
            self.log(
                f"model rollout at batch {self.calls:,}: {stats['rollout_transitions']:,.0f} "
                f"transitions, reward {stats['rollout_reward']:.4g} (penalty "
                f"{stats['rollout_penalty']:.4g})"
            )
        self.calls += 1
        return self.mixed.sample(batch_size)

    def state_dict(self) -> dict:
        return {
            "calls": self.calls,
            "generator": self.generator.get_state(),
            "imagined": self.imagined.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.calls = state["calls"]
        self.generator.set_state(state["generator"])
        self.imagined.load_state_dict(state["imagined"])
