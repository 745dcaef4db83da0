"""FastTD3: TD3 with many parallel envs, large batches and a distributional critic.

Paper: Y. Seo, C. Sferrazza, H. Geng, M. Nauman, Z.-H. Yin, P. Abbeel, "FastTD3: Simple,
Fast, and Capable Reinforcement Learning for Humanoid Control", 2025 (arXiv:2505.22642).
Reference implementation: github.com/younggyoseo/FastTD3 (``fast_td3/fast_td3.py``,
``train.py``, ``hyperparams.py``); the defaults are its MuJoCo Playground ones
(``MuJoCoPlaygroundArgs``): 1,024 envs, batch 32,768, 2 updates per vector step, C51
critics with 101 atoms on [-10, 10], gamma 0.97, tau 0.1, AdamW (lr 3e-4, weight decay
0.1), target noise 0.001 clipped at 0.5, per-env exploration noise std drawn in
[0.001, 0.4], policy delay 2, observation normalisation.

What it does (after the reference):
* Twin C51 critics (``rlcore.nets.CategoricalQEnsemble``). The target: a' = pi(s') +
  clip(N(0, 0.001^2), +-0.5) (the *online* actor; FastTD3 keeps no target actor), each
  target critic's distribution at (s', a') projected onto the support after
  r + gamma (1 - terminated) z (``rlcore.losses.categorical_projection``); clipped double
  Q per transition: the projected distribution whose expected value is the smaller one is
  the target of *both* critics (ties: the second critic's, as the reference's
  ``torch.where(q1 < q2, ...)``). Loss: the sum of the critics' cross-entropies.
* Actor: maximise min(E[Z_1], E[Z_2]) at (s, pi(s)), every ``policy_frequency``-th
  update; the target critics follow by Polyak averaging (tau 0.1) after *every* update.
* Exploration: a = pi(s) + N(0, sigma_i^2) for sub-env i, sigma_i ~ U[std_min, std_max]
  drawn again whenever env i starts an episode (the loop says which envs ended through
  ``rlcore.capabilities.PerEnvState``).
* Updates per *vector* step (``Schedule.updates_per_vector_step``): more envs bring more
  data per update, not more updates; the warm-up (policy acting, no updates) is counted in
  vector steps too. Bootstrapping stops at terminations only (truncations bootstrap).

Sizes by device (``rlcore.capabilities.DeviceSized``): the dataclass defaults are the
reference's, for a GPU and 1,024+ envs. On a CPU they cost ~8-17 s per update (Walker2d,
16 native envs, one thread on 2 shared cores: ~0.5 env steps/s once updates start), so a
run with ``device=cpu`` takes ``CPU_SIZES`` for the sizes the command line leaves unset
(batch 1,024, 256x256 actor and critics, a 1M-transition buffer: the sizes of the CPU
wall-time table, ``benchmarks/walltime.py``), says so in one line and records them in its
config.yaml (the same run: ~105 env steps/s, 2,000 steps in 30 s). Any of them set
explicitly wins (``algo.batch_size=32768`` on a CPU runs the reference's batch). On a GPU
the command line runs the reference's sizes. Python code that builds ``FastTD3Config()``
itself gets the reference's sizes on any device (``device_sizes(device)`` lists a
device's).

Support per task family: the support [v_min, v_max] must cover the task's discounted
returns, at most max |r| / (1 - gamma). The defaults are the reference's for MuJoCo
Playground ([-10, 10] at gamma 0.97). Gymnasium's MuJoCo tasks, which the reference does
not run, take gamma 0.99 (its HumanoidBench default, ``BaseArgs`` in ``hyperparams.py``)
and +-max |r| / (1 - gamma) from each task's reward: ``configs/algo_env/fast_td3_<env>.yaml``
(Hopper +-500, Walker2d +-750, HalfCheetah +-2,000, ...; each file derives its bound).
A task without such a file (``env=gym env.id=...``, a user's env) keeps the Playground
defaults.

Departures (each a simplification or a choice of the shared core):
* Observation normalisation is the env-side running standardisation of rlcore
  (``EnvRecipe.normalize_obs``: eps 1e-8, observations clipped to +-10, transitions stored
  normalised with the statistics of their time). The reference normalises inside the
  agent (eps 1e-2 on the std, no clip), stores raw observations and normalises sampled
  batches with the current statistics, which it also updates with them.
* Replay: one buffer sampled uniformly over all rows; the reference draws
  ``batch_size / num_envs`` rows from each env's stream (same distribution in
  expectation). ``buffer_size`` counts transitions over all envs (reference: per env).
* Exploratory actions are clipped to the action box before they are stored (the
  reference stores the unclipped action and lets the env clip it).
* The policy delay counts updates over the whole run (actor after every 2nd critic
  update); the reference restarts the count every vector step (``i % 2 == 1``): the same
  for the default 2 (or any even number of) updates per vector step.
* On a CPU the command line trains with smaller sizes (``CPU_SIZES``, above); the
  reference's sizes are the same on every device. Gymnasium's MuJoCo tasks (not in the
  reference) take gamma 0.99 and a support fitted to their rewards (above).
* Not implemented: n-step returns (``num_steps``; 1 in the Playground defaults), the
  cosine learning-rate schedule (its default end rate equals the start rate: constant),
  reward normalisation (off in the Playground defaults), gradient-norm clipping (off),
  asymmetric (privileged) critic observations, SimbaV2 / SimNorm networks, bfloat16
  autocast and ``torch.compile`` (speed, not maths; float32 eager here).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlcore.agent_state import Plumbing, numpy_act
from rlcore.capabilities import DeviceSized, PerEnvState
from rlcore.losses import categorical_cross_entropy, categorical_projection, smoothed_target_action
from rlcore.nets import CategoricalQEnsemble, DeterministicActor, polyak_update
from rlcore.plan import EnvRecipe, RunPlan, Schedule
from rlcore.types import Batch
from rlcore.utils import frozen, step_summed

REFERENCE_ENVS = 1_024  # the Playground defaults' num_envs, for sizes counted over all envs
# The sizes a run on a CPU takes where the command line leaves them unset: those of the CPU
# wall-time table (benchmarks/walltime.py, benchmarks/README.md). Walker2d, 16 native
# envs, one thread on 2 shared cores: ~105 env steps/s, against ~0.5 with the reference's.
CPU_SIZES: dict[str, Any] = {
    "batch_size": 1_024,
    "actor_hidden": (256, 256),
    "critic_hidden": (256, 256),
    "buffer_size": 1_000_000,  # a 10M-row buffer costs GBs of RAM that a CPU run never fills
}


@dataclass
class FastTD3Config:
    """FastTD3 hyper-parameters (the reference's MuJoCo Playground defaults, sized for a
    GPU; ``device_sizes`` gives a CPU's)."""

    CAPABILITIES = (DeviceSized,)  # not a field: no annotation

    gamma: float = 0.97  # discount
    tau: float = 0.1  # Polyak rate of the target critics (every update)
    actor_lr: float = 3e-4  # AdamW learning rate of the policy
    critic_lr: float = 3e-4  # AdamW learning rate of the critics
    weight_decay: float = 0.1  # AdamW weight decay (actor and critics)
    actor_hidden: tuple[int, ...] = (512, 256, 128)  # policy widths
    critic_hidden: tuple[int, ...] = (1024, 512, 256)  # critic widths
    num_critics: int = 2  # C51 critics; clipped double Q picks the lower one
    num_atoms: int = 101  # atoms of the categorical return distribution
    v_min: float = -10.0  # lowest atom of the support
    v_max: float = 10.0  # highest atom of the support
    use_cdq: bool = True  # clipped double Q (False: each critic its own target, mean Q)
    policy_noise: float = 0.001  # std of target-policy smoothing noise (x action scale)
    noise_clip: float = 0.5  # clip of the smoothing noise (x action scale)
    std_min: float = 0.001  # lowest per-env exploration noise std (x action scale)
    std_max: float = 0.4  # highest per-env exploration noise std (x action scale)
    init_scale: float = 0.01  # std of the policy's output-layer weights at init
    policy_frequency: int = 2  # critic updates per actor update
    fused_optimizer: bool = True  # fused AdamW kernel (same maths, faster)
    # the run's schedule: declared by plan() below (rlcore.plan.RunPlan), run by rlcore.build
    batch_size: int = 32_768  # transitions per update (all envs together)
    buffer_size: int = 10_240 * REFERENCE_ENVS  # replay capacity, transitions over all envs
    updates_per_vector_step: float = 2.0  # gradient updates after every vector step
    # vector steps with the policy acting and no updates (the reference's learning_starts=10:
    # it updates once its step counter exceeds 10, i.e. from the 12th vector step)
    warmup_vector_steps: int = 11
    normalize_obs: bool = True  # running observation standardisation
    total_steps: int = 150_000 * REFERENCE_ENVS  # default training length in env steps

    def __post_init__(self) -> None:
        if not self.v_min < self.v_max:
            raise ValueError(
                f"v_min={self.v_min} must be below v_max={self.v_max} (the critics' support)"
            )
        if self.num_atoms < 2:
            raise ValueError(f"num_atoms={self.num_atoms} must be >= 2")
        if not 0.0 <= self.std_min <= self.std_max:
            raise ValueError(f"need 0 <= std_min ({self.std_min}) <= std_max ({self.std_max})")

    def device_sizes(self, device: torch.device) -> dict[str, Any]:
        """The sizes a run on ``device`` takes where they are unset: ``CPU_SIZES`` on a CPU,
        the dataclass defaults (the reference's, for a GPU) elsewhere."""
        if device.type == "cpu":
            return dict(CPU_SIZES)
        return {f.name: f.default for f in fields(self) if f.name in CPU_SIZES}

    def plan(self) -> RunPlan:
        """Online from scratch: a policy-acting warm-up of ``warmup_vector_steps`` vector
        steps, then ``updates_per_vector_step`` updates per vector step."""
        schedule = Schedule(
            online_steps=self.total_steps, batch_size=self.batch_size,
            buffer_size=self.buffer_size, warmup_vector_steps=self.warmup_vector_steps,
            updates_per_vector_step=self.updates_per_vector_step,
        )  # fmt: skip
        return RunPlan(schedule, EnvRecipe(normalize_obs=self.normalize_obs), gamma=self.gamma)


def adamw(
    params: list[torch.nn.Parameter], lr: float, weight_decay: float, fused: bool
) -> torch.optim.AdamW:
    """AdamW (decoupled weight decay), fused single-kernel step when requested."""
    kwargs = {"fused": True} if fused else {"foreach": True}
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, **kwargs)


