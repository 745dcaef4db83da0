"""Corrupted offline datasets: RIQL's protocol of random and adversarial corruption of
observations, actions, rewards and dynamics (next observations).

Paper: R. Yang, H. Zhong, J. Xu, A. Zhang, C. Zhang, L. Han, T. Zhang, "Towards Robust
Offline Reinforcement Learning under Diverse Data Corruption", ICLR 2024. Reference:
github.com/YangRui2015/RIQL @ cc07d81 (``attack.py`` unchanged since 4af90a3): ``Attack``,
``attack_dataset``.

``corrupt(dataset, Corruption(kind, mode, rate, scale, seed), critic=...)`` changes a
``rate`` fraction of the rows in place, as the reference does:

* rows: each row is corrupted when a uniform draw (numpy ``RandomState(seed)``) is below
  ``rate`` (``sample_indexs``);
* random, ``obs`` / ``action`` / ``dynamics``: x + U(-scale, scale) * std, the std of each
  column over the whole dataset (population std, before the change; ``corrupt_obs``);
* random, ``reward``: replaced by U(-scale, scale) * 30 (``corrupt_rew``);
* adversarial, ``reward``: r * -scale;
* adversarial, ``obs`` / ``action`` / ``dynamics``: a gradient attack on a critic trained
  on the clean data (``critic``: an agent implementing ``rlcore.capabilities.ActionValue``:
  an IQL, RIQL, CQL, Cal-QL, TD3+BC, ReBRAC or AWAC run): the perturbation p starts at 2 scale std (u - 1/2), u ~ U(0, 1)
  (``torch.Generator`` seeded with ``seed``), then 100 times a fresh Adam step of lr 0.01
  scale lowers the mean Q of (s + p std, a) (actions: (s, a + p std); dynamics: (s' + p
  std, pi(s' + p std))), clamping p to [-scale, scale]; the row gets x + p std. The rows
  are attacked in 10 splits (``split_gradient_attack``).

Every corruption applied is recorded in ``dataset.corruption`` (kind, mode, rate, scale,
seed, rows changed), so a run says what it trained on (``rlcore.train`` logs it and writes
it to the run's meta.json).

A dataset of dict observations (a goal task) is attacked through its flat columns as they
are laid out: ``rlcore.train`` lays them out in the agent's part order first
(``OfflineDataset.arrange_parts``), as the attacked critic reads them; in Python, do the same
before ``corrupt``.

Departures from the reference: the adversarial critic is whichever agent the user names
(the reference loads an EDAC ensemble of 10 critics and averages them; an ``ActionValue``
agent averages its own critics); each corruption draws its own rows from its own seed (the
reference's ``resample_indexs=True`` draws again from one generator shared by the kinds
applied in one run); an ``OfflineDataset`` keeps the rows of every episode, so corrupting
``obs`` leaves the previous row's ``next_obs`` as recorded (as the reference's separate
``next_observations`` array does).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlcore.capabilities import ActionValue, require

KINDS = ("obs", "action", "reward", "dynamics")
MODES = ("random", "adversarial")
RANDOM_REWARD_SCALE = 30.0  # the reference's U(-scale, scale) * 30 (attack.py corrupt_rew)
ATTACK_STEPS = 100  # Adam steps of the gradient attack (Attack.update_times)
ATTACK_STEP_SIZE = 0.01  # its learning rate per unit of scale (Attack.step_size)
ATTACK_SPLITS = 10  # rows attacked in this many pieces (split_gradient_attack)


@dataclass(frozen=True)
class Corruption:
    """One corruption of a dataset (the module docstring): what, how, how much."""

    kind: str  # obs | action | reward | dynamics (next observations)
    mode: str = "random"  # random | adversarial
    rate: float = 0.3  # fraction of rows (RIQL's default)
    scale: float = 1.0  # RIQL's corruption_range
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"corruption kind {self.kind!r}: choose from {KINDS}")
        if self.mode not in MODES:
            raise ValueError(f"corruption mode {self.mode!r}: choose from {MODES}")
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"corruption rate {self.rate} must be in [0, 1]")
        if self.scale < 0:
            raise ValueError(f"corruption scale {self.scale} must be >= 0")
        if self.seed < 0:
            raise ValueError(f"corruption seed {self.seed} must be >= 0")

    @property
    def needs_critic(self) -> bool:
        """An adversarial attack on observations, actions or dynamics needs a critic."""
        return self.mode == "adversarial" and self.kind != "reward"


FIELD = {"obs": "obs", "action": "action", "reward": "reward", "dynamics": "next_obs"}


def corrupt(dataset: Any, corruption: Corruption, critic: Any = None) -> torch.Tensor:
    """Corrupt ``dataset`` (an ``rlcore.offline.datasets.OfflineDataset``) in place as
    ``corruption`` says; returns the indices of the rows changed. ``critic``: an agent
    implementing ``ActionValue`` (adversarial attacks on obs / action / dynamics)."""
    if dataset.image_parts and (corruption.kind in ("obs", "dynamics") or corruption.needs_critic):
        raise ValueError(
            f"{dataset.source} observes images ({', '.join(dataset.image_parts)}): a "
            f"{corruption.mode} {corruption.kind} corruption changes vector observations or "
            "attacks a vector critic; on images, corrupt rewards or random actions"
        )
    if corruption.needs_critic:
        if critic is None:
            raise ValueError(
                f"an adversarial {corruption.kind} corruption attacks a critic trained on the "
                "clean data: pass critic= (an agent with action_value, e.g. an IQL run)"
            )
        require(critic, ActionValue, "an adversarial corruption needs")
        check_critic_fits(dataset, critic)
    rng = np.random.RandomState(corruption.seed)
    rows = np.flatnonzero(rng.random_sample(len(dataset)) < corruption.rate)
    index = torch.as_tensor(rows, dtype=torch.int64)
    values = getattr(dataset, FIELD[corruption.kind])
    original = values[index].double().numpy()
    scale = corruption.scale
    if corruption.kind == "reward":
        if corruption.mode == "random":
            changed = rng.uniform(-scale, scale, size=original.shape) * RANDOM_REWARD_SCALE
        else:
            changed = original * -scale
    else:
        std = values.double().numpy().std(axis=0, keepdims=True)
        if corruption.mode == "random":
            changed = original + rng.uniform(-scale, scale, size=original.shape) * std
        else:
            changed = gradient_attack(dataset, corruption, critic, index, std)
    values[index] = torch.as_tensor(changed, dtype=values.dtype)
    record = {**dataclasses.asdict(corruption), "rows": len(rows)}
    dataset.corruption = [*dataset.corruption, record]
    return index


def check_critic_fits(dataset: Any, critic: ActionValue) -> None:
    """Stop with a clear error when ``critic`` cannot read ``dataset``'s rows (a critic
    trained on another task), before the attack fails deep in its network."""
    obs, action = dataset.obs[:1].float(), dataset.action[:1].float()
    try:
        with torch.no_grad():
            critic.action_value(obs, action)
            critic.action_value(obs, critic.policy_action(obs))
    except RuntimeError as error:
        raise ValueError(
            f"the attacked critic cannot read {dataset.source}'s rows (observations of "
            f"{obs.shape[1]}, actions of {action.shape[1]}): {str(error).splitlines()[0]}; "
            "attack with a critic trained on this dataset's task"
        ) from None


def gradient_attack(
    dataset: Any, corruption: Corruption, critic: ActionValue, index: torch.Tensor,
    std: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """The reference's ``split_gradient_attack``: perturbations that lower the critic's
    mean Q, ``ATTACK_STEPS`` fresh Adam steps each, clamped to +-scale (in stds)."""
    scale, kind = corruption.scale, corruption.kind
    generator = torch.Generator().manual_seed(corruption.seed)
    std_t = torch.as_tensor(std, dtype=torch.float32)
    obs = (dataset.next_obs if kind == "dynamics" else dataset.obs)[index].float()
    action = dataset.action[index].float()
    target = action if kind == "action" else obs
    out = torch.empty_like(target)
    count = len(index)
    pointer = 0
    for split in range(ATTACK_SPLITS):
        number = count // ATTACK_SPLITS if split < ATTACK_SPLITS - 1 else count - pointer
        rows = slice(pointer, pointer + number)
        # the reference's initial draw is in stds already, and is multiplied by std again
        # in the loss (attack.py sample_para + loss_Q_for_*): kept
        para = 2 * scale * std_t * (torch.rand(target[rows].shape, generator=generator) - 0.5)
        for _ in range(ATTACK_STEPS):
            para = torch.nn.Parameter(para.clone())
            optimizer = torch.optim.Adam([para], lr=ATTACK_STEP_SIZE * scale)
            noised = target[rows] + para * std_t
            if kind == "action":
                q = critic.action_value(obs[rows], noised)
            elif kind == "obs":
                q = critic.action_value(noised, action[rows])
            else:  # dynamics: the next state's value under the policy
                q = critic.action_value(noised, critic.policy_action(noised))
            optimizer.zero_grad()
            q.mean().backward()
            optimizer.step()
            para = para.detach().clamp(-scale, scale)
        out[rows] = target[rows] + para * std_t
        pointer += number
    return out.double().numpy()
