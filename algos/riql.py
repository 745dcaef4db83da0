"""Robust IQL (RIQL): IQL made robust to corrupted offline data.

Paper: R. Yang, H. Zhong, J. Xu, A. Zhang, C. Zhang, L. Han, T. Zhang, "Towards Robust
Offline Reinforcement Learning under Diverse Data Corruption", ICLR 2024. Reference:
github.com/YangRui2015/RIQL @ cc07d81 (its update, attack.py and RIQL_config.py unchanged
since 4af90a3), ``RIQL.py`` (CORL's IQL with RIQL's three changes) and ``RIQL_config.py``
(per-task settings). Corrupted datasets: ``corruption.*``
(``rlcore.offline.corruption``, the reference's ``attack.py``).

RIQL's three changes to IQL, each against a kind of corruption:

1. observation normalisation with the mean and std of the observations and next
   observations together (``RIQL.py`` ``compute_mean_std`` on both; eps 1e-3);
2. a Huber loss for the Q ensemble, L_delta(r + gamma V(s') - Q(s, a)) with
   delta = 1 / sigma^2 (``huber_loss``), on targets clipped to [-100, 1000];
3. the value's target is a quantile (``quantile``, 0.25) over an ensemble of
   ``num_critics`` (5) target critics (``torch.quantile``, linear interpolation), not
   their minimum.

The rest is IQL as the reference runs it: expectile 0.7, beta 3, advantage weights
clamped at 100, a deterministic tanh actor regressed by exp(beta A) ||pi(s) - a||^2
(``DeterministicPolicy``), Adam at 3e-4 for all three networks, the actor's lr cosine to 0
over the run, Polyak 0.005, 256 x 256 networks, batch 256, critics with EDAC's
initialisation (hidden biases 0.1, output layer U(+-3e-3)). One update, in order: V(s')
for the Q target; V by expectile regression toward the target critics' quantile; Q; Polyak;
the actor on the advantage computed before V's step. The paper's per-task settings
(``RIQL_config.py``: sigma in {0.1, 0.5, 1, 3}, quantile in {0.1, 0.25, 0.5}, 3 or 5
critics, per corruption kind and task) are ``algo.huber_sigma``, ``algo.quantile``,
``algo.num_critics``.

Parity (benchmarks/parity/riql_reference.py, tests/golden/riql.json): the reference's
``ImplicitQLearning`` on the same weights and batches, 50 updates, two settings: losses
1.8e-7, every parameter 3.0e-7 (docs/PARITY.md).

Departures from the reference: the observation statistics use torch's unbiased std (ddof 1; the reference's numpy std has
ddof 0, 5e-7 relative on 1M rows, as ``rlcore.nets.ObsNormalizer`` notes); the critics
are one batched ensemble (the reference's ``VectorizedQ`` too).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import gymnasium as gym
import torch
import torch.nn.functional as F

from rlcore.agent_state import Plumbing, numpy_act
from rlcore.capabilities import ActionValue, DatasetUser
from rlcore.losses import cosine_lr, expectile_loss, set_lr
from rlcore.nets import MLP, DeterministicActor, ObsNormalizer, QEnsemble, edac_init, polyak_update
from rlcore.plan import DataRecipe, RunPlan, Schedule
from rlcore.types import Batch
from rlcore.utils import adam, step_summed


@dataclass
class RIQLConfig:
    """RIQL hyper-parameters (the reference's ``TrainConfig`` defaults)."""

    gamma: float = 0.99  # discount
    tau: float = 0.005  # Polyak rate of the target critics
    actor_lr: float = 3e-4  # cosine to 0 over total_steps
    critic_lr: float = 3e-4
    value_lr: float = 3e-4
    hidden: tuple[int, ...] = (256, 256)
    beta: float = 3.0  # inverse temperature of the advantage weights
    expectile: float = 0.7  # the value's expectile
    max_weight: float = 100.0  # clamp of exp(beta * advantage)
    num_critics: int = 5  # the Q ensemble (RIQL_config: 3 or 5 per task)
    quantile: float = 0.25  # the value target's quantile over the target critics
    huber_sigma: float = 1.0  # Huber threshold delta = 1 / sigma^2 (RIQL_config: 0.1 .. 3)
    target_min: float = -100.0  # the Q targets clipped to [target_min, target_max]
    target_max: float = 1000.0
    normalize_states: bool = True  # standardise with the mean / std of obs and next obs
    normalize_reward_by_returns: bool = False  # r * 1000 / (max - min dataset episode return)
    fused_optimizer: bool = True  # fused Adam kernel (same maths, faster)
    batch_size: int = 256  # transitions per gradient step
    total_steps: int = 1_000_000  # gradient steps (the reference: 3,000 epochs of 1,000)

    def __post_init__(self) -> None:
        if not 0.0 <= self.quantile <= 1.0:
            raise ValueError(f"quantile={self.quantile} must be in [0, 1]")
        if self.num_critics < 1 or self.huber_sigma <= 0:
            raise ValueError("num_critics must be >= 1 and huber_sigma > 0")

    def plan(self) -> RunPlan:
        """Offline gradient steps only (the statistics are fitted in ``prepare_dataset``)."""
        data = DataRecipe(normalize_reward_by_returns=self.normalize_reward_by_returns,
                          required=True)  # fmt: skip
        schedule = Schedule(offline_steps=self.total_steps, batch_size=self.batch_size)
        return RunPlan(schedule, data=data, gamma=self.gamma)


class RIQL:
    """RIQL agent: ``act``, ``update(batch)``, ``prepare_dataset``, ``state_dict``."""

    CAPABILITIES = (DatasetUser, ActionValue)

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: RIQLConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.config = config = config or RIQLConfig()
        self.plumbing = io = Plumbing(observation_space, action_space, device, "RIQL")
        self.device = io.device
        self.obs_normalizer = ObsNormalizer(io.obs_dim)
        self.actor = DeterministicActor(io.obs_dim, io.action_dim, io.low, io.high, config.hidden)
        self.critic = QEnsemble(io.obs_dim, io.action_dim, config.num_critics, config.hidden)
        edac_init(self.critic.net, output_bound=3e-3)  # VectorizedQ's EDAC initialisation
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.value = MLP(io.obs_dim, 1, config.hidden)
        fused = config.fused_optimizer
        self.actor_optimizer = adam(self.actor.parameters(), config.actor_lr, fused)
        self.critic_optimizer = adam(self.critic.parameters(), config.critic_lr, fused)
        self.value_optimizer = adam(self.value.parameters(), config.value_lr, fused)
        self.parts = io.declare(
            counters={"updates": int}, obs_normalizer=self.obs_normalizer, actor=self.actor,
            critic=self.critic, target_critic=self.target_critic, value=self.value,
            actor_optimizer=self.actor_optimizer, critic_optimizer=self.critic_optimizer,
            value_optimizer=self.value_optimizer,
        )  # fmt: skip
        self.updates = 0

    def prepare_dataset(self, dataset) -> None:  # noqa: ANN001 (rlcore.offline.datasets.OfflineDataset)
        """RIQL's statistics: mean and std of the observations and next observations."""
        if self.config.normalize_states:
            both = torch.cat([dataset.obs, dataset.next_obs]).to(self.device)
            self.obs_normalizer.fit(both)

    @numpy_act
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """pi(s) for raw observation(s) (deterministic: ``deterministic`` is ignored)."""
        return self.actor(self.obs_normalizer(obs))

    def action_value(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Mean of the critics' Q(s, a) for raw observations (an adversarial corruption
        attacks it: rlcore.offline.corruption)."""
        return self.critic(self.obs_normalizer(obs), action).mean(0)

    def policy_action(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(self.obs_normalizer(obs))

    def update(self, batch: Batch) -> dict[str, float]:
        """One step of V (quantile target), Q (Huber), Polyak and the actor (module
        docstring), every loss from the parameters before the update."""
        cfg = self.config
        obs, next_obs = self.obs_normalizer(batch.obs), self.obs_normalizer(batch.next_obs)
        with torch.no_grad():
            next_v = self.value(next_obs).squeeze(-1)
            target_q = torch.quantile(self.target_critic(obs, batch.action), cfg.quantile, dim=0)
        v = self.value(obs).squeeze(-1)
        advantage = target_q - v
        value_loss = expectile_loss(advantage, cfg.expectile)
        targets = batch.reward + (1.0 - batch.terminated) * cfg.gamma * next_v
        targets = targets.clamp(cfg.target_min, cfg.target_max)
        q = self.critic(obs, batch.action)
        critic_loss = F.smooth_l1_loss(
            q, targets.expand_as(q), beta=1.0 / cfg.huber_sigma**2, reduction="mean"
        )
        weights = torch.exp(cfg.beta * advantage.detach()).clamp(max=cfg.max_weight)
        bc = (self.actor(obs) - batch.action).pow(2).sum(-1)
        actor_loss = (weights * bc).mean()
        set_lr(self.actor_optimizer, cosine_lr(cfg.actor_lr, self.updates, cfg.total_steps))
        step_summed(
            {"value_loss": value_loss, "critic_loss": critic_loss, "actor_loss": actor_loss},
            [self.value_optimizer, self.critic_optimizer, self.actor_optimizer],
        )
        polyak_update(self.target_critic, self.critic, cfg.tau)
        self.updates += 1
        return {
            "value_loss": value_loss.item(), "critic_loss": critic_loss.item(),
            "actor_loss": actor_loss.item(), "q": q.detach().mean().item(),
            "v": v.detach().mean().item(), "advantage": advantage.detach().mean().item(),
        }  # fmt: skip

    def state_dict(self) -> dict:
        return self.plumbing.state_dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.plumbing.load_state_dict(self, state)