class FastTD3:
    """FastTD3 agent: ``act``, ``update(batch)``, ``episodes_started(mask)`` (per-env
    exploration noise), ``state_dict`` / ``load_state_dict``."""

    CAPABILITIES = (PerEnvState,)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: FastTD3Config | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.config = config = config or FastTD3Config()
        self.plumbing = io = Plumbing(observation_space, action_space, device, "FastTD3")
        self.device = io.device
        self.actor = DeterministicActor(
            io.obs_dim, io.action_dim, io.low, io.high, config.actor_hidden
        )
        output = self.actor.net[self.actor.net.output_index]
        torch.nn.init.normal_(output.weight, 0.0, config.init_scale)
        torch.nn.init.zeros_(output.bias)
        self.critic = CategoricalQEnsemble(
            io.obs_dim, io.action_dim, config.num_critics, config.critic_hidden, config.num_atoms,
            config.v_min, config.v_max,
        )  # fmt: skip
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optimizer = adamw(
            list(self.actor.parameters()), config.actor_lr, config.weight_decay,
            config.fused_optimizer,
        )  # fmt: skip
        self.critic_optimizer = adamw(
            list(self.critic.parameters()), config.critic_lr, config.weight_decay,
            config.fused_optimizer,
        )  # fmt: skip
        self._critic_params = list(self.critic.parameters())
        self.low, self.high = io.bounds()
        self.parts = io.declare(
            counters={"updates": int, "noise_scales": torch.Tensor}, actor=self.actor,
            critic=self.critic, target_critic=self.target_critic,
            actor_optimizer=self.actor_optimizer, critic_optimizer=self.critic_optimizer,
        )  # fmt: skip
        # exploration noise std of each training sub-env, (num_envs, 1); sized by the
        # first ``episodes_started`` (the loop's all-True mask when it resets the envs)
        self.noise_scales = torch.zeros(0, 1, device=self.device)
        self.updates = 0

    def episodes_started(self, mask: np.ndarray | torch.Tensor) -> None:
        """Draw a new exploration noise std in [std_min, std_max] for every sub-env whose
        episode starts (``mask`` True); a mask of another length (a fresh set of envs)
        must be all True and sizes the table."""
        started = torch.as_tensor(mask, device=self.device).bool().reshape(-1, 1)
        if started.shape[0] != self.noise_scales.shape[0]:
            if not bool(started.all()):
                raise ValueError(
                    f"episodes_started: a mask for {started.shape[0]} envs, but the noise "
                    f"table holds {self.noise_scales.shape[0]}; a new set of envs starts "
                    "with all True"
                )
            self.noise_scales = torch.zeros(started.shape[0], 1, device=self.device)
        cfg = self.config
        fresh = torch.rand(started.shape[0], 1, device=self.device)
        fresh = fresh * (cfg.std_max - cfg.std_min) + cfg.std_min
        self.noise_scales = torch.where(started, fresh, self.noise_scales)

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """pi(s), plus each sub-env's Gaussian exploration noise unless deterministic
        (then clipped to the action box). Exploring needs one observation per training
        sub-env, in the order ``episodes_started`` was told about them."""
        action = self.actor(obs)
        if deterministic:
            return action
        if obs.shape[0] != self.noise_scales.shape[0]:
            raise ValueError(
                f"FastTD3.act: {obs.shape[0]} observations but noise scales for "
                f"{self.noise_scales.shape[0]} envs; call episodes_started(all True) with "
                "the training envs first (the loop does)"
            )
        noise = torch.randn_like(action) * self.noise_scales * self.actor.to_env.scale
        return torch.clamp(action + noise, self.low, self.high)

    def target_distribution(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(target probabilities (1 or E, B, A), the first target critic's projected
        values (B,)) without gradients: smoothed a' from the online actor, every target
        critic's distribution projected after r + gamma (1 - terminated) z, then (clipped
        double Q) per row the projection with the lowest expected value, for all critics."""
        cfg = self.config
        with torch.no_grad():
            next_action = smoothed_target_action(
                self.actor(batch.next_obs), self.actor.to_env.scale, self.low, self.high,
                cfg.policy_noise, cfg.noise_clip,
            )  # fmt: skip
            probs = torch.softmax(self.target_critic(batch.next_obs, next_action), dim=-1)
            discount = cfg.gamma * (1.0 - batch.terminated)
            support = self.target_critic.support
            projected = categorical_projection(probs, batch.reward, discount, support)
            values = self.target_critic.value(projected)  # (E, B)
            if not cfg.use_cdq:
                return projected, values[0]
            # the lowest value; on a tie the later critic (the reference's q1 < q2 test)
            last = values.shape[0] - 1
            pick = last - values.flip(0).argmin(0)
            index = pick.view(1, -1, 1).expand(1, *projected.shape[1:])
            return projected.gather(0, index), values[0]

    def actor_loss(self, obs: torch.Tensor) -> torch.Tensor:
        """-mean over the batch of min_i E[Z_i(s, pi(s))] (mean over critics without
        clipped double Q)."""
        probs = torch.softmax(self.critic(obs, self.actor(obs)), dim=-1)
        q = self.critic.value(probs)
        q = q.min(0).values if self.config.use_cdq else q.mean(0)
        return -q.mean()

    def update(self, batch: Batch) -> dict[str, float]:
        """One critic update (cross-entropy to the projected target), the actor every
        ``policy_frequency`` updates, then the Polyak step of the target critics."""
        cfg = self.config
        target, target_values = self.target_distribution(batch)
        critic_loss = categorical_cross_entropy(self.critic(batch.obs, batch.action), target)
        step_summed({"critic_loss": critic_loss}, [self.critic_optimizer])
        self.updates += 1
        metrics = {"critic_loss": critic_loss.item(), "q": target_values.mean().item()}
        if self.updates % cfg.policy_frequency == 0:
            with frozen(self._critic_params):  # gradients flow through Q to actions only
                actor_loss = self.actor_loss(batch.obs)
                step_summed({"actor_loss": actor_loss}, [self.actor_optimizer])
            metrics["actor_loss"] = actor_loss.item()
        polyak_update(self.target_critic, self.critic, cfg.tau)
        return metrics

    def state_dict(self) -> dict:
        """Networks, target critics, optimisers, update counter and the per-env noise."""
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
